//! Options of the openai backend.

use sut_node::backend::openai::{self, OpenaiOptions};

/// What a sample's bytes are.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptKind {
    /// Token ids, int32 little endian: sent as `prompt: [ids]`.
    TokenIds,
    /// UTF-8 text.
    Text,
}

/// What an answer is.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerKind {
    /// The generated text, UTF-8.
    Text,
    /// The generated token ids, int32 little endian (the server must return
    /// them, e.g. vLLM with `return_tokens_as_token_ids`).
    TokenIds,
}

/// Options of the openai backend (with the shared `--server-url` and
/// `--model-name`).
#[derive(clap::Args, Debug, Clone)]
pub struct OpenaiArgs {
    /// Most tokens generated for a sample (`max_tokens`).
    #[arg(long, value_name = "N", default_value_t = 128,
          value_parser = clap::value_parser!(u32).range(1..),
          help_heading = "OpenAI backend")]
    pub openai_max_tokens: u32,

    /// What a sample's bytes are.
    #[arg(long, value_name = "KIND", value_enum, default_value_t = PromptKind::TokenIds,
          help_heading = "OpenAI backend")]
    pub openai_prompt: PromptKind,

    /// What the answer sent back is.
    #[arg(long, value_name = "KIND", value_enum, default_value_t = AnswerKind::Text,
          help_heading = "OpenAI backend")]
    pub openai_answer: AnswerKind,

    /// Sampling temperature (0: greedy).
    #[arg(
        long,
        value_name = "T",
        default_value_t = 0.0,
        help_heading = "OpenAI backend"
    )]
    pub openai_temperature: f64,

    /// More fields for every request body, as a JSON object, e.g.
    /// '{"ignore_eos": true}' (they win over the backend's own).
    #[arg(long, value_name = "JSON", help_heading = "OpenAI backend")]
    pub openai_extra_body: Option<String>,

    /// Seconds a sample's whole generation may take before it fails.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 600.0,
        help_heading = "OpenAI backend"
    )]
    pub openai_timeout: f64,
}

impl From<PromptKind> for openai::PromptKind {
    fn from(k: PromptKind) -> Self {
        match k {
            PromptKind::TokenIds => Self::TokenIds,
            PromptKind::Text => Self::Text,
        }
    }
}

impl From<AnswerKind> for openai::AnswerKind {
    fn from(k: AnswerKind) -> Self {
        match k {
            AnswerKind::Text => Self::Text,
            AnswerKind::TokenIds => Self::TokenIds,
        }
    }
}

impl From<OpenaiArgs> for OpenaiOptions {
    fn from(a: OpenaiArgs) -> Self {
        Self {
            openai_max_tokens: a.openai_max_tokens,
            openai_prompt: a.openai_prompt.into(),
            openai_answer: a.openai_answer.into(),
            openai_temperature: a.openai_temperature,
            openai_extra_body: a.openai_extra_body,
            openai_timeout: a.openai_timeout,
        }
    }
}
