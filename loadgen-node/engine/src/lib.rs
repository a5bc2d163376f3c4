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
//! # Ok::<(), loadgen_engine::runner::RunError>(())
//! ```

mod accuracy_log;
mod aggregator;
mod c_number;
pub mod clock;
mod completion;
pub mod config;
pub mod detail;
pub mod early_stopping;
mod effective;
mod escape;
mod issue;
pub mod live;
pub mod loadable;
pub mod null_sut;
pub mod number_format;
pub mod querygen;
mod report;
mod results;
mod rng;
pub mod runner;
mod sample;
mod sequence;
mod settings;
pub mod settings_log;
mod stats;
pub mod summary;
pub mod sut;
mod trace;

pub use completion::{Completer, CompletionSink};
pub use settings::{EffectiveSettings, Scenario, TestMode, TestSettings};
pub use sut::{
    QuerySample, QuerySampleIndex, QuerySampleLibrary, QuerySampleResponse, ResponseId,
    SystemUnderTest,
};
