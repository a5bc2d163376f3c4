//! The sut-node: serves the `SutNode` gRPC service (`proto/sutnode.proto`)
//! and runs the samples a LoadGen node sends through an inference backend.
//!
//! - [`server`]: the gRPC service: lifecycle, sessions, health.
//! - `infer`: the data path of the `Infer` streams.
//! - [`batcher`]: dynamic batching onto one blocking worker thread.
//! - [`backend`]: the `Backend` trait and its implementations.
//! - [`codec`]: decoding of sample inputs.

pub mod backend;
pub mod batcher;
pub mod codec;
pub mod config_file;
mod infer;
pub mod metrics;
pub mod quic;
pub mod server;
pub mod tls;
