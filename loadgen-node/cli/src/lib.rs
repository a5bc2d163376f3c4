//! The LoadGen node's own pieces around the engine and the QDL.
//!
//! A run starts as flags (`args`), becomes a checked plan (`plan`), and is
//! run by one engine (`engines`: `native`, or `official` in a process of its
//! own when a command makes several runs) over the SUT of `system`, watched
//! and reported by `observe`. Around it: the Query Sample Library that holds
//! the data (`qsl`), the built-in benchmark table, the live progress line,
//! the commands besides a single run (`audit`, `submission`, `preflight`,
//! `report`, `compare`, `sweep`, `check-synthetic`, `suite`) and the exit
//! statuses they share (`exit`). `run_dir` reads a finished run's outputs
//! back for those that look at runs (`report`, `compare`, `sweep`), and
//! `intervals` holds compare's statistics.

// Only the FFI to the official LoadGen needs unsafe code.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod args;
pub mod audit;
mod benchmarks;
mod breakdown;
pub mod budget;
pub mod check_synthetic;
pub mod compare;
mod compliance;
pub mod engines;
pub mod exit;
pub mod html_report;
mod intervals;
mod metrics;
mod native;
pub mod npy;
mod observe;
#[cfg(feature = "official-loadgen")]
#[allow(unsafe_code)] // the FFI to the official LoadGen
mod official;
mod otlp;
pub mod plan;
pub mod preflight;
pub mod progress;
pub mod qsl;
mod run_dir;
pub mod submission;
pub mod suite;
pub mod sweep;
mod system;
mod tls;
