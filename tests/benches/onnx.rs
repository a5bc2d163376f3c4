//! The onnx backend against Python onnxruntime, and the network path around
//! it, on the opennsfw model (a ResNet-50 architecture, 224x224x3 float32).
//!
//! Prints, side by side from runs made now:
//! - samples/s and CPU time per sample of the backend's `infer` (in this
//!   process) and of Python onnxruntime's `session.run`, same library,
//!   model, inputs and threads, at batch sizes 1, 8 and 32, with the ratios
//!   node / Python;
//! - Offline samples/s end to end (loadgen-node -> QDL -> gRPC over
//!   loopback -> sut-node --backend onnx) against the backend alone, at the
//!   same batch size.
//!
//! `source tests/backends/setup-onnx.sh` first (without its variables the
//! bench says so and stops), then `cargo bench -p tests --bench onnx`
//! (builds the release binaries first). BENCH_QUICK=1 shortens every run;
//! BENCH_ONNX_THREADS=N sets ONNX Runtime's intra-op threads on both sides.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench: a failed step ends it, saying which

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use bytes::Bytes;
use serde_json::Value;
use sut_node::backend::onnx::{LabelDtype, Onnx, OnnxConfig, OnnxOptions, OutputMode, Provider};
use sut_node::backend::{Backend, BatchInfo, SampleSink};
use tests::{detail_value, scratch, text, SutNode};

const DIMS: [usize; 3] = [224, 224, 3];

struct Setup {
    lib: String,
    model: String,
    python: String,
}

fn setup() -> Option<Setup> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    Some(Setup {
        lib: var("MLPN_ORT_LIB")?,
        model: var("MLPN_ONNX_MODEL")?,
        python: var("MLPN_ONNX_PYTHON")?,
    })
}

struct NoTokens;
impl SampleSink for NoTokens {
    fn first_token(&mut self, _: usize, _: Bytes) {}
}

/// One image-like sample: noise in [-120, 120).
fn sample() -> Vec<u8> {
    let len: usize = DIMS.iter().product();
    let mut state = 0x853c_49e6_748f_ea9b_u64;
    (0..len)
        .flat_map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let u = (state >> 40) as f32 / (1u64 << 24) as f32;
            (u * 240.0 - 120.0).to_le_bytes()
        })
        .collect()
}

fn backend(setup: &Setup, max_batch_size: usize, threads: usize) -> Onnx {
    let args = OnnxOptions {
        onnxruntime_lib: Some(PathBuf::from(&setup.lib)),
        provider: Provider::Cpu,
        onnx_device_id: 0,
        onnx_output: OutputMode::Argmax,
        onnx_output_name: None,
        onnx_label_dtype: LabelDtype::Float32,
        onnx_label_offset: 0,
        onnx_threads: threads,
    };
    let b = Onnx::load(OnnxConfig {
        model: PathBuf::from(&setup.model),
        options: args,
        max_batch_size,
    })
    .expect("the onnx backend loads");
    b.warm_up().expect("warm-up");
    b
}

/// Throughput and cost of one side: samples/s (wall clock) and the
/// process's CPU time per sample, which other loads on the machine disturb
/// far less than the wall clock.
#[derive(Clone, Copy, Default)]
struct Speed {
    sps: f64,
    cpu_ms: f64,
}

impl Speed {
    /// The best of two runs: the highest throughput, the lowest CPU time.
    fn best(self, other: Speed) -> Speed {
        if self.sps == 0.0 {
            return other;
        }
        Speed {
            sps: self.sps.max(other.sps),
            cpu_ms: self.cpu_ms.min(other.cpu_ms),
        }
    }
}

/// User plus system CPU time of this process, in seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: rusage is plain data, for which all zeros is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(rc, 0, "getrusage");
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// `infer` on batches of `batch` copies of `input`.
fn node_speed(b: &Onnx, input: &Bytes, batch: usize, secs: f64) -> Speed {
    let inputs = vec![input.clone(); batch];
    let mut runs = 0usize;
    let (start, cpu_start) = (Instant::now(), cpu_seconds());
    loop {
        let out = b
            .infer(&inputs, BatchInfo::default(), &mut NoTokens)
            .expect("infer");
        assert!(out.iter().all(Result::is_ok), "every sample answered");
        runs += 1;
        let t = start.elapsed().as_secs_f64();
        if t >= secs && runs >= 3 {
            let samples = (runs * batch) as f64;
            return Speed {
                sps: samples / t,
                cpu_ms: (cpu_seconds() - cpu_start) * 1e3 / samples,
            };
        }
    }
}

/// Python onnxruntime's `session.run` on the same input.
fn python_speed(setup: &Setup, npy: &Path, batch: usize, secs: f64, threads: usize) -> Speed {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("backends/onnx_reference.py");
    let o = Command::new(&setup.python)
        .arg(script)
        .args(["bench", &setup.model, &batch.to_string(), &secs.to_string()])
        .arg(threads.to_string())
        .arg(npy)
        .output()
        .expect("the reference script runs");
    assert!(o.status.success(), "python bench: {}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("bench JSON");
    Speed {
        sps: v["samples_per_s"].as_f64().expect("samples_per_s"),
        cpu_ms: v["cpu_ms_per_sample"].as_f64().expect("cpu_ms_per_sample"),
    }
}

/// A sut-node serving the model with dynamic batches of up to `batch`.
fn start_node(setup: &Setup, batch: usize, threads: usize) -> SutNode {
    let batch_arg = batch.to_string();
    let threads_arg = threads.to_string();
    SutNode::start(
        "bench-onnx",
        &[
            "--backend",
            "onnx",
            "--model",
            &setup.model,
            "--onnxruntime-lib",
            &setup.lib,
            "--max-batch-size",
            &batch_arg,
            "--onnx-threads",
            &threads_arg,
            "--no-quic",
        ],
    )
}

/// Offline samples/s of loadgen-node through `node`, a run of about `secs`
/// at `expect_sps`.
fn offline_sps(loadgen: &Path, node: &SutNode, data: &Path, expect_sps: f64, secs: f64) -> f64 {
    let out = scratch("bench-onnx-offline");
    let o = Command::new(loadgen)
        .args(["--sut", &node.addr, "--model", "resnet50"])
        .args(["--scenario", "Offline", "--mode", "PerformanceOnly"])
        .arg("--dataset")
        .arg(data)
        .args(["--set", &format!("target_qps={expect_sps:.1}")])
        .args(["--set", &format!("min_duration={}", (secs * 1000.0) as u64)])
        .args(["--set", "min_query_count=1"])
        .args(["--no-trace", "--output-dir"])
        .arg(&out)
        .output()
        .expect("loadgen-node runs");
    assert!(o.status.success(), "loadgen-node: {}", text(&o.stderr));
    detail_value(&out, "result_samples_per_second")
        .and_then(|v| v.as_f64())
        .expect("result_samples_per_second")
}

fn main() {
    // `cargo bench` passes --bench; nothing else is taken.
    let Some(setup) = setup() else {
        println!(
            "onnx bench skipped: MLPN_ORT_LIB, MLPN_ONNX_MODEL and MLPN_ONNX_PYTHON are not set \
             (source tests/backends/setup-onnx.sh first)"
        );
        return;
    };
    let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1");
    let threads: usize = std::env::var("BENCH_ONNX_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // Best of REPS alternating runs: on a busy machine the least disturbed
    // run of each side is the fairest comparison.
    const REPS: usize = 3;
    let secs = if quick { 1.5 } else { 4.0 };
    let loadgen = tests::build_release();

    let dir = scratch("bench-onnx");
    let input = Bytes::from(sample());
    let npy = dir.join("sample.npy");
    std::fs::write(&npy, loadgen_cli::npy::encode("<f4", &DIMS, &input)).expect("write sample");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("data set directory");
    for i in 0..64 {
        std::fs::copy(&npy, data.join(format!("sample_{i:03}.npy"))).expect("copy sample");
    }

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "onnx backend vs Python onnxruntime: {} ({cores} cores, intra-op threads {}), {}",
        Path::new(&setup.model)
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        if threads == 0 {
            "default".to_string()
        } else {
            threads.to_string()
        },
        Path::new(&setup.lib)
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
    );
    println!();
    println!("infer in process (best of {REPS} alternating runs of {secs} s each):");
    let mut alone = Vec::new();
    for batch in [1usize, 8, 32] {
        let b = backend(&setup, batch, threads);
        let (mut node, mut py) = (Speed::default(), Speed::default());
        for _ in 0..REPS {
            py = py.best(python_speed(&setup, &npy, batch, secs, threads));
            node = node.best(node_speed(&b, &input, batch, secs));
        }
        drop(b);
        println!(
            "  batch {batch:>2}: node {:>7.2} samples/s, {:>6.2} CPU ms/sample | python {:>7.2} samples/s, {:>6.2} CPU ms/sample | node/python: throughput {:.3}, CPU time {:.3}",
            node.sps,
            node.cpu_ms,
            py.sps,
            py.cpu_ms,
            node.sps / py.sps,
            node.cpu_ms / py.cpu_ms
        );
        alone.push((batch, node.sps));
    }
    println!();
    println!(
        "Offline end to end (loadgen-node -> gRPC -> sut-node), best of 2 runs of {} s, vs the backend alone:",
        secs * 2.5
    );
    for &(batch, alone) in alone.iter().filter(|(b, _)| *b > 1) {
        let node = start_node(&setup, batch, threads);
        let e2e = (0..2)
            .map(|_| offline_sps(&loadgen, &node, &data, alone, secs * 2.5))
            .fold(0f64, f64::max);
        println!(
            "  --max-batch-size {batch:>2}: end to end {e2e:>7.2} samples/s | backend alone {alone:>7.2} samples/s | e2e/alone {:.3}",
            e2e / alone
        );
    }
}
