//! `mlperf_log_summary.txt` text (`results.cc`, `PerformanceSummary::LogSummary`; `test_settings_internal.cc`, `TestSettingsInternal::LogSummary`), byte for byte as the official LoadGen
//! lays it out: the submission tooling parses these lines.

use std::fmt::Write as _;

use crate::escape::json_escaped;
use crate::number_format::{fixed1, fixed2, g6};
use crate::results::{percentile_label, Results, PERCENTILES};
use crate::settings::{EffectiveSettings, Scenario};
use crate::stats::LatencyHistogram;

pub(crate) const BANNER: &str = "================================================";

/// The summary of a performance result, up to (not including) the footer.
pub(crate) fn render(r: &Results<'_>) -> String {
    let eff = r.eff;
    let m = r.m;
    let scenario = eff.scenario;
    let tokens = eff.use_token_latencies;
    let p1 = fixed1(eff.target_latency_percentile * 100.0);
    let mut s = String::new();
    let mut line = |text: &str| {
        s.push_str(text);
        s.push('\n');
    };

    line(BANNER);
    line("MLPerf Results Summary");
    line(BANNER);
    // Escaped so that no name can add lines of its own.
    line(&format!("SUT name : {}", json_escaped(r.sut_name)));
    line(&format!("Scenario : {}", scenario.as_str()));
    line(&format!("Mode     : {}", eff.mode.as_str()));
    line(&match scenario {
        Scenario::SingleStream => format!("{p1}th percentile latency (ns) : {}", r.target_latency),
        Scenario::MultiStream => {
            format!(
                "{p1}th percentile latency (ns) : {}",
                r.target_query_latency
            )
        }
        Scenario::Server => format!(
            "Completed samples per second    : {}",
            fixed2(r.completed_samples_per_second())
        ),
        Scenario::Offline => format!("Samples per second: {}", g6(r.samples_per_second())),
    });
    if tokens {
        line(&match scenario {
            Scenario::SingleStream | Scenario::MultiStream => {
                format!(
                    "{p1}th first token percentile latency (ns) : {}",
                    r.target_ttft
                )
            }
            Scenario::Server => format!(
                "Completed tokens per second: {}",
                fixed2(r.completed_tokens_per_second())
            ),
            Scenario::Offline => format!("Tokens per second: {}", g6(r.tokens_per_second())),
        });
    }
    if eff.infer_token_latencies {
        match scenario {
            Scenario::Server => line(&format!(
                "Completed tokens per second (inferred): {}",
                fixed2(r.inferred_tokens_per_second())
            )),
            Scenario::Offline => line(&format!(
                "Tokens per second (inferred): {}",
                g6(r.inferred_tokens_per_second())
            )),
            _ => {}
        }
    }

    let yes_no = |b: bool| if b { "Yes" } else { "NO" };
    line(&format!(
        "Result is : {}",
        if r.valid { "VALID" } else { "INVALID" }
    ));
    if r.has_perf_constraints() {
        line(&format!(
            "  Performance constraints satisfied : {}",
            yes_no(r.perf_constraints_met)
        ));
    }
    line(&format!(
        "  Min duration satisfied : {}",
        yes_no(r.min_duration_met)
    ));
    line(&format!(
        "  Min queries satisfied : {}",
        yes_no(r.min_queries_met)
    ));
    line(&format!(
        "  Early stopping satisfied: {}",
        yes_no(r.early_stopping_met)
    ));
    if !r.valid {
        line("Recommendations:");
        if !r.perf_constraints_met {
            line(&format!(" * {}", r.perf_constraints_recommendation));
        }
        if !r.min_duration_met {
            line(&format!(" * {}", r.min_duration_recommendation));
        }
        if !r.min_queries_met {
            line(" * The test exited early, before enough queries were issued.\n   See the detailed log for why this may have occurred.");
        }
        if let Some(e) = r.run_error {
            line(&format!(" * The run failed: {e}"));
        }
    }
    if scenario != Scenario::Offline {
        if tokens {
            line("TTFT Early Stopping Result:");
            line(&r.early_stopping_ttft.text);
            line("TPOT Early Stopping Result:");
            line(&r.early_stopping_tpot.text);
        } else {
            line("Early Stopping Result:");
            line(&r.early_stopping.text);
        }
    }

    line(&format!("\n{BANNER}\nAdditional Stats\n{BANNER}"));
    match scenario {
        Scenario::SingleStream => {
            line(&format!(
                "QPS w/ loadgen overhead         : {}",
                fixed2(r.qps_with_loadgen_overhead())
            ));
            line(&format!(
                "QPS w/o loadgen overhead        : {}",
                fixed2(r.qps_without_loadgen_overhead())
            ));
            line("");
        }
        Scenario::Server => line(&format!(
            "Scheduled samples per second : {}",
            fixed2(r.scheduled_samples_per_second())
        )),
        Scenario::MultiStream => {
            line("Per-query latency:  ");
            latency_block(&mut line, &m.query_latencies, None, LATENCY_LABELS);
        }
        Scenario::Offline => {}
    }
    if scenario != Scenario::MultiStream {
        latency_block(&mut line, &m.sample_latencies, None, LATENCY_LABELS);
    }

    if tokens {
        line("");
        match scenario {
            Scenario::SingleStream => {
                line(&format!(
                    "TPS w/ loadgen overhead         : {}",
                    fixed2(r.tokens_per_second_with_overhead())
                ));
                line(&format!(
                    "TPS w/o loadgen overhead        : {}",
                    fixed2(r.tokens_per_second_without_overhead())
                ));
            }
            Scenario::Server => line(&format!(
                "Completed tokens per second                 : {}",
                fixed2(r.completed_tokens_per_second())
            )),
            _ => {}
        }
        if scenario != Scenario::Offline {
            latency_block(&mut line, &m.ttft, Some(r.ttft_mean), FIRST_TOKEN_LABELS);
            line("");
            latency_block(&mut line, &m.tpot, Some(r.tpot_mean), TPOT_LABELS);
        }
    }

    line(&format!("\n{BANNER}\nTest Parameters Used\n{BANNER}"));
    parameters(&mut s, eff);
    s
}

/// Labels of a latency block: min, max, mean, and the percentile suffix.
struct Labels {
    min: &'static str,
    max: &'static str,
    mean: &'static str,
    percentile: &'static str,
}

const LATENCY_LABELS: Labels = Labels {
    min: "Min latency (ns)                : ",
    max: "Max latency (ns)                : ",
    mean: "Mean latency (ns)               : ",
    percentile: " percentile latency (ns)   : ",
};
const FIRST_TOKEN_LABELS: Labels = Labels {
    min: "Min First Token latency (ns)                : ",
    max: "Max First Token latency (ns)                : ",
    mean: "Mean First Token latency (ns)               : ",
    percentile: " percentile first token latency (ns)   : ",
};
const TPOT_LABELS: Labels = Labels {
    min: "Min Time per Output Token (ns)                : ",
    max: "Max Time per Output Token (ns)                : ",
    mean: "Mean Time per Output Token (ns)               : ",
    percentile: " percentile time to output token (ns)   : ",
};

fn latency_block(
    line: &mut impl FnMut(&str),
    h: &LatencyHistogram,
    mean: Option<i64>,
    labels: Labels,
) {
    line(&format!("{}{}", labels.min, h.min()));
    line(&format!("{}{}", labels.max, h.max()));
    line(&format!(
        "{}{}",
        labels.mean,
        mean.unwrap_or_else(|| h.mean())
    ));
    for p in PERCENTILES {
        line(&format!(
            "{}{}{}",
            percentile_label(p),
            labels.percentile,
            h.percentile(p)
        ));
    }
}

/// The "Test Parameters Used" block: effective settings.
fn parameters(s: &mut String, e: &EffectiveSettings) {
    let b = |v: bool| v as u8;
    let _ = writeln!(s, "samples_per_query : {}", e.samples_per_query);
    let _ = writeln!(s, "target_qps : {}", g6(e.target_qps));
    if e.use_token_latencies {
        let _ = writeln!(s, "ttft_latency (ns): {}", e.server_ttft_latency as i64);
        let _ = writeln!(s, "tpot_latency (ns): {}", e.server_tpot_latency as i64);
    } else {
        let _ = writeln!(s, "target_latency (ns): {}", e.target_latency_ns as i64);
    }
    let _ = writeln!(s, "max_async_queries : {}", e.max_async_queries);
    let _ = writeln!(s, "min_duration (ms): {}", e.min_duration_ms as i64);
    let _ = writeln!(s, "max_duration (ms): {}", e.max_duration_ms as i64);
    let _ = writeln!(s, "min_query_count : {}", e.min_query_count);
    let _ = writeln!(s, "max_query_count : {}", e.max_query_count);
    let _ = writeln!(s, "qsl_rng_seed : {}", e.qsl_rng_seed);
    let _ = writeln!(s, "sample_index_rng_seed : {}", e.sample_index_rng_seed);
    let _ = writeln!(s, "schedule_rng_seed : {}", e.schedule_rng_seed);
    let _ = writeln!(s, "accuracy_log_rng_seed : {}", e.accuracy_log_rng_seed);
    let _ = writeln!(
        s,
        "accuracy_log_probability : {}",
        g6(e.accuracy_log_probability)
    );
    let _ = writeln!(
        s,
        "accuracy_log_sampling_target : {}",
        e.accuracy_log_sampling_target
    );
    let _ = writeln!(s, "print_timestamps : {}", b(e.print_timestamps));
    let _ = writeln!(
        s,
        "performance_issue_unique : {}",
        b(e.performance_issue_unique)
    );
    let _ = writeln!(
        s,
        "performance_issue_same : {}",
        b(e.performance_issue_same)
    );
    let _ = writeln!(
        s,
        "performance_issue_same_index : {}",
        e.performance_issue_same_index
    );
    let _ = writeln!(
        s,
        "performance_sample_count : {}",
        e.performance_sample_count
    );
    let _ = writeln!(s, "accuracy_sample_count : {}", e.accuracy_sample_count);
    if e.sample_concatenate_permutation {
        s.push_str("WARNING: sample_concatenate_permutation was set to true. \nGenerated samples per query might be different as the one in the setting.\nCheck the generated_samples_per_query line in the detailed log for the real\nsamples_per_query value\n");
    }
}

/// The footer appended when logging stops; the whole file in accuracy runs.
pub fn footer(warnings: u64, errors: u64) -> String {
    let warnings = match warnings {
        0 => "No warnings encountered during test.".to_string(),
        1 => "1 warning encountered. See detailed log.".to_string(),
        n => format!("{n} warnings encountered. See detailed log."),
    };
    let errors = match errors {
        0 => "No errors encountered during test.".to_string(),
        1 => "1 ERROR encountered. See detailed log.".to_string(),
        n => format!("{n} ERRORS encountered. See detailed log."),
    };
    format!("\n{warnings}\n\n{errors}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footer_forms() {
        assert_eq!(
            footer(0, 0),
            "\nNo warnings encountered during test.\n\nNo errors encountered during test.\n"
        );
        assert_eq!(
            footer(1, 2),
            "\n1 warning encountered. See detailed log.\n\n2 ERRORS encountered. See detailed log.\n"
        );
    }
}
