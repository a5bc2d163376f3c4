//! The exit statuses of both binaries, one scheme: a number means the same
//! thing whichever binary gives it, so that scripts, container health
//! checks and the commands that run other runs read them alike. The table
//! in docs/operator-guide.md ("Exit statuses") is checked against this one.

use std::process::{ExitCode, ExitStatus};

/// How a `loadgen-node` or `sut-node` command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// It did what it was asked. For a run: it completed, VALID or not (the
    /// summary says which); for `sut-node serve`: it served until told to
    /// stop; for `sut-node health`: the node is ready.
    Done,
    /// An error stopped it before or outside its work: bad flags (clap's
    /// usage errors too), a file or config refused (named with its line or
    /// key), a port taken, a backend that cannot load, nothing reachable, a
    /// node that refused the session, a run that does not fit the host's
    /// memory or disk; stderr says which.
    Error,
    /// The run failed once started: a node died or misbehaved, or the disk
    /// filled. Its logs are marked (native: the detail log's error; official: `*.failed-run` and
    /// `RUN_FAILED.txt`).
    RunFailed,
    /// A logged answer is not the synthetic backend's answer for its sample
    /// (`--verify-synthetic`, `check-synthetic`).
    SyntheticMismatch,
    /// A compliance audit failed its verification.
    AuditFailed,
    /// preflight: the measured bandwidth is below the rules' minimum.
    BelowBandwidth,
    /// submission: a result is missing, INVALID or refused by the checker.
    SubmissionIncomplete,
    /// compare --fail-on-regression PCT: a metric the scenario is judged by
    /// is worse by more than PCT percent beyond its 95 % interval, or a
    /// VALID base side became INVALID.
    Regressed,
    /// `sut-node health`: the node answered that it is not ready (still
    /// loading, or shutting down).
    NotReady,
}

impl Exit {
    /// Every status, in the order of their numbers.
    pub(crate) const ALL: [Exit; 9] = [
        Exit::Done,
        Exit::Error,
        Exit::RunFailed,
        Exit::SyntheticMismatch,
        Exit::AuditFailed,
        Exit::BelowBandwidth,
        Exit::SubmissionIncomplete,
        Exit::Regressed,
        Exit::NotReady,
    ];

    /// The process status.
    pub fn code(self) -> u8 {
        match self {
            Exit::Done => 0,
            Exit::Error => 1,
            Exit::RunFailed => 2,
            Exit::SyntheticMismatch => 3,
            Exit::AuditFailed => 4,
            Exit::BelowBandwidth => 5,
            Exit::SubmissionIncomplete => 6,
            Exit::Regressed => 7,
            Exit::NotReady => 8,
        }
    }

    /// How a child process ended; a signal or an unknown status is an
    /// error.
    pub fn of_child(status: ExitStatus) -> Exit {
        status
            .code()
            .and_then(|c| Exit::ALL.into_iter().find(|e| i32::from(e.code()) == c))
            .unwrap_or(Exit::Error)
    }

    /// What it means, in a few words (the docs' table, and messages about
    /// another process).
    pub fn meaning(self) -> &'static str {
        match self {
            Exit::Done => "done",
            Exit::Error => "an error before or outside the run",
            Exit::RunFailed => "the run failed",
            Exit::SyntheticMismatch => "answers do not match their samples",
            Exit::AuditFailed => "the audit failed",
            Exit::BelowBandwidth => "the bandwidth is below the rules' minimum",
            Exit::SubmissionIncomplete => "the submission is incomplete",
            Exit::Regressed => "a metric regressed beyond its interval",
            Exit::NotReady => "the node is not ready",
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn the_statuses_keep_their_numbers() {
        assert_eq!(Exit::ALL.map(Exit::code), [0, 1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn a_childs_status_reads_back() {
        for e in Exit::ALL {
            let status = ExitStatus::from_raw(i32::from(e.code()) << 8);
            assert_eq!(Exit::of_child(status), e);
        }
        // Killed by signal 9, or a status no command gives.
        assert_eq!(Exit::of_child(ExitStatus::from_raw(9)), Exit::Error);
        assert_eq!(Exit::of_child(ExitStatus::from_raw(77 << 8)), Exit::Error);
    }

    /// The binary that gives a status, as the docs' table names it.
    fn given_by(e: Exit) -> &'static str {
        match e {
            Exit::Done | Exit::Error => "both",
            Exit::NotReady => "sut-node",
            _ => "loadgen-node",
        }
    }

    /// The rows of the docs' table: status, meaning, binary.
    fn documented() -> Vec<(String, String, String)> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/operator-guide.md");
        let text = std::fs::read_to_string(path).expect("docs/operator-guide.md");
        let table = text
            .split_once("### Exit statuses")
            .map(|(_, rest)| rest)
            .expect("the exit statuses' section");
        table
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2)
            .map(|l| {
                let cells: Vec<String> = l
                    .split('|')
                    .map(|c| c.trim().trim_matches('`').to_string())
                    .collect();
                (cells[1].clone(), cells[2].clone(), cells[3].clone())
            })
            .collect()
    }

    #[test]
    fn the_docs_table_is_this_one() {
        let expected: Vec<(String, String, String)> = Exit::ALL
            .iter()
            .map(|e| {
                (
                    e.code().to_string(),
                    e.meaning().to_string(),
                    given_by(*e).to_string(),
                )
            })
            .collect();
        assert_eq!(documented(), expected);
    }
}
