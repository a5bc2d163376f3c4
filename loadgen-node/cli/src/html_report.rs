//! The run's report as one self-contained HTML file (no network access
//! needed: the figures are embedded as JSON and drawn as SVG by the page's
//! own script). Built from an output directory of either engine: the detail
//! log, the trace log when there is one, and the latency breakdown when
//! there is one. Reads the MLPerf logs, never writes them.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{json, Map, Value};

use crate::run_dir;

/// `loadgen-node report DIR`: the report of an existing output directory.
#[derive(clap::Args, Debug, Clone)]
pub struct ReportArgs {
    /// An output directory of loadgen-node (either engine) or of the
    /// official LoadGen: its mlperf_log_detail.txt is required.
    pub dir: PathBuf,

    /// Where to write the report [default: DIR/mlperf_net_report.html].
    #[arg(long, value_name = "FILE.html")]
    pub out: Option<PathBuf>,

    /// The run's --extras-dir, where its latency breakdown is [default:
    /// DIR].
    #[arg(long, value_name = "EXTRAS")]
    pub extras_dir: Option<PathBuf>,
}

/// After a run with `--report FILE.html`: writes it, or says why not (the
/// run's result stands either way).
pub fn after_run(report: Option<&Path>, output_dir: &Path, extras: &Path) {
    let Some(out) = report else {
        return;
    };
    match write(output_dir, extras, out) {
        Ok(()) => println!("report: {}", out.display()),
        Err(e) => eprintln!("loadgen-node: warning: --report: {e:#}"),
    }
}

/// `loadgen-node report`: writes the HTML page of the run in `args.dir`
/// to `args.out` (by default beside its logs).
pub fn run(args: &ReportArgs) -> Result<()> {
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| args.dir.join("mlperf_net_report.html"));
    write(
        &args.dir,
        args.extras_dir.as_ref().unwrap_or(&args.dir),
        &out,
    )?;
    println!("report: {}", out.display());
    Ok(())
}

/// Writes the report of the run whose logs are in `dir` (and its
/// breakdown in `extras`) to `out`.
pub fn write(dir: &Path, extras: &Path, out: &Path) -> Result<()> {
    let data = gather(dir, extras)?;
    write_page(TEMPLATE, &data, out)
}

/// Writes one of loadgen-node's HTML pages: `template` with the shared
/// styles (`page.css`) in its `/*STYLE*/` place, the drawing helpers
/// (`charts.js`) in its `/*CHARTS*/` script and `data` in its
/// `/*DATA*/null` one.
pub fn write_page(template: &str, data: &Value, out: &Path) -> Result<()> {
    // `</` may not appear inside the script element that holds the data.
    let json = serde_json::to_string(data)?.replace("</", "<\\/");
    let page = template
        .replace("/*STYLE*/", STYLE)
        .replace("/*CHARTS*/", CHARTS)
        .replace("/*DATA*/null", &json);
    std::fs::write(out, page).with_context(|| format!("cannot write {}", out.display()))
}

const TEMPLATE: &str = include_str!("report.html");
const CHARTS: &str = include_str!("charts.js");
const STYLE: &str = include_str!("page.css");

/// Points of the latency CDF and bins of the timeline.
const CDF_POINTS: usize = 200;
const TIME_BINS: usize = 120;

fn gather(dir: &Path, extras: &Path) -> Result<Value> {
    let detail = run_dir::read_detail(&dir.join(run_dir::DETAIL))?;
    let get = |k: &str| detail.get(k).cloned().unwrap_or(Value::Null);
    let mut percentiles: Vec<(f64, Value)> = detail
        .iter()
        .filter_map(|(k, v)| {
            let p = k
                .strip_prefix("result_")?
                .strip_suffix("_percentile_latency_ns")?;
            Some((p.parse::<f64>().ok()?, v.clone()))
        })
        .collect();
    percentiles.sort_by(|a, b| a.0.total_cmp(&b.0));
    let settings: Map<String, Value> = detail
        .iter()
        .filter(|(k, _)| k.starts_with("effective_"))
        .map(|(k, v)| (k["effective_".len()..].to_string(), v.clone()))
        .collect();
    let network: Map<String, Value> = detail
        .iter()
        .filter(|(k, _)| k.starts_with("network_"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let results: Map<String, Value> = detail
        .iter()
        .filter(|(k, _)| k.starts_with("result_") && !k.ends_with("_percentile_latency_ns"))
        .map(|(k, v)| (k["result_".len()..].to_string(), v.clone()))
        .collect();
    let breakdown = run_dir::read_breakdown(extras)?.unwrap_or(Value::Null);
    let trace_path = dir.join(run_dir::TRACE);
    let trace = match trace_path.exists() {
        true => trace_figures(&trace_path)?,
        false => Value::Null,
    };
    Ok(json!({
        "dir": dir.display().to_string(),
        "sut_name": get("sut_name"),
        "loadgen_version": get("loadgen_version"),
        "scenario": get("effective_scenario"),
        "mode": get("effective_test_mode"),
        "validity": get("result_validity"),
        "results": results,
        "percentiles": percentiles.into_iter().map(|(p, v)| json!([p, v])).collect::<Vec<_>>(),
        "early_stopping": { "met": get("early_stopping_met"), "text": get("early_stopping_result") },
        "settings": settings,
        "network": network,
        "breakdown": breakdown,
        "trace": trace,
    }))
}

/// From the trace's sample events (scheduled time in µs, latency in ns):
/// the latency CDF and the timeline of the samples in it.
fn trace_figures(path: &Path) -> Result<Value> {
    // (scheduled µs, latency ns) of every sample.
    let samples: Vec<(f64, f64)> = run_dir::trace_samples(path)?
        .into_iter()
        .map(|t| (t.ts_us, t.latency_ns))
        .collect();
    if samples.is_empty() {
        return Ok(Value::Null);
    }
    let mut lat: Vec<f64> = samples.iter().map(|s| s.1).collect();
    lat.sort_by(f64::total_cmp);
    let n = lat.len();
    let cdf: Vec<Value> = (0..=CDF_POINTS)
        .map(|i| {
            let f = i as f64 / CDF_POINTS as f64;
            let idx = ((f * n as f64).ceil() as usize).clamp(1, n) - 1;
            json!([lat[idx], f])
        })
        .collect();

    let start = samples.iter().map(|s| s.0).fold(f64::INFINITY, f64::min);
    let end = samples
        .iter()
        .map(|s| s.0 + s.1 / 1e3)
        .fold(f64::NEG_INFINITY, f64::max);
    let bin_us = ((end - start) / TIME_BINS as f64).max(1.0);
    let bin = |t: f64| (((t - start) / bin_us) as usize).min(TIME_BINS - 1);
    let mut scheduled = vec![0u64; TIME_BINS];
    let mut completed = vec![0u64; TIME_BINS];
    let mut latencies: Vec<Vec<f64>> = vec![Vec::new(); TIME_BINS];
    for &(ts, l) in &samples {
        scheduled[bin(ts)] += 1;
        let done = bin(ts + l / 1e3);
        completed[done] += 1;
        latencies[done].push(l);
    }
    let quantile = |v: &mut Vec<f64>, q: f64| -> Value {
        if v.is_empty() {
            return Value::Null;
        }
        v.sort_by(f64::total_cmp);
        let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
        json!(v[i])
    };
    let per_sec =
        |c: &[u64]| -> Vec<f64> { c.iter().map(|&x| x as f64 / (bin_us / 1e6)).collect() };
    let p50: Vec<Value> = latencies.iter_mut().map(|v| quantile(v, 0.5)).collect();
    let p99: Vec<Value> = latencies.iter_mut().map(|v| quantile(v, 0.99)).collect();
    Ok(json!({
        "samples": n,
        "cdf": cdf,
        "bin_s": bin_us / 1e6,
        "scheduled_per_s": per_sec(&scheduled),
        "completed_per_s": per_sec(&completed),
        "p50_ns": p50,
        "p99_ns": p99,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_dir::conformance_run;

    #[test]
    fn reads_an_official_loadgen_directory_without_trace_or_breakdown() {
        // The official LoadGen's own Server run (its trace is compressed
        // there, so the report falls back on the detail log).
        let run = conformance_run("server_perf_qps1000");
        let d = gather(&run, &run).unwrap();
        assert_eq!(d["scenario"], "Server");
        assert!(d["validity"].is_string(), "{}", d["validity"]);
        let p = d["percentiles"].as_array().unwrap();
        assert!(p.len() >= 6, "{p:?}");
        assert_eq!(p[0][0], 50.0);
        assert!(d["settings"]["target_latency_ns"].as_u64().is_some());
        assert!(d["trace"].is_null() && d["breakdown"].is_null());

        let dir = testkit::Scratch::new("report");
        let out = dir.join("report.html");
        write(&run, &run, &out).unwrap();
        let page = std::fs::read_to_string(&out).unwrap();
        let data = page
            .split("<script id=\"data\" type=\"application/json\">")
            .nth(1)
            .unwrap();
        let data = data.split("</script>").next().unwrap();
        let back: Value = serde_json::from_str(data).unwrap();
        assert_eq!(back, d);
        // Nothing fetched: no external script, style, image or font.
        for fetch in ["src=", "<link", "@import", "url("] {
            assert!(!page.contains(fetch), "{fetch}");
        }
    }

    #[test]
    fn the_trace_gives_the_cdf_and_the_timeline() {
        let dir = testkit::Scratch::new("report-trace");
        let mut trace = String::from("{\"traceEvents\":[\n");
        for i in 0..100 {
            // Scheduled every 10 ms, latency i ms.
            trace.push_str(&format!(
                "{{\"name\":\"Sample\",\"cat\":\"default\",\"ph\":\"b\",\"pid\":1,\"id\":{i},\"ts\":{},\"args\":{{\"complete_ns\":{}}}}},\n",
                i * 10_000,
                (i + 1) * 1_000_000
            ));
        }
        trace.push_str("{}]}\n");
        let path = dir.join("mlperf_log_trace.json");
        std::fs::write(&path, trace).unwrap();
        let t = trace_figures(&path).unwrap();
        assert_eq!(t["samples"], 100);
        let cdf = t["cdf"].as_array().unwrap();
        assert_eq!(cdf.last().unwrap(), &json!([100e6, 1.0]));
        assert_eq!(cdf[100], json!([50e6, 0.5]));
        let scheduled: f64 = t["scheduled_per_s"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() * t["bin_s"].as_f64().unwrap())
            .sum();
        assert!((scheduled - 100.0).abs() < 1e-6, "{scheduled}");
    }
}
