//! loadgen-node's exit statuses, one name each, so that scripts and the
//! commands that run other runs read them the same way.

use std::process::{ExitCode, ExitStatus};

/// How a `loadgen-node` command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// The step did what it was asked. For a run: it completed, VALID or
    /// not (the summary says which).
    Done,
    /// An error stopped it before or outside a run (bad flags or files, no
    /// sut-node reachable); stderr says which.
    Error,
    /// The run failed: a node died or misbehaved. Its logs are marked
    /// (native: the detail log's error; official: `*.failed-run` and
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
}

impl Exit {
    /// Every status, in the order of their numbers.
    pub const ALL: [Exit; 8] = [
        Exit::Done,
        Exit::Error,
        Exit::RunFailed,
        Exit::SyntheticMismatch,
        Exit::AuditFailed,
        Exit::BelowBandwidth,
        Exit::SubmissionIncomplete,
        Exit::Regressed,
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
        }
    }

    /// How a child `loadgen-node` ended; a signal or an unknown status is
    /// an error.
    pub fn of_child(status: ExitStatus) -> Exit {
        status
            .code()
            .and_then(|c| Exit::ALL.into_iter().find(|e| i32::from(e.code()) == c))
            .unwrap_or(Exit::Error)
    }

    /// What it means, for messages about another run.
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
    fn the_statuses_keep_their_documented_numbers() {
        assert_eq!(Exit::ALL.map(Exit::code), [0, 1, 2, 3, 4, 5, 6, 7]);
    }

    #[test]
    fn a_childs_status_reads_back() {
        for e in [Exit::Done, Exit::RunFailed, Exit::SubmissionIncomplete] {
            let status = ExitStatus::from_raw(i32::from(e.code()) << 8);
            assert_eq!(Exit::of_child(status), e);
        }
        // Killed by signal 9, or a status no command gives.
        assert_eq!(Exit::of_child(ExitStatus::from_raw(9)), Exit::Error);
        assert_eq!(Exit::of_child(ExitStatus::from_raw(77 << 8)), Exit::Error);
    }
}
