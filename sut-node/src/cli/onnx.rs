//! Options of the onnx backend.

use std::path::PathBuf;

use sut_node::backend::onnx::{self, OnnxOptions};

/// The execution provider that runs the model.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// ONNX Runtime's own CPU kernels.
    Cpu,
    /// NVIDIA GPUs through CUDA (needs the onnxruntime-gpu library).
    Cuda,
    /// NVIDIA TensorRT, with CUDA for what TensorRT does not take.
    Tensorrt,
}

/// What each answer carries.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputMode {
    /// The top-1 class index, as one number of --onnx-label-dtype (an output
    /// of one integer per sample is taken as the class index itself).
    Argmax,
    /// The sample's output tensor, its bytes as ONNX Runtime returns them
    /// (little-endian).
    Raw,
}

/// How the class index of `argmax` answers is encoded.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelDtype {
    /// 4 bytes, IEEE float (the default of MLPerf's accuracy-imagenet.py).
    Float32,
    /// 4 bytes, signed integer.
    Int32,
    /// 8 bytes, signed integer.
    Int64,
}

/// Options of the `onnx` backend (its model is `--model`).
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "ONNX backend")]
pub struct OnnxArgs {
    /// The ONNX Runtime library to load: a libonnxruntime.so file, or a
    /// directory holding one (e.g. site-packages/onnxruntime/capi of the
    /// onnxruntime or onnxruntime-gpu pip package) [default:
    /// $ORT_DYLIB_PATH].
    #[arg(long, value_name = "PATH")]
    pub onnxruntime_lib: Option<PathBuf>,

    /// Execution provider. cuda and tensorrt need the GPU build of the
    /// library (onnxruntime-gpu); when it cannot run them the node stops
    /// with an error instead of falling back to the CPU.
    #[arg(long, value_enum, default_value_t = Provider::Cpu)]
    pub provider: Provider,

    /// The GPU to run on (cuda, tensorrt).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub onnx_device_id: i32,

    /// What each answer carries: `argmax` (the top-1 class) or `raw` (the
    /// sample's output tensor).
    #[arg(long, value_enum, default_value_t = OutputMode::Argmax)]
    pub onnx_output: OutputMode,

    /// The model output to answer with [default: the model's first output].
    #[arg(long, value_name = "NAME")]
    pub onnx_output_name: Option<String>,

    /// argmax: the encoding of the class index in the answer.
    #[arg(long, value_enum, default_value_t = LabelDtype::Float32)]
    pub onnx_label_dtype: LabelDtype,

    /// argmax: added to the class index (e.g. -1 for models whose class 0 is
    /// "background").
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub onnx_label_offset: i64,

    /// Threads ONNX Runtime uses within an operator. 0: its default (one per
    /// physical core).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub onnx_threads: usize,
}

impl From<Provider> for onnx::Provider {
    fn from(p: Provider) -> Self {
        match p {
            Provider::Cpu => Self::Cpu,
            Provider::Cuda => Self::Cuda,
            Provider::Tensorrt => Self::Tensorrt,
        }
    }
}

impl From<OutputMode> for onnx::OutputMode {
    fn from(m: OutputMode) -> Self {
        match m {
            OutputMode::Argmax => Self::Argmax,
            OutputMode::Raw => Self::Raw,
        }
    }
}

impl From<LabelDtype> for onnx::LabelDtype {
    fn from(d: LabelDtype) -> Self {
        match d {
            LabelDtype::Float32 => Self::Float32,
            LabelDtype::Int32 => Self::Int32,
            LabelDtype::Int64 => Self::Int64,
        }
    }
}

impl From<OnnxArgs> for OnnxOptions {
    fn from(a: OnnxArgs) -> Self {
        Self {
            onnxruntime_lib: a.onnxruntime_lib,
            provider: a.provider.into(),
            onnx_device_id: a.onnx_device_id,
            onnx_output: a.onnx_output.into(),
            onnx_output_name: a.onnx_output_name,
            onnx_label_dtype: a.onnx_label_dtype.into(),
            onnx_label_offset: a.onnx_label_offset,
            onnx_threads: a.onnx_threads,
        }
    }
}
