//! `loadgen-node compare BASE... -- NEW...`: did it get worse? Each side is
//! one or more output directories of the same test (either engine, or the
//! official LoadGen run by any harness: its four logs are enough). Prints
//! the scenario's metrics with base, new, the change and its 95 % interval
//! (`intervals` says how each is made), a verdict for each and for the
//! whole, and the nodes' breakdowns side by side; refuses runs of other
//! settings unless `--force`; `--fail-on-regression PCT` turns a
//! regression into an exit status; `--report FILE.html` draws both sides.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{bail, Result};
use serde_json::{json, Value};

use qdl::breakdown::Part;

use crate::exit::Exit;
use crate::html_report;
use crate::intervals::{self, Change, Estimate};
use crate::run_dir::{percentile_key, percentile_name, RunDir, SampleSource, Samples};

/// The flags of `loadgen-node compare`.
#[derive(clap::Args, Debug, Clone)]
pub struct CompareArgs {
    /// The base side: output directories of one test (repeated runs give
    /// intervals from their spread).
    #[arg(required = true, num_args = 1.., value_name = "BASE")]
    pub base: Vec<PathBuf>,

    /// The new side, after `--` (compare's own flags go before BASE).
    #[arg(last = true, required = true, value_name = "NEW")]
    pub new: Vec<PathBuf>,

    /// Compare runs whose settings differ (the differences are printed).
    #[arg(long)]
    pub force: bool,

    /// Exit with status 7 when a metric the scenario is judged by (marked
    /// `*`) regressed by more than PCT percent beyond its interval (its
    /// whole interval is past PCT, and past --noise-threshold), or a VALID
    /// base became INVALID.
    #[arg(long, value_name = "PCT", value_parser = percent)]
    pub fail_on_regression: Option<f64>,

    /// A change counts (regressed or improved) only when its whole 95 %
    /// interval lies beyond PCT percent either way: smaller changes, however
    /// sure, are within noise. Two runs of the same build differ by a few
    /// tenths of a percent on a shared host.
    #[arg(long, value_name = "PCT", value_parser = percent, default_value_t = DEFAULT_NOISE_THRESHOLD)]
    pub noise_threshold: f64,

    /// Write an HTML page of the comparison: both sides' latency CDFs
    /// overlaid (and their tails on a log scale), throughput over time.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
}

/// `--noise-threshold`'s default, in percent.
const DEFAULT_NOISE_THRESHOLD: f64 = 1.0;

fn percent(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('%').parse::<f64>() {
        Ok(p) if p >= 0.0 && p.is_finite() => Ok(p),
        _ => Err(format!("`{s}`: expected a percentage, 0 or more (e.g. 5)")),
    }
}

/// Settings that do not change what a performance run measures, left out
/// of the comparability check.
const IGNORED_SETTINGS: [&str; 5] = [
    "effective_accuracy_log_probability",
    "effective_accuracy_log_rng_seed",
    "effective_accuracy_log_sampling_target",
    "effective_accuracy_sample_count",
    "effective_print_timestamps",
];

/// Which is better of a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Better {
    Lower,
    Higher,
}

/// What a metric is read from, besides the detail log's figure.
#[derive(Clone, Copy, Debug)]
enum PerSample {
    /// A percentile of one of a run's per-sample series.
    Quantile(Series, f64),
    /// A rate of completions (samples, or tokens) over the run.
    Rate { tokens: bool },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Series {
    Sample,
    Query,
    Ttft,
    Tpot,
}

impl Series {
    fn of(self, s: &Samples) -> &[f64] {
        match self {
            Series::Sample => &s.latency_ns,
            Series::Query => &s.query_latency_ns,
            Series::Ttft => &s.ttft_ns,
            Series::Tpot => &s.tpot_ns,
        }
    }

    /// The prefix and suffix of the detail log's percentile keys.
    fn keys(self) -> (&'static str, &'static str) {
        match self {
            Series::Sample => ("result_", "_percentile_latency_ns"),
            Series::Query => ("result_", "_percentile_per_query_latency_ns"),
            Series::Ttft => ("result_first_token_", "_percentile_latency_ns"),
            Series::Tpot => ("result_time_per_output_token_", "_percentile_ns"),
        }
    }
}

#[derive(Clone, Debug)]
struct Metric {
    label: String,
    key: String,
    better: Better,
    judged: bool,
    per_sample: PerSample,
    /// Nanoseconds shown in milliseconds.
    latency: bool,
}

fn quantile(series: Series, p: f64, what: &str, judged: bool) -> Metric {
    let (pre, post) = series.keys();
    Metric {
        label: format!("{} {what} (ms)", percentile_name(p)),
        key: format!("{pre}{}{post}", percentile_key(p)),
        better: Better::Lower,
        judged,
        per_sample: PerSample::Quantile(series, p),
        latency: true,
    }
}

fn rate(label: &str, key: &str, judged: bool, tokens: bool) -> Metric {
    Metric {
        label: label.into(),
        key: key.into(),
        better: Better::Higher,
        judged,
        per_sample: PerSample::Rate { tokens },
        latency: false,
    }
}

/// The metrics of a scenario: the judged ones first.
fn metrics(scenario: &str, p: f64, tokens: bool) -> Vec<Metric> {
    let q = |s, at, what: &str, judged| quantile(s, at, what, judged);
    let mut m = match (scenario, tokens) {
        ("Server", false) => vec![
            q(Series::Sample, p, "latency", true),
            q(Series::Sample, 0.5, "latency", false),
            q(Series::Sample, 0.999, "latency", false),
            rate(
                "completed samples/s",
                "result_completed_samples_per_sec",
                false,
                false,
            ),
        ],
        ("Server", true) => vec![
            q(Series::Ttft, p, "TTFT", true),
            q(Series::Tpot, p, "TPOT", true),
            q(Series::Sample, p, "latency", false),
            q(Series::Sample, 0.5, "latency", false),
            rate(
                "completed tokens/s",
                "result_completed_tokens_per_second",
                false,
                true,
            ),
        ],
        ("SingleStream", _) => vec![
            q(Series::Sample, p, "latency", true),
            q(Series::Sample, 0.5, "latency", false),
            q(Series::Sample, 0.99, "latency", false),
            rate(
                "queries/s",
                "result_qps_with_loadgen_overhead",
                false,
                false,
            ),
        ],
        ("MultiStream", _) => vec![
            q(Series::Query, p, "query latency", true),
            q(Series::Query, 0.5, "query latency", false),
            q(Series::Sample, 0.99, "sample latency", false),
        ],
        (_, false) => vec![rate("samples/s", "result_samples_per_second", true, false)],
        (_, true) => vec![rate("tokens/s", "result_tokens_per_second", true, true)],
    };
    // p99 twice (SingleStream judged at p99): once is enough.
    let mut seen = Vec::new();
    m.retain(|x| {
        let fresh = !seen.contains(&x.key);
        seen.push(x.key.clone());
        fresh
    });
    m
}

/// Where one side's interval came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    /// The spread of repeated runs (Student's t).
    Runs,
    /// The run's per-sample latencies.
    Samples(SampleSource),
    /// The detail log's reported percentiles.
    DetailLog,
}

impl Method {
    fn short(self) -> &'static str {
        match self {
            Method::Runs => "runs",
            Method::Samples(SampleSource::SideFile) => "samples",
            Method::Samples(SampleSource::Trace) => "trace",
            Method::DetailLog => "detail log",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Improved,
    Regressed,
    WithinNoise,
    /// No interval could be made (one run a side without per-sample data).
    NoInterval,
}

impl Verdict {
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Improved => "improved",
            Verdict::Regressed => "regressed",
            Verdict::WithinNoise => "within noise",
            Verdict::NoInterval => "no interval",
        }
    }
}

/// One metric compared.
#[derive(Clone, Debug)]
struct Row {
    metric: Metric,
    base: f64,
    new: f64,
    /// The change in percent of base, and its interval where there is one.
    pct: f64,
    interval: Option<Change>,
    /// Each side's method (the same for both with repeated runs).
    methods: Option<(Method, Method)>,
    verdict: Verdict,
}

/// One side: its runs.
struct Side {
    name: &'static str,
    runs: Vec<RunDir>,
}

impl Side {
    fn read(name: &'static str, dirs: &[PathBuf]) -> Result<Side> {
        let mut runs = Vec::new();
        for d in dirs {
            let run = RunDir::read(d, d)?;
            if run.get("result_validity").is_none() {
                bail!(
                    "{}: no performance result in its detail log (an accuracy run, or one that did not finish?)",
                    d.display()
                );
            }
            runs.push(run);
        }
        Ok(Side { name, runs })
    }

    /// Each run's figure for `key`.
    fn values(&self, key: &str) -> Option<Vec<f64>> {
        self.runs.iter().map(|r| r.number(key)).collect()
    }

    fn valid_count(&self) -> usize {
        self.runs.iter().filter(|r| r.valid() == Some(true)).count()
    }

    fn validity(&self) -> String {
        match (self.runs.len(), self.valid_count()) {
            (1, 1) => "VALID".into(),
            (1, _) => "INVALID".into(),
            (n, v) if v == n => format!("all {n} VALID"),
            (n, v) => format!("{v} of {n} VALID"),
        }
    }
}

/// One side's figure and interval for a metric, from one run.
fn one_run_estimate(run: &RunDir, m: &Metric) -> Option<(Estimate, Method)> {
    let value = run.number(&m.key)?;
    if let Some(s) = &run.samples {
        match m.per_sample {
            PerSample::Quantile(series, p) => {
                let seq = series.of(s);
                if let Some(q) = intervals::quantile_interval(seq, p) {
                    let e = Estimate {
                        value,
                        lo: q.estimate.lo.min(value),
                        hi: q.estimate.hi.max(value),
                    };
                    return Some((e, Method::Samples(s.source)));
                }
            }
            PerSample::Rate { tokens } => {
                let span = s.completed_s.iter().copied().fold(0.0, f64::max);
                let weights = (tokens && s.tokens.len() == s.completed_s.len())
                    .then_some(s.tokens.as_slice());
                if let (Some(e), false) = (
                    intervals::rate_interval(&s.completed_s, weights, span),
                    tokens && weights.is_none(),
                ) {
                    // Centred on the detail log's figure.
                    let e = Estimate {
                        value,
                        lo: value - (e.value - e.lo),
                        hi: value + (e.hi - e.value),
                    };
                    return Some((e, Method::Samples(s.source)));
                }
            }
        }
    }
    let PerSample::Quantile(series, p) = m.per_sample else {
        return None;
    };
    let (pre, post) = series.keys();
    let mut reported: Vec<(f64, f64)> = run
        .detail
        .iter()
        .filter_map(|(k, v)| {
            let level: f64 = k.strip_prefix(pre)?.strip_suffix(post)?.parse().ok()?;
            Some((level / 100.0, v.as_f64()?))
        })
        .collect();
    let max_key = match series {
        Series::Sample => "result_max_latency_ns",
        Series::Query => "result_max_query_latency_ns",
        Series::Ttft => "result_first_token_max_latency_ns",
        Series::Tpot => "result_time_to_output_token_max",
    };
    if let Some(max) = run.number(max_key) {
        reported.push((1.0, max));
    }
    let n = run.number("result_query_count")? as u64;
    let n = match series {
        Series::Query => n,
        _ => n * run.number("effective_samples_per_query").unwrap_or(1.0) as u64,
    };
    intervals::quantile_from_reported(&reported, n, p).map(|e| (e, Method::DetailLog))
}

fn compare_metric(base: &Side, new: &Side, m: &Metric, noise: f64) -> Option<Row> {
    let (bv, nv) = (base.values(&m.key)?, new.values(&m.key)?);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (b, n) = (mean(&bv), mean(&nv));
    let (interval, methods) = if bv.len() >= 2 || nv.len() >= 2 {
        (
            intervals::change_from_runs(&bv, &nv),
            Some((Method::Runs, Method::Runs)),
        )
    } else {
        match (
            one_run_estimate(&base.runs[0], m),
            one_run_estimate(&new.runs[0], m),
        ) {
            (Some((be, bm)), Some((ne, nm))) => {
                (intervals::change_from_intervals(be, ne), Some((bm, nm)))
            }
            _ => (None, None),
        }
    };
    let pct = match b {
        0.0 => 0.0,
        _ => (n - b) / b * 100.0,
    };
    Some(Row {
        metric: m.clone(),
        base: b,
        new: n,
        pct: interval.map_or(pct, |c| c.pct),
        interval,
        methods,
        verdict: verdict(interval, m.better, noise),
    })
}

/// A metric's verdict: regressed or improved when the whole interval of the
/// change is beyond `noise` percent on that side, within noise otherwise.
fn verdict(interval: Option<Change>, better: Better, noise: f64) -> Verdict {
    let Some(c) = interval else {
        return Verdict::NoInterval;
    };
    let (up, down) = match better {
        Better::Lower => (Verdict::Regressed, Verdict::Improved),
        Better::Higher => (Verdict::Improved, Verdict::Regressed),
    };
    if c.lo > noise {
        up
    } else if c.hi < -noise {
        down
    } else {
        Verdict::WithinNoise
    }
}

impl Row {
    /// How far worse than base the best case of the interval is, in
    /// percent (positive: worse even at the interval's best end).
    fn worse_beyond_interval(&self) -> Option<f64> {
        let c = self.interval?;
        Some(match self.metric.better {
            Better::Lower => c.lo,
            Better::Higher => -c.hi,
        })
    }
}

/// The runs' settings that must agree: every effective setting but those
/// that only touch accuracy runs, the QSL's sizes, and the benchmark where
/// a side file names it.
fn differences(reference: &RunDir, other: &RunDir) -> Vec<String> {
    let mut out = Vec::new();
    let keys: std::collections::BTreeSet<&String> = reference
        .detail
        .keys()
        .chain(other.detail.keys())
        .filter(|k| {
            (k.starts_with("effective_") && !IGNORED_SETTINGS.contains(&k.as_str()))
                || k.starts_with("qsl_reported_")
        })
        .collect();
    let show = |v: Option<&Value>| v.map_or("(none)".into(), |v| v.to_string());
    for k in keys {
        let (a, b) = (reference.get(k), other.get(k));
        if a != b {
            out.push(format!("{k} ({} against {})", show(a), show(b)));
        }
    }
    if let (Some(a), Some(b)) = (&reference.benchmark, &other.benchmark) {
        if a != b {
            out.push(format!("benchmark ({a} against {b})"));
        }
    }
    out
}

/// The whole comparison, for printing and for the report.
struct Comparison {
    rows: Vec<Row>,
    validity: (String, String),
    /// A VALID base whose new side is not all VALID (or the other way).
    validity_change: Option<Verdict>,
    verdict: Verdict,
    method: String,
    /// `--noise-threshold`, in percent.
    noise: f64,
    nodes: Vec<NodeRow>,
    scenario: String,
    heading: String,
}

impl Comparison {
    /// What the table's marks and verdicts mean.
    fn legend(&self) -> String {
        format!(
            "* the metrics the scenario is judged by; a change counts once its whole interval \
             is beyond {} % (--noise-threshold)",
            self.noise
        )
    }
}

/// One node's part at one quantile, both sides.
struct NodeRow {
    node: String,
    part: &'static str,
    quantile: &'static str,
    base: Option<f64>,
    new: Option<f64>,
    interval: Option<Change>,
}

fn node_names(side: &Side) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in &side.runs {
        for n in r
            .breakdown
            .as_ref()
            .and_then(|b| b["nodes"].as_array())
            .into_iter()
            .flatten()
        {
            if let Some(name) = n["name"].as_str() {
                if !names.iter().any(|x| x == name) {
                    names.push(name.to_string());
                }
            }
        }
    }
    names
}

/// Each run's figure of a node's part (ns), for the runs that have it.
fn node_values(side: &Side, node: &str, part: &str, q: &str) -> Vec<f64> {
    side.runs
        .iter()
        .filter_map(|r| {
            let nodes = r.breakdown.as_ref()?["nodes"].as_array()?.clone();
            let n = nodes.iter().find(|n| n["name"] == node)?;
            n[part][q].as_f64()
        })
        .collect()
}

fn compare_nodes(base: &Side, new: &Side) -> Vec<NodeRow> {
    let (bn, nn) = (node_names(base), node_names(new));
    let mut names = bn.clone();
    names.extend(nn.iter().filter(|n| !bn.contains(n)).cloned());
    let mut out = Vec::new();
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    for name in names {
        for part in Part::ALL.map(Part::name) {
            for q in ["p50", "p99"] {
                let (bv, nv) = (
                    node_values(base, &name, part, q),
                    node_values(new, &name, part, q),
                );
                out.push(NodeRow {
                    node: name.clone(),
                    part,
                    quantile: q,
                    base: mean(&bv),
                    new: mean(&nv),
                    interval: intervals::change_from_runs(&bv, &nv),
                });
            }
        }
    }
    out
}

fn methods_text(rows: &[Row], base: &Side, new: &Side) -> String {
    let mut used: Vec<Method> = rows
        .iter()
        .filter_map(|r| r.methods)
        .flat_map(|(a, b)| [a, b])
        .collect();
    used.dedup();
    let mut parts = Vec::new();
    if used.contains(&Method::Runs) {
        parts.push(format!(
            "the spread of repeated runs ({} base, {} new): Student's t on the difference of the means{}",
            base.runs.len(),
            new.runs.len(),
            match (base.runs.len() >= 2, new.runs.len() >= 2) {
                (true, true) => " (Welch)",
                _ => ", the side of several runs' spread standing for both",
            }
        ));
    }
    if used.iter().any(|m| matches!(m, Method::Samples(_))) {
        let files: Vec<&str> = [SampleSource::SideFile, SampleSource::Trace]
            .into_iter()
            .filter(|s| used.contains(&Method::Samples(*s)))
            .map(SampleSource::file)
            .collect();
        parts.push(format!(
            "each run's per-sample latencies ({}): percentiles by order-statistic (binomial) intervals over the effective sample size (batch means of {} consecutive batches), rates by the batch means of {} time slices (Student's t)",
            files.join(", "),
            intervals::BATCHES,
            intervals::BATCHES
        ));
    }
    if used.contains(&Method::DetailLog) {
        parts.push(
            "the detail log's reported percentiles (order-statistic ranks over the run's samples taken as independent, interpolated between the reported percentiles: approximate)"
                .to_string(),
        );
    }
    if parts.is_empty() {
        return "none: one run a side and no per-sample latencies (repeat the runs, or use the native engine, whose side file gives intervals from one run)".into();
    }
    let single = base.runs.len() == 1 && new.runs.len() == 1;
    format!(
        "95 % intervals from {}{}",
        parts.join("; "),
        match single {
            true => "; the change's interval from the two sides' by MOVER on the log scale",
            false => "",
        }
    )
}

fn compare(base: &Side, new: &Side, noise: f64) -> Comparison {
    let first = &base.runs[0];
    let scenario = first
        .text("effective_scenario")
        .unwrap_or("unknown")
        .to_string();
    let p = first
        .number("effective_target_latency_percentile")
        .unwrap_or(0.99);
    let tokens = first.get("result_first_token_mean_latency_ns").is_some()
        || first.get("result_tokens_per_second").is_some();
    let rows: Vec<Row> = metrics(&scenario, p, tokens)
        .iter()
        .filter_map(|m| compare_metric(base, new, m, noise))
        .collect();
    let (bv, nv) = (
        base.valid_count() == base.runs.len(),
        new.valid_count() == new.runs.len(),
    );
    let validity_change = match (bv, nv) {
        (true, false) => Some(Verdict::Regressed),
        (false, true) => Some(Verdict::Improved),
        _ => None,
    };
    let judged: Vec<&Row> = rows.iter().filter(|r| r.metric.judged).collect();
    let any = |v: Verdict| judged.iter().any(|r| r.verdict == v) || validity_change == Some(v);
    let verdict = if any(Verdict::Regressed) {
        Verdict::Regressed
    } else if any(Verdict::Improved) {
        Verdict::Improved
    } else if judged.is_empty() || judged.iter().any(|r| r.verdict == Verdict::NoInterval) {
        Verdict::NoInterval
    } else {
        Verdict::WithinNoise
    };
    let benchmark = first
        .benchmark
        .clone()
        .map(|b| format!("{b}, "))
        .unwrap_or_default();
    let target = match scenario.as_str() {
        "Server" => first
            .number("effective_target_qps")
            .map(|q| format!(", target {q} QPS"))
            .unwrap_or_default(),
        _ => String::new(),
    };
    let bound = match scenario.as_str() {
        "Server" => first
            .number("effective_target_latency_ns")
            .map(|b| format!(", bound {} ms at {}", b / 1e6, percentile_name(p)))
            .unwrap_or_default(),
        _ => String::new(),
    };
    let runs = |s: &Side| match s.runs.len() {
        1 => "1 run".to_string(),
        n => format!("{n} runs"),
    };
    Comparison {
        method: methods_text(&rows, base, new),
        noise,
        rows,
        validity: (base.validity(), new.validity()),
        validity_change,
        verdict,
        nodes: compare_nodes(base, new),
        heading: format!(
            "{benchmark}{scenario}{target}{bound}: {} (base) against {} (new)",
            runs(base),
            runs(new)
        ),
        scenario,
    }
}

fn figure(v: f64, latency: bool) -> String {
    match latency {
        true => format!("{:.3}", v / 1e6),
        false => match v.abs() {
            a if a >= 1000.0 => format!("{v:.0}"),
            a if a >= 10.0 => format!("{v:.1}"),
            _ => format!("{v:.3}"),
        },
    }
}

/// The change and its interval as printed.
fn change_text(pct: Option<f64>, interval: Option<Change>) -> (String, String) {
    let pct = interval.map(|c| c.pct).or(pct);
    (
        pct.map_or(String::new(), |p| format!("{p:+.1} %")),
        match interval {
            Some(c) => format!("[{:+.1}, {:+.1}] %", c.lo, c.hi),
            None if pct.is_some() => "(none)".into(),
            None => String::new(),
        },
    )
}

impl NodeRow {
    fn pct(&self) -> Option<f64> {
        let (b, n) = (self.base?, self.new?);
        (b > 0.0).then(|| (n - b) / b * 100.0)
    }
}

fn print(c: &Comparison) -> String {
    let mut out = format!("compare: {}\n{}\n\n", c.heading, c.method);
    let _ = writeln!(
        out,
        "  {:<28}{:>12}{:>12}{:>10}  {:<20}{:<14}from",
        "metric", "base", "new", "change", "95 % interval", "verdict"
    );
    for r in &c.rows {
        let (ch, ci) = change_text(Some(r.pct), r.interval);
        let from = match r.methods {
            Some((a, b)) if a == b => a.short().to_string(),
            Some((a, b)) => format!("{} / {}", a.short(), b.short()),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "{} {:<28}{:>12}{:>12}{:>10}  {:<20}{:<14}{}",
            if r.metric.judged { "*" } else { " " },
            r.metric.label,
            figure(r.base, r.metric.latency),
            figure(r.new, r.metric.latency),
            ch,
            ci,
            r.verdict.text(),
            from
        );
    }
    let _ = writeln!(
        out,
        "  {:<28}{:>12}{:>12}{:>10}  {:<20}{}",
        "validity",
        c.validity.0,
        c.validity.1,
        "",
        "",
        c.validity_change.map_or("same", |v| v.text())
    );
    let _ = writeln!(out, "  ({})", c.legend());
    let _ = writeln!(out, "\nverdict: {}", verdict_line(c));
    if !c.nodes.is_empty() {
        let _ = writeln!(
            out,
            "\nper node (mlperf_net_breakdown.json), ms; intervals only where a side has several runs:"
        );
        let _ = writeln!(
            out,
            "  {:<36}{:>12}{:>12}{:>10}  95 % interval",
            "node / part", "base", "new", "change"
        );
        for n in &c.nodes {
            let f = |v: Option<f64>| v.map_or("-".into(), |v| figure(v, true));
            let (ch, ci) = change_text(n.pct(), n.interval);
            let _ = writeln!(
                out,
                "  {:<36}{:>12}{:>12}{:>10}  {}",
                format!("{} {} {}", n.node, n.part, n.quantile),
                f(n.base),
                f(n.new),
                ch,
                ci
            );
        }
    }
    out
}

fn verdict_line(c: &Comparison) -> String {
    let named: Vec<String> = c
        .rows
        .iter()
        .filter(|r| r.metric.judged && r.verdict == c.verdict)
        .map(|r| {
            let (ch, ci) = change_text(Some(r.pct), r.interval);
            format!("{} {ch} {ci}", r.metric.label)
        })
        .chain(
            (c.validity_change == Some(c.verdict))
                .then(|| format!("validity {} to {}", c.validity.0, c.validity.1)),
        )
        .collect();
    let word = c.verdict.text().to_uppercase();
    match c.verdict {
        Verdict::NoInterval => format!(
            "{word}: a judged metric has no interval (one run a side without per-sample latencies: repeat the runs)"
        ),
        _ if named.is_empty() => word,
        _ => format!("{word} ({})", named.join("; ")),
    }
}

/// The figures of the report: each side's latency CDF and each run's
/// throughput over time.
fn report_data(c: &Comparison, base: &Side, new: &Side) -> Value {
    let series = match c.scenario.as_str() {
        "MultiStream" => Series::Query,
        _ => Series::Sample,
    };
    let side_json = |s: &Side| -> Value {
        let mut pooled: Vec<f64> = s
            .runs
            .iter()
            .filter_map(|r| r.samples.as_ref())
            .flat_map(|x| series.of(x).iter().copied())
            .collect();
        pooled.sort_by(f64::total_cmp);
        let cdf = match pooled.is_empty() {
            false => cdf_points(&pooled),
            // The detail log's percentiles of the first run.
            true => {
                let (pre, post) = series.keys();
                let mut pts: Vec<(f64, f64)> = s.runs[0]
                    .detail
                    .iter()
                    .filter_map(|(k, v)| {
                        let level: f64 = k.strip_prefix(pre)?.strip_suffix(post)?.parse().ok()?;
                        Some((v.as_f64()?, level / 100.0))
                    })
                    .collect();
                pts.sort_by(|a, b| a.1.total_cmp(&b.1));
                pts.into_iter().map(|(v, f)| json!([v, f])).collect()
            }
        };
        let throughput: Vec<Value> = s
            .runs
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let x = r.samples.as_ref()?;
                Some(json!({ "run": i + 1, "dir": r.dir.display().to_string(), "points": rate_over_time(&x.completed_s) }))
            })
            .collect();
        json!({
            "name": s.name,
            "dirs": s.runs.iter().map(|r| r.dir.display().to_string()).collect::<Vec<_>>(),
            "validity": s.validity(),
            "from_samples": !pooled.is_empty(),
            "samples": pooled.len(),
            "cdf": cdf,
            "throughput": throughput,
        })
    };
    let first = &base.runs[0];
    let bound = match c.scenario.as_str() {
        "Server" => first.number("effective_target_latency_ns"),
        _ => None,
    };
    let breakdowns: Vec<Value> = [base, new]
        .iter()
        .map(|s| {
            json!({
                "label": s.name,
                "nodes": s.runs[0].breakdown.as_ref().map_or(Value::Null, |b| b["nodes"].clone()),
            })
        })
        .collect();
    json!({
        "heading": c.heading,
        "method": c.method,
        "legend": c.legend(),
        "verdict": verdict_line(c),
        "verdict_word": c.verdict.text(),
        "scenario": c.scenario,
        "bound_ns": bound,
        "rows": c.rows.iter().map(|r| {
            let (ch, ci) = change_text(Some(r.pct), r.interval);
            json!({
                "label": r.metric.label, "judged": r.metric.judged,
                "base": figure(r.base, r.metric.latency), "new": figure(r.new, r.metric.latency),
                "change": ch, "interval": ci, "verdict": r.verdict.text(),
            })
        }).collect::<Vec<_>>(),
        "validity": [c.validity.0, c.validity.1],
        "sides": [side_json(base), side_json(new)],
        "breakdowns": breakdowns,
    })
}

/// Points of a sorted sample's CDF: even steps of the fraction, and more
/// in the tail, down to the last sample.
fn cdf_points(sorted: &[f64]) -> Vec<Value> {
    let n = sorted.len();
    let mut levels: Vec<f64> = (0..100).map(|i| i as f64 / 100.0).collect();
    let mut x = 2.0;
    while 10f64.powf(-x) * n as f64 >= 1.0 {
        levels.push(1.0 - 10f64.powf(-x));
        x += 0.05;
    }
    levels.push(1.0 - 1.0 / n as f64);
    levels.sort_by(f64::total_cmp);
    levels.dedup();
    levels
        .into_iter()
        .map(|f| json!([intervals::percentile(sorted, f), f]))
        .collect()
}

/// Completions per second over 60 slices of the run.
fn rate_over_time(completed_s: &[f64]) -> Vec<Value> {
    const BINS: usize = 60;
    let span = completed_s.iter().copied().fold(0.0, f64::max);
    if span <= 0.0 {
        return Vec::new();
    }
    let width = span / BINS as f64;
    let mut counts = [0u64; BINS];
    for &t in completed_s {
        counts[((t / width) as usize).min(BINS - 1)] += 1;
    }
    counts
        .iter()
        .enumerate()
        .map(|(i, &c)| json!([(i as f64 + 0.5) * width, c as f64 / width]))
        .collect()
}

const TEMPLATE: &str = include_str!("compare.html");

/// Runs the comparison; its exit status.
pub fn run(args: &CompareArgs) -> Result<Exit> {
    if let Some(flag) = args
        .new
        .iter()
        .find(|p| p.to_string_lossy().starts_with('-'))
    {
        bail!(
            "`{}` after `--` would be read as a run directory: give compare's flags before BASE",
            flag.display()
        );
    }
    let base = Side::read("base", &args.base)?;
    let new = Side::read("new", &args.new)?;
    let reference = &base.runs[0];
    let mut refused = Vec::new();
    for run in base.runs.iter().skip(1).chain(&new.runs) {
        let d = differences(reference, run);
        if !d.is_empty() {
            refused.push(format!(
                "  {} differs from {}: {}",
                run.dir.display(),
                reference.dir.display(),
                d.join(", ")
            ));
        }
    }
    if !refused.is_empty() {
        let text = refused.join("\n");
        if !args.force {
            bail!("these runs are not comparable (--force compares them all the same):\n{text}");
        }
        eprintln!("loadgen-node: warning: comparing runs of other settings (--force):\n{text}");
    }
    let c = compare(&base, &new, args.noise_threshold);
    for line in print(&c).lines() {
        println!("{}", line.trim_end());
    }
    if let Some(out) = &args.report {
        html_report::write_page(TEMPLATE, &report_data(&c, &base, &new), out)?;
        println!("report: {}", out.display());
    }
    let Some(limit) = args.fail_on_regression else {
        return Ok(Exit::Done);
    };
    let failing: Vec<String> = c
        .rows
        .iter()
        .filter(|r| r.metric.judged && r.verdict == Verdict::Regressed)
        .filter_map(|r| {
            let w = r.worse_beyond_interval()?;
            (w > limit).then(|| format!("{} is worse by {w:.1} % at least", r.metric.label))
        })
        .chain(
            (c.validity_change == Some(Verdict::Regressed))
                .then(|| format!("validity went from {} to {}", c.validity.0, c.validity.1)),
        )
        .collect();
    if failing.is_empty() {
        println!("--fail-on-regression {limit}: passed");
        return Ok(Exit::Done);
    }
    println!(
        "--fail-on-regression {limit}: FAILED: {}",
        failing.join("; ")
    );
    Ok(Exit::Regressed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_dir::conformance_run;

    #[test]
    fn the_metrics_follow_the_scenario() {
        let labels = |s, p, t| -> Vec<String> {
            metrics(s, p, t)
                .into_iter()
                .map(|m| format!("{}{}", if m.judged { "*" } else { "" }, m.key))
                .collect()
        };
        assert_eq!(
            labels("Server", 0.99, false),
            [
                "*result_99.00_percentile_latency_ns",
                "result_50.00_percentile_latency_ns",
                "result_99.90_percentile_latency_ns",
                "result_completed_samples_per_sec"
            ]
        );
        assert_eq!(
            labels("Server", 0.99, true)[..2],
            [
                "*result_first_token_99.00_percentile_latency_ns",
                "*result_time_per_output_token_99.00_percentile_ns"
            ]
        );
        assert_eq!(
            labels("Offline", 0.99, false),
            ["*result_samples_per_second"]
        );
        assert_eq!(
            labels("MultiStream", 0.99, false)[0],
            "*result_99.00_percentile_per_query_latency_ns"
        );
        // SingleStream judged at p99 lists p99 once.
        assert_eq!(labels("SingleStream", 0.99, false).len(), 3);
        assert_eq!(percentile_name(0.999), "p99.9");
        assert_eq!(percentile_name(0.9), "p90");
    }

    #[test]
    fn an_official_run_against_itself_is_within_noise_by_its_detail_log() {
        // The official LoadGen's own Server run: no side file, its trace
        // compressed, so its detail log's percentiles give the intervals.
        let run = conformance_run("server_perf_qps1000");
        let base = Side::read("base", std::slice::from_ref(&run)).unwrap();
        let new = Side::read("new", std::slice::from_ref(&run)).unwrap();
        assert!(base.runs[0].samples.is_none());
        let c = compare(&base, &new, DEFAULT_NOISE_THRESHOLD);
        // Judged by p99 alone, which has an interval.
        assert_eq!(c.verdict, Verdict::WithinNoise, "{}", print(&c));
        let p99 = &c.rows[0];
        assert_eq!(p99.methods, Some((Method::DetailLog, Method::DetailLog)));
        assert_eq!(p99.verdict, Verdict::WithinNoise);
        let ch = p99.interval.unwrap();
        assert!(ch.lo < 0.0 && ch.hi > 0.0 && ch.pct == 0.0, "{ch:?}");
        // Throughput has no interval from one run a side without samples.
        let rate = c.rows.iter().find(|r| !r.metric.latency).unwrap();
        assert_eq!(rate.verdict, Verdict::NoInterval);
        let text = print(&c);
        assert!(text.contains("detail log's reported percentiles"), "{text}");
        assert!(text.contains("* p99 latency (ms)"), "{text}");
    }

    #[test]
    fn a_change_counts_once_its_whole_interval_is_past_the_noise_threshold() {
        let change = |lo, hi| {
            Some(Change {
                pct: (lo + hi) / 2.0,
                lo,
                hi,
            })
        };
        // Two runs of the same build on a shared host: sure, and tiny.
        let tiny = change(-0.4, -0.01);
        assert_eq!(verdict(tiny, Better::Higher, 0.0), Verdict::Regressed);
        assert_eq!(verdict(tiny, Better::Higher, 1.0), Verdict::WithinNoise);
        // Past the threshold at both ends, either way.
        let slower = change(-11.5, -6.6);
        assert_eq!(verdict(slower, Better::Higher, 1.0), Verdict::Regressed);
        assert_eq!(verdict(slower, Better::Lower, 1.0), Verdict::Improved);
        let up = change(6.6, 11.5);
        assert_eq!(verdict(up, Better::Lower, 1.0), Verdict::Regressed);
        // An interval that reaches into the threshold is noise.
        assert_eq!(
            verdict(change(0.5, 3.0), Better::Lower, 1.0),
            Verdict::WithinNoise
        );
        assert_eq!(verdict(None, Better::Lower, 1.0), Verdict::NoInterval);
    }

    #[test]
    fn other_settings_are_named() {
        let a = RunDir::read(
            &conformance_run("server_perf_qps1000"),
            &conformance_run("server_perf_qps1000"),
        )
        .unwrap();
        let b = RunDir::read(
            &conformance_run("offline_perf_1024"),
            &conformance_run("offline_perf_1024"),
        )
        .unwrap();
        let d = differences(&a, &b).join("\n");
        assert!(
            d.contains("effective_scenario (\"Server\" against \"Offline\")"),
            "{d}"
        );
        assert!(differences(&a, &a).is_empty());
    }

    /// A native run of the null SUT answering like an LLM, with its side
    /// file, in `dir`.
    fn token_run(dir: &std::path::Path) {
        use loadgen_engine::latency_file::{self, LatencyFileSettings};
        use loadgen_engine::null_sut::{NullAnswer, NullSut, SizedQsl};
        use loadgen_engine::runner::{start_test, LogSettings};
        use loadgen_engine::{Scenario, TestMode, TestSettings};
        let logs = LogSettings {
            outdir: dir.to_path_buf(),
            enable_trace: false,
            latency_file: Some(LatencyFileSettings {
                path: dir.join(latency_file::FILE),
                benchmark: "llama2-70b".into(),
            }),
            ..LogSettings::default()
        };
        let settings = TestSettings {
            scenario: Scenario::Server,
            mode: TestMode::PerformanceOnly,
            use_token_latencies: true,
            server_target_qps: 2000.0,
            min_duration_ms: 500,
            min_query_count: 500,
            ..TestSettings::default()
        };
        let sut = NullSut::new("tokens", NullAnswer::Tokens);
        start_test(&sut, &SizedQsl::new(64, 64), &settings, &logs, None).unwrap();
    }

    #[test]
    fn token_runs_are_judged_by_ttft_and_tpot_from_the_side_file() {
        let (a, b) = (
            testkit::Scratch::new("cmp-tokens-a"),
            testkit::Scratch::new("cmp-tokens-b"),
        );
        token_run(&a);
        token_run(&b);
        let base = Side::read("base", &[a.to_path_buf()]).unwrap();
        let new = Side::read("new", &[b.to_path_buf()]).unwrap();
        let c = compare(&base, &new, DEFAULT_NOISE_THRESHOLD);
        let text = print(&c);
        let judged: Vec<&str> = c
            .rows
            .iter()
            .filter(|r| r.metric.judged)
            .map(|r| r.metric.label.as_str())
            .collect();
        assert_eq!(judged, ["p99 TTFT (ms)", "p99 TPOT (ms)"], "{text}");
        for r in c.rows.iter().filter(|r| r.metric.judged) {
            assert_eq!(
                r.methods,
                Some((
                    Method::Samples(SampleSource::SideFile),
                    Method::Samples(SampleSource::SideFile)
                )),
                "{text}"
            );
            assert!(r.interval.is_some(), "{text}");
        }
        assert!(text.contains("completed tokens/s"), "{text}");
        assert!(text.starts_with("compare: llama2-70b, Server"), "{text}");
    }

    #[test]
    fn percentages_are_parsed() {
        assert_eq!(percent("5"), Ok(5.0));
        assert_eq!(percent("2.5%"), Ok(2.5));
        assert!(percent("-1").is_err() && percent("x").is_err());
    }
}
