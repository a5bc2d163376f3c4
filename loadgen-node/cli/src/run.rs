//! One test run from the command line's flags: settings, data set, the SUT
//! (the in-process null SUT or the QDL over the sut-nodes), the engine, and
//! the result printed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::benchmarks;
use crate::progress::Progress;
use crate::qsl::{DataQsl, DataSource};
use crate::tls::TlsArgs;
use crate::verify;
use anyhow::{bail, Context, Result};
use loadgen_engine::config::{self, ConfKind, ConfigFile, SettingsSources};
use loadgen_engine::live::LiveStats;
use loadgen_engine::null_sut::{NullAnswer, NullSut, SizedQsl};
use loadgen_engine::runner::{start_test_with_live, AuditConfig, LogSettings, TestOutcome};
use loadgen_engine::{QuerySampleLibrary, Scenario, TestMode, TestSettings};
use qdl::{Codec, Qdl, QdlConfig};

/// Which LoadGen runs the test.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// This project's engine: trace-exact with the official LoadGen 6.0.17,
    /// for development, regression runs and bring-up.
    Native,
    /// The official LoadGen, compiled unaltered into this binary (cargo
    /// feature `official-loadgen`): the engine of runs to be submitted.
    Official,
}

/// The flags of one test run.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Which LoadGen drives the QDL: native, or official (the official
    /// LoadGen compiled in; builds with the `official-loadgen` feature).
    #[arg(long, value_enum, default_value = "native")]
    pub engine: Engine,

    /// The system under test: a comma-separated list of sut-node addresses
    /// (`host:port` or `grpc://host:port` for gRPC, `grpcs://host:port` for
    /// gRPC over TLS, `quic://host:port` for QUIC; kinds may be mixed;
    /// `dns://NAME:PORT` for one node per address of a DNS name, resolved
    /// once before the run, `?nodes=N` to wait for N of them, and
    /// `dns+grpcs://`, `dns+quic://` for the other transports), or `null`
    /// for the in-process null SUT that measures the harness itself
    /// [default: null, or none with --sut-file].
    #[arg(
        long,
        default_value = "null",
        hide_default_value = true,
        default_value_if("sut_file", clap::builder::ArgPredicate::IsPresent, "")
    )]
    pub sut: String,

    /// More sut-nodes, after those of --sut: a file of one address per line
    /// (any form --sut takes), `#` starting a comment, as a launcher writes
    /// it (deploy/slurm/).
    #[arg(long, value_name = "FILE")]
    pub sut_file: Option<PathBuf>,

    /// Benchmark model name, as used by mlperf.conf keys (e.g. resnet50, bert,
    /// llama2-70b, 3d-unet).
    #[arg(long, default_value = "resnet50")]
    pub model: String,

    /// SingleStream, MultiStream, Server or Offline.
    #[arg(long, default_value = "Offline")]
    pub scenario: Scenario,

    /// PerformanceOnly, AccuracyOnly, SubmissionRun or FindPeakPerformance.
    /// Overrides any `mode` key of the config files.
    #[arg(long)]
    pub mode: Option<TestMode>,

    /// mlperf.conf to use instead of the built-in 6.0.17 one (a new round's
    /// seeds, say). Replaces the built-in file entirely.
    #[arg(long, value_name = "MLPERF_CONF")]
    pub conf: Option<PathBuf>,

    /// user.conf with this system's settings (target_qps, target_latency...).
    #[arg(long, value_name = "USER_CONF")]
    pub user_conf: Option<PathBuf>,

    /// Extra user.conf setting for this model and scenario, e.g.
    /// `--set min_duration=1000 --set target_qps=5000`. Applied after
    /// --user-conf. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,

    /// Audit configuration of a compliance test (TEST01, TEST04, TEST06...).
    /// Without it, ./audit.config is used when it exists.
    #[arg(long, value_name = "FILE")]
    pub audit_config: Option<PathBuf>,

    /// Number of samples in the data set (default: the --dataset's files, or
    /// the benchmark's data set size for the synthetic data set; 1024 with
    /// the null SUT).
    #[arg(long)]
    pub total_sample_count: Option<usize>,

    /// Number of samples the QSL holds in memory at once (default: the
    /// benchmark's performance sample count, at most the total).
    #[arg(long)]
    pub performance_sample_count: Option<usize>,

    /// Directory of preprocessed samples, one `.npy` file each (sample i is
    /// the i-th file in name order). Without it, a synthetic data set with
    /// the benchmark's real input size is used, so nothing is downloaded.
    #[arg(long, value_name = "DIR")]
    pub dataset: Option<PathBuf>,

    /// Synthetic data set: bytes per sample instead of the benchmark's input
    /// size (e.g. 64 to measure the harness rather than the network); at
    /// most 1 GiB.
    #[arg(long, value_name = "BYTES",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 30))]
    pub sample_bytes: Option<usize>,

    /// How samples are spread over the sut-nodes: least-outstanding,
    /// round-robin, or weighted:W1,W2,... (one weight per node, in --sut order).
    #[arg(long, default_value = "least-outstanding")]
    pub dispatch: String,

    /// Connections (gRPC or QUIC, each with one data stream) opened to every
    /// sut-node (1 to 1024).
    #[arg(long, default_value_t = 2,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub connections_per_node: usize,

    /// Threads of the QDL's network runtime [default: 2, or 1 on a host of
    /// 2 cores or fewer, which leaves a core to the LoadGen's issuing
    /// thread].
    #[arg(long, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub qdl_threads: Option<usize>,

    /// Samples one connection may have sent and not yet had answered; the
    /// rest wait in the QDL's queue. The default keeps the node busy at any
    /// rate this host can issue, while bounding the work under way with
    /// small inputs (large ones are bounded by the node's flow control).
    #[arg(long, value_name = "N", default_value_t = qdl::DEFAULT_MAX_IN_FLIGHT,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_in_flight: u64,

    /// A sut-node with samples outstanding that sends nothing (no answer, no
    /// heartbeat) for this many seconds ends the run as INVALID.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub node_timeout: f64,

    /// A sut-node with samples outstanding that sends only heartbeats (no
    /// answer, first token or error) for this many seconds ends the run as
    /// INVALID: its backend is hung. 0: wait for ever.
    #[arg(long, default_value_t = 120.0, value_name = "SECONDS")]
    pub progress_timeout: f64,

    /// Seconds to wait for sut-nodes whose backend is still loading (each
    /// retried every second, the one waited for printed); 0: fail at once.
    #[arg(long, default_value_t = 300.0, value_name = "SECONDS")]
    pub ready_timeout: f64,

    /// After an accuracy run against `synthetic` sut-nodes, check that every
    /// logged answer is the one for the sample issued under that id.
    #[arg(long)]
    pub verify_synthetic: bool,

    /// Where the mlperf_log_* files go (created if missing).
    #[arg(long, default_value = ".")]
    pub output_dir: PathBuf,

    /// Do not write mlperf_log_trace.json (it is large on long runs).
    #[arg(long)]
    pub no_trace: bool,

    /// Null SUT only: answer like an LLM (first token, then tokens).
    #[arg(long)]
    pub null_tokens: bool,

    /// Codec of the samples sent to the sut-nodes: none, zstd, zstd:LEVEL (1
    /// to 22) or lz4. The QSL compresses each sample on its own when it loads
    /// it (untimed); the nodes decode it inside their time. Refused for the
    /// LLM benchmarks and stable-diffusion-xl unless --open-division.
    #[arg(long, value_name = "CODEC", default_value = "none")]
    pub input_codec: compression::CodecSpec,

    /// An open-division run: lifts the closed and network divisions' rule
    /// that LLM and stable-diffusion-xl inputs travel uncompressed.
    #[arg(long)]
    pub open_division: bool,

    /// Largest answer (or first token) accepted from a sut-node once decoded,
    /// in bytes: a compressed answer declaring or producing more ends the run
    /// (INVALID) without being decoded.
    #[arg(long, value_name = "BYTES", default_value_t = qdl::DEFAULT_MAX_ANSWER_BYTES,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_answer_bytes: usize,

    /// Where stderr is not a terminal, print a progress line every this
    /// many seconds (on a terminal the live line is redrawn twice a second).
    /// 0: no progress output at all.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub progress_interval: f64,

    /// Serve Prometheus metrics at http://ADDR/metrics while the run lasts
    /// (host:port): per node samples issued, completed and outstanding,
    /// bytes, and latencies; with the native engine, the series' live
    /// figures too.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,

    /// Export OpenTelemetry traces over OTLP/gRPC to this collector (e.g.
    /// http://127.0.0.1:4317): spans of the run, each series, each
    /// connection's session, and of a sampled subset of samples, continued
    /// by the sut-nodes (those started with --otlp). Export is off the timed
    /// path; spans that do not fit its queue are dropped and counted.
    #[arg(long, value_name = "ENDPOINT")]
    pub otlp: Option<String>,

    /// With --otlp: the share of samples traced, from 0 (none) to 1 (all).
    #[arg(long, value_name = "RATIO", default_value_t = 0.001)]
    pub otlp_sample_ratio: f64,

    /// After the run, write a self-contained HTML report of it (latency
    /// distribution and timeline, breakdown per node, settings, validity);
    /// `loadgen-node report DIR` makes the same from an output directory.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,

    #[command(flatten)]
    pub tls: TlsArgs,
}

impl RunArgs {
    /// The run's span (`--otlp`), with the run's flags as its attributes;
    /// either engine starts it the same way.
    pub(crate) fn trace(&self) -> Result<Option<crate::otlp::RunTrace>> {
        crate::otlp::RunTrace::start(
            self.otlp.as_deref(),
            self.otlp_sample_ratio,
            &self.model,
            self.scenario.as_str(),
            &self.sut,
        )
    }
}

/// Runs one test with the native engine and prints its result.
pub(crate) fn run_native(args: &RunArgs) -> Result<ExitCode> {
    let settings = resolve_settings(args)?;
    let audit = audit_config(args.audit_config.as_deref())?;
    let log_settings = LogSettings {
        outdir: args.output_dir.clone(),
        enable_trace: !args.no_trace,
        ..LogSettings::default()
    };
    let live = Arc::new(LiveStats::default());
    let mut trace = args.trace()?;
    let progress_interval = Duration::try_from_secs_f64(args.progress_interval)
        .context("--progress-interval must be a number of seconds, 0 or more")?;

    if args.sut == "null" {
        let total = args.total_sample_count.unwrap_or(1024);
        if total == 0 {
            bail!("--total-sample-count must be at least 1");
        }
        let performance = args.performance_sample_count.unwrap_or(total);
        let answer = if args.null_tokens {
            NullAnswer::Tokens
        } else {
            NullAnswer::Index
        };
        let sut = NullSut::new("Null SUT", answer);
        let qsl = SizedQsl::new(total, performance);
        if let Some(addr) = &args.metrics {
            crate::metrics::serve(addr, Some(live.clone()), None)?;
        }
        if let Some(t) = &mut trace {
            t.follow(Some(&live), None);
        }
        let outcome = {
            let _progress = Progress::start(live.clone(), progress_interval);
            start_test_with_live(&sut, &qsl, &settings, &log_settings, audit.as_ref(), live)?
        };
        report(&outcome);
        crate::report::after_run(args.report.as_deref(), &args.output_dir);
        if let Some(t) = trace {
            t.finish(None);
        }
        return Ok(exit_code(outcome.run_error.is_some(), true));
    }

    let qsl = Arc::new(network_qsl(args)?);
    let config = qdl_config(args, &qsl)?;
    eprintln!(
        "loadgen-node: data set {}; connecting to {} sut-node(s)",
        qsl.name(),
        config.nodes.len()
    );
    let qdl = connect(args, config, qsl.clone())?;
    if let Some(addr) = &args.metrics {
        crate::metrics::serve(addr, Some(live.clone()), Some(qdl.view()))?;
    }
    if let Some(t) = &mut trace {
        t.follow(Some(&live), Some(&qdl));
    }
    let outcome = {
        let _progress = Progress::start(live.clone(), progress_interval);
        start_test_with_live(
            &qdl,
            qsl.as_ref(),
            &settings,
            &log_settings,
            audit.as_ref(),
            live,
        )?
    };
    report(&outcome);
    crate::breakdown::report(&qdl.view(), &args.output_dir);
    crate::report::after_run(args.report.as_deref(), &args.output_dir);
    if let Some(t) = trace {
        t.finish(Some(&qdl.view()));
    }
    let mut verified = true;
    if args.verify_synthetic {
        verified = verify_synthetic(&outcome.accuracy_path, qsl.source())?;
    }
    Ok(exit_code(outcome.run_error.is_some(), verified))
}

/// The QDL's settings from the flags (both engines).
pub(crate) fn qdl_config(args: &RunArgs, qsl: &DataQsl) -> Result<QdlConfig> {
    let found = qdl::find_nodes(
        &args.sut,
        args.sut_file.as_deref(),
        Duration::try_from_secs_f64(args.ready_timeout).unwrap_or_default(),
        |waiting| eprintln!("loadgen-node: {waiting}"),
    )
    .context("the sut-nodes (--sut, --sut-file)")?;
    let config = QdlConfig {
        nodes: found.nodes,
        resolved: found.resolved.iter().map(ToString::to_string).collect(),
        policy: args.dispatch.parse().context("--dispatch")?,
        connections_per_node: args.connections_per_node,
        model: args.model.clone(),
        scenario: args.scenario.as_str().to_string(),
        stall_timeout: Duration::try_from_secs_f64(args.node_timeout)
            .ok()
            .filter(|t| !t.is_zero())
            .context("--node-timeout must be a positive number of seconds")?,
        progress_timeout: match args.progress_timeout {
            0.0 => None,
            secs => Some(
                Duration::try_from_secs_f64(secs)
                    .context("--progress-timeout must be a number of seconds, 0 or more")?,
            ),
        },
        tls: args.tls.client_tls()?,
        input_codec: Codec::from(qsl.input_codec().kind),
        max_answer_bytes: args.max_answer_bytes,
        io_threads: args.qdl_threads.unwrap_or_else(qdl::default_io_threads),
        max_in_flight: args.max_in_flight,
        ..QdlConfig::default()
    };
    if args.tls.tls_insecure {
        eprintln!(
            "loadgen-node: warning: --tls-insecure: sut-node certificates are NOT verified; \
             use it for development only (production: --tls-pin or --tls-ca)"
        );
    }
    Ok(config)
}

/// Connects the QDL to the nodes, waiting up to --ready-timeout for nodes
/// whose backend is still loading (both engines).
pub(crate) fn connect(
    args: &RunArgs,
    config: QdlConfig,
    data: Arc<dyn qdl::SampleData>,
) -> Result<Qdl> {
    let ready_timeout = Duration::try_from_secs_f64(args.ready_timeout)
        .ok()
        .filter(|t| t.as_secs() <= 86_400)
        .context("--ready-timeout must be a number of seconds from 0 to 86400")?;
    let waiting = crate::progress::waiting_for_nodes();
    Qdl::connect_when_ready(config, data, ready_timeout, waiting)
        .context("cannot reach the sut-nodes")
}

/// A run's data set from its flags: the `dataset` directory, or `model`'s
/// synthetic data set (`sample_bytes` and `total` override the benchmark's).
pub(crate) fn data_source(
    model: &str,
    dataset: Option<&Path>,
    sample_bytes: Option<usize>,
    total: Option<usize>,
) -> Result<DataSource> {
    let bench = benchmarks::find(model);
    let source = match dataset {
        Some(dir) => DataSource::npy_dir(dir).map_err(|e| anyhow::anyhow!("--dataset: {e}"))?,
        None => {
            let sample_bytes = match (sample_bytes, bench) {
                (Some(b), _) => b,
                (None, Some(b)) => b.input_bytes,
                (None, None) => bail!(
                    "--model {model}: not a benchmark this node knows ({}); give --dataset DIR or --sample-bytes N",
                    benchmarks::names().join(", ")
                ),
            };
            DataSource::Synthetic {
                sample_bytes,
                total: total.or(bench.map(|b| b.total_samples)).unwrap_or(1024),
            }
        }
    };
    if source.total() == 0 {
        bail!("the data set has no samples");
    }
    if let (Some(n), DataSource::NpyDir { files, .. }) = (total, &source) {
        if n != files.len() {
            bail!(
                "--total-sample-count {n} but --dataset has {} .npy files",
                files.len()
            );
        }
    }
    Ok(source)
}

/// The QSL of a network run: the --dataset directory, or the benchmark's
/// synthetic data set.
pub(crate) fn network_qsl(args: &RunArgs) -> Result<DataQsl> {
    let source = data_source(
        &args.model,
        args.dataset.as_deref(),
        args.sample_bytes,
        args.total_sample_count,
    )?;
    let bench = benchmarks::find(&args.model);
    let performance = args
        .performance_sample_count
        .or(bench.map(|b| b.performance_samples))
        .unwrap_or(source.total());
    Ok(DataQsl::new(source, performance).with_input_codec(args.input_codec))
}

/// `loadgen-node check-synthetic`: the accuracy script of synthetic
/// sut-nodes.
#[derive(clap::Args, Debug)]
pub struct CheckSyntheticArgs {
    /// The accuracy run's mlperf_log_accuracy.json.
    #[arg(long, value_name = "FILE")]
    pub accuracy_log: PathBuf,
    /// The benchmark the run used (its synthetic data set).
    #[arg(long, default_value = "resnet50")]
    pub model: String,
    /// The run's --sample-bytes, if it gave one.
    #[arg(long, value_name = "BYTES",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 30))]
    pub sample_bytes: Option<usize>,
    /// The run's --total-sample-count, if it gave one.
    #[arg(long)]
    pub total_sample_count: Option<usize>,
    /// The run's --dataset, if it gave one.
    #[arg(long, value_name = "DIR")]
    pub dataset: Option<PathBuf>,
}

/// Checks every answer of an accuracy log against the synthetic function of
/// its sample and prints the share that match in the accuracy scripts' form
/// (`accuracy=P%, good=G, total=T`), so that a submission plan on synthetic
/// nodes can name it as its accuracy_command. Exit status 1 if any answer
/// does not match.
pub fn check_synthetic(args: &CheckSyntheticArgs) -> Result<ExitCode> {
    let data = data_source(
        &args.model,
        args.dataset.as_deref(),
        args.sample_bytes,
        args.total_sample_count,
    )?;
    let verdict = verify::check(&args.accuracy_log, &data)?;
    let good = verdict.checked - verdict.mismatches.len();
    let share = match verdict.checked {
        0 => 0.0,
        n => 100.0 * good as f64 / n as f64,
    };
    println!(
        "accuracy={share:.3}%, good={good}, total={}",
        verdict.checked
    );
    if verdict.passed() {
        return Ok(ExitCode::SUCCESS);
    }
    print_mismatches(&verdict);
    Ok(ExitCode::FAILURE)
}

/// The first mismatches of a failed synthetic check, on stderr.
fn print_mismatches(verdict: &verify::Verdict) {
    for (seq, idx, why) in verdict.mismatches.iter().take(10) {
        eprintln!("  seq_id {seq}, qsl_idx {idx}: {why}");
    }
}

pub(crate) fn verify_synthetic(accuracy_log: &Path, data: &DataSource) -> Result<bool> {
    let verdict = verify::check(accuracy_log, data)?;
    if verdict.passed() {
        println!(
            "synthetic accuracy check: all {} logged answers match their samples",
            verdict.checked
        );
        return Ok(true);
    }
    eprintln!(
        "loadgen-node: synthetic accuracy check FAILED: {} of {} logged answers do not match",
        verdict.mismatches.len(),
        verdict.checked
    );
    print_mismatches(&verdict);
    Ok(false)
}

/// 0: the run completed (VALID or not: the summary says); 2: the run failed
/// (a node died, bad answers); 3: the synthetic accuracy check failed.
pub(crate) fn exit_code(run_failed: bool, verified: bool) -> ExitCode {
    if run_failed {
        ExitCode::from(2)
    } else if !verified {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}

pub(crate) fn resolve_settings(args: &RunArgs) -> Result<TestSettings> {
    let sources = SettingsSources {
        model: args.model.clone(),
        scenario: args.scenario,
        mlperf_conf: args.conf.clone(),
        user_conf: args.user_conf.clone(),
        mode: None,
    };
    let mut settings = sources.resolve()?;
    if !args.set.is_empty() {
        let text = set_lines(args)?;
        let file = ConfigFile::parse("--set", &text).map_err(|errs| {
            anyhow::anyhow!(errs
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n"))
        })?;
        file.check_values(&args.model, args.scenario)?;
        file.apply(
            &mut settings,
            &args.model,
            args.scenario,
            ConfKind::UserConf,
        )?;
        config::check_scale(&settings)?;
    }
    if let Some(mode) = args.mode {
        settings.mode = mode;
    }
    Ok(settings)
}

/// The --set flags as user.conf lines (`model.scenario.key = value`).
pub(crate) fn set_lines(args: &RunArgs) -> Result<String> {
    let mut text = String::new();
    for kv in &args.set {
        let Some((k, v)) = kv.split_once('=') else {
            bail!("--set {kv}: expected KEY=VALUE, e.g. --set min_duration=1000");
        };
        let k = k.trim();
        if config::MLPERF_CONF_KEYS.contains(&k) {
            bail!(
                "--set {kv}: `{k}` may only come from mlperf.conf; pass a whole file with --conf"
            );
        }
        if !config::KEYS.contains(&k) {
            bail!(
                "--set {kv}: unknown setting `{k}`; known settings: {}",
                config::KEYS.join(", ")
            );
        }
        text.push_str(&format!(
            "{}.{}.{} = {}\n",
            args.model,
            args.scenario,
            k,
            v.trim()
        ));
    }
    Ok(text)
}

fn audit_config(explicit: Option<&Path>) -> Result<Option<AuditConfig>> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => {
            let p = PathBuf::from("audit.config");
            if !p.exists() {
                return Ok(None);
            }
            eprintln!("loadgen-node: using ./audit.config from the working directory (as the official LoadGen does)");
            p
        }
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read audit config {}", path.display()))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let file = ConfigFile::parse(&path.display().to_string(), &text).map_err(|errs| {
        anyhow::anyhow!(errs
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("\n"))
    })?;
    Ok(Some(AuditConfig { name, file }))
}

fn report(outcome: &TestOutcome) {
    if let Some(p) = &outcome.performance {
        print!("{}", p.summary);
    }
    if let Some(e) = &outcome.run_error {
        eprintln!("loadgen-node: the run failed: {e}");
    }
    println!(
        "\n{} warning(s), {} error(s); {} accuracy-log entries. Logs: {}",
        outcome.warnings,
        outcome.errors,
        outcome.accuracy_entries,
        outcome
            .detail_path
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    );
}
