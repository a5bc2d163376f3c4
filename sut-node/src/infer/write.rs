//! Writing: one task per Infer stream sends everything its outbox holds as
//! one `FromNode` (split if too large), compressed with the node's output
//! codec, and a heartbeat while it has sent nothing for a while. It ends
//! the stream once the client has stopped sending and every sample is
//! answered, or, once the node stops, after the shutdown grace.
//!
//! Runs in the stream's writer task; touches the stream's outbox and the
//! sending half of its transport. Its timing rules are `WriterClock`'s,
//! which is handed the time: the task only sleeps until the next deadline.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use proto::FromNode;
use tokio::sync::mpsc;
use tonic::Status;
use tracing::info;

use super::data_path::DataPath;
use super::outbox::{mono_ns, payload_bytes, Reply};
use crate::codec;
use crate::metrics::NODE as METRICS;
use crate::stop::stopped;

/// Sends the stream's answers as they come, and heartbeats while idle. Ends
/// the stream once the client has stopped sending and every sample is
/// answered, or on shutdown.
pub(super) async fn write_answers(
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
    let output = node.config.codecs.output.codec();
    let mut stop = node.stop.clone();
    let mut messages = VecDeque::new();
    let mut clock = WriterClock::new(now(), node.config.heartbeat, node.config.shutdown_grace);
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
            let sending = mono_ns(Instant::now());
            for a in &mut message.answers {
                a.node_send_ns = sending.saturating_sub(a.node_send_ns);
            }
            METRICS.sent(&message);
            answered += message.answers.len() as u64;
            if tx.send(Ok(message)).await.is_err() {
                info!(stream, answered, "infer stream closed by the client");
                return;
            }
            reply.sent(bytes);
            clock.on_sent(now());
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
        // (No clock read here until the node stops.)
        if done || (clock.stopping() && clock.due(now()) == Due::Cut) {
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
        let deadline = clock.next_deadline();
        tokio::select! {
            _ = reply.wake.notified() => {}
            _ = tx.closed() => {
                info!(stream, answered, "infer stream closed by the client");
                return;
            }
            _ = sleep_until(deadline) => {
                // (The end of the stream, if due, is seen at the loop's top.)
                if clock.due(now()) == Due::Heartbeat {
                    let beat = FromNode { heartbeat: true, ..FromNode::default() };
                    if tx.send(Ok(beat)).await.is_err() {
                        return;
                    }
                    clock.on_sent(now());
                }
            }
            _ = stopped(&mut stop), if !clock.stopping() => clock.on_stop(now()),
        }
    }
}

/// The writer's clock: tokio's, so that paused time in tests pauses it.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Sleeps until `deadline` (forever without one).
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

/// What falls due on a stream's writer at some instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Due {
    Nothing,
    /// The stream has sent nothing for the heartbeat interval.
    Heartbeat,
    /// The shutdown grace is over: the stream ends.
    Cut,
}

/// The writer's timing rules, handed the time: a heartbeat once the stream
/// has sent nothing for `heartbeat`; once the node stops, the end of the
/// stream `grace` later.
#[derive(Debug)]
pub(super) struct WriterClock {
    heartbeat: Option<Duration>,
    grace: Duration,
    last_sent: Instant,
    cut_at: Option<Instant>,
}

impl WriterClock {
    /// A stream opened at `now`.
    pub(super) fn new(now: Instant, heartbeat: Option<Duration>, grace: Duration) -> Self {
        Self {
            heartbeat,
            grace,
            last_sent: now,
            cut_at: None,
        }
    }

    /// A message (answers or a heartbeat) went out at `now`.
    pub(super) fn on_sent(&mut self, now: Instant) {
        self.last_sent = now;
    }

    /// The node began to stop at `now`; only the first call counts.
    pub(super) fn on_stop(&mut self, now: Instant) {
        self.cut_at.get_or_insert(now + self.grace);
    }

    pub(super) fn stopping(&self) -> bool {
        self.cut_at.is_some()
    }

    /// What is due at `now`: the end of the stream before a heartbeat.
    pub(super) fn due(&self, now: Instant) -> Due {
        if self.cut_at.is_some_and(|at| now >= at) {
            Due::Cut
        } else if self.heartbeat.is_some_and(|h| now >= self.last_sent + h) {
            Due::Heartbeat
        } else {
            Due::Nothing
        }
    }

    /// When something falls due next, if anything will without an event.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let beat = self.heartbeat.map(|h| self.last_sent + h);
        match (beat, self.cut_at) {
            (Some(b), Some(c)) => Some(b.min(c)),
            (b, c) => b.or(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: Duration = Duration::from_nanos(1);
    const BEAT: Duration = Duration::from_millis(500);
    const GRACE: Duration = Duration::from_secs(10);

    #[test]
    fn a_heartbeat_falls_due_once_the_stream_has_sent_nothing_for_the_interval() {
        let t0 = Instant::now();
        let mut clock = WriterClock::new(t0, Some(BEAT), GRACE);
        assert_eq!(clock.next_deadline(), Some(t0 + BEAT));
        assert_eq!(clock.due(t0 + BEAT - NS), Due::Nothing, "just before");
        assert_eq!(clock.due(t0 + BEAT), Due::Heartbeat, "at");
        assert_eq!(clock.due(t0 + BEAT + NS), Due::Heartbeat, "after");
        // Anything sent counts from then on.
        let sent = t0 + BEAT / 2;
        clock.on_sent(sent);
        assert_eq!(clock.next_deadline(), Some(sent + BEAT));
        assert_eq!(clock.due(sent + BEAT - NS), Due::Nothing);
        assert_eq!(clock.due(sent + BEAT), Due::Heartbeat);
    }

    #[test]
    fn without_heartbeats_nothing_falls_due_until_the_node_stops() {
        let t0 = Instant::now();
        let clock = WriterClock::new(t0, None, GRACE);
        assert_eq!(clock.next_deadline(), None);
        assert_eq!(clock.due(t0 + Duration::from_secs(3600)), Due::Nothing);
        assert!(!clock.stopping());
    }

    #[test]
    fn once_the_node_stops_the_stream_ends_after_the_grace() {
        let t0 = Instant::now();
        let mut clock = WriterClock::new(t0, None, GRACE);
        let stop = t0 + Duration::from_secs(1);
        clock.on_stop(stop);
        assert!(clock.stopping());
        let cut = stop + GRACE;
        assert_eq!(clock.next_deadline(), Some(cut));
        assert_eq!(clock.due(cut - NS), Due::Nothing, "just before");
        assert_eq!(clock.due(cut), Due::Cut, "at");
        assert_eq!(clock.due(cut + NS), Due::Cut, "after");
        // A second stop does not move the end.
        clock.on_stop(stop + GRACE / 2);
        assert_eq!(clock.next_deadline(), Some(cut));
    }

    #[test]
    fn heartbeats_go_on_during_the_grace_and_the_end_comes_first() {
        let t0 = Instant::now();
        let grace = 3 * BEAT;
        let mut clock = WriterClock::new(t0, Some(BEAT), grace);
        clock.on_stop(t0);
        assert_eq!(
            clock.next_deadline(),
            Some(t0 + BEAT),
            "the heartbeat is sooner"
        );
        assert_eq!(clock.due(t0 + BEAT), Due::Heartbeat);
        clock.on_sent(t0 + BEAT);
        clock.on_sent(t0 + 2 * BEAT);
        // Both due at once: the stream ends rather than beats.
        assert_eq!(clock.next_deadline(), Some(t0 + grace));
        assert_eq!(clock.due(t0 + grace - NS), Due::Nothing);
        assert_eq!(clock.due(t0 + grace), Due::Cut);
    }
}
