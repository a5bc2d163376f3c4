//! The clocks of a run: the [`Clock`] of the timed path (the monotonic
//! `MonoClock` in real runs, a [`VirtualClock`] in tests), and the wall
//! clock for the dates printed in logs.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The time source of the timed path: every issue time, completion time and
/// wait of a run goes through it, so that a run can be driven in virtual
/// time, deterministically, as well as in real time.
pub trait Clock: Send + Sync {
    /// Nanoseconds since the start of the test.
    fn now_ns(&self) -> i64;
    /// Returns once the clock reads `due` or later, or as soon as `stop()`
    /// holds; returns the time then.
    fn wait_until(&self, due: i64, stop: &dyn Fn() -> bool) -> i64;
    /// The issuing thread has nothing to do until a completion arrives: wait
    /// (a little) for one. False when none can ever come.
    fn wait_for_event(&self) -> bool;
}

/// Monotonic nanoseconds since the start of the test.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MonoClock {
    origin: Instant,
}

impl MonoClock {
    pub(crate) fn start() -> Self {
        Self {
            origin: Instant::now(),
        }
    }

    #[inline]
    pub(crate) fn now_ns(&self) -> i64 {
        self.origin.elapsed().as_nanos() as i64
    }
}

impl Clock for MonoClock {
    #[inline]
    fn now_ns(&self) -> i64 {
        MonoClock::now_ns(self)
    }

    /// Every microsecond late is latency charged to the SUT, so the last
    /// `YIELD_NS` before `due` are yielded through (and the last 20 µs spun,
    /// where a yield could return too late); before that the thread sleeps,
    /// with a timer slack of 1 ns so that the kernel does not defer its
    /// wake-up. A LoadGen node shares its cores with the QDL's network
    /// threads: yielding through whole milliseconds before each query (the
    /// mean gap at hundreds of queries a second) kept the issuing thread
    /// running most of the time, taking half of a 2-core host, and each
    /// QDL wake-up had to wait for a core.
    fn wait_until(&self, due: i64, stop: &dyn Fn() -> bool) -> i64 {
        const YIELD_NS: i64 = 100_000;
        fine_timer_slack();
        loop {
            let now = self.now_ns();
            let gap = due - now;
            if gap <= 0 || stop() {
                return now;
            }
            if gap > YIELD_NS {
                thread::sleep(Duration::from_nanos((gap - YIELD_NS) as u64));
            } else if gap > 20_000 {
                thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Parks until a completion unparks the issuer; the timeout only bounds
    /// the cost of a wake-up missed between the check and the park.
    fn wait_for_event(&self) -> bool {
        thread::park_timeout(Duration::from_millis(50));
        true
    }
}

/// Sets the calling thread's timer slack to 1 ns, once per thread: by
/// default the kernel may wake a sleeper up to 50 µs late to group wake-ups.
fn fine_timer_slack() {
    thread_local! {
        static SET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if !SET.replace(true) {
        // SAFETY: PR_SET_TIMERSLACK takes an integer and changes only the
        // calling thread's slack; a failure leaves the default.
        #[cfg(target_os = "linux")]
        unsafe {
            libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
        }
    }
}

type Action = Box<dyn FnOnce() + Send>;

/// Virtual time for tests: time moves only when the issuing thread waits,
/// straight to the next scheduled event (a simulated SUT's completion, say),
/// which then runs on the issuing thread at exactly its time. A whole run
/// takes milliseconds whatever its simulated length, and does the same thing
/// every time.
#[derive(Default)]
pub struct VirtualClock {
    state: Mutex<VirtualState>,
}

#[derive(Default)]
struct VirtualState {
    now: i64,
    next_id: u64,
    /// (time, id) in order; equal times run in the order they were scheduled.
    queue: BinaryHeap<Reverse<(i64, u64)>>,
    actions: BTreeMap<u64, Action>,
}

impl VirtualClock {
    /// A clock at time 0 with nothing scheduled.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, VirtualState> {
        // An action that panicked leaves a consistent queue behind.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `action` when the virtual time reaches `at_ns` (at once, on the
    /// next wait, if that is in the past).
    pub fn schedule(&self, at_ns: i64, action: impl FnOnce() + Send + 'static) {
        let mut s = self.state();
        let id = s.next_id;
        s.next_id += 1;
        s.queue.push(Reverse((at_ns, id)));
        s.actions.insert(id, Box::new(action));
    }

    /// Moves the time `ns` forward, running the events due meanwhile: the
    /// issuing thread spent that long (a SUT whose `issue_query` is slow).
    pub fn advance(&self, ns: i64) {
        let due = self.now_ns() + ns;
        self.wait_until(due, &|| false);
    }

    /// Runs the earliest event due at or before `limit` (any, without a
    /// limit), moving the time to it; false if there is none.
    fn run_next(&self, limit: Option<i64>) -> bool {
        let action = {
            let mut s = self.state();
            let Some(&Reverse((at, id))) = s.queue.peek() else {
                return false;
            };
            if limit.is_some_and(|l| at > l) {
                return false;
            }
            s.queue.pop();
            s.now = s.now.max(at);
            s.actions.remove(&id)
        };
        // Outside the lock: the action may schedule more.
        if let Some(a) = action {
            a();
        }
        true
    }
}

impl Clock for VirtualClock {
    fn now_ns(&self) -> i64 {
        self.state().now
    }

    fn wait_until(&self, due: i64, stop: &dyn Fn() -> bool) -> i64 {
        while !stop() && self.run_next(Some(due)) {}
        let mut s = self.state();
        if !stop() {
            s.now = s.now.max(due);
        }
        s.now
    }

    fn wait_for_event(&self) -> bool {
        self.run_next(None)
    }
}

fn broken_down(t: SystemTime, local: bool) -> (libc::tm, u32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as libc::time_t;
    // SAFETY: tm is plain data, for which all zeros is a valid value.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live locals; the *_r functions only read
    // `secs` and write into `tm`.
    unsafe {
        if local {
            libc::localtime_r(&secs, &mut tm);
        } else {
            libc::gmtime_r(&secs, &mut tm);
        }
    }
    (tm, d.subsec_millis())
}

/// `test_datetime`: local time followed by a literal `Z`, as the official LoadGen does.
pub(crate) fn test_datetime(t: SystemTime) -> String {
    let (tm, _) = broken_down(t, true);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// `power_begin` / `power_end`: UTC, `MM-DD-YYYY HH:MM:SS.mmm`.
pub(crate) fn power_time(t: SystemTime) -> String {
    let (tm, ms) = broken_down(t, false);
    format!(
        "{:02}-{:02}-{:04} {:02}:{:02}:{:02}.{:03}",
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_year + 1900,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        ms
    )
}

/// Wall-clock µs since the Unix epoch (trace origin).
pub(crate) fn unix_us(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn power_time_is_utc() {
        let t = UNIX_EPOCH + Duration::from_millis(1_795_329_793_723);
        assert_eq!(power_time(t), "11-22-2026 06:43:13.723");
    }

    #[test]
    fn datetime_shape() {
        let s = test_datetime(SystemTime::now());
        assert_eq!(s.len(), 20);
        assert!(s.ends_with('Z') && s.as_bytes()[10] == b'T');
    }

    #[test]
    fn virtual_time_moves_only_to_events_in_order() {
        let clock = Arc::new(VirtualClock::new());
        let seen = Arc::new(Mutex::new(Vec::new()));
        for (at, tag) in [(30, "c"), (10, "a"), (10, "b"), (50, "d")] {
            let (c, seen) = (clock.clone(), seen.clone());
            clock.schedule(at, move || seen.lock().unwrap().push((tag, c.now_ns())));
        }
        assert_eq!(clock.wait_until(40, &|| false), 40);
        assert_eq!(
            *seen.lock().unwrap(),
            [("a", 10), ("b", 10), ("c", 30)],
            "equal times in scheduling order"
        );
        assert!(clock.wait_for_event());
        assert_eq!(clock.now_ns(), 50);
        assert!(!clock.wait_for_event(), "nothing left");
        // A stop condition ends the wait where time stands.
        assert_eq!(clock.wait_until(1_000, &|| true), 50);
    }
}
