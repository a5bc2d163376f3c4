//! Test settings as requested (`test_settings.h`, `TestSettings`) and as derived for a run (`test_settings_internal.h`, `TestSettingsInternal`).

use std::fmt;
use std::str::FromStr;

/// The MLPerf scenario: how queries arrive and what the result measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// One sample per query, the next issued when the previous completes;
    /// the result is a latency percentile.
    SingleStream,
    /// `multi_stream_samples_per_query` samples per query, issued back to
    /// back; the result is a latency percentile.
    MultiStream,
    /// Single-sample queries arriving at Poisson-distributed times at
    /// `server_target_qps`; valid when enough meet the latency bound.
    Server,
    /// All samples in one query; the result is the throughput.
    Offline,
}

impl Scenario {
    /// Every scenario, in LoadGen's order.
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

/// What a run measures (LoadGen's `TestMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TestMode {
    /// An accuracy pass followed by a performance run.
    SubmissionRun,
    /// One pass over every sample, all responses logged for scoring.
    AccuracyOnly,
    /// A timed run that measures the scenario's result.
    PerformanceOnly,
    /// Searches for the highest Server QPS that stays valid (Server only).
    FindPeakPerformance,
}

impl TestMode {
    /// Every mode, in the order of their `mode` config values.
    pub const ALL: [TestMode; 4] = [
        TestMode::SubmissionRun,
        TestMode::AccuracyOnly,
        TestMode::PerformanceOnly,
        TestMode::FindPeakPerformance,
    ];

    /// Name as written in logs.
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
    /// The scenario to run.
    pub scenario: Scenario,
    /// What the run measures.
    pub mode: TestMode,
    /// The SUT's expected SingleStream latency; sets how many queries fill the minimum duration.
    pub single_stream_expected_latency_ns: f64,
    /// The latency percentile reported as the SingleStream result.
    pub single_stream_target_latency_percentile: f64,
    /// The SUT's expected MultiStream query latency; sets how many queries fill the minimum duration.
    pub multi_stream_expected_latency_ns: f64,
    /// The latency percentile reported as the MultiStream result.
    pub multi_stream_target_latency_percentile: f64,
    /// Samples in each MultiStream query.
    pub multi_stream_samples_per_query: u64,
    /// The Server scenario's mean arrival rate, queries per second.
    pub server_target_qps: f64,
    /// The latency a Server query must meet to count as on time.
    pub server_target_latency_ns: u64,
    /// The fraction of Server queries that must meet `server_target_latency_ns`.
    pub server_target_latency_percentile: f64,
    /// Issue all Server queries that are due at once in a single `issue_query` call.
    pub server_coalesce_queries: bool,
    /// Decimal places to which FindPeakPerformance resolves the peak Server QPS.
    pub server_find_peak_qps_decimals_of_precision: i32,
    /// How far FindPeakPerformance moves its search bound while looking for an invalid rate.
    pub server_find_peak_qps_boundary_step_size: f64,
    /// The most Server queries outstanding at once (0: no limit).
    pub server_max_async_queries: u64,
    /// SUT threads that would issue Server queries in LoadGen; logged with the settings.
    pub server_num_issue_query_threads: u64,
    /// The SUT's expected Offline throughput; sizes the single Offline query.
    pub offline_expected_qps: f64,
    /// Build the performance sample order from whole permutations of the loaded set, so each sample is issued equally often (equal issue).
    pub sample_concatenate_permutation: bool,
    /// The shortest a performance run may last.
    pub min_duration_ms: u64,
    /// The longest a performance run may last (0: no limit).
    pub max_duration_ms: u64,
    /// The fewest queries a performance run issues.
    pub min_query_count: u64,
    /// The most queries a performance run issues (0: no limit).
    pub max_query_count: u64,
    /// Seed for choosing which samples are loaded together.
    pub qsl_rng_seed: u64,
    /// Seed for choosing the sample of each query.
    pub sample_index_rng_seed: u64,
    /// Seed for the Server scenario's arrival times.
    pub schedule_rng_seed: u64,
    /// Seed for choosing which performance responses are written to the accuracy log.
    pub accuracy_log_rng_seed: u64,
    /// Probability that a performance response is written to the accuracy log.
    pub accuracy_log_probability: f64,
    /// Number of performance responses to aim for in the accuracy log (0: use `accuracy_log_probability`).
    pub accuracy_log_sampling_target: u64,
    /// Use the `test05_*` seeds instead of the regular ones (compliance TEST05).
    pub test05: bool,
    /// `qsl_rng_seed` when `test05` is set.
    pub test05_qsl_rng_seed: u64,
    /// `sample_index_rng_seed` when `test05` is set.
    pub test05_sample_index_rng_seed: u64,
    /// `schedule_rng_seed` when `test05` is set.
    pub test05_schedule_rng_seed: u64,
    /// LoadGen's `print_timestamps`; logged with the settings.
    pub print_timestamps: bool,
    /// Issue each loaded sample once (compliance TEST04).
    pub performance_issue_unique: bool,
    /// Issue the same sample, `performance_issue_same_index`, in every query (compliance TEST04).
    pub performance_issue_same: bool,
    /// The sample issued when `performance_issue_same` is set.
    pub performance_issue_same_index: u64,
    /// Samples loaded for the performance run, in place of the QSL's count (0: the QSL's).
    pub performance_sample_count_override: u64,
    /// Samples issued by the accuracy pass, in place of the QSL's total (0: all of them).
    pub accuracy_sample_count_override: u64,
    /// Measure per-token latencies (time to first token, time per output token) for LLMs.
    pub use_token_latencies: bool,
    /// The time-to-first-token bound of the Server scenario, in ns.
    pub server_ttft_latency: u64,
    /// The time-per-output-token bound of the Server scenario, in ns.
    pub server_tpot_latency: u64,
    /// Report token rates inferred from `token_latency_scaling_factor` tokens per sample.
    pub infer_token_latencies: bool,
    /// Tokens per sample assumed by `infer_token_latencies`.
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
    /// The scenario run.
    pub scenario: Scenario,
    /// What the run measures.
    pub mode: TestMode,
    /// Samples in each query (all of them in one Offline query).
    pub samples_per_query: u64,
    /// The queries per second the run is sized for (the Server arrival rate).
    pub target_qps: f64,
    /// The Server latency bound (0 in other scenarios).
    pub target_latency_ns: u64,
    /// The latency percentile of the scenario's result or bound.
    pub target_latency_percentile: f64,
    /// The most queries outstanding at once (0: no limit).
    pub max_async_queries: u64,
    /// How long the query schedule is generated for (0 for Offline).
    pub target_duration_ms: u64,
    /// The shortest the performance run may last.
    pub min_duration_ms: u64,
    /// The longest the performance run may last (0: no limit).
    pub max_duration_ms: u64,
    /// The fewest queries the performance run issues.
    pub min_query_count: u64,
    /// The most queries the performance run issues (0: no limit).
    pub max_query_count: u64,
    /// The fewest samples the performance run issues (`min_query_count` times `samples_per_query`).
    pub min_sample_count: u64,
    /// Seed for choosing which samples are loaded together (TEST05's when set).
    pub qsl_rng_seed: u64,
    /// Seed for choosing the sample of each query (TEST05's when set).
    pub sample_index_rng_seed: u64,
    /// Seed for the Server arrival times (TEST05's when set).
    pub schedule_rng_seed: u64,
    /// Seed for choosing which performance responses are written to the accuracy log.
    pub accuracy_log_rng_seed: u64,
    /// Probability that a performance response is written to the accuracy log.
    pub accuracy_log_probability: f64,
    /// Number of performance responses to aim for in the accuracy log.
    pub accuracy_log_sampling_target: u64,
    /// As requested; logged with the settings.
    pub print_timestamps: bool,
    /// Issue each loaded sample once.
    pub performance_issue_unique: bool,
    /// Issue the same sample in every query.
    pub performance_issue_same: bool,
    /// The sample issued when `performance_issue_same` is set.
    pub performance_issue_same_index: u64,
    /// Samples loaded at a time for the performance run.
    pub performance_sample_count: u64,
    /// Samples issued by the accuracy pass.
    pub accuracy_sample_count: u64,
    /// Equal issue: the sample order is built from whole permutations of the loaded set.
    pub sample_concatenate_permutation: bool,
    /// Issue the Server queries due at once in one call.
    pub server_coalesce_queries: bool,
    /// Decimal places of the FindPeakPerformance search.
    pub server_find_peak_qps_decimals_of_precision: i32,
    /// Step of the FindPeakPerformance search bound.
    pub server_find_peak_qps_boundary_step_size: f64,
    /// As requested; logged with the settings.
    pub server_num_issue_query_threads: u64,
    /// Measure per-token latencies for LLMs.
    pub use_token_latencies: bool,
    /// The time-to-first-token bound, in ns.
    pub server_ttft_latency: u64,
    /// The time-per-output-token bound, in ns.
    pub server_tpot_latency: u64,
    /// Report token rates inferred from `token_latency_scaling_factor`.
    pub infer_token_latencies: bool,
    /// Tokens per sample assumed when inferring token rates.
    pub token_latency_scaling_factor: u64,
}
