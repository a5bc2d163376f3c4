//! A run, prepared once from its flags: everything either engine needs,
//! resolved and checked before anything starts. The native engine runs a
//! plan in this process; the official one from the plan alone, in a process
//! of its own when a command makes several runs (`engines::run_step`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use compression::CodecSpec;
use loadgen_engine::config::{self, ConfKind, ConfigError, ConfigFile, SettingsSources};
use loadgen_engine::disk::{read_text_bounded, MAX_TEXT_FILE};
use loadgen_engine::footprint::{Footprint, SampleBytes};
use loadgen_engine::runner::AuditConfig;
use loadgen_engine::{EffectiveSettings, Scenario, TestMode, TestSettings};
use qdl::{Codec, QdlConfig};

use crate::args::{Engine, RunArgs, SetArg, SutArg};
use crate::benchmarks;
use crate::budget::{self, DiskWatch, HostMemory, Levers, RunNeeds};
use crate::qsl::DataSource;

/// Name of the merged user.conf an official run with `--set` reads, in the
/// run's extras directory.
pub const MERGED_USER_CONF: &str = "user.conf.loadgen-node";

/// One test run, ready to start.
#[derive(Debug)]
pub struct RunPlan {
    pub(crate) engine: Engine,
    pub(crate) test: TestPlan,
    pub(crate) sut: SutPlan,
    pub(crate) output: OutputPlan,
    pub(crate) observe: ObservePlan,
}

/// What is tested, and with which settings.
#[derive(Debug)]
pub struct TestPlan {
    pub(crate) model: String,
    pub(crate) scenario: Scenario,
    /// `--mode`, which wins over the config files' `mode` key.
    pub mode: Option<TestMode>,
    /// The settings from mlperf.conf, user.conf, `--set` and `--mode`, as
    /// the native engine runs them and as the official LoadGen derives
    /// them from the same files.
    pub settings: TestSettings,
    /// What the official LoadGen's one `FromConfig` reads.
    pub user_conf: UserConf,
    /// The audit.config applied at test start, if any.
    pub audit: Option<AuditFile>,
}

/// The user.conf of an official run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserConf {
    /// mlperf.conf alone.
    None,
    /// `--user-conf` as it is.
    Given(PathBuf),
    /// `--user-conf` (if any) with the `--set` lines appended, to be written
    /// to `path` before the run: later lines win, and FromConfig runs once.
    Merged {
        /// Where the merged file is written (in the run's extras).
        path: PathBuf,
        /// Its contents.
        text: String,
    },
}

impl UserConf {
    /// The file the official LoadGen is given.
    pub fn path(&self) -> Option<&Path> {
        match self {
            UserConf::None => None,
            UserConf::Given(p) | UserConf::Merged { path: p, .. } => Some(p),
        }
    }
}

/// An audit.config: its path (for the official LoadGen) and its parsed
/// settings (for the native engine).
#[derive(Debug)]
pub struct AuditFile {
    /// The file, as the official LoadGen reads it.
    pub path: PathBuf,
    pub(crate) config: AuditConfig,
}

/// The system under test.
#[derive(Debug)]
pub enum SutPlan {
    /// The engine's own null SUT and a QSL of that many samples.
    Null {
        /// Samples in the QSL.
        total: usize,
        /// Samples it holds at once (LoadGen's performance sample count).
        performance: usize,
        /// Answer like an LLM (native engine only).
        tokens: bool,
    },
    /// The QDL over the sut-nodes, with the data set's QSL.
    Network(Box<NetworkPlan>),
}

/// A run over the network.
#[derive(Debug)]
pub struct NetworkPlan {
    pub(crate) data: DataSource,
    /// Samples the QSL holds at once.
    pub performance_samples: usize,
    pub(crate) input_codec: CodecSpec,
    pub(crate) qdl: QdlConfig,
    /// How long to wait for nodes whose backend still loads.
    pub ready_timeout: Duration,
    /// Check an accuracy log against the synthetic backend's answers.
    pub verify_synthetic: bool,
}

/// Where the run's files go.
#[derive(Debug)]
pub struct OutputPlan {
    /// The MLPerf logs.
    pub dir: PathBuf,
    /// loadgen-node's own files: the latency breakdown, the merged
    /// user.conf.
    pub extras: PathBuf,
    /// Write the trace log.
    pub trace: bool,
}

/// What watches the run and what is written after it.
#[derive(Debug)]
pub struct ObservePlan {
    /// 0: no progress output.
    pub progress_interval: Duration,
    pub(crate) metrics: Option<String>,
    /// The OTLP collector and the share of samples traced.
    pub otlp: Option<(String, f64)>,
    pub(crate) report: Option<PathBuf>,
    /// The `--sut` flag as given, for the run's span.
    pub sut_label: String,
}

impl RunPlan {
    /// Resolves and checks every flag, and what the run needs of this host
    /// (memory, disk) before any node is looked up; errors name the flag or
    /// the file and line.
    pub fn from_args(args: &RunArgs) -> Result<RunPlan> {
        let compression =
            benchmarks::check_compression(&args.model, args.rules, args.open_division);
        if let (Err(why), true) = (&compression, args.input_codec.compresses()) {
            bail!("--input-codec {}: {why}", args.input_codec);
        }
        if args.engine == Engine::Official {
            refuse_for_official(args)?;
        }
        let extras = args.extras_dir();
        let test = TestPlan::from_args(args, HostMemory::read())?;
        let model = test.model.as_str();
        let sut = match &args.sut {
            SutArg::Null if args.sut_file.is_some() => {
                bail!("--sut null with --sut-file: give the nodes, or the null SUT, not both")
            }
            SutArg::Null => {
                let (total, performance) = null_sizes(args);
                budget::check_host(&test.null_needs(args, total, performance), &args.output_dir)
                    .map_err(anyhow::Error::msg)?;
                SutPlan::Null {
                    total,
                    performance,
                    tokens: args.null_tokens,
                }
            }
            SutArg::Nodes(_) => {
                if let Some(why) = benchmarks::find(&args.model).and_then(|b| b.retired) {
                    bail!("--model {}: {why}", args.model);
                }
                let (data, performance_samples) = data_set(args, model)?;
                budget::check_host(
                    &test.network_needs(args, &data, performance_samples),
                    &args.output_dir,
                )
                .map_err(anyhow::Error::msg)?;
                // Names are resolved here, once, before any node is asked
                // its name.
                let found = qdl::find_nodes(
                    &args.sut.to_string(),
                    args.sut_file.as_deref(),
                    args.ready_timeout,
                    |waiting| eprintln!("loadgen-node: {waiting}"),
                )
                .context("the sut-nodes (--sut, --sut-file)")?;
                let mut network = network_plan(args, &test, found, data, performance_samples)?;
                network.qdl.answer_compression_refused = compression.err();
                SutPlan::Network(Box::new(network))
            }
        };
        Ok(RunPlan {
            engine: args.engine,
            test,
            sut,
            output: OutputPlan {
                dir: args.output_dir.clone(),
                extras,
                trace: !args.no_trace,
            },
            observe: ObservePlan {
                progress_interval: args.progress_interval,
                metrics: args.metrics.clone(),
                otlp: args
                    .otlp
                    .clone()
                    .map(|endpoint| (endpoint, args.otlp_sample_ratio)),
                report: args.report.clone(),
                sut_label: match &args.sut_file {
                    Some(f) => format!("{} {}", args.sut, f.display()).trim().to_string(),
                    None => args.sut.to_string(),
                },
            },
        })
    }
}

impl TestPlan {
    /// The test of the run flags: its settings resolved (the counts they
    /// may ask for bounded by `memory`, the host's), the official engine's
    /// user.conf, the audit.config.
    pub fn from_args(args: &RunArgs, memory: Option<HostMemory>) -> Result<TestPlan> {
        // mlperf.conf's keys use its own names (llama3_1-8b): the official
        // LoadGen would match nothing given another.
        let model = benchmarks::canonical(&args.model);
        Ok(TestPlan {
            model: model.to_string(),
            scenario: args.scenario,
            mode: args.mode,
            settings: resolve_settings(args, model, memory.map(|m| m.total))?,
            user_conf: user_conf(args, model, &args.extras_dir())?,
            audit: audit_file(
                args.audit_config.as_deref(),
                args.scenario,
                memory.map(|m| m.total),
            )?,
        })
        .and_then(|plan| {
            // The settings with the audit.config applied, as the engines
            // will run them: within what the host can keep track of.
            if let Some(a) = &plan.audit {
                let mut settings = plan.settings.clone();
                config::apply_audit(&mut settings, &a.config.file)?;
                config::check_scale(&settings, memory.map(|m| m.total))?;
            }
            Ok(plan)
        })
    }

    /// The settings the test runs with over a QSL of `total` samples,
    /// `performance` held at once: the audit.config applied, as the engines
    /// apply it at test start.
    fn effective(&self, total: usize, performance: usize) -> EffectiveSettings {
        let mut settings = self.settings.clone();
        if let Some(a) = &self.audit {
            // A bad audit.config is reported by the run itself.
            let _ = config::apply_audit(&mut settings, &a.config.file);
        }
        EffectiveSettings::derive(&settings, total, performance.min(total)).0
    }

    /// What the run needs over the sut-nodes, with `data`, `performance`
    /// samples of it held at once, and the benchmark's answers.
    pub fn network_needs(&self, args: &RunArgs, data: &DataSource, performance: usize) -> RunNeeds {
        let bench = benchmarks::find(&self.model);
        // A model outside the suite: as large as the largest answer
        // accepted, when the flag says; otherwise unknown, counted empty.
        // A benchmark's answers are its own size, or at most what
        // --max-answer-bytes accepts where that is less (a larger answer
        // ends the run, and is not logged).
        let answer = match (bench, args.max_answer_bytes) {
            (None, max) => max.unwrap_or(0),
            (Some(b), None) => b.output_bytes,
            (Some(b), Some(max)) => b.output_bytes.min(max),
        } as u64;
        let levers = Levers {
            synthetic: matches!(data, DataSource::Synthetic { .. }),
            ..self.levers(args)
        };
        let stored = |i| data.stored_bytes(i);
        let sizes = match data {
            DataSource::Synthetic { sample_bytes, .. } => SampleBytes::Each(*sample_bytes as u64),
            DataSource::NpyDir { .. } => SampleBytes::ByIndex(&stored),
        };
        self.needs(args, data.total(), performance, sizes, answer, levers)
    }

    /// What the run needs with the engine's own null SUT (no data; the
    /// native one answers 4 bytes or, as an LLM, up to 8 tokens of 4).
    pub fn null_needs(&self, args: &RunArgs, total: usize, performance: usize) -> RunNeeds {
        let answer = match (args.engine, args.null_tokens) {
            (Engine::Official, _) => 0,
            (Engine::Native, false) => 4,
            (Engine::Native, true) => 32,
        };
        let levers = self.levers(args);
        self.needs(
            args,
            total,
            performance,
            SampleBytes::Each(0),
            answer,
            levers,
        )
    }

    fn levers(&self, args: &RunArgs) -> Levers {
        Levers {
            model: self.model.clone(),
            performance_override: self.settings.performance_sample_count_override != 0,
            submission_samples: benchmarks::find(&self.model)
                .filter(|b| b.rules(args.rules).is_some())
                .map(|b| b.performance_samples as u64),
            synthetic: false,
        }
    }

    fn needs(
        &self,
        args: &RunArgs,
        total: usize,
        performance: usize,
        sample_bytes: SampleBytes<'_>,
        answer_bytes: u64,
        levers: Levers,
    ) -> RunNeeds {
        let eff = self.effective(total, performance);
        let footprint = Footprint::of(&eff, total, sample_bytes);
        let mut logs = footprint.log_bytes(&eff, answer_bytes, !args.no_trace);
        if args.engine == Engine::Official && logs.trace > 0 {
            logs.trace = official_trace_bytes(&footprint);
        }
        RunNeeds {
            footprint,
            process_bytes: RunNeeds::process_bytes(total, answer_bytes),
            logs,
            answer_bytes,
            accuracy_copies: 0,
            disk_floor: match args.engine {
                Engine::Official => DiskWatch::FLOOR,
                Engine::Native => 0,
            },
            levers,
        }
    }
}

/// The data set of the null SUT: its samples, and those held at once.
fn null_sizes(args: &RunArgs) -> (usize, usize) {
    let total = args.total_sample_count.unwrap_or(1024);
    (total, args.performance_sample_count.unwrap_or(total))
}

/// What a run of `args` needs of its host, without looking up its nodes;
/// `audit`: the text of the audit.config it will be given instead of
/// `--audit-config`'s.
pub fn run_needs(args: &RunArgs, audit: Option<&str>) -> Result<RunNeeds> {
    let mut test = TestPlan::from_args(args, HostMemory::read())?;
    if let Some(text) = audit {
        let file = ConfigFile::parse("audit.config", text).map_err(joined)?;
        test.audit = Some(AuditFile {
            path: PathBuf::from("audit.config"),
            config: AuditConfig {
                name: "audit.config".into(),
                file,
            },
        });
    }
    Ok(match &args.sut {
        SutArg::Null => {
            let (total, performance) = null_sizes(args);
            test.null_needs(args, total, performance)
        }
        SutArg::Nodes(_) => {
            let (data, performance) = data_set(args, &test.model)?;
            test.network_needs(args, &data, performance)
        }
    })
}

/// The official LoadGen's trace, larger than this engine's: besides each
/// sample's pair of events, spans of each query (scheduling, issuing, the
/// sample loop, the completion call). Measured on 6.0.17 over the network:
/// 269 bytes a sample (Offline), 804 (Server), 750 (SingleStream) and 364
/// (MultiStream, 8 a query); these bounds leave room for longer numbers.
fn official_trace_bytes(fp: &Footprint) -> u64 {
    const PER_SAMPLE: u64 = 320;
    const PER_QUERY: u64 = 640;
    const FIXED: u64 = 64 << 10;
    fp.issued_samples
        .saturating_mul(PER_SAMPLE)
        .saturating_add(fp.issued_queries.saturating_mul(PER_QUERY))
        .saturating_add(FIXED)
}

/// What the official engine cannot honour, with the reason.
fn refuse_for_official(args: &RunArgs) -> Result<()> {
    if args.conf.is_some() {
        bail!(
            "--conf: the official LoadGen 6.0.17 reads mlperf.conf only from the copy compiled \
             into it (mlperf_conf.h of its tree); to use another round's mlperf.conf, build \
             against that round's LoadGen release"
        );
    }
    if args.null_tokens {
        bail!("--null-tokens: the official engine's null SUT answers without tokens");
    }
    Ok(())
}

/// A config file's syntax errors, one per line.
fn joined(errors: Vec<ConfigError>) -> anyhow::Error {
    anyhow!(errors
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("\n"))
}

/// The `--set` flags as user.conf lines (`model.scenario.key = value`).
pub fn set_lines(model: &str, scenario: Scenario, set: &[SetArg]) -> String {
    set.iter()
        .map(|s| format!("{model}.{scenario}.{} = {}\n", s.key, s.value))
        .collect()
}

/// Defaults < mlperf.conf (or --conf) < --user-conf < --set < --mode; the
/// counts they ask for bounded by `memory`, the host's.
fn resolve_settings(args: &RunArgs, model: &str, memory: Option<u64>) -> Result<TestSettings> {
    let sources = SettingsSources {
        model: model.to_string(),
        scenario: args.scenario,
        mlperf_conf: args.conf.clone(),
        user_conf: args.user_conf.clone(),
        mode: None,
        memory,
    };
    let mut settings = sources.resolve()?;
    if !args.set.is_empty() {
        let text = set_lines(model, args.scenario, &args.set);
        let file = ConfigFile::parse("--set", &text).map_err(joined)?;
        file.check_values(model, args.scenario, memory)?;
        file.apply(&mut settings, model, args.scenario, ConfKind::UserConf)?;
        config::check_scale(&settings, memory)?;
    }
    if let Some(mode) = args.mode {
        settings.mode = mode;
    }
    Ok(settings)
}

/// The user.conf of an official run: with `--set`, a copy of --user-conf
/// with the lines appended, to be written to the extras directory (never
/// beside the logs, where the submission checker allows only its own
/// files).
fn user_conf(args: &RunArgs, model: &str, extras: &Path) -> Result<UserConf> {
    if args.set.is_empty() {
        return Ok(match &args.user_conf {
            Some(p) => UserConf::Given(p.clone()),
            None => UserConf::None,
        });
    }
    let mut text = match &args.user_conf {
        Some(p) => read_text_bounded(p, MAX_TEXT_FILE)
            .with_context(|| format!("cannot read --user-conf {}", p.display()))?,
        None => String::new(),
    };
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str("# --set\n");
    text.push_str(&set_lines(model, args.scenario, &args.set));
    Ok(UserConf::Merged {
        path: extras.join(MERGED_USER_CONF),
        text,
    })
}

/// `--audit-config`, or `./audit.config` when it exists, as the official
/// LoadGen does.
/// Its values are checked as `--set`'s are, for `scenario` on a host of
/// `memory` bytes.
fn audit_file(
    explicit: Option<&Path>,
    scenario: Scenario,
    memory: Option<u64>,
) -> Result<Option<AuditFile>> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None if Path::new("audit.config").is_file() => {
            eprintln!(
                "loadgen-node: using ./audit.config from the working directory (as the official \
                 LoadGen does)"
            );
            PathBuf::from("audit.config")
        }
        None => return Ok(None),
    };
    let text = read_text_bounded(&path, MAX_TEXT_FILE)
        .with_context(|| format!("--audit-config: cannot read {}", path.display()))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let file = ConfigFile::parse(&path.display().to_string(), &text).map_err(joined)?;
    file.check_audit_values(scenario, memory)?;
    Ok(Some(AuditFile {
        path,
        config: AuditConfig { name, file },
    }))
}

/// The largest answer accepted unless `--max-answer-bytes` says otherwise.
pub fn default_max_answer_bytes(model: &str) -> usize {
    benchmarks::find(model).map_or(qdl::DEFAULT_MAX_ANSWER_BYTES, |b| b.max_output_bytes)
}

/// The data set of a run over the network, and how many of its samples
/// the QSL holds at once.
pub fn data_set(args: &RunArgs, model: &str) -> Result<(DataSource, usize)> {
    let data = DataSource::for_run(
        model,
        args.dataset.as_deref(),
        args.sample_bytes,
        args.total_sample_count,
    )?;
    let performance_samples = args
        .performance_sample_count
        .or(benchmarks::find(model).map(|b| b.performance_samples))
        .unwrap_or(data.total());
    Ok((data, performance_samples))
}

/// The mode the sessions tell the nodes: the run's effective test mode.
fn session_mode(mode: TestMode) -> qdl::RunMode {
    match mode {
        TestMode::AccuracyOnly => qdl::RunMode::AccuracyOnly,
        TestMode::PerformanceOnly => qdl::RunMode::PerformanceOnly,
        TestMode::SubmissionRun => qdl::RunMode::Submission,
        TestMode::FindPeakPerformance => qdl::RunMode::FindPeakPerformance,
    }
}

fn network_plan(
    args: &RunArgs,
    test: &TestPlan,
    found: qdl::NodeList,
    data: DataSource,
    performance_samples: usize,
) -> Result<NetworkPlan> {
    let model = test.model.as_str();
    // Nodes whose answers carry no token counts refuse such a session. The
    // effective settings are those of either engine: the official LoadGen
    // is handed the same user.conf, audit.config and --mode.
    let effective = test.effective(data.total(), performance_samples);
    let token_latencies = effective.use_token_latencies;
    let mode = session_mode(effective.mode);
    let tls = args.tls.client_tls()?;
    if args.tls.tls_insecure {
        eprintln!(
            "loadgen-node: warning: --tls-insecure: sut-node certificates are NOT verified; \
             use it for development only (production: --tls-pin or --tls-ca)"
        );
    }
    let qdl = QdlConfig {
        nodes: found.nodes,
        resolved: found.resolved.iter().map(ToString::to_string).collect(),
        policy: args.dispatch.clone(),
        connections_per_node: args.connections_per_node,
        model: model.to_string(),
        scenario: args.scenario.as_str().to_string(),
        node_timeout: args.node_timeout,
        progress_timeout: Some(args.progress_timeout).filter(|t| !t.is_zero()),
        tls,
        input_codec: Codec::from(args.input_codec.kind),
        max_answer_bytes: args
            .max_answer_bytes
            .unwrap_or_else(|| default_max_answer_bytes(model)),
        qdl_threads: args.qdl_threads,
        max_in_flight: args.max_in_flight,
        token_latencies,
        mode,
        ..QdlConfig::default()
    };
    Ok(NetworkPlan {
        data,
        performance_samples,
        input_codec: args.input_codec,
        qdl,
        ready_timeout: args.ready_timeout,
        verify_synthetic: args.verify_synthetic,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        run: RunArgs,
    }

    fn plan(argv: &[&str]) -> Result<RunPlan> {
        let flags = Flags::try_parse_from(std::iter::once("x").chain(argv.iter().copied()))?;
        RunPlan::from_args(&flags.run)
    }

    #[test]
    fn answers_are_counted_at_most_as_large_as_the_run_accepts() {
        let needs = |extra: &[&str]| {
            let mut argv = vec![
                "x",
                "--sut",
                "127.0.0.1:1",
                "--model",
                "stable-diffusion-xl",
                "--sample-bytes",
                "64",
            ];
            argv.extend_from_slice(extra);
            run_needs(&Flags::try_parse_from(argv).unwrap().run, None)
                .unwrap()
                .answer_bytes
        };
        assert_eq!(needs(&[]), 3_145_728);
        assert_eq!(needs(&["--max-answer-bytes", "64"]), 64);
        assert_eq!(needs(&["--max-answer-bytes", "99999999"]), 3_145_728);
    }

    #[test]
    fn settings_follow_their_sources() {
        let p = plan(&[
            "--scenario",
            "Server",
            "--set",
            "target_qps=123",
            "--mode",
            "AccuracyOnly",
        ])
        .unwrap();
        let s = &p.test.settings;
        assert_eq!(s.server_target_qps, 123.0);
        assert_eq!(s.mode, loadgen_engine::TestMode::AccuracyOnly);
        // mlperf.conf's seed, never the C++ default 0.
        assert_eq!(s.qsl_rng_seed, 2085463073848966840);
        assert!(matches!(p.sut, SutPlan::Null { total: 1024, .. }));
    }

    #[test]
    fn official_user_conf_goes_to_the_extras_directory() {
        let p = plan(&[
            "--engine",
            "official",
            "--set",
            "min_duration=1000",
            "--output-dir",
            "run",
            "--extras-dir",
            "extras",
        ])
        .unwrap();
        let UserConf::Merged { path, text } = &p.test.user_conf else {
            panic!("{:?}", p.test.user_conf);
        };
        assert_eq!(path, Path::new("extras").join(MERGED_USER_CONF).as_path());
        assert_eq!(text, "# --set\nresnet50.Offline.min_duration = 1000\n");
        let without = plan(&["--engine", "official"]).unwrap();
        assert_eq!(without.test.user_conf, UserConf::None);
        // Without --extras-dir, loadgen-node's files go beside the logs.
        let single = plan(&["--set", "min_duration=1", "--output-dir", "o"]).unwrap();
        assert_eq!(single.output.extras, Path::new("o"));
    }

    #[test]
    fn what_the_official_engine_cannot_do_is_refused() {
        let e = plan(&["--engine", "official", "--conf", "m.conf"]).unwrap_err();
        assert!(e.to_string().contains("--conf"), "{e}");
        let e = plan(&["--engine", "official", "--null-tokens"]).unwrap_err();
        assert!(e.to_string().contains("--null-tokens"), "{e}");
    }

    #[test]
    fn bad_settings_and_files_are_named() {
        let e = format!("{:#}", plan(&["--set", "min_duration=x"]).unwrap_err());
        assert!(e.contains("--set") && e.contains("min_duration"), "{e}");
        let e = format!(
            "{:#}",
            plan(&["--audit-config", "/nonexistent/audit.config"]).unwrap_err()
        );
        assert!(e.contains("/nonexistent/audit.config"), "{e}");
        let e = format!(
            "{:#}",
            plan(&["--model", "llama2-70b", "--input-codec", "lz4"]).unwrap_err()
        );
        assert!(e.contains("--input-codec"), "{e}");
    }
}
