//! The node's OpenTelemetry spans (`sut-node serve --otlp ENDPOINT`).
//!
//! A sample whose `SampleRequest` carries a `traceparent` (the LoadGen node
//! traces it) continues that trace here. Nothing is done for it on the data
//! path but keeping its parsed context and a few instants it already has;
//! once its answer is handed to the transport, the writer task makes its
//! spans at once, with the instants as their times:
//!
//! ```text
//! sut-node.sample   message received -> answer handed to the transport
//! ├── queue         message received -> its batch starts
//! ├── batch         its batch starts -> the batch's outputs are in the outbox
//! │   └── compute   its batch starts -> the backend returns
//! └── answer        the backend returns -> answer handed to the transport
//! ```
//!
//! An Infer stream is a `sut-node.session` span (a `tracing` span, exported
//! through `tracing-opentelemetry`) from its start to its end. Samples
//! without a `traceparent`, or every sample when `--otlp` is off, cost one
//! emptiness check.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime};

use opentelemetry::trace::{Span as _, SpanContext, SpanKind, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};

static ON: AtomicBool = AtomicBool::new(false);

/// Turns the node's spans on (`--otlp`; the exporter is the global tracer
/// provider).
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// A traced sample's context, from its message.
pub(crate) struct SampleTrace {
    parent: SpanContext,
    received: Instant,
}

/// A traced sample whose output is ready, waiting in its stream's outbox.
pub(crate) struct Traced {
    id: u64,
    parent: SpanContext,
    received: Instant,
    started: Instant,
    ready: Instant,
    delivered: Instant,
    batch_size: usize,
}

/// The trace a sample continues, if its message carries one and spans are
/// on. `received`: when its message was in hand.
#[inline]
pub(crate) fn received(traceparent: &str, received: Instant) -> Option<Box<SampleTrace>> {
    if traceparent.is_empty() {
        return None;
    }
    parse(traceparent, received)
}

#[cold]
fn parse(traceparent: &str, received: Instant) -> Option<Box<SampleTrace>> {
    if !ON.load(Ordering::Relaxed) {
        return None;
    }
    let parent = otlp::parse_traceparent(traceparent).filter(SpanContext::is_sampled)?;
    Some(Box::new(SampleTrace { parent, received }))
}

/// A traced sample's output, ready at `ready` from a batch of `batch_size`
/// started at `started`, is being put in its outbox now.
#[cold]
pub(crate) fn batched(
    trace: &SampleTrace,
    id: u64,
    started: Instant,
    ready: Instant,
    batch_size: usize,
) -> Traced {
    Traced {
        id,
        parent: trace.parent.clone(),
        received: trace.received,
        started,
        ready,
        delivered: Instant::now(),
        batch_size,
    }
}

/// The answers of `traced` were handed to the transport just now: their
/// spans are made and ended.
#[cold]
pub(crate) fn sent(traced: &mut Vec<Traced>, stream: u64, node: &str) {
    let tracer = opentelemetry::global::tracer("sut-node");
    let (now, wall) = (Instant::now(), SystemTime::now());
    let at = |i: Instant| {
        wall.checked_sub(now.saturating_duration_since(i))
            .unwrap_or(wall)
    };
    for t in traced.drain(..) {
        let parent = Context::new().with_remote_span_context(t.parent);
        let sample = tracer
            .span_builder("sut-node.sample")
            .with_kind(SpanKind::Server)
            .with_start_time(at(t.received))
            .with_attributes([
                KeyValue::new("sample.id", t.id as i64),
                KeyValue::new("node", node.to_string()),
                KeyValue::new("stream", stream as i64),
            ])
            .start_with_context(&tracer, &parent);
        let cx = Context::new().with_span(sample);
        let child = |cx: &Context, name: &'static str, from: Instant, attrs: Vec<KeyValue>| {
            tracer
                .span_builder(name)
                .with_start_time(at(from))
                .with_attributes(attrs)
                .start_with_context(&tracer, cx)
        };
        child(&cx, "queue", t.received, Vec::new()).end_with_timestamp(at(t.started));
        let batch = child(
            &cx,
            "batch",
            t.started,
            vec![KeyValue::new("batch.size", t.batch_size as i64)],
        );
        let batch = Context::new().with_span(batch);
        child(&batch, "compute", t.started, Vec::new()).end_with_timestamp(at(t.ready));
        batch.span().end_with_timestamp(at(t.delivered));
        child(&cx, "answer", t.ready, Vec::new()).end_with_timestamp(wall);
        cx.span().end_with_timestamp(wall);
    }
}

/// The span of one Infer stream, while it lasts; `None` when spans are off.
pub(crate) fn session(stream: u64, node: &str) -> Option<tracing::Span> {
    ON.load(Ordering::Relaxed)
        .then(|| tracing::info_span!(target: otlp::TARGET, "sut-node.session", stream, node))
}
