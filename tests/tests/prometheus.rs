//! A real Prometheus scraping a sut-node and loadgen-node during a run, and
//! answering queries about them through its HTTP API. Runs where
//! PROMETHEUS_BIN names the Prometheus binary (tests/prometheus/run.sh
//! installs Debian's and sets it); skipped otherwise.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tests::{binary, scratch, SutNode};

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `GET path` on `addr`: the status code and the body.
fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut c = TcpStream::connect(addr).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut reply = String::new();
    c.read_to_string(&mut reply).ok()?;
    let status = reply.split_whitespace().nth(1)?.parse().ok()?;
    let body = reply.split_once("\r\n\r\n")?.1;
    // Prometheus answers in chunks when it does not know the length first.
    let body = if reply
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        unchunk(body)
    } else {
        body.to_string()
    };
    Some((status, body))
}

fn unchunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// The value of an instant query's first series, if it has one.
fn query(prometheus: &str, promql: &str) -> Option<f64> {
    let q: String = promql
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let (status, body) = get(prometheus, &format!("/api/v1/query?query={q}"))?;
    assert_eq!(status, 200, "{promql}: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("the API's JSON");
    assert_eq!(v["status"], "success", "{promql}: {body}");
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

/// Polls `promql` until its value passes `ok`, for at most `limit`.
fn wait_for(prometheus: &str, promql: &str, ok: impl Fn(f64) -> bool, limit: Duration) -> f64 {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < limit {
        last = query(prometheus, promql);
        if last.is_some_and(&ok) {
            return last.unwrap_or_default();
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("{promql}: last value {last:?} after {limit:?}");
}

#[test]
fn prometheus_scrapes_both_nodes_during_a_run() {
    let Ok(prometheus_bin) = std::env::var("PROMETHEUS_BIN") else {
        eprintln!("skipped: PROMETHEUS_BIN is not set (tests/prometheus/run.sh sets it)");
        return;
    };
    let node = SutNode::start(
        "prom-node",
        &["--metrics", "127.0.0.1:0", "--service-time", "fixed:200"],
    );
    let node_metrics = node
        .metrics
        .clone()
        .expect("the ready line's metrics address");
    let dir = scratch("prometheus");

    // A Server run long enough for several scrapes, its metrics on a port
    // the kernel picks (the line it prints says which).
    let out = dir.join("out");
    let mut run = Command::new(binary("loadgen-node"))
        .args([
            "--sut",
            &node.addr,
            "--scenario",
            "Server",
            "--model",
            "resnet50",
        ])
        .args(["--sample-bytes", "64", "--total-sample-count", "300"])
        .args(["--performance-sample-count", "100", "--no-trace"])
        .args(["--set", "target_qps=300", "--set", "min_duration=12000"])
        .args(["--set", "min_query_count=100", "--metrics", "127.0.0.1:0"])
        .arg("--output-dir")
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        // It ends by itself in seconds, also when an assertion below fails.
        .expect("loadgen-node starts");
    let (stderr_tx, stderr_rx) = std::sync::mpsc::channel();
    let stderr = run.stderr.take().expect("piped stderr");
    let stderr_reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = stderr_tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let loadgen_metrics = loop {
        let line = stderr_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("loadgen-node prints its metrics address");
        if let Some(rest) = line.strip_prefix("loadgen-node: metrics on http://") {
            break rest.trim_end_matches("/metrics").to_string();
        }
    };

    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  \
             - job_name: sut-node\n    static_configs:\n      - targets: ['{node_metrics}']\n  \
             - job_name: loadgen-node\n    static_configs:\n      - targets: ['{loadgen_metrics}']\n"
        ),
    )
    .expect("the config");
    // Prometheus must be told its port: one free a moment ago, and another
    // if it was taken meanwhile.
    let (api, _prometheus) = testkit::with_free_port(testkit::free_tcp_port, |port| {
        let api = format!("127.0.0.1:{port}");
        let log = dir.join("prometheus.log");
        let mut prometheus = Killed(
            Command::new(&prometheus_bin)
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("data").display()
                ))
                .arg(format!("--web.listen-address={api}"))
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).expect("the log"))
                .spawn()
                .expect("prometheus starts"),
        );
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(_)) = prometheus.0.try_wait() {
                let said = std::fs::read_to_string(&log).unwrap_or_default();
                if testkit::says_address_in_use(&said) {
                    return testkit::Started::PortTaken;
                }
                panic!("prometheus ended: {said}");
            }
            if get(&api, "/-/ready").is_some_and(|(status, _)| status == 200) {
                return testkit::Started::Up((api, prometheus));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("prometheus was not ready within 30 s");
    });

    let limit = Duration::from_secs(30);
    let node_sel = "{node=\"prom-node\"}";
    wait_for(&api, "up{job=\"sut-node\"}", |v| v == 1.0, limit);
    wait_for(&api, "up{job=\"loadgen-node\"}", |v| v == 1.0, limit);
    let answered = wait_for(
        &api,
        &format!("sutnode_samples_answered_total{node_sel}"),
        |v| v > 100.0,
        limit,
    );
    // The same samples, counted on both sides of the wire.
    let completed = wait_for(
        &api,
        &format!("loadgen_node_samples_completed_total{node_sel}"),
        |v| v > 100.0,
        limit,
    );
    assert!(answered > 0.0 && completed > 0.0);
    wait_for(&api, "sutnode_sessions_total", |v| v >= 2.0, limit);
    wait_for(&api, "sutnode_connections", |v| v >= 2.0, limit);
    // A histogram Prometheus can compute with: 200 us of service time.
    let p50 = wait_for(
        &api,
        "histogram_quantile(0.5, rate(sutnode_compute_seconds_bucket[5s]))",
        |v| v.is_finite(),
        limit,
    );
    assert!((0.0001..0.01).contains(&p50), "compute p50 {p50} s");
    let compute = wait_for(
        &api,
        "loadgen_node_latency_seconds{node=\"prom-node\",part=\"node_compute\",quantile=\"0.5\"}",
        |v| v > 0.0,
        limit,
    );
    assert!(
        (0.0002..0.01).contains(&compute),
        "node compute p50 {compute} s"
    );
    wait_for(
        &api,
        "rate(loadgen_node_bytes_sent_total[5s])",
        |v| v > 0.0,
        limit,
    );

    let status = run.wait().expect("loadgen-node ends");
    let said = stderr_reader.join().expect("its stderr");
    assert!(status.success(), "{said}");
}
