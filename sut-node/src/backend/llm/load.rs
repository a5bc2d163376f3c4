//! Loading a model: a GGUF file (quantized weights, candle's
//! `quantized_llama`) or a directory of `config.json` and `*.safetensors`
//! (candle's `llama`), with what generation needs to know about it (vocabulary,
//! context, end-of-sequence tokens).

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use candle_transformers::models::{llama, quantized_llama};

use super::error::LlmError;
use super::generate::{Loaded, Model};

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

pub(super) fn load_gguf(path: &Path, device: &Device) -> Result<Loaded, LlmError> {
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

pub(super) fn load_safetensors(
    dir: &Path,
    device: &Device,
    dtype: DType,
) -> Result<Loaded, LlmError> {
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
