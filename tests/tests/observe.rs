//! Seeing inside a run: the latency breakdown and the progress lines of
//! loadgen-node driving real sut-node processes on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use tests::{loadgen, scratch, sut_list, text, SutNode};

use tests::SMALL_DATA as DATA;

fn ms(v: &serde_json::Value) -> f64 {
    v.as_u64().expect("a number of ns") as f64 / 1e6
}

#[test]
fn the_breakdown_shows_each_nodes_compute_and_leaves_the_logs_alone() {
    // "slow" computes for 2 ms a batch, "fast" at once.
    let nodes = [
        SutNode::start("slow", &["--service-time", "fixed:2000"]),
        SutNode::start("fast", &[]),
    ];
    let out = scratch("breakdown");
    let sut = sut_list(&nodes);
    let mut args = vec!["--sut", sut.as_str()];
    args.extend_from_slice(&["--scenario", "Server", "--dispatch", "round-robin"]);
    args.extend_from_slice(DATA);
    args.extend_from_slice(&["--set", "target_qps=200", "--set", "min_duration=1000"]);
    args.extend_from_slice(&["--set", "min_query_count=100"]);
    let dir = out.to_str().expect("utf-8 path");
    args.extend_from_slice(&["--output-dir", dir]);
    let o = loadgen(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));

    let stdout = text(&o.stdout);
    assert!(stdout.contains("Where the time went"), "{stdout}");
    assert!(stdout.contains("node slow (") && stdout.contains("all 2 nodes"));

    let file = std::fs::read_to_string(out.join("mlperf_net_breakdown.json")).unwrap();
    let b: serde_json::Value = serde_json::from_str(&file).unwrap();
    let nodes = b["nodes"].as_array().unwrap();
    let node = |name: &str| {
        nodes
            .iter()
            .find(|n| n["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {file}"))
    };
    let (slow, fast) = (node("slow"), node("fast"));
    let answers = |n: &serde_json::Value| n["answers"].as_u64().unwrap();
    assert!(answers(slow) > 50 && answers(fast) > 50, "{file}");
    assert_eq!(
        b["overall"]["answers"].as_u64(),
        Some(answers(slow) + answers(fast))
    );
    assert_eq!(slow["answers_without_node_timings"], 0);
    // Each node's traffic: 64-byte samples, every one answered.
    for n in [slow, fast] {
        assert_eq!(n["samples_sent"].as_u64(), Some(answers(n)), "{file}");
        assert_eq!(n["bytes_sent"].as_u64(), Some(64 * answers(n)), "{file}");
        assert!(n["bytes_received"].as_u64() > Some(0), "{file}");
    }

    // The node's own clock sees its 2 ms of compute (to 1.6%, and the
    // sleep only overshoots)...
    let compute = ms(&slow["node_compute"]["p50"]);
    assert!((1.96..20.0).contains(&compute), "slow compute {compute} ms");
    // The fast node computes nothing: its median is far below (its tail
    // is one preemption of a busy host's, about 100 samples' p99 being
    // their maximum).
    assert!(ms(&fast["node_compute"]["p50"]) < 1.0, "{file}");
    // ...inside the QDL's total, and the rest is wire and QDL.
    let total = ms(&slow["total"]["p50"]);
    assert!(total > compute, "total {total} <= compute {compute}");
    let wire = ms(&slow["wire_and_qdl"]["p50"]);
    assert!(wire < total - 1.9, "wire {wire} total {total}");
    for part in ["node_queue", "node_send", "qdl_decode"] {
        let p = &slow[part];
        assert!(p["p50"].as_u64() <= p["p99"].as_u64() && p["p99"].as_u64() <= p["max"].as_u64());
        assert!(p["p99"].as_u64() <= p["p999"].as_u64() && p["p999"].as_u64() <= p["max"].as_u64());
        assert!(ms(&p["p50"]) < total, "{part}: {file}");
    }

    // The MLPerf logs say nothing of it.
    for log in ["summary.txt", "detail.txt"] {
        let t = std::fs::read_to_string(out.join(format!("mlperf_log_{log}"))).unwrap();
        assert!(
            !t.contains("node_compute") && !t.contains("breakdown"),
            "{log}"
        );
    }
}
