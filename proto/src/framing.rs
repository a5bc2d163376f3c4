//! The length-delimited framing of protobuf messages on a byte stream, the
//! same on both transports (`docs/protocol.md`):
//!
//! ```text
//! frame := kind (u8) | length (u32, big-endian) | body (length bytes)
//! ```
//!
//! Over QUIC, kind 0 is a protobuf message and kind 1 an error (UTF-8 text),
//! the stream's last frame. Over gRPC this is gRPC's own message framing,
//! where the first byte is the compression flag: only 0 is valid, as no
//! compression is negotiated, and errors travel in the trailers.
//!
//! The decoder checks a frame's kind and length as soon as its 5-byte header
//! is in, before buffering its body, and buffers only the bytes actually
//! received: a peer announcing a huge frame costs what it sends, no more.
//! Neither side copies a sample's payload: the writer passes large payloads
//! on as their own chunks, and the decoder hands a message out as the slices
//! of the chunks it arrived in (`Pieces`), from which prost takes a payload
//! that lies in one slice without copying it.

use std::collections::VecDeque;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::encoding::{self, encode_key, encode_varint, WireType};
use prost::Message;

use crate::{to_node, FromNode, ToNode};

/// Bytes before each frame's body.
pub const HEADER_LEN: usize = 5;
/// Largest frame on a control stream (Name, StartSession, Health).
pub const MAX_CONTROL_FRAME: usize = 64 << 10;
/// Largest frame on an Infer stream: the gRPC path's message limit.
pub const MAX_DATA_FRAME: usize = 1 << 30;
/// Sample payloads at least this large are sent as their own chunk rather
/// than copied into the frame buffer.
const ZERO_COPY_MIN: usize = 8 << 10;
/// The frame buffer grows by at least this much (see `FrameWriter::room`).
const BUF_CHUNK: usize = 64 << 10;
/// Frames at least this large (WAN-2.2's videos, hundreds of MB) are
/// gathered into one buffer as their chunks arrive, each chunk copied once
/// and let go: the message is then held once, not as its chunks plus the
/// copy decoding would make of them. Below it nothing is copied (inputs,
/// the answers of every other benchmark).
const GATHER_MIN: usize = 64 << 20;

const KIND_MESSAGE: u8 = 0;
const KIND_ERROR: u8 = 1;

/// One decoded frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A protobuf message's bytes.
    Message(Pieces),
    /// The peer ends the stream with this error.
    Error(String),
}

/// Why a byte stream is not a sequence of valid frames, or a frame not the
/// message expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A frame's header announces more body bytes than the stream allows.
    #[error("frame of {len} bytes too large: the limit is {max} bytes")]
    TooLarge {
        /// Body bytes the header announces (or that encoding would take).
        len: usize,
        /// The stream's limit, in body bytes.
        max: usize,
    },
    /// A QUIC frame's first byte is neither message (0) nor error (1).
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// A gRPC message's compression flag is set.
    #[error("a compressed gRPC message, though no compression was negotiated")]
    Compressed,
    /// The stream ended with this many bytes of an unfinished frame
    /// (header included).
    #[error("the stream ended inside a frame ({0} bytes of it received)")]
    Truncated(usize),
    /// A frame's body is not the expected message, or the peer sent an
    /// error frame instead.
    #[error("undecodable {what}: {reason}")]
    Decode {
        /// The message expected (`ToNode`, `DescribeReply`...).
        what: &'static str,
        /// prost's error, or the peer's error text.
        reason: String,
    },
}

impl Frame {
    /// The message in a `Message` frame; an `Error` frame's text as `Err`.
    pub fn decode<M: Message + Default>(self, what: &'static str) -> Result<M, FrameError> {
        match self {
            Frame::Message(body) => body.message::<M>().map_err(|e| FrameError::Decode {
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

/// A message's bytes, as the slices of the chunks they arrived in.
/// `copy_to_bytes` (which prost uses for `bytes` fields) returns a slice,
/// not a copy, when the bytes asked for lie in one chunk. A message that
/// came in one chunk (most small ones) needs no allocation here.
#[derive(Clone, Debug, Default)]
pub struct Pieces {
    /// The first part: all of it when the message came in one chunk.
    head: Bytes,
    /// The parts after it; empty whenever `head` is.
    rest: VecDeque<Bytes>,
    len: usize,
}

impl Pieces {
    /// The bytes in one buffer (a copy only if they span chunks).
    pub fn to_bytes(&self) -> Bytes {
        self.clone().copy_to_bytes(self.len)
    }

    /// Decodes the message these bytes hold. One chunk (the common case
    /// for small messages) is decoded as plain `Bytes`, the fastest `Buf`.
    pub fn message<M: Message + Default>(self) -> Result<M, prost::DecodeError> {
        if self.rest.is_empty() {
            return M::decode(self.head);
        }
        M::decode(self)
    }

    fn push(&mut self, b: Bytes) {
        if b.is_empty() {
            return;
        }
        self.len += b.len();
        if self.head.is_empty() {
            self.head = b;
        } else {
            self.rest.push_back(b);
        }
    }

    /// The head is used up: the next part takes its place.
    fn next_part(&mut self) {
        self.head = self.rest.pop_front().unwrap_or_default();
    }
}

impl From<Bytes> for Pieces {
    fn from(b: Bytes) -> Self {
        let mut p = Pieces::default();
        p.push(b);
        p
    }
}

impl PartialEq for Pieces {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.to_bytes() == other.to_bytes()
    }
}

impl Eq for Pieces {}

impl Buf for Pieces {
    fn remaining(&self) -> usize {
        self.len
    }

    fn chunk(&self) -> &[u8] {
        &self.head
    }

    fn advance(&mut self, mut n: usize) {
        assert!(n <= self.len, "advance past the end of a message");
        self.len -= n;
        while n > 0 {
            if n < self.head.len() {
                self.head.advance(n);
                return;
            }
            n -= self.head.len();
            self.next_part();
            if self.head.is_empty() {
                return; // nothing left (unreachable: `len` counts every part)
            }
        }
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        if self.head.len() >= len {
            let out = self.head.split_to(len);
            if self.head.is_empty() {
                self.next_part();
            }
            self.len -= len;
            return out;
        }
        let mut out = BytesMut::with_capacity(len);
        out.put((&mut *self).take(len));
        out.freeze()
    }
}

/// What a frame's first byte means.
#[derive(Debug, Clone, Copy)]
enum Kinds {
    /// QUIC: a message or an error.
    Quic,
    /// gRPC: the compression flag, always 0.
    Grpc,
}

/// Splits a byte stream, fed in chunks of any size, into frames. A frame is
/// handed out as the slices of the chunks it arrived in: nothing is copied.
#[derive(Debug)]
pub struct FrameDecoder {
    /// The unread part of the last chunk.
    cur: Bytes,
    /// A header split across chunks.
    head: [u8; HEADER_LEN],
    head_len: usize,
    /// The header of the frame being assembled, and its body so far: as
    /// slices of the chunks, or gathered in one buffer for a large frame.
    want: Option<(u8, usize)>,
    pieces: Pieces,
    gathered: BytesMut,
    max: usize,
    kinds: Kinds,
    /// Set by `poll_messages` once the source has ended or failed.
    ended: bool,
}

impl FrameDecoder {
    /// QUIC's frames; frames over `max` body bytes are errors.
    pub fn new(max: usize) -> Self {
        Self {
            cur: Bytes::new(),
            head: [0; HEADER_LEN],
            head_len: 0,
            want: None,
            pieces: Pieces::default(),
            gathered: BytesMut::new(),
            max,
            kinds: Kinds::Quic,
            ended: false,
        }
    }

    /// gRPC's messages (a body of an HTTP/2 gRPC stream); messages over
    /// `max` bytes are errors, and so are compressed ones.
    pub fn grpc(max: usize) -> Self {
        Self {
            kinds: Kinds::Grpc,
            ..Self::new(max)
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
                    // The whole frame is here: a slice.
                    self.cur.advance(HEADER_LEN);
                    return Ok(Some(frame(kind, self.cur.split_to(len).into())));
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
                    self.check_kind(self.head[0])?;
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
        if len >= GATHER_MIN {
            let take = (len - self.gathered.len()).min(self.cur.len());
            // Grown as the bytes come, never ahead of them: a peer that
            // announces a frame and sends nothing costs nothing.
            self.gathered.extend_from_slice(&self.cur[..take]);
            self.cur.advance(take);
            if self.gathered.len() < len {
                return Ok(None);
            }
            self.want = None;
            let body = std::mem::take(&mut self.gathered).freeze();
            return Ok(Some(frame(kind, body.into())));
        }
        let take = (len - self.pieces.len).min(self.cur.len());
        if take > 0 {
            self.pieces.push(self.cur.split_to(take));
        }
        if self.pieces.len < len {
            return Ok(None);
        }
        self.want = None;
        let mut body = std::mem::take(&mut self.pieces);
        if !body.rest.is_empty() && len < ZERO_COPY_MIN {
            // A small message across chunks: one copy makes it contiguous,
            // which prost reads faster than a chain of slices.
            body = body.to_bytes().into();
        }
        Ok(Some(frame(kind, body)))
    }

    /// The next message of a byte source, for a `Stream`'s `poll_next`:
    /// `next_chunk` polls the source for its next bytes (`None` at its end,
    /// the reason if it fails). After an error or the end, `None` for ever.
    pub fn poll_messages<M: Message + Default>(
        &mut self,
        what: &'static str,
        cx: &mut Context<'_>,
        next_chunk: impl FnMut(&mut Context<'_>) -> Poll<Option<Result<Bytes, String>>>,
    ) -> Poll<Option<Result<M, FrameError>>> {
        self.poll_messages_charged(what, cx, next_chunk, |_, _| Poll::Ready(()))
    }

    /// [`poll_messages`](Self::poll_messages), where `charge` is told the
    /// bytes held for an unfinished frame before each read of more:
    /// `Pending` (its waker registered) holds the reading back until it can
    /// pay for them, so that a peer's unfinished frames cost a budget.
    pub fn poll_messages_charged<M: Message + Default>(
        &mut self,
        what: &'static str,
        cx: &mut Context<'_>,
        mut next_chunk: impl FnMut(&mut Context<'_>) -> Poll<Option<Result<Bytes, String>>>,
        mut charge: impl FnMut(&mut Context<'_>, usize) -> Poll<()>,
    ) -> Poll<Option<Result<M, FrameError>>> {
        loop {
            if self.ended {
                return Poll::Ready(None);
            }
            match self.next_frame() {
                Ok(Some(frame)) => return Poll::Ready(Some(frame.decode(what))),
                Ok(None) => {}
                Err(e) => {
                    self.ended = true;
                    return Poll::Ready(Some(Err(e)));
                }
            }
            if charge(cx, self.buffered()).is_pending() {
                return Poll::Pending;
            }
            match next_chunk(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(chunk))) => self.push(chunk),
                Poll::Ready(None) => {
                    self.ended = true;
                    return Poll::Ready(self.finish().err().map(Err));
                }
                Poll::Ready(Some(Err(reason))) => {
                    self.ended = true;
                    return Poll::Ready(Some(Err(FrameError::Decode {
                        what: "stream",
                        reason,
                    })));
                }
            }
        }
    }

    /// Call when the stream has ended: an error if it ended inside a frame.
    pub fn finish(&self) -> Result<(), FrameError> {
        match self.buffered() {
            0 if self.want.is_none() => Ok(()),
            n => Err(FrameError::Truncated(n)),
        }
    }

    /// Bytes received and not yet handed out as frames.
    pub fn buffered(&self) -> usize {
        self.head_len
            + self.pieces.len
            + self.gathered.len()
            + self.cur.len()
            + if self.want.is_some() { HEADER_LEN } else { 0 }
    }

    /// Parses (and checks) a 5-byte header.
    fn header(&self, bytes: &[u8]) -> Result<(u8, usize), FrameError> {
        let kind = self.check_kind(bytes[0])?;
        let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
        if len > self.max {
            return Err(FrameError::TooLarge { len, max: self.max });
        }
        Ok((kind, len))
    }

    fn check_kind(&self, kind: u8) -> Result<u8, FrameError> {
        match (self.kinds, kind) {
            (_, KIND_MESSAGE) | (Kinds::Quic, KIND_ERROR) => Ok(kind),
            (Kinds::Grpc, 1) => Err(FrameError::Compressed),
            (_, k) => Err(FrameError::UnknownKind(k)),
        }
    }
}

fn frame(kind: u8, body: Pieces) -> Frame {
    if kind == KIND_ERROR {
        Frame::Error(String::from_utf8_lossy(&body.to_bytes()).into_owned())
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
    put_message(message, message.encoded_len(), out)
}

/// Appends `message`, whose encoding is `len` bytes, as one frame.
fn put_message(message: &impl Message, len: usize, out: &mut BytesMut) -> Result<(), FrameError> {
    put_header(KIND_MESSAGE, len, out)?;
    out.reserve(len);
    message.encode_raw(out);
    Ok(())
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

/// Zeros that every probe reply's payload is cut from: one buffer for the
/// whole process, never written, so that it takes no memory of its own.
static ZEROS: [u8; ZEROS_LEN] = [0; ZEROS_LEN];
const ZEROS_LEN: usize = 1 << 20;

/// A `ProbeReply` of `reply_bytes` zero bytes as one frame, in chunks to
/// write in order: exactly prost's encoding of the message, its payload
/// slices of one static buffer. However large the reply, and however slowly
/// the client reads it, the node holds no more than this small iterator and
/// the chunk in the transport's hands.
#[derive(Debug)]
pub struct ProbeReplyChunks {
    /// The frame header, and the payload's key and length.
    head: Option<Bytes>,
    zeros_left: usize,
    /// The node's clock.
    tail: Option<Bytes>,
}

impl ProbeReplyChunks {
    /// The chunks of a reply carrying `reply_bytes` zero bytes and the
    /// node's clock, `unix_time_ns`; fails when the frame would exceed
    /// [`MAX_DATA_FRAME`].
    pub fn new(reply_bytes: usize, unix_time_ns: u64) -> Result<Self, FrameError> {
        let message = crate::ProbeReply {
            payload: Bytes::new(),
            unix_time_ns,
        };
        let payload_field = match reply_bytes {
            0 => 0,
            n => encoding::key_len(1) + encoding::encoded_len_varint(n as u64) + n,
        };
        let len = payload_field + message.encoded_len();
        let mut head = BytesMut::new();
        put_header(KIND_MESSAGE, len, &mut head)?;
        if reply_bytes > 0 {
            encode_key(1, WireType::LengthDelimited, &mut head);
            encode_varint(reply_bytes as u64, &mut head);
        }
        let mut tail = BytesMut::new();
        message.encode_raw(&mut tail);
        Ok(Self {
            head: Some(head.freeze()),
            zeros_left: reply_bytes,
            tail: Some(tail.freeze()).filter(|t| !t.is_empty()),
        })
    }
}

impl Iterator for ProbeReplyChunks {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if let Some(head) = self.head.take() {
            return Some(head);
        }
        if self.zeros_left > 0 {
            let n = self.zeros_left.min(ZEROS_LEN);
            self.zeros_left -= n;
            return Some(Bytes::from_static(&ZEROS[..n]));
        }
        self.tail.take()
    }
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
    /// A writer with nothing queued.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes queued so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `message` as one frame.
    pub fn message(&mut self, message: &impl Message) -> Result<(), FrameError> {
        let len = message.encoded_len();
        self.room(HEADER_LEN + len);
        let before = self.buf.len();
        put_message(message, len, &mut self.buf)?;
        self.len += self.buf.len() - before;
        Ok(())
    }

    /// At least `n` bytes of room in the buffer. It grows by `BUF_CHUNK` at
    /// least: the frames written between two takes share one allocation,
    /// rather than each small frame getting its own.
    fn room(&mut self, n: usize) {
        if self.buf.capacity() - self.buf.len() < n {
            self.buf.reserve(n.max(BUF_CHUNK));
        }
    }

    /// Appends a `ToNode` frame, its payload uncopied when it is large. The
    /// bytes are exactly prost's encoding of the message. Written field by
    /// field, also for small payloads: prost clones a `Bytes` field to copy
    /// it, and cloning a `Bytes` made from a `Vec` allocates.
    pub fn to_node(&mut self, message: &ToNode) -> Result<(), FrameError> {
        let Some(to_node::Kind::Sample(s)) = &message.kind else {
            return self.message(message);
        };
        self.header(message.encoded_len())?;
        // ToNode.sample (field 1), then SampleRequest's fields in order.
        self.put(|b| {
            encode_key(1, WireType::LengthDelimited, b);
            encode_varint(s.encoded_len() as u64, b);
            if s.id != 0 {
                encoding::uint64::encode(1, &s.id, b);
            }
        });
        self.payload(2, &s.payload);
        self.put(|b| {
            if s.codec != 0 {
                encoding::int32::encode(3, &s.codec, b);
            }
            if !s.traceparent.is_empty() {
                encoding::string::encode(4, &s.traceparent, b);
            }
        });
        Ok(())
    }

    /// Appends a `FromNode` frame, large answer payloads uncopied. The bytes
    /// are exactly prost's encoding of the message, written field by field
    /// as in `to_node`.
    pub fn from_node(&mut self, message: &FromNode) -> Result<(), FrameError> {
        self.header(message.encoded_len())?;
        // FromNode's fields in order; each answer's too.
        self.put(|b| {
            for t in &message.first_tokens {
                encoding::message::encode(1, t, b);
            }
        });
        for a in &message.answers {
            self.put(|b| {
                encode_key(2, WireType::LengthDelimited, b);
                encode_varint(a.encoded_len() as u64, b);
                if a.id != 0 {
                    encoding::uint64::encode(1, &a.id, b);
                }
            });
            self.payload(2, &a.payload);
            self.put(|b| {
                if a.codec != 0 {
                    encoding::int32::encode(3, &a.codec, b);
                }
                if a.n_tokens != 0 {
                    encoding::int64::encode(4, &a.n_tokens, b);
                }
                for (tag, ns) in [
                    (10, a.node_queue_ns),
                    (11, a.node_compute_ns),
                    (12, a.node_send_ns),
                ] {
                    if ns != 0 {
                        encoding::uint64::encode(tag, &ns, b);
                    }
                }
            });
        }
        self.put(|b| {
            for e in &message.errors {
                encoding::message::encode(3, e, b);
            }
            if message.heartbeat {
                encoding::bool::encode(4, &message.heartbeat, b);
            }
        });
        Ok(())
    }

    /// A message frame's header, for a body of `len` bytes.
    fn header(&mut self, len: usize) -> Result<(), FrameError> {
        self.room(HEADER_LEN);
        let before = self.buf.len();
        put_header(KIND_MESSAGE, len, &mut self.buf)?;
        self.len += self.buf.len() - before;
        Ok(())
    }

    /// Appends what `write` puts into the buffer (keys, lengths and small
    /// fields: a few dozen bytes, more only for first tokens and errors).
    fn put(&mut self, write: impl FnOnce(&mut BytesMut)) {
        self.room(256);
        let before = self.buf.len();
        write(&mut self.buf);
        self.len += self.buf.len() - before;
    }

    /// A `bytes` field: its key and length copied, its content a chunk of
    /// its own when it is large (an empty one is left out, as prost does).
    fn payload(&mut self, tag: u32, payload: &Bytes) {
        if payload.is_empty() {
            return;
        }
        self.put(|b| {
            encode_key(tag, WireType::LengthDelimited, b);
            encode_varint(payload.len() as u64, b);
        });
        if payload.len() < ZERO_COPY_MIN {
            self.room(payload.len());
            self.put(|b| b.put_slice(payload));
            return;
        }
        self.flush_buf();
        self.chunks.push(payload.clone());
        self.len += payload.len();
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
                // Traced samples carry a trace context after the payload.
                traceparent: if id % 2 == 1 {
                    format!("00-{:032x}-{:016x}-01", id, id)
                } else {
                    String::new()
                },
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
    fn huge_frames_are_gathered_into_one_buffer_as_they_arrive() {
        let answer = FromNode {
            answers: vec![SampleAnswer {
                id: 9,
                payload: Bytes::from((0..GATHER_MIN + 3).map(|i| i as u8).collect::<Vec<u8>>()),
                ..SampleAnswer::default()
            }],
            ..FromNode::default()
        };
        let mut w = FrameWriter::new();
        w.message(&answer).unwrap();
        w.error("end");
        let bytes = written(&mut w);
        let mut d = FrameDecoder::new(MAX_DATA_FRAME);
        // A header announcing it costs nothing until its bytes come.
        d.push(bytes.slice(..HEADER_LEN));
        assert_eq!(d.next_frame(), Ok(None));
        assert!(d.gathered.capacity() < 1 << 20);
        let mut frames = Vec::new();
        for c in bytes[HEADER_LEN..].chunks(1 << 20) {
            d.push(Bytes::copy_from_slice(c));
            while let Some(f) = d.next_frame().unwrap() {
                frames.push(f);
            }
            // Held once: what has come, in one buffer, not also its chunks.
            assert!(d.pieces.len == 0 && d.buffered() <= bytes.len());
        }
        let Frame::Message(body) = &frames[0] else {
            panic!("{frames:?}")
        };
        assert!(body.rest.is_empty(), "one contiguous buffer");
        assert_eq!(
            frames[0].clone().decode::<FromNode>("FromNode").unwrap(),
            answer
        );
        assert_eq!(frames[1], Frame::Error("end".into()));
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
    fn small_frames_encode_as_prost_does_into_one_buffer() {
        let answers = FromNode {
            answers: (0..3)
                .map(|id| SampleAnswer {
                    id,
                    payload: Bytes::from(vec![id as u8; id as usize * 5]),
                    codec: 0,
                    n_tokens: 0,
                    node_queue_ns: id,
                    node_compute_ns: 7,
                    node_send_ns: 0,
                })
                .collect(),
            heartbeat: false,
            ..FromNode::default()
        };
        let samples: Vec<ToNode> = (0..4).map(|id| sample(id, id as usize * 30, 0)).collect();
        let mut w = FrameWriter::new();
        let mut expected = BytesMut::new();
        for m in &samples {
            w.to_node(m).unwrap();
            encode_message(m, &mut expected).unwrap();
        }
        w.from_node(&answers).unwrap();
        encode_message(&answers, &mut expected).unwrap();
        assert_eq!(w.len(), expected.len());
        let chunks = w.take_chunks();
        assert_eq!(chunks.len(), 1, "small frames are written into one buffer");
        assert_eq!(chunks[0], expected.freeze());
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
        assert_eq!(body.chunk().as_ptr(), chunk[HEADER_LEN..].as_ptr());
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
            vec![Frame::Message(Pieces::default())]
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

    #[test]
    fn a_payload_in_one_chunk_is_decoded_without_a_copy() {
        // As the writer's chunks arrive (one HTTP/2 DATA frame each): the
        // message spans three chunks, its payload lies in one.
        let m = sample(5, 100_000, 1);
        let mut w = FrameWriter::new();
        w.to_node(&m).unwrap();
        let chunks: Vec<Bytes> = w.take_chunks().drain(..).collect();
        assert!(chunks.len() >= 3, "{} chunks", chunks.len());
        let mut d = FrameDecoder::grpc(MAX_DATA_FRAME);
        let mut frames = Vec::new();
        for c in &chunks {
            d.push(c.clone());
            while let Some(f) = d.next_frame().unwrap() {
                frames.push(f);
            }
        }
        d.finish().unwrap();
        let [frame] = frames.try_into().unwrap();
        let got = frame.decode::<ToNode>("ToNode").unwrap();
        assert_eq!(got, m);
        let (Some(to_node::Kind::Sample(a)), Some(to_node::Kind::Sample(b))) = (&got.kind, &m.kind)
        else {
            unreachable!()
        };
        assert_eq!(a.payload.as_ptr(), b.payload.as_ptr(), "payload shared");
    }

    #[test]
    fn pieces_read_across_their_chunks() {
        let mut p = Pieces::default();
        for part in [&b"ab"[..], b"", b"cdef", b"g"] {
            p.push(Bytes::copy_from_slice(part));
        }
        assert_eq!(p.remaining(), 7);
        assert_eq!(p.to_bytes(), Bytes::from_static(b"abcdefg"));
        assert_eq!(p.copy_to_bytes(1), Bytes::from_static(b"a"));
        assert_eq!(p.copy_to_bytes(3), Bytes::from_static(b"bcd"));
        p.advance(2);
        assert_eq!(p.chunk(), b"g");
        assert_eq!(p, Pieces::from(Bytes::from_static(b"g")));
        p.advance(1);
        assert_eq!(p.remaining(), 0);
        assert_eq!(p.chunk(), b"");
    }

    #[test]
    fn grpc_messages_must_be_uncompressed() {
        let decode = |bytes: &'static [u8]| {
            let mut d = FrameDecoder::grpc(100);
            d.push(Bytes::from_static(bytes));
            d.next_frame()
        };
        assert_eq!(
            decode(&[0, 0, 0, 0, 1, 7]).unwrap(),
            Some(Frame::Message(Bytes::from_static(&[7]).into()))
        );
        assert_eq!(decode(&[1, 0, 0, 0, 1, 7]), Err(FrameError::Compressed));
        assert_eq!(decode(&[2]), Err(FrameError::UnknownKind(2)));
    }

    #[test]
    fn large_answers_are_not_copied_and_encode_as_prost_does() {
        let big = Bytes::from(vec![7u8; 3 * ZERO_COPY_MIN]);
        let answer = |id: u64, payload: Bytes| SampleAnswer {
            id,
            payload,
            codec: (id % 3) as i32,
            n_tokens: id as i64,
            node_queue_ns: id * 10,
            node_compute_ns: 0,
            node_send_ns: id * 12,
        };
        let m = FromNode {
            first_tokens: vec![crate::FirstToken {
                id: 9,
                payload: Bytes::from_static(b"tok"),
                codec: 0,
            }],
            answers: vec![
                answer(1, big.clone()),
                answer(0, Bytes::from_static(b"small")),
                answer(2, Bytes::new()),
                answer(3, big.clone()),
            ],
            errors: vec![crate::SampleError {
                id: 4,
                message: "no".into(),
            }],
            heartbeat: true,
        };
        let mut w = FrameWriter::new();
        w.from_node(&m).unwrap();
        let queued = w.len();
        let chunks: Vec<Bytes> = w.take_chunks().drain(..).collect();
        assert!(chunks.iter().any(|c| c.as_ptr() == big.as_ptr()), "shared");
        let all: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        let mut expected = BytesMut::new();
        encode_message(&m, &mut expected).unwrap();
        assert_eq!(all, expected.to_vec());
        assert_eq!(all.len(), queued);
    }

    #[test]
    fn probe_replies_encode_as_prost_does_cut_from_one_buffer_of_zeros() {
        for (n, time) in [
            (0, 0),
            (0, 7),
            (5, 0),
            (1000, 123),
            ((3 << 20) + 17, u64::MAX),
        ] {
            let chunks: Vec<Bytes> = ProbeReplyChunks::new(n, time).unwrap().collect();
            let all: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
            let mut expected = BytesMut::new();
            let reply = crate::ProbeReply {
                payload: Bytes::from(vec![0u8; n]),
                unix_time_ns: time,
            };
            encode_message(&reply, &mut expected).unwrap();
            assert_eq!(all, expected.to_vec(), "{n} bytes at {time}");
            // Every payload chunk is a slice of the same static zeros.
            let zeros: Vec<&Bytes> = chunks.iter().filter(|c| c.len() >= 1000).collect();
            assert!(zeros.iter().all(|c| c.as_ptr() == ZEROS.as_ptr()), "{n}");
        }
        let too_large = ProbeReplyChunks::new(MAX_DATA_FRAME, 0).unwrap_err();
        assert!(matches!(too_large, FrameError::TooLarge { .. }));
    }
}
