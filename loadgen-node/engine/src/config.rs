//! mlperf.conf / user.conf / audit.config (`test_settings_internal.cc`, `TestSettings::FromConfig`; `loadgen.cc`, `StartTest` for audit.config).
//!
//! A config file is a list of `model.scenario.name = value` lines. Parsing and
//! applying are separate steps: [`ConfigFile::parse`] checks the syntax of the
//! whole file (a file with any error is never applied), and
//! [`ConfigFile::apply`] looks up the keys LoadGen understands for one model
//! and scenario and writes them into [`TestSettings`].
//!
//! The quirks of the official LoadGen's parser are kept on purpose, because submitters'
//! files were written against it: `a=1` is one token and silently does
//! nothing, a `#` after a value is an error, integers follow C `strtoul` with
//! base 0 (so `010` is octal) and fractional text given to an integer key is
//! truncated. The number conversions themselves are in `c_number`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::c_number::{is_complete_integer, is_complete_number, strtod, strtoull};
use crate::settings::{EffectiveSettings, Scenario, TestMode, TestSettings};

/// The mlperf.conf compiled into the engine; used unless a file replaces it.
pub(crate) const BUILTIN_MLPERF_CONF: &str = include_str!("../mlperf.conf");

/// Display name of the built-in mlperf.conf in error messages.
pub(crate) const BUILTIN_MLPERF_CONF_NAME: &str = "mlperf.conf (built-in)";

/// Which role a config file plays; decides which keys it may set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConfKind {
    /// The benchmark rules: may also set the seeds, the accuracy-log
    /// probability and the test05 keys.
    MlperfConf,
    /// The submitter's tuning file.
    UserConf,
    /// A compliance test's audit.config (applied with model `*`).
    AuditConfig,
}

/// A problem with a config file. Every variant names the file; syntax errors
/// also give the 1-based line number.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The token after a key is not a lone `=`.
    #[error("{file}:{line}: expected 'key = value' with spaces around '=', found `{found}` after key `{key}`")]
    ExpectedEquals {
        /// The config file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// The key as written.
        key: String,
        /// What follows the key.
        found: String,
    },
    /// A value is not a complete C integer or floating-point number.
    #[error("{file}:{line}: value needs to be integer or double, found `{value}` for key `{key}`{}", comment_hint(.value))]
    NotANumber {
        /// The config file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// The key as written.
        key: String,
        /// The value as written.
        value: String,
    },
    /// The `mode` key holds something other than 0..=3. All other keys of
    /// the file were still applied and the mode was left unchanged.
    #[error("{file}:{line}: Invalid value passed to Mode key in config: `{key} = {value}` (expected 0 = SubmissionRun, 1 = AccuracyOnly, 2 = PerformanceOnly, 3 = FindPeakPerformance)")]
    InvalidMode {
        /// The config file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// The key as written.
        key: String,
        /// The value as written.
        value: String,
    },
    /// A value the official LoadGen would accept but that would make the run hang,
    /// overflow or allocate without bound, or an integer setting whose text
    /// C's `strtoull` reads only in part (`1e10` is 1 to it).
    #[error("{file}:{line}: `{key} = {value}` is out of range: {name} must be {accepted}")]
    OutOfRange {
        /// The config file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// The key as written.
        key: String,
        /// The value as written.
        value: String,
        /// The setting's name.
        name: &'static str,
        /// The values the setting accepts.
        accepted: String,
    },
    /// A user.conf key whose last part is no setting LoadGen knows.
    #[error("{file}:{line}: unknown setting `{name}` in key `{key}`; known settings: {}", KEYS.join(", "))]
    UnknownKey {
        /// The config file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// The key as written.
        key: String,
        /// The setting's name.
        name: String,
    },
    /// Settings that are each in range but together ask for too much.
    #[error("{0}")]
    TooLarge(String),
    /// The file could not be opened or read.
    #[error("cannot open config file {}: {cause}", .path.display())]
    NotFound {
        /// The file asked for.
        path: PathBuf,
        /// Why it could not be read.
        cause: io::Error,
    },
    /// A file with syntax errors; nothing from it was applied.
    #[error("{}", list_errors(.file, .errors))]
    Invalid {
        /// The config file.
        file: String,
        /// Every syntax error of the file.
        errors: Vec<ConfigError>,
    },
}

fn comment_hint(value: &str) -> &'static str {
    if value.starts_with('#') {
        " (a comment must be on a line of its own, or directly after the key)"
    } else {
        ""
    }
}

fn list_errors(file: &str, errors: &[ConfigError]) -> String {
    let mut out = format!(
        "{file}: {} error(s), nothing from this file was applied",
        errors.len()
    );
    for e in errors {
        let _ = write!(out, "\n  {e}");
    }
    out
}

impl ConfigError {
    /// True for errors in the text of a file (the official LoadGen's `-EINVAL`).
    pub fn is_syntax(&self) -> bool {
        matches!(
            self,
            ConfigError::ExpectedEquals { .. }
                | ConfigError::NotANumber { .. }
                | ConfigError::Invalid { .. }
        )
    }

    /// True when the file could not be opened (the official LoadGen's `-ENOENT`).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ConfigError::NotFound { .. })
    }

    /// The messages the official LoadGen writes to the detail log under
    /// `error_invalid_config`, one per reported problem.
    pub fn detail_messages(&self) -> Vec<String> {
        match self {
            ConfigError::ExpectedEquals { line, .. } => {
                vec![format!("expected 'key=value', line={line}")]
            }
            ConfigError::NotANumber { line, .. } => {
                vec![format!("value needs to be integer or double, line={line}")]
            }
            ConfigError::InvalidMode { .. } => {
                vec!["Invalid value passed to Mode key in config.".to_string()]
            }
            ConfigError::NotFound { path, .. } => {
                vec![format!("can't open file {}", path.display())]
            }
            ConfigError::Invalid { errors, .. } => {
                errors.iter().flat_map(|e| e.detail_messages()).collect()
            }
            other => vec![other.to_string()],
        }
    }
}

/// One stored `key = value` pair and the line that set it last.
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    value: String,
    line: usize,
}

/// A syntactically valid config file: its keys and their value texts.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigFile {
    name: String,
    entries: HashMap<String, Entry>,
}

/// Whitespace as C `isspace` sees it in the "C" locale.
fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

impl ConfigFile {
    /// Parses config text. `name` is used in error messages. Every line is
    /// checked, so all syntax errors are reported together.
    pub fn parse(name: &str, text: &str) -> Result<ConfigFile, Vec<ConfigError>> {
        let mut entries = HashMap::new();
        let mut errors = Vec::new();
        for (idx, line) in text.split('\n').enumerate() {
            let line_no = idx + 1;
            // 0 = expect key, 1 = expect '=', 2 = expect value(s).
            let mut state = 0;
            let mut key = "";
            for token in line.split(is_c_space).filter(|t| !t.is_empty()) {
                match state {
                    0 | 1 if token == "#" => break,
                    0 => {
                        key = token;
                        state = 1;
                    }
                    1 if token == "=" => state = 2,
                    1 => {
                        errors.push(ConfigError::ExpectedEquals {
                            file: name.to_string(),
                            line: line_no,
                            key: key.to_string(),
                            found: token.to_string(),
                        });
                        break;
                    }
                    _ => {
                        if !is_complete_number(token) {
                            errors.push(ConfigError::NotANumber {
                                file: name.to_string(),
                                line: line_no,
                                key: key.to_string(),
                                value: token.to_string(),
                            });
                            break;
                        }
                        // Stay in state 2: of `a = 1 2` the last value wins.
                        entries.insert(
                            key.to_string(),
                            Entry {
                                value: token.to_string(),
                                line: line_no,
                            },
                        );
                    }
                }
            }
        }
        if errors.is_empty() {
            Ok(ConfigFile {
                name: name.to_string(),
                entries,
            })
        } else {
            Err(errors)
        }
    }

    /// Reads and parses a file. Syntax errors come back as
    /// [`ConfigError::Invalid`] holding every error of the file.
    pub fn read(path: impl AsRef<Path>) -> Result<ConfigFile, ConfigError> {
        let path = path.as_ref();
        let bytes =
            crate::disk::read_bounded(path, crate::disk::MAX_TEXT_FILE).map_err(|cause| {
                ConfigError::NotFound {
                    path: path.to_path_buf(),
                    cause,
                }
            })?;
        // Byte-oriented like the official LoadGen: invalid UTF-8 can only be in keys or
        // values, which then fail to match or to parse as numbers.
        let text = String::from_utf8_lossy(&bytes);
        let name = path.display().to_string();
        ConfigFile::parse(&name, &text)
            .map_err(|errors| ConfigError::Invalid { file: name, errors })
    }

    /// The built-in mlperf.conf.
    pub fn builtin() -> Result<ConfigFile, ConfigError> {
        ConfigFile::parse(BUILTIN_MLPERF_CONF_NAME, BUILTIN_MLPERF_CONF).map_err(|errors| {
            ConfigError::Invalid {
                file: BUILTIN_MLPERF_CONF_NAME.to_string(),
                errors,
            }
        })
    }

    /// The name used in error messages (the path for files read from disk).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The value text stored for a full key such as `*.Server.target_qps`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.get(key).map(|e| e.value.as_str())
    }

    /// Every key and its value text, in no particular order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries
            .iter()
            .map(|(k, e)| (k.as_str(), e.value.as_str()))
    }

    /// The models the file names in its keys (`*` left out), sorted.
    pub fn models(&self) -> Vec<&str> {
        let mut models: Vec<&str> = self
            .entries
            .keys()
            // model.scenario.name, where only the model may hold dots
            // (wan-2.2-t2v-a14b).
            .filter_map(|k| k.rsplitn(3, '.').nth(2))
            .filter(|m| *m != "*")
            .collect();
        models.sort_unstable();
        models.dedup();
        models
    }

    /// Number of distinct keys in the file.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the file sets nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Finds `name` for `model` under `scenario`; the most specific key wins,
    /// and a scenario wildcard beats a model wildcard.
    fn lookup(&self, model: &str, scenario: &str, name: &str) -> Option<(String, &Entry)> {
        [
            format!("{model}.{scenario}.{name}"),
            format!("*.{scenario}.{name}"),
            format!("{model}.*.{name}"),
            format!("*.*.{name}"),
        ]
        .into_iter()
        .find_map(|k| self.entries.get(&k).map(|e| (k, e)))
    }

    /// Writes the keys LoadGen understands into `settings`, in the
    /// order of `TestSettings::FromConfig`. Keys only mlperf.conf may set are skipped for the
    /// other kinds. The scenario of `settings` is never changed; `scenario`
    /// only selects which keys match.
    ///
    /// An invalid `mode` value is reported as [`ConfigError::InvalidMode`]
    /// after every other key was applied, as the official LoadGen carries on past it.
    pub fn apply(
        &self,
        settings: &mut TestSettings,
        model: &str,
        scenario: Scenario,
        kind: ConfKind,
    ) -> Result<(), ConfigError> {
        let run = scenario.as_str();
        let ss = Scenario::SingleStream.as_str();
        let ms = Scenario::MultiStream.as_str();
        let server = Scenario::Server.as_str();
        let offline = Scenario::Offline.as_str();
        let rules = kind == ConfKind::MlperfConf;

        let int = |scope: &str, name: &str| {
            self.lookup(model, scope, name)
                .map(|(_, e)| strtoull(&e.value))
        };
        let float = |scope: &str, name: &str| {
            self.lookup(model, scope, name)
                .map(|(_, e)| strtod(&e.value))
        };
        // Integer keys in ms that are stored in ns: integer text × 10^6.
        let int_ms = |scope: &str, name: &str| int(scope, name).map(|v| v.wrapping_mul(1_000_000));

        let mut mode_error = None;
        if let Some((key, e)) = self.lookup(model, run, "mode") {
            match TestMode::from_config_value(strtoull(&e.value)) {
                Some(m) => settings.mode = m,
                None => {
                    mode_error = Some(ConfigError::InvalidMode {
                        file: self.name.clone(),
                        line: e.line,
                        key,
                        value: e.value.clone(),
                    })
                }
            }
        }

        if rules {
            set(&mut settings.qsl_rng_seed, int(run, "qsl_rng_seed"));
            set(
                &mut settings.sample_index_rng_seed,
                int(run, "sample_index_rng_seed"),
            );
            set(
                &mut settings.schedule_rng_seed,
                int(run, "schedule_rng_seed"),
            );
            set(
                &mut settings.accuracy_log_probability,
                float(run, "accuracy_log_probability").map(|v| v * 0.01),
            );
            set(&mut settings.test05, int(run, "test05").map(|v| v == 1));
            set(
                &mut settings.test05_qsl_rng_seed,
                int(run, "test05_qsl_rng_seed"),
            );
            set(
                &mut settings.test05_sample_index_rng_seed,
                int(run, "test05_sample_index_rng_seed"),
            );
            set(
                &mut settings.test05_schedule_rng_seed,
                int(run, "test05_schedule_rng_seed"),
            );
        }

        set(
            &mut settings.use_token_latencies,
            int(run, "use_token_latencies").map(|v| v == 1),
        );
        // The token limits only count when token latencies are on, so they
        // are only read then (whichever file turned them on).
        if settings.use_token_latencies {
            set(
                &mut settings.server_ttft_latency,
                int_ms(server, "ttft_latency"),
            );
            set(
                &mut settings.server_tpot_latency,
                int_ms(server, "tpot_latency"),
            );
        }
        set(
            &mut settings.infer_token_latencies,
            int(run, "infer_token_latencies").map(|v| v == 1),
        );
        if settings.infer_token_latencies {
            set(
                &mut settings.token_latency_scaling_factor,
                int(run, "token_latency_scaling_factor"),
            );
        }

        // Scenario-specific keys are read under their own scenario name,
        // whatever scenario is run.
        set(
            &mut settings.single_stream_target_latency_percentile,
            float(ss, "target_latency_percentile").map(|v| v * 0.01),
        );
        set(
            &mut settings.multi_stream_target_latency_percentile,
            float(ms, "target_latency_percentile").map(|v| v * 0.01),
        );
        set(
            &mut settings.multi_stream_samples_per_query,
            int(ms, "samples_per_query"),
        );
        set(
            &mut settings.server_target_latency_percentile,
            float(server, "target_latency_percentile").map(|v| v * 0.01),
        );
        set(
            &mut settings.server_target_latency_ns,
            int_ms(server, "target_latency"),
        );

        set(
            &mut settings.performance_issue_unique,
            int(run, "performance_issue_unique").map(|v| v != 0),
        );
        set(
            &mut settings.performance_issue_same,
            int(run, "performance_issue_same").map(|v| v != 0),
        );
        set(
            &mut settings.performance_issue_same_index,
            int(run, "performance_issue_same_index"),
        );
        set(
            &mut settings.sample_concatenate_permutation,
            int(run, "sample_concatenate_permutation").map(|v| v == 1),
        );
        set(
            &mut settings.server_coalesce_queries,
            int(server, "coalesce_queries").map(|v| v != 0),
        );
        // The official LoadGen passes this one through a C `int`: only the low 32 bits
        // count, and negative values sign-extend.
        set(
            &mut settings.server_max_async_queries,
            int(server, "max_async_queries").map(|v| v as u32 as i32 as i64 as u64),
        );

        set(&mut settings.min_duration_ms, int(run, "min_duration"));
        set(&mut settings.max_duration_ms, int(run, "max_duration"));
        set(&mut settings.min_query_count, int(run, "min_query_count"));
        set(&mut settings.max_query_count, int(run, "max_query_count"));
        set(
            &mut settings.performance_sample_count_override,
            int(run, "performance_sample_count_override"),
        );
        set(
            &mut settings.accuracy_sample_count_override,
            int(run, "accuracy_sample_count_override"),
        );

        // Expected latencies are doubles, so fractional ms survive here
        // (unlike the Server target_latency above).
        set(
            &mut settings.single_stream_expected_latency_ns,
            float(ss, "target_latency").map(|v| v * 1_000_000.0),
        );
        set(
            &mut settings.multi_stream_expected_latency_ns,
            float(ms, "target_latency").map(|v| v * 1_000_000.0),
        );
        set(&mut settings.server_target_qps, float(server, "target_qps"));
        set(
            &mut settings.offline_expected_qps,
            float(offline, "target_qps"),
        );

        set(
            &mut settings.print_timestamps,
            int(run, "print_timestamps").map(|v| v != 0),
        );
        set(
            &mut settings.accuracy_log_rng_seed,
            int(run, "accuracy_log_rng_seed"),
        );
        set(
            &mut settings.accuracy_log_sampling_target,
            int(run, "accuracy_log_sampling_target"),
        );

        match mode_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The longest duration a setting may ask for: a year, in ms.
pub(crate) const MAX_DURATION_MS: u64 = 365 * 24 * 3600 * 1000;

/// The most samples one run may plan to issue in a query (Offline) or in
/// total (its minimum sample count), whatever the machine: walking the plan
/// of queries before the run (as the official LoadGen generates them) takes
/// seconds per billion.
pub(crate) const MAX_PLANNED_SAMPLES: f64 = 1e9;

/// Bookkeeping bytes per sample planned, with room to spare: its slot in
/// the ring of samples in flight (48), its place in its query and in the
/// QDL's queue. (An Offline query of 11 million samples took 110 bytes per
/// sample in all.) What the samples of a run's plan need must fit in the
/// machine's memory: the caller reads the machine and hands its memory in
/// (`memory` below; `None` where it cannot tell).
pub const PLANNED_SAMPLE_BYTES: u64 = 128;

/// The most samples a plan may hold on a machine of `memory` bytes (`None`:
/// unknown): what their bookkeeping fits in, and [`MAX_PLANNED_SAMPLES`].
pub fn max_planned_samples(memory: Option<u64>) -> u64 {
    let cap = MAX_PLANNED_SAMPLES as u64;
    memory.map_or(cap, |m| (m / PLANNED_SAMPLE_BYTES).min(cap))
}

/// What bounds [`max_planned_samples`], for messages.
fn planned_samples_bound(memory: Option<u64>) -> String {
    match memory {
        Some(m) if m / PLANNED_SAMPLE_BYTES < MAX_PLANNED_SAMPLES as u64 => format!(
            "what this machine's {:.1} GiB of memory holds, at {PLANNED_SAMPLE_BYTES} bytes of \
             bookkeeping a sample",
            m as f64 / (1u64 << 30) as f64
        ),
        _ => format!("a run's limit of {MAX_PLANNED_SAMPLES:e} samples"),
    }
}

/// Refuses a run whose effective settings (the config files' and flags',
/// then the audit config's and the QSL's sizes) plan more samples than
/// [`max_planned_samples`] on a machine of `memory` bytes.
pub fn check_planned(eff: &EffectiveSettings, memory: Option<u64>) -> Result<(), String> {
    let most = max_planned_samples(memory);
    if eff.planned_samples() <= most {
        return Ok(());
    }
    Err(format!(
        "the run plans {} samples (min_query_count {}, samples_per_query {}, \
         performance_sample_count {}), more than the {most} a run can keep track of ({}); \
         lower them",
        eff.planned_samples(),
        eff.min_query_count,
        eff.samples_per_query,
        eff.performance_sample_count,
        planned_samples_bound(memory)
    ))
}

/// How a checked value must look.
#[derive(Clone, Copy)]
enum Accepted {
    /// An integer count of ms up to [`MAX_DURATION_MS`].
    DurationMs,
    /// A finite number in `min..=max`, of `unit`.
    Float {
        min: f64,
        max: f64,
        unit: &'static str,
    },
    /// An integer in `min..=max`.
    Int { min: u64, max: u64 },
    /// An integer count of samples, up to what the machine's memory holds
    /// ([`max_planned_samples`]).
    Samples,
}

impl Accepted {
    fn holds(self, text: &str, memory: Option<u64>) -> bool {
        let int_in = |min: u64, max: u64| {
            is_complete_integer(text)
                && !text.starts_with('-')
                && (min..=max).contains(&strtoull(text))
        };
        match self {
            Accepted::DurationMs => int_in(0, MAX_DURATION_MS),
            Accepted::Float { min, max, .. } => {
                let v = strtod(text);
                v.is_finite() && (min..=max).contains(&v)
            }
            Accepted::Int { min, max } => int_in(min, max),
            Accepted::Samples => int_in(0, max_planned_samples(memory)),
        }
    }

    /// What the setting accepts, for `text` (which it does not hold).
    fn describe(self, text: &str, memory: Option<u64>) -> String {
        let range = match self {
            Accepted::DurationMs => {
                format!("an integer from 0 to {MAX_DURATION_MS} (ms, a year)")
            }
            Accepted::Float { min, max, unit } => format!("a number from {min} to {max} ({unit})"),
            Accepted::Int { min, max } => format!("an integer from {min} to {max}"),
            Accepted::Samples => format!(
                "an integer from 0 to {} ({})",
                max_planned_samples(memory),
                planned_samples_bound(memory)
            ),
        };
        let integer = !matches!(self, Accepted::Float { .. });
        if integer && !is_complete_integer(text) && is_complete_number(text) {
            // Within range perhaps, but not what it would be read as.
            return format!(
                "{range}, written as one: C's strtoull, through which the official LoadGen \
                 reads it, stops at the first character that is not a digit and reads `{text}` \
                 as {}",
                strtoull(text)
            );
        }
        range
    }
}

/// The keys whose values the official LoadGen takes as they come although some of them
/// make a run hang (a zero or negative rate, a negative duration that wraps
/// to centuries), overflow or allocate without bound; with the range each
/// must be in. `Some(scenario)`: the key only matters when that scenario runs.
const CHECKED: &[(&str, Option<Scenario>, Accepted)] = &[
    ("min_duration", None, Accepted::DurationMs),
    ("max_duration", None, Accepted::DurationMs),
    ("min_query_count", None, Accepted::Samples),
    ("performance_sample_count_override", None, Accepted::Samples),
    (
        "target_qps",
        Some(Scenario::Server),
        Accepted::Float {
            min: 1e-3,
            max: 1e8,
            unit: "queries per second",
        },
    ),
    (
        "target_qps",
        Some(Scenario::Offline),
        Accepted::Float {
            min: 1e-3,
            max: 1e8,
            unit: "samples per second",
        },
    ),
    (
        "target_latency",
        Some(Scenario::SingleStream),
        Accepted::Float {
            min: 1e-3,
            max: MAX_DURATION_MS as f64,
            unit: "ms",
        },
    ),
    (
        "target_latency",
        Some(Scenario::MultiStream),
        Accepted::Float {
            min: 1e-3,
            max: MAX_DURATION_MS as f64,
            unit: "ms",
        },
    ),
    (
        "target_latency",
        Some(Scenario::Server),
        Accepted::DurationMs,
    ),
    ("ttft_latency", Some(Scenario::Server), Accepted::DurationMs),
    ("tpot_latency", Some(Scenario::Server), Accepted::DurationMs),
    (
        "samples_per_query",
        Some(Scenario::MultiStream),
        Accepted::Int {
            min: 1,
            max: 1_000_000,
        },
    ),
];

/// What an audit.config may set beyond [`CHECKED`]: the keys a user.conf may
/// not hold but the audit tests do (a bad mode in a user.conf is reported
/// the official LoadGen's way instead).
const AUDIT_CHECKED: &[(&str, Accepted)] = &[
    // SubmissionRun, AccuracyOnly, PerformanceOnly, FindPeakPerformance.
    ("mode", Accepted::Int { min: 0, max: 3 }),
    (
        "accuracy_log_probability",
        Accepted::Float {
            min: 0.0,
            max: 100.0,
            unit: "percent",
        },
    ),
];

impl ConfigFile {
    /// Checks an audit.config's values as `--set`'s are checked (the audit
    /// tests' keys too: mode, accuracy_log_probability), for a run of
    /// `scenario` on a machine of `memory` bytes: the engines apply it with
    /// model `*`. Keys it does not know are left alone, as the engines
    /// leave them.
    pub fn check_audit_values(
        &self,
        scenario: Scenario,
        memory: Option<u64>,
    ) -> Result<(), ConfigError> {
        let mut errors = match self.check_values("*", scenario, memory) {
            Ok(()) => Vec::new(),
            Err(ConfigError::Invalid { errors, .. }) => errors,
            Err(e) => vec![e],
        };
        for &(name, accepted) in AUDIT_CHECKED {
            if let Some((key, e)) = self.lookup("*", scenario.as_str(), name) {
                if !accepted.holds(&e.value, memory) {
                    errors.push(ConfigError::OutOfRange {
                        file: self.name.clone(),
                        line: e.line,
                        key,
                        value: e.value.clone(),
                        name,
                        accepted: accepted.describe(&e.value, memory),
                    });
                }
            }
        }
        errors.sort_by_key(|e| match e {
            ConfigError::OutOfRange { line, .. } => *line,
            _ => 0,
        });
        self.errors_or_ok(errors)
    }

    /// Checks the values that `apply` would use for `model` run as
    /// `scenario` against the ranges a run can honour on a machine of
    /// `memory` bytes (`None`: unknown). Every problem is reported, each
    /// with the file, line, key and accepted range.
    pub fn check_values(
        &self,
        model: &str,
        scenario: Scenario,
        memory: Option<u64>,
    ) -> Result<(), ConfigError> {
        let mut errors = Vec::new();
        for &(name, only, accepted) in CHECKED {
            if only.is_some_and(|s| s != scenario) {
                continue;
            }
            let scope = only.unwrap_or(scenario).as_str();
            if let Some((key, e)) = self.lookup(model, scope, name) {
                if !accepted.holds(&e.value, memory) {
                    errors.push(ConfigError::OutOfRange {
                        file: self.name.clone(),
                        line: e.line,
                        key,
                        value: e.value.clone(),
                        name,
                        accepted: accepted.describe(&e.value, memory),
                    });
                }
            }
        }
        errors.sort_by_key(|e| match e {
            ConfigError::OutOfRange { line, .. } => *line,
            _ => 0,
        });
        self.errors_or_ok(errors)
    }

    /// Refuses keys whose last part is no setting LoadGen knows (a typo
    /// would otherwise be ignored silently, as the official LoadGen does).
    pub fn check_known_keys(&self) -> Result<(), ConfigError> {
        let mut unknown: Vec<(&String, &Entry)> = self
            .entries
            .iter()
            .filter(|(k, _)| {
                let name = k.rsplit('.').next().unwrap_or(k);
                !KEYS.contains(&name) && !UNREAD_KEYS.contains(&name)
            })
            .collect();
        unknown.sort_by_key(|(_, e)| e.line);
        let errors = unknown
            .into_iter()
            .map(|(k, e)| ConfigError::UnknownKey {
                file: self.name.clone(),
                line: e.line,
                key: k.clone(),
                name: k.rsplit('.').next().unwrap_or(k).to_string(),
            })
            .collect();
        self.errors_or_ok(errors)
    }

    fn errors_or_ok(&self, mut errors: Vec<ConfigError>) -> Result<(), ConfigError> {
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(ConfigError::Invalid {
                file: self.name.clone(),
                errors,
            }),
        }
    }
}

/// Refuses settings that are each in range but together plan more samples
/// than a run can keep track of on the machine (see
/// [`max_planned_samples`]): the queries a run generates until both its
/// minimum duration and its minimum count are reached (twice the duration
/// at the expected latency for SingleStream and MultiStream, as the official
/// LoadGen plans them), their samples, or an Offline query of target_qps ×
/// min_duration, on a machine of `memory` bytes (`None`: unknown).
pub fn check_scale(s: &TestSettings, memory: Option<u64>) -> Result<(), ConfigError> {
    let seconds = s.min_duration_ms as f64 / 1000.0;
    let count = s.min_query_count as f64;
    let (planned, from) = match s.scenario {
        Scenario::Offline => (
            (1.1 * seconds * s.offline_expected_qps).max(count),
            format!(
                "target_qps {}, min_duration {} ms and min_query_count {}",
                s.offline_expected_qps, s.min_duration_ms, s.min_query_count
            ),
        ),
        Scenario::Server => (
            (seconds * s.server_target_qps).max(count),
            format!(
                "target_qps {}, min_duration {} ms and min_query_count {}",
                s.server_target_qps, s.min_duration_ms, s.min_query_count
            ),
        ),
        Scenario::MultiStream => (
            (2.0 * seconds * 1e9 / s.multi_stream_expected_latency_ns).max(count)
                * s.multi_stream_samples_per_query as f64,
            format!(
                "min_duration {} ms, target_latency {} ms, min_query_count {} and \
                 samples_per_query {}",
                s.min_duration_ms,
                s.multi_stream_expected_latency_ns / 1e6,
                s.min_query_count,
                s.multi_stream_samples_per_query
            ),
        ),
        Scenario::SingleStream => (
            (2.0 * seconds * 1e9 / s.single_stream_expected_latency_ns).max(count),
            format!(
                "min_duration {} ms, target_latency {} ms and min_query_count {}",
                s.min_duration_ms,
                s.single_stream_expected_latency_ns / 1e6,
                s.min_query_count
            ),
        ),
    };
    let most = max_planned_samples(memory);
    if planned.is_nan() || planned > most as f64 {
        return Err(ConfigError::TooLarge(format!(
            "{}: {from} plan {planned:.3e} samples, more than the {most} a run can keep track \
             of ({}); lower one of them",
            s.scenario.as_str(),
            planned_samples_bound(memory)
        )));
    }
    Ok(())
}

/// Every key `apply` understands (the last part of `model.scenario.key`).
pub const KEYS: &[&str] = &[
    "mode",
    "qsl_rng_seed",
    "sample_index_rng_seed",
    "schedule_rng_seed",
    "accuracy_log_probability",
    "test05",
    "test05_qsl_rng_seed",
    "test05_sample_index_rng_seed",
    "test05_schedule_rng_seed",
    "use_token_latencies",
    "ttft_latency",
    "tpot_latency",
    "infer_token_latencies",
    "token_latency_scaling_factor",
    "target_latency_percentile",
    "samples_per_query",
    "target_latency",
    "performance_issue_unique",
    "performance_issue_same",
    "performance_issue_same_index",
    "sample_concatenate_permutation",
    "coalesce_queries",
    "max_async_queries",
    "min_duration",
    "max_duration",
    "min_query_count",
    "max_query_count",
    "performance_sample_count_override",
    "accuracy_sample_count_override",
    "target_qps",
    "print_timestamps",
    "accuracy_log_rng_seed",
    "accuracy_log_sampling_target",
];

/// Keys the official mlperf.conf holds that LoadGen does not read; a
/// user.conf copied from it may hold them too.
pub(crate) const UNREAD_KEYS: &[&str] = &["target_duration"];

/// Keys only an mlperf.conf may set (the rules' seeds and sampling); a
/// user.conf line with one of them is ignored, as the official LoadGen does.
pub const MLPERF_CONF_KEYS: &[&str] = &[
    "qsl_rng_seed",
    "sample_index_rng_seed",
    "schedule_rng_seed",
    "accuracy_log_probability",
    "test05",
    "test05_qsl_rng_seed",
    "test05_sample_index_rng_seed",
    "test05_schedule_rng_seed",
];

fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *field = v;
    }
}

/// Applies an audit.config the way the engine does at test start: with model
/// `*` (so only `*.` keys match) and the settings' own scenario.
pub fn apply_audit(settings: &mut TestSettings, file: &ConfigFile) -> Result<(), ConfigError> {
    let scenario = settings.scenario;
    file.apply(settings, "*", scenario, ConfKind::AuditConfig)
}

/// Where the settings of a command-line run come from.
#[derive(Clone, Debug, PartialEq)]
pub struct SettingsSources {
    /// The model whose keys apply (`model.Scenario.key`).
    pub model: String,
    /// The scenario whose keys apply.
    pub scenario: Scenario,
    /// Replaces the built-in mlperf.conf as a whole; `None` = built-in.
    pub mlperf_conf: Option<PathBuf>,
    /// The user.conf applied over mlperf.conf; `None` = none.
    pub user_conf: Option<PathBuf>,
    /// Wins over any `mode` key of the config files.
    pub mode: Option<TestMode>,
    /// The memory of the machine the run is for, which bounds the counts
    /// the files may ask for; `None`: unknown.
    pub memory: Option<u64>,
}

impl SettingsSources {
    /// Defaults < mlperf.conf < user.conf < explicit mode. The scenario is
    /// set first and never changed by the files.
    pub fn resolve(&self) -> Result<TestSettings, ConfigError> {
        let mut settings = TestSettings {
            scenario: self.scenario,
            ..TestSettings::default()
        };
        let rules = match &self.mlperf_conf {
            Some(path) => ConfigFile::read(path)?,
            None => ConfigFile::builtin()?,
        };
        rules.apply(
            &mut settings,
            &self.model,
            self.scenario,
            ConfKind::MlperfConf,
        )?;
        if self.mlperf_conf.is_some() {
            rules.check_values(&self.model, self.scenario, self.memory)?;
        }
        if let Some(path) = &self.user_conf {
            let user = ConfigFile::read(path)?;
            user.check_known_keys()?;
            user.check_values(&self.model, self.scenario, self.memory)?;
            user.apply(
                &mut settings,
                &self.model,
                self.scenario,
                ConfKind::UserConf,
            )?;
        }
        if let Some(mode) = self.mode {
            settings.mode = mode;
        }
        check_scale(&settings, self.memory)?;
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ConfigFile, Vec<ConfigError>> {
        ConfigFile::parse("user.conf", text)
    }

    #[test]
    fn builtin_parses() {
        let f = ConfigFile::builtin().expect("built-in mlperf.conf must parse");
        assert_eq!(f.get("*.*.qsl_rng_seed"), Some("2085463073848966840"));
        assert!(f.len() > 100);
        let models = f.models();
        for m in ["resnet50", "wan-2.2-t2v-a14b", "llama3_1-8b", "yolo"] {
            assert!(models.contains(&m), "{m}: {models:?}");
        }
        assert!(!models.contains(&"*") && !models.contains(&"wan-2"));
    }

    #[test]
    fn line_syntax() {
        let f = parse("a=1\nb = 2\n# c = 3\nd = \ne # = 4\n f  =  0x10 \t\r\ng = 1 2\n").unwrap();
        assert_eq!(f.get("a=1"), None);
        assert_eq!(f.get("b"), Some("2"));
        assert_eq!(f.get("c"), None);
        assert_eq!(f.get("d"), None);
        assert_eq!(f.get("e"), None);
        assert_eq!(f.get("f"), Some("0x10"));
        assert_eq!(f.get("g"), Some("2"));
        assert_eq!(f.len(), 3);
    }

    #[test]
    fn all_errors_reported_with_lines() {
        let errs = parse("a = 1 # x\nok = 1\nb =2\nc = abc\nd = 1 =\n").unwrap_err();
        let lines: Vec<_> =
            errs.iter()
                .map(|e| match e {
                    ConfigError::ExpectedEquals { line, .. }
                    | ConfigError::NotANumber { line, .. } => *line,
                    _ => 0,
                })
                .collect();
        assert_eq!(lines, [1, 3, 4, 5]);
        let msg = errs[0].to_string();
        assert!(
            msg.starts_with("user.conf:1: value needs to be integer or double"),
            "{msg}"
        );
        assert!(msg.contains("comment"), "{msg}");
        assert_eq!(
            errs[1].to_string(),
            "user.conf:3: expected 'key = value' with spaces around '=', found `=2` after key `b`"
        );
        assert_eq!(errs[1].detail_messages(), ["expected 'key=value', line=3"]);
        assert_eq!(
            errs[2].detail_messages(),
            ["value needs to be integer or double, line=4"]
        );
    }

    #[test]
    fn lookup_precedence() {
        let f = parse("*.*.x = 1\nm.*.x = 2\n*.S.x = 3\nm.S.x = 4\n").unwrap();
        assert_eq!(f.lookup("m", "S", "x").unwrap().1.value, "4");
        assert_eq!(f.lookup("n", "S", "x").unwrap().1.value, "3");
        assert_eq!(f.lookup("m", "T", "x").unwrap().1.value, "2");
        assert_eq!(f.lookup("n", "T", "x").unwrap().1.value, "1");
        assert!(f.lookup("n", "T", "y").is_none());
    }

    #[test]
    fn invalid_mode_applies_everything_else() {
        let f = parse("*.*.mode = 7\n*.*.min_query_count = 5\n").unwrap();
        let mut s = TestSettings::default();
        let err = f
            .apply(&mut s, "m", Scenario::Offline, ConfKind::UserConf)
            .unwrap_err();
        assert_eq!(s.mode, TestMode::PerformanceOnly);
        assert_eq!(s.min_query_count, 5);
        assert!(err
            .to_string()
            .starts_with("user.conf:1: Invalid value passed to Mode key"));
        assert_eq!(
            err.detail_messages(),
            ["Invalid value passed to Mode key in config."]
        );
    }

    #[test]
    fn audit_values_are_checked_as_set_values_are() {
        let f = parse(
            "*.*.min_duration = 31536000001\n*.*.mode = 99\n\
             *.*.accuracy_log_probability = nan\n*.*.test09_min_output_tokens = 5\n",
        )
        .unwrap();
        let e = f
            .check_audit_values(Scenario::Server, None)
            .unwrap_err()
            .to_string();
        for want in [
            "user.conf:1: `*.*.min_duration = 31536000001` is out of range",
            "user.conf:2: `*.*.mode = 99` is out of range: mode must be an integer from 0 to 3",
            "user.conf:3: `*.*.accuracy_log_probability = nan` is out of range",
        ] {
            assert!(e.contains(want), "{want}: {e}");
        }
        assert!(!e.contains("test09"), "unknown keys are left alone: {e}");
        let f = parse("*.*.mode = 2\n*.*.accuracy_log_probability = 50\n*.*.min_duration = 600000\n*.*.test07_accuracy_threshold = 0.9\n")
            .unwrap();
        f.check_audit_values(Scenario::SingleStream, None).unwrap();
        let f = parse("*.*.min_duration = 18446744073709551615\n").unwrap();
        assert!(f.check_audit_values(Scenario::MultiStream, None).is_err());
        // A year is in range, but not at a high target: the plan it makes
        // is refused as `--set`'s would be, once the audit is applied.
        let f = parse("*.*.min_duration = 31536000000\n").unwrap();
        f.check_audit_values(Scenario::Server, None).unwrap();
        let mut s = TestSettings {
            scenario: Scenario::Server,
            server_target_qps: 100_000.0,
            ..TestSettings::default()
        };
        apply_audit(&mut s, &f).unwrap();
        let e = check_scale(&s, None).unwrap_err().to_string();
        assert!(e.contains("min_duration 31536000000 ms"), "{e}");
    }

    #[test]
    fn max_async_queries_goes_through_c_int() {
        let f = parse("*.Server.max_async_queries = 0xFFFFFFFF\n").unwrap();
        let mut s = TestSettings::default();
        f.apply(&mut s, "m", Scenario::Server, ConfKind::UserConf)
            .unwrap();
        assert_eq!(s.server_max_async_queries, u64::MAX);
        let f = parse("*.Server.max_async_queries = 0x100000003\n").unwrap();
        f.apply(&mut s, "m", Scenario::Server, ConfKind::UserConf)
            .unwrap();
        assert_eq!(s.server_max_async_queries, 3);
    }

    #[test]
    fn rule_keys_only_from_mlperf_conf() {
        let f = parse("*.*.qsl_rng_seed = 9\n*.*.test05 = 1\n*.*.accuracy_log_probability = 50\n")
            .unwrap();
        let mut s = TestSettings::default();
        f.apply(&mut s, "m", Scenario::Offline, ConfKind::AuditConfig)
            .unwrap();
        assert_eq!(s, TestSettings::default());
        f.apply(&mut s, "m", Scenario::Offline, ConfKind::MlperfConf)
            .unwrap();
        assert_eq!(s.qsl_rng_seed, 9);
        assert!(s.test05);
        assert_eq!(s.accuracy_log_probability, 0.5);
    }

    #[test]
    fn audit_uses_wildcard_model_and_own_scenario() {
        let f =
            parse("*.Server.min_query_count = 3\nresnet50.Server.min_query_count = 4\n").unwrap();
        let mut s = TestSettings {
            scenario: Scenario::Server,
            ..TestSettings::default()
        };
        apply_audit(&mut s, &f).unwrap();
        assert_eq!(s.min_query_count, 3);
        assert_eq!(s.scenario, Scenario::Server);
    }

    #[test]
    fn resolve_layers_sources() {
        let dir = testkit::Scratch::new("loadgen-config");
        let user = dir.join("user.conf");
        std::fs::write(&user, "*.*.mode = 1\nresnet50.Offline.target_qps = 250\n").unwrap();
        let mut src = SettingsSources {
            model: "resnet50".into(),
            scenario: Scenario::Offline,
            mlperf_conf: None,
            user_conf: Some(user.clone()),
            mode: None,
            memory: None,
        };
        let s = src.resolve().unwrap();
        assert_eq!(s.scenario, Scenario::Offline);
        assert_eq!(s.mode, TestMode::AccuracyOnly);
        assert_eq!(s.offline_expected_qps, 250.0);
        assert_eq!(s.min_query_count, 24576);
        assert_eq!(s.qsl_rng_seed, 2085463073848966840);

        src.mode = Some(TestMode::PerformanceOnly);
        assert_eq!(src.resolve().unwrap().mode, TestMode::PerformanceOnly);

        // A given mlperf.conf replaces the built-in one completely.
        let rules = dir.join("mlperf.conf");
        std::fs::write(&rules, "*.*.qsl_rng_seed = 5\n").unwrap();
        src.mlperf_conf = Some(rules);
        let s = src.resolve().unwrap();
        assert_eq!(s.qsl_rng_seed, 5);
        assert_eq!(s.min_query_count, 100);

        src.user_conf = Some(dir.join("missing.conf"));
        let err = src.resolve().unwrap_err();
        assert!(err.is_not_found());
        assert!(err.to_string().contains("missing.conf"), "{err}");

        std::fs::write(&user, "*.*.mode = 1 # accuracy\n").unwrap();
        src.user_conf = Some(user);
        let err = src.resolve().unwrap_err();
        assert!(err.is_syntax());
        assert!(err.to_string().contains("user.conf:1:"), "{err}");
    }

    #[test]
    fn builtin_and_reference_values_are_in_range() {
        let rules = ConfigFile::builtin().unwrap();
        for line in BUILTIN_MLPERF_CONF.lines() {
            let Some(model) = line.split('.').next().filter(|m| !m.starts_with('#')) else {
                continue;
            };
            for scenario in [
                Scenario::SingleStream,
                Scenario::MultiStream,
                Scenario::Server,
                Scenario::Offline,
            ] {
                rules.check_values(model, scenario, None).unwrap();
                let mut s = TestSettings {
                    scenario,
                    ..TestSettings::default()
                };
                rules
                    .apply(&mut s, model, scenario, ConfKind::MlperfConf)
                    .unwrap();
                check_scale(&s, None).unwrap();
            }
        }
        rules.check_known_keys().unwrap();
    }

    #[test]
    fn out_of_range_values_name_line_key_and_range() {
        let f = parse(
            "a.b.c = 1\n*.Server.target_qps = nan\nm.Server.min_duration = 0x7fffffffffffffff\n",
        )
        .unwrap();
        let e = f
            .check_values("m", Scenario::Server, None)
            .unwrap_err()
            .to_string();
        let lines: Vec<&str> = e.lines().collect();
        assert!(
            lines[1].contains(":2: `*.Server.target_qps = nan` is out of range"),
            "{e}"
        );
        assert!(lines[2].contains(":3: `m.Server.min_duration"), "{e}");
        // Keys of another scenario do not matter to this run.
        f.check_values("m", Scenario::Offline, None).unwrap();
        parse("*.Server.target_qps = 0\n")
            .unwrap()
            .check_values("m", Scenario::Offline, None)
            .unwrap();
        let e = f.check_known_keys().unwrap_err().to_string();
        assert!(e.contains(":1: unknown setting `c` in key `a.b.c`"), "{e}");
    }

    #[test]
    fn counts_that_overflow_hang_or_exhaust_memory_are_refused_by_what_the_machine_holds() {
        const GIB: u64 = 1 << 30;
        let machine = Some(24 * GIB);
        let most = 24 * GIB / PLANNED_SAMPLE_BYTES;
        let refused = |line: &str, scenario: Scenario| {
            parse(line)
                .unwrap()
                .check_values("m", scenario, machine)
                .unwrap_err()
                .to_string()
        };
        for (line, scenario) in [
            (
                "*.*.min_query_count = 18446744073709551615",
                Scenario::Offline,
            ),
            (
                "*.*.min_query_count = 1000000000000",
                Scenario::SingleStream,
            ),
            ("*.*.min_query_count = 1000000000000", Scenario::Server),
            (
                "*.*.performance_sample_count_override = 1000000000000",
                Scenario::Offline,
            ),
        ] {
            let e = refused(line, scenario);
            assert!(
                e.starts_with("user.conf:1: `")
                    && e.contains(&format!("must be an integer from 0 to {most} (what this machine's 24.0 GiB of memory holds")),
                "{e}"
            );
        }
        // Within what the machine holds: accepted.
        parse(&format!("*.*.min_query_count = {most}\n"))
            .unwrap()
            .check_values("m", Scenario::Server, machine)
            .unwrap();
        // A machine that holds more: at most a billion samples all the same.
        let e = refused("*.*.min_query_count = 1000000001", Scenario::Server);
        assert!(e.contains(&format!("to {most}")), "{e}");
        let e = parse("*.*.min_query_count = 1000000001\n")
            .unwrap()
            .check_values("m", Scenario::Server, Some(1 << 50))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("from 0 to 1000000000 (a run's limit of 1e9 samples)"),
            "{e}"
        );

        // Integer settings written otherwise are refused, saying how the
        // official LoadGen would read them; hex and octal are integers.
        for (value, read) in [("1e10", 1), ("1.5", 1), ("25e3", 25)] {
            let e = refused(&format!("*.*.min_duration = {value}"), Scenario::Server);
            assert!(
                e.contains("an integer from 0 to 31536000000 (ms, a year), written as one")
                    && e.contains(&format!("reads `{value}` as {read}")),
                "{e}"
            );
        }
        parse("*.*.min_duration = 0x10\n*.*.max_duration = 010\n")
            .unwrap()
            .check_values("m", Scenario::Server, machine)
            .unwrap();
        // Floating-point settings take floating-point text.
        parse("*.SingleStream.target_latency = 1e1\n")
            .unwrap()
            .check_values("m", Scenario::SingleStream, machine)
            .unwrap();

        // Offline: 25 samples/s for a year plan 8.67e8 samples in one query,
        // 111 GB of bookkeeping: more than 24 GiB hold; on a larger machine,
        // within a billion.
        let s = TestSettings {
            scenario: Scenario::Offline,
            offline_expected_qps: 25.0,
            min_duration_ms: 31_536_000_000,
            ..TestSettings::default()
        };
        let e = check_scale(&s, machine).unwrap_err().to_string();
        assert!(
            e.contains("plan 8.672e8 samples") && e.contains("24.0 GiB of memory"),
            "{e}"
        );
        check_scale(&s, Some(1 << 40)).unwrap();
        // The queries a run plans before it issues (SingleStream: twice the
        // duration at the expected latency) are counted too.
        let s = TestSettings {
            scenario: Scenario::SingleStream,
            single_stream_expected_latency_ns: 1e3,
            min_duration_ms: MAX_DURATION_MS,
            ..TestSettings::default()
        };
        assert!(check_scale(&s, None).is_err());

        // What the audit config or the QSL makes of the settings.
        let (eff, _) = EffectiveSettings::derive(
            &TestSettings {
                scenario: Scenario::Offline,
                performance_sample_count_override: 1 << 40,
                ..TestSettings::default()
            },
            1024,
            1024,
        );
        let e = check_planned(&eff, machine).unwrap_err();
        assert!(e.contains("performance_sample_count 1099511627776"), "{e}");
        let (eff, _) = EffectiveSettings::derive(&TestSettings::default(), 1024, 1024);
        check_planned(&eff, machine).unwrap();
    }
}
