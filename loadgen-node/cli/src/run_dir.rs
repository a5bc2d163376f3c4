//! A finished run's outputs, read back: the detail log's records, the
//! latency breakdown, and each sample's latency where the run left them
//! (the native engine's side file, or the trace log of either LoadGen).
//! What the HTML report, `compare` and `sweep` read; never written here.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use loadgen_engine::latency_file::{self, LatencyFile};
use serde_json::Value;

use crate::breakdown;

pub const DETAIL: &str = "mlperf_log_detail.txt";

/// `99.00` for p = 0.99, as the detail log's percentile keys write it.
pub fn percentile_key(p: f64) -> String {
    format!("{:.2}", p * 100.0)
}

/// `p99`, `p99.9`, `p50`: a percentile for people.
pub fn percentile_name(p: f64) -> String {
    let s = format!("{:.1}", p * 100.0);
    format!("p{}", s.trim_end_matches(".0"))
}
pub const TRACE: &str = "mlperf_log_trace.json";

/// The detail log's values by key (the last of a key wins: results come
/// after the settings they replace).
pub fn read_detail(path: &Path) -> Result<BTreeMap<String, Value>> {
    let file = std::fs::File::open(path).with_context(|| {
        format!(
            "cannot read {} (is this an output directory?)",
            path.display()
        )
    })?;
    let mut out = BTreeMap::new();
    for (n, line) in BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("{}: line {}", path.display(), n + 1))?;
        let Some(record) = line.strip_prefix(":::MLLOG ") else {
            continue;
        };
        let v: Value = serde_json::from_str(record)
            .with_context(|| format!("{}: line {}: not a log record", path.display(), n + 1))?;
        if let Some(k) = v["key"].as_str() {
            out.insert(k.to_string(), v["value"].clone());
        }
    }
    if out.is_empty() {
        bail!("{}: no log records", path.display());
    }
    Ok(out)
}

/// The breakdown file in `dir`, when there is one.
pub fn read_breakdown(dir: &Path) -> Result<Option<Value>> {
    let path = dir.join(breakdown::FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str::<Value>(&text)
            .map(Some)
            .with_context(|| format!("{}: not valid JSON", path.display())),
        Err(_) => Ok(None),
    }
}

/// One sample of the trace log: when it was due (µs on the trace's clock),
/// its latency, and its query.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TraceSample {
    pub ts_us: f64,
    pub latency_ns: f64,
    pub query_seq: u64,
}

/// Every sample event of a trace log (either LoadGen's: one event a line,
/// as both write it). A line that is not a sample event is skipped.
pub fn trace_samples(path: &Path) -> Result<Vec<TraceSample>> {
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut samples = Vec::new();
    for line in BufReader::new(file).lines() {
        let line = line.with_context(|| format!("cannot read {}", path.display()))?;
        if !line.contains("\"name\":\"Sample\"") || !line.contains("\"ph\":\"b\"") {
            continue;
        }
        let line = line.trim_end().trim_end_matches(',');
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if let (Some(ts), Some(lat)) = (v["ts"].as_f64(), v["args"]["complete_ns"].as_f64()) {
            samples.push(TraceSample {
                ts_us: ts,
                latency_ns: lat,
                query_seq: v["args"]["query_seq"].as_u64().unwrap_or(0),
            });
        }
    }
    Ok(samples)
}

/// Where a run's per-sample latencies came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleSource {
    /// The native engine's side file (`mlperf_net_latencies.bin`).
    SideFile,
    /// The trace log's sample events.
    Trace,
}

impl SampleSource {
    pub fn file(self) -> &'static str {
        match self {
            SampleSource::SideFile => latency_file::FILE,
            SampleSource::Trace => TRACE,
        }
    }
}

/// The performance series' samples of one run, in issue order.
#[derive(Clone, Debug)]
pub struct Samples {
    pub source: SampleSource,
    /// Each sample's latency (ns).
    pub latency_ns: Vec<f64>,
    /// Each query's latency (its slowest sample's), for MultiStream.
    pub query_latency_ns: Vec<f64>,
    /// Each sample's completion, seconds after the first was due.
    pub completed_s: Vec<f64>,
    /// Time to first token and time per output token (ns) of token runs.
    pub ttft_ns: Vec<f64>,
    pub tpot_ns: Vec<f64>,
    /// Tokens of each sample (token runs), in the order of `completed_s`.
    pub tokens: Vec<f64>,
    /// The side file ended inside a record.
    pub truncated: bool,
}

impl Samples {
    fn from_side_file(f: &LatencyFile) -> Option<Samples> {
        let series = f.performance()?;
        let mut recs = series.samples.clone();
        recs.sort_by_key(|r| (r.scheduled_ns, r.scheduled_ns + r.latency_ns));
        let start = recs.first()?.scheduled_ns;
        let mut queries: BTreeMap<u64, f64> = BTreeMap::new();
        let mut s = Samples::empty(SampleSource::SideFile);
        s.truncated = f.truncated;
        for r in &recs {
            let lat = r.latency_ns as f64;
            s.latency_ns.push(lat);
            s.completed_s
                .push((r.scheduled_ns + r.latency_ns - start) as f64 / 1e9);
            let q = queries.entry(r.query_seq).or_insert(0.0);
            *q = q.max(lat);
            if series.tokens {
                s.tokens.push(r.n_tokens.max(0) as f64);
                if let Some(ft) = r.first_token_ns {
                    s.ttft_ns.push(ft as f64);
                    if r.n_tokens > 1 {
                        s.tpot_ns
                            .push((r.latency_ns - ft) as f64 / (r.n_tokens - 1) as f64);
                    }
                }
            }
        }
        s.query_latency_ns = queries.into_values().collect();
        Some(s)
    }

    fn from_trace(trace: &[TraceSample]) -> Option<Samples> {
        let mut t = trace.to_vec();
        t.sort_by(|a, b| a.ts_us.total_cmp(&b.ts_us));
        let start = t.first()?.ts_us;
        let mut queries: BTreeMap<u64, f64> = BTreeMap::new();
        let mut s = Samples::empty(SampleSource::Trace);
        for x in &t {
            s.latency_ns.push(x.latency_ns);
            s.completed_s
                .push((x.ts_us - start) / 1e6 + x.latency_ns / 1e9);
            let q = queries.entry(x.query_seq).or_insert(0.0);
            *q = q.max(x.latency_ns);
        }
        s.query_latency_ns = queries.into_values().collect();
        Some(s)
    }

    fn empty(source: SampleSource) -> Samples {
        Samples {
            source,
            latency_ns: Vec::new(),
            query_latency_ns: Vec::new(),
            completed_s: Vec::new(),
            ttft_ns: Vec::new(),
            tpot_ns: Vec::new(),
            tokens: Vec::new(),
            truncated: false,
        }
    }
}

/// One run's outputs.
#[derive(Debug)]
pub struct RunDir {
    pub dir: PathBuf,
    pub detail: BTreeMap<String, Value>,
    pub breakdown: Option<Value>,
    /// The benchmark the side file names (the MLPerf logs do not).
    pub benchmark: Option<String>,
    /// Per-sample latencies, where the run left them.
    pub samples: Option<Samples>,
}

impl RunDir {
    /// Reads the run whose logs are in `dir` (its breakdown and side file
    /// in `extras`). A trace log gives the samples only for a run with
    /// one performance series and no accuracy one (PerformanceOnly), as
    /// its events do not say which series they belong to.
    pub fn read(dir: &Path, extras: &Path) -> Result<RunDir> {
        let detail = read_detail(&dir.join(DETAIL))?;
        let breakdown = read_breakdown(extras)?;
        let side = extras.join(latency_file::FILE);
        let side = match side.exists() {
            true => Some(latency_file::read(&side)?),
            false => None,
        };
        let benchmark = side.as_ref().map(|f| f.benchmark.clone());
        let mut samples = side.as_ref().and_then(Samples::from_side_file);
        let trace = dir.join(TRACE);
        let performance_only = detail
            .get("effective_test_mode")
            .and_then(Value::as_str)
            .is_some_and(|m| m == "PerformanceOnly");
        if samples.is_none() && performance_only && trace.exists() {
            samples = Samples::from_trace(&trace_samples(&trace)?);
        }
        Ok(RunDir {
            dir: dir.to_path_buf(),
            detail,
            breakdown,
            benchmark,
            samples,
        })
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.detail.get(key)
    }

    pub fn number(&self, key: &str) -> Option<f64> {
        self.detail.get(key).and_then(Value::as_f64)
    }

    pub fn text(&self, key: &str) -> Option<&str> {
        self.detail.get(key).and_then(Value::as_str)
    }

    pub fn valid(&self) -> Option<bool> {
        self.text("result_validity").map(|v| v == "VALID")
    }
}

/// One of the official LoadGen's reference runs the tests read.
#[cfg(test)]
pub(crate) fn conformance_run(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../engine/tests/data/conformance")
        .join(case)
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadgen_engine::latency_file::LatencyFileSettings;
    use loadgen_engine::null_sut::{NullSut, SizedQsl};
    use loadgen_engine::runner::{start_test, LogSettings};
    use loadgen_engine::{Scenario, TestMode, TestSettings};

    #[test]
    fn a_native_run_gives_its_samples_from_the_side_file() {
        let dir = testkit::Scratch::new("run-dir-side");
        let logs = LogSettings {
            outdir: dir.to_path_buf(),
            enable_trace: true,
            latency_file: Some(LatencyFileSettings {
                path: dir.join(latency_file::FILE),
                benchmark: "resnet50".into(),
            }),
            ..LogSettings::default()
        };
        let settings = TestSettings {
            scenario: Scenario::MultiStream,
            mode: TestMode::PerformanceOnly,
            multi_stream_samples_per_query: 4,
            min_query_count: 50,
            min_duration_ms: 0,
            ..TestSettings::default()
        };
        start_test(
            &NullSut::default(),
            &SizedQsl::new(64, 64),
            &settings,
            &logs,
            None,
        )
        .unwrap();
        let run = RunDir::read(&dir, &dir).unwrap();
        assert_eq!(run.benchmark.as_deref(), Some("resnet50"));
        let s = run.samples.clone().expect("samples");
        assert_eq!(s.source, SampleSource::SideFile);
        let queries = run.number("result_query_count").unwrap() as usize;
        assert_eq!(s.query_latency_ns.len(), queries);
        assert_eq!(s.latency_ns.len(), queries * 4);
        let max = run.number("result_max_latency_ns").unwrap();
        assert_eq!(s.latency_ns.iter().cloned().fold(0.0, f64::max), max);

        // The same run read from its trace alone.
        std::fs::remove_file(dir.join(latency_file::FILE)).unwrap();
        let run = RunDir::read(&dir, &dir).unwrap();
        let t = run.samples.expect("samples from the trace");
        assert_eq!(t.source, SampleSource::Trace);
        assert_eq!(t.latency_ns.len(), queries * 4);
        assert_eq!(t.query_latency_ns.len(), queries);
    }
}
