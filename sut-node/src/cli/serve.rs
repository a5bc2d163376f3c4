//! `sut-node serve`: its flags (and `--config` file keys, which are the
//! same), the [`ServePlan`] they make, once, and the glue that serves a
//! plan: bind, the certificate's fingerprint and the ready line that
//! scripts wait for, then the library's server.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use sut_node::backend::synthetic::{ServiceTime, SyntheticConfig};
use sut_node::backend::{self, BackendSpec};
use sut_node::batcher::BatchPolicy;
use sut_node::bind::{self, ListenPlan};
use sut_node::codec::{self as codec, NodeCodecs};
use sut_node::limits::{Limits, MESSAGE_OVERHEAD};
use sut_node::plan::ServePlan;
use sut_node::server::{self, NodeConfig};

use super::kserve::KserveArgs;
#[cfg(feature = "llm")]
use super::llm::LlmArgs;
#[cfg(feature = "onnx")]
use super::onnx::OnnxArgs;
use super::openai::OpenaiArgs;

/// How long, on SIGTERM/SIGINT, open streams may take to answer the samples
/// they already sent.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Read options from a TOML file: `key = value` per option of `serve`,
    /// named as the long flag without its dashes (e.g. `backend = "onnx"`,
    /// `max_batch_size = 8`, `no_quic = true`). Flags on the command line
    /// win over the file. See docs/backends.md.
    #[arg(long, value_name = "FILE.toml")]
    config: Option<PathBuf>,

    /// Address to listen on (host:port). Port 0 picks a free port; the ready
    /// line shows which.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:50051")]
    listen: String,

    #[command(flatten)]
    net: NetArgs,

    /// Serve Prometheus metrics at http://ADDR/metrics (host:port; port 0
    /// picks a free port, which the ready line shows).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,

    /// Export OpenTelemetry traces over OTLP/gRPC to this collector (e.g.
    /// http://127.0.0.1:4317): a span per Infer stream, and the spans of
    /// every sample the LoadGen node traces (loadgen-node --otlp). Export is
    /// off the data path; spans that do not fit its queue are dropped and
    /// counted.
    #[arg(long, value_name = "ENDPOINT")]
    otlp: Option<String>,

    /// Threads of the node's network runtime, 1 to 1024 [default: one per
    /// core]. The backend runs on a thread of its own besides these.
    #[arg(long, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    threads: Option<usize>,

    /// The node's name in the LoadGen node's logs [default: this machine's
    /// hostname]: ASCII letters, digits, '.', '-' and '_'.
    #[arg(long)]
    name: Option<String>,

    /// Refuse `Describe` (what `loadgen-node preflight` reads of the node:
    /// OS, kernel, NIC names and addresses, versions). Without mutual TLS,
    /// any client that reaches the port may ask it otherwise.
    #[arg(long)]
    no_describe: bool,

    /// Inference backend. `synthetic` emulates an accelerator: a configurable
    /// service time per batch and answers derived from the inputs, which the
    /// LoadGen node's accuracy check verifies.
    #[arg(long, value_enum)]
    backend: BackendKind,

    /// The MLPerf benchmark this node serves (e.g. resnet50, as loadgen-node
    /// --benchmark names it); sessions for another benchmark are refused. Empty:
    /// accept any.
    #[arg(long, value_name = "NAME", default_value = "")]
    benchmark: String,

    /// In-process backends: the model to load (onnx: FILE.onnx; llm:
    /// FILE.gguf or a directory of safetensors). The benchmark it answers is
    /// --benchmark.
    #[arg(
        long,
        visible_alias = "model",
        value_name = "PATH",
        help_heading = "Model backends"
    )]
    model_path: Option<PathBuf>,

    /// Forwarders: the inference server to forward every sample to (kserve:
    /// its gRPC endpoint, e.g. http://host:8001; openai: its base URL, e.g.
    /// http://host:8000).
    // `--upstream` is this flag's former name, still accepted.
    #[arg(
        long,
        value_name = "URL",
        alias = "upstream",
        help_heading = "Forwarders"
    )]
    server_url: Option<String>,

    /// Forwarders: the model's name on the inference server.
    #[arg(long, value_name = "NAME", help_heading = "Forwarders")]
    model_name: Option<String>,

    /// Dynamic batching: the most samples run together in one batch, 1 to
    /// 65536. 1: no batching.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    max_batch_size: u32,

    /// Dynamic batching: how long a sample may wait for its batch to fill, in
    /// microseconds. 0: run whatever is queued as soon as the backend is free.
    #[arg(long, value_name = "N", default_value_t = 0)]
    max_batch_wait_us: u64,

    /// Idle time after which an Infer stream gets a heartbeat message, in
    /// milliseconds, so the LoadGen node can tell an idle node from a stalled
    /// one. 0: no heartbeats.
    #[arg(long, value_name = "N", default_value_t = 500)]
    heartbeat_ms: u64,

    /// Codec of the answers (and first tokens) sent back: none, zstd,
    /// zstd:LEVEL (1 to 22) or lz4. Each answer is compressed on its own,
    /// inside the node's time. Inputs in any codec are always accepted.
    #[arg(long, value_name = "CODEC", default_value = "none")]
    output_codec: compression::CodecSpec,

    /// Largest input accepted, raw or once decoded, in bytes: a compressed
    /// input declaring or producing more is refused (a SampleError) without
    /// being decoded; a gRPC message or QUIC frame larger by more than 64 KiB
    /// ends its stream [default: four times --benchmark's input size, at
    /// least 1 MiB; 64 MiB without a known --benchmark].
    #[arg(long, value_name = "BYTES",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 30))]
    max_input_bytes: Option<usize>,

    #[command(flatten)]
    limits: LimitArgs,

    /// Time the emulated accelerator takes per batch, in microseconds:
    /// `fixed:US` (every batch), `exp:MEAN_US` (exponentially distributed,
    /// see --seed) or `batch:FIXED_US+PER_SAMPLE_US` (grows with the batch).
    #[arg(
        long,
        value_name = "SPEC",
        default_value = "fixed:0",
        help_heading = "Synthetic backend"
    )]
    service_time: ServiceTime,

    /// Bytes in each answer, at most 1 GiB (the largest message a node
    /// sends) [default: the answer size of --benchmark in the suite table,
    /// e.g. 449,740,800 for wan-2.2-t2v-a14b; 4 without one].
    #[arg(
        long,
        value_name = "BYTES",
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=1 << 30),
        help_heading = "Synthetic backend"
    )]
    output_size: Option<usize>,

    /// Answer like an LLM: a first token (the answer's first 4 bytes) after
    /// 1/N of the service time, then the answer with N tokens. 0: not an LLM
    /// [default: for an LLM --benchmark, one token per 4 answer bytes; else
    /// 0].
    #[arg(long, value_name = "N", help_heading = "Synthetic backend")]
    llm_tokens: Option<u32>,

    /// Seed of the exponential service times (the same seed gives the same
    /// sequence of batch times).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        help_heading = "Synthetic backend"
    )]
    seed: u64,

    #[command(flatten)]
    kserve: KserveArgs,

    #[command(flatten)]
    openai: OpenaiArgs,

    #[cfg(feature = "llm")]
    #[command(flatten)]
    llm: LlmArgs,

    #[cfg(feature = "onnx")]
    #[command(flatten)]
    onnx: OnnxArgs,
}

/// What clients may make the node hold; see docs/operator-guide.md.
#[derive(Args, Debug)]
pub struct LimitArgs {
    /// Answer bytes waiting for one stream's reader before the node stops
    /// taking samples from that stream.
    #[arg(long, value_name = "BYTES", default_value_t = Limits::default().max_waiting_answer_bytes,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 32),
          help_heading = "Limits")]
    max_waiting_answer_bytes: usize,

    /// Input bytes (as decoded) of the samples received and not yet run, all
    /// streams together, those being decoded included; past it the node
    /// stops reading samples.
    #[arg(long, value_name = "BYTES", default_value_t = Limits::default().max_decoded_bytes,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 40),
          help_heading = "Limits")]
    max_decoded_bytes: usize,

    /// The share of --max-decoded-bytes one connection may hold; past it the
    /// node stops reading that connection's samples.
    #[arg(long, value_name = "BYTES", default_value_t = Limits::default().max_decoded_bytes_per_connection,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 40),
          help_heading = "Limits")]
    max_decoded_bytes_per_connection: usize,

    /// Connections served at once, all clients together (gRPC and QUIC
    /// each); more are closed at once.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_connections,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65536),
          help_heading = "Limits")]
    max_connections: usize,

    /// Connections served at once from one IP address.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_connections_per_peer,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65536),
          help_heading = "Limits")]
    max_connections_per_peer: usize,

    /// Streams open at once on one connection (gRPC streams, or QUIC
    /// bidirectional streams, control requests included).
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_streams_per_connection,
          value_parser = clap::value_parser!(u32).range(2..=1024),
          help_heading = "Limits")]
    max_streams_per_connection: u32,

    /// Seconds a new connection has to finish its TLS handshake or send its
    /// first bytes.
    #[arg(long, value_name = "SECONDS", default_value_t = Limits::default().handshake_timeout.as_secs_f64(),
          help_heading = "Limits")]
    handshake_timeout: f64,

    /// Seconds after which a connection that carried nothing either way is
    /// closed (for QUIC: the idle timeout the node offers; a connection
    /// gets the shorter of both sides'; the node sends no keep-alives).
    #[arg(long, value_name = "SECONDS", default_value_t = Limits::default().idle_timeout.as_secs_f64(),
          help_heading = "Limits")]
    idle_timeout: f64,
}

impl LimitArgs {
    fn limits(&self, max_input_bytes: usize) -> Result<Limits> {
        let secs = |flag: &str, v: f64| {
            sut_node::timeout_secs(v).with_context(|| {
                format!("{flag} {v}: must be a number of seconds, more than 0 and at most a year")
            })
        };
        Ok(Limits {
            max_message_bytes: max_input_bytes + MESSAGE_OVERHEAD,
            max_waiting_answer_bytes: self.max_waiting_answer_bytes,
            max_decoded_bytes: self.max_decoded_bytes,
            max_decoded_bytes_per_connection: self.max_decoded_bytes_per_connection,
            max_connections: self.max_connections,
            max_connections_per_peer: self.max_connections_per_peer,
            max_streams_per_connection: self.max_streams_per_connection,
            handshake_timeout: secs("--handshake-timeout", self.handshake_timeout)?,
            idle_timeout: secs("--idle-timeout", self.idle_timeout)?,
        })
    }
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum BackendKind {
    /// Emulated accelerator; see the synthetic backend options.
    Synthetic,
    /// Forward to a KServe v2 / Triton server (gRPC); see --server-url,
    /// --model-name and the KServe backend options.
    Kserve,
    /// Forward to an OpenAI-compatible server (/v1/completions, streamed);
    /// see --server-url, --model-name and the OpenAI backend options.
    Openai,
    /// A Llama-family LLM run by candle (--model-path FILE.gguf or a safetensors
    /// directory); see the LLM backend options. Needs the `llm` feature.
    Llm,
    /// ONNX Runtime in process: --model-path FILE.onnx; see the ONNX backend
    /// options. Needs the `onnx` feature.
    Onnx,
}

impl ServeArgs {
    /// The node these flags describe, every value resolved and checked.
    pub fn plan(self) -> Result<ServePlan> {
        let name = match &self.name {
            Some(name) => name.clone(),
            None => facts::host::hostname(),
        };
        // The name goes into the LoadGen node's logs, which refuses the rest.
        if let Some(problem) = facts::node_name::problem(&name) {
            match &self.name {
                Some(_) => bail!("--name {name:?} {problem}"),
                None => bail!("the host name {name:?} {problem}: give the node a --name"),
            }
        }
        let max_input_bytes = self
            .max_input_bytes
            .unwrap_or_else(|| codec::default_max_input_bytes(&self.benchmark));
        let limits = self.limits.limits(max_input_bytes)?;
        let net = &self.net;
        let listen = ListenPlan {
            listen: self.listen.clone(),
            grpc: !net.no_grpc,
            quic: !net.no_quic,
            quic_listen: net.quic_listen.clone(),
            grpc_tls: net.tls || net.tls_cert.is_some() || net.tls_client_ca.is_some(),
            cert_and_key: net.tls_cert.clone().zip(net.tls_key.clone()),
            client_ca: net.tls_client_ca.clone(),
            describe: !self.no_describe,
        };
        let backend = self.backend_spec();
        Ok(ServePlan {
            node: NodeConfig {
                name,
                model: Some(self.benchmark).filter(|m| !m.is_empty()),
                batch: BatchPolicy {
                    max_batch_size: self.max_batch_size as usize,
                    max_wait: Duration::from_micros(self.max_batch_wait_us),
                },
                heartbeat: Some(Duration::from_millis(self.heartbeat_ms)).filter(|h| !h.is_zero()),
                shutdown_grace: SHUTDOWN_GRACE,
                codecs: NodeCodecs {
                    output: self.output_codec,
                    max_input_bytes,
                },
                limits,
            },
            backend,
            listen,
            metrics: self.metrics,
            otlp: self.otlp,
            threads: self.threads,
        })
    }

    fn backend_spec(&self) -> BackendSpec {
        match self.backend {
            BackendKind::Synthetic => BackendSpec::Synthetic(SyntheticConfig::answering(
                facts::benchmarks::find(&self.benchmark),
                self.output_size,
                self.llm_tokens,
                self.service_time,
                self.seed,
            )),
            BackendKind::Kserve => BackendSpec::Kserve {
                server_url: self.server_url.clone(),
                model_name: self.model_name.clone(),
                options: self.kserve.clone().into(),
            },
            BackendKind::Openai => BackendSpec::Openai {
                server_url: self.server_url.clone(),
                model_name: self.model_name.clone(),
                options: self.openai.clone().into(),
            },
            #[cfg(feature = "llm")]
            BackendKind::Llm => BackendSpec::Llm {
                model_path: self.model_path.clone(),
                options: self.llm.clone().into(),
            },
            #[cfg(not(feature = "llm"))]
            BackendKind::Llm => BackendSpec::NotBuilt("llm"),
            #[cfg(feature = "onnx")]
            BackendKind::Onnx => BackendSpec::Onnx {
                model_path: self.model_path.clone(),
                options: self.onnx.clone().into(),
                max_batch_size: self.max_batch_size as usize,
            },
            #[cfg(not(feature = "onnx"))]
            BackendKind::Onnx => BackendSpec::NotBuilt("onnx"),
        }
    }
}

/// Serves `plan` until SIGTERM or SIGINT: builds its backend, binds, prints
/// the certificate's fingerprint (stderr) and, once the backend is warm,
/// the ready line (stdout).
pub async fn serve(plan: ServePlan) -> Result<()> {
    let ServePlan {
        node,
        backend,
        listen,
        metrics,
        ..
    } = plan;
    let name = node.name.clone();
    if let BackendSpec::Synthetic(c) = &backend {
        tracing::info!(service_time = %c.service_time, "synthetic backend");
    }
    let backend = backend::build(backend)?;
    // Installed before the ready line, so a signal right after it is caught.
    let shutdown = shutdown_signal()?;
    let bound = bind::bind(&name, &listen, &node.limits).await?;
    if let Some(c) = &bound.certificate {
        eprintln!(
            "sut-node {name}: TLS certificate SHA-256 fingerprint {} ({})",
            c.fingerprint, c.origin
        );
        tracing::info!(fingerprint = %c.fingerprint, origin = %c.origin, mutual_tls = c.mutual_tls, "TLS certificate");
    }
    // The gRPC address when gRPC is on (scripts parse it), else QUIC's.
    let addr = bound
        .grpc_addr
        .or(bound.quic_addr)
        .context("no listening address")?;
    tracing::info!(
        node = %name,
        %addr,
        backend = backend.name(),
        max_batch_size = node.batch.max_batch_size,
        max_batch_wait_us = node.batch.max_wait.as_micros() as u64,
        output_codec = %node.codecs.output,
        max_input_bytes = node.codecs.max_input_bytes,
        max_connections = node.limits.max_connections,
        "serving"
    );
    let mut ready_line = format!(
        "sut-node {name} ready on {addr} (backend {})",
        backend.name()
    );
    if let Some(quic) = bound.quic_addr {
        ready_line.push_str(&format!(" quic {quic}"));
    }
    if let Some(metrics) = &metrics {
        let page_name = name.clone();
        let at =
            metrics_endpoint::serve(metrics, move || sut_node::metrics::NODE.render(&page_name))
                .with_context(|| format!("--metrics {metrics}: cannot listen"))?;
        ready_line.push_str(&format!(" metrics {at}"));
    }
    let on_ready = move || {
        let mut stdout = std::io::stdout().lock();
        // The line is what scripts wait for; if stdout is gone, so are they.
        let _ = writeln!(stdout, "{ready_line}");
        let _ = stdout.flush();
    };
    server::serve_on(bound.endpoints, node, backend, shutdown, on_ready).await?;
    Ok(())
}

/// Completes on the first SIGTERM or SIGINT.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()> + Send> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = int.recv() => tracing::info!("SIGINT received"),
        }
    })
}

/// Transports and TLS of `serve`.
#[derive(Args, Debug)]
pub struct NetArgs {
    /// Do not serve gRPC (TCP).
    #[arg(long)]
    no_grpc: bool,

    /// Do not serve QUIC (UDP).
    #[arg(long)]
    no_quic: bool,

    /// Serve QUIC on this address (host:port) [default: the gRPC port's
    /// number on UDP, same host; --listen when gRPC is off].
    #[arg(long, value_name = "ADDR")]
    quic_listen: Option<String>,

    /// Serve gRPC over TLS (QUIC always uses TLS 1.3). Implied by --tls-cert
    /// and --tls-client-ca.
    #[arg(long, help_heading = "TLS")]
    tls: bool,

    /// The node's certificate chain (PEM, leaf first) [default: a
    /// self-signed certificate generated at start, for development; its
    /// SHA-256 fingerprint is printed on stderr for `loadgen-node
    /// --tls-pin`].
    #[arg(long, value_name = "FILE", requires = "tls_key", help_heading = "TLS")]
    tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert", help_heading = "TLS")]
    tls_key: Option<PathBuf>,

    /// Mutual TLS, on both transports: accept only clients presenting a
    /// certificate signed by this CA (PEM).
    #[arg(long, value_name = "FILE", help_heading = "TLS")]
    tls_client_ca: Option<PathBuf>,
}
