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

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use candle_core::quantized::gguf_file;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::{llama, quantized_llama};
use thiserror::Error;

use super::{Answer, Backend, BackendError, BatchInfo, Output, SampleSink};

/// How token ids are encoded on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TokenDtype {
    /// 4-byte little-endian signed integers.
    #[default]
    Int32,
    /// 8-byte little-endian signed integers.
    Int64,
}

impl TokenDtype {
    fn width(self) -> usize {
        match self {
            Self::Int32 => 4,
            Self::Int64 => 8,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Int32 => "int32",
            Self::Int64 => "int64",
        }
    }
}

/// The precision of safetensors weights once loaded (GGUF files keep their
/// own quantization).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightDtype {
    F32,
    F16,
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

/// Where the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    #[default]
    Cpu,
    /// A CUDA GPU, by ordinal.
    Cuda(usize),
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid device {0:?} (expected cpu, cuda or cuda:N)")]
pub struct ParseDeviceError(String);

impl FromStr for DeviceSpec {
    type Err = ParseDeviceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "cpu" => Ok(Self::Cpu),
            "cuda" => Ok(Self::Cuda(0)),
            other => other
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Self::Cuda)
                .ok_or_else(|| ParseDeviceError(s.to_string())),
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cpu => write!(f, "cpu"),
            Self::Cuda(n) => write!(f, "cuda:{n}"),
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

    /// Where the model runs: cpu, or cuda[:N] (needs a sut-node built with
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

/// Why the llm backend could not start.
#[derive(Debug, Error)]
pub enum LlmError {
    #[error("{0}: no such file or directory")]
    Missing(PathBuf),
    #[error("{0}: neither a .gguf file nor a directory of safetensors")]
    UnknownFormat(PathBuf),
    #[error(
        "--device {0}: this sut-node was built without CUDA; rebuild it with \
         `cargo build --release -p sut-node --features cuda`"
    )]
    NoCuda(DeviceSpec),
    #[error("--device {device}: {source}")]
    Device {
        device: DeviceSpec,
        source: candle_core::Error,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {what}")]
    Model { path: PathBuf, what: String },
}

impl From<LlmError> for BackendError {
    fn from(e: LlmError) -> Self {
        BackendError(e.to_string())
    }
}

/// The prompt in `input`: token ids encoded as `dtype`.
pub fn parse_token_ids(input: &[u8], dtype: TokenDtype) -> Result<Vec<u32>, String> {
    let width = dtype.width();
    if input.is_empty() {
        return Err("empty prompt: no token ids".to_string());
    }
    if !input.len().is_multiple_of(width) {
        return Err(format!(
            "input of {} bytes is not a whole number of {} token ids ({width} bytes each)",
            input.len(),
            dtype.name()
        ));
    }
    input
        .chunks_exact(width)
        .enumerate()
        .map(|(i, bytes)| {
            let id = match dtype {
                TokenDtype::Int32 => {
                    i64::from(i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
                }
                TokenDtype::Int64 => {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(bytes);
                    i64::from_le_bytes(b)
                }
            };
            u32::try_from(id)
                .map_err(|_| format!("token id {id} at position {i} is negative or too large"))
        })
        .collect()
}

/// `ids` encoded as `dtype`, for an answer.
pub fn encode_token_ids(ids: &[u32], dtype: TokenDtype) -> Bytes {
    let mut out = Vec::with_capacity(ids.len() * dtype.width());
    for &id in ids {
        match dtype {
            // Ids come from a vocabulary far below 2^31.
            TokenDtype::Int32 => out.extend_from_slice(&(id as i32).to_le_bytes()),
            TokenDtype::Int64 => out.extend_from_slice(&i64::from(id).to_le_bytes()),
        }
    }
    Bytes::from(out)
}

/// The weights and the state of one generation.
enum Model {
    Gguf(quantized_llama::ModelWeights),
    Safetensors {
        model: llama::Llama,
        config: llama::Config,
        dtype: DType,
        /// Made anew for each prompt: candle's llama cache only grows.
        cache: llama::Cache,
    },
}

/// What generation needs to know about a loaded model.
struct Loaded {
    model: Model,
    device: Device,
    vocab_size: usize,
    /// The most positions (prompt plus generated tokens) the model handles.
    context: usize,
    /// Tokens that end a generation.
    eos: Vec<u32>,
    /// A valid token to warm up with.
    bos: u32,
}

impl Loaded {
    /// The logits of the next token after `ids`, which start at position
    /// `pos` (0: a new prompt, forgetting the previous one).
    fn forward(&mut self, ids: &[u32], pos: usize) -> candle_core::Result<Tensor> {
        let input = Tensor::new(ids, &self.device)?.unsqueeze(0)?;
        let logits = match &mut self.model {
            Model::Gguf(weights) => weights.forward(&input, pos)?,
            Model::Safetensors {
                model,
                config,
                dtype,
                cache,
            } => {
                if pos == 0 {
                    *cache = llama::Cache::new(true, *dtype, config, &self.device)?;
                }
                model.forward(&input, pos, cache)?
            }
        };
        logits.squeeze(0)?.to_dtype(DType::F32)
    }

    /// Greedy decoding of up to `max_new` tokens after `prompt`; `on_first`
    /// gets the first one as soon as it exists.
    fn generate(
        &mut self,
        prompt: &[u32],
        max_new: usize,
        on_first: &mut dyn FnMut(u32),
    ) -> Result<Vec<u32>, String> {
        if prompt.is_empty() {
            return Err("empty prompt: no token ids".to_string());
        }
        if let Some(&bad) = prompt.iter().find(|&&id| id as usize >= self.vocab_size) {
            return Err(format!(
                "token id {bad} is outside the model's vocabulary of {} tokens",
                self.vocab_size
            ));
        }
        if prompt.len() > self.context {
            return Err(format!(
                "prompt of {} tokens is longer than the model's context of {} tokens",
                prompt.len(),
                self.context
            ));
        }
        // The last generated token never goes through the model, hence + 1.
        // At least one token: an answer is never empty.
        let max_new = max_new.clamp(1, self.context - prompt.len() + 1);
        let fail = |e: candle_core::Error| format!("inference failed: {e}");
        let started = Instant::now();
        let mut out = Vec::with_capacity(max_new);
        let mut logits = self.forward(prompt, 0).map_err(fail)?;
        let mut pos = prompt.len();
        let mut first_at = started;
        while out.len() < max_new {
            let next = logits
                .argmax(0)
                .and_then(|t| t.to_scalar::<u32>())
                .map_err(fail)?;
            out.push(next);
            if out.len() == 1 {
                on_first(next);
                first_at = Instant::now();
            }
            if out.len() == max_new || self.eos.contains(&next) {
                break;
            }
            logits = self.forward(&[next], pos).map_err(fail)?;
            pos += 1;
        }
        let decode = first_at.elapsed().as_secs_f64();
        tracing::debug!(
            prompt_tokens = prompt.len(),
            new_tokens = out.len(),
            first_token_ms = (first_at - started).as_secs_f64() * 1e3,
            decode_tokens_per_s = if decode > 0.0 {
                out.len().saturating_sub(1) as f64 / decode
            } else {
                0.0
            },
            "generated"
        );
        Ok(out)
    }
}

/// An integer of GGUF metadata, whatever its integer type.
fn gguf_uint(content: &gguf_file::Content, key: &str) -> Option<u64> {
    use gguf_file::Value;
    match content.metadata.get(key)? {
        Value::U8(v) => Some(u64::from(*v)),
        Value::U16(v) => Some(u64::from(*v)),
        Value::U32(v) => Some(u64::from(*v)),
        Value::U64(v) => Some(*v),
        Value::I8(v) => u64::try_from(*v).ok(),
        Value::I16(v) => u64::try_from(*v).ok(),
        Value::I32(v) => u64::try_from(*v).ok(),
        Value::I64(v) => u64::try_from(*v).ok(),
        _ => None,
    }
}

fn load_gguf(path: &Path, device: &Device) -> Result<Loaded, LlmError> {
    let model_err = |what: String| LlmError::Model {
        path: path.to_path_buf(),
        what,
    };
    let mut file = std::fs::File::open(path).map_err(|source| LlmError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let content = gguf_file::Content::read(&mut file)
        .map_err(|e| model_err(format!("not a readable GGUF file: {e}")))?;
    let arch = match content.metadata.get("general.architecture") {
        Some(gguf_file::Value::String(a)) => a.clone(),
        _ => String::new(),
    };
    if arch != "llama" {
        return Err(model_err(format!(
            "architecture {arch:?} is not supported: the llm backend runs GGUF models \
             of the llama architecture"
        )));
    }
    let vocab_size = match content.tensor_infos.get("token_embd.weight") {
        Some(info) => info.shape.dims().first().copied().unwrap_or(0),
        None => return Err(model_err("no token_embd.weight tensor".to_string())),
    };
    let context = gguf_uint(&content, "llama.context_length")
        .and_then(|c| usize::try_from(c).ok())
        .unwrap_or(quantized_llama::MAX_SEQ_LEN)
        // candle's rotary tables stop there.
        .min(quantized_llama::MAX_SEQ_LEN);
    let eos: Vec<u32> = ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"]
        .iter()
        .filter_map(|k| gguf_uint(&content, k))
        .filter_map(|v| u32::try_from(v).ok())
        .collect();
    let bos = gguf_uint(&content, "tokenizer.ggml.bos_token_id")
        .and_then(|v| u32::try_from(v).ok())
        .filter(|&b| (b as usize) < vocab_size)
        .unwrap_or(0);
    let weights = quantized_llama::ModelWeights::from_gguf(content, &mut file, device)
        .map_err(|e| model_err(format!("cannot load the weights: {e}")))?;
    Ok(Loaded {
        model: Model::Gguf(weights),
        device: device.clone(),
        vocab_size,
        context,
        eos,
        bos,
    })
}

/// `eos_token_id` of a Hugging Face config file: one id or a list.
fn json_eos(value: &serde_json::Value) -> Vec<u32> {
    let ids = match value.get("eos_token_id") {
        Some(serde_json::Value::Array(ids)) => ids.iter().collect(),
        Some(id) => vec![id],
        None => vec![],
    };
    ids.into_iter()
        .filter_map(|id| id.as_u64().and_then(|v| u32::try_from(v).ok()))
        .collect()
}

fn load_safetensors(dir: &Path, device: &Device, dtype: DType) -> Result<Loaded, LlmError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| LlmError::Io { path, source }
    };
    let model_err = |what: String| LlmError::Model {
        path: dir.to_path_buf(),
        what,
    };
    let config_path = dir.join("config.json");
    let config_text = std::fs::read(&config_path).map_err(io(&config_path))?;
    let config_json: serde_json::Value =
        serde_json::from_slice(&config_text).map_err(|e| model_err(format!("config.json: {e}")))?;
    let llama_config: llama::LlamaConfig = serde_json::from_value(config_json.clone())
        .map_err(|e| model_err(format!("config.json is not a Llama configuration: {e}")))?;
    let config = llama_config.into_config(false);

    // The end of a generation: generation_config.json often lists more ids
    // (e.g. Llama 3's end of turn) than config.json.
    let mut eos = json_eos(&config_json);
    let generation_path = dir.join("generation_config.json");
    if let Ok(text) = std::fs::read(&generation_path) {
        if let Ok(json) = serde_json::from_slice::<serde_json::Value>(&text) {
            eos.extend(json_eos(&json));
        }
    }
    eos.sort_unstable();
    eos.dedup();

    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        if path.extension().is_some_and(|e| e == "safetensors") {
            files.push(path);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(model_err("no .safetensors files".to_string()));
    }
    // Read into memory rather than mapped: nothing can change under the model.
    let mut tensors = HashMap::new();
    for file in &files {
        let loaded = candle_core::safetensors::load(file, device).map_err(|e| LlmError::Model {
            path: file.clone(),
            what: format!("not a readable safetensors file: {e}"),
        })?;
        tensors.extend(loaded);
    }
    let vb = VarBuilder::from_tensors(tensors, dtype, device);
    // candle's llama panics (rather than failing) on a missing layer tensor.
    let model = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        llama::Llama::load(vb, &config)
    }))
    .map_err(|_| model_err("the weights do not match config.json".to_string()))?
    .map_err(|e| model_err(format!("the weights do not match config.json: {e}")))?;
    let cache = llama::Cache::new(true, dtype, &config, device)
        .map_err(|e| model_err(format!("cannot set up the KV cache: {e}")))?;
    Ok(Loaded {
        vocab_size: config.vocab_size,
        context: config.max_position_embeddings,
        eos,
        bos: config.bos_token_id.unwrap_or(0),
        model: Model::Safetensors {
            model,
            config,
            dtype,
            cache,
        },
        device: device.clone(),
    })
}

/// The two formats `--model` may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Gguf,
    Safetensors,
}

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
                    let mut generate = || {
                        let prompt = parse_token_ids(input, in_dtype)?;
                        let ids = model.generate(&prompt, max_new, &mut |first| {
                            sink.first_token(i, encode_token_ids(&[first], out_dtype));
                        })?;
                        Ok(Answer {
                            n_tokens: ids.len() as i64,
                            payload: encode_token_ids(&ids, out_dtype),
                        })
                    };
                    let output = generate();
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
mod tests {
    use super::*;
    use candle_core::quantized::{GgmlDType, QTensor};

    #[test]
    fn parses_int32_and_int64_token_ids() {
        let bytes: Vec<u8> = [1i32, 9906, 49151]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            parse_token_ids(&bytes, TokenDtype::Int32).unwrap(),
            [1, 9906, 49151]
        );
        let bytes: Vec<u8> = [7i64, 0].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(parse_token_ids(&bytes, TokenDtype::Int64).unwrap(), [7, 0]);
    }

    #[test]
    fn token_id_errors_say_what_is_wrong() {
        let err = parse_token_ids(&[0; 6], TokenDtype::Int32).unwrap_err();
        assert!(err.contains("6 bytes") && err.contains("int32"), "{err}");
        let err = parse_token_ids(&[0; 12], TokenDtype::Int64).unwrap_err();
        assert!(err.contains("int64"), "{err}");
        let err = parse_token_ids(&[], TokenDtype::Int32).unwrap_err();
        assert!(err.contains("empty"), "{err}");
        let err = parse_token_ids(&(-5i32).to_le_bytes(), TokenDtype::Int32).unwrap_err();
        assert!(err.contains("-5"), "{err}");
        let err = parse_token_ids(&(1i64 << 40).to_le_bytes(), TokenDtype::Int64).unwrap_err();
        assert!(err.contains("too large"), "{err}");
    }

    #[test]
    fn encodes_token_ids_little_endian() {
        assert_eq!(
            &encode_token_ids(&[1, 258], TokenDtype::Int32)[..],
            [1, 0, 0, 0, 2, 1, 0, 0]
        );
        assert_eq!(encode_token_ids(&[3], TokenDtype::Int64).len(), 8);
        let ids = [0, 5, 49151];
        for dtype in [TokenDtype::Int32, TokenDtype::Int64] {
            assert_eq!(
                parse_token_ids(&encode_token_ids(&ids, dtype), dtype).unwrap(),
                ids
            );
        }
    }

    #[test]
    fn parses_devices() {
        assert_eq!("cpu".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cpu);
        assert_eq!("cuda".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(0));
        assert_eq!("cuda:3".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(3));
        for bad in ["gpu", "cuda:", "cuda:x", ""] {
            assert!(bad.parse::<DeviceSpec>().is_err(), "{bad}");
        }
        assert_eq!(DeviceSpec::Cuda(1).to_string(), "cuda:1");
    }

    #[test]
    fn refuses_missing_and_unknown_models() {
        let err = Llm::new(Path::new("/nonexistent/model.gguf"), LlmOptions::default())
            .err()
            .unwrap();
        assert!(err.to_string().contains("no such file"), "{err}");
        let dir = temp_dir("unknown");
        let file = dir.join("model.bin");
        std::fs::write(&file, b"x").unwrap();
        let err = Llm::new(&file, LlmOptions::default()).err().unwrap();
        assert!(err.to_string().contains("neither"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn cuda_without_the_feature_is_a_clear_error() {
        if cfg!(feature = "cuda") {
            return;
        }
        let dir = temp_dir("nocuda");
        let args = LlmOptions {
            device: DeviceSpec::Cuda(0),
            ..LlmOptions::default()
        };
        let err = Llm::new(&dir, args).err().unwrap().to_string();
        assert!(err.contains("--features cuda"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn broken_model_files_fail_the_warm_up() {
        let dir = temp_dir("broken");
        let gguf = dir.join("model.gguf");
        std::fs::write(&gguf, b"not gguf").unwrap();
        let llm = Llm::new(&gguf, LlmOptions::default()).unwrap();
        let err = llm.warm_up().unwrap_err().to_string();
        assert!(err.contains("GGUF"), "{err}");
        // A directory without config.json.
        let llm = Llm::new(&dir, LlmOptions::default()).unwrap();
        let err = llm.warm_up().unwrap_err().to_string();
        assert!(err.contains("config.json"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn temp_dir(what: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sut-node-llm-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A tiny random Llama: vocabulary 64, 2 layers, hidden 16, 4 heads of
    /// which 2 for keys and values.
    const VOCAB: usize = 64;
    const HIDDEN: usize = 16;
    const FFN: usize = 32;
    const LAYERS: usize = 2;
    const HEADS: usize = 4;
    const KV_HEADS: usize = 2;
    const CONTEXT: usize = 32;
    const EOS: u32 = 63;

    /// Weights by role: (safetensors name, GGUF name, shape as
    /// (out, in)); seeded so that every run builds the same model.
    fn tiny_weights(tied: bool) -> Vec<(String, String, Tensor)> {
        let head_dim = HIDDEN / HEADS;
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut random = |shape: (usize, usize)| {
            let data: Vec<f32> = (0..shape.0 * shape.1)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.8
                })
                .collect();
            Tensor::from_vec(data, shape, &Device::Cpu).unwrap()
        };
        let ones = || Tensor::ones(HIDDEN, DType::F32, &Device::Cpu).unwrap();
        let mut w = vec![(
            "model.embed_tokens.weight".to_string(),
            "token_embd.weight".to_string(),
            random((VOCAB, HIDDEN)),
        )];
        for l in 0..LAYERS {
            let st = |n: &str| format!("model.layers.{l}.{n}.weight");
            let gg = |n: &str| format!("blk.{l}.{n}.weight");
            for (s, g, shape) in [
                ("self_attn.q_proj", "attn_q", (HIDDEN, HIDDEN)),
                ("self_attn.k_proj", "attn_k", (KV_HEADS * head_dim, HIDDEN)),
                ("self_attn.v_proj", "attn_v", (KV_HEADS * head_dim, HIDDEN)),
                ("self_attn.o_proj", "attn_output", (HIDDEN, HIDDEN)),
                ("mlp.gate_proj", "ffn_gate", (FFN, HIDDEN)),
                ("mlp.up_proj", "ffn_up", (FFN, HIDDEN)),
                ("mlp.down_proj", "ffn_down", (HIDDEN, FFN)),
            ] {
                w.push((st(s), gg(g), random(shape)));
            }
            w.push((st("input_layernorm"), gg("attn_norm"), ones()));
            w.push((st("post_attention_layernorm"), gg("ffn_norm"), ones()));
        }
        w.push((
            "model.norm.weight".to_string(),
            "output_norm.weight".to_string(),
            ones(),
        ));
        if !tied {
            w.push((
                "lm_head.weight".to_string(),
                "output.weight".to_string(),
                random((VOCAB, HIDDEN)),
            ));
        }
        w
    }

    fn tiny_safetensors(dir: &Path) {
        let config = serde_json::json!({
            "hidden_size": HIDDEN,
            "intermediate_size": FFN,
            "vocab_size": VOCAB,
            "num_hidden_layers": LAYERS,
            "num_attention_heads": HEADS,
            "num_key_value_heads": KV_HEADS,
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "max_position_embeddings": CONTEXT,
            "bos_token_id": 1,
            "eos_token_id": EOS,
            "tie_word_embeddings": false,
        });
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
        let tensors: HashMap<String, Tensor> = tiny_weights(false)
            .into_iter()
            .map(|(name, _, t)| (name, t))
            .collect();
        candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).unwrap();
    }

    /// The same kind of model as GGUF, with tied embeddings (no
    /// output.weight) as in small models.
    fn tiny_gguf(path: &Path) {
        use gguf_file::Value;
        let metadata = [
            ("general.architecture", Value::String("llama".into())),
            ("llama.block_count", Value::U32(LAYERS as u32)),
            ("llama.context_length", Value::U32(CONTEXT as u32)),
            ("llama.embedding_length", Value::U32(HIDDEN as u32)),
            ("llama.feed_forward_length", Value::U32(FFN as u32)),
            ("llama.attention.head_count", Value::U32(HEADS as u32)),
            ("llama.attention.head_count_kv", Value::U32(KV_HEADS as u32)),
            (
                "llama.rope.dimension_count",
                Value::U32((HIDDEN / HEADS) as u32),
            ),
            ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
            ("tokenizer.ggml.bos_token_id", Value::U32(1)),
            ("tokenizer.ggml.eos_token_id", Value::U32(EOS)),
        ];
        let tensors: Vec<(String, QTensor)> = tiny_weights(true)
            .into_iter()
            .map(|(_, name, t)| (name, QTensor::quantize(&t, GgmlDType::F32).unwrap()))
            .collect();
        let metadata: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
        let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let mut file = std::fs::File::create(path).unwrap();
        gguf_file::write(&mut file, &metadata, &tensors).unwrap();
    }

    /// Collects first tokens as the node would send them.
    #[derive(Default)]
    struct Firsts(Vec<(usize, Bytes)>);

    impl SampleSink for Firsts {
        fn first_token(&mut self, index: usize, payload: Bytes) {
            self.0.push((index, payload));
        }
    }

    fn prompt(ids: &[i32]) -> Bytes {
        Bytes::from(
            ids.iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>(),
        )
    }

    /// Runs a batch through a tiny model and checks what every LLM answer
    /// must satisfy; returns the answers' token ids.
    fn check_tiny_model(path: &Path) -> Vec<Result<Vec<u32>, String>> {
        let args = LlmOptions {
            max_new_tokens: 6,
            ..LlmOptions::default()
        };
        let llm = Llm::new(path, args).unwrap();
        llm.warm_up().unwrap();
        let too_long: Vec<i32> = (0..CONTEXT as i32 + 1).map(|i| i % 60).collect();
        let inputs = [
            prompt(&[1, 5, 9, 12]),
            prompt(&[1, 2]),
            prompt(&too_long),
            Bytes::from_static(&[1, 0, 0]),
            prompt(&[1, VOCAB as i32]),
            prompt(&[1, 5, 9, 12]),
        ];
        let mut firsts = Firsts::default();
        let outputs = llm
            .infer(&inputs, BatchInfo::default(), &mut firsts)
            .unwrap();
        assert_eq!(outputs.len(), inputs.len());
        let ids: Vec<Result<Vec<u32>, String>> = outputs
            .iter()
            .map(|o| {
                o.as_ref()
                    .map(|a| parse_token_ids(&a.payload, TokenDtype::Int32).unwrap())
                    .map_err(Clone::clone)
            })
            .collect();
        for (i, out) in outputs.iter().enumerate() {
            match out {
                Ok(answer) => {
                    let tokens = &ids[i].as_ref().unwrap();
                    assert_eq!(answer.n_tokens as usize, tokens.len());
                    assert!((1..=6).contains(&tokens.len()), "{tokens:?}");
                    // Stops at the end-of-sequence token, if it comes.
                    assert!(!tokens[..tokens.len() - 1].contains(&EOS));
                    assert!(tokens.iter().all(|&t| (t as usize) < VOCAB));
                    let first = firsts.0.iter().find(|(j, _)| *j == i).unwrap();
                    assert_eq!(first.1, answer.payload.slice(..4));
                }
                Err(_) => assert!(firsts.0.iter().all(|(j, _)| *j != i)),
            }
        }
        let err = |i: usize| ids[i].clone().unwrap_err();
        assert!(err(2).contains("context"), "{}", err(2));
        assert!(err(3).contains("3 bytes"), "{}", err(3));
        assert!(err(4).contains("vocabulary"), "{}", err(4));
        // Greedy decoding: the same prompt, the same answer, whatever ran
        // between.
        assert_eq!(ids[0], ids[5]);
        ids
    }

    #[test]
    fn runs_a_tiny_safetensors_model() {
        let dir = temp_dir("safetensors");
        tiny_safetensors(&dir);
        check_tiny_model(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn runs_a_tiny_gguf_model_with_tied_embeddings() {
        let dir = temp_dir("gguf");
        let path = dir.join("tiny.gguf");
        tiny_gguf(&path);
        check_tiny_model(&path);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn int64_ids_in_and_out_give_the_same_tokens() {
        let dir = temp_dir("int64");
        tiny_safetensors(&dir);
        let ids = [1u32, 5, 9, 12];
        let mut answers = Vec::new();
        for dtype in [TokenDtype::Int32, TokenDtype::Int64] {
            let args = LlmOptions {
                max_new_tokens: 5,
                llm_input_dtype: dtype,
                llm_output_dtype: dtype,
                ..LlmOptions::default()
            };
            let llm = Llm::new(&dir, args).unwrap();
            let mut firsts = Firsts::default();
            let out = llm
                .infer(
                    &[encode_token_ids(&ids, dtype)],
                    BatchInfo::default(),
                    &mut firsts,
                )
                .unwrap();
            let answer = out[0].as_ref().unwrap();
            assert_eq!(firsts.0[0].1.len(), dtype.width());
            answers.push(parse_token_ids(&answer.payload, dtype).unwrap());
        }
        assert_eq!(answers[0], answers[1]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn generation_stops_at_the_end_of_the_context() {
        let dir = temp_dir("context");
        tiny_safetensors(&dir);
        let args = LlmOptions {
            max_new_tokens: 100,
            ..LlmOptions::default()
        };
        let llm = Llm::new(&dir, args).unwrap();
        let mut firsts = Firsts::default();
        let long: Vec<i32> = (0..CONTEXT as i32 - 2).map(|i| i % 60).collect();
        let out = llm
            .infer(&[prompt(&long)], BatchInfo::default(), &mut firsts)
            .unwrap();
        let answer = out[0].as_ref().unwrap();
        // 30 prompt tokens leave room for at most 3 new ones.
        assert!((1..=3).contains(&answer.n_tokens), "{answer:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
