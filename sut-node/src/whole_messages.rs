//! A gRPC request body that hands on each message's bytes only once all of
//! them have arrived.
//!
//! tonic reserves a message's declared length as soon as its 5-byte header
//! is read. A client could declare the node's largest message on every
//! stream and send nothing more, making the node reserve memory it never
//! fills. Behind this wrapper the node holds only bytes a client has really
//! sent; tonic sees a header when its message is complete, so its
//! reservation is filled at once. Messages over the limit pass straight on,
//! for tonic to refuse at their header.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};

/// gRPC's message header: a compression flag and a big-endian length.
const HEADER_LEN: usize = 5;

/// Where the scan of the stream stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// In a header, `got` bytes of it seen.
    Header { got: usize, len: [u8; 4] },
    /// In a message's body, `left` bytes to go.
    Body { left: usize },
    /// A message over the limit was announced: everything passes on.
    PassThrough,
}

/// Splits a byte stream into what may go on (up to the end of the last
/// complete message) and what must wait. No I/O: see [`WholeMessages`].
#[derive(Debug)]
pub(crate) struct MessageGate {
    max: usize,
    scan: Scan,
    /// Bytes of the incomplete message at the end of what was pushed.
    held: VecDeque<Bytes>,
}

impl MessageGate {
    /// Messages over `max` bytes are let through at their header.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max,
            scan: Scan::Header {
                got: 0,
                len: [0; 4],
            },
            held: VecDeque::new(),
        }
    }

    /// Takes the next bytes of the stream; appends to `out` what may go on.
    pub(crate) fn push(&mut self, mut chunk: Bytes, out: &mut VecDeque<Bytes>) {
        // Offset in `chunk` just past the last message completed in it.
        let mut complete_at = None;
        let mut at = 0;
        while at < chunk.len() {
            match &mut self.scan {
                Scan::PassThrough => {
                    complete_at = Some(chunk.len());
                    break;
                }
                Scan::Header { got, len } => {
                    let take = (HEADER_LEN - *got).min(chunk.len() - at);
                    for (i, byte) in chunk[at..at + take].iter().enumerate() {
                        // The flag byte is tonic's to check.
                        if *got + i >= 1 {
                            len[*got + i - 1] = *byte;
                        }
                    }
                    *got += take;
                    at += take;
                    if *got == HEADER_LEN {
                        let body = u32::from_be_bytes(*len) as usize;
                        if body > self.max {
                            self.scan = Scan::PassThrough;
                            complete_at = Some(chunk.len());
                            break;
                        }
                        self.scan = Scan::Body { left: body };
                        if body == 0 {
                            complete_at = Some(at);
                            self.scan = Scan::Header {
                                got: 0,
                                len: [0; 4],
                            };
                        }
                    }
                }
                Scan::Body { left } => {
                    let take = (*left).min(chunk.len() - at);
                    *left -= take;
                    at += take;
                    if *left == 0 {
                        complete_at = Some(at);
                        self.scan = Scan::Header {
                            got: 0,
                            len: [0; 4],
                        };
                    }
                }
            }
        }
        match complete_at {
            Some(end) => {
                out.extend(self.held.drain(..));
                let ready = chunk.split_to(end);
                if !ready.is_empty() {
                    out.push_back(ready);
                }
                if !chunk.is_empty() {
                    self.held.push_back(chunk);
                }
            }
            None if !chunk.is_empty() => self.held.push_back(chunk),
            None => {}
        }
    }

    /// The stream has ended: what was held goes on (tonic reports a
    /// truncated message).
    pub(crate) fn finish(&mut self, out: &mut VecDeque<Bytes>) {
        out.extend(self.held.drain(..));
    }

    /// Bytes held back.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.held.iter().map(Bytes::len).sum()
    }
}

/// `inner` with each message passed on only when complete.
pub(crate) struct WholeMessages<B> {
    inner: B,
    gate: MessageGate,
    ready: VecDeque<Bytes>,
    /// The frame that ended the data (trailers), or the end, once seen.
    ended: bool,
    trailers: Option<Frame<Bytes>>,
}

impl<B> WholeMessages<B> {
    pub(crate) fn new(inner: B, max_message: usize) -> Self {
        Self {
            inner,
            gate: MessageGate::new(max_message),
            ready: VecDeque::new(),
            ended: false,
            trailers: None,
        }
    }
}

impl<B> Body for WholeMessages<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        loop {
            if let Some(data) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(data))));
            }
            if this.ended {
                return Poll::Ready(this.trailers.take().map(Ok));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(mut data) => {
                        let bytes = data.copy_to_bytes(data.remaining());
                        this.gate.push(bytes, &mut this.ready);
                    }
                    Err(other) => {
                        this.gate.finish(&mut this.ready);
                        this.ended = true;
                        this.trailers = Some(other);
                    }
                },
                Poll::Ready(None) => {
                    this.gate.finish(&mut this.ready);
                    this.ended = true;
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.ready.is_empty() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(len: usize, fill: u8) -> Vec<u8> {
        let mut m = vec![0u8];
        m.extend_from_slice(&(len as u32).to_be_bytes());
        m.extend(std::iter::repeat_n(fill, len));
        m
    }

    /// Feeds `stream` in pieces of `piece` bytes; returns what went on after
    /// each push.
    fn feed(gate: &mut MessageGate, stream: &[u8], piece: usize) -> Vec<Vec<u8>> {
        stream
            .chunks(piece)
            .map(|c| {
                let mut out = VecDeque::new();
                gate.push(Bytes::copy_from_slice(c), &mut out);
                out.iter().flat_map(|b| b.iter().copied()).collect()
            })
            .collect()
    }

    #[test]
    fn complete_messages_pass_in_the_same_push() {
        let mut stream = message(3, 1);
        stream.extend(message(0, 0));
        stream.extend(message(10, 2));
        let mut gate = MessageGate::new(100);
        let out = feed(&mut gate, &stream, stream.len());
        assert_eq!(out, vec![stream]);
        assert_eq!(gate.held(), 0);
    }

    #[test]
    fn a_message_waits_until_its_last_byte_whatever_the_pieces() {
        let first = message(20, 1);
        let second = message(7, 2);
        let stream: Vec<u8> = first.iter().chain(&second).copied().collect();
        for piece in 1..=stream.len() {
            let mut gate = MessageGate::new(100);
            let outs = feed(&mut gate, &stream, piece);
            let mut passed = 0;
            for (i, out) in outs.iter().enumerate() {
                passed += out.len();
                let seen = ((i + 1) * piece).min(stream.len());
                // What passed is exactly the messages complete so far.
                let whole = match seen {
                    s if s >= stream.len() => stream.len(),
                    s if s >= first.len() => first.len(),
                    _ => 0,
                };
                assert_eq!(passed, whole, "piece {piece}, push {i}");
            }
            let all: Vec<u8> = outs.concat();
            assert_eq!(all, stream, "piece {piece}: bytes in order");
        }
    }

    #[test]
    fn a_declared_length_alone_holds_only_the_header() {
        let mut gate = MessageGate::new(1 << 30);
        let header = &message(1 << 29, 0)[..HEADER_LEN];
        let out = feed(&mut gate, header, HEADER_LEN);
        assert!(out[0].is_empty());
        assert_eq!(gate.held(), HEADER_LEN);
        let mut rest = VecDeque::new();
        gate.finish(&mut rest);
        assert_eq!(rest.len(), 1, "the end hands on what was held");
    }

    #[test]
    fn a_message_over_the_limit_passes_on_at_its_header() {
        let mut gate = MessageGate::new(16);
        let mut stream = message(4, 1);
        stream.extend_from_slice(&message(17, 2)[..8]);
        let out = feed(&mut gate, &stream, stream.len());
        assert_eq!(out, vec![stream]);
        // And everything after it.
        let out = feed(&mut gate, &[9, 9], 2);
        assert_eq!(out, vec![vec![9, 9]]);
    }
}
