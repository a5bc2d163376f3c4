//! `start_test`: runs a whole test against a SUT and a QSL and writes the
//! four MLPerf logs (`loadgen.cc`: `StartTest`, `RunPerformanceMode`, `RunAccuracyMode`, `FindPeakPerformanceMode`, `IssueQueries`).
//!
//! A series reads top to bottom in `Test::run_series`: log the generation
//! plan, issue (the timed loop, module `issue`, which writes no logs),
//! record why issuing stopped, account for the queries never issued, wait
//! for the answers, then log the series' end. Everything else here is setting
//! a test up, running its phases and writing the logs.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, SystemTime};

use crate::accuracy_log::AccuracyLog;
use crate::aggregator::{
    Aggregator, Control, Event, Finished, LatencyBounds, LogKind, SeriesConfig, SeriesData,
};
use crate::clock::{self, Clock, MonoClock};
use crate::completion::{Completer, Ring};
use crate::config::{self, ConfigFile};
use crate::detail::{here, DetailLog, Location, LogValue};
use crate::disk::{Disk, LogFile, Reserve};
use crate::escape::json_escaped;
use crate::issue::{Issued, Issuer};
use crate::latency_file::{LatencyFileSettings, LatencyWriter, SeriesKind};
use crate::live::LiveStats;
use crate::loadable::{generate_loadable_sets, LoadableSet};
use crate::number_format::fixed6;
use crate::performance_report::{build_report, PerformanceReport};
use crate::querygen::{GenerationPlan, QueryGenerator, RunKind};
use crate::results::SeriesMeasurements;
use crate::sequence::Sequencer;
use crate::settings::{EffectiveSettings, Scenario, TestMode, TestSettings};
use crate::settings_log;
use crate::summary::{self, BANNER};
use crate::sut::{QuerySampleLibrary, SystemUnderTest};
use crate::trace_log::TraceLog;

/// Where and how the logs are written (`test_settings.h`, `LogSettings`).
#[derive(Clone, Debug)]
pub struct LogSettings {
    /// Directory the logs are written to; created if missing.
    pub outdir: PathBuf,
    /// Start of every log file name (`mlperf_log_` by default).
    pub prefix: String,
    /// End of every log file name, after the kind (`summary.txt`, ...).
    pub suffix: String,
    /// Put the test's start date and time after the prefix.
    pub prefix_with_datetime: bool,
    /// Write the trace log (`trace.json`); the file is created either way.
    pub enable_trace: bool,
    /// Where to hold [`disk::RESERVE_BYTES`](crate::disk::RESERVE_BYTES)
    /// on the logs' filesystem while the test runs (a file removed after
    /// it): when a write finds the disk full, the test ends at once with
    /// the reason and the reserve makes room for the logs' last records.
    /// `None`: no reserve (the test still ends at once, and its logs stop
    /// where the disk filled).
    pub reserve: Option<PathBuf>,
    /// Write each sample's latency to this side file (not one of the MLPerf
    /// logs; see [`crate::latency_file`]).
    pub latency_file: Option<LatencyFileSettings>,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            outdir: PathBuf::from("."),
            prefix: "mlperf_log_".into(),
            suffix: String::new(),
            prefix_with_datetime: false,
            enable_trace: true,
            reserve: None,
            latency_file: None,
        }
    }
}

/// An audit configuration to apply at test start (`loadgen.cc`, `StartTest`: applied with model `*`).
#[derive(Clone, Debug)]
pub struct AuditConfig {
    /// Shown in the "Found Audit Config file" warning.
    pub name: String,
    /// The parsed audit.config.
    pub file: ConfigFile,
}

/// What a test produced, besides its log files.
#[derive(Clone, Debug, Default)]
pub struct TestOutcome {
    /// The performance result (PerformanceOnly, SubmissionRun, FindPeak).
    pub performance: Option<PerformanceResult>,
    /// Warnings recorded in the detail log.
    pub warnings: u64,
    /// Errors recorded in the detail log.
    pub errors: u64,
    /// Set when the run was cut short (SUT failure, bad responses).
    pub run_error: Option<String>,
    /// Responses written to the accuracy log.
    pub accuracy_entries: u64,
    /// Path of the summary log.
    pub summary_path: PathBuf,
    /// Path of the detail log.
    pub detail_path: PathBuf,
    /// Path of the accuracy log.
    pub accuracy_path: PathBuf,
    /// Why the latency side file could not be written, when it was asked
    /// for and failed (the run and its logs stand).
    pub latency_file_error: Option<String>,
}

/// The result of the performance run.
#[derive(Clone, Debug)]
pub struct PerformanceResult {
    /// The result is VALID.
    pub valid: bool,
    /// The summary log's text, without its warning and error footer.
    pub summary: String,
}

/// Why a test could not be run or its logs not written.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A log file could not be created or written.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The log file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The log directory could not be created.
    #[error("cannot create the output directory {path}: {source}")]
    OutputDir {
        /// The directory.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The thread that records completions could not start or failed.
    #[error("the completion-processing thread failed: {0}")]
    Aggregator(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> RunError + '_ {
    move |source| RunError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Runs the whole test synchronously and returns once every log is closed.
pub fn start_test(
    sut: &dyn SystemUnderTest,
    qsl: &dyn QuerySampleLibrary,
    requested: &TestSettings,
    log_settings: &LogSettings,
    audit: Option<&AuditConfig>,
) -> Result<TestOutcome, RunError> {
    let live = Arc::new(LiveStats::default());
    start_test_with_live(sut, qsl, requested, log_settings, audit, live)
}

/// [`start_test`], publishing the running series' figures in `live` (for a
/// progress display on another thread).
pub fn start_test_with_live(
    sut: &dyn SystemUnderTest,
    qsl: &dyn QuerySampleLibrary,
    requested: &TestSettings,
    log_settings: &LogSettings,
    audit: Option<&AuditConfig>,
    live: Arc<LiveStats>,
) -> Result<TestOutcome, RunError> {
    let clock = Arc::new(MonoClock::start());
    start_test_with_clock(sut, qsl, requested, log_settings, audit, live, clock)
}

/// [`start_test_with_live`] on the given clock: a
/// [`VirtualClock`](crate::clock::VirtualClock) runs the whole test in
/// virtual time (tests of the timing rules).
pub fn start_test_with_clock(
    sut: &dyn SystemUnderTest,
    qsl: &dyn QuerySampleLibrary,
    requested: &TestSettings,
    log_settings: &LogSettings,
    audit: Option<&AuditConfig>,
    live: Arc<LiveStats>,
    clock: Arc<dyn Clock>,
) -> Result<TestOutcome, RunError> {
    let start_wall = SystemTime::now();
    let datetime = clock::test_datetime(start_wall);
    std::fs::create_dir_all(&log_settings.outdir).map_err(|source| RunError::OutputDir {
        path: log_settings.outdir.clone(),
        source,
    })?;
    let path = |kind: &str| {
        let dt = if log_settings.prefix_with_datetime {
            format!("{datetime}_")
        } else {
            String::new()
        };
        log_settings.outdir.join(format!(
            "{}{dt}{kind}{}",
            log_settings.prefix, log_settings.suffix
        ))
    };
    let (summary_path, detail_path) = (path("summary.txt"), path("detail.txt"));
    let (accuracy_path, trace_path) = (path("accuracy.json"), path("trace.json"));
    let reserve = match &log_settings.reserve {
        Some(p) => Some(Reserve::hold(p.clone()).map_err(io_err(p))?),
        None => None,
    };
    let disk = Disk::new(reserve);
    let create = |p: &Path| {
        File::create(p)
            .map(|f| BufWriter::new(LogFile::new(f, p.to_path_buf(), disk.clone())))
            .map_err(io_err(p))
    };
    let summary_out = create(&summary_path)?;
    let detail_out = create(&detail_path)?;
    let accuracy_out = create(&accuracy_path)?;
    // Created even without tracing, as the official LoadGen does.
    let trace_out = create(&trace_path)?;

    let accuracy = AccuracyLog::new(accuracy_out).map_err(io_err(&accuracy_path))?;
    let trace = if log_settings.enable_trace {
        Some(
            TraceLog::new(trace_out, clock::unix_us(SystemTime::now()))
                .map_err(io_err(&trace_path))?,
        )
    } else {
        None
    };
    let mut latency_file_error = None;
    let latencies =
        log_settings
            .latency_file
            .as_ref()
            .and_then(|f| match LatencyWriter::create(f) {
                Ok(w) => Some(w),
                Err(e) => {
                    latency_file_error = Some(format!("cannot create {}: {e}", f.path.display()));
                    None
                }
            });
    let (tx, rx) = mpsc::channel::<Event>();
    let aggregator_live = live.clone();
    let aggregator_disk = disk.clone();
    let aggregator = thread::Builder::new()
        .name("loadgen-completions".into())
        .spawn(move || {
            Aggregator::new(accuracy, trace, latencies, aggregator_live, aggregator_disk).run(rx)
        })
        .map_err(|e| RunError::Aggregator(e.to_string()))?;

    let mut test = Test {
        sut,
        qsl,
        clock,
        detail: DetailLog::new(detail_out),
        detail_path: detail_path.clone(),
        summary_out,
        summary_path: summary_path.clone(),
        completer: None,
        events: tx,
        enable_trace: log_settings.enable_trace,
        sequencer: Sequencer::new(),
        issued_total: 0,
        sut_name: String::new(),
        run_error: None,
        performance: None,
        live,
        disk: disk.clone(),
    };
    let run = test.run(requested, audit, &datetime);
    let reported = run.is_ok().then(|| test.sut_report()).transpose();

    // Close everything, whatever happened, so no log is left truncated.
    let footer = summary::footer(test.detail.warnings(), test.detail.errors());
    let summary_written = test
        .summary_out
        .write_all(footer.as_bytes())
        .and_then(|_| test.summary_out.flush())
        .map_err(io_err(&summary_path));
    let detail_written = test.detail.flush().map_err(io_err(&detail_path));
    let _ = test.events.send(Event::Control(Control::Finish));
    let Finished {
        accuracy,
        trace,
        io_error: agg_io,
        latency_file_error: latency_io,
    } = aggregator
        .join()
        .map_err(|_| RunError::Aggregator("it panicked".into()))?;
    if let (Some(e), Some(f)) = (latency_io, &log_settings.latency_file) {
        latency_file_error.get_or_insert(format!("cannot write {}: {e}", f.path.display()));
    }
    let accuracy_entries = accuracy.entries();
    let closed = [
        accuracy.finish().map(drop).map_err(io_err(&accuracy_path)),
        trace.map_or(Ok(()), |t| {
            t.finish().map(drop).map_err(io_err(&trace_path))
        }),
        agg_io.map_or(Ok(()), |(log, source)| {
            Err(RunError::Io {
                path: match log {
                    LogKind::Accuracy => accuracy_path.clone(),
                    LogKind::Trace => trace_path.clone(),
                },
                source,
            })
        }),
        run,
        reported.map(drop),
        summary_written,
        detail_written,
    ];
    // On a full disk the run has failed, and says why: what could not be
    // written after that is part of the same failure.
    let full = disk.reason();
    if full.is_none() {
        closed.into_iter().try_for_each(|r| r)?;
    }
    let run_error = test.run_error.take().or(full);
    Ok(TestOutcome {
        performance: test.performance.take(),
        warnings: test.detail.warnings(),
        errors: test.detail.errors(),
        run_error,
        accuracy_entries,
        summary_path,
        detail_path,
        accuracy_path,
        latency_file_error,
    })
}

/// A log file as the test writes it.
type Log = BufWriter<LogFile>;

struct Test<'a> {
    sut: &'a dyn SystemUnderTest,
    qsl: &'a dyn QuerySampleLibrary,
    clock: Arc<dyn Clock>,
    detail: DetailLog<Log>,
    detail_path: PathBuf,
    summary_out: Log,
    summary_path: PathBuf,
    completer: Option<Ring>,
    events: mpsc::Sender<Event>,
    enable_trace: bool,
    /// Sequence ids and accuracy-log draws, across series and phases.
    sequencer: Sequencer,
    /// Samples issued over the whole test.
    issued_total: u64,
    sut_name: String,
    run_error: Option<String>,
    performance: Option<PerformanceResult>,
    live: Arc<LiveStats>,
    /// The logs' filesystem: a write that finds it full ends the run.
    disk: Arc<Disk>,
}

/// How one series ended.
struct SeriesOutcome {
    data: SeriesData,
    queries_issued: u64,
    final_query_scheduled_ns: i64,
    final_query_issued_ns: i64,
}

impl<'a> Test<'a> {
    fn log(&mut self, key: &str, value: impl Into<LogValue>, at: Location) -> Result<(), RunError> {
        let now = self.clock.now_ns();
        self.detail
            .log(key, &value.into(), now, at)
            .map_err(io_err(&self.detail_path))
    }

    fn fail(&mut self, reason: String, at: Location) -> Result<(), RunError> {
        self.log("error_runtime", reason.clone(), at)?;
        self.run_error.get_or_insert(reason);
        Ok(())
    }

    fn run(
        &mut self,
        requested: &TestSettings,
        audit: Option<&AuditConfig>,
        datetime: &str,
    ) -> Result<(), RunError> {
        let name_start = self.clock.now_ns();
        let name = self.sut.name();
        let name_ns = (self.clock.now_ns() - name_start).max(0) as u64;

        self.log_version_block()?;
        self.log("test_datetime", datetime, here!())?;
        let name = match name {
            Ok(n) => n,
            Err(e) => {
                self.log("sut_name", "", here!())?;
                return self.fail(format!("Could not get the SUT name: {e}"), here!());
            }
        };
        self.sut_name = name.clone();
        self.log("sut_name", name, here!())?;
        self.log("get_sut_name_duration_ns", name_ns, here!())?;
        self.log("qsl_name", self.qsl.name(), here!())?;
        let total = self.qsl.total_sample_count();
        let perf = self.qsl.performance_sample_count();
        self.log("qsl_reported_total_count", total as u64, here!())?;
        self.log("qsl_reported_performance_count", perf as u64, here!())?;

        let mut settings = requested.clone();
        if let Some(a) = audit {
            self.log(
                "warning_generic_message",
                format!(
                    "Found Audit Config file ({}). Overriding TestSettings from audit.config file.",
                    a.name
                ),
                here!(),
            )?;
            if let Err(e) = config::apply_audit(&mut settings, &a.file) {
                self.log("error_invalid_config", e.to_string(), here!())?;
            }
        }
        if settings.test05 {
            self.log(
                "warning_generic_message",
                "Test05 flag detected Overriding random seeds",
                here!(),
            )?;
            settings.mode = TestMode::PerformanceOnly;
            settings.qsl_rng_seed = requested.test05_qsl_rng_seed;
            settings.sample_index_rng_seed = requested.test05_sample_index_rng_seed;
            settings.schedule_rng_seed = requested.test05_schedule_rng_seed;
        }

        let (eff, problems) = EffectiveSettings::derive(&settings, total, perf);
        for (key, value) in settings_log::requested_entries(&settings) {
            self.log(key, value, here!())?;
        }
        for (key, value) in settings_log::effective_entries(&eff) {
            self.log(key, value, here!())?;
        }
        for p in problems {
            self.log("error_invalid_test_settings", p, here!())?;
        }
        // The config files' and flags' values were checked; what the audit
        // config and the QSL's sizes make of them is checked here, before
        // anything is allocated for them, against the limit of any machine.
        // The host's own memory is the caller's to check, before it
        // connects (`footprint`): this core never reads the machine.
        if let Err(why) = config::check_planned(&eff, None) {
            return self.fail(why, here!());
        }

        let capacity = ring_capacity(&eff);
        let ring = Ring::new(
            self.clock.clone(),
            capacity,
            self.events.clone(),
            self.enable_trace,
        );
        let run: Completer = ring.clone().into();
        self.disk.watch(move |reason| run.abort(reason));
        self.completer = Some(ring);

        match eff.mode {
            TestMode::AccuracyOnly => self.accuracy_phase(&eff),
            TestMode::PerformanceOnly => self.performance_phase(&eff),
            TestMode::SubmissionRun => {
                self.accuracy_phase(&eff)?;
                if self.run_error.is_none() {
                    self.performance_phase(&eff)?;
                }
                Ok(())
            }
            TestMode::FindPeakPerformance => self.find_peak(&eff),
        }
    }

    fn log_version_block(&mut self) -> Result<(), RunError> {
        let version = format!("6.0.17 @ loadgen-node {}", env!("CARGO_PKG_VERSION"));
        self.log("loadgen_version", version, here!())?;
        self.log("loadgen_build_date_local", "NA", here!())?;
        self.log("loadgen_build_date_utc", "NA", here!())?;
        self.log("loadgen_git_commit_date", "NA", here!())?;
        self.log("loadgen_git_log_message", "NA", here!())?;
        self.log("loadgen_git_status_message", "NA", here!())?;
        self.log("loadgen_file_sha1", LogValue::Map(Vec::new()), here!())
    }

    fn completer(&self) -> Ring {
        // Set before any phase runs.
        self.completer
            .clone()
            .unwrap_or_else(|| unreachable!("completer is created before the first series"))
    }

    fn load(&mut self, set: &LoadableSet) -> Result<bool, RunError> {
        self.log(
            "loaded_qsl_set",
            LogValue::Indices(set.samples.clone()),
            here!(),
        )?;
        let t0 = self.clock.now_ns();
        let r = self.qsl.load_samples(&set.samples);
        self.span("LoadSamples", t0, set.samples.len());
        match r {
            Ok(()) => Ok(true),
            Err(e) => {
                self.fail(format!("The QSL could not load samples: {e}"), here!())?;
                Ok(false)
            }
        }
    }

    fn unload(&mut self, set: &LoadableSet) -> Result<(), RunError> {
        let t0 = self.clock.now_ns();
        let r = self.qsl.unload_samples(&set.samples);
        self.span("UnloadSampes", t0, set.samples.len());
        if let Err(e) = r {
            self.fail(format!("The QSL could not unload samples: {e}"), here!())?;
        }
        Ok(())
    }

    fn span(&self, name: &'static str, start_ns: i64, count: usize) {
        if self.enable_trace {
            let dur_ns = self.clock.now_ns() - start_ns;
            let _ = self.events.send(Event::Control(Control::Span {
                name,
                start_ns,
                dur_ns,
                args: vec![("count", count as u64)],
            }));
        }
    }

    fn accuracy_phase(&mut self, eff: &EffectiveSettings) -> Result<(), RunError> {
        self.log("generic_message", "Starting accuracy mode", here!())?;
        let total = self.qsl.total_sample_count();
        let sets = generate_loadable_sets(eff, eff.accuracy_sample_count as usize, total);
        for set in &sets {
            if !self.load(set)? {
                return Ok(());
            }
            self.run_series(eff, set, RunKind::Accuracy)?;
            self.unload(set)?;
            if self.run_error.is_some() {
                break;
            }
        }
        Ok(())
    }

    fn performance_set(
        &mut self,
        eff: &EffectiveSettings,
    ) -> Result<Option<LoadableSet>, RunError> {
        let total = self.qsl.total_sample_count();
        let set = generate_loadable_sets(eff, eff.performance_sample_count as usize, total)
            .into_iter()
            .next();
        if set.is_none() {
            self.fail(
                "The performance set is empty: the QSL reports no samples.".into(),
                here!(),
            )?;
        }
        Ok(set)
    }

    fn performance_phase(&mut self, eff: &EffectiveSettings) -> Result<(), RunError> {
        self.log("generic_message", "Starting performance mode", here!())?;
        let Some(set) = self.performance_set(eff)? else {
            return Ok(());
        };
        if !self.load(&set)? {
            return Ok(());
        }
        let report = self.performance_run(eff, &set)?;
        self.write_report(&report)?;
        self.unload(&set)
    }

    /// One performance series and its report (not yet written).
    fn performance_run(
        &mut self,
        eff: &EffectiveSettings,
        set: &LoadableSet,
    ) -> Result<PerformanceReport, RunError> {
        let outcome = self.run_series(eff, set, RunKind::Performance)?;
        let d = &outcome.data;
        let m = SeriesMeasurements {
            sample_latencies: d.sample_latencies.clone(),
            query_latencies: d.query_latencies.clone(),
            ttft: d.ttft.clone(),
            tpot: d.tpot.clone(),
            token_count: d.token_count,
            queries_issued: outcome.queries_issued,
            max_latency_ns: d.max_latency_ns,
            final_query_scheduled_ns: outcome.final_query_scheduled_ns,
            final_query_issued_ns: outcome.final_query_issued_ns,
            final_query_all_samples_done_ns: d.final_query_done_ns.unwrap_or(d.last_completed_ns),
        };
        // The official LoadGen asks the SUT for its name again when it builds the summary;
        // a failed run keeps the name it has, as the SUT may be unreachable.
        let name = match self.run_error {
            None => self.sut.name().unwrap_or_else(|_| self.sut_name.clone()),
            Some(_) => self.sut_name.clone(),
        };
        Ok(build_report(eff, &m, &name, self.run_error.as_deref()))
    }

    /// Logs what the SUT reports about the run: detail records, and a block
    /// at the end of the summary (before its footer).
    fn sut_report(&mut self) -> Result<(), RunError> {
        let facts = self.sut.report();
        if facts.is_empty() {
            return Ok(());
        }
        let mut block = format!("\n{BANNER}\nSystem under test\n{BANNER}\n");
        for (key, value) in facts {
            // Escaped so that no fact can add lines of its own.
            block.push_str(&format!(
                "{} : {}\n",
                json_escaped(&key),
                json_escaped(&value)
            ));
            self.log(&key, value, here!())?;
        }
        self.summary_out
            .write_all(block.as_bytes())
            .map_err(io_err(&self.summary_path))
    }

    fn write_report(&mut self, report: &PerformanceReport) -> Result<(), RunError> {
        self.summary_out
            .write_all(report.summary.as_bytes())
            .map_err(io_err(&self.summary_path))?;
        for (key, value) in &report.detail {
            self.log(key, value.clone(), here!())?;
        }
        let errors = self.detail.errors();
        self.log("num_errors", errors, here!())?;
        self.performance = Some(PerformanceResult {
            valid: report.valid,
            summary: report.summary.clone(),
        });
        Ok(())
    }

    /// FindPeakPerformance (`loadgen.cc`, `FindPeakPerformanceMode`, `FindBoundaries`, `FindPeakPerformanceBinarySearch`): widen, then bisect the Server QPS.
    fn find_peak(&mut self, eff: &EffectiveSettings) -> Result<(), RunError> {
        if eff.scenario != Scenario::Server {
            return self.log(
                "error_invalid_config",
                "Finding peak performance is only supported in Server scenarios.",
                here!(),
            );
        }
        self.log(
            "generic_message",
            "Starting FindPeakPerformance mode",
            here!(),
        )?;
        let Some(set) = self.performance_set(eff)? else {
            return Ok(());
        };
        let at = |qps: f64| EffectiveSettings {
            target_qps: qps,
            ..eff.clone()
        };

        self.log(
            "generic_message",
            format!(
                "FindPeakPerformance: Check validity of the base settings field: {}",
                fixed6(eff.target_qps)
            ),
            here!(),
        )?;
        if !self.load(&set)? {
            return Ok(());
        }
        let base = self.performance_run(eff, &set)?;
        if !base.perf_constraints_met || self.run_error.is_some() {
            self.log(
                "error_runtime",
                "FindPeakPerformance: Initial lower bound does not satisfy performance constraints, msg: Reduce target QPS to improve latency.",
                here!(),
            )?;
            self.write_report(&base)?;
            return self.unload(&set);
        }
        self.unload(&set)?;

        let mut lower = eff.target_qps;
        let mut best = base;
        let mut upper;
        loop {
            upper = lower * (1.0 + eff.server_find_peak_qps_boundary_step_size);
            self.log(
                "generic_message",
                format!(
                    "FindBoundaries: Checking fields [{}, {})",
                    fixed6(lower),
                    fixed6(upper)
                ),
                here!(),
            )?;
            if !self.load(&set)? {
                return Ok(());
            }
            let r = self.performance_run(&at(upper), &set)?;
            self.unload(&set)?;
            if self.run_error.is_some() {
                return self.write_report(&r);
            }
            if !r.perf_constraints_met {
                break;
            }
            lower = upper;
            best = r;
        }
        self.log(
            "generic_message",
            format!(
                "FindPeakPerformance: Found boundaries: [{}, {})",
                fixed6(lower),
                fixed6(upper)
            ),
            here!(),
        )?;
        if !self.load(&set)? {
            return Ok(());
        }
        let scale = 10f64.powi(eff.server_find_peak_qps_decimals_of_precision);
        while (lower * scale).floor() + 1.0 < (upper * scale).floor() {
            let mid = lower + (upper - lower) / 2.0;
            self.log(
                "generic_message",
                format!(
                    "FindPeakPerformanceBinarySearch: Testing the mid value of bounds [{}, {}): {}",
                    fixed6(lower),
                    fixed6(upper),
                    fixed6(mid)
                ),
                here!(),
            )?;
            let r = self.performance_run(&at(mid), &set)?;
            if self.run_error.is_some() {
                best = r;
                break;
            }
            if r.perf_constraints_met {
                lower = mid;
                best = r;
            } else {
                upper = mid;
            }
        }
        self.log(
            "generic_message",
            format!(
                "FindPeakPerformance: Found peak performance field: {}",
                fixed6(lower)
            ),
            here!(),
        )?;
        self.write_report(&best)?;
        self.unload(&set)
    }

    /// Generates and issues one series of queries, then waits for all answers.
    fn run_series(
        &mut self,
        eff: &EffectiveSettings,
        set: &LoadableSet,
        kind: RunKind,
    ) -> Result<SeriesOutcome, RunError> {
        let accuracy = kind == RunKind::Accuracy;
        let plan = QueryGenerator::plan(eff, set, kind);
        self.log_plan(&plan)?;
        let completer = self.completer();
        completer.send(Event::Control(Control::BeginSeries(series_config(
            eff,
            plan.samples_per_query,
            kind,
        ))));

        let issued = Issuer {
            sut: self.sut,
            clock: &*self.clock,
            completer: &completer,
            sequencer: &mut self.sequencer,
            live: &self.live,
            issued_before: self.issued_total,
        }
        .run(eff, set, kind);
        self.issued_total += issued.samples_issued;
        if let Some(stop) = &issued.stop {
            self.log(stop.log_key(), stop.text.clone(), here!())?;
        }
        // Queries generated but never issued still consume sequence ids and
        // accuracy-log draws, as in the official LoadGen's pre-generated list.
        self.sequencer.skip(
            plan.sample_count.saturating_sub(issued.generated_samples),
            plan.query_count.saturating_sub(issued.generated_queries),
        );

        self.sut.flush_queries();
        if !accuracy
            && issued.stop.is_none()
            && !completer.aborted()
            && eff.scenario != Scenario::Server
        {
            self.log(
                "error_runtime",
                "Ending early: Ran out of generated queries to issue before the minimum query count and test duration were reached. Please update the relevant expected latency or target qps in the TestSettings so they are more accurate.",
                here!(),
            )?;
        }
        let data = self.collect_series(&completer, issued.last_query_seq)?;
        self.log_series_end(eff, accuracy, &data, &issued)?;

        Ok(SeriesOutcome {
            data,
            queries_issued: issued.queries_issued,
            final_query_scheduled_ns: issued.last_scheduled_ns - issued.start_ns,
            final_query_issued_ns: issued.last_issued_ns - issued.start_ns,
        })
    }

    /// What the generator will produce, logged before issuing starts.
    fn log_plan(&mut self, plan: &GenerationPlan) -> Result<(), RunError> {
        self.log("generated_query_count", plan.query_count, here!())?;
        self.log(
            "generated_samples_per_query",
            plan.samples_per_query,
            here!(),
        )?;
        self.log("generated_query_duration", plan.duration_ns, here!())?;
        // On disk before issuing starts: a run that is killed or hangs still
        // shows its settings and how far it got.
        self.detail.flush().map_err(io_err(&self.detail_path))
    }

    /// Waits for every answer of the series, then takes its measurements
    /// from the aggregator.
    fn collect_series(
        &mut self,
        completer: &Ring,
        final_query_seq: Option<u64>,
    ) -> Result<SeriesData, RunError> {
        completer.wait_for(self.issued_total);
        if let Some(reason) = completer.abort_reason() {
            if self.run_error.is_none() {
                self.fail(format!("Run aborted: {reason}"), here!())?;
            }
        }
        let (tx, rx) = mpsc::channel();
        completer.send(Event::Control(Control::EndSeries {
            final_query_seq,
            reply: tx,
        }));
        rx.recv()
            .map_err(|_| RunError::Aggregator("it stopped before the series ended".into()))
    }

    /// The records that close a series: invalid responses, the logger's
    /// counters, and the power window.
    fn log_series_end(
        &mut self,
        eff: &EffectiveSettings,
        accuracy: bool,
        data: &SeriesData,
        issued: &Issued,
    ) -> Result<(), RunError> {
        let mut response_errors = 0;
        for e in &data.errors {
            response_errors += 1;
            self.log("error_runtime", e.clone(), here!())?;
        }
        if response_errors > 0 && self.run_error.is_none() {
            self.run_error = Some(format!(
                "{response_errors} invalid responses from the SUT (see the detail log)"
            ));
        }

        for key in [
            "logger_swap_request_slots_retry_count",
            "logger_swap_request_slots_retry_retry_count",
            "logger_swap_request_slots_retry_reencounter_count",
            "logger_start_reading_entries_retry_count",
            "logger_tls_total_log_cas_fail_count",
            "logger_tls_total_swap_buffers_slot_retry_count",
        ] {
            self.log(key, 0u64, here!())?;
        }
        let end_offset =
            Duration::from_nanos((data.last_completed_ns - issued.start_ns).max(0) as u64);
        self.log("power_begin", clock::power_time(issued.start_wall), here!())?;
        self.log(
            "power_end",
            clock::power_time(issued.start_wall + end_offset),
            here!(),
        )?;
        if eff.print_timestamps && !accuracy {
            print_timestamps(issued.start_wall, end_offset);
        }
        Ok(())
    }
}

/// What the aggregator needs to know about a series before it starts.
fn series_config(eff: &EffectiveSettings, samples_per_query: u64, kind: RunKind) -> SeriesConfig {
    let scenario = eff.scenario;
    let use_tokens = eff.use_token_latencies;
    SeriesConfig {
        kind: match kind {
            RunKind::Accuracy => SeriesKind::Accuracy,
            RunKind::Performance => SeriesKind::Performance,
        },
        scenario,
        samples_per_query,
        multi_stream_spq: (scenario == Scenario::MultiStream).then_some(samples_per_query),
        use_tokens,
        first_token_expected: use_tokens && scenario != Scenario::Offline,
        server_trace: scenario == Scenario::Server,
        latency_bounds: (scenario == Scenario::Server).then_some(LatencyBounds {
            latency_ns: eff.target_latency_ns as i64,
            ttft_ns: eff.server_ttft_latency as i64,
            tpot_ns: eff.server_tpot_latency as i64,
        }),
        live_percentile: eff.target_latency_percentile,
    }
}

/// Ring slots needed: every sample of the largest query at once, and for
/// Server a window of outstanding samples large enough for any sane run.
fn ring_capacity(eff: &EffectiveSettings) -> usize {
    let psc = eff.performance_sample_count.max(1) as usize;
    match eff.scenario {
        Scenario::Offline => {
            let perf = eff.samples_per_query as usize + psc;
            let acc = psc.min(eff.accuracy_sample_count.max(1) as usize);
            perf.max(acc) + 1
        }
        Scenario::MultiStream => (eff.samples_per_query as usize * 2).max(1 << 12),
        Scenario::SingleStream => 1 << 12,
        Scenario::Server => 1 << 19,
    }
}

fn print_timestamps(start: SystemTime, duration: Duration) {
    let unix = |t: SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
    };
    let ms = duration.as_millis();
    println!(
        "Loadgen :: Perf mode start. system_clock Timestamp = {}",
        unix(start)
    );
    println!(
        "Loadgen :: Perf mode stop. systme_clock Timestamp = {}",
        unix(start + duration)
    );
    println!("Loadgen :: PerfClock Perf duration = {ms}ms");
    println!("Loadgen :: system_clock Perf duration = {ms}ms");
    println!("Loadgen :: PerfClock/system_clock ratio = {:.4}", 1.0);
}
