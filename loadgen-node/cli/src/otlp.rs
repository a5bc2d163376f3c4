//! `loadgen-node --otlp ENDPOINT`: OpenTelemetry traces of a run.
//!
//! ```text
//! loadgen-node.run                      the whole run (connecting included)
//! ├── loadgen-node.session              one per connection to a node, to the run's end
//! └── loadgen-node.series               one per series (accuracy, performance)
//!     └── qdl.sample                    a traced sample: issued -> answer handed to the LoadGen
//!         └── sut-node.sample           ... continued by its node (see sut-node's otlp.rs)
//! ```
//!
//! Run, session and series spans are `tracing` spans exported through
//! `tracing-opentelemetry`; sample spans are the QDL's (`qdl::spans`), for
//! about `--otlp-sample-ratio` of the samples. The exporter is started once
//! per process and flushed at the end of each run, when what became of the
//! spans is printed.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use anyhow::{Context as _, Result};
use loadgen_engine::live::LiveStats;
use qdl::{Qdl, QdlView};
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The process's exporter, started by the first run with `--otlp`.
static EXPORTER: OnceLock<otlp::Otlp> = OnceLock::new();

fn exporter(endpoint: &str) -> Result<&'static otlp::Otlp> {
    if let Some(e) = EXPORTER.get() {
        return Ok(e);
    }
    let started = otlp::Otlp::start(otlp::Settings::new(endpoint, "loadgen-node"))?;
    let e = EXPORTER.get_or_init(|| started);
    use tracing_subscriber::prelude::*;
    // Only the spans of target `otlp` are enabled: the rest of the
    // process's `tracing` calls stay as cheap as without a subscriber.
    tracing_subscriber::registry()
        .with(e.layer())
        .try_init()
        .context("--otlp: a tracing subscriber is installed already")?;
    Ok(e)
}

/// The spans of one run.
pub(crate) struct RunTrace {
    otlp: &'static otlp::Otlp,
    ratio: f64,
    run: tracing::Span,
    series: Arc<Mutex<Option<tracing::Span>>>,
    sessions: Vec<tracing::Span>,
}

impl RunTrace {
    /// The run's span, exported to `endpoint`, with the run's flags as its
    /// attributes; `ratio` of the samples are traced.
    pub(crate) fn start(
        endpoint: &str,
        ratio: f64,
        model: &str,
        scenario: &str,
        sut: &str,
    ) -> Result<RunTrace> {
        let otlp = exporter(endpoint)?;
        let run =
            tracing::info_span!(target: otlp::TARGET, "loadgen-node.run", model, scenario, sut);
        Ok(RunTrace {
            otlp,
            ratio,
            run,
            series: Arc::new(Mutex::new(None)),
            sessions: Vec::new(),
        })
    }

    /// A span per series (from `live`'s series starts), the parent of the
    /// traced samples of `qdl` issued during it. Without `live` (the
    /// official LoadGen does not say when its series start), the samples'
    /// parent is the run.
    pub(crate) fn follow(&mut self, live: Option<&LiveStats>, qdl: Option<&Qdl>) {
        let parent = qdl
            .filter(|_| self.ratio > 0.0)
            .map(|q| q.trace_samples(self.ratio).parent());
        if let Some(p) = &parent {
            p.set(self.run.context());
        }
        if let Some(q) = qdl {
            self.sessions = sessions(&self.run, &q.view());
        }
        let Some(live) = live else {
            return;
        };
        let run = self.run.id();
        let current = Arc::clone(&self.series);
        let count = std::sync::atomic::AtomicU64::new(0);
        live.on_series_start(move |performance| {
            let mut current = current.lock().unwrap_or_else(PoisonError::into_inner);
            // The previous series ends here.
            *current = None;
            let n = count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let kind = if performance {
                "performance"
            } else {
                "accuracy"
            };
            let span = tracing::info_span!(target: otlp::TARGET, parent: run.clone(), "loadgen-node.series", series = n, kind);
            if let Some(p) = &parent {
                p.set(span.context());
            }
            *current = Some(span);
        });
    }

    /// Ends the run's spans (with each session's traffic), flushes them and
    /// says on stderr what became of them.
    pub(crate) fn finish(self, qdl: Option<&QdlView>) {
        let RunTrace {
            otlp,
            run,
            series,
            sessions,
            ..
        } = self;
        if let Some(view) = qdl {
            for (span, c) in sessions.iter().zip(view.stats().connections) {
                span.record("samples_sent", c.counters.samples_sent);
                span.record("answers_received", c.counters.answers_received);
                span.record("bytes_sent", c.counters.bytes_sent);
                span.record("bytes_received", c.counters.bytes_received);
            }
        }
        drop(sessions);
        drop(series.lock().unwrap_or_else(PoisonError::into_inner).take());
        drop(run);
        let summary = otlp.flush();
        if summary.complete() {
            eprintln!("loadgen-node: {summary}");
        } else {
            eprintln!("loadgen-node: warning: {summary}");
        }
    }
}

/// A span per connection, children of `run`.
fn sessions(run: &tracing::Span, view: &QdlView) -> Vec<tracing::Span> {
    view.stats()
        .connections
        .iter()
        .map(|c| {
            tracing::info_span!(
                target: otlp::TARGET,
                parent: run,
                "loadgen-node.session",
                node = %c.node,
                node_name = c.node_name.as_str(),
                connection = c.connection,
                samples_sent = Empty,
                answers_received = Empty,
                bytes_sent = Empty,
                bytes_received = Empty,
            )
        })
        .collect()
}
