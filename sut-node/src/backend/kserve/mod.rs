//! The `kserve` backend: forwards each sample to a KServe v2 / Triton server
//! over its gRPC API (`inference.GRPCInferenceService`, see
//! `proto/kserve_v2.proto`).
//!
//! Each sample becomes one `ModelInfer` request whose single input tensor is
//! the sample's bytes (`raw_input_contents`, no copy); with `--kserve-stream`
//! the batch's requests go over one `ModelStreamInfer` stream instead, for
//! decoupled models. The answer is the chosen output tensor's bytes, little
//! endian, as `raw_output_contents` carries them (typed contents are converted
//! to the same bytes).
//!
//! `Backend::infer` runs on the batcher's worker thread; the requests of a
//! batch are all in flight at once on the backend's own tokio runtime, so
//! `--max-batch-size` is the number of concurrent requests to the inference
//! server.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};

use super::forward::{run_batch, Runtime};
use super::{
    Answer, Backend, BackendError, BatchInfo, Output, SampleFailure, SampleSink, SessionNeeds,
};
use reassembly::StreamReassembly;

mod output;
/// Code generated from `proto/kserve_v2.proto`.
#[allow(clippy::all, missing_docs)]
pub mod pb;
mod reassembly;

use output::output_bytes;
use pb::grpc_inference_service_client::GrpcInferenceServiceClient;
use pb::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use pb::{ModelInferRequest, ModelInferResponse};

type Client = GrpcInferenceServiceClient<Channel>;

/// What a batch's stream delivers.
enum Event {
    Message(pb::ModelStreamInferResponse),
    /// The stream failed: every open sample fails with this.
    Failed(String),
}

/// Options of the kserve backend (besides the server and the model's name),
/// named after the `serve` flags that set them.
#[derive(Debug, Clone, PartialEq)]
pub struct KserveOptions {
    /// Name of the model's input tensor [default: the only input in the
    /// model's metadata].
    pub kserve_input_name: Option<String>,

    /// Datatype of the input tensor (KServe names: FP32, INT64, UINT8,
    /// BYTES, ...) [default: from the model's metadata].
    pub kserve_input_datatype: Option<String>,

    /// Shape of one sample's input tensor, comma-separated, e.g.
    /// 1,3,224,224; at most one -1, worked out from the sample's size
    /// [default: from the model's metadata, a leading -1 read as 1].
    pub kserve_input_shape: Option<String>,

    /// Output tensor whose bytes are the answer [default: the first output
    /// of the response].
    pub kserve_output_name: Option<String>,

    /// Version of the model to ask for [default: the server's choice].
    pub kserve_model_version: String,

    /// Send the requests over ModelStreamInfer (for decoupled models, e.g.
    /// LLMs on Triton) instead of ModelInfer.
    pub kserve_stream: bool,

    /// Seconds a request may take before its sample fails.
    pub kserve_timeout: f64,
}

impl Default for KserveOptions {
    /// What `serve` uses without the flags.
    fn default() -> Self {
        Self {
            kserve_input_name: None,
            kserve_input_datatype: None,
            kserve_input_shape: None,
            kserve_output_name: None,
            kserve_model_version: String::new(),
            kserve_stream: false,
            kserve_timeout: 60.0,
        }
    }
}

/// Why a kserve backend could not be set up from its options.
#[derive(Debug, Error)]
pub enum KserveConfigError {
    #[error(
        "--backend kserve needs --server-url URL (the server's gRPC endpoint, e.g. http://host:8001)"
    )]
    /// `--server-url` is missing.
    NoServerUrl,
    #[error("--backend kserve needs --model-name NAME (the model's name on the server)")]
    /// `--model-name` is missing.
    NoModelName,
    #[error("--server-url {0:?}: {1}")]
    /// `--server-url` is not a URL the client can connect to: the URL and why.
    BadServerUrl(String, String),
    #[error("--kserve-input-shape {0:?}: {1}")]
    /// `--kserve-input-shape` does not parse: the flag's value and why.
    BadShape(String, String),
    #[error(
        "--kserve-timeout must be a number of seconds, more than 0 and at most a year (31536000)"
    )]
    /// `--kserve-timeout` is not finite, positive and at most a year.
    BadTimeout,
    #[error("starting the kserve client runtime: {0}")]
    /// The client's runtime thread could not start.
    Runtime(std::io::Error),
}

/// The input tensor every request carries.
#[derive(Debug, Clone, PartialEq, Eq)]
struct InputSpec {
    name: String,
    datatype: String,
    /// -1: worked out from each sample's size.
    shape: Vec<i64>,
}

pub(crate) struct Kserve {
    runtime: Runtime,
    client: Client,
    server_url: String,
    model: String,
    args: KserveOptions,
    timeout: Duration,
    shape_override: Option<Vec<i64>>,
    /// Set by `warm_up`.
    input: OnceLock<InputSpec>,
    /// Numbers the requests of streams, whose answers come back by id.
    next_id: Mutex<u64>,
}

impl Kserve {
    pub(crate) fn new(
        server_url: Option<String>,
        model_name: Option<String>,
        args: KserveOptions,
    ) -> Result<Self, KserveConfigError> {
        let server_url = server_url.ok_or(KserveConfigError::NoServerUrl)?;
        let model = model_name.ok_or(KserveConfigError::NoModelName)?;
        let shape_override = args
            .kserve_input_shape
            .as_deref()
            .map(|s| parse_shape(s).map_err(|e| KserveConfigError::BadShape(s.to_string(), e)))
            .transpose()?;
        let timeout =
            crate::timeout_secs(args.kserve_timeout).ok_or(KserveConfigError::BadTimeout)?;
        let runtime = Runtime::new("kserve").map_err(KserveConfigError::Runtime)?;
        // Plain host:port means no TLS.
        let url = if server_url.contains("://") {
            server_url.clone()
        } else {
            format!("http://{server_url}")
        };
        let bad = |e: &dyn std::fmt::Display| {
            KserveConfigError::BadServerUrl(server_url.clone(), e.to_string())
        };
        let endpoint = Endpoint::from_shared(url)
            .map_err(|e| bad(&e))?
            .connect_timeout(Duration::from_secs(10))
            // Keeps the HTTP/2 connection warm through idle stretches and
            // finds a dead server before a sample does.
            .http2_keep_alive_interval(Duration::from_secs(20))
            .keep_alive_while_idle(true)
            .tcp_nodelay(true);
        let endpoint = if endpoint.uri().scheme_str() == Some("https") {
            endpoint
                .tls_config(tonic::transport::ClientTlsConfig::new().with_enabled_roots())
                .map_err(|e| bad(&e))?
        } else {
            endpoint
        };
        // The channel connects on first use (in `warm_up`) and reconnects by
        // itself after a lost connection.
        let channel = {
            let _in_runtime = runtime.enter();
            endpoint.connect_lazy()
        };
        let client = GrpcInferenceServiceClient::new(channel)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        Ok(Self {
            runtime,
            client,
            server_url,
            model,
            args,
            timeout,
            shape_override,
            input: OnceLock::new(),
            next_id: Mutex::new(0),
        })
    }

    async fn check_server(&self) -> Result<InputSpec, BackendError> {
        let mut client = self.client.clone();
        let (up, model) = (&self.server_url, &self.model);
        let version = self.args.kserve_model_version.clone();
        let ready = client
            .server_ready(pb::ServerReadyRequest {})
            .await
            .map_err(|s| {
                BackendError(format!(
                    "kserve inference server {up} is unreachable: {}",
                    status_text(&s)
                ))
            })?
            .into_inner();
        if !ready.ready {
            return Err(BackendError(format!(
                "kserve inference server {up} is not ready"
            )));
        }
        let ready = client
            .model_ready(pb::ModelReadyRequest {
                name: model.clone(),
                version: version.clone(),
            })
            .await
            .map_err(|s| {
                BackendError(format!(
                    "kserve inference server {up}: model {model:?}: {}",
                    status_text(&s)
                ))
            })?
            .into_inner();
        if !ready.ready {
            return Err(BackendError(format!(
                "kserve inference server {up}: model {model:?} is not ready"
            )));
        }
        let meta = client
            .model_metadata(pb::ModelMetadataRequest {
                name: model.clone(),
                version,
            })
            .await
            .map_err(|s| {
                BackendError(format!(
                    "kserve inference server {up}: metadata of model {model:?}: {}",
                    status_text(&s)
                ))
            })?
            .into_inner();
        self.input_spec(&meta).map_err(|e| {
            BackendError(format!(
                "kserve inference server {up}: model {model:?}: {e}"
            ))
        })
    }

    /// The input tensor: the flags, or else the model's metadata.
    fn input_spec(&self, meta: &pb::ModelMetadataResponse) -> Result<InputSpec, String> {
        let a = &self.args;
        let from_meta = match &a.kserve_input_name {
            Some(name) => meta.inputs.iter().find(|t| &t.name == name),
            None if meta.inputs.len() == 1 => meta.inputs.first(),
            None => None,
        };
        let name = match (&a.kserve_input_name, from_meta) {
            (Some(name), _) => name.clone(),
            (None, Some(t)) => t.name.clone(),
            (None, None) => {
                let names: Vec<&str> = meta.inputs.iter().map(|t| t.name.as_str()).collect();
                return Err(format!(
                    "its metadata lists inputs {names:?}; the forwarder sends one: name it with \
                     --kserve-input-name (and give --kserve-input-datatype and \
                     --kserve-input-shape if the metadata lacks it)"
                ));
            }
        };
        let datatype = match (&a.kserve_input_datatype, from_meta) {
            (Some(d), _) => d.to_ascii_uppercase(),
            (None, Some(t)) if !t.datatype.is_empty() => t.datatype.clone(),
            _ => {
                return Err(format!(
                    "no datatype for input {name:?}: give --kserve-input-datatype"
                ))
            }
        };
        if datatype != "BYTES" && element_size(&datatype).is_none() {
            return Err(format!("input {name:?}: unknown datatype {datatype:?}"));
        }
        let shape = match (&self.shape_override, from_meta) {
            (Some(s), _) => s.clone(),
            (None, Some(t)) if !t.shape.is_empty() => {
                let mut s = t.shape.clone();
                // A leading -1 is the batch dimension: one sample a request.
                if s.len() > 1 && s[0] == -1 {
                    s[0] = 1;
                }
                if s.iter().filter(|d| **d < 0).count() > 1 {
                    return Err(format!(
                        "input {name:?} has shape {:?} with several variable dimensions: \
                         give --kserve-input-shape",
                        t.shape
                    ));
                }
                s
            }
            _ => {
                return Err(format!(
                    "no shape for input {name:?}: give --kserve-input-shape"
                ))
            }
        };
        Ok(InputSpec {
            name,
            datatype,
            shape,
        })
    }

    fn request(
        &self,
        input: &InputSpec,
        sample: &Bytes,
        id: String,
    ) -> Result<ModelInferRequest, String> {
        let (shape, raw) = if input.datatype == "BYTES" {
            // One element: the sample, with the 4-byte length prefix of the
            // raw BYTES encoding.
            let len = u32::try_from(sample.len())
                .map_err(|_| "sample too large for BYTES".to_string())?;
            let mut raw = BytesMut::with_capacity(4 + sample.len());
            raw.put_u32_le(len);
            raw.extend_from_slice(sample);
            let shape = if input.shape.is_empty() {
                vec![1]
            } else {
                input
                    .shape
                    .iter()
                    .map(|d| if *d < 0 { 1 } else { *d })
                    .collect()
            };
            (shape, raw.freeze())
        } else {
            let size = element_size(&input.datatype).unwrap_or(1);
            (
                resolve_shape(&input.shape, sample.len(), size)?,
                sample.clone(),
            )
        };
        let outputs = self
            .args
            .kserve_output_name
            .iter()
            .map(|name| InferRequestedOutputTensor {
                name: name.clone(),
                parameters: HashMap::new(),
            })
            .collect();
        Ok(ModelInferRequest {
            model_name: self.model.clone(),
            model_version: self.args.kserve_model_version.clone(),
            id,
            parameters: HashMap::new(),
            inputs: vec![InferInputTensor {
                name: input.name.clone(),
                datatype: input.datatype.clone(),
                shape,
                parameters: HashMap::new(),
                contents: None,
            }],
            outputs,
            raw_input_contents: vec![raw],
        })
    }

    fn answer_of(&self, response: &ModelInferResponse) -> Result<Bytes, String> {
        output_bytes(response, self.args.kserve_output_name.as_deref())
    }

    fn ids(&self, n: usize) -> u64 {
        let mut next = self.next_id.lock().unwrap_or_else(PoisonError::into_inner);
        let first = *next;
        *next = next.wrapping_add(n as u64);
        first
    }

    fn infer_unary(
        &self,
        input: &InputSpec,
        inputs: &[Bytes],
        sink: &mut dyn SampleSink,
    ) -> Vec<Output> {
        let requests: Vec<Result<ModelInferRequest, SampleFailure>> = inputs
            .iter()
            .map(|s| {
                self.request(input, s, String::new())
                    .map_err(SampleFailure::Backend)
            })
            .collect();
        let timeout = self.timeout;
        let client = self.client.clone();
        let tasks = requests.into_iter().map(|request| {
            let mut client = client.clone();
            async move {
                let request = request?;
                match tokio::time::timeout(timeout, client.model_infer(request)).await {
                    Ok(Ok(response)) => Ok(response.into_inner()),
                    Ok(Err(status)) => Err(SampleFailure::Backend(server_error(&status))),
                    Err(_) => Err(SampleFailure::Backend(format!(
                        "no answer from the inference server within {timeout:?}"
                    ))),
                }
            }
        });
        let no_answer = Err(SampleFailure::Backend("no answer".into()));
        let mut outputs: Vec<Output> = vec![no_answer; inputs.len()];
        self.runtime.each(tasks, |i, response| {
            let output = response.and_then(|r| {
                Ok(Answer {
                    payload: self.answer_of(&r).map_err(SampleFailure::Backend)?,
                    n_tokens: 0,
                })
            });
            // Each answer leaves as its request ends, not with the slowest.
            sink.answer_now(i, &output);
            outputs[i] = output;
        });
        outputs
    }

    /// One `ModelStreamInfer` stream per batch, all its requests sent at
    /// once; `StreamReassembly` puts their responses back together.
    fn infer_stream(
        &self,
        input: &InputSpec,
        inputs: &[Bytes],
        sink: &mut dyn SampleSink,
    ) -> Result<Vec<Output>, BackendError> {
        let base = self.ids(inputs.len());
        let mut reassembly =
            StreamReassembly::new(inputs.len(), self.args.kserve_output_name.clone());
        let mut requests = Vec::with_capacity(inputs.len());
        for (i, sample) in inputs.iter().enumerate() {
            let id = base.wrapping_add(i as u64).to_string();
            match self.request(input, sample, id.clone()) {
                Ok(r) => {
                    requests.push(r);
                    reassembly.sent(i, id);
                }
                Err(e) => reassembly.not_sent(i, e),
            }
        }
        let mut client = self.client.clone();
        let timeout = self.timeout;
        let stream_task = async move {
            let (tx, rx) = mpsc::unbounded_channel();
            if requests.is_empty() {
                return rx;
            }
            let call = async move {
                let response = client
                    .model_stream_infer(tokio_stream::iter(requests))
                    .await;
                let mut stream = match response {
                    Ok(r) => r.into_inner(),
                    Err(status) => {
                        let _ = tx.send(Event::Failed(server_error(&status)));
                        return;
                    }
                };
                loop {
                    match stream.message().await {
                        Ok(Some(m)) => {
                            if tx.send(Event::Message(m)).is_err() {
                                return;
                            }
                        }
                        Ok(None) => return,
                        Err(status) => {
                            let _ = tx.send(Event::Failed(server_error(&status)));
                            return;
                        }
                    }
                }
            };
            tokio::spawn(async move {
                if tokio::time::timeout(timeout, call).await.is_err() {
                    // The channel closes: the samples still open time out.
                }
            });
            rx
        };
        run_batch(&self.runtime, stream_task, |event| {
            match event {
                Event::Message(m) => reassembly.response(m, sink),
                Event::Failed(e) => reassembly.stream_failed(&e),
            }
            !reassembly.is_complete()
        });
        Ok(reassembly.finish(timeout))
    }
}

impl Backend for Kserve {
    fn name(&self) -> &str {
        "kserve"
    }

    /// Token counts come from a decoupled model's stream of responses.
    fn cannot_serve(&self, needs: &SessionNeeds<'_>) -> Option<String> {
        (needs.token_latencies && !self.args.kserve_stream).then(|| {
            format!(
                "a {} session is judged on token latencies, and the kserve backend counts \
                 tokens only over a stream: start the node with --kserve-stream (a decoupled \
                 model that streams its tokens)",
                needs.model
            )
        })
    }

    fn warm_up(&self) -> Result<(), BackendError> {
        let input = self.runtime.block_on(self.check_server())?;
        tracing::info!(
            server = %self.server_url,
            model = %self.model,
            input = %input.name,
            datatype = %input.datatype,
            shape = ?input.shape,
            stream = self.args.kserve_stream,
            "kserve inference server ready"
        );
        // One request of zeros when the shape is fixed: opens the connection
        // and lets the server load what it loads lazily.
        let fixed = input.datatype != "BYTES" && input.shape.iter().all(|d| *d >= 0);
        let input = self.input.get_or_init(|| input);
        if fixed {
            let elements: i64 = input.shape.iter().product();
            let size = element_size(&input.datatype).unwrap_or(1);
            let zeros = Bytes::from(vec![0u8; (elements.max(0) as usize).saturating_mul(size)]);
            struct Ignore;
            impl SampleSink for Ignore {
                fn first_token(&mut self, _: usize, _: Bytes) {}
            }
            let out = self.infer(&[zeros], BatchInfo::default(), &mut Ignore)?;
            if let Some(Err(e)) = out.first() {
                return Err(BackendError(format!(
                    "kserve inference server {}: warm-up request to model {:?} failed: {e}",
                    self.server_url, self.model
                )));
            }
        }
        Ok(())
    }

    fn infer(
        &self,
        inputs: &[Bytes],
        _info: BatchInfo,
        sink: &mut dyn SampleSink,
    ) -> Result<Vec<Output>, BackendError> {
        let Some(input) = self.input.get() else {
            return Err(BackendError("kserve backend used before warm-up".into()));
        };
        if self.args.kserve_stream {
            self.infer_stream(input, inputs, sink)
        } else {
            Ok(self.infer_unary(input, inputs, sink))
        }
    }
}

/// `1,3,224,224` → [1, 3, 224, 224]; -1 marks the one variable dimension.
fn parse_shape(s: &str) -> Result<Vec<i64>, String> {
    let dims = s
        .split(',')
        .map(|d| {
            d.trim()
                .parse::<i64>()
                .ok()
                .filter(|d| *d >= -1)
                .ok_or_else(|| format!("{d:?} is not a dimension (a whole number, or -1)"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if dims.iter().filter(|d| **d == -1).count() > 1 {
        return Err("at most one dimension may be -1".into());
    }
    Ok(dims)
}

/// The shape of a sample of `len` bytes: the variable dimension worked out,
/// the size checked.
fn resolve_shape(shape: &[i64], len: usize, element: usize) -> Result<Vec<i64>, String> {
    if !len.is_multiple_of(element) {
        return Err(format!(
            "the sample's {len} bytes are not a whole number of {element}-byte elements"
        ));
    }
    let elements = (len / element) as i64;
    let known: i64 = shape.iter().filter(|d| **d >= 0).product();
    let mut out = shape.to_vec();
    match out.iter_mut().find(|d| **d < 0) {
        Some(d) if known > 0 && elements % known == 0 => *d = elements / known,
        Some(_) => {
            return Err(format!(
                "the sample's {elements} elements do not fit the input shape {shape:?}"
            ))
        }
        None if known == elements => {}
        None => {
            return Err(format!(
                "the sample has {elements} elements, the input shape {shape:?} takes {known}"
            ))
        }
    }
    Ok(out)
}

/// Bytes per element of a KServe datatype (None: BYTES or unknown).
fn element_size(datatype: &str) -> Option<usize> {
    Some(match datatype {
        "BOOL" | "UINT8" | "INT8" => 1,
        "UINT16" | "INT16" | "FP16" | "BF16" => 2,
        "UINT32" | "INT32" | "FP32" => 4,
        "UINT64" | "INT64" | "FP64" => 8,
        _ => return None,
    })
}

fn status_text(s: &tonic::Status) -> String {
    if s.message().is_empty() {
        format!("{:?}", s.code())
    } else {
        format!("{:?}: {}", s.code(), s.message())
    }
}

/// A failed request as the sample's error: the inference server's status and
/// message.
fn server_error(s: &tonic::Status) -> String {
    format!("inference server {}", status_text(s))
}

#[cfg(test)]
mod tests;
