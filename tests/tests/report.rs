//! The HTML pages in a real headless browser: they load without errors and
//! draw the expected series: the run report after a run (`--report`) and
//! from an output directory (`loadgen-node report DIR`), the comparison of
//! `loadgen-node compare --report` and the plot of `loadgen-node sweep`,
//! these two also in a screenshot, whose pixels must show each series'
//! colour. Runs where CHROMIUM_BIN names a Chromium (tests/report/run.sh
//! installs Debian's and sets it); skipped otherwise.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::process::Command;

use tests::{binary, loadgen, scratch, text, SutNode, SMALL_DATA};

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

/// Chromium's screenshot of the page, and the number of its pixels of
/// each colour asked for (`0xRRGGBB`).
fn screenshot(chromium: &str, page: &std::path::Path, colours: &[u32]) -> Vec<usize> {
    let png = page.with_extension("png");
    let o = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg("--window-size=1000,1800")
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let decoder = png::Decoder::new(std::fs::File::open(&png).expect("a screenshot"));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("its pixels");
    let step = info.color_type.samples();
    assert!(step >= 3, "{:?}", info.color_type);
    let pixels: Vec<u32> = buf[..info.buffer_size()]
        .chunks(step)
        .map(|p| u32::from(p[0]) << 16 | u32::from(p[1]) << 8 | u32::from(p[2]))
        .collect();
    colours
        .iter()
        .map(|c| pixels.iter().filter(|&&p| p == *c).count())
        .collect()
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
            "mlperf_net_latencies.bin",
            "mlperf_net_report.html"
        ]
    );
}

#[test]
fn the_compare_and_sweep_pages_draw_their_series_in_a_real_browser() {
    let Ok(chromium) = std::env::var("CHROMIUM_BIN") else {
        eprintln!("skipped: CHROMIUM_BIN is not set (tests/report/run.sh sets it)");
        return;
    };
    let node = SutNode::start("pages", &["--service-time", "fixed:1000"]);
    let root = scratch("pages");
    let (a, b) = (root.join("a"), root.join("b"));
    for out in [&a, &b] {
        run(
            &node.addr,
            out,
            &["--no-trace", "--set", "min_query_count=500"],
        );
    }
    let page = root.join("compare.html");
    let o = Command::new(binary("loadgen-node"))
        .arg("compare")
        .arg("--report")
        .arg(&page)
        .arg(&a)
        .arg("--")
        .arg(&b)
        .output()
        .expect("loadgen-node compare runs");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let dom = rendered(&chromium, &page);
    assert_eq!(attr(&dom, "data-error"), None, "the page's script failed");
    assert_eq!(
        attr(&dom, "data-drawn"),
        Some("cdf,tail,throughput,breakdown")
    );
    for series in [
        "base (500 samples)",
        "new (500 samples)",
        "base tail",
        "new tail",
        "base run 1",
        "new run 1",
        "base/pages/node_compute/p99",
    ] {
        assert!(
            dom.contains(&format!("data-name=\"{series}\"")),
            "no {series} drawn"
        );
    }
    assert!(!dom.contains("points=\"\""), "an empty series");
    assert!(dom.contains("id=\"verdict\""));
    // Base blue, new orange: both plotted.
    let px = screenshot(&chromium, &page, &[0x1565c0, 0xef6c00]);
    assert!(px.iter().all(|&n| n > 500), "series pixels {px:?}");

    // A sweep of three targets, its plot.
    let sweep = root.join("sweep");
    let mut args: Vec<String> = ["sweep", "--qps", "200,400,3000", "--sut", &node.addr]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for a in SMALL_DATA.iter().chain(&[
        "--scenario",
        "Server",
        "--set",
        "min_duration=500",
        "--set",
        "min_query_count=500",
        "--set",
        "target_latency=50",
        "--progress-interval",
        "0",
        "--output-dir",
    ]) {
        args.push(a.to_string());
    }
    args.push(sweep.display().to_string());
    let o = Command::new(binary("loadgen-node"))
        .args(&args)
        .output()
        .expect("loadgen-node sweep runs");
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    let page = sweep.join("mlperf_net_sweep.html");
    let dom = rendered(&chromium, &page);
    assert_eq!(attr(&dom, "data-error"), None, "the page's script failed");
    assert_eq!(attr(&dom, "data-drawn"), Some("curve,throughput,knee"));
    for series in [
        "p99 latency (judged)",
        "p50 latency",
        "p99.9 latency",
        "pages p99 (breakdown)",
        "completed samples/s",
        "p99 latency (judged)/VALID",
        "p99 latency (judged)/INVALID",
        "bound",
    ] {
        assert!(
            dom.contains(&format!("data-name=\"{series}\"")),
            "no {series} drawn"
        );
    }
    // p50 blue, p99.9 orange (dashed, partly under the judged line),
    // completed green: more pixels of each than its legend's text has.
    let px = screenshot(&chromium, &page, &[0x1565c0, 0xef6c00, 0x2e7d32]);
    assert!(px.iter().all(|&n| n > 100), "series pixels {px:?}");
}
