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
//! audit_dtype = "int32"           # TEST01/TEST06 --dtype (default byte/int32)
//! eos_token_id = 2                # TEST06 (default 2)
//! [benchmark.settings]            # user.conf settings of every scenario
//! min_duration = 600000
//! [benchmark.settings.Offline]    # and of one scenario
//! target_qps = 20000
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;
use loadgen_engine::{Scenario, TestMode};
use serde_json::{json, Map};
use sha2::{Digest, Sha256};

use crate::args::RunArgs;
use crate::audit::{self, accuracy_dir, performance_dir, run_done};
use crate::benchmarks::{self, Round};
use crate::budget::{self, HostMemory, RunNeeds};
use crate::compliance::{self, AuditTest, Dtype};
use crate::exit::Exit;
use crate::plan;
use crate::preflight::{self, PreflightArgs, PLACEHOLDER};

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

/// One benchmark of the plan.
#[derive(Debug, Clone)]
pub(crate) struct PlanBenchmark {
    pub model: String,
    /// Its directory name in the tree (the checker's benchmark name).
    pub benchmark: String,
    pub scenarios: Vec<Scenario>,
    pub run_flags: Vec<String>,
    /// `--set key=value` of each scenario.
    pub settings: Vec<(Scenario, Vec<String>)>,
    pub accuracy_command: Option<String>,
    /// The audits' --dtype and --eos-token-id (TEST01, TEST06).
    pub audit_dtype: Option<Dtype>,
    pub eos_token_id: i64,
}

#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// The plan's directory: relative paths start there.
    pub base: PathBuf,
    pub system: String,
    pub submitter: String,
    pub division: String,
    pub output: PathBuf,
    /// `--sut`; empty when `sut_file` names every node.
    pub sut: String,
    /// `--sut-file`, relative to the plan's directory.
    pub sut_file: Option<PathBuf>,
    pub run_flags: Vec<String>,
    /// The LoadGen engine of every run; `native` (the default) needs no flag.
    pub engine: String,
    /// The round of the rules: which benchmarks, audits and checker
    /// folders apply, and what may be compressed.
    pub rules: Round,
    pub inference: Option<PathBuf>,
    pub checker_version: String,
    pub benchmarks: Vec<PlanBenchmark>,
    /// Fields of the system description set by the plan (`status`, the
    /// processor, the accelerators...): written over what the tool fills.
    pub system_fields: Map<String, serde_json::Value>,
}

/// The checker's benchmark folder of `model` in `round`, or why the plan
/// cannot have it.
pub fn checker_benchmark(model: &str, round: Round) -> Result<&'static str, String> {
    let Some(b) = benchmarks::find(model) else {
        return Err(format!(
            "unknown benchmark `{model}` (known: {})",
            benchmarks::BENCHMARKS
                .iter()
                .filter(|b| b.rules(round).is_some())
                .map(|b| b.model)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    };
    if let Some(why) = b.retired {
        return Err(format!("`{model}`: {why}"));
    }
    match b.rules(round) {
        Some(r) => Ok(r.checker[0]),
        None => Err(format!(
            "`{model}` is not a benchmark of the {round} rules (it is one of: {}); set \
             `rules` to that round",
            b.round_names()
        )),
    }
}

/// The scenario's folder in the tree: an interactive variant's Server runs
/// are the checker's `Interactive` scenario.
pub fn scenario_folder(model: &str, s: Scenario) -> &'static str {
    match (benchmarks::find(model).is_some_and(|b| b.interactive), s) {
        (true, Scenario::Server) => "Interactive",
        _ => s.as_str(),
    }
}

fn strings(v: &toml::Value, what: &str) -> Result<Vec<String>> {
    let toml::Value::Array(items) = v else {
        bail!("{what}: expected a list of strings");
    };
    items
        .iter()
        .map(|i| match i {
            toml::Value::String(s) => Ok(s.clone()),
            _ => bail!("{what}: expected a list of strings"),
        })
        .collect()
}

fn setting(key: &str, v: &toml::Value, what: &str) -> Result<String> {
    let value = match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => u8::from(*b).to_string(),
        _ => bail!("{what}.{key}: expected a number or a string"),
    };
    Ok(format!("{key}={value}"))
}

impl Plan {
    /// Reads and checks a plan; errors name the file and the field.
    pub fn read(path: &Path) -> Result<Plan> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the plan {}", path.display()))?;
        let name = path.display().to_string();
        let table: toml::Table =
            toml::from_str(&text).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        // A bare file name has an empty parent: the current directory.
        let base = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        Plan::from_table(&name, base, &table)
    }

    fn from_table(name: &str, base: &Path, t: &toml::Table) -> Result<Plan> {
        const KEYS: &[&str] = &[
            "system",
            "submitter",
            "division",
            "output",
            "sut",
            "sut_file",
            "run_flags",
            "inference",
            "checker_version",
            "benchmark",
            "engine",
            "rules",
            "system_description",
        ];
        for k in t.keys() {
            if !KEYS.contains(&k.as_str()) {
                bail!("{name}: unknown key `{k}` (known: {})", KEYS.join(", "));
            }
        }
        let text = |k: &str, default: Option<&str>| -> Result<String> {
            match (t.get(k), default) {
                (Some(toml::Value::String(s)), _) if !s.trim().is_empty() => Ok(s.clone()),
                (Some(_), _) => bail!("{name}: `{k}` must be a non-empty string"),
                (None, Some(d)) => Ok(d.to_string()),
                (None, None) => bail!("{name}: `{k}` is missing"),
            }
        };
        let division = text("division", Some("network"))?;
        if !["network", "closed", "open"].contains(&division.as_str()) {
            bail!("{name}: division `{division}`: expected network, closed or open");
        }
        let run_flags = match t.get("run_flags") {
            Some(v) => strings(v, &format!("{name}: run_flags"))?,
            None => Vec::new(),
        };
        let Some(toml::Value::Array(entries)) = t.get("benchmark") else {
            bail!("{name}: no [[benchmark]] entries");
        };
        let mut system_fields = Map::new();
        match t.get("system_description") {
            None => {}
            Some(toml::Value::Table(fields)) => {
                for (k, v) in fields {
                    let toml::Value::String(v) = v else {
                        bail!("{name}: system_description.{k} must be a string");
                    };
                    system_fields.insert(k.clone(), json!(v));
                }
            }
            Some(_) => bail!("{name}: `system_description` must be a table of strings"),
        }
        let rules: Round = text("rules", Some(Round::CURRENT.as_str()))?
            .parse()
            .map_err(|e| anyhow::anyhow!("{name}: rules: {e}"))?;
        let mut benchmarks = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let what = format!("{name}: benchmark {}", i + 1);
            let toml::Value::Table(e) = e else {
                bail!("{what}: expected a table");
            };
            benchmarks.push(PlanBenchmark::from_table(&what, e, rules)?);
        }
        Ok(Plan {
            base: base.to_path_buf(),
            system: text("system", None)?,
            submitter: text("submitter", None)?,
            division,
            output: base.join(text("output", Some("submission"))?),
            sut_file: t
                .get("sut_file")
                .map(|v| match v {
                    toml::Value::String(f) => Ok(base.join(f)),
                    _ => bail!("{name}: `sut_file` must be a string"),
                })
                .transpose()?,
            sut: text(
                "sut",
                // A file of nodes may stand alone.
                t.contains_key("sut_file").then_some(""),
            )?,
            run_flags,
            engine: text("engine", Some("native"))?,
            rules,
            inference: t
                .get("inference")
                .and_then(|v| v.as_str())
                .map(PathBuf::from),
            // The checker's own round, or the oldest it has for v5.1.
            checker_version: text(
                "checker_version",
                Some(match rules {
                    Round::V5_1 => "v6.0",
                    Round::V6_1 => "v6.1",
                }),
            )?,
            benchmarks,
            system_fields,
        })
    }

    /// `--sut` and `--sut-file` as the plan gives them.
    fn node_flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        if !self.sut.is_empty() {
            flags.extend(["--sut".to_string(), self.sut.clone()]);
        }
        if let Some(f) = &self.sut_file {
            flags.extend(["--sut-file".to_string(), f.display().to_string()]);
        }
        flags
    }

    /// `<output>/<division>/<submitter>`.
    pub fn root(&self) -> PathBuf {
        self.output.join(&self.division).join(&self.submitter)
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

    pub fn system_json(&self) -> PathBuf {
        self.root()
            .join("systems")
            .join(format!("{}.json", self.system))
    }
}

impl PlanBenchmark {
    fn from_table(what: &str, e: &toml::Table, rules: Round) -> Result<PlanBenchmark> {
        const KEYS: &[&str] = &[
            "model",
            "benchmark",
            "scenarios",
            "run_flags",
            "settings",
            "accuracy_command",
            "audit_dtype",
            "eos_token_id",
        ];
        for k in e.keys() {
            if !KEYS.contains(&k.as_str()) {
                bail!("{what}: unknown key `{k}` (known: {})", KEYS.join(", "));
            }
        }
        let model = match e.get("model") {
            Some(toml::Value::String(m)) => benchmarks::canonical(m).to_string(),
            _ => bail!("{what}: `model` is missing"),
        };
        let default =
            checker_benchmark(&model, rules).map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
        let folders = benchmarks::find(&model)
            .and_then(|b| b.rules(rules))
            .map_or(&[][..], |r| r.checker);
        let benchmark = match e.get("benchmark") {
            None => default.to_string(),
            Some(toml::Value::String(b)) if folders.contains(&b.as_str()) => b.clone(),
            Some(_) => bail!(
                "{what}: `benchmark` must be one of the checker's folders for {model}: {}",
                folders.join(", ")
            ),
        };
        let scenarios = match e.get("scenarios") {
            Some(v) => strings(v, &format!("{what}: scenarios"))?
                .iter()
                .map(|s| {
                    s.parse::<Scenario>()
                        .map_err(|e| anyhow::anyhow!("{what}: scenarios: {s}: {e}"))
                })
                .collect::<Result<Vec<_>>>()?,
            None => bail!("{what}: `scenarios` is missing"),
        };
        let mut common = Vec::new();
        let mut per: Vec<(Scenario, Vec<String>)> =
            scenarios.iter().map(|s| (*s, Vec::new())).collect();
        if let Some(settings) = e.get("settings") {
            let toml::Value::Table(settings) = settings else {
                bail!("{what}: settings: expected a table");
            };
            for (k, v) in settings {
                match v {
                    toml::Value::Table(t) => {
                        let s: Scenario = k
                            .parse()
                            .map_err(|e| anyhow::anyhow!("{what}: settings.{k}: {e}"))?;
                        let Some((_, list)) = per.iter_mut().find(|(x, _)| *x == s) else {
                            bail!("{what}: settings.{k}: not one of this benchmark's scenarios");
                        };
                        for (key, value) in t {
                            list.push(setting(key, value, &format!("{what}: settings.{k}"))?);
                        }
                    }
                    v => common.push(setting(k, v, &format!("{what}: settings"))?),
                }
            }
        }
        for (_, list) in per.iter_mut() {
            let own = std::mem::take(list);
            list.extend(common.iter().cloned());
            list.extend(own);
        }
        Ok(PlanBenchmark {
            model,
            benchmark,
            scenarios,
            run_flags: match e.get("run_flags") {
                Some(v) => strings(v, &format!("{what}: run_flags"))?,
                None => Vec::new(),
            },
            settings: per,
            accuracy_command: e
                .get("accuracy_command")
                .and_then(|v| v.as_str())
                .map(String::from),
            audit_dtype: match e.get("audit_dtype") {
                Some(toml::Value::String(d)) => Some(
                    d.parse()
                        .map_err(|err| anyhow::anyhow!("{what}: audit_dtype: {err}"))?,
                ),
                Some(_) => bail!("{what}: audit_dtype must be a string"),
                None => None,
            },
            eos_token_id: match e.get("eos_token_id") {
                Some(toml::Value::Integer(i)) => *i,
                Some(_) => bail!("{what}: eos_token_id must be an integer"),
                None => 2,
            },
        })
    }
}

/// Parses the run flags of one scenario as `loadgen-node` would.
#[derive(Parser)]
struct RunFlags {
    #[command(flatten)]
    run: RunArgs,
}

fn run_args(plan: &Plan, b: &PlanBenchmark, s: Scenario) -> Result<RunArgs> {
    let mut argv = vec!["loadgen-node".to_string()];
    argv.extend(plan.node_flags());
    argv.extend([
        "--model".into(),
        b.model.clone(),
        "--scenario".into(),
        s.as_str().into(),
    ]);
    if plan.engine != "native" {
        argv.extend(["--engine".to_string(), plan.engine.clone()]);
    }
    argv.extend(["--rules".to_string(), plan.rules.to_string()]);
    argv.extend(plan.run_flags.iter().cloned());
    argv.extend(b.run_flags.iter().cloned());
    for (scenario, settings) in &b.settings {
        if *scenario == s {
            for kv in settings {
                argv.push("--set".into());
                argv.push(kv.clone());
            }
        }
    }
    let flags = RunFlags::try_parse_from(&argv)
        .map_err(|e| anyhow::anyhow!("{} {s}: run flags: {e}", b.model))?;
    Ok(flags.run)
}

/// The state of one benchmark and scenario in the tree.
struct Row {
    what: String,
    cells: Vec<(String, String)>,
    valid: bool,
}

fn result_validity(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("mlperf_log_summary.txt"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("Result is : ").map(|v| v.trim().to_string()))
        })
        .unwrap_or_else(|| "missing".into())
}

/// The files the checker wants beside the logs: measurements.json, the
/// user.conf the runs used and a README with the commands.
fn write_measurements(plan: &Plan, b: &PlanBenchmark, s: Scenario, dir: &Path) -> Result<()> {
    let settings = b
        .settings
        .iter()
        .find(|(x, _)| *x == s)
        .map(|(_, l)| l.clone())
        .unwrap_or_default();
    let user_conf: String = settings
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| format!("{}.{}.{} = {}\n", b.model, s.as_str(), k, v))
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
        "loadgen-node {} --model {} --scenario {}",
        plan.node_flags().join(" "),
        b.model,
        s.as_str()
    );
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
fn accuracy_txt(command: Option<&String>, acc: &Path, what: &str) -> Result<()> {
    let txt = acc.join("accuracy.txt");
    let Some(command) = command else {
        return Ok(());
    };
    if txt.exists() {
        return Ok(());
    }
    let log = acc.join("mlperf_log_accuracy.json");
    let command = command.replace("{accuracy_log}", &log.display().to_string());
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
fn finalize_accuracy(acc: &Path, backup: &Path) -> Result<()> {
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

/// The verdict an audit recorded in its verification files; None when they
/// are missing.
fn recorded_verdict(test: AuditTest, test_dir: &Path) -> Option<bool> {
    let read = |f: &str| std::fs::read_to_string(test_dir.join(f)).ok();
    let pass = |t: String| t.lines().any(|l| l.trim() == "TEST PASS");
    Some(match test {
        AuditTest::Test01 => {
            pass(read("verify_accuracy.txt")?) && pass(read("verify_performance.txt")?)
        }
        AuditTest::Test04 => pass(read("verify_performance.txt")?),
        AuditTest::Test06 => read("verify_accuracy.txt")?.contains("TEST06 verification complete"),
    })
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
        let mut needs = plan::run_needs(&args, audit.as_deref())?;
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
fn pending(plan: &Plan, b: &PlanBenchmark, s: Scenario) -> Vec<Step> {
    let dir = plan.scenario_dir(b, s);
    let mut steps = Vec::new();
    if !run_done(&accuracy_dir(&dir), true) {
        steps.push(Step::run("accuracy", TestMode::AccuracyOnly, 1));
    }
    if !run_done(&performance_dir(&dir), false) {
        steps.push(Step::run("performance", TestMode::PerformanceOnly, 0));
    }
    if plan.division != "open" {
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
fn scenario_args(plan: &Plan, b: &PlanBenchmark, s: Scenario) -> Result<RunArgs> {
    let mut args = run_args(plan, b, s)?;
    args.no_trace = true;
    Ok(args)
}

/// Refuses a plan whose runs still to be made cannot fit this host (the
/// memory of each, the logs of all on the tree's disk), before the first.
fn check_fits(plan: &Plan) -> Result<()> {
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
fn scenario(plan: &Plan, b: &PlanBenchmark, s: Scenario) -> Result<Row> {
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
    let mut valid = performance == "VALID" && accuracy_done;
    let mut cells = vec![
        (
            "accuracy".to_string(),
            match accuracy_done {
                true => "done".to_string(),
                false => "accuracy.txt missing".to_string(),
            },
        ),
        ("performance".to_string(), performance),
    ];
    // The reference for TEST01: the full accuracy log, wherever it is now.
    let reference = match backup.join("mlperf_log_accuracy.json") {
        kept if kept.exists() => kept,
        _ => accuracy_dir(&dir).join("mlperf_log_accuracy.json"),
    };
    if plan.division != "open" {
        for audit in compliance::required_audits(&b.model, plan.rules) {
            let Some(test) = AuditTest::of(audit) else {
                // The checker needs it; its official script makes it.
                valid = false;
                cells.push((
                    audit.name().to_string(),
                    "not run by loadgen-node".to_string(),
                ));
                continue;
            };
            let test_dir = dir.join(test.name());
            // A passed audit is kept; a failed or missing one is run again.
            let passed = match recorded_verdict(test, &test_dir) {
                Some(true) => true,
                _ => {
                    fits(None, Some(test))?;
                    audit::run_audit(test, &args, &dir, &extras)?;
                    audit::verify(test, &dir, &reference, &args, b.audit_dtype, b.eos_token_id)?
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

/// Removes the empty trace files of runs made without a trace: the checker
/// refuses empty files.
fn remove_empty_traces(dir: &Path) {
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
fn ensure_system_json(plan: &Plan) -> Result<()> {
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
    if plan.division == "network" {
        // The checker reads the Network-division fields only when this is
        // "True" (lower-cased); preflight measures most of them.
        for k in preflight::NETWORK_FIELDS {
            m.insert(k.to_string(), json!(PLACEHOLDER));
        }
        m.insert("is_network".into(), json!("True"));
    }
    m.insert("division".into(), json!(plan.division));
    m.insert("submitter".into(), json!(plan.submitter));
    m.insert("system_name".into(), json!(plan.system));
    m.insert("operating_system".into(), json!(facts::host::os_name()));
    m.insert("system_type".into(), json!("datacenter,edge"));
    m.insert(
        "number_of_nodes".into(),
        // Names resolved as a run would resolve them (without waiting).
        match qdl::find_nodes(&plan.sut, plan.sut_file.as_deref(), Duration::ZERO, |_| {}) {
            Ok(found) => json!(found.nodes.len().to_string()),
            Err(_) => json!(PLACEHOLDER),
        },
    );
    m.extend(plan.system_fields.clone());
    preflight::merge_system_json(&path, &m)
}

fn run_checker(plan: &Plan, inference: &Path) -> Result<bool> {
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

/// Runs the plan; exit status 0 when every result is VALID (and the
/// checker, when run, accepts the tree), 6 otherwise.
pub fn submission(args: &SubmissionArgs) -> Result<Exit> {
    let plan = Plan::read(&args.plan)?;
    // Every scenario's flags are checked before the first run, and what
    // the runs still to be made need of this host.
    for b in &plan.benchmarks {
        for s in &b.scenarios {
            run_args(&plan, b, *s)?;
        }
    }
    check_fits(&plan)?;
    ensure_system_json(&plan)?;
    if !args.no_preflight {
        let mut argv = vec!["preflight".to_string()];
        argv.extend(plan.node_flags());
        argv.extend([
            "--model".into(),
            plan.benchmarks[0].model.clone(),
            "--seconds".into(),
            "1".into(),
        ]);
        argv.extend([
            "--output".into(),
            plan.base.join("network.json").display().to_string(),
        ]);
        argv.extend([
            "--system-json".into(),
            plan.system_json().display().to_string(),
        ]);
        #[derive(Parser)]
        struct P {
            #[command(flatten)]
            p: PreflightArgs,
        }
        let p = P::try_parse_from(&argv).map_err(|e| anyhow::anyhow!("preflight: {e}"))?;
        preflight::preflight(&p.p)?;
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
    println!("\n{:<28} state", "result");
    for r in &rows {
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
    println!("tree: {}", plan.root().display());
    let mut ok = rows.iter().all(|r| r.valid);
    if let Some(inference) = args.inference.as_ref().or(plan.inference.as_ref()) {
        ok &= run_checker(&plan, inference)?;
    }
    Ok(match ok {
        true => Exit::Done,
        false => Exit::SubmissionIncomplete,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(text: &str) -> Result<Plan> {
        let t: toml::Table = toml::from_str(text).unwrap();
        Plan::from_table("plan.toml", Path::new("/p"), &t)
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
        assert_eq!(
            b.settings[0],
            (
                Scenario::Offline,
                vec!["min_duration=1000".into(), "target_qps=2000".into()]
            )
        );
        assert_eq!(
            b.settings[1],
            (Scenario::Server, vec!["min_duration=1000".into()])
        );
        assert_eq!(
            p.scenario_dir(b, Scenario::Server),
            Path::new("/p/submission/network/Org/results/sys/resnet/Server")
        );
        let args = run_args(&p, b, Scenario::Offline).unwrap();
        assert_eq!(args.sample_bytes, Some(64));
        let set: Vec<String> = args.set.iter().map(|s| s.to_string()).collect();
        assert_eq!(set, ["min_duration=1000", "target_qps=2000"]);
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
        let args = run_args(&p, b, Scenario::Offline).unwrap();
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
        let e = plan(&format!("rules = \"v7\"\n{GOOD}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("plan.toml: rules: unknown round `v7`"), "{e}");
        let e = plan(&GOOD.replace(
            "model = \"resnet50\"",
            "model = \"resnet50\"\nbenchmark = \"bert-99\"",
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("one of the checker's folders for resnet50: resnet"),
            "{e}"
        );
    }

    #[test]
    fn bad_plans_are_named() {
        let err = plan(&GOOD.replace("resnet50", "resnet51"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("plan.toml: benchmark 1: unknown benchmark `resnet51`"),
            "{err}"
        );
        let err = plan(&GOOD.replace("\"Server\"", "\"Sever\""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("scenarios: Sever"), "{err}");
        let err = plan(&GOOD.replace("system = \"sys\"\n", ""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("`system` is missing"), "{err}");
        let err = plan(&format!("extra = 1\n{GOOD}")).unwrap_err().to_string();
        assert!(err.contains("unknown key `extra`"), "{err}");
        let p = plan(&format!("engine = \"other\"\n{GOOD}")).unwrap();
        let err = run_args(&p, &p.benchmarks[0], Scenario::Offline)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--engine"), "{err}");
        let p = plan(&GOOD.replace("\"64\"", "\"sixty-four\"")).unwrap();
        let err = run_args(&p, &p.benchmarks[0], Scenario::Offline)
            .unwrap_err()
            .to_string();
        assert!(err.contains("run flags"), "{err}");
    }
}
