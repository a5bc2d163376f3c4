//! `loadgen-node audit TEST01|TEST04|TEST06|TEST07|TEST08|TEST09`: one
//! compliance audit of one benchmark and scenario, laid out as the
//! submission checker reads it.
//!
//! `--output-dir` is the scenario's results directory. The reference runs go
//! to `performance/run_1` and `accuracy` (made only when missing), the audit
//! run and its verification to `TESTxx/`: `audit.config`, `performance/run_1`,
//! `accuracy`, `verify_accuracy.txt`, `verify_performance.txt` (TEST09:
//! `verify_output_len.txt`). TEST07 runs on the benchmark's compliance data
//! set (`--compliance-dataset`) and is scored by `--accuracy-command`; TEST08
//! compares with the reference accuracy run. Nothing else
//! goes there: each run's own files (latency breakdown, merged user.conf)
//! go to `--extras-dir` \[default: `run_extras/` in the working directory,
//! then the last three parts of the output directory, e.g.
//! `run_extras/<system>/<benchmark>/<scenario>`\], in a folder per run.
//! With `--engine official` each run is a process of its own.

use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context, Result};
use loadgen_engine::TestMode;

use crate::args::{Engine, RunArgs};
use crate::compliance::{self, AuditTest, Dtype, Report};
use crate::engines::run_step;
use crate::exit::Exit;

/// The flags of `loadgen-node audit`.
#[derive(clap::Args, Debug, Clone)]
pub struct AuditArgs {
    /// The audit: TEST01, TEST04, TEST06, TEST07, TEST08 or TEST09 (only
    /// those the benchmark requires).
    pub test: AuditTest,

    /// TEST07: the benchmark's compliance data set, a directory of `.npy`
    /// samples as --dataset takes them (gpt-oss-120b: 990 samples).
    #[arg(long, value_name = "DIR")]
    pub compliance_dataset: Option<PathBuf>,

    /// TEST07: the accuracy script run on the audit's accuracy log
    /// (`{accuracy_log}` stands for its path), through `sh -c`.
    #[arg(long, value_name = "COMMAND")]
    pub accuracy_command: Option<String>,

    /// TEST07: the pattern of the score in the accuracy script's output,
    /// its first group the number [default: the benchmark's, e.g.
    /// `'exact_match':\s*([\d.]+)`].
    #[arg(long, value_name = "REGEX")]
    pub score_pattern: Option<String>,

    /// Element type of the answers in the accuracy logs, as the official
    /// scripts' --dtype [default: byte for TEST01, int32 for TEST06].
    #[arg(long, value_name = "DTYPE")]
    pub dtype: Option<Dtype>,

    /// TEST06: the tokenizer's end-of-sequence token id.
    #[arg(long, default_value_t = 2, value_name = "ID")]
    pub eos_token_id: i64,

    /// Verify the logs already in --output-dir; run nothing.
    #[arg(long)]
    pub verify_only: bool,

    #[command(flatten)]
    pub(crate) run: RunArgs,
}

/// Runs what the audit needs and verifies it; exit status 4 when the
/// verification fails.
pub fn audit(args: &AuditArgs) -> Result<Exit> {
    compliance::check_required(args.test, &args.run.model, args.run.rules)?;
    if args.run.audit_config.is_some() {
        bail!("--audit-config: the audit writes the official audit.config itself; drop the flag");
    }
    let dir = args.run.output_dir.clone();
    let options = VerifyOptions {
        dtype: args.dtype,
        eos_token_id: args.eos_token_id,
        accuracy_command: args.accuracy_command.clone(),
        score_pattern: args.score_pattern.clone(),
    };
    if args.test == AuditTest::Test07 {
        options.test07_command("--accuracy-command")?;
    }
    if !args.verify_only {
        let extras = match &args.run.extras_dir {
            Some(e) => e.clone(),
            None => extras_for(Path::new("."), &dir),
        };
        let compliance = compliance_dataset(
            args.test,
            &args.run.model,
            args.compliance_dataset.as_deref(),
            "--compliance-dataset",
        )?;
        ensure_reference_runs(args.test, &args.run, &dir, &extras)?;
        run_audit(args.test, &args.run, &dir, &extras, compliance)?;
        eprintln!(
            "loadgen-node: the runs' own files (latency breakdowns) are in {}",
            extras.display()
        );
    }
    let reference = accuracy_dir(&dir).join("mlperf_log_accuracy.json");
    let passed = verify(args.test, &dir, &reference, &args.run, &options)?;
    Ok(match passed {
        true => Exit::Done,
        false => Exit::AuditFailed,
    })
}

/// Where the runs of a scenario's results directory keep their own files:
/// `<base>/run_extras/` and the directory's last three parts
/// (`<system>/<benchmark>/<scenario>` in a submission tree), outside the
/// tree the checker reads.
pub fn extras_for(base: &Path, scenario_dir: &Path) -> PathBuf {
    let parts: Vec<_> = scenario_dir
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect();
    let mut extras = base.join("run_extras");
    for part in &parts[parts.len().saturating_sub(3)..] {
        extras.push(part);
    }
    extras
}

/// Where a scenario's results directory keeps each run.
pub fn performance_dir(dir: &Path) -> PathBuf {
    dir.join("performance").join("run_1")
}

/// Where a scenario's results directory keeps its accuracy run.
pub fn accuracy_dir(dir: &Path) -> PathBuf {
    dir.join("accuracy")
}

/// Whether a run's logs are complete in `dir` (it has a summary and a detail
/// log; an accuracy run also its accuracy log).
pub fn run_done(dir: &Path, accuracy: bool) -> bool {
    ["mlperf_log_summary.txt", "mlperf_log_detail.txt"]
        .iter()
        .all(|f| dir.join(f).is_file())
        && (!accuracy || dir.join("mlperf_log_accuracy.json").is_file())
}

/// One run of `base`'s flags into `out`, in `mode`, with `audit_config`;
/// its own files go to `extras`.
pub fn run_into(
    base: &RunArgs,
    out: &Path,
    extras: &Path,
    mode: Option<TestMode>,
    audit_config: Option<PathBuf>,
    what: &str,
) -> Result<()> {
    // Without an explicit audit file the runs would pick up ./audit.config.
    if audit_config.is_none() && Path::new("audit.config").exists() {
        bail!(
            "./audit.config exists in the working directory and would turn the {what} run into an audit; \
             move it away"
        );
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut args = base.clone();
    args.output_dir = out.to_path_buf();
    args.extras_dir = Some(extras.to_path_buf());
    args.mode = mode;
    args.audit_config = audit_config;
    eprintln!("loadgen-node: {what} run into {}", out.display());
    let exit = run_step(&args).with_context(|| format!("the {what} run into {}", out.display()))?;
    if exit != Exit::Done {
        let reason = match (exit, args.engine) {
            (Exit::RunFailed, Engine::Official) => format!(
                "{}; the reason is in {}",
                exit.meaning(),
                out.join("RUN_FAILED.txt").display()
            ),
            _ => exit.meaning().to_string(),
        };
        bail!(
            "the {what} run into {} failed: {reason} (exit status {})",
            out.display(),
            exit.code()
        );
    }
    Ok(())
}

/// The reference runs the audit compares with, made when missing.
pub fn ensure_reference_runs(
    test: AuditTest,
    base: &RunArgs,
    dir: &Path,
    extras: &Path,
) -> Result<()> {
    if matches!(test, AuditTest::Test01 | AuditTest::Test04)
        && !run_done(&performance_dir(dir), false)
    {
        run_into(
            base,
            &performance_dir(dir),
            &extras.join("performance"),
            Some(TestMode::PerformanceOnly),
            None,
            "reference performance",
        )?;
    }
    if matches!(test, AuditTest::Test01 | AuditTest::Test08) && !run_done(&accuracy_dir(dir), true)
    {
        run_into(
            base,
            &accuracy_dir(dir),
            &extras.join("accuracy"),
            Some(TestMode::AccuracyOnly),
            None,
            "reference accuracy",
        )?;
    }
    Ok(())
}

/// The audit run: the official settings in `<extras>/TESTxx/audit.config`
/// (the tree has no place for it), logs in `TESTxx/performance/run_1`, its
/// accuracy log moved to `TESTxx/accuracy`.
pub fn run_audit(
    test: AuditTest,
    base: &RunArgs,
    dir: &Path,
    extras: &Path,
    compliance_dataset: Option<&Path>,
) -> Result<()> {
    let test_dir = dir.join(test.name());
    if test_dir.exists() {
        std::fs::remove_dir_all(&test_dir).with_context(|| {
            format!("cannot clear the previous audit in {}", test_dir.display())
        })?;
    }
    let run_extras = extras.join(test.name());
    for d in [&test_dir, &run_extras] {
        std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    let mut args = base.clone();
    args.no_trace = true;
    let mut text = compliance::audit_config(test, &base.model);
    if test == AuditTest::Test07 {
        // The compliance data set, whole: its own samples, none synthetic.
        let Some(data) = compliance_dataset else {
            bail!("TEST07 runs on the benchmark's compliance data set; none was given");
        };
        args.dataset = Some(data.to_path_buf());
        args.total_sample_count = None;
        args.sample_bytes = None;
    }
    if matches!(test, AuditTest::Test07 | AuditTest::Test09) {
        // Every sample of the run's data set, each once: all of them loaded
        // (over mlperf.conf's performance sample count of the full data
        // set), and as many queries as samples where the data set is not
        // the benchmark's full one.
        let (data, _) = crate::plan::data_set(&args, &args.model)?;
        let total = data.total();
        args.performance_sample_count = Some(total);
        args.set
            .retain(|kv| kv.key != "performance_sample_count_override");
        args.set.push(
            format!("performance_sample_count_override={total}")
                .parse()
                .map_err(anyhow::Error::msg)?,
        );
        text = text
            .lines()
            .map(|l| match l.starts_with("*.*.min_query_count = ") {
                true => format!("*.*.min_query_count = {total}\n"),
                false => format!("{l}\n"),
            })
            .collect();
    }
    let config = run_extras.join("audit.config");
    std::fs::write(&config, text).with_context(|| format!("cannot write {}", config.display()))?;
    let perf = performance_dir(&test_dir);
    run_into(&args, &perf, &run_extras, None, Some(config), test.name())?;
    if test.logs_answers() {
        let acc = accuracy_dir(&test_dir);
        std::fs::create_dir_all(&acc)
            .with_context(|| format!("cannot create {}", acc.display()))?;
        let from = perf.join("mlperf_log_accuracy.json");
        std::fs::rename(&from, acc.join("mlperf_log_accuracy.json"))
            .with_context(|| format!("cannot move {}", from.display()))?;
    }
    Ok(())
}

fn write_report(path: &Path, report: &Report) -> Result<()> {
    std::fs::write(path, report.text()).with_context(|| format!("cannot write {}", path.display()))
}

/// The checks' settings beyond the run's flags.
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    /// TEST01/TEST06: the answers' element type.
    pub dtype: Option<Dtype>,
    /// TEST06: the end-of-sequence token.
    pub eos_token_id: i64,
    /// TEST07: the accuracy script, `{accuracy_log}` its log.
    pub accuracy_command: Option<String>,
    /// TEST07: the score's pattern in its output.
    pub score_pattern: Option<String>,
}

impl VerifyOptions {
    /// TEST07's accuracy script, or a refusal naming `name`, the flag or
    /// plan key that gives it.
    pub fn test07_command(&self, name: &str) -> Result<&str> {
        match self.accuracy_command.as_deref() {
            Some(c) if !c.trim().is_empty() => Ok(c),
            _ => bail!(
                "TEST07 scores its accuracy log with the benchmark's accuracy script: give {name} \
                 (`{{accuracy_log}}` stands for the log; against synthetic sut-nodes: \
                 `loadgen-node check-synthetic --model MODEL --dataset COMPLIANCE_DIR \
                 --accuracy-log {{accuracy_log}}` with the score pattern `accuracy=([\\d.]+)%`)"
            ),
        }
    }
}

/// The compliance data set TEST07 needs, or a refusal naming `name`, the
/// flag or plan key that gives it; None for the other audits.
pub fn compliance_dataset<'a>(
    test: AuditTest,
    model: &str,
    given: Option<&'a Path>,
    name: &str,
) -> Result<Option<&'a Path>> {
    if test != AuditTest::Test07 {
        return Ok(None);
    }
    let samples = compliance::test07_settings(model).map_or(0, |t| t.samples);
    match given {
        Some(dir) if dir.is_dir() => Ok(Some(dir)),
        Some(dir) => bail!(
            "{name} {}: not a directory (TEST07 needs {model}'s compliance data set, \
             {samples} samples as .npy files)",
            dir.display()
        ),
        None => bail!(
            "TEST07 runs on {model}'s own compliance data set ({samples} samples, apart from the \
             accuracy data set): give {name} DIR, a directory of its samples as .npy files, as \
             --dataset takes them (docs/submission.md says how to make one for synthetic runs)"
        ),
    }
}

/// Verifies the audit's logs in `dir` by the test's published rules (TEST01
/// and TEST08 against the accuracy log `reference`), writes the
/// verification files where the checker reads them and prints what the
/// official script prints. True when the audit passes.
pub fn verify(
    test: AuditTest,
    dir: &Path,
    reference: &Path,
    run: &RunArgs,
    options: &VerifyOptions,
) -> Result<bool> {
    let test_dir = dir.join(test.name());
    let audit_perf = performance_dir(&test_dir);
    let audit_acc = accuracy_dir(&test_dir).join("mlperf_log_accuracy.json");
    let show = |r: &Report| print!("{}", r.text());
    let config = compliance::audit_config(test, &run.model);
    let setting = |name: &str| {
        compliance::audit_setting(&config, name)
            .with_context(|| format!("{test}: no {name} for {} in the suite table", run.model))
    };
    let passed = match test {
        AuditTest::Test01 => {
            let acc = compliance::test01_accuracy(
                reference,
                &audit_acc,
                options.dtype.unwrap_or(Dtype::Byte),
            )?;
            let perf = compliance::test01_performance(
                &performance_dir(dir).join("mlperf_log_detail.txt"),
                &audit_perf.join("mlperf_log_detail.txt"),
            )?;
            write_report(&test_dir.join("verify_accuracy.txt"), &acc)?;
            write_report(&test_dir.join("verify_performance.txt"), &perf)?;
            show(&acc);
            show(&perf);
            println!("Accuracy check pass: {}", py_bool(acc.passed));
            println!("Performance check pass: {}", py_bool(perf.passed));
            println!("TEST01 verification complete");
            if !acc.passed {
                println!(
                    "TEST01: the sampled answers differ from the accuracy run's; a system with \
                     non-deterministic answers must show equal accuracy on both instead \
                     (baseline_accuracy.txt, compliance_accuracy.txt)"
                );
            }
            acc.passed && perf.passed
        }
        AuditTest::Test04 => {
            let perf = compliance::test04_performance(
                &performance_dir(dir).join("mlperf_log_summary.txt"),
                &audit_perf.join("mlperf_log_summary.txt"),
            )?;
            write_report(&test_dir.join("verify_performance.txt"), &perf)?;
            show(&perf);
            println!("Performance check pass: {}", py_bool(perf.passed));
            println!("TEST04 verification complete");
            perf.passed
        }
        AuditTest::Test06 => {
            let report = compliance::test06(
                &audit_acc,
                run.scenario.as_str(),
                options.dtype.unwrap_or(Dtype::Int32),
                options.eos_token_id,
            )?;
            write_report(&test_dir.join("verify_accuracy.txt"), &report)?;
            show(&report);
            report.passed
        }
        AuditTest::Test07 => {
            let command = options
                .test07_command("--accuracy-command")?
                .replace("{accuracy_log}", &audit_acc.display().to_string());
            let out = std::process::Command::new("sh")
                .args(["-c", &format!("{command} 2>&1")])
                .output()
                .with_context(|| format!("TEST07: cannot start the accuracy script `{command}`"))?;
            let output = String::from_utf8_lossy(&out.stdout);
            let pattern = match &options.score_pattern {
                Some(p) => p.clone(),
                None => compliance::test07_settings(&run.model)
                    .map(|t| t.score_pattern.to_string())
                    .with_context(|| format!("TEST07: no score pattern for {}", run.model))?,
            };
            let report =
                compliance::test07(&output, &pattern, setting("test07_accuracy_threshold")?)?;
            write_report(&test_dir.join("verify_accuracy.txt"), &report)?;
            show(&report);
            println!("Accuracy check pass: {}", py_bool(report.passed));
            println!("TEST07 verification complete");
            report.passed
        }
        AuditTest::Test08 => {
            let report =
                compliance::test08(reference, &audit_acc, crate::benchmarks::TEST08_TOLERANCE)?;
            write_report(&test_dir.join("verify_accuracy.txt"), &report)?;
            show(&report);
            report.passed
        }
        AuditTest::Test09 => {
            let report = compliance::test09(
                &audit_acc,
                setting("test09_min_output_tokens")?,
                setting("test09_max_output_tokens")?,
            )?;
            write_report(&test_dir.join("verify_output_len.txt"), &report)?;
            show(&report);
            report.passed
        }
    };
    Ok(passed)
}

fn py_bool(b: bool) -> &'static str {
    match b {
        true => "True",
        false => "False",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extras_keep_the_scenario_dirs_last_three_parts() {
        let scenario = Path::new("/s/sub/closed/Org/results/sys/resnet/Offline");
        assert_eq!(
            extras_for(Path::new("plan"), scenario),
            Path::new("plan/run_extras/sys/resnet/Offline")
        );
        assert_eq!(
            extras_for(Path::new("."), Path::new("./Offline")),
            Path::new("./run_extras/Offline")
        );
    }
}
