//! The protocol over QUIC (`docs/protocol.md`, section QUIC): stream types
//! and the transport settings both ends share. Every stream is bidirectional
//! and opened by the LoadGen node; its first byte is the stream type, then
//! each side sends frames (`framing`).

/// The ALPN protocol of QUIC connections between the two ends.
pub const ALPN: &[u8] = b"mlperf-net/1";

/// The first byte of a stream: what it carries.
pub mod stream_type {
    /// `NameRequest` up, `NameReply` down.
    pub const NAME: u8 = 1;
    /// `SessionRequest` up, `SessionReply` down.
    pub const START_SESSION: u8 = 2;
    /// `HealthRequest` up, `HealthReply` down.
    pub const HEALTH: u8 = 3;
    /// The data path: `ToNode` frames up; down, one `FromNode` heartbeat
    /// once the node accepts the stream (or an error frame if it does not),
    /// then `FromNode` frames.
    pub const INFER: u8 = 4;
    /// `DescribeRequest` up, `DescribeReply` down.
    pub const DESCRIBE: u8 = 5;
    /// `ProbeRequest` up, `ProbeReply` down; frames up to `MAX_DATA_FRAME`.
    pub const PROBE: u8 = 6;
}

/// Largest UDP payload either end sends or accepts, and the most path MTU
/// discovery tries. quinn hands the kernel up to `GSO_BATCH` datagrams in
/// one segmentation-offload send, and the kernel refuses a send of more than
/// 65,507 bytes in all with EMSGSIZE, which quinn-udp drops without a word
/// (as it would a failed MTU probe). With larger datagrams (65,495 bytes on
/// loopback, where discovery used to end up) every batch of two or more was
/// lost, and QUIC ran at a third of its rate or stalled for seconds. Ten
/// datagrams of this size fit one send; jumbo-frame paths still get most of
/// their size.
pub const MAX_UDP_PAYLOAD: u16 = 65_507 / GSO_BATCH;
/// The most datagrams quinn puts in one send (`MAX_TRANSMIT_SEGMENTS` in
/// quinn's `connection.rs`).
const GSO_BATCH: u16 = 10;
/// Most bytes (samples or answers) handed to quinn in one write.
pub const MAX_WRITE: usize = 1 << 20;
/// UDP socket buffers asked for (the kernel caps them at its maximum,
/// `net.core.rmem_max`/`wmem_max`): the default (about 200 KiB) overflows
/// under bursts of large samples, and every datagram dropped there is a loss
/// that slows QUIC's congestion control down.
const SOCKET_BUFFER: usize = 8 << 20;

/// The QUIC transport settings of both ends, kept in one place so that they
/// match. `peer_streams`: how many bidirectional streams the peer may open
/// (the LoadGen node opens them all; the node opens none).
pub fn transport_config(peer_streams: u32) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.max_concurrent_bidi_streams(peer_streams.into());
    t.max_concurrent_uni_streams(0u32.into());
    // Flow control as gRPC's windows: a stream held back by a full batcher
    // never blocks the connection's other streams.
    t.stream_receive_window((8u32 << 20).into());
    t.receive_window((32u32 << 20).into());
    t.send_window(32 << 20);
    // A run may start long after the session (the QSL loads its samples
    // first): keep the connection alive meanwhile. A stalled node is the
    // QDL's watchdog's business, within --node-timeout.
    t.keep_alive_interval(Some(std::time::Duration::from_secs(2)));
    t.max_idle_timeout(Some(quinn::IdleTimeout::from(quinn::VarInt::from_u32(
        30_000,
    ))));
    // Let path MTU discovery go past Ethernet's 1500 bytes where the path
    // allows (jumbo frames, loopback): fewer, larger packets per sample, up
    // to what a segmentation-offload send can carry.
    let mut mtu = quinn::MtuDiscoveryConfig::default();
    mtu.upper_bound(MAX_UDP_PAYLOAD);
    t.mtu_discovery_config(Some(mtu));
    t
}

/// Accepts datagrams up to `MAX_UDP_PAYLOAD`, so that path MTU discovery
/// can grow packets past 1452 bytes where the path allows.
pub fn endpoint_config() -> quinn::EndpointConfig {
    let mut config = quinn::EndpointConfig::default();
    // In range by construction (1200..=65527).
    let _ = config.max_udp_payload_size(MAX_UDP_PAYLOAD);
    config
}

/// A UDP socket on `addr` with large buffers.
pub fn udp_socket(addr: std::net::SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let socket = std::net::UdpSocket::bind(addr)?;
    let sock = socket2::SockRef::from(&socket);
    // Best effort: a smaller buffer only costs throughput.
    let _ = sock.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = sock.set_send_buffer_size(SOCKET_BUFFER);
    Ok(socket)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// As quinn sends with segmentation offload: `GSO_BATCH` datagrams of
    /// the largest size in one send all reach the peer. (Larger datagrams
    /// make the kernel refuse the send, and quinn-udp drops such a send
    /// silently, so the peer would get none.)
    #[test]
    fn a_full_offload_batch_of_the_largest_datagrams_arrives_whole() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let tx = udp_socket(([127, 0, 0, 1], 0).into()).unwrap();
        let state = quinn::udp::UdpSocketState::new((&tx).into()).unwrap();
        // One datagram per send where the kernel has no offload.
        let batch = usize::from(GSO_BATCH).min(state.max_gso_segments());
        let size = usize::from(MAX_UDP_PAYLOAD);
        let contents = vec![7u8; batch * size];
        let transmit = quinn::udp::Transmit {
            destination: rx.local_addr().unwrap(),
            ecn: None,
            contents: &contents,
            segment_size: (batch > 1).then_some(size),
            src_ip: None,
        };
        state.send((&tx).into(), &transmit).unwrap();
        let mut buf = vec![0u8; 1 << 16];
        for i in 0..batch {
            let n = rx
                .recv(&mut buf)
                .unwrap_or_else(|e| panic!("datagram {i} of {batch}: {e}"));
            assert_eq!(n, size, "datagram {i} of {batch}");
        }
    }
}
