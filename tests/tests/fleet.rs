//! Tens of nodes: loadgen-node against 32 sut-node processes (synthetic
//! backend, small samples) on 127.0.0.1. `Name()` aggregates all 32,
//! least-outstanding dispatch spreads the samples evenly, a node killed
//! among them ends the run INVALID naming it, and loadgen-node's memory and
//! threads per node are measured against a run through one node.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use tests::{binary, detail_value, scratch, sut_list, text, SutNode, Usage};

use tests::SMALL_DATA as DATA;

const NODES: usize = 32;

/// Each node's share of the samples must lie within this fraction of the
/// mean share (least-outstanding, identical nodes): it catches a policy
/// that favours or starves nodes, not the policy at work. Measured on a
/// 2-core machine: within 4 to 12 % of the mean at a load average up to 13
/// from other builds. A node whose neighbours in the dispatch order lag
/// (descheduled on a busy host) rightly takes their samples: +26 % and +35 %
/// seen in 80 runs at a load average of 36.
const SPREAD_TOLERANCE: f64 = 0.5;

/// The tests of this file, one at a time: two fleets of 32 on two cores
/// would measure each other.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn fleet(prefix: &str, n: usize) -> Vec<SutNode> {
    SutNode::start_many(prefix, n, &[])
}

/// A Server run through `sut`; returns its output directory and usage.
fn server_run(sut: &str, tag: &str) -> (tests::Scratch, Usage) {
    let out = scratch(tag);
    let child = Command::new(binary("loadgen-node"))
        .args([
            "--sut",
            sut,
            "--scenario",
            "Server",
            "--mode",
            "PerformanceOnly",
        ])
        .args(DATA)
        .args(["--set", "target_qps=3000", "--set", "min_duration=1500"])
        .args(["--set", "min_query_count=100"])
        // A node that stops answering fails the run in seconds, naming it.
        .args(["--node-timeout", "5", "--progress-timeout", "20"])
        .arg("--output-dir")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("loadgen-node starts");
    let (o, usage) = tests::wait_measured(child, Duration::from_millis(20));
    assert!(o.status.success(), "{tag}: {}", text(&o.stderr));
    (out, usage)
}

/// `(name, samples_sent)` of every node, from the run's breakdown file.
fn samples_per_node(out: &Path) -> Vec<(String, u64)> {
    let path = out.join("mlperf_net_breakdown.json");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("the breakdown file"))
            .expect("breakdown JSON");
    v["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| {
            (
                n["name"].as_str().expect("name").to_string(),
                n["samples_sent"].as_u64().expect("samples_sent"),
            )
        })
        .collect()
}

#[test]
fn thirty_two_nodes_one_sut_an_even_spread_and_bounded_cost_per_node() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let one = fleet("solo", 1);
    let nodes = fleet("fleet", NODES);

    let (out_one, usage_one) = server_run(&sut_list(&one), "fleet-one");
    let (out, usage) = server_run(&sut_list(&nodes), "fleet-32");
    for dir in [&out_one, &out] {
        assert_eq!(detail_value(dir, "num_errors"), Some(0.into()));
    }

    // Name(): one aggregate over a round trip to each of the 32.
    let name = detail_value(&out, "sut_name").expect("sut_name");
    let name = name.as_str().expect("a string");
    assert!(
        name.starts_with(&format!("Network SUT ({NODES} nodes: ")),
        "{name}"
    );
    for n in &nodes {
        assert!(
            name.contains(&format!("{}, ", n.name)) || name.ends_with(&format!("{})", n.name)),
            "{name} lacks {}",
            n.name
        );
    }

    // Least-outstanding: every node within the tolerance of the mean.
    let spread = samples_per_node(&out);
    assert_eq!(spread.len(), NODES);
    let total: u64 = spread.iter().map(|(_, s)| s).sum();
    let issued = detail_value(&out, "result_query_count")
        .and_then(|v| v.as_u64())
        .expect("result_query_count");
    assert!(total >= issued, "{total} sent, {issued} issued");
    let mean = total as f64 / NODES as f64;
    let (lo, hi) = (
        spread.iter().map(|(_, s)| *s).min().unwrap_or(0),
        spread.iter().map(|(_, s)| *s).max().unwrap_or(0),
    );
    println!(
        "{NODES} nodes: {total} samples, {mean:.1} per node on average, \
         fewest {lo} ({:+.1} %), most {hi} ({:+.1} %)",
        (lo as f64 / mean - 1.0) * 100.0,
        (hi as f64 / mean - 1.0) * 100.0
    );
    for (n, s) in &spread {
        let off = (*s as f64 - mean).abs() / mean;
        assert!(
            off <= SPREAD_TOLERANCE,
            "{n} got {s} samples, {:.0} % from the mean {mean:.1}: {spread:?}",
            off * 100.0
        );
    }

    // What each further node costs loadgen-node.
    let per_node_rss =
        usage.peak_rss.saturating_sub(usage_one.peak_rss) as f64 / (NODES - 1) as f64;
    println!(
        "loadgen-node peak RSS: {:.1} MiB with 1 node, {:.1} MiB with {NODES} \
         ({:.0} KiB per further node); threads: {} with 1 node, {} with {NODES}",
        usage_one.peak_rss as f64 / (1 << 20) as f64,
        usage.peak_rss as f64 / (1 << 20) as f64,
        per_node_rss / 1024.0,
        usage_one.threads,
        usage.threads
    );
    // Connections are tasks on the QDL's fixed runtime, not threads.
    assert_eq!(usage.threads, usage_one.threads, "threads grew with nodes");
    assert!(
        per_node_rss < 1024.0 * 1024.0,
        "{:.0} KiB of loadgen-node memory per node",
        per_node_rss / 1024.0
    );
}

#[test]
fn a_node_killed_among_thirty_two_ends_the_run_invalid_naming_it() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut nodes = fleet("kill", NODES);
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
    let victim = 19;
    let addr = nodes[victim].addr.clone();
    tests::node_failure_ends_run(
        &args,
        &scratch("fleet-kill"),
        &mut nodes[victim],
        &addr,
        |n| n.kill(),
    );
}

/// How long the stress test below repeats its runs: `FLEET_STRESS_SECONDS`,
/// 120 s by default.
fn stress_budget() -> Duration {
    let secs = std::env::var("FLEET_STRESS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    Duration::from_secs(secs)
}

/// The longest one run of the stress test may take before it counts as
/// hung: its 1.5 s, the node and progress timeouts, closing, and the
/// connecting of 32 nodes on a starved host, with room.
const RUN_BOUND: Duration = Duration::from_secs(90);

/// Repetitions of the fleet's Server run, for a bounded time, while the
/// host's every core is kept busy: every run must end (done, or INVALID
/// naming what failed) within `RUN_BOUND`. Ignored by default: minutes of
/// 32 nodes and busy cores would weigh on every other test of the suite;
/// run it with `cargo test -p tests --test fleet -- --ignored`.
#[test]
#[ignore = "a stress test: minutes of busy cores (FLEET_STRESS_SECONDS)"]
fn fleet_runs_under_cpu_contention_always_end() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let nodes = fleet("stress", NODES);
    let sut = sut_list(&nodes);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let hogs: Vec<_> = (0..2 * cores)
        .map(|_| {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect();
    let started = std::time::Instant::now();
    let (mut runs, mut invalid) = (0, 0);
    while started.elapsed() < stress_budget() {
        let out = scratch("fleet-stress");
        let mut child = Command::new(binary("loadgen-node"))
            .args([
                "--sut",
                &sut,
                "--scenario",
                "Server",
                "--mode",
                "PerformanceOnly",
            ])
            .args(DATA)
            .args(["--set", "target_qps=1000", "--set", "min_duration=1500"])
            .args(["--set", "min_query_count=100"])
            .args(["--node-timeout", "5", "--progress-timeout", "20"])
            .arg("--output-dir")
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("loadgen-node starts");
        let began = std::time::Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().expect("waits") {
                break s;
            }
            if began.elapsed() > RUN_BOUND {
                let _ = child.kill();
                let o = child.wait_with_output().expect("ends once killed");
                panic!(
                    "run {} hung: no end after {RUN_BOUND:?}\n{}",
                    runs + 1,
                    text(&o.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        runs += 1;
        // INVALID (late answers on a starved host, a node named) is an end too.
        match status.code() {
            Some(0) => {}
            Some(2) => invalid += 1,
            other => {
                let o = child.wait_with_output().expect("its output");
                panic!("run {runs} ended with {other:?}: {}", text(&o.stderr));
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in hogs {
        let _ = h.join();
    }
    println!(
        "{runs} runs of {NODES} nodes in {:.0?} under {} busy threads: none hung, {invalid} INVALID",
        started.elapsed(),
        2 * cores
    );
    assert!(runs > 0);
}
