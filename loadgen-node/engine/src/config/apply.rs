use super::error::{ConfKind, ConfigError};
use super::parse::ConfigFile;
use crate::c_number::{strtod, strtoull};
use crate::settings::{Scenario, TestMode, TestSettings};

impl ConfigFile {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse::user_conf as parse;

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
}
