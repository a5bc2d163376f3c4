//! The whole suite over the network: every model of LoadGen 6.0.17's
//! mlperf.conf either runs end to end over gRPC against a synthetic node
//! (Offline, PerformanceOnly, a few samples of the benchmark's real input
//! size) or is refused with the reason the rules give; and the suite table
//! agrees with mlperf.conf on which models are judged on token latencies.

use facts::benchmarks;
use loadgen_engine::config::ConfigFile;
use tests::{detail_value, loadgen, scratch, text, SutNode};

#[test]
fn every_model_of_mlperf_conf_runs_over_the_network_or_is_refused_by_a_rule() {
    let conf = ConfigFile::builtin().unwrap();
    // Small answers here: the huge ones have a test of their own.
    let plain = SutNode::start(
        "suite",
        &["--output-size", "64", "--service-time", "fixed:0"],
    );
    let tokens = SutNode::start(
        "suite-tokens",
        &[
            "--output-size",
            "64",
            "--llm-tokens",
            "16",
            "--service-time",
            "fixed:0",
        ],
    );
    let mut ran = Vec::new();
    let mut refused = Vec::new();
    for model in conf.models() {
        let bench = benchmarks::find(model)
            .unwrap_or_else(|| panic!("{model} of mlperf.conf is not in the suite table"));
        let token_latencies = conf.get(&format!("{model}.*.use_token_latencies")) == Some("1");
        assert_eq!(bench.llm, token_latencies, "{model}: the table's llm flag");
        let node = if bench.llm { &tokens } else { &plain };
        let out = scratch(&format!("suite-{model}"));
        let out_s = out.display().to_string();
        let o = loadgen(&[
            "--sut",
            &node.addr,
            "--model",
            model,
            "--scenario",
            "Offline",
            "--mode",
            "PerformanceOnly",
            "--total-sample-count",
            "8",
            "--performance-sample-count",
            "8",
            "--no-trace",
            "--progress-interval",
            "0",
            "--set",
            "min_duration=0",
            "--set",
            "min_query_count=8",
            "--set",
            "target_qps=1",
            "--output-dir",
            &out_s,
        ]);
        let err = text(&o.stderr);
        match bench.retired {
            Some(why) => {
                assert_eq!(o.status.code(), Some(1), "{model}: {err}");
                assert!(err.contains(why), "{model}: {err}");
                refused.push(model);
            }
            None => {
                assert!(o.status.success(), "{model}: {err}");
                assert_eq!(
                    detail_value(&out, "result_validity"),
                    Some(serde_json::Value::from("VALID")),
                    "{model}: {}",
                    text(&o.stdout)
                );
                // The samples crossed the network at the benchmark's size.
                let sent = bench.input_bytes() as u64 * 8;
                let bytes = detail_value(&out, "network_bytes_sent")
                    .and_then(|v| v.as_str().and_then(|s| s.parse::<u64>().ok()));
                assert!(
                    bytes.is_some_and(|b| b >= sent),
                    "{model}: {bytes:?} < {sent}"
                );
                ran.push(model);
            }
        }
        let _ = std::fs::remove_dir_all(&out);
    }
    assert!(ran.len() >= 26, "{ran:?}");
    assert_eq!(refused, ["dlrm", "rnnt", "ssd-mobilenet"]);
}

/// A sample of several tensors (Qwen3-VL's text and image, DLRMv3's ids and
/// features) travels as its tensors' `.npy` files, headers included, back to
/// back: from a data set of one folder per sample, and in the synthetic
/// data sets of those benchmarks. Every answer is checked against the bytes
/// the node received.
#[test]
fn samples_of_several_tensors_travel_in_the_multi_tensor_layout() {
    let node = SutNode::start(
        "tensors",
        &["--output-size", "32", "--service-time", "fixed:0"],
    );
    let dir = scratch("tensors");
    let data = dir.join("data");
    let mut total_bytes = 0;
    for i in 0..6u8 {
        let sample = data.join(format!("sample_{i:03}"));
        std::fs::create_dir_all(&sample).unwrap();
        let text: Vec<u8> = (0..40).map(|b| b ^ i).collect();
        let image: Vec<u8> = (0..3 * 8 * 8)
            .map(|b| (b as u8).wrapping_mul(i + 1))
            .collect();
        for (name, bytes) in [
            ("0_text.npy", loadgen_cli::npy::encode("|u1", &[40], &text)),
            (
                "1_image.npy",
                loadgen_cli::npy::encode("|u1", &[3, 8, 8], &image),
            ),
        ] {
            total_bytes += bytes.len();
            std::fs::write(sample.join(name), bytes).unwrap();
        }
    }
    let run = |model: &str, extra: &[&str], out: &str| {
        let out = dir.join(out);
        let out_s = out.display().to_string();
        let mut args = vec![
            "--sut",
            &node.addr,
            "--model",
            model,
            "--scenario",
            "Offline",
            "--mode",
            "AccuracyOnly",
            "--verify-synthetic",
            "--no-trace",
            "--output-dir",
            &out_s,
        ];
        args.extend(extra);
        let o = loadgen(&args);
        assert!(o.status.success(), "{model}: {}", text(&o.stderr));
        assert!(
            text(&o.stdout).contains("logged answers match"),
            "{}",
            text(&o.stdout)
        );
        out
    };
    let data_s = data.display().to_string();
    let out = run("qwen3-vl-235b-a22b", &["--dataset", &data_s], "dataset");
    assert_eq!(
        detail_value(&out, "network_bytes_sent").and_then(|v| v.as_str().map(String::from)),
        Some(total_bytes.to_string())
    );
    // The synthetic data sets: each sample as many .npy tensors as the
    // benchmark's input has.
    for model in ["qwen3-vl-235b-a22b", "dlrm-v3"] {
        let bench = benchmarks::find(model).unwrap();
        let out = run(model, &["--total-sample-count", "4"], model);
        assert_eq!(
            detail_value(&out, "network_bytes_sent").and_then(|v| v.as_str().map(String::from)),
            Some((4 * bench.input_bytes()).to_string()),
            "{model}"
        );
    }
    // A folder that mixes files and sample folders is refused, by name.
    std::fs::write(
        data.join("stray.npy"),
        loadgen_cli::npy::encode("|u1", &[1], &[0]),
    )
    .unwrap();
    let o = loadgen(&[
        "--sut",
        &node.addr,
        "--model",
        "qwen3-vl-235b-a22b",
        "--dataset",
        &data_s,
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("both .npy files and folders"),
        "{}",
        text(&o.stderr)
    );
}
