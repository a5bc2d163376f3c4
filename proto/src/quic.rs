//! The protocol's messages over QUIC (`docs/protocol.md`, section QUIC):
//! stream types and the length-delimited framing of protobuf messages.
//!
//! Every stream is bidirectional and opened by the LoadGen node. Its first
//! byte is the stream type; then each side sends frames:
//!
//! ```text
//! frame := kind (u8) | length (u32, big-endian) | body (length bytes)
//! kind 0: a protobuf message; kind 1: an error (UTF-8 text), the last frame
//! ```
//!
//! The decoder checks a frame's kind and length as soon as its 5-byte header
//! is in, before buffering its body, and buffers only the bytes actually
//! received: a peer announcing a huge frame costs what it sends, no more.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message;

use crate::{to_node, ToNode};

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

/// Bytes before each frame's body.
pub const HEADER_LEN: usize = 5;
/// Largest frame on a control stream (Name, StartSession, Health).
pub const MAX_CONTROL_FRAME: usize = 64 << 10;
/// Largest frame on an Infer stream: the gRPC path's message limit.
pub const MAX_DATA_FRAME: usize = 1 << 30;

/// Largest UDP payload path MTU discovery tries.
pub const MAX_UDP_PAYLOAD: u16 = 65_527;
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
    // allows (jumbo frames, loopback): fewer, larger packets per sample.
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
/// Sample payloads at least this large are sent as their own chunk rather
/// than copied into the frame buffer.
const ZERO_COPY_MIN: usize = 8 << 10;

const KIND_MESSAGE: u8 = 0;
const KIND_ERROR: u8 = 1;

/// One decoded frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A protobuf message's bytes.
    Message(Bytes),
    /// The peer ends the stream with this error.
    Error(String),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {len} bytes over the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("the stream ended inside a frame ({0} bytes of it received)")]
    Truncated(usize),
    #[error("undecodable {what}: {reason}")]
    Decode { what: &'static str, reason: String },
}

impl Frame {
    /// The message in a `Message` frame; an `Error` frame's text as `Err`.
    pub fn decode<M: Message + Default>(self, what: &'static str) -> Result<M, FrameError> {
        match self {
            Frame::Message(body) => M::decode(body).map_err(|e| FrameError::Decode {
                what,
                reason: e.to_string(),
            }),
            Frame::Error(text) => Err(FrameError::Decode {
                what,
                reason: format!("the peer sent an error instead: {text}"),
            }),
        }
    }
}

/// Splits a byte stream, fed in chunks of any size, into frames. A frame
/// that lies whole in one chunk is a slice of it (no copy); a frame split
/// across chunks keeps their slices and is copied once, into a buffer of its
/// exact size, when its last byte arrives.
#[derive(Debug)]
pub struct FrameDecoder {
    /// The unread part of the last chunk.
    cur: Bytes,
    /// A header split across chunks.
    head: [u8; HEADER_LEN],
    head_len: usize,
    /// The header of the frame being assembled, and its body so far.
    want: Option<(u8, usize)>,
    pieces: Vec<Bytes>,
    have: usize,
    max: usize,
}

impl FrameDecoder {
    /// Frames over `max` body bytes are errors.
    pub fn new(max: usize) -> Self {
        Self {
            cur: Bytes::new(),
            head: [0; HEADER_LEN],
            head_len: 0,
            want: None,
            pieces: Vec::new(),
            have: 0,
            max,
        }
    }

    /// Adds the next bytes of the stream. Call `next_frame` until it gives
    /// `None` before pushing again.
    pub fn push(&mut self, chunk: Bytes) {
        if self.cur.is_empty() {
            self.cur = chunk;
        } else {
            // Only if the caller pushed without draining: keep the order.
            let mut joined = BytesMut::with_capacity(self.cur.len() + chunk.len());
            joined.extend_from_slice(&self.cur);
            joined.extend_from_slice(&chunk);
            self.cur = joined.freeze();
        }
    }

    /// The next whole frame, `None` if more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        let (kind, len) = match self.want {
            Some(w) => w,
            None if self.head_len == 0 && self.cur.len() >= HEADER_LEN => {
                let (kind, len) = self.header(&self.cur[..HEADER_LEN])?;
                if self.cur.len() >= HEADER_LEN + len {
                    // The whole frame is here: a slice, no copy.
                    self.cur.advance(HEADER_LEN);
                    return Ok(Some(frame(kind, self.cur.split_to(len))));
                }
                self.cur.advance(HEADER_LEN);
                self.want = Some((kind, len));
                (kind, len)
            }
            None => {
                let take = (HEADER_LEN - self.head_len).min(self.cur.len());
                self.head[self.head_len..self.head_len + take].copy_from_slice(&self.cur[..take]);
                self.cur.advance(take);
                self.head_len += take;
                if self.head_len > 0 {
                    check_kind(self.head[0])?;
                }
                if self.head_len < HEADER_LEN {
                    return Ok(None);
                }
                let (kind, len) = self.header(&self.head)?;
                self.head_len = 0;
                self.want = Some((kind, len));
                (kind, len)
            }
        };
        let take = (len - self.have).min(self.cur.len());
        if take > 0 {
            self.pieces.push(self.cur.split_to(take));
            self.have += take;
        }
        if self.have < len {
            return Ok(None);
        }
        self.want = None;
        self.have = 0;
        let body = match self.pieces.len() {
            0 => Bytes::new(),
            1 => self.pieces.pop().unwrap_or_default(),
            _ => {
                let mut whole = BytesMut::with_capacity(len);
                for p in self.pieces.drain(..) {
                    whole.extend_from_slice(&p);
                }
                whole.freeze()
            }
        };
        Ok(Some(frame(kind, body)))
    }

    /// Call when the stream has ended: an error if it ended inside a frame.
    pub fn finish(&self) -> Result<(), FrameError> {
        match self.buffered() {
            0 if self.want.is_none() => Ok(()),
            n => Err(FrameError::Truncated(n)),
        }
    }

    /// Bytes received and not yet handed out as frames.
    fn buffered(&self) -> usize {
        self.head_len
            + self.have
            + self.cur.len()
            + if self.want.is_some() { HEADER_LEN } else { 0 }
    }

    /// Parses (and checks) a 5-byte header.
    fn header(&self, bytes: &[u8]) -> Result<(u8, usize), FrameError> {
        let kind = check_kind(bytes[0])?;
        let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
        if len > self.max {
            return Err(FrameError::TooLarge { len, max: self.max });
        }
        Ok((kind, len))
    }
}

fn check_kind(kind: u8) -> Result<u8, FrameError> {
    match kind {
        KIND_MESSAGE | KIND_ERROR => Ok(kind),
        k => Err(FrameError::UnknownKind(k)),
    }
}

fn frame(kind: u8, body: Bytes) -> Frame {
    if kind == KIND_ERROR {
        Frame::Error(String::from_utf8_lossy(&body).into_owned())
    } else {
        Frame::Message(body)
    }
}

fn put_header(kind: u8, len: usize, out: &mut BytesMut) -> Result<(), FrameError> {
    if len > MAX_DATA_FRAME {
        return Err(FrameError::TooLarge {
            len,
            max: MAX_DATA_FRAME,
        });
    }
    out.reserve(HEADER_LEN + len.min(ZERO_COPY_MIN));
    out.put_u8(kind);
    out.put_u32(len as u32);
    Ok(())
}

/// Appends `message` as one frame.
pub fn encode_message(message: &impl Message, out: &mut BytesMut) -> Result<(), FrameError> {
    let len = message.encoded_len();
    put_header(KIND_MESSAGE, len, out)?;
    out.reserve(len);
    // Cannot fail: the room was reserved.
    message.encode(out).map_err(|e| FrameError::Decode {
        what: "message",
        reason: e.to_string(),
    })
}

/// Appends an error frame: the stream's last.
pub fn encode_error(text: &str, out: &mut BytesMut) {
    // Error texts are short; one over the limit is cut, not refused.
    let bytes = &text.as_bytes()[..text.len().min(MAX_CONTROL_FRAME)];
    out.reserve(HEADER_LEN + bytes.len());
    out.put_u8(KIND_ERROR);
    out.put_u32(bytes.len() as u32);
    out.put_slice(bytes);
}

/// Frames for one write: small ones are copied into one buffer; large sample
/// payloads are passed on as their own chunks, uncopied.
#[derive(Debug, Default)]
pub struct FrameWriter {
    buf: BytesMut,
    chunks: Vec<Bytes>,
    len: usize,
}

impl FrameWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes queued so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `message` as one frame.
    pub fn message(&mut self, message: &impl Message) -> Result<(), FrameError> {
        let before = self.buf.len();
        encode_message(message, &mut self.buf)?;
        self.len += self.buf.len() - before;
        Ok(())
    }

    /// Appends a `ToNode` frame, its payload uncopied when it is large. The
    /// bytes are exactly prost's encoding of the message.
    pub fn to_node(&mut self, message: &ToNode) -> Result<(), FrameError> {
        let Some(to_node::Kind::Sample(s)) = &message.kind else {
            return self.message(message);
        };
        if s.payload.len() < ZERO_COPY_MIN {
            return self.message(message);
        }
        use prost::encoding::{encode_key, encode_varint, WireType};
        let inner = s.encoded_len();
        let outer = message.encoded_len();
        let before = self.buf.len();
        put_header(KIND_MESSAGE, outer, &mut self.buf)?;
        // ToNode.sample (field 1), then SampleRequest's fields in order.
        encode_key(1, WireType::LengthDelimited, &mut self.buf);
        encode_varint(inner as u64, &mut self.buf);
        if s.id != 0 {
            prost::encoding::uint64::encode(1, &s.id, &mut self.buf);
        }
        encode_key(2, WireType::LengthDelimited, &mut self.buf);
        encode_varint(s.payload.len() as u64, &mut self.buf);
        self.len += self.buf.len() - before;
        self.flush_buf();
        self.chunks.push(s.payload.clone());
        self.len += s.payload.len();
        if s.codec != 0 {
            let before = self.buf.len();
            prost::encoding::int32::encode(3, &s.codec, &mut self.buf);
            self.len += self.buf.len() - before;
        }
        Ok(())
    }

    /// Appends an error frame.
    pub fn error(&mut self, text: &str) {
        let before = self.buf.len();
        encode_error(text, &mut self.buf);
        self.len += self.buf.len() - before;
    }

    /// Everything queued, as chunks to write in order; the writer is empty
    /// afterwards. The vector is reused: clear it after writing.
    pub fn take_chunks(&mut self) -> &mut Vec<Bytes> {
        self.flush_buf();
        self.len = 0;
        &mut self.chunks
    }

    fn flush_buf(&mut self) {
        if !self.buf.is_empty() {
            self.chunks.push(self.buf.split().freeze());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FromNode, SampleAnswer, SampleRequest};

    fn sample(id: u64, len: usize, codec: i32) -> ToNode {
        ToNode {
            kind: Some(to_node::Kind::Sample(SampleRequest {
                id,
                payload: Bytes::from((0..len).map(|i| i as u8).collect::<Vec<_>>()),
                codec,
                ..Default::default()
            })),
        }
    }

    fn written(w: &mut FrameWriter) -> Bytes {
        let chunks = w.take_chunks();
        let mut all = BytesMut::new();
        for c in chunks.iter() {
            all.extend_from_slice(c);
        }
        chunks.clear();
        all.freeze()
    }

    fn decode_all(bytes: &[u8], chunk: usize, max: usize) -> Result<Vec<Frame>, FrameError> {
        let mut d = FrameDecoder::new(max);
        let mut out = Vec::new();
        for c in bytes.chunks(chunk.max(1)) {
            d.push(Bytes::copy_from_slice(c));
            while let Some(f) = d.next_frame()? {
                out.push(f);
            }
        }
        d.finish()?;
        Ok(out)
    }

    #[test]
    fn frames_round_trip_whatever_the_chunking() {
        let mut w = FrameWriter::new();
        let messages = [
            sample(1, 64, 0),
            sample(2, 20_000, 0),
            sample(u64::MAX, 9000, 2),
            sample(0, 0, 0),
            ToNode { kind: None },
        ];
        for m in &messages {
            w.to_node(m).unwrap();
        }
        let answers = FromNode {
            answers: vec![SampleAnswer {
                id: 7,
                payload: Bytes::from_static(b"abcd"),
                codec: 0,
                n_tokens: 3,
                ..SampleAnswer::default()
            }],
            ..FromNode::default()
        };
        w.message(&answers).unwrap();
        w.error("node shutting down");
        let queued = w.len();
        let bytes = written(&mut w);
        assert_eq!(bytes.len(), queued);
        assert!(w.is_empty());
        for chunk in [1, 2, 3, 5, 7, 64, 1000, 4096, bytes.len()] {
            let frames = decode_all(&bytes, chunk, MAX_DATA_FRAME).unwrap();
            assert_eq!(frames.len(), messages.len() + 2, "chunk {chunk}");
            for (f, m) in frames.iter().zip(&messages) {
                assert_eq!(&f.clone().decode::<ToNode>("ToNode").unwrap(), m);
            }
            assert_eq!(
                frames[messages.len()]
                    .clone()
                    .decode::<FromNode>("FromNode")
                    .unwrap(),
                answers
            );
            assert_eq!(
                frames[messages.len() + 1],
                Frame::Error("node shutting down".into())
            );
        }
    }

    #[test]
    fn large_payloads_are_not_copied_and_encode_as_prost_does() {
        for m in [sample(3, 100_000, 0), sample(4, ZERO_COPY_MIN, 1)] {
            let mut w = FrameWriter::new();
            w.to_node(&m).unwrap();
            let expected_len = m.encoded_len();
            let chunks = w.take_chunks();
            let Some(to_node::Kind::Sample(s)) = &m.kind else {
                unreachable!()
            };
            assert!(
                chunks.iter().any(|c| c.as_ptr() == s.payload.as_ptr()),
                "payload shared, not copied"
            );
            let mut all = Vec::new();
            for c in chunks.iter() {
                all.extend_from_slice(c);
            }
            let mut expected = BytesMut::new();
            encode_message(&m, &mut expected).unwrap();
            assert_eq!(all, expected.to_vec());
            assert_eq!(all.len(), HEADER_LEN + expected_len);
        }
    }

    #[test]
    fn a_whole_frame_in_one_chunk_is_a_slice_of_it() {
        let mut buf = BytesMut::new();
        encode_message(&sample(1, 64, 0), &mut buf).unwrap();
        let chunk = buf.freeze();
        let mut d = FrameDecoder::new(1024);
        d.push(chunk.clone());
        let Some(Frame::Message(body)) = d.next_frame().unwrap() else {
            panic!("one frame")
        };
        assert_eq!(body.as_ptr(), chunk[HEADER_LEN..].as_ptr());
        assert_eq!(d.next_frame().unwrap(), None);
        d.finish().unwrap();
    }

    #[test]
    fn garbage_and_partial_input_are_clean_errors() {
        // Unknown kind: refused at its first byte.
        assert_eq!(
            decode_all(&[9], 1, 100).unwrap_err(),
            FrameError::UnknownKind(9)
        );
        // A length over the limit: refused at the header, before any body.
        let mut d = FrameDecoder::new(100);
        d.push(Bytes::from_static(&[0, 0xff, 0xff, 0xff, 0xff]));
        assert_eq!(
            d.next_frame().unwrap_err(),
            FrameError::TooLarge {
                len: u32::MAX as usize,
                max: 100
            }
        );
        // The same header split byte by byte.
        assert!(matches!(
            decode_all(&[0, 0, 0, 1, 0], 1, 100),
            Err(FrameError::TooLarge { len: 256, .. })
        ));
        // Truncated header, truncated body.
        assert_eq!(
            decode_all(&[0, 0, 0], 2, 100).unwrap_err(),
            FrameError::Truncated(3)
        );
        assert_eq!(
            decode_all(&[0, 0, 0, 0, 10, 1, 2, 3], 3, 100).unwrap_err(),
            FrameError::Truncated(8)
        );
        // A frame whose body is not the message.
        let frames = decode_all(&[0, 0, 0, 0, 3, 0xff, 0xff, 0xff], 2, 100).unwrap();
        let e = frames[0].clone().decode::<ToNode>("ToNode").unwrap_err();
        assert!(
            matches!(e, FrameError::Decode { what: "ToNode", .. }),
            "{e}"
        );
        // An error frame where a message was expected.
        let e = Frame::Error("no".into())
            .decode::<ToNode>("ToNode")
            .unwrap_err();
        assert!(e.to_string().contains("no"), "{e}");
        // Not UTF-8 error text: replaced, not refused.
        let frames = decode_all(&[1, 0, 0, 0, 2, 0xff, b'x'], 7, 100).unwrap();
        assert_eq!(frames, vec![Frame::Error("\u{fffd}x".into())]);
        // An empty stream and an empty message are fine.
        assert_eq!(decode_all(&[], 1, 100).unwrap(), vec![]);
        assert_eq!(
            decode_all(&[0, 0, 0, 0, 0], 1, 0).unwrap(),
            vec![Frame::Message(Bytes::new())]
        );
    }

    #[test]
    fn random_bytes_never_panic_and_memory_follows_the_input() {
        // A splitmix64 stream of garbage, fed in odd chunk sizes.
        let mut state = 0x1234_5678_u64;
        let mut next = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        for round in 0..2000 {
            let len = (next() % 64) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if round % 2 == 0 && !bytes.is_empty() {
                bytes[0] %= 2; // a valid kind, so the length is looked at
            }
            let chunk = 1 + (next() % 9) as usize;
            let mut d = FrameDecoder::new(MAX_DATA_FRAME);
            for c in bytes.chunks(chunk) {
                d.push(Bytes::copy_from_slice(c));
                while let Ok(Some(f)) = d.next_frame() {
                    let _ = f.decode::<ToNode>("ToNode");
                }
                // Never more held than received.
                assert!(d.buffered() <= bytes.len());
            }
        }
    }
}
