//! The 95 % confidence intervals of `compare`, and of the change between two
//! sides. Three sources, by what the runs left:
//!
//! - **Repeated runs** (a side of two runs or more): each run's figure as
//!   its detail log reports it; the change's interval by Student's t on the
//!   difference of the means (Welch's when both sides have several runs;
//!   when one side has one run, the other side's spread stands for both).
//!   This includes what differs from one run to the next (the host, the
//!   network), which one run cannot show.
//! - **Per-sample latencies** (one run a side, with the native engine's side
//!   file or a trace): a percentile's interval from the order statistics
//!   (the ranks a Binomial(n, p) count puts around it), with n the
//!   effective sample size: consecutive latencies are correlated (a queue
//!   that builds up slows several samples in a row), so n is shrunk by the
//!   variance of the batch means of "above the percentile" over 20
//!   consecutive batches against what independent samples would give.
//!   Throughput's interval from the batch means of the completion rate over
//!   20 equal slices of the run (Student's t, 19 degrees of freedom), each
//!   batch's answers spread over the time since the answers before.
//! - **The detail log alone** (one run a side of the official LoadGen
//!   without a trace): the same order-statistic ranks over the run's N
//!   samples taken as independent, read off the reported percentiles (50,
//!   90, 95, 97, 99, 99.9, and the maximum) by interpolation of the log
//!   latency against log(1 - p): an approximation, said so in the output.
//!
//! The change of two one-run sides combines their two intervals on the log
//! scale by MOVER (Zou and Donner's method of variance estimates recovery),
//! so that it is a ratio's interval, in percent of the base.

use statrs::distribution::{Binomial, ContinuousCDF, DiscreteCDF, StudentsT};

/// The level of every interval.
pub const CONFIDENCE: f64 = 0.95;

/// Consecutive batches the correlation of a run's samples is measured over.
pub const BATCHES: usize = 20;

/// A value and its 95 % interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    pub value: f64,
    pub lo: f64,
    pub hi: f64,
}

/// The change of new against base, in percent of base, and its interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Change {
    pub pct: f64,
    pub lo: f64,
    pub hi: f64,
}

/// A percentile's estimate from per-sample values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuantileEstimate {
    pub estimate: Estimate,
    pub n: usize,
    /// The effective sample size the ranks were taken over.
    pub n_eff: f64,
}

/// The LoadGen's percentile: `sorted[trunc(n p)]`.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    sorted[((n as f64 * p) as usize).min(n - 1)]
}

/// The two-sided quantile of Student's t for `df` degrees of freedom.
pub fn t_quantile(df: f64) -> f64 {
    match StudentsT::new(0.0, 1.0, df.max(1.0)) {
        Ok(t) => t.inverse_cdf(1.0 - (1.0 - CONFIDENCE) / 2.0),
        Err(_) => f64::INFINITY,
    }
}

/// The ranks (0-based, into the sorted sample) of the interval of the
/// p-quantile of `n` independent samples: the central 95 % of a
/// Binomial(n, p) count. Where even the last sample is not far enough
/// (n (1 - p) small), the upper one is the last.
fn rank_interval(n: u64, p: f64) -> (f64, f64) {
    let alpha = (1.0 - CONFIDENCE) / 2.0;
    match Binomial::new(p, n) {
        // P(X(r) <= q <= X(s)) = P(r <= B < s), B the count below q, with
        // r and s 1-based: r = the smallest k with P(B <= k) >= alpha, and
        // s - 1 = the smallest with P(B <= s - 1) >= 1 - alpha.
        Ok(b) => {
            let lo = b.inverse_cdf(alpha).saturating_sub(1) as f64;
            let hi = b.inverse_cdf(1.0 - alpha).min(n.saturating_sub(1)) as f64;
            (lo, hi)
        }
        Err(_) => (0.0, n.saturating_sub(1) as f64),
    }
}

/// The effective number of independent samples behind the fraction of
/// `seq` (in time order) above `threshold`: that fraction's variance if
/// the samples were independent, over its variance measured by the means
/// of consecutive batches. Never more than the samples there are.
pub fn effective_size(seq: &[f64], threshold: f64) -> f64 {
    let n = seq.len();
    let batches = BATCHES.min(n / 10);
    if batches < 5 {
        return n as f64;
    }
    let size = n / batches;
    let means: Vec<f64> = (0..batches)
        .map(|b| {
            let batch = &seq[b * size..(b + 1) * size];
            batch.iter().filter(|&&x| x > threshold).count() as f64 / size as f64
        })
        .collect();
    let m = means.iter().sum::<f64>() / batches as f64;
    let var_means = means.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (batches - 1) as f64;
    if m <= 0.0 || m >= 1.0 || var_means <= 0.0 {
        return n as f64;
    }
    // The batch means' variance, scaled to the whole run's mean.
    let var_of_mean = var_means * size as f64 / n as f64;
    let independent = m * (1.0 - m) / n as f64;
    (n as f64 * independent / var_of_mean).min(n as f64)
}

/// The p-quantile of `seq` (in time order) and its interval by order
/// statistics over the effective sample size. `None` for an empty series.
pub fn quantile_interval(seq: &[f64], p: f64) -> Option<QuantileEstimate> {
    if seq.is_empty() {
        return None;
    }
    let mut sorted = seq.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let value = percentile(&sorted, p);
    let n_eff = effective_size(seq, value).max(1.0);
    let m = n_eff.round().max(1.0) as u64;
    let (lo_rank, hi_rank) = rank_interval(m, p);
    // A rank among m effective samples, as the same place among the n
    // there are (the first to the first, the last to the last).
    let at = |rank: f64| {
        let i = match m {
            1 => n - 1,
            _ => (rank * (n - 1) as f64 / (m - 1) as f64).round() as usize,
        };
        sorted[i.min(n - 1)]
    };
    Some(QuantileEstimate {
        estimate: Estimate {
            value,
            lo: at(lo_rank).min(value),
            hi: at(hi_rank).max(value),
        },
        n,
        n_eff,
    })
}

/// A percentile's interval from the percentiles a detail log reports,
/// over `n` samples taken as independent. `reported`: (p, value) pairs,
/// the maximum included as p = 1.
pub fn quantile_from_reported(reported: &[(f64, f64)], n: u64, p: f64) -> Option<Estimate> {
    let mut pts: Vec<(f64, f64)> = reported.iter().copied().filter(|&(_, v)| v > 0.0).collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let value = pts.iter().find(|x| (x.0 - p).abs() < 1e-9)?.1;
    if n == 0 {
        return None;
    }
    // The maximum stands at the level of the last sample.
    let top = 1.0 - 1.0 / n as f64;
    let below_max = pts
        .iter()
        .map(|x| x.0)
        .filter(|&q| q < 1.0)
        .fold(0.0, f64::max);
    for x in &mut pts {
        if x.0 >= 1.0 {
            x.0 = top.max(below_max);
        }
    }
    let (lo_rank, hi_rank) = rank_interval(n, p);
    let level = |rank: f64| (rank / n as f64).clamp(0.0, top);
    let x = |q: f64| -(1.0 - q).max(1e-12).ln();
    let interpolate = |q: f64| -> f64 {
        if q <= pts[0].0 {
            return pts[0].1;
        }
        for w in pts.windows(2) {
            let ((q0, v0), (q1, v1)) = (w[0], w[1]);
            if q <= q1 {
                if x(q1) <= x(q0) {
                    return v1;
                }
                let t = (x(q) - x(q0)) / (x(q1) - x(q0));
                return (v0.ln() + t * (v1.ln() - v0.ln())).exp();
            }
        }
        pts[pts.len() - 1].1
    };
    Some(Estimate {
        value,
        lo: interpolate(level(lo_rank)).min(value),
        hi: interpolate(level(hi_rank)).max(value),
    })
}

/// The mean rate of events over equal slices of [0, span] (by their times
/// `at`, each weighing `weight`), and the interval of its batch means by
/// Student's t. Events at one instant (the answers of one batch, completed
/// in a call or a few) are spread over the time since the instant before,
/// so that a slice's count does not jump by a whole batch as its edge
/// passes one. The first and last slices (the run's start, before answers
/// flow, and its drain) are kept: the run's figure counts them too, and
/// how long they take varies from run to run.
pub fn rate_interval(at: &[f64], weight: Option<&[f64]>, span: f64) -> Option<Estimate> {
    if at.is_empty() || span <= 0.0 {
        return None;
    }
    let mut events: Vec<(f64, f64)> = at
        .iter()
        .enumerate()
        .map(|(i, &t)| (t, weight.map_or(1.0, |w| w[i])))
        .collect();
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    // The cumulative weight at each instant, from (0, 0); answers less
    // than a hundredth of a slice apart (one batch's, over several
    // messages) count as one instant.
    let width = span / BATCHES as f64;
    let mut steps: Vec<(f64, f64)> = vec![(0.0, 0.0)];
    let mut total = 0.0;
    for (t, w) in events {
        total += w;
        let first = steps.len() == 1;
        match steps.last_mut() {
            Some(last) if !first && t - last.0 < width / 100.0 => *last = (t, total),
            _ => steps.push((t.max(0.0), total)),
        }
    }
    // The cumulative weight at `t`, straight between instants.
    let cumulative = |t: f64| -> f64 {
        let i = steps.partition_point(|s| s.0 < t);
        match (i.checked_sub(1).map(|j| steps[j]), steps.get(i)) {
            (Some((t0, w0)), Some(&(t1, w1))) if t1 > t0 => w0 + (w1 - w0) * (t - t0) / (t1 - t0),
            (_, Some(&(_, w1))) => w1,
            (Some((_, w0)), None) => w0,
            (None, None) => 0.0,
        }
    };
    let rates: Vec<f64> = (0..BATCHES)
        .map(|k| (cumulative((k + 1) as f64 * width) - cumulative(k as f64 * width)) / width)
        .collect();
    mean_interval(&rates)
}

/// The mean of `values` and its interval by Student's t (two or more).
pub fn mean_interval(values: &[f64]) -> Option<Estimate> {
    let k = values.len();
    if k < 2 {
        return None;
    }
    let m = values.iter().sum::<f64>() / k as f64;
    let s = (values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (k - 1) as f64).sqrt();
    let half = t_quantile((k - 1) as f64) * s / (k as f64).sqrt();
    Some(Estimate {
        value: m,
        lo: m - half,
        hi: m + half,
    })
}

/// The change of two one-run sides from their intervals (MOVER on the log
/// scale). `None` where a value is not positive.
pub fn change_from_intervals(base: Estimate, new: Estimate) -> Option<Change> {
    if [base.value, base.lo, new.value, new.lo]
        .iter()
        .any(|&v| v <= 0.0)
    {
        return None;
    }
    let (b, bl, bh) = (base.value.ln(), base.lo.ln(), base.hi.ln());
    let (n, nl, nh) = (new.value.ln(), new.lo.ln(), new.hi.ln());
    let d = n - b;
    let lo = d - ((n - nl).powi(2) + (bh - b).powi(2)).sqrt();
    let hi = d + ((nh - n).powi(2) + (b - bl).powi(2)).sqrt();
    let pct = |x: f64| (x.exp() - 1.0) * 100.0;
    Some(Change {
        pct: pct(d),
        lo: pct(lo),
        hi: pct(hi),
    })
}

/// The change of the means of repeated runs, by Student's t: Welch's
/// where both sides have two runs or more, else the spread of the side
/// that has them for both. `None` with one run a side or a zero base.
pub fn change_from_runs(base: &[f64], new: &[f64]) -> Option<Change> {
    let (kb, kn) = (base.len() as f64, new.len() as f64);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let var =
        |v: &[f64], m: f64| v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64;
    if base.is_empty() || new.is_empty() || (base.len() < 2 && new.len() < 2) {
        return None;
    }
    let (mb, mn) = (mean(base), mean(new));
    if mb == 0.0 {
        return None;
    }
    let (se, df) = match (base.len() >= 2, new.len() >= 2) {
        (true, true) => {
            let (vb, vn) = (var(base, mb) / kb, var(new, mn) / kn);
            let se2 = vb + vn;
            let df = match se2 > 0.0 {
                true => se2.powi(2) / (vb.powi(2) / (kb - 1.0) + vn.powi(2) / (kn - 1.0)),
                false => kb + kn - 2.0,
            };
            (se2.sqrt(), df)
        }
        (true, false) => (
            var(base, mb).sqrt() * (1.0 / kb + 1.0 / kn).sqrt(),
            kb - 1.0,
        ),
        _ => (var(new, mn).sqrt() * (1.0 / kb + 1.0 / kn).sqrt(), kn - 1.0),
    };
    let d = mn - mb;
    let half = t_quantile(df) * se;
    Some(Change {
        pct: d / mb * 100.0,
        lo: (d - half) / mb * 100.0,
        hi: (d + half) / mb * 100.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift), for samples of known
    /// distributions.
    struct Rng(u64);
    impl Rng {
        fn uniform(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
        fn exp(&mut self) -> f64 {
            -(1.0 - self.uniform()).ln()
        }
    }

    #[test]
    fn students_t_and_the_binomial_ranks_are_the_textbook_ones() {
        assert!((t_quantile(1.0) - 12.706).abs() < 1e-3);
        assert!((t_quantile(19.0) - 2.093).abs() < 1e-3);
        assert!((t_quantile(1e6) - 1.960).abs() < 1e-3);
        // The median of 100: the classic table's 40th and 61st order
        // statistics (0-based 39 and 60).
        let (lo, hi) = rank_interval(100, 0.5);
        assert_eq!((lo, hi), (39.0, 60.0));
    }

    #[test]
    fn independent_samples_keep_their_size_and_the_interval_covers_the_truth() {
        // p99 of Exp(1) is ln(100) = 4.605; 200 trials of 5,000 samples.
        let truth = 100f64.ln();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut covered = 0;
        let mut n_eff_sum = 0.0;
        for _ in 0..200 {
            let seq: Vec<f64> = (0..5_000).map(|_| rng.exp()).collect();
            let q = quantile_interval(&seq, 0.99).unwrap();
            n_eff_sum += q.n_eff;
            if q.estimate.lo <= truth && truth <= q.estimate.hi {
                covered += 1;
            }
        }
        // 95 % nominal: binomially 190 of 200 give or take 6.
        assert!((180..=200).contains(&covered), "{covered} of 200");
        let mean_n_eff = n_eff_sum / 200.0;
        assert!(mean_n_eff > 3_500.0, "{mean_n_eff}");
    }

    #[test]
    fn correlated_samples_widen_the_interval_and_keep_its_coverage() {
        // A queue's waiting times (Lindley's recursion) at 80 % load: long
        // runs of slow samples. p99 of the stationary M/M/1 waiting time at
        // rho = 0.8, service 1: ln(rho / 0.01) / (1 - rho) = 21.91.
        let truth = (0.8f64 / 0.01).ln() / 0.2;
        let mut rng = Rng(12345);
        let (mut covered, mut iid_covered, mut n_eff_sum) = (0, 0, 0.0);
        let trials = 40;
        for _ in 0..trials {
            let mut w = 0.0f64;
            let mut seq = Vec::with_capacity(50_000);
            for _ in 0..60_000 {
                w = (w + rng.exp() - rng.exp() / 0.8).max(0.0);
                seq.push(w);
            }
            let seq = &seq[10_000..];
            let q = quantile_interval(seq, 0.99).unwrap();
            n_eff_sum += q.n_eff;
            if q.estimate.lo <= truth && truth <= q.estimate.hi {
                covered += 1;
            }
            // What the same ranks give if the samples were independent.
            let mut sorted = seq.to_vec();
            sorted.sort_by(f64::total_cmp);
            let (lo, hi) = rank_interval(seq.len() as u64, 0.99);
            if sorted[lo as usize] <= truth && truth <= sorted[hi as usize] {
                iid_covered += 1;
            }
        }
        let n_eff = n_eff_sum / trials as f64;
        assert!(n_eff < 10_000.0, "n_eff {n_eff} of 50,000");
        // Measured: 17 and 90 of 100 trials.
        assert!(
            iid_covered < 20,
            "independent ranks cover {iid_covered} of {trials}"
        );
        assert!(covered >= 32, "covered {covered} of {trials}");
    }

    #[test]
    fn moverss_change_of_equal_sides_is_zero_and_within_its_interval() {
        let e = Estimate {
            value: 10.0,
            lo: 9.0,
            hi: 11.5,
        };
        let c = change_from_intervals(e, e).unwrap();
        assert!(c.pct.abs() < 1e-12 && c.lo < 0.0 && c.hi > 0.0, "{c:?}");
        // 10 % slower, with tight intervals: all of it above zero.
        let tight = |v: f64| Estimate {
            value: v,
            lo: v * 0.99,
            hi: v * 1.01,
        };
        let c = change_from_intervals(tight(10.0), tight(11.0)).unwrap();
        assert!(
            (c.pct - 10.0).abs() < 1e-9 && c.lo > 7.0 && c.hi < 13.0,
            "{c:?}"
        );
        assert!(change_from_intervals(tight(0.0), tight(1.0)).is_none());
    }

    #[test]
    fn repeated_runs_give_welchs_or_the_pooled_interval() {
        // Welch: means 100 and 110, sd 1 each, 3 runs a side: se = 0.816,
        // df = 4, t = 2.776: 10 +- 2.27 %.
        let c = change_from_runs(&[99.0, 100.0, 101.0], &[109.0, 110.0, 111.0]).unwrap();
        assert!((c.pct - 10.0).abs() < 1e-9);
        assert!(
            (c.hi - c.pct - 2.776 * (2.0f64 / 3.0).sqrt()).abs() < 1e-2,
            "{c:?}"
        );
        // One run against three: the three's spread for both, df = 2.
        let c = change_from_runs(&[100.0], &[109.0, 110.0, 111.0]).unwrap();
        let half = 4.303 * (1.0f64 + 1.0 / 3.0).sqrt();
        assert!((c.hi - c.pct - half).abs() < 1e-2, "{c:?}");
        assert!(change_from_runs(&[100.0], &[110.0]).is_none());
        // Identical figures: no change, and nothing around it.
        let c = change_from_runs(&[5.0, 5.0], &[5.0, 5.0]).unwrap();
        assert_eq!((c.pct, c.lo, c.hi), (0.0, 0.0, 0.0));
    }

    #[test]
    fn reported_percentiles_bracket_the_interval() {
        // Exp(1) latencies in ms: p -> -ln(1 - p).
        let q = |p: f64| -(1.0f64 - p).ln();
        let reported: Vec<(f64, f64)> = [0.5, 0.9, 0.95, 0.97, 0.99, 0.999]
            .iter()
            .map(|&p| (p, q(p)))
            .chain([(1.0, q(0.9999))])
            .collect();
        let e = quantile_from_reported(&reported, 10_000, 0.99).unwrap();
        // The exact ranks' quantiles, which the exponential's straight line
        // in log(1-p) interpolates closely.
        let (lo, hi) = rank_interval(10_000, 0.99);
        assert!((e.lo - q(lo / 10_000.0)).abs() < 0.05, "{e:?}");
        assert!((e.hi - q(hi / 10_000.0)).abs() < 0.05, "{e:?}");
        assert!(e.lo < e.value && e.value < e.hi);
        assert!(quantile_from_reported(&reported, 10_000, 0.42).is_none());
    }

    #[test]
    fn a_steady_rate_has_a_narrow_interval_in_batches_too() {
        let at: Vec<f64> = (1..=10_000).map(|i| i as f64 / 1000.0).collect();
        let e = rate_interval(&at, None, 10.0).unwrap();
        assert!(
            (e.value - 1000.0).abs() < 1e-6 && e.hi - e.lo < 1e-6,
            "{e:?}"
        );
        // The same rate in batches of 16 answered at once, every 16 ms:
        // counted per slice they would jump by 16 (a third of a slice).
        let lumps: Vec<f64> = (1..=10_000)
            .map(|i| ((i + 15) / 16 * 16) as f64 / 1000.0)
            .collect();
        let e = rate_interval(&lumps, None, 10.0).unwrap();
        assert!((e.value - 1000.0).abs() < 1.0, "{e:?}");
        assert!(e.hi - e.lo < 5.0, "{e:?}");
    }
}
