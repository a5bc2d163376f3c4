//! `loadgen-node submission plan.toml` against a synthetic sut-node: a
//! ResNet50 tree of all four scenarios with shortened runs, laid out as the
//! submission checker reads it, with our audit verifications; resumed
//! without redoing finished runs; bad plans and dead nodes refused with the
//! tree untouched. With MLPERF_INFERENCE_DIR set, the official checker runs
//! on the tree and its verdict is shown (shortened runs cannot pass it).

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
run_flags = ["--sample-bytes", "64", "--total-sample-count", "1024"]

[[benchmark]]
model = "resnet50"
scenarios = ["Offline", "Server", "SingleStream", "MultiStream"]
{extra}
[benchmark.settings]
min_duration = 1000
[benchmark.settings.Offline]
target_qps = 2000
[benchmark.settings.Server]
target_qps = 200
min_query_count = 200
[benchmark.settings.SingleStream]
target_latency = 1
[benchmark.settings.MultiStream]
target_latency = 4
min_query_count = 700
"#
    )
}

fn mtimes(results: &Path) -> Vec<SystemTime> {
    SCENARIOS
        .iter()
        .flat_map(|s| {
            [
                "performance/run_1",
                "accuracy",
                "TEST01/performance/run_1",
                "TEST04/performance/run_1",
            ]
            .map(|d| results.join(s).join(d).join("mlperf_log_detail.txt"))
        })
        .map(|p| {
            std::fs::metadata(&p)
                .and_then(|m| m.modified())
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        })
        .collect()
}

#[test]
fn a_resnet50_tree_of_four_scenarios_resumes_and_refuses_bad_input() {
    let node = SutNode::start("sub", &["--service-time", "fixed:400"]);
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
        assert!(out.contains(&format!("resnet {s}")), "{out}");
    }
    assert!(
        out.contains("resnet Offline               MISSING  accuracy: accuracy.txt missing, performance: VALID, TEST01: PASS, TEST04: PASS"),
        "{out}"
    );
    let system: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("systems/synthetic_sut.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(system["is_network"], "True");
    assert_eq!(system["system_name"], "synthetic_sut");
    assert!(root.join("network.json").is_file() && root.join("src/README.md").is_file());

    // Resumed with an accuracy script: nothing is run again.
    let before = mtimes(&results);
    std::fs::write(
        &plan_path,
        plan(&node.addr, "accuracy_command = \"echo accuracy=synthetic\""),
    )
    .unwrap();
    let o = loadgen(&["submission", &plan_arg, "--no-preflight"]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(
        !err.contains(" run into "),
        "a finished run was redone: {err}"
    );
    assert_eq!(before, mtimes(&results));
    assert!(out.contains("resnet Offline               VALID "), "{out}");
    assert_eq!(
        std::fs::read_to_string(results.join("Offline/accuracy/accuracy.txt")).unwrap(),
        "accuracy=synthetic\n"
    );

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
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    std::fs::write(&plan_path, plan(&format!("127.0.0.1:{port}"), "")).unwrap();
    let o = loadgen(&["submission", &plan_arg]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot connect"), "{err}");
    assert_eq!(before, mtimes(&results));

    // The official checker's verdict, shown.
    if let Some(inference) = std::env::var_os("MLPERF_INFERENCE_DIR") {
        std::fs::write(&plan_path, plan(&node.addr, "")).unwrap();
        let inference = inference.to_string_lossy().into_owned();
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
        assert!(dir.join("submission/checker.log").is_file());
    } else {
        eprintln!("MLPERF_INFERENCE_DIR is not set: skipping the official submission checker");
    }
}
