//! The approved codecs end to end: loadgen-node compressing its samples,
//! sut-nodes compressing their answers, the synthetic accuracy check passing
//! through both, the run's report, and the input-compression rules of the
//! LLM benchmarks.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::collections::HashMap;
use std::path::Path;

use tests::{detail_value, loadgen, scratch, sut_list, text, SutNode};

/// A data set of `n` small image-like samples (3x32x32 uint8: smooth
/// gradients, one pixel in eight off by one), which compress well.
fn image_dataset(dir: &Path, n: usize) {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for i in 0..n {
        let mut data = Vec::with_capacity(3 * 32 * 32);
        for c in 0..3usize {
            for y in 0..32usize {
                for x in 0..32usize {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let noise = usize::from(state.is_multiple_of(8));
                    data.push(((x * 4 + y * 2 + c * 40 + i * 7 + noise) % 256) as u8);
                }
            }
        }
        std::fs::write(
            dir.join(format!("{i:04}.npy")),
            loadgen_cli::npy::encode("|u1", &[3, 32, 32], &data),
        )
        .expect("write a sample");
    }
}

/// The `key : value` lines of the summary's "System under test" block.
fn sut_block(out: &Path) -> HashMap<String, String> {
    let summary = std::fs::read_to_string(out.join("mlperf_log_summary.txt")).expect("summary");
    let block = summary
        .split("System under test")
        .nth(1)
        .unwrap_or_else(|| panic!("no System under test block:\n{summary}"));
    block
        .lines()
        .filter_map(|l| l.split_once(" : "))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

fn ratio(block: &HashMap<String, String>, key: &str) -> f64 {
    block
        .get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{key}: {:?}", block.get(key)))
}

#[test]
fn zstd_inputs_and_lz4_answers_pass_the_accuracy_check() {
    let nodes: Vec<SutNode> = ["squeeze-1", "squeeze-2"]
        .iter()
        .map(|n| SutNode::start(n, &["--output-codec", "lz4", "--output-size", "1024"]))
        .collect();
    let data = scratch("codecs-data");
    image_dataset(&data, 60);
    let out = scratch("codecs-acc");
    let o = loadgen(&[
        "--sut",
        &sut_list(&nodes),
        "--model",
        "resnet50",
        "--scenario",
        "Offline",
        "--mode",
        "AccuracyOnly",
        "--dataset",
        data.to_str().unwrap(),
        "--performance-sample-count",
        "60",
        "--input-codec",
        "zstd",
        "--connections-per-node",
        "2",
        "--qdl-threads",
        "1",
        "--verify-synthetic",
        "--no-trace",
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("all 60 logged answers match their samples"),
        "{}",
        text(&o.stdout)
    );

    let block = sut_block(&out);
    assert_eq!(block["network_transport"], "grpc");
    assert_eq!(block["network_input_codec"], "zstd");
    assert_eq!(block["network_output_codec"], "lz4");
    assert!(
        block["network_nodes"].starts_with("2 (squeeze-1 at "),
        "{block:?}"
    );
    assert_eq!(block["network_connections"], "4 (2 per node, given)");
    assert_eq!(block["network_qdl_threads"], "1 (given)");
    // Image-like inputs shrink; random synthetic answers grow a little.
    let input = ratio(&block, "network_input_compression_ratio");
    assert!(input > 1.5, "{block:?}");
    let output = ratio(&block, "network_output_compression_ratio");
    assert!(output > 0.9 && output < 1.0, "{block:?}");
    let sent: u64 = block["network_bytes_sent"].parse().unwrap();
    assert!(sent > 0 && (sent as f64) < 60.0 * 3072.0 / 1.5, "{block:?}");
    let received: u64 = block["network_bytes_received"].parse().unwrap();
    assert!(received > 60 * 1024, "{block:?}");
    // The same facts as detail-log records.
    assert_eq!(
        detail_value(&out, "network_input_codec"),
        Some("zstd".into())
    );
    assert_eq!(
        detail_value(&out, "network_output_codec"),
        Some("lz4".into())
    );
}

#[test]
fn lz4_inputs_with_mixed_answer_codecs_in_a_server_run() {
    let plain = SutNode::start("plain", &[]);
    let packed = SutNode::start(
        "packed",
        &["--output-codec", "zstd:9", "--output-size", "256"],
    );
    let out = scratch("codecs-server");
    let o = loadgen(&[
        "--sut",
        &format!("{},{}", plain.addr, packed.addr),
        "--model",
        "resnet50",
        "--scenario",
        "Server",
        "--mode",
        "PerformanceOnly",
        "--sample-bytes",
        "2048",
        "--total-sample-count",
        "200",
        "--performance-sample-count",
        "100",
        "--input-codec",
        "lz4",
        "--set",
        "target_qps=2000",
        "--set",
        "min_duration=300",
        "--set",
        "min_query_count=100",
        "--no-trace",
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(detail_value(&out, "num_errors"), Some(0.into()));
    let block = sut_block(&out);
    assert_eq!(block["network_input_codec"], "lz4");
    assert_eq!(block["network_output_codec"], "plain: none, packed: zstd");
    // Random synthetic samples do not shrink: lz4 adds its few bytes.
    let input = ratio(&block, "network_input_compression_ratio");
    assert!(input > 0.98 && input < 1.0, "{block:?}");
}

/// Arguments of a short accuracy run of `model` on `nodes`.
fn llm_run<'a>(sut: &'a str, out: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--sut",
        sut,
        "--model",
        "llama2-70b",
        "--scenario",
        "Offline",
        "--mode",
        "AccuracyOnly",
        "--sample-bytes",
        "512",
        "--total-sample-count",
        "40",
        "--performance-sample-count",
        "40",
        "--verify-synthetic",
        "--no-trace",
        "--output-dir",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn llm_compression_is_refused_unless_open_division() {
    let node = SutNode::start("llm-node", &["--llm-tokens", "4", "--output-codec", "lz4"]);
    let sut = sut_list(std::slice::from_ref(&node));

    let out = scratch("codecs-llm-refused");
    let o = loadgen(&llm_run(&sut, &out, &["--input-codec", "zstd"]));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("--input-codec zstd: the v6.1 rules allow no compression for llama2-70b")
            && err.contains("--open-division"),
        "{err}"
    );
    // Refused before anything ran: no logs.
    assert!(!out.join("mlperf_log_summary.txt").exists());

    // Nor may the answers be compressed: the node's lz4 is refused by name,
    // and a node sending them raw runs.
    let out = scratch("codecs-llm-lz4-answers");
    let o = loadgen(&llm_run(&sut, &out, &[]));
    let err = text(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("the node compresses its answers (lz4)")
            && err.contains("start it with --output-codec none"),
        "{err}"
    );
    assert!(!out.join("mlperf_log_summary.txt").exists());
    let raw = SutNode::start("llm-raw-node", &["--llm-tokens", "4"]);
    let out = scratch("codecs-llm-raw");
    let o = loadgen(&llm_run(&sut_list(std::slice::from_ref(&raw)), &out, &[]));
    assert!(o.status.success(), "{}", text(&o.stderr));

    let out = scratch("codecs-llm-open");
    let o = loadgen(&llm_run(
        &sut,
        &out,
        &["--input-codec", "zstd", "--open-division"],
    ));
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("logged answers match their samples"),
        "{}",
        text(&o.stdout)
    );
    let block = sut_block(&out);
    assert_eq!(block["network_input_codec"], "zstd");
    assert_eq!(block["network_output_codec"], "lz4");
}
