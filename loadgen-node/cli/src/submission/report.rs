//! What a submission's tree holds: each result's state, the audits'
//! recorded verdicts, the table printed at the end and the official
//! checker's verdict.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::plan::SubmissionPlan;
use crate::compliance::AuditTest;

/// The state of one benchmark and scenario in the tree.
pub(super) struct Row {
    pub(super) what: String,
    pub(super) cells: Vec<(String, String)>,
    pub(super) valid: bool,
}

pub(super) fn result_validity(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("mlperf_log_summary.txt"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("Result is : ").map(|v| v.trim().to_string()))
        })
        .unwrap_or_else(|| "missing".into())
}

/// The verdict an audit recorded in its verification files; None when they
/// are missing.
pub(super) fn recorded_verdict(test: AuditTest, test_dir: &Path) -> Option<bool> {
    let read = |f: &str| std::fs::read_to_string(test_dir.join(f)).ok();
    let pass = |t: String| t.lines().any(|l| l.trim() == "TEST PASS");
    Some(match test {
        AuditTest::Test01 => {
            pass(read("verify_accuracy.txt")?) && pass(read("verify_performance.txt")?)
        }
        AuditTest::Test04 => pass(read("verify_performance.txt")?),
        AuditTest::Test06 => read("verify_accuracy.txt")?.contains("TEST06 verification complete"),
        AuditTest::Test07 | AuditTest::Test08 => pass(read("verify_accuracy.txt")?),
        AuditTest::Test09 => pass(read("verify_output_len.txt")?),
    })
}

/// Prints the state of every result and where the tree is.
pub(super) fn print_table(rows: &[Row], root: &Path) {
    println!("\n{:<28} state", "result");
    for r in rows {
        let cells = r
            .cells
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        println!(
            "{:<28} {:<8} {cells}",
            r.what,
            if r.valid { "VALID" } else { "MISSING" }
        );
    }
    println!("tree: {}", root.display());
}

pub(super) fn run_checker(plan: &SubmissionPlan, inference: &Path) -> Result<bool> {
    let dir = inference.join("tools").join("submission");
    if !dir.join("submission_checker").is_dir() {
        bail!(
            "{}: not a checkout of mlcommons/inference (no tools/submission/submission_checker)",
            inference.display()
        );
    }
    let input = std::path::absolute(&plan.output)?;
    let base = std::path::absolute(&plan.base)?;
    let out = Command::new("python3")
        .args(["-m", "submission_checker.main", "--input"])
        .arg(&input)
        .args([
            "--version",
            &plan.checker_version,
            "--submitter",
            &plan.submitter,
        ])
        .arg("--csv")
        .arg(base.join("checker_summary.csv"))
        .current_dir(&dir)
        .output()
        .context("cannot start python3 for the submission checker")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("\nofficial submission checker ({}):", plan.checker_version);
    for l in text
        .lines()
        .filter(|l| l.contains("ERROR") || l.contains("SUMMARY") || l.contains("Results"))
    {
        println!("  {l}");
    }
    if !text.contains("SUMMARY:") {
        // It stopped before its verdict (a Python exception, say): its last
        // line says why, often a system description field left to fill in.
        let last = text
            .lines()
            .rfind(|l| !l.trim().is_empty())
            .unwrap_or("no output");
        println!(
            "  the checker stopped without a verdict: {} (whole output in {})",
            last.trim(),
            base.join("checker.log").display()
        );
    }
    std::fs::write(base.join("checker.log"), &text)?;
    Ok(text.contains("SUMMARY: submission looks OK"))
}
