//! What watches a run and what is reported after it, the same for both
//! engines: the OTLP trace, the metrics endpoint, then the latency
//! breakdown, the HTML report and the synthetic accuracy check.

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use loadgen_engine::live::LiveStats;
use qdl::{Qdl, QdlView};

use crate::check_synthetic;
use crate::exit::Exit;
use crate::otlp::RunTrace;
use crate::plan::{RunPlan, SutPlan};

/// The run's observers, from before the test starts to after it ends.
pub(crate) struct Observers {
    trace: Option<RunTrace>,
}

impl Observers {
    /// Starts the run's span and the metrics endpoint. `live`: the engine's
    /// own figures, where it publishes them (the native engine).
    pub(crate) fn start(
        plan: &RunPlan,
        live: Option<&Arc<LiveStats>>,
        qdl: Option<&Qdl>,
    ) -> Result<Observers> {
        let mut trace = match &plan.observe.otlp {
            Some((endpoint, ratio)) => Some(RunTrace::start(
                endpoint,
                *ratio,
                &plan.test.model,
                plan.test.scenario.as_str(),
                &plan.observe.sut_label,
            )?),
            None => None,
        };
        if let Some(addr) = &plan.observe.metrics {
            crate::metrics::serve(addr, live.cloned(), qdl.map(Qdl::view))?;
        }
        if let Some(t) = &mut trace {
            t.follow(live.map(Arc::as_ref), qdl);
        }
        Ok(Observers { trace })
    }

    /// After the test: the breakdown (printed, and written to the extras
    /// directory), the report, the end of the trace and, when asked, the
    /// synthetic check of the accuracy log. The run's exit status.
    pub(crate) fn finish(
        self,
        plan: &RunPlan,
        qdl: Option<&QdlView>,
        run_failed: bool,
    ) -> Result<Exit> {
        if let Some(view) = qdl {
            crate::breakdown::report(view, &plan.output.extras);
        }
        crate::html_report::after_run(
            plan.observe.report.as_deref(),
            &plan.output.dir,
            &plan.output.extras,
        );
        if let Some(t) = self.trace {
            t.finish(qdl);
        }
        if run_failed {
            return Ok(Exit::RunFailed);
        }
        if let SutPlan::Network(net) = &plan.sut {
            if net.verify_synthetic {
                let log = plan.output.dir.join("mlperf_log_accuracy.json");
                let layout = check_synthetic::Layout::of(&plan.test.model);
                if !verify_synthetic(&log, &net.data, layout)? {
                    return Ok(Exit::SyntheticMismatch);
                }
            }
        }
        Ok(Exit::Done)
    }
}

/// Checks an accuracy log against the synthetic backend's answers and says
/// so; true when every logged answer matches its sample.
fn verify_synthetic(
    accuracy_log: &Path,
    data: &crate::qsl::DataSource,
    layout: check_synthetic::Layout,
) -> Result<bool> {
    let verdict = check_synthetic::check(accuracy_log, data, layout)?;
    if verdict.passed() {
        println!(
            "synthetic accuracy check: all {} logged answers match their samples",
            verdict.checked
        );
        return Ok(true);
    }
    eprintln!(
        "loadgen-node: synthetic accuracy check FAILED: {} of {} logged answers do not match",
        verdict.mismatches.len(),
        verdict.checked
    );
    check_synthetic::print_mismatches(&verdict);
    Ok(false)
}
