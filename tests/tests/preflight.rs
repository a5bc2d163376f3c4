//! `loadgen-node preflight` against synthetic sut-nodes on 127.0.0.1: the
//! measurements, the nodes' self-description (`Describe`) over gRPC and
//! QUIC, the bandwidth verdicts, the system description's Network-division
//! fields, and a clear error for a node that is not there.

use std::path::Path;

use serde_json::Value;
use tests::{loadgen, pins, quic_list, scratch, sut_list, text, SutNode};

/// The fields the submission checker requires of a Network-division system.
const NETWORK_FIELDS: &[&str] = &[
    "is_network",
    "network_type",
    "network_media",
    "network_rate",
    "nic_loadgen",
    "number_nic_loadgen",
    "net_software_stack_loadgen",
    "network_protocol",
    "number_connections",
    "nic_sut",
    "number_nic_sut",
    "net_software_stack_sut",
    "network_topology",
];

fn json(p: &Path) -> Value {
    let t = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&t).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn preflight(sut: &str, dir: &Path, extra: &[&str]) -> std::process::Output {
    let out = dir.join("network.json").display().to_string();
    let mut args = vec![
        "preflight",
        "--sut",
        sut,
        "--seconds",
        "0.3",
        "--round-trips",
        "20",
        "--sample-bytes",
        "4096",
        "--output",
        &out,
    ];
    args.extend(extra);
    loadgen(&args)
}

#[test]
fn measures_describes_and_fills_the_system_description() {
    let nodes = [SutNode::start("pf-a", &[]), SutNode::start("pf-b", &[])];
    let dir = scratch("preflight");
    let system = dir.join("system.json");
    std::fs::write(
        &system,
        r#"{"system_name": "Test Network SUT", "network_media": "optical fiber"}"#,
    )
    .unwrap();
    let sys = system.display().to_string();
    // 1 sample/s of ResNet50 needs 602,112 bytes/s in: any loopback does it.
    let o = preflight(
        &sut_list(&nodes),
        &dir,
        &["--target-qps", "1", "--system-json", &sys],
    );
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", text(&o.stderr));
    assert!(
        out.contains("ingress: required 0.00 Gbit/s (= 1 x 150528 x 4)"),
        "{out}"
    );
    assert!(out.contains(": PASS (margin +"), "{out}");
    let net = json(&dir.join("network.json"));
    let listed = net["nodes"].as_array().expect("nodes");
    assert_eq!(listed.len(), 2);
    for (n, node) in listed.iter().zip(&nodes) {
        assert_eq!(n["name"], node.name.as_str());
        assert!(n["rtt_p50_us"].as_f64().is_some_and(|r| r > 0.0), "{n}");
        assert!(n["rtt_p99_us"].as_f64() >= n["rtt_p50_us"].as_f64());
        assert!(n["in_bytes_per_s"].as_f64().is_some_and(|r| r > 0.0), "{n}");
        assert!(
            n["out_bytes_per_s"].as_f64().is_some_and(|r| r > 0.0),
            "{n}"
        );
        assert_eq!(n["local_nic"]["link_type"], "loopback");
        assert_eq!(n["node_nic"]["link_type"], "loopback");
        assert!(n["node_version"]
            .as_str()
            .is_some_and(|v| v.starts_with("sut-node ")));
        assert_eq!(n["backend"], "synthetic");
        assert!(n["kernel"].as_str().is_some_and(|k| k.starts_with("Linux")));
        // Same host, same clock: well under a second apart.
        assert!(
            n["clock_offset_ms"]
                .as_f64()
                .is_some_and(|o| o.abs() < 1000.0),
            "{n}"
        );
    }
    let s = json(&system);
    for f in NETWORK_FIELDS {
        assert!(s[f].is_string(), "{f} missing or not a string: {s}");
    }
    assert_eq!(s["is_network"], "True");
    assert_eq!(
        s["system_name"], "Test Network SUT",
        "other fields are kept"
    );
    assert_eq!(
        s["network_media"], "optical fiber",
        "a hand-filled field is kept"
    );
    assert_eq!(s["number_connections"], "4");
    assert_eq!(s["number_nic_sut"], "2");
    assert!(s["network_topology"]
        .as_str()
        .unwrap_or_default()
        .contains("[FILL IN]"));

    // A throughput no loopback reaches: FAIL, exit status 5.
    let o = preflight(&sut_list(&nodes), &dir, &["--target-qps", "1e9"]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains(": FAIL (margin -"));
    // A benchmark without a row in the round's bandwidth appendix is named;
    // one with a row of the other round passes with that round.
    let o = preflight(
        &sut_list(&nodes),
        &dir,
        &["--model", "whisper", "--target-qps", "1"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("the v6.1 rules have no minimum bandwidth for whisper"),
        "{}",
        text(&o.stderr)
    );
    let o = preflight(
        &sut_list(&nodes),
        &dir,
        &[
            "--model",
            "stable-diffusion-xl",
            "--rules",
            "v5.1",
            "--target-qps",
            "1",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("egress: required") && text(&o.stdout).contains("(v5.1 rules)"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn a_node_that_does_not_describe_itself_is_measured_all_the_same() {
    let node = SutNode::start("pf-quiet", &["--no-describe"]);
    let dir = scratch("preflight-quiet");
    let o = preflight(&node.addr, &dir, &[]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(
        err.contains("sut-node pf-quiet does not describe itself")
            && err.contains("left to fill in"),
        "{err}"
    );
    assert!(
        out.contains("not described (sut-node --no-describe)"),
        "{out}"
    );
    let net = json(&dir.join("network.json"));
    let n = &net["nodes"][0];
    assert_eq!(n["described"], false, "{n}");
    assert_eq!(n["kernel"], "", "{n}");
    assert!(n["rtt_p50_us"].as_f64().is_some_and(|r| r > 0.0), "{n}");
}

#[test]
fn works_over_quic() {
    let nodes = [SutNode::start("pf-q", &[])];
    let dir = scratch("preflight-quic");
    let o = preflight(&quic_list(&nodes), &dir, &["--tls-pin", &pins(&nodes)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let net = json(&dir.join("network.json"));
    assert_eq!(net["nodes"][0]["name"], "pf-q");
    assert_eq!(net["nodes"][0]["transport"], "quic", "{net}");
}

#[test]
fn an_unreachable_node_is_a_clear_error() {
    let dir = scratch("preflight-dead");
    // A port held, on which nothing listens.
    let closed = tests::ClosedPort::new();
    let sut = closed.addr();
    let o = preflight(&sut, &dir, &["--connect-timeout", "2"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("preflight of {sut}")) && err.contains("cannot connect"),
        "{err}"
    );
    assert!(!dir.join("network.json").exists());
}
