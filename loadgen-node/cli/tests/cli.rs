//! The `loadgen-node` binary as a user runs it: replaying a reference run,
//! config errors, the working directory's audit.config, output options.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tests::scratch;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_loadgen-node"))
}

fn fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../engine/tests/data/conformance")
        .join(case)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn replays_a_reference_accuracy_run() {
    let case = fixture("singlestream_acc_600_256");
    let scratch = scratch("replay");
    let out = scratch.join("nested/dir");
    let o = bin()
        .args([
            "--sut",
            "null",
            "--model",
            "m",
            "--scenario",
            "SingleStream",
        ])
        .args(["--mode", "AccuracyOnly", "--user-conf"])
        .arg(case.join("user.conf"))
        .args([
            "--total-sample-count",
            "600",
            "--performance-sample-count",
            "256",
        ])
        .arg("--output-dir")
        .arg(&out)
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", stderr(&o));
    let ours = std::fs::read(out.join("mlperf_log_accuracy.json")).expect("accuracy log");
    let theirs = std::fs::read(case.join("mlperf_log_accuracy.json")).expect("fixture");
    assert!(ours == theirs, "accuracy log differs from the official run");
    let summary = std::fs::read_to_string(out.join("mlperf_log_summary.txt")).unwrap();
    assert_eq!(
        summary,
        "\nNo warnings encountered during test.\n\nNo errors encountered during test.\n"
    );
}

#[test]
fn a_bad_config_line_names_file_and_line_and_fails() {
    let dir = scratch("bad-conf");
    let conf = dir.join("user.conf");
    std::fs::write(
        &conf,
        "*.SingleStream.min_duration = 10\nresnet50.SingleStream.target_latency abc\n",
    )
    .unwrap();
    let o = bin()
        .args(["--sut", "null", "--scenario", "SingleStream", "--user-conf"])
        .arg(&conf)
        .arg("--output-dir")
        .arg(dir.join("out"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains(&format!("{}:2:", conf.display())),
        "no file:line in: {err}"
    );
    assert!(!dir.join("out").exists(), "nothing runs on a bad config");

    let o = bin()
        .args(["--sut", "null", "--set", "target_qsp=5"])
        .arg("--output-dir")
        .arg(dir.join("out"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("unknown setting `target_qsp`"));
}

#[test]
fn audit_config_in_the_working_directory_is_used_and_announced() {
    let dir = scratch("audit");
    // TEST04-like: every query on the same sample.
    std::fs::write(
        dir.join("audit.config"),
        "*.*.performance_issue_same = 1\n*.*.performance_issue_same_index = 3\n",
    )
    .unwrap();
    let o = bin()
        .current_dir(&dir)
        .args([
            "--sut",
            "null",
            "--scenario",
            "SingleStream",
            "--mode",
            "PerformanceOnly",
        ])
        .args([
            "--set",
            "min_duration=0",
            "--set",
            "min_query_count=50",
            "--no-trace",
        ])
        .args(["--total-sample-count", "64", "--output-dir", "out"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("audit.config"));
    let detail = std::fs::read_to_string(dir.join("out/mlperf_log_detail.txt")).unwrap();
    assert!(detail.contains("Found Audit Config file (audit.config)"));
    assert!(detail.contains("\"key\": \"effective_performance_issue_same\", \"value\": true"));
    // --no-trace leaves the trace file empty.
    assert_eq!(
        std::fs::metadata(dir.join("out/mlperf_log_trace.json"))
            .unwrap()
            .len(),
        0
    );
}

#[test]
fn conf_replaces_the_built_in_mlperf_conf() {
    let dir = scratch("conf");
    let conf = dir.join("mlperf.conf");
    // A new round's seeds; nothing else from the built-in file applies.
    std::fs::write(
        &conf,
        "*.*.qsl_rng_seed = 42\n*.*.sample_index_rng_seed = 43\n*.*.schedule_rng_seed = 44\n",
    )
    .unwrap();
    let o = bin()
        .args([
            "--sut",
            "null",
            "--model",
            "resnet50",
            "--scenario",
            "Offline",
        ])
        .args(["--mode", "AccuracyOnly", "--conf"])
        .arg(&conf)
        .args(["--total-sample-count", "16", "--output-dir"])
        .arg(dir.join("out"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let detail = std::fs::read_to_string(dir.join("out/mlperf_log_detail.txt")).unwrap();
    for line in [
        "\"effective_qsl_rng_seed\", \"value\": 42,",
        "\"effective_sample_index_rng_seed\", \"value\": 43,",
        "\"effective_schedule_rng_seed\", \"value\": 44,",
        // resnet50's built-in Offline min_duration (600000 ms) is gone.
        "\"effective_min_duration_ms\", \"value\": 10000,",
    ] {
        assert!(detail.contains(line), "missing {line}");
    }
}

#[cfg(not(feature = "official-loadgen"))]
#[test]
fn the_official_engine_in_a_build_without_it_says_how_to_build_it() {
    let o = bin()
        .args(["--engine", "official", "--sut", "127.0.0.1:1"])
        .output()
        .expect("runs");
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("built without the official LoadGen")
            && err.contains("deploy/official-loadgen.sh"),
        "{err}"
    );
    let v = bin().arg("--version").output().expect("runs");
    let out = String::from_utf8_lossy(&v.stdout);
    assert!(out.contains("official engine: not compiled in"), "{out}");
}

#[test]
fn settings_that_would_hang_overflow_or_exhaust_memory_are_refused() {
    let dir = scratch("ranges");
    // (scenario, user.conf line, what the error must say)
    let cases = [
        (
            "Offline",
            "*.Offline.target_qps = 1e308",
            "a number from 0.001 to 100000000",
        ),
        (
            "Offline",
            "*.Offline.target_qps = inf",
            "`*.Offline.target_qps = inf`",
        ),
        (
            "Offline",
            "*.Offline.target_qps = 1e400",
            "target_qps must be",
        ),
        (
            "Offline",
            "*.Offline.min_duration = -1",
            "min_duration must be an integer from 0",
        ),
        ("Server", "*.Server.target_qps = inf", "target_qps must be"),
        ("Server", "*.Server.target_qps = 0", "target_qps must be"),
        (
            "Server",
            "*.Server.target_qps = 1e-300",
            "target_qps must be",
        ),
        ("Server", "*.Server.target_qps = -1", "target_qps must be"),
        (
            "Server",
            "*.Server.min_duration = -1",
            "min_duration must be",
        ),
        (
            "SingleStream",
            "*.SingleStream.min_duration = -1",
            "min_duration must be",
        ),
        (
            "MultiStream",
            "*.MultiStream.target_latency = -5",
            "target_latency must be a number from 0.001",
        ),
        (
            "Server",
            "*.Server.min_duraton = 10",
            "unknown setting `min_duraton`",
        ),
        (
            "Offline",
            "*.Offline.target_qps = 1e7",
            "plan 6.600e9 samples",
        ),
        (
            "Server",
            "*.Server.min_query_count = 18446744073709551615",
            "min_query_count must be an integer from 0 to",
        ),
        (
            "SingleStream",
            "*.SingleStream.min_query_count = 1000000000000",
            "min_query_count must be an integer from 0 to",
        ),
        (
            "Offline",
            "*.Offline.performance_sample_count_override = 1000000000000",
            "performance_sample_count_override must be an integer from 0 to",
        ),
        (
            "Server",
            "*.Server.min_duration = 1e10",
            "reads `1e10` as 1",
        ),
        ("Server", "*.Server.min_duration = 1.5", "reads `1.5` as 1"),
    ];
    for (scenario, line, why) in cases {
        let conf = dir.join("user.conf");
        std::fs::write(&conf, format!("# tuned\n{line}\n")).unwrap();
        let o = bin()
            .args(["--sut", "null", "--scenario", scenario, "--user-conf"])
            .arg(&conf)
            .arg("--output-dir")
            .arg(dir.join("out"))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{line}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains(why), "{line}: {err}");
        if !why.starts_with("plan") {
            assert!(
                err.contains(&format!("{}:2:", conf.display())),
                "{line}: {err}"
            );
        }
        assert!(!dir.join("out").exists(), "{line}: nothing runs");
    }
    // The same ranges hold for --set, and for the flags.
    for (flags, why) in [
        (&["--set", "min_duration=-1"][..], "min_duration must be"),
        (
            &["--set", "min_query_count=18446744073709551615"][..],
            "--set:1: `resnet50.Offline.min_query_count = 18446744073709551615` is out of range",
        ),
        (&["--sample-bytes", "100000000000"][..], "--sample-bytes"),
        (
            &["--connections-per-node", "0"][..],
            "--connections-per-node",
        ),
        (&["--set", "min_duration"][..], "KEY=VALUE"),
        (&["--node-timeout", "soon"][..], "--node-timeout"),
        (&["--dispatch", "weighted:"][..], "--dispatch"),
        (&["--max-in-flight", "0"][..], "--max-in-flight"),
    ] {
        let o = bin()
            .args(["--sut", "null"])
            .args(flags)
            .arg("--output-dir")
            .arg(dir.join("out"))
            .output()
            .unwrap();
        // Refused flags are errors (1), never a failed run (2).
        assert_eq!(o.status.code(), Some(1), "{flags:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(why), "{flags:?}: {}", stderr(&o));
        assert!(!dir.join("out").exists(), "{flags:?}: nothing runs");
    }
}

#[test]
fn without_a_terminal_progress_comes_as_plain_lines() {
    let dir = scratch("progress");
    // stderr is a pipe here: plain lines, one a second, for a 3 s Server run.
    let o = bin()
        .args(["--sut", "null", "--scenario", "Server", "--no-trace"])
        .args(["--set", "min_duration=3000", "--set", "min_query_count=1"])
        .args(["--set", "target_qps=2000", "--progress-interval", "1"])
        .arg("--output-dir")
        .arg(dir.join("out"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("loadgen-node: performance "))
        .collect();
    assert!(lines.len() >= 2, "expected progress lines:\n{err}");
    assert!(!err.contains('\r') && !err.contains('\x1b'), "{err:?}");
    let last = lines[lines.len() - 1];
    assert!(
        last.contains(" completed ") && last.contains("/s"),
        "{last}"
    );
    assert!(
        last.contains("p99 ") && last.contains("bound 15.000 ms"),
        "{last}"
    );
    assert!(last.contains("early stopping: "), "{last}");
    // The MLPerf logs see none of it.
    let detail = std::fs::read_to_string(dir.join("out/mlperf_log_detail.txt")).unwrap();
    assert!(!detail.contains("early stopping: "));

    // 0 turns it off.
    let o = bin()
        .args(["--sut", "null", "--scenario", "Server", "--no-trace"])
        .args(["--set", "min_duration=1500", "--set", "min_query_count=1"])
        .args(["--set", "target_qps=2000", "--progress-interval", "0"])
        .arg("--output-dir")
        .arg(dir.join("out0"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("loadgen-node: performance "));
}
