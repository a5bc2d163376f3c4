//! Why the llm backend could not start: shared by loading and by the
//! backend itself.

use std::path::PathBuf;

use thiserror::Error;

use super::device::DeviceSpec;
use crate::backend::BackendError;

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
