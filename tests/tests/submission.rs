//! `loadgen-node submission plan.toml` against a synthetic sut-node: a
//! ResNet50 tree of all four scenarios with shortened runs, laid out as the
//! submission checker reads it, with our audit verifications; resumed
//! without redoing finished runs; bad plans and dead nodes refused with the
//! tree untouched. With MLPERF_INFERENCE_DIR set, the official checker runs
//! on the tree and its verdict is shown (shortened runs cannot pass it).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::path::Path;
use std::time::SystemTime;

use tests::{loadgen, scratch, text, SutNode};

const SCENARIOS: [&str; 4] = ["Offline", "Server", "SingleStream", "MultiStream"];

fn plan(sut: &str, extra: &str) -> String {
    format!(
        r#"
system = "synthetic_sut"
submitter = "MLPerfNet"
sut = "{sut}"
run_flags = ["--sample-bytes", "64", "--total-sample-count", "256"]

[[benchmark]]
model = "resnet50"
scenarios = ["Offline", "Server", "SingleStream", "MultiStream"]
{extra}
[benchmark.settings]
min_duration = 1000
[benchmark.settings.Offline]
target_qps = 5000
[benchmark.settings.Server]
target_qps = 200
min_query_count = 200
[benchmark.settings.SingleStream]
target_latency = 6
min_query_count = 300
[benchmark.settings.MultiStream]
target_latency = 12
min_query_count = 700
"#
    )
}

/// The table's row of a scenario.
fn table_row(out: &str, scenario: &str) -> String {
    let head = format!("resnet {scenario} ");
    out.lines()
        .find(|l| l.starts_with(&head))
        .unwrap_or_else(|| panic!("no row for {scenario}: {out}"))
        .to_string()
}

/// A row says what the scenario's logs and verification files say, and
/// VALID exactly when all of it passed.
fn check_row(dir: &Path, row: &str) {
    let summary =
        std::fs::read_to_string(dir.join("performance/run_1/mlperf_log_summary.txt")).unwrap();
    let perf_valid = summary.contains("Result is : VALID");
    let perf = if perf_valid {
        "performance: VALID"
    } else {
        "performance: INVALID"
    };
    assert!(row.contains(perf), "{row}\n{summary}");
    let pass = |f: &str| {
        std::fs::read_to_string(dir.join(f))
            .unwrap()
            .lines()
            .any(|l| l == "TEST PASS")
    };
    let t01 = pass("TEST01/verify_accuracy.txt") && pass("TEST01/verify_performance.txt");
    let t04 = pass("TEST04/verify_performance.txt");
    assert!(
        row.contains(if t01 { "TEST01: PASS" } else { "TEST01: FAIL" }),
        "{row}"
    );
    assert!(
        row.contains(if t04 { "TEST04: PASS" } else { "TEST04: FAIL" }),
        "{row}"
    );
    let accuracy = row.contains("accuracy: done");
    assert_eq!(
        row.contains(" VALID "),
        perf_valid && t01 && t04 && accuracy,
        "{row}"
    );
}

/// Modification times of the finished runs: the reference runs, and the
/// audits that passed (a failed audit is run again on resume).
fn unchanged(before: &[(String, SystemTime)]) {
    for (p, t) in before {
        let now = std::fs::metadata(p).and_then(|m| m.modified()).ok();
        assert_eq!(now, Some(*t), "{p} was written again");
    }
}

fn mtimes(results: &Path) -> Vec<(String, SystemTime)> {
    let mut runs = Vec::new();
    for s in SCENARIOS {
        let d = results.join(s);
        runs.extend(["performance/run_1", "accuracy"].map(|r| d.join(r)));
        for (test, verdict) in [
            ("TEST01", "verify_performance.txt"),
            ("TEST04", "verify_performance.txt"),
        ] {
            let passed = std::fs::read_to_string(d.join(test).join(verdict))
                .is_ok_and(|t| t.lines().any(|l| l == "TEST PASS"));
            if passed {
                runs.push(d.join(test).join("performance/run_1"));
            }
        }
    }
    runs.iter()
        .map(|r| {
            let p = r.join("mlperf_log_detail.txt");
            let t = std::fs::metadata(&p)
                .and_then(|m| m.modified())
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.display().to_string(), t)
        })
        .collect()
}

#[test]
fn a_resnet50_tree_of_four_scenarios_resumes_and_refuses_bad_input() {
    // 5 ms a batch of up to 32 samples. Whether a shortened run is VALID
    // and within the audits' 10 % depends on a busy host's jitter: the table
    // is checked against the logs' and verification files' own verdicts
    // (tests/tests/audit.rs checks passing and failing audits).
    let node = SutNode::start(
        "sub",
        &["--service-time", "fixed:5000", "--max-batch-size", "32"],
    );
    let dir = scratch("submission");
    let plan_path = dir.join("plan.toml");
    let plan_arg = plan_path.display().to_string();
    std::fs::write(&plan_path, plan(&node.addr, "")).unwrap();

    let o = loadgen(&["submission", &plan_arg]);
    let out = text(&o.stdout);
    // No accuracy script in the plan: accuracy.txt is missing everywhere.
    assert_eq!(o.status.code(), Some(6), "{out}{}", text(&o.stderr));
    let root = dir.join("submission/network/MLPerfNet");
    let results = root.join("results/synthetic_sut/resnet");
    for s in SCENARIOS {
        let d = results.join(s);
        for f in [
            "performance/run_1/mlperf_log_summary.txt",
            "performance/run_1/mlperf_log_detail.txt",
            "accuracy/mlperf_log_accuracy.json",
            "accuracy/mlperf_log_detail.txt",
            "TEST01/verify_accuracy.txt",
            "TEST01/verify_performance.txt",
            "TEST01/accuracy/mlperf_log_accuracy.json",
            "TEST01/performance/run_1/mlperf_log_detail.txt",
            "TEST04/verify_performance.txt",
            "TEST04/performance/run_1/mlperf_log_summary.txt",
            "measurements.json",
            "user.conf",
            "README.md",
        ] {
            assert!(d.join(f).is_file(), "{s}/{f} is missing");
        }
        assert!(
            !d.join("accuracy/mlperf_log_trace.json").exists(),
            "no empty trace files"
        );
        // An audit's run directory holds only the MLPerf logs; its latency
        // breakdown is kept beside the plan.
        for t in ["TEST01", "TEST04"] {
            assert!(
                !d.join(t)
                    .join("performance/run_1/mlperf_net_breakdown.json")
                    .exists(),
                "{s}/{t}"
            );
            let kept = dir.join(format!("run_extras/synthetic_sut/resnet/{s}/{t}"));
            assert!(kept.join("mlperf_net_breakdown.json").is_file(), "{s}/{t}");
        }
        assert!(out.contains(&format!("resnet {s}")), "{out}");
    }
    for s in SCENARIOS {
        // Same answers in the audit and the accuracy run, always.
        let acc =
            std::fs::read_to_string(results.join(s).join("TEST01/verify_accuracy.txt")).unwrap();
        assert!(acc.contains("\nTEST PASS\n"), "{s}: {acc}");
        let row = table_row(&out, s);
        assert!(row.contains("accuracy: accuracy.txt missing"), "{row}");
        assert!(
            row.starts_with(&format!("resnet {s}")) && row.contains(" MISSING "),
            "{row}"
        );
        check_row(&results.join(s), &row);
    }
    let refused = tests::files_the_checker_refuses(&root.join("results"));
    assert!(refused.is_empty(), "{refused:#?}");
    let system: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("systems/synthetic_sut.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(system["is_network"], "True");
    assert_eq!(system["system_name"], "synthetic_sut");
    assert!(dir.join("network.json").is_file() && root.join("src/README.md").is_file());

    // Resumed with an accuracy script (the synthetic nodes' own check):
    // no finished run is made again.
    let before = mtimes(&results);
    let check = format!(
        "accuracy_command = \"{} check-synthetic --accuracy-log {{accuracy_log}} \
         --sample-bytes 64 --total-sample-count 256\"",
        tests::binary("loadgen-node").display()
    );
    let described = format!("{check}\n[system_description]\nstatus = \"rdi\"\n");
    std::fs::write(&plan_path, plan(&node.addr, &described)).unwrap();
    let o = loadgen(&["submission", &plan_arg, "--no-preflight"]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(
        !err.contains("accuracy run into") && !err.contains("performance run into"),
        "a finished run was redone: {err}"
    );
    unchanged(&before);
    let system: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("systems/synthetic_sut.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(system["status"], "rdi", "the plan's system_description");
    for s in SCENARIOS {
        let row = table_row(&out, s);
        assert!(row.contains("accuracy: done"), "{row}");
        check_row(&results.join(s), &row);
    }
    // Accuracy logs finished as the rules ask: the full log's hash in
    // accuracy.txt, the log in the tree cut to 4 KiB at each end, the full
    // one kept beside the plan. A third pass changes nothing.
    let acc = results.join("Offline/accuracy");
    let txt = std::fs::read_to_string(acc.join("accuracy.txt")).unwrap();
    assert!(txt.starts_with("accuracy=100.000%, good="), "{txt}");
    assert!(txt.contains("\n\nhash="), "{txt}");
    assert_eq!(txt.lines().filter(|l| l.starts_with("hash=")).count(), 1);
    let cut = std::fs::read(acc.join("mlperf_log_accuracy.json")).unwrap();
    let full = std::fs::read(
        dir.join("accuracy_logs_full/synthetic_sut/resnet/Offline/mlperf_log_accuracy.json"),
    )
    .unwrap();
    assert!(
        cut.len() <= 10 * 1024 && full.len() > 10 * 1024,
        "{} {}",
        cut.len(),
        full.len()
    );
    assert_eq!(cut[..4096], full[..4096]);
    let t01 =
        std::fs::read_to_string(results.join("Offline/TEST01/accuracy/accuracy.txt")).unwrap();
    assert!(t01.starts_with("accuracy=100.000%"), "{t01}");

    // The check fails an answer that is not its sample's.
    let tampered = dir.join("tampered.json");
    let log = String::from_utf8(full.clone()).unwrap();
    let at = log.find("\"data\" : \"").unwrap() + 10;
    let flipped = if &log[at..at + 1] == "0" { "1" } else { "0" };
    std::fs::write(
        &tampered,
        format!("{}{flipped}{}", &log[..at], &log[at + 1..]),
    )
    .unwrap();
    let o = loadgen(&[
        "check-synthetic",
        "--accuracy-log",
        tampered.to_str().unwrap(),
        "--sample-bytes",
        "64",
        "--total-sample-count",
        "256",
    ]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(
        out.starts_with("accuracy=") && !out.starts_with("accuracy=100.000%"),
        "{out}"
    );
    assert!(
        text(&o.stderr).contains("not that of this sample's data"),
        "{}",
        text(&o.stderr)
    );
    let o = loadgen(&["submission", &plan_arg, "--no-preflight"]);
    check_row(
        &results.join("Offline"),
        &table_row(&text(&o.stdout), "Offline"),
    );
    assert_eq!(
        txt,
        std::fs::read_to_string(acc.join("accuracy.txt")).unwrap()
    );
    unchanged(&before);

    // Bad input: a clear error, the tree untouched.
    std::fs::write(
        &plan_path,
        plan(&node.addr, "").replace("\"resnet50\"", "\"resnet5O\""),
    )
    .unwrap();
    let o = loadgen(&["submission", &plan_arg]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("plan.toml: benchmark 1: unknown benchmark `resnet5O`"),
        "{err}"
    );
    std::fs::write(
        &plan_path,
        plan(
            &node.addr,
            "[system_description]\naccelerators_per_node = 8\n",
        ),
    )
    .unwrap();
    let o = loadgen(&["submission", &plan_arg]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("system_description.accelerators_per_node must be a string"),
        "{err}"
    );
    let closed = tests::ClosedPort::new();
    std::fs::write(&plan_path, plan(&closed.addr(), "")).unwrap();
    let o = loadgen(&["submission", &plan_arg]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot connect"), "{err}");
    unchanged(&before);

    // The official checker's verdict, shown.
    if let Some(inference) = tests::inference_checkout("the official submission checker") {
        std::fs::write(&plan_path, plan(&node.addr, "")).unwrap();
        let inference = inference.display().to_string();
        let o = loadgen(&[
            "submission",
            &plan_arg,
            "--no-preflight",
            "--inference",
            &inference,
        ]);
        let out = text(&o.stdout);
        assert!(
            out.contains("official submission checker (v6.1):"),
            "{out}{}",
            text(&o.stderr)
        );
        assert!(out.contains("SUMMARY: submission"), "{out}");
        assert!(dir.join("checker.log").is_file());
    }
}
