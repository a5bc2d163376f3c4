//! Which backend a node runs, as plain values (a front end such as the
//! binary's flags or a test makes one), and [`build`], the one place a
//! backend is constructed from them.

#[cfg(any(feature = "llm", feature = "onnx"))]
use std::path::PathBuf;
use std::sync::Arc;

use super::kserve::{Kserve, KserveConfigError, KserveOptions};
#[cfg(feature = "llm")]
use super::llm::{Llm, LlmError, LlmOptions};
#[cfg(feature = "onnx")]
use super::onnx::{Onnx, OnnxConfig, OnnxError, OnnxOptions};
use super::openai::{Openai, OpenaiConfigError, OpenaiOptions};
use super::synthetic::{Synthetic, SyntheticConfig};
use super::Backend;

/// A backend and everything it is built from.
#[derive(Debug, Clone)]
pub enum BackendSpec {
    /// The emulated accelerator.
    Synthetic(SyntheticConfig),
    /// A forwarder to a KServe v2 / Triton server.
    Kserve {
        /// The server's gRPC endpoint.
        server_url: Option<String>,
        /// The model's name on the server.
        model_name: Option<String>,
        /// The backend's own options.
        options: KserveOptions,
    },
    /// A forwarder to an OpenAI-compatible server.
    Openai {
        /// The server's base URL.
        server_url: Option<String>,
        /// The model's name on the server.
        model_name: Option<String>,
        /// The backend's own options.
        options: OpenaiOptions,
    },
    /// A Llama-family LLM run by candle in process.
    #[cfg(feature = "llm")]
    Llm {
        /// A `.gguf` file or a directory of safetensors.
        model_path: Option<PathBuf>,
        /// The backend's own options.
        options: LlmOptions,
    },
    /// ONNX Runtime in process.
    #[cfg(feature = "onnx")]
    Onnx {
        /// The `.onnx` file.
        model_path: Option<PathBuf>,
        /// The backend's own options.
        options: OnnxOptions,
        /// The largest batch the node runs (the model's batch dimension).
        max_batch_size: usize,
    },
    /// A backend this build leaves out (its cargo feature is off), by name.
    NotBuilt(&'static str),
}

/// Why a backend could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The kserve backend's options.
    #[error(transparent)]
    Kserve(#[from] KserveConfigError),
    /// The openai backend's options.
    #[error(transparent)]
    Openai(#[from] OpenaiConfigError),
    /// The llm backend could not load its model.
    #[cfg(feature = "llm")]
    #[error(transparent)]
    Llm(#[from] LlmError),
    /// The onnx backend could not load its model or runtime.
    #[cfg(feature = "onnx")]
    #[error(transparent)]
    Onnx(#[from] OnnxError),
    /// An in-process backend given no model.
    #[error("--backend {0} needs --model-path")]
    NoModel(&'static str),
    /// The backend's cargo feature is off in this build.
    #[error(
        "this sut-node was built without the {0} backend; build it with \
         `cargo build --release -p sut-node --features {0}` (the release images have it)"
    )]
    NotBuilt(&'static str),
}

/// Builds the backend `spec` names. Loading a model's weights waits for
/// [`Backend::warm_up`], which the node runs once it serves.
pub fn build(spec: BackendSpec) -> Result<Arc<dyn Backend>, BuildError> {
    Ok(match spec {
        BackendSpec::Synthetic(config) => Arc::new(Synthetic::new(config)),
        BackendSpec::Kserve {
            server_url,
            model_name,
            options,
        } => Arc::new(Kserve::new(server_url, model_name, options)?),
        BackendSpec::Openai {
            server_url,
            model_name,
            options,
        } => Arc::new(Openai::new(server_url, model_name, options)?),
        #[cfg(feature = "llm")]
        BackendSpec::Llm {
            model_path,
            options,
        } => {
            let model = model_path.ok_or(BuildError::NoModel("llm"))?;
            Arc::new(Llm::new(&model, options)?)
        }
        #[cfg(feature = "onnx")]
        BackendSpec::Onnx {
            model_path,
            options,
            max_batch_size,
        } => Arc::new(Onnx::load(OnnxConfig {
            model: model_path.ok_or(OnnxError::NoModel)?,
            options,
            max_batch_size,
        })?),
        BackendSpec::NotBuilt(name) => return Err(BuildError::NotBuilt(name)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::synthetic::ServiceTime;

    #[test]
    fn each_spec_builds_its_backend_or_says_why_not() {
        let synthetic = build(BackendSpec::Synthetic(SyntheticConfig {
            layout: Default::default(),
            service_time: ServiceTime::Fixed(std::time::Duration::ZERO),
            output_size: 4,
            llm_tokens: 0,
            seed: 0,
        }))
        .expect("the synthetic backend");
        assert_eq!(synthetic.name(), "synthetic");
        let e = build(BackendSpec::Kserve {
            server_url: None,
            model_name: None,
            options: KserveOptions::default(),
        })
        .err()
        .expect("no server URL");
        assert!(e.to_string().contains("needs --server-url"), "{e}");
        let e = build(BackendSpec::NotBuilt("llm"))
            .err()
            .expect("not built");
        assert!(e.to_string().contains("--features llm"), "{e}");
    }
}
