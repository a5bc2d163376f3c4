//! The ids and draws a test hands out, as the official LoadGen does over its
//! pre-generated queries (`loadgen.cc`, `GenerateQueries` and
//! `IssueQueries`): sample and query sequence ids that run on across series
//! and phases, and one accuracy-log draw per generated sample, including the
//! samples of queries generated but never issued. Pure bookkeeping: no
//! clock, no I/O.

use crate::rng::Mt19937;
use crate::settings::{EffectiveSettings, Scenario};

pub(crate) struct Sequencer {
    next_seq: u64,
    next_query_seq: u64,
    /// The official LoadGen's default-seeded accuracy-log stream
    /// (`issue_query_controller.h`, `NextAccLogRng`).
    acc_value_rng: Mt19937,
}

impl Sequencer {
    pub(crate) fn new() -> Self {
        Self {
            next_seq: 0,
            next_query_seq: 0,
            acc_value_rng: Mt19937::new(5489),
        }
    }

    /// The sequence id of the next query.
    pub(crate) fn next_query(&mut self) -> u64 {
        self.next_query_seq += 1;
        self.next_query_seq - 1
    }

    /// The last query's sequence id, if there was one.
    pub(crate) fn last_query_seq(&self) -> Option<u64> {
        self.next_query_seq.checked_sub(1)
    }

    /// The next sample's sequence id and whether it is accuracy-logged.
    #[inline]
    pub(crate) fn next_sample(&mut self, sampling: &AccuracySampling) -> (u64, bool) {
        let seq = self.next_seq;
        self.next_seq += 1;
        (seq, sampling.logs(self.acc_value_rng.canonical()))
    }

    /// A query generated but not issued still takes its ids and draws.
    pub(crate) fn skip_query(&mut self, samples: usize) {
        self.skip(samples as u64, 1);
    }

    /// Of the next `samples` samples, how many `sampling` logs (they are
    /// drawn for, as if issued).
    pub(crate) fn count_logged(&mut self, samples: u64, sampling: &AccuracySampling) -> u64 {
        self.next_seq += samples;
        (0..samples)
            .filter(|_| sampling.logs(self.acc_value_rng.canonical()))
            .count() as u64
    }

    /// `samples` samples in `queries` queries generated but not issued.
    pub(crate) fn skip(&mut self, samples: u64, queries: u64) {
        self.next_query_seq += queries;
        self.next_seq += samples;
        for _ in 0..samples {
            self.acc_value_rng.canonical();
        }
    }
}

/// Which samples go to the accuracy log (`loadgen.cc`, `IssueQueries`: `accuracy_log_sampling_target`, `accuracy_log_probability`).
pub(crate) struct AccuracySampling {
    all: bool,
    offset: f64,
    probability: f64,
}

impl AccuracySampling {
    pub(crate) fn new(eff: &EffectiveSettings, accuracy: bool) -> Self {
        let offset = Mt19937::new(eff.accuracy_log_rng_seed).canonical();
        let mut probability = eff.accuracy_log_probability;
        if eff.accuracy_log_sampling_target > 0 {
            let mut expected = (eff.target_qps * eff.min_duration_ms as f64 / 1000.0) as u64;
            let minimum = if eff.scenario == Scenario::Offline {
                eff.min_sample_count
            } else {
                expected = expected.wrapping_mul(eff.samples_per_query);
                eff.min_query_count.wrapping_mul(eff.samples_per_query)
            };
            let expected = expected.max(minimum);
            probability = eff.accuracy_log_sampling_target as f64 / expected as f64;
        }
        Self {
            all: accuracy,
            offset,
            probability,
        }
    }

    /// Whether draws log samples. At a probability of 0 only a draw that
    /// lands exactly on the offset's complement would (one in 2^53): none.
    pub(crate) fn logs_any(&self) -> bool {
        self.all || self.probability > 0.0
    }

    #[inline]
    pub(crate) fn logs(&self, value: f64) -> bool {
        let mut w = value + self.offset;
        if w >= 1.0 {
            w -= 1.0;
        }
        self.all || w <= self.probability
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn everything_logged() -> AccuracySampling {
        AccuracySampling {
            all: true,
            offset: 0.0,
            probability: 0.0,
        }
    }

    #[test]
    fn skipped_queries_take_their_ids_and_draws() {
        let s = everything_logged();
        let (mut a, mut b) = (Sequencer::new(), Sequencer::new());
        // a: issue 3 samples in one query; b: skip the same query.
        a.next_query();
        for _ in 0..3 {
            a.next_sample(&s);
        }
        b.skip_query(3);
        assert_eq!(a.next_sample(&s), b.next_sample(&s));
        assert_eq!(a.next_query(), b.next_query());
        assert_eq!(a.acc_value_rng.canonical(), b.acc_value_rng.canonical());
        assert_eq!(a.last_query_seq(), Some(1));
        assert_eq!(Sequencer::new().last_query_seq(), None);
    }

    #[test]
    fn the_draw_decides_logging_with_the_offset_wrapped_below_one() {
        let s = AccuracySampling {
            all: false,
            offset: 0.75,
            probability: 0.5,
        };
        assert!(s.logs(0.5)); // 1.25 wraps to 0.25
        assert!(!s.logs(0.1)); // 0.85
        assert!(everything_logged().logs(0.99));
    }
}
