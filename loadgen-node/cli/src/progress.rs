//! Progress of long runs: while the QSL loads, the samples and bytes loaded
//! so far; then elapsed time, samples issued and completed, the
//! completion rate, the running latency at the target percentile against the
//! bound, and where early stopping stands. On a terminal, one line redrawn
//! in place on stderr; otherwise (a script, CI) a plain stderr line every
//! interval, so a run is never silent for minutes. Never on stdout or in the
//! logs.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use loadgen_engine::early_stopping::{self, Outlook};
use loadgen_engine::live::{LiveSnapshot, LiveStats};
use loadgen_engine::{Scenario, TestMode, TestSettings};
use qdl::breakdown::Part;
use qdl::QdlView;

use crate::budget::{grouped, size};
use crate::qsl::{LoadProgress, Loading};

const REFRESH: Duration = Duration::from_millis(500);
/// How often the drawing thread looks at the stop flag.
const TICK: Duration = Duration::from_millis(100);

/// Says which sut-node a run waits for while its backend loads: at once,
/// whenever it is another node, and every 10 seconds.
pub fn waiting_for_nodes() -> impl FnMut(&str, Duration) {
    let mut last: Option<(String, Instant)> = None;
    move |node, waited| {
        let due = match &last {
            Some((n, at)) => n != node || at.elapsed() >= Duration::from_secs(10),
            None => true,
        };
        if due {
            eprintln!(
                "loadgen-node: waiting for {node}: its backend is still loading ({} s so far)",
                waited.as_secs()
            );
            last = Some((node.to_string(), Instant::now()));
        }
    }
}

/// Draws until dropped.
pub struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    tty: bool,
}

impl Progress {
    /// Starts drawing the engine's live figures, and while the QSL of
    /// `loading` loads, how far it is: the live line if stderr is a
    /// terminal, otherwise a plain line every `interval`. A zero interval
    /// draws nothing.
    pub fn start(
        live: Arc<LiveStats>,
        loading: Option<Arc<LoadProgress>>,
        interval: Duration,
    ) -> Self {
        let now = Instant::now();
        Self::with(
            EngineFigures {
                live,
                series: (i64::MIN, now),
                last: (now, 0),
            },
            loading,
            interval,
        )
    }

    /// As `start`, from the QDL's figures alone (an engine that keeps its
    /// own to itself): samples sent and answered and, where the run's
    /// `target` is known, the QDL's send-to-answer time at the target
    /// percentile against the bound and where early stopping stands.
    pub fn network(
        qdl: QdlView,
        target: Option<Target>,
        loading: Option<Arc<LoadProgress>>,
        interval: Duration,
    ) -> Self {
        let now = Instant::now();
        Self::with(
            NetworkFigures {
                qdl,
                target,
                start: now,
                last: (now, 0),
            },
            loading,
            interval,
        )
    }

    fn with(figures: impl Figures, loading: Option<Arc<LoadProgress>>, interval: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let tty = std::io::stderr().is_terminal();
        let thread = (!interval.is_zero()).then(|| {
            let stop = stop.clone();
            let every = if tty { REFRESH } else { interval };
            let figures = LoadingFirst {
                figures,
                loading,
                since: None,
            };
            thread::spawn(move || draw_until(figures, &stop, every, tty))
        });
        Self { stop, thread, tty }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
            if self.tty {
                eprint!("\r\x1b[2K");
            }
        }
    }
}

/// Where the lines come from.
trait Figures: Send + 'static {
    /// Looked at every tick; true when a new series began (the interval
    /// starts again).
    fn tick(&mut self, _now: Instant) -> bool {
        false
    }
    fn line(&mut self, now: Instant) -> String;
}

fn draw_until(mut figures: impl Figures, stop: &AtomicBool, every: Duration, tty: bool) {
    let mut next = Instant::now() + every;
    while !stop.load(Ordering::Relaxed) {
        thread::sleep(TICK.min(every));
        let now = Instant::now();
        if figures.tick(now) {
            next = now + every;
        }
        if now < next {
            continue;
        }
        next = now + every;
        let text = figures.line(now);
        if tty {
            eprint!("\r\x1b[2K{text}");
            let _ = std::io::stderr().flush();
        } else {
            eprintln!("loadgen-node: {text}");
        }
    }
}

/// While the QSL loads, how far it is; the run's figures otherwise.
struct LoadingFirst<F> {
    figures: F,
    loading: Option<Arc<LoadProgress>>,
    /// When the load under way was first seen.
    since: Option<Instant>,
}

impl<F: Figures> Figures for LoadingFirst<F> {
    fn tick(&mut self, now: Instant) -> bool {
        let loading = self.loading.as_ref().and_then(|l| l.now());
        let was = self.since.is_some();
        self.since = match (loading, self.since) {
            (Some(_), None) => Some(now),
            (Some(_), since) => since,
            (None, _) => None,
        };
        // The start and the end of a load begin a new interval.
        let changed = was != self.since.is_some();
        self.figures.tick(now) || changed
    }

    fn line(&mut self, now: Instant) -> String {
        match (self.loading.as_ref().and_then(|l| l.now()), self.since) {
            (Some(l), Some(since)) => loading_line(&l, now.duration_since(since)),
            _ => self.figures.line(now),
        }
    }
}

/// The line of a load under way.
pub fn loading_line(l: &Loading, elapsed: Duration) -> String {
    format!(
        "loading {:>6.1}s  {} of {} samples  {} so far",
        elapsed.as_secs_f64(),
        grouped(l.samples),
        grouped(l.of),
        size(l.bytes)
    )
}

/// Completions per second since `last`, which becomes (now, completed).
fn rate(last: &mut (Instant, u64), now: Instant, completed: u64) -> f64 {
    let dt = now.duration_since(last.0).as_secs_f64();
    let r = if dt > 0.0 {
        completed.saturating_sub(last.1) as f64 / dt
    } else {
        0.0
    };
    *last = (now, completed);
    r
}

struct EngineFigures {
    live: Arc<LiveStats>,
    /// The series drawn and when it was first seen.
    series: (i64, Instant),
    last: (Instant, u64),
}

impl Figures for EngineFigures {
    fn tick(&mut self, now: Instant) -> bool {
        let start = self.live.snapshot().series_start_ns;
        if start == self.series.0 {
            return false;
        }
        self.series = (start, now);
        self.last = (now, 0);
        true
    }

    fn line(&mut self, now: Instant) -> String {
        let s = self.live.snapshot();
        let r = rate(&mut self.last, now, s.completed);
        line(&s, now.duration_since(self.series.1), r)
    }
}

/// What a run is judged against, for an engine whose own live figures are
/// not visible: read from the same settings the engine is given.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Target {
    /// The latency percentile judged (0.99 for Server's p99).
    pub percentile: f64,
    /// Server's latency bound; 0 where the scenario has none.
    pub bound_ns: i64,
    /// Samples per query (MultiStream's 8), to count queries from answers.
    pub samples_per_query: u64,
}

impl Target {
    /// The target of a performance run of `settings`; None for accuracy
    /// runs and for Offline, which judges no latency.
    pub fn of(settings: &TestSettings) -> Option<Self> {
        if settings.mode == TestMode::AccuracyOnly {
            return None;
        }
        let (percentile, bound_ns, samples_per_query) = match settings.scenario {
            Scenario::SingleStream => (settings.single_stream_target_latency_percentile, 0, 1),
            Scenario::MultiStream => (
                settings.multi_stream_target_latency_percentile,
                0,
                settings.multi_stream_samples_per_query.max(1),
            ),
            Scenario::Server => (
                settings.server_target_latency_percentile,
                i64::try_from(settings.server_target_latency_ns).unwrap_or(i64::MAX),
                1,
            ),
            Scenario::Offline => return None,
        };
        Some(Self {
            percentile,
            bound_ns,
            samples_per_query,
        })
    }
}

struct NetworkFigures {
    qdl: QdlView,
    target: Option<Target>,
    start: Instant,
    last: (Instant, u64),
}

impl Figures for NetworkFigures {
    fn line(&mut self, now: Instant) -> String {
        let t = self.qdl.stats().total();
        let r = rate(&mut self.last, now, t.answers_received);
        let elapsed = now.duration_since(self.start);
        let total = self.qdl.breakdown().overall;
        let h = total.part(Part::Total);
        let Some(target) = self.target else {
            let mut text = format!(
                "network {:>6.1}s  sent {}  answered {}  {}/s",
                elapsed.as_secs_f64(),
                t.samples_sent,
                t.answers_received,
                si(r)
            );
            if h.count() > 0 {
                let p99 = i64::try_from(h.quantile(0.99)).unwrap_or(i64::MAX);
                text.push_str(&format!("  p99 {} (QDL send to answer)", ms(p99)));
            }
            return text;
        };
        // The QDL sees samples, not queries: a MultiStream query's latency
        // is its slowest sample's, which the QDL cannot pair up, so its
        // percentile is the samples' (an estimate from below).
        let snapshot = LiveSnapshot {
            performance: true,
            series_start_ns: 0,
            issued: t.samples_sent,
            completed: t.answers_received,
            queries_completed: t.answers_received / target.samples_per_query,
            over_bound: match target.bound_ns {
                0 => 0,
                b => h.count_above(u64::try_from(b).unwrap_or(0)),
            },
            percentile_latency_ns: i64::try_from(h.quantile(target.percentile)).unwrap_or(i64::MAX),
            target_percentile: target.percentile,
            target_latency_ns: target.bound_ns,
        };
        format!(
            "{}  (latency: QDL send to answer)",
            line(&snapshot, elapsed, r)
        )
    }
}

/// One progress line.
pub fn line(s: &LiveSnapshot, elapsed: Duration, rate: f64) -> String {
    let phase = if s.performance {
        "performance"
    } else {
        "accuracy"
    };
    let mut text = format!(
        "{phase} {:>6.1}s  issued {}  completed {}  {}/s",
        elapsed.as_secs_f64(),
        s.issued,
        s.completed,
        si(rate)
    );
    if s.performance && s.percentile_latency_ns > 0 {
        text.push_str(&format!(
            "  p{} {}",
            s.target_percentile * 100.0,
            ms(s.percentile_latency_ns)
        ));
        if s.target_latency_ns > 0 {
            let mark = if s.percentile_latency_ns > s.target_latency_ns {
                "OVER"
            } else {
                "ok"
            };
            text.push_str(&format!(" (bound {}, {mark})", ms(s.target_latency_ns)));
        }
    }
    if let Some(es) = outlook(s) {
        text.push_str("  early stopping: ");
        text.push_str(&match es {
            Outlook::Needs(n) => format!("needs {n} more queries"),
            Outlook::Met {
                spare_over: Some(n),
            } => format!("met, {n} more over the bound allowed"),
            Outlook::Met { spare_over: None } => "met".into(),
        });
    }
    text
}

/// Early stopping of a performance series so far (Server against its
/// bound; SingleStream and MultiStream by query count).
fn outlook(s: &LiveSnapshot) -> Option<Outlook> {
    let p = s.target_percentile;
    if !(s.performance && p > 0.0 && p < 1.0) {
        return None;
    }
    Some(if s.target_latency_ns > 0 {
        early_stopping::server_outlook(s.over_bound, s.queries_completed, p)
    } else {
        early_stopping::percentile_outlook(s.queries_completed, p)
    })
}

fn ms(ns: i64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

fn si(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_follow_the_scenario_and_mode() {
        let mut s = TestSettings {
            scenario: Scenario::Server,
            mode: TestMode::PerformanceOnly,
            server_target_latency_ns: 15_000_000,
            server_target_latency_percentile: 0.99,
            ..TestSettings::default()
        };
        assert_eq!(
            Target::of(&s),
            Some(Target {
                percentile: 0.99,
                bound_ns: 15_000_000,
                samples_per_query: 1
            })
        );
        s.scenario = Scenario::MultiStream;
        s.multi_stream_samples_per_query = 8;
        s.multi_stream_target_latency_percentile = 0.99;
        let t = Target::of(&s).expect("a MultiStream target");
        assert_eq!((t.bound_ns, t.samples_per_query), (0, 8));
        s.scenario = Scenario::Offline;
        assert_eq!(Target::of(&s), None);
        s.scenario = Scenario::Server;
        s.mode = TestMode::AccuracyOnly;
        assert_eq!(Target::of(&s), None);
    }

    #[test]
    fn a_load_is_shown_as_loading() {
        let l = Loading {
            samples: 120_000,
            of: 349_823,
            bytes: 11_850_240_000,
        };
        assert_eq!(
            loading_line(&l, Duration::from_millis(42_300)),
            "loading   42.3s  120,000 of 349,823 samples  11.9 GB so far"
        );
    }

    #[test]
    fn shows_rate_percentile_and_bound() {
        let s = LiveSnapshot {
            performance: true,
            series_start_ns: 0,
            issued: 1000,
            completed: 990,
            queries_completed: 990,
            over_bound: 20,
            percentile_latency_ns: 16_000_000,
            target_percentile: 0.99,
            target_latency_ns: 15_000_000,
        };
        let l = line(&s, Duration::from_millis(12_300), 98_200.0);
        assert_eq!(
            l,
            "performance   12.3s  issued 1000  completed 990  98.2k/s  p99 16.000 ms (bound 15.000 ms, OVER)  early stopping: needs 2314 more queries"
        );
        let met = LiveSnapshot {
            completed: 100_000,
            queries_completed: 100_000,
            over_bound: 3,
            ..s
        };
        assert!(line(&met, Duration::ZERO, 0.0).ends_with(" more over the bound allowed"));
        let acc = LiveSnapshot {
            performance: false,
            ..s
        };
        let l = line(&acc, Duration::ZERO, 0.0);
        assert!(!l.contains("p99") && !l.contains("early stopping"), "{l}");
    }
}
