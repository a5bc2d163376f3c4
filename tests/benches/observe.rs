//! What the observability features cost the timed path, side by side from
//! runs made now: the highest VALID Server QPS through one sut-node, and
//! the p99 latency added over the in-process null SUT at 50k QPS, with
//! everything off (no `--metrics`, no `--otlp`, no progress lines), with
//! Prometheus metrics on and both binaries scraped every second, and with
//! all of it on: metrics, OpenTelemetry traces (`--otlp` on both binaries,
//! the default sample ratio) to a local OTLP collector and a progress line
//! every second. Each column runs against its own sut-node started with
//! exactly its flags; rounds are interleaved, each column taking each place
//! in a round's order in turn. Latencies are medians of the rounds; peaks
//! come from runs of every column at the same rates, 2.5 % apart (one
//! search per column moves by several percent from one try to the next on
//! two cores). The bench also prints what each column costs in CPU per
//! sample at a fixed rate (both processes, the node's and loadgen-node's),
//! with OTLP alone and progress lines alone besides, which resolves finer
//! still.
//! (The latency breakdown and the metric counters are always recorded: the
//! breakdown's cost per answer is measured by
//! `cargo test -p qdl --release --lib record_cost -- --ignored --nocapture`.)
//!
//! `cargo bench -p tests --bench observe` (builds the release binaries
//! first). BENCH_QUICK=1 shortens every run; BENCH_ONLY=latency, peak or
//! cpu runs one part. Target: with all of it on, at
//! most 5% of peak QPS lost and at most 50 us of p99 added.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench: a failed step ends it, saying which
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tests::collector::Collector;
use tests::{detail_value, scratch, text, SutNode};

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

    fn server(&self, sut: &str, qps: f64, secs: u64, extra: &[&str], tag: &str) -> tests::Scratch {
        let out = scratch(&format!("bench-observe-{tag}"));
        let mut cmd = Command::new(&self.loadgen);
        cmd.args(["--sut", sut, "--model", "resnet50", "--scenario", "Server"])
            .args(["--mode", "PerformanceOnly", "--sample-bytes", "64"])
            .args(["--total-sample-count", "1024"])
            .args(["--performance-sample-count", "1024", "--no-trace"])
            .args(["--set", &format!("target_qps={qps}")])
            .args(["--set", &format!("min_duration={}", secs * 1000)])
            .args(["--set", "min_query_count=100", "--output-dir"])
            .arg(&out);
        cmd.args(extra);
        let o = cmd.output().expect("loadgen-node runs");
        if !o.status.success() {
            panic!("loadgen-node failed on {tag}: {}", text(&o.stderr));
        }
        out
    }

    fn valid(dir: &Path) -> bool {
        detail_value(dir, "result_validity").is_some_and(|v| v == "VALID")
    }

    fn p99(dir: &Path) -> f64 {
        detail_value(dir, "result_99.00_percentile_latency_ns")
            .and_then(|v| v.as_f64())
            .unwrap_or_else(|| panic!("no p99 in {}", dir.display()))
    }

    /// The highest target QPS whose Server run is VALID: double, then bisect.
    fn peak(&self, sut: &str, extra: &[&str], tag: &str) -> f64 {
        let secs = self.secs(4);
        let (mut lo, mut hi) = (0.0, 10_000.0);
        while Self::valid(&self.server(sut, hi, secs, extra, tag)) {
            lo = hi;
            hi *= 2.0;
        }
        while hi - lo > lo * 0.05 && hi - lo > 1000.0 {
            let mid = (lo + hi) / 2.0;
            if Self::valid(&self.server(sut, mid, secs, extra, tag)) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// Scrapes every address's /metrics once a second until dropped.
struct Scraper(Arc<AtomicBool>);

impl Scraper {
    fn start(addrs: Vec<String>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                for a in &addrs {
                    if let Ok(mut c) = TcpStream::connect(a) {
                        let _ = write!(c, "GET /metrics HTTP/1.1\r\nHost: {a}\r\n\r\n");
                        let _ = c.read_to_end(&mut Vec::new());
                    }
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        });
        Self(stop)
    }
}

impl Drop for Scraper {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Rounds of each measurement; the median is printed.
const REPS: usize = 3;

/// The columns with their indices, round `r` starting at column `r` (modulo
/// their number): rounds start with different columns, so that none always
/// runs first after a pause or always right after the same other one.
fn rotated<T>(columns: &[T], r: usize) -> impl Iterator<Item = (usize, &T)> {
    let n = columns.len();
    (0..n).map(move |i| ((i + r) % n, &columns[(i + r) % n]))
}

fn main() {
    let bench = Bench {
        quick: std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1"),
        loadgen: tests::build_release(),
    };
    let plain = SutNode::start("bench-observe-off", &["--threads", "1"]);
    let node = SutNode::start(
        "bench-observe-metrics",
        &["--threads", "1", "--metrics", "127.0.0.1:0"],
    );
    let node_metrics = node.metrics.clone().expect("the node's metrics address");
    // The collector keeps a few spans and counts the rest.
    let collector = Collector::keeping(10_000);
    let traced = SutNode::start(
        "bench-observe-all",
        &[
            "--threads",
            "1",
            "--metrics",
            "127.0.0.1:0",
            "--otlp",
            &collector.endpoint,
        ],
    );
    let traced_metrics = traced.metrics.clone().expect("the node's metrics address");
    let loadgen_metrics = {
        let l = TcpListener::bind("127.0.0.1:0").expect("a free port");
        l.local_addr().expect("its address").to_string()
    };
    let off = ["--progress-interval", "0"];
    let metrics_on = [
        "--progress-interval",
        "0",
        "--metrics",
        loadgen_metrics.as_str(),
    ];
    let all_on = [
        "--progress-interval",
        "1",
        "--metrics",
        loadgen_metrics.as_str(),
        "--otlp",
        collector.endpoint.as_str(),
    ];
    // The three columns: label, node, loadgen flags, addresses scraped.
    let columns: [(&str, &str, &[&str], Vec<String>); 3] = [
        ("off", &plain.addr, &off, vec![]),
        (
            "metrics",
            &node.addr,
            &metrics_on,
            vec![node_metrics.clone(), loadgen_metrics.clone()],
        ),
        (
            "all",
            &traced.addr,
            &all_on,
            vec![traced_metrics.clone(), loadgen_metrics.clone()],
        ),
    ];
    println!("observability overhead (one sut-node, --threads 1, loopback, 64-byte samples)");

    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let part = |name: &str| only.is_empty() || only == name;
    let secs = bench.secs(8);
    if part("latency") {
        let qps = 50_000.0;
        // p99 of the null SUT and of each column, per round, interleaved.
        let mut p99s: Vec<[f64; 4]> = Vec::new();
        for r in 0..REPS {
            let mut round = [
                Bench::p99(&bench.server("null", qps, secs, &off, "null")),
                0.0,
                0.0,
                0.0,
            ];
            for (k, (label, addr, flags, scraped)) in rotated(&columns, r) {
                let _scraping = Scraper::start(scraped.clone());
                round[k + 1] = Bench::p99(&bench.server(addr, qps, secs, flags, label));
            }
            p99s.push(round);
        }
        let m = |k: usize| tests::median(p99s.iter().map(|r| r[k]));
        let (null, p_off, p_on, p_all) = (m(0), m(1), m(2), m(3));
        println!(
            "  p99 added at {qps} QPS (median of {REPS}): all off {:>8.1} us | metrics on, scraped {:>8.1} us ({:>+7.1}) | all on {:>8.1} us ({:>+7.1})",
            (p_off - null) / 1e3,
            (p_on - null) / 1e3,
            (p_on - p_off) / 1e3,
            (p_all - null) / 1e3,
            (p_all - p_off) / 1e3,
        );
        println!(
            "    per round (null, off, metrics, all; us): {}",
            p99s.iter()
                .map(|r| format!(
                    "{:.0}/{:.0}/{:.0}/{:.0}",
                    r[0] / 1e3,
                    r[1] / 1e3,
                    r[2] / 1e3,
                    r[3] / 1e3
                ))
                .collect::<Vec<_>>()
                .join("  ")
        );
    }
    if part("peak") {
        // One search for the plain column's peak P, then every column at the
        // same rates, from 1.10 P down in steps of 2.5 % of P, REPS runs each,
        // interleaved: a column's peak is the highest rate at which most of
        // its runs were VALID. A single search per column moves by a step or
        // two (5 %) from one try to the next on two cores; runs paired at the
        // same rates resolve the columns' difference far better.
        let (label, addr, flags, scraped) = &columns[0];
        let searched = {
            let _scraping = Scraper::start(scraped.clone());
            bench.peak(addr, flags, &format!("peak-{label}"))
        };
        let mut peaks: [Option<f64>; 3] = [None; 3];
        let mut tally: Vec<(f64, [usize; 3])> = Vec::new();
        for step in 0..=16u32 {
            let qps = (searched * (1.10 - 0.025 * f64::from(step))).round();
            let mut valid = [0usize; 3];
            for r in 0..REPS {
                for (k, (label, addr, flags, scraped)) in rotated(&columns, r) {
                    if peaks[k].is_some() {
                        continue;
                    }
                    let _scraping = Scraper::start(scraped.clone());
                    let dir =
                        bench.server(addr, qps, bench.secs(4), flags, &format!("peak-{label}"));
                    valid[k] += usize::from(Bench::valid(&dir));
                }
            }
            for (k, peak) in peaks.iter_mut().enumerate() {
                if peak.is_none() && 2 * valid[k] > REPS {
                    *peak = Some(qps);
                }
            }
            tally.push((qps, valid));
            if peaks.iter().all(Option::is_some) {
                break;
            }
        }
        let q = |k: usize| peaks[k].unwrap_or(f64::NAN);
        let (q_off, q_on, q_all) = (q(0), q(1), q(2));
        println!(
            "  highest VALID Server QPS (most of {REPS} runs VALID; rates 2.5 % apart): all off {q_off:>9.0} | metrics on, scraped {q_on:>9.0} ({:.3}x) | all on {q_all:>9.0} ({:.3}x)",
            q_on / q_off,
            q_all / q_off
        );
        println!(
            "    VALID runs per rate (off/metrics/all; - once a column has its peak; search gave {searched:.0}): {}",
            tally
                .iter()
                .map(|(qps, v)| {
                    let n = |k: usize| {
                        if peaks[k].is_some_and(|p| p > *qps) {
                            "-".to_string()
                        } else {
                            v[k].to_string()
                        }
                    };
                    format!("{:.0}k {}/{}/{}", qps / 1e3, n(0), n(1), n(2))
                })
                .collect::<Vec<_>>()
                .join("  ")
        );
        if tally
            .first()
            .is_some_and(|(top, _)| peaks.contains(&Some(*top)))
        {
            println!("    (a column VALID at the highest rate tried may reach more)");
        }
    }
    if !part("cpu") {
        return;
    }
    // CPU per sample at a fixed rate, every column and OTLP and progress
    // lines alone, interleaved.
    let otlp_alone = [
        "--progress-interval",
        "0",
        "--otlp",
        collector.endpoint.as_str(),
    ];
    let progress_alone = ["--progress-interval", "1"];
    let traced_plain = SutNode::start(
        "bench-observe-otlp",
        &["--threads", "1", "--otlp", &collector.endpoint],
    );
    let cpu_columns: [(&str, &SutNode, &[&str], Vec<String>); 5] = [
        ("off", &plain, &off, vec![]),
        (
            "metrics",
            &node,
            &metrics_on,
            vec![node_metrics.clone(), loadgen_metrics.clone()],
        ),
        ("OTLP", &traced_plain, &otlp_alone, vec![]),
        ("progress", &plain, &progress_alone, vec![]),
        (
            "all",
            &traced,
            &all_on,
            vec![traced_metrics.clone(), loadgen_metrics.clone()],
        ),
    ];
    let fixed = 200_000.0;
    let mut cpu: Vec<Vec<(f64, f64)>> = vec![Vec::new(); cpu_columns.len()];
    for r in 0..REPS {
        for (k, (label, n, flags, scraped)) in rotated(&cpu_columns, r) {
            let _scraping = Scraper::start(scraped.clone());
            let (node0, lg0) = (tests::cpu_secs(n.pid()), tests::children_cpu_secs());
            let dir = bench.server(&n.addr, fixed, secs, flags, &format!("cpu-{label}"));
            let (node1, lg1) = (tests::cpu_secs(n.pid()), tests::children_cpu_secs());
            let samples = detail_value(&dir, "result_query_count")
                .and_then(|v| v.as_f64())
                .unwrap_or(f64::NAN);
            cpu[k].push(((node1 - node0) / samples * 1e9, (lg1 - lg0) / samples * 1e9));
        }
    }
    println!("  CPU per sample at {fixed} QPS (median of {REPS}; node + loadgen-node, ns):");
    let m =
        |k: usize, i: usize| tests::median(cpu[k].iter().map(|c| if i == 0 { c.0 } else { c.1 }));
    let (base_node, base_lg) = (m(0, 0), m(0, 1));
    for (k, (label, ..)) in cpu_columns.iter().enumerate() {
        let (n, l) = (m(k, 0), m(k, 1));
        println!(
            "    {label:<9} {n:>6.0} + {l:>6.0} = {:>6.0}  ({:>+5.0} vs off, {:.3}x)",
            n + l,
            n + l - base_node - base_lg,
            (n + l) / (base_node + base_lg)
        );
    }
    println!(
        "  spans received by the collector: {} (ratio 0.001 by default)",
        collector.seen()
    );
}
