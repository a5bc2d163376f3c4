#![warn(missing_docs, unreachable_pub)]

//! The MLPerf Inference LoadGen engine.
//!
//! The deterministic core (settings, config files, random streams, loadable
//! sets, query generation, statistics, result and log formatting) is plain
//! code that is handed the time. The timed glue (`runner`, `completion`) issues
//! queries to a [`SystemUnderTest`] and records the answers.
//!
//! A SUT answers each sample through the [`Completer`] it is handed, from the
//! issuing call or later from any thread:
//!
//! ```
//! use loadgen_engine::null_sut::SizedQsl;
//! use loadgen_engine::runner::{start_test, LogSettings};
//! use loadgen_engine::sut::SutError;
//! use loadgen_engine::{
//!     Completer, QuerySample, QuerySampleResponse, Scenario, SystemUnderTest, TestMode,
//!     TestSettings,
//! };
//!
//! /// Answers every sample at once with its index as the response.
//! struct Echo;
//!
//! impl SystemUnderTest for Echo {
//!     fn name(&self) -> Result<String, SutError> {
//!         Ok("echo".into())
//!     }
//!     fn issue_query(&self, samples: &[QuerySample], completer: &Completer) {
//!         for s in samples {
//!             let answer = (s.index as u32).to_le_bytes();
//!             completer.query_samples_complete(&[QuerySampleResponse::new(s.id, &answer)]);
//!         }
//!     }
//! }
//!
//! let settings = TestSettings {
//!     scenario: Scenario::Offline,
//!     mode: TestMode::AccuracyOnly,
//!     ..TestSettings::default()
//! };
//! let logs = LogSettings {
//!     outdir: std::env::temp_dir().join(format!("loadgen-doc-{}", std::process::id())),
//!     ..LogSettings::default()
//! };
//! // 100 samples, 50 of them in memory at a time.
//! let outcome = start_test(&Echo, &SizedQsl::new(100, 50), &settings, &logs, None)?;
//! assert_eq!(outcome.accuracy_entries, 100);
//! assert!(outcome.run_error.is_none());
//! # std::fs::remove_dir_all(&logs.outdir).ok();
//! # Ok::<(), loadgen_engine::runner::RunError>(())
//! ```

mod accuracy_log;
mod aggregator;
mod c_number;
pub mod clock;
mod completion;
pub mod config;
mod detail;
pub mod disk;
pub mod early_stopping;
mod effective;
mod escape;
pub mod footprint;
mod issue;
pub mod latency_file;
pub mod live;
mod loadable;
pub mod null_sut;
mod number_format;
mod performance_report;
mod querygen;
mod results;
mod rng;
pub mod runner;
mod sample;
mod sequence;
mod settings;
mod settings_log;
mod stats;
mod summary;
pub mod sut;
mod trace_log;

/// Internals that the integration tests of this crate drive directly: the
/// conformance replays compare query generation, loadable sets, the settings
/// records and the summary footer with the official LoadGen's runs. Not a
/// stable interface.
#[doc(hidden)]
pub mod testing {
    pub use crate::detail::LogValue;
    pub use crate::loadable::{generate_loadable_sets, LoadableSet};
    pub use crate::number_format::g6;
    pub use crate::querygen::{GenerationPlan, QueryGenerator, RunKind};
    pub use crate::settings_log::{effective_entries, requested_entries};
    pub use crate::summary::footer;
}

pub use completion::{Completer, CompletionSink};
pub use settings::{EffectiveSettings, Scenario, TestMode, TestSettings};
pub use sut::{
    QuerySample, QuerySampleIndex, QuerySampleLibrary, QuerySampleResponse, ResponseId,
    SystemUnderTest,
};
