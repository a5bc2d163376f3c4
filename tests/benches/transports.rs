//! gRPC against QUIC: loadgen-node -> QDL -> loopback -> one sut-node
//! (synthetic backend, zero service time) -> back, on this machine, over
//! plain gRPC, gRPC over TLS and QUIC (TLS 1.3), on the same seeded
//! schedules.
//!
//! Prints, side by side with the ratio QUIC / gRPC:
//! - the latency each transport adds (p50, p99) over the in-process null
//!   SUT, at a few Server QPS values;
//! - the highest VALID Server QPS and the Offline samples/s through one node,
//!   and the Offline samples/s with ResNet50-sized (602112-byte) samples.
//!
//! `cargo bench -p tests --bench transports` (builds the release
//! binaries first). BENCH_QUICK=1 shortens every run; BENCH_ONLY=latency or
//! BENCH_ONLY=throughput runs one half.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench: a failed step ends it, saying which
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use tests::{detail_value, scratch, text, SutNode};

/// ResNet50's input as the built-in benchmark table sizes it (3 x 224 x
/// 224 float32).
const RESNET50_INPUT: usize = 602_112;

struct Bench {
    quick: bool,
    loadgen: PathBuf,
}

/// One way of reaching the node: a label, the `--sut` value and extra flags.
struct Way {
    label: &'static str,
    sut: String,
    flags: Vec<String>,
}

impl Bench {
    fn secs(&self, full: u64) -> u64 {
        if self.quick {
            (full / 4).max(1)
        } else {
            full
        }
    }

    /// One loadgen-node run with 64-byte samples; returns its output
    /// directory.
    fn run(&self, way: &Way, scenario: &str, sets: &[String], tag: &str) -> tests::Scratch {
        self.run_sized(way, scenario, sets, tag, 64)
    }

    fn run_sized(
        &self,
        way: &Way,
        scenario: &str,
        sets: &[String],
        tag: &str,
        sample_bytes: usize,
    ) -> tests::Scratch {
        let out = scratch(&format!("tbench-{tag}"));
        let mut cmd = Command::new(&self.loadgen);
        cmd.args([
            "--sut",
            &way.sut,
            "--model",
            "resnet50",
            "--scenario",
            scenario,
        ])
        .args(["--mode", "PerformanceOnly", "--sample-bytes"])
        .arg(sample_bytes.to_string())
        .args([
            "--total-sample-count",
            "1024",
            "--performance-sample-count",
            "1024",
        ])
        .args(&way.flags)
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

    fn server(&self, way: &Way, qps: f64, secs: u64, tag: &str) -> tests::Scratch {
        let sets = vec![
            format!("target_qps={qps}"),
            format!("min_duration={}", secs * 1000),
            "min_query_count=100".to_string(),
        ];
        self.run(way, "Server", &sets, tag)
    }

    /// The highest target QPS whose Server run is VALID: double, then bisect.
    fn peak_server_qps(&self, way: &Way) -> f64 {
        let secs = self.secs(4);
        let tag = format!("peak-{}", way.label);
        let mut lo = 0.0;
        let mut hi = 10_000.0;
        while Self::valid(&self.server(way, hi, secs, &tag)) {
            lo = hi;
            hi *= 2.0;
        }
        while hi - lo > lo * 0.05 && hi - lo > 1000.0 {
            let mid = (lo + hi) / 2.0;
            if Self::valid(&self.server(way, mid, secs, &tag)) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }

    fn offline_sps(&self, way: &Way, sample_bytes: usize) -> f64 {
        let secs = self.secs(4);
        let qps = if sample_bytes > 4096 {
            50_000
        } else {
            2_000_000
        };
        let sets = vec![
            format!("target_qps={qps}"),
            format!("min_duration={}", secs * 1000),
        ];
        let tag = format!("offline-{}-{sample_bytes}", way.label);
        Self::number(
            &self.run_sized(way, "Offline", &sets, &tag, sample_bytes),
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
    // Plain gRPC and QUIC on one node; gRPC over TLS on another.
    let plain = SutNode::start("tbench-1", &[]);
    let tls = SutNode::start("tbench-2", &["--tls", "--no-quic"]);
    let pin = |n: &SutNode| vec!["--tls-pin".to_string(), n.fingerprint.clone().expect("pin")];
    let null = Way {
        label: "null",
        sut: "null".into(),
        flags: vec![],
    };
    let ways = [
        Way {
            label: "grpc",
            sut: plain.addr.clone(),
            flags: vec![],
        },
        Way {
            label: "grpc+tls",
            sut: format!("grpcs://{}", tls.addr),
            flags: pin(&tls),
        },
        Way {
            label: "quic",
            sut: format!("quic://{}", plain.quic.clone().expect("QUIC address")),
            flags: pin(&plain),
        },
    ];

    println!("gRPC vs QUIC benchmark (2-core machine, loopback, 64-byte samples, one node)");
    println!();
    println!(
        "added latency over the null SUT, same seeded Server schedule, median of {REPS} \
         interleaved rounds (us):"
    );
    println!(
        "  {:>8} | {:^17} | {:^23} | {:^23} | {:^23} | quic/grpc",
        "QPS", "null p50 / p99", "grpc p50 / p99", "grpc+tls p50 / p99", "quic p50 / p99"
    );
    let secs = bench.secs(4);
    let p = |d: &Path, k: &str| Bench::number(d, k) / 1e3;
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let latency_qps: &[f64] = if only == "throughput" {
        &[]
    } else {
        &[100.0, 10_000.0, 50_000.0]
    };
    for &qps in latency_qps {
        // [way][round] = (p50, p99); way 0 is the null SUT. Rounds
        // interleave the ways, so a busy spell on the machine hits all.
        let mut seen: Vec<Vec<(f64, f64)>> = vec![Vec::new(); ways.len() + 1];
        let mut invalid = vec![false; ways.len() + 1];
        for _ in 0..REPS {
            for (i, way) in std::iter::once(&null).chain(&ways).enumerate() {
                let d = bench.server(way, qps, secs, &format!("lat-{}", way.label));
                seen[i].push((
                    p(&d, "result_50.00_percentile_latency_ns"),
                    p(&d, "result_99.00_percentile_latency_ns"),
                ));
                invalid[i] |= !Bench::valid(&d);
            }
        }
        let med: Vec<(f64, f64)> = seen
            .iter()
            .map(|r| {
                (
                    tests::median(r.iter().map(|x| x.0)),
                    tests::median(r.iter().map(|x| x.1)),
                )
            })
            .collect();
        let (n50, n99) = med[0];
        let added: Vec<(f64, f64)> = med[1..].iter().map(|(a, b)| (a - n50, b - n99)).collect();
        let cells: Vec<String> = added
            .iter()
            .zip(&invalid[1..])
            .map(|((a50, a99), bad)| {
                format!("{a50:>9.1} / {a99:>9.1}{}", if *bad { "!" } else { " " })
            })
            .collect();
        println!(
            "  {qps:>8} | {n50:>7.1} / {n99:>7.1} | {} | {} | {} | p50 {:.2}x, p99 {:.2}x",
            cells[0],
            cells[1],
            cells[2],
            added[2].0 / added[0].0,
            added[2].1 / added[0].1
        );
    }
    println!("  (! marks a way with an INVALID run among its rounds)");
    println!();
    println!("throughput through one node:");
    if only == "latency" {
        return;
    }
    let mut peaks = Vec::new();
    for way in &ways {
        let qps = bench.peak_server_qps(way);
        let sps = bench.offline_sps(way, 64);
        let big = bench.offline_sps(way, RESNET50_INPUT);
        println!(
            "  {:>8}: highest VALID Server QPS {qps:>8.0} | Offline {sps:>8.0} samples/s \
             | Offline {RESNET50_INPUT}-byte samples {big:>6.0}/s ({:.2} Gbit/s)",
            way.label,
            big * RESNET50_INPUT as f64 * 8.0 / 1e9
        );
        peaks.push((qps, sps, big));
    }
    for (i, base) in [(0, "grpc"), (1, "grpc+tls")] {
        println!(
            "  quic/{base}: Server QPS {:.2}x, Offline {:.2}x, Offline {RESNET50_INPUT} B {:.2}x",
            peaks[2].0 / peaks[i].0,
            peaks[2].1 / peaks[i].1,
            peaks[2].2 / peaks[i].2
        );
    }
}
