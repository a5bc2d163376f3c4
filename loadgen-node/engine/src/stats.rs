//! Latency statistics whose memory depends on the range of the latencies,
//! not on their number (`results.cc`, `PerformanceSummary::ProcessLatencies`).
//!
//! The official LoadGen keeps every latency in a vector and sorts it: 8 bytes a sample,
//! gigabytes on a long high-QPS run. Here latencies go into a log-linear
//! histogram: exact to the nanosecond below 2^17 ns (131 µs), and above that
//! kept to 17 significant bits (a relative resolution of 2^-16, 15 ppm: 153 ns
//! at 10 ms). Count, sum, minimum and maximum are exact, and so is the number
//! of latencies above the one threshold a histogram is created with (the
//! Server latency bound, where an exact count decides validity).

/// Values below `1 << EXACT_BITS` get a bucket each; above, each power of two
/// is split into `1 << (EXACT_BITS - 1)` buckets.
const EXACT_BITS: u32 = 17;
const GROUP_LEN: usize = 1 << (EXACT_BITS - 1);

/// A multiset of latencies (ns), queried by rank like a sorted vector.
#[derive(Clone, Debug, Default)]
pub(crate) struct LatencyHistogram {
    /// Group 0 holds the exact values; group g > 0 the values whose highest
    /// set bit is `EXACT_BITS + g - 1`. A group is allocated on first use.
    groups: Vec<Vec<u64>>,
    /// Samples per group, so a rank lookup skips whole groups.
    group_counts: Vec<u64>,
    count: u64,
    sum: i128,
    min: i64,
    max: i64,
    threshold: Option<i64>,
    above: u64,
}

impl LatencyHistogram {
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A histogram that also counts, exactly, the latencies `> threshold`.
    pub(crate) fn with_threshold(threshold: i64) -> Self {
        Self {
            threshold: Some(threshold),
            ..Self::default()
        }
    }

    pub(crate) fn record(&mut self, ns: i64) {
        if self.count == 0 {
            self.min = ns;
            self.max = ns;
        } else {
            self.min = self.min.min(ns);
            self.max = self.max.max(ns);
        }
        self.count += 1;
        self.sum += ns as i128;
        if self.threshold.is_some_and(|t| ns > t) {
            self.above += 1;
        }
        let (group, offset) = bucket_of(ns.max(0) as u64);
        if self.groups.len() <= group {
            self.groups.resize_with(group + 1, Vec::new);
            self.group_counts.resize(group + 1, 0);
        }
        let g = &mut self.groups[group];
        if g.is_empty() {
            g.resize(group_len(group), 0);
        }
        g[offset] += 1;
        self.group_counts[group] += 1;
    }

    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    pub(crate) fn sum(&self) -> i128 {
        self.sum
    }

    /// Smallest latency, 0 when empty.
    pub(crate) fn min(&self) -> i64 {
        self.min
    }

    /// Largest latency, 0 when empty.
    pub(crate) fn max(&self) -> i64 {
        self.max
    }

    /// Integer mean, as the official LoadGen computes it; 0 when empty.
    pub(crate) fn mean(&self) -> i64 {
        if self.count == 0 {
            0
        } else {
            (self.sum / self.count as i128) as i64
        }
    }

    /// Number of latencies above the threshold given at creation.
    pub(crate) fn above_threshold(&self) -> u64 {
        self.above
    }

    /// The latency at `rank` in ascending order (`sorted[rank]`); ranks past
    /// the end give the maximum, an empty histogram gives 0.
    pub(crate) fn at_rank(&self, rank: u64) -> i64 {
        if self.count == 0 {
            return 0;
        }
        if rank == 0 {
            return self.min;
        }
        if rank + 1 >= self.count {
            return self.max;
        }
        let mut seen = 0u64;
        for (group, &in_group) in self.group_counts.iter().enumerate() {
            if seen + in_group <= rank {
                seen += in_group;
                continue;
            }
            for (offset, &n) in self.groups[group].iter().enumerate() {
                seen += n;
                if seen > rank {
                    // A bucket's lower bound, kept within the exact extremes.
                    return (value_of(group, offset) as i64).clamp(self.min, self.max);
                }
            }
        }
        self.max
    }

    /// The latency at percentile `p` as the official LoadGen picks it:
    /// `sorted[trunc(count * p)]`.
    pub(crate) fn percentile(&self, p: f64) -> i64 {
        self.at_rank((self.count as f64 * p) as u64)
    }
}

fn group_len(group: usize) -> usize {
    if group == 0 {
        1 << EXACT_BITS
    } else {
        GROUP_LEN
    }
}

fn bucket_of(v: u64) -> (usize, usize) {
    if v < 1 << EXACT_BITS {
        return (0, v as usize);
    }
    let high_bit = 63 - v.leading_zeros();
    let shift = high_bit + 1 - EXACT_BITS;
    let offset = (v >> shift) as usize - GROUP_LEN;
    (shift as usize, offset)
}

fn value_of(group: usize, offset: usize) -> u64 {
    if group == 0 {
        offset as u64
    } else {
        ((offset + GROUP_LEN) as u64) << group
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Mt19937;

    /// Reference: the official LoadGen's sorted-vector statistics.
    fn sorted_at(sorted: &[i64], p: f64) -> i64 {
        sorted[(sorted.len() as f64 * p) as usize]
    }

    #[test]
    fn exact_below_the_exact_range() {
        let mut rng = Mt19937::new(7);
        let mut h = LatencyHistogram::new();
        let mut v = Vec::new();
        for _ in 0..10_000 {
            let x = (rng.next_u32() % 100_000) as i64;
            h.record(x);
            v.push(x);
        }
        v.sort_unstable();
        for p in [0.0, 0.5, 0.9, 0.95, 0.97, 0.99, 0.999] {
            assert_eq!(h.percentile(p), sorted_at(&v, p), "p={p}");
        }
        for rank in [0u64, 1, 77, 5000, 9998, 9999, 20_000] {
            assert_eq!(h.at_rank(rank), v[(rank as usize).min(v.len() - 1)]);
        }
        assert_eq!(h.min(), v[0]);
        assert_eq!(h.max(), *v.last().unwrap());
        assert_eq!(h.mean(), v.iter().sum::<i64>() / v.len() as i64);
        assert_eq!(h.count(), 10_000);
    }

    #[test]
    fn large_values_within_resolution() {
        let mut rng = Mt19937::new(11);
        let mut h = LatencyHistogram::with_threshold(15_000_000);
        let mut v = Vec::new();
        for _ in 0..20_000 {
            // 100 µs .. ~4.4 s
            let x = 100_000 + (rng.next_u32() as i64);
            h.record(x);
            v.push(x);
        }
        v.sort_unstable();
        for p in [0.5, 0.9, 0.99, 0.999] {
            let want = sorted_at(&v, p);
            let got = h.percentile(p);
            assert!(got <= want, "p={p}: {got} > {want}");
            assert!((want - got) as f64 <= want as f64 / 65536.0, "p={p}");
        }
        let above = v.iter().filter(|&&x| x > 15_000_000).count() as u64;
        assert_eq!(h.above_threshold(), above);
        assert_eq!(h.max(), *v.last().unwrap());
    }

    #[test]
    fn extremes_and_empty() {
        let h = LatencyHistogram::new();
        assert_eq!((h.percentile(0.9), h.mean(), h.max()), (0, 0, 0));
        let mut h = LatencyHistogram::new();
        h.record(4_237_077);
        // One large value: every percentile is the exact value.
        assert_eq!(h.percentile(0.5), 4_237_077);
        assert_eq!(h.percentile(0.999), 4_237_077);
        h.record(-5);
        assert_eq!((h.min(), h.at_rank(0)), (-5, -5));
    }

    #[test]
    fn bucket_mapping_round_trips_at_boundaries() {
        for v in [
            0u64,
            1,
            (1 << EXACT_BITS) - 1,
            1 << EXACT_BITS,
            (1 << EXACT_BITS) + 1,
            (1 << 40) + 12345,
        ] {
            let (g, o) = bucket_of(v);
            let low = value_of(g, o);
            assert!(low <= v && v - low < (1u64 << g).max(1), "{v}");
        }
    }
}
