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
    /// The model path does not exist.
    Missing(PathBuf),
    #[error("{0}: neither a .gguf file nor a directory of safetensors")]
    /// The model path is neither a `.gguf` file nor a directory.
    UnknownFormat(PathBuf),
    #[error(
        "--device {0}: this sut-node was built without CUDA; rebuild it with \
         `cargo build --release -p sut-node --features cuda`"
    )]
    /// A CUDA device was asked of a build without the `cuda` feature.
    NoCuda(DeviceSpec),
    #[error("--device {device}: {source}")]
    /// The device could not be opened.
    Device {
        /// The device asked for.
        device: DeviceSpec,
        /// candle's error.
        source: candle_core::Error,
    },
    #[error("{path}: {source}")]
    /// A model file could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// The read's error.
        source: std::io::Error,
    },
    #[error("{path}: {what}")]
    /// The model's files are read but not usable (format, architecture,
    /// tokenizer or config).
    Model {
        /// The model file or directory.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
}

impl From<LlmError> for BackendError {
    fn from(e: LlmError) -> Self {
        BackendError(e.to_string())
    }
}
