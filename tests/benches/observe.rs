//! What the observability features cost the timed path, side by side from
//! runs made now: the highest VALID Server QPS through one sut-node, and
//! the p99 latency added over the in-process null SUT at 50k QPS, with
//! Prometheus metrics off, on with both binaries scraped every second, and
//! metrics on plus OpenTelemetry traces (`--otlp` on both binaries, the
//! default sample ratio) exported to a local OTLP collector.
//! (The latency breakdown is always on: its cost per answer is measured by
//! `cargo test -p qdl --release --lib record_cost -- --ignored --nocapture`.)
//!
//! `cargo bench -p tests --bench observe` (builds the release binaries
//! first). BENCH_QUICK=1 shortens every run. Target: with all of it on, at
//! most 5% of peak QPS lost and at most 50 us of p99 added.

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

    fn server(&self, sut: &str, qps: f64, secs: u64, extra: &[&str], tag: &str) -> PathBuf {
        let out = scratch(&format!("bench-observe-{tag}"));
        let mut cmd = Command::new(&self.loadgen);
        cmd.args(["--sut", sut, "--model", "resnet50", "--scenario", "Server"])
            .args(["--mode", "PerformanceOnly", "--sample-bytes", "64"])
            .args(["--total-sample-count", "1024"])
            .args(["--performance-sample-count", "1024", "--no-trace"])
            .args(["--progress-interval", "0"])
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

const REPS: usize = 3;

fn main() {
    let bench = Bench {
        quick: std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1"),
        loadgen: tests::build_release(),
    };
    let node = SutNode::start(
        "bench-observe",
        &["--threads", "1", "--metrics", "127.0.0.1:0"],
    );
    let node_metrics = node.metrics.clone().expect("the node's metrics address");
    // The same node with traces exported; the collector keeps a few spans
    // and counts the rest.
    let collector = Collector::keeping(10_000);
    let traced = SutNode::start(
        "bench-observe-otlp",
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
    let metrics_on = ["--metrics", loadgen_metrics.as_str()];
    let otlp_on = [
        "--metrics",
        loadgen_metrics.as_str(),
        "--otlp",
        collector.endpoint.as_str(),
    ];
    println!("observability overhead (one sut-node, --threads 1, loopback, 64-byte samples)");

    let secs = bench.secs(8);
    let qps = 50_000.0;
    // (null, off, metrics on, metrics and OTLP on) p99 per round, interleaved.
    let mut rounds = Vec::new();
    for _ in 0..REPS {
        let null = bench.server("null", qps, secs, &[], "null");
        let off = bench.server(&node.addr, qps, secs, &[], "off");
        let on = {
            let _scraping = Scraper::start(vec![node_metrics.clone(), loadgen_metrics.clone()]);
            bench.server(&node.addr, qps, secs, &metrics_on, "on")
        };
        let otlp = {
            let _scraping = Scraper::start(vec![traced_metrics.clone(), loadgen_metrics.clone()]);
            bench.server(&traced.addr, qps, secs, &otlp_on, "otlp")
        };
        rounds.push([
            Bench::p99(&null),
            Bench::p99(&off),
            Bench::p99(&on),
            Bench::p99(&otlp),
        ]);
    }
    let m = |k: usize| tests::median(rounds.iter().map(|r| r[k]));
    let (null, off, on, otlp) = (m(0), m(1), m(2), m(3));
    println!(
        "  p99 added at {qps} QPS (median of {REPS}): metrics and OTLP off {:>8.1} us | metrics on, scraped {:>8.1} us | metrics and OTLP on {:>8.1} us | OTLP and metrics vs off {:>+7.1} us",
        (off - null) / 1e3,
        (on - null) / 1e3,
        (otlp - null) / 1e3,
        (otlp - off) / 1e3
    );

    let peak_off = bench.peak(&node.addr, &[], "peak-off");
    let peak_on = {
        let _scraping = Scraper::start(vec![node_metrics.clone(), loadgen_metrics.clone()]);
        bench.peak(&node.addr, &metrics_on, "peak-on")
    };
    let peak_otlp = {
        let _scraping = Scraper::start(vec![traced_metrics.clone(), loadgen_metrics.clone()]);
        bench.peak(&traced.addr, &otlp_on, "peak-otlp")
    };
    println!(
        "  highest VALID Server QPS: metrics and OTLP off {peak_off:>9.0} | metrics on, scraped {peak_on:>9.0} ({:.3}x) | metrics and OTLP on {peak_otlp:>9.0} ({:.3}x)",
        peak_on / peak_off,
        peak_otlp / peak_off
    );
    println!(
        "  spans received by the collector: {} (ratio 0.001 by default)",
        collector.seen()
    );
}
