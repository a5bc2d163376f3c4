//! Runs every reference case of the official LoadGen through the whole
//! engine (with a null SUT like the reference harness's, in virtual time) and
//! compares what must be identical: the accuracy log, the ordered detail keys
//! and their deterministic values, the summary of accuracy runs and the
//! parameter block of performance runs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::path::{Path, PathBuf};
use std::sync::Arc;

use loadgen_engine::clock::VirtualClock;
use loadgen_engine::config::ConfigFile;
use loadgen_engine::live::LiveStats;
use loadgen_engine::null_sut::{NullAnswer, NullSut, SizedQsl};
use loadgen_engine::runner::{start_test_with_clock, AuditConfig, LogSettings};
use loadgen_engine::TestSettings;
use serde_json::Value;

fn cases() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/conformance");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("settings.json").exists())
        .collect();
    v.sort();
    v
}

/// The TestSettings the reference harness handed to StartTest.
fn test_settings(s: &Value) -> TestSettings {
    let e = &s["effective_test_settings"];
    let u = |k: &str| e[k].as_u64().unwrap_or_else(|| panic!("{k}"));
    let f = |k: &str| e[k].as_f64().unwrap_or_else(|| panic!("{k}"));
    let b = |k: &str| e[k].as_bool().unwrap_or_else(|| panic!("{k}"));
    TestSettings {
        scenario: e["scenario"].as_str().unwrap().parse().unwrap(),
        mode: e["mode"].as_str().unwrap().parse().unwrap(),
        single_stream_expected_latency_ns: f("single_stream_expected_latency_ns"),
        single_stream_target_latency_percentile: f("single_stream_target_latency_percentile"),
        multi_stream_expected_latency_ns: f("multi_stream_expected_latency_ns"),
        multi_stream_target_latency_percentile: f("multi_stream_target_latency_percentile"),
        multi_stream_samples_per_query: u("multi_stream_samples_per_query"),
        server_target_qps: f("server_target_qps"),
        server_target_latency_ns: u("server_target_latency_ns"),
        server_target_latency_percentile: f("server_target_latency_percentile"),
        server_coalesce_queries: b("server_coalesce_queries"),
        server_find_peak_qps_decimals_of_precision: u("server_find_peak_qps_decimals_of_precision")
            as i32,
        server_find_peak_qps_boundary_step_size: f("server_find_peak_qps_boundary_step_size"),
        server_max_async_queries: u("server_max_async_queries"),
        server_num_issue_query_threads: u("server_num_issue_query_threads"),
        offline_expected_qps: f("offline_expected_qps"),
        sample_concatenate_permutation: b("sample_concatenate_permutation"),
        min_duration_ms: u("min_duration_ms"),
        max_duration_ms: u("max_duration_ms"),
        min_query_count: u("min_query_count"),
        max_query_count: u("max_query_count"),
        qsl_rng_seed: u("qsl_rng_seed"),
        sample_index_rng_seed: u("sample_index_rng_seed"),
        schedule_rng_seed: u("schedule_rng_seed"),
        accuracy_log_rng_seed: u("accuracy_log_rng_seed"),
        accuracy_log_probability: f("accuracy_log_probability"),
        accuracy_log_sampling_target: u("accuracy_log_sampling_target"),
        test05: b("test05"),
        test05_qsl_rng_seed: u("test05_qsl_rng_seed"),
        test05_sample_index_rng_seed: u("test05_sample_index_rng_seed"),
        test05_schedule_rng_seed: u("test05_schedule_rng_seed"),
        print_timestamps: b("print_timestamps"),
        performance_issue_unique: b("performance_issue_unique"),
        performance_issue_same: b("performance_issue_same"),
        performance_issue_same_index: u("performance_issue_same_index"),
        performance_sample_count_override: u("performance_sample_count_override"),
        accuracy_sample_count_override: u("accuracy_sample_count_override"),
        use_token_latencies: b("use_token_latencies"),
        server_ttft_latency: u("ttft_latency"),
        server_tpot_latency: u("tpot_latency"),
        infer_token_latencies: b("infer_token_latencies"),
        token_latency_scaling_factor: u("token_latency_scaling_factor"),
    }
}

/// (key, value) of every detail record, minus the C++ logger's allocation
/// warnings, which this engine does not have.
fn detail_records(path: &Path) -> Vec<(String, Value)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix(":::MLLOG "))
        .map(|l| {
            let v: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", path.display()));
            (v["key"].as_str().unwrap().to_string(), v["value"].clone())
        })
        .filter(|(k, v)| {
            !(k == "warning_generic_message"
                && v.as_str()
                    .is_some_and(|s| s.starts_with("Logging allocation detected")))
        })
        .collect()
}

/// Keys whose values depend on timing, the build or the machine.
fn timing_dependent(key: &str) -> bool {
    key.starts_with("loadgen_")
        || key.starts_with("result_")
        || key.starts_with("early_stopping")
        || matches!(
            key,
            "test_datetime" | "get_sut_name_duration_ns" | "power_begin" | "power_end"
        )
}

fn run_case(dir: &Path) -> testkit::Scratch {
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("settings.json")).unwrap()).unwrap();
    let settings = test_settings(&s);
    let answer = if s["sut"] == "tokens" {
        NullAnswer::Tokens
    } else {
        NullAnswer::Index
    };
    let sut = NullSut::new("PySUT", answer);
    let mut qsl = SizedQsl::new(
        s["qsl_total_sample_count"].as_u64().unwrap() as usize,
        s["qsl_performance_sample_count"].as_u64().unwrap() as usize,
    );
    qsl.name = "PyQSL".into();
    let audit = dir.join("audit.config");
    let audit = audit.exists().then(|| AuditConfig {
        name: "audit.config".into(),
        file: ConfigFile::parse("audit.config", &std::fs::read_to_string(&audit).unwrap()).unwrap(),
    });
    let out = testkit::Scratch::new(&format!(
        "loadgen-conformance-{}",
        dir.file_name().unwrap().to_string_lossy()
    ));
    let log = LogSettings {
        outdir: out.to_path_buf(),
        ..LogSettings::default()
    };
    // Virtual time: the null SUT answers at the instant of issue whatever the
    // host's load, so every run meets its latency bound as the reference
    // runs did, and the replay is the same every time.
    let outcome = start_test_with_clock(
        &sut,
        &qsl,
        &settings,
        &log,
        audit.as_ref(),
        Arc::new(LiveStats::default()),
        Arc::new(VirtualClock::new()),
    )
    .unwrap();
    assert!(
        outcome.run_error.is_none(),
        "{}: {:?}",
        dir.display(),
        outcome.run_error
    );
    out
}

#[test]
fn reference_runs_replay_exactly() {
    let cases = cases();
    assert!(cases.len() >= 12, "conformance fixtures missing");
    for dir in cases {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let out = run_case(&dir);

        let ours = std::fs::read_to_string(out.join("mlperf_log_accuracy.json")).unwrap();
        let theirs = std::fs::read_to_string(dir.join("mlperf_log_accuracy.json")).unwrap();
        assert!(ours == theirs, "{name}: accuracy log differs");

        let ours = detail_records(&out.join("mlperf_log_detail.txt"));
        let theirs = detail_records(&dir.join("mlperf_log_detail.txt"));
        let keys = |r: &[(String, Value)]| r.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        assert_eq!(
            keys(&ours),
            keys(&theirs),
            "{name}: detail key sequence differs"
        );
        for ((k, a), (_, b)) in ours.iter().zip(&theirs) {
            if !timing_dependent(k) {
                assert_eq!(a, b, "{name}: detail value of {k} differs");
            }
        }

        let ours = std::fs::read_to_string(out.join("mlperf_log_summary.txt")).unwrap();
        let theirs = std::fs::read_to_string(dir.join("mlperf_log_summary.txt")).unwrap();
        let allocation_warnings = std::fs::read_to_string(dir.join("mlperf_log_detail.txt"))
            .unwrap()
            .matches("Logging allocation detected")
            .count();
        if theirs.contains("Test Parameters Used") {
            let params = |s: &str| {
                s.split("Test Parameters Used")
                    .nth(1)
                    .unwrap()
                    .split("\n\n")
                    .next()
                    .unwrap()
                    .to_string()
            };
            assert_eq!(
                params(&ours),
                params(&theirs),
                "{name}: parameter block differs"
            );
        } else {
            // Accuracy runs: the whole summary is the footer; ours lacks the
            // C++ logger's allocation warnings.
            let expected = loadgen_engine::testing::footer(
                count_warnings(&theirs) - allocation_warnings as u64,
                0,
            );
            assert_eq!(ours, expected, "{name}: summary differs");
        }
        if theirs.contains("MLPerf Results Summary") {
            assert_eq!(
                shape(&ours),
                shape(&theirs),
                "{name}: summary layout differs"
            );
        }
        let _ = std::fs::remove_dir_all(&out);
    }
}

/// A summary with every number replaced by `#` and the footer dropped: the
/// layout, labels and verdict texts must match; measured values may not.
fn shape(summary: &str) -> String {
    let body = summary.split("\n\n").collect::<Vec<_>>();
    let body = body[..body.len().saturating_sub(2)].join("\n\n");
    let mut out = String::new();
    let mut in_number = false;
    for c in body.chars() {
        if c.is_ascii_digit() || (in_number && c == '.') {
            if !in_number {
                out.push('#');
            }
            in_number = true;
        } else {
            in_number = false;
            out.push(c);
        }
    }
    // %g switches to exponent form for large rates.
    out.replace("#e+#", "#")
}

fn count_warnings(summary: &str) -> u64 {
    summary
        .lines()
        .find_map(|l| l.split_once(" warning").and_then(|(n, _)| n.parse().ok()))
        .unwrap_or(0)
}
