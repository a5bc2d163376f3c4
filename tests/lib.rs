//! Helpers shared by the end-to-end tests: the workspace's binaries started
//! as real processes on 127.0.0.1, and readers of the logs they leave.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test support: a failed expectation is the calling test's failure

pub mod collector;
pub mod hostile;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub use testkit::{ClosedPort, Scratch};

/// A binary of this workspace, built next to the test executable
/// (`tests/run.sh` builds them all first), or in `$MLPERF_NET_BINARIES` when
/// set (another build, for a bench to compare).
pub fn binary(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("MLPERF_NET_BINARIES") {
        return PathBuf::from(dir).join(name);
    }
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target directory");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the binaries first (cargo build --workspace --bins)",
        path.display()
    );
    path
}

/// The data set of the end-to-end tests: small samples and a small data
/// set, as these tests check behaviour, not bandwidth.
pub const SMALL_DATA: &[&str] = &[
    "--model",
    "resnet50",
    "--sample-bytes",
    "64",
    "--total-sample-count",
    "300",
    "--performance-sample-count",
    "100",
    "--no-trace",
];

/// A `sut-node serve` process, stopped (SIGKILL) when dropped.
pub struct SutNode {
    pub name: String,
    /// The address of the ready line: gRPC's (QUIC's with `--no-grpc`).
    pub addr: String,
    /// QUIC's address, when the node serves QUIC.
    pub quic: Option<String>,
    /// The address of its /metrics page, with `--metrics`.
    pub metrics: Option<String>,
    /// The SHA-256 fingerprint of its TLS certificate, when it has one.
    pub fingerprint: Option<String>,
    child: Child,
}

impl SutNode {
    /// Starts a synthetic sut-node on a free loopback port and waits for its
    /// ready line.
    pub fn start(name: &str, extra: &[&str]) -> SutNode {
        Self::start_at("127.0.0.1:0", name, extra)
    }

    /// `start`, listening on `listen` (`host:port`; port 0 picks one).
    pub fn start_at(listen: &str, name: &str, extra: &[&str]) -> SutNode {
        Self::spawn(Command::new(binary("sut-node")), listen, name, extra)
    }

    /// `start`, with the node's threads kept to the CPUs of `cpus`
    /// (`taskset`'s list, e.g. `1-3`): for benches that keep the two ends
    /// of the network on separate cores, as on separate hosts.
    pub fn start_on_cpus(cpus: &str, name: &str, extra: &[&str]) -> SutNode {
        let mut taskset = Command::new("taskset");
        taskset.args(["-c", cpus]).arg(binary("sut-node"));
        Self::spawn(taskset, "127.0.0.1:0", name, extra)
    }

    fn spawn(command: Command, listen: &str, name: &str, extra: &[&str]) -> SutNode {
        Self::try_spawn(command, listen, name, extra).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `start_at`, returning what the node said on stderr if it ended before
    /// its ready line (e.g. its port was taken).
    pub fn try_start_at(listen: &str, name: &str, extra: &[&str]) -> Result<SutNode, String> {
        Self::try_spawn(Command::new(binary("sut-node")), listen, name, extra)
    }

    fn try_spawn(
        mut command: Command,
        listen: &str,
        name: &str,
        extra: &[&str],
    ) -> Result<SutNode, String> {
        let mut child = command
            .args(["serve", "--listen", listen, "--name", name])
            .args(["--backend", "synthetic"])
            .env("RUST_LOG", "warn")
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sut-node starts");
        let stdout = child.stdout.take().expect("piped stdout");
        // Its stderr goes on to ours; the fingerprint line is kept, and the
        // lines before the ready line, for the error of a node that ends
        // before it.
        let stderr = child.stderr.take().expect("piped stderr");
        let (fp_tx, fp_rx) = mpsc::channel();
        let said = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let said_by_node = said.clone();
        let printer = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split(" fingerprint ").nth(1) {
                    let fp = rest.split_whitespace().next().unwrap_or_default();
                    let _ = fp_tx.send(fp.to_string());
                }
                if let Ok(mut said) = said_by_node.lock() {
                    if said.len() < 64 << 10 {
                        said.push_str(&line);
                        said.push('\n');
                    }
                }
                eprintln!("{line}");
            }
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let line = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = printer.join();
                let said = said.lock().map(|s| s.clone()).unwrap_or_default();
                return Err(format!("sut-node {name} printed no ready line:\n{said}"));
            }
        };
        let addr = line
            .split(" ready on ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected ready line: {line}"))
            .to_string();
        let quic = line
            .split(" quic ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .map(String::from);
        let metrics = line
            .split(" metrics ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .map(String::from);
        // Printed before the ready line, when the node has a certificate.
        let has_tls = quic.is_some() || extra.iter().any(|a| a.starts_with("--tls"));
        let fingerprint = has_tls
            .then(|| fp_rx.recv_timeout(Duration::from_secs(5)).ok())
            .flatten();
        Ok(SutNode {
            name: name.to_string(),
            addr,
            quic,
            metrics,
            fingerprint,
            child,
        })
    }

    /// Starts `n` nodes named `PREFIX-1`... concurrently (each waits for its
    /// backend's warm-up), all with `extra`.
    pub fn start_many(prefix: &str, n: usize, extra: &[&str]) -> Vec<SutNode> {
        std::thread::scope(|s| {
            let started: Vec<_> = (1..=n)
                .map(|i| s.spawn(move || SutNode::start(&format!("{prefix}-{i}"), extra)))
                .collect();
            started
                .into_iter()
                .map(|h| h.join().expect("a node starts"))
                .collect()
        })
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Kills the node at once, as a crashed host would vanish.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for SutNode {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The `--sut` value for these nodes.
pub fn sut_list(nodes: &[SutNode]) -> String {
    nodes
        .iter()
        .map(|n| n.addr.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// The `--sut` value reaching these nodes over QUIC.
pub fn quic_list(nodes: &[SutNode]) -> String {
    nodes
        .iter()
        .map(|n| {
            format!(
                "quic://{}",
                n.quic.as_deref().expect("the node serves QUIC")
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The `--tls-pin` value for these nodes' certificates.
pub fn pins(nodes: &[SutNode]) -> String {
    nodes
        .iter()
        .map(|n| {
            n.fingerprint
                .clone()
                .expect("the node printed its fingerprint")
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The mlcommons/inference checkout that `MLPERF_INFERENCE_DIR` names, for
/// the official checker and compliance scripts; `None` (said on stderr, with
/// what is skipped) where it is unset or empty.
pub fn inference_checkout(skipping: &str) -> Option<PathBuf> {
    match std::env::var_os("MLPERF_INFERENCE_DIR").filter(|d| !d.is_empty()) {
        Some(d) => Some(PathBuf::from(d)),
        None => {
            eprintln!("MLPERF_INFERENCE_DIR is not set: skipping {skipping}");
            None
        }
    }
}

/// A fresh scratch directory for one test: the one helper of every test of
/// the workspace that needs one (a name unique within its test binary),
/// removed when the test passes and kept, its path printed, when it fails.
pub fn scratch(name: &str) -> Scratch {
    Scratch::new(name)
}

/// Runs `loadgen-node` with `args` and returns its output.
pub fn loadgen(args: &[&str]) -> Output {
    Command::new(binary("loadgen-node"))
        .args(args)
        .output()
        .expect("loadgen-node runs")
}

/// The value of the first detail-log record with `key`.
pub fn detail_value(dir: &Path, key: &str) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("mlperf_log_detail.txt")).ok()?;
    text.lines()
        .filter_map(|l| l.strip_prefix(":::MLLOG "))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["key"] == key)
        .map(|v| v["value"].clone())
}

/// Every detail line must parse: a failed run leaves complete records.
pub fn detail_is_intact(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("mlperf_log_detail.txt")).is_ok_and(|t| {
        t.lines().all(|l| {
            l.strip_prefix(":::MLLOG ")
                .is_some_and(|j| serde_json::from_str::<serde_json::Value>(j).is_ok())
        })
    })
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Starts a long Server run of `loadgen-node` with `args` (which name the
/// nodes and how to reach them), breaks `victim` with `break_it` once the run
/// is issuing, and checks that the run ends promptly: exit 2, INVALID, the
/// reason naming `victim_addr`, the detail log intact.
pub fn node_failure_ends_run(
    args: &[String],
    out: &Path,
    victim: &mut SutNode,
    victim_addr: &str,
    break_it: impl FnOnce(&mut SutNode),
) {
    use std::time::Instant;
    let mut args = args.to_vec();
    for s in [
        "target_qps=2000",
        "min_duration=60000",
        "min_query_count=100",
    ] {
        args.extend(["--set".to_string(), s.to_string()]);
    }
    args.extend(["--node-timeout", "1", "--output-dir"].map(String::from));
    args.push(out.display().to_string());
    let mut child = Command::new(binary("loadgen-node"))
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("loadgen-node starts");

    let deadline = Instant::now() + Duration::from_secs(20);
    while detail_value(out, "generated_query_count").is_none() {
        assert!(Instant::now() < deadline, "the run never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    break_it(victim);
    let broken_at = Instant::now();

    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            broken_at.elapsed() < Duration::from_secs(20),
            "the run did not end after the node failed"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = child
        .wait_with_output()
        .map(|o| text(&o.stderr))
        .unwrap_or_default();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains(victim_addr),
        "the reason names the node: {err}"
    );
    assert!(detail_is_intact(out), "the detail log is intact");
    let summary = std::fs::read_to_string(out.join("mlperf_log_summary.txt")).unwrap_or_default();
    assert!(summary.contains("Result is : INVALID"), "{summary}");
    assert!(summary.contains(victim_addr), "{summary}");
}

/// What a process used, read from /proc while it ran.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    /// Peak resident memory (VmHWM), bytes.
    pub peak_rss: u64,
    /// Most threads seen at once.
    pub threads: u64,
}

/// Waits for `child`, reading its peak memory and thread count from /proc
/// every `every` while it runs; returns its output and what it used.
pub fn wait_measured(mut child: Child, every: Duration) -> (Output, Usage) {
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
        std::thread::sleep(every);
    }
    (child.wait_with_output().expect("the process ends"), usage)
}

/// For the benches: builds the release binaries of loadgen-node and sut-node
/// and returns loadgen-node's path.
pub fn build_release() -> PathBuf {
    build_release_with(&[])
}

/// `build_release` with extra cargo arguments (features).
pub fn build_release_with(extra: &[&str]) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .args(["build", "--release", "-p", "loadgen-cli", "-p", "sut-node"])
        .args(extra);
    // What cargo sets for the running bench is not the build's: a build
    // script that watches one of them (ring's watches CARGO_MANIFEST_DIR)
    // would otherwise rebuild its crate and all above it on every bench.
    for (name, _) in std::env::vars_os() {
        let set_by_cargo = name.to_str().is_some_and(|n| {
            n.starts_with("CARGO_PKG_")
                || [
                    "CARGO_MANIFEST_DIR",
                    "CARGO_MANIFEST_PATH",
                    "CARGO_CRATE_NAME",
                    "CARGO_BIN_NAME",
                    "CARGO_PRIMARY_PACKAGE",
                    "CARGO_TARGET_TMPDIR",
                    "OUT_DIR",
                ]
                .contains(&n)
        });
        if set_by_cargo {
            build.env_remove(name);
        }
    }
    let status = build.status().expect("cargo runs");
    assert!(status.success(), "building the release binaries failed");
    binary("loadgen-node")
}

/// For the benches: the arguments of a loadgen-node run of synthetic
/// samples of `sample_bytes` against `sut` (ResNet50's settings,
/// PerformanceOnly, logs in `out`), its length set by `target_qps` and
/// `min_duration` alone (`min_query_count=1`); a pool of 256 large samples
/// or 1,024 small ones.
pub fn synthetic_run_args<'a>(
    cmd: &'a mut Command,
    sut: &str,
    scenario: &str,
    sample_bytes: usize,
    out: &Path,
) -> &'a mut Command {
    let pool = if sample_bytes > 100_000 {
        "256"
    } else {
        "1024"
    };
    cmd.args(["--sut", sut, "--model", "resnet50"])
        .args(["--scenario", scenario, "--mode", "PerformanceOnly"])
        .arg("--sample-bytes")
        .arg(sample_bytes.to_string())
        .args(["--total-sample-count", pool])
        .args(["--performance-sample-count", pool])
        .args(["--set", "min_query_count=1"])
        .args(["--no-trace", "--output-dir"])
        .arg(out)
}

/// For the benches: CPU seconds (user and system) the process `pid` has
/// used so far.
pub fn cpu_secs(pid: i32) -> f64 {
    stat_cpu_secs(&format!("/proc/{pid}/stat"))
}

/// For the benches: CPU seconds (user and system) the calling thread has
/// used so far.
pub fn thread_cpu_secs() -> f64 {
    stat_cpu_secs("/proc/thread-self/stat")
}

/// User and system CPU seconds from a /proc `stat` file.
fn stat_cpu_secs(path: &str) -> f64 {
    let stat = std::fs::read_to_string(path).expect("a /proc stat");
    // The fields after the command name (which may hold spaces), from `state`.
    let rest = &stat[stat.rfind(')').expect("a stat line") + 2..];
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // SAFETY: sysconf only reads a constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (f[11] + f[12]) / ticks
}

/// For the benches: CPU seconds used by this process's finished children so
/// far.
pub fn children_cpu_secs() -> f64 {
    // SAFETY: rusage is plain data, for which all zeros is a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes only the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

/// For the benches: the median (the upper one of an even count).
pub fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// One entry of an accuracy log (`mlperf_log_accuracy.json`).
pub struct AccuracyEntry {
    pub qsl_idx: u64,
    /// The answer's bytes, decoded from the entry's hex `data`.
    pub data: Vec<u8>,
    /// The whole entry, for the keys some benchmarks add (`token_count`).
    pub entry: serde_json::Value,
}

/// The entries of the accuracy log in `out`, in log order; panics on a log
/// that is missing or malformed.
pub fn accuracy_entries(out: &Path) -> Vec<AccuracyEntry> {
    let path = out.join("mlperf_log_accuracy.json");
    let log = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let entries: Vec<serde_json::Value> =
        serde_json::from_str(&log).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    entries
        .into_iter()
        .map(|entry| {
            let qsl_idx = entry["qsl_idx"].as_u64().expect("qsl_idx");
            let hex = entry["data"].as_str().expect("data");
            let data = (0..hex.len())
                .step_by(2)
                .map(|i| {
                    u8::from_str_radix(hex.get(i..i + 2).unwrap_or("?"), 16).expect("hex data")
                })
                .collect();
            AccuracyEntry {
                qsl_idx,
                data,
                entry,
            }
        })
        .collect()
}

/// The files of a submission tree's results that the official submission
/// checker (mlcommons/inference, tools/submission) does not allow where they
/// are, one line each; empty when the tree holds only what it reads.
pub fn files_the_checker_refuses(results: &Path) -> Vec<String> {
    let mut refused = Vec::new();
    for system in subfolders(results) {
        for benchmark in subfolders(&results.join(&system)) {
            for scenario in subfolders(&results.join(&system).join(&benchmark)) {
                let dir = results.join(&system).join(&benchmark).join(&scenario);
                refused.extend(files_the_checker_refuses_in_scenario(&dir));
            }
        }
    }
    refused
}

fn subfolders(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// [`files_the_checker_refuses`] for one scenario's folder. The lists are
/// the checker's: REQUIRED_PERF_FILES and OPTIONAL_PERF_FILES for a
/// performance run, REQUIRED_ACC_FILES for an accuracy run,
/// REQUIRED_COMP_PER_FILES for an audit's run, REQUIRED_TEST01_ACC_FILES for
/// TEST01's accuracy folder and REQUIRED_MEASURE_FILES beside the runs; its
/// files_diff always lets a trace log through.
pub fn files_the_checker_refuses_in_scenario(dir: &Path) -> Vec<String> {
    const TRACE: &str = "mlperf_log_trace.json";
    const PERFORMANCE: &[&str] = &[
        "mlperf_log_summary.txt",
        "mlperf_log_detail.txt",
        "mlperf_log_accuracy.json",
        TRACE,
    ];
    const ACCURACY: &[&str] = &[
        "mlperf_log_summary.txt",
        "mlperf_log_detail.txt",
        "accuracy.txt",
        "mlperf_log_accuracy.json",
        TRACE,
    ];
    const AUDIT_ACCURACY: &[&str] = &[
        "mlperf_log_accuracy.json",
        "accuracy.txt",
        "baseline_accuracy.txt",
        "compliance_accuracy.txt",
        TRACE,
    ];
    const SCENARIO: &[&str] = &["user.conf", "README.md", "measurements.json"];
    const VERIFY: &[&str] = &["verify_accuracy.txt", "verify_performance.txt"];
    const AUDITS: &[&str] = &["TEST01", "TEST04", "TEST06"];

    fn only(dir: &Path, files: &[&str], dirs: &[&str], out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let (allowed, what) = match e.path().is_dir() {
                true => (dirs, "folder"),
                false => (files, "file"),
            };
            if !allowed.contains(&name.as_str()) {
                out.push(format!("{}: {what} {name}", dir.display()));
            }
        }
    }

    let mut out = Vec::new();
    let mut folders = vec!["accuracy", "performance"];
    folders.extend(AUDITS);
    only(dir, SCENARIO, &folders, &mut out);
    only(&dir.join("accuracy"), ACCURACY, &[], &mut out);
    only(&dir.join("performance"), &[], &["run_1"], &mut out);
    only(&dir.join("performance/run_1"), PERFORMANCE, &[], &mut out);
    for audit in AUDITS {
        let t = dir.join(audit);
        only(&t, VERIFY, &["accuracy", "performance"], &mut out);
        only(&t.join("accuracy"), AUDIT_ACCURACY, &[], &mut out);
        only(&t.join("performance"), &[], &["run_1"], &mut out);
        only(&t.join("performance/run_1"), PERFORMANCE, &[], &mut out);
    }
    out
}

/// What the official submission checker says of a tree whose runs are
/// shortened (tests cannot wait ten minutes a run, nor for an accuracy run
/// over a whole data set) and made on a busy host: its ERROR lines about
/// those, and nothing else.
pub const SHORT_RUN_COMPLAINTS: &[&str] = &[
    "Test duration less than 600s",
    "accurcy run does not cover all dataset",
    // An audit's own verdict, read from verify_performance.txt: runs of a
    // second on a busy host may land outside its 10 %.
    "Compliance test performance check in",
    // Server's early-stopping verdict on the benchmark's latency bound (15 ms
    // for ResNet50, which a tree may not loosen): a run of 700 queries passes
    // with at most one query past it, and a 2-core host running other tests
    // beside it can put a dozen there. "Run unsuccessful" is Server's wording
    // only, so the other scenarios' verdicts still count.
    "Early stopping condition was not met, msg= * Run unsuccessful.",
];

/// The checker's ERROR lines that only sum up the others (a folder whose
/// checks failed, a result not counted, the verdict).
pub const CHECKER_SUMMING_UP: &[&str] = &[
    "Checks failed for",
    "NoResults",
    "SUMMARY: submission has errors",
];

/// Runs `loadgen-node` with `args` and returns its output with its peak
/// resident memory in bytes (from the kernel's accounting of the waited-for
/// process, `wait4`).
// The child is reaped by wait4, which also gives its peak memory.
#[allow(clippy::zombie_processes)]
pub fn loadgen_measured(args: &[&str]) -> (Output, u64) {
    use std::io::Read;
    let mut child = Command::new(binary("loadgen-node"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("loadgen-node starts");
    let read = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = read(Box::new(child.stdout.take().expect("stdout")));
    let err = read(Box::new(child.stderr.take().expect("stderr")));
    let mut status = 0;
    // SAFETY: rusage is plain data the kernel fills in; the pid is our
    // child's, not yet waited for.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    // SAFETY: both pointers are to live locals the kernel fills in.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(rc, pid, "wait4: {}", std::io::Error::last_os_error());
    use std::os::unix::process::ExitStatusExt;
    let output = Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    };
    (output, usage.ru_maxrss as u64 * 1024)
}

/// Starts a long Server run (20 s) of `engine` on `node` into `out`, with a
/// trace, and returns it once it issues.
pub fn long_server_run(node: &SutNode, out: &Path, engine: &str) -> Child {
    let child = Command::new(binary("loadgen-node"))
        .args(["--engine", engine, "--sut", &node.addr])
        .args(["--model", "resnet50", "--sample-bytes", "64"])
        .args([
            "--total-sample-count",
            "1000",
            "--performance-sample-count",
            "1000",
        ])
        .args(["--scenario", "Server", "--mode", "PerformanceOnly"])
        .args(["--set", "target_qps=1500", "--set", "min_duration=20000"])
        .args(["--set", "min_query_count=100", "--progress-interval", "0"])
        .arg("--output-dir")
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("loadgen-node starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while detail_value(out, "generated_query_count").is_none() {
        assert!(Instant::now() < deadline, "the run never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Waits for a run that must end within 20 s (its disk filled, say); its
/// exit status and stderr.
pub fn ends_soon(mut child: Child) -> (Option<i32>, String) {
    let since = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        assert!(
            since.elapsed() < Duration::from_secs(20),
            "the run did not end within 20 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().expect("its output");
    (o.status.code(), text(&o.stderr))
}

/// Nodes that cannot be found: a run that looked for them would wait (up
/// to the ready timeout) for a DNS name that never resolves.
pub const NOWHERE: &[&str] = &[
    "--sut",
    "dns://nothing.invalid:50051?nodes=1",
    "--ready-timeout",
    "300",
];

/// Runs `loadgen-node` with `args` and nodes that cannot be found
/// ([`NOWHERE`]): it must end at once, refused before looking them up. Its
/// exit status and stderr.
pub fn refused_before_lookup(args: &[&str]) -> (Option<i32>, String) {
    let start = Instant::now();
    let o = loadgen(&[NOWHERE, args].concat());
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "not refused at once: {}",
        text(&o.stderr)
    );
    (o.status.code(), text(&o.stderr))
}

/// A dlrm-v3 run of `engine` holding 100 million samples at once (9.9 TB):
/// refused at once with the figures and the ways out, nothing written.
pub fn no_host_holds_this_data_set(engine: &str) {
    let out = scratch(&format!("budget-memory-{engine}"));
    let logs = out.join("logs");
    let (code, err) = refused_before_lookup(&[
        "--engine",
        engine,
        "--model",
        "dlrm-v3",
        "--total-sample-count",
        "100000000",
        "--performance-sample-count",
        "100000000",
        "--output-dir",
        logs.to_str().expect("a UTF-8 path"),
    ]);
    assert_eq!(code, Some(1), "{err}");
    for part in [
        "the run does not fit in this host's memory",
        "its QSL holds 100,000,000 samples at once (9.9 TB, 98,752 bytes each)",
        "of memory",
        "available now",
        "--performance-sample-count N",
        "a dlrm-v3 submission needs 349,823",
        "--sample-bytes N",
    ] {
        assert!(err.contains(part), "{engine}: {part:?} in {err}");
    }
    assert!(!logs.exists(), "nothing was written");
}

/// A llama3.1-8b run of `engine` on a synthetic node started without
/// `--benchmark`: refused when the session opens, naming the node and the
/// reason, no test started.
pub fn an_llm_session_without_tokens_is_refused(engine: &str) {
    let name = format!("no-tokens-{engine}");
    let node = SutNode::start(&name, &[]);
    let out = scratch(&name);
    let start = Instant::now();
    let o = loadgen(&[
        "--engine",
        engine,
        "--sut",
        &node.addr,
        "--model",
        "llama3.1-8b",
        "--sample-bytes",
        "64",
        "--total-sample-count",
        "32",
        "--no-trace",
        "--output-dir",
        out.to_str().expect("a UTF-8 path"),
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "not refused at once"
    );
    for part in [
        format!("sut-node {} (name {name}): session refused", node.addr),
        "a llama3_1-8b session is judged on token latencies".into(),
        "synthetic backend answers without tokens".into(),
        "--benchmark llama3_1-8b".into(),
    ] {
        assert!(err.contains(&part), "{engine}: {part:?} in {err}");
    }
    assert!(
        !out.join("mlperf_log_detail.txt").exists(),
        "no test was started"
    );
}

/// A small filesystem of its own (a tmpfs) for a test that fills a disk,
/// mounted in a scratch directory and unmounted, with the directory
/// removed, when dropped.
pub struct SmallDisk {
    // Held only to be removed once `drop` has unmounted the filesystem in it.
    _dir: Scratch,
    mount: PathBuf,
}

impl SmallDisk {
    /// A tmpfs of `size` (mount's `size=` option: `16m`), or `None`, said
    /// on stderr with what is skipped, where this process may not mount
    /// one (it is not root).
    pub fn mount(name: &str, size: &str, skipping: &str) -> Option<SmallDisk> {
        let root = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .and_then(|u| u.split_whitespace().next().map(|id| id == "0"))
            })
            .unwrap_or(false);
        if !root {
            eprintln!("not root, so no small filesystem can be mounted: skipping {skipping}");
            return None;
        }
        let dir = scratch(name);
        let mount = dir.join("disk");
        std::fs::create_dir_all(&mount).expect("the mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&mount)
            .status()
            .expect("mount runs");
        assert!(
            status.success(),
            "cannot mount a tmpfs on {}",
            mount.display()
        );
        Some(SmallDisk { _dir: dir, mount })
    }

    /// The filesystem's root.
    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// Fills the filesystem until `leave` bytes are left free, with a file
    /// of its own.
    pub fn fill_leaving(&self, leave: u64) {
        use std::io::Write;
        let free = loadgen_engine::disk::free_bytes(&self.mount).expect("free space");
        let mut f = std::fs::File::create(self.mount.join("filler")).expect("the filler");
        let block = vec![0x5a; 1 << 16];
        let mut left = free.saturating_sub(leave);
        while left > 0 {
            let n = left.min(block.len() as u64) as usize;
            if f.write_all(&block[..n]).is_err() {
                break;
            }
            left -= n as u64;
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
    }
}

/// A data set of `n` samples of 64 bytes, as `.npy` files (`0000.npy`...)
/// in `dir`: a compliance data set, say.
pub fn npy_dataset(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        let mut dict = "{'descr': '|u1', 'fortran_order': False, 'shape': (64,), }".to_string();
        let unpadded = 10 + dict.len() + 1;
        dict.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
        dict.push('\n');
        b.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        b.extend_from_slice(dict.as_bytes());
        b.extend((0..64).map(|k| (i * 7 + k) as u8));
        std::fs::write(dir.join(format!("{i:04}.npy")), b).unwrap();
    }
}
