//! The connection watchdog's rules, as plain state machines handed the time:
//! no I/O and no clock of their own, so that tests drive them through
//! virtual time. Its task (`conn::watch`) only sleeps until the rules want
//! to look again and feeds them what the connection's counters show.

use std::time::{Duration, Instant};

/// How long a connection with samples outstanding may go without news.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadlines {
    /// Nothing at all received, heartbeats included: the node or the path
    /// to it is gone.
    pub(crate) stall: Duration,
    /// Heartbeats (or first tokens) only, no answer or error: the node is
    /// up but its backend is stuck. Always set: heartbeats alone never keep
    /// a run going.
    pub(crate) progress: Duration,
}

/// One limit on a node's silence: it expires once `limit` has passed with
/// samples outstanding and nothing it listens for heard.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Silence {
    limit: Duration,
    /// When the present silence was first seen; `None` while nothing is
    /// outstanding.
    since: Option<Instant>,
}

impl Silence {
    pub(crate) fn new(limit: Duration) -> Self {
        Self { limit, since: None }
    }

    /// Samples outstanding at `now`; `heard`: something it listens for
    /// arrived since the last event. A silence begins at the first event
    /// with samples outstanding and begins again whenever something is heard.
    pub(crate) fn on_outstanding(&mut self, now: Instant, heard: bool) {
        if heard || self.since.is_none() {
            self.since = Some(now);
        }
    }

    /// Nothing outstanding: a node with nothing to answer may be silent.
    pub(crate) fn on_idle(&mut self) {
        self.since = None;
    }

    /// When the present silence reaches the limit; `None` while idle.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.since.map(|s| s + self.limit)
    }

    pub(crate) fn expired(&self, now: Instant) -> bool {
        self.next_deadline().is_some_and(|d| now >= d)
    }
}

/// What the connection's counters show at one look.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    /// Every message received, heartbeats included.
    pub(crate) messages: u64,
    /// Answers and errors received: what ends samples. First tokens are
    /// not counted: a node can send them without ever answering.
    pub(crate) progress: u64,
    /// Samples sent and not yet answered.
    pub(crate) outstanding: u64,
}

/// Why the watchdog ends the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Alarm {
    /// Nothing at all received for `after`.
    Stalled { after: Duration, outstanding: u64 },
    /// Heartbeats only for `after`.
    NoProgress { after: Duration, outstanding: u64 },
}

impl Alarm {
    /// The failure reason, after the connection's label.
    pub(crate) fn reason(&self) -> String {
        let plural = |n: u64| if n == 1 { "" } else { "s" };
        match *self {
            Alarm::Stalled { after, outstanding } => format!(
                "stalled: nothing received (no answer, no heartbeat) for {after:?} \
                 with {outstanding} sample{} outstanding",
                plural(outstanding)
            ),
            Alarm::NoProgress { after, outstanding } => format!(
                "no progress: heartbeats but no answer or error for \
                 {after:?} with {outstanding} sample{} outstanding (is its backend hung?)",
                plural(outstanding)
            ),
        }
    }
}

/// The stall and progress limits of one connection. The counters only say
/// that something arrived, not when, so a silence counts from the look that
/// first saw it: the watchdog looks every tenth of the shorter limit and so
/// fires at most that long after a deadline, never before.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Watchdog {
    stall: Silence,
    progress: Silence,
    look_every: Duration,
    last: Seen,
}

impl Watchdog {
    /// `seen`: the counters when the watch begins.
    pub(crate) fn new(deadlines: Deadlines, seen: Seen) -> Self {
        let Deadlines { stall, progress } = deadlines;
        let shortest = progress.min(stall);
        Self {
            stall: Silence::new(stall),
            progress: Silence::new(progress),
            look_every: (shortest / 10).max(Duration::from_millis(1)),
            last: seen,
        }
    }

    /// The counters as they are at `now`: the alarm, if a limit is reached.
    pub(crate) fn on_look(&mut self, now: Instant, seen: Seen) -> Option<Alarm> {
        let last = std::mem::replace(&mut self.last, seen);
        if seen.outstanding == 0 {
            self.stall.on_idle();
            self.progress.on_idle();
            return None;
        }
        self.stall
            .on_outstanding(now, seen.messages != last.messages);
        self.progress
            .on_outstanding(now, seen.progress != last.progress);
        let outstanding = seen.outstanding;
        if self.stall.expired(now) {
            return Some(Alarm::Stalled {
                after: self.stall.limit,
                outstanding,
            });
        }
        self.progress.expired(now).then_some(Alarm::NoProgress {
            after: self.progress.limit,
            outstanding,
        })
    }

    /// When to look next, after a look at `now`: the next regular look or
    /// an earlier deadline.
    pub(crate) fn next_look(&self, now: Instant) -> Instant {
        [
            Some(now + self.look_every),
            self.stall.next_deadline(),
            self.progress.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(now + self.look_every)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn a_silence_expires_at_its_limit_and_not_a_nanosecond_before() {
        let t0 = Instant::now();
        let mut s = Silence::new(1000 * MS);
        assert_eq!(s.next_deadline(), None);
        assert!(!s.expired(at(t0, 1_000_000)), "idle never expires");
        s.on_outstanding(t0, false);
        assert_eq!(s.next_deadline(), Some(at(t0, 1000)));
        s.on_outstanding(at(t0, 500), false);
        assert_eq!(
            s.next_deadline(),
            Some(at(t0, 1000)),
            "still the same silence"
        );
        assert!(!s.expired(at(t0, 1000) - Duration::from_nanos(1)));
        assert!(s.expired(at(t0, 1000)));
        assert!(s.expired(at(t0, 1001)));
    }

    #[test]
    fn hearing_something_begins_the_silence_again_and_idling_ends_it() {
        let t0 = Instant::now();
        let mut s = Silence::new(1000 * MS);
        s.on_outstanding(t0, false);
        s.on_outstanding(at(t0, 999), true);
        assert!(!s.expired(at(t0, 1998)));
        assert!(s.expired(at(t0, 1999)));
        s.on_idle();
        assert_eq!(s.next_deadline(), None);
        assert!(!s.expired(at(t0, 5000)));
        // Something heard while idle starts nothing; outstanding samples do.
        s.on_outstanding(at(t0, 6000), false);
        assert_eq!(s.next_deadline(), Some(at(t0, 7000)));
    }

    fn busy(messages: u64, progress: u64) -> Seen {
        Seen {
            messages,
            progress,
            outstanding: 3,
        }
    }

    fn dog(progress: Option<u64>) -> Watchdog {
        // No progress limit of its own: the stall limit's.
        let deadlines = Deadlines {
            stall: 1000 * MS,
            progress: Duration::from_millis(progress.unwrap_or(1000)),
        };
        Watchdog::new(deadlines, Seen::default())
    }

    #[test]
    fn a_silent_connection_stalls_at_the_stall_limit() {
        let t0 = Instant::now();
        let mut d = dog(Some(5000));
        assert_eq!(d.next_look(t0), at(t0, 100), "a tenth of the shorter limit");
        assert_eq!(d.on_look(t0, busy(0, 0)), None);
        assert_eq!(d.next_look(t0), at(t0, 100));
        assert_eq!(
            d.next_look(at(t0, 950)),
            at(t0, 1000),
            "the deadline comes first"
        );
        assert_eq!(d.on_look(at(t0, 999), busy(0, 0)), None);
        let stalled = Alarm::Stalled {
            after: 1000 * MS,
            outstanding: 3,
        };
        assert_eq!(d.on_look(at(t0, 1000), busy(0, 0)), Some(stalled));
        assert_eq!(
            stalled.reason(),
            "stalled: nothing received (no answer, no heartbeat) for 1s with 3 samples outstanding"
        );
    }

    #[test]
    fn heartbeats_hold_off_the_stall_but_not_the_progress_limit() {
        let t0 = Instant::now();
        let mut d = dog(Some(2500));
        assert_eq!(d.on_look(t0, busy(0, 0)), None);
        // A heartbeat every 900 ms: never a stall.
        for beat in 1..=2 {
            assert_eq!(d.on_look(at(t0, 900 * beat), busy(beat, 0)), None);
        }
        assert_eq!(d.on_look(at(t0, 2499), busy(3, 0)), None);
        let alarm = d.on_look(at(t0, 2500), busy(3, 0));
        assert_eq!(
            alarm,
            Some(Alarm::NoProgress {
                after: 2500 * MS,
                outstanding: 3
            })
        );
        let one = Alarm::NoProgress {
            after: 2500 * MS,
            outstanding: 1,
        };
        assert_eq!(
            one.reason(),
            "no progress: heartbeats but no answer or error for 2.5s \
             with 1 sample outstanding (is its backend hung?)"
        );
    }

    #[test]
    fn answers_hold_off_both_limits_and_an_idle_connection_never_fires() {
        let t0 = Instant::now();
        let mut d = dog(Some(1500));
        assert_eq!(d.on_look(t0, busy(0, 0)), None);
        assert_eq!(d.on_look(at(t0, 900), busy(1, 1)), None);
        assert_eq!(d.on_look(at(t0, 1800), busy(2, 2)), None);
        assert_eq!(d.on_look(at(t0, 2799), busy(2, 2)), None);
        assert!(matches!(
            d.on_look(at(t0, 2800), busy(2, 2)),
            Some(Alarm::Stalled { .. })
        ));

        let mut d = dog(None);
        let idle = Seen::default();
        assert_eq!(d.on_look(t0, idle), None);
        assert_eq!(d.on_look(at(t0, 10_000), idle), None);
        assert_eq!(d.next_look(at(t0, 10_000)), at(t0, 10_100));
        // Samples outstanding after a long idle: the silence counts from
        // the look that saw them.
        assert_eq!(d.on_look(at(t0, 10_100), busy(0, 0)), None);
        assert_eq!(d.on_look(at(t0, 11_099), busy(0, 0)), None);
        assert!(d.on_look(at(t0, 11_100), busy(0, 0)).is_some());
    }

    #[test]
    fn heartbeats_never_keep_a_connection_without_answers_alive() {
        // Heartbeats every 900 ms, nothing answered: at the limit (here the
        // stall limit, as when no progress limit is given), never later.
        let t0 = Instant::now();
        let mut d = dog(None);
        for beat in 0..=1 {
            assert_eq!(d.on_look(at(t0, 900 * beat), busy(beat, 0)), None);
        }
        assert_eq!(d.on_look(at(t0, 999), busy(2, 0)), None);
        assert_eq!(
            d.on_look(at(t0, 1000), busy(2, 0)),
            Some(Alarm::NoProgress {
                after: 1000 * MS,
                outstanding: 3
            })
        );
    }

    #[test]
    fn first_tokens_without_answers_are_not_progress() {
        // `Seen::progress` counts answers and errors only: a node that keeps
        // sending first tokens (messages) and answers nothing is caught at
        // the progress limit although its stream is busy.
        let t0 = Instant::now();
        let mut d = dog(Some(3000));
        for ms in (0..3000).step_by(100) {
            assert_eq!(d.on_look(at(t0, ms), busy(ms, 0)), None, "{ms}");
        }
        assert!(matches!(
            d.on_look(at(t0, 3000), busy(3000, 0)),
            Some(Alarm::NoProgress { .. })
        ));
    }
}
