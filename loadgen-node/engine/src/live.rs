//! Live figures of the series in progress, for a progress display. Written
//! by the issuing loop (one relaxed store per query) and by the completion
//! thread (off the timed path); read by anyone.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::OnceLock;

/// How often the completion thread refreshes the running percentile.
pub(crate) const PERCENTILE_EVERY_NS: i64 = 250_000_000;

/// The live figures, shared between the run and whoever displays them;
/// read them with [`LiveStats::snapshot`].
#[derive(Debug, Default)]
pub struct LiveStats {
    performance: AtomicBool,
    series_start_ns: AtomicI64,
    issued: AtomicU64,
    completed: AtomicU64,
    queries_completed: AtomicU64,
    over_bound: AtomicU64,
    percentile_latency_ns: AtomicI64,
    target_percentile_permille: AtomicU64,
    target_latency_ns: AtomicI64,
    series_observer: SeriesObserver,
}

/// Told, on the issuing thread, that a series is about to start (before
/// its start time is taken): true for a performance series, false for an
/// accuracy one. For tracing; see [`LiveStats::on_series_start`].
#[derive(Default)]
struct SeriesObserver(OnceLock<Box<dyn Fn(bool) + Send + Sync>>);

impl std::fmt::Debug for SeriesObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "SeriesObserver(set)"
        } else {
            "SeriesObserver(none)"
        })
    }
}

/// A consistent-enough copy of the live figures.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LiveSnapshot {
    /// True during performance series (accuracy series have no latency goal).
    pub performance: bool,
    /// Monotonic time of the series start, as the engine's monotonic clock counts.
    pub series_start_ns: i64,
    /// Samples issued so far in the series.
    pub issued: u64,
    /// Samples completed so far in the series.
    pub completed: u64,
    /// Queries completed (MultiStream: whole queries; otherwise samples).
    pub queries_completed: u64,
    /// Server: completed samples whose latency is above the bound.
    pub over_bound: u64,
    /// Running latency at the target percentile (0 until measured).
    pub percentile_latency_ns: i64,
    /// The percentile of the scenario's latency goal (e.g. 0.99).
    pub target_percentile: f64,
    /// The Server latency bound; 0 when the scenario has none.
    pub target_latency_ns: i64,
}

impl LiveStats {
    /// The current figures.
    pub fn snapshot(&self) -> LiveSnapshot {
        LiveSnapshot {
            performance: self.performance.load(Ordering::Relaxed),
            series_start_ns: self.series_start_ns.load(Ordering::Relaxed),
            issued: self.issued.load(Ordering::Relaxed),
            completed: self.completed.load(Ordering::Relaxed),
            queries_completed: self.queries_completed.load(Ordering::Relaxed),
            over_bound: self.over_bound.load(Ordering::Relaxed),
            percentile_latency_ns: self.percentile_latency_ns.load(Ordering::Relaxed),
            target_percentile: self.target_percentile_permille.load(Ordering::Relaxed) as f64
                / 1000.0,
            target_latency_ns: self.target_latency_ns.load(Ordering::Relaxed),
        }
    }

    /// Calls `f` on the issuing thread as each series is about to start,
    /// outside the timed loop (true: a performance series). One observer;
    /// false if one was set already.
    pub fn on_series_start(&self, f: impl Fn(bool) + Send + Sync + 'static) -> bool {
        self.series_observer.0.set(Box::new(f)).is_ok()
    }

    pub(crate) fn series_starting(&self, performance: bool) {
        if let Some(f) = self.series_observer.0.get() {
            f(performance);
        }
    }

    pub(crate) fn begin_series(
        &self,
        start_ns: i64,
        performance: bool,
        percentile: f64,
        target_latency_ns: i64,
    ) {
        self.performance.store(performance, Ordering::Relaxed);
        self.issued.store(0, Ordering::Relaxed);
        self.completed.store(0, Ordering::Relaxed);
        self.queries_completed.store(0, Ordering::Relaxed);
        self.over_bound.store(0, Ordering::Relaxed);
        self.percentile_latency_ns.store(0, Ordering::Relaxed);
        self.target_percentile_permille
            .store((percentile * 1000.0).round() as u64, Ordering::Relaxed);
        self.target_latency_ns
            .store(target_latency_ns, Ordering::Relaxed);
        self.series_start_ns.store(start_ns, Ordering::Relaxed);
    }

    pub(crate) fn set_issued(&self, n: u64) {
        self.issued.store(n, Ordering::Relaxed);
    }

    pub(crate) fn set_completed(&self, samples: u64, queries: u64, over_bound: u64) {
        self.completed.store(samples, Ordering::Relaxed);
        self.queries_completed.store(queries, Ordering::Relaxed);
        self.over_bound.store(over_bound, Ordering::Relaxed);
    }

    pub(crate) fn set_percentile_latency(&self, ns: i64) {
        self.percentile_latency_ns.store(ns, Ordering::Relaxed);
    }
}
