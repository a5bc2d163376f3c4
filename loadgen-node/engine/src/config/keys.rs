//! The keys a config file may hold, by who reads them.

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
