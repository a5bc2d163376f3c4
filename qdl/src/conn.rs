//! One connection's shared state and its two tasks: the receive loop, which
//! turns the node's messages into completions, and the watchdog, which feeds
//! the rules of `watchdog`. Also the run's failure state, shared by every
//! connection.

use std::ops::Deref;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use compression::{CodecError, CodecKind};
use loadgen_engine::{Completer, QuerySampleResponse};
use proto::{Codec, FromNode};

use crate::breakdown::{AnswerTimes, ConnTimings};
use crate::spans::SampleTrace;
use crate::transport::{InFlight, Inbound};
use crate::watchdog::{Deadlines, Seen, Watchdog};

/// Decodes a node's answer (or first token) in the timed path, the one
/// post-processing step the rules allow, into at most `max_len` bytes. A
/// frame that declares or produces more, or a corrupt one, is an error for
/// that sample, which ends the run; nothing past `max_len` is allocated.
pub(crate) fn decode_output(
    codec: Codec,
    data: Bytes,
    max_len: usize,
) -> Result<Bytes, CodecError> {
    match CodecKind::from(codec) {
        CodecKind::None if data.len() <= max_len => Ok(data),
        kind => compression::decompress(kind, &data, max_len).map(Bytes::from),
    }
}

/// Output codecs `decode_output` handles; a node announcing another one is
/// refused at session start rather than failing on its first answer.
pub(crate) fn can_decode(codec: Codec) -> bool {
    matches!(codec, Codec::None | Codec::Zstd | Codec::Lz4)
}

fn decode_wire(codec: i32, data: Bytes, max_len: usize) -> Result<Bytes, CodecError> {
    if codec == Codec::None as i32 && data.len() <= max_len {
        return Ok(data);
    }
    let codec = Codec::try_from(codec).map_err(|_| CodecError::Unknown(codec))?;
    decode_output(codec, data, max_len)
}

/// The run's failure state, shared by the issuing thread and every task.
pub(crate) struct RunState {
    /// The engine's Completer: one per test, kept on first use.
    completer: OnceLock<Completer>,
    failed: AtomicBool,
    failure: OnceLock<String>,
    /// Set when the QDL shuts down: streams ending then are not failures.
    closing: AtomicBool,
}

impl RunState {
    pub(crate) fn new() -> Self {
        Self {
            completer: OnceLock::new(),
            failed: AtomicBool::new(false),
            failure: OnceLock::new(),
            closing: AtomicBool::new(false),
        }
    }

    /// Called by `issue_query`: keeps `completer` if none is kept yet. False
    /// when the run has failed, or `completer` belongs to another test than
    /// the kept one; `completer` has then been aborted.
    pub(crate) fn attach(&self, completer: &Completer) -> bool {
        match self.completer.get() {
            None => {
                let _ = self.completer.set(completer.clone());
                // Pairs with the fence in `fail`: a failure racing with the
                // first query either sees the Completer or is seen below.
                fence(Ordering::SeqCst);
            }
            // The receive tasks complete into the first test's Completer
            // only: refuse a second test rather than leave it waiting.
            Some(kept) if !kept.same_test(completer) => {
                completer.abort(
                    "the network SUT serves one test only: connect a new Qdl for each test".into(),
                );
                return false;
            }
            Some(_) => {}
        }
        if self.failed.load(Ordering::SeqCst) {
            if let Some(reason) = self.failure.get() {
                completer.abort(reason.clone());
            }
            return false;
        }
        true
    }

    pub(crate) fn completer(&self) -> Option<&Completer> {
        self.completer.get()
    }

    /// Ends the run with `reason`; the first failure's reason is the one
    /// reported. A failure before the first query aborts that query.
    pub(crate) fn fail(&self, reason: String) {
        if self.closing() || self.failure.set(reason).is_err() {
            return;
        }
        self.failed.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if let Some(reason) = self.failure.get() {
            tracing::error!("aborting the run: {reason}");
            if let Some(c) = self.completer.get() {
                c.abort(reason.clone());
            }
        }
    }

    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// The reason the run failed, once it has.
    pub(crate) fn failure(&self) -> Option<&String> {
        self.failure.get()
    }

    pub(crate) fn closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    pub(crate) fn begin_close(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }
}

/// Keeps the issuing thread's counters and the receive task's on separate
/// cache lines, so neither side's writes slow the other down.
#[repr(align(128))]
#[derive(Default)]
struct Padded<T>(T);

impl<T> Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Written by the issuing thread.
#[derive(Default)]
struct SendCounters {
    samples: AtomicU64,
    bytes: AtomicU64,
    /// The samples' sizes before compression.
    uncompressed: AtomicU64,
}

/// Written by the connection's receive task.
#[derive(Default)]
struct ReceiveCounters {
    /// Answers plus errors: samples no longer outstanding.
    done: AtomicU64,
    answers: AtomicU64,
    first_tokens: AtomicU64,
    errors: AtomicU64,
    bytes: AtomicU64,
    /// Answer and first-token bytes once decoded.
    decoded: AtomicU64,
    messages: AtomicU64,
}

/// Traffic of one connection (payload bytes only, not framing). `bytes_*`
/// count payloads as they travel (compressed, if they are);
/// `uncompressed_bytes_*` the same payloads before compression or after
/// decoding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Samples handed to the connection's queue.
    pub samples_sent: u64,
    /// Their payload bytes, as sent.
    pub bytes_sent: u64,
    /// Their payload bytes before compression.
    pub uncompressed_bytes_sent: u64,
    /// Samples answered.
    pub answers_received: u64,
    /// First tokens received (LLM benchmarks), before their answers.
    pub first_tokens_received: u64,
    /// Samples the node reported failed.
    pub errors_received: u64,
    /// Answer and first-token payload bytes, as received.
    pub bytes_received: u64,
    /// The same payloads, decoded.
    pub uncompressed_bytes_received: u64,
    /// Every message from the node, heartbeats included.
    pub messages_received: u64,
}

impl std::ops::AddAssign for Counters {
    fn add_assign(&mut self, o: Counters) {
        self.samples_sent += o.samples_sent;
        self.bytes_sent += o.bytes_sent;
        self.uncompressed_bytes_sent += o.uncompressed_bytes_sent;
        self.answers_received += o.answers_received;
        self.first_tokens_received += o.first_tokens_received;
        self.errors_received += o.errors_received;
        self.bytes_received += o.bytes_received;
        self.uncompressed_bytes_received += o.uncompressed_bytes_received;
        self.messages_received += o.messages_received;
    }
}

/// One connection, as the issuing thread and its tasks share it.
pub(crate) struct Conn {
    /// `sut-node ADDR (name NAME)`: the prefix of every failure reason.
    pub(crate) label: String,
    sent: Padded<SendCounters>,
    received: Padded<ReceiveCounters>,
    timings: ConnTimings,
    /// Set once the receive task has ended (and reported why, if it failed
    /// the run): the node's own reason comes before the sender's.
    receive_ended: (Mutex<bool>, Condvar),
}

impl Conn {
    pub(crate) fn new(label: String) -> Self {
        Self {
            label,
            sent: Padded::default(),
            received: Padded::default(),
            timings: ConnTimings::new(),
            receive_ended: (Mutex::new(false), Condvar::new()),
        }
    }

    /// Marks the receive task ended, after it reported its reason.
    pub(crate) fn end_receive(&self) {
        let (ended, changed) = &self.receive_ended;
        if let Ok(mut e) = ended.lock() {
            *e = true;
        }
        changed.notify_all();
    }

    /// Waits up to `limit` for the receive task to end; true if it has.
    /// A queue that closed under the sender closes because the stream did:
    /// what the node said last (an error frame, its shutting down) is read
    /// by the receive task, and is the reason to report.
    pub(crate) fn wait_receive_ended(&self, limit: Duration) -> bool {
        let (ended, changed) = &self.receive_ended;
        let Ok(guard) = ended.lock() else {
            return false;
        };
        match changed.wait_timeout_while(guard, limit, |e| !*e) {
            Ok((e, _)) => *e,
            Err(_) => false,
        }
    }

    pub(crate) fn timings(&self) -> &ConnTimings {
        &self.timings
    }

    /// Counted before the sample is queued, so the answer cannot be counted
    /// first and make `outstanding` wrap. `uncompressed`: the sample's size
    /// before compression.
    #[inline]
    pub(crate) fn count_sent(&self, bytes: usize, uncompressed: usize) {
        self.sent.samples.fetch_add(1, Ordering::Relaxed);
        self.sent.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        self.sent
            .uncompressed
            .fetch_add(uncompressed as u64, Ordering::Relaxed);
    }

    /// Samples sent and not yet answered.
    #[inline]
    pub(crate) fn outstanding(&self) -> u64 {
        let done = self.received.done.load(Ordering::Relaxed);
        self.sent
            .samples
            .load(Ordering::Relaxed)
            .saturating_sub(done)
    }

    /// What the watchdog looks at.
    pub(crate) fn seen(&self) -> Seen {
        let r = &self.received;
        Seen {
            messages: r.messages.load(Ordering::Relaxed),
            // Answers and errors end samples; first tokens do not.
            progress: r.answers.load(Ordering::Relaxed) + r.errors.load(Ordering::Relaxed),
            outstanding: self.outstanding(),
        }
    }

    pub(crate) fn counters(&self) -> Counters {
        let r = &self.received;
        Counters {
            samples_sent: self.sent.samples.load(Ordering::Relaxed),
            bytes_sent: self.sent.bytes.load(Ordering::Relaxed),
            uncompressed_bytes_sent: self.sent.uncompressed.load(Ordering::Relaxed),
            answers_received: r.answers.load(Ordering::Relaxed),
            first_tokens_received: r.first_tokens.load(Ordering::Relaxed),
            errors_received: r.errors.load(Ordering::Relaxed),
            bytes_received: r.bytes.load(Ordering::Relaxed),
            uncompressed_bytes_received: r.decoded.load(Ordering::Relaxed),
            messages_received: r.messages.load(Ordering::Relaxed),
        }
    }
}

/// The receive side of one connection.
pub(crate) struct Receiver {
    conn: Arc<Conn>,
    run: Arc<RunState>,
    inbound: Inbound,
    /// The ids the transport took for sending (see `transport::Outgoing`);
    /// told of every answer, so that the transport takes more samples.
    window: Arc<InFlight>,
    /// Largest decoded answer or first token.
    max_answer: usize,
    /// When each answer of the message in hand was sent (kept to reuse).
    sent_at: Vec<Instant>,
    trace: Arc<OnceLock<SampleTrace>>,
}

impl Receiver {
    pub(crate) fn new(
        conn: Arc<Conn>,
        run: Arc<RunState>,
        inbound: Inbound,
        window: Arc<InFlight>,
        max_answer: usize,
        trace: Arc<OnceLock<SampleTrace>>,
    ) -> Self {
        Self {
            conn,
            run,
            inbound,
            window,
            max_answer,
            sent_at: Vec::new(),
            trace,
        }
    }

    /// Completes answers until the stream ends or fails; a failure (or an
    /// end while the QDL is not shutting down) aborts the run.
    pub(crate) async fn run(mut self) {
        let reason = loop {
            match self.inbound.next().await {
                Ok(Some(msg)) => {
                    if let Err(reason) = self.handle(msg, Instant::now()) {
                        break reason;
                    }
                }
                Ok(None) => break "stream closed by the node".to_string(),
                Err(e) => break format!("stream error: {e}"),
            }
        };
        self.window.close();
        if !self.run.closing() {
            self.run.fail(format!("{}: {reason}", self.conn.label));
        }
        self.conn.end_receive();
    }

    /// `arrived`: when the message was in hand.
    fn handle(&mut self, mut msg: FromNode, arrived: Instant) -> Result<(), String> {
        let counters = &self.conn.received;
        counters.messages.fetch_add(1, Ordering::Relaxed);
        if msg.first_tokens.is_empty() && msg.answers.is_empty() && msg.errors.is_empty() {
            return Ok(()); // a heartbeat: counting it is all the watchdog needs
        }
        let max = self.max_answer;
        // Bytes are counted before the completion, so that a test that has
        // ended sees them all.
        let count = |bytes: u64, decoded: u64| {
            counters.bytes.fetch_add(bytes, Ordering::Relaxed);
            counters.decoded.fetch_add(decoded, Ordering::Relaxed);
        };

        if !msg.first_tokens.is_empty() {
            {
                // Every id the node can know of was taken into the window
                // before it was sent.
                let mut window = self.window.lock();
                if let Some(t) = msg
                    .first_tokens
                    .iter()
                    .find(|t| !window.ids.contains_key(&t.id))
                {
                    return Err(never_sent("a first token", t.id));
                }
                // One first token a sample: a node that sends more is not
                // making progress, whatever it sends.
                for t in &msg.first_tokens {
                    if !window.first_tokens.insert(t.id) {
                        return Err(format!(
                            "a second first token for response id {}: a sample has one",
                            t.id
                        ));
                    }
                }
            }
            let (mut bytes, mut decoded) = (0u64, 0u64);
            for t in &mut msg.first_tokens {
                bytes += t.payload.len() as u64;
                t.payload = decode_wire(t.codec, std::mem::take(&mut t.payload), max)
                    .map_err(|e| format!("first token of response id {}: {e}", t.id))?;
                decoded += t.payload.len() as u64;
            }
            count(bytes, decoded);
            let responses: Vec<QuerySampleResponse<'_>> = msg
                .first_tokens
                .iter()
                .map(|t| QuerySampleResponse::new(t.id, &t.payload))
                .collect();
            self.completer()?.first_token_complete(&responses);
            counters
                .first_tokens
                .fetch_add(responses.len() as u64, Ordering::Relaxed);
        }

        if !msg.answers.is_empty() {
            self.sent_at.clear();
            let waker = {
                let mut window = self.window.lock();
                for a in &msg.answers {
                    let Some(sent) = window.ids.remove(&a.id) else {
                        return Err(never_sent("an answer", a.id));
                    };
                    window.first_tokens.remove(&a.id);
                    self.sent_at.push(sent);
                }
                window.waker_to_wake(self.window.limit())
            };
            if let Some(w) = waker {
                w.wake();
            }
            if let Some(a) = msg
                .answers
                .iter()
                .find(|a| !tokens_in_bounds(a.n_tokens, max))
            {
                return Err(format!(
                    "malformed answer for response id {}: {} tokens, more than the {max} \
                     bytes of the largest answer accepted could hold",
                    a.id, a.n_tokens
                ));
            }
            let (mut bytes, mut decoded) = (0u64, 0u64);
            for a in &mut msg.answers {
                bytes += a.payload.len() as u64;
                a.payload = decode_wire(a.codec, std::mem::take(&mut a.payload), max)
                    .map_err(|e| format!("answer for response id {}: {e}", a.id))?;
                decoded += a.payload.len() as u64;
            }
            count(bytes, decoded);
            let ready = Instant::now();
            // All answers of one message in one call: one timestamp, one
            // hand-off to the engine.
            let responses: Vec<QuerySampleResponse<'_>> = msg
                .answers
                .iter()
                .map(|a| QuerySampleResponse {
                    id: a.id,
                    data: &a.payload,
                    n_tokens: a.n_tokens,
                })
                .collect();
            self.completer()?.query_samples_complete(&responses);
            let n = responses.len() as u64;
            counters.answers.fetch_add(n, Ordering::Relaxed);
            counters.done.fetch_add(n, Ordering::Relaxed);
            // Recorded once the engine has its answers.
            for (a, sent) in msg.answers.iter().zip(&self.sent_at) {
                self.conn.timings.record(&AnswerTimes {
                    total: ready.saturating_duration_since(*sent),
                    decode: ready.saturating_duration_since(arrived),
                    node_queue_ns: a.node_queue_ns,
                    node_compute_ns: a.node_compute_ns,
                    node_send_ns: a.node_send_ns,
                });
            }
        }
        if let Some(trace) = self.trace.get() {
            trace.answered(&msg.answers, &msg.errors);
        }

        if let Some(e) = msg.errors.first() {
            let n = msg.errors.len() as u64;
            counters.errors.fetch_add(n, Ordering::Relaxed);
            counters.done.fetch_add(n, Ordering::Relaxed);
            return Err(format!(
                "the node could not answer response id {}: {}",
                e.id, e.message
            ));
        }
        Ok(())
    }

    fn completer(&self) -> Result<&Completer, String> {
        // Unreachable in practice: ids are only sent after `attach`.
        self.run
            .completer()
            .ok_or_else(|| "the node answered before any sample was issued".to_string())
    }
}

/// A token count an answer can carry: no more tokens than the largest
/// answer accepted has bytes (a token id is four; a token of text at least
/// one). Negative counts are the engine's to report, as the LoadGen does.
fn tokens_in_bounds(n_tokens: i64, max_answer: usize) -> bool {
    n_tokens <= i64::try_from(max_answer).unwrap_or(i64::MAX)
}

fn never_sent(what: &str, id: u64) -> String {
    format!("{what} for response id {id}, which is not outstanding on this connection (never sent, or already answered)")
}

/// Runs the watchdog of one connection until the run ends or fails, and
/// fails it on an alarm.
pub(crate) async fn watch(conn: Arc<Conn>, run: Arc<RunState>, deadlines: Deadlines) {
    let mut dog = Watchdog::new(deadlines, conn.seen());
    let mut now = Instant::now();
    loop {
        tokio::time::sleep_until(tokio::time::Instant::from_std(dog.next_look(now))).await;
        if run.closing() || run.failed() {
            return;
        }
        now = Instant::now();
        if let Some(alarm) = dog.on_look(now, conn.seen()) {
            run.fail(format!("{}: {}", conn.label, alarm.reason()));
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::codec::WireCodec;

    #[test]
    fn answers_decode_within_the_limit() {
        let b = Bytes::from_static(b"answer");
        assert_eq!(decode_output(Codec::None, b.clone(), 6).unwrap(), b);
        assert!(matches!(
            decode_output(Codec::None, b.clone(), 5),
            Err(CodecError::TooLarge { .. })
        ));
        let data = vec![3u8; 10_000];
        for kind in [CodecKind::Zstd, CodecKind::Lz4] {
            let frame = Bytes::from(compression::CodecSpec::from(kind).codec().compress(&data));
            let codec = Codec::from(kind);
            assert!(can_decode(codec));
            assert_eq!(decode_output(codec, frame.clone(), 10_000).unwrap(), data);
            assert_eq!(
                decode_wire(kind.wire(), frame.clone(), 10_000).unwrap(),
                data
            );
            let e = decode_output(codec, frame, 9_999).unwrap_err().to_string();
            assert!(e.contains("declares 10000 bytes"), "{e}");
            let garbage = Bytes::from_static(b"\x08\0\0\0xyz");
            let e = decode_output(codec, garbage, 10_000)
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("corrupt {kind} frame")), "{e}");
        }
        let e = decode_wire(99, b, 10).unwrap_err().to_string();
        assert!(e.contains("unknown codec value 99"), "{e}");
    }
}
