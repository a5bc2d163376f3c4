//! The outbox: the way back to one Infer stream. The batcher's worker thread
//! (and the reader, for a sample that never reaches the batcher) appends
//! answers, first tokens and errors under the outbox's lock and wakes the
//! stream's writer; the writer takes everything at once. The reader paces
//! itself by the answer bytes waiting here (`Reply::room`). A sample's
//! failure becomes text here, as its `SampleError`'s message. Plain data
//! and locks: no task of its own, no I/O.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use bytes::Bytes;
use proto::{Codec, FirstToken, FromNode, SampleAnswer, SampleError};
use tokio::sync::Notify;

use crate::backend::{Output, SampleFailure};

/// A `FromNode` carrying more payload than this is split, so that a backlog
/// of answers stays under the receiver's default 4 MiB message limit.
pub(super) const MAX_FROM_NODE_PAYLOAD: usize = 1 << 20;
/// Per-item protobuf overhead (tags, id, lengths), for that budget.
pub(super) const ITEM_OVERHEAD: usize = 16;

/// An answer's timings as the worker knows them (see `SampleAnswer`).
#[derive(Clone, Copy, Default)]
pub(super) struct Timing {
    queue_ns: u64,
    compute_ns: u64,
    /// When the output was ready, as `mono_ns`: the writer turns it into
    /// the send duration.
    ready_at: u64,
}

impl Timing {
    /// The timings of a sample received at `received`, whose batch started
    /// at `started` and had its output at `ready`.
    pub(super) fn of(
        received: std::time::Instant,
        started: std::time::Instant,
        ready: std::time::Instant,
    ) -> Self {
        Self {
            queue_ns: nanos(started.saturating_duration_since(received)),
            compute_ns: nanos(ready.saturating_duration_since(started)),
            ready_at: mono_ns(ready),
        }
    }
}

/// Nanoseconds since the node's first batch runner was made: instants kept
/// as plain numbers in the outbox's messages.
pub(super) fn mono_ns(at: std::time::Instant) -> u64 {
    static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();
    nanos(at.saturating_duration_since(*EPOCH.get_or_init(std::time::Instant::now)))
}

pub(super) fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The way back to one Infer stream.
#[derive(Default)]
pub(super) struct Reply {
    outbox: Mutex<Outbox>,
    /// Wakes the stream's writer when the outbox changes.
    pub(super) wake: Notify,
    /// Answer bytes produced and not yet handed to the transport.
    waiting: AtomicUsize,
    /// Wakes the reader when `waiting` shrinks or the writer has ended.
    pub(super) drained: Notify,
    /// The writer has ended: nobody will take answers any more.
    pub(super) writer_gone: AtomicBool,
    /// The test mode of the session the stream's samples belong to.
    pub(super) mode: crate::backend::RunMode,
}

impl Reply {
    /// The way back to a stream whose samples belong to a session of `mode`.
    pub(super) fn of_session(mode: crate::backend::RunMode) -> Self {
        Self {
            mode,
            ..Self::default()
        }
    }
}

/// What one stream's writer has to send, and what it still waits for.
#[derive(Default)]
pub(super) struct Outbox {
    first_tokens: Vec<FirstToken>,
    pub(super) answers: Vec<SampleAnswer>,
    errors: Vec<SampleError>,
    /// Payload bytes of the above, to split a large backlog.
    pub(super) bytes: usize,
    /// Samples handed to the batcher and not answered yet.
    pub(super) pending: usize,
    /// Bytes of the latest answer: what each pending sample is expected to
    /// add (0 until the first answer).
    pub(super) last_answer: usize,
    /// The reader has stopped: no more samples will come.
    pub(super) input_done: bool,
    /// Why the input ended, if not cleanly: the stream then ends with this
    /// error once the samples already received are answered.
    pub(super) input_error: Option<String>,
    /// Traced samples among the answers (see `otlp.rs`).
    pub(super) traced: Vec<crate::otlp::Traced>,
}

impl Reply {
    pub(super) fn lock(&self) -> MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts bytes put in the outbox (call with its lock's result).
    pub(super) fn produced(&self, bytes: usize) {
        self.waiting.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts bytes handed to the transport and wakes the reader.
    pub(super) fn sent(&self, bytes: usize) {
        self.waiting.fetch_sub(bytes, Ordering::Relaxed);
        self.drained.notify_one();
    }

    /// Waits until the answers waiting for the stream's reader, with those
    /// the samples already taken will add (at the size of the latest
    /// answer), fit in `limit` bytes; then says how many more samples may
    /// be taken now (at least one). Before the first answer its size is
    /// unknown: `unknown` samples may be in flight. `None` once the writer
    /// has ended.
    pub(super) async fn room(&self, limit: usize, unknown: usize) -> Option<usize> {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.writer_gone.load(Ordering::Acquire) {
                return None;
            }
            let waiting = self.waiting.load(Ordering::Relaxed);
            let (pending, each) = {
                let outbox = self.lock();
                (outbox.pending, outbox.last_answer)
            };
            let more = match each {
                0 => unknown.saturating_sub(pending),
                each => {
                    let expected = waiting.saturating_add(pending.saturating_mul(each));
                    limit.saturating_sub(expected) / each
                }
            };
            // One sample at a time always goes, so that an answer larger
            // than the limit still runs, alone.
            if waiting <= limit && (more > 0 || pending == 0) {
                return Some(more.max(1));
            }
            drained.await;
        }
    }

    /// For samples that never reach the batcher.
    pub(super) fn send_error(&self, id: u64, failure: SampleFailure) {
        let added = self.lock().push_error(id, failure);
        self.produced(added);
        self.wake.notify_one();
    }
}

impl Outbox {
    /// Returns the bytes added, as all `push_*` do.
    pub(super) fn push_output(&mut self, id: u64, output: Output, timing: Timing) -> usize {
        match output {
            Ok(answer) => {
                let added = answer.payload.len() + ITEM_OVERHEAD;
                self.bytes += added;
                self.last_answer = added;
                self.answers.push(SampleAnswer {
                    id,
                    payload: answer.payload,
                    // The writer compresses it, outside the outbox's lock.
                    codec: Codec::None as i32,
                    n_tokens: answer.n_tokens,
                    node_queue_ns: timing.queue_ns,
                    node_compute_ns: timing.compute_ns,
                    // Until the writer sends it: when it was ready.
                    node_send_ns: timing.ready_at,
                });
                added
            }
            Err(failure) => self.push_error(id, failure),
        }
    }

    /// The failure becomes the text of the sample's `SampleError` here.
    fn push_error(&mut self, id: u64, failure: SampleFailure) -> usize {
        let message = failure.to_string();
        let added = message.len() + ITEM_OVERHEAD;
        self.bytes += added;
        self.errors.push(SampleError { id, message });
        added
    }

    pub(super) fn push_first_token(&mut self, id: u64, payload: Bytes) -> usize {
        let added = payload.len() + ITEM_OVERHEAD;
        self.bytes += added;
        self.first_tokens.push(FirstToken {
            id,
            payload,
            codec: Codec::None as i32,
        });
        added
    }

    /// Moves everything waiting into messages: one, unless it is too big.
    pub(super) fn take_into(&mut self, messages: &mut VecDeque<FromNode>) {
        if self.first_tokens.is_empty() && self.answers.is_empty() && self.errors.is_empty() {
            return;
        }
        // The next round likely needs as much room as this one.
        let first_tokens = take_vec(&mut self.first_tokens);
        let answers = take_vec(&mut self.answers);
        let errors = take_vec(&mut self.errors);
        if std::mem::take(&mut self.bytes) <= MAX_FROM_NODE_PAYLOAD {
            messages.push_back(FromNode {
                first_tokens,
                answers,
                errors,
                heartbeat: false,
            });
            return;
        }
        // First tokens go out before answers, so no sample's answer overtakes
        // its first token.
        for part in split(first_tokens, |t| t.payload.len()) {
            messages.push_back(FromNode {
                first_tokens: part,
                ..FromNode::default()
            });
        }
        for part in split(answers, |a| a.payload.len()) {
            messages.push_back(FromNode {
                answers: part,
                ..FromNode::default()
            });
        }
        for part in split(errors, |e| e.message.len()) {
            messages.push_back(FromNode {
                errors: part,
                ..FromNode::default()
            });
        }
    }
}

fn take_vec<T>(v: &mut Vec<T>) -> Vec<T> {
    let len = v.len();
    std::mem::replace(v, Vec::with_capacity(len))
}

/// Splits `items` into parts of at most `MAX_FROM_NODE_PAYLOAD` bytes (or
/// one item, if a single item is bigger).
fn split<T>(items: Vec<T>, size: impl Fn(&T) -> usize) -> Vec<Vec<T>> {
    let mut parts = Vec::new();
    let mut part = Vec::new();
    let mut bytes = 0;
    for item in items {
        let s = size(&item) + ITEM_OVERHEAD;
        if !part.is_empty() && bytes + s > MAX_FROM_NODE_PAYLOAD {
            parts.push(std::mem::take(&mut part));
            bytes = 0;
        }
        bytes += s;
        part.push(item);
    }
    if !part.is_empty() {
        parts.push(part);
    }
    parts
}

/// The bytes a message's items were counted with when they were produced.
pub(super) fn payload_bytes(m: &FromNode) -> usize {
    let t: usize = m.first_tokens.iter().map(|t| t.payload.len()).sum();
    let a: usize = m.answers.iter().map(|a| a.payload.len()).sum();
    let e: usize = m.errors.iter().map(|e| e.message.len()).sum();
    t + a + e + ITEM_OVERHEAD * (m.first_tokens.len() + m.answers.len() + m.errors.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(id: u64, len: usize) -> Output {
        Ok(crate::backend::Answer {
            payload: Bytes::from(vec![id as u8; len]),
            n_tokens: 0,
        })
    }

    #[test]
    fn ready_answers_leave_in_one_message() {
        let mut outbox = Outbox::default();
        let mut messages = VecDeque::new();
        outbox.take_into(&mut messages);
        assert!(messages.is_empty(), "nothing to send, no message");

        outbox.push_first_token(9, Bytes::from_static(b"tok"));
        for id in 0..100 {
            outbox.push_output(id, answer(id, 8), Timing::default());
        }
        outbox.push_output(
            100,
            Err(SampleFailure::Backend("bad input".into())),
            Timing::default(),
        );
        outbox.take_into(&mut messages);
        assert_eq!(messages.len(), 1);
        let m = &messages[0];
        assert_eq!(
            (m.first_tokens.len(), m.answers.len(), m.errors.len()),
            (1, 100, 1)
        );
        assert!(!m.heartbeat);
        assert_eq!(m.errors[0].id, 100);
        assert_eq!(outbox.bytes, 0);
    }

    #[test]
    fn a_large_backlog_is_split_with_first_tokens_ahead_of_answers() {
        let mut outbox = Outbox::default();
        let size = 300 << 10;
        for id in 0..10 {
            outbox.push_first_token(id, Bytes::from_static(b"tok"));
            outbox.push_output(id, answer(id, size), Timing::default());
        }
        let mut messages = VecDeque::new();
        outbox.take_into(&mut messages);
        assert!(messages.len() > 1);
        let ids: Vec<u64> = messages
            .iter()
            .flat_map(|m| m.answers.iter().map(|a| a.id))
            .collect();
        assert_eq!(ids, (0..10).collect::<Vec<_>>());
        let first = messages.iter().position(|m| !m.answers.is_empty()).unwrap();
        let tokens: usize = messages
            .iter()
            .take(first)
            .map(|m| m.first_tokens.len())
            .sum();
        assert_eq!(tokens, 10);
        for m in &messages {
            let bytes: usize = m.answers.iter().map(|a| a.payload.len()).sum();
            assert!(bytes <= MAX_FROM_NODE_PAYLOAD, "{bytes}");
        }
        // A single answer over the budget still goes, alone.
        let mut outbox = Outbox::default();
        outbox.push_output(1, answer(1, 2 * MAX_FROM_NODE_PAYLOAD), Timing::default());
        outbox.take_into(&mut messages);
        assert_eq!(messages.back().map(|m| m.answers.len()), Some(1));
    }

    fn room_now(reply: &Reply, limit: usize, unknown: usize) -> Option<Option<usize>> {
        use std::future::Future;
        let room = std::pin::pin!(reply.room(limit, unknown));
        match room.poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
            std::task::Poll::Ready(r) => Some(r),
            std::task::Poll::Pending => None,
        }
    }

    #[test]
    fn samples_are_taken_only_while_their_answers_would_fit() {
        let reply = Reply::default();
        // Answer size unknown: one batch's worth in flight.
        assert_eq!(room_now(&reply, 10_000, 4), Some(Some(4)));
        reply.lock().pending = 4;
        assert_eq!(room_now(&reply, 10_000, 4), None);

        // Known: 1000 bytes each; 2000 waiting and 3 pending leave room
        // for 5 more.
        {
            let mut o = reply.lock();
            o.pending = 3;
            o.last_answer = 1000;
        }
        reply.produced(2000);
        assert_eq!(room_now(&reply, 10_000, 4), Some(Some(5)));
        reply.lock().pending = 8;
        assert_eq!(room_now(&reply, 10_000, 4), None, "10,000 expected");
        reply.sent(2000);
        assert_eq!(room_now(&reply, 10_000, 4), Some(Some(2)));

        // An answer larger than the limit: one sample at a time.
        {
            let mut o = reply.lock();
            o.pending = 0;
            o.last_answer = 50_000;
        }
        assert_eq!(room_now(&reply, 10_000, 4), Some(Some(1)));
        reply.lock().pending = 1;
        assert_eq!(room_now(&reply, 10_000, 4), None);

        reply.writer_gone.store(true, Ordering::Release);
        assert_eq!(room_now(&reply, 10_000, 4), Some(None));
    }
}
