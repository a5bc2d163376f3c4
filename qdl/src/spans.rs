//! OpenTelemetry spans of a sampled subset of samples (`loadgen-node --otlp
//! --otlp-sample-ratio R`).
//!
//! Whether a sample is traced is decided from its response id alone: a
//! multiply by an odd constant (a bijection, so evenly spread over
//! consecutive ids) compared with `R * 2^64`. An untraced sample costs that
//! multiply and compare, and sends an empty `traceparent` (nothing on the
//! wire). A traced one gets a span, `qdl.sample`, started on the issuing
//! thread as a child of the current series' span; its W3C `traceparent`
//! travels in the `SampleRequest`, so the node's spans for the sample are its
//! children; it ends when the connection's receive task has handed the answer
//! to the LoadGen.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use opentelemetry::global::{BoxedSpan, BoxedTracer};
use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _};
use opentelemetry::{Context, KeyValue};
use proto::{SampleAnswer, SampleError};

/// The QDL's traced samples.
pub struct SampleTrace {
    /// Every sample (ratio 1), or those whose mixed id is below `threshold`.
    all: bool,
    threshold: u64,
    tracer: BoxedTracer,
    /// The span the samples' spans are children of (the series').
    parent: TraceParent,
    /// Traced samples not answered yet, by response id.
    pending: Mutex<HashMap<u64, BoxedSpan>>,
    /// `pending`'s size, read without its lock by the receive tasks.
    count: AtomicUsize,
}

impl SampleTrace {
    /// Traces about `ratio` (0 to 1) of the samples, with the global tracer
    /// provider's tracer.
    pub fn new(ratio: f64) -> Self {
        let ratio = if ratio.is_finite() {
            ratio.clamp(0.0, 1.0)
        } else {
            0.0
        };
        Self {
            all: ratio >= 1.0,
            // Saturates at u64::MAX; `all` covers ratio 1 exactly.
            threshold: (ratio * 18_446_744_073_709_551_616.0) as u64,
            tracer: opentelemetry::global::tracer("qdl"),
            parent: TraceParent::default(),
            pending: Mutex::new(HashMap::new()),
            count: AtomicUsize::new(0),
        }
    }

    /// Whether the sample of response id `id` is traced.
    #[inline]
    pub fn sampled(&self, id: u64) -> bool {
        self.all || id.wrapping_mul(0x9e37_79b9_7f4a_7c15) < self.threshold
    }

    /// Where the parent of the spans of samples issued from now on is set.
    pub fn parent(&self) -> TraceParent {
        self.parent.clone()
    }

    /// Starts a traced sample's span; returns its `traceparent`.
    #[cold]
    pub(crate) fn begin(&self, id: u64, node: &str, bytes: usize) -> String {
        let parent = lock(&self.parent.0).clone();
        let span = self
            .tracer
            .span_builder("qdl.sample")
            .with_kind(SpanKind::Client)
            .with_attributes([
                KeyValue::new("sample.id", id as i64),
                KeyValue::new("node", node.to_string()),
                KeyValue::new("sample.bytes", bytes as i64),
            ])
            .start_with_context(&self.tracer, &parent);
        if !span.span_context().is_valid() {
            return String::new(); // no tracer provider installed
        }
        let text = otlp::traceparent(span.span_context());
        lock(&self.pending).insert(id, span);
        self.count.fetch_add(1, Ordering::Release);
        text
    }

    /// Ends the spans of the traced samples among `answers` (their answers
    /// are with the LoadGen now) and `errors`.
    #[inline]
    pub(crate) fn answered(&self, answers: &[SampleAnswer], errors: &[SampleError]) {
        if self.count.load(Ordering::Acquire) != 0 {
            self.end(answers, errors);
        }
    }

    #[cold]
    fn end(&self, answers: &[SampleAnswer], errors: &[SampleError]) {
        let mut pending = lock(&self.pending);
        for a in answers {
            if let Some(mut span) = pending.remove(&a.id) {
                self.count.fetch_sub(1, Ordering::Release);
                span.set_attributes([
                    KeyValue::new("answer.bytes", a.payload.len() as i64),
                    KeyValue::new("node.queue_ns", a.node_queue_ns as i64),
                    KeyValue::new("node.compute_ns", a.node_compute_ns as i64),
                    KeyValue::new("node.send_ns", a.node_send_ns as i64),
                ]);
                span.end();
            }
        }
        for e in errors {
            if let Some(mut span) = pending.remove(&e.id) {
                self.count.fetch_sub(1, Ordering::Release);
                span.set_status(Status::error(e.message.clone()));
                span.end();
            }
        }
    }
}

/// The parent of the spans of samples issued from now on (the series' span).
#[derive(Clone, Default)]
pub struct TraceParent(Arc<Mutex<Context>>);

impl TraceParent {
    /// Makes `parent` the parent of the spans of the samples issued next.
    pub fn set(&self, parent: Context) {
        *lock(&self.0) = parent;
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_picks_that_share_of_consecutive_ids() {
        for (ratio, expect) in [(0.0, 0), (0.001, 100), (0.25, 25_000), (1.0, 100_000)] {
            let t = SampleTrace::new(ratio);
            let n = (1..=100_000u64).filter(|&id| t.sampled(id)).count();
            let slack = expect / 20 + 1;
            assert!(
                n.abs_diff(expect) <= slack,
                "ratio {ratio}: {n} of 100000 traced, expected {expect}"
            );
        }
        assert!(!SampleTrace::new(f64::NAN).sampled(7));
    }

    #[test]
    fn answered_ends_only_traced_samples() {
        let t = SampleTrace::new(1.0);
        // Without a tracer provider nothing is traced.
        assert_eq!(t.begin(5, "node", 64), "");
        assert_eq!(t.count.load(Ordering::Relaxed), 0);
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        opentelemetry::global::set_tracer_provider(provider);
        let t = SampleTrace::new(1.0);
        let tp = t.begin(5, "node", 64);
        let parsed = otlp::parse_traceparent(&tp).expect("a valid traceparent");
        assert!(parsed.is_sampled(), "{tp}");
        assert_eq!(t.count.load(Ordering::Relaxed), 1);
        let answer = |id| SampleAnswer {
            id,
            ..SampleAnswer::default()
        };
        t.answered(&[answer(4)], &[]);
        assert_eq!(t.count.load(Ordering::Relaxed), 1);
        t.answered(&[answer(4), answer(5)], &[]);
        assert_eq!(t.count.load(Ordering::Relaxed), 0);
        assert!(lock(&t.pending).is_empty());
    }
}
