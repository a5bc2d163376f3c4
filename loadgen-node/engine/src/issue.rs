//! The issuing loop of one series (`loadgen.cc`, `IssueQueries`;
//! `issue_query_controller.cc`, `IssueQueriesInternal`): take the next
//! generated query, wait on the [`Clock`] until it is due, give its samples
//! their ids and publish them, hand them to the SUT (overdue Server queries
//! coalesced into the same call), check the stop rules.
//!
//! This is the only timed code of a series. It writes no logs: how the
//! series went comes back as an [`Issued`] for the runner to record.

use std::time::SystemTime;

use crate::clock::Clock;
use crate::completion::{Completer, Ring};
use crate::live::LiveStats;
use crate::loadable::LoadableSet;
use crate::querygen::{QueryGenerator, RunKind};
use crate::sequence::{AccuracySampling, Sequencer};
use crate::settings::{EffectiveSettings, Scenario};
use crate::sut::{QuerySample, SystemUnderTest};

/// What the issuing loop reads and advances.
pub(crate) struct Issuer<'t> {
    pub(crate) sut: &'t dyn SystemUnderTest,
    pub(crate) clock: &'t dyn Clock,
    pub(crate) completer: &'t Ring,
    /// Ids and accuracy-log draws, which run on across series.
    pub(crate) sequencer: &'t mut Sequencer,
    pub(crate) live: &'t LiveStats,
    /// Samples issued earlier in the test: the completion count this series
    /// starts from.
    pub(crate) issued_before: u64,
}

/// How the issuing of one series went.
pub(crate) struct Issued {
    /// Clock time of the series' start, the origin of its timings.
    pub(crate) start_ns: i64,
    /// Wall-clock time of the start (`power_begin`).
    pub(crate) start_wall: SystemTime,
    pub(crate) queries_issued: u64,
    pub(crate) samples_issued: u64,
    /// Queries and samples taken from the generator, issued or not.
    pub(crate) generated_queries: u64,
    pub(crate) generated_samples: u64,
    /// Clock times at which the last issued query was due and was issued,
    /// and its sequence id.
    pub(crate) last_scheduled_ns: i64,
    pub(crate) last_issued_ns: i64,
    pub(crate) last_query_seq: Option<u64>,
    /// The stop rule that ended the series, if one did.
    pub(crate) stop: Option<StopMessage>,
}

impl Issued {
    fn new(start_ns: i64) -> Self {
        Self {
            start_ns,
            start_wall: SystemTime::now(),
            queries_issued: 0,
            samples_issued: 0,
            generated_queries: 0,
            generated_samples: 0,
            last_scheduled_ns: 0,
            last_issued_ns: 0,
            last_query_seq: None,
            stop: None,
        }
    }

    /// A generated query that is never issued still takes its ids and
    /// draws, as in the official LoadGen's pre-generated list.
    fn skip(&mut self, sequencer: &mut Sequencer, samples: usize) {
        self.generated_queries += 1;
        self.generated_samples += samples as u64;
        sequencer.skip_query(samples);
    }

    fn record(&mut self, samples: usize, scheduled: i64, issued: i64, query_seq: Option<u64>) {
        self.generated_queries += 1;
        self.generated_samples += samples as u64;
        self.queries_issued += 1;
        self.last_scheduled_ns = scheduled;
        self.last_issued_ns = issued;
        self.last_query_seq = query_seq;
    }
}

impl Issuer<'_> {
    /// Issues the series' queries until the generator runs out, a stop rule
    /// holds or the run is aborted. Returns without waiting for the answers.
    pub(crate) fn run(
        mut self,
        eff: &EffectiveSettings,
        set: &LoadableSet,
        kind: RunKind,
    ) -> Issued {
        let completer = self.completer;
        // The SUT's handle on the same ring.
        let handle = Completer::from(completer.clone());
        let accuracy = kind == RunKind::Accuracy;
        let scenario = eff.scenario;
        let sampling = AccuracySampling::new(eff, accuracy);
        let coalesce = scenario == Scenario::Server && eff.server_coalesce_queries && !accuracy;

        let mut gen = QueryGenerator::new(eff, set, kind);
        let mut indices = Vec::new();
        let mut lookahead: Option<i64> = None;
        let mut next_indices = Vec::new();
        let mut samples: Vec<QuerySample> = Vec::new();
        let mut issued_total = self.issued_before;
        self.live.series_starting(!accuracy);
        let clock = self.clock;
        let start = clock.now_ns();
        let mut out = Issued::new(start);
        let target_latency = if scenario == Scenario::Server {
            eff.target_latency_ns as i64
        } else {
            0
        };
        self.live.begin_series(
            start,
            !accuracy,
            eff.target_latency_percentile,
            target_latency,
        );

        loop {
            let offset = match lookahead.take() {
                Some(o) => {
                    std::mem::swap(&mut indices, &mut next_indices);
                    o
                }
                None => match gen.next_query(&mut indices) {
                    Some(o) => o,
                    None => break,
                },
            };
            let (scheduled, issued) = match scenario {
                Scenario::SingleStream | Scenario::MultiStream => {
                    if !completer.wait_for(issued_total) {
                        // Aborted: this query was generated but never issued.
                        out.skip(self.sequencer, indices.len());
                        break;
                    }
                    let now = clock.now_ns();
                    (now, now)
                }
                Scenario::Server => {
                    let due = start + offset;
                    (due, clock.wait_until(due, &|| completer.aborted()))
                }
                Scenario::Offline => (start, clock.now_ns()),
            };
            if completer.aborted() {
                out.skip(self.sequencer, indices.len());
                break;
            }

            samples.clear();
            self.publish(&sampling, &indices, scheduled, issued, &mut samples);
            out.record(
                indices.len(),
                scheduled,
                issued,
                self.sequencer.last_query_seq(),
            );

            // Coalescing: overdue Server queries join this IssueQuery call,
            // each keeping its own scheduled time.
            if coalesce {
                while let Some(o) = gen.next_query(&mut next_indices) {
                    if start + o > issued {
                        lookahead = Some(o);
                        break;
                    }
                    self.publish(&sampling, &next_indices, start + o, issued, &mut samples);
                    out.record(
                        next_indices.len(),
                        start + o,
                        issued,
                        self.sequencer.last_query_seq(),
                    );
                }
            }

            self.sut.issue_query(&samples, &handle);
            issued_total += samples.len() as u64;
            self.live.set_issued(issued_total - self.issued_before);

            if accuracy {
                continue;
            }
            let stop = stop_rule(eff, out.queries_issued, issued - start, || {
                completer.completed() - self.issued_before
            });
            if stop.is_some() {
                out.stop = stop;
                break;
            }
        }
        if lookahead.is_some() {
            // Taken from the generator to see whether it was due, never issued.
            out.skip(self.sequencer, next_indices.len());
        }
        out.samples_issued = issued_total - self.issued_before;
        out
    }

    /// Assigns ids to one query's samples and appends them to `out`.
    #[inline]
    fn publish(
        &mut self,
        sampling: &AccuracySampling,
        indices: &[usize],
        scheduled: i64,
        issued: i64,
        out: &mut Vec<QuerySample>,
    ) {
        let query_seq = self.sequencer.next_query();
        for &index in indices {
            let (seq, log) = self.sequencer.next_sample(sampling);
            let id = self
                .completer
                .publish(seq, index, query_seq, scheduled, issued, log);
            out.push(QuerySample { id, index });
        }
    }
}

/// Why a performance series stopped issuing, as the detail log records it.
pub(crate) struct StopMessage {
    /// Both minimums were met; otherwise a limit cut the series short.
    pub(crate) natural: bool,
    pub(crate) text: String,
}

impl StopMessage {
    /// The detail-log key: an early end is an error.
    pub(crate) fn log_key(&self) -> &'static str {
        if self.natural {
            "generic_message"
        } else {
            "error_runtime"
        }
    }
}

/// The stop rules checked after each IssueQuery of a performance series
/// (`issue_query_controller.cc`, `IssueQueriesInternal`). `completed` is only
/// evaluated when needed.
fn stop_rule(
    eff: &EffectiveSettings,
    issued: u64,
    duration_ns: i64,
    completed: impl Fn() -> u64,
) -> Option<StopMessage> {
    let min_duration_ns = eff.target_duration_ms as i64 * 1_000_000;
    if eff.scenario == Scenario::Server {
        if eff.max_async_queries != 0 {
            let outstanding = issued.saturating_sub(completed());
            if outstanding > eff.max_async_queries {
                return Some(StopMessage {
                    natural: false,
                    text: format!("IssueQueryThread 0 Ending early: Too many outstanding queries. issued {issued} outstanding {outstanding}"),
                });
            }
        }
    } else if issued >= eff.min_query_count && duration_ns >= min_duration_ns {
        return Some(StopMessage {
            natural: true,
            text: "Ending naturally: Minimum query count and test duration met.".into(),
        });
    }
    if eff.max_query_count != 0 && issued >= eff.max_query_count {
        return Some(StopMessage {
            natural: false,
            text: format!(
                "IssueQueryThread 0 Ending early: Max query count reached. query_count {issued}"
            ),
        });
    }
    if eff.max_duration_ms != 0 && duration_ns > eff.max_duration_ms as i64 * 1_000_000 {
        return Some(StopMessage {
            natural: false,
            text: format!("IssueQueryThread 0 Ending early: Max test duration reached. duration_ns {duration_ns}"),
        });
    }
    None
}
