//! The data path of an `Infer` stream (one per connection):
//!
//! ```text
//!  gRPC stream ──▶ reader task ──chunks──▶ batcher queue ──▶ worker thread
//!                  (decodes inputs)                           (runs the backend)
//!                                                                  │
//!  gRPC stream ◀── writer task ◀── this stream's outbox ◀──────────┘
//!                  (one FromNode for everything ready, or a heartbeat;
//!                   compresses answers with the output codec)
//! ```
//!
//! The reader hands the batcher every sample already received as one chunk;
//! the worker appends a batch's answers to each stream's outbox under one
//! lock and wakes its writer; the writer takes everything in the outbox at
//! once, so under load one `FromNode` carries many answers.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use bytes::Bytes;
use proto::{to_node, Codec, FirstToken, FromNode, SampleAnswer, SampleError, ToNode};
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::Status;
use tracing::{error, info, warn};

use crate::backend::{Backend, BatchInfo, Output, SampleSink};
use crate::batcher::{Batcher, Turn};
use crate::budget::{Budget, Connection, Connections};
use crate::codec;
use crate::decode_pool::DecodePool;
use crate::metrics::{Batches, Received, NODE as METRICS};
use crate::node_config::NodeConfig;
use crate::stop::stopped;

/// A `FromNode` carrying more payload than this is split, so that a backlog
/// of answers stays under the receiver's default 4 MiB message limit.
const MAX_FROM_NODE_PAYLOAD: usize = 1 << 20;
/// Per-item protobuf overhead (tags, id, lengths), for that budget.
const ITEM_OVERHEAD: usize = 16;
/// Most samples the reader hands the batcher at once.
const MAX_CHUNK: usize = 256;
/// Samples a stream may have in flight before its first answer shows how
/// large answers are (see `Reply::room`).
const UNKNOWN_ANSWERS_IN_FLIGHT: usize = 16;

/// What the node's Infer streams share: the settings, the batcher and the
/// budgets.
pub(crate) struct DataPath {
    pub(crate) config: NodeConfig,
    /// Samples received and not yet answered, all streams together.
    pub(crate) outstanding: Arc<AtomicU64>,
    pub(crate) batcher: Batcher<Job>,
    /// Becomes true when the node shuts down.
    pub(crate) stop: tokio::sync::watch::Receiver<bool>,
    /// The decoded-bytes budget of the samples received and not yet run,
    /// those being decoded included (`Limits::max_decoded_bytes`).
    pub(crate) decoded: Budget,
    /// Each connection's share of it (`Limits::max_decoded_bytes_per_connection`).
    pub(crate) connections: Connections,
    /// Turns to decode compressed inputs, one per core, shared fairly by
    /// the connections; one stream may use them all.
    decoding: Arc<DecodePool>,
    decoding_turns: usize,
}

impl DataPath {
    /// Starts the batcher's worker, which runs `backend`.
    pub(crate) fn start(
        config: NodeConfig,
        backend: Arc<dyn Backend>,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> std::io::Result<Self> {
        let outstanding = Arc::new(AtomicU64::new(0));
        // Enough to keep full batches coming, small enough to push back on a
        // client that sends faster than the backend answers.
        let capacity = (4 * config.batch.max_batch_size).max(1024);
        let batcher = Batcher::start(
            config.batch,
            capacity,
            batch_runner(backend, Arc::clone(&outstanding)),
        )?;
        let limits = config.limits;
        let decoding_turns = std::thread::available_parallelism().map_or(2, |n| n.get());
        Ok(Self {
            config,
            outstanding,
            batcher,
            stop,
            decoded: Budget::new(limits.max_decoded_bytes),
            connections: Connections::new(limits.max_decoded_bytes_per_connection),
            decoding: Arc::new(DecodePool::new(decoding_turns)),
            decoding_turns,
        })
    }
}

/// Starts the reader and writer of a new stream, whatever its transport:
/// `input` yields the stream's `ToNode` messages (an error ends the input,
/// as the end of the stream does). Returns its answers.
pub(crate) fn open<S, E>(
    stream: u64,
    input: S,
    connection: Arc<Connection>,
    node: Arc<DataPath>,
) -> ReceiverStream<Result<FromNode, Status>>
where
    S: Stream<Item = Result<ToNode, E>> + Unpin + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let reply = Arc::new(Reply::default());
    // Capacity 1: while the gRPC layer is busy sending, answers pile up in
    // the outbox and leave together in the next FromNode.
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(read_samples(
        input,
        Arc::clone(&reply),
        connection,
        Arc::clone(&node),
    ));
    tokio::spawn(write_answers(stream, reply, tx, node));
    ReceiverStream::new(rx)
}

/// A sample on its way through the batcher.
pub(crate) struct Job {
    id: u64,
    input: Bytes,
    reply: Arc<Reply>,
    /// Its share of the node's and its connection's decoded-bytes budgets,
    /// given back once it has run (with the rest of its group of batches).
    budget: Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)>,
    /// When the reader had its message: the start of the node's time.
    received: std::time::Instant,
    /// The trace it continues, when the LoadGen node traces it.
    trace: Option<Box<crate::otlp::SampleTrace>>,
}

/// A sample costs the worker about its input's bytes (those of the
/// synthetic backend, the copies and pre-processing of real ones).
impl crate::batcher::Weighed for Job {
    fn weight(&self) -> u64 {
        self.input.len() as u64
    }
}

/// An answer's timings as the worker knows them (see `SampleAnswer`).
#[derive(Clone, Copy, Default)]
struct Timing {
    queue_ns: u64,
    compute_ns: u64,
    /// When the output was ready, as `mono_ns`: the writer turns it into
    /// the send duration.
    ready_at: u64,
}

impl Timing {
    fn of(job: &Job, started: std::time::Instant, ready: std::time::Instant) -> Self {
        Self {
            queue_ns: nanos(started.saturating_duration_since(job.received)),
            compute_ns: nanos(ready.saturating_duration_since(started)),
            ready_at: mono_ns(ready),
        }
    }
}

/// Nanoseconds since the node's first batch runner was made: instants kept
/// as plain numbers in the outbox's messages.
fn mono_ns(at: std::time::Instant) -> u64 {
    static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();
    nanos(at.saturating_duration_since(*EPOCH.get_or_init(std::time::Instant::now)))
}

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The way back to one Infer stream.
#[derive(Default)]
struct Reply {
    outbox: Mutex<Outbox>,
    /// Wakes the stream's writer when the outbox changes.
    wake: Notify,
    /// Answer bytes produced and not yet handed to the transport.
    waiting: AtomicUsize,
    /// Wakes the reader when `waiting` shrinks or the writer has ended.
    drained: Notify,
    /// The writer has ended: nobody will take answers any more.
    writer_gone: AtomicBool,
}

/// What one stream's writer has to send, and what it still waits for.
#[derive(Default)]
struct Outbox {
    first_tokens: Vec<FirstToken>,
    answers: Vec<SampleAnswer>,
    errors: Vec<SampleError>,
    /// Payload bytes of the above, to split a large backlog.
    bytes: usize,
    /// Samples handed to the batcher and not answered yet.
    pending: usize,
    /// Bytes of the latest answer: what each pending sample is expected to
    /// add (0 until the first answer).
    last_answer: usize,
    /// The reader has stopped: no more samples will come.
    input_done: bool,
    /// Why the input ended, if not cleanly: the stream then ends with this
    /// error once the samples already received are answered.
    input_error: Option<String>,
    /// Traced samples among the answers (see `otlp.rs`).
    traced: Vec<crate::otlp::Traced>,
}

impl Reply {
    fn lock(&self) -> MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts bytes put in the outbox (call with its lock's result).
    fn produced(&self, bytes: usize) {
        self.waiting.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts bytes handed to the transport and wakes the reader.
    fn sent(&self, bytes: usize) {
        self.waiting.fetch_sub(bytes, Ordering::Relaxed);
        self.drained.notify_one();
    }

    /// Waits until the answers waiting for the stream's reader, with those
    /// the samples already taken will add (at the size of the latest
    /// answer), fit in `limit` bytes; then says how many more samples may
    /// be taken now (at least one). Before the first answer its size is
    /// unknown: `unknown` samples may be in flight. `None` once the writer
    /// has ended.
    async fn room(&self, limit: usize, unknown: usize) -> Option<usize> {
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
    fn send_error(&self, id: u64, message: String) {
        let added = self.lock().push_error(id, message);
        self.produced(added);
        self.wake.notify_one();
    }
}

impl Outbox {
    /// Returns the bytes added, as all `push_*` do.
    fn push_output(&mut self, id: u64, output: Output, timing: Timing) -> usize {
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
            Err(message) => self.push_error(id, message),
        }
    }

    fn push_error(&mut self, id: u64, message: String) -> usize {
        let added = message.len() + ITEM_OVERHEAD;
        self.bytes += added;
        self.errors.push(SampleError { id, message });
        added
    }

    fn push_first_token(&mut self, id: u64, payload: Bytes) -> usize {
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
    fn take_into(&mut self, messages: &mut VecDeque<FromNode>) {
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

/// Reads samples off the stream and hands them to the batcher, a chunk of
/// everything already received at a time.
async fn read_samples<S, E>(
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
        let mut ready: Option<Decoded> = None;
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
                    let budget = match try_budget(&connection, &node, mine, all) {
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
                            let wait = wait_budget(&connection, &node, mine, all);
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
                    let work = if codec == Codec::None as i32 {
                        Err(codec::decode_input(codec, payload, max_input))
                    } else {
                        received = std::time::Instant::now();
                        Ok(move || codec::decode_input(codec, payload, max_input))
                    };
                    let taken = Taken {
                        id: sample.id,
                        traceparent: sample.traceparent,
                        received,
                        budget,
                    };
                    match work {
                        // Nothing decoding ahead of it: placed at once.
                        Err(input) if decodes.len() == 0 => ready = Some((taken, input)),
                        work => {
                            let turn = (&node.decoding, connection.id, bound);
                            decodes.start(taken, turn, work).await
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

/// A sample and its input, or why it could not be decoded.
type Decoded = (Taken, Result<Bytes, String>);

/// A decoded sample into `chunk`, where it keeps its share of the budgets
/// until it has run, cut down to its real size. A sample that could not be
/// decoded is answered with the error, and gives its share back.
fn place(
    (taken, decoded): Decoded,
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
        Err(message) => {
            tally.rejected += 1;
            reply.send_error(id, message);
            return;
        }
    };
    shrink(&mut own, connection.budget.units(input.len()));
    shrink(&mut shared, node.decoded.units(input.len()));
    chunk.push(Job {
        id,
        input,
        reply: Arc::clone(reply),
        budget: Some((own, shared)),
        received,
        trace: crate::otlp::received(&traceparent, received),
    });
}

/// Gives back what `permit` holds beyond `units`. (An input never decodes
/// to more than its bound, so there is never less.)
fn shrink(permit: &mut OwnedSemaphorePermit, units: u32) {
    let excess = permit.num_permits().saturating_sub(units as usize);
    if excess > 0 {
        drop(permit.split(excess));
    }
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

/// A stream's inputs being decoded, handed back in the order they came:
/// raw payloads as they are; compressed ones decoded on the blocking pool,
/// several of one stream at once (at most `width`, and no more than the
/// pool's turns, one per core, shared fairly by the connections: see
/// `decode_pool`), so that decoding never holds up the network threads nor
/// waits on one core.
struct Decodes<T> {
    width: usize,
    queue: VecDeque<(T, Decoding)>,
}

enum Decoding {
    Done(Result<Bytes, String>),
    Running(tokio::task::JoinHandle<Result<Bytes, String>>),
}

impl<T> Decodes<T> {
    fn new(width: usize) -> Self {
        Self {
            width: width.max(1),
            queue: VecDeque::new(),
        }
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    /// Starts `work` on the pool once connection `conn` has a turn for its
    /// `bound` bytes (`turn`: the pool, `conn`, `bound`); `Err(result)`:
    /// nothing to do off the network thread (a raw input), the result is
    /// there.
    async fn start(
        &mut self,
        meta: T,
        (pool, conn, bound): (&Arc<DecodePool>, u64, usize),
        work: Result<
            impl FnOnce() -> Result<Bytes, String> + Send + 'static,
            Result<Bytes, String>,
        >,
    ) {
        let decoding = match work {
            Err(done) => Decoding::Done(done),
            // The turn is held while the decode runs, not until its result
            // is taken: streams waiting for turns never wait on each other.
            Ok(work) => {
                let mut turn = pool.turn(conn, bound as u64).await;
                Decoding::Running(tokio::task::spawn_blocking(move || {
                    let decoded = work();
                    turn.decoded(decoded.as_ref().map_or(0, Bytes::len));
                    decoded
                }))
            }
        };
        self.queue.push_back((meta, decoding));
    }

    /// The oldest input if it is decoded; waits for it when `width` are
    /// under way, or with `all` (the end of a turn of reading).
    async fn next(&mut self, all: bool) -> Option<(T, Result<Bytes, String>)> {
        let ready = match &self.queue.front()?.1 {
            Decoding::Done(_) => true,
            Decoding::Running(task) => task.is_finished(),
        };
        if !ready && !all && self.queue.len() < self.width {
            return None;
        }
        let (meta, decoding) = self.queue.pop_front()?;
        let result = match decoding {
            Decoding::Done(r) => r,
            Decoding::Running(task) => task
                .await
                .unwrap_or_else(|e| Err(format!("decoding failed: {e}"))),
        };
        Some((meta, result))
    }
}

type Permits = (OwnedSemaphorePermit, OwnedSemaphorePermit);

/// Both budgets' units at once, if both have them now.
fn try_budget(connection: &Connection, node: &DataPath, mine: u32, all: u32) -> Option<Permits> {
    let own = Arc::clone(connection.budget.semaphore())
        .try_acquire_many_owned(mine)
        .ok()?;
    let shared = Arc::clone(node.decoded.semaphore())
        .try_acquire_many_owned(all)
        .ok()?;
    Some((own, shared))
}

/// Both budgets' units, waiting for them: the connection's first, so that a
/// connection over its share does not hold any of the node's meanwhile; then
/// the node's, those that hold least of their shares first.
async fn wait_budget(
    connection: &Connection,
    node: &DataPath,
    mine: u32,
    all: u32,
) -> Option<Permits> {
    let own = Arc::clone(connection.budget.semaphore())
        .acquire_many_owned(mine)
        .await
        .ok()?;
    let held = connection.budget.held();
    let shared = node.decoded.take_fairly(held, all).await?;
    Some((own, shared))
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

/// Sends the stream's answers as they come, and heartbeats while idle. Ends
/// the stream once the client has stopped sending and every sample is
/// answered, or on shutdown.
async fn write_answers(
    stream: u64,
    reply: Arc<Reply>,
    tx: mpsc::Sender<Result<FromNode, Status>>,
    node: Arc<DataPath>,
) {
    send_answers(stream, &reply, tx, node).await;
    reply.writer_gone.store(true, Ordering::Release);
    reply.drained.notify_one();
}

async fn send_answers(
    stream: u64,
    reply: &Reply,
    tx: mpsc::Sender<Result<FromNode, Status>>,
    node: Arc<DataPath>,
) {
    let heartbeat = node.config.heartbeat;
    let output = node.config.codecs.output.codec();
    let mut stop = node.stop.clone();
    let mut messages = VecDeque::new();
    let mut last_sent = Instant::now();
    let mut cut_at: Option<Instant> = None;
    let mut answered = 0u64;
    let mut traced = Vec::new();
    let _open = METRICS.stream_open();
    let _session = crate::otlp::session(stream, &node.config.name);
    loop {
        let (done, pending, input_error) = {
            let mut outbox = reply.lock();
            outbox.take_into(&mut messages);
            std::mem::swap(&mut traced, &mut outbox.traced);
            let done = outbox.input_done && outbox.pending == 0;
            let error = done.then(|| outbox.input_error.take()).flatten();
            (done, outbox.pending, error)
        };
        while let Some(mut message) = messages.pop_front() {
            let bytes = payload_bytes(&message);
            codec::encode_output(output.as_ref(), &mut message);
            let now = mono_ns(std::time::Instant::now());
            for a in &mut message.answers {
                a.node_send_ns = now.saturating_sub(a.node_send_ns);
            }
            METRICS.sent(&message);
            answered += message.answers.len() as u64;
            if tx.send(Ok(message)).await.is_err() {
                info!(stream, answered, "infer stream closed by the client");
                return;
            }
            reply.sent(bytes);
            last_sent = Instant::now();
        }
        if !traced.is_empty() {
            crate::otlp::sent(&mut traced, stream, &node.config.name);
        }
        let stopping = *stop.borrow();
        if let Some(e) = input_error {
            let status = Status::invalid_argument(format!(
                "sut-node {}: malformed message on the Infer stream: {e}",
                node.config.name
            ));
            let _ = tx.send(Err(status)).await;
            info!(
                stream,
                answered, "infer stream ended by a malformed message"
            );
            return;
        }
        if done || cut_at.is_some_and(|at| Instant::now() >= at) {
            if stopping {
                let status = Status::unavailable(format!(
                    "sut-node {} is shutting down; unanswered samples on this stream: {pending}",
                    node.config.name
                ));
                let _ = tx.send(Err(status)).await;
            }
            info!(stream, answered, unanswered = pending, "infer stream ended");
            return;
        }
        let next_heartbeat = heartbeat.map(|h| last_sent + h);
        tokio::select! {
            _ = reply.wake.notified() => {}
            _ = tx.closed() => {
                info!(stream, answered, "infer stream closed by the client");
                return;
            }
            _ = tokio::time::sleep_until(next_heartbeat.unwrap_or(last_sent)), if next_heartbeat.is_some() => {
                let beat = FromNode { heartbeat: true, ..FromNode::default() };
                if tx.send(Ok(beat)).await.is_err() {
                    return;
                }
                last_sent = Instant::now();
            }
            _ = stopped(&mut stop), if cut_at.is_none() => {
                cut_at = Some(Instant::now() + node.config.shutdown_grace);
            }
            _ = tokio::time::sleep_until(cut_at.unwrap_or(last_sent)), if cut_at.is_some() => {}
        }
    }
}

/// The bytes a message's items were counted with when they were produced.
fn payload_bytes(m: &FromNode) -> usize {
    let t: usize = m.first_tokens.iter().map(|t| t.payload.len()).sum();
    let a: usize = m.answers.iter().map(|a| a.payload.len()).sum();
    let e: usize = m.errors.iter().map(|e| e.message.len()).sum();
    t + a + e + ITEM_OVERHEAD * (m.first_tokens.len() + m.answers.len() + m.errors.len())
}

/// The batcher's worker: runs a batch through the backend and delivers each
/// output to the stream its sample came from.
fn batch_runner(
    backend: Arc<dyn Backend>,
    outstanding: Arc<AtomicU64>,
) -> impl FnMut(&mut Vec<Job>, Turn) + Send + 'static {
    let mut inputs: Vec<Bytes> = Vec::new();
    let mut answered: Vec<bool> = Vec::new();
    // When the last batch was ready: a batch run back to back with it
    // starts then (or when its last sample came, if later), which saves a
    // clock read per batch when busy.
    let mut last_ready = std::time::Instant::now();
    mono_ns(last_ready); // the epoch, before any sample
    let mut batches = Batches::default();
    let mut held = HeldBudgets::default();
    move |jobs: &mut Vec<Job>, Turn { back_to_back, more }| {
        inputs.clear();
        inputs.extend(jobs.iter_mut().map(|job| std::mem::take(&mut job.input)));
        answered.clear();
        answered.resize(jobs.len(), false);
        let started = if back_to_back {
            jobs.iter().map(|j| j.received).fold(last_ready, Ord::max)
        } else {
            std::time::Instant::now()
        };
        let mut sink = Sink {
            jobs,
            answered: &mut answered,
            outstanding: &outstanding,
            started,
        };
        let info = BatchInfo { back_to_back };
        let result = catch_unwind(AssertUnwindSafe(|| backend.infer(&inputs, info, &mut sink)));
        let ready = std::time::Instant::now();
        last_ready = ready;
        batches.batch(jobs.len(), ready.saturating_duration_since(started));
        let answered = &answered[..];
        let failure = match result {
            Ok(Ok(outputs)) if outputs.len() == jobs.len() => {
                deliver(jobs, answered, outputs.into_iter(), started, ready);
                None
            }
            Ok(Ok(outputs)) => Some(format!(
                "backend returned {} outputs for a batch of {}",
                outputs.len(),
                jobs.len()
            )),
            Ok(Err(e)) => Some(format!("backend failed: {e}")),
            Err(_) => Some("backend panicked".to_string()),
        };
        if let Some(message) = failure {
            error!("batch of {} samples failed: {message}", jobs.len());
            deliver(
                jobs,
                answered,
                std::iter::repeat_with(|| Err(message.clone())),
                started,
                ready,
            );
        }
        let late = answered.iter().filter(|a| !**a).count();
        outstanding.fetch_sub(late as u64, Ordering::Relaxed);
        held.keep(jobs);
        // The figures and the budgets' shares go back once the group of
        // batches ends (groups form only of fast batches).
        if !more {
            held.give_back();
            METRICS.add_batches(&mut batches);
        }
    }
}

/// The shares of the budgets that samples held until they ran, merged per
/// budget until given back: a release takes the semaphore's lock, so it is
/// paid once per group of batches rather than once per sample.
#[derive(Default)]
struct HeldBudgets {
    node: Option<OwnedSemaphorePermit>,
    /// One per connection (a group holds samples of a few).
    connections: Vec<OwnedSemaphorePermit>,
}

impl HeldBudgets {
    fn keep(&mut self, jobs: &mut [Job]) {
        for job in jobs {
            let Some((own, shared)) = job.budget.take() else {
                continue;
            };
            match &mut self.node {
                Some(all) if Arc::ptr_eq(all.semaphore(), shared.semaphore()) => all.merge(shared),
                // (Dropping the previous share gives it back.)
                _ => self.node = Some(shared),
            }
            match self
                .connections
                .iter_mut()
                .find(|c| Arc::ptr_eq(c.semaphore(), own.semaphore()))
            {
                Some(c) => c.merge(own),
                None => self.connections.push(own),
            }
        }
    }

    /// Gives every share back (dropping a permit frees its units).
    fn give_back(&mut self) {
        self.node = None;
        self.connections.clear();
    }
}

/// Appends each job's output to its stream's outbox, locking each stream
/// once per run of consecutive jobs from it, and wakes the writers. Jobs
/// already answered (`answered[i]`) are skipped, their outputs dropped.
fn deliver(
    jobs: &[Job],
    answered: &[bool],
    mut outputs: impl Iterator<Item = Output>,
    started: std::time::Instant,
    ready: std::time::Instant,
) {
    let mut i = 0;
    while i < jobs.len() {
        let reply = &jobs[i].reply;
        let mut outbox = reply.lock();
        let mut added = 0;
        while i < jobs.len() && Arc::ptr_eq(&jobs[i].reply, reply) {
            let output = outputs.next().unwrap_or_else(|| Err("no output".into()));
            if !answered[i] {
                let timing = Timing::of(&jobs[i], started, ready);
                if let Some(t) = &jobs[i].trace {
                    let t = crate::otlp::batched(t, jobs[i].id, started, ready, jobs.len());
                    outbox.traced.push(t);
                }
                added += outbox.push_output(jobs[i].id, output, timing);
                outbox.pending = outbox.pending.saturating_sub(1);
            }
            i += 1;
        }
        drop(outbox);
        reply.produced(added);
        reply.wake.notify_one();
    }
}

/// Sends a batch's first tokens, and the answers a backend has early, to
/// their streams right away.
struct Sink<'a> {
    jobs: &'a [Job],
    /// Samples answered through `answer_now`.
    answered: &'a mut [bool],
    outstanding: &'a AtomicU64,
    /// When the batch started.
    started: std::time::Instant,
}

impl SampleSink for Sink<'_> {
    fn first_token(&mut self, index: usize, payload: Bytes) {
        if let Some(job) = self.jobs.get(index) {
            let added = job.reply.lock().push_first_token(job.id, payload);
            job.reply.produced(added);
            job.reply.wake.notify_one();
        }
    }

    fn answer_now(&mut self, index: usize, output: &Output) {
        let (Some(job), Some(answered)) = (self.jobs.get(index), self.answered.get_mut(index))
        else {
            return;
        };
        if std::mem::replace(answered, true) {
            return; // sent already
        }
        {
            let mut outbox = job.reply.lock();
            let now = std::time::Instant::now();
            let timing = Timing::of(job, self.started, now);
            if let Some(t) = &job.trace {
                let t = crate::otlp::batched(t, job.id, self.started, now, self.jobs.len());
                outbox.traced.push(t);
            }
            let added = outbox.push_output(job.id, output.clone(), timing);
            outbox.pending = outbox.pending.saturating_sub(1);
            drop(outbox);
            job.reply.produced(added);
        }
        job.reply.wake.notify_one();
        self.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
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
        outbox.push_output(100, Err("bad input".into()), Timing::default());
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

    /// Answers sample 0 early (twice: the second is ignored), checks it is in
    /// the outbox while the batch still runs, then returns both outputs.
    struct EarlyFirst(Arc<Reply>);

    impl Backend for EarlyFirst {
        fn name(&self) -> &str {
            "early-first"
        }
        fn warm_up(&self) -> Result<(), crate::backend::BackendError> {
            Ok(())
        }
        fn infer(
            &self,
            _: &[Bytes],
            _: BatchInfo,
            sink: &mut dyn SampleSink,
        ) -> Result<Vec<Output>, crate::backend::BackendError> {
            sink.answer_now(0, &answer(10, 1));
            sink.answer_now(0, &answer(10, 1));
            let early: Vec<u64> = self.0.lock().answers.iter().map(|a| a.id).collect();
            assert_eq!(early, [10], "sample 0 is answered before the batch ends");
            Ok(vec![answer(10, 1), answer(11, 1)])
        }
    }

    #[test]
    fn answers_sent_early_leave_before_the_batch_ends_and_only_once() {
        let reply = Arc::new(Reply::default());
        reply.lock().pending = 2;
        let outstanding = Arc::new(AtomicU64::new(2));
        let mut run = batch_runner(
            Arc::new(EarlyFirst(Arc::clone(&reply))),
            Arc::clone(&outstanding),
        );
        let job = |id| Job {
            id,
            input: Bytes::from_static(b"x"),
            reply: Arc::clone(&reply),
            budget: None,
            received: std::time::Instant::now(),
            trace: None,
        };
        run(
            &mut vec![job(10), job(11)],
            Turn {
                back_to_back: false,
                more: false,
            },
        );
        let outbox = reply.lock();
        let ids: Vec<u64> = outbox.answers.iter().map(|a| a.id).collect();
        assert_eq!(ids, [10, 11]);
        assert_eq!(outbox.pending, 0);
        assert_eq!(outstanding.load(Ordering::Relaxed), 0);
    }

    /// Takes 20 ms per batch.
    struct Slow;

    impl Backend for Slow {
        fn name(&self) -> &str {
            "slow"
        }
        fn warm_up(&self) -> Result<(), crate::backend::BackendError> {
            Ok(())
        }
        fn infer(
            &self,
            inputs: &[Bytes],
            _: BatchInfo,
            _: &mut dyn SampleSink,
        ) -> Result<Vec<Output>, crate::backend::BackendError> {
            std::thread::sleep(std::time::Duration::from_millis(20));
            Ok(inputs.iter().map(|_| answer(1, 1)).collect())
        }
    }

    #[test]
    fn answers_carry_the_nodes_timings() {
        let reply = Arc::new(Reply::default());
        reply.lock().pending = 1;
        let mut run = batch_runner(Arc::new(Slow), Arc::new(AtomicU64::new(1)));
        let received = std::time::Instant::now() - std::time::Duration::from_millis(10);
        let before = mono_ns(std::time::Instant::now());
        run(
            &mut vec![Job {
                id: 1,
                input: Bytes::from_static(b"x"),
                reply: Arc::clone(&reply),
                budget: None,
                received,
                trace: None,
            }],
            Turn {
                back_to_back: false,
                more: false,
            },
        );
        let after = mono_ns(std::time::Instant::now());
        let mut messages = VecDeque::new();
        reply.lock().take_into(&mut messages);
        let a = &messages[0].answers[0];
        assert!(a.node_queue_ns >= 10_000_000, "{}", a.node_queue_ns);
        assert!(a.node_compute_ns >= 20_000_000, "{}", a.node_compute_ns);
        // Until sent: when the output was ready, on the node's own scale.
        assert!(
            (before..=after).contains(&a.node_send_ns),
            "{}",
            a.node_send_ns
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_streams_inputs_decode_at_once_and_come_back_in_order() {
        // Two decodes that each finish only once the other has started:
        // one at a time, the first would time out.
        let pool = Arc::new(DecodePool::new(2));
        let (a_started, a_seen) = std::sync::mpsc::channel::<()>();
        let (b_started, b_seen) = std::sync::mpsc::channel::<()>();
        let wait = std::time::Duration::from_secs(20);
        let mut decodes = Decodes::new(2);
        let work_a = move || {
            let _ = a_started.send(());
            b_seen
                .recv_timeout(wait)
                .map(|()| Bytes::from_static(b"a"))
                .map_err(|_| "b never ran beside a".to_string())
        };
        let work_b = move || {
            let _ = b_started.send(());
            a_seen
                .recv_timeout(wait)
                .map(|()| Bytes::from_static(b"b"))
                .map_err(|_| "a never ran beside b".to_string())
        };
        decodes.start(1, (&pool, 1, 1), Ok(work_a)).await;
        decodes.start(2, (&pool, 1, 1), Ok(work_b)).await;
        // A raw input behind them waits its turn.
        let raw: Result<fn() -> Result<Bytes, String>, _> = Err(Ok(Bytes::from_static(b"c")));
        decodes.start(3, (&pool, 1, 1), raw).await;
        let mut got = Vec::new();
        while let Some((id, r)) = decodes.next(true).await {
            got.push((id, r));
        }
        assert_eq!(
            got,
            vec![
                (1, Ok(Bytes::from_static(b"a"))),
                (2, Ok(Bytes::from_static(b"b"))),
                (3, Ok(Bytes::from_static(b"c"))),
            ]
        );
        // Turns given back: both at once again.
        let both = (pool.turn(1, 1).await, pool.turn(2, 1).await);
        drop(both);
    }

    #[tokio::test]
    async fn a_decode_done_but_not_taken_holds_no_turn() {
        // Two streams, one turn: the first stream's finished decode, not
        // yet taken, must not keep the second waiting (they would wait on
        // each other once both hold a result and want a turn).
        let pool = Arc::new(DecodePool::new(1));
        let (mut first, mut second) = (Decodes::new(4), Decodes::new(4));
        first
            .start(1, (&pool, 1, 1), Ok(|| Ok(Bytes::from_static(b"1"))))
            .await;
        let started = second.start(2, (&pool, 2, 1), Ok(|| Ok(Bytes::from_static(b"2"))));
        tokio::time::timeout(std::time::Duration::from_secs(20), started)
            .await
            .expect("the second stream got the turn");
        assert_eq!(second.next(true).await.map(|d| d.0), Some(2));
        assert_eq!(first.next(true).await.map(|d| d.0), Some(1));
    }

    #[tokio::test]
    async fn a_decoded_input_waits_behind_an_older_one_until_the_width_is_reached() {
        let pool = Arc::new(DecodePool::new(4));
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let mut decodes = Decodes::new(2);
        let slow = move || {
            let _ = gate.recv();
            Ok(Bytes::from_static(b"slow"))
        };
        decodes.start(1, (&pool, 1, 4), Ok(slow)).await;
        // Below the width, a running decode is not waited for.
        assert!(decodes.next(false).await.is_none());
        let raw: Result<fn() -> Result<Bytes, String>, _> = Err(Ok(Bytes::new()));
        decodes.start(2, (&pool, 1, 0), raw).await;
        // The width is reached: the oldest is awaited, so release it.
        let _ = release.send(());
        assert_eq!(decodes.next(false).await.map(|d| d.0), Some(1));
        assert_eq!(decodes.next(false).await.map(|d| d.0), Some(2));
        assert!(decodes.next(false).await.is_none());
    }

    /// Holds its first batch until `release` is dropped; says when it has it.
    struct HeldFirst {
        started: Mutex<Option<std::sync::mpsc::Sender<()>>>,
        release: Mutex<std::sync::mpsc::Receiver<()>>,
    }

    impl Backend for HeldFirst {
        fn name(&self) -> &str {
            "held-first"
        }
        fn warm_up(&self) -> Result<(), crate::backend::BackendError> {
            Ok(())
        }
        fn infer(
            &self,
            inputs: &[Bytes],
            _: BatchInfo,
            _: &mut dyn SampleSink,
        ) -> Result<Vec<Output>, crate::backend::BackendError> {
            if let Some(started) = self.started.lock().unwrap().take() {
                let _ = started.send(());
                let _ = self.release.lock().unwrap().recv();
            }
            Ok(inputs.iter().map(|_| answer(1, 1)).collect())
        }
    }

    // Paused time: the long sleep below ends only once every task waits and
    // no decode runs, i.e. once the readers have taken all they can.
    #[tokio::test(start_paused = true)]
    async fn inputs_being_decoded_count_against_the_nodes_budget() {
        const INPUT: usize = 64 << 10;
        const STREAMS: usize = 8;
        const SENT: usize = 16;
        const TURNS: usize = 4;
        let (started, has_started) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let backend = HeldFirst {
            started: Mutex::new(Some(started)),
            release: Mutex::new(released),
        };
        let config = NodeConfig {
            name: "budget".into(),
            model: None,
            batch: crate::batcher::BatchPolicy {
                max_batch_size: 1,
                max_wait: std::time::Duration::ZERO,
            },
            heartbeat: None,
            shutdown_grace: std::time::Duration::from_secs(10),
            codecs: codec::NodeCodecs {
                output: compression::CodecSpec::NONE,
                max_input_bytes: INPUT,
            },
            limits: crate::limits::Limits {
                // Four inputs, node-wide; each connection could hold them all.
                max_decoded_bytes: 4 * INPUT,
                ..crate::limits::Limits::default()
            },
        };
        let (_stop, stop) = tokio::sync::watch::channel(false);
        let mut node = DataPath::start(config, Arc::new(backend), stop).unwrap();
        // As many decodes at once as a 4-core machine runs, whatever this one.
        node.decoding = Arc::new(DecodePool::new(TURNS));
        node.decoding_turns = TURNS;
        let node = Arc::new(node);

        // Frames that decode to just under the limit: with their size in
        // the header, and streamed (no size: charged at the limit).
        let data = vec![7u8; INPUT - 1];
        let declared = Bytes::from(
            compression::CodecSpec::from(compression::CodecKind::Zstd)
                .codec()
                .compress(&data),
        );
        let streamed = {
            let mut out = Vec::new();
            let mut enc = zstd::stream::Encoder::new(&mut out, 1).unwrap();
            std::io::Write::write_all(&mut enc, &data).unwrap();
            enc.finish().unwrap();
            Bytes::from(out)
        };
        let mut inputs = Vec::new();
        let mut answers = Vec::new();
        for s in 0..STREAMS {
            let (tx, rx) = mpsc::channel(SENT);
            for i in 0..SENT {
                let payload = if s % 2 == 0 { &declared } else { &streamed };
                let sample = proto::SampleRequest {
                    id: (s * SENT + i) as u64,
                    payload: payload.clone(),
                    codec: Codec::Zstd as i32,
                    ..Default::default()
                };
                let message = ToNode {
                    kind: Some(to_node::Kind::Sample(sample)),
                };
                tx.try_send(message).unwrap();
            }
            // Each stream on a connection of its own.
            let peer = std::net::SocketAddr::from(([10, 0, 0, 1], 5000 + s as u16));
            let connection = node.connections.of(Some(peer));
            let input = ReceiverStream::new(rx).map(Ok::<_, String>);
            answers.push(open(s as u64, input, connection, Arc::clone(&node)));
            inputs.push(tx);
        }
        tokio::task::spawn_blocking(move || has_started.recv())
            .await
            .unwrap()
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;

        // The backend holds one sample; the budget holds at most four
        // decoded inputs (it included); each stream may hold one more
        // sample, not yet decoded, waiting for its share.
        let taken: usize = inputs.iter().map(|tx| tx.capacity()).sum();
        assert!(
            taken <= 4 + STREAMS,
            "{taken} samples taken with a budget of four inputs and {STREAMS} streams"
        );

        // Once the backend runs, every sample is answered.
        drop(release);
        drop(inputs);
        let mut answered = 0;
        for stream in &mut answers {
            while let Some(m) = stream.next().await {
                let m = m.unwrap();
                assert!(m.errors.is_empty(), "{:?}", m.errors);
                answered += m.answers.len();
            }
        }
        assert_eq!(answered, STREAMS * SENT);
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
