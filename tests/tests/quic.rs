//! loadgen-node driving real sut-node processes over QUIC, over TLS gRPC, and
//! over both in one run; certificate pinning, CA checks and mutual TLS.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tests::{
    binary, detail_is_intact, detail_value, loadgen, pins, quic_list, scratch, text, SutNode,
};

use tests::SMALL_DATA as DATA;

/// Short runs of each scenario (settings as `--set` pairs).
fn scenarios() -> Vec<(&'static str, Vec<&'static str>)> {
    let fast = vec![
        "min_duration=200",
        "min_query_count=100",
        "target_latency=0.02",
    ];
    vec![
        ("SingleStream", fast.clone()),
        ("MultiStream", fast),
        (
            "Server",
            vec!["target_qps=3000", "min_duration=300", "min_query_count=100"],
        ),
        ("Offline", vec!["target_qps=20000", "min_duration=200"]),
    ]
}

const OFFLINE: &[&str] = &["target_qps=20000", "min_duration=100"];

fn run(sut: &str, scenario: &str, mode: &str, sets: &[&str], extra: &[&str], out: &Path) -> Output {
    let mut args = vec!["--sut", sut, "--scenario", scenario, "--mode", mode];
    args.extend_from_slice(DATA);
    for s in sets {
        args.extend_from_slice(&["--set", s]);
    }
    args.extend_from_slice(extra);
    let out = out.to_str().expect("utf-8 path");
    args.extend_from_slice(&["--output-dir", out]);
    if mode == "AccuracyOnly" {
        args.push("--verify-synthetic");
    }
    loadgen(&args)
}

fn offline(sut: &str, extra: &[&str], tag: &str) -> (Output, tests::Scratch) {
    let out = scratch(tag);
    let o = run(sut, "Offline", "PerformanceOnly", OFFLINE, extra, &out);
    (o, out)
}

fn assert_ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what}: {}\n{}",
        text(&o.stderr),
        text(&o.stdout)
    );
}

#[test]
fn every_scenario_performance_and_accuracy_over_quic() {
    let nodes: Vec<SutNode> = ["q-alpha", "q-beta", "q-gamma"]
        .iter()
        .map(|n| SutNode::start(n, &[]))
        .collect();
    let sut = quic_list(&nodes);
    let pin = pins(&nodes);
    let tls = ["--tls-pin", pin.as_str()];
    for (scenario, sets) in scenarios() {
        let out = scratch(&format!("quic-perf-{scenario}"));
        let o = run(&sut, scenario, "PerformanceOnly", &sets, &tls, &out);
        assert_ok(&o, scenario);
        let summary = std::fs::read_to_string(out.join("mlperf_log_summary.txt")).unwrap();
        assert!(
            summary.contains(&format!("Scenario : {scenario}")),
            "{summary}"
        );
        let issued = detail_value(&out, "result_query_count").and_then(|v| v.as_u64());
        assert!(issued.is_some_and(|n| n > 0), "{scenario}: {issued:?}");
        assert_eq!(
            detail_value(&out, "num_errors"),
            Some(0.into()),
            "{scenario}"
        );
        let name = detail_value(&out, "sut_name").unwrap();
        let name = name.as_str().unwrap();
        for n in ["q-alpha", "q-beta", "q-gamma"] {
            assert!(name.contains(n), "{name} lacks {n}");
        }
        assert_eq!(
            detail_value(&out, "network_transport"),
            Some("quic".into()),
            "{scenario}"
        );

        let out = scratch(&format!("quic-acc-{scenario}"));
        let o = run(&sut, scenario, "AccuracyOnly", &sets, &tls, &out);
        assert_ok(&o, scenario);
        assert!(
            text(&o.stdout).contains("logged answers match their samples"),
            "{scenario}: {}",
            text(&o.stdout)
        );
    }
}

#[test]
fn a_window_of_three_samples_in_flight_over_quic() {
    let node = SutNode::start("q-window", &[]);
    let sut = quic_list(std::slice::from_ref(&node));
    let pin = pins(std::slice::from_ref(&node));
    let out = scratch("quic-window");
    let extra = ["--tls-pin", pin.as_str(), "--max-in-flight", "3"];
    let o = run(&sut, "Offline", "AccuracyOnly", OFFLINE, &extra, &out);
    assert_ok(&o, "Offline");
    assert!(
        text(&o.stdout).contains("logged answers match their samples"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn llm_first_tokens_travel_over_quic() {
    let node = SutNode::start(
        "q-llm",
        &["--llm-tokens", "4", "--service-time", "fixed:200"],
    );
    let pin = pins(std::slice::from_ref(&node));
    let out = scratch("quic-llm");
    let o = run(
        &quic_list(std::slice::from_ref(&node)),
        "Server",
        "PerformanceOnly",
        &[
            "target_qps=500",
            "min_duration=200",
            "min_query_count=50",
            "use_token_latencies=1",
        ],
        &["--tls-pin", &pin],
        &out,
    );
    assert_ok(&o, "llm");
    let ttft = detail_value(&out, "result_first_token_mean_latency_ns").and_then(|v| v.as_f64());
    assert!(
        ttft.is_some_and(|t| t > 0.0),
        "first-token latencies: {ttft:?}"
    );
}

#[test]
fn grpc_and_quic_nodes_mix_in_one_run() {
    // gRPC nodes are reached over TLS once any --tls-* flag is given.
    let grpc = SutNode::start("mix-grpc", &["--tls"]);
    let quic = SutNode::start("mix-quic", &[]);
    let sut = format!("{},quic://{}", grpc.addr, quic.quic.as_deref().unwrap());
    let pin = format!(
        "{},{}",
        grpc.fingerprint.as_deref().unwrap(),
        quic.fingerprint.as_deref().unwrap()
    );
    for dispatch in ["round-robin", "least-outstanding"] {
        let out = scratch(&format!("mix-{dispatch}"));
        let o = run(
            &sut,
            "Server",
            "AccuracyOnly",
            &["target_qps=2000", "min_duration=200", "min_query_count=100"],
            &["--tls-pin", &pin, "--dispatch", dispatch],
            &out,
        );
        assert_ok(&o, dispatch);
        assert!(text(&o.stdout).contains("logged answers match their samples"));
        let transport = detail_value(&out, "network_transport").unwrap();
        assert_eq!(transport, "mix-grpc: grpcs, mix-quic: quic", "{transport}");
    }
}

#[test]
fn grpc_over_tls_with_pinning() {
    let node = SutNode::start("tls-grpc", &["--tls", "--no-quic"]);
    assert!(node.quic.is_none());
    let fp = node.fingerprint.clone().expect("a fingerprint");
    for sut in [node.addr.clone(), format!("grpcs://{}", node.addr)] {
        let (o, out) = offline(&sut, &["--tls-pin", &fp], "tls-grpc");
        assert_ok(&o, &sut);
        assert_eq!(
            detail_value(&out, "network_transport"),
            Some("grpcs".into())
        );
    }
    // The same node without TLS flags: plain gRPC does not reach it.
    let (o, _) = offline(&node.addr, &[], "tls-grpc-plain");
    assert!(!o.status.success());
    // grpcs:// without a way to check the certificate is refused up front.
    let (o, _) = offline(&format!("grpcs://{}", node.addr), &[], "tls-grpc-nocheck");
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("--tls-pin"), "{}", text(&o.stderr));
}

#[test]
fn a_pin_mismatch_is_refused_naming_the_node_and_both_fingerprints() {
    let node = SutNode::start("pinned", &["--tls"]);
    let actual = node.fingerprint.clone().unwrap();
    let wrong = "ab".repeat(32);
    for sut in [quic_list(std::slice::from_ref(&node)), node.addr.clone()] {
        let (o, _) = offline(&sut, &["--tls-pin", &wrong], "pin-mismatch");
        assert!(!o.status.success(), "{sut}");
        let err = text(&o.stderr);
        assert!(err.contains("pin mismatch"), "{err}");
        assert!(err.contains(&actual) && err.contains(&wrong), "{err}");
        assert!(err.contains(&node.addr), "names the node: {err}");
    }
    // Upper case with colons, as openssl prints it, is the same pin.
    let colons: Vec<String> = actual
        .as_bytes()
        .chunks(2)
        .map(|p| String::from_utf8_lossy(p).to_uppercase())
        .collect();
    let (o, _) = offline(
        &quic_list(std::slice::from_ref(&node)),
        &["--tls-pin", &colons.join(":")],
        "pin-colons",
    );
    assert_ok(&o, "colon pin");
}

#[test]
fn insecure_mode_works_and_warns() {
    let node = SutNode::start("insecure", &[]);
    let (o, _) = offline(
        &quic_list(std::slice::from_ref(&node)),
        &["--tls-insecure"],
        "insecure",
    );
    assert_ok(&o, "insecure");
    assert!(
        text(&o.stderr).contains("NOT verified"),
        "{}",
        text(&o.stderr)
    );
    // And nothing is accepted silently: QUIC without any check is refused.
    let (o, _) = offline(&quic_list(std::slice::from_ref(&node)), &[], "no-check");
    assert!(!o.status.success());
}

/// A CA, and certificates it signs, as PEM files in `dir`.
struct Pki {
    dir: PathBuf,
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    fn new(dir: PathBuf, name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), ca.pem()).unwrap();
        Pki { dir, ca }
    }

    /// Writes `NAME.pem` and `NAME.key`; returns their paths.
    fn issue(&self, name: &str, server: bool) -> (String, String) {
        let names = if server {
            vec!["localhost".to_string(), "127.0.0.1".to_string()]
        } else {
            vec![name.to_string()]
        };
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![if server {
            ExtendedKeyUsagePurpose::ServerAuth
        } else {
            ExtendedKeyUsagePurpose::ClientAuth
        }];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        let (c, k) = (
            self.dir.join(format!("{name}.pem")),
            self.dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c.display().to_string(), k.display().to_string())
    }

    fn ca_path(&self, name: &str) -> String {
        self.dir.join(format!("{name}.pem")).display().to_string()
    }
}

#[test]
fn ca_verification_and_mutual_tls_on_both_transports() {
    let dir = scratch("pki");
    let pki = Pki::new(dir.to_path_buf(), "ca");
    let (server_cert, server_key) = pki.issue("server", true);
    let (client_cert, client_key) = pki.issue("client", false);
    let stranger = Pki::new(dir.to_path_buf(), "other-ca");
    let (bad_cert, bad_key) = stranger.issue("stranger", false);
    let ca = pki.ca_path("ca");

    let node = SutNode::start(
        "mtls",
        &[
            "--tls-cert",
            &server_cert,
            "--tls-key",
            &server_key,
            "--tls-client-ca",
            &ca,
        ],
    );
    let quic = quic_list(std::slice::from_ref(&node));
    let grpc = format!("grpcs://{}", node.addr);
    let known = [
        "--tls-ca",
        ca.as_str(),
        "--tls-client-cert",
        client_cert.as_str(),
        "--tls-client-key",
        client_key.as_str(),
    ];
    for sut in [&quic, &grpc] {
        // A client with a certificate from the node's client CA, checking
        // the node against the CA: accepted.
        let (o, _) = offline(sut, &known, "mtls-ok");
        assert_ok(&o, sut);

        // A client whose certificate another CA signed: refused.
        let (o, out) = offline(
            sut,
            &[
                "--tls-ca",
                &ca,
                "--tls-client-cert",
                &bad_cert,
                "--tls-client-key",
                &bad_key,
            ],
            "mtls-stranger",
        );
        assert!(!o.status.success(), "{sut}: a stranger was let in");
        let err = text(&o.stderr);
        assert!(err.contains(&node.addr), "names the node: {err}");
        assert!(
            !out.join("mlperf_log_summary.txt").exists() || detail_is_intact(&out),
            "{err}"
        );

        // A client with no certificate at all: refused.
        let (o, _) = offline(sut, &["--tls-ca", &ca], "mtls-none");
        assert!(
            !o.status.success(),
            "{sut}: a client without a certificate was let in"
        );
    }
    // The node checked against another CA: refused by the client.
    let other_ca = stranger.ca_path("other-ca");
    let (o, _) = offline(
        &quic,
        &[
            "--tls-ca",
            &other_ca,
            "--tls-client-cert",
            &client_cert,
            "--tls-client-key",
            &client_key,
        ],
        "wrong-ca",
    );
    assert!(!o.status.success());
}

#[test]
fn ready_line_and_listening_flags() {
    // QUIC alone: the ready line names QUIC's address twice.
    let q = SutNode::start("quic-only", &["--no-grpc"]);
    assert_eq!(q.quic.as_deref(), Some(q.addr.as_str()));
    let (o, _) = offline(
        &quic_list(std::slice::from_ref(&q)),
        &["--tls-pin", q.fingerprint.as_deref().unwrap()],
        "quic-only",
    );
    assert_ok(&o, "quic only");

    // QUIC on a port of its own.
    let free_udp = || {
        std::net::UdpSocket::bind("127.0.0.1:0")
            .and_then(|u| u.local_addr())
            .expect("a free UDP port")
            .port()
    };
    let (free, moved) = testkit::with_free_port(free_udp, |port| {
        let free = format!("127.0.0.1:{port}");
        match SutNode::try_start_at("127.0.0.1:0", "moved", &["--quic-listen", &free]) {
            Ok(node) => testkit::Started::Up((free, node)),
            Err(e) if testkit::says_address_in_use(&e) => testkit::Started::PortTaken,
            Err(e) => panic!("{e}"),
        }
    });
    assert_eq!(moved.quic.as_deref(), Some(free.as_str()));
    assert_ne!(moved.addr, free);

    // The UDP twin of an explicit port is taken: a clear failure.
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let o = Command::new(binary("sut-node"))
        .args(["serve", "--name", "clash", "--backend", "synthetic"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .output()
        .expect("sut-node runs");
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(
        err.contains("QUIC") && err.contains(&port.to_string()) && err.contains("--quic-listen"),
        "{err}"
    );
    // Nothing to serve.
    let o = Command::new(binary("sut-node"))
        .args(["serve", "--name", "x", "--backend", "synthetic"])
        .args(["--listen", "127.0.0.1:0", "--no-grpc", "--no-quic"])
        .output()
        .expect("sut-node runs");
    assert!(!o.status.success());
}

/// A long Server run over QUIC in which one of three nodes breaks.
fn node_failure_ends_run(tag: &str, break_it: impl FnOnce(&mut SutNode)) {
    let mut nodes: Vec<SutNode> = (1..=3)
        .map(|i| SutNode::start(&format!("{tag}-{i}"), &[]))
        .collect();
    let (sut, pin) = (quic_list(&nodes), pins(&nodes));
    let mut args: Vec<String> = [
        "--sut",
        &sut,
        "--tls-pin",
        &pin,
        "--scenario",
        "Server",
        "--mode",
        "PerformanceOnly",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(DATA.iter().map(|s| s.to_string()));
    let addr = nodes[1].quic.clone().expect("the node serves QUIC");
    tests::node_failure_ends_run(&args, &scratch(tag), &mut nodes[1], &addr, break_it);
}

#[test]
fn a_killed_quic_node_ends_the_run_invalid_and_promptly() {
    node_failure_ends_run("q-killed", |n| n.kill());
}

#[test]
fn a_stalled_quic_node_ends_the_run_after_the_node_timeout() {
    node_failure_ends_run("q-stalled", |n| {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(n.pid(), libc::SIGSTOP) };
    });
}

#[test]
fn a_node_shutting_down_says_so_over_quic() {
    let node = SutNode::start("q-term", &["--service-time", "fixed:2000"]);
    let out = scratch("q-term");
    let sut = quic_list(std::slice::from_ref(&node));
    let pin = pins(std::slice::from_ref(&node));
    let child = Command::new(binary("loadgen-node"))
        .args(["--sut", &sut, "--tls-pin", &pin, "--scenario", "Server"])
        .args(["--mode", "PerformanceOnly"])
        .args(DATA)
        .args(["--set", "target_qps=200", "--set", "min_duration=60000"])
        .args(["--output-dir", out.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("loadgen-node starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    while detail_value(&out, "generated_query_count").is_none() {
        assert!(Instant::now() < deadline, "the run never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(node.pid(), libc::SIGTERM) };
    let o = child.wait_with_output().expect("loadgen-node ends");
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(
        err.contains(&node.addr) && err.contains("shutting down"),
        "{err}"
    );
}
