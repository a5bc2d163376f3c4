//! A node that cannot answer the session's benchmark is found when the
//! session opens: an LLM benchmark, judged on token latencies, with a
//! synthetic node that answers without token counts is refused at once,
//! naming the node and the reason, before any sample is sent (it used to
//! run to the end, INVALID, with an error line for every sample); the same
//! node started as the benchmark serves it. The native engine; the
//! official one's is in official.rs.

use std::time::{Duration, Instant};

use serde_json::Value;
use tests::{detail_value, loadgen, scratch, text, SutNode};

/// A short Offline run of llama3.1-8b on `node` into `out`.
fn llm_run(node: &SutNode, out: &std::path::Path) -> std::process::Output {
    loadgen(&[
        "--sut",
        &node.addr,
        "--model",
        "llama3.1-8b",
        "--sample-bytes",
        "64",
        "--total-sample-count",
        "32",
        "--performance-sample-count",
        "32",
        "--set",
        "min_duration=0",
        "--set",
        "min_query_count=32",
        "--set",
        "target_qps=1",
        "--no-trace",
        "--progress-interval",
        "0",
        "--output-dir",
        out.to_str().unwrap(),
    ])
}

#[test]
fn an_llm_session_with_a_node_that_answers_without_tokens_is_refused_when_it_opens() {
    let plain = SutNode::start("no-tokens", &[]);
    let out = scratch("sessions-plain");
    let start = Instant::now();
    let o = llm_run(&plain, &out);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "not refused at once"
    );
    for part in [
        format!("sut-node {} (name no-tokens): session refused", plain.addr),
        "a llama3_1-8b session is judged on token latencies".into(),
        "synthetic backend answers without tokens".into(),
        "--benchmark llama3_1-8b".into(),
    ] {
        assert!(err.contains(&part), "{part:?} in {err}");
    }
    assert!(
        !out.join("mlperf_log_detail.txt").exists(),
        "no test was started"
    );

    // Started as the benchmark, a synthetic node answers with tokens.
    let llm = SutNode::start("llm-tokens", &["--benchmark", "llama3.1-8b"]);
    let out2 = scratch("sessions-llm");
    let o = llm_run(&llm, &out2);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        detail_value(&out2, "result_validity"),
        Some(Value::from("VALID"))
    );
    assert_eq!(detail_value(&out2, "num_errors"), Some(Value::from(0)));
    for d in [out, out2] {
        std::fs::remove_dir_all(d).unwrap();
    }
}
