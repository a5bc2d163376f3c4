//! mlperf.conf / user.conf / audit.config (`test_settings_internal.cc`, `TestSettings::FromConfig`; `loadgen.cc`, `StartTest` for audit.config).
//!
//! A config file is a list of `model.scenario.name = value` lines. Parsing and
//! applying are separate steps: [`ConfigFile::parse`] checks the syntax of the
//! whole file (a file with any error is never applied), and
//! [`ConfigFile::apply`] looks up the keys LoadGen understands for one model
//! and scenario and writes them into [`TestSettings`].
//!
//! The quirks of the official LoadGen's parser are kept on purpose, because submitters'
//! files were written against it: `a=1` is one token and silently does
//! nothing, a `#` after a value is an error, integers follow C `strtoul` with
//! base 0 (so `010` is octal) and fractional text given to an integer key is
//! truncated. The number conversions themselves are in `c_number`.
//!
//! One room each, in the order a file goes through them (what a file is
//! for and what can be wrong with it in `error`):
//! - `parse`: the text to a [`ConfigFile`] (syntax, lines, lookup);
//! - `apply`: a file's keys into [`TestSettings`] for one model and
//!   scenario;
//! - `keys`: which keys exist, and which only mlperf.conf sets;
//! - `ranges`: what values a run may ask for, and how many samples the
//!   machine it runs on can plan (its memory handed in, never read here);
//! - `sources`: the layers of a command-line run (mlperf.conf, user.conf,
//!   `--set`) resolved into one [`TestSettings`].

#[cfg(doc)]
use crate::settings::TestSettings;

mod apply;
mod error;
mod keys;
mod parse;
mod ranges;
mod sources;

pub use apply::apply_audit;
pub use error::{ConfKind, ConfigError};
pub use keys::{KEYS, MLPERF_CONF_KEYS};
pub use parse::ConfigFile;
pub use ranges::{check_planned, check_scale, max_planned_samples, PLANNED_SAMPLE_BYTES};
pub use sources::SettingsSources;
