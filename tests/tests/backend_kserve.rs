//! The kserve backend against a real KServe v2 server: MLServer with its
//! scikit-learn runtime serving a digits classifier. Needs
//! `tests/backends/setup-kserve.sh`; run by `tests/backends/run.sh`.

mod servers;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use servers::{setup_var, InferenceServer};
use tests::{binary, loadgen, scratch, text, SutNode};

const SETUP: &str = "setup-kserve.sh";

/// MLServer on free ports, serving the setup's models ("digits").
fn mlserver(dir: &Path) -> (InferenceServer, u16) {
    let (server, ports) = InferenceServer::start_on_free_ports(
        3,
        &dir.join("mlserver.log"),
        "/v2/models/digits/ready",
        Duration::from_secs(120),
        |ports| {
            let mut cmd = Command::new(setup_var("MLPN_KSERVE_MLSERVER", SETUP));
            cmd.args(["start", &setup_var("MLPN_KSERVE_MODELS", SETUP)])
                .env("MLSERVER_HOST", "127.0.0.1")
                .env("MLSERVER_HTTP_PORT", ports[0].to_string())
                .env("MLSERVER_GRPC_PORT", ports[1].to_string())
                .env("MLSERVER_METRICS_PORT", ports[2].to_string())
                // Inference in the server process itself: no worker pool to
                // start.
                .env("MLSERVER_PARALLEL_WORKERS", "0");
            cmd
        },
    );
    (server, ports[1])
}

#[test]
#[ignore = "needs tests/backends/setup-kserve.sh; run by tests/backends/run.sh"]
fn digits_accuracy_through_mlserver() {
    let dir = scratch("kserve-digits");
    let (server, grpc) = mlserver(&dir);
    let server_url = format!("127.0.0.1:{grpc}");
    let node = SutNode::start(
        "kserve",
        &[
            "--backend",
            "kserve",
            "--server-url",
            &server_url,
            "--model-name",
            "digits",
            "--max-batch-size",
            "8",
            "--no-quic",
        ],
    );

    let data = setup_var("MLPN_KSERVE_DATA", SETUP);
    let samples = format!("{data}/samples");
    let out = dir.join("accuracy");
    let out_s = out.to_str().expect("utf-8 path");
    // resnet50's settings: a classifier, one sample per query.
    let run = loadgen(&[
        "--sut",
        &node.addr,
        "--model",
        "resnet50",
        "--scenario",
        "Offline",
        "--mode",
        "AccuracyOnly",
        "--dataset",
        &samples,
        "--output-dir",
        out_s,
    ]);
    assert!(
        run.status.success(),
        "loadgen-node failed:\n{}\n{}\nmlserver:\n{}",
        text(&run.stdout),
        text(&run.stderr),
        server.log_text()
    );
    let score = Command::new(setup_var("MLPN_KSERVE_PYTHON", SETUP))
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("backends/accuracy_digits.py"))
        .arg(out.join("mlperf_log_accuracy.json"))
        .arg(format!("{data}/labels.npy"))
        .output()
        .expect("the accuracy script runs");
    let report = text(&score.stdout);
    assert!(score.status.success(), "{report}{}", text(&score.stderr));
    eprintln!("digits through MLServer: {report}");
    let accuracy: f64 = report
        .split_whitespace()
        .find_map(|w| w.strip_prefix("accuracy="))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no accuracy in {report:?}"));
    // Logistic regression on the held-out digits: about 0.96.
    assert!(accuracy >= 0.93, "top-1 accuracy {accuracy}");

    // Performance mode through the same server: it completes, VALID or not.
    let perf = dir.join("performance");
    let run = loadgen(&[
        "--sut",
        &node.addr,
        "--model",
        "resnet50",
        "--scenario",
        "Offline",
        "--mode",
        "PerformanceOnly",
        "--dataset",
        &samples,
        "--set",
        "min_duration=2000",
        "--set",
        "target_qps=200",
        "--output-dir",
        perf.to_str().expect("utf-8 path"),
    ]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    let summary = std::fs::read_to_string(perf.join("mlperf_log_summary.txt")).expect("summary");
    let qps = summary
        .lines()
        .find(|l| l.starts_with("Samples per second"))
        .unwrap_or("no samples per second");
    eprintln!("digits through MLServer, Offline: {qps}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs tests/backends/setup-kserve.sh; run by tests/backends/run.sh"]
fn a_model_the_server_lacks_stops_the_node_at_start() {
    let dir = scratch("kserve-missing");
    let (_server, grpc) = mlserver(&dir);
    let run = Command::new(binary("sut-node"))
        .args(["serve", "--listen", "127.0.0.1:0", "--no-quic"])
        .args(["--backend", "kserve", "--model-name", "nope"])
        .arg("--server-url")
        .arg(format!("127.0.0.1:{grpc}"))
        .output()
        .expect("sut-node runs");
    let err = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(err.contains("\"nope\"") && err.contains("warm"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
