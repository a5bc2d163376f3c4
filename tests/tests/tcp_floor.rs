//! tcp-floor: what `send` counts as answered is what it sent, and what
//! `serve` counts as read, in both loops and over several connections.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use tests::text;

const TCP_FLOOR: &str = env!("CARGO_BIN_EXE_tcp-floor");

fn json(line: &str) -> serde_json::Value {
    serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

fn send(port: &str, args: &[&str]) -> serde_json::Value {
    let o = Command::new(TCP_FLOOR)
        .args(["send", "--connect", &format!("127.0.0.1:{port}")])
        .args(args)
        .output()
        .expect("tcp-floor send runs");
    assert!(o.status.success(), "send {args:?}: {}", text(&o.stderr));
    json(&text(&o.stdout))
}

#[test]
fn every_sample_sent_is_answered_and_counted_by_the_server() {
    let mut serve = Command::new(TCP_FLOOR)
        .args(["serve", "--answer-bytes", "100"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("tcp-floor serve starts");
    let mut out = BufReader::new(serve.stdout.take().expect("piped stdout"));
    let mut port = String::new();
    out.read_line(&mut port).expect("the port line");
    let port = port.trim().to_string();

    // Closed loop: 1,001 samples over 3 connections (334 + 334 + 333), a
    // window of 4.
    let closed = send(
        &port,
        &[
            "--streams",
            "3",
            "--bytes",
            "1000",
            "--count",
            "1001",
            "--window",
            "4",
        ],
    );
    assert_eq!(closed["samples"], 1001, "{closed}");
    assert_eq!(closed["streams"], 3, "{closed}");
    assert!(closed.get("p50_us").is_none(), "{closed}");

    // Open loop: 200 samples at 5,000 per second over 2 connections, and
    // empty payloads.
    let open = send(
        &port,
        &[
            "--streams",
            "2",
            "--bytes",
            "0",
            "--count",
            "200",
            "--rate",
            "5000",
        ],
    );
    assert_eq!(open["samples"], 200, "{open}");
    let p = |k: &str| open[k].as_f64().unwrap_or_else(|| panic!("{k}: {open}"));
    assert!(p("p50_us") > 0.0 && p("p50_us") <= p("p99_us") && p("p99_us") <= p("p999_us"));

    // For a time rather than a count: whatever was sent is answered.
    let timed = send(&port, &["--streams", "2", "--bytes", "64", "--secs", "0.2"]);
    let timed_samples = timed["samples"].as_u64().expect("samples");
    assert!(timed_samples > 0, "{timed}");

    // Closing its stdin ends the server, which counts what it read.
    drop(serve.stdin.take());
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("the figures line");
    assert!(serve.wait().expect("serve ends").success());
    let served = json(&rest);
    assert_eq!(served["samples"], 1001 + 200 + timed_samples, "{served}");
    assert_eq!(
        served["bytes"],
        1001 * 1000 + 64 * timed_samples,
        "{served}"
    );
    assert!(
        served["cpu_s"].as_f64().is_some_and(|c| c >= 0.0),
        "{served}"
    );
}

#[test]
fn a_server_that_is_not_there_is_an_error() {
    // A port held, on which nothing listens.
    let closed = tests::ClosedPort::new();
    let o = Command::new(TCP_FLOOR)
        .args(["send", "--connect", &closed.addr()])
        .args(["--bytes", "10", "--count", "10"])
        .output()
        .expect("tcp-floor send runs");
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("connecting to"),
        "{}",
        text(&o.stderr)
    );
}
