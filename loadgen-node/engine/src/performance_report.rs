//! A performance result ready to be written: the summary text and the
//! detail log's result records, both rendered from one evaluation of a
//! series (`results.rs`, `summary.rs`).

use crate::detail::LogValue;
use crate::results::{detail_records, evaluate, SeriesMeasurements};
use crate::settings::EffectiveSettings;
use crate::summary;

/// A performance result, ready to be written.
#[derive(Clone, Debug)]
pub(crate) struct PerformanceReport {
    pub valid: bool,
    /// Server latency bound(s) held; always true elsewhere.
    pub perf_constraints_met: bool,
    /// The summary text without its warning/error footer.
    pub summary: String,
    /// The result records of the detail log, in the official LoadGen's order.
    pub detail: Vec<(String, LogValue)>,
}

/// Computes the result of a performance series.
pub(crate) fn build_report(
    eff: &EffectiveSettings,
    m: &SeriesMeasurements,
    sut_name: &str,
    run_error: Option<&str>,
) -> PerformanceReport {
    let r = evaluate(eff, m, sut_name, run_error);
    PerformanceReport {
        valid: r.valid,
        perf_constraints_met: r.perf_constraints_met,
        summary: summary::render(&r),
        detail: detail_records(&r),
    }
}
