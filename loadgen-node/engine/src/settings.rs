//! Test settings as requested (`test_settings.h`, `TestSettings`) and as derived for a run (`test_settings_internal.h`, `TestSettingsInternal`).

use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scenario {
    SingleStream,
    MultiStream,
    Server,
    Offline,
}

impl Scenario {
    pub const ALL: [Scenario; 4] = [
        Scenario::SingleStream,
        Scenario::MultiStream,
        Scenario::Server,
        Scenario::Offline,
    ];

    /// Name as written in logs and config keys.
    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::SingleStream => "SingleStream",
            Scenario::MultiStream => "MultiStream",
            Scenario::Server => "Server",
            Scenario::Offline => "Offline",
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scenario {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Scenario::ALL
            .into_iter()
            .find(|sc| sc.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("unknown scenario '{s}' (expected SingleStream, MultiStream, Server or Offline)")
            })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TestMode {
    SubmissionRun,
    AccuracyOnly,
    PerformanceOnly,
    FindPeakPerformance,
}

impl TestMode {
    pub const ALL: [TestMode; 4] = [
        TestMode::SubmissionRun,
        TestMode::AccuracyOnly,
        TestMode::PerformanceOnly,
        TestMode::FindPeakPerformance,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TestMode::SubmissionRun => "SubmissionRun",
            TestMode::AccuracyOnly => "AccuracyOnly",
            TestMode::PerformanceOnly => "PerformanceOnly",
            TestMode::FindPeakPerformance => "FindPeakPerformance",
        }
    }

    /// The integer used by the `mode` config key.
    pub fn from_config_value(v: u64) -> Option<TestMode> {
        match v {
            0 => Some(TestMode::SubmissionRun),
            1 => Some(TestMode::AccuracyOnly),
            2 => Some(TestMode::PerformanceOnly),
            3 => Some(TestMode::FindPeakPerformance),
            _ => None,
        }
    }
}

impl fmt::Display for TestMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TestMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        TestMode::ALL
            .into_iter()
            .find(|m| m.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("unknown mode '{s}' (expected PerformanceOnly, AccuracyOnly, SubmissionRun or FindPeakPerformance)")
            })
    }
}

/// The settings a user asks for (`test_settings.h`, `TestSettings`). Field names follow it.
#[derive(Clone, Debug, PartialEq)]
pub struct TestSettings {
    pub scenario: Scenario,
    pub mode: TestMode,
    pub single_stream_expected_latency_ns: f64,
    pub single_stream_target_latency_percentile: f64,
    pub multi_stream_expected_latency_ns: f64,
    pub multi_stream_target_latency_percentile: f64,
    pub multi_stream_samples_per_query: u64,
    pub server_target_qps: f64,
    pub server_target_latency_ns: u64,
    pub server_target_latency_percentile: f64,
    pub server_coalesce_queries: bool,
    pub server_find_peak_qps_decimals_of_precision: i32,
    pub server_find_peak_qps_boundary_step_size: f64,
    pub server_max_async_queries: u64,
    pub server_num_issue_query_threads: u64,
    pub offline_expected_qps: f64,
    pub sample_concatenate_permutation: bool,
    pub min_duration_ms: u64,
    pub max_duration_ms: u64,
    pub min_query_count: u64,
    pub max_query_count: u64,
    pub qsl_rng_seed: u64,
    pub sample_index_rng_seed: u64,
    pub schedule_rng_seed: u64,
    pub accuracy_log_rng_seed: u64,
    pub accuracy_log_probability: f64,
    pub accuracy_log_sampling_target: u64,
    pub test05: bool,
    pub test05_qsl_rng_seed: u64,
    pub test05_sample_index_rng_seed: u64,
    pub test05_schedule_rng_seed: u64,
    pub print_timestamps: bool,
    pub performance_issue_unique: bool,
    pub performance_issue_same: bool,
    pub performance_issue_same_index: u64,
    pub performance_sample_count_override: u64,
    pub accuracy_sample_count_override: u64,
    pub use_token_latencies: bool,
    pub server_ttft_latency: u64,
    pub server_tpot_latency: u64,
    pub infer_token_latencies: bool,
    pub token_latency_scaling_factor: u64,
}

impl Default for TestSettings {
    fn default() -> Self {
        Self {
            scenario: Scenario::SingleStream,
            mode: TestMode::PerformanceOnly,
            single_stream_expected_latency_ns: 1_000_000.0,
            single_stream_target_latency_percentile: 0.90,
            multi_stream_expected_latency_ns: 8_000_000.0,
            multi_stream_target_latency_percentile: 0.99,
            multi_stream_samples_per_query: 8,
            server_target_qps: 1.0,
            server_target_latency_ns: 100_000_000,
            server_target_latency_percentile: 0.99,
            server_coalesce_queries: false,
            server_find_peak_qps_decimals_of_precision: 1,
            server_find_peak_qps_boundary_step_size: 1.0,
            server_max_async_queries: 0,
            server_num_issue_query_threads: 0,
            offline_expected_qps: 1.0,
            sample_concatenate_permutation: false,
            min_duration_ms: 10_000,
            max_duration_ms: 0,
            min_query_count: 100,
            max_query_count: 0,
            qsl_rng_seed: 0,
            sample_index_rng_seed: 0,
            schedule_rng_seed: 0,
            accuracy_log_rng_seed: 0,
            accuracy_log_probability: 0.0,
            accuracy_log_sampling_target: 0,
            test05: false,
            test05_qsl_rng_seed: 0,
            test05_sample_index_rng_seed: 0,
            test05_schedule_rng_seed: 0,
            print_timestamps: false,
            performance_issue_unique: false,
            performance_issue_same: false,
            performance_issue_same_index: 0,
            performance_sample_count_override: 0,
            accuracy_sample_count_override: 0,
            use_token_latencies: false,
            server_ttft_latency: 100_000_000,
            server_tpot_latency: 100_000_000,
            infer_token_latencies: false,
            token_latency_scaling_factor: 0,
        }
    }
}

/// The values a run actually uses (`test_settings_internal.h`, `TestSettingsInternal`), derived from the requested
/// settings and the QSL's sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct EffectiveSettings {
    pub scenario: Scenario,
    pub mode: TestMode,
    pub samples_per_query: u64,
    pub target_qps: f64,
    pub target_latency_ns: u64,
    pub target_latency_percentile: f64,
    pub max_async_queries: u64,
    pub target_duration_ms: u64,
    pub min_duration_ms: u64,
    pub max_duration_ms: u64,
    pub min_query_count: u64,
    pub max_query_count: u64,
    pub min_sample_count: u64,
    pub qsl_rng_seed: u64,
    pub sample_index_rng_seed: u64,
    pub schedule_rng_seed: u64,
    pub accuracy_log_rng_seed: u64,
    pub accuracy_log_probability: f64,
    pub accuracy_log_sampling_target: u64,
    pub print_timestamps: bool,
    pub performance_issue_unique: bool,
    pub performance_issue_same: bool,
    pub performance_issue_same_index: u64,
    pub performance_sample_count: u64,
    pub accuracy_sample_count: u64,
    pub sample_concatenate_permutation: bool,
    pub server_coalesce_queries: bool,
    pub server_find_peak_qps_decimals_of_precision: i32,
    pub server_find_peak_qps_boundary_step_size: f64,
    pub server_num_issue_query_threads: u64,
    pub use_token_latencies: bool,
    pub server_ttft_latency: u64,
    pub server_tpot_latency: u64,
    pub infer_token_latencies: bool,
    pub token_latency_scaling_factor: u64,
}
