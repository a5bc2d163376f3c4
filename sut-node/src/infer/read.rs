//! Reading: one task per Infer stream takes its `ToNode` messages (already
//! framed by the transport), charges each sample's input to the budgets,
//! has compressed inputs decoded (`decode`) and hands the batcher every
//! sample already received as one chunk. It reads only while the answers
//! it has asked for would fit the stream's outbox, and while the budgets
//! have room: otherwise the client waits in the transport's flow control.
//!
//! Runs in the stream's reader task; touches the stream's outbox (its
//! counts, and errors of samples that never reach the batcher), the
//! budgets, the decode pool and the batcher's queue.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use proto::{to_node, Codec, ToNode};
use tokio_stream::{Stream, StreamExt};
use tracing::warn;

use super::batch::Job;
use super::budget::{shrink, try_budget, wait_budget, Connection, Permits};
use super::data_path::DataPath;
use super::decode::{Decoded, Decodes, Input};
use super::outbox::Reply;
use crate::codec;
use crate::metrics::{Received, NODE as METRICS};
use crate::stop::stopped;

/// Most samples the reader hands the batcher at once.
const MAX_CHUNK: usize = 256;
/// Samples a stream may have in flight before its first answer shows how
/// large answers are (see `Reply::room`).
const UNKNOWN_ANSWERS_IN_FLIGHT: usize = 16;

/// Reads samples off the stream and hands them to the batcher, a chunk of
/// everything already received at a time.
pub(super) async fn read_samples<S, E>(
    mut input: S,
    reply: Arc<Reply>,
    connection: Arc<Connection>,
    node: Arc<DataPath>,
) where
    S: Stream<Item = Result<ToNode, E>> + Unpin,
    E: std::fmt::Display,
{
    let mut stop = node.stop.clone();
    let max_input = node.config.codecs.max_input_bytes;
    let mut chunk: Vec<Job> = Vec::new();
    let mut decodes = Decodes::new(node.decoding_turns);
    let mut tally = Received::default();
    let mut warned_empty = false;
    let mut input_error = None;
    let waiting_limit = node.config.limits.max_waiting_answer_bytes;
    // Until the first answer shows their size: a full batch, and at least a
    // few samples, so that the node can start at its pace.
    let unknown = node
        .config
        .batch
        .max_batch_size
        .max(UNKNOWN_ANSWERS_IN_FLIGHT);
    'read: loop {
        // A reader that does not take its answers gets no more samples
        // taken from it: its input waits in the transport's flow control.
        // Nor does one whose samples' answers would not fit.
        let room = tokio::select! {
            biased;
            _ = stopped(&mut stop) => break,
            r = reply.room(waiting_limit, unknown) => r,
        };
        let Some(room) = room else {
            break;
        };
        let mut next = tokio::select! {
            biased;
            _ = stopped(&mut stop) => break,
            m = input.next() => m.transpose(),
        };
        let mut ended = false;
        // The samples taken together in this turn were received together:
        // one clock read for them, read again only after a wait.
        let mut received = std::time::Instant::now();
        // A raw input with no decode ahead of it, to be placed now.
        let mut ready: Option<(Taken, Decoded)> = None;
        loop {
            match next {
                Ok(Some(ToNode {
                    kind: Some(to_node::Kind::Sample(sample)),
                })) => {
                    tally.sample(sample.codec, sample.payload.len());
                    let (codec, payload) = (sample.codec, sample.payload);
                    // Charged before decoding, at the most its decode may
                    // hold: inputs being decoded count against the budgets.
                    let bound = codec::input_bound(codec, &payload, max_input);
                    let mine = connection.budget.units(bound);
                    let all = node.decoded.units(bound);
                    let budget = match try_budget(&connection, &node.decoded, mine, all) {
                        Some(b) => b,
                        None => {
                            // What this stream holds goes to the batcher
                            // first, so that it waits only on samples that
                            // will run and give their share back.
                            while let Some(d) = decodes.next(true).await {
                                place(d, &mut tally, &mut chunk, &reply, &connection, &node);
                            }
                            if !submit(&mut chunk, &reply, &connection, &node, &mut stop).await {
                                break 'read;
                            }
                            let wait = wait_budget(&connection, &node.decoded, mine, all);
                            let budget = tokio::select! {
                                biased;
                                _ = stopped(&mut stop) => break 'read,
                                b = wait => b,
                            };
                            let Some(budget) = budget else {
                                break 'read;
                            };
                            received = std::time::Instant::now();
                            budget
                        }
                    };
                    let input = if codec == Codec::None as i32 {
                        Input::Ready(codec::decode_input(codec, payload, max_input))
                    } else {
                        received = std::time::Instant::now();
                        Input::Compressed(move || codec::decode_input(codec, payload, max_input))
                    };
                    let taken = Taken {
                        id: sample.id,
                        traceparent: sample.traceparent,
                        received,
                        budget,
                    };
                    match input {
                        // Nothing decoding ahead of it: placed at once.
                        Input::Ready(input) if decodes.len() == 0 => {
                            ready = Some((taken, input.map_err(Into::into)))
                        }
                        input => {
                            let turn = (&node.decoding, connection.id, bound);
                            decodes.start(taken, turn, input).await
                        }
                    }
                }
                Ok(Some(ToNode { kind: None })) => {
                    // Likely a newer client's message kind: skip it.
                    if !std::mem::replace(&mut warned_empty, true) {
                        warn!("ignoring ToNode messages of an unknown kind");
                    }
                }
                Ok(None) => ended = true,
                Err(e) => {
                    warn!("infer stream input ended by an error: {e}");
                    input_error = Some(e.to_string());
                    ended = true;
                }
            }
            let more = !ended && chunk.len() + decodes.len() < MAX_CHUNK.min(room);
            let following = if more {
                ready_now(&mut input).await
            } else {
                None
            };
            // What is decoded goes on, in order; at the end of the turn, all.
            let all = following.is_none();
            loop {
                let decoded = match ready.take() {
                    Some(d) => d,
                    None => match decodes.next(all).await {
                        Some(d) => d,
                        None => break,
                    },
                };
                place(decoded, &mut tally, &mut chunk, &reply, &connection, &node);
            }
            match following {
                Some(m) => next = m,
                None => break,
            }
        }

        METRICS.add_received(&mut tally);
        if !submit(&mut chunk, &reply, &connection, &node, &mut stop).await {
            break 'read;
        }
        if ended {
            break;
        }
    }
    {
        let mut outbox = reply.lock();
        outbox.input_done = true;
        outbox.input_error = input_error;
    }
    reply.wake.notify_one();
}

/// A sample taken from the stream: its id, trace context, when it was
/// received, and the share of the budgets it was charged on arrival.
struct Taken {
    id: u64,
    traceparent: String,
    received: std::time::Instant,
    budget: Permits,
}

/// A decoded sample into `chunk`, where it keeps its share of the budgets
/// until it has run, cut down to its real size. A sample that could not be
/// decoded is answered with the error, and gives its share back.
fn place(
    (taken, decoded): (Taken, Decoded),
    tally: &mut Received,
    chunk: &mut Vec<Job>,
    reply: &Arc<Reply>,
    connection: &Connection,
    node: &DataPath,
) {
    let Taken {
        id,
        traceparent,
        received,
        budget: (mut own, mut shared),
    } = taken;
    let input = match decoded {
        Ok(input) => input,
        Err(failure) => {
            tally.rejected += 1;
            reply.send_error(id, failure);
            return;
        }
    };
    shrink(&mut own, connection.budget.units(input.len()));
    shared.shrink(node.decoded.units(input.len()));
    chunk.push(Job {
        id,
        input,
        reply: Arc::clone(reply),
        budget: Some((own, shared)),
        received,
        trace: crate::otlp::received(&traceparent, received),
    });
}

/// Hands `chunk` to the batcher; false when the node stops first (what did
/// not get queued will not be answered).
async fn submit(
    chunk: &mut Vec<Job>,
    reply: &Reply,
    connection: &Connection,
    node: &DataPath,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> bool {
    if chunk.is_empty() {
        return true;
    }
    let n = chunk.len();
    reply.lock().pending += n;
    node.outstanding.fetch_add(n as u64, Ordering::Relaxed);
    tokio::select! {
        _ = node.batcher.submit(connection.id, chunk) => {}
        _ = stopped(stop) => {}
    }
    let left = chunk.len();
    if left > 0 {
        chunk.clear();
        reply.lock().pending -= left;
        node.outstanding.fetch_sub(left as u64, Ordering::Relaxed);
        return false;
    }
    true
}

/// The stream's next message if it is already here, without waiting.
async fn ready_now<S, E>(input: &mut S) -> Option<Result<Option<ToNode>, E>>
where
    S: Stream<Item = Result<ToNode, E>> + Unpin,
{
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut *input).poll_next(cx) {
            std::task::Poll::Ready(m) => Some(m.transpose()),
            std::task::Poll::Pending => None,
        })
    })
    .await
}
