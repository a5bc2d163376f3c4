//! Wire protocol between the LoadGen node's Query Dispatch Library and the
//! sut-nodes (`proto/sutnode.proto`; described in `docs/protocol.md`).

#[allow(clippy::all, missing_docs)]
mod generated {
    tonic::include_proto!("mlperf_net.v1");
}

pub use generated::*;

/// Version of the protocol; a session is refused when the two ends differ.
pub const PROTOCOL_VERSION: u32 = 1;

pub mod benchmarks;
pub mod host;
pub mod quic;
pub mod synthetic;
pub mod tls;
