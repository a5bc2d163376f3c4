//! `--engine official`: the official LoadGen 6.0.17, compiled into
//! loadgen-node, drives the QDL against real sut-node processes; and the
//! cross-check of both engines on the same settings and nodes.
//!
//! Built only with this crate's `official-loadgen` feature (run by
//! tests/official/run.sh, which fetches and checks the official sources).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure
#![cfg(feature = "official-loadgen")]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tests::{accuracy_entries, binary, detail_value, loadgen, scratch, sut_list, text, SutNode};

use tests::SMALL_DATA as DATA;

/// Short runs of each scenario that a pair of synthetic nodes meets easily.
fn scenarios() -> Vec<(&'static str, Vec<&'static str>)> {
    vec![
        (
            "SingleStream",
            vec![
                "min_duration=300",
                "min_query_count=200",
                "target_latency=1",
            ],
        ),
        (
            "MultiStream",
            // Early stopping needs 662 queries at the 99th percentile.
            vec![
                "min_duration=300",
                "min_query_count=700",
                "target_latency=1",
            ],
        ),
        (
            "Server",
            // A latency bound (100 ms) a loaded CI machine meets too; early
            // stopping needs several hundred queries.
            vec![
                "target_qps=300",
                "target_latency=100",
                "min_duration=500",
                "min_query_count=700",
            ],
        ),
        // A query larger than the nodes answer in min_duration: they answer
        // about 16,000 samples/s (8-sample batches of 1 ms each, two nodes).
        ("Offline", vec!["target_qps=40000", "min_duration=300"]),
    ]
}

fn nodes() -> Vec<SutNode> {
    ["official-a", "official-b"]
        .iter()
        .map(|n| {
            SutNode::start(
                n,
                &["--max-batch-size", "8", "--service-time", "fixed:1000"],
            )
        })
        .collect()
}

fn run(
    engine: &str,
    sut: &str,
    scenario: &str,
    mode: &str,
    sets: &[&str],
    out: &Path,
    extra: &[&str],
) -> Output {
    let out_s = out.display().to_string();
    let mut args = vec![
        "--engine",
        engine,
        "--sut",
        sut,
        "--scenario",
        scenario,
        "--mode",
        mode,
        "--output-dir",
        &out_s,
    ];
    args.extend_from_slice(DATA);
    args.extend_from_slice(extra);
    for s in sets {
        args.extend(["--set", s]);
    }
    let o = loadgen(&args);
    assert!(
        o.status.success(),
        "{engine} {scenario} {mode}: {}",
        text(&o.stderr)
    );
    o
}

fn summary(out: &Path) -> String {
    std::fs::read_to_string(out.join("mlperf_log_summary.txt")).unwrap_or_default()
}

#[test]
fn official_loadgen_writes_its_logs_with_the_network_sut_name_from_a_round_trip() {
    let nodes = nodes();
    let sut = sut_list(&nodes);
    let out = scratch("official-logs");
    run(
        "official",
        &sut,
        "Offline",
        "PerformanceOnly",
        &["target_qps=40000", "min_duration=300"],
        &out,
        &[],
    );
    let version = detail_value(&out, "loadgen_version").expect("loadgen_version");
    assert!(
        version.as_str().is_some_and(|v| v.starts_with("6.0.17")),
        "{version}"
    );
    let sha1 = detail_value(&out, "loadgen_file_sha1").expect("loadgen_file_sha1");
    assert_eq!(
        sha1["/loadgen.cc"], "86bc3765857092b9d1f380604b101c771679842a",
        "the official LoadGen logs the hash of the file it was built from"
    );
    assert_eq!(
        detail_value(&out, "sut_name").expect("sut_name"),
        "Network SUT (2 nodes: official-a, official-b)"
    );
    for log in [
        "mlperf_log_summary.txt",
        "mlperf_log_detail.txt",
        "mlperf_log_accuracy.json",
    ] {
        assert!(out.join(log).is_file(), "{log}");
    }
    assert!(
        summary(&out).contains("Result is : VALID"),
        "{}",
        summary(&out)
    );

    let v = loadgen(&["--version"]);
    assert!(
        text(&v.stdout).contains("matches the published 6.0.17 file list"),
        "{}",
        text(&v.stdout)
    );
}

#[test]
fn both_engines_answer_the_same_samples_in_accuracy_mode() {
    let nodes = nodes();
    let sut = sut_list(&nodes);
    for (scenario, sets) in scenarios() {
        let mut answered = Vec::new();
        for engine in ["native", "official"] {
            let out = scratch(&format!("xcheck-acc-{engine}-{scenario}"));
            // Every answer logged is the synthetic nodes' answer for its
            // sample.
            let o = run(
                engine,
                &sut,
                scenario,
                "AccuracyOnly",
                &sets,
                &out,
                &["--verify-synthetic"],
            );
            assert!(
                text(&o.stdout).contains("logged answers match"),
                "{engine} {scenario}: {}",
                text(&o.stdout)
            );
            let mut idx: Vec<u64> = accuracy_entries(&out).iter().map(|e| e.qsl_idx).collect();
            idx.sort_unstable();
            answered.push(idx);
        }
        let mut distinct = answered[0].clone();
        distinct.dedup();
        assert_eq!(distinct, (0..300).collect::<Vec<u64>>(), "{scenario}");
        assert_eq!(
            answered[0], answered[1],
            "{scenario}: answered sample indices"
        );
    }
}

/// Effective settings both engines must agree on.
const SAME: &[&str] = &[
    "effective_scenario",
    "effective_test_mode",
    "effective_samples_per_query",
    "effective_target_qps",
    "effective_target_latency_ns",
    "effective_min_duration_ms",
    "effective_min_query_count",
    "effective_min_sample_count",
    "effective_qsl_rng_seed",
    "effective_sample_index_rng_seed",
    "effective_schedule_rng_seed",
    "effective_performance_sample_count",
    "loaded_qsl_set",
    "result_validity",
];

#[test]
fn both_engines_agree_on_settings_loaded_sets_and_validity_in_performance_mode() {
    let nodes = nodes();
    let sut = sut_list(&nodes);
    for (scenario, sets) in scenarios() {
        let native = scratch(&format!("xcheck-perf-native-{scenario}"));
        let official = scratch(&format!("xcheck-perf-official-{scenario}"));
        run(
            "native",
            &sut,
            scenario,
            "PerformanceOnly",
            &sets,
            &native,
            &[],
        );
        run(
            "official",
            &sut,
            scenario,
            "PerformanceOnly",
            &sets,
            &official,
            &[],
        );
        for key in SAME {
            let (n, o) = (detail_value(&native, key), detail_value(&official, key));
            assert!(n.is_some(), "{scenario}: native log lacks {key}");
            assert_eq!(n, o, "{scenario}: {key}");
        }
        assert_eq!(
            detail_value(&official, "result_validity").as_ref(),
            Some(&serde_json::Value::from("VALID")),
            "{scenario}: {}",
            summary(&official)
        );
    }
}

#[test]
fn a_node_dying_mid_run_ends_the_official_run_and_its_logs_are_set_aside() {
    let mut nodes = nodes();
    let sut = sut_list(&nodes);
    let victim_addr = nodes[1].addr.clone();
    let out = scratch("official-node-dies");
    let mut child = Command::new(binary("loadgen-node"))
        .args([
            "--engine",
            "official",
            "--sut",
            &sut,
            "--scenario",
            "Server",
        ])
        .args(["--mode", "PerformanceOnly", "--node-timeout", "1"])
        .args(DATA)
        .args(["--set", "target_qps=500", "--set", "min_duration=60000"])
        .arg("--output-dir")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("loadgen-node starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    while detail_value(&out, "generated_query_count").is_none() {
        assert!(Instant::now() < deadline, "the run never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    nodes[1].kill();
    let killed = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "the official run did not end after a node died"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = child
        .wait_with_output()
        .map(|o| text(&o.stderr))
        .unwrap_or_default();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains(&victim_addr),
        "the reason names the node: {err}"
    );
    let note = std::fs::read_to_string(out.join("RUN_FAILED.txt")).unwrap_or_default();
    assert!(note.contains(&victim_addr), "{note}");
    assert!(!out.join("mlperf_log_summary.txt").exists());
    assert!(out.join("mlperf_log_summary.txt.failed-run").is_file());
}

#[test]
fn flags_the_official_engine_cannot_honour_are_refused() {
    let o = loadgen(&[
        "--engine",
        "official",
        "--conf",
        "x.conf",
        "--sut",
        "127.0.0.1:1",
    ]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("mlperf_conf.h"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn the_official_engine_gets_progress_lines_and_the_breakdown_from_the_qdl() {
    let nodes = nodes();
    let sut = sut_list(&nodes);
    let out = scratch("official-observe");
    let sets = ["target_qps=300", "min_duration=2500", "min_query_count=100"];
    let o = run(
        "official",
        &sut,
        "Server",
        "PerformanceOnly",
        &sets,
        &out,
        &["--progress-interval", "1"],
    );
    let err = text(&o.stderr);
    // The line judges the QDL's latencies by the bound and early stopping
    // the official LoadGen reads from the same settings (ResNet50 Server:
    // p99 within 15 ms).
    let lines = err
        .lines()
        .filter(|l| {
            l.contains(" issued ")
                && l.contains(" completed ")
                && l.contains("p99 ")
                && l.contains("(bound 15.000 ms, ")
                && l.contains("early stopping: ")
                && l.ends_with("(latency: QDL send to answer)")
        })
        .count();
    assert!(lines >= 2, "no progress lines with the bound:\n{err}");
    assert!(text(&o.stdout).contains("Where the time went"));
    let file = std::fs::read_to_string(out.join("mlperf_net_breakdown.json")).unwrap();
    let b: serde_json::Value = serde_json::from_str(&file).unwrap();
    let nodes = b["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{file}");
    for n in nodes {
        // 1 ms of service time, seen on the node's own clock.
        let compute = n["node_compute"]["p50"].as_u64().unwrap();
        assert!(compute >= 980_000, "{file}");
    }
    assert!(!std::fs::read_to_string(out.join("mlperf_log_detail.txt"))
        .unwrap()
        .contains("node_compute"));
}

#[test]
fn first_tokens_and_token_counts_reach_the_official_loadgen() {
    let nodes: Vec<SutNode> = ["official-llm-a", "official-llm-b"]
        .iter()
        .map(|n| SutNode::start(n, &["--llm-tokens", "8"]))
        .collect();
    let sut = sut_list(&nodes);
    let out = scratch("official-llm");
    let out_s = out.display().to_string();
    let o = loadgen(&[
        "--engine",
        "official",
        "--sut",
        &sut,
        "--model",
        "llama2-70b",
        "--scenario",
        "Server",
        "--mode",
        "PerformanceOnly",
        "--sample-bytes",
        "64",
        "--total-sample-count",
        "300",
        "--performance-sample-count",
        "100",
        "--no-trace",
        "--set",
        "target_qps=100",
        "--set",
        "min_duration=2000",
        "--set",
        "min_query_count=200",
        "--output-dir",
        &out_s,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = summary(&out);
    // TTFT comes from FirstTokenComplete, the token rate from n_tokens.
    assert!(s.contains("TTFT Early Stopping Result:"), "{s}");
    let tps: f64 = s
        .lines()
        .find_map(|l| l.strip_prefix("Completed tokens per second: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    assert!(tps > 0.0, "{s}");
}

#[test]
fn the_official_engines_traced_samples_reach_the_nodes_under_the_run() {
    let collector = tests::collector::Collector::start();
    let node = SutNode::start("official-traced", &["--otlp", &collector.endpoint]);
    let sut = sut_list(std::slice::from_ref(&node));
    let out = scratch("official-otlp");
    let sets = ["min_duration=0", "min_query_count=20", "max_query_count=20"];
    let o = run(
        "official",
        &sut,
        "SingleStream",
        "PerformanceOnly",
        &sets,
        &out,
        &["--otlp", &collector.endpoint, "--otlp-sample-ratio", "1"],
    );
    let err = text(&o.stderr);
    assert!(err.contains("spans exported, 0 dropped"), "{err}");
    let spans = collector.wait_for(Duration::from_secs(20), |s| {
        s.iter()
            .filter(|s| s.service == "sut-node" && s.name == "sut-node.sample")
            .count()
            >= 20
            && s.iter().any(|s| s.name == "loadgen-node.run")
    });
    let run = spans
        .iter()
        .find(|s| s.name == "loadgen-node.run")
        .expect("the run's span");
    let qdl: Vec<_> = spans.iter().filter(|s| s.name == "qdl.sample").collect();
    assert_eq!(qdl.len(), 20);
    for q in &qdl {
        assert_eq!(q.parent_span_id, run.span_id, "no series: under the run");
    }
    for n in spans.iter().filter(|s| s.name == "sut-node.sample") {
        let q = qdl
            .iter()
            .find(|q| q.span_id == n.parent_span_id)
            .unwrap_or_else(|| panic!("the node's span has no QDL parent: {n:?}"));
        assert_eq!(q.trace_id, n.trace_id);
    }
}

/// The seeds of LoadGen 6.0.17's mlperf.conf, which every run of a
/// submission must have logged.
const SEEDS: [(&str, u64); 3] = [
    ("effective_qsl_rng_seed", 2085463073848966840),
    ("effective_sample_index_rng_seed", 2747215439041700203),
    ("effective_schedule_rng_seed", 16159082839903944936),
];

/// A run of the official LoadGen that applied mlperf.conf and then the
/// plan's settings: its seeds, its (shortened) minimum duration, and none
/// of the LoadGen's own complaints about conf files.
fn assert_configured_once(run: &Path, min_duration_ms: u64) {
    for (key, seed) in SEEDS {
        assert_eq!(
            detail_value(run, key),
            Some(serde_json::Value::from(seed)),
            "{}: {key}",
            run.display()
        );
    }
    assert_eq!(
        detail_value(run, "effective_min_duration_ms"),
        Some(serde_json::Value::from(min_duration_ms)),
        "{}",
        run.display()
    );
    let detail = std::fs::read_to_string(run.join("mlperf_log_detail.txt")).unwrap();
    assert!(
        !detail.contains("error_invalid_config") && !detail.contains("Multiple conf files"),
        "{}: the LoadGen saw a second conf file",
        run.display()
    );
}

/// The tree's runs of one scenario: where each detail log is.
const TREE_RUNS: [&str; 4] = [
    "accuracy",
    "performance/run_1",
    "TEST01/performance/run_1",
    "TEST04/performance/run_1",
];

#[test]
fn a_submission_plan_with_the_official_engine_gives_every_run_its_own_process() {
    let nodes = nodes();
    let dir = scratch("official-submission");
    let plan_path = dir.join("plan.toml");
    let plan = format!(
        r#"
system = "official_sut"
submitter = "MLPerfNet"
sut = "{}"
engine = "official"
run_flags = ["--sample-bytes", "64", "--total-sample-count", "256"]

[[benchmark]]
model = "resnet50"
scenarios = ["Offline", "Server", "SingleStream", "MultiStream"]
accuracy_command = "{} check-synthetic --accuracy-log {{accuracy_log}} --sample-bytes 64 --total-sample-count 256"
[benchmark.settings]
min_duration = 1000
[benchmark.settings.Offline]
target_qps = 4000
[benchmark.settings.Server]
target_qps = 300
min_query_count = 700
[benchmark.settings.SingleStream]
target_latency = 5
min_query_count = 200
[benchmark.settings.MultiStream]
target_latency = 10
min_query_count = 700

[system_description]
status = "available"
"#,
        sut_list(&nodes),
        binary("loadgen-node").display()
    );
    std::fs::write(&plan_path, plan).unwrap();
    let plan_arg = plan_path.display().to_string();
    let mut args = vec!["submission", plan_arg.as_str()];
    let inference =
        tests::inference_checkout("the official checker").map(|d| d.display().to_string());
    if let Some(i) = &inference {
        args.extend(["--inference", i]);
    }
    let o = loadgen(&args);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(
        err.matches("official run in a process of its own").count() == 16,
        "four scenarios of four runs each, each in its own process:\n{err}"
    );
    let root = dir.join("submission/network/MLPerfNet");
    for scenario in ["Offline", "Server", "SingleStream", "MultiStream"] {
        let s = root.join("results/official_sut/resnet").join(scenario);
        for run in TREE_RUNS {
            assert_configured_once(&s.join(run), 1000);
        }
        for f in [
            "TEST01/verify_performance.txt",
            "TEST04/verify_performance.txt",
        ] {
            assert!(s.join(f).is_file(), "{scenario}/{f}\n{out}{err}");
        }
        let extras = dir.join("run_extras/official_sut/resnet").join(scenario);
        for run in ["accuracy", "performance", "TEST01", "TEST04"] {
            let merged = extras.join(run).join("user.conf.loadgen-node");
            let text = std::fs::read_to_string(&merged)
                .unwrap_or_else(|e| panic!("{}: {e}", merged.display()));
            assert!(text.contains("resnet50"), "{text}");
        }
        assert!(extras.join("TEST01/audit.config").is_file());
    }
    let refused = tests::files_the_checker_refuses(&root.join("results"));
    assert!(refused.is_empty(), "{refused:#?}");
    // Shortened runs cannot pass, but nothing else may be wrong.
    if inference.is_some() {
        let log = std::fs::read_to_string(dir.join("checker.log")).unwrap();
        let errors: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("ERROR"))
            .filter(|l| !tests::SHORT_RUN_COMPLAINTS.iter().any(|c| l.contains(c)))
            .filter(|l| !tests::CHECKER_SUMMING_UP.iter().any(|c| l.contains(c)))
            .collect();
        assert!(
            errors.is_empty(),
            "the checker found more: {errors:#?}\n{log}"
        );
    }
}

#[test]
fn audits_with_the_official_engine_run_each_run_in_its_own_process() {
    let nodes = nodes();
    let sut = sut_list(&nodes);
    let scratch = scratch("official-audit");
    let dir = scratch.join("results/sys/resnet/SingleStream");
    let dir_s = dir.display().to_string();
    let extras = scratch.join("extras");
    let extras_s = extras.display().to_string();
    for test in ["TEST01", "TEST04"] {
        let o = loadgen(&[
            "audit",
            test,
            "--engine",
            "official",
            "--sut",
            &sut,
            "--scenario",
            "SingleStream",
            "--model",
            "resnet50",
            "--sample-bytes",
            "64",
            "--total-sample-count",
            "256",
            "--set",
            "min_duration=1000",
            "--set",
            "min_query_count=200",
            "--set",
            "target_latency=5",
            "--output-dir",
            &dir_s,
            "--extras-dir",
            &extras_s,
        ]);
        let (out, err) = (text(&o.stdout), text(&o.stderr));
        assert!(
            out.contains(&format!("{test} verification complete")),
            "{out}{err}"
        );
        assert!(
            err.contains("official run in a process of its own"),
            "{err}"
        );
    }
    for run in TREE_RUNS {
        assert_configured_once(&dir.join(run), 1000);
    }
    for run in ["performance", "accuracy", "TEST01", "TEST04"] {
        assert!(
            extras.join(run).join("user.conf.loadgen-node").is_file(),
            "{run}"
        );
    }
    let refused = tests::files_the_checker_refuses_in_scenario(&dir);
    assert!(refused.is_empty(), "{refused:#?}");
}

/// The official LoadGen applies mlperf.conf only on a process's first
/// FromConfig: a second official test in one process is refused before it
/// starts. (The only test here that runs the official LoadGen inside the
/// test process.)
#[test]
fn a_second_official_run_in_one_process_is_refused() {
    use clap::Parser;
    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        run: loadgen_cli::args::RunArgs,
    }
    let out = scratch("official-twice");
    let out_s = out.display().to_string();
    let flags = Flags::parse_from([
        "loadgen-node",
        "--engine",
        "official",
        "--scenario",
        "SingleStream",
        "--total-sample-count",
        "16",
        "--no-trace",
        "--progress-interval",
        "0",
        "--set",
        "min_duration=0",
        "--set",
        "min_query_count=16",
        "--set",
        "max_query_count=16",
        "--output-dir",
        &out_s,
    ]);
    let first = loadgen_cli::engines::run(&flags.run).expect("the first official run");
    assert_eq!(first, loadgen_cli::exit::Exit::Done);
    assert_configured_once(&out, 0);
    let second = loadgen_cli::engines::run(&flags.run).unwrap_err();
    assert!(
        second
            .to_string()
            .contains("already run a test in this process"),
        "{second}"
    );
}

/// The native engine's built-in mlperf.conf holds exactly the settings of
/// the official LoadGen's, key for key (the release's mlperf.conf, from
/// which its compiled-in mlperf_conf.h is made).
#[test]
fn the_built_in_mlperf_conf_is_the_official_one() {
    use loadgen_engine::config::ConfigFile;
    use std::collections::BTreeMap;
    let src = std::env::var("MLPERF_LOADGEN_SRC").expect("MLPERF_LOADGEN_SRC");
    let official = ConfigFile::read(Path::new(&src).join("mlperf.conf")).unwrap();
    let ours = ConfigFile::builtin().unwrap();
    let map = |f: &ConfigFile| -> BTreeMap<String, String> {
        f.entries()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let (official, ours) = (map(&official), map(&ours));
    for (k, v) in &official {
        assert_eq!(ours.get(k), Some(v), "{k}: the official value is {v}");
    }
    for k in ours.keys() {
        assert!(
            official.contains_key(k),
            "{k} is not in the official mlperf.conf"
        );
    }
}

/// Every model of the official mlperf.conf gets the same effective settings
/// from both engines (null SUT, each scenario, runs of a few queries): the
/// same keys looked up the same way, dots in model names included.
#[test]
fn both_engines_read_mlperf_conf_alike_for_every_model() {
    use loadgen_engine::config::ConfigFile;
    let conf = ConfigFile::builtin().unwrap();
    let models: Vec<String> = conf.models().into_iter().map(String::from).collect();
    assert!(models.len() >= 29, "{models:?}");
    let keys = [
        "effective_target_latency_ns",
        "effective_target_latency_percentile",
        "effective_min_duration_ms",
        "effective_max_duration_ms",
        "effective_samples_per_query",
        "effective_performance_sample_count",
        "effective_sample_concatenate_permutation",
        "effective_use_token_latencies",
        "effective_ttft_latency",
        "effective_tpot_latency",
        "effective_qsl_rng_seed",
        "effective_sample_index_rng_seed",
        "effective_schedule_rng_seed",
    ];
    for model in &models {
        for scenario in ["SingleStream", "MultiStream", "Server", "Offline"] {
            let mut logs = Vec::new();
            // The native null SUT answers a token model with tokens, as
            // the engine requires; the official one is not so strict.
            let tokens = conf.get(&format!("{model}.*.use_token_latencies")) == Some("1");
            for engine in ["native", "official"] {
                let out = scratch(&format!("conf-{engine}-{model}-{scenario}"));
                let out_s = out.display().to_string();
                let mut args = vec![
                    "--engine",
                    engine,
                    "--sut",
                    "null",
                    "--model",
                    model,
                    "--scenario",
                    scenario,
                    "--total-sample-count",
                    "64",
                    "--no-trace",
                    "--progress-interval",
                    "0",
                    "--set",
                    "max_duration=1",
                    "--set",
                    "max_query_count=8",
                    "--output-dir",
                    &out_s,
                ];
                if tokens && engine == "native" {
                    args.push("--null-tokens");
                }
                let o = loadgen(&args);
                assert!(
                    o.status.success(),
                    "{engine} {model} {scenario}: {}",
                    text(&o.stderr)
                );
                logs.push(out);
            }
            for key in keys {
                assert_eq!(
                    detail_value(&logs[0], key),
                    detail_value(&logs[1], key),
                    "{model} {scenario}: {key}"
                );
            }
            for l in logs {
                let _ = std::fs::remove_dir_all(l);
            }
        }
    }
}

#[test]
fn the_official_engine_refuses_a_data_set_the_host_cannot_hold_before_looking_up_nodes() {
    tests::no_host_holds_this_data_set("official");
}

/// The official LoadGen's logger goes on silently when a write fails (it
/// ran to its end, exit 0, its summary empty): the disk is watched, and the
/// run ends at once as a failed one, its logs set aside with the reason.
#[test]
fn an_official_run_whose_disk_fills_ends_at_once_marked_failed() {
    let Some(disk) =
        tests::SmallDisk::mount("official-fill", "48m", "the official run whose disk fills")
    else {
        return;
    };
    let node = SutNode::start("official-fill", &[]);
    let out = disk.path().join("run");
    let child = tests::long_server_run(&node, &out, "official");
    disk.fill_leaving(1 << 20);
    let (code, err) = tests::ends_soon(child);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("the run failed: the disk is full"), "{err}");
    let note = std::fs::read_to_string(out.join("RUN_FAILED.txt")).unwrap_or_default();
    assert!(
        note.contains("the disk is full") && note.contains(&out.display().to_string()),
        "{note}"
    );
    assert!(!out.join("mlperf_log_summary.txt").exists());
    assert!(out.join("mlperf_log_detail.txt.failed-run").is_file());
    assert!(!out.join(".loadgen-node-disk-reserve").exists());
}

#[test]
fn the_official_engine_refuses_an_llm_session_with_a_node_that_answers_without_tokens() {
    tests::an_llm_session_without_tokens_is_refused("official");
}

/// llama3.1-8b's synthetic node (a first token, then the answer, in two
/// messages) and one official run of `scenario` and `mode` against it: the
/// run ends by itself, and its detail log holds no error of a first token
/// recorded after its sample's answer, or an answer before its first token.
fn official_llm_run_records_first_tokens_first(scenario: &str, mode: &str, sets: &[&str]) {
    let node = SutNode::start(
        &format!("official-order-{scenario}"),
        &[
            "--benchmark",
            "llama3.1-8b",
            "--service-time",
            "batch:0+20",
            "--max-batch-size",
            "64",
        ],
    );
    let out = scratch(&format!("official-order-{scenario}"));
    let out_s = out.display().to_string();
    let mut args = vec![
        "--engine",
        "official",
        "--sut",
        &node.addr,
        "--model",
        "llama3.1-8b",
        "--scenario",
        scenario,
        "--mode",
        mode,
        "--sample-bytes",
        "64",
        "--total-sample-count",
        "3000",
        "--performance-sample-count",
        "3000",
        "--no-trace",
        "--output-dir",
        &out_s,
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    let o = loadgen(&args);
    assert!(
        o.status.success(),
        "{scenario} {mode}: {:?}\n{}",
        o.status,
        text(&o.stderr)
    );
    let detail = std::fs::read_to_string(out.join("mlperf_log_detail.txt")).unwrap();
    for e in [
        "Attempted to record token latency after sample was completed",
        "Attempted to record a sample latency before it's first token latency",
    ] {
        assert!(!detail.contains(e), "{scenario} {mode}: {e}");
    }
    assert!(
        !detail.contains("error_runtime"),
        "{scenario} {mode}: {detail}"
    );
}

#[test]
fn an_llm_offline_accuracy_run_records_every_first_token_before_its_answer() {
    official_llm_run_records_first_tokens_first("Offline", "AccuracyOnly", &[]);
}

#[test]
fn an_llm_server_performance_run_records_every_first_token_before_its_answer() {
    official_llm_run_records_first_tokens_first(
        "Server",
        "PerformanceOnly",
        &[
            "target_qps=500",
            "min_duration=3000",
            "min_query_count=1500",
        ],
    );
}
