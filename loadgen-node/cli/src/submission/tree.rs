//! Where a submission's files go, in its tree and beside it (the full
//! accuracy logs, the runs' extras), and the files the checker wants beside
//! the logs: measurements.json, user.conf, the READMEs, accuracy.txt with the
//! log's hash, the system description.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use loadgen_engine::Scenario;
use serde_json::{json, Map};
use sha2::{Digest, Sha256};

use super::plan::{scenario_folder, Division, PlanBenchmark, SubmissionPlan};
use crate::args::Engine;
use crate::audit::{self, accuracy_dir, performance_dir};
use crate::compliance::AuditTest;
use crate::preflight::{self, PLACEHOLDER};

impl SubmissionPlan {
    /// `<output>/<division>/<submitter>`.
    pub fn root(&self) -> PathBuf {
        self.output
            .join(self.division.as_str())
            .join(&self.submitter)
    }

    /// The results directory of one benchmark and scenario.
    pub fn scenario_dir(&self, b: &PlanBenchmark, s: Scenario) -> PathBuf {
        self.root()
            .join("results")
            .join(&self.system)
            .join(&b.benchmark)
            .join(scenario_folder(&b.model, s))
    }

    /// Where the full accuracy logs of one benchmark and scenario are kept
    /// once the tree's copies are truncated: beside the plan, outside the
    /// tree.
    pub fn full_logs_dir(&self, b: &PlanBenchmark, s: Scenario) -> PathBuf {
        self.beside_plan("accuracy_logs_full", b, s)
    }

    /// Where the runs keep the files the checker does not allow in the
    /// tree (latency breakdowns, the official engine's merged user.conf,
    /// the audits' audit.config), a folder per run: beside the plan.
    pub fn extras_dir(&self, b: &PlanBenchmark, s: Scenario) -> PathBuf {
        audit::extras_for(&self.base, &self.scenario_dir(b, s))
    }

    /// `<plan's directory>/<folder>/<system>/<benchmark>/<scenario>`.
    fn beside_plan(&self, folder: &str, b: &PlanBenchmark, s: Scenario) -> PathBuf {
        self.base
            .join(folder)
            .join(&self.system)
            .join(&b.benchmark)
            .join(scenario_folder(&b.model, s))
    }

    /// `<root>/systems/<system>.json`: the system description.
    pub fn system_json(&self) -> PathBuf {
        self.root()
            .join("systems")
            .join(format!("{}.json", self.system))
    }
}

/// The files the checker wants beside the logs: measurements.json, the
/// user.conf the runs used and a README with the commands.
pub(super) fn write_measurements(
    plan: &SubmissionPlan,
    b: &PlanBenchmark,
    s: Scenario,
    dir: &Path,
) -> Result<()> {
    let settings = b
        .settings
        .iter()
        .find(|(x, _)| *x == s)
        .map(|(_, l)| l.clone())
        .unwrap_or_default();
    let user_conf: String = settings
        .iter()
        .map(|kv| format!("{}.{}.{} = {}\n", b.model, s.as_str(), kv.key, kv.value))
        .collect();
    let write = |name: &str, text: String| -> Result<()> {
        let p = dir.join(name);
        if p.exists() {
            return Ok(());
        }
        std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))
    };
    write(
        "user.conf",
        match user_conf.is_empty() {
            true => format!(
                "# {} {}: no settings beyond mlperf.conf\n",
                b.model,
                s.as_str()
            ),
            false => user_conf,
        },
    )?;
    let mut cmd = format!(
        "loadgen-node {} --benchmark {} --scenario {} --rules {}",
        plan.node_flags().join(" "),
        b.model,
        s.as_str(),
        plan.rules
    );
    if plan.engine == Engine::Official {
        cmd.push_str(" --engine official");
    }
    for f in plan.run_flags.iter().chain(&b.run_flags) {
        cmd.push(' ');
        cmd.push_str(f);
    }
    write(
        "README.md",
        format!(
            "# {} {}\n\nRun by `loadgen-node submission` with, for each mode:\n\n```sh\n{cmd} --user-conf user.conf\n```\n",
            b.benchmark,
            s.as_str()
        ),
    )?;
    let fill = json!(PLACEHOLDER);
    let measurements = json!({
        "input_data_types": fill,
        "retraining": "no",
        "starting_weights_filename": fill,
        "weight_data_types": fill,
        "weight_transformations": fill,
    });
    write(
        "measurements.json",
        serde_json::to_string_pretty(&measurements)? + "\n",
    )
}

/// Runs `command` (with `{accuracy_log}` replaced) on the accuracy log in
/// `acc` and writes its output to `acc/accuracy.txt`, unless it exists.
pub(super) fn accuracy_txt(command: Option<&String>, acc: &Path, what: &str) -> Result<()> {
    let txt = acc.join("accuracy.txt");
    let Some(command) = command else {
        return Ok(());
    };
    if txt.exists() {
        return Ok(());
    }
    let log = acc.join("mlperf_log_accuracy.json");
    let command = command
        .replace("{accuracy_log}", &log.display().to_string())
        .replace("{accuracy_dir}", &acc.display().to_string());
    let out = Command::new("sh")
        .args(["-c", &command])
        .output()
        .with_context(|| format!("{what}: cannot start the accuracy command"))?;
    if !out.status.success() {
        bail!(
            "{what}: the accuracy command failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    std::fs::write(&txt, &out.stdout).with_context(|| format!("cannot write {}", txt.display()))
}

/// Bytes kept from each end of a truncated accuracy log, and the largest
/// log the checker accepts.
const VIEWABLE: usize = 4096;
const MAX_ACCURACY_LOG: u64 = 10 * 1024;

/// The last step of an accuracy directory, as the submission rules ask:
/// the full log's SHA-256 appended to accuracy.txt, the full log kept in
/// `backup`, the log in the tree cut to its first and last 4 KiB. Done once
/// accuracy.txt exists, and only once.
pub(super) fn finalize_accuracy(acc: &Path, backup: &Path) -> Result<()> {
    let txt = acc.join("accuracy.txt");
    let log = acc.join("mlperf_log_accuracy.json");
    let Ok(text) = std::fs::read_to_string(&txt) else {
        return Ok(());
    };
    let hashed = text.lines().any(|l| {
        l.strip_prefix("hash=")
            .is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_alphanumeric()))
    });
    if hashed {
        return Ok(());
    }
    let data = std::fs::read(&log).with_context(|| format!("cannot read {}", log.display()))?;
    std::fs::create_dir_all(backup)
        .with_context(|| format!("cannot create {}", backup.display()))?;
    let kept = backup.join("mlperf_log_accuracy.json");
    std::fs::write(&kept, &data).with_context(|| format!("cannot write {}", kept.display()))?;
    let hash: String = Sha256::digest(&data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::fs::write(&txt, format!("{text}\nhash={hash}\n"))
        .with_context(|| format!("cannot write {}", txt.display()))?;
    if data.len() as u64 > MAX_ACCURACY_LOG {
        let mut cut = data[..VIEWABLE].to_vec();
        cut.extend_from_slice(b"\n\n...\n\n");
        cut.extend_from_slice(&data[data.len() - VIEWABLE..]);
        std::fs::write(&log, cut).with_context(|| format!("cannot write {}", log.display()))?;
    }
    Ok(())
}

/// Removes the empty trace files of runs made without a trace: the checker
/// refuses empty files.
pub(super) fn remove_empty_traces(dir: &Path) {
    let audits = AuditTest::ALL.map(|t| performance_dir(&dir.join(t.name())));
    for d in [accuracy_dir(dir), performance_dir(dir)]
        .iter()
        .chain(&audits)
    {
        let trace = d.join("mlperf_log_trace.json");
        if std::fs::metadata(&trace).is_ok_and(|m| m.len() == 0) {
            let _ = std::fs::remove_file(trace);
        }
    }
}

/// A system description with every field the checker requires: the known
/// ones filled, the others marked; kept as it is when it exists.
pub(super) fn ensure_system_json(plan: &SubmissionPlan) -> Result<()> {
    let path = plan.system_json();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    if path.exists() {
        return preflight::merge_system_json(&path, &plan.system_fields);
    }
    let mut m = Map::new();
    for k in [
        "status",
        "number_of_nodes",
        "host_processor_model_name",
        "host_processors_per_node",
        "host_processor_core_count",
        "host_memory_capacity",
        "host_storage_capacity",
        "host_storage_type",
        "accelerators_per_node",
        "accelerator_model_name",
        "accelerator_memory_capacity",
        "framework",
        "other_software_stack",
        "host_processor_frequency",
        "host_processor_caches",
        "host_memory_configuration",
        "host_processor_interconnect",
        "host_networking",
        "host_networking_topology",
        "accelerator_frequency",
        "accelerator_host_interconnect",
        "accelerator_interconnect",
        "accelerator_interconnect_topology",
        "accelerator_memory_configuration",
        "accelerator_on-chip_memories",
        "cooling",
        "hw_notes",
        "sw_notes",
        "host_network_card_count",
        "system_type_detail",
    ] {
        m.insert(k.into(), json!(PLACEHOLDER));
    }
    if plan.division == Division::Network {
        // The checker reads the Network-division fields only when this is
        // "True" (lower-cased); preflight measures most of them.
        for k in preflight::NETWORK_FIELDS {
            m.insert(k.to_string(), json!(PLACEHOLDER));
        }
        m.insert("is_network".into(), json!("True"));
    }
    m.insert("division".into(), json!(plan.division.as_str()));
    m.insert("submitter".into(), json!(plan.submitter));
    m.insert("system_name".into(), json!(plan.system));
    m.insert("operating_system".into(), json!(facts::host::os_name()));
    m.insert("system_type".into(), json!("datacenter,edge"));
    m.insert(
        "number_of_nodes".into(),
        // Names resolved as a run would resolve them (without waiting).
        match qdl::find_nodes(
            &plan.sut.to_string(),
            plan.sut_file.as_deref(),
            Duration::ZERO,
            |_| {},
        ) {
            Ok(found) => json!(found.nodes.len().to_string()),
            Err(_) => json!(PLACEHOLDER),
        },
    );
    m.extend(plan.system_fields.clone());
    preflight::merge_system_json(&path, &m)
}
