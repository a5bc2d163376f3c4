//! The onnx backend on a real model: loadgen-node sends `.npy` samples to a
//! `sut-node --backend onnx`, and the answers in the accuracy log must be
//! what Python onnxruntime gives for the same inputs.
//!
//! Ignored by default: they need ONNX Runtime and a model, which
//! `source tests/backends/setup-onnx.sh` installs (it sets MLPN_ORT_LIB,
//! MLPN_ONNX_MODEL and MLPN_ONNX_PYTHON).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tests::{detail_value, loadgen, scratch, text, SutNode};

const IGNORE: &str = "needs tests/backends/setup-onnx.sh; run by tests/backends/run.sh";

/// Samples in the test data set: not a multiple of the batch size, so the
/// node also runs partial batches.
const SAMPLES: usize = 21;
/// The opennsfw model's input: one 224x224x3 float32 image per sample.
const DIMS: [usize; 3] = [224, 224, 3];

struct Setup {
    lib: String,
    model: String,
    python: String,
}

fn setup() -> Setup {
    let var = |name: &str| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| panic!("{name} is not set: {IGNORE}"))
    };
    Setup {
        lib: var("MLPN_ORT_LIB"),
        model: var("MLPN_ONNX_MODEL"),
        python: var("MLPN_ONNX_PYTHON"),
    }
}

fn reference_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("backends/onnx_reference.py")
}

/// Flat colours (per channel, innermost) that the opennsfw model puts in
/// class 1, then class 0: noise alone lands in class 0 every time.
const FLAT: [[f32; 3]; 3] = [[20.0, 10.0, 40.0], [10.0, 0.0, 30.0], [-40.0, -40.0, 0.0]];

/// Writes `n` deterministic samples as `.npy` files: every third one a flat
/// colour, the others noise in [-120, 120) with a contrast of their own.
fn write_dataset(dir: &Path, n: usize, dims: &[usize]) {
    std::fs::create_dir_all(dir).expect("data set directory");
    let len: usize = dims.iter().product();
    let channels = dims.last().copied().unwrap_or(1);
    for i in 0..n {
        let mut state = 0x2545_f491_4f6c_dd1d_u64 ^ (i as u64);
        let scale = 0.25 + (i % 7) as f32 / 8.0;
        let flat = (i % 3 == 2).then(|| FLAT[(i / 3) % FLAT.len()]);
        let data: Vec<u8> = (0..len)
            .flat_map(|j| {
                if let Some(colour) = flat {
                    return colour[(j % channels) % 3].to_le_bytes();
                }
                state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                let u = ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 24) as f32;
                ((u * 240.0 - 120.0) * scale).to_le_bytes()
            })
            .collect();
        let npy = loadgen_cli::npy::encode("<f4", dims, &data);
        std::fs::write(dir.join(format!("sample_{i:03}.npy")), npy).expect("write sample");
    }
}

/// Python onnxruntime's outputs for the data set, in file order.
fn reference_outputs(setup: &Setup, model: &str, dir: &Path) -> Vec<Vec<f32>> {
    let o = Command::new(&setup.python)
        .arg(reference_script())
        .args(["infer", model])
        .arg(dir)
        .output()
        .expect("the reference script runs");
    assert!(o.status.success(), "reference: {}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("reference JSON");
    v.as_array()
        .expect("a list")
        .iter()
        .map(|e| {
            e["output"]
                .as_array()
                .expect("output list")
                .iter()
                .map(|x| x.as_f64().expect("a number") as f32)
                .collect()
        })
        .collect()
}

fn start_node(setup: &Setup, name: &str, model: &str, extra: &[&str]) -> SutNode {
    let mut args = vec![
        "--backend",
        "onnx",
        "--model",
        model,
        "--onnxruntime-lib",
        &setup.lib,
        "--max-batch-size",
        "8",
        "--max-batch-wait-us",
        "20000",
        "--benchmark",
        "resnet50",
        "--no-quic",
    ];
    args.extend_from_slice(extra);
    SutNode::start(name, &args)
}

/// An AccuracyOnly Offline run over the whole data set; the answers by
/// sample index.
fn accuracy_run(node: &SutNode, data: &Path, out: &Path) -> Vec<Vec<u8>> {
    let o = loadgen(&[
        "--sut",
        &node.addr,
        "--model",
        "resnet50",
        "--scenario",
        "Offline",
        "--mode",
        "AccuracyOnly",
        "--dataset",
        data.to_str().expect("utf-8 path"),
        "--output-dir",
        out.to_str().expect("utf-8 path"),
        "--no-trace",
    ]);
    assert!(o.status.success(), "loadgen-node: {}", text(&o.stderr));
    let mut answers = vec![None; SAMPLES];
    for e in tests::accuracy_entries(out) {
        answers[e.qsl_idx as usize] = Some(e.data);
    }
    answers
        .into_iter()
        .enumerate()
        .map(|(i, a)| a.unwrap_or_else(|| panic!("sample {i} has no answer in the log")))
        .collect()
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best
}

/// Raw answers equal Python's outputs within float tolerance (batched and
/// single runs may sum in another order), with the same argmax.
fn check_raw(answers: &[Vec<u8>], reference: &[Vec<f32>]) {
    assert_eq!(answers.len(), reference.len());
    for (i, (a, r)) in answers.iter().zip(reference).enumerate() {
        let got = floats(a);
        assert_eq!(got.len(), r.len(), "sample {i}: {} bytes", a.len());
        for (g, w) in got.iter().zip(r) {
            assert!(
                (g - w).abs() <= 1e-4 + 1e-3 * w.abs(),
                "sample {i}: {got:?} vs {r:?}"
            );
        }
        assert_eq!(argmax(&got), argmax(r), "sample {i}: {got:?} vs {r:?}");
    }
}

#[test]
#[ignore = "needs tests/backends/setup-onnx.sh; run by tests/backends/run.sh"]
fn raw_outputs_match_python_onnxruntime_over_dynamic_batches() {
    let setup = setup();
    let dir = scratch("onnx-raw");
    let data = dir.join("data");
    write_dataset(&data, SAMPLES, &DIMS);
    let reference = reference_outputs(&setup, &setup.model, &data);

    let node = start_node(&setup, "onnx-raw", &setup.model, &["--onnx-output", "raw"]);
    let answers = accuracy_run(&node, &data, &dir.join("out"));
    check_raw(&answers, &reference);
}

#[test]
#[ignore = "needs tests/backends/setup-onnx.sh; run by tests/backends/run.sh"]
fn argmax_answers_are_the_top1_class_as_accuracy_scripts_read_it() {
    let setup = setup();
    let dir = scratch("onnx-argmax");
    let data = dir.join("data");
    write_dataset(&data, SAMPLES, &DIMS);
    let reference = reference_outputs(&setup, &setup.model, &data);

    let classes: Vec<usize> = reference.iter().map(|r| argmax(r)).collect();
    assert!(
        classes.contains(&0) && classes.contains(&1),
        "the data set reaches both classes: {classes:?}"
    );

    // float32 by default, as MLPerf's accuracy-imagenet.py reads it.
    let node = start_node(&setup, "onnx-argmax", &setup.model, &[]);
    let answers = accuracy_run(&node, &data, &dir.join("out-f32"));
    for (i, (a, r)) in answers.iter().zip(&reference).enumerate() {
        assert_eq!(a.len(), 4, "sample {i}");
        assert_eq!(floats(a), vec![argmax(r) as f32], "sample {i}: {r:?}");
    }
    drop(node);

    let node = start_node(
        &setup,
        "onnx-argmax-i64",
        &setup.model,
        &["--onnx-label-dtype", "int64", "--onnx-label-offset", "-1"],
    );
    let answers = accuracy_run(&node, &data, &dir.join("out-i64"));
    for (i, (a, r)) in answers.iter().zip(&reference).enumerate() {
        let want = argmax(r) as i64 - 1;
        assert_eq!(a.as_slice(), want.to_le_bytes(), "sample {i}");
    }
}

#[test]
#[ignore = "needs tests/backends/setup-onnx.sh; run by tests/backends/run.sh"]
fn a_model_with_a_fixed_batch_of_one_runs_samples_one_at_a_time() {
    let setup = setup();
    let dir = scratch("onnx-fixed");
    let data = dir.join("data");
    write_dataset(&data, SAMPLES, &DIMS);
    let fixed = dir.join("fixed-batch-1.onnx");
    let o = Command::new(&setup.python)
        .arg(reference_script())
        .args(["fixed-batch", &setup.model])
        .arg(&fixed)
        .arg("1")
        .output()
        .expect("the reference script runs");
    assert!(o.status.success(), "fixed-batch: {}", text(&o.stderr));
    let fixed = fixed.to_str().expect("utf-8 path");
    let reference = reference_outputs(&setup, fixed, &data);

    // The node batches up to 8; the backend splits them into runs of one.
    let node = start_node(&setup, "onnx-fixed", fixed, &["--onnx-output", "raw"]);
    let answers = accuracy_run(&node, &data, &dir.join("out"));
    check_raw(&answers, &reference);
}

#[test]
#[ignore = "needs tests/backends/setup-onnx.sh; run by tests/backends/run.sh"]
fn a_sample_of_the_wrong_size_fails_naming_both_sizes() {
    let setup = setup();
    let dir = scratch("onnx-size");
    let data = dir.join("data");
    write_dataset(&data, 3, &DIMS);
    // One sample of a smaller image: 112x112x3 floats.
    write_dataset(&dir.join("small"), 1, &[112, 112, 3]);
    std::fs::rename(
        dir.join("small/sample_000.npy"),
        data.join("sample_999.npy"),
    )
    .expect("move the small sample");

    let node = start_node(&setup, "onnx-size", &setup.model, &[]);
    let o = loadgen(&[
        "--sut",
        &node.addr,
        "--scenario",
        "Offline",
        "--mode",
        "AccuracyOnly",
        "--dataset",
        data.to_str().expect("utf-8 path"),
        "--output-dir",
        dir.join("out").to_str().expect("utf-8 path"),
        "--no-trace",
    ]);
    assert!(!o.status.success(), "the run must fail");
    let err = text(&o.stderr);
    let (actual, expected) = (112 * 112 * 3 * 4, 224 * 224 * 3 * 4);
    assert!(
        err.contains(&format!("input is {actual} bytes")),
        "names the actual size: {err}"
    );
    assert!(
        err.contains(&format!("takes {expected} bytes per sample")),
        "names the expected size: {err}"
    );
}

#[test]
#[ignore = "needs tests/backends/setup-onnx.sh; run by tests/backends/run.sh"]
fn a_short_offline_performance_run_is_valid() {
    let setup = setup();
    let dir = scratch("onnx-perf");
    let data = dir.join("data");
    write_dataset(&data, 16, &DIMS);
    let node = start_node(&setup, "onnx-perf", &setup.model, &[]);
    let out = dir.join("out");
    let o = loadgen(&[
        "--sut",
        &node.addr,
        "--scenario",
        "Offline",
        "--mode",
        "PerformanceOnly",
        "--dataset",
        data.to_str().expect("utf-8 path"),
        // No minimum duration: the result then does not depend on how fast
        // this machine runs the model.
        "--set",
        "target_qps=10",
        "--set",
        "min_duration=0",
        "--set",
        "min_query_count=48",
        "--output-dir",
        out.to_str().expect("utf-8 path"),
        "--no-trace",
    ]);
    assert!(o.status.success(), "loadgen-node: {}", text(&o.stderr));
    let summary = std::fs::read_to_string(out.join("mlperf_log_summary.txt")).expect("summary");
    assert!(summary.contains("Scenario : Offline"), "{summary}");
    assert!(summary.contains("Result is : VALID"), "{summary}");
    assert_eq!(detail_value(&out, "num_errors"), Some(0.into()));
    let issued = detail_value(&out, "result_query_count").and_then(|v| v.as_u64());
    assert!(issued.is_some_and(|n| n > 0), "{issued:?}");
}
