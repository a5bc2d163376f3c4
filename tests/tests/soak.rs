//! The soak test, outside the default suite (ignored): a Server run at a high
//! rate (SOAK_QPS, default 3000) through three sut-nodes for SOAK_SECONDS
//! (default 600), the resident
//! memory of every process sampled each second. It must end VALID with no
//! error, and no process's memory may keep growing: the last third's peak
//! stays within 10 % (plus 16 MiB) of the first third's.
//!
//! cargo build --release --bins && \
//!   cargo test --release -p tests --test soak -- --ignored --nocapture

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tests::{binary, detail_value, scratch, sut_list, text, SutNode};

/// Resident memory of `pid` in KiB (`VmRSS`), if it still runs.
fn rss_kib(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Peak of each third of `samples`.
fn thirds(samples: &[u64]) -> (u64, u64) {
    let n = samples.len() / 3;
    let first = samples[..n].iter().copied().max().unwrap_or(0);
    let last = samples[samples.len() - n..]
        .iter()
        .copied()
        .max()
        .unwrap_or(0);
    (first, last)
}

#[test]
#[ignore = "a 10-minute soak; run it on its own (see the module's doc)"]
fn server_at_a_high_rate_keeps_memory_flat() {
    let seconds: u64 = std::env::var("SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let qps = std::env::var("SOAK_QPS").unwrap_or_else(|_| "3000".into());
    let nodes: Vec<SutNode> = ["soak-1", "soak-2", "soak-3"]
        .iter()
        .map(|n| SutNode::start(n, &["--service-time", "fixed:100", "--max-batch-size", "8"]))
        .collect();
    let out = scratch("soak");
    let sut = sut_list(&nodes);
    let min_duration = format!("min_duration={}", seconds * 1000);
    let target_qps = format!("target_qps={qps}");
    let mut lg = Command::new(binary("loadgen-node"))
        .args(["--sut", &sut, "--model", "resnet50", "--scenario", "Server"])
        .args([
            "--mode",
            "PerformanceOnly",
            "--set",
            &target_qps,
            "--set",
            &min_duration,
        ])
        // A bound of 1 s: the soak is about memory and errors, not this
        // host's latency.
        .args(["--set", "target_latency=1000"])
        .args([
            "--sample-bytes",
            "1024",
            "--total-sample-count",
            "4096",
            "--no-trace",
        ])
        .arg("--output-dir")
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("loadgen-node starts");

    let pids: Vec<(String, i32)> = std::iter::once(("loadgen-node".to_string(), lg.id() as i32))
        .chain(nodes.iter().map(|n| (n.name.clone(), n.pid())))
        .collect();
    let mut samples: Vec<Vec<u64>> = vec![Vec::new(); pids.len()];
    let started = Instant::now();
    let limit = Duration::from_secs(seconds * 2 + 120);
    while lg.try_wait().expect("waits").is_none() {
        assert!(
            started.elapsed() < limit,
            "the run did not end within {limit:?}"
        );
        for (i, (_, pid)) in pids.iter().enumerate() {
            if let Some(kib) = rss_kib(*pid) {
                samples[i].push(kib);
            }
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let o = lg.wait_with_output().expect("loadgen-node output");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        detail_value(&out, "result_validity").and_then(|v| v.as_str().map(String::from)),
        Some("VALID".into()),
        "{}",
        text(&o.stdout)
    );
    assert!(
        detail_value(&out, "error_runtime").is_none(),
        "errors in the detail log"
    );
    for ((name, _), s) in pids.iter().zip(&samples) {
        assert!(s.len() >= 30, "{name}: only {} memory samples", s.len());
        let (first, last) = thirds(s);
        println!("{name}: peak RSS {first} KiB in the first third, {last} KiB in the last");
        assert!(
            last <= first + first / 10 + 16 * 1024,
            "{name}: memory grew from {first} KiB to {last} KiB"
        );
    }
}
