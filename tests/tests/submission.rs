//! `loadgen-node submission plan.toml` against a synthetic sut-node: a
//! ResNet50 tree of all four scenarios with shortened runs, laid out as the
//! submission checker reads it, with our audit verifications; resumed
//! without redoing finished runs; bad plans and dead nodes refused with the
//! tree untouched. With MLPERF_INFERENCE_DIR set, the official checker runs
//! on the tree and its verdict is shown (shortened runs cannot pass it).
//! gpt-oss-120b's TEST07 and TEST09 and dlrm-v3's TEST08 run in trees of
//! their own, with both engines.
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
        err.contains("plan.toml:8: benchmark 1: unknown benchmark `resnet5O`"),
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
        err.contains("accelerators_per_node = 8") && err.contains("expected a string"),
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

/// The checker's complaints of `checker.log`: its ERROR lines.
fn checker_errors(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("checker.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("ERROR"))
        .map(String::from)
        .collect()
}

/// gpt-oss-120b: an Offline tree whose TEST07 (on a compliance data set of
/// 990 samples, scored by check-synthetic) and TEST09 (the answers' mean
/// length, 1,278 tokens, within the release's bounds) pass, each
/// verification written where the checker reads it; the runs' own files
/// are written without a warning. With MLPERF_INFERENCE_DIR set, the
/// release's verification scripts write the same files, and the checker's
/// complaints are only the shortened runs' and the synthetic accuracy's.
#[test]
fn a_gpt_oss_120b_tree_passes_test07_and_test09() {
    gpt_oss_tree("native");
}

/// The same tree with the official LoadGen, each run a process of its own.
#[cfg(feature = "official-loadgen")]
#[test]
fn a_gpt_oss_120b_tree_passes_test07_and_test09_with_the_official_engine() {
    gpt_oss_tree("official");
}

fn gpt_oss_tree(engine: &str) {
    let node = SutNode::start(
        "gpt-oss",
        &[
            "--benchmark",
            "gpt-oss-120b",
            "--service-time",
            "fixed:1000",
            "--max-batch-size",
            "64",
        ],
    );
    let dir = scratch(&format!("submission-gpt-oss-{engine}"));
    let compliance = dir.join("gpqa_compliance");
    tests::npy_dataset(&compliance, 990);
    let lg = tests::binary("loadgen-node").display().to_string();
    let check = format!(
        "{lg} check-synthetic --model gpt-oss-120b --sample-bytes 64 --total-sample-count 256 \
         --accuracy-log {{accuracy_log}}"
    );
    let check07 = format!(
        "{lg} check-synthetic --model gpt-oss-120b --dataset {} --accuracy-log {{accuracy_log}}",
        compliance.display()
    );
    let body = |with_test07: bool| {
        let test07 = match with_test07 {
            true => format!(
                "compliance_dataset = \"gpqa_compliance\"\ncompliance_accuracy_command = \"{check07}\"\n\
                 score_pattern = 'accuracy=([\\d.]+)%'\n"
            ),
            false => String::new(),
        };
        format!(
            r#"
system = "synthetic_sut"
submitter = "MLPerfNet"
sut = "{}"
engine = "{engine}"
run_flags = ["--sample-bytes", "64", "--total-sample-count", "256"]

[system_description]
status = "available"

[[benchmark]]
model = "gpt-oss-120b"
scenarios = ["Offline"]
accuracy_command = "{check}"
{test07}
[benchmark.settings]
min_duration = 1000
[benchmark.settings.Offline]
target_qps = 20000
"#,
            node.addr
        )
    };
    let plan_path = dir.join("plan.toml");
    let plan_arg = plan_path.display().to_string();

    // Without the compliance data set the plan is refused, naming the key,
    // before anything runs.
    std::fs::write(&plan_path, body(false)).unwrap();
    let o = loadgen(&["submission", &plan_arg, "--no-preflight"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("compliance_dataset"), "{err}");
    assert!(!dir.join("submission").exists());

    std::fs::write(&plan_path, body(true)).unwrap();
    let mut args = vec!["submission", &plan_arg, "--no-preflight"];
    let inference = tests::inference_checkout("the official scripts and checker");
    let inference_arg = inference.as_ref().map(|p| p.display().to_string());
    if let Some(i) = &inference_arg {
        args.extend(["--inference", i]);
    }
    let o = loadgen(&args);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    let row = out
        .lines()
        .find(|l| l.starts_with("gpt-oss-120b Offline "))
        .unwrap_or_else(|| panic!("no row: {out}{err}"))
        .to_string();
    assert!(row.contains("TEST07: PASS"), "{row}\n{out}{err}");
    assert!(row.contains("TEST09: PASS"), "{row}\n{out}{err}");
    assert!(!err.contains("warning: cannot write"), "{err}");
    let d = dir.join("submission/network/MLPerfNet/results/synthetic_sut/gpt-oss-120b/Offline");
    for f in [
        "TEST07/verify_accuracy.txt",
        "TEST07/accuracy/mlperf_log_accuracy.json",
        "TEST07/performance/run_1/mlperf_log_summary.txt",
        "TEST07/performance/run_1/mlperf_log_detail.txt",
        "TEST09/verify_output_len.txt",
        "TEST09/accuracy/mlperf_log_accuracy.json",
        "TEST09/performance/run_1/mlperf_log_detail.txt",
    ] {
        assert!(d.join(f).is_file(), "{f} is missing");
    }
    let verify07 = std::fs::read_to_string(d.join("TEST07/verify_accuracy.txt")).unwrap();
    assert!(verify07.contains("Accuracy score: 100.0\n"), "{verify07}");
    assert!(
        verify07.contains("accuracy=100.000%, good=990, total=990"),
        "{verify07}"
    );
    let verify09 = std::fs::read_to_string(d.join("TEST09/verify_output_len.txt")).unwrap();
    assert!(
        verify09.contains("Mean output tokens: 1278.00\n"),
        "{verify09}"
    );
    // Every run's own files, beside the plan.
    let extras = dir.join("run_extras/synthetic_sut/gpt-oss-120b/Offline");
    for run in ["accuracy", "performance", "TEST07", "TEST09"] {
        let f = extras.join(run).join("mlperf_net_breakdown.json");
        assert!(f.is_file(), "{} is missing", f.display());
    }

    let Some(root) = inference else {
        return;
    };
    // The release's scripts, on the same logs, write the same files.
    let official = |script: &str, extra: &[&str]| {
        let cwd = dir.join(format!("official-{script}"));
        std::fs::create_dir_all(&cwd).unwrap();
        let o = std::process::Command::new("python3")
            .arg(
                root.join("compliance")
                    .join(script)
                    .join("run_verification.py"),
            )
            .args(extra)
            .current_dir(&cwd)
            .output()
            .expect("python3 runs");
        assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
        cwd
    };
    let acc07 = d.join("TEST07/accuracy").display().to_string();
    let config07 = extras.join("TEST07/audit.config").display().to_string();
    let out_dir = dir.join("official-out").display().to_string();
    let cwd = official(
        "TEST07",
        &[
            "-c",
            &acc07,
            "-o",
            &out_dir,
            "--accuracy-script",
            &check07,
            "--audit-config",
            &config07,
            "--score-pattern",
            r"accuracy=([\d.]+)%",
        ],
    );
    assert_eq!(
        std::fs::read_to_string(cwd.join("verify_accuracy.txt")).unwrap(),
        verify07
    );
    let acc09 = d.join("TEST09/accuracy").display().to_string();
    let config09 = extras.join("TEST09/audit.config").display().to_string();
    let cwd = official(
        "TEST09",
        &["-c", &acc09, "-o", &out_dir, "--audit-config", &config09],
    );
    assert_eq!(
        std::fs::read_to_string(cwd.join("verify_output_len.txt")).unwrap(),
        verify09
    );
    // The checker: nothing of the audits among its complaints.
    assert!(dir.join("checker.log").is_file(), "{out}");
    let errors = checker_errors(&dir);
    eprintln!("the checker's complaints: {errors:#?}");
    assert!(
        errors
            .iter()
            .all(|l| !l.contains("TEST0") && !l.contains("ompliance")),
        "{errors:#?}"
    );
}

/// dlrm-v3 with 64-byte samples: TEST08 runs after the accuracy run and is
/// verified. Each session tells the node its run's mode, so the synthetic
/// backend answers the accuracy run in TEST08's accuracy layout and the
/// audit's performance run in its performance layout, with the same
/// predictions: TEST08 passes, its verification written where the checker
/// reads it. With MLPERF_INFERENCE_DIR set, the release's script prints the
/// same lines on the same logs.
#[test]
fn a_dlrm_v3_tree_passes_test08() {
    dlrm_tree("native");
}

/// The same with the official LoadGen.
#[cfg(feature = "official-loadgen")]
#[test]
fn a_dlrm_v3_tree_passes_test08_with_the_official_engine() {
    dlrm_tree("official");
}

fn dlrm_tree(engine: &str) {
    let node = SutNode::start(
        "dlrm",
        &[
            "--benchmark",
            "dlrm-v3",
            "--service-time",
            "fixed:1000",
            "--max-batch-size",
            "64",
        ],
    );
    let dir = scratch(&format!("submission-dlrm-{engine}"));
    let plan_path = dir.join("plan.toml");
    std::fs::write(
        &plan_path,
        format!(
            r#"
system = "synthetic_sut"
submitter = "MLPerfNet"
sut = "{}"
engine = "{engine}"
run_flags = ["--sample-bytes", "64", "--total-sample-count", "256"]

[[benchmark]]
model = "dlrm-v3"
scenarios = ["Offline"]
[benchmark.settings]
min_duration = 1000
[benchmark.settings.Offline]
target_qps = 20000
"#,
            node.addr
        ),
    )
    .unwrap();
    let plan_arg = plan_path.display().to_string();
    let mut args = vec!["submission", &plan_arg, "--no-preflight"];
    let inference = tests::inference_checkout("the official TEST08 script");
    let inference_arg = inference.as_ref().map(|p| p.display().to_string());
    if let Some(i) = &inference_arg {
        args.extend(["--inference", i]);
    }
    let o = loadgen(&args);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    let row = out
        .lines()
        .find(|l| l.starts_with("dlrm-v3 Offline "))
        .unwrap_or_else(|| panic!("no row: {out}{err}"))
        .to_string();
    assert!(row.contains("TEST08: PASS"), "{row}\n{out}{err}");
    assert!(!err.contains("warning: cannot write"), "{err}");
    let d = dir.join("submission/network/MLPerfNet/results/synthetic_sut/dlrm-v3/Offline");
    assert!(d.join("TEST08/accuracy/mlperf_log_accuracy.json").is_file());
    assert!(d
        .join("TEST08/performance/run_1/mlperf_log_detail.txt")
        .is_file());
    let verify = std::fs::read_to_string(d.join("TEST08/verify_accuracy.txt")).unwrap();
    assert!(verify.contains("\nnum_ne_mismatch = 0\n"), "{verify}");
    assert!(verify.contains("\nnum_unmatched = 0\n"), "{verify}");
    assert!(verify.contains("\nTEST PASS\n"), "{verify}");
    // The accuracy run's answers are the synthetic ones of their samples,
    // in the accuracy layout; the audit's, in the performance layout.
    let lg = tests::binary("loadgen-node");
    for log in [
        d.join("accuracy/mlperf_log_accuracy.json"),
        d.join("TEST08/accuracy/mlperf_log_accuracy.json"),
    ] {
        let o = std::process::Command::new(&lg)
            .args([
                "check-synthetic",
                "--model",
                "dlrm-v3",
                "--sample-bytes",
                "64",
            ])
            .args(["--total-sample-count", "256", "--accuracy-log"])
            .arg(&log)
            .output()
            .unwrap();
        let said = text(&o.stdout);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}: {said}{}",
            log.display(),
            text(&o.stderr)
        );
        assert!(said.starts_with("accuracy=100.000%"), "{said}");
    }

    let Some(root) = inference else {
        return;
    };
    // The release's script, on the same logs, prints the same lines.
    let cwd = dir.join("official-TEST08");
    std::fs::create_dir_all(&cwd).unwrap();
    let o = std::process::Command::new("python3")
        .arg(root.join("compliance/TEST08/run_verification.py"))
        .arg("-r")
        .arg(d.join("accuracy/mlperf_log_accuracy.json"))
        .arg("-t")
        .arg(d.join("TEST08/accuracy/mlperf_log_accuracy.json"))
        .current_dir(&cwd)
        .output()
        .expect("python3 runs");
    let official = format!("{}{}", text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{official}");
    assert_eq!(official, verify);
}
