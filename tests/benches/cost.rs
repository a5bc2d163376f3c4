//! CPU cost of moving samples: CPU time per sample and per GB of payload on
//! the LoadGen node (loadgen-node) and on the sut-node, over gRPC, gRPC with
//! TLS and QUIC, against raw TCP (`tcp-floor send` to `tcp-floor serve`) as
//! the floor, all measured side by side in one run over loopback.
//!
//! How each figure is taken:
//! - loadgen-node and `tcp-floor send`: the CPU this process's reaped
//!   children used (`getrusage(RUSAGE_CHILDREN)`) before and after waiting
//!   for the one child that ran in between: the kernel's complete account of
//!   every thread of the process, to its exit (a /proc read just before the
//!   exit cannot be timed). The sut-nodes and `tcp-floor serve` stay up
//!   until the end, so no other child is reaped in between.
//! - sut-node and `tcp-floor serve`: /proc/PID/stat before and after the
//!   run.
//! - Fixed costs (start-up, the data set's generation, handshakes) drop
//!   out: each way runs twice, a short run (which also sizes the long one
//!   from its rate) and a long one, and a per-sample figure is the
//!   difference in CPU over the difference in samples.
//! - The synthetic backend's "inference" hashes every input byte
//!   (`facts::synthetic::answer`); that hash is timed in this process (this
//!   thread's CPU time) over a sample of the case's size, and the node's
//!   figure is also given less it, to compare with the floor's receiver,
//!   which only reads the bytes.
//!
//! - Every way runs once per round, rounds interleaved (each starting one
//!   way further on); figures are medians over the rounds, ratios medians of
//!   the ratios to raw TCP within a round.
//!
//! Per row: µs of CPU per sample and CPU-seconds per GB of payload at each
//! end, each as a ratio to raw TCP's, for the LoadGen end the cores needed
//! per 10 Gbit/s of input (CPU-s/GB x 1.25 GB/s), and both ends together
//! (the node's less the hash). Over loopback the kernel's TCP receive work
//! lands on either end, depending on which thread is running when the
//! packets arrive, so the two ends' split moves between runs more than
//! their sum does.
//!
//! `cargo bench -p tests --bench cost` (builds the release binaries first).
//! BENCH_QUICK=1 shortens every run; BENCH_CASES=name,name picks cases
//! (r50-fp32, r50-u8, bert, 64b).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench: a failed step ends it, saying which
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use tests::{children_cpu_secs, cpu_secs, detail_value, scratch, text, thread_cpu_secs, SutNode};

const TCP_FLOOR: &str = env!("CARGO_BIN_EXE_tcp-floor");

/// Connections in every way (loadgen-node's default per node).
const CONNECTIONS: u32 = 2;
/// Answer bytes: the synthetic node's default answer is 4 bytes.
const ANSWER_BYTES: &str = "4";

struct Case {
    name: &'static str,
    label: &'static str,
    bytes: usize,
}

const CASES: &[Case] = &[
    Case {
        name: "r50-fp32",
        label: "ResNet50 fp32",
        bytes: 602_112,
    },
    Case {
        name: "r50-u8",
        label: "ResNet50 uint8",
        bytes: 150_528,
    },
    Case {
        name: "bert",
        label: "BERT",
        bytes: 4_608,
    },
    Case {
        name: "64b",
        label: "64-byte samples",
        bytes: 64,
    },
];

/// One way of reaching a node through loadgen-node.
struct Way<'a> {
    label: &'static str,
    sut: String,
    flags: Vec<String>,
    node: &'a SutNode,
}

/// CPU seconds of one run at both ends, and its samples.
#[derive(Clone, Copy)]
struct Run {
    samples: f64,
    sender_cpu: f64,
    receiver_cpu: f64,
    samples_per_s: f64,
}

/// Per-sample figures: the long run less the short one.
struct Cost {
    samples_per_s: f64,
    sender_s: f64,
    receiver_s: f64,
}

impl Cost {
    fn of(short: Run, long: Run) -> Cost {
        let n = long.samples - short.samples;
        Cost {
            samples_per_s: long.samples_per_s,
            sender_s: (long.sender_cpu - short.sender_cpu) / n,
            receiver_s: (long.receiver_cpu - short.receiver_cpu) / n,
        }
    }
}

struct Bench {
    loadgen: PathBuf,
    /// Aimed length of each long run.
    secs: f64,
    /// Rounds of every way, interleaved.
    rounds: usize,
}

impl Bench {
    /// Samples of the short run: about 0.25 GB, between 64 and 200,000.
    fn short_count(bytes: usize) -> f64 {
        (0.25e9 / bytes as f64).clamp(64.0, 200_000.0).round()
    }

    /// Samples of the long run: `secs` at the short run's rate, and at
    /// least four times the short run, so that the difference dominates.
    fn long_count(&self, short: &Run) -> f64 {
        (short.samples_per_s * self.secs)
            .max(4.0 * short.samples)
            .round()
    }

    /// The short and the long run through loadgen-node.
    fn through_qdl(&self, way: &Way, case: &Case) -> Cost {
        let short = self.qdl_run(way, case, Self::short_count(case.bytes));
        let long = self.qdl_run(way, case, self.long_count(&short));
        Cost::of(short, long)
    }

    /// One Offline run of about `samples` samples.
    fn qdl_run(&self, way: &Way, case: &Case, samples: f64) -> Run {
        let out = scratch(&format!("cost-{}-{}", case.name, way.label));
        let mut cmd = Command::new(&self.loadgen);
        tests::synthetic_run_args(&mut cmd, &way.sut, "Offline", case.bytes, &out)
            .args(&way.flags)
            // Offline runs target_qps x min_duration x 1.1 samples, with
            // min_query_count=1 that and no more.
            .args(["--set", "min_duration=1000"])
            .arg("--set")
            .arg(format!("target_qps={:.0}", (samples / 1.1).max(1.0)));
        let node0 = cpu_secs(way.node.pid());
        let lg0 = children_cpu_secs();
        let o = cmd.output().expect("loadgen-node runs");
        let lg1 = children_cpu_secs();
        let node1 = cpu_secs(way.node.pid());
        if !o.status.success() {
            panic!(
                "loadgen-node failed on {} over {}: {}",
                case.name,
                way.label,
                text(&o.stderr)
            );
        }
        let run = Run {
            samples: number(&out, "generated_samples_per_query"),
            sender_cpu: lg1 - lg0,
            receiver_cpu: node1 - node0,
            samples_per_s: number(&out, "result_samples_per_second"),
        };
        let _ = std::fs::remove_dir_all(&out);
        run
    }

    /// The short and the long run of `tcp-floor send` to `server`.
    fn raw_tcp(&self, server: &FloorServer, case: &Case) -> Cost {
        let short = server.run(case.bytes, Self::short_count(case.bytes));
        let long = server.run(case.bytes, self.long_count(&short));
        Cost::of(short, long)
    }
}

/// A `tcp-floor serve` process, ended (its stdin closed) when dropped.
struct FloorServer {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    port: String,
}

impl FloorServer {
    fn start() -> FloorServer {
        let mut child = Command::new(TCP_FLOOR)
            .args(["serve", "--answer-bytes", ANSWER_BYTES])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("tcp-floor serve starts");
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut port = String::new();
        stdout.read_line(&mut port).expect("tcp-floor serve's port");
        FloorServer {
            child,
            stdin,
            stdout,
            port: port.trim().to_string(),
        }
    }

    /// `count` samples of `bytes` over `CONNECTIONS` connections, closed
    /// loop.
    fn run(&self, bytes: usize, count: f64) -> Run {
        let recv0 = cpu_secs(self.child.id() as i32);
        let send0 = children_cpu_secs();
        let o = Command::new(TCP_FLOOR)
            .args(["send", "--connect", &format!("127.0.0.1:{}", self.port)])
            .args(["--streams", &CONNECTIONS.to_string()])
            .args(["--bytes", &bytes.to_string()])
            .args(["--count", &format!("{count:.0}"), "--window", "1024"])
            .output()
            .expect("tcp-floor send runs");
        let send1 = children_cpu_secs();
        let recv1 = cpu_secs(self.child.id() as i32);
        assert!(o.status.success(), "tcp-floor send: {}", text(&o.stderr));
        let figures: serde_json::Value =
            serde_json::from_slice(&o.stdout).expect("tcp-floor send's JSON line");
        let field = |k: &str| figures[k].as_f64().expect("a number in tcp-floor's line");
        Run {
            samples: field("samples"),
            sender_cpu: send1 - send0,
            receiver_cpu: recv1 - recv0,
            samples_per_s: field("samples_per_s"),
        }
    }
}

impl Drop for FloorServer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let mut rest = String::new();
        let _ = self.stdout.read_to_string(&mut rest);
        let _ = self.child.wait();
    }
}

/// CPU seconds per sample of the synthetic backend's hash over `bytes`,
/// timed on this thread.
fn hash_secs(bytes: usize) -> f64 {
    let input = vec![0x5au8; bytes];
    // Enough calls between clock reads that reading /proc costs nothing.
    let batch = (1 << 20) / bytes.max(1) + 1;
    let start = thread_cpu_secs();
    let mut calls = 0usize;
    while thread_cpu_secs() - start < 0.3 {
        for _ in 0..batch {
            std::hint::black_box(facts::synthetic::answer(std::hint::black_box(&input), 4));
        }
        calls += batch;
    }
    (thread_cpu_secs() - start) / calls as f64
}

/// One case's table: medians over the rounds; each ratio is the median of
/// the ratios to raw TCP in the same round.
fn print_case(case: &Case, hash: f64, ways: &[Way], costs: &[Vec<Cost>]) {
    let gb = case.bytes as f64 / 1e9;
    println!();
    println!(
        "{} ({} B; the hash: {:.2} us/sample, {:.3} CPU-s/GB)",
        case.label,
        case.bytes,
        hash * 1e6,
        hash / gb
    );
    println!(
        "  {:<9} {:>11} {:>7} | {:<37} | {:<27} | {:<27} | {:<17}",
        "", "", "", "LoadGen end", "node end", "node end less the hash", "both, less hash"
    );
    println!(
        "  {:<9} {:>11} {:>7} | {:>9} {:>8} {:>8} {:>9} | {:>9} {:>8} {:>8} | {:>9} {:>8} {:>8} | {:>8} {:>8}",
        "way",
        "samples/s",
        "Gbit/s",
        "us/sample",
        "CPU-s/GB",
        "x raw",
        "cores/10G",
        "us/sample",
        "CPU-s/GB",
        "x raw",
        "us/sample",
        "CPU-s/GB",
        "x raw",
        "CPU-s/GB",
        "x raw"
    );
    let raw = &costs[0];
    // The floor's receiver has no hash to take off.
    let less = |w: usize, c: &Cost| c.receiver_s - if w == 0 { 0.0 } else { hash };
    for (w, rounds) in costs.iter().enumerate() {
        let med = |f: &dyn Fn(&Cost) -> f64| tests::median(rounds.iter().map(f));
        // f of this way over f of raw TCP, round by round.
        let ratio = |f: &dyn Fn(usize, &Cost) -> f64| {
            if w == 0 {
                String::new()
            } else {
                let r = tests::median(rounds.iter().zip(raw).map(|(c, r)| f(w, c) / f(0, r)));
                format!("{r:.2}x")
            }
        };
        let sender = med(&|c| c.sender_s);
        let receiver = med(&|c| c.receiver_s);
        let net = med(&|c| less(w, c));
        let both = med(&|c| c.sender_s + less(w, c));
        println!(
            "  {:<9} {:>11.0} {:>7.2} | {:>9.2} {:>8.3} {:>8} {:>9.3} | {:>9.2} {:>8.3} {:>8} | {:>9.2} {:>8.3} {:>8} | {:>8.3} {:>8}",
            if w == 0 { "raw TCP" } else { ways[w - 1].label },
            med(&|c| c.samples_per_s),
            med(&|c| c.samples_per_s) * gb * 8.0,
            sender * 1e6,
            sender / gb,
            ratio(&|_, c| c.sender_s),
            sender / gb * 1.25,
            receiver * 1e6,
            receiver / gb,
            ratio(&|_, c| c.receiver_s),
            net * 1e6,
            net / gb,
            ratio(&less),
            both / gb,
            ratio(&|w, c| c.sender_s + less(w, c)),
        );
    }
}

fn number(dir: &Path, key: &str) -> f64 {
    detail_value(dir, key)
        .and_then(|v| v.as_f64())
        .unwrap_or_else(|| panic!("{key} missing in {}", dir.display()))
}

fn main() {
    let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1");
    let picked: Vec<String> = std::env::var("BENCH_CASES")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    if let Some(p) = picked
        .iter()
        .find(|p| !CASES.iter().any(|c| c.name == p.as_str()))
    {
        let names: Vec<_> = CASES.iter().map(|c| c.name).collect();
        panic!("BENCH_CASES: no case {p} (cases: {})", names.join(", "));
    }
    let bench = Bench {
        loadgen: tests::build_release(),
        secs: if quick { 1.5 } else { 5.0 },
        rounds: if quick { 3 } else { 5 },
    };
    let started = std::time::Instant::now();
    let plain = SutNode::start("cost-1", &[]);
    let tls = SutNode::start("cost-2", &["--tls", "--no-quic"]);
    let pin = |n: &SutNode| vec!["--tls-pin".to_string(), n.fingerprint.clone().expect("pin")];
    let conns = vec![
        "--connections-per-node".to_string(),
        CONNECTIONS.to_string(),
    ];
    let ways = [
        Way {
            label: "gRPC",
            sut: plain.addr.clone(),
            flags: conns.clone(),
            node: &plain,
        },
        Way {
            label: "gRPC+TLS",
            sut: format!("grpcs://{}", tls.addr),
            flags: [pin(&tls), conns.clone()].concat(),
            node: &tls,
        },
        Way {
            label: "QUIC",
            sut: format!("quic://{}", plain.quic.clone().expect("QUIC address")),
            flags: [pin(&plain), conns.clone()].concat(),
            node: &plain,
        },
    ];
    let floor = FloorServer::start();

    println!(
        "CPU cost per sample and per GB of payload, loopback, Offline, {CONNECTIONS} connections \
         ({} cores, shared with everything else on the machine{})",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if quick { ", BENCH_QUICK" } else { "" }
    );
    println!(
        "  LoadGen end: loadgen-node (raw TCP: tcp-floor send); node end: sut-node (raw TCP: \
         tcp-floor serve);"
    );
    println!(
        "  medians of {} interleaved rounds; x raw: the median of the ratios to raw TCP within a \
         round; cores/10G: LoadGen cores per 10 Gbit/s of input; less the hash: the node's CPU \
         less the synthetic backend's hash of every input byte",
        bench.rounds
    );
    for case in CASES {
        if !picked.is_empty() && !picked.iter().any(|p| p == case.name) {
            continue;
        }
        let hash = hash_secs(case.bytes);
        // costs[w][r]: way w (0: raw TCP) in round r; each round starts one
        // way further on, so that no way always runs first.
        let mut costs: Vec<Vec<Cost>> = (0..=ways.len()).map(|_| Vec::new()).collect();
        for round in 0..bench.rounds {
            for k in 0..=ways.len() {
                let w = (k + round) % (ways.len() + 1);
                let cost = match w {
                    0 => bench.raw_tcp(&floor, case),
                    _ => bench.through_qdl(&ways[w - 1], case),
                };
                costs[w].push(cost);
            }
        }
        print_case(case, hash, &ways, &costs);
    }
    drop(floor);
    println!();
    println!("({:.0} s)", started.elapsed().as_secs_f64());
    let _ = std::io::stdout().flush();
}
