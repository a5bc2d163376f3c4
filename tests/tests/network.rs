//! loadgen-node driving real sut-node processes over gRPC on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use tests::{detail_value, loadgen, scratch, sut_list, text, SutNode};

use tests::SMALL_DATA as DATA;

fn nodes(names: &[&str]) -> Vec<SutNode> {
    names.iter().map(|n| SutNode::start(n, &[])).collect()
}

/// Short runs of each scenario (settings as `--set` pairs).
fn scenarios() -> Vec<(&'static str, Vec<&'static str>)> {
    vec![
        (
            "SingleStream",
            // Expected latency 20 us, so enough queries are generated.
            vec![
                "min_duration=200",
                "min_query_count=100",
                "target_latency=0.02",
            ],
        ),
        (
            "MultiStream",
            // Expected latency 20 us, so enough queries are generated.
            vec![
                "min_duration=200",
                "min_query_count=100",
                "target_latency=0.02",
            ],
        ),
        (
            "Server",
            vec!["target_qps=3000", "min_duration=300", "min_query_count=100"],
        ),
        ("Offline", vec!["target_qps=20000", "min_duration=200"]),
    ]
}

fn run(
    sut: &str,
    scenario: &str,
    mode: &str,
    sets: &[&str],
    out: &std::path::Path,
    extra: &[&str],
) -> std::process::Output {
    let mut args = vec!["--sut", sut, "--scenario", scenario, "--mode", mode];
    args.extend_from_slice(extra);
    args.extend_from_slice(DATA);
    for s in sets {
        args.extend_from_slice(&["--set", s]);
    }
    let out = out.to_str().expect("utf-8 path");
    args.extend_from_slice(&["--output-dir", out]);
    if mode == "AccuracyOnly" {
        args.push("--verify-synthetic");
    }
    loadgen(&args)
}

#[test]
fn every_scenario_performance_and_accuracy_over_three_nodes() {
    let nodes = nodes(&["alpha", "beta", "gamma"]);
    let sut = sut_list(&nodes);
    for (scenario, sets) in scenarios() {
        let out = scratch(&format!("perf-{scenario}"));
        let o = run(&sut, scenario, "PerformanceOnly", &sets, &out, &[]);
        assert!(o.status.success(), "{scenario}: {}", text(&o.stderr));
        let summary = std::fs::read_to_string(out.join("mlperf_log_summary.txt")).unwrap();
        assert!(
            summary.contains(&format!("Scenario : {scenario}")),
            "{summary}"
        );
        assert!(summary.contains("Result is : "), "{summary}");
        let issued = detail_value(&out, "result_query_count").and_then(|v| v.as_u64());
        assert!(issued.is_some_and(|n| n > 0), "{scenario}: {issued:?}");
        assert_eq!(
            detail_value(&out, "num_errors"),
            Some(0.into()),
            "{scenario}"
        );

        // Name() reached every node: one aggregate naming all three.
        let name = detail_value(&out, "sut_name").unwrap();
        let name = name.as_str().unwrap();
        assert!(name.contains("Network SUT"), "{name}");
        for n in ["alpha", "beta", "gamma"] {
            assert!(name.contains(n), "{name} lacks {n}");
        }

        let out = scratch(&format!("acc-{scenario}"));
        let o = run(&sut, scenario, "AccuracyOnly", &sets, &out, &[]);
        assert!(o.status.success(), "{scenario}: {}", text(&o.stderr));
        assert!(
            text(&o.stdout).contains("logged answers match their samples"),
            "{scenario}: {}",
            text(&o.stdout)
        );
    }
}

#[test]
fn a_window_of_three_samples_in_flight_still_answers_every_sample() {
    // Every sample waits for room: the transport's task is parked and woken
    // by the answers thousands of times, on both nodes' connections.
    let nodes = nodes(&["w-one", "w-two"]);
    let sut = sut_list(&nodes);
    let sets = ["target_qps=20000", "min_duration=200"];
    let out = scratch("window-acc");
    let o = run(
        &sut,
        "Offline",
        "AccuracyOnly",
        &sets,
        &out,
        &["--max-in-flight", "3"],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("logged answers match their samples"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn duplicate_node_names_are_refused() {
    let nodes = nodes(&["twin", "twin"]);
    let out = scratch("dup");
    let o = run(
        &sut_list(&nodes),
        "Offline",
        "PerformanceOnly",
        &["target_qps=100"],
        &out,
        &[],
    );
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("twin") && err.contains("unique"), "{err}");
}

/// A long Server run over gRPC in which one of three nodes breaks.
fn node_failure_ends_run(tag: &str, break_it: impl FnOnce(&mut SutNode)) {
    let mut nodes = nodes(&[
        &format!("{tag}-1"),
        &format!("{tag}-2"),
        &format!("{tag}-3"),
    ]);
    let mut args: Vec<String> = [
        "--sut",
        &sut_list(&nodes),
        "--scenario",
        "Server",
        "--mode",
        "PerformanceOnly",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(DATA.iter().map(|s| s.to_string()));
    let addr = nodes[1].addr.clone();
    tests::node_failure_ends_run(&args, &scratch(tag), &mut nodes[1], &addr, break_it);
}

#[test]
fn a_killed_node_ends_the_run_invalid_and_promptly() {
    node_failure_ends_run("killed", |n| n.kill());
}

#[test]
fn a_stalled_node_ends_the_run_after_the_node_timeout() {
    node_failure_ends_run("stalled", |n| {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(n.pid(), libc::SIGSTOP) };
    });
}

#[test]
fn a_node_whose_backend_hangs_ends_the_run_after_the_progress_timeout() {
    // Heartbeats keep flowing (the node is up), but its backend takes ten
    // minutes per batch.
    let healthy = SutNode::start("hang-1", &[]);
    let hung = SutNode::start(
        "hang-2",
        &["--service-time", "fixed:600000000", "--heartbeat-ms", "100"],
    );
    let out = scratch("hung-backend");
    let nodes = [healthy, hung];
    let sut = sut_list(&nodes);
    let o = run(
        &sut,
        "Server",
        "PerformanceOnly",
        &[
            "target_qps=1000",
            "min_duration=60000",
            "min_query_count=100",
        ],
        &out,
        &["--node-timeout", "1", "--progress-timeout", "1"],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("hang-2") && err.contains("no progress"),
        "{err}"
    );
    assert!(
        !err.contains("stalled"),
        "heartbeats are not a stall: {err}"
    );
    assert_eq!(
        detail_value(&out, "result_validity")
            .as_ref()
            .and_then(|v| v.as_str()),
        Some("INVALID")
    );
}
