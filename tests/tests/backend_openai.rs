//! The openai backend against a real OpenAI-compatible server: llama.cpp's
//! (through llama-cpp-python) with SmolLM2. Needs
//! `tests/backends/setup-openai.sh`; run by `tests/backends/run.sh`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

mod servers;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use servers::{setup_var, InferenceServer};
use tests::{binary, loadgen, scratch, text, SutNode};

const SETUP: &str = "setup-openai.sh";
const MODEL: &str = "smollm2";

const PROMPTS: &[&str] = &[
    "The capital of France is",
    "Once upon a time, there was a",
    "The three primary colors are",
    "Water boils at a temperature of",
];

fn llama_server(dir: &Path) -> (InferenceServer, u16) {
    let (server, ports) = InferenceServer::start_on_free_ports(
        1,
        &dir.join("llama-server.log"),
        "/v1/models",
        Duration::from_secs(120),
        |ports| {
            let mut cmd = Command::new(setup_var("MLPN_OPENAI_PYTHON", SETUP));
            cmd.args(["-m", "llama_cpp.server", "--host", "127.0.0.1"])
                .args(["--port", &ports[0].to_string()])
                .args(["--model", &setup_var("MLPN_OPENAI_GGUF", SETUP)])
                .args(["--model_alias", MODEL, "--n_ctx", "1024"])
                // By default a new request cuts the streaming one short; the
                // node sends a batch's requests at once.
                .args(["--interrupt_requests", "false"]);
            cmd
        },
    );
    (server, ports[0])
}

/// The prompts as UTF-8 bytes, one .npy each (llama-cpp-python's server
/// takes text prompts only, so the node runs with `--openai-prompt text`).
fn text_dataset(dir: &Path) -> String {
    let data = dir.join("prompts");
    std::fs::create_dir_all(&data).expect("data dir");
    for (i, p) in PROMPTS.iter().enumerate() {
        let npy = loadgen_cli::npy::encode("|u1", &[p.len()], p.as_bytes());
        std::fs::write(data.join(format!("{i:04}.npy")), npy).expect("write sample");
    }
    data.to_str().expect("utf-8 path").to_string()
}

fn summary(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("mlperf_log_summary.txt")).unwrap_or_default()
}

/// Runs loadgen-node; returns what it printed, for the test's messages.
fn run(
    node: &SutNode,
    data: &str,
    scenario: &str,
    mode: &str,
    sets: &[&str],
    out: &Path,
) -> String {
    let mut args = vec![
        "--sut",
        &node.addr,
        "--model",
        "llama2-70b",
        "--scenario",
        scenario,
        "--mode",
        mode,
        "--dataset",
        data,
        "--output-dir",
        out.to_str().expect("utf-8 path"),
    ];
    for s in sets {
        args.extend_from_slice(&["--set", s]);
    }
    let run = loadgen(&args);
    let printed = format!(
        "loadgen-node {scenario} {mode} ({}):\n{}\n{}",
        run.status,
        text(&run.stdout),
        text(&run.stderr)
    );
    // An INVALID performance result is fine here (too few samples); a
    // failed run is not.
    assert!(
        out.join("mlperf_log_summary.txt").exists() || run.status.success(),
        "{printed}"
    );
    printed
}

#[test]
#[ignore = "needs tests/backends/setup-openai.sh; run by tests/backends/run.sh"]
fn llm_runs_through_llama_cpp_server() {
    let dir = scratch("openai-llama");
    let (server, port) = llama_server(&dir);
    let server_url = format!("http://127.0.0.1:{port}");
    let node = SutNode::start(
        "openai",
        &[
            "--backend",
            "openai",
            "--server-url",
            &server_url,
            "--model-name",
            MODEL,
            "--openai-prompt",
            "text",
            "--openai-max-tokens",
            "12",
            // LoadGen takes no one-token answers: keep SmolLM2's end tokens
            // (<|endoftext|>, <|im_end|>) from ending a generation early.
            "--openai-extra-body",
            r#"{"logit_bias": {"0": -100, "2": -100}}"#,
            "--max-batch-size",
            "2",
            "--no-quic",
        ],
    );
    let data = text_dataset(&dir);

    // Every answer is generated text.
    let acc = dir.join("accuracy");
    let printed = run(&node, &data, "Offline", "AccuracyOnly", &[], &acc);
    let entries = tests::accuracy_entries(&acc);
    assert_eq!(
        entries.len(),
        PROMPTS.len(),
        "{printed}\nthe server's log:\n{}",
        server.log_text()
    );
    for e in entries {
        let answer = String::from_utf8_lossy(&e.data);
        eprintln!("sample {}: {answer:?}", e.qsl_idx);
        assert!(!answer.trim().is_empty(), "empty answer: {}", e.entry);
    }

    for (scenario, sets) in [
        (
            "Offline",
            vec!["min_duration=1000", "target_qps=4", "min_query_count=4"],
        ),
        (
            "Server",
            vec!["target_qps=0.5", "min_duration=4000", "min_query_count=3"],
        ),
    ] {
        let out = dir.join(scenario);
        let printed = run(&node, &data, scenario, "PerformanceOnly", &sets, &out);
        let s = summary(&out);
        // Offline reports throughput only; Server the token latencies too.
        let keys: &[&str] = if scenario == "Offline" {
            &["Tokens per second"]
        } else {
            &[
                "Mean First Token latency (ns)",
                "Mean Time per Output Token (ns)",
            ]
        };
        assert!(
            !s.contains("invalid responses"),
            "{scenario}:\n{s}\n{printed}"
        );
        for key in keys {
            let line = s.lines().find(|l| l.starts_with(key)).unwrap_or_else(|| {
                panic!("{scenario}: no {key:?} in the summary:\n{s}\n{printed}")
            });
            eprintln!("{scenario}: {line}");
            let value: f64 = line
                .rsplit(':')
                .next()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0.0);
            assert!(value > 0.0, "{scenario}: {line}");
        }
    }
    drop(node);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs tests/backends/setup-openai.sh; run by tests/backends/run.sh"]
fn a_refused_warm_up_request_stops_the_node_with_the_servers_message() {
    let dir = scratch("openai-refused");
    let (_server, port) = llama_server(&dir);
    // This server takes no token-id prompts: the warm-up request shows it.
    let run = Command::new(binary("sut-node"))
        .args(["serve", "--listen", "127.0.0.1:0", "--no-quic"])
        .args(["--backend", "openai", "--model-name", MODEL])
        .args(["--openai-prompt", "token-ids"])
        .arg("--server-url")
        .arg(format!("http://127.0.0.1:{port}"))
        .output()
        .expect("sut-node runs");
    let err = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{err}");
    // llama-cpp-python answers a prompt it cannot parse with a 500.
    assert!(
        err.contains("warm-up completion failed: inference server HTTP "),
        "{err}"
    );
    assert!(err.contains("valid string"), "{err}");

    // A model the server does not serve is named with the ones it does.
    let run = Command::new(binary("sut-node"))
        .args(["serve", "--listen", "127.0.0.1:0", "--no-quic"])
        .args(["--backend", "openai", "--model-name", "nope"])
        .arg("--server-url")
        .arg(format!("http://127.0.0.1:{port}"))
        .output()
        .expect("sut-node runs");
    let err = text(&run.stderr);
    assert!(err.contains("\"nope\"") && err.contains(MODEL), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
