//! Fan-out benchmark: the QDL through 64 sut-nodes against one, side by side
//! in one run, on this machine (loopback, 64-byte samples, synthetic nodes
//! with zero service time and one network thread each).
//!
//! Prints, medians of interleaved rounds:
//! - Offline samples/s through 1 node and through 64 (the QDL's throughput);
//! - the latency each adds over the in-process null SUT (p50, p99) on the
//!   same seeded Server schedule, at two rates;
//! - loadgen-node's peak memory and threads in each case.
//!
//! `cargo bench -p tests --bench fleet` (builds the release binaries first).
//! BENCH_QUICK=1 shortens every run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tests::{detail_value, median, scratch, text, SutNode};

const FLEET: usize = 64;
const ROUNDS: usize = 3;

struct Bench {
    quick: bool,
    loadgen: PathBuf,
}

/// What one loadgen-node run used, read from /proc while it ran.
#[derive(Clone, Copy, Default)]
struct Usage {
    peak_rss: u64,
    threads: u64,
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
    fn run(&self, sut: &str, scenario: &str, sets: &[String], tag: &str) -> (PathBuf, Usage) {
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
        let mut child = cmd.spawn().expect("loadgen-node starts");
        let status = format!("/proc/{}/status", child.id());
        let mut usage = Usage::default();
        while child.try_wait().expect("wait").is_none() {
            if let Ok(s) = std::fs::read_to_string(&status) {
                let field = |key: &str| -> Option<u64> {
                    s.lines()
                        .find(|l| l.starts_with(key))?
                        .split_whitespace()
                        .nth(1)?
                        .parse()
                        .ok()
                };
                usage.peak_rss = usage.peak_rss.max(field("VmHWM:").unwrap_or(0) * 1024);
                usage.threads = usage.threads.max(field("Threads:").unwrap_or(0));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let o = child.wait_with_output().expect("loadgen-node ends");
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

    fn offline(&self, sut: &str, tag: &str) -> (f64, Usage) {
        let sets = [
            "target_qps=2000000".to_string(),
            format!("min_duration={}", self.secs(4) * 1000),
        ];
        let (dir, usage) = self.run(sut, "Offline", &sets, tag);
        (Self::number(&dir, "result_samples_per_second"), usage)
    }

    /// (p50, p99) in ns, and whether the run was VALID.
    fn server(&self, sut: &str, qps: f64, tag: &str) -> (f64, f64, bool) {
        let sets = [
            format!("target_qps={qps}"),
            format!("min_duration={}", self.secs(8) * 1000),
            "min_query_count=100".to_string(),
        ];
        let (dir, _) = self.run(sut, "Server", &sets, tag);
        (
            Self::number(&dir, "result_50.00_percentile_latency_ns"),
            Self::number(&dir, "result_99.00_percentile_latency_ns"),
            detail_value(&dir, "result_validity").is_some_and(|v| v == "VALID"),
        )
    }
}

/// Starts `n` nodes concurrently, one network thread each.
fn nodes(prefix: &str, n: usize) -> Vec<SutNode> {
    std::thread::scope(|s| {
        let started: Vec<_> = (1..=n)
            .map(|i| s.spawn(move || SutNode::start(&format!("{prefix}-{i}"), &["--threads", "1"])))
            .collect();
        started
            .into_iter()
            .map(|h| h.join().expect("a node starts"))
            .collect()
    })
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
        ("1 node  ", tests::sut_list(&one)),
        ("64 nodes", tests::sut_list(&fleet)),
    ];

    println!(
        "fan-out benchmark (2-core machine, loopback, 64-byte samples, synthetic nodes with zero \
         service time and --threads 1), medians of {ROUNDS} interleaved rounds"
    );
    println!();
    // Offline: every sample at once, spread over all connections.
    let mut offline: Vec<Vec<(f64, Usage)>> = vec![Vec::new(); suts.len()];
    for _ in 0..ROUNDS {
        for (i, (_, sut)) in suts.iter().enumerate() {
            offline[i].push(bench.offline(sut, &format!("offline-{i}")));
        }
    }
    let sps: Vec<f64> = offline
        .iter()
        .map(|r| median(r.iter().map(|(s, _)| *s)))
        .collect();
    println!("Offline throughput (the QDL's):");
    for (i, (label, _)) in suts.iter().enumerate() {
        let peak = offline[i]
            .iter()
            .map(|(_, u)| u.peak_rss)
            .max()
            .unwrap_or(0);
        let threads = offline[i].iter().map(|(_, u)| u.threads).max().unwrap_or(0);
        println!(
            "  {label}: {:>9.0} samples/s ({:.2}x 1 node) | loadgen-node peak RSS {:.1} MiB, {threads} threads",
            sps[i],
            sps[i] / sps[0],
            peak as f64 / (1 << 20) as f64
        );
    }

    println!();
    println!("added latency over the null SUT, same seeded Server schedule:");
    for qps in [1_000.0, 10_000.0] {
        // (p50, p99) added, per SUT, per round; the null SUT runs in each round.
        let mut added: Vec<Vec<(f64, f64)>> = vec![Vec::new(); suts.len()];
        let mut invalid = vec![false; suts.len()];
        for _ in 0..ROUNDS {
            let (n50, n99, _) = bench.server("null", qps, "null");
            for (i, (_, sut)) in suts.iter().enumerate() {
                let (p50, p99, valid) = bench.server(sut, qps, &format!("server-{i}"));
                added[i].push((p50 - n50, p99 - n99));
                invalid[i] |= !valid;
            }
        }
        let cols: Vec<String> = suts
            .iter()
            .enumerate()
            .map(|(i, (label, _))| {
                format!(
                    "{}: p50 +{:>7.1} us, p99 +{:>7.1} us{}",
                    label.trim(),
                    median(added[i].iter().map(|a| a.0)) / 1e3,
                    median(added[i].iter().map(|a| a.1)) / 1e3,
                    if invalid[i] { " [INVALID]" } else { "" }
                )
            })
            .collect();
        println!("  {qps:>6} QPS: {}", cols.join(" | "));
    }
}
