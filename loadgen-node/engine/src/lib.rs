//! The MLPerf Inference LoadGen engine.
//!
//! The deterministic core (settings, config files, random streams, loadable
//! sets, query generation, statistics, result and log formatting) is plain
//! code that is handed the time. The timed glue (`runner`, `completion`) issues
//! queries to a [`SystemUnderTest`] and records the answers.

pub mod accuracy_log;
mod aggregator;
pub mod clock;
pub mod completion;
pub mod config;
pub mod detail;
pub mod early_stopping;
pub mod effective;
pub mod live;
pub mod loadable;
pub mod null_sut;
pub mod number_format;
pub mod querygen;
mod report;
pub mod results;
pub mod rng;
pub mod runner;
pub mod sample;
mod sequence;
pub mod settings;
pub mod settings_log;
pub mod stats;
pub mod summary;
pub mod sut;
pub mod trace;

pub use completion::{Completer, CompletionSink};
pub use settings::{EffectiveSettings, Scenario, TestMode, TestSettings};
pub use sut::{
    QuerySample, QuerySampleIndex, QuerySampleLibrary, QuerySampleResponse, ResponseId,
    SystemUnderTest,
};
