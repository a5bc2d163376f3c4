//! OpenTelemetry traces for `sut-node serve --otlp` and `loadgen-node
//! --otlp`: spans exported over OTLP/gRPC without ever slowing the thread
//! that ends them, and the W3C `traceparent` text a sample carries to its
//! node.
//!
//! Ending a span costs one `try_send` on a bounded queue; a full queue drops
//! the span and counts it. One exporter thread of its own (with a
//! single-threaded tokio runtime for the OTLP client) takes spans off the
//! queue in batches and sends them. [`Otlp::shutdown`] flushes what is
//! queued within a time limit and says what was exported, dropped and lost.
//!
//! Spans come from two places: `tracing` spans of target [`TARGET`] (run,
//! series, sessions: through `tracing-opentelemetry`, see [`Otlp::layer`]),
//! and the per-sample spans made with the OpenTelemetry API on the global
//! tracer provider, which [`Otlp::start`] installs.

#![warn(missing_docs)]

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{
    SdkTracer, SdkTracerProvider, Span, SpanData, SpanExporter, SpanProcessor,
};
use opentelemetry_sdk::Resource;
use thiserror::Error;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// The `tracing` target of the spans that are exported (run, series,
/// sessions); other spans and events never reach OpenTelemetry.
pub const TARGET: &str = "otlp";

/// Spans waiting for the exporter; when full, new spans are dropped and
/// counted.
pub(crate) const DEFAULT_QUEUE: usize = 8192;
/// Most spans sent in one export request.
const MAX_BATCH: usize = 512;
/// How long a span may wait for a batch to fill before it is sent.
const BATCH_DELAY: Duration = Duration::from_millis(500);
/// The limit on one export request (connection included).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);

/// Why the exporter could not start.
#[derive(Debug, Error)]
pub enum OtlpError {
    /// The OTLP client refused the collector's address.
    #[error("--otlp {endpoint}: {reason}")]
    Endpoint {
        /// The address as given.
        endpoint: String,
        /// What the client said of it.
        reason: String,
    },
    /// The exporter thread could not be spawned.
    #[error("cannot start the OTLP exporter thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// How to export.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The collector's OTLP/gRPC address, e.g. `http://127.0.0.1:4317`.
    pub endpoint: String,
    /// `service.name` of every span's resource.
    pub service: String,
    /// More resource attributes (e.g. the node's name).
    pub attributes: Vec<(String, String)>,
    /// Spans waiting for export at most (8192 from [`Settings::new`]); when
    /// the queue is full, new spans are dropped and counted.
    pub queue: usize,
}

impl Settings {
    /// Export to `endpoint` as service `service`, with no more attributes
    /// and a queue of 8192 spans.
    pub fn new(endpoint: &str, service: &str) -> Self {
        Self {
            endpoint: endpoint.to_string(),
            service: service.to_string(),
            attributes: Vec::new(),
            queue: DEFAULT_QUEUE,
        }
    }
}

/// What became of the spans, counted as they go.
#[derive(Debug, Default)]
struct Counts {
    queued: AtomicU64,
    dropped: AtomicU64,
    exported: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

/// The spans' fate at the end of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// The collector's address, as [`Settings::endpoint`] gave it.
    pub endpoint: String,
    /// Accepted by the collector.
    pub exported: u64,
    /// Dropped because the queue was full.
    pub dropped: u64,
    /// Sent, and refused or not answered.
    pub failed: u64,
    /// Still queued when the flush's time ran out.
    pub unsent: u64,
    /// The first export error, if any.
    pub error: Option<String>,
}

impl Summary {
    /// True when every span reached the collector.
    pub fn complete(&self) -> bool {
        self.dropped == 0 && self.failed == 0 && self.unsent == 0
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "OTLP traces to {}: {} spans exported, {} dropped (queue full), {} failed to export, {} unsent at exit",
            self.endpoint, self.exported, self.dropped, self.failed, self.unsent
        )?;
        if let Some(e) = &self.error {
            write!(f, " (first error: {e})")?;
        }
        Ok(())
    }
}

enum Msg {
    Span(Box<SpanData>),
    /// Export everything queued before this, then answer.
    Flush(mpsc::Sender<()>),
}

/// The span processor: ending a span is one `try_send`.
#[derive(Debug)]
struct Bounded {
    queue: SyncSender<Msg>,
    counts: Arc<Counts>,
}

impl SpanProcessor for Bounded {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        match self.queue.try_send(Msg::Span(Box::new(span))) {
            Ok(()) => {
                self.counts.queued.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Waits (up to the export timeout, twice) for what is queued to be
    /// sent.
    fn force_flush(&self) -> OTelSdkResult {
        flush(&self.queue, EXPORT_TIMEOUT * 2)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        flush(&self.queue, timeout)
    }
}

fn flush(queue: &SyncSender<Msg>, limit: Duration) -> OTelSdkResult {
    let deadline = Instant::now() + limit;
    let (tx, rx) = mpsc::channel();
    let mut msg = Msg::Flush(tx);
    // The queue may be full: retry until the exporter makes room, never
    // past the deadline.
    loop {
        match queue.try_send(msg) {
            Ok(()) => break,
            Err(TrySendError::Full(m)) if Instant::now() < deadline => {
                msg = m;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(TrySendError::Full(_)) => return Err(OTelSdkError::Timeout(limit)),
            Err(TrySendError::Disconnected(_)) => return Ok(()),
        }
    }
    match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        Ok(()) | Err(RecvTimeoutError::Disconnected) => Ok(()),
        Err(RecvTimeoutError::Timeout) => Err(OTelSdkError::Timeout(limit)),
    }
}

/// Puts the calling thread at the lowest scheduling priority (nice 19; on
/// Linux a thread's own): on a host whose cores the run keeps busy, the
/// exporter then gets what the timed path leaves, and what it cannot send in
/// time is dropped and counted at the queue rather than taken from the run.
fn lowest_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority only changes the calling thread's nice value.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 19);
    }
}

/// The exporter thread: batches off the queue, one request at a time.
fn export_loop(
    queue: Receiver<Msg>,
    exporter: opentelemetry_otlp::SpanExporter,
    runtime: tokio::runtime::Runtime,
    counts: Arc<Counts>,
) {
    lowest_priority();
    let mut batch: Vec<SpanData> = Vec::with_capacity(MAX_BATCH);
    let send = |batch: &mut Vec<SpanData>| {
        if batch.is_empty() {
            return;
        }
        let n = batch.len() as u64;
        let spans = std::mem::replace(batch, Vec::with_capacity(MAX_BATCH));
        match runtime.block_on(exporter.export(spans)) {
            Ok(()) => {
                counts.exported.fetch_add(n, Ordering::Relaxed);
            }
            Err(e) => {
                counts.failed.fetch_add(n, Ordering::Relaxed);
                let mut first = counts
                    .first_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if first.is_none() {
                    *first = Some(e.to_string());
                }
            }
        }
    };
    let mut oldest: Option<Instant> = None;
    loop {
        let wait = oldest.map_or(BATCH_DELAY, |t| {
            (t + BATCH_DELAY).saturating_duration_since(Instant::now())
        });
        match queue.recv_timeout(wait) {
            Ok(Msg::Span(span)) => {
                batch.push(*span);
                oldest.get_or_insert_with(Instant::now);
                if batch.len() >= MAX_BATCH {
                    send(&mut batch);
                    oldest = None;
                }
            }
            Ok(Msg::Flush(done)) => {
                send(&mut batch);
                oldest = None;
                let _ = done.send(());
            }
            Err(RecvTimeoutError::Timeout) => {
                send(&mut batch);
                oldest = None;
            }
            Err(RecvTimeoutError::Disconnected) => {
                send(&mut batch);
                return;
            }
        }
    }
}

/// The exporter of one process.
pub struct Otlp {
    provider: SdkTracerProvider,
    counts: Arc<Counts>,
    endpoint: String,
}

impl Otlp {
    /// Starts the exporter thread and installs the tracer provider as the
    /// global one. Nothing is connected yet: a collector that is down only
    /// shows in the [`Summary`].
    pub fn start(settings: Settings) -> Result<Otlp, OtlpError> {
        let endpoint = settings.endpoint.clone();
        let bad = |reason: String| OtlpError::Endpoint {
            endpoint: endpoint.clone(),
            reason,
        };
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(bad(
                "not an OTLP/gRPC URL (http://HOST:PORT, e.g. http://127.0.0.1:4317)".into(),
            ));
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        // The client's channel starts its worker on the runtime it is made in.
        let mut exporter = {
            let _in = runtime.enter();
            opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint.clone())
                .with_timeout(EXPORT_TIMEOUT)
                .build()
                .map_err(|e| bad(e.to_string()))?
        };
        let resource = Resource::builder_empty()
            .with_service_name(settings.service)
            .with_attributes(
                settings
                    .attributes
                    .iter()
                    .map(|(k, v)| opentelemetry::KeyValue::new(k.clone(), v.clone())),
            )
            .build();
        exporter.set_resource(&resource);
        let counts = Arc::new(Counts::default());
        let (tx, rx) = mpsc::sync_channel(settings.queue.max(1));
        let thread_counts = Arc::clone(&counts);
        std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || export_loop(rx, exporter, runtime, thread_counts))?;
        let provider = SdkTracerProvider::builder()
            .with_span_processor(Bounded {
                queue: tx,
                counts: Arc::clone(&counts),
            })
            .with_resource(resource)
            .build();
        opentelemetry::global::set_tracer_provider(provider.clone());
        Ok(Otlp {
            provider,
            counts,
            endpoint,
        })
    }

    /// A tracer of this provider.
    pub(crate) fn tracer(&self, name: &'static str) -> SdkTracer {
        use opentelemetry::trace::TracerProvider as _;
        self.provider.tracer(name)
    }

    /// The `tracing` layer that exports the spans of target [`TARGET`].
    pub fn layer<S>(&self) -> impl Layer<S>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.tracer("mlperf-net"))
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_location(false)
            .with_filter(filter_fn(|m| m.target() == TARGET))
    }

    /// Sends what is queued (waiting at most `limit`) and says what became
    /// of every span. Spans ended after this are dropped and not counted.
    pub fn shutdown(&self, limit: Duration) -> Summary {
        // Unsent spans stay unsent: the process is about to end.
        let _ = self.provider.shutdown_with_timeout(limit);
        self.summary()
    }

    /// Sends what is queued (waiting a few seconds at most) and says what
    /// became of every span so far; spans may still be ended and exported.
    pub fn flush(&self) -> Summary {
        let _ = self.provider.force_flush();
        self.summary()
    }

    fn summary(&self) -> Summary {
        let c = &self.counts;
        let (queued, exported, failed) = (
            c.queued.load(Ordering::Relaxed),
            c.exported.load(Ordering::Relaxed),
            c.failed.load(Ordering::Relaxed),
        );
        Summary {
            endpoint: self.endpoint.clone(),
            exported,
            dropped: c.dropped.load(Ordering::Relaxed),
            failed,
            unsent: queued.saturating_sub(exported + failed),
            error: c
                .first_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }
}

/// The W3C `traceparent` of `span`: `00-TRACEID-SPANID-FLAGS`.
pub fn traceparent(span: &SpanContext) -> String {
    format!(
        "00-{:032x}-{:016x}-{:02x}",
        span.trace_id(),
        span.span_id(),
        span.trace_flags().to_u8()
    )
}

/// The remote span a `traceparent` names; `None` when it is empty or
/// malformed (a version other than 00, bad hex, zero ids), as the W3C spec
/// asks: the trace then simply does not continue.
pub fn parse_traceparent(text: &str) -> Option<SpanContext> {
    let b = text.as_bytes();
    if b.len() != 55 || &b[..3] != b"00-" || b[35] != b'-' || b[52] != b'-' {
        return None;
    }
    let trace = hex::<16>(&b[3..35])?;
    let span = hex::<8>(&b[36..52])?;
    let flags = hex::<1>(&b[53..55])?;
    let trace_id = TraceId::from_bytes(trace);
    let span_id = SpanId::from_bytes(span);
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    Some(SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags[0]),
        true,
        TraceState::default(),
    ))
}

/// Lower-case hex only, as the W3C Trace Context spec writes `traceparent`.
fn hex<const N: usize>(text: &[u8]) -> Option<[u8; N]> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, pair) in text.chunks_exact(2).enumerate() {
        *out.get_mut(i)? = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips_and_refuses_malformed_text() {
        let sc = SpanContext::new(
            TraceId::from_bytes([0xab; 16]),
            SpanId::from_bytes([1, 2, 3, 4, 5, 6, 7, 8]),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        );
        let text = traceparent(&sc);
        assert_eq!(
            text,
            "00-abababababababababababababababab-0102030405060708-01"
        );
        let back = parse_traceparent(&text).expect("parses");
        assert_eq!(back.trace_id(), sc.trace_id());
        assert_eq!(back.span_id(), sc.span_id());
        assert!(back.is_sampled() && back.is_remote());

        let zero_trace = "00-00000000000000000000000000000000-0102030405060708-01";
        let zero_span = "00-abababababababababababababababab-0000000000000000-01";
        let upper = "00-ABABABABABABABABABABABABABABABAB-0102030405060708-01";
        let version = "01-abababababababababababababababab-0102030405060708-01";
        let sign = "00-+bababababababababababababababab-0102030405060708-01";
        for bad in ["", zero_trace, zero_span, upper, version, sign, &text[..54]] {
            assert!(parse_traceparent(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let counts = Arc::new(Counts::default());
        let (tx, rx) = mpsc::sync_channel(2);
        let p = Bounded {
            queue: tx,
            counts: Arc::clone(&counts),
        };
        let provider = SdkTracerProvider::builder().with_span_processor(p).build();
        use opentelemetry::trace::{Tracer as _, TracerProvider as _};
        let tracer = provider.tracer("test");
        for _ in 0..5 {
            drop(tracer.start("s"));
        }
        assert_eq!(counts.queued.load(Ordering::Relaxed), 2);
        assert_eq!(counts.dropped.load(Ordering::Relaxed), 3);
        assert_eq!(rx.try_iter().count(), 2);
        // No exporter thread: shutting down must not wait for one.
        drop(rx);
        drop(provider);
    }

    #[test]
    fn an_endpoint_that_is_not_a_url_is_refused() {
        let e = Otlp::start(Settings::new("127.0.0.1:4317", "t"))
            .err()
            .expect("refused")
            .to_string();
        assert!(
            e.contains("--otlp 127.0.0.1:4317") && e.contains("http://"),
            "{e}"
        );
    }
}
