//! The HTML report in a real headless browser: it loads without errors and
//! draws the expected series, after a run (`--report`) and from an output
//! directory (`loadgen-node report DIR`). Runs where CHROMIUM_BIN names a
//! Chromium (tests/report/run.sh installs Debian's and sets it); skipped
//! otherwise.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::process::Command;

use tests::{binary, loadgen, scratch, text, SutNode};

/// The page's DOM once its script has run.
fn rendered(chromium: &str, page: &std::path::Path) -> String {
    let o = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    assert!(o.status.success(), "{}", text(&o.stderr));
    text(&o.stdout)
}

fn attr<'a>(dom: &'a str, name: &str) -> Option<&'a str> {
    let rest = dom.split(&format!("{name}=\"")).nth(1)?;
    rest.split('"').next()
}

fn run(sut: &str, out: &std::path::Path, extra: &[&str]) {
    let dir = out.to_str().expect("utf-8 path");
    let mut args = vec!["--sut", sut, "--scenario", "Server", "--model", "resnet50"];
    args.extend_from_slice(&["--sample-bytes", "64", "--total-sample-count", "300"]);
    args.extend_from_slice(&["--performance-sample-count", "100", "--output-dir", dir]);
    args.extend_from_slice(&["--set", "target_qps=500", "--set", "min_duration=1000"]);
    args.extend_from_slice(&["--set", "min_query_count=100"]);
    args.extend_from_slice(extra);
    let o = loadgen(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

#[test]
fn the_report_draws_its_charts_in_a_real_browser() {
    let Ok(chromium) = std::env::var("CHROMIUM_BIN") else {
        eprintln!("skipped: CHROMIUM_BIN is not set (tests/report/run.sh sets it)");
        return;
    };
    let nodes = [SutNode::start("rep-a", &[]), SutNode::start("rep-b", &[])];
    let sut = format!("{},{}", nodes[0].addr, nodes[1].addr);

    // After a run, with its trace: every chart.
    let out = scratch("report-run");
    let page = out.join("report.html");
    run(
        &sut,
        &out,
        &["--report", page.to_str().expect("utf-8 path")],
    );
    let dom = rendered(&chromium, &page);
    assert_eq!(attr(&dom, "data-error"), None, "the page's script failed");
    assert_eq!(
        attr(&dom, "data-drawn"),
        Some("cdf,throughput,latency-over-time,breakdown")
    );
    for series in [
        "latency CDF (trace)",
        "scheduled /s",
        "completed /s",
        "p50 latency",
        "p99 latency",
        "bound",
        "rep-a/node_compute/p99",
        "rep-b/wire_and_qdl/p50",
    ] {
        assert!(
            dom.contains(&format!("data-name=\"{series}\"")),
            "no {series} drawn"
        );
    }
    // Polylines with points: really drawn, not empty.
    assert!(!dom.contains("points=\"\""), "an empty series");
    assert!(dom.contains("id=\"validity\""));
    assert!(dom.contains("<th>bytes sent</th>"), "no per-node traffic");

    // From a directory without trace: the detail log's percentiles.
    let out = scratch("report-dir");
    run(&sut, &out, &["--no-trace"]);
    let o = Command::new(binary("loadgen-node"))
        .arg("report")
        .arg(&out)
        .output()
        .expect("loadgen-node report runs");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let dom = rendered(&chromium, &out.join("mlperf_net_report.html"));
    assert_eq!(attr(&dom, "data-error"), None, "the page's script failed");
    assert_eq!(attr(&dom, "data-drawn"), Some("cdf,breakdown"));
    assert!(dom.contains("data-name=\"latency percentiles (detail log)\""));
    assert!(dom.contains("No trace log in this directory"));
    // Beside the four MLPerf logs (the trace empty, as --no-trace leaves
    // it): the breakdown and the report, nothing else.
    let mut files: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "mlperf_log_accuracy.json",
            "mlperf_log_detail.txt",
            "mlperf_log_summary.txt",
            "mlperf_log_trace.json",
            "mlperf_net_breakdown.json",
            "mlperf_net_report.html"
        ]
    );
}
