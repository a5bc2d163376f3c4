//! `loadgen-node audit`: the compliance audits run against synthetic
//! sut-nodes, verified by our implementation of the published rules, on runs
//! that pass and on runs made to fail. With MLPERF_INFERENCE_DIR set to a
//! checkout of mlcommons/inference (and python3 with numpy), the official
//! verification scripts must reach the same verdicts, line for line.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tests::{loadgen, scratch, text, SutNode};

/// Shortened SingleStream runs of about 5 s. A SingleStream score is a
/// latency percentile: with 50 ms per sample a busy host's scheduling jitter
/// stays well inside the audits' 10 %, where a throughput would not.
const SHORT: &[&str] = &[
    "--model",
    "resnet50",
    "--scenario",
    "SingleStream",
    "--sample-bytes",
    "64",
    "--total-sample-count",
    "64",
    "--set",
    "min_duration=1000",
    "--set",
    "min_query_count=100",
    "--set",
    "target_latency=55",
];

fn audit(test: &str, node: &SutNode, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["audit", test, "--sut", &node.addr];
    args.extend(extra);
    let extras = format!("{}-extras", out.display());
    let out = out.display().to_string();
    args.extend(["--output-dir", &out, "--extras-dir", &extras]);
    loadgen(&args)
}

/// The checkout of mlcommons/inference, when the official scripts are to run.
fn official() -> Option<PathBuf> {
    tests::inference_checkout("the official scripts' verdicts")
}

/// Runs an official script (from the compliance folder) in `cwd`; its output.
fn script(root: &Path, cwd: &Path, script: &str, args: &[&str]) -> String {
    let o = Command::new("python3")
        .arg(root.join("compliance").join(script))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("python3 runs");
    format!("{}{}", text(&o.stdout), text(&o.stderr))
}

fn lines_from(out: &str, first: &str, count: usize) -> Vec<String> {
    out.lines()
        .skip_while(|l| !l.starts_with(first))
        .take(count)
        .map(String::from)
        .collect()
}

/// Whether our verification of `test`'s performance passed.
fn performance_passed(dir: &Path, test: &str) -> bool {
    read(&dir.join(test).join("verify_performance.txt"))
        .lines()
        .any(|l| l == "TEST PASS")
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Official TEST01 accuracy and performance verdicts on `dir`'s logs, and
/// TEST04's; each the script's whole output.
fn official_test01(root: &Path, dir: &Path) -> (String, String) {
    let s = |p: &str| dir.join(p).display().to_string();
    let acc = script(
        root,
        dir,
        "TEST01/verify_accuracy.py",
        &[
            "-r",
            &s("accuracy/mlperf_log_accuracy.json"),
            "-t",
            &s("TEST01/accuracy/mlperf_log_accuracy.json"),
        ],
    );
    let perf = script(
        root,
        dir,
        "TEST01/verify_performance.py",
        &[
            "-r",
            &s("performance/run_1/mlperf_log_detail.txt"),
            "-t",
            &s("TEST01/performance/run_1/mlperf_log_detail.txt"),
        ],
    );
    (acc, perf)
}

fn official_test04(root: &Path, dir: &Path) -> String {
    let s = |p: &str| dir.join(p).display().to_string();
    script(
        root,
        dir,
        "TEST04/verify_performance.py",
        &[
            "-r",
            &s("performance/run_1/mlperf_log_summary.txt"),
            "-t",
            &s("TEST04/performance/run_1/mlperf_log_summary.txt"),
        ],
    )
}

#[test]
fn test01_and_test04_agree_with_the_official_scripts() {
    let node = SutNode::start("audit", &["--service-time", "fixed:50000"]);
    let fast = SutNode::start("audit-fast", &["--service-time", "fixed:10000"]);
    // The tree, and beside it (in the same scratch) the runs' own files.
    let scratch = scratch("audit-t01");
    let dir = scratch.join("tree");
    let common = SHORT.to_vec();

    // Passing: the reference runs are made, then the audits. The answers
    // match, always; the scores are two timed runs on a host that may be
    // busy, so their check is held to agree with the logs and, below, with
    // the official script (the tolerances themselves are unit-tested).
    let o = audit("TEST01", &node, &dir, &common);
    let ours = text(&o.stdout);
    let perf_ok = performance_passed(&dir, "TEST01");
    assert_eq!(
        o.status.code(),
        Some(if perf_ok { 0 } else { 4 }),
        "{ours}{}",
        text(&o.stderr)
    );
    let expected = format!(
        "Accuracy check pass: True\nPerformance check pass: {}\nTEST01 verification complete",
        if perf_ok { "True" } else { "False" }
    );
    assert!(ours.contains(&expected), "{ours}");
    for f in [
        "TEST01/verify_accuracy.txt",
        "TEST01/verify_performance.txt",
        "TEST01/accuracy/mlperf_log_accuracy.json",
        "TEST01/performance/run_1/mlperf_log_detail.txt",
        "accuracy/mlperf_log_accuracy.json",
        "performance/run_1/mlperf_log_summary.txt",
    ] {
        assert!(dir.join(f).is_file(), "{f} is missing");
    }
    // The audit's settings and each run's own files stay out of the tree.
    let extras = std::path::PathBuf::from(format!("{}-extras", dir.display()));
    assert!(extras.join("TEST01/audit.config").is_file());
    assert!(extras.join("TEST01/mlperf_net_breakdown.json").is_file());
    let refused = tests::files_the_checker_refuses_in_scenario(&dir);
    assert!(refused.is_empty(), "{refused:#?}");
    assert!(
        read(&dir.join("TEST01/performance/run_1/mlperf_log_detail.txt"))
            .contains("Found Audit Config file")
    );
    let reference = read(&dir.join("performance/run_1/mlperf_log_detail.txt"));
    let o = audit("TEST04", &node, &dir, &common);
    let t04_ok = performance_passed(&dir, "TEST04");
    assert_eq!(
        o.status.code(),
        Some(if t04_ok { 0 } else { 4 }),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    assert_eq!(
        reference,
        read(&dir.join("performance/run_1/mlperf_log_detail.txt")),
        "the reference run was reused"
    );
    if let Some(root) = official() {
        let (acc, perf) = official_test01(&root, &dir);
        assert_eq!(
            lines_from(&acc, "num_acc_log_entries", 8),
            lines_from(&ours, "num_acc_log_entries", 8),
            "{acc}"
        );
        assert!(acc.contains("TEST PASS"), "{acc}");
        assert_eq!(perf.contains("TEST PASS"), perf_ok, "{perf}");
        assert_eq!(
            lines_from(&perf, "Reference score", 3),
            lines_from(&ours, "Reference score", 3),
            "{perf}"
        );
        let t04 = official_test04(&root, &dir);
        assert_eq!(t04.contains("TEST PASS"), t04_ok, "{t04}");
        assert_eq!(
            read(&dir.join("TEST04/verify_performance.txt")).trim(),
            lines_from(&t04, "Verifying", 4).join("\n")
        );
    }

    // Failing TEST04: the audit run on a node 5 times faster (as a cache
    // would make it).
    let o = audit("TEST04", &fast, &dir, &common);
    let ours = text(&o.stdout);
    assert_eq!(o.status.code(), Some(4), "{ours}{}", text(&o.stderr));
    assert!(
        ours.contains("TEST FAIL: Test score invalid\nPerformance check pass: False"),
        "{ours}"
    );
    if let Some(root) = official() {
        let t04 = official_test04(&root, &dir);
        assert!(t04.contains("TEST FAIL: Test score invalid"), "{t04}");
    }

    // Failing TEST01: the audit run's answers differ (other inputs).
    let mut other = common.clone();
    other[5] = "128";
    let o = audit("TEST01", &node, &dir, &other);
    let ours = text(&o.stdout);
    assert_eq!(o.status.code(), Some(4), "{ours}{}", text(&o.stderr));
    assert!(ours.contains("Accuracy check pass: False"), "{ours}");
    if let Some(root) = official() {
        let (acc, _) = official_test01(&root, &dir);
        assert!(acc.contains("TEST FAIL"), "{acc}");
        assert_eq!(
            lines_from(&acc, "num_acc_log_entries", 8),
            lines_from(&ours, "num_acc_log_entries", 8),
            "{acc}"
        );
    }

    // An audit the benchmark does not require: refused, nothing touched.
    let o = audit("TEST06", &node, &dir, &common);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "TEST06 is not an audit that resnet50 (v6.1 rules) requires (it requires: TEST01, TEST04)"
        ),
        "{err}"
    );
    assert!(!dir.join("TEST06").exists());
    assert_eq!(
        reference,
        read(&dir.join("performance/run_1/mlperf_log_detail.txt"))
    );

    // Verification alone, on the logs there: the failed TEST01 stays failed.
    let mut verify = vec!["--verify-only"];
    verify.extend(&common);
    let o = audit("TEST01", &node, &dir, &verify);
    assert_eq!(o.status.code(), Some(4));
}

#[test]
fn test06_agrees_with_the_official_script() {
    // 64-byte answers are 16 int32 tokens: reporting 16 passes, 8 fails.
    let good = SutNode::start(
        "llm16",
        &[
            "--service-time",
            "fixed:500",
            "--output-size",
            "64",
            "--llm-tokens",
            "16",
        ],
    );
    let bad = SutNode::start(
        "llm8",
        &[
            "--service-time",
            "fixed:500",
            "--output-size",
            "64",
            "--llm-tokens",
            "8",
        ],
    );
    let flags = [
        "--model",
        "llama2-70b",
        "--scenario",
        "SingleStream",
        "--sample-bytes",
        "64",
        "--total-sample-count",
        "200",
    ];
    for (node, passes) in [(&good, true), (&bad, false)] {
        let scratch = scratch(&format!("audit-t06-{}", node.name));
        let dir = scratch.join("tree");
        let o = audit("TEST06", node, &dir, &flags);
        let ours = text(&o.stdout);
        assert_eq!(
            o.status.code(),
            Some(if passes { 0 } else { 4 }),
            "{ours}{}",
            text(&o.stderr)
        );
        let expected = match passes {
            true => "First token check pass: True\nEOS check pass: True\nSample length check pass: True\nTEST06 verification complete",
            false => "First token check pass: True\nEOS check pass: True\nSample length check pass: False\nTEST06 verification failed",
        };
        assert!(ours.contains(expected), "{ours}");
        assert_eq!(
            read(&dir.join("TEST06/verify_accuracy.txt")).trim(),
            expected
        );
        if let Some(root) = official() {
            let acc = dir.join("TEST06/accuracy").display().to_string();
            let out = dir.join("official").display().to_string();
            let off = script(
                &root,
                &dir,
                "TEST06/run_verification.py",
                &["-c", &acc, "-o", &out, "-s", "SingleStream"],
            );
            assert_eq!(
                lines_from(&off, "First token", 4).join("\n"),
                expected,
                "{off}"
            );
        }
    }
}

/// TEST07 without its accuracy script or its compliance data set is refused
/// before anything runs, naming the flag.
#[test]
fn test07_is_refused_without_its_script_or_data_set() {
    let closed = tests::ClosedPort::new();
    let scratch = scratch("audit-t07");
    let tree = scratch.join("tree");
    let out = tree.display().to_string();
    let sut = closed.addr();
    let base = [
        "audit",
        "TEST07",
        "--sut",
        &sut,
        "--model",
        "gpt-oss-120b",
        "--scenario",
        "Offline",
        "--output-dir",
        &out,
    ];
    let o = loadgen(&base);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("--accuracy-command"), "{err}");
    let mut args = base.to_vec();
    args.extend(["--accuracy-command", "true"]);
    let o = loadgen(&args);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--compliance-dataset DIR") && err.contains("990 samples"),
        "{err}"
    );
    let missing = scratch.join("none").display().to_string();
    args.extend(["--compliance-dataset", &missing]);
    let err = text(&loadgen(&args).stderr);
    assert!(err.contains("not a directory"), "{err}");
    assert!(!tree.exists(), "nothing was run");
}

fn f32_hex(v: &[f32]) -> String {
    v.iter()
        .flat_map(|x| x.to_le_bytes())
        .map(|b| format!("{b:02X}"))
        .collect()
}

/// TEST08's verification of DLRMv3 logs (`--verify-only`): requests matched
/// by (ts_idx, query_idx), their normalized entropy compared; with
/// MLPERF_INFERENCE_DIR set, the release's script prints the same lines.
#[test]
fn test08_agrees_with_the_official_script() {
    let closed = tests::ClosedPort::new();
    let scratch = scratch("audit-t08");
    for (case, perf_predictions, passes) in [
        ("same", [0.9f32, 0.2, 0.6], true),
        ("changed", [0.5f32, 0.5, 0.5], false),
    ] {
        let dir = scratch.join(case);
        let acc = |ts: f32, q: f32, p: &[f32]| {
            let mut v = vec![ts, q];
            v.extend(p);
            v.extend(p.iter().map(|x| if *x > 0.5 { 1.0 } else { 0.0 }));
            v.extend(p.iter().map(|_| 1.0));
            v.push(p.len() as f32);
            f32_hex(&v)
        };
        std::fs::create_dir_all(dir.join("accuracy")).unwrap();
        std::fs::create_dir_all(dir.join("TEST08/accuracy")).unwrap();
        std::fs::write(
            dir.join("accuracy/mlperf_log_accuracy.json"),
            format!(
                "[{{\"seq_id\":0,\"qsl_idx\":0,\"data\":\"{}\"}},{{\"seq_id\":1,\"qsl_idx\":1,\"data\":\"{}\"}}]",
                acc(1.0, 7.0, &[0.9, 0.2, 0.6]),
                acc(2.0, 8.0, &[0.3, 0.7, 0.1])
            ),
        )
        .unwrap();
        let mut perf = vec![1.0f32, 7.0];
        perf.extend(perf_predictions);
        std::fs::write(
            dir.join("TEST08/accuracy/mlperf_log_accuracy.json"),
            format!(
                "[{{\"seq_id\":4,\"qsl_idx\":0,\"data\":\"{}\"}}]",
                f32_hex(&perf)
            ),
        )
        .unwrap();
        let out = dir.display().to_string();
        let sut = closed.addr();
        let o = loadgen(&[
            "audit",
            "TEST08",
            "--verify-only",
            "--sut",
            &sut,
            "--model",
            "dlrm-v3",
            "--scenario",
            "Offline",
            "--output-dir",
            &out,
        ]);
        let ours = text(&o.stdout);
        assert_eq!(
            o.status.code(),
            Some(if passes { 0 } else { 4 }),
            "{ours}{}",
            text(&o.stderr)
        );
        assert_eq!(read(&dir.join("TEST08/verify_accuracy.txt")), ours);
        assert!(
            ours.contains(if passes {
                "\nTEST PASS\n"
            } else {
                "\nTEST FAIL\n"
            }),
            "{ours}"
        );
        if let Some(root) = official() {
            let s = |p: &str| dir.join(p).display().to_string();
            let off = script(
                &root,
                &dir,
                "TEST08/run_verification.py",
                &[
                    "-r",
                    &s("accuracy/mlperf_log_accuracy.json"),
                    "-t",
                    &s("TEST08/accuracy/mlperf_log_accuracy.json"),
                ],
            );
            assert_eq!(off, ours);
        }
    }
}
