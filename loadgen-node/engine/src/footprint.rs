//! What a test will hold in memory and write to its logs, worked out from
//! its effective settings before it starts: the samples loaded at once and
//! their bytes, the samples whose bookkeeping it plans, the samples and
//! queries it can issue (the trace), and the accuracy-log entries it can
//! write. Plain arithmetic over the same loadable sets, query plans and
//! accuracy-log draws the test will use; the caller hands in the sizes (of
//! each sample, of an answer) and compares the totals with the host it
//! runs on.

use crate::accuracy_log;
use crate::config::PLANNED_SAMPLE_BYTES;
use crate::loadable::generate_loadable_sets;
use crate::querygen::{QueryGenerator, RunKind};
use crate::sequence::{AccuracySampling, Sequencer};
use crate::settings::{EffectiveSettings, Scenario, TestMode};
use crate::sut::QuerySampleIndex;
use crate::trace_log;

/// Bytes of a test's detail log and summary, whatever its length: their
/// records are per series, not per sample.
pub const OTHER_LOG_BYTES: u64 = 512 << 10;

/// Bytes of a trace besides its samples: header, footer, and the spans of
/// loading and unloading samples.
const TRACE_FIXED_BYTES: u64 = 64 << 10;

/// Bytes of an accuracy log besides its entries: its brackets.
const ACCURACY_FIXED_BYTES: u64 = 4;

/// Bytes of an LLM's first token in the accuracy log: one token id.
const FIRST_TOKEN_BYTES: u64 = 4;

/// The most bytes a test's logs reach, in this engine's formats (the
/// official LoadGen's accuracy log is the same; its trace differs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogBytes {
    /// `mlperf_log_accuracy.json`.
    pub accuracy: u64,
    /// `mlperf_log_trace.json`; 0 without a trace.
    pub trace: u64,
    /// The detail log and the summary ([`OTHER_LOG_BYTES`]).
    pub others: u64,
}

impl LogBytes {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.accuracy
            .saturating_add(self.trace)
            .saturating_add(self.others)
    }
}

/// The lengths of the loadable sets of `count` samples of a QSL of
/// `total`, as `generate_loadable_sets` cuts them: (samples loaded with the
/// MultiStream padding, the distribution end before it).
fn set_lengths(
    eff: &EffectiveSettings,
    count: u64,
    total: usize,
) -> impl Iterator<Item = (usize, usize)> {
    let n = usize::try_from(count).unwrap_or(usize::MAX).min(total);
    let chunk = match usize::try_from(eff.performance_sample_count) {
        Ok(0) | Err(_) => n.max(1),
        Ok(c) => c,
    };
    let padding = match eff.scenario {
        Scenario::MultiStream => {
            usize::try_from(eff.samples_per_query.saturating_sub(1)).unwrap_or(usize::MAX)
        }
        _ => 0,
    };
    let (full, rest) = (n / chunk, n % chunk);
    std::iter::repeat_n(chunk, full)
        .chain((rest > 0).then_some(rest))
        .map(move |c| (c.saturating_add(padding), c))
}

/// A test's memory and log volume, in samples, entries and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// The most samples the QSL holds at once (the performance set, or
    /// one accuracy set).
    pub loaded_samples: u64,
    /// Their bytes, as the caller sized each sample.
    pub loaded_bytes: u64,
    /// Samples the test keeps track of before it issues anything (see
    /// [`EffectiveSettings::planned_samples`]).
    pub planned_samples: u64,
    /// Samples the test can issue, over all its series: those of every
    /// query it generates (it stops before the last ones when its
    /// duration and count are met).
    pub issued_samples: u64,
    /// Queries the test can issue.
    pub issued_queries: u64,
    /// Accuracy-log entries it can write: every sample of an accuracy
    /// series, and those of the generated performance queries whose draw
    /// logs them.
    pub logged_samples: u64,
}

/// How the caller sizes the samples a QSL holds.
#[derive(Clone, Copy)]
pub enum SampleBytes<'a> {
    /// Every sample this many bytes (a synthetic data set).
    Each(u64),
    /// Sample `i` this many bytes (files of their own sizes).
    ByIndex(&'a dyn Fn(QuerySampleIndex) -> u64),
}

impl Footprint {
    /// The footprint of a test of `eff` over a QSL of `qsl_total` samples
    /// sized as `sample_bytes` says. FindPeakPerformance counts its first
    /// series only.
    pub fn of(
        eff: &EffectiveSettings,
        qsl_total: usize,
        sample_bytes: SampleBytes<'_>,
    ) -> Footprint {
        let mut fp = Footprint {
            planned_samples: eff.planned_samples(),
            ..Footprint::default()
        };
        // The accuracy-log draws run on across series, as in the test:
        // those of the accuracy series come first.
        let (mut drawn_samples, mut drawn_queries) = (0u64, 0u64);
        let accuracy = matches!(eff.mode, TestMode::AccuracyOnly | TestMode::SubmissionRun);
        if accuracy {
            for (len, end) in set_lengths(eff, eff.accuracy_sample_count, qsl_total) {
                let plan = QueryGenerator::plan_for(eff, len, end, RunKind::Accuracy);
                fp.issued(plan.sample_count, plan.query_count);
                fp.logged_samples = fp.logged_samples.saturating_add(plan.sample_count);
                drawn_samples = drawn_samples.saturating_add(plan.sample_count);
                drawn_queries = drawn_queries.saturating_add(plan.query_count);
            }
            fp.loaded(
                eff,
                eff.accuracy_sample_count,
                qsl_total,
                sample_bytes,
                false,
            );
        }
        if eff.mode != TestMode::AccuracyOnly {
            let first = set_lengths(eff, eff.performance_sample_count, qsl_total).next();
            if let Some((len, end)) = first {
                let plan = QueryGenerator::plan_for(eff, len, end, RunKind::Performance);
                fp.issued(plan.sample_count, plan.query_count);
                let sampling = AccuracySampling::new(eff, false);
                let logged = match sampling.logs_any() {
                    true => {
                        let mut sequencer = Sequencer::new();
                        sequencer.skip(drawn_samples, drawn_queries);
                        sequencer.count_logged(plan.sample_count, &sampling)
                    }
                    false => 0,
                };
                fp.logged_samples = fp.logged_samples.saturating_add(logged);
                fp.loaded(
                    eff,
                    eff.performance_sample_count,
                    qsl_total,
                    sample_bytes,
                    true,
                );
            }
        }
        fp
    }

    /// The largest of the loadable sets of `count` samples (or the first
    /// one only) and its bytes. Sets are drawn only for samples of sizes of
    /// their own.
    fn loaded(
        &mut self,
        eff: &EffectiveSettings,
        count: u64,
        total: usize,
        sample_bytes: SampleBytes<'_>,
        first_only: bool,
    ) {
        let sets = if first_only { 1 } else { usize::MAX };
        let most = set_lengths(eff, count, total)
            .take(sets)
            .map(|(_, end)| end)
            .max()
            .unwrap_or(0);
        self.loaded_samples = self.loaded_samples.max(most as u64);
        let bytes = match sample_bytes {
            SampleBytes::Each(b) => (most as u64).saturating_mul(b),
            SampleBytes::ByIndex(size) => {
                let count = usize::try_from(count).unwrap_or(usize::MAX);
                generate_loadable_sets(eff, count, total)
                    .iter()
                    .take(sets)
                    .map(|set| {
                        set.samples[..set.distribution_end]
                            .iter()
                            .fold(0u64, |sum, &i| sum.saturating_add(size(i)))
                    })
                    .max()
                    .unwrap_or(0)
            }
        };
        self.loaded_bytes = self.loaded_bytes.max(bytes);
    }

    fn issued(&mut self, samples: u64, queries: u64) {
        self.issued_samples = self.issued_samples.saturating_add(samples);
        self.issued_queries = self.issued_queries.saturating_add(queries);
    }

    /// Bytes of memory the test needs of its host: the loaded samples and
    /// the bookkeeping of the planned ones ([`PLANNED_SAMPLE_BYTES`] each).
    pub fn memory_bytes(&self) -> u64 {
        self.loaded_bytes
            .saturating_add(self.planned_samples.saturating_mul(PLANNED_SAMPLE_BYTES))
    }

    /// The most bytes the logs of this test of `eff` reach, each logged
    /// answer `answer_bytes` long; `trace`: whether it writes a trace.
    pub fn log_bytes(&self, eff: &EffectiveSettings, answer_bytes: u64, trace: bool) -> LogBytes {
        let first_token = eff.use_token_latencies && eff.scenario != Scenario::Offline;
        let tokens =
            eff.use_token_latencies
                .then_some(if first_token { FIRST_TOKEN_BYTES } else { 0 });
        let entry = accuracy_log::entry_bytes(answer_bytes, tokens);
        let per_sample = trace_log::sample_bytes(eff.scenario == Scenario::Server, first_token);
        LogBytes {
            accuracy: self
                .logged_samples
                .saturating_mul(entry)
                .saturating_add(ACCURACY_FIXED_BYTES),
            trace: match trace {
                true => self
                    .issued_samples
                    .saturating_mul(per_sample)
                    .saturating_add(TRACE_FIXED_BYTES),
                false => 0,
            },
            others: OTHER_LOG_BYTES,
        }
    }
}
