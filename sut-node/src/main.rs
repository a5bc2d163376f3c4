//! `sut-node`: the daemon that runs inference for a LoadGen node over the
//! network (the `SutNode` gRPC service of `proto/sutnode.proto`).

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use cli::kserve::KserveArgs;
#[cfg(feature = "llm")]
use cli::llm::LlmArgs;
#[cfg(feature = "onnx")]
use cli::onnx::OnnxArgs;
use cli::openai::OpenaiArgs;
use sut_node::backend::kserve::Kserve;
#[cfg(feature = "llm")]
use sut_node::backend::llm::Llm;
#[cfg(feature = "onnx")]
use sut_node::backend::onnx::{Onnx, OnnxConfig, OnnxError};
use sut_node::backend::openai::Openai;
use sut_node::backend::synthetic::{ServiceTime, Synthetic, SyntheticConfig};
use sut_node::backend::Backend;
use sut_node::batcher::BatchPolicy;
use sut_node::codec::{self as codec, NodeCodecs};
use sut_node::config_file;
use sut_node::limits::{Limits, MESSAGE_OVERHEAD};
use sut_node::server::{self, NodeConfig};
use sut_node::tls::NodeTls;
use tracing_subscriber::EnvFilter;

mod cli;

/// How long, on SIGTERM/SIGINT, open streams may take to answer the samples
/// they already sent.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// An MLPerf Inference sut-node: runs the samples a LoadGen node sends over
/// the network and sends the answers back.
#[derive(Parser, Debug)]
#[command(name = "sut-node", version, args_override_self = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve inference over gRPC (TCP) and QUIC (UDP) until SIGTERM or SIGINT.
    ///
    /// Prints `sut-node NAME ready on ADDR (backend B) quic QADDR metrics
    /// MADDR` on stdout once the backend is loaded and warmed up (ADDR:
    /// gRPC's address, or QUIC's with --no-grpc; ` quic QADDR` only when
    /// QUIC is on, ` metrics MADDR` only with --metrics); the TLS
    /// certificate's SHA-256 fingerprint goes to stderr before it. Logs go
    /// to stderr (RUST_LOG, default info).
    Serve(Box<ServeArgs>),
    /// Ask a running sut-node whether it is ready (its `Health` RPC): exit 0
    /// when ready, 1 otherwise. For container health checks and scripts.
    Health(HealthArgs),
}

#[derive(Args, Debug)]
struct HealthArgs {
    /// The node's gRPC address.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:50051")]
    addr: String,

    /// Give up after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 3.0)]
    timeout: f64,
}

#[derive(Args, Debug)]
struct ServeArgs {
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
    /// --model names it); sessions for another benchmark are refused. Empty:
    /// accept any.
    #[arg(long, value_name = "NAME", default_value = "")]
    benchmark: String,

    /// In-process backends: the model to load (onnx: FILE.onnx; llm:
    /// FILE.gguf or a directory of safetensors).
    #[arg(long, value_name = "PATH", help_heading = "Model backends")]
    model: Option<PathBuf>,

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
struct LimitArgs {
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
enum BackendKind {
    /// Emulated accelerator; see the synthetic backend options.
    Synthetic,
    /// Forward to a KServe v2 / Triton server (gRPC); see --server-url,
    /// --model-name and the KServe backend options.
    Kserve,
    /// Forward to an OpenAI-compatible server (/v1/completions, streamed);
    /// see --server-url, --model-name and the OpenAI backend options.
    Openai,
    /// A Llama-family LLM run by candle (--model FILE.gguf or a safetensors
    /// directory); see the LLM backend options. Needs the `llm` feature.
    Llm,
    /// ONNX Runtime in process: --model FILE.onnx; see the ONNX backend
    /// options. Needs the `onnx` feature.
    Onnx,
}

/// The process's exit codes other than 0 (served and stopped, or ready).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    /// The node could not start or serve; `health`: no answer, or not ready.
    Failed = 1,
    /// Bad options or --config file (clap's own code for them too).
    Usage = 2,
}

impl Exit {
    fn now(self) -> ! {
        std::process::exit(self as i32)
    }
}

fn main() {
    let cli = match config_file::args_with_config(std::env::args_os(), &serve_command()) {
        Ok(args) => Cli::parse_from(args),
        Err(e) => {
            eprintln!("sut-node: error: {e:#}");
            Exit::Usage.now();
        }
    };
    let threads = match &cli.command {
        Command::Serve(args) => args.threads,
        Command::Health(_) => Some(1),
    };
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        runtime.worker_threads(n);
    }
    let runtime = match runtime.enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("sut-node: error: cannot start the async runtime: {e}");
            Exit::Failed.now();
        }
    };
    runtime.block_on(run(cli));
}

async fn run(cli: Cli) {
    use tracing_subscriber::prelude::*;
    let exporter = match &cli.command {
        Command::Serve(args) => match start_otlp(args) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("sut-node: error: {e:#}");
                Exit::Usage.now();
            }
        },
        Command::Health(_) => None,
    };
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")));
    tracing_subscriber::registry()
        .with(log)
        .with(exporter.as_ref().map(|e| e.layer()))
        .init();
    let result = match cli.command {
        Command::Serve(args) => serve(*args).await,
        Command::Health(args) => health(args).await,
    };
    if let Some(e) = exporter {
        eprintln!("sut-node: {}", e.shutdown(OTLP_FLUSH));
    }
    if let Err(e) = result {
        // One readable line (with its causes), never a backtrace dump.
        eprintln!("sut-node: error: {e:#}");
        Exit::Failed.now();
    }
}

/// How long, at exit, queued spans may take to reach the collector.
const OTLP_FLUSH: Duration = Duration::from_secs(5);

/// The OTLP exporter of `serve --otlp`.
fn start_otlp(args: &ServeArgs) -> Result<Option<otlp::Otlp>> {
    let Some(endpoint) = &args.otlp else {
        return Ok(None);
    };
    let mut settings = otlp::Settings::new(endpoint, "sut-node");
    let name = args.name.clone().unwrap_or_else(hostname);
    settings
        .attributes
        .push(("service.instance.id".into(), name));
    let exporter = otlp::Otlp::start(settings)?;
    sut_node::otlp::enable();
    Ok(Some(exporter))
}

/// The `serve` command, whose flags check the keys and values of a --config
/// file.
fn serve_command() -> clap::Command {
    use clap::CommandFactory;
    let mut cli = Cli::command();
    cli.build();
    cli.find_subcommand("serve")
        .cloned()
        .unwrap_or_else(|| clap::Command::new("serve"))
}

async fn health(args: HealthArgs) -> Result<()> {
    use proto::sut_node_client::SutNodeClient;
    let url = format!("http://{}", args.addr);
    let limit = sut_node::timeout_secs(args.timeout).with_context(|| {
        format!(
            "--timeout {}: must be a number of seconds, more than 0 and at most a year (31536000)",
            args.timeout
        )
    })?;
    let ask = async {
        let mut client = SutNodeClient::connect(url).await?;
        let reply = client.health(proto::HealthRequest {}).await?.into_inner();
        anyhow::Ok(reply)
    };
    let reply = tokio::time::timeout(limit, ask)
        .await
        .with_context(|| format!("{}: no answer within {:.1} s", args.addr, args.timeout))?
        .with_context(|| format!("{}: health check failed", args.addr))?;
    println!(
        "{}: {} ({} samples outstanding)",
        args.addr,
        if reply.ready { "ready" } else { "not ready" },
        reply.outstanding
    );
    if !reply.ready {
        Exit::Failed.now();
    }
    Ok(())
}

async fn serve(args: ServeArgs) -> Result<()> {
    let name = match &args.name {
        Some(name) => name.clone(),
        None => hostname(),
    };
    // The name goes into the LoadGen node's logs, which refuses the rest.
    if let Some(problem) = facts::node_name::problem(&name) {
        match &args.name {
            Some(_) => bail!("--name {name:?} {problem}"),
            None => bail!("the host name {name:?} {problem}: give the node a --name"),
        }
    }
    let backend: Arc<dyn Backend> = match args.backend {
        BackendKind::Synthetic => {
            tracing::info!(service_time = %args.service_time, "synthetic backend");
            let bench = facts::benchmarks::find(&args.benchmark);
            let output_size = args
                .output_size
                .or(bench.map(|b| b.output_bytes))
                .unwrap_or(4);
            let llm_tokens = args.llm_tokens.unwrap_or(match bench {
                Some(b) if b.llm => u32::try_from(output_size / 4).unwrap_or(u32::MAX),
                _ => 0,
            });
            Arc::new(Synthetic::new(SyntheticConfig {
                service_time: args.service_time,
                output_size,
                llm_tokens,
                seed: args.seed,
            }))
        }
        BackendKind::Kserve => Arc::new(Kserve::new(
            args.server_url.clone(),
            args.model_name.clone(),
            args.kserve.clone().into(),
        )?),
        BackendKind::Openai => Arc::new(Openai::new(
            args.server_url.clone(),
            args.model_name.clone(),
            args.openai.clone().into(),
        )?),
        BackendKind::Llm => llm_backend(&args)?,
        BackendKind::Onnx => onnx_backend(&args)?,
    };
    let max_input_bytes = args
        .max_input_bytes
        .unwrap_or_else(|| codec::default_max_input_bytes(&args.benchmark));
    let limits = args.limits.limits(max_input_bytes)?;
    let config = NodeConfig {
        name: name.clone(),
        model: Some(args.benchmark).filter(|m| !m.is_empty()),
        batch: BatchPolicy {
            max_batch_size: args.max_batch_size as usize,
            max_wait: Duration::from_micros(args.max_batch_wait_us),
        },
        heartbeat: Some(Duration::from_millis(args.heartbeat_ms)).filter(|h| !h.is_zero()),
        shutdown_grace: SHUTDOWN_GRACE,
        codecs: NodeCodecs {
            output: args.output_codec,
            max_input_bytes,
        },
        limits,
    };

    // Installed before the ready line, so a signal right after it is caught.
    let shutdown = shutdown_signal()?;
    let bound = bind(&name, &args.listen, &args.net, &limits).await?;
    // The gRPC address when gRPC is on (scripts parse it), else QUIC's.
    let addr = bound
        .grpc_addr
        .or(bound.quic_addr)
        .context("no listening address")?;
    tracing::info!(
        node = %name,
        %addr,
        backend = backend.name(),
        max_batch_size = args.max_batch_size,
        max_batch_wait_us = args.max_batch_wait_us,
        output_codec = %args.output_codec,
        max_input_bytes,
        max_connections = limits.max_connections,
        "serving"
    );
    let mut ready_line = format!(
        "sut-node {name} ready on {addr} (backend {})",
        backend.name()
    );
    if let Some(quic) = bound.quic_addr {
        ready_line.push_str(&format!(" quic {quic}"));
    }
    if let Some(metrics) = &args.metrics {
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
    let endpoints = server::Endpoints {
        describe: !args.no_describe,
        ..bound.endpoints
    };
    server::serve_on(endpoints, config, backend, shutdown, on_ready).await?;
    Ok(())
}

#[cfg(feature = "llm")]
fn llm_backend(args: &ServeArgs) -> Result<Arc<dyn Backend>> {
    let model = args
        .model
        .as_deref()
        .context("--backend llm needs --model")?;
    Ok(Arc::new(Llm::new(model, args.llm.clone().into())?))
}

#[cfg(not(feature = "llm"))]
fn llm_backend(_: &ServeArgs) -> Result<Arc<dyn Backend>> {
    bail!(not_built("llm"))
}

#[cfg(feature = "onnx")]
fn onnx_backend(args: &ServeArgs) -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(Onnx::load(OnnxConfig {
        model: args.model.clone().ok_or(OnnxError::NoModel)?,
        options: args.onnx.clone().into(),
        max_batch_size: args.max_batch_size as usize,
    })?))
}

#[cfg(not(feature = "onnx"))]
fn onnx_backend(_: &ServeArgs) -> Result<Arc<dyn Backend>> {
    bail!(not_built("onnx"))
}

/// Why a backend left out of this build cannot serve.
#[cfg(not(all(feature = "llm", feature = "onnx")))]
fn not_built(backend: &str) -> String {
    format!(
        "this sut-node was built without the {backend} backend; build it with \
         `cargo build --release -p sut-node --features {backend}` (the release images have it)"
    )
}

/// Transports and TLS of `serve`.
#[derive(Args, Debug)]
struct NetArgs {
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

/// The node's listening sockets, bound.
struct Bound {
    endpoints: server::Endpoints,
    grpc_addr: Option<SocketAddr>,
    quic_addr: Option<SocketAddr>,
}

/// Binds gRPC on TCP `listen` and QUIC on UDP: on `--quic-listen`, or on the
/// gRPC port's number (with `--listen HOST:0`, the port is picked for gRPC
/// first; if its UDP twin is taken, another one is picked). Creates the TLS
/// identity when a transport needs it and prints its fingerprint.
async fn bind(name: &str, listen: &str, net: &NetArgs, limits: &Limits) -> Result<Bound> {
    let (grpc_on, quic_on) = (!net.no_grpc, !net.no_quic);
    if !grpc_on && !quic_on {
        bail!("--no-grpc and --no-quic leave nothing to serve");
    }
    let grpc_tls_on = grpc_on && (net.tls || net.tls_cert.is_some() || net.tls_client_ca.is_some());
    let resolve = |what: &'static str, addr: String| async move {
        tokio::net::lookup_host(&addr)
            .await
            .with_context(|| format!("{what} {addr}: not a usable host:port"))?
            .next()
            .with_context(|| format!("{what} {addr}: resolves to no address"))
    };
    let listen_addr = resolve("--listen", listen.to_string()).await?;
    let quic_listen = match &net.quic_listen {
        Some(a) => Some(resolve("--quic-listen", a.clone()).await?),
        None => None,
    };

    let tls = if quic_on || grpc_tls_on {
        let cert_and_key = net.tls_cert.as_deref().zip(net.tls_key.as_deref());
        let addrs: Vec<SocketAddr> = [Some(listen_addr), quic_listen]
            .into_iter()
            .flatten()
            .collect();
        let names = [name.to_string(), hostname()];
        let tls = NodeTls::load(cert_and_key, net.tls_client_ca.as_deref(), &names, &addrs)?;
        let fingerprint = tls.fingerprint();
        let origin = tls.identity.origin.clone();
        eprintln!("sut-node {name}: TLS certificate SHA-256 fingerprint {fingerprint} ({origin})");
        tracing::info!(%fingerprint, %origin, mutual_tls = tls.client_ca.is_some(), "TLS certificate");
        Some(tls)
    } else {
        None
    };
    let config = |alpn: &[u8]| -> Result<_> {
        let tls = tls.as_ref().context("TLS is not set up")?;
        Ok(tls.server_config(alpn)?)
    };
    let grpc_tls = if grpc_tls_on {
        Some(config(b"h2")?)
    } else {
        None
    };
    let quic_tls = if quic_on {
        Some(config(proto::quic::ALPN)?)
    } else {
        None
    };

    // Port 0 for gRPC and QUIC on its port: retry if the UDP twin is taken.
    let retries = if grpc_on && quic_listen.is_none() && listen_addr.port() == 0 {
        20
    } else {
        0
    };
    for attempt in 0..=retries {
        let grpc = if grpc_on {
            let l = tokio::net::TcpListener::bind(listen_addr)
                .await
                .with_context(|| format!("cannot listen for gRPC on TCP {listen}"))?;
            Some(l)
        } else {
            None
        };
        let grpc_addr = grpc
            .as_ref()
            .map(|l| l.local_addr())
            .transpose()
            .context("listening socket")?;
        let Some(quic_tls) = quic_tls.clone() else {
            return Ok(Bound {
                endpoints: server::Endpoints {
                    grpc,
                    grpc_tls,
                    quic: None,
                    describe: true,
                },
                grpc_addr,
                quic_addr: None,
            });
        };
        let target = quic_listen.or(grpc_addr).unwrap_or(listen_addr);
        match sut_node::quic::endpoint(target, quic_tls, limits) {
            Ok(endpoint) => {
                let quic_addr = Some(endpoint.local_addr().context("QUIC socket")?);
                return Ok(Bound {
                    endpoints: server::Endpoints {
                        grpc,
                        grpc_tls,
                        quic: Some(endpoint),
                        describe: true,
                    },
                    grpc_addr,
                    quic_addr,
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && attempt < retries => continue,
            Err(e) => {
                let whose = if quic_listen.is_none() && grpc_on {
                    " (the gRPC port's number, on UDP)"
                } else {
                    ""
                };
                bail!(
                    "cannot listen for QUIC on UDP {target}{whose}: {e}; free that port, \
                     move QUIC with --quic-listen ADDR, or turn it off with --no-quic"
                );
            }
        }
    }
    bail!("no free TCP port with a free UDP twin for gRPC and QUIC on {listen}")
}

/// Completes on the first SIGTERM or SIGINT.
#[cfg(unix)]
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

#[cfg(not(unix))]
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()> + Send> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("Ctrl-C received");
    })
}

#[cfg(unix)]
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates
    // within it (or truncates), and we stop at the first NUL or the end.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let len = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..len]) {
        Ok(name) if rc == 0 && !name.is_empty() => name.to_string(),
        _ => "sut-node".to_string(),
    }
}

#[cfg(not(unix))]
fn hostname() -> String {
    std::env::var("COMPUTERNAME").unwrap_or_else(|_| "sut-node".to_string())
}
