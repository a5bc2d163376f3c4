//! Where each sample's time went: the node's own timings (queue, compute,
//! send; durations on its clock, carried in every answer) and the QDL's
//! (sent, message in hand, decoded), recorded per connection by its receive
//! task and summed per node and over the run at any time.
//!
//! The receive task is each connection's only writer, so recording is a
//! relaxed load and store per bucket: no lock, no allocation, no
//! read-modify-write. Readers (the end-of-run breakdown, metrics scrapes)
//! may see a sample half-recorded, never a torn count.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Sub-buckets per power of two: values are kept to within 1/64 (1.6%).
const SUB_BITS: u32 = 5;
const SUB: usize = 1 << SUB_BITS;
/// Values at or above 2^40 ns (about 18 minutes) share the last bucket.
const TOP_BIT: u32 = 40;
const BUCKETS: usize = (TOP_BIT - SUB_BITS + 1) as usize * SUB;

fn bucket(ns: u64) -> usize {
    let ns = ns.min((1 << TOP_BIT) - 1);
    if ns < SUB as u64 {
        return ns as usize;
    }
    let k = 63 - ns.leading_zeros(); // >= SUB_BITS
    let sub = (ns >> (k - SUB_BITS)) as usize & (SUB - 1);
    (k - SUB_BITS + 1) as usize * SUB + sub
}

/// The middle of bucket `i`'s range.
fn bucket_value(i: usize) -> u64 {
    if i < SUB {
        return i as u64;
    }
    let k = (i / SUB) as u32 + SUB_BITS - 1;
    let width = 1u64 << (k - SUB_BITS);
    ((SUB + i % SUB) as u64) * width + width / 2
}

/// A latency histogram with one writer and any number of readers.
pub(crate) struct AtomicHistogram {
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    max: AtomicU64,
}

impl AtomicHistogram {
    fn new() -> Self {
        Self {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            max: AtomicU64::new(0),
        }
    }

    /// Only ever called by the one writer.
    #[inline]
    fn record(&self, ns: u64) {
        let b = &self.buckets[bucket(ns)];
        b.store(b.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        if ns > self.max.load(Ordering::Relaxed) {
            self.max.store(ns, Ordering::Relaxed);
        }
        self.count
            .store(self.count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    fn add_to(&self, h: &mut Histogram) {
        for (sum, b) in h.buckets.iter_mut().zip(self.buckets.iter()) {
            *sum += b.load(Ordering::Relaxed);
        }
        h.max = h.max.max(self.max.load(Ordering::Relaxed));
    }
}

/// A copy of one or more histograms, for percentiles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    buckets: Vec<u64>,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            buckets: vec![0; BUCKETS],
            max: 0,
        }
    }
}

impl Histogram {
    /// How many values it holds.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The largest value, exact (in nanoseconds).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value at quantile `q` (0 to 1), to within 1.6%; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let n = self.count();
        if n == 0 {
            return 0;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_value(i).min(self.max);
            }
        }
        self.max
    }

    /// How many values lie above `ns`, counting only buckets wholly above
    /// it (values within 1.6% of `ns` may be left out).
    pub fn count_above(&self, ns: u64) -> u64 {
        self.buckets[bucket(ns) + 1..].iter().sum()
    }

    /// Merges `other` into this one.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.max = self.max.max(other.max);
    }
}

/// The parts of a sample's time, in report order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// From the QDL's send to the answer decoded, on the LoadGen host.
    Total,
    /// Total minus the node's time: the wire both ways and the QDL.
    WireAndQdl,
    /// On the node: receipt to the start of the sample's batch.
    NodeQueue,
    /// On the node: the batch's compute.
    NodeCompute,
    /// On the node: output to answer handed to its transport.
    NodeSend,
    /// In the QDL: the answer's message in hand to decoded.
    QdlDecode,
}

impl Part {
    /// Every part, in the order reports list them.
    pub const ALL: [Part; 6] = [
        Part::Total,
        Part::WireAndQdl,
        Part::NodeQueue,
        Part::NodeCompute,
        Part::NodeSend,
        Part::QdlDecode,
    ];

    /// The name in reports and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Part::Total => "total",
            Part::WireAndQdl => "wire_and_qdl",
            Part::NodeQueue => "node_queue",
            Part::NodeCompute => "node_compute",
            Part::NodeSend => "node_send",
            Part::QdlDecode => "qdl_decode",
        }
    }
}

/// One connection's timings, written by its receive task.
pub(crate) struct ConnTimings {
    parts: [AtomicHistogram; 6],
    /// Answers from a node that sent no timings (their node parts are not
    /// recorded; their whole time counts as wire and QDL).
    untimed: AtomicU64,
}

/// One answer's times.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AnswerTimes {
    pub(crate) total: Duration,
    pub(crate) decode: Duration,
    pub(crate) node_queue_ns: u64,
    pub(crate) node_compute_ns: u64,
    pub(crate) node_send_ns: u64,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl ConnTimings {
    pub(crate) fn new() -> Self {
        Self {
            parts: std::array::from_fn(|_| AtomicHistogram::new()),
            untimed: AtomicU64::new(0),
        }
    }

    /// Only ever called by the connection's receive task.
    #[inline]
    pub(crate) fn record(&self, t: &AnswerTimes) {
        let [total, wire, queue, compute, send, decode] = &self.parts;
        let total_ns = ns(t.total);
        total.record(total_ns);
        decode.record(ns(t.decode));
        let node = t
            .node_queue_ns
            .saturating_add(t.node_compute_ns)
            .saturating_add(t.node_send_ns);
        if node == 0 {
            let n = self.untimed.load(Ordering::Relaxed);
            self.untimed.store(n + 1, Ordering::Relaxed);
        } else {
            queue.record(t.node_queue_ns);
            compute.record(t.node_compute_ns);
            send.record(t.node_send_ns);
        }
        wire.record(total_ns.saturating_sub(node));
    }

    fn add_to(&self, b: &mut Timings) {
        for (p, h) in self.parts.iter().zip(b.parts.iter_mut()) {
            p.add_to(h);
        }
        b.untimed += self.untimed.load(Ordering::Relaxed);
    }
}

/// The timings of some connections (a node's, or all).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timings {
    parts: [Histogram; 6],
    /// Answers without the node's timings.
    pub untimed: u64,
}

impl Timings {
    /// The histogram of part `p`, in nanoseconds.
    pub fn part(&self, p: Part) -> &Histogram {
        &self.parts[p as usize]
    }

    /// Answers recorded, untimed ones included (every answer has a total).
    pub fn answers(&self) -> u64 {
        self.part(Part::Total).count()
    }

    pub(crate) fn add(&mut self, conn: &ConnTimings) {
        conn.add_to(self);
    }

    /// Adds `other`'s answers to these.
    pub fn merge(&mut self, other: &Timings) {
        for (a, b) in self.parts.iter_mut().zip(&other.parts) {
            a.merge(b);
        }
        self.untimed += other.untimed;
    }
}

/// Timings per node (in `--sut` order) and over the run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Breakdown {
    /// (node name, address, its timings).
    pub nodes: Vec<(String, String, Timings)>,
    /// Every node's, merged.
    pub overall: Timings,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_above_a_bound_leave_out_only_its_own_bucket() {
        let c = AtomicHistogram::new();
        for ns in [
            1_000u64, 14_000_000, 15_000_000, 15_100_000, 16_000_000, 90_000_000,
        ] {
            c.record(ns);
        }
        let mut h = Histogram::default();
        c.add_to(&mut h);
        // 15.1 ms shares 15 ms's bucket (1.6% wide); 16 ms and 90 ms do not.
        assert_eq!(h.count_above(15_000_000), 2);
        assert_eq!(h.count_above(0), 6);
        assert_eq!(h.count_above(u64::MAX), 0);
    }

    #[test]
    fn buckets_keep_values_within_their_precision() {
        for v in [
            0u64,
            1,
            31,
            32,
            33,
            63,
            64,
            1000,
            123_456,
            15_000_000,
            1 << 39,
        ] {
            let got = bucket_value(bucket(v));
            let err = got.abs_diff(v) as f64 / v.max(1) as f64;
            assert!(err <= 1.0 / 64.0, "{v} -> {got}");
        }
        // Buckets are ordered: a larger value never lands in a lower bucket.
        let mut last = 0;
        for v in (0..1_000_000u64).step_by(7) {
            let b = bucket(v);
            assert!(b >= last, "{v}");
            last = b;
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn percentiles_of_recorded_answers() {
        let c = ConnTimings::new();
        for i in 1..=1000u64 {
            c.record(&AnswerTimes {
                total: Duration::from_nanos(100_000 + i),
                decode: Duration::from_nanos(500),
                node_queue_ns: 10_000,
                node_compute_ns: 50_000 + i,
                node_send_ns: 5_000,
            });
        }
        // An old node: no timings; all its time is wire and QDL.
        c.record(&AnswerTimes {
            total: Duration::from_millis(7),
            decode: Duration::ZERO,
            node_queue_ns: 0,
            node_compute_ns: 0,
            node_send_ns: 0,
        });
        let mut t = Timings::default();
        t.add(&c);
        assert_eq!(t.answers(), 1001);
        assert_eq!(t.untimed, 1);
        assert_eq!(t.part(Part::NodeCompute).count(), 1000);
        let near = |got: u64, want: u64| got.abs_diff(want) as f64 <= want as f64 / 64.0;
        let p50 = t.part(Part::NodeCompute).quantile(0.5);
        assert!(near(p50, 50_500), "{p50}");
        // wire = total - node = 100 µs + i - 65 µs - i = 35 µs for the timed.
        let wire = t.part(Part::WireAndQdl);
        assert!(near(wire.quantile(0.99), 35_000), "{}", wire.quantile(0.99));
        assert_eq!(wire.max(), 7_000_000);
        assert_eq!(t.part(Part::Total).max(), 7_000_000);
        assert_eq!(t.part(Part::NodeQueue).quantile(1.0), 10_000);
        let mut both = t.clone();
        both.merge(&t);
        assert_eq!(both.answers(), 2002);
        assert_eq!(both.part(Part::NodeCompute).quantile(0.5), p50);
        assert_eq!(Histogram::default().quantile(0.99), 0);
    }

    /// The receive task's added cost per answer, measured (release):
    /// `cargo test -p qdl --release --lib record_cost -- --ignored --nocapture`
    #[test]
    #[ignore = "measurement; run in release with --ignored --nocapture"]
    fn record_cost() {
        let c = ConnTimings::new();
        let n = 10_000_000u64;
        let start = std::time::Instant::now();
        for i in 0..n {
            c.record(&AnswerTimes {
                total: Duration::from_nanos(50_000 + (i & 0xffff)),
                decode: Duration::from_nanos(300 + (i & 0xff)),
                node_queue_ns: 1_000 + (i & 0xfff),
                node_compute_ns: 20_000 + (i & 0x3fff),
                node_send_ns: 2_000 + (i & 0x7ff),
            });
        }
        let per = start.elapsed().as_nanos() as f64 / n as f64;
        let clock = std::time::Instant::now();
        let mut last = clock;
        for _ in 0..n {
            last = std::hint::black_box(std::time::Instant::now());
        }
        let per_now = last.duration_since(clock).as_nanos() as f64 / n as f64;
        let mut t = Timings::default();
        t.add(&c);
        assert_eq!(t.answers(), n);
        println!(
            "breakdown: {per:.1} ns to record one answer's six parts; Instant::now {per_now:.1} ns"
        );
    }
}
