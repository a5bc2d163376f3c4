//! The `requested_*` and `effective_*` records of the detail log
//! (`test_settings_internal.cc`, `LogRequestedTestSettings` and `TestSettingsInternal::LogEffectiveSettings`), in the official LoadGen's order and with the official LoadGen's value
//! types, so that the `%g`/integer/bool rendering matches byte for byte.

use crate::detail::LogValue;
use crate::settings::{EffectiveSettings, Scenario, TestSettings};

/// The settings as requested (after the audit file and test05 were applied).
/// Only the keys of the run's scenario are listed; the token keys appear only
/// when token latencies are used, and the TTFT/TPOT limits not for Offline.
pub fn requested_entries(s: &TestSettings) -> Vec<(&'static str, LogValue)> {
    use LogValue::{Bool, Float, Int, Str, Uint};
    let mut v = vec![
        ("requested_scenario", Str(s.scenario.as_str().to_string())),
        ("requested_test_mode", Str(s.mode.as_str().to_string())),
    ];
    match s.scenario {
        Scenario::SingleStream => v.extend([
            (
                "requested_single_stream_expected_latency_ns",
                Float(s.single_stream_expected_latency_ns),
            ),
            (
                "requested_single_stream_target_latency_percentile",
                Float(s.single_stream_target_latency_percentile),
            ),
        ]),
        Scenario::MultiStream => v.extend([
            (
                "requested_multi_stream_expected_latency_ns",
                Float(s.multi_stream_expected_latency_ns),
            ),
            (
                "requested_multi_stream_target_latency_percentile",
                Float(s.multi_stream_target_latency_percentile),
            ),
            (
                "requested_multi_stream_samples_per_query",
                Uint(s.multi_stream_samples_per_query),
            ),
        ]),
        Scenario::Server => v.extend([
            ("requested_server_target_qps", Float(s.server_target_qps)),
            (
                "requested_server_target_latency_ns",
                Uint(s.server_target_latency_ns),
            ),
            (
                "requested_server_target_latency_percentile",
                Float(s.server_target_latency_percentile),
            ),
            (
                "requested_server_coalesce_queries",
                Bool(s.server_coalesce_queries),
            ),
            (
                "requested_server_find_peak_qps_decimals_of_precision",
                Int(i64::from(s.server_find_peak_qps_decimals_of_precision)),
            ),
            (
                "requested_server_find_peak_qps_boundary_step_size",
                Float(s.server_find_peak_qps_boundary_step_size),
            ),
            (
                "requested_server_max_async_queries",
                Uint(s.server_max_async_queries),
            ),
            (
                "requested_server_num_issue_query_threads",
                Uint(s.server_num_issue_query_threads),
            ),
        ]),
        Scenario::Offline => v.push((
            "requested_offline_expected_qps",
            Float(s.offline_expected_qps),
        )),
    }
    v.extend([
        ("requested_min_duration_ms", Uint(s.min_duration_ms)),
        ("requested_max_duration_ms", Uint(s.max_duration_ms)),
        ("requested_min_query_count", Uint(s.min_query_count)),
        ("requested_max_query_count", Uint(s.max_query_count)),
        ("requested_qsl_rng_seed", Uint(s.qsl_rng_seed)),
        (
            "requested_sample_index_rng_seed",
            Uint(s.sample_index_rng_seed),
        ),
        ("requested_schedule_rng_seed", Uint(s.schedule_rng_seed)),
        (
            "requested_accuracy_log_rng_seed",
            Uint(s.accuracy_log_rng_seed),
        ),
        (
            "requested_accuracy_log_probability",
            Float(s.accuracy_log_probability),
        ),
        (
            "requested_accuracy_log_sampling_target",
            Uint(s.accuracy_log_sampling_target),
        ),
        ("requested_print_timestamps", Bool(s.print_timestamps)),
        (
            "requested_performance_issue_unique",
            Bool(s.performance_issue_unique),
        ),
        (
            "requested_performance_issue_same",
            Bool(s.performance_issue_same),
        ),
        (
            "requested_performance_issue_same_index",
            Uint(s.performance_issue_same_index),
        ),
        (
            "requested_performance_sample_count_override",
            Uint(s.performance_sample_count_override),
        ),
        (
            "requested_accuracy_sample_count_override",
            Uint(s.accuracy_sample_count_override),
        ),
        (
            "requested_sample_concatenate_permutation",
            Bool(s.sample_concatenate_permutation),
        ),
    ]);
    if s.use_token_latencies {
        v.push(("requested_use_token_latencies", Bool(s.use_token_latencies)));
        // Offline has no first-token phase, so its limits are not logged.
        if s.scenario != Scenario::Offline {
            v.extend([
                ("requested_server_ttft_latency", Uint(s.server_ttft_latency)),
                ("requested_server_tpot_latency", Uint(s.server_tpot_latency)),
            ]);
        }
    }
    v
}

/// The settings the run actually uses.
pub fn effective_entries(e: &EffectiveSettings) -> Vec<(&'static str, LogValue)> {
    use LogValue::{Bool, Float, Int, Str, Uint};
    // The official LoadGen keeps latency and durations as signed chrono counts; an
    // out-of-range request therefore shows up as a negative number.
    let signed = |v: u64| Int(v as i64);
    vec![
        ("effective_scenario", Str(e.scenario.as_str().to_string())),
        ("effective_test_mode", Str(e.mode.as_str().to_string())),
        ("effective_samples_per_query", Uint(e.samples_per_query)),
        ("effective_target_qps", Float(e.target_qps)),
        ("effective_target_latency_ns", signed(e.target_latency_ns)),
        (
            "effective_target_latency_percentile",
            Float(e.target_latency_percentile),
        ),
        ("effective_max_async_queries", Uint(e.max_async_queries)),
        ("effective_target_duration_ms", signed(e.target_duration_ms)),
        ("effective_min_duration_ms", signed(e.min_duration_ms)),
        ("effective_max_duration_ms", signed(e.max_duration_ms)),
        ("effective_min_query_count", Uint(e.min_query_count)),
        ("effective_max_query_count", Uint(e.max_query_count)),
        ("effective_min_sample_count", Uint(e.min_sample_count)),
        ("effective_qsl_rng_seed", Uint(e.qsl_rng_seed)),
        (
            "effective_sample_index_rng_seed",
            Uint(e.sample_index_rng_seed),
        ),
        ("effective_schedule_rng_seed", Uint(e.schedule_rng_seed)),
        (
            "effective_accuracy_log_rng_seed",
            Uint(e.accuracy_log_rng_seed),
        ),
        (
            "effective_accuracy_log_probability",
            Float(e.accuracy_log_probability),
        ),
        (
            "effective_accuracy_log_sampling_target",
            Uint(e.accuracy_log_sampling_target),
        ),
        ("effective_print_timestamps", Bool(e.print_timestamps)),
        (
            "effective_performance_issue_unique",
            Bool(e.performance_issue_unique),
        ),
        (
            "effective_performance_issue_same",
            Bool(e.performance_issue_same),
        ),
        (
            "effective_performance_issue_same_index",
            Uint(e.performance_issue_same_index),
        ),
        (
            "effective_performance_sample_count",
            Uint(e.performance_sample_count),
        ),
        (
            "effective_accuracy_sample_count",
            Uint(e.accuracy_sample_count),
        ),
        (
            "effective_sample_concatenate_permutation",
            Bool(e.sample_concatenate_permutation),
        ),
    ]
}
