//! A LoadGen run beside each hostile client of `tests::hostile`, measured:
//! the run's result, p99 latency and QPS, and the sut-node's peak resident
//! memory (its VmHWM). Each attack runs alone against a node of its own
//! (started with `--benchmark resnet50`), beside a ResNet50 Server run of
//! real-sized inputs at 100 QPS with the benchmark's 15 ms bound:
//!
//! - `none`: no attack (the run with `--input-codec zstd`);
//! - `probes`: the largest probe replies asked for and never read, on 8
//!   streams of 2 gRPC connections and 7 streams of a QUIC connection;
//! - `bombs`: 8 connections streaming zstd inputs that each decode to the
//!   node's input limit (602,112 bytes; with BENCH_BOMB=default, 64 MiB,
//!   against a node without `--benchmark`), reading their answers; the run
//!   compresses its inputs with zstd;
//! - `crowd`: every place of the node's connection limits taken, 64
//!   connections without a session from each of 4 addresses, this host's
//!   among them (the node started with its default limits).
//!
//! Then a burst (`burst`): 8 connections of 8 Infer streams that send
//! 64 KiB samples, whose 64 KiB answers they never read, for 5 s, against a
//! node of its own (`--output-size 65536`); printed: the node's peak
//! resident memory during the burst, and its resident memory once the
//! burst's connections have closed, as it settles (sampled every 100 ms for
//! 5 s, the last value).
//!
//! `cargo bench -p tests --bench hostile` (builds the release binaries
//! first); `MLPERF_NET_BINARIES=DIR` runs the binaries in DIR instead, to
//! compare another build. BENCH_QUICK=1 runs 3 s instead of 10;
//! BENCH_ONLY=ATTACK runs one.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench: a failed step ends it, saying which
#![forbid(unsafe_code)]

use std::path::Path;

use tests::hostile::{
    connections_without_sessions, decode_bombs, probe_replies_never_read,
    quic_probe_replies_never_read, slow_streams, streamed_zstd, Attack,
};
use tests::{detail_value, loadgen, scratch, text, SutNode};

/// The node's peak resident memory, in MiB.
fn peak_rss_mib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kib| kib.parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024)
}

/// The node's resident memory now, in MiB.
fn rss_mib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kib| kib.parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024)
}

fn value(dir: &Path, key: &str) -> Option<serde_json::Value> {
    detail_value(dir, key)
}

fn main() {
    if std::env::var_os("MLPERF_NET_BINARIES").is_none() {
        tests::build_release();
    }
    let secs = if std::env::var_os("BENCH_QUICK").is_some() {
        3
    } else {
        10
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    println!(
        "{:<6} | {:<8} | {:>8} | {:>7} | {:>17}",
        "attack", "run", "p99 ms", "QPS", "node RSS peak MiB"
    );
    let only = std::env::var("BENCH_ONLY").ok();
    for attack in ["none", "probes", "bombs", "crowd"] {
        if only.as_deref().is_some_and(|o| o != attack) {
            continue;
        }
        // Bombs of the default input limit (64 MiB) with BENCH_BOMB=default.
        let default_limit = std::env::var("BENCH_BOMB").is_ok_and(|b| b == "default");
        let flags: &[&str] = match attack {
            "crowd" => &[],
            "bombs" if default_limit => &[],
            _ => &["--benchmark", "resnet50"],
        };
        let bomb = if default_limit { 64 << 20 } else { 602_112 };
        let node = SutNode::start(&format!("hostile-{attack}"), flags);
        let addr = node.addr.parse().expect("an address");
        let held: Vec<Attack> = runtime.block_on(async {
            match attack {
                "probes" => {
                    let quic = node.quic.as_deref().expect("QUIC");
                    let pin = node.fingerprint.as_deref().expect("a fingerprint");
                    vec![
                        probe_replies_never_read(addr, 2).await,
                        quic_probe_replies_never_read(quic.parse().expect("an address"), pin, 7)
                            .await,
                    ]
                }
                "bombs" => vec![decode_bombs(addr, 8, streamed_zstd(bomb)).await],
                "crowd" => {
                    let from: Vec<std::net::IpAddr> =
                        (1..=4).map(|i| [127, 0, 0, i].into()).collect();
                    vec![connections_without_sessions(addr, &from, 64).await]
                }
                _ => vec![],
            }
        });
        let out = scratch(&format!("bench-hostile-{attack}"));
        let duration = format!("min_duration={}", secs * 1000);
        let mut args = vec![
            "--sut",
            &node.addr,
            "--model",
            "resnet50",
            "--scenario",
            "Server",
            "--mode",
            "PerformanceOnly",
            "--set",
            "target_qps=100",
            "--set",
            &duration,
            "--total-sample-count",
            "1024",
            "--no-trace",
            "--output-dir",
            out.to_str().expect("a utf-8 path"),
        ];
        if matches!(attack, "none" | "bombs") {
            args.extend(["--input-codec", "zstd"]);
        }
        let o = loadgen(&args);
        let rss = peak_rss_mib(node.pid());
        drop(held);
        if !o.status.success() {
            let err = text(&o.stderr);
            let why = err.lines().last().unwrap_or_default();
            println!("{attack:<6} | failed: {why} | node RSS peak {rss} MiB");
            continue;
        }
        let result = value(&out, "result_validity")
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        let p99 = value(&out, "result_99.00_percentile_latency_ns")
            .and_then(|v| v.as_f64())
            .unwrap_or(f64::NAN)
            / 1e6;
        let qps = value(&out, "result_completed_samples_per_sec")
            .and_then(|v| v.as_f64())
            .unwrap_or(f64::NAN);
        println!("{attack:<6} | {result:<8} | {p99:>8.2} | {qps:>7.1} | {rss:>17}");
    }
    if only.as_deref().is_none_or(|o| o == "burst") {
        burst();
    }
}

fn burst() {
    let node = SutNode::start("hostile-burst", &["--output-size", "65536"]);
    let addr = node.addr.parse().expect("an address");
    let before = rss_mib(node.pid());
    // A runtime of its own: dropped, it closes every connection at once.
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let attack = runtime.block_on(async {
        let attack = slow_streams(addr, 8, 8, 64 << 10).await;
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        attack
    });
    let during = peak_rss_mib(node.pid());
    drop(attack);
    drop(runtime);
    let mut after = rss_mib(node.pid());
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        after = rss_mib(node.pid());
    }
    println!(
        "burst: node RSS {before} MiB before, {during} MiB peak during, {after} MiB 5 s after"
    );
}
