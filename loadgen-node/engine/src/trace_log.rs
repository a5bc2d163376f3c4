//! `mlperf_log_trace.json`: Chrome trace events (`logging.cc`, `ChromeTracer`), written by the
//! completion-processing thread, never by the issuing thread. Unlike
//! the official LoadGen's, the file is valid JSON.

use std::io::{self, Write};

pub(crate) struct TraceLog<W: Write> {
    out: W,
    pid: u32,
    /// Wall-clock time of the trace origin, µs since the Unix epoch.
    origin_unix_us: f64,
    line: Vec<u8>,
}

/// One completed sample, with times relative to the trace origin.
pub(crate) struct SampleSpan {
    pub sample_seq: u64,
    pub query_seq: u64,
    pub sample_idx: usize,
    pub scheduled_ns: i64,
    pub issued_ns: i64,
    pub completed_ns: i64,
}

fn us(ns: i64) -> String {
    // Exactly three decimals: the value is exact nanoseconds.
    let sign = if ns < 0 { "-" } else { "" };
    let a = ns.unsigned_abs();
    format!("{sign}{}.{:03}", a / 1000, a % 1000)
}

impl<W: Write> TraceLog<W> {
    pub(crate) fn new(mut out: W, origin_unix_us: f64) -> io::Result<Self> {
        out.write_all(b"{\"traceEvents\":[\n")?;
        Ok(Self {
            out,
            pid: std::process::id(),
            origin_unix_us,
            line: Vec::with_capacity(512),
        })
    }

    /// `Sample` async begin/end pair of one completed sample.
    pub(crate) fn sample(&mut self, s: &SampleSpan) -> io::Result<()> {
        let pid = self.pid;
        let line = &mut self.line;
        line.clear();
        writeln!(
            line,
            "{{\"name\":\"Sample\",\"cat\":\"default\",\"ph\":\"b\",\"pid\":{pid},\"id\":{},\"ts\":{},\"args\":{{\"sample_seq\":{},\"query_seq\":{},\"sample_idx\":{},\"issue_start_ns\":{},\"complete_ns\":{}}}}},",
            s.sample_seq,
            us(s.scheduled_ns),
            s.sample_seq,
            s.query_seq,
            s.sample_idx,
            s.issued_ns - s.scheduled_ns,
            s.completed_ns - s.scheduled_ns,
        )?;
        writeln!(
            line,
            "{{\"name\":\"Sample\",\"cat\":\"default\",\"ph\":\"e\", \"pid\":{pid},\"id\":{},\"ts\":{}}},",
            s.sample_seq,
            us(s.completed_ns)
        )?;
        self.out.write_all(line)
    }

    /// Server's per-sample `Latency` counter at the scheduled time.
    pub(crate) fn latency_counter(&mut self, s: &SampleSpan) -> io::Result<()> {
        writeln!(
            self.out,
            "{{\"name\":\"Latency\",\"ph\": \"C\",\"pid\":{},\"ts\":{},\"args\":{{ \"issue_delay\":{},\"issue_to_done\":{}}}}},",
            self.pid,
            us(s.scheduled_ns),
            s.issued_ns - s.scheduled_ns,
            s.completed_ns - s.issued_ns
        )
    }

    /// `Token` async instant of a first token (non-Server scenarios).
    pub(crate) fn first_token(&mut self, sample_seq: u64, at_ns: i64) -> io::Result<()> {
        writeln!(
            self.out,
            "{{\"name\":\"Token\",\"cat\":\"default\",\"ph\":\"n\",\"pid\":{},\"id\":{sample_seq},\"ts\":{},\"args\":{{}}}},",
            self.pid,
            us(at_ns)
        )
    }

    /// A complete ("X") span on the calling thread, e.g. `LoadSamples`.
    pub(crate) fn span(
        &mut self,
        name: &str,
        start_ns: i64,
        dur_ns: i64,
        args: &[(&str, u64)],
    ) -> io::Result<()> {
        let args: Vec<String> = args.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        writeln!(
            self.out,
            "{{\"name\":\"{name}\",\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{},\"args\":{{{}}}}},",
            self.pid,
            crate::detail::current_tid(),
            us(start_ns),
            us(dur_ns),
            args.join(",")
        )
    }

    /// Writes the footer and returns the writer.
    pub(crate) fn finish(mut self) -> io::Result<W> {
        write!(
            self.out,
            "{{\"name\":\"LastTrace\"}}\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{{\n\"ts\":{:.3},\n\"version\":\"MLPerf LoadGen v1.0\"\n}}\n}}\n",
            self.origin_unix_us
        )?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// The most bytes the trace holds for one sample of a test that lasts less
/// than a day and issues fewer than 10^12 samples: its `Sample` pair, in
/// Server its `Latency` counter, with `first_token` its `Token` instant.
pub(crate) fn sample_bytes(server: bool, first_token: bool) -> u64 {
    const DAY_NS: i64 = 86_400 * 1_000_000_000;
    let span = SampleSpan {
        sample_seq: 999_999_999_999,
        query_seq: 999_999_999_999,
        sample_idx: 999_999_999,
        scheduled_ns: DAY_NS,
        issued_ns: 2 * DAY_NS,
        completed_ns: 3 * DAY_NS,
    };
    let Ok(mut t) = TraceLog::new(Vec::new(), 0.0) else {
        unreachable!("writing to memory does not fail")
    };
    t.pid = 4_194_304;
    let header = t.out.len();
    let _ = t.sample(&span);
    if server {
        let _ = t.latency_counter(&span);
    }
    if first_token {
        let _ = t.first_token(span.sample_seq, span.completed_ns);
    }
    (t.out.len() - header) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microseconds_have_three_decimals() {
        assert_eq!(us(553_592), "553.592");
        assert_eq!(us(5), "0.005");
        assert_eq!(us(-1500), "-1.500");
    }

    #[test]
    fn sample_events_have_the_official_fields() {
        let mut t = TraceLog::new(Vec::new(), 1.0).unwrap();
        t.sample(&SampleSpan {
            sample_seq: 0,
            query_seq: 0,
            sample_idx: 784,
            scheduled_ns: 553_592,
            issued_ns: 553_592,
            completed_ns: 626_360,
        })
        .unwrap();
        let text = String::from_utf8(t.finish().unwrap()).unwrap();
        assert!(text.contains("{\"name\":\"Sample\",\"cat\":\"default\",\"ph\":\"b\","));
        assert!(text.contains("\"ts\":553.592,\"args\":{\"sample_seq\":0,\"query_seq\":0,\"sample_idx\":784,\"issue_start_ns\":0,\"complete_ns\":72768}}"));
        assert!(text.contains("\"ph\":\"e\", \"pid\":"));
        assert!(text.contains("\"id\":0,\"ts\":626.360}"));
    }
}
