//! `mlperf_log_detail.txt`: one `:::MLLOG {...}` record per line (`logging.h`, `MLPERF_LOG`; `logging.cc`, `AsyncLog`).

use std::fmt::Write as _;
use std::io::{self, Write};

use crate::escape::push_json_escaped;
use crate::number_format::g6;

/// A value of a detail-log record, encoded as the official LoadGen does.
#[derive(Clone, Debug, PartialEq)]
pub enum LogValue {
    /// Written between quotes, escaped as the official LoadGen escapes JSON strings.
    Str(String),
    /// Written as `true` or `false`.
    Bool(bool),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    Uint(u64),
    /// Written with `%g`.
    Float(f64),
    /// `[a,b,c]` without spaces.
    Indices(Vec<usize>),
    /// A `{"k":"v",...}` map, keys in the given order.
    Map(Vec<(String, String)>),
}

impl LogValue {
    fn write_to(&self, out: &mut String) {
        match self {
            LogValue::Str(s) => {
                out.push('"');
                push_json_escaped(out, s);
                out.push('"');
            }
            LogValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            LogValue::Int(v) => {
                let _ = write!(out, "{v}");
            }
            LogValue::Uint(v) => {
                let _ = write!(out, "{v}");
            }
            LogValue::Float(v) => out.push_str(&g6(*v)),
            LogValue::Indices(list) => {
                // The official LoadGen prints "[" then "a," per element with the last comma
                // replaced by "]", so an empty list prints as "]".
                if list.is_empty() {
                    out.push(']');
                } else {
                    out.push('[');
                    for (i, v) in list.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        let _ = write!(out, "{v}");
                    }
                    out.push(']');
                }
            }
            LogValue::Map(entries) => {
                out.push('{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push('"');
                    push_json_escaped(out, k);
                    out.push_str("\":\"");
                    push_json_escaped(out, v);
                    out.push('"');
                }
                out.push('}');
            }
        }
    }
}

/// The value as the detail log writes it.
impl std::fmt::Display for LogValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = String::new();
        self.write_to(&mut s);
        f.write_str(&s)
    }
}

impl From<&str> for LogValue {
    fn from(s: &str) -> Self {
        LogValue::Str(s.to_string())
    }
}
impl From<String> for LogValue {
    fn from(s: String) -> Self {
        LogValue::Str(s)
    }
}
impl From<bool> for LogValue {
    fn from(b: bool) -> Self {
        LogValue::Bool(b)
    }
}
impl From<u64> for LogValue {
    fn from(v: u64) -> Self {
        LogValue::Uint(v)
    }
}
impl From<i64> for LogValue {
    fn from(v: i64) -> Self {
        LogValue::Int(v)
    }
}
impl From<f64> for LogValue {
    fn from(v: f64) -> Self {
        LogValue::Float(v)
    }
}

/// Where in this engine's source a record was emitted: the record's `file`
/// and `line_no` metadata, which the official LoadGen fills from `__FILE__`
/// and `__LINE__` (`logging.h`, `MLPERF_LOG`, `AsyncLog::LogDetail`). Tools
/// do not read it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Location {
    pub file: &'static str,
    pub line: u32,
}

/// The location of the calling line.
macro_rules! here {
    () => {
        $crate::detail::Location {
            file: file!(),
            line: line!(),
        }
    };
}
pub(crate) use here;

/// Writes detail records and counts warnings and errors for the summary footer.
pub(crate) struct DetailLog<W: Write> {
    out: W,
    pid: u32,
    warnings: u64,
    errors: u64,
    line: String,
}

impl<W: Write> DetailLog<W> {
    pub(crate) fn new(out: W) -> Self {
        Self {
            out,
            pid: std::process::id(),
            warnings: 0,
            errors: 0,
            line: String::with_capacity(256),
        }
    }

    /// Appends one record; `elapsed_ns` is the time since logging started.
    /// Keys starting with `error_` / `warning_` are flagged and counted.
    pub(crate) fn log(
        &mut self,
        key: &str,
        value: &LogValue,
        elapsed_ns: i64,
        at: Location,
    ) -> io::Result<()> {
        let is_error = key.starts_with("error_");
        let is_warning = key.starts_with("warning_");
        self.errors += is_error as u64;
        self.warnings += is_warning as u64;
        let ns = elapsed_ns.max(0);
        let line = &mut self.line;
        line.clear();
        line.push_str(":::MLLOG {\"key\": \"");
        push_json_escaped(line, key);
        line.push_str("\", \"value\": ");
        value.write_to(line);
        let _ = write!(
            line,
            ", \"time_ms\": {}.{:06}, \"namespace\": \"mlperf::logging\", \"event_type\": \"POINT_IN_TIME\", \"metadata\": {{\"is_error\": {is_error}, \"is_warning\": {is_warning}, \"file\": \"{}\", \"line_no\": {}, \"pid\": {}, \"tid\": {}}}}}",
            ns / 1_000_000,
            ns % 1_000_000,
            at.file.rsplit('/').next().unwrap_or(at.file),
            at.line,
            self.pid,
            current_tid(),
        );
        line.push('\n');
        self.out.write_all(line.as_bytes())?;
        if is_error {
            // Errors reach the disk at once, like the official LoadGen, so a crash keeps them.
            self.out.flush()?;
        }
        Ok(())
    }

    pub(crate) fn warnings(&self) -> u64 {
        self.warnings
    }

    pub(crate) fn errors(&self) -> u64 {
        self.errors
    }

    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// OS thread id, as the official LoadGen records it.
pub(crate) fn current_tid() -> i64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as i64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_layout() {
        let mut log = DetailLog::new(Vec::new());
        log.log(
            "loaded_qsl_set",
            &LogValue::Indices(vec![3, 1, 2]),
            1_234_567,
            here!(),
        )
        .unwrap();
        log.log("error_runtime", &"boom".into(), 5, here!())
            .unwrap();
        log.log("warning_generic_message", &"w".into(), 5, here!())
            .unwrap();
        log.log("empty", &LogValue::Indices(vec![]), 0, here!())
            .unwrap();
        let text = String::from_utf8(log.out.clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with(
            ":::MLLOG {\"key\": \"loaded_qsl_set\", \"value\": [3,1,2], \"time_ms\": 1.234567, \"namespace\": \"mlperf::logging\", \"event_type\": \"POINT_IN_TIME\", \"metadata\": {\"is_error\": false, \"is_warning\": false, \"file\": \"detail.rs\""
        ));
        assert!(lines[1].contains("\"is_error\": true, \"is_warning\": false"));
        assert!(lines[2].contains("\"is_error\": false, \"is_warning\": true"));
        assert!(lines[3].contains("\"value\": ], \"time_ms\": 0.000000"));
        assert_eq!((log.errors(), log.warnings()), (1, 1));
    }

    #[test]
    fn float_and_map_values() {
        let mut s = String::new();
        LogValue::Float(1e6).write_to(&mut s);
        s.push(' ');
        LogValue::Map(vec![("/a".into(), "1".into()), ("/b".into(), "2".into())]).write_to(&mut s);
        assert_eq!(s, "1e+06 {\"/a\":\"1\",\"/b\":\"2\"}");
    }

    #[test]
    fn strings_cannot_forge_records() {
        let forged =
            "n\", \"value\": 1}\n:::MLLOG {\"key\": \"result_validity\", \"value\": \"VALID\"}";
        let mut log = DetailLog::new(Vec::new());
        log.log("sut_name", &forged.into(), 0, here!()).unwrap();
        let map = LogValue::Map(vec![(forged.into(), forged.into())]);
        log.log("requested_map", &map, 0, here!()).unwrap();
        let text = String::from_utf8(log.out.clone()).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(!text.contains("\"result_validity\", \"value\": \"VALID\""));
        assert!(text.contains("\"value\": \"n\\\", \\\"value\\\": 1}\\n:::MLLOG {\\\"key"));
    }
}
