//! The node's resource limits: what one client, or all of them together,
//! may make the node hold. Every limit has a flag of `sut-node serve`;
//! docs/operator-guide.md says how to size them.

use std::time::Duration;

/// The node's resource limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest gRPC message or QUIC data frame accepted. gRPC reserves a
    /// message's declared length when its header arrives, so this bounds
    /// what one stream can make the node reserve.
    pub max_message_bytes: usize,
    /// Answer bytes waiting for one stream's reader; past it the node stops
    /// taking samples from that stream until its reader catches up.
    pub max_waiting_answer_bytes: usize,
    /// Input bytes (as decoded) of the samples received and not yet run,
    /// all streams together, those being decoded included (charged at the
    /// most their frame may decode to until decoded); past it the node stops
    /// reading samples.
    pub max_decoded_bytes: usize,
    /// The share of `max_decoded_bytes` one connection may hold, so that no
    /// client takes the whole node's.
    pub max_decoded_bytes_per_connection: usize,
    /// Connections served at once, all clients together.
    pub max_connections: usize,
    /// Connections served at once from one IP address.
    pub max_connections_per_peer: usize,
    /// Streams open at once on one connection (gRPC streams; QUIC
    /// bidirectional streams, control requests included).
    pub max_streams_per_connection: u32,
    /// A connection must complete its TLS handshake, or send its first
    /// bytes, within this time.
    pub handshake_timeout: Duration,
    /// A connection that carries no bytes either way for this long is closed
    /// (the LoadGen node keeps its connections alive with pings, or QUIC
    /// keep-alives; the node sends none of its own).
    pub idle_timeout: Duration,
}

/// Bytes a message carries besides its sample's payload (protobuf tags,
/// id, codec), with room to spare.
pub const MESSAGE_OVERHEAD: usize = 64 << 10;

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_message_bytes: crate::codec::DEFAULT_MAX_INPUT_BYTES + MESSAGE_OVERHEAD,
            max_waiting_answer_bytes: 16 << 20,
            max_decoded_bytes: 512 << 20,
            max_decoded_bytes_per_connection: 128 << 20,
            max_connections: 256,
            max_connections_per_peer: 64,
            max_streams_per_connection: 8,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
        }
    }
}
