//! The LoadGen node's own pieces around the engine and the QDL: the Query
//! Sample Library that holds the data, the built-in benchmark table, the live
//! progress line, the checker of synthetic-backend accuracy runs and the TLS
//! options.

pub mod audit;
pub mod benchmarks;
pub mod breakdown;
pub mod compliance;
pub mod engines;
pub mod metrics;
pub mod npy;
#[cfg(feature = "official-loadgen")]
mod official;
mod otlp;
pub mod preflight;
pub mod progress;
pub mod qsl;
pub mod report;
pub mod run;
pub mod submission;
pub mod tls;
pub mod verify;
