//! `loadgen-node sweep`: the latency–throughput curve of a Server run.
//! Each point is a real run of the native engine against the given nodes
//! at one target QPS, in a `loadgen-node` process of its own, its logs kept
//! in `DIR/qps-T/`: the targets listed (`--qps`), or found by bracketing
//! from `--start` (times `--growth` while VALID, divided while INVALID)
//! and then bisecting until the highest VALID target is within
//! `--precision` percent of the lowest INVALID one. A point whose logs are
//! already there is read, not run again, so an interrupted sweep resumes.
//! Prints the curve (the judged percentile, p50, p99.9, and each node's
//! from its breakdown), the highest VALID target and where the time went
//! around it, and writes the curve as `DIR/mlperf_net_sweep.json` and an
//! HTML plot.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use loadgen_engine::{Scenario, TestMode};
use qdl::breakdown::Part;
use serde_json::{json, Value};

use crate::args::{Engine, RunArgs, SetArg};
use crate::exit::Exit;
use crate::html_report;
use crate::run_dir::{percentile_key, percentile_name, RunDir};

/// The sweep's own record, in its directory.
pub const FILE: &str = "mlperf_net_sweep.json";
/// Its plot, unless --report names another file.
pub const PLOT: &str = "mlperf_net_sweep.html";

/// The flags of `loadgen-node sweep`.
#[derive(clap::Args, Debug, Clone)]
pub struct SweepArgs {
    /// The targets to run, comma-separated (e.g. 100,200,400).
    #[arg(long, value_delimiter = ',', value_name = "QPS,...", value_parser = positive,
          conflicts_with = "start", required_unless_present = "start")]
    pub qps: Vec<f64>,

    /// Find the highest VALID target from this one: bracket, then bisect.
    #[arg(long, value_name = "QPS", value_parser = positive)]
    pub start: Option<f64>,

    /// Bisect until the highest VALID target is within this many percent
    /// of the lowest INVALID one.
    #[arg(long, value_name = "PCT", default_value = "5", value_parser = positive)]
    pub precision: f64,

    /// While bracketing, each target is the last times this (VALID), or
    /// divided by it (INVALID).
    #[arg(long, value_name = "FACTOR", default_value = "2", value_parser = growth)]
    pub growth: f64,

    /// Stop after this many points.
    #[arg(long, value_name = "N", default_value_t = 40)]
    pub max_points: usize,

    /// The run flags of every point (--sut, --model, --set...). --scenario
    /// must be Server; --output-dir is the sweep's directory; --report
    /// where its plot goes [default: DIR/mlperf_net_sweep.html].
    #[command(flatten)]
    pub run: RunArgs,
}

fn positive(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("`{s}`: expected a number above 0")),
    }
}

fn growth(s: &str) -> Result<f64, String> {
    match positive(s)? {
        g if g > 1.0 => Ok(g),
        _ => Err(format!("`{s}`: expected a factor above 1")),
    }
}

/// The bracketing and bisection, handed each point's validity: no I/O.
#[derive(Clone, Debug)]
pub(crate) struct Search {
    start: f64,
    growth: f64,
    precision: f64,
    next: Option<f64>,
    /// The highest VALID target below every INVALID one, and the lowest
    /// INVALID one.
    pub lo: Option<f64>,
    pub hi: Option<f64>,
}

/// The most times the start is divided before the search gives up.
const MAX_DIVISIONS: u32 = 20;

impl Search {
    pub fn new(start: f64, growth: f64, precision_pct: f64) -> Search {
        Search {
            start,
            growth,
            precision: precision_pct / 100.0,
            next: Some(round_qps(start)),
            lo: None,
            hi: None,
        }
    }

    /// The next target to run, or `None` when done.
    pub fn next(&self) -> Option<f64> {
        self.next
    }

    /// What the run at `qps` gave.
    pub fn record(&mut self, qps: f64, valid: bool) {
        if valid {
            self.lo = Some(self.lo.map_or(qps, |l| l.max(qps)));
        } else {
            self.hi = Some(self.hi.map_or(qps, |h| h.min(qps)));
        }
        self.next = match (self.lo, self.hi) {
            (Some(lo), None) => Some(round_qps(lo * self.growth)),
            (None, Some(hi)) => {
                let down = round_qps(hi / self.growth);
                let limit = self.start / self.growth.powi(MAX_DIVISIONS as i32);
                (down > limit * 1.0001).then_some(down)
            }
            (Some(lo), Some(hi)) if lo >= hi => None,
            (Some(lo), Some(hi)) => {
                let mid = round_to_grid((lo + hi) / 2.0, lo * self.precision);
                let done = (hi - lo) / lo <= self.precision || mid <= lo || mid >= hi;
                (!done).then_some(mid)
            }
            (None, None) => self.next,
        };
    }
}

/// Targets of the bracket keep four significant digits.
fn round_qps(q: f64) -> f64 {
    let grid = 10f64.powf(q.log10().floor() - 3.0);
    (q / grid).round() * grid
}

/// `q` rounded to a power of ten a tenth of `step` or finer.
fn round_to_grid(q: f64, step: f64) -> f64 {
    let grid = 10f64.powf((step / 10.0).log10().floor());
    (q / grid).round() * grid
}

/// A target as directory names and `--set` show it: `250`, `437.5`.
pub fn qps_text(q: f64) -> String {
    let s = format!("{q:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// One point of the curve, read back from its logs.
#[derive(Debug)]
struct Point {
    qps: f64,
    dir: PathBuf,
    run: RunDir,
    /// Run now, or read from an earlier sweep.
    kept: bool,
}

impl Point {
    fn valid(&self) -> bool {
        self.run.valid() == Some(true)
    }

    fn percentile(&self, p: f64) -> Option<f64> {
        self.run.number(&format!(
            "result_{}_percentile_latency_ns",
            percentile_key(p)
        ))
    }

    /// Each node's total at the breakdown's quantile nearest `p` (ns).
    fn nodes(&self, q: &str) -> Vec<(String, f64)> {
        let Some(b) = &self.run.breakdown else {
            return Vec::new();
        };
        b["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| Some((n["name"].as_str()?.to_string(), n["total"][q].as_f64()?)))
            .collect()
    }
}

/// The breakdown quantile shown for a judged percentile.
fn breakdown_quantile(p: f64) -> &'static str {
    match p {
        p if p >= 0.999 => "p999",
        p if p >= 0.99 => "p99",
        p if p >= 0.9 => "p90",
        _ => "p50",
    }
}

/// The flags every point shares, as recorded to check a resumed sweep.
fn shared_flags(run: &RunArgs) -> Result<Vec<String>> {
    let mut r = run.clone();
    r.output_dir = PathBuf::new();
    r.extras_dir = None;
    r.report = None;
    r.set.retain(|s| s.key != "target_qps");
    let mut argv = r
        .to_argv()?
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned());
    // Where the sweep is, is not what it runs.
    let mut flags = Vec::new();
    while let Some(a) = argv.next() {
        match a.as_str() {
            "--output-dir" => {
                argv.next();
            }
            _ => flags.push(a),
        }
    }
    Ok(flags)
}

fn check_flags(args: &SweepArgs) -> Result<()> {
    if args.run.engine != Engine::Native {
        bail!(
            "sweep runs the native engine (each point a run of its own); a target it finds is confirmed \
             for a submission by one run of the official engine (--engine official --set target_qps=...)"
        );
    }
    if args.run.scenario != Scenario::Server {
        bail!(
            "sweep varies the Server scenario's target QPS: give --scenario Server (SingleStream and \
             MultiStream issue each query when the last is done, Offline all at once)"
        );
    }
    if matches!(args.run.mode, Some(m) if m != TestMode::PerformanceOnly) {
        bail!("sweep: each point is a PerformanceOnly run; drop --mode");
    }
    Ok(())
}

/// Where a point's logs and its own files go.
fn point_dirs(args: &SweepArgs, qps: f64) -> (PathBuf, Option<PathBuf>) {
    let name = format!("qps-{}", qps_text(qps));
    (
        args.run.output_dir.join(&name),
        args.run.extras_dir.as_ref().map(|e| e.join(&name)),
    )
}

/// A point's logs, when a finished run at `qps` left them.
fn kept_point(dir: &Path, extras: &Path, qps: f64) -> Option<RunDir> {
    let run = RunDir::read(dir, extras).ok()?;
    let target = run.number("effective_target_qps")?;
    (run.get("result_validity").is_some() && (target - qps).abs() <= 1e-6 * qps).then_some(run)
}

fn run_point(args: &SweepArgs, qps: f64) -> Result<Point> {
    let (dir, extras) = point_dirs(args, qps);
    let extras_dir = extras.clone().unwrap_or_else(|| dir.clone());
    if let Some(run) = kept_point(&dir, &extras_dir, qps) {
        return Ok(Point {
            qps,
            dir,
            run,
            kept: true,
        });
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut run = args.run.clone();
    run.mode = Some(TestMode::PerformanceOnly);
    run.output_dir = dir.clone();
    run.extras_dir = extras;
    run.report = None;
    run.set.retain(|s| s.key != "target_qps");
    run.set.push(SetArg {
        key: "target_qps".into(),
        value: qps_text(qps),
    });
    let exe = std::env::current_exe().context("cannot find this loadgen-node binary")?;
    let log_path = dir.join("loadgen-node.log");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    let status = Command::new(&exe)
        .args(run.to_argv()?)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .status()
        .with_context(|| format!("cannot start {}", exe.display()))?;
    let exit = Exit::of_child(status);
    if exit != Exit::Done {
        bail!(
            "the run at {} QPS ended: {} (status {}); its output is in {}",
            qps_text(qps),
            exit.meaning(),
            exit.code(),
            log_path.display()
        );
    }
    let run = RunDir::read(&dir, &extras_dir)?;
    Ok(Point {
        qps,
        dir,
        run,
        kept: false,
    })
}

fn ms(ns: Option<f64>) -> String {
    ns.map_or("-".into(), |v| format!("{:.3}", v / 1e6))
}

fn point_line(p: &Point, judged: f64) -> String {
    format!(
        "qps {:>10}: {:<7}  {} {:>9} ms  p50 {:>9} ms  completed {:>10.1}/s{}",
        qps_text(p.qps),
        p.run.text("result_validity").unwrap_or("?"),
        percentile_name(judged),
        ms(p.percentile(judged)),
        ms(p.percentile(0.5)),
        p.run
            .number("result_completed_samples_per_sec")
            .unwrap_or(0.0),
        if p.kept { "  (kept from before)" } else { "" }
    )
}

/// The highest VALID target with no INVALID one below it, and the lowest
/// INVALID one above it.
fn knee(points: &[Point]) -> (Option<&Point>, Option<&Point>) {
    let lowest_invalid = points
        .iter()
        .filter(|p| !p.valid())
        .min_by(|a, b| a.qps.total_cmp(&b.qps));
    let highest_valid = points
        .iter()
        .filter(|p| p.valid() && lowest_invalid.is_none_or(|i| p.qps < i.qps))
        .max_by(|a, b| a.qps.total_cmp(&b.qps));
    (highest_valid, lowest_invalid)
}

fn curve_text(points: &[Point], judged: f64) -> String {
    let q = breakdown_quantile(judged);
    let nodes: Vec<String> =
        points
            .iter()
            .flat_map(|p| p.nodes(q))
            .map(|(n, _)| n)
            .fold(Vec::new(), |mut v, n| {
                if !v.contains(&n) {
                    v.push(n);
                }
                v
            });
    let mut out = format!(
        "\nThe curve (latencies in ms; per node: its {q} of the breakdown's total):\n  {:>10}  {:<8}{:>12}{:>10}{:>10}{:>10}",
        "target", "", "completed/s", percentile_name(judged), "p50", "p99.9"
    );
    for n in &nodes {
        let _ = write!(out, "{:>14}", format!("{n} {q}"));
    }
    out.push('\n');
    for p in points {
        let _ = write!(
            out,
            "  {:>10}  {:<8}{:>12.1}{:>10}{:>10}{:>10}",
            qps_text(p.qps),
            p.run.text("result_validity").unwrap_or("?"),
            p.run
                .number("result_completed_samples_per_sec")
                .unwrap_or(0.0),
            ms(p.percentile(judged)),
            ms(p.percentile(0.5)),
            ms(p.percentile(0.999)),
        );
        let per = p.nodes(q);
        for n in &nodes {
            let v = per.iter().find(|(m, _)| m == n).map(|x| x.1);
            let _ = write!(out, "{:>14}", ms(v));
        }
        out.push('\n');
    }
    out
}

/// Where the time went at the knee: each node's parts at both points.
fn knee_text(valid: Option<&Point>, invalid: Option<&Point>) -> String {
    let pts: Vec<(&str, &Point)> = [("highest VALID", valid), ("lowest INVALID", invalid)]
        .into_iter()
        .filter_map(|(l, p)| Some((l, p?)))
        .filter(|(_, p)| p.run.breakdown.is_some())
        .collect();
    if pts.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nWhere the time went at the knee (ms, p50 / p99):\n");
    let _ = write!(out, "  {:<28}", "node / part");
    for (l, p) in &pts {
        let _ = write!(out, "{:>28}", format!("{l} {}", qps_text(p.qps)));
    }
    out.push('\n');
    let names: Vec<String> = pts[0].1.nodes("p50").into_iter().map(|x| x.0).collect();
    for name in names {
        for part in Part::ALL.map(Part::name) {
            let _ = write!(out, "  {:<28}", format!("{name} {part}"));
            for (_, p) in &pts {
                let node = p.run.breakdown.as_ref().and_then(|b| {
                    b["nodes"]
                        .as_array()?
                        .iter()
                        .find(|n| n["name"] == name.as_str())
                        .cloned()
                });
                let v = |q: &str| ms(node.as_ref().and_then(|n| n[part][q].as_f64()));
                let _ = write!(out, "{:>28}", format!("{} / {}", v("p50"), v("p99")));
            }
            out.push('\n');
        }
    }
    out
}

fn record(args: &SweepArgs, points: &[Point], judged: f64, flags: &[String]) -> Value {
    let (valid, invalid) = knee(points);
    let q = breakdown_quantile(judged);
    let first = points.first().map(|p| &p.run);
    let knee: Vec<Value> = [("highest VALID", valid), ("lowest INVALID", invalid)]
        .iter()
        .filter_map(|(l, p)| {
            let p = (*p)?;
            Some(json!({
                "label": format!("{l} {}", qps_text(p.qps)),
                "nodes": p.run.breakdown.as_ref()?["nodes"].clone(),
            }))
        })
        .collect();
    json!({
        "flags": flags,
        "search": match args.start {
            Some(s) => json!({ "start": s, "growth": args.growth, "precision_pct": args.precision }),
            None => json!({ "list": args.qps }),
        },
        "judged_percentile": judged,
        "bound_ns": first.and_then(|r| r.number("effective_target_latency_ns")),
        "node_quantile": q,
        "highest_valid_qps": valid.map(|p| p.qps),
        "lowest_invalid_qps": invalid.map(|p| p.qps),
        "points": points.iter().map(|p| json!({
            "target_qps": p.qps,
            "dir": p.dir.display().to_string(),
            "validity": p.run.text("result_validity"),
            "completed_per_s": p.run.number("result_completed_samples_per_sec"),
            "judged_ns": p.percentile(judged),
            "p50_ns": p.percentile(0.5),
            "p999_ns": p.percentile(0.999),
            "nodes": p.nodes(q).into_iter().map(|(n, v)| json!({ "name": n, "ns": v })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "knee": knee,
    })
}

/// Why going down from an INVALID start will not help: its latencies met
/// the bound, and it failed on what lower targets only make worse (early
/// stopping's or the minimum's count of queries, the duration).
fn not_latency_bound(p: &Point, search: &Search) -> Option<anyhow::Error> {
    if search.lo.is_some() || p.valid() {
        return None;
    }
    let met = p.run.get("result_perf_constraints_met") == Some(&Value::Bool(true));
    met.then(|| {
        anyhow::anyhow!(
            "INVALID at {} QPS although its latencies met the bound ({}): lower targets issue fewer \
             queries in the same time and will not help; raise min_query_count or min_duration (--set)",
            qps_text(p.qps),
            p.run
                .text("result_invalid_reason")
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .unwrap_or("early stopping not satisfied")
        )
    })
}

const TEMPLATE: &str = include_str!("sweep.html");

/// Runs the sweep; its exit status.
pub fn run(args: &SweepArgs) -> Result<Exit> {
    check_flags(args)?;
    let dir = &args.run.output_dir;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let flags = shared_flags(&args.run)?;
    let record_path = dir.join(FILE);
    if let Ok(text) = std::fs::read_to_string(&record_path) {
        let before: Value = serde_json::from_str(&text)
            .with_context(|| format!("{}: not valid JSON", record_path.display()))?;
        let before_flags: Vec<String> = before["flags"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(String::from))
            .collect();
        if before_flags != flags {
            bail!(
                "{} holds a sweep of other run flags:\n  before: {}\n  now:    {}\nuse another --output-dir, or remove it",
                dir.display(),
                before_flags.join(" "),
                flags.join(" ")
            );
        }
    }
    let mut points: Vec<Point> = Vec::new();
    let mut judged = 0.99;
    let mut take = |qps: f64, points: &mut Vec<Point>| -> Result<bool> {
        if points.len() >= args.max_points {
            bail!(
                "--max-points {}: stopped before {} QPS",
                args.max_points,
                qps_text(qps)
            );
        }
        let p = run_point(args, qps)?;
        judged = p
            .run
            .number("effective_target_latency_percentile")
            .unwrap_or(judged);
        println!("{}", point_line(&p, judged));
        let valid = p.valid();
        points.push(p);
        // Written after every point, so that an interrupted sweep is seen
        // for what it is.
        let _ = std::fs::write(
            &record_path,
            serde_json::to_string_pretty(&json!({ "flags": flags })).unwrap_or_default() + "\n",
        );
        Ok(valid)
    };
    let outcome = match args.start {
        Some(start) => {
            let mut search = Search::new(start, args.growth, args.precision);
            let mut r = Ok(());
            while let Some(q) = search.next() {
                match take(q, &mut points) {
                    Ok(valid) => search.record(q, valid),
                    Err(e) => {
                        r = Err(e);
                        break;
                    }
                }
                if let Some(why) = points.last().and_then(|p| not_latency_bound(p, &search)) {
                    r = Err(why);
                    break;
                }
            }
            if r.is_ok() && search.lo.is_none() {
                r = Err(anyhow::anyhow!(
                    "no target from {} QPS down was VALID",
                    qps_text(start)
                ));
            }
            r
        }
        None => {
            let mut qps = args.qps.clone();
            qps.sort_by(f64::total_cmp);
            qps.dedup();
            qps.iter()
                .try_for_each(|&q| take(q, &mut points).map(|_| ()))
        }
    };
    points.sort_by(|a, b| a.qps.total_cmp(&b.qps));
    if points.is_empty() {
        return outcome.map(|()| Exit::Done);
    }
    print!("{}", curve_text(&points, judged));
    let (valid, invalid) = knee(&points);
    match valid {
        Some(v) => {
            let bracket = invalid.map_or(String::new(), |i| {
                format!(
                    " (the lowest INVALID: {}, {:.1} % above)",
                    qps_text(i.qps),
                    (i.qps - v.qps) / v.qps * 100.0
                )
            });
            println!("\nhighest VALID target: {} QPS{bracket}", qps_text(v.qps));
        }
        None => println!("\nno VALID target"),
    }
    if let Some(i) = invalid {
        if points.iter().any(|p| p.valid() && p.qps > i.qps) {
            println!(
                "note: a target above {} QPS (INVALID) was VALID: near the knee, validity is noisy",
                qps_text(i.qps)
            );
        }
    }
    print!("{}", knee_text(valid, invalid));
    let data = record(args, &points, judged, &flags);
    std::fs::write(&record_path, serde_json::to_string_pretty(&data)? + "\n")
        .with_context(|| format!("cannot write {}", record_path.display()))?;
    let plot = args.run.report.clone().unwrap_or_else(|| dir.join(PLOT));
    html_report::write_page(TEMPLATE, &data, &plot)?;
    println!("sweep: {} and {}", record_path.display(), plot.display());
    outcome.map(|()| Exit::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the search against a SUT VALID up to `peak`.
    fn search(start: f64, peak: f64, precision: f64) -> (Search, Vec<f64>) {
        let mut s = Search::new(start, 2.0, precision);
        let mut tried = Vec::new();
        while let Some(q) = s.next() {
            tried.push(q);
            s.record(q, q <= peak);
            assert!(tried.len() < 60, "{tried:?}");
        }
        (s, tried)
    }

    #[test]
    fn the_search_brackets_then_bisects_to_its_precision() {
        for (start, peak) in [
            (100.0, 437.0),
            (1000.0, 437.0),
            (437.0, 437.0),
            (1.0, 90_000.0),
        ] {
            let (s, tried) = search(start, peak, 5.0);
            let (lo, hi) = (s.lo.unwrap(), s.hi.unwrap());
            assert!(lo <= peak && hi > peak, "{start}: {lo} {hi} {tried:?}");
            assert!((hi - lo) / lo <= 0.05, "{start}: {lo} {hi} {tried:?}");
        }
        // Doubling from 100 to 800, then about five halvings of the bracket.
        let (_, tried) = search(100.0, 437.0, 5.0);
        assert_eq!(tried[..4], [100.0, 200.0, 400.0, 800.0]);
        assert!(tried.len() <= 10, "{tried:?}");
    }

    #[test]
    fn a_start_never_valid_gives_up() {
        let mut s = Search::new(100.0, 2.0, 5.0);
        let mut n = 0;
        while let Some(q) = s.next() {
            s.record(q, false);
            n += 1;
        }
        // The start, then twenty divisions.
        assert_eq!(n, MAX_DIVISIONS as usize + 1);
        assert!(s.lo.is_none());
    }

    #[test]
    fn targets_print_as_short_numbers() {
        assert_eq!(qps_text(250.0), "250");
        assert_eq!(qps_text(437.5), "437.5");
        assert_eq!(round_qps(123_456.0), 123_500.0);
        assert_eq!(round_to_grid(437.26, 20.0), 437.0);
    }
}
