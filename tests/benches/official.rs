//! The official LoadGen through our QDL, side by side with the native engine
//! through the same QDL and with the official LoadGen's own in-process null
//! SUT (its C++ core measured without a network), on this machine:
//! Offline samples/s and the highest VALID Server QPS, 64-byte samples, one
//! synthetic sut-node on loopback.
//!
//! `MLPERF_LOADGEN_SRC=DIR cargo bench -p tests --features official-loadgen
//! --bench official` (DIR: from deploy/official-loadgen.sh --src-only).
//! BENCH_QUICK=1 shortens every run.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench: a failed step ends it, saying which
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use tests::{detail_value, scratch, text, SutNode};

struct Bench {
    quick: bool,
    loadgen: PathBuf,
}

/// One way of running the test.
struct Setup<'a> {
    label: &'a str,
    engine: &'a str,
    sut: &'a str,
}

impl Bench {
    fn secs(&self) -> u64 {
        if self.quick {
            1
        } else {
            4
        }
    }

    fn run(&self, setup: &Setup<'_>, scenario: &str, sets: &[String], tag: &str) -> tests::Scratch {
        let out = scratch(&format!("bench-official-{tag}"));
        let mut cmd = Command::new(&self.loadgen);
        cmd.args(["--engine", setup.engine, "--sut", setup.sut])
            .args(["--model", "resnet50", "--scenario", scenario])
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

    fn server_valid(&self, setup: &Setup<'_>, qps: f64) -> bool {
        let sets = vec![
            format!("target_qps={qps}"),
            format!("min_duration={}", self.secs() * 1000),
            "min_query_count=100".to_string(),
        ];
        Self::valid(&self.run(setup, "Server", &sets, "server"))
    }

    /// The highest target QPS whose Server run is VALID: double, then bisect
    /// to 5%.
    fn peak_server_qps(&self, setup: &Setup<'_>) -> f64 {
        let (mut lo, mut hi) = (0.0, 10_000.0);
        while self.server_valid(setup, hi) {
            lo = hi;
            hi *= 2.0;
        }
        while hi - lo > lo * 0.05 && hi - lo > 1000.0 {
            let mid = (lo + hi) / 2.0;
            if self.server_valid(setup, mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }

    fn offline_sps(&self, setup: &Setup<'_>) -> f64 {
        let sets = vec![
            "target_qps=2000000".to_string(),
            format!("min_duration={}", self.secs() * 1000),
        ];
        let dir = self.run(setup, "Offline", &sets, "offline");
        detail_value(&dir, "result_samples_per_second")
            .and_then(|v| v.as_f64())
            .unwrap_or_else(|| panic!("no result_samples_per_second in {}", dir.display()))
    }
}

fn main() {
    let bench = Bench {
        quick: std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1"),
        loadgen: tests::build_release_with(&["--features", "loadgen-cli/official-loadgen"]),
    };
    let node = SutNode::start("bench-official", &[]);
    let setups = [
        Setup {
            label: "official LoadGen, its null SUT (no network)",
            engine: "official",
            sut: "null",
        },
        Setup {
            label: "official LoadGen -> QDL -> 1 sut-node",
            engine: "official",
            sut: &node.addr,
        },
        Setup {
            label: "native engine   -> QDL -> 1 sut-node",
            engine: "native",
            sut: &node.addr,
        },
    ];
    println!("official LoadGen through the QDL (2-core machine, loopback, 64-byte samples)");
    println!();
    println!("{:<46} {:>14} {:>18}", "", "Offline sps", "peak Server QPS");
    let mut figures = Vec::new();
    for s in &setups {
        let sps = bench.offline_sps(s);
        let qps = bench.peak_server_qps(s);
        println!("{:<46} {sps:>14.0} {qps:>18.0}", s.label);
        figures.push((sps, qps));
    }
    let [(null_sps, null_qps), (off_sps, off_qps), (nat_sps, nat_qps)] = figures[..] else {
        unreachable!("three setups")
    };
    println!();
    println!(
        "official through the QDL / official null SUT: Offline {:.2}, Server {:.2}",
        off_sps / null_sps,
        off_qps / null_qps
    );
    println!(
        "official through the QDL / native through the QDL (the QDL's own limit): Offline {:.2}, Server {:.2}",
        off_sps / nat_sps,
        off_qps / nat_qps
    );
    // The target: the official LoadGen is not held back by our side, i.e. it
    // reaches 0.8 of its null-SUT figure, or of the QDL's own limit where
    // that is lower.
    let ratio = |got: f64, a: f64, b: f64| got / a.min(b);
    let (o, s) = (
        ratio(off_sps, null_sps, nat_sps),
        ratio(off_qps, null_qps, nat_qps),
    );
    let verdict = if o >= 0.8 && s >= 0.8 {
        "met"
    } else {
        "NOT met"
    };
    println!(
        "official through the QDL / min(official null SUT, native through the QDL): \
         Offline {o:.2}, Server {s:.2} (target 0.8: {verdict})"
    );
}
