//! The compliance audits of an MLPerf Inference submission (TEST01, TEST04,
//! TEST06, TEST07, TEST08, TEST09): which benchmark needs which, the settings of each audit's
//! `audit.config`, and the published verification rules, implemented here so
//! that a verdict needs no Python. Each verification returns the lines the
//! official verification script prints, so a reader sees the same report.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use facts::benchmarks::{self, Audit, Round};
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum ComplianceError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Malformed { path: String, reason: String },
    #[error("unknown audit test `{0}`: expected TEST01, TEST04, TEST06, TEST07, TEST08 or TEST09")]
    UnknownTest(String),
    #[error("{test} is not an audit that {model} requires (it requires: {required})")]
    NotRequired {
        test: AuditTest,
        model: String,
        required: String,
    },
}

/// A compliance audit this node runs and verifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AuditTest {
    /// Accuracy in performance mode: sampled answers of a performance run
    /// must equal the accuracy run's.
    Test01,
    /// No result caching: a run repeating one sample may not be faster.
    Test04,
    /// LLM output consistency: first token, EOS and token count.
    Test06,
    /// Accuracy in performance mode on the benchmark's compliance data set:
    /// every sample logged and scored against a threshold.
    Test07,
    /// DLRMv3's accuracy in performance mode: sampled answers' normalized
    /// entropy equals the accuracy run's, matched by (ts_idx, query_idx).
    Test08,
    /// Output length in performance mode: every sample logged, the mean
    /// length in tokens within bounds.
    Test09,
}

impl AuditTest {
    pub const ALL: [AuditTest; 6] = [
        AuditTest::Test01,
        AuditTest::Test04,
        AuditTest::Test06,
        AuditTest::Test07,
        AuditTest::Test08,
        AuditTest::Test09,
    ];

    pub fn name(self) -> &'static str {
        match self {
            AuditTest::Test01 => "TEST01",
            AuditTest::Test04 => "TEST04",
            AuditTest::Test06 => "TEST06",
            AuditTest::Test07 => "TEST07",
            AuditTest::Test08 => "TEST08",
            AuditTest::Test09 => "TEST09",
        }
    }
}

impl fmt::Display for AuditTest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for AuditTest {
    type Err = ComplianceError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AuditTest::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| ComplianceError::UnknownTest(s.to_string()))
    }
}

impl AuditTest {
    /// The audit of the table this node runs, if it runs it.
    pub fn of(audit: Audit) -> Option<AuditTest> {
        Some(match audit {
            Audit::Test01 => AuditTest::Test01,
            Audit::Test04 => AuditTest::Test04,
            Audit::Test06 => AuditTest::Test06,
            Audit::Test07 => AuditTest::Test07,
            Audit::Test08 => AuditTest::Test08,
            Audit::Test09 => AuditTest::Test09,
        })
    }

    /// Whether its run logs answers that go to `TESTxx/accuracy`.
    pub fn logs_answers(self) -> bool {
        !matches!(self, AuditTest::Test04)
    }
}

/// The audits the submission checker requires of a closed or network
/// division result of `model` in `round` (the suite table's).
pub fn required_audits(model: &str, round: Round) -> Vec<Audit> {
    benchmarks::find(model)
        .and_then(|b| b.rules(round))
        .map_or_else(Vec::new, |r| r.audits.to_vec())
}

/// Refuses an audit that `model` does not require in `round`.
pub fn check_required(test: AuditTest, model: &str, round: Round) -> Result<(), ComplianceError> {
    let required = required_audits(model, round);
    if required.iter().any(|a| AuditTest::of(*a) == Some(test)) {
        return Ok(());
    }
    Err(ComplianceError::NotRequired {
        test,
        model: format!("{model} ({round} rules)"),
        required: match required.is_empty() {
            true => "none".into(),
            false => required
                .iter()
                .map(|t| t.name())
                .collect::<Vec<_>>()
                .join(", "),
        },
    })
}

/// The seed of the accuracy-log sampling in TEST01 and TEST06.
const AUDIT_ACCURACY_SEED: u64 = 720_381_539_243_781_796;

/// The settings of the test's official `audit.config` for `model`.
pub fn audit_config(test: AuditTest, model: &str) -> String {
    match test {
        AuditTest::Test01 => {
            // Samples logged: fewer for benchmarks with large outputs.
            let target = match model {
                "3d-unet" | "yolo" => 64,
                "retinanet" | "pointpainting" => 256,
                "stable-diffusion-xl" => 128,
                _ => 4096,
            };
            format!(
                "*.*.mode = 2\n*.*.accuracy_log_rng_seed = {AUDIT_ACCURACY_SEED}\n\
                 *.*.accuracy_log_sampling_target = {target}\n"
            )
        }
        AuditTest::Test04 => {
            let mut text = String::new();
            for s in ["MultiStream", "Offline", "SingleStream", "Server"] {
                text.push_str(&format!(
                    "*.{s}.mode = 2\n*.{s}.performance_issue_unique = 0\n\
                     *.{s}.performance_issue_same = 1\n*.{s}.performance_issue_same_index = 3\n"
                ));
            }
            text
        }
        AuditTest::Test06 => format!(
            "*.*.mode = 2\n*.*.accuracy_log_rng_seed = {AUDIT_ACCURACY_SEED}\n\
             *.*.accuracy_log_sampling_target = 100\n*.*.min_query_count = 100\n\
             *.*.min_duration = 0\n*.*.sample_concatenate_permutation = 0\n"
        ),
        // Every sample of the compliance data set, each once.
        AuditTest::Test07 => {
            let t = test07_settings(model);
            let (samples, threshold) = t.map_or((0, "0"), |t| (t.samples, t.accuracy_threshold));
            format!(
                "*.*.mode = 2\n*.*.accuracy_log_rng_seed = {AUDIT_ACCURACY_SEED}\n\
                 *.*.accuracy_log_sampling_target = {samples}\n*.*.min_query_count = {samples}\n\
                 *.*.min_duration = 0\n*.*.performance_issue_unique = 1\n\
                 *.*.sample_concatenate_permutation = 0\n\
                 *.*.test07_accuracy_threshold = {threshold}\n"
            )
        }
        AuditTest::Test08 => format!(
            "*.*.mode = 2\n*.*.accuracy_log_rng_seed = {AUDIT_ACCURACY_SEED}\n\
             *.*.accuracy_log_sampling_target = 4096\n"
        ),
        // Every sample of the data set, each once.
        AuditTest::Test09 => {
            let samples = benchmarks::find(model).map_or(0, |b| b.total_samples);
            let (min, max) = test09_settings(model)
                .map_or(("0", "0"), |t| (t.min_output_tokens, t.max_output_tokens));
            format!(
                "*.*.mode = 2\n*.*.accuracy_log_rng_seed = {AUDIT_ACCURACY_SEED}\n\
                 *.*.accuracy_log_sampling_target = {}\n*.*.min_query_count = {samples}\n\
                 *.*.min_duration = 0\n*.*.performance_issue_unique = 1\n\
                 *.*.sample_concatenate_permutation = 0\n\
                 *.*.test09_min_output_tokens = {min}\n*.*.test09_max_output_tokens = {max}\n",
                samples.max(10_000)
            )
        }
    }
}

/// TEST07's settings of `model`, from the suite table.
pub fn test07_settings(model: &str) -> Option<benchmarks::Test07> {
    benchmarks::find(model).and_then(|b| b.test07)
}

/// TEST09's settings of `model`, from the suite table.
pub fn test09_settings(model: &str) -> Option<benchmarks::Test09> {
    benchmarks::find(model).and_then(|b| b.test09)
}

/// The value of an audit.config setting (`*.*.name = value`), as the
/// verification scripts read it: the last line whose key ends in `name`,
/// a comment after `#` dropped.
pub fn audit_setting(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let parts: Vec<&str> = key.trim().split('.').collect();
        if parts.len() >= 3 && parts.last() == Some(&name) {
            let value = value.split('#').next().unwrap_or("").trim();
            if let Ok(v) = value.parse::<f64>() {
                found = Some(v);
            }
        }
    }
    found
}

/// Element type of the accuracy-log data, as the verification scripts'
/// `--dtype` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    Byte,
    Int16,
    Int32,
    Int64,
    Float32,
}

impl std::str::FromStr for Dtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "byte" => Dtype::Byte,
            "int16" => Dtype::Int16,
            "int32" => Dtype::Int32,
            "int64" => Dtype::Int64,
            "float32" => Dtype::Float32,
            _ => {
                return Err(format!(
                    "unknown dtype `{s}`: byte, int16, int32, int64 or float32"
                ))
            }
        })
    }
}

/// One decoded element, compared as numpy compares them (NaN differs from
/// itself, -0.0 equals 0.0).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Element {
    Int(i64),
    Float(f64),
}

impl Dtype {
    fn size(self) -> usize {
        match self {
            Dtype::Byte => 1,
            Dtype::Int16 => 2,
            Dtype::Int32 | Dtype::Float32 => 4,
            Dtype::Int64 => 8,
        }
    }

    /// The elements of `bytes`; None when the length is not a whole number
    /// of elements (numpy refuses such a buffer).
    fn decode(self, bytes: &[u8]) -> Option<Vec<Element>> {
        if !bytes.len().is_multiple_of(self.size()) {
            return None;
        }
        Some(
            bytes
                .chunks_exact(self.size())
                .map(|c| match self {
                    Dtype::Byte => Element::Int(c[0] as i8 as i64),
                    Dtype::Int16 => Element::Int(i16::from_le_bytes([c[0], c[1]]) as i64),
                    Dtype::Int32 => {
                        Element::Int(i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
                    }
                    Dtype::Int64 => {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(c);
                        Element::Int(i64::from_le_bytes(b))
                    }
                    Dtype::Float32 => {
                        Element::Float(f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
                    }
                })
                .collect(),
        )
    }
}

/// A verification's verdict and the lines its official script prints.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub passed: bool,
    pub lines: Vec<String>,
}

impl Report {
    pub fn text(&self) -> String {
        self.lines.iter().map(|l| format!("{l}\n")).collect()
    }
}

/// An accuracy-log entry: qsl index, the hex data, and the LLM keys.
struct Entry {
    qsl_idx: u64,
    data: String,
    token_data: Option<String>,
    token_count: Option<i64>,
}

fn read(path: &Path) -> Result<String, ComplianceError> {
    std::fs::read_to_string(path).map_err(|source| ComplianceError::Io {
        path: path.display().to_string(),
        source,
    })
}

fn malformed(path: &Path, reason: impl Into<String>) -> ComplianceError {
    ComplianceError::Malformed {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

fn accuracy_log(path: &Path) -> Result<Vec<Entry>, ComplianceError> {
    let entries: Vec<Value> = serde_json::from_str(&read(path)?)
        .map_err(|e| malformed(path, format!("not a JSON array: {e}")))?;
    entries
        .iter()
        .enumerate()
        .map(|(n, e)| {
            let (Some(qsl_idx), Some(data)) = (e["qsl_idx"].as_u64(), e["data"].as_str()) else {
                return Err(malformed(path, format!("entry {n} lacks qsl_idx or data")));
            };
            Ok(Entry {
                qsl_idx,
                data: data.to_string(),
                token_data: e["token_data"].as_str().map(String::from),
                token_count: e["token_count"]
                    .as_i64()
                    .or_else(|| e["token_count"].as_str().and_then(|s| s.parse().ok())),
            })
        })
        .collect()
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn elements(hex: &str, dtype: Dtype) -> Option<Vec<Element>> {
    dtype.decode(&from_hex(hex)?)
}

/// TEST01's accuracy comparison: every sampled answer of the audit run whose
/// sample the accuracy run also answered must have the same first element.
pub fn test01_accuracy(
    reference: &Path,
    test: &Path,
    dtype: Dtype,
) -> Result<Report, ComplianceError> {
    let reference_entries = accuracy_log(reference)?;
    let test_entries = accuracy_log(test)?;
    let mut lines = vec![
        "Verifying accuracy. This might take a while...".to_string(),
        "Reading accuracy mode results...".to_string(),
    ];
    let mut known: HashMap<u64, String> = HashMap::new();
    let (mut duplicates, mut duplicate_mismatches) = (0, 0);
    for e in &reference_entries {
        match known.get(&e.qsl_idx) {
            Some(data) => {
                duplicates += 1;
                if *data != e.data {
                    duplicate_mismatches += 1;
                }
            }
            None => {
                known.insert(e.qsl_idx, e.data.clone());
            }
        }
    }
    lines.push("Reading performance mode results...".into());
    let (mut matched, mut mismatches, mut missing) = (0, 0, 0);
    for e in &test_entries {
        let undecodable = || {
            malformed(
                test,
                format!(
                    "qsl_idx {}: data is not a whole number of {dtype:?} elements",
                    e.qsl_idx
                ),
            )
        };
        let data = elements(&e.data, dtype).ok_or_else(undecodable)?;
        match known.get(&e.qsl_idx) {
            Some(hex) => {
                matched += 1;
                let reference = elements(hex, dtype).ok_or_else(|| {
                    malformed(
                        reference,
                        format!(
                            "qsl_idx {}: data is not a whole number of {dtype:?} elements",
                            e.qsl_idx
                        ),
                    )
                })?;
                let differs = match (reference.first(), data.first()) {
                    (Some(a), Some(b)) => a != b,
                    (a, b) => a.is_some() != b.is_some(),
                };
                if differs {
                    mismatches += 1;
                }
            }
            None => missing += 1,
        }
        // As the official script: a later entry of the same sample is
        // compared with this one.
        known.insert(e.qsl_idx, e.data.clone());
    }
    lines.extend([
        format!("num_acc_log_entries = {}", reference_entries.len()),
        format!("num_acc_log_duplicate_keys = {duplicates}"),
        format!("num_acc_log_data_mismatch = {duplicate_mismatches}"),
        format!("num_perf_log_entries = {}", test_entries.len()),
        format!("num_perf_log_qsl_idx_match = {matched}"),
        format!("num_perf_log_data_mismatch = {mismatches}"),
        format!("num_missing_qsl_idxs = {missing}"),
    ]);
    let passed = mismatches == 0 && matched > 0;
    lines.push(if passed { "TEST PASS" } else { "TEST FAIL" }.into());
    lines.push(String::new());
    Ok(Report { passed, lines })
}

/// The first value of `key` in a detail log (`:::MLLOG` lines).
struct DetailLog {
    records: Vec<Value>,
}

impl DetailLog {
    fn read(path: &Path) -> Result<DetailLog, ComplianceError> {
        let records = read(path)?
            .lines()
            .filter_map(|l| l.strip_prefix(":::MLLOG"))
            .map(|j| {
                serde_json::from_str(j).map_err(|e| malformed(path, format!("bad record: {e}")))
            })
            .collect::<Result<Vec<Value>, _>>()?;
        if records.is_empty() {
            return Err(malformed(path, "no :::MLLOG records"));
        }
        Ok(DetailLog { records })
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.records
            .iter()
            .find(|r| r["key"] == key)
            .map(|r| &r["value"])
    }

    fn num_errors(&self) -> u64 {
        match self.get("num_errors").and_then(Value::as_u64) {
            Some(n) => n,
            None => self
                .records
                .iter()
                .filter(|r| r["metadata"]["is_error"] == true)
                .count() as u64,
        }
    }
}

/// Python's `repr` of a float, so scores print as the official scripts print
/// them.
pub fn py_float(x: f64) -> String {
    if !x.is_finite() {
        return match x {
            x if x.is_nan() => "nan".into(),
            x if x > 0.0 => "inf".into(),
            _ => "-inf".into(),
        };
    }
    let a = x.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        let s = format!("{x:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let (sign, digits) = match exp.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exp),
        };
        return format!("{mantissa}e{sign}{digits:0>2}");
    }
    if x.fract() == 0.0 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

/// The detail-log key of each scenario's score, as TEST01's performance
/// check reads it.
fn score_key(scenario: &str) -> Option<&'static str> {
    Some(match scenario {
        "Offline" => "result_samples_per_second",
        "SingleStream" => "early_stopping_latency_ss",
        "MultiStream" => "early_stopping_latency_ms",
        "Server" => "result_completed_samples_per_sec",
        _ => return None,
    })
}

/// Scenario, score and Server target latency of a detail log.
struct Scored {
    scenario: String,
    score: f64,
    latency: Option<Value>,
}

/// The score of a detail log; Err(line) is the official script's failure
/// line.
fn detail_score(path: &Path) -> Result<Result<Scored, String>, ComplianceError> {
    let log = DetailLog::read(path)?;
    let scenario = log
        .get("effective_scenario")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed(path, "no effective_scenario"))?
        .to_string();
    let score = score_key(&scenario)
        .and_then(|k| log.get(k))
        .and_then(|v| {
            v.as_f64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        })
        .ok_or_else(|| malformed(path, format!("no score for scenario {scenario}")))?;
    if log.get("result_validity").and_then(Value::as_str) != Some("VALID") {
        return Ok(Err(format!(
            "TEST FAIL: Invalid results in {}",
            path.display()
        )));
    }
    if log.num_errors() != 0 {
        // The official script fails here (its warning line cannot be built).
        return Ok(Err(format!("TEST FAIL: {} reports errors", path.display())));
    }
    let latency = (scenario == "Server")
        .then(|| log.get("effective_target_latency_ns").cloned())
        .flatten();
    Ok(Ok(Scored {
        scenario,
        score,
        latency,
    }))
}

/// TEST01's performance check: the audit run's score within 10 % of the
/// reference performance run's (20 % for short latencies), from the detail
/// logs.
pub fn test01_performance(reference: &Path, test: &Path) -> Result<Report, ComplianceError> {
    let mut lines = vec!["Verifying performance.".to_string()];
    let fail = |mut lines: Vec<String>, why: String| {
        lines.push(why);
        Ok(Report {
            passed: false,
            lines,
        })
    };
    let Scored {
        scenario: ref_scenario,
        score: ref_score,
        latency: ref_latency,
    } = match detail_score(reference)? {
        Ok(s) => s,
        Err(why) => return fail(lines, why),
    };
    let Scored {
        scenario: test_scenario,
        score: test_score,
        latency: test_latency,
    } = match detail_score(test)? {
        Ok(s) => s,
        Err(why) => return fail(lines, why),
    };
    if ref_scenario != test_scenario {
        return fail(
            lines,
            "TEST FAIL: Test and reference scenarios do not match!".into(),
        );
    }
    if ref_scenario == "Server" && ref_latency != test_latency {
        return fail(lines, "TEST FAIL: Server target latency mismatch".into());
    }
    lines.push(format!("Reference score = {}", py_float(ref_score)));
    lines.push(format!("Test score = {}", py_float(test_score)));
    let threshold = match ref_scenario.as_str() {
        "SingleStream" if ref_score <= 200_000.0 => 0.20,
        "MultiStream" if ref_score <= 1_600_000.0 => 0.20,
        _ => 0.10,
    };
    let passed =
        ref_score * (1.0 - threshold) <= test_score && test_score <= ref_score * (1.0 + threshold);
    lines.push(match passed {
        true => "TEST PASS".into(),
        false => "TEST FAIL: Test score invalid".into(),
    });
    Ok(Report { passed, lines })
}

/// What TEST04's check reads from a summary: scenario, score (as written for
/// Offline and Server, 1e9 / latency for the streams), validity, errors.
struct SummaryScore {
    scenario: String,
    score: Option<String>,
    invalid: bool,
    errors: Vec<String>,
}

fn summary_score(path: &Path) -> Result<SummaryScore, ComplianceError> {
    let text = read(path)?;
    let mut s = SummaryScore {
        scenario: String::new(),
        score: None,
        invalid: false,
        errors: Vec::new(),
    };
    let value = |line: &str| line.split_once(": ").map(|(_, v)| v.trim().to_string());
    let inverse = |v: Option<String>| -> Option<String> {
        v.and_then(|v| v.parse::<f64>().ok())
            .map(|l| py_float(1e9 / l))
    };
    for line in text.lines() {
        if line.starts_with("Scenario") {
            s.scenario = value(line).unwrap_or_default();
            continue;
        }
        let es = |tags: &[&str]| {
            tags.iter()
                .any(|t| line.contains(&format!("Early stopping {t} percentile estimate")))
        };
        match s.scenario.as_str() {
            "SingleStream" if es(&["90th", "90.0th", "99.9th"]) => {
                s.score = inverse(value(line));
                continue;
            }
            "MultiStream" if es(&["99th", "99.0th"]) => {
                s.score = inverse(value(line));
                continue;
            }
            // The official pattern for the Server's target latency line never
            // matches it, so latencies are not compared.
            "Server" if line.starts_with("Completed samples per second") => {
                s.score = value(line);
                continue;
            }
            "Offline" if line.starts_with("Samples per second") => {
                s.score = value(line);
                continue;
            }
            _ => {}
        }
        if line.starts_with("Result is") && value(line).as_deref() == Some("INVALID") {
            s.invalid = true;
        }
        let digits = line.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && line[digits..].starts_with(" ERROR") {
            s.errors.push(line[..digits].to_string());
        }
    }
    Ok(s)
}

/// TEST04's check: the run that repeats one sample may not be more than
/// 10 % faster (20 % for short latencies) than the reference, from the
/// summaries.
pub fn test04_performance(reference: &Path, test: &Path) -> Result<Report, ComplianceError> {
    let mut lines = vec!["Verifying performance.".to_string()];
    let r = summary_score(reference)?;
    let fail = |mut lines: Vec<String>, why: &str| {
        lines.push(why.to_string());
        Ok(Report {
            passed: false,
            lines,
        })
    };
    if r.invalid {
        return fail(lines, "TEST FAIL: Reference results are invalid");
    }
    for e in &r.errors {
        lines.push(format!("WARNING: {e} ERROR reported in reference results"));
    }
    let t = summary_score(test)?;
    if t.invalid {
        return fail(lines, "TEST FAIL: Test results are invalid");
    }
    for e in &t.errors {
        lines.push(format!("WARNING: {e} ERROR reported in test results"));
    }
    if r.scenario != t.scenario {
        return fail(lines, "Test and reference scenarios do not match!");
    }
    let ref_score = r.score.unwrap_or_else(|| "0".into());
    let test_score = t.score.unwrap_or_else(|| "0".into());
    lines.push(format!("reference score = {ref_score}"));
    lines.push(format!("test score = {test_score}"));
    let (Ok(reference_value), Ok(test_value)) =
        (ref_score.parse::<f64>(), test_score.parse::<f64>())
    else {
        return fail(lines, "TEST FAIL: a score is not a number");
    };
    let threshold = match r.scenario.as_str() {
        "SingleStream" if reference_value <= 200_000.0 => 0.20,
        "MultiStream" if reference_value <= 1_600_000.0 => 0.20,
        _ => 0.10,
    };
    let passed = test_value < reference_value * (1.0 + threshold);
    lines.push(match passed {
        true => "TEST PASS".into(),
        false => "TEST FAIL: Test score invalid".into(),
    });
    Ok(Report { passed, lines })
}

/// TEST06's checks of an LLM audit run's accuracy log: the first token
/// reported on its own is the answer's first (not in Offline), no answer ends
/// in two or more EOS tokens, and `token_count` is the answer's length.
pub fn test06(
    accuracy: &Path,
    scenario: &str,
    dtype: Dtype,
    eos_token_id: i64,
) -> Result<Report, ComplianceError> {
    let entries = accuracy_log(accuracy)?;
    let mut lines = Vec::new();
    let eos = Element::Int(eos_token_id);
    let eos_pass = match entries
        .iter()
        .map(|e| elements(&e.data, dtype))
        .collect::<Option<Vec<_>>>()
    {
        Some(all) => all.iter().all(|data| {
            // Trailing EOS tokens, the first element aside.
            let trailing = data.iter().skip(1).rev().take_while(|t| **t == eos).count();
            trailing < 2
        }),
        None => {
            lines.push("Unexpected error occured while doing the EOS check".into());
            false
        }
    };
    let first_token_needed = scenario != "Offline";
    let first_token_pass = !first_token_needed
        || match entries
            .iter()
            .map(|e| {
                Some((
                    elements(&e.data, dtype)?,
                    elements(e.token_data.as_deref()?, dtype)?,
                ))
            })
            .collect::<Option<Vec<_>>>()
        {
            Some(all) => all
                .iter()
                .all(|(data, first)| data.iter().zip(first).all(|(a, b)| a == b)),
            None => {
                lines.push("Unexpected error occured while doing the first token check".into());
                false
            }
        };
    let mut length_pass = true;
    for e in &entries {
        let (Some(data), Some(count)) = (elements(&e.data, dtype), e.token_count) else {
            return Err(malformed(
                accuracy,
                format!(
                    "qsl_idx {}: no token_count, or data not of {dtype:?} elements",
                    e.qsl_idx
                ),
            ));
        };
        if data.len() as i64 != count {
            length_pass = false;
            break;
        }
    }
    let shown = |b: bool| match b {
        true => "True",
        false => "False",
    };
    lines.push(match first_token_needed {
        true => format!("First token check pass: {}", shown(first_token_pass)),
        false => "First token check pass: Skipped".into(),
    });
    lines.push(format!("EOS check pass: {}", shown(eos_pass)));
    lines.push(format!("Sample length check pass: {}", shown(length_pass)));
    let passed = eos_pass && first_token_pass && length_pass;
    lines.push(match passed {
        true => "TEST06 verification complete".into(),
        false => "TEST06 verification failed".into(),
    });
    Ok(Report { passed, lines })
}

/// The entries of an accuracy log as JSON values, for the audits that read
/// keys beyond qsl_idx and data.
fn log_values(path: &Path) -> Result<Vec<Value>, ComplianceError> {
    serde_json::from_str(&read(path)?)
        .map_err(|e| malformed(path, format!("not a JSON array: {e}")))
}

/// `entry N (qsl_idx Q)` of an accuracy-log entry, for messages.
fn entry_name(n: usize, e: &Value) -> String {
    match e["qsl_idx"].as_u64() {
        Some(q) => format!("entry {n} (qsl_idx {q})"),
        None => format!("entry {n}"),
    }
}

const RULE: &str =
    "================================================================================";

/// TEST09's check of an audit run's accuracy log: the mean answer length in
/// tokens (4-byte little-endian ids; an entry without data, or whose data is
/// not hexadecimal, counts 0) within `[min, max]`. The lines are those the
/// official script writes to `verify_output_len.txt`.
pub fn test09(accuracy: &Path, min: f64, max: f64) -> Result<Report, ComplianceError> {
    let entries = log_values(accuracy)?;
    if entries.is_empty() {
        return Err(malformed(accuracy, "no entries in the accuracy log"));
    }
    let lengths: Vec<u64> = entries
        .iter()
        .map(|e| match e["data"].as_str() {
            Some(hex) if !hex.is_empty() => from_hex(hex).map_or(0, |b| (b.len() / 4) as u64),
            _ => 0,
        })
        .collect();
    let n = lengths.len() as f64;
    let mean = lengths.iter().sum::<u64>() as f64 / n;
    let variance = lengths
        .iter()
        .map(|&x| (x as f64 - mean).powi(2))
        .sum::<f64>()
        / n;
    let (shortest, longest) = (
        lengths.iter().min().copied().unwrap_or(0),
        lengths.iter().max().copied().unwrap_or(0),
    );
    let (min_pass, max_pass) = (mean >= min, mean <= max);
    let passed = min_pass && max_pass;
    let shown = |b: bool| if b { "True" } else { "False" };
    let lines = vec![
        RULE.to_string(),
        "TEST09: Verify Output Token Length in Performance Mode".into(),
        RULE.into(),
        String::new(),
        "Output Token Length Statistics".into(),
        "-".repeat(40),
        format!("Total samples: {}", lengths.len()),
        format!("Mean output tokens: {mean:.2}"),
        format!("Min output tokens: {shortest}"),
        format!("Max output tokens: {longest}"),
        format!("Std deviation: {:.2}", variance.sqrt()),
        String::new(),
        RULE.into(),
        "Verification Results".into(),
        RULE.into(),
        format!("Mean output tokens: {mean:.2}"),
        format!("Min threshold: {}", py_float(min)),
        format!("Max threshold: {}", py_float(max)),
        format!("Min check pass: {}", shown(min_pass)),
        format!("Max check pass: {}", shown(max_pass)),
        String::new(),
        if passed { "TEST PASS" } else { "TEST FAIL" }.into(),
    ];
    Ok(Report { passed, lines })
}

/// TEST07's verification: `output` is what the accuracy script printed
/// (stdout and stderr together), scored by `pattern`'s first group against
/// `threshold`. The lines are those the official script writes to
/// `verify_accuracy.txt`: the script's output, then the summary.
pub fn test07(output: &str, pattern: &str, threshold: f64) -> Result<Report, ComplianceError> {
    let re = regex::Regex::new(pattern).map_err(|e| ComplianceError::Malformed {
        path: "the score pattern".into(),
        reason: e.to_string(),
    })?;
    let score = re
        .captures(output)
        .and_then(|c| c.get(1))
        .and_then(|m| m.as_str().parse::<f64>().ok());
    let mut lines: Vec<String> = output.lines().map(String::from).collect();
    lines.extend([
        String::new(),
        RULE.into(),
        "TEST07 Verification Summary".into(),
        RULE.into(),
    ]);
    let passed = match score {
        Some(score) => {
            let passed = score >= threshold;
            lines.extend([
                format!("Accuracy score: {}", py_float(score)),
                format!("Accuracy threshold: {}", py_float(threshold)),
                format!(
                    "Accuracy check pass: {}",
                    if passed { "True" } else { "False" }
                ),
            ]);
            passed
        }
        None => {
            lines.push("Error: Could not parse accuracy score".into());
            false
        }
    };
    lines.push(if passed { "TEST PASS" } else { "TEST FAIL" }.into());
    Ok(Report { passed, lines })
}

/// Normalized entropy of one DLRMv3 request, as TEST08 computes it.
fn normalized_entropy(predictions: &[f64], labels: &[f64], weights: &[f64]) -> f64 {
    const EPS: f64 = 1e-7;
    let clip = |x: f64| x.clamp(EPS, 1.0 - EPS);
    let total: f64 = weights.iter().sum();
    if total == 0.0 {
        return 0.0;
    }
    let cross: f64 = -predictions
        .iter()
        .zip(labels)
        .zip(weights)
        .map(|((&p, &l), &w)| {
            let (p, l) = (clip(p), clip(l));
            w * (l * p.ln() + (1.0 - l) * (1.0 - p).ln())
        })
        .sum::<f64>();
    let p = clip(
        labels
            .iter()
            .zip(weights)
            .map(|(&l, &w)| w * clip(l))
            .sum::<f64>()
            / total,
    );
    let baseline = -p * p.ln() - (1.0 - p) * (1.0 - p).ln();
    if baseline == 0.0 {
        return 0.0;
    }
    cross / (baseline * total)
}

/// One DLRMv3 answer as float32 values.
fn floats(path: &Path, n: usize, e: &Value) -> Result<Vec<f64>, ComplianceError> {
    let bad = |why: &str| malformed(path, format!("{}: {why}", entry_name(n, e)));
    let hex = e["data"].as_str().ok_or_else(|| bad("no data"))?;
    match elements(hex, Dtype::Float32) {
        Some(v) => Ok(v
            .into_iter()
            .map(|x| match x {
                Element::Float(f) => f,
                Element::Int(i) => i as f64,
            })
            .collect()),
        None => Err(bad("data is not a whole number of float32 values")),
    }
}

/// The (ts_idx, query_idx) of a DLRMv3 answer.
fn request_key(
    path: &Path,
    n: usize,
    e: &Value,
    data: &[f64],
) -> Result<(i64, i64), ComplianceError> {
    match data {
        [ts, q, ..] if ts.is_finite() && q.is_finite() => Ok((*ts as i64, *q as i64)),
        _ => Err(malformed(
            path,
            format!("{}: no finite ts_idx and query_idx", entry_name(n, e)),
        )),
    }
}

/// TEST08's check: each answer of the audit run (`[ts_idx, query_idx,
/// predictions...]` as float32) is matched with the accuracy run's
/// (`[ts_idx, query_idx, predictions, labels, weights, candidates]`) by
/// `(ts_idx, query_idx)`; its normalized entropy, on the accuracy run's
/// labels and weights, must be within `tolerance` of the accuracy run's.
/// The lines are those the official script prints. An entry in neither
/// layout is refused with its file and entry, where the script stops.
pub fn test08(reference: &Path, test: &Path, tolerance: f64) -> Result<Report, ComplianceError> {
    let reference_entries = log_values(reference)?;
    let test_entries = log_values(test)?;
    let mut lines = vec![
        "Verifying accuracy. This might take a while...".to_string(),
        "Reading accuracy mode results...".to_string(),
    ];
    // Each request's normalized entropy, labels and weights.
    type Request = (f64, Vec<f64>, Vec<f64>);
    let mut known: HashMap<(i64, i64), Request> = HashMap::new();
    for (n, e) in reference_entries.iter().enumerate() {
        let data = floats(reference, n, e)?;
        let key = request_key(reference, n, e, &data)?;
        let candidates = data.last().copied().unwrap_or(f64::NAN);
        let layout = || {
            malformed(
                reference,
                format!(
                    "{}: not [ts_idx, query_idx, predictions, labels, weights, candidates] \
                     ({} values, the last {})",
                    entry_name(n, e),
                    data.len(),
                    py_float(candidates)
                ),
            )
        };
        if !candidates.is_finite() || candidates < 0.0 {
            return Err(layout());
        }
        let c = candidates.trunc() as usize;
        if data.len() != 3 + 3 * c {
            return Err(layout());
        }
        let predictions = &data[2..2 + c];
        let labels = data[2 + c..2 + 2 * c].to_vec();
        let weights = data[2 + 2 * c..2 + 3 * c].to_vec();
        let ne = normalized_entropy(predictions, &labels, &weights);
        known.insert(key, (ne, labels, weights));
    }
    lines.push("Reading performance mode results...".into());
    let (mut matched, mut unmatched, mut mismatches) = (0, 0, 0);
    for (n, e) in test_entries.iter().enumerate() {
        let data = floats(test, n, e)?;
        let key = request_key(test, n, e, &data)?;
        let Some((acc_ne, labels, weights)) = known.get(&key) else {
            unmatched += 1;
            continue;
        };
        matched += 1;
        let predictions = &data[2..];
        if predictions.len() != labels.len() {
            return Err(malformed(
                test,
                format!(
                    "{}: {} predictions where the accuracy run has {} candidates",
                    entry_name(n, e),
                    predictions.len(),
                    labels.len()
                ),
            ));
        }
        let perf_ne = normalized_entropy(predictions, labels, weights);
        let acc_ne = *acc_ne;
        let shown = format!("({}, {})", key.0, key.1);
        if acc_ne == 0.0 && perf_ne == 0.0 {
            continue;
        }
        if acc_ne == 0.0 || perf_ne == 0.0 {
            mismatches += 1;
            lines.push(format!(
                "  NE mismatch at {shown}: acc_ne={}, perf_ne={}",
                py_float(acc_ne),
                py_float(perf_ne)
            ));
            continue;
        }
        let diff = (perf_ne - acc_ne).abs() / acc_ne.abs();
        if diff > tolerance {
            mismatches += 1;
            lines.push(format!(
                "  NE mismatch at {shown}: acc_ne={acc_ne:.6}, perf_ne={perf_ne:.6}, diff={:.4}%",
                diff * 100.0
            ));
        }
    }
    lines.extend([
        String::new(),
        format!("num_acc_log_entries = {}", reference_entries.len()),
        format!("num_perf_log_entries = {}", test_entries.len()),
        format!("num_matched = {matched}"),
        format!("num_unmatched = {unmatched}"),
        format!("num_ne_mismatch = {mismatches}"),
        format!("tolerance = {:.2}%", tolerance * 100.0),
    ]);
    let passed = mismatches == 0 && matched > 0 && unmatched == 0;
    lines.extend([
        String::new(),
        if passed { "TEST PASS" } else { "TEST FAIL" }.into(),
        "TEST08 verification complete".into(),
    ]);
    Ok(Report { passed, lines })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::tests::scratch;

    fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn required_audits_follow_the_checker() {
        let now = Round::CURRENT;
        assert_eq!(
            required_audits("resnet50", now),
            [Audit::Test01, Audit::Test04]
        );
        assert_eq!(required_audits("llama2-70b", now), [Audit::Test06]);
        assert_eq!(required_audits("llama3.1-8b", now), [Audit::Test06]);
        // Not a benchmark of the current round; one of v5.1.
        assert!(required_audits("retinanet", now).is_empty());
        assert_eq!(required_audits("retinanet", Round::V5_1), [Audit::Test01]);
        assert_eq!(
            required_audits("gpt-oss-120b", now),
            [Audit::Test07, Audit::Test09]
        );
        let err = check_required(AuditTest::Test06, "resnet50", now)
            .unwrap_err()
            .to_string();
        assert!(err.contains("TEST01, TEST04"), "{err}");
        assert!(check_required(AuditTest::Test04, "resnet50", now).is_ok());
        assert_eq!("test04".parse::<AuditTest>().unwrap(), AuditTest::Test04);
        assert!("TEST05".parse::<AuditTest>().is_err());
    }

    #[test]
    fn audit_configs_parse_as_config_files() {
        for t in AuditTest::ALL {
            let text = audit_config(t, "resnet50");
            loadgen_engine::config::ConfigFile::parse("audit.config", &text).unwrap();
        }
        assert!(audit_config(AuditTest::Test01, "3d-unet").contains("sampling_target = 64\n"));
    }

    #[test]
    fn python_float_repr() {
        assert_eq!(py_float(1234.0), "1234.0");
        assert_eq!(py_float(1234.5678), "1234.5678");
        assert_eq!(py_float(1e20), "1e+20");
        assert_eq!(py_float(1.5e-5), "1.5e-05");
        assert_eq!(py_float(0.0), "0.0");
    }

    #[test]
    fn test01_compares_first_elements_of_shared_samples() {
        let d = scratch("t01");
        let r = write(
            &d,
            "r.json",
            r#"[{"seq_id":0,"qsl_idx":1,"data":"0A0B"},{"seq_id":1,"qsl_idx":2,"data":"0C"},{"seq_id":2,"qsl_idx":2,"data":"0D"}]"#,
        );
        // Same first byte for 1 (the rest differs), 3 unknown.
        let t = write(
            &d,
            "t.json",
            r#"[{"seq_id":5,"qsl_idx":1,"data":"0AFF"},{"seq_id":6,"qsl_idx":3,"data":"01"}]"#,
        );
        let rep = test01_accuracy(&r, &t, Dtype::Byte).unwrap();
        assert!(rep.passed, "{}", rep.text());
        assert!(rep
            .lines
            .contains(&"num_acc_log_duplicate_keys = 1".to_string()));
        assert!(rep
            .lines
            .contains(&"num_acc_log_data_mismatch = 1".to_string()));
        assert!(rep.lines.contains(&"num_missing_qsl_idxs = 1".to_string()));
        let t = write(&d, "t2.json", r#"[{"seq_id":5,"qsl_idx":2,"data":"0E"}]"#);
        let rep = test01_accuracy(&r, &t, Dtype::Byte).unwrap();
        assert!(!rep.passed);
        assert!(rep.lines.contains(&"TEST FAIL".to_string()));
        // No shared sample: a failure too.
        let t = write(&d, "t3.json", "[]");
        assert!(!test01_accuracy(&r, &t, Dtype::Byte).unwrap().passed);
        // Odd element counts are refused, naming the file.
        let t = write(
            &d,
            "t4.json",
            r#"[{"seq_id":5,"qsl_idx":1,"data":"0A0B0C"}]"#,
        );
        let err = test01_accuracy(&r, &t, Dtype::Int16)
            .unwrap_err()
            .to_string();
        assert!(err.contains("t4.json"), "{err}");
    }

    fn detail(scenario: &str, key: &str, score: f64, valid: &str) -> String {
        [
            format!(r#":::MLLOG {{"key": "effective_scenario", "value": "{scenario}", "metadata": {{"is_error": false}}}}"#),
            format!(r#":::MLLOG {{"key": "{key}", "value": {score}, "metadata": {{"is_error": false}}}}"#),
            format!(r#":::MLLOG {{"key": "result_validity", "value": "{valid}", "metadata": {{"is_error": false}}}}"#),
        ]
        .join("\n")
    }

    #[test]
    fn test01_performance_tolerance() {
        let d = scratch("t01p");
        let r = write(
            &d,
            "r.txt",
            &detail("Offline", "result_samples_per_second", 1000.0, "VALID"),
        );
        let t = write(
            &d,
            "t.txt",
            &detail("Offline", "result_samples_per_second", 1095.5, "VALID"),
        );
        let rep = test01_performance(&r, &t).unwrap();
        assert!(rep.passed, "{}", rep.text());
        assert_eq!(rep.lines[1], "Reference score = 1000.0");
        assert_eq!(rep.lines[2], "Test score = 1095.5");
        let t = write(
            &d,
            "t2.txt",
            &detail("Offline", "result_samples_per_second", 880.0, "VALID"),
        );
        assert!(!test01_performance(&r, &t).unwrap().passed);
        // SingleStream latencies of at most 200 us get 20 %.
        let r = write(
            &d,
            "r3.txt",
            &detail(
                "SingleStream",
                "early_stopping_latency_ss",
                100_000.0,
                "VALID",
            ),
        );
        let t = write(
            &d,
            "t3.txt",
            &detail(
                "SingleStream",
                "early_stopping_latency_ss",
                119_000.0,
                "VALID",
            ),
        );
        assert!(test01_performance(&r, &t).unwrap().passed);
        let t = write(
            &d,
            "t4.txt",
            &detail(
                "SingleStream",
                "early_stopping_latency_ss",
                119_000.0,
                "INVALID",
            ),
        );
        let rep = test01_performance(&r, &t).unwrap();
        assert!(!rep.passed);
        assert!(rep.lines[1].starts_with("TEST FAIL: Invalid results in"));
    }

    fn summary(scenario: &str, line: &str, valid: &str) -> String {
        format!("Scenario : {scenario}\nMode     : PerformanceOnly\n{line}\nResult is : {valid}\n0 ERROR\n")
    }

    #[test]
    fn test04_may_not_be_faster() {
        let d = scratch("t04");
        let r = write(
            &d,
            "r.txt",
            &summary("Offline", "Samples per second: 1000.5", "VALID"),
        );
        let t = write(
            &d,
            "t.txt",
            &summary("Offline", "Samples per second: 1100", "VALID"),
        );
        let rep = test04_performance(&r, &t).unwrap();
        assert!(rep.passed, "{}", rep.text());
        assert!(rep.lines.contains(&"reference score = 1000.5".to_string()));
        let t = write(
            &d,
            "t2.txt",
            &summary("Offline", "Samples per second: 1101", "VALID"),
        );
        assert!(!test04_performance(&r, &t).unwrap().passed);
        let r = write(
            &d,
            "r3.txt",
            &summary(
                "SingleStream",
                "Early stopping 90th percentile estimate: 1000000",
                "VALID",
            ),
        );
        let t = write(
            &d,
            "t3.txt",
            &summary(
                "SingleStream",
                "Early stopping 90th percentile estimate: 900000",
                "VALID",
            ),
        );
        let rep = test04_performance(&r, &t).unwrap();
        assert!(
            rep.lines.contains(&"reference score = 1000.0".to_string()),
            "{}",
            rep.text()
        );
        assert!(rep.passed);
        let t = write(
            &d,
            "t4.txt",
            &summary("Offline", "Samples per second: 10", "INVALID"),
        );
        assert!(!test04_performance(&r, &t).unwrap().passed);
    }

    #[test]
    fn test06_checks() {
        let d = scratch("t06");
        // int32 tokens 7, 8, 2 (one EOS), first token 7, count 3.
        let good = r#"[{"seq_id":0,"qsl_idx":0,"data":"070000000800000002000000","token_data":"07000000","token_count":3}]"#;
        let a = write(&d, "a.json", good);
        let rep = test06(&a, "Server", Dtype::Int32, 2).unwrap();
        assert!(rep.passed, "{}", rep.text());
        assert_eq!(rep.lines[0], "First token check pass: True");
        assert_eq!(
            test06(&a, "Offline", Dtype::Int32, 2).unwrap().lines[0],
            "First token check pass: Skipped"
        );
        let two_eos = r#"[{"seq_id":0,"qsl_idx":0,"data":"070000000200000002000000","token_data":"07000000","token_count":3}]"#;
        let rep = test06(&write(&d, "b.json", two_eos), "Server", Dtype::Int32, 2).unwrap();
        assert_eq!(rep.lines[1], "EOS check pass: False");
        assert!(!rep.passed);
        let wrong = r#"[{"seq_id":0,"qsl_idx":0,"data":"070000000800000002000000","token_data":"09000000","token_count":4}]"#;
        let rep = test06(&write(&d, "c.json", wrong), "Server", Dtype::Int32, 2).unwrap();
        assert_eq!(rep.lines[0], "First token check pass: False");
        assert_eq!(rep.lines[2], "Sample length check pass: False");
        assert_eq!(rep.lines[3], "TEST06 verification failed");
    }

    #[test]
    fn test09_bounds_the_mean_length() {
        let d = scratch("t09");
        // 2 and 4 tokens: a mean of 3.
        let a = write(
            &d,
            "a.json",
            r#"[{"seq_id":0,"qsl_idx":0,"data":"0100000002000000"},{"seq_id":1,"qsl_idx":1,"data":"01000000020000000300000004000000"}]"#,
        );
        let rep = test09(&a, 2.5, 3.5).unwrap();
        assert!(rep.passed, "{}", rep.text());
        assert!(rep.lines.contains(&"Mean output tokens: 3.00".to_string()));
        assert!(rep.lines.contains(&"Std deviation: 1.00".to_string()));
        assert!(rep.lines.contains(&"Min threshold: 2.5".to_string()));
        assert_eq!(rep.lines.last().unwrap(), "TEST PASS");
        let rep = test09(&a, 3.5, 4.0).unwrap();
        assert!(!rep.passed);
        assert!(rep.lines.contains(&"Min check pass: False".to_string()));
        let e = test09(&write(&d, "b.json", "[]"), 1.0, 2.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("b.json"), "{e}");
        let e = test09(&write(&d, "c.json", "{"), 1.0, 2.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("c.json"), "{e}");
    }

    #[test]
    fn test07_scores_the_scripts_output() {
        let out = "evaluating\n{'exact_match': 62.15, 'n': 990}\n";
        let rep = test07(out, r"'exact_match':\s*([\d.]+)", 60.698).unwrap();
        assert!(rep.passed, "{}", rep.text());
        assert!(rep.lines.contains(&"Accuracy score: 62.15".to_string()));
        assert!(rep
            .lines
            .contains(&"Accuracy threshold: 60.698".to_string()));
        assert_eq!(rep.lines.last().unwrap(), "TEST PASS");
        let rep = test07("accuracy=59.000%", r"accuracy=([\d.]+)%", 60.698).unwrap();
        assert!(!rep.passed);
        assert!(rep
            .lines
            .contains(&"Accuracy check pass: False".to_string()));
        let rep = test07("nothing", r"'exact_match':\s*([\d.]+)", 1.0).unwrap();
        assert!(rep
            .lines
            .contains(&"Error: Could not parse accuracy score".to_string()));
        assert!(!rep.passed);
        assert!(test07("x", "(", 1.0).is_err());
    }

    fn f32_hex(v: &[f32]) -> String {
        v.iter()
            .flat_map(|x| x.to_le_bytes())
            .map(|b| format!("{b:02X}"))
            .collect()
    }

    #[test]
    fn test08_matches_requests_and_compares_entropy() {
        let d = scratch("t08");
        let acc = |ts: f32, q: f32, p: &[f32]| {
            let n = p.len() as f32;
            let mut v = vec![ts, q];
            v.extend(p);
            v.extend(p.iter().map(|x| if *x > 0.5 { 1.0 } else { 0.0 }));
            v.extend(p.iter().map(|_| 1.0));
            v.push(n);
            f32_hex(&v)
        };
        let r = write(
            &d,
            "r.json",
            &format!(
                r#"[{{"seq_id":0,"qsl_idx":3,"data":"{}"}},{{"seq_id":1,"qsl_idx":4,"data":"{}"}}]"#,
                acc(1.0, 7.0, &[0.9, 0.2, 0.6]),
                acc(2.0, 8.0, &[0.3, 0.7, 0.1])
            ),
        );
        let perf = |ts: f32, q: f32, p: &[f32]| {
            let mut v = vec![ts, q];
            v.extend(p);
            format!(r#"{{"seq_id":9,"qsl_idx":0,"data":"{}"}}"#, f32_hex(&v))
        };
        let t = write(
            &d,
            "t.json",
            &format!("[{}]", perf(1.0, 7.0, &[0.9, 0.2, 0.6])),
        );
        let rep = test08(&r, &t, 0.001).unwrap();
        assert!(rep.passed, "{}", rep.text());
        assert!(rep.lines.contains(&"num_matched = 1".to_string()));
        assert!(rep.lines.contains(&"tolerance = 0.10%".to_string()));
        let t = write(
            &d,
            "t2.json",
            &format!(
                "[{},{}]",
                perf(2.0, 8.0, &[0.5, 0.5, 0.5]),
                perf(5.0, 5.0, &[0.1, 0.1, 0.1])
            ),
        );
        let rep = test08(&r, &t, 0.001).unwrap();
        assert!(!rep.passed);
        assert!(
            rep.lines.contains(&"num_unmatched = 1".to_string()),
            "{}",
            rep.text()
        );
        assert!(rep.lines.contains(&"num_ne_mismatch = 1".to_string()));
        assert!(rep
            .lines
            .iter()
            .any(|l| l.starts_with("  NE mismatch at (2, 8): ")));
        // Answers in neither layout: refused with the file and the entry.
        let bad = write(
            &d,
            "bad.json",
            &format!(
                r#"[{{"seq_id":0,"qsl_idx":5,"data":"{}"}}]"#,
                f32_hex(&[1.0, 2.0, 0.5, 9.0])
            ),
        );
        let e = test08(&bad, &t, 0.001).unwrap_err().to_string();
        assert!(
            e.contains("bad.json") && e.contains("entry 0 (qsl_idx 5)"),
            "{e}"
        );
        let e = test08(
            &r,
            &write(
                &d,
                "odd.json",
                r#"[{"seq_id":0,"qsl_idx":1,"data":"0000"}]"#,
            ),
            0.001,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("odd.json") && e.contains("qsl_idx 1"), "{e}");
    }

    #[test]
    fn audit_config_settings_are_read_as_the_scripts_read_them() {
        let text = audit_config(AuditTest::Test09, "gpt-oss-120b");
        assert_eq!(
            audit_setting(&text, "test09_min_output_tokens"),
            Some(1150.38)
        );
        assert_eq!(
            audit_setting(&text, "test09_max_output_tokens"),
            Some(1406.02)
        );
        assert!(text.contains("*.*.min_query_count = 6396\n"), "{text}");
        let text = audit_config(AuditTest::Test07, "gpt-oss-120b");
        assert_eq!(
            audit_setting(&text, "test07_accuracy_threshold"),
            Some(60.698)
        );
        assert!(text.contains("*.*.min_query_count = 990\n"), "{text}");
        assert_eq!(
            audit_setting("*.*.x = 3 # note\n# *.*.x = 4\n", "x"),
            Some(3.0)
        );
        // The release's files, when at hand, are read by the engine without
        // complaint, as the official LoadGen reads them.
        if let Ok(root) = std::env::var("MLPERF_INFERENCE_DIR") {
            for f in [
                "TEST07/gpt-oss-120b",
                "TEST08/dlrm-v3",
                "TEST09/gpt-oss-120b",
            ] {
                let p = Path::new(&root)
                    .join("compliance")
                    .join(f)
                    .join("audit.config");
                let text = std::fs::read_to_string(&p).unwrap();
                let file =
                    loadgen_engine::config::ConfigFile::parse("audit.config", &text).unwrap();
                let mut s = loadgen_engine::TestSettings::default();
                loadgen_engine::config::apply_audit(&mut s, &file).unwrap();
            }
        }
    }
}
