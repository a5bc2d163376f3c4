//! Network-path benchmark: loadgen-node -> QDL -> gRPC over loopback ->
//! sut-node (synthetic backend, zero service time) -> back, on this machine.
//!
//! Prints, side by side from runs made now:
//! - the latency the network path adds (p50, p99) over the in-process null
//!   SUT, on the same seeded Server schedule;
//! - the highest VALID Server QPS and the Offline samples/s through one node
//!   and through three nodes;
//!
//! and the ratios to the official LoadGen-over-network demo's figures
//! measured on this kind of machine (Flask, JSON, a thread per query).
//!
//! - CPU per sample of an 8.8 M-sample Offline run through one node, the
//!   node's and loadgen-node's, medians of 3 runs: what bounds the figures
//!   above on two shared cores, and resolves far finer than they do.
//!
//! `cargo bench -p tests --bench network` (builds the release binaries
//! first). BENCH_QUICK=1 shortens every run; BENCH_ONLY=latency,
//! throughput or cpu runs one part.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench: a failed step ends it, saying which
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use tests::{detail_value, scratch, text, SutNode};

/// The official demo on this kind of machine (2 cores).
const DEMO_SERVER_QPS: f64 = 350.0;
const DEMO_OFFLINE_SPS: f64 = 292.0;
const DEMO_P99_AT_100_QPS_NS: f64 = 10.75e6;

struct Bench {
    quick: bool,
    loadgen: PathBuf,
}

impl Bench {
    fn secs(&self, full: u64) -> u64 {
        if self.quick {
            (full / 4).max(1)
        } else {
            full
        }
    }

    /// One loadgen-node run; returns its output directory.
    fn run(&self, sut: &str, scenario: &str, sets: &[String], tag: &str) -> tests::Scratch {
        let out = scratch(&format!("bench-{tag}"));
        let mut cmd = Command::new(&self.loadgen);
        cmd.args(["--sut", sut, "--model", "resnet50", "--scenario", scenario])
            .args(["--mode", "PerformanceOnly", "--sample-bytes", "64"])
            .args([
                "--total-sample-count",
                "1024",
                "--performance-sample-count",
                "1024",
            ])
            .args(["--no-trace", "--output-dir"])
            .arg(&out);
        for s in sets {
            cmd.args(["--set", s]);
        }
        let o = cmd.output().expect("loadgen-node runs");
        if !o.status.success() {
            panic!("loadgen-node failed on {tag}: {}", text(&o.stderr));
        }
        out
    }

    fn valid(dir: &Path) -> bool {
        detail_value(dir, "result_validity").is_some_and(|v| v == "VALID")
    }

    fn number(dir: &Path, key: &str) -> f64 {
        detail_value(dir, key)
            .and_then(|v| v.as_f64())
            .unwrap_or_else(|| panic!("{key} missing in {}", dir.display()))
    }

    fn server(&self, sut: &str, qps: f64, secs: u64, tag: &str) -> tests::Scratch {
        let sets = vec![
            format!("target_qps={qps}"),
            format!("min_duration={}", secs * 1000),
            "min_query_count=100".to_string(),
        ];
        self.run(sut, "Server", &sets, tag)
    }

    /// The highest target QPS whose Server run is VALID: double, then bisect.
    fn peak_server_qps(&self, sut: &str, tag: &str) -> f64 {
        let secs = self.secs(4);
        let mut lo = 0.0;
        let mut hi = 10_000.0;
        while Self::valid(&self.server(sut, hi, secs, tag)) {
            lo = hi;
            hi *= 2.0;
        }
        while hi - lo > lo * 0.05 && hi - lo > 1000.0 {
            let mid = (lo + hi) / 2.0;
            if Self::valid(&self.server(sut, mid, secs, tag)) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }

    fn offline_sps(&self, sut: &str, tag: &str) -> f64 {
        let secs = self.secs(4);
        let sets = vec![
            "target_qps=2000000".to_string(),
            format!("min_duration={}", secs * 1000),
        ];
        Self::number(
            &self.run(sut, "Offline", &sets, tag),
            "result_samples_per_second",
        )
    }
}

/// Rounds of each latency measurement; the median is printed.
const REPS: usize = 3;

fn main() {
    // `cargo bench` passes --bench; nothing else is taken.
    let bench = Bench {
        quick: std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1"),
        loadgen: tests::build_release(),
    };
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();

    println!("network path benchmark (2-core machine, loopback, 64-byte samples)");
    println!();
    if only.is_empty() || only == "latency" {
        // LoadGen, QDL and node share the 2 cores: the node gets one network
        // thread, as the QDL does by default on such a host.
        let node = SutNode::start("bench-lat", &["--threads", "1"]);
        println!(
            "added latency, same seeded Server schedule, null SUT vs one sut-node \
             (--threads 1), median of {REPS} interleaved rounds:"
        );
        let secs = bench.secs(8);
        for qps in [100.0, 10_000.0, 50_000.0] {
            let p = |d: &Path, k: &str| Bench::number(d, k);
            // (null p50, null p99, net p50, net p99) per round.
            let mut rounds = Vec::new();
            let mut invalid = false;
            for _ in 0..REPS {
                let null = bench.server("null", qps, secs, "lat-null");
                let net = bench.server(&node.addr, qps, secs, "lat-net");
                invalid |= !Bench::valid(&net);
                rounds.push([
                    p(&null, "result_50.00_percentile_latency_ns"),
                    p(&null, "result_99.00_percentile_latency_ns"),
                    p(&net, "result_50.00_percentile_latency_ns"),
                    p(&net, "result_99.00_percentile_latency_ns"),
                ]);
            }
            let m = |k: usize| tests::median(rounds.iter().map(|r| r[k]));
            let (n50, n99, g50, g99) = (m(0), m(1), m(2), m(3));
            let added99: Vec<String> = rounds
                .iter()
                .map(|r| format!("{:.0}", (r[3] - r[1]) / 1e3))
                .collect();
            println!(
                "  {qps:>8} QPS: p50 {:>9.1} us (null {:>7.1}, added {:>8.1}) | p99 {:>9.1} us (null {:>7.1}, added {:>8.1}; rounds {}){}",
                g50 / 1e3,
                n50 / 1e3,
                (g50 - n50) / 1e3,
                g99 / 1e3,
                n99 / 1e3,
                (g99 - n99) / 1e3,
                added99.join(", "),
                if invalid { "  [INVALID]" } else { "" }
            );
            if qps == 100.0 {
                println!(
                    "             p99 vs the official demo's {:.2} ms at 100 QPS: {:.1}x lower",
                    DEMO_P99_AT_100_QPS_NS / 1e6,
                    DEMO_P99_AT_100_QPS_NS / g99
                );
            }
        }
    }
    if only.is_empty() || only == "cpu" {
        cpu_per_sample(&bench);
    }
    if only == "latency" || only == "cpu" {
        return;
    }
    let one = SutNode::start("bench-1", &[]);
    let three: Vec<SutNode> = (2..=4)
        .map(|i| SutNode::start(&format!("bench-{i}"), &[]))
        .collect();
    let three_list = three
        .iter()
        .map(|n| n.addr.as_str())
        .collect::<Vec<_>>()
        .join(",");
    println!();
    for (label, sut, tag) in [
        ("1 node ", one.addr.as_str(), "one"),
        ("3 nodes", three_list.as_str(), "three"),
    ] {
        let qps = bench.peak_server_qps(sut, &format!("peak-{tag}"));
        let sps = bench.offline_sps(sut, &format!("offline-{tag}"));
        println!(
            "{label}: highest VALID Server QPS {qps:>9.0} ({:>6.0}x the demo's {DEMO_SERVER_QPS}) | Offline {sps:>9.0} samples/s ({:>6.0}x the demo's {DEMO_OFFLINE_SPS})",
            qps / DEMO_SERVER_QPS,
            sps / DEMO_OFFLINE_SPS
        );
    }
}

/// CPU per sample of long Offline runs through one node (`target_qps`
/// 1 M for 8 s: 8.8 M samples), the node's from /proc and loadgen-node's as
/// a finished child's; medians of 3.
fn cpu_per_sample(bench: &Bench) {
    let node = SutNode::start("bench-cpu", &[]);
    let sets = vec![
        "target_qps=1000000".to_string(),
        "min_duration=8000".to_string(),
    ];
    let mut runs = Vec::new();
    for _ in 0..REPS {
        let (node0, lg0) = (tests::cpu_secs(node.pid()), tests::children_cpu_secs());
        let dir = bench.run(&node.addr, "Offline", &sets, "cpu");
        let (node1, lg1) = (tests::cpu_secs(node.pid()), tests::children_cpu_secs());
        let samples = Bench::number(&dir, "generated_samples_per_query");
        runs.push([
            Bench::number(&dir, "result_samples_per_second"),
            (node1 - node0) / samples * 1e9,
            (lg1 - lg0) / samples * 1e9,
        ]);
    }
    let m = |k: usize| tests::median(runs.iter().map(|r| r[k]));
    println!(
        "CPU per sample, Offline through one node (8.8 M samples, median of {REPS}): {:.2} M samples/s | node {:.0} ns | loadgen-node {:.0} ns",
        m(0) / 1e6,
        m(1),
        m(2)
    );
    println!();
}
