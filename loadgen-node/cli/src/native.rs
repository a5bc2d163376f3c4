//! The native engine runs a plan in this process: trace-exact with the
//! official LoadGen 6.0.17, for development, bring-up and regression runs.

use std::sync::Arc;

use anyhow::{Context, Result};
use loadgen_engine::latency_file::{self, LatencyFileSettings};
use loadgen_engine::live::LiveStats;
use loadgen_engine::null_sut::{NullAnswer, NullSut};
use loadgen_engine::runner::{start_test_with_live, LogSettings, TestOutcome};
use loadgen_engine::{QuerySampleLibrary, SystemUnderTest};

use crate::budget::RESERVE_FILE;
use crate::exit::Exit;
use crate::observe::Observers;
use crate::plan::RunPlan;
use crate::progress::Progress;
use crate::system::System;

/// Runs the test of `plan` and prints its result.
pub(crate) fn run(plan: &RunPlan) -> Result<Exit> {
    let system = System::open(&plan.sut, "native engine")?;
    let null_sut;
    let (sut, qsl): (&dyn SystemUnderTest, &dyn QuerySampleLibrary) = match &system {
        System::Null { qsl, tokens } => {
            let answer = match tokens {
                true => NullAnswer::Tokens,
                false => NullAnswer::Index,
            };
            null_sut = NullSut::new("Null SUT", answer);
            (&null_sut, qsl.as_ref())
        }
        System::Network { qsl, qdl } => (qdl.as_ref(), qsl.as_ref()),
    };
    let live = Arc::new(LiveStats::default());
    let observers = Observers::start(plan, Some(&live), system.qdl())?;
    // The reserve for the logs' last records, should the disk fill.
    let extras = &plan.output.extras;
    std::fs::create_dir_all(extras)
        .with_context(|| format!("cannot create {}", extras.display()))?;
    let log_settings = LogSettings {
        outdir: plan.output.dir.clone(),
        enable_trace: plan.output.trace,
        reserve: Some(extras.join(RESERVE_FILE)),
        latency_file: latency_file_settings(plan),
        ..LogSettings::default()
    };
    let outcome = {
        let loading = match &system {
            System::Network { qsl, .. } => Some(qsl.progress()),
            System::Null { .. } => None,
        };
        let _progress = Progress::start(live.clone(), loading, plan.observe.progress_interval);
        start_test_with_live(
            sut,
            qsl,
            &plan.test.settings,
            &log_settings,
            plan.test.audit.as_ref().map(|a| &a.config),
            live,
        )?
    };
    print_outcome(&outcome);
    let view = system.qdl().map(|q| q.view());
    observers.finish(plan, view.as_ref(), outcome.run_error.is_some())
}

/// Each sample's latency goes to a side file in the extras directory (made
/// before the run, for the reserve too), for `loadgen-node compare` (never
/// into the MLPerf logs).
fn latency_file_settings(plan: &RunPlan) -> Option<LatencyFileSettings> {
    Some(LatencyFileSettings {
        path: plan.output.extras.join(latency_file::FILE),
        benchmark: plan.test.model.clone(),
    })
}

fn print_outcome(outcome: &TestOutcome) {
    if let Some(p) = &outcome.performance {
        print!("{}", p.summary);
    }
    if let Some(e) = &outcome.run_error {
        eprintln!("loadgen-node: the run failed: {e}");
    }
    if let Some(e) = &outcome.latency_file_error {
        eprintln!("loadgen-node: warning: the per-sample latencies are incomplete: {e}");
    }
    println!(
        "\n{} warning(s), {} error(s); {} accuracy-log entries. Logs: {}",
        outcome.warnings,
        outcome.errors,
        outcome.accuracy_entries,
        outcome
            .detail_path
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    );
}
