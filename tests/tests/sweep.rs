//! `loadgen-node sweep` as users meet it: the highest VALID Server target
//! of a synthetic node (2 ms a sample, one at a time), found to 5 %, agrees
//! with the native engine's FindPeakPerformance on the same node; a second
//! sweep resumes from the first's points; other flags are refused there.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use serde_json::Value;
use tests::{loadgen, scratch, text, SutNode, SMALL_DATA};

fn args<'a>(node: &'a SutNode, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["--sut", &node.addr, "--scenario", "Server"];
    a.extend_from_slice(SMALL_DATA);
    a.extend_from_slice(&["--progress-interval", "0"]);
    // Early stopping at p99 needs about 460 queries; a 500 ms bound keeps
    // the knee where the node's queue has grown for a while, far above a
    // busy host's stalls.
    a.extend_from_slice(&["--set", "min_duration=1000", "--set", "min_query_count=500"]);
    a.extend_from_slice(&["--set", "target_latency=500"]);
    a.extend_from_slice(extra);
    a
}

#[test]
fn sweep_finds_the_highest_valid_target_and_agrees_with_find_peak_performance() {
    let node = SutNode::start("sweep", &["--service-time", "fixed:2000"]);
    let root = scratch("sweep");
    let dir = root.join("sweep");
    let d = dir.to_str().unwrap();
    let mut sweep = vec![
        "sweep",
        "--start",
        "200",
        "--precision",
        "5",
        "--output-dir",
        d,
    ];
    sweep.extend(args(&node, &[]));
    let o = loadgen(&sweep);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("mlperf_net_sweep.json")).unwrap())
            .unwrap();
    let lo = record["highest_valid_qps"]
        .as_f64()
        .expect("a VALID target");
    let hi = record["lowest_invalid_qps"]
        .as_f64()
        .expect("an INVALID one");
    assert!(lo < hi && (hi - lo) / lo <= 0.05, "{lo} {hi}\n{out}");
    assert!(
        out.contains(&format!("highest VALID target: {lo} QPS")),
        "{out}"
    );
    assert!(out.contains("Where the time went at the knee"), "{out}");
    assert!(out.contains("sweep node_queue"), "{out}");
    // Bracketed by doubling from 200, then bisected.
    let points = record["points"].as_array().unwrap();
    let targets: Vec<f64> = points
        .iter()
        .map(|p| p["target_qps"].as_f64().unwrap())
        .collect();
    assert!(
        targets.contains(&200.0) && targets.contains(&400.0),
        "{targets:?}"
    );
    for p in points {
        let pd = std::path::Path::new(p["dir"].as_str().unwrap());
        for f in [
            "mlperf_log_summary.txt",
            "mlperf_log_detail.txt",
            "mlperf_net_breakdown.json",
            "mlperf_net_latencies.bin",
            "loadgen-node.log",
        ] {
            assert!(pd.join(f).is_file(), "{} has no {f}", pd.display());
        }
        assert!(
            p["judged_ns"].as_f64().is_some() && p["nodes"][0]["name"] == "sweep",
            "{p}"
        );
    }
    assert!(dir.join("mlperf_net_sweep.html").is_file());

    // Again: every point is read back, none is run.
    let o = loadgen(&sweep);
    let again = text(&o.stdout);
    assert!(o.status.success(), "{again}");
    let lines: Vec<&str> = again.lines().filter(|l| l.starts_with("qps ")).collect();
    assert_eq!(lines.len(), points.len(), "{again}");
    assert!(
        lines.iter().all(|l| l.ends_with("(kept from before)")),
        "{again}"
    );
    assert!(
        again.contains(&format!("highest VALID target: {lo} QPS")),
        "{again}"
    );

    // Other flags in the same directory: refused.
    let mut other = vec!["sweep", "--start", "200", "--output-dir", d];
    other.extend(args(&node, &["--set", "min_duration=1500"]));
    let o = loadgen(&other);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("holds a sweep of other run flags"),
        "{}",
        text(&o.stderr)
    );

    // FindPeakPerformance on the same node and settings: its peak (which
    // weighs the latency bound alone, not early stopping) within the
    // sweep's bracket, give or take its precision.
    let fp = root.join("find-peak");
    let mut find = vec![
        "--mode",
        "FindPeakPerformance",
        "--set",
        "target_qps=200",
        "--output-dir",
    ];
    find.push(fp.to_str().unwrap());
    find.extend(args(&node, &[]));
    let o = loadgen(&find);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let detail = std::fs::read_to_string(fp.join("mlperf_log_detail.txt")).unwrap();
    let peak: f64 = detail
        .split("Found peak performance field: ")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no peak in {}", fp.display()));
    assert!(
        lo * 0.95 <= peak && peak <= hi * 1.05,
        "FindPeakPerformance {peak} against the sweep's [{lo}, {hi})"
    );
}
