//! Added latency at real sizes: 602,112-byte samples (ResNet50 fp32 inputs)
//! through loadgen-node, the QDL and one synthetic sut-node over gRPC on
//! loopback, against raw TCP moving the same bytes under the same arrival
//! process, measured side by side in one run.
//!
//! 1. The most samples/s through the QDL (Offline, as `bytes.rs` runs it).
//! 2. At 10 %, 50 % and 80 % of that, in turn: a Server run through the QDL
//!    (Poisson arrivals, a latency bound no run reaches, a node that answers
//!    at once), then `tcp-floor send` at the same rate (Poisson, open loop,
//!    as many connections as the QDL opens, a small answer per frame), and
//!    again for each round.
//!
//! The QDL's figure is the latency breakdown's `wire_and_qdl`
//! (`mlperf_net_breakdown.json`): from the QDL being handed the sample to
//! its answer decoded, less the node's own time (its queue, compute and
//! send), i.e. both ways on the wire and the QDL. Beside it, the LoadGen's
//! own latency of the same samples (the summary's percentiles: from each
//! query's scheduled time to its completion, so the issuing thread's
//! lateness and the node's time count too). tcp-floor's latency runs from
//! each sample's scheduled time to its answer read, as the LoadGen's does,
//! with a receiver that does nothing but answer.
//!
//! Both are measured in two layouts, each with its own Offline maximum:
//! - shared: every process on every core, as the two ends of the network
//!   share this host's cores;
//! - apart: the LoadGen end (loadgen-node, `tcp-floor send`) on the first
//!   core and the node end (sut-node, `tcp-floor serve`) on the others
//!   (`taskset`), as on two hosts: what a deployment sees. With the ends
//!   sharing cores, each hand-off of a sample from one thread to the next
//!   (issue, send, the node's read, batch and answer, the QDL's receive)
//!   may wait for a core taken by the other end, and the tail is that.
//!
//! `cargo bench -p tests --bench latency` (builds the release binaries
//! first). BENCH_QUICK=1 shortens every run (3 s, not 10 s).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench: a failed step ends it, saying which
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use tests::{detail_value, scratch, text, SutNode};

const BYTES: usize = 602_112;
/// The QDL's default; raw TCP uses as many connections.
const CONNECTIONS: u32 = 2;
const LOADS: [f64; 3] = [0.1, 0.5, 0.8];

/// Where the two ends run: the CPUs (`taskset` lists) of the LoadGen end
/// and of the node end, or anywhere.
struct Layout {
    name: &'static str,
    loadgen_cpus: Option<String>,
    node_cpus: Option<String>,
}

fn main() {
    let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1");
    let loadgen = tests::build_release();
    let floor = PathBuf::from(env!("CARGO_BIN_EXE_tcp-floor"));
    let secs = if quick { 3.0 } else { 10.0 };
    let rounds = 3;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut layouts = vec![Layout {
        name: "shared",
        loadgen_cpus: None,
        node_cpus: None,
    }];
    if cores >= 2 {
        layouts.push(Layout {
            name: "apart",
            loadgen_cpus: Some("0".into()),
            node_cpus: Some(format!("1-{}", cores - 1)),
        });
    }
    println!(
        "Added latency of {BYTES}-byte samples, gRPC through the QDL vs raw TCP, loopback, \
         Poisson arrivals, {secs} s a run, {rounds} rounds alternating ({cores} cores{})",
        if quick { ", BENCH_QUICK" } else { "" }
    );
    println!(
        "  microseconds; QDL: the breakdown's wire_and_qdl (the LoadGen's latency in brackets)"
    );
    let mut summary = Vec::new();
    for layout in &layouts {
        let node = match &layout.node_cpus {
            Some(cpus) => SutNode::start_on_cpus(cpus, "latency-1", &[]),
            None => SutNode::start("latency-1", &[]),
        };
        let ends = Ends {
            loadgen: &loadgen,
            floor: &floor,
            layout,
        };
        let max_sps = ends.offline(&node.addr, 2.0);
        println!();
        match (&layout.loadgen_cpus, &layout.node_cpus) {
            (Some(l), Some(n)) => println!(
                "  {}: the LoadGen end on CPU {l}, the node end on CPUs {n}",
                layout.name
            ),
            _ => println!("  {}: both ends on every core", layout.name),
        }
        println!("  most through the QDL (Offline): {max_sps:.0} samples/s");
        println!(
            "  {:>5} {:>6} {:>5} | {:>17} {:>17} {:>17} | {:>7} {:>7} {:>7} | p99 QDL/TCP",
            "load",
            "qps",
            "round",
            "QDL p50",
            "QDL p99",
            "QDL p99.9",
            "TCP p50",
            "TCP p99",
            "TCP p99.9"
        );
        for load in LOADS {
            let qps = (max_sps * load).max(1.0);
            let mut ratios = Vec::new();
            for round in 1..=rounds {
                let q = ends.server(&node.addr, qps, secs);
                let t = ends.raw_tcp(qps, secs);
                let cell = |w: f64, lg: f64| format!("{w:>7.0} ({lg:>7.0})");
                println!(
                    "  {:>4.0}% {qps:>6.0} {round:>5} | {:>17} {:>17} {:>17} | {:>7.0} {:>7.0} {:>7.0} | {:.2}x",
                    load * 100.0,
                    cell(q.wire[0], q.loadgen[0]),
                    cell(q.wire[1], q.loadgen[1]),
                    cell(q.wire[2], q.loadgen[2]),
                    t[0],
                    t[1],
                    t[2],
                    q.wire[1] / t[1]
                );
                ratios.push(q.wire[1] / t[1]);
            }
            summary.push((layout.name, load, tests::median(ratios.into_iter())));
        }
    }
    println!();
    for (layout, load, r) in summary {
        println!(
            "  {layout:>6}, {:>3.0}% load: QDL p99 / raw TCP p99, median of the rounds: {r:.2}x",
            load * 100.0
        );
    }
}

/// p50, p99, p99.9 in microseconds.
type Tail = [f64; 3];

struct QdlTail {
    wire: Tail,
    loadgen: Tail,
}

/// The programs of both ends, and where they run.
struct Ends<'a> {
    loadgen: &'a Path,
    floor: &'a Path,
    layout: &'a Layout,
}

/// `program`, kept to `cpus` if given.
fn on(cpus: &Option<String>, program: &Path) -> Command {
    match cpus {
        Some(cpus) => {
            let mut taskset = Command::new("taskset");
            taskset.args(["-c", cpus]).arg(program);
            taskset
        }
        None => Command::new(program),
    }
}

impl Ends<'_> {
    /// Samples/s of one Offline run aimed at about `secs` at 4 Gbit/s.
    fn offline(&self, sut: &str, secs: f64) -> f64 {
        let samples = (4e9 / 8.0 / BYTES as f64) * secs;
        let out = scratch("latency-offline");
        let mut cmd = self.qdl_run(sut, "Offline", &out);
        cmd.arg("--set")
            .arg(format!("target_qps={:.0}", samples / 1.1))
            .args(["--set", "min_duration=1000"]);
        run(cmd, "Offline");
        let sps = detail_value(&out, "result_samples_per_second")
            .and_then(|v| v.as_f64())
            .unwrap_or_else(|| panic!("no samples/s in {}", out.display()));
        let _ = std::fs::remove_dir_all(&out);
        sps
    }

    /// One Server run at `qps` for `secs`: its breakdown's tails.
    fn server(&self, sut: &str, qps: f64, secs: f64) -> QdlTail {
        let out = scratch("latency-server");
        let mut cmd = self.qdl_run(sut, "Server", &out);
        cmd.arg("--set")
            .arg(format!("target_qps={qps:.1}"))
            .arg("--set")
            .arg(format!("min_duration={:.0}", secs * 1000.0))
            // In ms: no run comes near it, so every run is judged on nothing
            // but its figures.
            .args(["--set", "target_latency=60000"]);
        run(cmd, "Server");
        let file = out.join("mlperf_net_breakdown.json");
        let json: serde_json::Value = std::fs::read_to_string(&file)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_else(|| panic!("no breakdown in {}", file.display()));
        let tail = |part: &str| -> Tail {
            ["p50", "p99", "p999"].map(|q| {
                json["overall"][part][q]
                    .as_f64()
                    .unwrap_or_else(|| panic!("{part} {q} missing in {}", file.display()))
                    / 1e3
            })
        };
        let summary = out.join("mlperf_log_summary.txt");
        let summary = std::fs::read_to_string(&summary)
            .unwrap_or_else(|e| panic!("{}: {e}", summary.display()));
        let percentile = |p: &str| -> f64 {
            let key = format!("{p} percentile latency (ns)");
            summary
                .lines()
                .find(|l| l.starts_with(&key))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or_else(|| panic!("no {key} in the summary"))
                / 1e3
        };
        let t = QdlTail {
            wire: tail("wire_and_qdl"),
            loadgen: ["50.00", "99.00", "99.90"].map(percentile),
        };
        let _ = std::fs::remove_dir_all(&out);
        t
    }

    fn qdl_run(&self, sut: &str, scenario: &str, out: &Path) -> Command {
        let mut cmd = on(&self.layout.loadgen_cpus, self.loadgen);
        tests::synthetic_run_args(&mut cmd, sut, scenario, BYTES, out)
            .arg("--connections-per-node")
            .arg(CONNECTIONS.to_string());
        cmd
    }

    /// `tcp-floor send` at `qps` for `secs` to a fresh `tcp-floor serve`:
    /// its p50, p99 and p99.9 in microseconds.
    fn raw_tcp(&self, qps: f64, secs: f64) -> Tail {
        let mut serve: Child = on(&self.layout.node_cpus, self.floor)
            .arg("serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("tcp-floor serve starts");
        let mut serve_out = BufReader::new(serve.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        serve_out.read_line(&mut line).expect("tcp-floor's port");
        let port: u16 = line
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("tcp-floor serve printed {line:?}, not its port"));
        let o = on(&self.layout.loadgen_cpus, self.floor)
            .args(["send", "--connect", &format!("127.0.0.1:{port}")])
            .args(["--streams", &CONNECTIONS.to_string()])
            .args(["--bytes", &BYTES.to_string()])
            .args(["--secs", &format!("{secs}")])
            .args(["--rate", &format!("{qps:.1}")])
            .output()
            .expect("tcp-floor send runs");
        // Its stdin closes: it prints its counts and ends.
        drop(serve.stdin.take());
        let _ = std::io::copy(&mut serve_out, &mut std::io::sink());
        let _ = serve.wait();
        assert!(
            o.status.success(),
            "tcp-floor send failed: {}",
            text(&o.stderr)
        );
        let out = text(&o.stdout);
        let json: serde_json::Value = out
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("no JSON line from tcp-floor send: {out}"));
        ["p50_us", "p99_us", "p999_us"].map(|k| {
            json[k]
                .as_f64()
                .unwrap_or_else(|| panic!("{k} missing from tcp-floor's {json}"))
        })
    }
}

fn run(mut cmd: Command, what: &str) {
    let o = cmd.output().expect("loadgen-node runs");
    assert!(
        o.status.success(),
        "loadgen-node failed ({what}): {}",
        text(&o.stderr)
    );
}
