//! The Query Dispatch Library (QDL): one system under test for the LoadGen
//! that forwards every sample over the network to one or more sut-nodes
//! (MLPerf Inference, Network division).
//!
//! The QDL does no pre-processing, batching, padding, caching or
//! post-processing: each sample's bytes, as the QSL loaded them, are sent to a
//! node the moment the LoadGen issues it, and each answer is handed to the
//! LoadGen as it arrives (decompressed if the node compressed it, the one
//! step the rules allow in the timed path).
//!
//! Data path: `issue_query` (LoadGen's issuing thread) looks up the sample's
//! bytes, picks a connection by the [`DispatchPolicy`] and pushes one
//! `ToNode` onto that connection's unbounded queue: no lock, no task spawn,
//! no copy. The transport streams the queue to the node; each connection's
//! receive task hands the answers of one `FromNode` to the LoadGen in one
//! `query_samples_complete` call, and its first tokens in one
//! `first_token_complete` call (a heartbeat carries neither). A watchdog per connection aborts the run when a node with outstanding
//! samples goes silent. Every failure aborts the run through the Completer
//! with a reason that names the node, so a run never hangs.
//!
//! The QDL is the engine's SUT; the QSL hands it the loaded samples through
//! [`SampleData`]. Not run as a doctest: it needs sut-nodes listening, and the
//! in-process fake node of `qdl/tests/common` (which `qdl/tests/qdl.rs` runs
//! this same flow against) is not visible to doctests.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use bytes::Bytes;
//! use loadgen_engine::null_sut::SizedQsl;
//! use loadgen_engine::runner::{start_test, LogSettings};
//! use loadgen_engine::{QuerySampleIndex, Scenario, TestSettings};
//! use qdl::{Qdl, QdlConfig, SampleData, StoredSample};
//!
//! /// Every sample is 64 bytes of its index.
//! struct Data;
//!
//! impl SampleData for Data {
//!     fn sample(&self, index: QuerySampleIndex) -> Option<StoredSample> {
//!         Some(StoredSample::raw(Bytes::from(vec![index as u8; 64])))
//!     }
//! }
//!
//! let config = QdlConfig {
//!     nodes: vec!["127.0.0.1:50051".parse()?, "quic://127.0.0.1:50052".parse()?],
//!     model: "resnet50".into(),
//!     scenario: "Offline".into(),
//!     ..QdlConfig::default()
//! };
//! let qdl = Qdl::connect(config, Arc::new(Data))?;
//! let settings = TestSettings {
//!     scenario: Scenario::Offline,
//!     ..TestSettings::default()
//! };
//! let outcome = start_test(&qdl, &SizedQsl::new(1024, 1024), &settings, &LogSettings::default(), None)?;
//! println!("{}", outcome.performance.map(|p| p.summary).unwrap_or_default());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod breakdown;
mod config;
mod conn;
pub mod discover;
mod error;
mod foreign;
mod network_report;
mod policy;
pub mod probe;
mod sample;
mod session;
pub mod spans;
mod stats;
mod sut;
mod transport;
mod watchdog;

pub use config::{
    run_mode, NodeAddr, QdlConfig, Sizing, Transport, DEFAULT_MAX_ANSWER_BYTES,
    DEFAULT_MAX_IN_FLIGHT, MAX_QDL_THREADS, MAX_SIZED_CONNECTIONS_PER_NODE,
};
pub use conn::Counters;
pub use discover::{find_nodes, NodeList};
pub use error::QdlError;
pub use foreign::{ForeignLoadGen, ForeignSut};
pub use policy::DispatchPolicy;
pub use proto::{Codec, RunMode};
pub use sample::{SampleData, StoredSample};
pub use session::MAX_NODE_NAME_BYTES;
pub use stats::{ConnectionStats, QdlStats, QdlView};
pub use sut::Qdl;
