//! Early-stopping estimates (`early_stopping.cc`, `MinPassingQueriesFinder`; `results.cc`, `PerformanceSummary::EarlyStopping`): how many of the highest latencies
//! a run may discard and still claim its percentile with 99% confidence.
//!
//! The arithmetic follows the official LoadGen step by step (the same series, the same
//! search and the same interpolation of the search bounds), because the
//! printed counts and estimates must be identical.

use std::collections::BTreeMap;

use statrs::function::gamma::ln_gamma;

use crate::number_format::fixed1;
use crate::stats::LatencyHistogram;

const CONFIDENCE: f64 = 0.99;
const TOLERANCE: f64 = 0.0;

/// ln B(x, y).
fn ln_beta(x: f64, y: f64) -> f64 {
    ln_gamma(x) + ln_gamma(y) - ln_gamma(x + y)
}

/// Gauss hypergeometric 2F1(1, b; c; x) by its series.
fn hypergeometric(b: i64, c: i64, x: f64) -> f64 {
    let (b, c) = (b as f64, c as f64);
    let mut term = 1.0f64;
    let mut sum = 1.0f64;
    let mut i = 0.0f64;
    while term.abs() > 2f64.powi(-33) {
        term *= (b + i) * x / (c + i);
        sum += term;
        i += 1.0;
    }
    sum
}

/// Regularised incomplete beta function I_x(a, b).
fn incomplete_beta(x: f64, a: i64, b: i64) -> f64 {
    let (af, bf) = (a as f64, b as f64);
    (af * x.ln() + (bf - 1.0) * (1.0 - x).ln() - ln_beta(af, bf)).exp() / af
        * hypergeometric(1 - b, 1 + a, x / (x - 1.0))
}

/// Probability of at most `t` failures in `h + t` trials that each pass with
/// probability `p`.
fn odds(h: i64, t: i64, p: f64) -> f64 {
    incomplete_beta(p - TOLERANCE, h, t + 1)
}

/// The smallest number of passing queries that, with `t` failures, shows
/// the percentile `p` is met; memoised over one evaluation as the official LoadGen does,
/// since the cache narrows later searches and so decides their results.
struct MinPassing {
    p: f64,
    cache: BTreeMap<i64, i64>,
}

impl MinPassing {
    fn new(p: f64) -> Self {
        Self {
            p,
            cache: BTreeMap::new(),
        }
    }

    fn get(&mut self, t: i64) -> i64 {
        if let Some(&h) = self.cache.get(&t) {
            return h;
        }
        let p = self.p;
        let (mut x0, mut y0) = (-1i64, 0i64);
        let (mut x1, mut y1) = (
            0i64,
            ((1.0 - CONFIDENCE).ln() / (p - TOLERANCE).ln()).ceil() as i64,
        );
        let mut below = self.cache.range(..t).rev();
        if let Some((&k, &v)) = below.next() {
            (x1, y1) = (k, v);
            if let Some((&k, &v)) = below.next() {
                (x0, y0) = (k, v);
            }
        }
        let min_slope = (p - TOLERANCE) / (1.0 - p + TOLERANCE);
        // The official LoadGen multiplies where a slope would divide; kept for identical bounds.
        let max_slope = ((y1 - y0) * (x1 - x0)) as f64;
        let lo = ((t - x1) as f64 * min_slope + y1 as f64) as i64;
        let hi = ((t - x1) as f64 * max_slope + y1 as f64 + 1.0) as i64;
        let h = self.search(lo, hi, t);
        self.cache.insert(t, h);
        h
    }

    /// Lower bound on `[lo, hi)` of the first `h` with enough confidence.
    fn search(&self, mut lo: i64, hi: i64, t: i64) -> i64 {
        let mut n = hi - lo;
        while n > 0 {
            let step = n / 2;
            let h = lo + step;
            if odds(h, t, self.p) < 1.0 - CONFIDENCE {
                n = step;
            } else {
                lo = h + 1;
                n -= step + 1;
            }
        }
        lo
    }
}

/// One early-stopping evaluation: its verdict and the summary text.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct EarlyStopping {
    pub met: bool,
    pub text: String,
    /// The percentile estimate (SingleStream/MultiStream), when computed.
    pub estimate: Option<i64>,
    /// SingleStream's additional 99th-percentile estimate.
    pub estimate_p99: Option<i64>,
}

/// How many of the highest latencies may be discarded: `(h_min, t)`, or
/// `Err(h_min)` when fewer than `h_min + 1` queries ran.
fn discard_count(queries: i64, p: f64) -> Result<(i64, i64), i64> {
    let mut mp = MinPassing::new(p);
    let h_min = mp.get(1);
    if queries < h_min + 1 {
        return Err(h_min);
    }
    let mut t = 1;
    for i in 2..=queries {
        if queries < mp.get(i) + i {
            t = i - 1;
            break;
        }
    }
    Ok((h_min, t))
}

/// SingleStream and MultiStream: the estimate of the `p` percentile over
/// `latencies` from `queries` queries. SingleStream (`with_p99`) also
/// estimates the 99th percentile, which never fails the run.
pub(crate) fn percentile_estimate(
    latencies: &LatencyHistogram,
    queries: u64,
    p: f64,
    with_p99: bool,
) -> EarlyStopping {
    let q = queries as i64;
    let (h_min, t) = match discard_count(q, p) {
        Ok(v) => v,
        Err(h_min) => {
            return EarlyStopping {
                met: false,
                text: format!(
                    " * Only processed {q} queries.\n * Need to process at least {} queries for early stopping.",
                    h_min + 1
                ),
                ..EarlyStopping::default()
            }
        }
    };
    let estimate = latencies.at_rank((q - t) as u64);
    let mut text = format!(
        " * Processed at least {} queries ({q}).\n * Would discard {} highest latency queries.\n * Early stopping {}th percentile estimate: {estimate}",
        h_min + 1,
        t - 1,
        fixed1(p * 100.0)
    );
    let mut estimate_p99 = None;
    if with_p99 {
        const P99: f64 = 0.99;
        match discard_count(q, P99) {
            Ok((_, t)) => {
                let e = latencies.at_rank((q - t) as u64);
                text.push_str(&format!(
                    "\n * Early stopping {}th percentile estimate: {e}",
                    fixed1(P99 * 100.0)
                ));
                estimate_p99 = Some(e);
            }
            Err(h_min) => text.push_str(&format!(
                "\n * Not enough queries processed for {}th percentile\n early stopping estimate (would need to process at\n least {} total queries).",
                fixed1(P99 * 100.0),
                h_min + 1
            )),
        }
    }
    EarlyStopping {
        met: true,
        text,
        estimate: Some(estimate),
        estimate_p99,
    }
}

/// Server: with `over` latencies above the bound among `queries`, is the
/// percentile `p` shown to hold?
pub(crate) fn server(over: u64, queries: u64, p: f64) -> EarlyStopping {
    let t = over as i64;
    let q = queries as i64;
    let h = MinPassing::new(p).get(t);
    if q >= h + t {
        EarlyStopping {
            met: true,
            text: " * Run successful.".into(),
            ..EarlyStopping::default()
        }
    } else {
        EarlyStopping {
            met: false,
            text: format!(
                " * Run unsuccessful.\n * Processed {q} queries.\n * Would need to run at least {} more queries,\n with the run being successful if every additional\n query were under latency.",
                h + t - q
            ),
            ..EarlyStopping::default()
        }
    }
}

/// Early stopping as seen while a series runs, for progress displays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outlook {
    /// This many more queries are needed, every one of them under the bound.
    Needs(u64),
    /// Met so far.
    Met {
        /// Server: how many more queries over the bound the queries done so
        /// far could absorb.
        spare_over: Option<u64>,
    },
}

/// Server: the outlook with `over` of `queries` above the bound.
pub fn server_outlook(over: u64, queries: u64, p: f64) -> Outlook {
    let needed = |t: u64| MinPassing::new(p).get(t as i64) as u64 + t;
    let need = needed(over);
    if queries < need {
        return Outlook::Needs(need - queries);
    }
    // needed(t) grows with t, by at least 1/(1-p) a step: find the largest
    // t that the queries still meet.
    let cap = (queries as f64 * (1.0 - p)).ceil() as u64 + 1;
    let (mut lo, mut hi) = (over, cap.clamp(over, queries));
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if needed(mid) <= queries {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Outlook::Met {
        spare_over: Some(lo - over),
    }
}

/// SingleStream and MultiStream: the outlook after `queries` queries.
pub fn percentile_outlook(queries: u64, p: f64) -> Outlook {
    let least = MinPassing::new(p).get(1) as u64 + 1;
    match queries < least {
        true => Outlook::Needs(least - queries),
        false => Outlook::Met { spare_over: None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_min_passing_values() {
        assert_eq!(MinPassing::new(0.90).get(1), 63);
        assert_eq!(MinPassing::new(0.99).get(1), 661);
        assert_eq!(MinPassing::new(0.999).get(1), 6635);
        assert_eq!(MinPassing::new(0.99).get(0), 459);
        assert_eq!(MinPassing::new(0.99).get(20), 3284);
    }

    #[test]
    fn single_stream_reference_run() {
        // singlestream_perf_1024: 1024 queries at p90 discard 79.
        let mut h = LatencyHistogram::new();
        for i in 0..1024 {
            h.record(1000 + i);
        }
        let es = percentile_estimate(&h, 1024, 0.9, true);
        assert!(es.met);
        assert!(es
            .text
            .starts_with(" * Processed at least 64 queries (1024).\n * Would discard 79 highest latency queries.\n"));
        assert_eq!(es.estimate, Some(1000 + 1024 - 80));
        assert!(es.estimate_p99.is_some());
    }

    #[test]
    fn too_few_queries() {
        let h = LatencyHistogram::new();
        let es = percentile_estimate(&h, 300, 0.99, false);
        assert!(!es.met);
        assert_eq!(
            es.text,
            " * Only processed 300 queries.\n * Need to process at least 662 queries for early stopping."
        );
        // 200 queries at p90: the p99 part only reports what it would need.
        let mut h = LatencyHistogram::new();
        for i in 0..200 {
            h.record(i);
        }
        let es = percentile_estimate(&h, 200, 0.9, true);
        assert!(es.met);
        assert!(es.text.contains("Would discard 9 highest"));
        assert!(es.text.ends_with("\n least 662 total queries)."));
        assert_eq!(es.estimate_p99, None);
    }

    #[test]
    fn outlooks_agree_with_the_summary_rules() {
        // The summary's "would need 2304 more" for 20 over of 1000.
        assert_eq!(server_outlook(20, 1000, 0.99), Outlook::Needs(2304));
        // 0 over needs 459 queries; 1 over needs 661 + 1.
        assert_eq!(server_outlook(0, 400, 0.99), Outlook::Needs(59));
        let Outlook::Met {
            spare_over: Some(spare),
        } = server_outlook(3, 100_000, 0.99)
        else {
            panic!("100000 queries with 3 over meet p99");
        };
        // The spare is exactly the edge of the rule.
        assert!(server(3 + spare, 100_000, 0.99).met);
        assert!(!server(3 + spare + 1, 100_000, 0.99).met);
        assert_eq!(percentile_outlook(300, 0.99), Outlook::Needs(362));
        assert_eq!(
            percentile_outlook(1024, 0.9),
            Outlook::Met { spare_over: None }
        );
    }

    #[test]
    fn server_rule() {
        assert_eq!(server(0, 1036, 0.99).text, " * Run successful.");
        let es = server(20, 1000, 0.99);
        assert!(!es.met);
        assert!(es
            .text
            .contains("Would need to run at least 2304 more queries"));
    }
}
