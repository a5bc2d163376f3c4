//! The `onnx` backend: runs an ONNX model in process with ONNX Runtime.
//!
//! `libonnxruntime.so` is loaded at run time (`--onnxruntime-lib` or
//! `ORT_DYLIB_PATH`), so the node builds without ONNX Runtime and one binary
//! serves both the CPU and the GPU builds of the library. The model's single
//! input takes each sample's bytes as they arrive (the raw tensor, e.g. an
//! `.npy` file's data); samples of one batch are concatenated along the
//! batch dimension. Each answer is either the sample's top-1 class (what
//! MLPerf's classification accuracy scripts read) or its raw output tensor.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use ort::ep;
use ort::memory::Allocator;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;
use ort::value::{DynTensor, Shape, TensorElementType, ValueType};
use thiserror::Error;

use super::{Answer, Backend, BackendError, BatchInfo, Output, SampleFailure, SampleSink};

/// What installs a usable `libonnxruntime.so`, for error messages.
const INSTALL_HINT: &str = "`pip install onnxruntime` (CPU) or `pip install onnxruntime-gpu` \
     (CUDA, TensorRT) ships one as site-packages/onnxruntime/capi/libonnxruntime.so.VERSION";

/// The execution provider that runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Provider {
    /// ONNX Runtime's own CPU kernels.
    #[default]
    Cpu,
    /// NVIDIA GPUs through CUDA (needs the onnxruntime-gpu library).
    Cuda,
    /// NVIDIA TensorRT, with CUDA for what TensorRT does not take.
    Tensorrt,
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Cpu => "cpu",
            Self::Cuda => "cuda",
            Self::Tensorrt => "tensorrt",
        })
    }
}

/// What each answer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputMode {
    /// The top-1 class index, as one number of --onnx-label-dtype (an output
    /// of one integer per sample is taken as the class index itself).
    #[default]
    Argmax,
    /// The sample's output tensor, its bytes as ONNX Runtime returns them
    /// (little-endian).
    Raw,
}

/// How the class index of `argmax` answers is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LabelDtype {
    /// 4 bytes, IEEE float (the default of MLPerf's accuracy-imagenet.py).
    #[default]
    Float32,
    /// 4 bytes, signed integer.
    Int32,
    /// 8 bytes, signed integer.
    Int64,
}

/// Options of the `onnx` backend (besides its model), named after the
/// `serve` flags that set them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OnnxOptions {
    /// The ONNX Runtime library to load: a libonnxruntime.so file, or a
    /// directory holding one (e.g. site-packages/onnxruntime/capi of the
    /// onnxruntime or onnxruntime-gpu pip package) [default:
    /// $ORT_DYLIB_PATH].
    pub onnxruntime_lib: Option<PathBuf>,

    /// Execution provider. cuda and tensorrt need the GPU build of the
    /// library (onnxruntime-gpu); when it cannot run them the node stops
    /// with an error instead of falling back to the CPU.
    pub provider: Provider,

    /// The GPU to run on (cuda, tensorrt).
    pub onnx_device_id: i32,

    /// What each answer carries: `argmax` (the top-1 class) or `raw` (the
    /// sample's output tensor).
    pub onnx_output: OutputMode,

    /// The model output to answer with [default: the model's first output].
    pub onnx_output_name: Option<String>,

    /// argmax: the encoding of the class index in the answer.
    pub onnx_label_dtype: LabelDtype,

    /// argmax: added to the class index (e.g. -1 for models whose class 0 is
    /// "background").
    pub onnx_label_offset: i64,

    /// Threads ONNX Runtime uses within an operator. 0: its default (one per
    /// physical core).
    pub onnx_threads: usize,
}

/// Why the onnx backend could not load its runtime or model.
#[derive(Debug, Error)]
pub enum OnnxError {
    #[error("no ONNX Runtime library: pass --onnxruntime-lib PATH or set ORT_DYLIB_PATH; {INSTALL_HINT}")]
    /// Neither `--onnxruntime-lib` nor `ORT_DYLIB_PATH` names a library.
    NoLibrary,
    #[error("ONNX Runtime library {}: {reason}; {INSTALL_HINT}", path.display())]
    /// The ONNX Runtime library could not be found or loaded.
    Library {
        /// The library tried.
        path: PathBuf,
        /// Why it failed.
        reason: String,
    },
    #[error("--backend onnx needs --model-path FILE.onnx")]
    /// No `--model-path` was given.
    NoModel,
    #[error("model {}: {reason}", path.display())]
    /// The model could not be loaded, or has inputs or outputs the backend
    /// cannot feed or read.
    Model {
        /// The model file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    #[error("execution provider {provider}: {reason}")]
    /// The execution provider could not be registered.
    Provider {
        /// The provider asked for.
        provider: Provider,
        /// ONNX Runtime's error.
        reason: String,
    },
}

/// Everything the backend needs to load its model.
#[derive(Debug, Clone)]
pub struct OnnxConfig {
    /// The `.onnx` model file.
    pub model: PathBuf,
    /// The backend's options (library, provider, answers).
    pub options: OnnxOptions,
    /// The largest batch the node will give `infer` (its warm-up batch).
    pub max_batch_size: usize,
}

/// The library to load: the flag's path, else `ORT_DYLIB_PATH`. A directory
/// is searched for `libonnxruntime.so*`; a bare file name that is not in the
/// current directory is left to the dynamic loader (LD_LIBRARY_PATH).
pub fn resolve_library(flag: Option<&Path>, env: Option<OsString>) -> Result<PathBuf, OnnxError> {
    let path = match (flag, env) {
        (Some(p), _) => p.to_path_buf(),
        (None, Some(e)) if !e.is_empty() => PathBuf::from(e),
        _ => return Err(OnnxError::NoLibrary),
    };
    let fail = |reason: String| OnnxError::Library {
        path: path.clone(),
        reason,
    };
    let meta = match std::fs::metadata(&path) {
        Ok(meta) => meta,
        // A bare file name is for the dynamic loader's own search path.
        Err(_) if path.components().count() == 1 => return Ok(path),
        Err(e) => return Err(fail(e.to_string())),
    };
    if !meta.is_dir() {
        return Ok(path);
    }
    let entries = std::fs::read_dir(&path).map_err(|e| fail(e.to_string()))?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libonnxruntime.so"))
        })
        .collect();
    found.sort();
    // The shortest name is the library itself, not a versioned twin's link.
    found
        .into_iter()
        .min_by_key(|p| p.as_os_str().len())
        .ok_or_else(|| fail("the directory holds no libonnxruntime.so".to_string()))
}

/// The model's input, as the backend feeds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputLayout {
    /// The input's name in the model.
    pub name: String,
    /// Its element type.
    pub ty: TensorElementType,
    /// The dimensions after the batch dimension.
    pub sample_dims: Vec<i64>,
    /// `None`: a dynamic batch dimension; `Some(n)`: exactly n samples a run.
    pub fixed_batch: Option<usize>,
    /// Bytes of one sample.
    pub sample_bytes: usize,
}

impl InputLayout {
    /// The layout of an input of `shape` (-1 for a dynamic dimension). The
    /// first dimension is the batch; every other one must be fixed.
    pub fn new(name: &str, ty: TensorElementType, shape: &[i64]) -> Result<Self, String> {
        let Some((&batch, rest)) = shape.split_first() else {
            return Err(format!(
                "input {name} is a scalar; the backend needs a batch dimension"
            ));
        };
        if let Some(axis) = rest.iter().position(|&d| d < 0) {
            return Err(format!(
                "input {name} has shape {shape:?}: dimension {} is dynamic; only the first \
                 (batch) dimension may be",
                axis + 1
            ));
        }
        let elements = rest.iter().try_fold(1usize, |acc, &d| {
            usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
        });
        let sample_bytes = elements
            .and_then(|n| ty.byte_size(n))
            .filter(|&b| b > 0)
            .ok_or_else(|| {
                format!("input {name}: {ty} tensors of shape {shape:?} are not supported")
            })?;
        let fixed_batch = match batch {
            d if d < 0 => None,
            0 => return Err(format!("input {name} has a batch dimension of 0")),
            d => Some(usize::try_from(d).map_err(|_| format!("input {name}: batch {d}"))?),
        };
        Ok(Self {
            name: name.to_string(),
            ty,
            sample_dims: rest.to_vec(),
            fixed_batch,
            sample_bytes,
        })
    }

    /// The most samples one run takes.
    fn run_capacity(&self, max_batch_size: usize) -> usize {
        self.fixed_batch.unwrap_or(max_batch_size.max(1))
    }

    /// Why `actual` bytes are not one sample, if they are not.
    pub fn check(&self, actual: usize) -> Result<(), String> {
        if actual == self.sample_bytes {
            return Ok(());
        }
        Err(format!(
            "input is {actual} bytes; the model's input {} takes {} bytes per sample ({} {:?})",
            self.name, self.sample_bytes, self.ty, self.sample_dims
        ))
    }
}

/// Copies `samples` one after another into `dest`, which holds exactly
/// their bytes (or more, for padding to a fixed batch: the rest is zeroed).
pub fn concat_into(dest: &mut [u8], samples: &[&[u8]]) {
    let mut at = 0;
    for s in samples {
        dest[at..at + s.len()].copy_from_slice(s);
        at += s.len();
    }
    dest[at..].fill(0);
}

/// Splits a batch's output into `n` equal per-sample parts.
pub fn split_rows(output: &[u8], n: usize) -> Result<Vec<&[u8]>, String> {
    if n == 0 || !output.len().is_multiple_of(n) {
        return Err(format!(
            "the output's {} bytes do not split into {n} samples",
            output.len()
        ));
    }
    Ok(output.chunks_exact(output.len() / n).collect())
}

/// The index of the largest element of `row` (little-endian elements of
/// type `ty`): the first one on ties; NaNs never win.
pub fn argmax(row: &[u8], ty: TensorElementType) -> Result<usize, String> {
    fn first_max<T: PartialOrd + Copy>(items: impl Iterator<Item = T>) -> Option<usize> {
        let mut best: Option<(usize, T)> = None;
        for (i, v) in items.enumerate() {
            // `v == v` is false for NaN only.
            #[allow(clippy::eq_op)]
            let is_number = v == v;
            match best {
                _ if !is_number => {}
                Some((_, b)) if v <= b => {}
                _ => best = Some((i, v)),
            }
        }
        best.map(|(i, _)| i)
    }
    macro_rules! by {
        ($t:ty) => {
            first_max(
                row.chunks_exact(std::mem::size_of::<$t>())
                    .map(|c| <$t>::from_le_bytes(c.try_into().unwrap_or_default())),
            )
        };
    }
    let found = match ty {
        TensorElementType::Float32 => by!(f32),
        TensorElementType::Float64 => by!(f64),
        TensorElementType::Int8 => by!(i8),
        TensorElementType::Uint8 => by!(u8),
        TensorElementType::Int16 => by!(i16),
        TensorElementType::Uint16 => by!(u16),
        TensorElementType::Int32 => by!(i32),
        TensorElementType::Uint32 => by!(u32),
        TensorElementType::Int64 => by!(i64),
        TensorElementType::Uint64 => by!(u64),
        other => return Err(format!("argmax of {other} outputs is not supported")),
    };
    found.ok_or_else(|| "argmax of an output with no numbers".to_string())
}

/// An integer output of one element: the value itself (a model that ends
/// in ArgMax already gives the class).
fn integer_value(row: &[u8], ty: TensorElementType) -> Option<i64> {
    let b = |n: usize| row.get(..n);
    match ty {
        TensorElementType::Int64 if row.len() == 8 => b(8)?.try_into().ok().map(i64::from_le_bytes),
        TensorElementType::Int32 if row.len() == 4 => {
            b(4)?.try_into().ok().map(i32::from_le_bytes).map(i64::from)
        }
        TensorElementType::Uint64 if row.len() == 8 => b(8)?
            .try_into()
            .ok()
            .map(u64::from_le_bytes)
            .and_then(|v| i64::try_from(v).ok()),
        TensorElementType::Uint32 if row.len() == 4 => {
            b(4)?.try_into().ok().map(u32::from_le_bytes).map(i64::from)
        }
        _ => None,
    }
}

/// The class of one sample's output, encoded as `dtype`, after `offset`.
pub fn label(
    row: &[u8],
    ty: TensorElementType,
    offset: i64,
    dtype: LabelDtype,
) -> Result<Bytes, String> {
    let class = match integer_value(row, ty) {
        Some(v) => v,
        None => i64::try_from(argmax(row, ty)?).map_err(|e| e.to_string())?,
    };
    let class = class.saturating_add(offset);
    Ok(match dtype {
        LabelDtype::Float32 => Bytes::copy_from_slice(&(class as f32).to_le_bytes()),
        LabelDtype::Int32 => {
            let v = i32::try_from(class).map_err(|_| format!("class {class} exceeds int32"))?;
            Bytes::copy_from_slice(&v.to_le_bytes())
        }
        LabelDtype::Int64 => Bytes::copy_from_slice(&class.to_le_bytes()),
    })
}

/// The output the answers come from.
#[derive(Debug, Clone)]
struct OutputSpec {
    name: String,
    ty: TensorElementType,
}

/// The onnx backend: one ONNX Runtime session running a model of one
/// input and one output, fed whole batches.
pub struct Onnx {
    session: Mutex<Session>,
    input: InputLayout,
    output: OutputSpec,
    args: OnnxOptions,
    max_batch_size: usize,
    name: String,
}

impl fmt::Debug for Onnx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Onnx")
            .field("input", &self.input)
            .field("output", &self.output)
            .field("args", &self.args)
            .finish_non_exhaustive()
    }
}

impl Onnx {
    /// Loads ONNX Runtime and the model. Nothing runs until `warm_up`.
    pub fn load(config: OnnxConfig) -> Result<Self, OnnxError> {
        let OnnxConfig {
            model,
            options: args,
            max_batch_size,
        } = config;
        let lib = resolve_library(
            args.onnxruntime_lib.as_deref(),
            std::env::var_os("ORT_DYLIB_PATH"),
        )?;
        // Loads the library once per process; a second call (tests) reuses it.
        let env = ort::init_from(&lib).map_err(|e| OnnxError::Library {
            path: lib.clone(),
            reason: e.to_string(),
        })?;
        env.with_name("sut-node").commit();

        let model_error = |reason: String| OnnxError::Model {
            path: model.clone(),
            reason,
        };
        if !model.is_file() {
            return Err(model_error("no such file".to_string()));
        }
        let session = build_session(&model, &args)?;
        let input = match session.inputs() {
            [only] => match only.dtype() {
                ValueType::Tensor { ty, shape, .. } => {
                    InputLayout::new(only.name(), *ty, shape).map_err(model_error)?
                }
                other => {
                    return Err(model_error(format!(
                        "input {} is a {other}, not a tensor",
                        only.name()
                    )))
                }
            },
            inputs => {
                let names: Vec<&str> = inputs.iter().map(|i| i.name()).collect();
                return Err(model_error(format!(
                    "the backend feeds models of exactly one input; this one has {names:?}"
                )));
            }
        };
        let outputs = session.outputs();
        let chosen = match &args.onnx_output_name {
            Some(name) => outputs.iter().find(|o| o.name() == name).ok_or_else(|| {
                let names: Vec<&str> = outputs.iter().map(|o| o.name()).collect();
                model_error(format!("no output named {name:?}; it has {names:?}"))
            })?,
            None => outputs
                .first()
                .ok_or_else(|| model_error("the model has no output".to_string()))?,
        };
        let ValueType::Tensor { ty, .. } = chosen.dtype() else {
            return Err(model_error(format!(
                "output {} is not a tensor",
                chosen.name()
            )));
        };
        if ty.byte_size(1).is_none() {
            return Err(model_error(format!(
                "output {} holds {ty}s, which cannot be sent as bytes",
                chosen.name()
            )));
        }
        if args.onnx_output == OutputMode::Argmax {
            // Checked now, not on every sample.
            let one = vec![0u8; ty.byte_size(1).unwrap_or(0)];
            argmax(&one, *ty).map_err(|e| {
                model_error(format!(
                    "output {}: {e}; use --onnx-output raw",
                    chosen.name()
                ))
            })?;
        }
        let output = OutputSpec {
            name: chosen.name().to_string(),
            ty: *ty,
        };
        let name = format!("onnx ({})", args.provider);
        tracing::info!(
            library = %lib.display(),
            model = %model.display(),
            provider = %args.provider,
            input = %input.name,
            input_type = %input.ty,
            sample_dims = ?input.sample_dims,
            fixed_batch = ?input.fixed_batch,
            output = %output.name,
            output_type = %output.ty,
            "ONNX model loaded"
        );
        Ok(Self {
            session: Mutex::new(session),
            input,
            output,
            args,
            max_batch_size: max_batch_size.max(1),
            name,
        })
    }

    /// The model's input as the backend feeds it.
    pub fn input(&self) -> &InputLayout {
        &self.input
    }

    /// Runs up to one run's worth of valid samples; one output each.
    fn run(&self, samples: &[&[u8]]) -> Result<Vec<Output>, BackendError> {
        let rows = self.input.fixed_batch.unwrap_or(samples.len());
        tracing::debug!(samples = samples.len(), rows, "onnx run");
        let fail = |what: &str, e: &dyn fmt::Display| BackendError(format!("onnx {what}: {e}"));
        let mut dims = Vec::with_capacity(self.input.sample_dims.len() + 1);
        dims.push(i64::try_from(rows).map_err(|e| fail("batch", &e))?);
        dims.extend_from_slice(&self.input.sample_dims);
        let mut tensor = DynTensor::new(&Allocator::default(), self.input.ty, Shape::new(dims))
            .map_err(|e| fail("input tensor", &e))?;
        let len = self.input.sample_bytes * rows;
        let ptr = tensor.data_ptr_mut().cast::<u8>();
        if ptr.is_null() {
            return Err(fail("input tensor", &"no data"));
        }
        // SAFETY: the tensor was just allocated by ONNX Runtime's CPU
        // allocator for `rows` samples of `ty`, i.e. exactly `len` bytes, and
        // nothing else refers to it until it is moved into `run` below.
        let dest = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
        concat_into(dest, samples);

        let mut session = self.session.lock().unwrap_or_else(PoisonError::into_inner);
        let outputs = session
            .run(vec![(self.input.name.as_str(), tensor)])
            .map_err(|e| fail("run", &e))?;
        let value = outputs
            .get(&self.output.name)
            .ok_or_else(|| fail("run", &format!("no output {}", self.output.name)))?;
        let ValueType::Tensor { ty, shape, .. } = value.dtype() else {
            return Err(fail("output", &"not a tensor"));
        };
        if !value.memory_info().is_cpu_accessible() {
            return Err(fail("output", &"not in CPU memory"));
        }
        let bytes_len = ty
            .byte_size(shape.num_elements())
            .ok_or_else(|| fail("output", &format!("{ty} has no byte size")))?;
        let data_ptr = value.data_ptr().cast::<u8>();
        let data: &[u8] = if bytes_len == 0 || data_ptr.is_null() {
            &[]
        } else {
            // SAFETY: a CPU-accessible tensor of `shape` and `ty` holds
            // `bytes_len` bytes at its data pointer, valid while `outputs`
            // lives, which outlives `data`.
            unsafe { std::slice::from_raw_parts(data_ptr, bytes_len) }
        };
        if shape.first().copied() != i64::try_from(rows).ok() {
            return Err(fail(
                "output",
                &format!("shape {:?} for a batch of {rows}", &shape[..]),
            ));
        }
        let per_row = split_rows(data, rows).map_err(|e| fail("output", &e))?;
        Ok(per_row
            .into_iter()
            .take(samples.len())
            .map(|row| {
                let payload = match self.args.onnx_output {
                    OutputMode::Raw => Bytes::copy_from_slice(row),
                    OutputMode::Argmax => label(
                        row,
                        *ty,
                        self.args.onnx_label_offset,
                        self.args.onnx_label_dtype,
                    )
                    .map_err(SampleFailure::Backend)?,
                };
                Ok(Answer {
                    payload,
                    n_tokens: 0,
                })
            })
            .collect())
    }
}

fn build_session(model: &Path, args: &OnnxOptions) -> Result<Session, OnnxError> {
    let session_error = |e: &dyn fmt::Display| OnnxError::Model {
        path: model.to_path_buf(),
        reason: e.to_string(),
    };
    let mut builder = Session::builder()
        .map_err(|e| session_error(&e))?
        .with_optimization_level(GraphOptimizationLevel::Level3)
        .map_err(|e| session_error(&e))?;
    if args.onnx_threads > 0 {
        builder = builder
            .with_intra_threads(args.onnx_threads)
            .map_err(|e| session_error(&e))?;
    }
    let provider_error = |reason: String| OnnxError::Provider {
        provider: args.provider,
        reason,
    };
    let eps = match args.provider {
        Provider::Cpu => Vec::new(),
        Provider::Cuda => {
            let cuda = ep::CUDA::default().with_device_id(args.onnx_device_id);
            require_available(&cuda, args.provider)?;
            vec![cuda.build().error_on_failure()]
        }
        Provider::Tensorrt => {
            let trt = ep::TensorRT::default().with_device_id(args.onnx_device_id);
            require_available(&trt, args.provider)?;
            let cuda = ep::CUDA::default().with_device_id(args.onnx_device_id);
            vec![
                trt.build().error_on_failure(),
                cuda.build().error_on_failure(),
            ]
        }
    };
    if !eps.is_empty() {
        // Registration failing (no GPU, missing CUDA libraries) is an error,
        // never a quiet fallback to the CPU.
        builder = builder
            .with_execution_providers(eps)
            .map_err(|e| provider_error(e.to_string()))?;
    }
    builder
        .commit_from_file(model)
        .map_err(|e| session_error(&e))
}

/// Stops early when the loaded library was built without `ep`.
fn require_available(ep: &dyn ep::ExecutionProvider, provider: Provider) -> Result<(), OnnxError> {
    match ep.is_available() {
        Ok(true) => Ok(()),
        Ok(false) => Err(OnnxError::Provider {
            provider,
            reason: format!(
                "the loaded ONNX Runtime library has no {}; load the GPU build \
                 (`pip install onnxruntime-gpu`, then --onnxruntime-lib \
                 site-packages/onnxruntime/capi)",
                ep.name()
            ),
        }),
        Err(e) => Err(OnnxError::Provider {
            provider,
            reason: e.to_string(),
        }),
    }
}

impl Backend for Onnx {
    fn name(&self) -> &str {
        &self.name
    }

    fn warm_up(&self) -> Result<(), BackendError> {
        // A full batch of zeros, then a single sample: the shapes a dynamic
        // batcher gives most, so neither pays first-run costs later.
        let zeros = vec![0u8; self.input.sample_bytes];
        let full = self.input.run_capacity(self.max_batch_size);
        let mut sizes = vec![full];
        if full > 1 && self.input.fixed_batch.is_none() {
            sizes.push(1);
        }
        for n in sizes {
            let batch: Vec<&[u8]> = vec![zeros.as_slice(); n];
            let outputs = self.run(&batch)?;
            if let Some(Err(e)) = outputs.into_iter().find(Result::is_err) {
                return Err(BackendError(format!("onnx warm-up: {e}")));
            }
        }
        Ok(())
    }

    fn infer(
        &self,
        inputs: &[Bytes],
        _info: BatchInfo,
        _first_tokens: &mut dyn SampleSink,
    ) -> Result<Vec<Output>, BackendError> {
        let mut outputs: Vec<Output> = Vec::with_capacity(inputs.len());
        // Samples of the wrong size fail alone; the rest run together.
        let mut valid: Vec<usize> = Vec::with_capacity(inputs.len());
        for (i, input) in inputs.iter().enumerate() {
            match self.input.check(input.len()) {
                Ok(()) => {
                    valid.push(i);
                    let none = SampleFailure::Backend("the model gave no output".to_string());
                    outputs.push(Err(none));
                }
                Err(e) => outputs.push(Err(SampleFailure::Backend(e))),
            }
        }
        let capacity = self.input.run_capacity(inputs.len());
        for run in valid.chunks(capacity) {
            let samples: Vec<&[u8]> = run.iter().map(|&i| inputs[i].as_ref()).collect();
            for (&i, out) in run.iter().zip(self.run(&samples)?) {
                outputs[i] = out;
            }
        }
        Ok(outputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F32: TensorElementType = TensorElementType::Float32;

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn layout_of_a_dynamic_batch_image_input() {
        let l = InputLayout::new("input:0", F32, &[-1, 224, 224, 3]).unwrap();
        assert_eq!(l.sample_bytes, 224 * 224 * 3 * 4);
        assert_eq!(l.fixed_batch, None);
        assert_eq!(l.sample_dims, vec![224, 224, 3]);
        assert_eq!(l.run_capacity(8), 8);
        let fixed = InputLayout::new("x", TensorElementType::Uint8, &[1, 3, 4]).unwrap();
        assert_eq!((fixed.fixed_batch, fixed.sample_bytes), (Some(1), 12));
        assert_eq!(fixed.run_capacity(8), 1);
    }

    #[test]
    fn layouts_the_backend_cannot_feed_are_refused() {
        for (shape, says) in [
            (&[][..], "scalar"),
            (&[-1, -1, 3][..], "dimension 1 is dynamic"),
            (&[0, 3][..], "batch dimension of 0"),
        ] {
            let err = InputLayout::new("x", F32, shape).unwrap_err();
            assert!(err.contains(says), "{shape:?}: {err}");
        }
        let err = InputLayout::new("s", TensorElementType::String, &[-1, 2]).unwrap_err();
        assert!(err.contains("not supported"), "{err}");
    }

    #[test]
    fn size_errors_name_expected_and_actual_sizes() {
        let l = InputLayout::new("input:0", F32, &[-1, 2, 2]).unwrap();
        assert!(l.check(16).is_ok());
        let err = l.check(15).unwrap_err();
        assert!(err.contains("15 bytes"), "{err}");
        assert!(err.contains("takes 16 bytes"), "{err}");
        assert!(err.contains("input:0"), "{err}");
    }

    #[test]
    fn batches_concatenate_and_pad_with_zeros() {
        let mut dest = vec![9u8; 8];
        concat_into(&mut dest, &[&[1, 2, 3], &[4, 5, 6]]);
        assert_eq!(dest, [1, 2, 3, 4, 5, 6, 0, 0]);
        let mut exact = vec![9u8; 4];
        concat_into(&mut exact, &[&[1, 2], &[3, 4]]);
        assert_eq!(exact, [1, 2, 3, 4]);
    }

    #[test]
    fn outputs_split_into_equal_rows() {
        let out = f32_bytes(&[0.1, 0.9, 0.8, 0.2, 0.5, 0.5]);
        let rows = split_rows(&out, 3).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[1], &out[8..16]);
        assert!(split_rows(&out, 5).is_err());
        assert!(split_rows(&out, 0).is_err());
    }

    #[test]
    fn argmax_takes_the_first_largest_and_skips_nans() {
        assert_eq!(argmax(&f32_bytes(&[0.1, 0.7, 0.2]), F32), Ok(1));
        assert_eq!(argmax(&f32_bytes(&[0.5, 0.5, 0.1]), F32), Ok(0));
        assert_eq!(argmax(&f32_bytes(&[f32::NAN, -3.0, -1.0]), F32), Ok(2));
        assert_eq!(argmax(&f32_bytes(&[-2.0, -1.0]), F32), Ok(1));
        let i64s: Vec<u8> = [3i64, -9, 12, 12]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(argmax(&i64s, TensorElementType::Int64), Ok(2));
        assert_eq!(argmax(&[4, 200, 7], TensorElementType::Uint8), Ok(1));
        assert!(argmax(&[], F32).is_err());
        assert!(argmax(&[0, 0], TensorElementType::Float16).is_err());
    }

    #[test]
    fn labels_are_encoded_as_asked() {
        let row = f32_bytes(&[0.1, 0.2, 0.9, 0.3]);
        let f = label(&row, F32, 0, LabelDtype::Float32).unwrap();
        assert_eq!(f.as_ref(), 2.0f32.to_le_bytes());
        let i = label(&row, F32, -1, LabelDtype::Int32).unwrap();
        assert_eq!(i.as_ref(), 1i32.to_le_bytes());
        let l = label(&row, F32, 0, LabelDtype::Int64).unwrap();
        assert_eq!(l.as_ref(), 2i64.to_le_bytes());
    }

    #[test]
    fn an_integer_output_of_one_element_is_the_class_itself() {
        let row = 417i64.to_le_bytes();
        let l = label(&row, TensorElementType::Int64, -1, LabelDtype::Int64).unwrap();
        assert_eq!(l.as_ref(), 416i64.to_le_bytes());
        // One float is a score, not a class: its argmax is 0.
        let one = f32_bytes(&[417.0]);
        let l = label(&one, F32, 0, LabelDtype::Int64).unwrap();
        assert_eq!(l.as_ref(), 0i64.to_le_bytes());
    }

    #[test]
    fn the_library_comes_from_the_flag_then_the_environment() {
        let err = resolve_library(None, None).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("--onnxruntime-lib"), "{text}");
        assert!(text.contains("ORT_DYLIB_PATH"), "{text}");
        assert!(text.contains("pip install onnxruntime"), "{text}");
        assert!(matches!(
            resolve_library(None, Some(OsString::new())),
            Err(OnnxError::NoLibrary)
        ));

        let dir = testkit::Scratch::new("sut-node-onnx-lib");
        let missing = dir.join("nope.so");
        let err = resolve_library(Some(&missing), Some("/elsewhere.so".into())).unwrap_err();
        assert!(err.to_string().contains("nope.so"), "{err}");

        let bare = Path::new("libonnxruntime.so.not-here");
        assert_eq!(resolve_library(Some(bare), None).unwrap(), bare);

        let err = resolve_library(Some(&dir), None).unwrap_err();
        assert!(err.to_string().contains("no libonnxruntime.so"), "{err}");
        std::fs::write(dir.join("libonnxruntime.so.1.99.0"), b"").unwrap();
        std::fs::write(dir.join("libonnxruntime_providers_shared.so"), b"").unwrap();
        assert_eq!(
            resolve_library(Some(&dir), None).unwrap(),
            dir.join("libonnxruntime.so.1.99.0")
        );
        let env = dir.join("libonnxruntime.so.1.99.0");
        assert_eq!(
            resolve_library(None, Some(env.clone().into_os_string())).unwrap(),
            env
        );
    }

    fn args(lib: Option<PathBuf>) -> OnnxOptions {
        OnnxOptions {
            onnxruntime_lib: lib,
            provider: Provider::Cpu,
            onnx_device_id: 0,
            onnx_output: OutputMode::Argmax,
            onnx_output_name: None,
            onnx_label_dtype: LabelDtype::Float32,
            onnx_label_offset: 0,
            onnx_threads: 0,
        }
    }

    #[test]
    fn a_file_that_is_not_onnx_runtime_is_a_clear_error() {
        let dir = testkit::Scratch::new("sut-node-onnx-bad");
        let fake = dir.join("libonnxruntime.so");
        std::fs::write(&fake, b"not a shared library").unwrap();
        let err = Onnx::load(OnnxConfig {
            model: dir.join("model.onnx"),
            options: args(Some(fake.clone())),
            max_batch_size: 1,
        })
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&fake.display().to_string()), "{text}");
        assert!(text.contains("pip install onnxruntime"), "{text}");
    }
}
