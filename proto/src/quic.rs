//! The protocol over QUIC (`docs/protocol.md`, section QUIC): stream types
//! and the transport settings both ends share. Every stream is bidirectional
//! and opened by the LoadGen node; its first byte is the stream type, then
//! each side sends frames (`framing`).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use quinn::udp::Transmit;

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
/// discovery tries: the most one send can carry (`MAX_SEND`). On loopback,
/// where discovery gets there, a ResNet50 fp32 input is ten packets rather
/// than ninety-two (6,550-byte datagrams, ten to a send): quinn's work per
/// packet (encryption calls, acknowledgements, loss bookkeeping) is most of
/// its cost, and the node's socket overflows less.
pub(crate) const MAX_UDP_PAYLOAD: u16 = 65_507;
/// The most bytes one UDP send may carry in all: the kernel refuses a
/// segmentation-offload send of more with EMSGSIZE, and quinn-udp drops
/// such a send without a word (as it would a failed MTU probe).
const MAX_SEND: usize = 65_507;
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
fn endpoint_config() -> quinn::EndpointConfig {
    let mut config = quinn::EndpointConfig::default();
    // In range by construction (1200..=65527).
    let _ = config.max_udp_payload_size(MAX_UDP_PAYLOAD);
    config
}

/// A QUIC endpoint on `socket` (see `udp_socket`), a server if `server` is
/// given, on the current tokio runtime. Every QUIC endpoint of both ends is
/// made here: its sends are cut to the kernel's limit (`SendsWithinLimit`).
pub fn endpoint(
    socket: std::net::UdpSocket,
    server: Option<quinn::ServerConfig>,
) -> std::io::Result<quinn::Endpoint> {
    let runtime = Arc::new(quinn::TokioRuntime);
    let socket = quinn::Runtime::wrap_udp_socket(&*runtime, socket)?;
    quinn::Endpoint::new_with_abstract_socket(
        endpoint_config(),
        server,
        Arc::new(SendsWithinLimit(socket)),
        runtime,
    )
}

/// quinn's UDP socket, with each batch of datagrams that quinn hands over at
/// once (up to ten, of the path's packet size) sent as as many
/// segmentation-offload sends of at most `MAX_SEND` bytes as it takes.
/// Without it a batch over the limit is lost whole, so packets could be no
/// larger than a tenth of it.
#[derive(Debug)]
struct SendsWithinLimit(Arc<dyn quinn::AsyncUdpSocket>);

impl quinn::AsyncUdpSocket for SendsWithinLimit {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn quinn::UdpPoller>> {
        Arc::clone(&self.0).create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> std::io::Result<()> {
        // Should a later part find the socket full, quinn sends the whole
        // batch again: the peer drops the duplicates of the parts sent.
        within_send_limit(transmit).try_for_each(|part| self.0.try_send(&part))
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [std::io::IoSliceMut<'_>],
        meta: &mut [quinn::udp::RecvMeta],
    ) -> Poll<std::io::Result<usize>> {
        self.0.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.0.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.0.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.0.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.0.may_fragment()
    }
}

/// `transmit` as sends of whole datagrams, each of at most `MAX_SEND` bytes
/// (itself, if it is within the limit).
fn within_send_limit<'a>(transmit: &Transmit<'a>) -> impl Iterator<Item = Transmit<'a>> {
    let segment = transmit.segment_size.unwrap_or(transmit.contents.len());
    let per_send = (MAX_SEND / segment.max(1)).max(1) * segment;
    let template = Transmit {
        destination: transmit.destination,
        ecn: transmit.ecn,
        contents: &[],
        segment_size: None,
        src_ip: transmit.src_ip,
    };
    transmit
        .contents
        .chunks(per_send.max(1))
        .map(move |part| Transmit {
            contents: part,
            segment_size: (part.len() > segment).then_some(segment),
            ..template
        })
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

    fn transmit(contents: &[u8], segment_size: Option<usize>) -> Transmit<'_> {
        Transmit {
            destination: ([127, 0, 0, 1], 9).into(),
            ecn: None,
            contents,
            segment_size,
            src_ip: None,
        }
    }

    /// A batch over the kernel's limit is cut into sends within it, each of
    /// whole datagrams, in order; a batch within it goes as it is.
    #[test]
    fn batches_are_cut_into_sends_of_whole_datagrams_within_the_limit() {
        for (segment, count, last) in [
            (usize::from(MAX_UDP_PAYLOAD), 10, 100),
            (8_952, 10, 8_952),
            (8_952, 3, 17),
            (1_452, 10, 1_452),
            (1_200, 1, 1_200),
        ] {
            let len = segment * (count - 1) + last;
            let contents: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let batch = transmit(&contents, (count > 1).then_some(segment));
            let parts: Vec<_> = within_send_limit(&batch).collect();
            let mut joined = Vec::new();
            for part in &parts {
                assert!(part.contents.len() <= MAX_SEND, "{segment} x {count}");
                match part.segment_size {
                    Some(s) => assert_eq!(s, segment),
                    None => assert!(part.contents.len() <= segment),
                }
                // Only the batch's last datagram may be short.
                let whole = part.contents.len() % segment == 0;
                assert!(whole || std::ptr::eq(part, parts.last().unwrap()));
                joined.extend_from_slice(part.contents);
            }
            assert_eq!(joined, contents, "{segment} x {count}");
            let fit = (MAX_SEND / segment) * segment;
            assert_eq!(parts.len(), len.div_ceil(fit), "{segment} x {count}");
        }
    }

    /// As quinn sends with segmentation offload, cut as `SendsWithinLimit`
    /// cuts it: a batch of ten of the largest datagrams, and of ten
    /// jumbo-frame-sized ones (seven to a send), all reach the peer whole.
    /// (A send over the kernel's limit is refused, and quinn-udp drops it
    /// silently, so the peer would get none of it.)
    #[test]
    fn a_full_batch_of_the_largest_datagrams_arrives_whole() {
        let rx = udp_socket(([127, 0, 0, 1], 0).into()).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let tx = udp_socket(([127, 0, 0, 1], 0).into()).unwrap();
        let state = quinn::udp::UdpSocketState::new((&tx).into()).unwrap();
        // One datagram per send where the kernel has no offload.
        let batch = 10.min(state.max_gso_segments());
        for size in [usize::from(MAX_UDP_PAYLOAD), 8_952] {
            let contents = vec![7u8; batch * size];
            let mut whole = transmit(&contents, (batch > 1).then_some(size));
            whole.destination = rx.local_addr().unwrap();
            for part in within_send_limit(&whole) {
                state.send((&tx).into(), &part).unwrap();
            }
            let mut buf = vec![0u8; 1 << 16];
            for i in 0..batch {
                let n = rx
                    .recv(&mut buf)
                    .unwrap_or_else(|e| panic!("datagram {i} of {batch} of {size}: {e}"));
                assert_eq!(n, size, "datagram {i} of {batch}");
            }
        }
    }
}
