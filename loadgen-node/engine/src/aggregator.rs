//! The completion-processing thread: turns completion records into latency
//! statistics, accuracy-log entries, trace events and the per-sample side
//! file, off the timed path.

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::{mpsc, Arc, Condvar, Mutex, PoisonError};

use crate::accuracy_log::{AccuracyEntry, AccuracyLog};
use crate::disk::Disk;
use crate::latency_file::{LatencyWriter, SampleRecord, SeriesKind};
use crate::live::{LiveStats, PERCENTILE_EVERY_NS};
use crate::sample::QuerySampleIndex;
use crate::settings::Scenario;
use crate::stats::LatencyHistogram;
use crate::trace_log::{SampleSpan, TraceLog};

/// Bytes of accuracy-logged answers queued for the aggregator at most. Past
/// it a completing thread waits for the log to catch up (an answer larger
/// than this waits for an empty queue), so that answers of hundreds of MB
/// (WAN-2.2's videos) cannot pile up in memory faster than the log is
/// written.
pub(crate) const MAX_LOGGED_BYTES: usize = 1 << 30;

/// The bytes of logged answers on their way to the accuracy log.
#[derive(Default)]
pub(crate) struct LogBudget {
    queued: Mutex<usize>,
    freed: Condvar,
}

impl LogBudget {
    /// A copy of `data` for the log, once the queue has room for it.
    pub(crate) fn take(self: &Arc<Self>, data: &[u8]) -> LoggedAnswer {
        let n = data.len();
        let mut queued = self.queued.lock().unwrap_or_else(PoisonError::into_inner);
        while !has_room(*queued, n, MAX_LOGGED_BYTES) {
            queued = self
                .freed
                .wait(queued)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *queued += n;
        drop(queued);
        LoggedAnswer {
            bytes: data.into(),
            budget: self.clone(),
        }
    }
}

/// Whether `n` more bytes may join `queued` under `limit`: always into an
/// empty queue, so that one answer larger than the limit still goes.
fn has_room(queued: usize, n: usize, limit: usize) -> bool {
    queued == 0 || queued.saturating_add(n) <= limit
}

/// A logged answer's bytes; dropping it (once written) gives its room back.
pub(crate) struct LoggedAnswer {
    bytes: Box<[u8]>,
    budget: Arc<LogBudget>,
}

impl std::ops::Deref for LoggedAnswer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl std::fmt::Debug for LoggedAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LoggedAnswer({} bytes)", self.bytes.len())
    }
}

impl Drop for LoggedAnswer {
    fn drop(&mut self) {
        let mut queued = self
            .budget
            .queued
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *queued -= self.bytes.len();
        self.budget.freed.notify_all();
    }
}

/// One completed sample, as the aggregator receives it.
#[derive(Debug)]
pub(crate) struct Completed {
    pub seq: u64,
    pub query_seq: u64,
    pub index: QuerySampleIndex,
    pub scheduled_ns: i64,
    pub issued_ns: i64,
    pub completed_ns: i64,
    pub first_token_ns: Option<i64>,
    pub n_tokens: i64,
    /// The response bytes, copied only when the sample is accuracy-logged.
    pub data: Option<LoggedAnswer>,
}

/// Messages from completing threads (and the runner) to the aggregator.
pub(crate) enum Event {
    Completed(Vec<Completed>),
    FirstToken {
        seq: u64,
        at_ns: i64,
        data: Option<Box<[u8]>>,
    },
    Error(String),
    Control(Control),
}

/// What the runner tells the aggregator.
pub(crate) enum Control {
    BeginSeries(SeriesConfig),
    /// Reply with the series' data once every record sent before is processed.
    EndSeries {
        final_query_seq: Option<u64>,
        reply: mpsc::Sender<SeriesData>,
    },
    Span {
        name: &'static str,
        start_ns: i64,
        dur_ns: i64,
        args: Vec<(&'static str, u64)>,
    },
    Finish,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct SeriesConfig {
    /// What the series is for and how it is shaped (the side file's series
    /// header).
    pub kind: SeriesKind,
    pub scenario: Scenario,
    pub samples_per_query: u64,
    /// MultiStream: samples per query, to compute query latencies.
    pub multi_stream_spq: Option<u64>,
    pub use_tokens: bool,
    /// Non-Offline token runs report first tokens.
    pub first_token_expected: bool,
    pub server_trace: bool,
    /// Server latency bounds (sample latency, TTFT, TPOT): the histograms
    /// count latencies above them exactly.
    pub latency_bounds: Option<LatencyBounds>,
    /// The percentile shown live while the series runs.
    pub live_percentile: f64,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct LatencyBounds {
    pub latency_ns: i64,
    pub ttft_ns: i64,
    pub tpot_ns: i64,
}

/// What one series measured.
#[derive(Debug, Default)]
pub(crate) struct SeriesData {
    pub sample_latencies: LatencyHistogram,
    pub query_latencies: LatencyHistogram,
    pub ttft: LatencyHistogram,
    pub tpot: LatencyHistogram,
    pub token_count: u64,
    pub max_latency_ns: i64,
    /// Latest completion time of the series (ns since the test origin).
    pub last_completed_ns: i64,
    pub final_query_done_ns: Option<i64>,
    pub errors: Vec<String>,
    pub completed: u64,
}

impl SeriesData {
    fn new(bounds: Option<LatencyBounds>) -> Self {
        match bounds {
            None => Self::default(),
            Some(b) => Self {
                sample_latencies: LatencyHistogram::with_threshold(b.latency_ns),
                ttft: LatencyHistogram::with_threshold(b.ttft_ns),
                tpot: LatencyHistogram::with_threshold(b.tpot_ns),
                ..Self::default()
            },
        }
    }
}

/// What the aggregator hands back when the test ends.
pub(crate) struct Finished<A: Write, T: Write> {
    pub accuracy: AccuracyLog<A>,
    pub trace: Option<TraceLog<T>>,
    /// The first write error of the accuracy log or the trace, and on which.
    pub io_error: Option<(LogKind, io::Error)>,
    /// The side file's first write error: the run and its logs stand.
    pub latency_file_error: Option<io::Error>,
}

/// Which of the aggregator's logs a write failed on.
#[derive(Clone, Copy, Debug)]
pub(crate) enum LogKind {
    Accuracy,
    Trace,
}

pub(crate) struct Aggregator<A: Write, T: Write> {
    pub accuracy: AccuracyLog<A>,
    pub trace: Option<TraceLog<T>>,
    /// Each sample's latency, where the harness asked for the side file.
    latencies: Option<LatencyWriter>,
    cfg: SeriesConfig,
    data: SeriesData,
    /// MultiStream queries in flight: query seq -> (samples seen, max latency).
    ms_queries: HashMap<u64, (u64, i64)>,
    /// First-token bytes of accuracy-logged samples awaiting their completion.
    token_data: HashMap<u64, Box<[u8]>>,
    /// Highest query seq seen and its latest completion time.
    newest_query: Option<(u64, i64)>,
    io_error: Option<(LogKind, io::Error)>,
    live: Arc<LiveStats>,
    /// Completion time at which the live percentile was last refreshed.
    live_refreshed_ns: i64,
    /// Once it is full, nothing more is written but the logs' last records.
    disk: Arc<Disk>,
}

impl<A: Write, T: Write> Aggregator<A, T> {
    pub(crate) fn new(
        accuracy: AccuracyLog<A>,
        trace: Option<TraceLog<T>>,
        latencies: Option<LatencyWriter>,
        live: Arc<LiveStats>,
        disk: Arc<Disk>,
    ) -> Self {
        Self {
            accuracy,
            trace,
            latencies,
            cfg: SeriesConfig {
                kind: SeriesKind::Performance,
                scenario: Scenario::SingleStream,
                samples_per_query: 1,
                multi_stream_spq: None,
                use_tokens: false,
                first_token_expected: false,
                server_trace: false,
                latency_bounds: None,
                live_percentile: 0.99,
            },
            data: SeriesData::default(),
            ms_queries: HashMap::new(),
            token_data: HashMap::new(),
            newest_query: None,
            io_error: None,
            live,
            live_refreshed_ns: 0,
            disk,
        }
    }

    /// Processes events until `Finish`; returns the logs to be closed, the
    /// first write error of the logs, if any, and the side file's.
    pub(crate) fn run(mut self, events: mpsc::Receiver<Event>) -> Finished<A, T> {
        while let Ok(ev) = events.recv() {
            match ev {
                Event::Completed(batch) => {
                    for c in batch {
                        self.completed(c);
                    }
                    self.refresh_live();
                }
                Event::FirstToken { seq, at_ns, data } => {
                    if let Some(d) = data {
                        self.token_data.insert(seq, d);
                    }
                    if let Some(t) = self.trace.as_mut().filter(|_| !self.disk.is_full()) {
                        let r = t.first_token(seq, at_ns);
                        self.note(LogKind::Trace, r);
                    }
                }
                Event::Error(msg) => self.data.errors.push(msg),
                Event::Control(Control::BeginSeries(cfg)) => {
                    self.cfg = cfg;
                    if let Some(w) = self.latencies.as_mut() {
                        w.begin_series(
                            cfg.kind,
                            cfg.scenario,
                            cfg.samples_per_query,
                            cfg.first_token_expected,
                        );
                    }
                    self.data = SeriesData::new(cfg.latency_bounds);
                    self.ms_queries.clear();
                    self.live_refreshed_ns = 0;
                }
                Event::Control(Control::EndSeries {
                    final_query_seq,
                    reply,
                }) => {
                    let mut data = std::mem::take(&mut self.data);
                    data.final_query_done_ns = match (final_query_seq, self.newest_query) {
                        (Some(q), Some((seen, at))) if q == seen => Some(at),
                        _ => None,
                    };
                    let _ = reply.send(data);
                }
                Event::Control(Control::Span {
                    name,
                    start_ns,
                    dur_ns,
                    args,
                }) => {
                    if let Some(t) = self.trace.as_mut().filter(|_| !self.disk.is_full()) {
                        let r = t.span(name, start_ns, dur_ns, &args);
                        self.note(LogKind::Trace, r);
                    }
                }
                Event::Control(Control::Finish) => break,
            }
        }
        Finished {
            latency_file_error: self.latencies.and_then(LatencyWriter::finish),
            accuracy: self.accuracy,
            trace: self.trace,
            io_error: self.io_error,
        }
    }

    fn refresh_live(&mut self) {
        let d = &self.data;
        let queries = match self.cfg.multi_stream_spq {
            Some(_) => d.query_latencies.count(),
            None => d.completed,
        };
        self.live
            .set_completed(d.completed, queries, d.sample_latencies.above_threshold());
        if d.last_completed_ns - self.live_refreshed_ns >= PERCENTILE_EVERY_NS {
            self.live_refreshed_ns = d.last_completed_ns;
            let latencies = if self.cfg.multi_stream_spq.is_some() {
                &d.query_latencies
            } else {
                &d.sample_latencies
            };
            self.live
                .set_percentile_latency(latencies.percentile(self.cfg.live_percentile));
        }
    }

    fn note(&mut self, log: LogKind, r: io::Result<()>) {
        if let Err(e) = r {
            self.io_error.get_or_insert((log, e));
        }
    }

    fn completed(&mut self, c: Completed) {
        let latency = c.completed_ns - c.scheduled_ns;
        let d = &mut self.data;
        d.completed += 1;
        d.sample_latencies.record(latency);
        d.max_latency_ns = d.max_latency_ns.max(latency);
        d.last_completed_ns = d.last_completed_ns.max(c.completed_ns);
        match self.newest_query {
            Some((q, at)) if q == c.query_seq => {
                self.newest_query = Some((q, at.max(c.completed_ns)))
            }
            Some((q, _)) if q > c.query_seq => {}
            _ => self.newest_query = Some((c.query_seq, c.completed_ns)),
        }

        if let Some(spq) = self.cfg.multi_stream_spq {
            let e = self.ms_queries.entry(c.query_seq).or_insert((0, i64::MIN));
            e.0 += 1;
            e.1 = e.1.max(latency);
            if e.0 >= spq {
                let max = e.1;
                self.ms_queries.remove(&c.query_seq);
                d.query_latencies.record(max);
            }
        }

        if let Some(w) = self.latencies.as_mut() {
            w.sample(&SampleRecord {
                scheduled_ns: c.scheduled_ns,
                latency_ns: latency,
                query_seq: c.query_seq,
                first_token_ns: c.first_token_ns.map(|ft| ft - c.scheduled_ns),
                n_tokens: c.n_tokens,
            });
        }

        let mut n_tokens = c.n_tokens;
        if self.cfg.use_tokens {
            if n_tokens == 0 {
                d.errors.push(
                    "n_tokens argument missing or attempted to record 0 as number of tokens".into(),
                );
            } else if n_tokens < 0 {
                d.errors
                    .push("Attempted to record a negative number of tokens".into());
                n_tokens = 0;
            } else if n_tokens == 1 {
                d.errors
                    .push("Number of tokens need to be greater than 1".into());
                n_tokens = 0;
            }
            // A sum that cannot wrap, whatever a SUT reports.
            d.token_count = d.token_count.saturating_add(n_tokens as u64);
            if self.cfg.first_token_expected {
                match c.first_token_ns {
                    Some(ft) => {
                        let ttft = ft - c.scheduled_ns;
                        d.ttft.record(ttft);
                        if n_tokens != 1 {
                            d.tpot.record((latency - ttft) / (n_tokens - 1));
                        }
                    }
                    None => d.errors.push(
                        "Attempted to record a sample latency before it's first token latency"
                            .into(),
                    ),
                }
            }
        }

        let full = self.disk.is_full();
        if let Some(data) = c.data.as_deref().filter(|_| !full) {
            let token_data = if self.cfg.use_tokens && self.cfg.first_token_expected {
                Some(self.token_data.remove(&c.seq))
            } else {
                None
            };
            let tokens = self.cfg.use_tokens.then(|| {
                let td = token_data.flatten();
                (
                    if self.cfg.first_token_expected {
                        Some(td.unwrap_or_default())
                    } else {
                        None
                    },
                    c.n_tokens,
                )
            });
            let entry_tokens = tokens.as_ref().map(|(td, n)| (td.as_deref(), *n));
            let r = self.accuracy.write(&AccuracyEntry {
                seq_id: c.seq,
                qsl_idx: c.index,
                data,
                tokens: entry_tokens,
            });
            self.note(LogKind::Accuracy, r);
        }

        if let Some(t) = self.trace.as_mut().filter(|_| !full) {
            let span = SampleSpan {
                sample_seq: c.seq,
                query_seq: c.query_seq,
                sample_idx: c.index,
                scheduled_ns: c.scheduled_ns,
                issued_ns: c.issued_ns,
                completed_ns: c.completed_ns,
            };
            let mut r = t.sample(&span);
            if r.is_ok() && self.cfg.server_trace {
                r = t.latency_counter(&span);
            }
            self.note(LogKind::Trace, r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logged_answers_wait_for_room_in_the_queue() {
        assert!(has_room(0, 10, 4), "an empty queue takes any answer");
        assert!(has_room(3, 1, 4));
        assert!(!has_room(3, 2, 4));
        assert!(!has_room(1, usize::MAX, 4));
        let budget = Arc::new(LogBudget::default());
        let a = budget.take(&[1, 2, 3]);
        let b = budget.take(&[4]);
        assert_eq!((&*a, &*b), (&[1u8, 2, 3][..], &[4u8][..]));
        assert_eq!(*budget.queued.lock().unwrap(), 4);
        drop(a);
        assert_eq!(*budget.queued.lock().unwrap(), 1);
        drop(b);
        assert_eq!(*budget.queued.lock().unwrap(), 0);
    }
}
