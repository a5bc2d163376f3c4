//! Options of the llm backend.

use sut_node::backend::llm::{self, DeviceSpec, LlmOptions};

/// How token ids are encoded on the wire.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenDtype {
    /// 4-byte little-endian signed integers.
    Int32,
    /// 8-byte little-endian signed integers.
    Int64,
}

/// The precision of safetensors weights once loaded (GGUF files keep their
/// own quantization).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightDtype {
    F32,
    F16,
    Bf16,
}

/// The options of `sut-node serve` that only the llm backend reads.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "LLM backend")]
pub struct LlmArgs {
    /// The most tokens generated per sample; generation stops earlier at the
    /// model's end-of-sequence token or at the end of its context. 1024 is
    /// what the MLPerf llama2-70b benchmark allows.
    #[arg(long, value_name = "N", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_new_tokens: u32,

    /// Where the model runs: cpu, or cuda[:N] (needs a sut-node built with
    /// `--features cuda`).
    #[arg(long, value_name = "DEVICE", default_value = "cpu")]
    pub device: DeviceSpec,

    /// Encoding of the prompt token ids in each input (little-endian).
    #[arg(long, value_enum, value_name = "DTYPE", default_value_t = TokenDtype::Int32)]
    pub llm_input_dtype: TokenDtype,

    /// Encoding of the generated token ids in each answer and first token
    /// (little-endian); match the accuracy script's --dtype.
    #[arg(long, value_enum, value_name = "DTYPE", default_value_t = TokenDtype::Int32)]
    pub llm_output_dtype: TokenDtype,

    /// Precision of safetensors weights [default: f32 on cpu, bf16 on cuda].
    /// GGUF models keep their own quantization.
    #[arg(long, value_enum, value_name = "DTYPE")]
    pub llm_dtype: Option<WeightDtype>,
}

impl From<TokenDtype> for llm::TokenDtype {
    fn from(d: TokenDtype) -> Self {
        match d {
            TokenDtype::Int32 => Self::Int32,
            TokenDtype::Int64 => Self::Int64,
        }
    }
}

impl From<WeightDtype> for llm::WeightDtype {
    fn from(d: WeightDtype) -> Self {
        match d {
            WeightDtype::F32 => Self::F32,
            WeightDtype::F16 => Self::F16,
            WeightDtype::Bf16 => Self::Bf16,
        }
    }
}

impl From<LlmArgs> for LlmOptions {
    fn from(a: LlmArgs) -> Self {
        Self {
            max_new_tokens: a.max_new_tokens,
            device: a.device,
            llm_input_dtype: a.llm_input_dtype.into(),
            llm_output_dtype: a.llm_output_dtype.into(),
            llm_dtype: a.llm_dtype.map(Into::into),
        }
    }
}
