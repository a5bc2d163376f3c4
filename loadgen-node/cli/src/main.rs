//! `loadgen-node`: the LoadGen node of a Network-division run. Holds the
//! LoadGen engine, the QSL and the QDL, which presents the remote sut-nodes
//! to the engine as one SUT.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use loadgen_cli::args::RunArgs;
use loadgen_cli::audit::{audit, AuditArgs};
use loadgen_cli::check_synthetic::{check_synthetic, CheckSyntheticArgs};
use loadgen_cli::compare::CompareArgs;
use loadgen_cli::engines::run;
use loadgen_cli::exit::Exit;
use loadgen_cli::html_report::ReportArgs;
use loadgen_cli::preflight::{preflight, PreflightArgs};
use loadgen_cli::submission::{submission, SubmissionArgs};
use loadgen_cli::suite::SuiteArgs;
use loadgen_cli::sweep::SweepArgs;

/// Run an MLPerf Inference benchmark from this LoadGen node.
///
/// Settings come, in increasing precedence, from the built-in mlperf.conf (or
/// --conf), --user-conf, --set, --mode/--scenario, and an audit.config
/// (--audit-config, or ./audit.config when present, as the official LoadGen).
#[derive(Parser, Debug)]
#[command(
    name = "loadgen-node",
    about,
    disable_version_flag = true,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    /// Print the version of loadgen-node and of each engine (for the
    /// official LoadGen: its version and whether its source tree is the
    /// released one).
    #[arg(long, short = 'V')]
    version: bool,

    #[command(flatten)]
    run: RunArgs,
}

/// Steps besides a single run.
#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Write the HTML report of an existing output directory (either
    /// engine's, or the official LoadGen's).
    Report(ReportArgs),
    /// Compare runs: did it get worse?
    ///
    /// `compare BASE... -- NEW...`: output directories of the same test on
    /// each side (either engine, or the official LoadGen by any harness).
    /// Prints the scenario's metrics with the change and its 95 % interval
    /// (from repeated runs, or from each run's per-sample latencies), a
    /// verdict (improved, regressed, within noise: a change counts once its
    /// whole interval is past --noise-threshold, 1 %) and the nodes'
    /// breakdowns. Refuses runs of other settings unless --force. Exit
    /// status 7 with --fail-on-regression PCT when a judged metric regressed
    /// by more than PCT beyond its interval.
    Compare(CompareArgs),
    /// The latency–throughput curve: Server runs at a series of target QPS.
    ///
    /// Each point a native-engine run of the run flags in DIR/qps-T
    /// (--output-dir DIR): the --qps listed, or bracketing from --start until
    /// INVALID, then bisecting to --precision. Prints the curve (the judged
    /// percentile, p50, p99.9, per node), the highest VALID target and
    /// where the time went there; writes mlperf_net_sweep.json and an HTML
    /// plot. Points already in DIR are kept, so it resumes.
    Sweep(Box<SweepArgs>),
    /// Run and verify a compliance audit (TEST01, TEST04, TEST06).
    ///
    /// Runs the audit with the run flags, and the reference runs it needs
    /// when they are missing, then verifies it by the test's published
    /// rules. --output-dir is the scenario's results directory. Exit status
    /// 4 when the audit fails.
    Audit(Box<AuditArgs>),
    /// Measure the network to each sut-node before a run.
    ///
    /// Measures round trips, throughput each way with the benchmark's sample
    /// size, the clock offset, the NICs on both ends and the nodes'
    /// self-description. Prints a table and writes network.json; with
    /// --target-qps checks the rules' minimum bandwidth (exit status 5 when
    /// below); with --system-json fills the system description's
    /// Network-division fields.
    Preflight(Box<PreflightArgs>),
    /// Run everything a submission needs from a TOML plan.
    ///
    /// Runs the accuracy and performance runs and the required audits of
    /// each benchmark and scenario, laid out as the submission checker reads
    /// them; finished runs are kept, so it resumes. Prints what is VALID and
    /// what is missing, and the official checker's verdict given
    /// --inference. Exit status 6 when something is missing or failed.
    Submission(SubmissionArgs),
    /// Check an accuracy log of synthetic sut-nodes.
    ///
    /// Every logged answer must be the synthetic function of its sample;
    /// prints `accuracy=P%, good=G, total=T` as the accuracy scripts do, so
    /// that a submission plan on synthetic nodes can use it as its
    /// accuracy_command. Exit status 3 if any answer does not match.
    CheckSynthetic(CheckSyntheticArgs),
    /// Print the suite: every benchmark of mlperf.conf with its input and
    /// answer sizes and, for a round of the rules, its checker folder,
    /// allowed compression, minimum bandwidth and required audits.
    Suite(SuiteArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Refused flags are an error like any other (status 1): status 2
        // says that a run failed.
        Err(e) => {
            let _ = e.print();
            return match e.use_stderr() {
                true => Exit::Error.into(),
                false => Exit::Done.into(),
            };
        }
    };
    if cli.version {
        print!("{}", loadgen_cli::engines::versions());
        return ExitCode::SUCCESS;
    }
    let result = match &cli.command {
        Some(Command::Audit(args)) => audit(args),
        Some(Command::Preflight(args)) => preflight(args),
        Some(Command::Submission(args)) => submission(args),
        Some(Command::CheckSynthetic(args)) => check_synthetic(args),
        Some(Command::Suite(args)) => {
            loadgen_cli::suite::print(args);
            Ok(Exit::Done)
        }
        Some(Command::Report(args)) => loadgen_cli::html_report::run(args).map(|()| Exit::Done),
        Some(Command::Compare(args)) => loadgen_cli::compare::run(args),
        Some(Command::Sweep(args)) => loadgen_cli::sweep::run(args),
        None => run(&cli.run),
    };
    match result {
        Ok(exit) => exit.into(),
        Err(e) => {
            eprintln!("loadgen-node: error: {e:#}");
            Exit::Error.into()
        }
    }
}
