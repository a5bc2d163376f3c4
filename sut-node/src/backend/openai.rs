//! The `openai` backend: forwards each sample to an OpenAI-compatible HTTP
//! server (vLLM, SGLang, TGI, llama.cpp's server, ...) as a streamed
//! `POST /v1/completions`, and reads the server-sent events as they come.
//!
//! - Input: the sample's bytes are the prompt's token ids (int32 little
//!   endian, as loadgen-node sends the LLM datasets), sent as `prompt: [ids]`;
//!   or, with `--openai-prompt text`, UTF-8 text.
//! - First token: the first chunk carrying generated text goes to the
//!   `SampleSink` at once.
//! - Answer: the generated text (UTF-8), or with `--openai-answer token-ids`
//!   the generated token ids (int32 little endian), which needs a server that
//!   returns ids (vLLM's `return_tokens_as_token_ids`).
//! - Token count: the final `usage.completion_tokens`; from a server that
//!   sends no usage, the number of chunks carrying text (servers stream one
//!   token a chunk), or of token ids.
//!
//! `Backend::infer` runs on the batcher's worker thread; the requests of a
//! batch are all in flight at once on the backend's own tokio runtime, so
//! `--max-batch-size` is the number of concurrent requests to the inference
//! server.
//! Connections are kept alive in a pool and reused by the next requests.

use std::error::Error as StdError;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use thiserror::Error;
use tokio::sync::mpsc::{self, UnboundedSender};

use super::forward::{run_batch, Runtime};
use super::{
    Answer, Backend, BackendError, BatchInfo, Output, SampleFailure, SampleSink, SessionNeeds,
};

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// What a sample's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptKind {
    /// Token ids, int32 little endian: sent as `prompt: [ids]`.
    TokenIds,
    /// UTF-8 text.
    Text,
}

/// What an answer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerKind {
    /// The generated text, UTF-8.
    Text,
    /// The generated token ids, int32 little endian (the server must return
    /// them, e.g. vLLM with `return_tokens_as_token_ids`).
    TokenIds,
}

/// Options of the openai backend (besides the server and the model's name),
/// named after the `serve` flags that set them.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenaiOptions {
    /// Most tokens generated for a sample (`max_tokens`).
    pub openai_max_tokens: u32,

    /// What a sample's bytes are.
    pub openai_prompt: PromptKind,

    /// What the answer sent back is.
    pub openai_answer: AnswerKind,

    /// Sampling temperature (0: greedy).
    pub openai_temperature: f64,

    /// More fields for every request body, as a JSON object, e.g.
    /// '{"ignore_eos": true}' (they win over the backend's own).
    pub openai_extra_body: Option<String>,

    /// Seconds a sample's whole generation may take before it fails.
    pub openai_timeout: f64,
}

impl Default for OpenaiOptions {
    /// What `serve` uses without the flags.
    fn default() -> Self {
        Self {
            openai_max_tokens: 128,
            openai_prompt: PromptKind::TokenIds,
            openai_answer: AnswerKind::Text,
            openai_temperature: 0.0,
            openai_extra_body: None,
            openai_timeout: 600.0,
        }
    }
}

/// Why an openai backend could not be set up from its options.
#[derive(Debug, Error)]
pub enum OpenaiConfigError {
    #[error(
        "--backend openai needs --server-url URL (the server's base URL, e.g. http://host:8000)"
    )]
    /// `--server-url` is missing.
    NoServerUrl,
    #[error("--backend openai needs --model-name NAME (the model's name on the server)")]
    /// `--model-name` is missing.
    NoModelName,
    #[error("--server-url {0:?}: {1}")]
    /// `--server-url` is not an http:// URL the client can use: the URL and why.
    BadServerUrl(String, String),
    #[error("--openai-extra-body: {0}")]
    /// `--openai-extra-body` is not a JSON object: why.
    BadExtraBody(String),
    #[error(
        "--openai-timeout must be a number of seconds, more than 0 and at most a year (31536000)"
    )]
    /// `--openai-timeout` is not finite, positive and at most a year.
    BadTimeout,
    #[error("starting the openai client runtime: {0}")]
    /// The client's runtime thread could not start.
    Runtime(std::io::Error),
}

pub(crate) struct Openai {
    runtime: Runtime,
    client: HttpClient,
    server_url: String,
    completions: Uri,
    models: Uri,
    model: String,
    args: OpenaiOptions,
    extra: serde_json::Map<String, Value>,
    timeout: Duration,
    /// `Authorization: Bearer` value, from OPENAI_API_KEY.
    api_key: Option<String>,
}

/// What a batch's requests report, as it happens.
enum Event {
    FirstToken(usize, Bytes),
    Done(usize, Output),
}

impl Openai {
    pub(crate) fn new(
        server_url: Option<String>,
        model_name: Option<String>,
        args: OpenaiOptions,
    ) -> Result<Self, OpenaiConfigError> {
        let server_url = server_url.ok_or(OpenaiConfigError::NoServerUrl)?;
        let model = model_name.ok_or(OpenaiConfigError::NoModelName)?;
        let bad = |e: &str| OpenaiConfigError::BadServerUrl(server_url.clone(), e.to_string());
        let mut base = if server_url.contains("://") {
            server_url.clone()
        } else {
            format!("http://{server_url}")
        };
        if !base.starts_with("http://") {
            return Err(bad(
                "only http:// inference servers are supported (put a TLS-terminating proxy in front of an https one)",
            ));
        }
        // Accept the base URL with or without its /v1.
        while base.ends_with('/') {
            base.pop();
        }
        if let Some(stripped) = base.strip_suffix("/v1") {
            base = stripped.to_string();
        }
        let uri = |path: &str| -> Result<Uri, OpenaiConfigError> {
            format!("{base}{path}")
                .parse::<Uri>()
                .map_err(|e| bad(&e.to_string()))
        };
        let (completions, models) = (uri("/v1/completions")?, uri("/v1/models")?);
        let extra = match &args.openai_extra_body {
            None => serde_json::Map::new(),
            Some(text) => match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(map)) => map,
                Ok(_) => return Err(OpenaiConfigError::BadExtraBody("not a JSON object".into())),
                Err(e) => return Err(OpenaiConfigError::BadExtraBody(e.to_string())),
            },
        };
        let timeout =
            crate::timeout_secs(args.openai_timeout).ok_or(OpenaiConfigError::BadTimeout)?;
        let runtime = Runtime::new("openai").map_err(OpenaiConfigError::Runtime)?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(10)));
        // Keep-alive pool: a connection goes back to the pool once its
        // response is read, and the next request reuses it.
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        let api_key = std::env::var("OPENAI_API_KEY")
            .ok()
            .filter(|k| !k.is_empty());
        Ok(Self {
            runtime,
            client,
            server_url,
            completions,
            models,
            model,
            args,
            extra,
            timeout,
            api_key,
        })
    }

    /// The request body of one sample.
    fn body(&self, sample: &[u8], max_tokens: u32) -> Result<Bytes, String> {
        let prompt = match self.args.openai_prompt {
            PromptKind::TokenIds => Value::from(token_ids(sample)?),
            PromptKind::Text => Value::from(
                std::str::from_utf8(sample).map_err(|e| format!("the prompt is not UTF-8: {e}"))?,
            ),
        };
        let mut body = json!({
            "model": self.model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": self.args.openai_temperature,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if let Value::Object(map) = &mut body {
            if self.args.openai_answer == AnswerKind::TokenIds {
                map.insert("logprobs".into(), json!(1));
                map.insert("return_tokens_as_token_ids".into(), json!(true));
            }
            for (k, v) in &self.extra {
                map.insert(k.clone(), v.clone());
            }
        }
        serde_json::to_vec(&body)
            .map(Bytes::from)
            .map_err(|e| e.to_string())
    }

    fn request(&self, body: Bytes) -> Result<Request<Full<Bytes>>, String> {
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(self.completions.clone())
            .header("content-type", "application/json")
            .header("accept", "text/event-stream");
        if let Some(key) = &self.api_key {
            builder = builder.header("authorization", format!("Bearer {key}"));
        }
        builder.body(Full::new(body)).map_err(|e| e.to_string())
    }

    /// Starts every sample's request; events arrive on the returned channel.
    fn start(&self, inputs: &[Bytes], max_tokens: u32) -> mpsc::UnboundedReceiver<Event> {
        let (tx, rx) = mpsc::unbounded_channel();
        let _in_runtime = self.runtime.enter();
        for (index, sample) in inputs.iter().enumerate() {
            let request = self.body(sample, max_tokens).and_then(|b| self.request(b));
            let request = match request {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.send(Event::Done(index, Err(SampleFailure::Backend(e))));
                    continue;
                }
            };
            let (client, tx, answer, timeout) = (
                self.client.clone(),
                tx.clone(),
                self.args.openai_answer,
                self.timeout,
            );
            tokio::spawn(async move {
                let generation = generate(&client, request, answer, index, &tx);
                let output = match tokio::time::timeout(timeout, generation).await {
                    Ok(output) => output,
                    Err(_) => Err(SampleFailure::Backend(format!(
                        "no complete answer from the inference server within {timeout:?}"
                    ))),
                };
                let _ = tx.send(Event::Done(index, output));
            });
        }
        rx
    }

    fn run(&self, inputs: &[Bytes], max_tokens: u32, sink: &mut dyn SampleSink) -> Vec<Output> {
        let mut outputs: Vec<Option<Output>> = vec![None; inputs.len()];
        let mut open = inputs.len();
        if open > 0 {
            let rx = self.start(inputs, max_tokens);
            run_batch(&self.runtime, async { rx }, |event| {
                match event {
                    Event::FirstToken(i, token) => sink.first_token(i, token),
                    Event::Done(i, output) => {
                        if outputs[i].is_none() {
                            open -= 1;
                            // Each request's answer leaves when it ends,
                            // not with the batch's slowest.
                            sink.answer_now(i, &output);
                            outputs[i] = Some(output);
                        }
                    }
                }
                open > 0
            });
        }
        outputs
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    Err(SampleFailure::Backend(
                        "the request ended without an answer".into(),
                    ))
                })
            })
            .collect()
    }

    async fn served_models(&self) -> Result<Vec<String>, String> {
        let mut builder = Request::builder().uri(self.models.clone());
        if let Some(key) = &self.api_key {
            builder = builder.header("authorization", format!("Bearer {key}"));
        }
        let request = builder
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        let response = tokio::time::timeout(Duration::from_secs(30), self.client.request(request))
            .await
            .map_err(|_| "no answer within 30 s".to_string())?
            .map_err(|e| format!("unreachable: {}", chain(&e)))?;
        let status = response.status();
        let body = read_limited(response.into_body(), 1 << 20).await?;
        if !status.is_success() {
            return Err(format!(
                "GET /v1/models: HTTP {status}: {}",
                error_message(&body)
            ));
        }
        let list: Value =
            serde_json::from_slice(&body).map_err(|e| format!("GET /v1/models: not JSON: {e}"))?;
        Ok(list["data"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|m| m["id"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default())
    }
}

impl Backend for Openai {
    fn name(&self) -> &str {
        "openai"
    }

    /// Every completion is streamed and its tokens counted.
    fn cannot_serve(&self, _: &SessionNeeds<'_>) -> Option<String> {
        None
    }

    fn warm_up(&self) -> Result<(), BackendError> {
        let (up, model) = (&self.server_url, &self.model);
        let models = self
            .runtime
            .block_on(self.served_models())
            .map_err(|e| BackendError(format!("openai inference server {up}: {e}")))?;
        if !models.iter().any(|m| m == model) {
            return Err(BackendError(format!(
                "openai inference server {up} does not serve model {model:?} (it serves {models:?}); \
                 give one of those to --model-name"
            )));
        }
        // One short generation: checks that the server takes our requests
        // and opens the first pooled connection.
        let prompt = match self.args.openai_prompt {
            PromptKind::TokenIds => Bytes::from_static(&[1, 0, 0, 0]),
            PromptKind::Text => Bytes::from_static(b"Hello"),
        };
        struct Ignore;
        impl SampleSink for Ignore {
            fn first_token(&mut self, _: usize, _: Bytes) {}
        }
        let out = self.run(&[prompt], 1, &mut Ignore);
        match out.into_iter().next() {
            Some(Ok(_)) => {
                tracing::info!(server = %up, model = %model, "openai inference server ready");
                Ok(())
            }
            Some(Err(e)) => Err(BackendError(format!(
                "openai inference server {up}: warm-up completion failed: {e}"
            ))),
            None => Err(BackendError("warm-up gave no output".into())),
        }
    }

    fn infer(
        &self,
        inputs: &[Bytes],
        _info: BatchInfo,
        sink: &mut dyn SampleSink,
    ) -> Result<Vec<Output>, BackendError> {
        Ok(self.run(inputs, self.args.openai_max_tokens, sink))
    }
}

/// int32 little-endian token ids.
fn token_ids(sample: &[u8]) -> Result<Vec<i32>, String> {
    if sample.is_empty() || !sample.len().is_multiple_of(4) {
        return Err(format!(
            "the prompt's {} bytes are not int32 token ids (use --openai-prompt text for text)",
            sample.len()
        ));
    }
    Ok(sample
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// One sample's streamed completion: sends its first token as soon as it has
/// it, returns its answer.
async fn generate(
    client: &HttpClient,
    request: Request<Full<Bytes>>,
    answer: AnswerKind,
    index: usize,
    tx: &UnboundedSender<Event>,
) -> Output {
    let response = client.request(request).await.map_err(|e| {
        SampleFailure::Backend(format!("inference server unreachable: {}", chain(&e)))
    })?;
    let status = response.status();
    let mut body = response.into_body();
    if !status.is_success() {
        let text = read_limited(body, 64 << 10).await.unwrap_or_default();
        return Err(SampleFailure::Backend(format!(
            "inference server HTTP {status}: {}",
            error_message(&text)
        )));
    }
    let mut sse = SseParser::default();
    let mut acc = Accumulator::new(answer);
    let mut sent_first = false;
    let mut done = false;
    // Read to the body's end, even past [DONE]: only a fully read response
    // gives its connection back to the pool. Some servers end the stream
    // without [DONE].
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(_) if done => break,
            Err(e) => {
                let broken = format!("inference server stream broken: {}", chain(&e));
                return Err(SampleFailure::Backend(broken));
            }
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if done {
            continue;
        }
        sse.push(&data);
        let too_long = |e: EventTooLong| SampleFailure::Backend(e.to_string());
        while let Some(event) = sse.next_event().map_err(too_long)? {
            if event == "[DONE]" {
                done = true;
                break;
            }
            let piece = acc.chunk(&event).map_err(SampleFailure::Backend)?;
            if !sent_first && !piece.is_empty() {
                sent_first = true;
                let _ = tx.send(Event::FirstToken(index, piece));
            }
        }
    }
    acc.finish(index, tx, sent_first)
}

/// A completion as its chunks come.
struct Accumulator {
    kind: AnswerKind,
    answer: BytesMut,
    /// Chunks that carried text, or token ids.
    counted: i64,
    usage: Option<i64>,
}

impl Accumulator {
    fn new(kind: AnswerKind) -> Self {
        Self {
            kind,
            answer: BytesMut::new(),
            counted: 0,
            usage: None,
        }
    }

    /// Takes one event's JSON; returns what it adds to the answer.
    fn chunk(&mut self, data: &str) -> Result<Bytes, String> {
        let v: Value = serde_json::from_str(data).map_err(|e| {
            format!("inference server sent an event that is not JSON ({e}): {data:.200}")
        })?;
        if !v["error"].is_null() {
            return Err(format!("inference server: {}", error_text(&v)));
        }
        if let Some(n) = v["usage"]["completion_tokens"].as_i64() {
            self.usage = Some(n);
        }
        let Some(choice) = v["choices"].as_array().and_then(|c| c.first()) else {
            return Ok(Bytes::new());
        };
        let piece = match self.kind {
            AnswerKind::Text => {
                let text = choice["text"].as_str().unwrap_or_default();
                if !text.is_empty() {
                    self.counted += 1;
                }
                Bytes::copy_from_slice(text.as_bytes())
            }
            AnswerKind::TokenIds => {
                let tokens = choice["logprobs"]["tokens"].as_array();
                let mut ids = BytesMut::new();
                for t in tokens.into_iter().flatten() {
                    let id = t
                        .as_str()
                        .and_then(|s| s.strip_prefix("token_id:"))
                        .and_then(|s| s.parse::<i32>().ok())
                        .ok_or_else(|| {
                            format!(
                                "inference server returned token {t} instead of an id: --openai-answer \
                                 token-ids needs a server that returns \"token_id:N\" tokens \
                                 (vLLM's return_tokens_as_token_ids)"
                            )
                        })?;
                    ids.put_i32_le(id);
                    self.counted += 1;
                }
                let text = choice["text"].as_str().unwrap_or_default();
                if ids.is_empty() && !text.is_empty() {
                    return Err(
                        "inference server sent text without token ids: --openai-answer token-ids needs a \
                         server that returns them (vLLM's return_tokens_as_token_ids)"
                            .into(),
                    );
                }
                ids.freeze()
            }
        };
        self.answer.extend_from_slice(&piece);
        Ok(piece)
    }

    fn finish(self, index: usize, tx: &UnboundedSender<Event>, sent_first: bool) -> Output {
        if !sent_first {
            // Nothing generated: the (empty) answer is also the first token,
            // so the sample still has one.
            let _ = tx.send(Event::FirstToken(index, Bytes::new()));
        }
        Ok(Answer {
            payload: self.answer.freeze(),
            n_tokens: self.usage.unwrap_or(self.counted),
        })
    }
}

/// The largest server-sent event accepted: a streamed completion's chunk
/// carries a few tokens; a stream whose event outgrows this is refused
/// rather than buffered without end.
pub const MAX_SSE_EVENT_BYTES: usize = 1 << 20;

/// A server-sent event over the parser's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("the server sent an event of more than {0} bytes")]
pub struct EventTooLong(pub usize);

/// Splits a server-sent event stream into the `data` of its events.
pub struct SseParser {
    buf: BytesMut,
    /// Bytes of `buf` already searched for a line's end.
    scanned: usize,
    data: String,
    has_data: bool,
    max_event: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::with_limit(MAX_SSE_EVENT_BYTES)
    }
}

impl SseParser {
    /// A parser refusing events (or lines) over `max_event` bytes.
    pub fn with_limit(max_event: usize) -> Self {
        Self {
            buf: BytesMut::new(),
            scanned: 0,
            data: String::new(),
            has_data: false,
            max_event,
        }
    }

    /// Appends bytes of the stream as they arrive.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete event's data, if one has arrived; an error once
    /// the event being received is over the limit.
    pub fn next_event(&mut self) -> Result<Option<String>, EventTooLong> {
        loop {
            let Some(at) = self.buf[self.scanned..].iter().position(|b| *b == b'\n') else {
                self.scanned = self.buf.len();
                if self.buf.len() + self.data.len() > self.max_event {
                    return Err(EventTooLong(self.max_event));
                }
                return Ok(None);
            };
            let end = self.scanned + at;
            self.scanned = 0;
            let mut line = self.buf.split_to(end + 1);
            line.truncate(end);
            if line.last() == Some(&b'\r') {
                line.truncate(end - 1);
            }
            if line.is_empty() {
                if self.has_data {
                    self.has_data = false;
                    return Ok(Some(std::mem::take(&mut self.data)));
                }
                continue;
            }
            let line = String::from_utf8_lossy(&line);
            if let Some(value) = line.strip_prefix("data:") {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value.strip_prefix(' ').unwrap_or(value));
                self.has_data = true;
                if self.data.len() > self.max_event {
                    return Err(EventTooLong(self.max_event));
                }
            }
            // Other fields (event:, id:, retry:) and comments are not used.
        }
    }
}

/// At most `limit` bytes of a body.
async fn read_limited(mut body: hyper::body::Incoming, limit: usize) -> Result<Bytes, String> {
    let mut out = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("reading the response: {}", chain(&e)))?;
        if let Ok(mut data) = frame.into_data() {
            let take = data.remaining().min(limit.saturating_sub(out.len()));
            out.extend_from_slice(&data.copy_to_bytes(take));
            if out.len() >= limit {
                break;
            }
        }
    }
    Ok(out.freeze())
}

/// The message of an error body: OpenAI's `{"error": {"message": ...}}`, or
/// the body's start.
fn error_message(body: &[u8]) -> String {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => error_text(&v),
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            text.chars()
                .take(500)
                .collect::<String>()
                .trim()
                .to_string()
        }
    }
}

fn error_text(v: &Value) -> String {
    let e = &v["error"];
    e["message"]
        .as_str()
        .or_else(|| e.as_str())
        .or_else(|| v["detail"].as_str())
        .or_else(|| v["message"].as_str())
        .map(String::from)
        .unwrap_or_else(|| {
            let s = v.to_string();
            s.chars().take(500).collect()
        })
}

/// An error with its causes: hyper's own message is terse.
fn chain(e: &dyn StdError) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
#[path = "openai_tests.rs"]
mod tests;
