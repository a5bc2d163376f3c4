//! Config files and the settings records of the detail log, checked against
//! the recorded outcomes of the reference LoadGen (tests/data/conformance).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::path::{Path, PathBuf};

use loadgen_engine::config::{apply_audit, ConfKind, ConfigError, ConfigFile, SettingsSources};
use loadgen_engine::testing::{effective_entries, requested_entries, LogValue};
use loadgen_engine::{EffectiveSettings, Scenario, TestMode, TestSettings};
use serde_json::{Map, Value};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/conformance")
}

/// Reads a JSON file with every fractional number turned into a string, so
/// that floats are converted by Rust's correctly rounded parser (the default
/// JSON number parsing may be one unit in the last place off).
fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&quote_floats(&text)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn quote_floats(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let mut chars = json.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '"' {
            // Copy a string literal, escapes included.
            out.push(c);
            while let Some(c) = chars.next() {
                out.push(c);
                if c == '\\' {
                    out.extend(chars.next());
                } else if c == '"' {
                    break;
                }
            }
        } else if c == '-' || c.is_ascii_digit() {
            let mut number = String::from(c);
            while let Some(&n) = chars.peek() {
                if !(n.is_ascii_digit() || "+-.eE".contains(n)) {
                    break;
                }
                number.push(n);
                chars.next();
            }
            if number.contains(['.', 'e', 'E']) {
                out.push_str(&format!("\"{number}\""));
            } else {
                out.push_str(&number);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A scratch directory for config files, removed when dropped.
struct TempDir(testkit::Scratch);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        TempDir(testkit::Scratch::new(&format!("loadgen-{tag}")))
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

fn u(m: &Map<String, Value>, k: &str) -> u64 {
    m.get(k)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{k}: not an unsigned integer"))
}

fn f(m: &Map<String, Value>, k: &str) -> f64 {
    match m.get(k) {
        Some(Value::String(text)) => text.parse().ok(),
        Some(v) => v.as_f64(),
        None => None,
    }
    .unwrap_or_else(|| panic!("{k}: not a number"))
}

fn b(m: &Map<String, Value>, k: &str) -> bool {
    m.get(k)
        .and_then(Value::as_bool)
        .unwrap_or_else(|| panic!("{k}: not a bool"))
}

fn s<'a>(m: &'a Map<String, Value>, k: &str) -> &'a str {
    m.get(k)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{k}: not a string"))
}

/// Builds TestSettings from a recorded field map (the Python binding's names,
/// where the token limits are `ttft_latency` / `tpot_latency`).
fn settings_from_json(m: &Map<String, Value>) -> TestSettings {
    let known = [
        "scenario",
        "mode",
        "single_stream_expected_latency_ns",
        "single_stream_target_latency_percentile",
        "multi_stream_expected_latency_ns",
        "multi_stream_target_latency_percentile",
        "multi_stream_samples_per_query",
        "server_target_qps",
        "server_target_latency_ns",
        "server_target_latency_percentile",
        "server_coalesce_queries",
        "server_find_peak_qps_decimals_of_precision",
        "server_find_peak_qps_boundary_step_size",
        "server_max_async_queries",
        "server_num_issue_query_threads",
        "offline_expected_qps",
        "sample_concatenate_permutation",
        "min_duration_ms",
        "max_duration_ms",
        "min_query_count",
        "max_query_count",
        "qsl_rng_seed",
        "sample_index_rng_seed",
        "schedule_rng_seed",
        "accuracy_log_rng_seed",
        "accuracy_log_probability",
        "accuracy_log_sampling_target",
        "test05",
        "test05_qsl_rng_seed",
        "test05_sample_index_rng_seed",
        "test05_schedule_rng_seed",
        "print_timestamps",
        "performance_issue_unique",
        "performance_issue_same",
        "performance_issue_same_index",
        "performance_sample_count_override",
        "accuracy_sample_count_override",
        "use_token_latencies",
        "ttft_latency",
        "tpot_latency",
        "infer_token_latencies",
        "token_latency_scaling_factor",
    ];
    for k in m.keys() {
        assert!(known.contains(&k.as_str()), "unmapped settings field {k}");
    }
    assert_eq!(m.len(), known.len(), "settings map is missing fields");
    TestSettings {
        scenario: s(m, "scenario").parse().unwrap(),
        mode: s(m, "mode").parse().unwrap(),
        single_stream_expected_latency_ns: f(m, "single_stream_expected_latency_ns"),
        single_stream_target_latency_percentile: f(m, "single_stream_target_latency_percentile"),
        multi_stream_expected_latency_ns: f(m, "multi_stream_expected_latency_ns"),
        multi_stream_target_latency_percentile: f(m, "multi_stream_target_latency_percentile"),
        multi_stream_samples_per_query: u(m, "multi_stream_samples_per_query"),
        server_target_qps: f(m, "server_target_qps"),
        server_target_latency_ns: u(m, "server_target_latency_ns"),
        server_target_latency_percentile: f(m, "server_target_latency_percentile"),
        server_coalesce_queries: b(m, "server_coalesce_queries"),
        server_find_peak_qps_decimals_of_precision: m
            .get("server_find_peak_qps_decimals_of_precision")
            .and_then(Value::as_i64)
            .and_then(|v| i32::try_from(v).ok())
            .expect("server_find_peak_qps_decimals_of_precision"),
        server_find_peak_qps_boundary_step_size: f(m, "server_find_peak_qps_boundary_step_size"),
        server_max_async_queries: u(m, "server_max_async_queries"),
        server_num_issue_query_threads: u(m, "server_num_issue_query_threads"),
        offline_expected_qps: f(m, "offline_expected_qps"),
        sample_concatenate_permutation: b(m, "sample_concatenate_permutation"),
        min_duration_ms: u(m, "min_duration_ms"),
        max_duration_ms: u(m, "max_duration_ms"),
        min_query_count: u(m, "min_query_count"),
        max_query_count: u(m, "max_query_count"),
        qsl_rng_seed: u(m, "qsl_rng_seed"),
        sample_index_rng_seed: u(m, "sample_index_rng_seed"),
        schedule_rng_seed: u(m, "schedule_rng_seed"),
        accuracy_log_rng_seed: u(m, "accuracy_log_rng_seed"),
        accuracy_log_probability: f(m, "accuracy_log_probability"),
        accuracy_log_sampling_target: u(m, "accuracy_log_sampling_target"),
        test05: b(m, "test05"),
        test05_qsl_rng_seed: u(m, "test05_qsl_rng_seed"),
        test05_sample_index_rng_seed: u(m, "test05_sample_index_rng_seed"),
        test05_schedule_rng_seed: u(m, "test05_schedule_rng_seed"),
        print_timestamps: b(m, "print_timestamps"),
        performance_issue_unique: b(m, "performance_issue_unique"),
        performance_issue_same: b(m, "performance_issue_same"),
        performance_issue_same_index: u(m, "performance_issue_same_index"),
        performance_sample_count_override: u(m, "performance_sample_count_override"),
        accuracy_sample_count_override: u(m, "accuracy_sample_count_override"),
        use_token_latencies: b(m, "use_token_latencies"),
        server_ttft_latency: u(m, "ttft_latency"),
        server_tpot_latency: u(m, "tpot_latency"),
        infer_token_latencies: b(m, "infer_token_latencies"),
        token_latency_scaling_factor: u(m, "token_latency_scaling_factor"),
    }
}

fn fresh(scenario: Scenario) -> TestSettings {
    TestSettings {
        scenario,
        ..TestSettings::default()
    }
}

/// Replays one recorded `FromConfig(path, model, scenario, conf_type)` call.
fn replay(entry: &Map<String, Value>, dir: &TempDir) {
    let name = s(entry, "name");
    let model = s(entry, "model");
    let scenario: Scenario = s(entry, "scenario").parse().unwrap();
    let conf_type = entry["conf_type"].as_i64().unwrap();
    let ret = entry["return"].as_i64().unwrap();
    let text = entry["text"].as_str();
    let expected = settings_from_json(entry["settings"].as_object().unwrap());

    let mut settings = fresh(scenario);
    if conf_type != 2 {
        ConfigFile::builtin()
            .unwrap()
            .apply(&mut settings, model, scenario, ConfKind::MlperfConf)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    if conf_type != 0 {
        let kind = if conf_type == 1 {
            ConfKind::UserConf
        } else {
            ConfKind::AuditConfig
        };
        let path = match text {
            Some(t) => dir.write(&format!("{name}.conf"), t),
            None => dir.0.join("no-such-dir").join(format!("{name}.conf")),
        };
        let before = settings.clone();
        match ConfigFile::read(&path) {
            Ok(file) => {
                assert_eq!(ret, 0, "{name}: expected an error, file parsed");
                file.apply(&mut settings, model, scenario, kind)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
            }
            Err(e) => {
                match ret {
                    -22 => assert!(e.is_syntax(), "{name}: {e}"),
                    -2 => assert!(e.is_not_found(), "{name}: {e}"),
                    _ => panic!("{name}: unexpected error {e}"),
                }
                assert_eq!(settings, before, "{name}: a failed file applied values");
            }
        }
    }
    assert_eq!(settings.scenario, scenario, "{name}: scenario changed");
    assert_eq!(settings, expected, "{name}");
}

#[test]
fn replays_recorded_from_config_outcomes() {
    let results = read_json(&data_dir().join("config_parsing/results.json"));
    let defaults = settings_from_json(
        results["defaults_of_fresh_TestSettings"]
            .as_object()
            .unwrap(),
    );
    assert_eq!(defaults, TestSettings::default());

    let entries = results["results"].as_array().unwrap();
    assert_eq!(entries.len(), 80);
    let dir = TempDir::new("config-replay");
    let mut builtin_cases = 0;
    for entry in entries {
        let entry = entry.as_object().unwrap();
        if s(entry, "name").starts_with("mlperf_conf_") {
            builtin_cases += 1;
        }
        replay(entry, &dir);
    }
    assert_eq!(builtin_cases, 64);
}

#[test]
fn syntax_errors_name_file_and_line() {
    let dir = TempDir::new("config-errors");
    let path = dir.write(
        "user.conf",
        "# tuned values\n*.Offline.target_qps = 100\n*.*.min_query_count = 7 # comment\n*.*.mode =1\n",
    );
    let err = ConfigFile::read(&path).unwrap_err();
    let ConfigError::Invalid { errors, .. } = &err else {
        panic!("expected Invalid, got {err:?}");
    };
    assert_eq!(errors.len(), 2);
    let text = err.to_string();
    let shown = path.display().to_string();
    assert!(
        text.contains("nothing from this file was applied"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{shown}:3: value needs to be integer or double, found `#`"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("{shown}:4: expected 'key = value'")),
        "{text}"
    );
    assert_eq!(
        err.detail_messages(),
        [
            "value needs to be integer or double, line=3",
            "expected 'key=value', line=4"
        ]
    );

    let missing = dir.0.join("absent.conf");
    let err = ConfigFile::read(&missing).unwrap_err();
    assert!(err.is_not_found());
    assert!(err.to_string().contains("absent.conf"), "{err}");
}

#[test]
fn builtin_mlperf_conf_covers_other_models() {
    let rules = ConfigFile::builtin().unwrap();
    let load = |model: &str, scenario: Scenario| {
        let mut st = fresh(scenario);
        rules
            .apply(&mut st, model, scenario, ConfKind::MlperfConf)
            .unwrap();
        st
    };
    let st = load("pointpainting", Scenario::SingleStream);
    assert_eq!(st.single_stream_target_latency_percentile, 99.9 * 0.01);
    assert_eq!(st.performance_sample_count_override, 1024);
    let st = load("rnnt", Scenario::Offline);
    assert_eq!(
        (
            st.performance_sample_count_override,
            st.min_query_count,
            st.server_target_latency_ns
        ),
        (2513, 2513, 1_000_000_000)
    );
    let st = load("llama3_1-405b-interactive", Scenario::Server);
    assert_eq!(
        (st.server_ttft_latency, st.server_tpot_latency),
        (4_500_000_000, 80_000_000)
    );
    assert!(st.use_token_latencies && st.sample_concatenate_permutation);
    // 6.0.17 gives deepseek-r1-interactive no Offline sample count of its
    // own: the default stays.
    let st = load("deepseek-r1-interactive", Scenario::Offline);
    assert_eq!(st.min_query_count, fresh(Scenario::Offline).min_query_count);
    let st = load("wan-2.2-t2v-a14b", Scenario::Offline);
    assert_eq!(
        (st.performance_sample_count_override, st.min_query_count),
        (248, 248)
    );
    let st = load("qwen3-vl-235b-a22b", Scenario::Server);
    assert_eq!(st.server_target_latency_ns, 12_000_000_000);
    assert!(!st.use_token_latencies && st.sample_concatenate_permutation);
    let st = load("gpt-oss-120b-interactive", Scenario::Server);
    assert_eq!(
        (st.server_ttft_latency, st.server_tpot_latency),
        (2_000_000_000, 15_000_000)
    );
    let st = load("dlrm-v3", Scenario::Server);
    assert_eq!(st.server_target_latency_ns, 80_000_000);
    assert_eq!(
        load("yolo", Scenario::Offline).performance_sample_count_override,
        64
    );
    let st = load("dlrm", Scenario::Server);
    assert_eq!(st.server_target_latency_ns, 60_000_000);
    assert_eq!(st.performance_sample_count_override, 204800);
    // The test05 machinery is present but never switched on.
    assert!(!st.test05);
    assert_eq!(st.test05_schedule_rng_seed, 15816800565822761601);
}

#[test]
fn sources_resolve_in_order() {
    let dir = TempDir::new("config-sources");
    let user = dir.write(
        "user.conf",
        "resnet50.Server.target_qps = 1500\n*.*.mode = 1\n",
    );
    let src = SettingsSources {
        model: "resnet50".into(),
        scenario: Scenario::Server,
        mlperf_conf: None,
        user_conf: Some(user),
        mode: Some(TestMode::SubmissionRun),
    };
    let st = src.resolve().unwrap();
    assert_eq!(st.server_target_qps, 1500.0);
    assert_eq!(st.server_target_latency_ns, 15_000_000);
    assert_eq!(st.mode, TestMode::SubmissionRun);

    // The audit file comes last and only matches `*.` keys.
    let audit = ConfigFile::parse(
        "audit.config",
        "*.*.mode = 2\nresnet50.Server.min_query_count = 9\n*.Server.performance_issue_same = 1\n",
    )
    .unwrap();
    let mut st = st;
    apply_audit(&mut st, &audit).unwrap();
    assert_eq!(st.mode, TestMode::PerformanceOnly);
    assert_eq!(st.min_query_count, 100);
    assert!(st.performance_issue_same);
}

// ---------------------------------------------------------------------------
// Detail-log records.

const CASES: [&str; 12] = [
    "singlestream_perf_1024",
    "singlestream_acc_600_256",
    "singlestream_concat_perm",
    "singlestream_test01_sampling",
    "singlestream_tokens",
    "multistream_perf_spq8",
    "server_perf_qps1000",
    "server_acc_1024_256",
    "offline_perf_1024",
    "offline_acc_5000_256",
    "offline_concat_perm",
    "offline_tokens_perf",
];

/// `(key, raw value text)` of every detail record whose key has `prefix`.
fn detail_records(case: &str, prefix: &str) -> Vec<(String, String)> {
    let path = data_dir().join(case).join("mlperf_log_detail.txt");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(":::MLLOG {\"key\": \"") else {
            continue;
        };
        let (key, rest) = rest.split_once('"').unwrap();
        if !key.starts_with(prefix) {
            continue;
        }
        let rest = rest.strip_prefix(", \"value\": ").unwrap();
        let (value, _) = rest.split_once(", \"time_ms\": ").unwrap();
        out.push((key.to_string(), value.to_string()));
    }
    out
}

fn rendered(entries: Vec<(&'static str, LogValue)>) -> Vec<(String, String)> {
    entries
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn case_settings(case: &str) -> (Value, TestSettings) {
    let json = read_json(&data_dir().join(case).join("settings.json"));
    let st = settings_from_json(json["effective_test_settings"].as_object().unwrap());
    (json, st)
}

#[test]
fn requested_records_match_reference_logs() {
    for case in CASES {
        let (_, st) = case_settings(case);
        assert_eq!(
            rendered(requested_entries(&st)),
            detail_records(case, "requested_"),
            "{case}"
        );
    }
}

#[test]
fn requested_record_types() {
    let mut st = fresh(Scenario::Server);
    st.use_token_latencies = true;
    st.server_find_peak_qps_decimals_of_precision = -1;
    let entries = requested_entries(&st);
    let get = |k: &str| {
        entries
            .iter()
            .find(|(key, _)| *key == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(
        get("requested_server_find_peak_qps_decimals_of_precision"),
        Some(LogValue::Int(-1))
    );
    assert_eq!(
        get("requested_server_target_qps"),
        Some(LogValue::Float(1.0))
    );
    assert_eq!(
        get("requested_server_ttft_latency"),
        Some(LogValue::Uint(100_000_000))
    );
    assert_eq!(entries.last().unwrap().0, "requested_server_tpot_latency");

    // Offline logs the token flag but not the first-token limits.
    st.scenario = Scenario::Offline;
    let entries = requested_entries(&st);
    assert_eq!(entries.last().unwrap().0, "requested_use_token_latencies");
    assert!(!entries
        .iter()
        .any(|(k, _)| k.starts_with("requested_server_")));
}

/// EffectiveSettings rebuilt from the logged `effective_*` values; fields the
/// log does not show come from the requested settings.
fn effective_from_log(case: &str, st: &TestSettings) -> EffectiveSettings {
    let records = detail_records(case, "effective_");
    let raw = |k: &str| -> &str {
        let key = format!("effective_{k}");
        records
            .iter()
            .find(|(rk, _)| *rk == key)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("{case}: no {key}"))
    };
    let int = |k: &str| -> u64 { raw(k).parse().unwrap_or_else(|e| panic!("{k}: {e}")) };
    let float = |k: &str| -> f64 { raw(k).parse().unwrap_or_else(|e| panic!("{k}: {e}")) };
    let flag = |k: &str| -> bool { raw(k).parse().unwrap_or_else(|e| panic!("{k}: {e}")) };
    let text = |k: &str| raw(k).trim_matches('"').to_string();
    EffectiveSettings {
        scenario: text("scenario").parse().unwrap(),
        mode: text("test_mode").parse().unwrap(),
        samples_per_query: int("samples_per_query"),
        target_qps: float("target_qps"),
        target_latency_ns: int("target_latency_ns"),
        target_latency_percentile: float("target_latency_percentile"),
        max_async_queries: int("max_async_queries"),
        target_duration_ms: int("target_duration_ms"),
        min_duration_ms: int("min_duration_ms"),
        max_duration_ms: int("max_duration_ms"),
        min_query_count: int("min_query_count"),
        max_query_count: int("max_query_count"),
        min_sample_count: int("min_sample_count"),
        qsl_rng_seed: int("qsl_rng_seed"),
        sample_index_rng_seed: int("sample_index_rng_seed"),
        schedule_rng_seed: int("schedule_rng_seed"),
        accuracy_log_rng_seed: int("accuracy_log_rng_seed"),
        accuracy_log_probability: float("accuracy_log_probability"),
        accuracy_log_sampling_target: int("accuracy_log_sampling_target"),
        print_timestamps: flag("print_timestamps"),
        performance_issue_unique: flag("performance_issue_unique"),
        performance_issue_same: flag("performance_issue_same"),
        performance_issue_same_index: int("performance_issue_same_index"),
        performance_sample_count: int("performance_sample_count"),
        accuracy_sample_count: int("accuracy_sample_count"),
        sample_concatenate_permutation: flag("sample_concatenate_permutation"),
        server_coalesce_queries: st.server_coalesce_queries,
        server_find_peak_qps_decimals_of_precision: st.server_find_peak_qps_decimals_of_precision,
        server_find_peak_qps_boundary_step_size: st.server_find_peak_qps_boundary_step_size,
        server_num_issue_query_threads: st.server_num_issue_query_threads,
        use_token_latencies: st.use_token_latencies,
        server_ttft_latency: st.server_ttft_latency,
        server_tpot_latency: st.server_tpot_latency,
        infer_token_latencies: st.infer_token_latencies,
        token_latency_scaling_factor: st.token_latency_scaling_factor,
    }
}

#[test]
fn effective_records_match_reference_logs() {
    for case in CASES {
        let (_, st) = case_settings(case);
        let eff = effective_from_log(case, &st);
        assert_eq!(
            rendered(effective_entries(&eff)),
            detail_records(case, "effective_"),
            "{case}"
        );
    }
}

#[test]
fn effective_record_types() {
    let (_, st) = case_settings("server_perf_qps1000");
    let mut eff = effective_from_log("server_perf_qps1000", &st);
    let entries = effective_entries(&eff);
    let kinds: Vec<_> = entries
        .iter()
        .map(|(k, v)| {
            let t = match v {
                LogValue::Str(_) => "s",
                LogValue::Bool(_) => "b",
                LogValue::Int(_) => "i",
                LogValue::Uint(_) => "u",
                LogValue::Float(_) => "f",
                LogValue::Indices(_) => "x",
                LogValue::Map(_) => "m",
            };
            format!("{}:{t}", k.trim_start_matches("effective_"))
        })
        .collect();
    assert_eq!(
        kinds.join(" "),
        "scenario:s test_mode:s samples_per_query:u target_qps:f target_latency_ns:i \
         target_latency_percentile:f max_async_queries:u target_duration_ms:i min_duration_ms:i \
         max_duration_ms:i min_query_count:u max_query_count:u min_sample_count:u qsl_rng_seed:u \
         sample_index_rng_seed:u schedule_rng_seed:u accuracy_log_rng_seed:u \
         accuracy_log_probability:f accuracy_log_sampling_target:u print_timestamps:b \
         performance_issue_unique:b performance_issue_same:b performance_issue_same_index:u \
         performance_sample_count:u accuracy_sample_count:u sample_concatenate_permutation:b"
    );
    // Durations are signed the official LoadGen: a wrapped request shows as negative.
    eff.max_duration_ms = u64::MAX;
    let entries = effective_entries(&eff);
    let max = entries
        .iter()
        .find(|(k, _)| *k == "effective_max_duration_ms")
        .unwrap();
    assert_eq!(max.1.to_string(), "-1");
}

/// Each case folder's user.conf renders its settings as config lines; read
/// back as a user.conf on top of the defaults it must give the same settings
/// (the seeds, which user.conf cannot set, are taken over first).
#[test]
fn case_user_conf_round_trips() {
    for case in CASES {
        let (_, expected) = case_settings(case);
        let file = ConfigFile::read(data_dir().join(case).join("user.conf"))
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        let mut st = fresh(expected.scenario);
        st.qsl_rng_seed = expected.qsl_rng_seed;
        st.sample_index_rng_seed = expected.sample_index_rng_seed;
        st.schedule_rng_seed = expected.schedule_rng_seed;
        file.apply(&mut st, "any-model", expected.scenario, ConfKind::UserConf)
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(st, expected, "{case}");
    }
}
