//! Derivation of the effective ("internal") settings of a run (`test_settings_internal.cc`, the `TestSettingsInternal` constructor).

use crate::number_format::g6;
use crate::settings::{EffectiveSettings, Scenario, TestSettings};

/// Target QPS used when a negative one is requested.
const FALLBACK_QPS: f64 = 1.0;

impl EffectiveSettings {
    /// Derives the values a run uses from `req` (already modified by the audit
    /// file and test05) and the QSL's reported sizes.
    ///
    /// Returns the settings and the messages to log as
    /// `error_invalid_test_settings`, in the official LoadGen's order. None of them stops
    /// the run.
    pub fn derive(
        req: &TestSettings,
        qsl_total: usize,
        qsl_performance: usize,
    ) -> (EffectiveSettings, Vec<String>) {
        let mut errors = Vec::new();

        let mut samples_per_query: u64 = 1;
        let mut target_latency_ns: u64 = 0;
        let mut max_async_queries: u64 = 1;
        let mut target_duration_ms = req.min_duration_ms;
        let mut min_query_count = req.min_query_count;

        let (target_qps, target_latency_percentile) = match req.scenario {
            Scenario::SingleStream => (
                1e9 / req.single_stream_expected_latency_ns,
                req.single_stream_target_latency_percentile,
            ),
            Scenario::MultiStream => (
                1e9 / req.multi_stream_expected_latency_ns,
                req.multi_stream_target_latency_percentile,
            ),
            Scenario::Server => {
                target_latency_ns = req.server_target_latency_ns;
                max_async_queries = req.server_max_async_queries;
                let qps = checked_qps("server_target_qps", req.server_target_qps, &mut errors);
                (qps, req.server_target_latency_percentile)
            }
            Scenario::Offline => {
                // The percentile is unused in Offline; the official LoadGen pins it.
                let qps = checked_qps(
                    "offline_expected_qps",
                    req.offline_expected_qps,
                    &mut errors,
                );
                (qps, 0.99)
            }
        };

        let performance_sample_count = if req.performance_sample_count_override != 0 {
            req.performance_sample_count_override
        } else {
            qsl_performance as u64
        };
        let accuracy_sample_count = if req.accuracy_sample_count_override != 0 {
            req.accuracy_sample_count_override
        } else {
            qsl_total as u64
        };

        if req.scenario == Scenario::MultiStream {
            samples_per_query = req.multi_stream_samples_per_query;
        }

        if req.scenario == Scenario::Offline {
            // 10 % slack so the single query outlasts the minimum duration;
            // evaluated left to right in f64 like the official LoadGen.
            let target_sample_count =
                (1.1 * (target_duration_ms as f64 / 1000.0) * target_qps) as u64;
            samples_per_query = if req.performance_issue_unique {
                performance_sample_count
            } else {
                min_query_count.max(target_sample_count)
            };
            min_query_count = 1;
            target_duration_ms = 0;
        }

        if req.sample_concatenate_permutation && req.scenario == Scenario::SingleStream {
            // The official LoadGen rounds with the QSL-reported count (not the override)
            // and adds a whole count to exact multiples.
            let expected = (2.0 * (target_duration_ms as f64 / 1000.0) * target_qps) as u64;
            let m = min_query_count.max(expected);
            let p = qsl_performance as u64;
            min_query_count = if p == 0 {
                // Division by zero the official LoadGen; keep the unrounded count.
                m
            } else {
                m.wrapping_add(p - m % p)
            };
        }

        let min_sample_count = min_query_count.wrapping_mul(samples_per_query);

        if req.performance_issue_same
            && req.performance_issue_same_index >= performance_sample_count
        {
            errors.push(format!(
                "Sample Idx to be repeated in performance_issue_same mode cannot be greater than \
                 loaded performance_sample_count. performance_issue_same_index: {} \
                 performance_sample_count: {}",
                req.performance_issue_same_index, performance_sample_count
            ));
        }
        if req.performance_issue_unique && req.performance_issue_same {
            errors.push(
                "Performance_issue_unique and performance_issue_same, both cannot be true at the \
                 same time. performance_issue_unique: 1 performance_issue_same: 1"
                    .to_string(),
            );
        }

        let eff = EffectiveSettings {
            scenario: req.scenario,
            mode: req.mode,
            samples_per_query,
            target_qps,
            target_latency_ns,
            target_latency_percentile,
            max_async_queries,
            target_duration_ms,
            min_duration_ms: req.min_duration_ms,
            max_duration_ms: req.max_duration_ms,
            min_query_count,
            max_query_count: req.max_query_count,
            min_sample_count,
            qsl_rng_seed: req.qsl_rng_seed,
            sample_index_rng_seed: req.sample_index_rng_seed,
            schedule_rng_seed: req.schedule_rng_seed,
            accuracy_log_rng_seed: req.accuracy_log_rng_seed,
            accuracy_log_probability: req.accuracy_log_probability,
            accuracy_log_sampling_target: req.accuracy_log_sampling_target,
            print_timestamps: req.print_timestamps,
            performance_issue_unique: req.performance_issue_unique,
            performance_issue_same: req.performance_issue_same,
            performance_issue_same_index: req.performance_issue_same_index,
            performance_sample_count,
            accuracy_sample_count,
            sample_concatenate_permutation: req.sample_concatenate_permutation,
            server_coalesce_queries: req.server_coalesce_queries,
            server_find_peak_qps_decimals_of_precision: req
                .server_find_peak_qps_decimals_of_precision,
            server_find_peak_qps_boundary_step_size: req.server_find_peak_qps_boundary_step_size,
            server_num_issue_query_threads: req.server_num_issue_query_threads,
            use_token_latencies: req.use_token_latencies,
            server_ttft_latency: req.server_ttft_latency,
            server_tpot_latency: req.server_tpot_latency,
            infer_token_latencies: req.infer_token_latencies,
            token_latency_scaling_factor: req.token_latency_scaling_factor,
        };
        (eff, errors)
    }
}

impl EffectiveSettings {
    /// The samples the run keeps track of before it issues anything: those
    /// of the queries it plans (an Offline query's all at once, held in the
    /// ring of samples in flight) and the loaded set's. What the machine
    /// holds bounds them (`config::max_planned_samples`).
    pub fn planned_samples(&self) -> u64 {
        let queries = self.min_sample_count.max(match self.scenario {
            Scenario::Offline => self.samples_per_query,
            _ => 0,
        });
        queries.saturating_add(self.performance_sample_count)
    }
}

/// A requested QPS, or the fallback with an error message when negative.
fn checked_qps(name: &str, requested: f64, errors: &mut Vec<String>) -> f64 {
    // NaN passes like the official LoadGen's `>= 0.0` test fails it: it is rejected.
    if requested >= 0.0 {
        requested
    } else {
        errors.push(format!(
            "Invalid value for {name} requested. requested: {} using: {}",
            g6(requested),
            g6(FALLBACK_QPS)
        ));
        FALLBACK_QPS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::TestMode;

    fn base(scenario: Scenario) -> TestSettings {
        TestSettings {
            scenario,
            ..TestSettings::default()
        }
    }

    #[test]
    fn single_stream_defaults() {
        let (e, errs) = EffectiveSettings::derive(&base(Scenario::SingleStream), 1024, 256);
        assert!(errs.is_empty());
        assert_eq!(e.target_qps, 1000.0);
        assert_eq!(e.target_latency_ns, 0);
        assert_eq!(e.target_latency_percentile, 0.90);
        assert_eq!(e.max_async_queries, 1);
        assert_eq!(e.samples_per_query, 1);
        assert_eq!(e.target_duration_ms, 10_000);
        assert_eq!(e.min_query_count, 100);
        assert_eq!(e.min_sample_count, 100);
        assert_eq!(e.performance_sample_count, 256);
        assert_eq!(e.accuracy_sample_count, 1024);
    }

    #[test]
    fn multistream_spq() {
        let mut r = base(Scenario::MultiStream);
        r.multi_stream_samples_per_query = 8;
        r.min_query_count = 300;
        let (e, _) = EffectiveSettings::derive(&r, 1024, 1024);
        assert_eq!(e.target_qps, 125.0);
        assert_eq!(e.samples_per_query, 8);
        assert_eq!(e.min_sample_count, 2400);
        assert_eq!(e.target_latency_percentile, 0.99);
    }

    #[test]
    fn offline_sizes_single_query() {
        let mut r = base(Scenario::Offline);
        r.offline_expected_qps = 2000.0;
        r.min_duration_ms = 1000;
        let (e, _) = EffectiveSettings::derive(&r, 1024, 1024);
        assert_eq!(e.samples_per_query, 2200);
        assert_eq!(e.min_query_count, 1);
        assert_eq!(e.target_duration_ms, 0);
        assert_eq!(e.min_duration_ms, 1000);
        assert_eq!(e.min_sample_count, 2200);
        assert_eq!(e.target_latency_percentile, 0.99);

        r.performance_issue_unique = true;
        r.performance_sample_count_override = 500;
        let (e, _) = EffectiveSettings::derive(&r, 1024, 1024);
        assert_eq!(e.samples_per_query, 500);
    }

    #[test]
    fn single_stream_equal_issue_rounding() {
        let mut r = base(Scenario::SingleStream);
        r.sample_concatenate_permutation = true;
        r.min_duration_ms = 0;
        r.min_query_count = 100;
        let (e, _) = EffectiveSettings::derive(&r, 1024, 256);
        assert_eq!(e.min_query_count, 256);
        // An exact multiple still gains a whole count.
        r.min_query_count = 512;
        let (e, _) = EffectiveSettings::derive(&r, 1024, 256);
        assert_eq!(e.min_query_count, 768);
        // Duration-based expectation (2 x 1 s x 1000 qps) and the QSL count,
        // not the override.
        r.min_duration_ms = 1000;
        r.performance_sample_count_override = 100;
        let (e, _) = EffectiveSettings::derive(&r, 1024, 256);
        assert_eq!(e.min_query_count, 2048);
        assert_eq!(e.performance_sample_count, 100);
    }

    #[test]
    fn negative_qps_and_validation_errors() {
        let mut r = base(Scenario::Server);
        r.server_target_qps = -5.0;
        r.performance_issue_same = true;
        r.performance_issue_unique = true;
        r.performance_issue_same_index = 300;
        r.mode = TestMode::PerformanceOnly;
        let (e, errs) = EffectiveSettings::derive(&r, 1024, 256);
        assert_eq!(e.target_qps, 1.0);
        assert_eq!(
            errs,
            [
                "Invalid value for server_target_qps requested. requested: -5 using: 1",
                "Sample Idx to be repeated in performance_issue_same mode cannot be greater than \
                 loaded performance_sample_count. performance_issue_same_index: 300 \
                 performance_sample_count: 256",
                "Performance_issue_unique and performance_issue_same, both cannot be true at the \
                 same time. performance_issue_unique: 1 performance_issue_same: 1",
            ]
        );

        let mut r = base(Scenario::Offline);
        r.offline_expected_qps = -0.5;
        let (e, errs) = EffectiveSettings::derive(&r, 10, 10);
        assert_eq!(e.target_qps, 1.0);
        assert_eq!(
            errs,
            ["Invalid value for offline_expected_qps requested. requested: -0.5 using: 1"]
        );
    }
}
