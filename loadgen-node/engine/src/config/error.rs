//! What a config file is for, and what can be wrong with one.

use std::fmt::Write as _;
use std::io;
use std::path::PathBuf;

use thiserror::Error;

use super::keys::KEYS;

/// Which role a config file plays; decides which keys it may set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConfKind {
    /// The benchmark rules: may also set the seeds, the accuracy-log
    /// probability and the test05 keys.
    MlperfConf,
    /// The submitter's tuning file.
    UserConf,
    /// A compliance test's audit.config (applied with model `*`).
    AuditConfig,
}

/// A problem with a config file. Every variant names the file; syntax errors
/// also give the 1-based line number.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The token after a key is not a lone `=`.
    #[error("{file}:{line}: expected 'key = value' with spaces around '=', found `{found}` after key `{key}`")]
    ExpectedEquals {
        /// The config file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// The key as written.
        key: String,
        /// What follows the key.
        found: String,
    },
    /// A value is not a complete C integer or floating-point number.
    #[error("{file}:{line}: value needs to be integer or double, found `{value}` for key `{key}`{}", comment_hint(.value))]
    NotANumber {
        /// The config file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// The key as written.
        key: String,
        /// The value as written.
        value: String,
    },
    /// The `mode` key holds something other than 0..=3. All other keys of
    /// the file were still applied and the mode was left unchanged.
    #[error("{file}:{line}: Invalid value passed to Mode key in config: `{key} = {value}` (expected 0 = SubmissionRun, 1 = AccuracyOnly, 2 = PerformanceOnly, 3 = FindPeakPerformance)")]
    InvalidMode {
        /// The config file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// The key as written.
        key: String,
        /// The value as written.
        value: String,
    },
    /// A value the official LoadGen would accept but that would make the run hang,
    /// overflow or allocate without bound, or an integer setting whose text
    /// C's `strtoull` reads only in part (`1e10` is 1 to it).
    #[error("{file}:{line}: `{key} = {value}` is out of range: {name} must be {accepted}")]
    OutOfRange {
        /// The config file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// The key as written.
        key: String,
        /// The value as written.
        value: String,
        /// The setting's name.
        name: &'static str,
        /// The values the setting accepts.
        accepted: String,
    },
    /// A user.conf key whose last part is no setting LoadGen knows.
    #[error("{file}:{line}: unknown setting `{name}` in key `{key}`; known settings: {}", KEYS.join(", "))]
    UnknownKey {
        /// The config file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// The key as written.
        key: String,
        /// The setting's name.
        name: String,
    },
    /// Settings that are each in range but together ask for too much.
    #[error("{0}")]
    TooLarge(String),
    /// The file could not be opened or read.
    #[error("cannot open config file {}: {cause}", .path.display())]
    NotFound {
        /// The file asked for.
        path: PathBuf,
        /// Why it could not be read.
        cause: io::Error,
    },
    /// A file with syntax errors; nothing from it was applied.
    #[error("{}", list_errors(.file, .errors))]
    Invalid {
        /// The config file.
        file: String,
        /// Every syntax error of the file.
        errors: Vec<ConfigError>,
    },
}

fn comment_hint(value: &str) -> &'static str {
    if value.starts_with('#') {
        " (a comment must be on a line of its own, or directly after the key)"
    } else {
        ""
    }
}

fn list_errors(file: &str, errors: &[ConfigError]) -> String {
    let mut out = format!(
        "{file}: {} error(s), nothing from this file was applied",
        errors.len()
    );
    for e in errors {
        let _ = write!(out, "\n  {e}");
    }
    out
}

impl ConfigError {
    /// True for errors in the text of a file (the official LoadGen's `-EINVAL`).
    pub fn is_syntax(&self) -> bool {
        matches!(
            self,
            ConfigError::ExpectedEquals { .. }
                | ConfigError::NotANumber { .. }
                | ConfigError::Invalid { .. }
        )
    }

    /// True when the file could not be opened (the official LoadGen's `-ENOENT`).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ConfigError::NotFound { .. })
    }

    /// The messages the official LoadGen writes to the detail log under
    /// `error_invalid_config`, one per reported problem.
    pub fn detail_messages(&self) -> Vec<String> {
        match self {
            ConfigError::ExpectedEquals { line, .. } => {
                vec![format!("expected 'key=value', line={line}")]
            }
            ConfigError::NotANumber { line, .. } => {
                vec![format!("value needs to be integer or double, line={line}")]
            }
            ConfigError::InvalidMode { .. } => {
                vec!["Invalid value passed to Mode key in config.".to_string()]
            }
            ConfigError::NotFound { path, .. } => {
                vec![format!("can't open file {}", path.display())]
            }
            ConfigError::Invalid { errors, .. } => {
                errors.iter().flat_map(|e| e.detail_messages()).collect()
            }
            other => vec![other.to_string()],
        }
    }
}
