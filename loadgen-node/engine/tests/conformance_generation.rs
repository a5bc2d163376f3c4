//! Reproduces the deterministic parts of the official LoadGen reference runs
//! in `tests/data/conformance`: effective settings, loadable sets, the issued
//! queries' sample indices, Server schedules and the `generated_*` values.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use loadgen_engine::testing::{g6, generate_loadable_sets, LoadableSet, QueryGenerator, RunKind};
use loadgen_engine::{EffectiveSettings, Scenario, TestMode, TestSettings};
use serde_json::Value;

fn conformance_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/conformance")
}

/// Every case folder that holds a recorded run.
fn cases() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(conformance_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && p.join("settings.json").exists())
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no conformance cases found");
    v
}

fn read_json(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn as_u64(v: &Value) -> u64 {
    v.as_u64()
        .or_else(|| v.as_f64().map(|f| f as u64))
        .unwrap_or_else(|| panic!("not an unsigned number: {v}"))
}

fn as_f64(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn as_bool(v: &Value) -> bool {
    v.as_bool()
        .or_else(|| v.as_u64().map(|x| x != 0))
        .unwrap_or_else(|| panic!("not a bool: {v}"))
}

/// Sets one `TestSettings` field from a JSON value. Accepts the Python
/// binding names (`ttft_latency`, `tpot_latency`) and the detail-log names
/// (`test_mode`). Floats are only replaced when their `%g` text differs, so
/// a value rounded by the log never overwrites the exact one.
fn set_field(s: &mut TestSettings, name: &str, v: &Value) {
    macro_rules! float {
        ($f:ident) => {{
            let x = as_f64(v);
            if g6(x) != g6(s.$f) {
                s.$f = x;
            }
        }};
    }
    match name {
        "scenario" => s.scenario = v.as_str().unwrap().parse().unwrap(),
        "mode" | "test_mode" => s.mode = v.as_str().unwrap().parse().unwrap(),
        "single_stream_expected_latency_ns" => float!(single_stream_expected_latency_ns),
        "single_stream_target_latency_percentile" => {
            float!(single_stream_target_latency_percentile)
        }
        "multi_stream_expected_latency_ns" => float!(multi_stream_expected_latency_ns),
        "multi_stream_target_latency_percentile" => float!(multi_stream_target_latency_percentile),
        "multi_stream_samples_per_query" => s.multi_stream_samples_per_query = as_u64(v),
        "server_target_qps" => float!(server_target_qps),
        "server_target_latency_ns" => s.server_target_latency_ns = as_u64(v),
        "server_target_latency_percentile" => float!(server_target_latency_percentile),
        "server_coalesce_queries" => s.server_coalesce_queries = as_bool(v),
        "server_find_peak_qps_decimals_of_precision" => {
            s.server_find_peak_qps_decimals_of_precision = v.as_i64().unwrap() as i32
        }
        "server_find_peak_qps_boundary_step_size" => {
            float!(server_find_peak_qps_boundary_step_size)
        }
        "server_max_async_queries" => s.server_max_async_queries = as_u64(v),
        "server_num_issue_query_threads" => s.server_num_issue_query_threads = as_u64(v),
        "offline_expected_qps" => float!(offline_expected_qps),
        "sample_concatenate_permutation" => s.sample_concatenate_permutation = as_bool(v),
        "min_duration_ms" => s.min_duration_ms = as_u64(v),
        "max_duration_ms" => s.max_duration_ms = as_u64(v),
        "min_query_count" => s.min_query_count = as_u64(v),
        "max_query_count" => s.max_query_count = as_u64(v),
        "qsl_rng_seed" => s.qsl_rng_seed = as_u64(v),
        "sample_index_rng_seed" => s.sample_index_rng_seed = as_u64(v),
        "schedule_rng_seed" => s.schedule_rng_seed = as_u64(v),
        "accuracy_log_rng_seed" => s.accuracy_log_rng_seed = as_u64(v),
        "accuracy_log_probability" => float!(accuracy_log_probability),
        "accuracy_log_sampling_target" => s.accuracy_log_sampling_target = as_u64(v),
        "test05" => s.test05 = as_bool(v),
        "test05_qsl_rng_seed" => s.test05_qsl_rng_seed = as_u64(v),
        "test05_sample_index_rng_seed" => s.test05_sample_index_rng_seed = as_u64(v),
        "test05_schedule_rng_seed" => s.test05_schedule_rng_seed = as_u64(v),
        "print_timestamps" => s.print_timestamps = as_bool(v),
        "performance_issue_unique" => s.performance_issue_unique = as_bool(v),
        "performance_issue_same" => s.performance_issue_same = as_bool(v),
        "performance_issue_same_index" => s.performance_issue_same_index = as_u64(v),
        "performance_sample_count_override" => s.performance_sample_count_override = as_u64(v),
        "accuracy_sample_count_override" => s.accuracy_sample_count_override = as_u64(v),
        "use_token_latencies" => s.use_token_latencies = as_bool(v),
        "ttft_latency" | "server_ttft_latency" => s.server_ttft_latency = as_u64(v),
        "tpot_latency" | "server_tpot_latency" => s.server_tpot_latency = as_u64(v),
        "infer_token_latencies" => s.infer_token_latencies = as_bool(v),
        "token_latency_scaling_factor" => s.token_latency_scaling_factor = as_u64(v),
        other => panic!("unknown settings field {other}"),
    }
}

/// The `:::MLLOG` records of a detail log, in order, as (key, value).
fn detail_records(case: &Path) -> Vec<(String, Value)> {
    let text = fs::read_to_string(case.join("mlperf_log_detail.txt")).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix(":::MLLOG "))
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["key"].as_str().unwrap().to_string(), v["value"].clone())
        })
        .collect()
}

struct Case {
    name: String,
    dir: PathBuf,
    settings: TestSettings,
    total: usize,
    performance: usize,
    detail: Vec<(String, Value)>,
}

/// Loads a case: the settings object of `settings.json`, then the
/// `requested_*` detail lines on top (they are the values after the audit
/// file and test05 were applied).
fn load_case(dir: &Path) -> Case {
    let json = read_json(&dir.join("settings.json"));
    let mut settings = TestSettings::default();
    let obj = json["effective_test_settings"].as_object().unwrap();
    for (k, v) in obj {
        set_field(&mut settings, k, v);
    }
    let detail = detail_records(dir);
    for (k, v) in &detail {
        if let Some(name) = k.strip_prefix("requested_") {
            set_field(&mut settings, name, v);
        }
    }
    Case {
        name: dir.file_name().unwrap().to_string_lossy().into_owned(),
        dir: dir.to_path_buf(),
        settings,
        total: as_u64(&json["qsl_total_sample_count"]) as usize,
        performance: as_u64(&json["qsl_performance_sample_count"]) as usize,
        detail,
    }
}

/// The series a run is made of, in order: each loaded set with its run kind.
fn series(eff: &EffectiveSettings, total: usize) -> Vec<(LoadableSet, RunKind)> {
    let accuracy = || {
        generate_loadable_sets(eff, eff.accuracy_sample_count as usize, total)
            .into_iter()
            .map(|s| (s, RunKind::Accuracy))
            .collect::<Vec<_>>()
    };
    let performance = || {
        let sets = generate_loadable_sets(eff, eff.performance_sample_count as usize, total);
        vec![(sets.into_iter().next().unwrap(), RunKind::Performance)]
    };
    match eff.mode {
        TestMode::AccuracyOnly => accuracy(),
        TestMode::PerformanceOnly => performance(),
        TestMode::SubmissionRun => {
            let mut v = accuracy();
            v.extend(performance());
            v
        }
        TestMode::FindPeakPerformance => panic!("FindPeakPerformance runs are not covered here"),
    }
}

#[test]
fn effective_settings_match_detail_logs() {
    for dir in cases() {
        let case = load_case(&dir);
        let (eff, errors) = EffectiveSettings::derive(&case.settings, case.total, case.performance);
        let mut checked = 0;
        for (key, v) in &case.detail {
            let Some(name) = key.strip_prefix("effective_") else {
                continue;
            };
            let ctx = format!("{}: {key}", case.name);
            let u = || as_u64(v);
            let f = |x: f64| assert_eq!(g6(x), g6(as_f64(v)), "{ctx}");
            let b = |x: bool| assert_eq!(x, as_bool(v), "{ctx}");
            match name {
                "scenario" => assert_eq!(eff.scenario.as_str(), v.as_str().unwrap(), "{ctx}"),
                "test_mode" => assert_eq!(eff.mode.as_str(), v.as_str().unwrap(), "{ctx}"),
                "samples_per_query" => assert_eq!(eff.samples_per_query, u(), "{ctx}"),
                "target_qps" => f(eff.target_qps),
                "target_latency_ns" => assert_eq!(eff.target_latency_ns, u(), "{ctx}"),
                "target_latency_percentile" => f(eff.target_latency_percentile),
                "max_async_queries" => assert_eq!(eff.max_async_queries, u(), "{ctx}"),
                "target_duration_ms" => assert_eq!(eff.target_duration_ms, u(), "{ctx}"),
                "min_duration_ms" => assert_eq!(eff.min_duration_ms, u(), "{ctx}"),
                "max_duration_ms" => assert_eq!(eff.max_duration_ms, u(), "{ctx}"),
                "min_query_count" => assert_eq!(eff.min_query_count, u(), "{ctx}"),
                "max_query_count" => assert_eq!(eff.max_query_count, u(), "{ctx}"),
                "min_sample_count" => assert_eq!(eff.min_sample_count, u(), "{ctx}"),
                "qsl_rng_seed" => assert_eq!(eff.qsl_rng_seed, u(), "{ctx}"),
                "sample_index_rng_seed" => assert_eq!(eff.sample_index_rng_seed, u(), "{ctx}"),
                "schedule_rng_seed" => assert_eq!(eff.schedule_rng_seed, u(), "{ctx}"),
                "accuracy_log_rng_seed" => assert_eq!(eff.accuracy_log_rng_seed, u(), "{ctx}"),
                "accuracy_log_probability" => f(eff.accuracy_log_probability),
                "accuracy_log_sampling_target" => {
                    assert_eq!(eff.accuracy_log_sampling_target, u(), "{ctx}")
                }
                "print_timestamps" => b(eff.print_timestamps),
                "performance_issue_unique" => b(eff.performance_issue_unique),
                "performance_issue_same" => b(eff.performance_issue_same),
                "performance_issue_same_index" => {
                    assert_eq!(eff.performance_issue_same_index, u(), "{ctx}")
                }
                "performance_sample_count" => {
                    assert_eq!(eff.performance_sample_count, u(), "{ctx}")
                }
                "accuracy_sample_count" => assert_eq!(eff.accuracy_sample_count, u(), "{ctx}"),
                "sample_concatenate_permutation" => b(eff.sample_concatenate_permutation),
                other => panic!("{}: unchecked effective key {other}", case.name),
            }
            checked += 1;
        }
        assert!(
            checked >= 26,
            "{}: only {checked} effective keys",
            case.name
        );

        let logged: Vec<String> = case
            .detail
            .iter()
            .filter(|(k, _)| k == "error_invalid_test_settings")
            .map(|(_, v)| v.as_str().unwrap().to_string())
            .collect();
        assert_eq!(errors, logged, "{}: settings errors", case.name);
    }
}

#[test]
fn generation_matches_reference_runs() {
    for dir in cases() {
        let case = load_case(&dir);
        check_generation(&case);
        eprintln!("{}: ok", case.name);
    }
}

fn check_generation(case: &Case) {
    let name = &case.name;
    let (eff, _) = EffectiveSettings::derive(&case.settings, case.total, case.performance);
    let all_series = series(&eff, case.total);

    // Load / unload calls: each series loads its set and unloads the same list.
    let calls = read_json(&case.dir.join("qsl_calls.json"));
    let calls = calls.as_array().unwrap();
    assert_eq!(
        calls.len(),
        2 * all_series.len(),
        "{name}: number of QSL calls"
    );
    for (i, (set, _)) in all_series.iter().enumerate() {
        for (j, what) in ["load", "unload"].into_iter().enumerate() {
            let call = &calls[2 * i + j];
            assert_eq!(
                call["call"].as_str().unwrap(),
                what,
                "{name}: call {}",
                2 * i + j
            );
            let idx: Vec<usize> = call["indices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| as_u64(x) as usize)
                .collect();
            assert_eq!(idx, set.samples, "{name}: {what} of series {i}");
        }
    }

    // loaded_qsl_set and generated_* detail records, one per series.
    let loaded_logged: Vec<Vec<usize>> = case
        .detail
        .iter()
        .filter(|(k, _)| k == "loaded_qsl_set")
        .map(|(_, v)| {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| as_u64(x) as usize)
                .collect()
        })
        .collect();
    let logged_values = |key: &str| -> Vec<i64> {
        case.detail
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_i64().unwrap())
            .collect()
    };
    let gen_count = logged_values("generated_query_count");
    let gen_spq = logged_values("generated_samples_per_query");
    let gen_duration = logged_values("generated_query_duration");
    assert_eq!(
        loaded_logged.len(),
        all_series.len(),
        "{name}: loaded_qsl_set records"
    );
    assert_eq!(
        gen_count.len(),
        all_series.len(),
        "{name}: generated_query_count records"
    );

    // Issued queries and Server schedule, grouped by series.
    let queries = read_json(&case.dir.join("queries.json"));
    let mut issued: BTreeMap<usize, Vec<Vec<usize>>> = BTreeMap::new();
    for q in queries["queries"].as_array().unwrap() {
        let s = as_u64(&q["series"]) as usize;
        let idx = q["indices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| as_u64(x) as usize)
            .collect();
        issued.entry(s).or_default().push(idx);
    }
    let schedule_path = case.dir.join("schedule.json");
    let mut schedule: BTreeMap<usize, Vec<i64>> = BTreeMap::new();
    if schedule_path.exists() {
        for e in read_json(&schedule_path).as_array().unwrap() {
            let s = as_u64(&e["series"]) as usize;
            schedule
                .entry(s)
                .or_default()
                .push(e["scheduled_offset_ns"].as_i64().unwrap());
        }
    } else {
        assert_ne!(
            eff.scenario,
            Scenario::Server,
            "{name}: Server run without schedule.json"
        );
    }

    let mut out = Vec::new();
    for (i, (set, kind)) in all_series.iter().enumerate() {
        let ctx = format!("{name} series {i}");
        assert_eq!(loaded_logged[i], set.samples, "{ctx}: loaded_qsl_set");

        let plan = QueryGenerator::plan(&eff, set, *kind);
        let mut gen = QueryGenerator::new(&eff, set, *kind);
        assert_eq!(
            gen.samples_per_query() as u64,
            plan.samples_per_query,
            "{ctx}"
        );

        let issued_here = issued.remove(&i).unwrap_or_default();
        let sched_here = schedule.remove(&i).unwrap_or_default();
        let mut count = 0usize;
        let mut samples = 0u64;
        while let Some(offset) = gen.next_query(&mut out) {
            if let Some(expected) = issued_here.get(count) {
                assert_eq!(&out, expected, "{ctx}: indices of query {count}");
            }
            if let Some(&expected) = sched_here.get(count) {
                assert_eq!(offset, expected, "{ctx}: scheduled offset of query {count}");
            }
            if eff.scenario != Scenario::Server {
                assert!(offset >= 0);
            }
            assert_eq!(
                out.len(),
                gen.samples_per_query(),
                "{ctx}: query {count} size"
            );
            count += 1;
            samples += out.len() as u64;
        }
        assert!(
            gen.next_query(&mut out).is_none(),
            "{ctx}: generator restarted"
        );

        assert_eq!(count as i64, gen_count[i], "{ctx}: generated_query_count");
        assert_eq!(
            gen.samples_per_query() as i64,
            gen_spq[i],
            "{ctx}: generated_samples_per_query"
        );
        assert_eq!(
            gen.duration_ns(),
            gen_duration[i],
            "{ctx}: generated_query_duration"
        );
        assert_eq!(plan.query_count, count as u64, "{ctx}: plan query count");
        assert_eq!(plan.sample_count, samples, "{ctx}: plan sample count");
        assert_eq!(plan.duration_ns, gen.duration_ns(), "{ctx}: plan duration");

        assert!(
            issued_here.len() <= count,
            "{ctx}: more queries issued than generated"
        );
        assert!(
            sched_here.len() <= count,
            "{ctx}: more scheduled than generated"
        );
        if let Some(expected) = deterministic_issue_count(&eff, *kind, count) {
            assert_eq!(issued_here.len(), expected, "{ctx}: issued query count");
        }
        if eff.scenario == Scenario::Server {
            assert_eq!(
                sched_here.len(),
                issued_here.len(),
                "{ctx}: schedule entries"
            );
        }
    }
    assert!(
        issued.is_empty(),
        "{name}: queries for unknown series {:?}",
        issued.keys()
    );
    assert!(schedule.is_empty(), "{name}: schedule for unknown series");
}

/// How many generated queries the reference run must have issued, where that
/// does not depend on timing (`issue_query_controller.cc`, `IssueQueriesInternal`).
fn deterministic_issue_count(
    eff: &EffectiveSettings,
    kind: RunKind,
    generated: usize,
) -> Option<usize> {
    if kind == RunKind::Accuracy {
        return Some(generated);
    }
    let max_q = if eff.max_query_count == 0 {
        usize::MAX
    } else {
        eff.max_query_count as usize
    };
    match eff.scenario {
        Scenario::Server => {
            (eff.max_async_queries == 0 && eff.max_duration_ms == 0).then(|| generated.min(max_q))
        }
        _ => (eff.target_duration_ms == 0)
            .then(|| generated.min(eff.min_query_count as usize).min(max_q)),
    }
}
