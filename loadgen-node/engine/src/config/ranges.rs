use super::error::ConfigError;
use super::keys::{KEYS, UNREAD_KEYS};
use super::parse::{ConfigFile, Entry};
use crate::c_number::{is_complete_integer, is_complete_number, strtod, strtoull};
use crate::settings::{EffectiveSettings, Scenario, TestSettings};

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
/// unknown): what their bookkeeping fits in, and never more than
/// `MAX_PLANNED_SAMPLES` (a billion).
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
        let mut errors = self.value_errors("*", scenario, memory);
        let scope = scenario.as_str();
        errors.extend(
            AUDIT_CHECKED.iter().filter_map(|&(name, accepted)| {
                self.out_of_range("*", scope, name, accepted, memory)
            }),
        );
        self.errors_by_line(errors)
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
        let errors = self.value_errors(model, scenario, memory);
        self.errors_by_line(errors)
    }

    /// The out-of-range values among [`CHECKED`]'s for `model` in `scenario`.
    fn value_errors(
        &self,
        model: &str,
        scenario: Scenario,
        memory: Option<u64>,
    ) -> Vec<ConfigError> {
        CHECKED
            .iter()
            .filter(|(_, only, _)| only.is_none_or(|s| s == scenario))
            .filter_map(|&(name, only, accepted)| {
                let scope = only.unwrap_or(scenario).as_str();
                self.out_of_range(model, scope, name, accepted, memory)
            })
            .collect()
    }

    /// The error of setting `name` as `model` in `scope` would use, if its
    /// value is not `accepted`.
    fn out_of_range(
        &self,
        model: &str,
        scope: &str,
        name: &'static str,
        accepted: Accepted,
        memory: Option<u64>,
    ) -> Option<ConfigError> {
        let (key, e) = self.lookup(model, scope, name)?;
        (!accepted.holds(&e.value, memory)).then(|| ConfigError::OutOfRange {
            file: self.name.clone(),
            line: e.line,
            key,
            value: e.value.clone(),
            name,
            accepted: accepted.describe(&e.value, memory),
        })
    }

    /// `errors`, in the order of their lines, as one error (none: Ok).
    fn errors_by_line(&self, mut errors: Vec<ConfigError>) -> Result<(), ConfigError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::apply::apply_audit;
    use crate::config::error::ConfKind;
    use crate::config::parse::user_conf as parse;
    use crate::config::parse::BUILTIN_MLPERF_CONF;

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
