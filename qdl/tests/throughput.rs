//! Throughput and latency through the QDL to one in-process fake node, with
//! the LoadGen, the QDL and the node sharing the machine's cores. Ignored by
//! default (they measure, and take seconds); run them in release mode:
//!
//! ```sh
//! cargo test -p qdl --release --test throughput -- --ignored --nocapture
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

mod common;

use common::*;
use loadgen_engine::{Scenario, TestSettings};
use qdl::Qdl;

const LOADED: usize = 1024;

fn fast_node() -> FakeNode {
    FakeNode::start(Behaviour {
        record: false,
        ..Behaviour::named("bench")
    })
}

fn summary_value(ran: &Ran, key: &str) -> String {
    let text = std::fs::read_to_string(ran.dir.join("mlperf_log_summary.txt")).expect("summary");
    text.lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix(key)
                .map(|v| v.trim_start_matches([' ', ':']).trim().to_string())
        })
        .unwrap_or_else(|| panic!("no {key:?} in the summary:\n{text}"))
}

#[test]
#[ignore = "measurement; run in release with --ignored --nocapture"]
fn offline_samples_per_second() {
    let node = fast_node();
    let qdl: Qdl = connect(&[&node], LOADED);
    let settings = TestSettings {
        scenario: Scenario::Offline,
        offline_expected_qps: 300_000.0,
        min_duration_ms: 2_000,
        min_query_count: 1,
        ..TestSettings::default()
    };
    let ran = run(&qdl, &settings, LOADED, "bench-offline");
    assert_eq!(ran.outcome.run_error, None);
    let t = qdl.stats().total();
    println!(
        "Offline: {} samples/s ({} samples in {:.2} s wall, {} FromNode messages)",
        summary_value(&ran, "Samples per second"),
        t.answers_received,
        ran.took.as_secs_f64(),
        t.messages_received
    );
}

/// Prints the summary's result and latency lines.
fn print_latencies(title: &str, ran: &Ran) {
    let text = std::fs::read_to_string(ran.dir.join("mlperf_log_summary.txt")).expect("summary");
    let keep = [
        "Result is",
        "Completed samples per second",
        "Scheduled samples per second",
        "QPS w/o loadgen overhead",
        "Min latency",
        "Mean latency",
        "50.00 percentile",
        "90.00 percentile",
        "99.00 percentile",
        "99.90 percentile",
        "Max latency",
    ];
    println!("{title}:");
    for l in text
        .lines()
        .filter(|l| keep.iter().any(|k| l.starts_with(k)))
    {
        println!("  {l}");
    }
}

fn server(qps: f64) {
    let node = fast_node();
    let qdl: Qdl = connect(&[&node], LOADED);
    let settings = TestSettings {
        scenario: Scenario::Server,
        server_target_qps: qps,
        min_duration_ms: 5_000,
        min_query_count: 1,
        ..TestSettings::default()
    };
    let ran = run(&qdl, &settings, LOADED, &format!("bench-server-{qps}"));
    assert_eq!(ran.outcome.run_error, None);
    print_latencies(&format!("Server at {qps} QPS"), &ran);
}

#[test]
#[ignore = "measurement; run in release with --ignored --nocapture"]
fn server_at_100k_qps() {
    server(100_000.0);
}

#[test]
#[ignore = "measurement; run in release with --ignored --nocapture"]
fn server_at_20k_qps() {
    server(20_000.0);
}

#[test]
#[ignore = "measurement; run in release with --ignored --nocapture"]
fn single_stream_round_trip() {
    let node = fast_node();
    let qdl: Qdl = connect(&[&node], LOADED);
    let ran = run(&qdl, &single_stream(20_000), LOADED, "bench-single");
    assert_eq!(ran.outcome.run_error, None);
    print_latencies("SingleStream (one sample in flight)", &ran);
}
