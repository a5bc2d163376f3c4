//! The two clocks of a run: a monotonic one for every latency, and the wall
//! clock for the dates printed in logs.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Monotonic nanoseconds since the start of the test.
#[derive(Clone, Copy, Debug)]
pub struct MonoClock {
    origin: Instant,
}

impl MonoClock {
    pub fn start() -> Self {
        Self {
            origin: Instant::now(),
        }
    }

    #[inline]
    pub fn now_ns(&self) -> i64 {
        self.origin.elapsed().as_nanos() as i64
    }
}

fn broken_down(t: SystemTime, local: bool) -> (libc::tm, u32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as libc::time_t;
    // SAFETY: tm is plain data; the *_r functions only write into it.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
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
pub fn test_datetime(t: SystemTime) -> String {
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
pub fn power_time(t: SystemTime) -> String {
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
pub fn unix_us(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
}
