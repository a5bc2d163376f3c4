//! A node that cannot answer the session's benchmark is found when the
//! session opens: an LLM benchmark, judged on token latencies, with a
//! synthetic node that answers without token counts is refused at once,
//! naming the node and the reason, before any sample is sent (it used to
//! run to the end, INVALID, with an error line for every sample); a node
//! started as the benchmark serves it. The native engine; the official
//! one's refusal is in official.rs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use serde_json::Value;
use tests::{detail_value, loadgen, scratch, text, SutNode};

#[test]
fn an_llm_session_with_a_node_that_answers_without_tokens_is_refused_when_it_opens() {
    tests::an_llm_session_without_tokens_is_refused("native");
}

#[test]
fn a_synthetic_node_started_as_the_llm_benchmark_serves_it() {
    let llm = SutNode::start("llm-tokens", &["--benchmark", "llama3.1-8b"]);
    let out = scratch("sessions-llm");
    let o = loadgen(&[
        "--sut",
        &llm.addr,
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
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        detail_value(&out, "result_validity"),
        Some(Value::from("VALID"))
    );
    assert_eq!(detail_value(&out, "num_errors"), Some(Value::from(0)));
    std::fs::remove_dir_all(&out).unwrap();
}
