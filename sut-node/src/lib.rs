//! The sut-node: serves the `SutNode` gRPC service (`proto/sutnode.proto`)
//! and runs the samples a LoadGen node sends through an inference backend.
//!
//! - [`server`]: serving the node: its lifecycle (warm-up, readiness,
//!   shutdown) and its transports, gRPC there and QUIC in [`quic`]; both
//!   serve the control plane of `node` (names, sessions, health).
//! - `infer`: the data path of the `Infer` streams, room by room (reading,
//!   decoding, budgets, batching hand-off, outbox and writing).
//! - [`batcher`]: dynamic batching onto one blocking worker thread.
//! - [`backend`]: the `Backend` trait and its implementations.
//! - [`codec`]: decoding of sample inputs.
//! - [`plan`]: a node prepared once from its options ([`plan::ServePlan`]);
//!   [`bind`]: its listening sockets.

#![warn(missing_docs)]

pub mod backend;
pub mod batcher;
pub mod bind;
pub mod codec;
pub mod config_file;
pub mod describe;
mod grpc_framed;
mod infer;
pub mod limits;
mod listen;
mod memory;
pub mod metrics;
mod node;
mod node_config;
pub mod otlp;
pub mod plan;
pub mod quic;
pub mod server;
mod stop;
pub mod tls;
mod whole_messages;

/// The longest timeout an option may ask for: a year. Longer ones would
/// overflow the clocks' arithmetic.
pub const MAX_TIMEOUT_SECS: f64 = 365.0 * 24.0 * 3600.0;

/// A timeout given in seconds: `None` unless finite, positive and at most
/// [`MAX_TIMEOUT_SECS`].
pub fn timeout_secs(secs: f64) -> Option<std::time::Duration> {
    (secs > 0.0 && secs <= MAX_TIMEOUT_SECS).then(|| std::time::Duration::from_secs_f64(secs))
}
