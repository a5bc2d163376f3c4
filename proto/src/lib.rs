//! Wire protocol between the LoadGen node's Query Dispatch Library and the
//! sut-nodes (`proto/sutnode.proto`; described in `docs/protocol.md`).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[allow(clippy::all, missing_docs)]
mod generated {
    tonic::include_proto!("mlperf_net.v1");
}

pub use generated::*;

/// Version of the protocol; a session is refused when the two ends differ.
pub const PROTOCOL_VERSION: u32 = 1;

/// The HTTP/2 path of the Infer stream. Both ends frame its messages
/// themselves (`framing`), so that sample payloads are never copied.
pub const INFER_PATH: &str = "/mlperf_net.v1.SutNode/Infer";

/// The HTTP/2 path of Probe. The node frames its reply itself
/// (`framing::ProbeReplyChunks`), so that a large reply costs it no memory.
pub const PROBE_PATH: &str = "/mlperf_net.v1.SutNode/Probe";

pub mod codec;
pub mod framing;
pub mod quic;
pub mod tls;

#[cfg(test)]
mod tests {
    #[test]
    fn the_framed_paths_are_the_services() {
        assert_eq!(
            super::INFER_PATH,
            format!("/{}/Infer", super::sut_node_server::SERVICE_NAME)
        );
        assert_eq!(
            super::PROBE_PATH,
            format!("/{}/Probe", super::sut_node_server::SERVICE_NAME)
        );
    }
}
