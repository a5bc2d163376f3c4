//! Greedy generation on a loaded model, one prompt at a time, with the
//! model's single KV cache.

use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use candle_transformers::models::{llama, quantized_llama};

/// The weights and the state of one generation.
pub(super) enum Model {
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
pub(super) struct Loaded {
    pub(super) model: Model,
    pub(super) device: Device,
    pub(super) vocab_size: usize,
    /// The most positions (prompt plus generated tokens) the model handles.
    pub(super) context: usize,
    /// Tokens that end a generation.
    pub(super) eos: Vec<u32>,
    /// A valid token to warm up with.
    pub(super) bos: u32,
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
    pub(super) fn generate(
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
