//! The choice of engine for a run: the native one (trace-exact, for
//! development and regression runs) or the official LoadGen compiled in
//! (feature `official-loadgen`, for submissions).

use std::process::ExitCode;

use anyhow::{Context, Result};
use compression::policy::{self, Division};

use crate::run::{run_native, Engine, RunArgs};

/// Runs one test as the flags say, with the engine they name, and prints
/// its result.
pub fn run(args: &RunArgs) -> Result<ExitCode> {
    let division = match args.open_division {
        true => Division::Open,
        false => Division::Closed,
    };
    policy::check_input(&args.model, args.input_codec.kind, division).context("--input-codec")?;
    match args.engine {
        Engine::Official => run_official(args),
        Engine::Native => run_native(args),
    }
}

/// What `loadgen-node --version` prints.
pub fn versions() -> String {
    let official = official_version();
    format!(
        "loadgen-node {}\nnative engine: LoadGen 6.0.17 behaviour (trace-exact)\nofficial engine: {official}\n",
        env!("CARGO_PKG_VERSION")
    )
}

#[cfg(feature = "official-loadgen")]
fn official_version() -> String {
    format!(
        "official LoadGen {} compiled in from {}",
        crate::official::loadgen_version(),
        crate::official::tree_report()
    )
}

#[cfg(not(feature = "official-loadgen"))]
fn official_version() -> String {
    "not compiled in (build with the `official-loadgen` feature: deploy/official-loadgen.sh)".into()
}

#[cfg(feature = "official-loadgen")]
fn run_official(args: &RunArgs) -> Result<ExitCode> {
    crate::official::run(args)
}

#[cfg(not(feature = "official-loadgen"))]
fn run_official(_: &RunArgs) -> Result<ExitCode> {
    anyhow::bail!(
        "--engine official: this loadgen-node was built without the official LoadGen. \
         Build it with `deploy/official-loadgen.sh` (fetches the official 6.0.17 sources, checks \
         them and runs `MLPERF_LOADGEN_SRC=DIR cargo build --release -p loadgen-cli \
         --features official-loadgen`); see docs/submission.md"
    )
}
