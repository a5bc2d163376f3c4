//! The llm backend serving a real model (SmolLM2-135M-Instruct, GGUF Q4_1)
//! to loadgen-node over the network: tokens streamed (first-token and
//! per-token latencies measured), answers deterministic under greedy
//! decoding and equal to an independent implementation's.
//!
//! `source tests/backends/setup-llm.sh` first: it fetches the model and sets
//! MLPN_LLM_GGUF.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use tests::{detail_value, loadgen, pins, quic_list, scratch, text, SutNode};

/// Tokens generated per sample: short, so a debug build stays quick.
const MAX_NEW_TOKENS: usize = 6;

/// Chat prompts in SmolLM2's vocabulary: `<|im_start|>user\n{question}
/// <|im_end|>\n<|im_start|>assistant\n`.
const PROMPTS: &[&[i32]] = &[
    // What is the capital of France?
    &[
        1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198,
    ],
    // Write a short poem about the sea.
    &[
        1, 4093, 198, 19161, 253, 1890, 8216, 563, 260, 3426, 30, 2, 198, 1, 520, 9531, 198,
    ],
    // How many legs does a spider have?
    &[
        1, 4093, 198, 2020, 800, 7225, 1072, 253, 16198, 457, 47, 2, 198, 1, 520, 9531, 198,
    ],
    // The quick brown fox
    &[504, 2365, 6354, 16438],
];

fn model() -> PathBuf {
    let path = std::env::var_os("MLPN_LLM_GGUF")
        .map(PathBuf::from)
        .expect("MLPN_LLM_GGUF is not set: source tests/backends/setup-llm.sh first");
    assert!(path.is_file(), "{} is missing", path.display());
    path
}

/// One .npy file of int32 token ids per prompt, as MLPerf's LLM data sets
/// are sent.
fn dataset(dir: &Path) {
    std::fs::create_dir_all(dir).expect("dataset directory");
    for (i, ids) in PROMPTS.iter().enumerate() {
        let data: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
        let npy = loadgen_cli::npy::encode("<i4", &[ids.len()], &data);
        std::fs::write(dir.join(format!("prompt{i}.npy")), npy).expect("write .npy");
    }
}

fn start_node(name: &str) -> SutNode {
    let model = model();
    let model = model.to_str().expect("utf-8 path");
    let max_new = MAX_NEW_TOKENS.to_string();
    SutNode::start(
        name,
        &[
            "--backend",
            "llm",
            "--model",
            model,
            "--max-new-tokens",
            &max_new,
            "--max-batch-size",
            "4",
        ],
    )
}

/// A loadgen-node run of the prompts against `node` over gRPC, or over QUIC
/// with `quic`.
fn run(
    node: &SutNode,
    quic: bool,
    scenario: &str,
    mode: &str,
    sets: &[&str],
    data: &Path,
    out: &Path,
) {
    let total = PROMPTS.len().to_string();
    let sut = if quic {
        quic_list(std::slice::from_ref(node))
    } else {
        node.addr.clone()
    };
    let pin = pins(std::slice::from_ref(node));
    let mut args = vec![
        "--sut",
        &sut,
        "--model",
        "llama2-70b",
        "--scenario",
        scenario,
        "--mode",
        mode,
        "--dataset",
        data.to_str().expect("utf-8 path"),
        "--total-sample-count",
        &total,
        "--performance-sample-count",
        &total,
        "--no-trace",
        "--output-dir",
        out.to_str().expect("utf-8 path"),
    ];
    if quic {
        // The node's self-signed certificate, checked by its fingerprint.
        args.extend_from_slice(&["--tls-pin", &pin]);
    }
    for s in sets {
        args.extend_from_slice(&["--set", s]);
    }
    let o = loadgen(&args);
    assert!(
        o.status.success(),
        "{scenario} {mode}: {}\n{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    if mode == "PerformanceOnly" {
        assert_eq!(
            detail_value(out, "num_errors"),
            Some(0.into()),
            "{scenario} {mode}"
        );
    }
}

fn int(out: &Path, key: &str) -> i64 {
    detail_value(out, key)
        .and_then(|v| v.as_f64())
        .unwrap_or_else(|| panic!("no numeric {key} in the detail log")) as i64
}

/// The generated token ids by sample index, from the accuracy log.
fn answers(out: &Path) -> BTreeMap<u64, Vec<i32>> {
    let mut by_index = BTreeMap::new();
    for tests::AccuracyEntry {
        qsl_idx: idx,
        data: bytes,
        entry: e,
    } in tests::accuracy_entries(out)
    {
        assert_eq!(bytes.len() % 4, 0, "{e}");
        let ids: Vec<i32> = bytes
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(
            e["token_count"].as_u64(),
            Some(ids.len() as u64),
            "token_count is the number of ids: {e}"
        );
        // A sample logged twice must have the same answer both times.
        if let Some(before) = by_index.insert(idx, ids.clone()) {
            assert_eq!(before, ids, "sample {idx}");
        }
    }
    by_index
}

#[test]
#[ignore = "needs tests/backends/setup-llm.sh; run by tests/backends/run.sh"]
fn offline_and_server_stream_tokens() {
    let node = start_node("llm-perf");
    let data = scratch("llm-data");
    dataset(&data);

    let out = scratch("llm-offline");
    run(
        &node,
        false,
        "Offline",
        "PerformanceOnly",
        &["min_duration=0", "min_query_count=8"],
        &data,
        &out,
    );
    let tokens_per_s = detail_value(&out, "result_tokens_per_second")
        .and_then(|v| v.as_f64())
        .expect("tokens per second");
    assert!(tokens_per_s > 0.0, "{tokens_per_s}");
    eprintln!("Offline: {tokens_per_s:.1} tokens/s");

    // Over QUIC as well as gRPC: the first token comes back on either.
    for (quic, tag) in [(false, "grpc"), (true, "quic")] {
        let out = scratch(&format!("llm-server-{tag}"));
        run(
            &node,
            quic,
            "Server",
            "PerformanceOnly",
            &["target_qps=1", "min_duration=0", "min_query_count=6"],
            &data,
            &out,
        );
        let ttft = int(&out, "result_first_token_mean_latency_ns");
        let tpot = int(&out, "result_time_to_output_token_mean");
        let latency = int(&out, "result_mean_latency_ns");
        let ttft_max = int(&out, "result_first_token_max_latency_ns");
        let latency_max = int(&out, "result_max_latency_ns");
        eprintln!("Server over {tag}: TTFT {ttft} ns, TPOT {tpot} ns, latency {latency} ns");
        assert!(ttft > 0 && tpot > 0, "{tag}: TTFT {ttft}, TPOT {tpot}");
        // The first token arrives before the answer: it was streamed, not
        // sent with the answer.
        assert!(ttft < latency, "{tag}: TTFT {ttft} >= latency {latency}");
        assert!(ttft_max <= latency_max, "{tag}");
        // Each later token takes a share of what follows the first one.
        assert!(
            tpot <= latency - ttft,
            "{tag}: TPOT {tpot}, latency {latency}, TTFT {ttft}"
        );
        let summary = std::fs::read_to_string(out.join("mlperf_log_summary.txt")).expect("summary");
        assert!(summary.contains("Mean First Token latency"), "{summary}");
        assert!(summary.contains("Mean Time per Output Token"), "{summary}");
    }
}

#[test]
#[ignore = "needs tests/backends/setup-llm.sh; run by tests/backends/run.sh"]
fn greedy_answers_are_deterministic_and_match_a_reference() {
    let node = start_node("llm-acc");
    let data = scratch("llm-acc-data");
    dataset(&data);

    let mut runs = Vec::new();
    for (i, scenario) in ["Offline", "Server"].into_iter().enumerate() {
        let out = scratch(&format!("llm-acc-{i}"));
        let sets: &[&str] = if scenario == "Server" {
            &["target_qps=1"]
        } else {
            &[]
        };
        run(&node, false, scenario, "AccuracyOnly", sets, &data, &out);
        let answers = answers(&out);
        assert_eq!(answers.len(), PROMPTS.len(), "every sample answered once");
        for (idx, ids) in &answers {
            assert!(
                (1..=MAX_NEW_TOKENS).contains(&ids.len()),
                "sample {idx}: {ids:?}"
            );
            assert!(ids.iter().all(|&id| (0..49_152).contains(&id)), "{ids:?}");
        }
        runs.push(answers);
    }
    // Greedy decoding: the same prompts give the same tokens, whatever the
    // scenario, batching or order.
    assert_eq!(runs[0], runs[1]);
    // "What is the capital of France?" -> "The capital of France is ..."
    assert_eq!(
        runs[0][&0][..4],
        [504, 3575, 282, 4649],
        "{:?}",
        runs[0][&0]
    );

    // An independent numpy implementation of the model, when its Python
    // packages are at hand (setup-llm.sh installs them).
    let python = std::env::var("MLPN_LLM_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("backends/llm-reference.py");
    let has_numpy = Command::new(&python)
        .args(["-c", "import numpy, gguf"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_numpy {
        eprintln!("{python} lacks numpy or gguf: the reference check is skipped");
        return;
    }
    let prompt: Vec<String> = PROMPTS[0].iter().map(i32::to_string).collect();
    let o = Command::new(&python)
        .arg(&script)
        .arg(model())
        .arg(MAX_NEW_TOKENS.to_string())
        .args(&prompt)
        .output()
        .expect("the reference runs");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let reference: Vec<i32> = text(&o.stdout)
        .split_whitespace()
        .map(|t| t.parse().expect("token id"))
        .collect();
    assert_eq!(runs[0][&0], reference, "candle vs numpy reference");
}
