//! Per-series measurements and the performance result (`results.cc`, `PerformanceSummary`): metrics,
//! validity with the official LoadGen's reasons, and the result records of the detail
//! log. Plain arithmetic on what a series measured; no clock, no I/O.

use crate::detail::LogValue;
use crate::early_stopping::{self, EarlyStopping};
use crate::number_format::fixed2;
use crate::settings::{EffectiveSettings, Scenario};
use crate::stats::LatencyHistogram;

/// The fixed percentiles every report lists.
pub(crate) const PERCENTILES: [f64; 6] = [0.50, 0.90, 0.95, 0.97, 0.99, 0.999];

/// What one performance series measured. Times are ns from the series start.
#[derive(Clone, Debug, Default)]
pub(crate) struct SeriesMeasurements {
    pub sample_latencies: LatencyHistogram,
    /// MultiStream: one latency per query (its slowest sample).
    pub query_latencies: LatencyHistogram,
    pub ttft: LatencyHistogram,
    pub tpot: LatencyHistogram,
    pub token_count: u64,
    pub queries_issued: u64,
    pub max_latency_ns: i64,
    pub final_query_scheduled_ns: i64,
    pub final_query_issued_ns: i64,
    pub final_query_all_samples_done_ns: i64,
}

/// Everything the summary and the detail records print.
pub(crate) struct Results<'a> {
    pub eff: &'a EffectiveSettings,
    pub m: &'a SeriesMeasurements,
    pub sut_name: &'a str,
    pub sample_count: u64,
    pub target_latency: i64,
    pub target_query_latency: i64,
    pub target_ttft: i64,
    pub ttft_mean: i64,
    pub tpot_mean: i64,
    pub min_duration_met: bool,
    pub min_duration_recommendation: &'static str,
    pub min_queries_met: bool,
    pub perf_constraints_met: bool,
    pub perf_constraints_recommendation: String,
    pub early_stopping_met: bool,
    pub early_stopping: EarlyStopping,
    pub early_stopping_ttft: EarlyStopping,
    pub early_stopping_tpot: EarlyStopping,
    pub early_stopping_latency_ss: i64,
    pub early_stopping_latency_ms: i64,
    /// Set when the run failed (dead SUT, bad responses): always INVALID.
    pub run_error: Option<&'a str>,
    pub valid: bool,
}

impl Results<'_> {
    fn seconds(ns: i64) -> f64 {
        ns as f64 / 1e9
    }

    /// `count / seconds`, or 0 for a series that measured nothing (the official LoadGen
    /// would log NaN or infinity, which no JSON reader accepts).
    fn rate(count: f64, seconds: f64) -> f64 {
        if seconds > 0.0 {
            count / seconds
        } else {
            0.0
        }
    }

    /// SingleStream QPS including the harness's time between queries.
    pub(crate) fn qps_with_loadgen_overhead(&self) -> f64 {
        Self::rate(
            self.sample_count.saturating_sub(1) as f64,
            Self::seconds(self.m.final_query_issued_ns),
        )
    }

    pub(crate) fn qps_without_loadgen_overhead(&self) -> f64 {
        Self::rate(1.0, Self::seconds(self.m.sample_latencies.mean()))
    }

    pub(crate) fn completed_samples_per_second(&self) -> f64 {
        Self::rate(
            self.sample_count.saturating_sub(1) as f64,
            Self::seconds(self.m.final_query_all_samples_done_ns),
        )
    }

    pub(crate) fn scheduled_samples_per_second(&self) -> f64 {
        Self::rate(
            self.sample_count.saturating_sub(1) as f64,
            Self::seconds(self.m.final_query_scheduled_ns),
        )
    }

    pub(crate) fn samples_per_second(&self) -> f64 {
        Self::rate(
            self.sample_count as f64,
            Self::seconds(self.m.max_latency_ns),
        )
    }

    pub(crate) fn tokens_per_second(&self) -> f64 {
        Self::rate(
            self.m.token_count as f64,
            Self::seconds(self.m.max_latency_ns),
        )
    }

    pub(crate) fn completed_tokens_per_second(&self) -> f64 {
        Self::rate(
            self.m.token_count as f64,
            Self::seconds(self.m.final_query_all_samples_done_ns),
        )
    }

    pub(crate) fn tokens_per_second_with_overhead(&self) -> f64 {
        Self::rate(
            self.m.token_count as f64,
            Self::seconds(self.m.final_query_issued_ns),
        )
    }

    /// Tokens/s from the mean latency, in seconds (the summary's figure).
    pub(crate) fn tokens_per_second_without_overhead(&self) -> f64 {
        Self::rate(
            self.m.token_count as f64,
            Self::seconds(self.m.sample_latencies.mean()) * self.sample_count as f64,
        )
    }

    pub(crate) fn inferred_tokens_per_second(&self) -> f64 {
        let factor = self.eff.token_latency_scaling_factor as f64;
        match self.eff.scenario {
            Scenario::Offline => Self::rate(
                factor * self.sample_count as f64,
                Self::seconds(self.m.max_latency_ns),
            ),
            _ => self.completed_samples_per_second() * factor,
        }
    }

    pub(crate) fn has_perf_constraints(&self) -> bool {
        self.eff.scenario == Scenario::Server
    }
}

pub(crate) fn evaluate<'a>(
    eff: &'a EffectiveSettings,
    m: &'a SeriesMeasurements,
    sut_name: &'a str,
    run_error: Option<&'a str>,
) -> Results<'a> {
    let scenario = eff.scenario;
    let p = eff.target_latency_percentile;
    let sample_count = m.sample_latencies.count();
    let tokens = eff.use_token_latencies;

    let min_duration_s = eff.min_duration_ms as f64 / 1000.0;
    let (measured_s, min_duration_recommendation) = match scenario {
        Scenario::Offline => (
            Results::seconds(m.max_latency_ns),
            "Increase expected QPS so the loadgen pre-generates a larger (coalesced) query.",
        ),
        Scenario::Server => (
            Results::seconds(m.final_query_scheduled_ns),
            "Increase the target QPS so the loadgen pre-generates more queries.",
        ),
        Scenario::SingleStream | Scenario::MultiStream => (
            Results::seconds(m.final_query_issued_ns),
            "Decrease the expected latency so the loadgen pre-generates more queries.",
        ),
    };
    let min_duration_met = measured_s >= min_duration_s;
    let min_queries_met =
        m.queries_issued >= eff.min_query_count && sample_count >= eff.min_sample_count;

    let target_latency = m.sample_latencies.percentile(p);
    let target_ttft = m.ttft.percentile(p);
    let target_tpot = m.tpot.percentile(p);

    // Early stopping: without tokens on the latencies; with tokens on TPOT,
    // then (only if that passed) on TTFT. MultiStream always uses queries.
    let mut ss_estimate = 0i64;
    let mut ms_estimate = 0i64;
    let mut evaluate_es = |latencies: &LatencyHistogram, over_target: u64| -> EarlyStopping {
        match scenario {
            Scenario::Offline => EarlyStopping {
                met: true,
                ..EarlyStopping::default()
            },
            Scenario::Server => early_stopping::server(over_target, m.queries_issued, p),
            Scenario::SingleStream => {
                let es = early_stopping::percentile_estimate(latencies, m.queries_issued, p, true);
                if let Some(e) = es.estimate {
                    ss_estimate = e;
                }
                if let Some(e) = es.estimate_p99 {
                    ms_estimate = e;
                }
                es
            }
            Scenario::MultiStream => {
                let es = early_stopping::percentile_estimate(
                    &m.query_latencies,
                    m.queries_issued,
                    p,
                    false,
                );
                if let Some(e) = es.estimate {
                    ms_estimate = e;
                }
                es
            }
        }
    };
    let (early_stopping, early_stopping_tpot, early_stopping_ttft, early_stopping_met);
    if tokens {
        early_stopping = EarlyStopping::default();
        early_stopping_tpot = evaluate_es(&m.tpot, m.tpot.above_threshold());
        early_stopping_ttft = if early_stopping_tpot.met {
            evaluate_es(&m.ttft, m.ttft.above_threshold())
        } else {
            EarlyStopping::default()
        };
        early_stopping_met = early_stopping_tpot.met && early_stopping_ttft.met;
    } else {
        early_stopping = evaluate_es(&m.sample_latencies, m.sample_latencies.above_threshold());
        early_stopping_met = early_stopping.met;
        early_stopping_tpot = EarlyStopping::default();
        early_stopping_ttft = EarlyStopping::default();
    }

    let mut perf_constraints_met = true;
    let mut perf_constraints_recommendation = String::new();
    if scenario == Scenario::Server {
        const REDUCE: &str = "Reduce target QPS to improve latency.";
        if tokens {
            let mut failed = Vec::new();
            if target_ttft > eff.server_ttft_latency as i64 {
                failed.push(format!("TTFT constrain not met: {REDUCE}"));
            }
            if target_tpot > eff.server_tpot_latency as i64 {
                failed.push(format!("TPOT constrain not met: {REDUCE}"));
            }
            perf_constraints_met = failed.is_empty();
            perf_constraints_recommendation = failed.join("\n * ");
        } else if target_latency > eff.target_latency_ns as i64 {
            perf_constraints_met = false;
            perf_constraints_recommendation = REDUCE.into();
        }
    }

    let valid = min_duration_met
        && min_queries_met
        && perf_constraints_met
        && early_stopping_met
        && run_error.is_none();
    let mean_over_samples = |h: &LatencyHistogram| {
        if sample_count == 0 {
            0
        } else {
            (h.sum() / sample_count as i128) as i64
        }
    };
    Results {
        eff,
        m,
        sut_name,
        sample_count,
        target_latency,
        target_query_latency: m.query_latencies.percentile(p),
        target_ttft,
        ttft_mean: mean_over_samples(&m.ttft),
        tpot_mean: mean_over_samples(&m.tpot),
        min_duration_met,
        min_duration_recommendation,
        min_queries_met,
        perf_constraints_met,
        perf_constraints_recommendation,
        early_stopping_met,
        early_stopping,
        early_stopping_ttft,
        early_stopping_tpot,
        early_stopping_latency_ss: ss_estimate,
        early_stopping_latency_ms: ms_estimate,
        run_error,
        valid,
    }
}

/// `50.00`, `99.90`: how percentiles appear in keys and labels.
pub(crate) fn percentile_label(p: f64) -> String {
    fixed2(p * 100.0)
}

pub(crate) fn detail_records(r: &Results<'_>) -> Vec<(String, LogValue)> {
    let eff = r.eff;
    let m = r.m;
    let mut d: Vec<(String, LogValue)> = Vec::new();
    let mut put = |k: String, v: LogValue| d.push((k, v));
    let int = |v: i64| LogValue::Int(v);

    put(
        "result_validity".into(),
        (if r.valid { "VALID" } else { "INVALID" }).into(),
    );
    if r.has_perf_constraints() {
        put(
            "result_perf_constraints_met".into(),
            r.perf_constraints_met.into(),
        );
    }
    put("result_min_duration_met".into(), r.min_duration_met.into());
    put("result_min_queries_met".into(), r.min_queries_met.into());
    put("early_stopping_met".into(), r.early_stopping_met.into());
    if !r.valid {
        let mut reason = String::new();
        if !r.perf_constraints_met {
            reason += &r.perf_constraints_recommendation;
            reason.push(' ');
        }
        if !r.min_duration_met {
            reason += r.min_duration_recommendation;
            reason.push(' ');
        }
        if !r.min_queries_met {
            reason += "The test exited early, before enough queries were issued.";
        }
        if let Some(e) = r.run_error {
            if !reason.is_empty() && !reason.ends_with(' ') {
                reason.push(' ');
            }
            reason += &format!("The run failed: {e}");
        }
        put(
            "result_invalid_reason".into(),
            reason.replace('\n', " ").into(),
        );
    }
    let flat = |es: &EarlyStopping| LogValue::from(es.text.replace('\n', " "));
    if eff.use_token_latencies {
        put(
            "early_stopping_ttft_result".into(),
            flat(&r.early_stopping_ttft),
        );
        put(
            "early_stopping_tpot_result".into(),
            flat(&r.early_stopping_tpot),
        );
    } else {
        put("early_stopping_result".into(), flat(&r.early_stopping));
    }
    put(
        "result_query_count".into(),
        LogValue::Uint(m.queries_issued),
    );
    if eff.scenario == Scenario::Server {
        put(
            "result_overlatency_query_count".into(),
            LogValue::Uint(m.sample_latencies.above_threshold()),
        );
    }

    match eff.scenario {
        Scenario::SingleStream => {
            put(
                "result_qps_with_loadgen_overhead".into(),
                r.qps_with_loadgen_overhead().into(),
            );
            put(
                "result_qps_without_loadgen_overhead".into(),
                r.qps_without_loadgen_overhead().into(),
            );
            put(
                "early_stopping_latency_ss".into(),
                int(r.early_stopping_latency_ss),
            );
            put(
                "early_stopping_latency_ms".into(),
                int(r.early_stopping_latency_ms),
            );
        }
        Scenario::MultiStream => {
            let q = &m.query_latencies;
            put("result_min_query_latency_ns".into(), int(q.min()));
            put("result_max_query_latency_ns".into(), int(q.max()));
            put("result_mean_query_latency_ns".into(), int(q.mean()));
            for p in PERCENTILES {
                put(
                    format!(
                        "result_{}_percentile_per_query_latency_ns",
                        percentile_label(p)
                    ),
                    int(q.percentile(p)),
                );
            }
            put(
                "early_stopping_latency_ms".into(),
                int(r.early_stopping_latency_ms),
            );
        }
        Scenario::Server => {
            put(
                "result_scheduled_samples_per_sec".into(),
                r.scheduled_samples_per_second().into(),
            );
            put(
                "result_completed_samples_per_sec".into(),
                r.completed_samples_per_second().into(),
            );
        }
        Scenario::Offline => {
            put(
                "result_samples_per_second".into(),
                r.samples_per_second().into(),
            );
        }
    }

    let s = &m.sample_latencies;
    put("result_min_latency_ns".into(), int(s.min()));
    put("result_max_latency_ns".into(), int(s.max()));
    put("result_mean_latency_ns".into(), int(s.mean()));
    for p in PERCENTILES {
        put(
            format!("result_{}_percentile_latency_ns", percentile_label(p)),
            int(s.percentile(p)),
        );
    }

    if eff.use_token_latencies {
        if eff.scenario == Scenario::Offline {
            put(
                "result_tokens_per_second".into(),
                r.tokens_per_second().into(),
            );
        } else {
            put(
                "result_first_token_min_latency_ns".into(),
                int(m.ttft.min()),
            );
            put(
                "result_first_token_max_latency_ns".into(),
                int(m.ttft.max()),
            );
            put(
                "result_first_token_mean_latency_ns".into(),
                int(r.ttft_mean),
            );
            for p in PERCENTILES {
                put(
                    format!(
                        "result_first_token_{}_percentile_latency_ns",
                        percentile_label(p)
                    ),
                    int(m.ttft.percentile(p)),
                );
            }
            put(
                "result_token_throughput_with_loadgen_overhead".into(),
                r.tokens_per_second_with_overhead().into(),
            );
            // The official LoadGen divides by the mean latency in ns here, not in s.
            let mean_ns_total = s.mean() as f64 * r.sample_count as f64;
            put(
                "result_token_throughput".into(),
                Results::rate(m.token_count as f64, mean_ns_total).into(),
            );
            for p in PERCENTILES {
                put(
                    format!(
                        "result_time_per_output_token_{}_percentile_ns",
                        percentile_label(p)
                    ),
                    int(m.tpot.percentile(p)),
                );
            }
            put("result_time_to_output_token_min".into(), int(m.tpot.min()));
            put("result_time_to_output_token_max".into(), int(m.tpot.max()));
            put("result_time_to_output_token_mean".into(), int(r.tpot_mean));
            put(
                "result_completed_tokens_per_second".into(),
                r.completed_tokens_per_second().into(),
            );
        }
    }
    if eff.infer_token_latencies {
        match eff.scenario {
            Scenario::Server => put(
                "result_inferred_completed_tokens_per_second".into(),
                r.inferred_tokens_per_second().into(),
            ),
            Scenario::Offline => put(
                "result_inferred_tokens_per_second".into(),
                r.inferred_tokens_per_second().into(),
            ),
            _ => {}
        }
    }
    d
}
