//! Our engine with its in-process null SUT against the official MLPerf
//! LoadGen (`mlcommons-loadgen` from PyPI) with a Python null SUT
//! (`official_null_sut.py`), on the same settings, side by side.
//!
//! Run with `cargo bench -p loadgen-engine --bench vs_official`. Environment:
//!
//! | variable                   | default            | meaning                                   |
//! |----------------------------|--------------------|-------------------------------------------|
//! | `BENCH_QUICK=1`            | off                | shorter runs everywhere (about a minute)  |
//! | `BENCH_ONLY`               | all                | comma list: offline,server,singlestream,memory,sidefile |
//! | `BENCH_OFFLINE_QPS`        | 4000000 (1000000)  | Offline expected QPS (1 s run)            |
//! | `BENCH_REPEAT`             | 3 (1)              | Offline and SingleStream runs; best kept  |
//! | `BENCH_SERVER_RUN_MS`      | 1000 (500)         | duration of each Server probe             |
//! | `BENCH_SERVER_TOLERANCE`   | 0.05 (0.10)        | bisection stops when hi/lo <= 1 + this    |
//! | `BENCH_SERVER_START_QPS`   | 100000             | first Server probe                        |
//! | `BENCH_SERVER_LATENCY_MS`  | 100                | Server latency bound (99th percentile)    |
//! | `BENCH_SS_QUERIES`         | 200000 (50000)     | SingleStream query count                  |
//! | `BENCH_MEM_SECS`           | 10 (2)             | Server duration of the peak-RSS runs      |
//! | `BENCH_MEM_QPS`            | 1000000            | Server target QPS of the peak-RSS runs    |
//! | `BENCH_PYTHON`             | python3            | interpreter for the official LoadGen      |
//! | `BENCH_SKIP_OFFICIAL=1`    | off                | our figures only                          |
//! | `LOADGEN_NODE_BIN`         | built by the bench | the `loadgen-node` binary for peak RSS    |
//! | `BENCH_KEEP_LOGS=1`        | off                | keep the MLPerf logs and print where      |
//! | `BENCH_SIDE_ROUNDS`        | 5 (3)              | rounds of the side-file section           |
//!
//! The `sidefile` section runs our engine alone, with and without the
//! per-sample latency side file (`mlperf_net_latencies.bin`, written by the
//! aggregator thread), alternating which goes first in each round: Offline
//! samples/s, SingleStream µs/query and the Server peak, medians and the
//! ratio with the file to without. It is in the default `BENCH_ONLY` list.
//!
//! Values in parentheses are the `BENCH_QUICK=1` defaults.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench: a failed step ends it, saying which

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt::Display;
use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use loadgen_engine::latency_file::{self, LatencyFileSettings};
use loadgen_engine::null_sut::{NullSut, SizedQsl};
use loadgen_engine::runner::{start_test, LogSettings};
use loadgen_engine::{Scenario, TestMode, TestSettings};
use serde_json::Value;

const OFFICIAL_VERSION: &str = "6.0.17";
const OFFICIAL_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/official_null_sut.py");

// The seeds of mlperf.conf, so both engines draw the same samples and schedule.
const QSL_RNG_SEED: u64 = 2085463073848966840;
const SAMPLE_INDEX_RNG_SEED: u64 = 2747215439041700203;
const SCHEDULE_RNG_SEED: u64 = 16159082839903944936;

/// First argument of the peak-RSS probe mode of this binary.
const PROBE_ARG: &str = "--peak-rss-probe";

const SAMPLE_COUNT: usize = 1024;
/// resnet50's Server latency bound in mlperf.conf, which `loadgen-node
/// --model resnet50` applies to the peak-RSS run.
const RESNET50_SERVER_LATENCY_NS: u64 = 15_000_000;
/// What our engine should stay under in the peak-RSS run, whatever its length.
const RSS_TARGET_MIB: u64 = 256;

/// Effective settings that must agree between the two logs of a pair of runs.
const SAME_SETTINGS: [&str; 12] = [
    "effective_scenario",
    "effective_samples_per_query",
    "effective_target_qps",
    "effective_target_latency_ns",
    "effective_target_duration_ms",
    "effective_min_duration_ms",
    "effective_min_query_count",
    "effective_min_sample_count",
    "effective_qsl_rng_seed",
    "effective_sample_index_rng_seed",
    "effective_schedule_rng_seed",
    "effective_performance_sample_count",
];

fn main() -> Result<()> {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == PROBE_ARG) {
        return probe_main(&args[2..]);
    }
    // `cargo test --all-targets` runs bench binaries without `--bench`: skip
    // the minutes-long measurement there.
    if !args.iter().any(|a| a == "--bench") {
        println!("vs_official: run with `cargo bench -p loadgen-engine --bench vs_official`");
        return Ok(());
    }
    let started = Instant::now();
    let cfg = Config::from_env()?;
    let work = Workdir::new(cfg.keep_logs)?;
    let official = if cfg.skip_official {
        None
    } else {
        Official::setup(&cfg.python)
    };

    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("loadgen-node (in-process null SUT) vs official MLPerf LoadGen (Python null SUT)");
    match &official {
        Some(o) => println!("official: mlcommons-loadgen {} via {}", o.version, o.python),
        None => println!("official: skipped"),
    }
    println!("machine: {cpus} CPU(s)");
    println!();

    let mut engines = vec![Engine::Ours];
    engines.extend(official.map(Engine::Official));
    let mut rows = Vec::new();
    if cfg.wants("offline") {
        rows.push(offline(&cfg, &engines, &work));
    }
    if cfg.wants("server") {
        rows.push(server_peak(&cfg, &engines, &work));
    }
    if cfg.wants("singlestream") {
        rows.push(single_stream(&cfg, &engines, &work));
    }
    if cfg.wants("sidefile") {
        side_file_cost(&cfg, &work);
    }
    let mut ours_rss_mib = None;
    if cfg.wants("memory") {
        let row = memory(&cfg, &engines, &work);
        ours_rss_mib = row.ours;
        rows.push(row);
    }

    println!();
    print_table(&rows);
    if let Some(rss) = ours_rss_mib {
        let verdict = if rss < RSS_TARGET_MIB as f64 {
            "met"
        } else {
            "NOT met"
        };
        println!("peak RSS target for loadgen-node (< {RSS_TARGET_MIB} MiB): {verdict}");
    }
    println!("bench wall time: {:.0} s", started.elapsed().as_secs_f64());
    if cfg.keep_logs {
        println!("logs kept in {}", work.root.display());
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Settings

struct Config {
    only: Option<Vec<String>>,
    offline_qps: f64,
    repeat: u32,
    server_run_ms: u64,
    server_tolerance: f64,
    server_start_qps: f64,
    server_latency_ns: u64,
    ss_queries: u64,
    mem_secs: u64,
    mem_qps: f64,
    python: String,
    skip_official: bool,
    node_bin: Option<PathBuf>,
    keep_logs: bool,
    side_rounds: u32,
}

impl Config {
    fn from_env() -> Result<Self> {
        let quick = flag("BENCH_QUICK");
        Ok(Self {
            only: std::env::var("BENCH_ONLY").ok().map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_ascii_lowercase())
                    .collect()
            }),
            offline_qps: env_or("BENCH_OFFLINE_QPS", pick(quick, 4_000_000.0, 1_000_000.0))?,
            repeat: env_or("BENCH_REPEAT", pick(quick, 3, 1))?,
            server_run_ms: env_or("BENCH_SERVER_RUN_MS", pick(quick, 1000, 500))?,
            server_tolerance: env_or("BENCH_SERVER_TOLERANCE", pick(quick, 0.05, 0.10))?,
            server_start_qps: env_or("BENCH_SERVER_START_QPS", 100_000.0)?,
            server_latency_ns: env_or::<u64>("BENCH_SERVER_LATENCY_MS", 100)? * 1_000_000,
            ss_queries: env_or("BENCH_SS_QUERIES", pick(quick, 200_000, 50_000))?,
            mem_secs: env_or("BENCH_MEM_SECS", pick(quick, 10, 2))?,
            mem_qps: env_or("BENCH_MEM_QPS", 1_000_000.0)?,
            python: std::env::var("BENCH_PYTHON").unwrap_or_else(|_| "python3".into()),
            skip_official: flag("BENCH_SKIP_OFFICIAL"),
            node_bin: std::env::var_os("LOADGEN_NODE_BIN").map(PathBuf::from),
            keep_logs: flag("BENCH_KEEP_LOGS"),
            side_rounds: env_or("BENCH_SIDE_ROUNDS", pick(quick, 5, 3))?,
        })
    }

    fn wants(&self, section: &str) -> bool {
        match &self.only {
            None => true,
            Some(only) => only.iter().any(|s| s == section),
        }
    }
}

/// The full-length default, or the `BENCH_QUICK` one.
fn pick<T>(quick: bool, full: T, short: T) -> T {
    if quick {
        short
    } else {
        full
    }
}

fn flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

fn env_or<T: FromStr>(name: &str, default: T) -> Result<T>
where
    T::Err: Display,
{
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .map_err(|e| anyhow::anyhow!("{name}={v}: {e}")),
        Err(_) => Ok(default),
    }
}

/// One run's settings, given to both engines.
#[derive(Debug)]
struct Spec {
    scenario: Scenario,
    min_duration_ms: u64,
    min_query_count: u64,
    server_target_qps: f64,
    server_target_latency_ns: u64,
    offline_expected_qps: f64,
}

impl Spec {
    fn new(scenario: Scenario) -> Self {
        let d = TestSettings::default();
        Self {
            scenario,
            min_duration_ms: d.min_duration_ms,
            min_query_count: d.min_query_count,
            server_target_qps: d.server_target_qps,
            server_target_latency_ns: d.server_target_latency_ns,
            offline_expected_qps: d.offline_expected_qps,
        }
    }

    fn settings(&self) -> TestSettings {
        TestSettings {
            scenario: self.scenario,
            mode: TestMode::PerformanceOnly,
            min_duration_ms: self.min_duration_ms,
            min_query_count: self.min_query_count,
            server_target_qps: self.server_target_qps,
            server_target_latency_ns: self.server_target_latency_ns,
            offline_expected_qps: self.offline_expected_qps,
            performance_sample_count_override: SAMPLE_COUNT as u64,
            qsl_rng_seed: QSL_RNG_SEED,
            sample_index_rng_seed: SAMPLE_INDEX_RNG_SEED,
            schedule_rng_seed: SCHEDULE_RNG_SEED,
            ..TestSettings::default()
        }
    }

    fn python_args(&self) -> Vec<String> {
        let s = self.settings();
        [
            ("--scenario", s.scenario.to_string()),
            ("--total-sample-count", SAMPLE_COUNT.to_string()),
            ("--performance-sample-count", SAMPLE_COUNT.to_string()),
            ("--min-duration-ms", s.min_duration_ms.to_string()),
            ("--max-duration-ms", s.max_duration_ms.to_string()),
            ("--min-query-count", s.min_query_count.to_string()),
            ("--max-query-count", s.max_query_count.to_string()),
            ("--server-target-qps", s.server_target_qps.to_string()),
            (
                "--server-target-latency-ns",
                s.server_target_latency_ns.to_string(),
            ),
            (
                "--server-target-latency-percentile",
                s.server_target_latency_percentile.to_string(),
            ),
            ("--offline-expected-qps", s.offline_expected_qps.to_string()),
            (
                "--single-stream-expected-latency-ns",
                (s.single_stream_expected_latency_ns as u64).to_string(),
            ),
            ("--qsl-rng-seed", s.qsl_rng_seed.to_string()),
            (
                "--sample-index-rng-seed",
                s.sample_index_rng_seed.to_string(),
            ),
            ("--schedule-rng-seed", s.schedule_rng_seed.to_string()),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_string(), v])
        .collect()
    }
}

// ---------------------------------------------------------------------------
// Engines

struct Official {
    python: String,
    version: String,
}

impl Official {
    /// Finds `mlperf_loadgen`, installing it with pip when missing; `None`
    /// (with the reason on stderr) when it cannot be had.
    fn setup(python: &str) -> Option<Self> {
        let probe = || -> Result<String> {
            let out = Command::new(python)
                .args([
                    "-c",
                    "import importlib.metadata as m, mlperf_loadgen; \
                     print(m.version('mlcommons-loadgen'))",
                ])
                .output()
                .with_context(|| format!("cannot run {python}"))?;
            ensure!(out.status.success(), "{}", tail(&out.stderr));
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        };
        let version = probe().or_else(|_| {
            eprintln!("mlperf_loadgen is not importable: installing mlcommons-loadgen=={OFFICIAL_VERSION} with pip");
            let status = Command::new(python)
                .args(["-m", "pip", "install", "--quiet"])
                .arg(format!("mlcommons-loadgen=={OFFICIAL_VERSION}"))
                .status()
                .with_context(|| format!("cannot run {python} -m pip"))?;
            ensure!(status.success(), "pip install failed ({status})");
            probe()
        });
        match version {
            Ok(version) => {
                if version != OFFICIAL_VERSION {
                    eprintln!(
                        "warning: mlcommons-loadgen {version} is installed, not {OFFICIAL_VERSION}"
                    );
                }
                Some(Self {
                    python: python.to_string(),
                    version,
                })
            }
            Err(e) => {
                eprintln!("THE OFFICIAL LOADGEN IS SKIPPED: {e:#}");
                None
            }
        }
    }

    fn command(&self, spec: &Spec, dir: &Path) -> Command {
        let mut cmd = Command::new(&self.python);
        cmd.arg(OFFICIAL_SCRIPT)
            .args(spec.python_args())
            .arg("--output-dir")
            .arg(dir);
        cmd
    }
}

enum Engine {
    Ours,
    Official(Official),
}

impl Engine {
    fn name(&self) -> &'static str {
        match self {
            Engine::Ours => "loadgen-node",
            Engine::Official(_) => "official",
        }
    }

    fn is_ours(&self) -> bool {
        matches!(self, Engine::Ours)
    }

    /// One performance run; returns its detail log.
    fn run(&self, spec: &Spec, dir: &Path) -> Result<Detail> {
        self.run_with(spec, dir, false)
    }

    /// One performance run, ours with the latency side file when `side`.
    fn run_with(&self, spec: &Spec, dir: &Path, side: bool) -> Result<Detail> {
        match self {
            Engine::Ours => {
                let log = LogSettings {
                    outdir: dir.to_path_buf(),
                    enable_trace: false,
                    latency_file: side.then(|| LatencyFileSettings {
                        path: dir.join(latency_file::FILE),
                        benchmark: "bench".into(),
                    }),
                    ..LogSettings::default()
                };
                let sut = NullSut::default();
                let qsl = SizedQsl::new(SAMPLE_COUNT, SAMPLE_COUNT);
                let outcome = start_test(&sut, &qsl, &spec.settings(), &log, None)?;
                if let Some(e) = outcome.run_error {
                    bail!("the run failed: {e}");
                }
                Detail::read(&outcome.detail_path)
            }
            Engine::Official(o) => {
                let out = o
                    .command(spec, dir)
                    .output()
                    .with_context(|| format!("cannot run {}", o.python))?;
                ensure!(
                    out.status.success(),
                    "{OFFICIAL_SCRIPT} failed ({}): {}",
                    out.status,
                    tail(&out.stderr)
                );
                Detail::read(&dir.join("mlperf_log_detail.txt"))
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Measurements

enum Better {
    Higher,
    Lower,
}

struct Row {
    label: String,
    better: Better,
    decimals: usize,
    ours: Option<f64>,
    official: Option<f64>,
}

impl Row {
    fn new(label: String, better: Better, decimals: usize) -> Self {
        Self {
            label,
            better,
            decimals,
            ours: None,
            official: None,
        }
    }

    fn set(&mut self, engine: &Engine, value: Option<f64>) {
        if engine.is_ours() {
            self.ours = value;
        } else {
            self.official = value;
        }
    }
}

fn offline(cfg: &Config, engines: &[Engine], work: &Workdir) -> Row {
    let spec = Spec {
        min_duration_ms: 1000,
        min_query_count: 1,
        offline_expected_qps: cfg.offline_qps,
        ..Spec::new(Scenario::Offline)
    };
    eprintln!(
        "Offline: expected {} QPS, min_duration 1000 ms",
        group(cfg.offline_qps)
    );
    let mut row = Row::new(
        format!("Offline samples/s, best of {}", cfg.repeat),
        Better::Higher,
        0,
    );
    let mut logs = Vec::new();
    for engine in engines {
        let value = attempt(engine, "Offline", || {
            best_of(cfg.repeat, &row.better, &mut logs, || {
                let detail = engine.run(&spec, &work.dir(engine, "offline")?)?;
                let sps = detail.number("result_samples_per_second")?;
                eprintln!(
                    "  {:<12} {} samples/s ({}, {} samples)",
                    engine.name(),
                    group(sps),
                    detail.text("result_validity").unwrap_or("?"),
                    detail
                        .number("generated_samples_per_query")
                        .map_or("?".into(), group)
                );
                Ok((sps, detail))
            })
        });
        row.set(engine, value);
    }
    check_same_settings("Offline", &logs);
    row
}

fn server_peak(cfg: &Config, engines: &[Engine], work: &Workdir) -> Row {
    eprintln!(
        "Server: highest VALID target QPS, {} ms probes, latency bound {} ms, bisection to {}%",
        cfg.server_run_ms,
        cfg.server_latency_ns / 1_000_000,
        cfg.server_tolerance * 100.0
    );
    let mut row = Row::new(
        format!(
            "Server peak VALID QPS (±{}%)",
            (cfg.server_tolerance * 100.0).round()
        ),
        Better::Higher,
        0,
    );
    for engine in engines {
        let probe = |qps: f64| -> Result<bool> {
            let spec = Spec {
                min_duration_ms: cfg.server_run_ms,
                server_target_qps: qps,
                server_target_latency_ns: cfg.server_latency_ns,
                ..Spec::new(Scenario::Server)
            };
            let detail = engine.run(&spec, &work.dir(engine, "server")?)?;
            let validity = detail.text("result_validity")?;
            eprintln!(
                "  {:<12} {:>10} QPS: {validity:<7} (completed {}/s)",
                engine.name(),
                group(qps),
                detail
                    .number("result_completed_samples_per_sec")
                    .map_or("?".into(), group)
            );
            Ok(validity == "VALID")
        };
        let value = attempt(engine, "Server", || {
            peak_valid_qps(probe, cfg.server_start_qps, cfg.server_tolerance)
        });
        row.set(engine, value.flatten());
    }
    row
}

/// What the latency side file costs the timed path: our engine with and
/// without it, side by side, each round alternating which runs first.
fn side_file_cost(cfg: &Config, work: &Workdir) {
    let ours = Engine::Ours;
    let rounds = cfg.side_rounds.max(1);
    eprintln!("Side file: our engine without and with mlperf_net_latencies.bin, {rounds} rounds");
    let offline = Spec {
        min_duration_ms: 1000,
        min_query_count: 1,
        offline_expected_qps: cfg.offline_qps,
        ..Spec::new(Scenario::Offline)
    };
    let single = Spec {
        min_duration_ms: 0,
        min_query_count: cfg.ss_queries,
        ..Spec::new(Scenario::SingleStream)
    };
    // (label, higher is better, one measurement with the file or without).
    type Measure<'a> = Box<dyn Fn(bool) -> Result<f64> + 'a>;
    let measures: Vec<(&str, bool, Measure)> = vec![
        (
            "Offline samples/s",
            true,
            Box::new(|side| {
                let d = ours.run_with(&offline, &work.dir(&ours, "side-offline")?, side)?;
                d.number("result_samples_per_second")
            }),
        ),
        (
            "SingleStream µs/query",
            false,
            Box::new(|side| {
                let d = ours.run_with(&single, &work.dir(&ours, "side-ss")?, side)?;
                Ok(1e6 / d.number("result_qps_with_loadgen_overhead")?)
            }),
        ),
        (
            "Server peak VALID QPS",
            true,
            Box::new(|side| {
                let probe = |qps: f64| -> Result<bool> {
                    let spec = Spec {
                        min_duration_ms: cfg.server_run_ms,
                        server_target_qps: qps,
                        server_target_latency_ns: cfg.server_latency_ns,
                        ..Spec::new(Scenario::Server)
                    };
                    let d = ours.run_with(&spec, &work.dir(&ours, "side-server")?, side)?;
                    Ok(d.text("result_validity")? == "VALID")
                };
                peak_valid_qps(probe, cfg.server_start_qps, cfg.server_tolerance)?
                    .context("no VALID Server target")
            }),
        ),
    ];
    println!("side file cost (medians of {rounds} rounds; ratio: with / without)");
    let show = |v: f64| match v < 100.0 {
        true => format!("{v:.3}"),
        false => group(v),
    };
    for (label, higher, measure) in &measures {
        let (mut off, mut on) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            for side in [round % 2 == 1, round % 2 == 0] {
                match measure(side) {
                    Ok(v) => {
                        eprintln!(
                            "  {label:<24} round {} {:<8} {}",
                            round + 1,
                            if side { "with" } else { "without" },
                            show(v)
                        );
                        if side {
                            on.push(v)
                        } else {
                            off.push(v)
                        }
                    }
                    Err(e) => eprintln!("  {label}: {e:#}"),
                }
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied()
        };
        if let (Some(a), Some(b)) = (median(&mut off), median(&mut on)) {
            let better = if *higher { b / a } else { a / b };
            println!(
                "  {label:<24} without {:>12}  with {:>12}  ratio {:.3} ({} is better)",
                show(a),
                show(b),
                b / a,
                if (better - 1.0).abs() < 0.01 {
                    "neither, within 1 %".to_string()
                } else if better > 1.0 {
                    "with".into()
                } else {
                    "without".into()
                }
            );
        }
    }
    println!();
}

/// The best value of `repeat` runs, which filters out runs slowed down by
/// other work on the machine. The first run's log goes to `logs`, for
/// [`check_same_settings`].
fn best_of(
    repeat: u32,
    better: &Better,
    logs: &mut Vec<Detail>,
    mut run: impl FnMut() -> Result<(f64, Detail)>,
) -> Result<f64> {
    let mut best: Option<f64> = None;
    for i in 0..repeat.max(1) {
        let (value, detail) = run()?;
        if i == 0 {
            logs.push(detail);
        }
        best = Some(match (best, better) {
            (None, _) => value,
            (Some(b), Better::Higher) => b.max(value),
            (Some(b), Better::Lower) => b.min(value),
        });
    }
    best.context("no run")
}

/// The highest QPS found VALID: widen by doubling from `start`, then bisect
/// (geometrically) until the bracket is within `tolerance`.
fn peak_valid_qps(
    mut valid: impl FnMut(f64) -> Result<bool>,
    start: f64,
    tolerance: f64,
) -> Result<Option<f64>> {
    const FLOOR: f64 = 100.0;
    const CEILING: f64 = 1e9;
    let mut lo = start.round();
    while !valid(lo)? {
        lo = (lo / 4.0).round();
        if lo < FLOOR {
            return Ok(None);
        }
    }
    let mut hi = lo * 2.0;
    while valid(hi)? {
        lo = hi;
        hi *= 2.0;
        if hi > CEILING {
            return Ok(Some(lo));
        }
    }
    while hi / lo > 1.0 + tolerance {
        let mid = (lo * hi).sqrt().round();
        if valid(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(Some(lo))
}

fn single_stream(cfg: &Config, engines: &[Engine], work: &Workdir) -> Row {
    let spec = Spec {
        min_duration_ms: 0,
        min_query_count: cfg.ss_queries,
        ..Spec::new(Scenario::SingleStream)
    };
    eprintln!(
        "SingleStream: {} queries, min_duration 0",
        group(cfg.ss_queries as f64)
    );
    let mut row = Row::new(
        format!("SingleStream µs/query, best of {}", cfg.repeat),
        Better::Lower,
        3,
    );
    let mut logs = Vec::new();
    for engine in engines {
        let value = attempt(engine, "SingleStream", || {
            best_of(cfg.repeat, &row.better, &mut logs, || {
                let detail = engine.run(&spec, &work.dir(engine, "singlestream")?)?;
                let qps = detail.number("result_qps_with_loadgen_overhead")?;
                ensure!(qps > 0.0, "result_qps_with_loadgen_overhead is {qps}");
                let us = 1e6 / qps;
                eprintln!(
                    "  {:<12} {us:.3} µs/query ({} QPS with overhead)",
                    engine.name(),
                    group(qps)
                );
                Ok((us, detail))
            })
        });
        row.set(engine, value);
    }
    check_same_settings("SingleStream", &logs);
    row
}

fn memory(cfg: &Config, engines: &[Engine], work: &Workdir) -> Row {
    let min_duration_ms = cfg.mem_secs * 1000;
    // What `loadgen-node --model resnet50 --scenario Server` resolves with
    // the overrides below.
    let spec = Spec {
        min_duration_ms,
        server_target_qps: cfg.mem_qps,
        server_target_latency_ns: RESNET50_SERVER_LATENCY_NS,
        ..Spec::new(Scenario::Server)
    };
    eprintln!(
        "Peak RSS: Server at {} QPS for {} s, in a child process",
        group(cfg.mem_qps),
        cfg.mem_secs
    );
    let mut row = Row::new(
        format!(
            "Peak RSS MiB, Server {} QPS {} s",
            group(cfg.mem_qps),
            cfg.mem_secs
        ),
        Better::Lower,
        0,
    );
    let mut logs = Vec::new();
    for engine in engines {
        let value = attempt(engine, "peak RSS", || {
            let dir = work.dir(engine, "memory")?;
            let cmd = match engine {
                Engine::Ours => {
                    let mut cmd = Command::new(node_binary(cfg)?);
                    cmd.args(["--sut", "null", "--model", "resnet50"])
                        .args(["--scenario", "Server", "--mode", "PerformanceOnly"])
                        .arg("--set")
                        .arg(format!("target_qps={}", cfg.mem_qps))
                        .arg("--set")
                        .arg(format!("min_duration={min_duration_ms}"))
                        .arg("--total-sample-count")
                        .arg(SAMPLE_COUNT.to_string())
                        .arg("--no-trace")
                        .arg("--output-dir")
                        .arg(&dir);
                    cmd
                }
                Engine::Official(o) => o.command(&spec, &dir),
            };
            let (rss, wall) = peak_rss(&cmd, &dir)?;
            let detail = Detail::read(&dir.join("mlperf_log_detail.txt"))?;
            let mib = rss as f64 / f64::from(1 << 20);
            eprintln!(
                "  {:<12} {mib:.0} MiB peak RSS, {:.1} s wall, {} ({} samples/s completed)",
                engine.name(),
                wall.as_secs_f64(),
                detail.text("result_validity").unwrap_or("?"),
                detail
                    .number("result_completed_samples_per_sec")
                    .map_or("?".into(), group)
            );
            logs.push(detail);
            Ok(mib)
        });
        row.set(engine, value);
    }
    check_same_settings("peak RSS", &logs);
    row
}

/// The `loadgen-node` binary: `LOADGEN_NODE_BIN`, or built in release next
/// to this bench's own target directory.
fn node_binary(cfg: &Config) -> Result<PathBuf> {
    if let Some(bin) = &cfg.node_bin {
        return Ok(bin.clone());
    }
    // This bench runs from <target>/release/deps/.
    let exe = std::env::current_exe().context("cannot locate the bench binary")?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .context("unexpected bench binary location; set LOADGEN_NODE_BIN")?;
    let target_dir = profile_dir
        .parent()
        .context("unexpected bench binary location; set LOADGEN_NODE_BIN")?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("  building loadgen-node (cargo build --release -p loadgen-cli)");
    let status = Command::new(&cargo)
        .args(["build", "--release", "--quiet", "-p", "loadgen-cli"])
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .with_context(|| format!("cannot run {cargo}"))?;
    ensure!(
        status.success(),
        "cargo build --release -p loadgen-cli failed ({status}); build it yourself and set LOADGEN_NODE_BIN"
    );
    Ok(profile_dir.join("loadgen-node"))
}

/// Runs `cmd` to completion, its output going to files in `dir`, and returns
/// its peak resident set size in bytes and its wall time.
///
/// The command runs under a fresh copy of this binary (see [`probe_main`]):
/// Linux folds the spawning process's own high-water RSS into a child's
/// `ru_maxrss` at exec, and this process has grown with the in-process runs.
fn peak_rss(cmd: &Command, dir: &Path) -> Result<(u64, Duration)> {
    let rss_path = dir.join("peak_rss_kib.txt");
    let stderr_path = dir.join("stderr.txt");
    let stdout = File::create(dir.join("stdout.txt")).context("cannot create stdout.txt")?;
    let stderr = File::create(&stderr_path).context("cannot create stderr.txt")?;
    let exe = std::env::current_exe().context("cannot locate the bench binary")?;
    let start = Instant::now();
    let status = Command::new(exe)
        .arg(PROBE_ARG)
        .arg(&rss_path)
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .status()
        .context("cannot start the peak-RSS probe")?;
    let wall = start.elapsed();
    if !status.success() {
        let err = std::fs::read(&stderr_path).unwrap_or_default();
        bail!("{:?} failed ({status}): {}", cmd.get_program(), tail(&err));
    }
    let text = std::fs::read_to_string(&rss_path)
        .with_context(|| format!("cannot read {}", rss_path.display()))?;
    let kib: u64 = text
        .trim()
        .parse()
        .with_context(|| format!("{}: not a number: {text:?}", rss_path.display()))?;
    Ok((kib * 1024, wall))
}

/// `vs_official --peak-rss-probe OUT PROGRAM ARGS...`: runs PROGRAM, writes
/// its peak RSS in KiB to OUT, and fails if PROGRAM fails. Started afresh,
/// this process is small, so what it passes on to PROGRAM at exec is too.
fn probe_main(args: &[OsString]) -> Result<()> {
    let [out, program, rest @ ..] = args else {
        bail!("usage: vs_official {PROBE_ARG} OUT PROGRAM [ARGS...]");
    };
    let child = Command::new(program)
        .args(rest)
        .spawn()
        .with_context(|| format!("cannot start {program:?}"))?;
    let pid = libc::pid_t::try_from(child.id()).context("pid out of range")?;
    let mut status = 0;
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // wait4 rather than Child::wait, for this child's own rusage.
    loop {
        // SAFETY: `pid` is our child, not yet reaped; both out-pointers are
        // valid for writes.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err).context("wait4");
        }
    }
    let status = ExitStatus::from_raw(status);
    ensure!(status.success(), "{program:?} failed ({status})");
    // ru_maxrss is in KiB on Linux.
    std::fs::write(out, format!("{}\n", usage.ru_maxrss))
        .with_context(|| format!("cannot write {out:?}"))
}

// ---------------------------------------------------------------------------
// Logs and output

/// The last value of each key in an `mlperf_log_detail.txt`.
struct Detail {
    path: PathBuf,
    values: HashMap<String, Value>,
}

impl Detail {
    fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let mut values = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let Some(json) = line.strip_prefix(":::MLLOG ") else {
                continue;
            };
            let mut record: Value = serde_json::from_str(json)
                .with_context(|| format!("{}:{}: not JSON", path.display(), n + 1))?;
            let key = record
                .get("key")
                .and_then(Value::as_str)
                .with_context(|| format!("{}:{}: no \"key\"", path.display(), n + 1))?
                .to_string();
            values.insert(key, record["value"].take());
        }
        Ok(Self {
            path: path.to_path_buf(),
            values,
        })
    }

    fn get(&self, key: &str) -> Result<&Value> {
        self.values
            .get(key)
            .with_context(|| format!("{} has no {key}", self.path.display()))
    }

    fn number(&self, key: &str) -> Result<f64> {
        self.get(key)?
            .as_f64()
            .with_context(|| format!("{}: {key} is not a number", self.path.display()))
    }

    fn text(&self, key: &str) -> Result<&str> {
        self.get(key)?
            .as_str()
            .with_context(|| format!("{}: {key} is not a string", self.path.display()))
    }
}

/// Warns when the two engines' logs of one measurement disagree on a setting
/// that shapes the run.
fn check_same_settings(what: &str, logs: &[Detail]) {
    let [ours, official] = logs else {
        return;
    };
    for key in SAME_SETTINGS {
        let (a, b) = (ours.values.get(key), official.values.get(key));
        let same = match (a, b) {
            (Some(Value::Number(x)), Some(Value::Number(y))) => match (x.as_u64(), y.as_u64()) {
                (Some(x), Some(y)) => x == y,
                _ => x.as_f64() == y.as_f64(),
            },
            _ => a == b,
        };
        if !same {
            eprintln!("  warning: {what}: {key} differs: loadgen-node {a:?}, official {b:?}");
        }
    }
}

/// Runs one engine's part of a measurement; on failure says so and gives
/// `None`, so the other figures are still printed.
fn attempt<T>(engine: &Engine, what: &str, f: impl FnOnce() -> Result<T>) -> Option<T> {
    f().map_err(|e| eprintln!("  {:<12} {what} failed: {e:#}", engine.name()))
        .ok()
}

fn print_table(rows: &[Row]) {
    let width = rows.iter().map(|r| r.label.len()).max().unwrap_or(0) + 16;
    println!(
        "{:<width$} {:>14} {:>14} {:>14}",
        "metric", "loadgen-node", "official", "ours/official"
    );
    for r in rows {
        let cell = |v: Option<f64>| {
            v.map_or_else(
                || "n/a".to_string(),
                |v| {
                    if r.decimals == 0 {
                        group(v)
                    } else {
                        format!("{v:.*}", r.decimals)
                    }
                },
            )
        };
        let ratio = match (r.ours, r.official) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
            _ => "n/a".into(),
        };
        let hint = match r.better {
            Better::Higher => "(higher better)",
            Better::Lower => "(lower better)",
        };
        println!(
            "{:<width$} {:>14} {:>14} {:>14}",
            format!("{} {hint}", r.label),
            cell(r.ours),
            cell(r.official),
            ratio
        );
    }
}

/// `1234567.8` as `1,234,568`.
fn group(v: f64) -> String {
    let digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0.0 {
        out.insert(0, '-');
    }
    out
}

/// The last lines of a child's output, for error messages.
fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.trim_end().lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

/// A temporary directory holding one sub-directory per run; removed at the
/// end unless the logs are to be kept.
struct Workdir {
    root: PathBuf,
    runs: Cell<u32>,
    keep: bool,
}

impl Workdir {
    fn new(keep: bool) -> Result<Self> {
        let root = std::env::temp_dir().join(format!("loadgen-vs-official-{}", std::process::id()));
        std::fs::create_dir_all(&root)
            .with_context(|| format!("cannot create {}", root.display()))?;
        Ok(Self {
            root,
            runs: Cell::new(0),
            keep,
        })
    }

    fn dir(&self, engine: &Engine, what: &str) -> Result<PathBuf> {
        let n = self.runs.get() + 1;
        self.runs.set(n);
        let dir = self.root.join(format!("{n:03}-{}-{what}", engine.name()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(dir)
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}
