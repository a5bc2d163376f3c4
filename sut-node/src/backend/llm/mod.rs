//! The `llm` backend: a Llama-family LLM run in process by candle, with
//! greedy decoding.
//!
//! Each input is a prompt as little-endian token ids (int32 by default, as
//! the MLPerf LLM data sets and loadgen-node send them); each answer is the
//! generated token ids, in the same kind of encoding, and its `n_tokens` is
//! how many there are. The first generated token goes to the
//! [`SampleSink`] as soon as it exists, so the LoadGen node measures the
//! time to first token over the network. No tokenizer is involved.
//!
//! Two model formats: a GGUF file (quantized weights, candle's
//! `quantized_llama`) or a directory holding `config.json` and
//! `*.safetensors` (candle's `llama`). The samples of a batch run one after
//! another: the model keeps a single KV cache.
//!
//! - `tokens`: token ids on the wire.
//! - `load`: the two model formats.
//! - `generate`: greedy decoding on a loaded model.
//! - `device`, `error`: `--device` and the errors of starting, shared by
//!   loading and the backend.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use candle_core::{DType, Device};

use super::{
    Answer, Backend, BackendError, BatchInfo, Output, SampleFailure, SampleSink, SessionNeeds,
};
pub use device::{DeviceSpec, ParseDeviceError};
pub use error::LlmError;
use generate::Loaded;
use load::{load_gguf, load_safetensors};
pub use tokens::{encode_token_ids, parse_token_ids, TokenDtype};

mod device;
mod error;
mod generate;
mod load;
mod tokens;

/// The precision of safetensors weights once loaded (GGUF files keep their
/// own quantization).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightDtype {
    /// 32-bit IEEE floats.
    F32,
    /// 16-bit IEEE floats.
    F16,
    /// bfloat16.
    Bf16,
}

impl From<WeightDtype> for DType {
    fn from(d: WeightDtype) -> Self {
        match d {
            WeightDtype::F32 => DType::F32,
            WeightDtype::F16 => DType::F16,
            WeightDtype::Bf16 => DType::BF16,
        }
    }
}

/// The options of the llm backend (besides its model), named after the
/// `serve` flags that set them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlmOptions {
    /// The most tokens generated per sample; generation stops earlier at the
    /// model's end-of-sequence token or at the end of its context. 1024 is
    /// what the MLPerf llama2-70b benchmark allows.
    pub max_new_tokens: u32,

    /// Where the model runs: `cpu`, or `cuda[:N]` (needs a sut-node built with
    /// `--features cuda`).
    pub device: DeviceSpec,

    /// Encoding of the prompt token ids in each input (little-endian).
    pub llm_input_dtype: TokenDtype,

    /// Encoding of the generated token ids in each answer and first token
    /// (little-endian); match the accuracy script's --dtype.
    pub llm_output_dtype: TokenDtype,

    /// Precision of safetensors weights [default: f32 on cpu, bf16 on cuda].
    /// GGUF models keep their own quantization.
    pub llm_dtype: Option<WeightDtype>,
}

impl Default for LlmOptions {
    fn default() -> Self {
        Self {
            max_new_tokens: 1024,
            device: DeviceSpec::Cpu,
            llm_input_dtype: TokenDtype::Int32,
            llm_output_dtype: TokenDtype::Int32,
            llm_dtype: None,
        }
    }
}

/// The two formats `--model` may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Gguf,
    Safetensors,
}

/// The llm backend: a causal language model run by candle, one sample at
/// a time, answering token ids for token ids.
pub struct Llm {
    path: PathBuf,
    format: Format,
    device: Device,
    dtype: DType,
    args: LlmOptions,
    /// Loaded by `warm_up` (or the first batch); a single KV cache, hence
    /// one sample at a time.
    model: Mutex<Option<Loaded>>,
}

impl Llm {
    /// Checks the model path and the device; the model itself is loaded by
    /// [`Backend::warm_up`], while the node already answers health checks.
    pub fn new(path: &Path, args: LlmOptions) -> Result<Self, LlmError> {
        let format = if path.is_dir() {
            Format::Safetensors
        } else if path.is_file() {
            if path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
            {
                Format::Gguf
            } else {
                return Err(LlmError::UnknownFormat(path.to_path_buf()));
            }
        } else {
            return Err(LlmError::Missing(path.to_path_buf()));
        };
        let device = match args.device {
            DeviceSpec::Cpu => Device::Cpu,
            DeviceSpec::Cuda(_) if !cfg!(feature = "cuda") => {
                return Err(LlmError::NoCuda(args.device))
            }
            DeviceSpec::Cuda(n) => Device::new_cuda(n).map_err(|source| LlmError::Device {
                device: args.device,
                source,
            })?,
        };
        let dtype = match (args.llm_dtype, args.device) {
            (Some(d), _) => d.into(),
            (None, DeviceSpec::Cpu) => DType::F32,
            (None, DeviceSpec::Cuda(_)) => DType::BF16,
        };
        Ok(Self {
            path: path.to_path_buf(),
            format,
            device,
            dtype,
            args,
            model: Mutex::new(None),
        })
    }

    fn load(&self) -> Result<Loaded, LlmError> {
        let started = Instant::now();
        let loaded = match self.format {
            Format::Gguf => load_gguf(&self.path, &self.device)?,
            Format::Safetensors => load_safetensors(&self.path, &self.device, self.dtype)?,
        };
        tracing::info!(
            model = %self.path.display(),
            device = %self.args.device,
            vocab_size = loaded.vocab_size,
            context = loaded.context,
            eos = ?loaded.eos,
            seconds = started.elapsed().as_secs_f64(),
            "LLM loaded"
        );
        Ok(loaded)
    }

    /// Runs `f` on the loaded model, loading it first if need be.
    fn with_model<T>(&self, f: impl FnOnce(&mut Loaded) -> T) -> Result<T, BackendError> {
        let mut guard = self.model.lock().unwrap_or_else(PoisonError::into_inner);
        let loaded = match guard.take() {
            Some(loaded) => loaded,
            None => self.load()?,
        };
        let loaded = guard.insert(loaded);
        Ok(f(loaded))
    }
}

impl Backend for Llm {
    fn name(&self) -> &str {
        "llm"
    }

    /// It generates tokens and counts them.
    fn cannot_serve(&self, _: &SessionNeeds<'_>) -> Option<String> {
        None
    }

    fn warm_up(&self) -> Result<(), BackendError> {
        // A few real tokens: the first run of each kernel sets up buffers
        // and thread pools that a timed sample should not pay for.
        self.with_model(|model| {
            let bos = model.bos;
            model
                .generate(&[bos, bos], 4, &mut |_| {})
                .map(|_| ())
                .map_err(|e| BackendError(format!("warm-up: {e}")))
        })?
    }

    fn infer(
        &self,
        inputs: &[Bytes],
        _info: BatchInfo,
        sink: &mut dyn SampleSink,
    ) -> Result<Vec<Output>, BackendError> {
        let in_dtype = self.args.llm_input_dtype;
        let out_dtype = self.args.llm_output_dtype;
        let max_new = self.args.max_new_tokens as usize;
        self.with_model(|model| {
            inputs
                .iter()
                .enumerate()
                .map(|(i, input)| {
                    let mut generate = || -> Result<Answer, String> {
                        let prompt = parse_token_ids(input, in_dtype)?;
                        let ids = model.generate(&prompt, max_new, &mut |first| {
                            sink.first_token(i, encode_token_ids(&[first], out_dtype));
                        })?;
                        Ok(Answer {
                            n_tokens: ids.len() as i64,
                            payload: encode_token_ids(&ids, out_dtype),
                        })
                    };
                    let output = generate().map_err(SampleFailure::Backend);
                    // Samples run one after another: each answer leaves as
                    // soon as it is complete, not with the batch's last.
                    sink.answer_now(i, &output);
                    output
                })
                .collect()
        })
    }
}

#[cfg(test)]
mod tests;
