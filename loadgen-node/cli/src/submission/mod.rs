//! `loadgen-node submission plan.toml`: every run a submission needs, in
//! order (accuracy, performance, the audits each benchmark requires), each
//! log where the submission checker reads it, resumable (finished runs are
//! kept), then a table of what is VALID and what is missing, and, given a
//! checkout of mlcommons/inference, the official checker's verdict.
//!
//! The plan (TOML):
//!
//! ```toml
//! system = "my_system"            # results/<system>, systems/<system>.json
//! submitter = "MyOrg"
//! division = "network"            # default
//! output = "submission"           # the tree's root, beside the plan
//! sut = "node-a:50051,node-b:50051"  # any form of --sut (dns://NAME:PORT...)
//! sut_file = "nodes.txt"          # or also: one node per line, beside the plan
//! engine = "native"               # default; another is passed as --engine
//! rules = "v6.1"                  # default: the round of the rules (v5.1, v6.1)
//! run_flags = ["--connections-per-node", "4"]   # for every run
//! inference = "/path/to/mlcommons/inference"    # optional: the checker
//!
//! [system_description]            # optional: fields of systems/<system>.json
//! status = "available"            # (written over what the tool fills in)
//! accelerator_model_name = "..."
//!
//! [[benchmark]]
//! model = "resnet50"
//! scenarios = ["Offline", "Server", "SingleStream", "MultiStream"]
//! accuracy_command = "python3 accuracy-imagenet.py --mlperf-accuracy-file {accuracy_log} ..."
//!                                 # its output is accuracy.txt; {accuracy_dir} is the
//!                                 # folder, where it writes the output samples the
//!                                 # checker wants (WAN-2.2: videos/<index>.mp4, captions.txt)
//! audit_dtype = "int32"           # TEST01/TEST06 --dtype (default byte/int32)
//! eos_token_id = 2                # TEST06 (default 2)
//! compliance_dataset = "gpqa_compliance"   # TEST07: the compliance data set, beside the plan
//! compliance_accuracy_command = "python3 eval.py --mlperf-log {accuracy_log} ..."  # TEST07's score
//! score_pattern = "'exact_match':\\s*([\\d.]+)"   # TEST07 (default: the benchmark's)
//! [benchmark.settings]            # user.conf settings of every scenario
//! min_duration = 600000
//! [benchmark.settings.Offline]    # and of one scenario
//! target_qps = 20000
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use loadgen_engine::{Scenario, TestMode};

use crate::args::RunArgs;
use crate::audit::{self, accuracy_dir, performance_dir, run_done};
use crate::benchmarks;
use crate::budget::{self, HostMemory, RunNeeds};
use crate::compliance::{self, AuditTest};
use crate::exit::Exit;
use crate::plan as run_plan;
use crate::preflight::{self, PreflightArgs, PLACEHOLDER};

mod plan;
mod report;
mod tree;

use plan::{Division, PlanBenchmark, SubmissionPlan};
use report::{recorded_verdict, result_validity, Row};
use tree::{
    accuracy_txt, ensure_system_json, finalize_accuracy, remove_empty_traces, write_measurements,
};

/// The flags of `loadgen-node submission`.
#[derive(clap::Args, Debug, Clone)]
pub struct SubmissionArgs {
    /// The plan: system, nodes, benchmarks, scenarios and their settings.
    pub plan: PathBuf,

    /// A checkout of mlcommons/inference: run its submission checker on the
    /// tree (overrides the plan's `inference`).
    #[arg(long, value_name = "DIR")]
    pub inference: Option<PathBuf>,

    /// Skip the network preflight that fills the system description.
    #[arg(long)]
    pub no_preflight: bool,
}

/// A run that `scenario` still has to make: its mode, or the audit it is,
/// and the copies of its accuracy log the plan keeps beside the tree.
struct Step {
    what: String,
    mode: Option<TestMode>,
    audit: Option<AuditTest>,
    copies: u64,
}

impl Step {
    fn run(what: &str, mode: TestMode, copies: u64) -> Step {
        Step {
            what: what.into(),
            mode: Some(mode),
            audit: None,
            copies,
        }
    }

    /// What the run of `args` it is needs of the host.
    fn needs(&self, args: &RunArgs) -> Result<RunNeeds> {
        let mut args = args.clone();
        args.mode = self.mode;
        let audit = self.audit.map(|t| compliance::audit_config(t, &args.model));
        let mut needs = run_plan::run_needs(&args, audit.as_deref())?;
        needs.accuracy_copies = self.copies;
        Ok(needs)
    }

    /// Refuses the run if it does not fit the host now, before it starts.
    fn fits(&self, args: &RunArgs, dir: &Path) -> Result<()> {
        budget::check_host(&self.needs(args)?, dir)
            .map_err(|e| anyhow::anyhow!("{}: {e}", self.what))
    }
}

/// The runs `scenario` still has to make for `b` in `s`, in its order:
/// the accuracy run (its log kept in full beside the tree), the
/// performance run, the audits not yet passed (TEST01's accuracy log kept
/// in full too).
fn pending(plan: &SubmissionPlan, b: &PlanBenchmark, s: Scenario) -> Vec<Step> {
    let dir = plan.scenario_dir(b, s);
    let mut steps = Vec::new();
    if !run_done(&accuracy_dir(&dir), true) {
        steps.push(Step::run("accuracy", TestMode::AccuracyOnly, 1));
    }
    if !run_done(&performance_dir(&dir), false) {
        steps.push(Step::run("performance", TestMode::PerformanceOnly, 0));
    }
    if plan.division != Division::Open {
        for test in compliance::required_audits(&b.model, plan.rules)
            .iter()
            .filter_map(|a| AuditTest::of(*a))
        {
            if recorded_verdict(test, &dir.join(test.name())) != Some(true) {
                steps.push(Step {
                    what: test.name().to_string(),
                    mode: None,
                    audit: Some(test),
                    copies: u64::from(test == AuditTest::Test01),
                });
            }
        }
    }
    steps
}

/// The flags of every run of `b` in `s`: the plan's, without a trace.
fn scenario_args(plan: &SubmissionPlan, b: &PlanBenchmark, s: Scenario) -> Result<RunArgs> {
    let mut args = plan.run_args(b, s)?;
    args.no_trace = true;
    Ok(args)
}

/// Refuses a plan whose runs still to be made cannot fit this host (the
/// memory of each, the logs of all on the tree's disk), before the first.
fn check_fits(plan: &SubmissionPlan) -> Result<()> {
    let mut steps = Vec::new();
    for b in &plan.benchmarks {
        for s in &b.scenarios {
            let args = scenario_args(plan, b, *s)?;
            for step in pending(plan, b, *s) {
                let what = format!("{} {} {}", b.benchmark, s.as_str(), step.what);
                steps.push((what, step.needs(&args)?));
            }
        }
    }
    let root = plan.root();
    let free = loadgen_engine::disk::free_bytes(&root)
        .with_context(|| format!("cannot read the free space of {}", root.display()))?;
    budget::check_plan(&steps, HostMemory::read().as_ref(), &root, free).map_err(anyhow::Error::msg)
}

/// Runs what is missing of one benchmark and scenario and reports its state.
fn scenario(plan: &SubmissionPlan, b: &PlanBenchmark, s: Scenario) -> Result<Row> {
    let dir = plan.scenario_dir(b, s);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let backup = plan.full_logs_dir(b, s);
    let extras = plan.extras_dir(b, s);
    let args = scenario_args(plan, b, s)?;
    let what = format!("{} {}", b.benchmark, s.as_str());
    // Each run is checked against the host again just before it starts:
    // the runs before it took their share of the disk.
    let steps = pending(plan, b, s);
    let fits = |mode: Option<TestMode>, audit: Option<AuditTest>| -> Result<()> {
        match steps.iter().find(|st| st.mode == mode && st.audit == audit) {
            Some(step) => step.fits(&args, &dir),
            None => Ok(()),
        }
    };
    if !run_done(&accuracy_dir(&dir), true) {
        fits(Some(TestMode::AccuracyOnly), None)?;
        audit::run_into(
            &args,
            &accuracy_dir(&dir),
            &extras.join("accuracy"),
            Some(TestMode::AccuracyOnly),
            None,
            &format!("{what} accuracy"),
        )?;
    }
    accuracy_txt(b.accuracy_command.as_ref(), &accuracy_dir(&dir), &what)?;
    if !run_done(&performance_dir(&dir), false) {
        fits(Some(TestMode::PerformanceOnly), None)?;
        audit::run_into(
            &args,
            &performance_dir(&dir),
            &extras.join("performance"),
            Some(TestMode::PerformanceOnly),
            None,
            &format!("{what} performance"),
        )?;
    }
    write_measurements(plan, b, s, &dir)?;
    let performance = result_validity(&performance_dir(&dir));
    let accuracy_done = accuracy_dir(&dir).join("accuracy.txt").exists();
    // The output samples the checker wants beside the log (WAN-2.2's
    // videos), which the accuracy command writes into {accuracy_dir}.
    let extras_missing = benchmarks::accuracy_extras(&b.benchmark, plan.rules)
        .map_or_else(Vec::new, |e| e.missing(&accuracy_dir(&dir)));
    let mut valid = performance == "VALID" && accuracy_done && extras_missing.is_empty();
    let mut cells = vec![
        (
            "accuracy".to_string(),
            match (accuracy_done, extras_missing.as_slice()) {
                (false, _) => "accuracy.txt missing".to_string(),
                (true, []) => "done".to_string(),
                (true, [first, ..]) => format!(
                    "{} sample files missing ({first}...: the accuracy command writes them \
                     into {{accuracy_dir}})",
                    extras_missing.len()
                ),
            },
        ),
        ("performance".to_string(), performance),
    ];
    // The reference for TEST01: the full accuracy log, wherever it is now.
    let reference = match backup.join("mlperf_log_accuracy.json") {
        kept if kept.exists() => kept,
        _ => accuracy_dir(&dir).join("mlperf_log_accuracy.json"),
    };
    if plan.division != Division::Open {
        for audit in compliance::required_audits(&b.model, plan.rules) {
            let Some(test) = AuditTest::of(audit) else {
                continue;
            };
            let test_dir = dir.join(test.name());
            // A passed audit is kept; a failed or missing one is run again.
            let passed = match recorded_verdict(test, &test_dir) {
                Some(true) => true,
                _ => {
                    fits(None, Some(test))?;
                    let compliance = b.compliance_dataset.as_ref().map(|d| plan.base.join(d));
                    let compliance = audit::compliance_dataset(
                        test,
                        &b.model,
                        compliance.as_deref(),
                        &format!("{what}: the plan's compliance_dataset"),
                    )?;
                    audit::run_audit(test, &args, &dir, &extras, compliance)?;
                    // Answers the audit cannot read fail it; the plan goes on.
                    match audit::verify(test, &dir, &reference, &args, &b.verify_options()) {
                        Ok(passed) => passed,
                        Err(e) => {
                            eprintln!("loadgen-node: {what} {test}: FAIL: {e:#}");
                            false
                        }
                    }
                }
            };
            if test == AuditTest::Test01 {
                let acc = accuracy_dir(&test_dir);
                accuracy_txt(b.accuracy_command.as_ref(), &acc, &format!("{what} TEST01"))?;
                finalize_accuracy(&acc, &backup.join("TEST01"))?;
            }
            valid &= passed;
            cells.push((
                test.name().to_string(),
                if passed { "PASS" } else { "FAIL" }.to_string(),
            ));
        }
    }
    finalize_accuracy(&accuracy_dir(&dir), &backup)?;
    remove_empty_traces(&dir);
    Ok(Row { what, cells, valid })
}

/// The network preflight that fills the system description: a second
/// against the plan's nodes with its first benchmark.
fn preflight_args(plan: &SubmissionPlan) -> Result<PreflightArgs> {
    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        p: PreflightArgs,
    }
    // Every field the plan does not set keeps preflight's default.
    let mut p = Flags::try_parse_from(["preflight", "--sut", "null"])
        .map_err(|e| anyhow::anyhow!("preflight: {e}"))?
        .p;
    p.sut = Some(plan.sut.clone()).filter(|s| !s.to_string().is_empty());
    p.sut_file = plan.sut_file.clone();
    p.model = plan.benchmarks[0].model.clone();
    p.rules = plan.rules;
    p.seconds = Duration::from_secs(1);
    p.output = plan.base.join("network.json");
    p.system_json = Some(plan.system_json());
    Ok(p)
}

/// Runs the plan; exit status 0 when every result is VALID (and the
/// checker, when run, accepts the tree), 6 otherwise.
pub fn submission(args: &SubmissionArgs) -> Result<Exit> {
    let plan = SubmissionPlan::read(&args.plan)?;
    // Every scenario's flags are checked before the first run, and what
    // the runs still to be made need of this host.
    for b in &plan.benchmarks {
        for s in &b.scenarios {
            plan.run_args(b, *s)?;
        }
    }
    check_fits(&plan)?;
    ensure_system_json(&plan)?;
    if !args.no_preflight {
        preflight::preflight(&preflight_args(&plan)?)?;
    }
    let src = plan.root().join("src");
    std::fs::create_dir_all(&src)?;
    if !src.join("README.md").exists() {
        std::fs::write(
            src.join("README.md"),
            format!("{PLACEHOLDER} the code and how to run it\n"),
        )?;
    }
    let mut rows = Vec::new();
    for b in &plan.benchmarks {
        for s in &b.scenarios {
            rows.push(scenario(&plan, b, *s)?);
        }
    }
    report::print_table(&rows, &plan.root());
    let mut ok = rows.iter().all(|r| r.valid);
    if let Some(inference) = args.inference.as_ref().or(plan.inference.as_ref()) {
        ok &= report::run_checker(&plan, inference)?;
    }
    Ok(match ok {
        true => Exit::Done,
        false => Exit::SubmissionIncomplete,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::benchmarks::Round;
    use plan::{checker_benchmark, scenario_folder};

    fn plan(text: &str) -> Result<SubmissionPlan> {
        SubmissionPlan::parse("plan.toml", Path::new("/p"), text)
    }

    fn error(text: &str) -> String {
        format!("{:#}", plan(text).unwrap_err())
    }

    const GOOD: &str = r#"
system = "sys"
submitter = "Org"
sut = "127.0.0.1:1"
run_flags = ["--sample-bytes", "64"]
[[benchmark]]
model = "resnet50"
scenarios = ["Offline", "Server"]
[benchmark.settings]
min_duration = 1000
[benchmark.settings.Offline]
target_qps = 2000
"#;

    #[test]
    fn a_plan_is_read_with_its_settings() {
        let p = plan(GOOD).unwrap();
        assert_eq!(p.output, Path::new("/p/submission"));
        let b = &p.benchmarks[0];
        assert_eq!(b.benchmark, "resnet");
        let settings = |i: usize| {
            let (s, list) = &b.settings[i];
            (*s, list.iter().map(ToString::to_string).collect::<Vec<_>>())
        };
        assert_eq!(
            settings(0),
            (
                Scenario::Offline,
                vec!["min_duration=1000".into(), "target_qps=2000".into()]
            )
        );
        assert_eq!(
            settings(1),
            (Scenario::Server, vec!["min_duration=1000".into()])
        );
        assert_eq!(
            p.scenario_dir(b, Scenario::Server),
            Path::new("/p/submission/network/Org/results/sys/resnet/Server")
        );
        let args = p.run_args(b, Scenario::Offline).unwrap();
        assert_eq!(args.sample_bytes, Some(64));
        assert_eq!(
            (args.model.as_str(), args.scenario),
            ("resnet50", Scenario::Offline)
        );
        assert_eq!(args.sut.to_string(), "grpc://127.0.0.1:1");
        let set: Vec<String> = args.set.iter().map(|s| s.to_string()).collect();
        assert_eq!(set, ["min_duration=1000", "target_qps=2000"]);
        // What a child process is handed parses back to the same run.
        #[derive(Parser)]
        struct Flags {
            #[command(flatten)]
            run: RunArgs,
        }
        let argv = std::iter::once("loadgen-node".into()).chain(args.to_argv().unwrap());
        assert_eq!(Flags::try_parse_from(argv).unwrap().run, args);
    }

    #[test]
    fn the_suite_table_decides_folders_audits_and_rounds() {
        let now = Round::CURRENT;
        assert_eq!(checker_benchmark("resnet50", now), Ok("resnet"));
        assert_eq!(checker_benchmark("llama3.1-8b", now), Ok("llama3.1-8b"));
        assert_eq!(
            checker_benchmark("wan-2.2-t2v-a14b", now),
            Ok("wan-2.2-t2v-a14b")
        );
        let e = checker_benchmark("retinanet", now).unwrap_err();
        assert!(
            e.contains("not a benchmark of the v6.1 rules") && e.contains("v5.1"),
            "{e}"
        );
        assert_eq!(checker_benchmark("retinanet", Round::V5_1), Ok("retinanet"));
        let e = checker_benchmark("e2e-rag-qna", now).unwrap_err();
        assert!(e.contains("not in LoadGen 6.0.17's mlperf.conf"), "{e}");
        assert!(checker_benchmark("rnnt", now)
            .unwrap_err()
            .contains("retired"));
        assert_eq!(
            scenario_folder("llama2-70b-interactive", Scenario::Server),
            "Interactive"
        );
        assert_eq!(scenario_folder("llama2-70b", Scenario::Server), "Server");

        let p = plan(&GOOD.replace("resnet50", "llama3.1-8b")).unwrap();
        let b = &p.benchmarks[0];
        assert_eq!(
            (b.model.as_str(), b.benchmark.as_str()),
            ("llama3_1-8b", "llama3.1-8b")
        );
        assert_eq!(p.checker_version, "v6.1");
        let args = p.run_args(b, Scenario::Offline).unwrap();
        assert_eq!(args.rules, now);
        let old = plan(&format!(
            "rules = \"v5.1\"\n{}",
            GOOD.replace("resnet50", "retinanet")
        ))
        .unwrap();
        assert_eq!(
            (old.rules, old.checker_version.as_str()),
            (Round::V5_1, "v6.0")
        );
        let e = error(&format!("rules = \"v7\"\n{GOOD}"));
        assert!(e.contains("plan.toml:1: rules: unknown round `v7`"), "{e}");
        let e = error(&GOOD.replace(
            "model = \"resnet50\"",
            "model = \"resnet50\"\nbenchmark = \"bert-99\"",
        ));
        assert!(
            e.contains("plan.toml:8: benchmark 1: `benchmark` must be one of the checker's folders for resnet50: resnet"),
            "{e}"
        );
    }

    #[test]
    fn bad_plans_are_named_with_the_key_and_its_line() {
        let e = error(&GOOD.replace("resnet50", "resnet51"));
        assert!(
            e.contains("plan.toml:7: benchmark 1: unknown benchmark `resnet51`"),
            "{e}"
        );
        let e = error(&GOOD.replace("\"Server\"", "\"Sever\""));
        assert!(
            e.contains("plan.toml:8: benchmark 1: scenarios: Sever"),
            "{e}"
        );
        let e = error(&GOOD.replace("system = \"sys\"\n", ""));
        assert!(e.contains("missing field `system`"), "{e}");
        // Unknown keys, at the top and in an entry, with their line.
        let e = error(&format!("extra = 1\n{GOOD}"));
        assert!(
            e.contains("unknown field `extra`") && e.contains("line 1"),
            "{e}"
        );
        let e = error(&GOOD.replace("scenarios =", "scenaros ="));
        assert!(
            e.contains("unknown field `scenaros`") && e.contains("line 8"),
            "{e}"
        );
        let e = error(&format!("engine = \"other\"\n{GOOD}"));
        assert!(
            e.contains("plan.toml:1: engine `other`: expected native or official"),
            "{e}"
        );
        let e = error(&format!("division = \"openn\"\n{GOOD}"));
        assert!(
            e.contains("unknown variant `openn`") && e.contains("line 1"),
            "{e}"
        );
        let p = plan(&GOOD.replace("\"64\"", "\"sixty-four\"")).unwrap();
        let e = p
            .run_args(&p.benchmarks[0], Scenario::Offline)
            .unwrap_err()
            .to_string();
        assert!(e.contains("resnet50 Offline: run flags"), "{e}");
        // What the plan sets itself is not a run flag.
        let e = error(&GOOD.replace("\"--sample-bytes\", \"64\"", "\"--model\", \"bert\""));
        assert!(
            e.contains("run_flags: --model is the plan's `model`"),
            "{e}"
        );
    }

    #[test]
    fn names_stay_folders_of_the_tree() {
        for bad in ["../../x", "/abs", "a/b", "a\\b", "..", " ", "a\tb"] {
            let e = error(&GOOD.replace("system = \"sys\"", &format!("system = {bad:?}")));
            assert!(e.contains("plan.toml:2: `system`"), "{bad}: {e}");
            let e = error(&GOOD.replace("submitter = \"Org\"", &format!("submitter = {bad:?}")));
            assert!(e.contains("plan.toml:3: `submitter`"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_file_that_is_no_plan_is_refused_unread() {
        let e = format!(
            "{:#}",
            SubmissionPlan::read(Path::new("/dev/zero")).unwrap_err()
        );
        assert!(
            e.contains("cannot read the plan /dev/zero: larger than 4194304 bytes"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            SubmissionPlan::read(Path::new("/no/such/plan.toml")).unwrap_err()
        );
        assert!(e.contains("cannot read the plan /no/such/plan.toml"), "{e}");
    }
}
