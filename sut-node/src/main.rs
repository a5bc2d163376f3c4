//! `sut-node`: the daemon that runs inference for a LoadGen node over the
//! network (the `SutNode` gRPC service of `proto/sutnode.proto`). Here: the
//! command line, the plan it makes, and the exit status (`facts::exit`,
//! the scheme loadgen-node shares).

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use cli::health::HealthArgs;
use cli::serve::ServeArgs;
use facts::exit::Exit;
use sut_node::config_file;
use sut_node::plan::ServePlan;

mod cli;

/// An MLPerf Inference sut-node: runs the samples a LoadGen node sends over
/// the network and sends the answers back.
#[derive(Parser, Debug)]
#[command(name = "sut-node", version, args_override_self = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve inference over gRPC (TCP) and QUIC (UDP) until SIGTERM or SIGINT.
    ///
    /// Prints `sut-node NAME ready on ADDR (backend B) quic QADDR metrics
    /// MADDR` on stdout once the backend is loaded and warmed up (ADDR:
    /// gRPC's address, or QUIC's with --no-grpc; ` quic QADDR` only when
    /// QUIC is on, ` metrics MADDR` only with --metrics); the TLS
    /// certificate's SHA-256 fingerprint goes to stderr before it. Logs go
    /// to stderr (RUST_LOG, default info).
    Serve(Box<ServeArgs>),
    /// Ask a running sut-node whether it is ready (its `Health` RPC): exit 0
    /// when ready, 8 when it answers that it is not, 1 when it does not
    /// answer. For container health checks and scripts.
    Health(HealthArgs),
}

fn main() -> ExitCode {
    let args = match config_file::args_with_config(std::env::args_os(), &serve_command()) {
        Ok(args) => args,
        Err(e) => return error(e.into()),
    };
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        // Refused flags are an error like any other (status 1), as in
        // loadgen-node.
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                Exit::Error
            } else {
                Exit::Done
            }
            .into();
        }
    };
    let result = match cli.command {
        Command::Serve(args) => args.plan().and_then(serve),
        Command::Health(args) => runtime(Some(1)).and_then(|rt| {
            rt.block_on(async {
                cli::logs::start(None, "")?;
                cli::health::health(args).await
            })
        }),
    };
    match result {
        Ok(exit) => exit.into(),
        Err(e) => error(e),
    }
}

/// The `serve` command, whose flags check the keys and values of a
/// --config file.
fn serve_command() -> clap::Command {
    use clap::CommandFactory;
    let mut cli = Cli::command();
    cli.build();
    cli.find_subcommand("serve")
        .cloned()
        .unwrap_or_else(|| clap::Command::new("serve"))
}

/// Serves `plan` on a runtime of its threads, its spans flushed at the end.
fn serve(plan: ServePlan) -> Result<Exit> {
    runtime(plan.threads)?.block_on(async {
        let exporter = cli::logs::start(plan.otlp.as_deref(), &plan.node.name)?;
        let served = cli::serve::serve(plan).await;
        if let Some(e) = exporter {
            eprintln!("sut-node: {}", e.shutdown(cli::logs::OTLP_FLUSH));
        }
        served.map(|()| Exit::Done)
    })
}

fn runtime(threads: Option<usize>) -> Result<tokio::runtime::Runtime> {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        runtime.worker_threads(n);
    }
    runtime
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// One readable line (with its causes), never a backtrace dump.
fn error(e: anyhow::Error) -> ExitCode {
    eprintln!("sut-node: error: {e:#}");
    Exit::Error.into()
}
