//! Fan-out benchmark: the QDL through 64 sut-nodes against one, side by side
//! in one run, on this machine (loopback, 64-byte samples, synthetic nodes
//! with zero service time and one network thread each). All of them share
//! the machine's cores with loadgen-node: loadgen-node's own CPU per sample
//! is the QDL's cost of the fan-out; the rates and latencies also carry the
//! cost of 64 node processes taking turns on those cores.
//!
//! Prints, medians of interleaved rounds:
//! - Offline samples/s through 1 node and through 64 (the QDL's throughput),
//!   and loadgen-node's own CPU per sample in each;
//! - the latency each adds over the in-process null SUT (p50, p99) on the
//!   same seeded Server schedule, at two rates;
//! - loadgen-node's peak memory and threads in the Server runs.
//!
//! `cargo bench -p tests --bench fleet` (builds the release binaries first).
//! BENCH_QUICK=1 shortens every run; BENCH_ONLY=offline or latency runs one
//! part. The latencies mean something only on a quiet machine: the null
//! SUT's own p99, printed beside them, shows how quiet it was.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench: a failed step ends it, saying which
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tests::{detail_value, median, scratch, text, SutNode, Usage};

const FLEET: usize = 64;
const ROUNDS: usize = 3;

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

    /// One PerformanceOnly run; returns its output directory and usage.
    fn run(
        &self,
        sut: &str,
        scenario: &str,
        sets: &[String],
        tag: &str,
    ) -> (tests::Scratch, Usage) {
        let out = scratch(&format!("fleet-bench-{tag}"));
        let mut cmd = Command::new(&self.loadgen);
        cmd.args(["--sut", sut, "--model", "resnet50", "--scenario", scenario])
            .args(["--mode", "PerformanceOnly", "--sample-bytes", "64"])
            .args(["--total-sample-count", "1024"])
            .args(["--performance-sample-count", "1024"])
            .args(["--no-trace", "--output-dir"])
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for s in sets {
            cmd.args(["--set", s]);
        }
        let child = cmd.spawn().expect("loadgen-node starts");
        let (o, usage) = tests::wait_measured(child, Duration::from_millis(50));
        if !o.status.success() {
            panic!("loadgen-node failed on {tag}: {}", text(&o.stderr));
        }
        (out, usage)
    }

    fn number(dir: &Path, key: &str) -> f64 {
        detail_value(dir, key)
            .and_then(|v| v.as_f64())
            .unwrap_or_else(|| panic!("{key} missing in {}", dir.display()))
    }

    /// Samples/s and samples of an Offline run.
    fn offline(&self, sut: &str, tag: &str) -> (f64, f64) {
        let sets = [
            "target_qps=1000000".to_string(),
            format!("min_duration={}", self.secs(4) * 1000),
        ];
        let (dir, _) = self.run(sut, "Offline", &sets, tag);
        let samples = Self::number(&dir, "generated_samples_per_query");
        let sps = Self::number(&dir, "result_samples_per_second");
        (sps, samples)
    }

    /// (p50, p99) in ns, whether the run was VALID, and its usage.
    fn server(&self, sut: &str, qps: f64, tag: &str) -> (f64, f64, bool, Usage) {
        let sets = [
            format!("target_qps={qps}"),
            format!("min_duration={}", self.secs(8) * 1000),
            "min_query_count=100".to_string(),
        ];
        let (dir, usage) = self.run(sut, "Server", &sets, tag);
        (
            Self::number(&dir, "result_50.00_percentile_latency_ns"),
            Self::number(&dir, "result_99.00_percentile_latency_ns"),
            detail_value(&dir, "result_validity").is_some_and(|v| v == "VALID"),
            usage,
        )
    }
}

/// Starts `n` nodes, one network thread each.
fn nodes(prefix: &str, n: usize) -> Vec<SutNode> {
    SutNode::start_many(prefix, n, &["--threads", "1"])
}

fn main() {
    // `cargo bench` passes --bench; nothing else is taken.
    let bench = Bench {
        quick: std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1"),
        loadgen: tests::build_release(),
    };
    let one = nodes("one", 1);
    let fleet = nodes("fleet", FLEET);
    let suts = [
        ("1 node", tests::sut_list(&one)),
        ("64 nodes", tests::sut_list(&fleet)),
    ];

    println!(
        "fan-out benchmark (2-core machine, loopback, 64-byte samples, synthetic nodes with zero \
         service time and --threads 1), medians of {ROUNDS} interleaved rounds"
    );
    println!();
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    if only.is_empty() || only == "offline" {
        offline(&bench, &suts);
    }
    if only.is_empty() || only == "latency" {
        latency(&bench, &suts);
    }
}

fn offline(bench: &Bench, suts: &[(&str, String)]) {
    // Offline: every sample at once, spread over all connections; the
    // samples/s, and loadgen-node's own CPU per sample (a finished child's),
    // which the nodes' share of the two cores does not change.
    let mut offline: Vec<Vec<(f64, f64)>> = vec![Vec::new(); suts.len()];
    for _ in 0..ROUNDS {
        for (i, (_, sut)) in suts.iter().enumerate() {
            let cpu0 = tests::children_cpu_secs();
            let (sps, samples) = bench.offline(sut, &format!("offline-{i}"));
            let cpu = tests::children_cpu_secs() - cpu0;
            offline[i].push((sps, cpu / samples * 1e9));
        }
    }
    println!("Offline, the QDL's throughput:");
    let sps0 = median(offline[0].iter().map(|r| r.0));
    for (i, (label, _)) in suts.iter().enumerate() {
        let sps = median(offline[i].iter().map(|r| r.0));
        println!(
            "  {label:>8}: {sps:>9.0} samples/s ({:.2}x 1 node) | loadgen-node CPU {:>5.0} ns per sample",
            sps / sps0,
            median(offline[i].iter().map(|r| r.1))
        );
    }
    println!();
}

fn latency(bench: &Bench, suts: &[(&str, String)]) {
    println!("Server, latency over the in-process null SUT on the same seeded schedule (us):");
    let mut usage = vec![Usage::default(); suts.len()];
    for qps in [1_000.0, 10_000.0] {
        // (p50, p99, valid) of the null SUT and of each SUT, per round.
        let mut null = Vec::new();
        let mut runs: Vec<Vec<(f64, f64, bool)>> = vec![Vec::new(); suts.len()];
        for _ in 0..ROUNDS {
            let (p50, p99, valid, _) = bench.server("null", qps, "null");
            null.push((p50, p99, valid));
            for (i, (_, sut)) in suts.iter().enumerate() {
                let (p50, p99, valid, u) = bench.server(sut, qps, &format!("server-{i}"));
                runs[i].push((p50, p99, valid));
                usage[i].peak_rss = usage[i].peak_rss.max(u.peak_rss);
                usage[i].threads = usage[i].threads.max(u.threads);
            }
        }
        let m = |r: &[(f64, f64, bool)], k: usize| {
            median(r.iter().map(|x| if k == 0 { x.0 } else { x.1 })) / 1e3
        };
        let invalid = |r: &[(f64, f64, bool)]| {
            let n = r.iter().filter(|x| !x.2).count();
            if n == 0 {
                String::new()
            } else {
                format!(" [{n} of {ROUNDS} INVALID]")
            }
        };
        let (n50, n99) = (m(&null, 0), m(&null, 1));
        let cols: Vec<String> = suts
            .iter()
            .enumerate()
            .map(|(i, (label, _))| {
                let (p50, p99) = (m(&runs[i], 0), m(&runs[i], 1));
                format!(
                    "{label} p50 {p50:.0} (+{:.0}) p99 {p99:.0} (+{:.0}){}",
                    p50 - n50,
                    p99 - n99,
                    invalid(&runs[i])
                )
            })
            .collect();
        println!(
            "  {qps:>6} QPS: null p50 {n50:.0} p99 {n99:.0}{} | {}",
            invalid(&null),
            cols.join(" | ")
        );
    }
    println!();
    for (i, (label, _)) in suts.iter().enumerate() {
        println!(
            "loadgen-node in the Server runs, {label}: peak RSS {:.1} MiB, {} threads",
            usage[i].peak_rss as f64 / (1 << 20) as f64,
            usage[i].threads
        );
    }
}
