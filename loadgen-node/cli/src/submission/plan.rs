//! The plan of a submission, read once from its TOML file into typed values
//! (unknown keys refused, every error naming the file, and the key and line
//! where there is one), and each of its runs as a [`RunArgs`] value.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use loadgen_engine::{disk, Scenario};
use serde::Deserialize;
use serde_json::{json, Map};
use toml::Spanned;

use crate::args::{Engine, RunArgs, SetArg, SutArg};
use crate::audit;
use crate::benchmarks::{self, Round};
use crate::compliance::{self, AuditTest, Dtype};

/// The division of the submission: its folder and what the checker asks.
#[derive(Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Division {
    /// The Network division (the default).
    #[default]
    Network,
    /// The Closed division.
    Closed,
    /// The Open division: no audits.
    Open,
}

impl Division {
    /// The name the tree and the system description use.
    pub fn as_str(self) -> &'static str {
        match self {
            Division::Network => "network",
            Division::Closed => "closed",
            Division::Open => "open",
        }
    }
}

/// A plan: the system, the nodes and the benchmarks to run.
#[derive(Debug, Clone)]
pub struct SubmissionPlan {
    /// The plan's directory: relative paths start there.
    pub base: PathBuf,
    /// The system's name (results/<system>, systems/<system>.json).
    pub system: String,
    /// The submitting organisation (the tree's folder under the division).
    pub submitter: String,
    /// The division of the tree.
    pub division: Division,
    /// The tree's root.
    pub output: PathBuf,
    /// The nodes (`--sut`); empty when `sut_file` names every node.
    pub sut: SutArg,
    /// `--sut-file`, relative to the plan's directory.
    pub sut_file: Option<PathBuf>,
    /// Flags of every run, as loadgen-node takes them.
    pub run_flags: Vec<String>,
    /// The LoadGen engine of every run.
    pub engine: Engine,
    /// The round of the rules: which benchmarks, audits and checker
    /// folders apply, and what may be compressed.
    pub rules: Round,
    /// A checkout of mlcommons/inference whose checker judges the tree.
    pub inference: Option<PathBuf>,
    /// The checker's `--version`.
    pub checker_version: String,
    /// The benchmarks, in the order they run.
    pub benchmarks: Vec<PlanBenchmark>,
    /// Fields of the system description set by the plan (`status`, the
    /// processor, the accelerators...): written over what the tool fills.
    pub system_fields: Map<String, serde_json::Value>,
}

/// One benchmark of the plan.
#[derive(Debug, Clone)]
pub struct PlanBenchmark {
    /// The benchmark as mlperf.conf's keys name it.
    pub model: String,
    /// Its directory name in the tree (the checker's benchmark name).
    pub benchmark: String,
    /// Its scenarios, in the order they run.
    pub scenarios: Vec<Scenario>,
    /// Flags of this benchmark's runs, after the plan's.
    pub run_flags: Vec<String>,
    /// `--set key=value` of each scenario: the benchmark's common settings,
    /// then the scenario's own.
    pub settings: Vec<(Scenario, Vec<SetArg>)>,
    /// The command that scores an accuracy log (`{accuracy_log}` in it).
    pub accuracy_command: Option<String>,
    /// The audits' --dtype (TEST01, TEST06).
    pub audit_dtype: Option<Dtype>,
    /// TEST06's --eos-token-id.
    pub eos_token_id: i64,
    /// TEST07's compliance data set (relative to the plan).
    pub compliance_dataset: Option<PathBuf>,
    /// TEST07's accuracy script (`{accuracy_log}` in it).
    pub compliance_accuracy_command: Option<String>,
    /// TEST07: the pattern of the score in that script's output.
    pub score_pattern: Option<String>,
}

impl PlanBenchmark {
    /// The settings of its audits' verifications.
    pub fn verify_options(&self) -> audit::VerifyOptions {
        audit::VerifyOptions {
            dtype: self.audit_dtype,
            eos_token_id: self.eos_token_id,
            accuracy_command: self.compliance_accuracy_command.clone(),
            score_pattern: self.score_pattern.clone(),
        }
    }
}

/// The file as it is written (see the module documentation of
/// `submission` for an example).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFile {
    system: Spanned<String>,
    submitter: Spanned<String>,
    #[serde(default)]
    division: Division,
    output: Option<PathBuf>,
    sut: Option<Spanned<String>>,
    sut_file: Option<PathBuf>,
    #[serde(default)]
    run_flags: Vec<String>,
    inference: Option<PathBuf>,
    checker_version: Option<String>,
    engine: Option<Spanned<String>>,
    rules: Option<Spanned<String>>,
    #[serde(default)]
    system_description: BTreeMap<String, String>,
    #[serde(default)]
    benchmark: Vec<BenchmarkFile>,
}

/// One `[[benchmark]]` entry as it is written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BenchmarkFile {
    model: Spanned<String>,
    benchmark: Option<Spanned<String>>,
    scenarios: Vec<Spanned<String>>,
    #[serde(default)]
    run_flags: Vec<String>,
    #[serde(default)]
    settings: BTreeMap<String, Spanned<Setting>>,
    accuracy_command: Option<String>,
    audit_dtype: Option<Spanned<String>>,
    eos_token_id: Option<i64>,
    compliance_dataset: Option<PathBuf>,
    compliance_accuracy_command: Option<String>,
    score_pattern: Option<String>,
}

/// A value under `[benchmark.settings]`: a setting of every scenario, or a
/// table of one scenario's settings.
#[derive(Deserialize)]
#[serde(untagged)]
enum Setting {
    Value(SettingValue),
    Scenario(BTreeMap<String, SettingValue>),
}

/// A setting's value, written as user.conf would hold it.
#[derive(Deserialize)]
#[serde(untagged)]
enum SettingValue {
    Integer(i64),
    Float(f64),
    Boolean(bool),
    Text(String),
}

impl SettingValue {
    fn text(&self) -> String {
        match self {
            SettingValue::Integer(i) => i.to_string(),
            SettingValue::Float(f) => f.to_string(),
            SettingValue::Boolean(b) => u8::from(*b).to_string(),
            SettingValue::Text(t) => t.clone(),
        }
    }
}

/// The checker's benchmark folder of `model` in `round`, or why the plan
/// cannot have it.
pub(super) fn checker_benchmark(model: &str, round: Round) -> Result<&'static str, String> {
    let Some(b) = benchmarks::find(model) else {
        if let Some(n) = benchmarks::not_run(round)
            .iter()
            .find(|n| n.checker == model)
        {
            return Err(format!("`{model}` cannot be run: {}", n.reason));
        }
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
pub(super) fn scenario_folder(model: &str, s: Scenario) -> &'static str {
    match (benchmarks::find(model).is_some_and(|b| b.interactive), s) {
        (true, Scenario::Server) => "Interactive",
        _ => s.as_str(),
    }
}

/// Parses loadgen-node's run flags.
#[derive(Parser)]
struct RunFlags {
    #[command(flatten)]
    run: RunArgs,
}

/// The flags the plan sets itself, which its `run_flags` may not.
const PLAN_OWNED_FLAGS: &[(&str, &str)] = &[
    ("--sut", "sut"),
    ("--sut-file", "sut_file"),
    ("--benchmark", "model"),
    ("--model", "model"),
    ("--scenario", "scenarios"),
    ("--engine", "engine"),
    ("--rules", "rules"),
];

/// `FILE:LINE` of the value at `span` of `text`.
fn line_at(name: &str, text: &str, span: std::ops::Range<usize>) -> String {
    let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
    format!("{name}:{line}")
}

/// Refuses a name that would not stay one folder of the tree.
fn folder_name(what: &str, value: &str) -> Result<(), String> {
    if value.trim().is_empty() {
        return Err(format!("`{what}` must be a non-empty name"));
    }
    if value == "."
        || value == ".."
        || value.contains(['/', '\\'])
        || value.chars().any(char::is_control)
    {
        return Err(format!(
            "`{what}` = {value:?} must be one folder's name (no '/', '\\', control characters, '.' or '..'): it names a folder of the tree"
        ));
    }
    Ok(())
}

/// Refuses run flags that set what the plan sets itself.
fn check_run_flags(what: &str, flags: &[String]) -> Result<()> {
    for f in flags {
        let flag = f.split('=').next().unwrap_or(f);
        if let Some((_, key)) = PLAN_OWNED_FLAGS.iter().find(|(name, _)| *name == flag) {
            bail!("{what}: run_flags: {flag} is the plan's `{key}`, not a run flag");
        }
    }
    Ok(())
}

impl SubmissionPlan {
    /// Reads and checks a plan; errors name the file, and the key and its
    /// line where there is one.
    pub fn read(path: &Path) -> Result<SubmissionPlan> {
        let name = path.display().to_string();
        let text = disk::read_text_bounded(path, disk::MAX_TEXT_FILE)
            .with_context(|| format!("cannot read the plan {name}"))?;
        // A bare file name has an empty parent: the current directory.
        let base = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        SubmissionPlan::parse(&name, base, &text)
    }

    /// A plan from its text; `name` is the file's, for messages.
    pub(super) fn parse(name: &str, base: &Path, text: &str) -> Result<SubmissionPlan> {
        let file: PlanFile = toml::from_str(text).map_err(|e| {
            // toml says where (line, column, the line itself) and what.
            anyhow::anyhow!("{name}: {}", e.to_string().trim_end())
        })?;
        let at = |span| line_at(name, text, span);
        let named = |v: &Spanned<String>, key: &str| -> Result<String> {
            folder_name(key, v.get_ref()).map_err(|e| anyhow::anyhow!("{}: {e}", at(v.span())))?;
            Ok(v.get_ref().clone())
        };
        let system = named(&file.system, "system")?;
        let submitter = named(&file.submitter, "submitter")?;
        let rules = match &file.rules {
            None => Round::CURRENT,
            Some(r) => r
                .get_ref()
                .parse()
                .map_err(|e| anyhow::anyhow!("{}: rules: {e}", at(r.span())))?,
        };
        let engine = match &file.engine {
            None => Engine::Native,
            Some(e) => <Engine as ValueEnum>::from_str(e.get_ref(), true).map_err(|_| {
                anyhow::anyhow!(
                    "{}: engine `{}`: expected native or official (as --engine takes it)",
                    at(e.span()),
                    e.get_ref()
                )
            })?,
        };
        let sut = match &file.sut {
            Some(s) if !s.get_ref().trim().is_empty() => s
                .get_ref()
                .parse::<SutArg>()
                .map_err(|e| anyhow::anyhow!("{}: sut: {e}", at(s.span())))?,
            // A file of nodes may stand alone.
            _ if file.sut_file.is_some() => SutArg::Nodes(Vec::new()),
            _ => bail!("{name}: `sut` is missing (or give `sut_file`)"),
        };
        check_run_flags(name, &file.run_flags)?;
        if file.benchmark.is_empty() {
            bail!("{name}: no [[benchmark]] entries");
        }
        let benchmarks = file
            .benchmark
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let what = format!("benchmark {}", i + 1);
                PlanBenchmark::from_file(name, &what, b, rules, &at)
            })
            .collect::<Result<Vec<_>>>()?;
        if file.division != Division::Open {
            for (i, b) in benchmarks.iter().enumerate() {
                b.check_test07(base, rules, &format!("{name}: benchmark {}", i + 1))?;
            }
        }
        Ok(SubmissionPlan {
            base: base.to_path_buf(),
            system,
            submitter,
            division: file.division,
            output: base.join(file.output.unwrap_or_else(|| PathBuf::from("submission"))),
            sut,
            sut_file: file.sut_file.map(|f| base.join(f)),
            run_flags: file.run_flags,
            engine,
            rules,
            inference: file.inference,
            // The checker's own round, or the oldest it has for v5.1.
            checker_version: file.checker_version.unwrap_or_else(|| {
                match rules {
                    Round::V5_1 => "v6.0",
                    Round::V6_1 => "v6.1",
                }
                .to_string()
            }),
            benchmarks,
            system_fields: file
                .system_description
                .into_iter()
                .map(|(k, v)| (k, json!(v)))
                .collect(),
        })
    }

    /// The run of `b` in `s` as the plan makes it: the plan's and the
    /// benchmark's run flags, then what the plan sets itself.
    pub fn run_args(&self, b: &PlanBenchmark, s: Scenario) -> Result<RunArgs> {
        let argv = std::iter::once("loadgen-node".to_string())
            .chain(self.run_flags.iter().cloned())
            .chain(b.run_flags.iter().cloned());
        let mut args = RunFlags::try_parse_from(argv)
            .map_err(|e| anyhow::anyhow!("{} {s}: run flags: {e}", b.model))?
            .run;
        args.sut = self.sut.clone();
        args.sut_file = self.sut_file.clone();
        args.model = b.model.clone();
        args.scenario = s;
        args.engine = self.engine;
        args.rules = self.rules;
        if let Some((_, settings)) = b.settings.iter().find(|(x, _)| *x == s) {
            args.set.extend(settings.iter().cloned());
        }
        Ok(args)
    }

    /// `--sut` and `--sut-file` as the plan gives them, for the commands
    /// written into the tree's READMEs.
    pub(super) fn node_flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        let sut = self.sut.to_string();
        if !sut.is_empty() {
            flags.extend(["--sut".to_string(), sut]);
        }
        if let Some(f) = &self.sut_file {
            flags.extend(["--sut-file".to_string(), f.display().to_string()]);
        }
        flags
    }
}

impl PlanBenchmark {
    /// Refuses, before any run, a benchmark that needs TEST07 without what
    /// TEST07 cannot be made without: its data set and its accuracy script.
    fn check_test07(&self, base: &Path, rules: Round, what: &str) -> Result<()> {
        if !compliance::required_audits(&self.model, rules).contains(&benchmarks::Audit::Test07) {
            return Ok(());
        }
        let dataset = self.compliance_dataset.as_ref().map(|d| base.join(d));
        audit::compliance_dataset(
            AuditTest::Test07,
            &self.model,
            dataset.as_deref(),
            &format!("{what}: compliance_dataset"),
        )?;
        self.verify_options()
            .test07_command(&format!("{what}: compliance_accuracy_command"))?;
        Ok(())
    }

    /// Entry `what` (`benchmark N`) of the plan `name`.
    fn from_file(
        name: &str,
        what: &str,
        e: &BenchmarkFile,
        rules: Round,
        at: &dyn Fn(std::ops::Range<usize>) -> String,
    ) -> Result<PlanBenchmark> {
        let model = benchmarks::canonical(e.model.get_ref()).to_string();
        let default = checker_benchmark(&model, rules)
            .map_err(|err| anyhow::anyhow!("{}: {what}: {err}", at(e.model.span())))?;
        let folders = benchmarks::find(&model)
            .and_then(|b| b.rules(rules))
            .map_or(&[][..], |r| r.checker);
        let benchmark = match &e.benchmark {
            None => default.to_string(),
            Some(b) if folders.contains(&b.get_ref().as_str()) => b.get_ref().clone(),
            Some(b) => bail!(
                "{}: {what}: `benchmark` must be one of the checker's folders for {model}: {}",
                at(b.span()),
                folders.join(", ")
            ),
        };
        let scenarios = e
            .scenarios
            .iter()
            .map(|s| {
                s.get_ref().parse::<Scenario>().map_err(|err| {
                    anyhow::anyhow!(
                        "{}: {what}: scenarios: {}: {err}",
                        at(s.span()),
                        s.get_ref()
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if scenarios.is_empty() {
            bail!("{}: {what}: `scenarios` is empty", at(e.model.span()));
        }
        let setting = |key: &str, v: &SettingValue| -> Result<SetArg> {
            format!("{key}={}", v.text())
                .parse()
                .map_err(|err| anyhow::anyhow!("{name}: {what}: settings.{key}: {err}"))
        };
        let mut common = Vec::new();
        let mut own: Vec<(Scenario, Vec<SetArg>)> =
            scenarios.iter().map(|s| (*s, Vec::new())).collect();
        for (key, value) in &e.settings {
            match value.get_ref() {
                Setting::Value(v) => common.push(setting(key, v)?),
                Setting::Scenario(table) => {
                    let s: Scenario = key.parse().map_err(|err| {
                        anyhow::anyhow!("{}: {what}: settings.{key}: {err}", at(value.span()))
                    })?;
                    let Some((_, list)) = own.iter_mut().find(|(x, _)| *x == s) else {
                        bail!(
                            "{}: {what}: settings.{key}: not one of this benchmark's scenarios",
                            at(value.span())
                        );
                    };
                    for (k, v) in table {
                        list.push(setting(k, v)?);
                    }
                }
            }
        }
        let settings = own
            .into_iter()
            .map(|(s, list)| (s, common.iter().cloned().chain(list).collect()))
            .collect();
        check_run_flags(&format!("{name}: {what}"), &e.run_flags)?;
        Ok(PlanBenchmark {
            model,
            benchmark,
            scenarios,
            run_flags: e.run_flags.clone(),
            settings,
            accuracy_command: e.accuracy_command.clone(),
            audit_dtype: e
                .audit_dtype
                .as_ref()
                .map(|d| {
                    d.get_ref().parse().map_err(|err| {
                        anyhow::anyhow!("{}: {what}: audit_dtype: {err}", at(d.span()))
                    })
                })
                .transpose()?,
            eos_token_id: e.eos_token_id.unwrap_or(2),
            compliance_dataset: e.compliance_dataset.clone(),
            compliance_accuracy_command: e.compliance_accuracy_command.clone(),
            score_pattern: e.score_pattern.clone(),
        })
    }
}
