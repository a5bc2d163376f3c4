//! `loadgen-node`: the LoadGen node of a Network-division run. Holds the
//! LoadGen engine, the QSL and the QDL, which presents the remote sut-nodes
//! to the engine as one SUT.

use std::process::ExitCode;

use clap::Parser;
use loadgen_cli::report::ReportArgs;
use loadgen_cli::run::{run, RunArgs};

/// Run an MLPerf Inference benchmark from this LoadGen node.
///
/// Settings come, in increasing precedence, from the built-in mlperf.conf (or
/// --conf), --user-conf, --set, --mode/--scenario, and an audit.config
/// (--audit-config, or ./audit.config when present, as the official LoadGen).
#[derive(Parser, Debug)]
#[command(name = "loadgen-node", about, disable_version_flag = true)]
struct Cli {
    /// Print the version of loadgen-node and of each engine (for the
    /// official LoadGen: its version and whether its source tree is the
    /// released one).
    #[arg(long, short = 'V')]
    version: bool,

    #[command(flatten)]
    run: RunArgs,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Write the HTML report of an existing output directory (either
    /// engine's, or the official LoadGen's).
    Report(ReportArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.version {
        print!("{}", loadgen_cli::run::versions());
        return ExitCode::SUCCESS;
    }
    let result = match &cli.command {
        Some(Command::Report(args)) => loadgen_cli::report::run(args).map(|()| ExitCode::SUCCESS),
        None => run(&cli.run),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("loadgen-node: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
