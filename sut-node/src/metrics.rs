//! The node's figures for `sut-node serve --metrics ADDR` (Prometheus text
//! format). One set per process, as a process is one node: counted with
//! relaxed atomics where the data path already is, read at scrape time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use metrics_endpoint::Page;
use proto::Codec;

/// The node's counters.
pub static NODE: NodeMetrics = NodeMetrics::new();

/// Batch sizes: powers of two up to 1024.
const BATCH_BOUNDS: [f64; 11] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];
/// Compute time of a batch, in seconds: 50 µs to 10 s.
const COMPUTE_BOUNDS: [f64; 16] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 10.0,
];
const CODECS: [Codec; 3] = [Codec::None, Codec::Zstd, Codec::Lz4];

/// The counters are written by different threads (the streams' readers
/// and writers, the batch workers): each on cache lines of its own, so that
/// one thread's counting never stalls another's.
pub struct NodeMetrics {
    received: Line<AtomicU64>,
    /// Samples whose input could not be decoded: never batched.
    rejected: Line<AtomicU64>,
    batched: Line<AtomicU64>,
    answered: Line<AtomicU64>,
    failed: Line<AtomicU64>,
    bytes_in: Line<[AtomicU64; 3]>,
    bytes_out: Line<[AtomicU64; 3]>,
    streams_open: AtomicU64,
    sessions: AtomicU64,
    sessions_refused: AtomicU64,
    batch_sizes: Line<Histogram<12>>,
    compute: Line<Histogram<17>>,
}

/// A value alone on its cache lines (two, as adjacent lines are fetched
/// together).
#[repr(align(128))]
struct Line<T>(T);

impl<T> std::ops::Deref for Line<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

struct Histogram<const N: usize> {
    counts: [AtomicU64; N],
    /// In the histogram's unit, times 1e9 (ns for seconds).
    sum_nano: AtomicU64,
}

impl<const N: usize> Histogram<N> {
    const fn new() -> Self {
        Self {
            counts: [const { AtomicU64::new(0) }; N],
            sum_nano: AtomicU64::new(0),
        }
    }

    /// Adds a local tally's counts and sum.
    fn add(&self, tally: &Tally<N>) {
        for (total, c) in self.counts.iter().zip(tally.counts) {
            if c > 0 {
                total.fetch_add(c, Ordering::Relaxed);
            }
        }
        self.sum_nano.fetch_add(tally.sum_nano, Ordering::Relaxed);
    }

    fn write(&self, page: &mut Page, name: &str, help: &str, node: &str, bounds: &[f64]) {
        let counts: Vec<u64> = self.counts.iter().map(load).collect();
        let sum = self.sum_nano.load(Ordering::Relaxed) as f64 / 1e9;
        page.histogram(name, help, &[("node", node)], bounds, &counts, sum);
    }
}

fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

fn codec_index(codec: i32) -> Option<usize> {
    CODECS.iter().position(|c| *c as i32 == codec)
}

impl NodeMetrics {
    const fn new() -> Self {
        Self {
            received: Line(AtomicU64::new(0)),
            rejected: Line(AtomicU64::new(0)),
            batched: Line(AtomicU64::new(0)),
            answered: Line(AtomicU64::new(0)),
            failed: Line(AtomicU64::new(0)),
            bytes_in: Line([const { AtomicU64::new(0) }; 3]),
            bytes_out: Line([const { AtomicU64::new(0) }; 3]),
            streams_open: AtomicU64::new(0),
            sessions: AtomicU64::new(0),
            sessions_refused: AtomicU64::new(0),
            batch_sizes: Line(Histogram::new()),
            compute: Line(Histogram::new()),
        }
    }

    /// Adds what a stream's reader counted since the last call, and
    /// clears it: once per chunk, so readers on different threads seldom
    /// touch the shared counters.
    pub(crate) fn add_received(&self, r: &mut Received) {
        if r.samples > 0 {
            self.received.fetch_add(r.samples, Ordering::Relaxed);
        }
        if r.rejected > 0 {
            self.rejected.fetch_add(r.rejected, Ordering::Relaxed);
        }
        for (total, b) in self.bytes_in.iter().zip(r.bytes) {
            if b > 0 {
                total.fetch_add(b, Ordering::Relaxed);
            }
        }
        *r = Received::default();
    }

    /// Adds what a batch worker counted since the last call, and clears it:
    /// once per group of batches run back to back, so that small batches
    /// cost the shared counters nothing each.
    pub(crate) fn add_batches(&self, b: &mut Batches) {
        if b.samples == 0 {
            return;
        }
        self.batched.fetch_add(b.samples, Ordering::Relaxed);
        self.batch_sizes.add(&b.sizes);
        self.compute.add(&b.compute);
        *b = Batches::default();
    }

    /// A message on its way out: its answers (payloads as sent) and errors.
    pub(crate) fn sent(&self, message: &proto::FromNode) {
        let answers = message.answers.len() as u64;
        let errors = message.errors.len() as u64;
        if answers > 0 {
            self.answered.fetch_add(answers, Ordering::Relaxed);
        }
        if errors > 0 {
            self.failed.fetch_add(errors, Ordering::Relaxed);
        }
        let payloads = message
            .answers
            .iter()
            .map(|a| (a.codec, a.payload.len()))
            .chain(
                message
                    .first_tokens
                    .iter()
                    .map(|t| (t.codec, t.payload.len())),
            );
        // One addition per codec and message, not per answer.
        let mut bytes = [0u64; 3];
        for (codec, len) in payloads {
            if let Some(i) = codec_index(codec) {
                bytes[i] += len as u64;
            }
        }
        for (total, b) in self.bytes_out.iter().zip(bytes) {
            if b > 0 {
                total.fetch_add(b, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn session(&self, accepted: bool) {
        let c = if accepted {
            &self.sessions
        } else {
            &self.sessions_refused
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an open Infer stream until the guard is dropped.
    pub(crate) fn stream_open(&'static self) -> StreamGuard {
        self.streams_open.fetch_add(1, Ordering::Relaxed);
        StreamGuard(self)
    }

    /// The page for a scrape.
    pub fn render(&self, node: &str) -> String {
        let mut p = Page::new();
        let labels: &[(&str, &str)] = &[("node", node)];
        let received = load(&self.received);
        let (answered, failed) = (load(&self.answered), load(&self.failed));
        p.counter(
            "sutnode_samples_received_total",
            "Samples received.",
            labels,
            received,
        );
        p.counter(
            "sutnode_samples_answered_total",
            "Samples answered.",
            labels,
            answered,
        );
        p.counter(
            "sutnode_samples_failed_total",
            "Samples answered with an error (bad input, backend failure).",
            labels,
            failed,
        );
        let queued = received.saturating_sub(load(&self.batched) + load(&self.rejected));
        p.gauge(
            "sutnode_queue_depth",
            "Samples received and waiting for a batch.",
            labels,
            queued as f64,
        );
        p.gauge(
            "sutnode_samples_outstanding",
            "Samples received and not yet answered.",
            labels,
            received.saturating_sub(answered + failed) as f64,
        );
        for (name, help, bytes) in [
            (
                "sutnode_bytes_in_total",
                "Sample payload bytes received, as received.",
                &*self.bytes_in,
            ),
            (
                "sutnode_bytes_out_total",
                "Answer and first-token payload bytes sent, as sent.",
                &*self.bytes_out,
            ),
        ] {
            for (c, b) in CODECS.iter().zip(bytes) {
                let codec = compression::CodecKind::from(*c).name();
                p.counter(name, help, &[("node", node), ("codec", codec)], load(b));
            }
        }
        p.gauge(
            "sutnode_connections",
            "Open data streams (one per LoadGen connection).",
            labels,
            load(&self.streams_open) as f64,
        );
        p.counter(
            "sutnode_sessions_total",
            "Sessions accepted.",
            labels,
            load(&self.sessions),
        );
        p.counter(
            "sutnode_sessions_refused_total",
            "Sessions refused.",
            labels,
            load(&self.sessions_refused),
        );
        self.batch_sizes.write(
            &mut p,
            "sutnode_batch_size",
            "Samples per batch run by the backend.",
            node,
            &BATCH_BOUNDS,
        );
        self.compute.write(
            &mut p,
            "sutnode_compute_seconds",
            "Backend time per batch.",
            node,
            &COMPUTE_BOUNDS,
        );
        p.finish()
    }
}

/// A histogram's counts kept by one thread, until added to the node's.
struct Tally<const N: usize> {
    counts: [u64; N],
    sum_nano: u64,
}

impl<const N: usize> Default for Tally<N> {
    fn default() -> Self {
        Self {
            counts: [0; N],
            sum_nano: 0,
        }
    }
}

impl<const N: usize> Tally<N> {
    fn record(&mut self, bounds: &[f64], v: f64) {
        let i = bounds.iter().position(|b| v <= *b).unwrap_or(bounds.len());
        self.counts[i] += 1;
        self.sum_nano += (v * 1e9) as u64;
    }
}

/// What a batch worker ran, until added to the node's counters.
#[derive(Default)]
pub(crate) struct Batches {
    samples: u64,
    sizes: Tally<12>,
    compute: Tally<17>,
}

impl Batches {
    pub(crate) fn batch(&mut self, size: usize, compute: Duration) {
        self.samples += size as u64;
        self.sizes.record(&BATCH_BOUNDS, size as f64);
        self.compute.record(&COMPUTE_BOUNDS, compute.as_secs_f64());
    }
}

/// What one stream's reader received, until added to the node's counters.
#[derive(Default)]
pub(crate) struct Received {
    samples: u64,
    pub(crate) rejected: u64,
    bytes: [u64; 3],
}

impl Received {
    /// A sample message, its payload as received.
    pub(crate) fn sample(&mut self, codec: i32, bytes: usize) {
        self.samples += 1;
        if let Some(i) = codec_index(codec) {
            self.bytes[i] += bytes as u64;
        }
    }
}

pub(crate) struct StreamGuard(&'static NodeMetrics);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.streams_open.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_flow_into_the_page() {
        let m = NodeMetrics::new();
        let mut r = Received::default();
        r.sample(Codec::Zstd as i32, 100);
        r.sample(Codec::None as i32, 10);
        m.add_received(&mut r);
        r.sample(Codec::None as i32, 10);
        r.rejected += 1;
        m.add_received(&mut r);
        m.add_received(&mut r); // nothing new
        let mut b = Batches::default();
        b.batch(1, Duration::from_micros(300));
        m.add_batches(&mut b);
        m.add_batches(&mut b); // nothing new
        m.sent(&proto::FromNode {
            answers: vec![proto::SampleAnswer {
                payload: bytes::Bytes::from_static(b"abcd"),
                codec: Codec::Lz4 as i32,
                ..Default::default()
            }],
            ..Default::default()
        });
        m.session(true);
        let page = m.render("n1");
        for line in [
            "sutnode_samples_received_total{node=\"n1\"} 3",
            "sutnode_samples_answered_total{node=\"n1\"} 1",
            "sutnode_queue_depth{node=\"n1\"} 1",
            "sutnode_samples_outstanding{node=\"n1\"} 2",
            "sutnode_bytes_in_total{node=\"n1\",codec=\"zstd\"} 100",
            "sutnode_bytes_in_total{node=\"n1\",codec=\"none\"} 20",
            "sutnode_bytes_out_total{node=\"n1\",codec=\"lz4\"} 4",
            "sutnode_sessions_total{node=\"n1\"} 1",
            "sutnode_batch_size_bucket{node=\"n1\",le=\"1\"} 1",
            "sutnode_compute_seconds_bucket{node=\"n1\",le=\"0.00025\"} 0",
            "sutnode_compute_seconds_bucket{node=\"n1\",le=\"0.0005\"} 1",
            "sutnode_compute_seconds_count{node=\"n1\"} 1",
        ] {
            assert!(page.lines().any(|l| l == line), "{line} not in\n{page}");
        }
    }
}
