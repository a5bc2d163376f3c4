//! The choice of engine for a run: the native one (trace-exact, for
//! development and regression runs) or the official LoadGen compiled in
//! (feature `official-loadgen`, for submissions). The official LoadGen
//! applies its mlperf.conf only on the first `FromConfig` of a process, so
//! a command that makes several runs gives each official one a process of
//! its own ([`run_step`]).

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result};

use crate::args::{Engine, RunArgs};
use crate::exit::Exit;
use crate::plan::RunPlan;

/// Runs one test as the flags say, in this process, with the engine they
/// name, and prints its result.
pub fn run(args: &RunArgs) -> Result<Exit> {
    let plan = RunPlan::from_args(args)?;
    match plan.engine {
        Engine::Native => crate::native::run(&plan),
        Engine::Official => run_official(&plan),
    }
}

/// One of several runs of a command (`submission`, `audit`): the native
/// engine runs in this process, the official one in a `loadgen-node`
/// process of its own given the same flags, its output and progress passed
/// through.
pub fn run_step(args: &RunArgs) -> Result<Exit> {
    match args.engine {
        Engine::Native => run(args),
        Engine::Official => run_in_own_process(args),
    }
}

fn run_in_own_process(args: &RunArgs) -> Result<Exit> {
    let exe = std::env::current_exe()
        .context("cannot find this loadgen-node binary, to start the official run in it")?;
    let argv = args.to_argv()?;
    eprintln!(
        "loadgen-node: official run in a process of its own: {}",
        command_line(&exe, &argv)
    );
    let status = Command::new(&exe)
        .args(&argv)
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("cannot start {}", exe.display()))?;
    Ok(Exit::of_child(status))
}

/// A command line a shell runs as it is (arguments quoted where needed).
fn command_line(exe: &Path, argv: &[OsString]) -> String {
    std::iter::once(exe.as_os_str())
        .chain(argv.iter().map(OsString::as_os_str))
        .map(|a| {
            let a = a.to_string_lossy();
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-./:=,@%+".contains(c));
            match plain {
                true => a.into_owned(),
                false => format!("'{}'", a.replace('\'', r"'\''")),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
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
fn run_official(plan: &RunPlan) -> Result<Exit> {
    crate::official::run(plan)
}

#[cfg(not(feature = "official-loadgen"))]
fn run_official(_: &RunPlan) -> Result<Exit> {
    anyhow::bail!(
        "--engine official: this loadgen-node was built without the official LoadGen. \
         Build it with `deploy/official-loadgen.sh` (fetches the official 6.0.17 sources, checks \
         them and runs `MLPERF_LOADGEN_SRC=DIR cargo build --release -p loadgen-cli \
         --features official-loadgen`); see docs/submission.md"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_quote_what_a_shell_would_split() {
        let argv: Vec<OsString> = ["--sut", "quic://[::1]:9", "--user-conf", "my conf", "it's"]
            .iter()
            .map(OsString::from)
            .collect();
        assert_eq!(
            command_line(Path::new("/bin/loadgen-node"), &argv),
            r"/bin/loadgen-node --sut 'quic://[::1]:9' --user-conf 'my conf' 'it'\''s'"
        );
    }
}
