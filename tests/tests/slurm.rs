//! deploy/slurm/mlperf-net.sbatch on a real Slurm cluster: one host acting
//! as the cluster (slurmctld, slurmd and munge from Debian's packages, which
//! tests/slurm/run.sh configures, starts and passes here as
//! MLPN_SLURM_CONF). Four sut-nodes per host, one per task, as one per GPU
//! would be. Skipped, saying so, without that variable.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::collections::BTreeMap;
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tests::{binary, detail_value, loadgen, scratch, text, SutNode};

/// sut-node flags of every job: nodes slow enough (4 ms a sample, one at a
/// time) that the Offline run below lasts its min_duration, so is VALID.
const SUT_ARGS: &str =
    "--backend synthetic --benchmark resnet50 --max-batch-size 1 --service-time fixed:4000";

/// loadgen-node flags of a short run: 2,200 samples, over 4 nodes at most
/// 1,000/s.
const RUN_ARGS: &str = "--model resnet50 --scenario Offline --mode PerformanceOnly \
    --sample-bytes 64 --total-sample-count 1024 --set target_qps=1000 \
    --set min_duration=2000 --set min_query_count=100 --no-trace";

const TASKS: usize = 4;

/// One job at a time: each takes the host's ports and CPUs.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn cluster() -> Option<String> {
    let conf = std::env::var("MLPN_SLURM_CONF").ok();
    if conf.is_none() {
        println!(
            "slurm test: skipped (MLPN_SLURM_CONF is not set; tests/slurm/run.sh starts a \
             one-host cluster and runs it)"
        );
    }
    conf
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/slurm/mlperf-net.sbatch")
}

/// `TASKS` consecutive ports free for TCP and UDP on 127.0.0.1.
fn free_ports() -> u16 {
    for _ in 0..100 {
        let first = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        if first > u16::MAX - TASKS as u16 {
            continue;
        }
        let free = (first..first + TASKS as u16).all(|p| {
            TcpListener::bind(("127.0.0.1", p)).is_ok() && UdpSocket::bind(("127.0.0.1", p)).is_ok()
        });
        if free {
            return first;
        }
    }
    panic!("no {TASKS} consecutive free ports");
}

/// A job's settings.
struct Job {
    conf: String,
    dir: tests::Scratch,
    port: u16,
    sut_args: String,
    run_args: String,
}

impl Job {
    fn new(conf: &str, tag: &str) -> Job {
        Job {
            conf: conf.to_string(),
            dir: scratch(&format!("slurm-{tag}")),
            port: free_ports(),
            sut_args: SUT_ARGS.to_string(),
            run_args: RUN_ARGS.to_string(),
        }
    }

    fn results(&self) -> PathBuf {
        self.dir.join("results")
    }

    /// `sbatch` with this job's settings and `extra` flags.
    fn sbatch(&self, extra: &[&str]) -> Command {
        let export = [
            "ALL".to_string(),
            format!("SUT_NODE={}", binary("sut-node").display()),
            format!("LOADGEN_NODE={}", binary("loadgen-node").display()),
            format!("SUT_PORT={}", self.port),
            "SUT_LISTEN=127.0.0.1".to_string(),
            format!("RESULTS_DIR={}", self.results().display()),
            format!("SUT_ARGS={}", self.sut_args),
            format!("LOADGEN_ARGS={}", self.run_args),
            "READY_TIMEOUT=60".to_string(),
        ];
        let mut c = Command::new("sbatch");
        c.env("SLURM_CONF", &self.conf)
            .args(["--nodes=1", &format!("--ntasks-per-node={TASKS}")])
            .arg(format!("--output={}", self.dir.join("job.out").display()))
            .arg(format!("--export={}", export.join(",")))
            .args(extra)
            .arg(script());
        c
    }

    /// Submits the job and waits for it; its id, exit status and output.
    /// The ports were free when chosen: a job in which a node found its
    /// port taken meanwhile is run again on others.
    fn run(&mut self) -> (String, Option<i32>, String) {
        for _ in 0..5 {
            let o = self.sbatch(&["--wait"]).output().expect("sbatch runs");
            let out = std::fs::read_to_string(self.dir.join("job.out")).unwrap_or_default();
            let taken = !o.status.success()
                && self
                    .node_logs()
                    .values()
                    .any(|log| testkit::says_address_in_use(log));
            if !taken {
                return (
                    job_id(&text(&o.stdout)),
                    o.status.code(),
                    format!("{}{}{out}", text(&o.stdout), text(&o.stderr)),
                );
            }
            let _ = std::fs::remove_dir_all(self.results());
            self.port = free_ports();
        }
        panic!("a node found its port taken in every one of 5 jobs");
    }

    /// Each node's log, by file name.
    fn node_logs(&self) -> BTreeMap<String, String> {
        let dir = self.results().join("nodes");
        std::fs::read_dir(&dir)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| {
                        (
                            e.file_name().to_string_lossy().into_owned(),
                            std::fs::read_to_string(e.path()).unwrap_or_default(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The sut-node processes Slurm started for job `id` (their environment
/// names the job).
fn job_nodes(id: &str) -> Vec<u32> {
    let ours = binary("sut-node");
    let tag = format!("SLURM_JOB_ID={id}");
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == ours)
                && std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == tag.as_bytes()))
        })
        .collect()
}

fn assert_no_node_left(id: &str, what: &str) {
    // The job's end is its batch script's: the nodes are gone by then.
    let left = job_nodes(id);
    assert!(
        left.is_empty(),
        "{what}: job {id}'s sut-nodes still run: {left:?}"
    );
}

/// The job id in sbatch's output.
fn job_id(sbatch_out: &str) -> String {
    sbatch_out
        .split_whitespace()
        .skip_while(|w| *w != "job")
        .nth(1)
        .or_else(|| sbatch_out.trim().split(';').next())
        .unwrap_or_default()
        .to_string()
}

/// The detail records a run's settings and outcome are judged by.
fn judged(dir: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(dir.join("mlperf_log_detail.txt")).expect("detail log");
    text.lines()
        .filter_map(|l| l.strip_prefix(":::MLLOG "))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            let key = v["key"].as_str()?.to_string();
            let kept = key.starts_with("effective_")
                || key.starts_with("requested_")
                || [
                    "sut_name",
                    "result_validity",
                    "generated_samples_per_query",
                    "generated_query_count",
                    "result_query_count",
                ]
                .contains(&key.as_str());
            kept.then(|| (key, v["value"].to_string()))
        })
        .collect()
}

#[test]
fn a_batch_job_runs_valid_with_every_node_and_as_a_run_by_hand() {
    let Some(conf) = cluster() else { return };
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut job = Job::new(&conf, "valid");
    let started = Instant::now();
    let (id, status, out) = job.run();
    println!("slurm job: {:.1} s", started.elapsed().as_secs_f64());
    assert_eq!(status, Some(0), "{out}");
    assert_no_node_left(&id, "after a complete run");

    let res = job.results();
    let mlperf = res.join("mlperf");
    let summary = std::fs::read_to_string(mlperf.join("mlperf_log_summary.txt")).expect("summary");
    assert!(summary.contains("Result is : VALID"), "{summary}");
    assert!(
        out.contains("Result is : VALID"),
        "the job's output says it: {out}"
    );
    let names: Vec<String> = (0..TASKS).map(|k| format!("mlpn-1-{k}")).collect();
    assert_eq!(
        detail_value(&mlperf, "sut_name").and_then(|v| v.as_str().map(String::from)),
        Some(format!("Network SUT ({TASKS} nodes: {})", names.join(", ")))
    );

    // The node list from the allocation, and the command as run.
    let list = std::fs::read_to_string(res.join("sut-nodes.txt")).expect("node list");
    let addrs: Vec<&str> = list.lines().filter(|l| !l.starts_with('#')).collect();
    let expected: Vec<String> = (0..TASKS as u16)
        .map(|k| format!("grpc://127.0.0.1:{}", job.port + k))
        .collect();
    assert_eq!(addrs, expected);
    let command = std::fs::read_to_string(res.join("command.txt")).expect("command");
    assert!(command.contains("--sut-file"), "{command}");

    // Every node's log: ready, answered samples, stopped by SIGTERM.
    let logs = job.node_logs();
    assert_eq!(logs.len(), TASKS, "{:?}", logs.keys());
    for (file, log) in &logs {
        assert!(log.contains(" ready on "), "{file}: {log}");
        assert!(log.contains("answered="), "{file}: {log}");
        assert!(
            log.contains("SIGTERM received") && log.contains("stopped"),
            "{file} was not stopped gracefully: {log}"
        );
    }

    // By hand: the same nodes (names, flags) and the same loadgen-node flags
    // give the same settings, sample counts and result.
    let hand: Vec<SutNode> = names
        .iter()
        .map(|n| SutNode::start(n, &SUT_ARGS.split(' ').collect::<Vec<_>>()))
        .collect();
    let by_hand = job.dir.join("by-hand");
    let mut args = vec!["--sut".to_string(), tests::sut_list(&hand)];
    args.extend(RUN_ARGS.split(' ').map(String::from));
    args.extend(["--output-dir".to_string(), by_hand.display().to_string()]);
    let o = loadgen(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(judged(&mlperf), judged(&by_hand));
}

#[test]
fn every_way_out_stops_the_nodes() {
    let Some(conf) = cluster() else { return };
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());

    // Nodes that cannot start: the job says so and ends, status 3.
    let mut job = Job::new(&conf, "bad-nodes");
    job.sut_args = "--backend no-such-backend".into();
    let (id, status, out) = job.run();
    assert_eq!(status, Some(3), "{out}");
    assert!(out.contains("ended before"), "{out}");
    assert_no_node_left(&id, "nodes that failed to start");

    // loadgen-node that cannot start: its status, and the nodes stopped.
    let mut job = Job::new(&conf, "bad-run");
    job.run_args = format!("{RUN_ARGS} --dispatch no-such-policy");
    let (id, status, out) = job.run();
    assert_eq!(status, Some(1), "{out}");
    let log = std::fs::read_to_string(job.results().join("loadgen-node.log")).unwrap_or_default();
    assert!(log.contains("no-such-policy"), "{log}");
    assert_no_node_left(&id, "a run that failed to start");
    for (file, log) in job.node_logs() {
        assert!(log.contains("stopped"), "{file}: {log}");
    }

    // scancel in the middle of a long run: the nodes stop, their logs stay.
    let mut job = Job::new(&conf, "cancelled");
    job.run_args = format!("{RUN_ARGS} --set min_duration=600000 --set target_qps=100");
    let o = job.sbatch(&["--parsable"]).output().expect("sbatch runs");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let id = job_id(&text(&o.stdout));
    let detail = job.results().join("mlperf");
    let deadline = Instant::now() + Duration::from_secs(60);
    while detail_value(&detail, "generated_query_count").is_none() {
        assert!(Instant::now() < deadline, "the run never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    let slurm = |args: &[&str]| -> Output {
        Command::new(args[0])
            .env("SLURM_CONF", &conf)
            .args(&args[1..])
            .output()
            .expect("a Slurm command runs")
    };
    assert_eq!(
        job_nodes(&id).len(),
        TASKS,
        "the job's nodes, found as below"
    );
    assert!(slurm(&["scancel", &id]).status.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    while !text(&slurm(&["squeue", "-h", "-j", &id]).stdout)
        .trim()
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "job {id} did not end after scancel"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_no_node_left(&id, "a cancelled job");
    let logs = job.node_logs();
    assert_eq!(logs.len(), TASKS);
    for (file, log) in logs {
        assert!(log.contains("SIGTERM received"), "{file}: {log}");
    }
}
