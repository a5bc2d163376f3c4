//! The live progress line of long runs: elapsed time, samples issued and
//! completed, the current completion rate and the running latency at the
//! target percentile against the bound. Drawn on stderr only when stderr is a
//! terminal, so logs and pipelines never see it.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use loadgen_engine::live::{LiveSnapshot, LiveStats};

const REFRESH: Duration = Duration::from_millis(500);

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

/// Draws the line until dropped.
pub struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts drawing if stderr is a terminal; otherwise does nothing.
    pub fn start(live: Arc<LiveStats>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        // SAFETY: isatty only inspects the descriptor.
        let tty = unsafe { libc::isatty(libc::STDERR_FILENO) } == 1;
        let thread = tty.then(|| {
            let stop = stop.clone();
            thread::spawn(move || draw_until(&live, &stop))
        });
        Self { stop, thread }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
            eprint!("\r\x1b[2K");
        }
    }
}

fn draw_until(live: &LiveStats, stop: &AtomicBool) {
    let mut series = (i64::MIN, Instant::now());
    let mut last = (Instant::now(), 0u64);
    while !stop.load(Ordering::Relaxed) {
        thread::sleep(REFRESH);
        let s = live.snapshot();
        let now = Instant::now();
        if s.series_start_ns != series.0 {
            series = (s.series_start_ns, now);
            last = (now, 0);
        }
        let dt = now.duration_since(last.0).as_secs_f64();
        let rate = if dt > 0.0 {
            s.completed.saturating_sub(last.1) as f64 / dt
        } else {
            0.0
        };
        last = (now, s.completed);
        eprint!("\r\x1b[2K{}", line(&s, now.duration_since(series.1), rate));
        let _ = std::io::stderr().flush();
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
    text
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
    fn shows_rate_percentile_and_bound() {
        let s = LiveSnapshot {
            performance: true,
            series_start_ns: 0,
            issued: 1000,
            completed: 990,
            percentile_latency_ns: 16_000_000,
            target_percentile: 0.99,
            target_latency_ns: 15_000_000,
        };
        let l = line(&s, Duration::from_millis(12_300), 98_200.0);
        assert_eq!(
            l,
            "performance   12.3s  issued 1000  completed 990  98.2k/s  p99 16.000 ms (bound 15.000 ms, OVER)"
        );
        let acc = LiveSnapshot {
            performance: false,
            ..s
        };
        assert!(!line(&acc, Duration::ZERO, 0.0).contains("p99"));
    }
}
