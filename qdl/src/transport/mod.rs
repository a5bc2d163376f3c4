//! The seam between the QDL and the wire: a [`Link`] is one connection to a
//! node that carries the control RPCs and one Infer stream, which takes
//! [`ToNode`] messages from an [`Outgoing`] queue and yields [`FromNode`]
//! messages through an [`Inbound`]. One module per transport; adding one
//! means a variant in each enum here and in `config::Transport`.

pub(crate) mod grpc;
pub(crate) mod quic;
mod tls;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use proto::tls::ClientTls;
use proto::{to_node, FromNode, SessionReply, SessionRequest, ToNode};
use tokio::sync::mpsc;
use tokio_stream::Stream;

use crate::config::{NodeAddr, Transport};
use crate::error::TransportError;

/// One connection to a node.
#[derive(Clone)]
pub(crate) enum Link {
    Grpc(grpc::GrpcLink),
    Quic(quic::QuicLink),
}

impl Link {
    /// Connects over the address's transport: gRPC (over TLS with `tls`, or
    /// for `grpcs://`), or QUIC (always TLS; `tls` required). A message from
    /// the node over `max_message` bytes ends the stream as it arrives.
    pub(crate) async fn connect(
        addr: &NodeAddr,
        tls: Option<&ClientTls>,
        timeout: Duration,
        max_message: usize,
    ) -> Result<Self, TransportError> {
        let need_tls = || {
            tls.ok_or_else(|| {
                TransportError(format!(
                    "{} needs TLS settings to check the node's certificate",
                    addr.transport.describe(true)
                ))
            })
        };
        match addr.transport {
            Transport::Grpc => Ok(Link::Grpc(
                grpc::GrpcLink::connect(addr, tls, timeout, max_message).await?,
            )),
            Transport::Grpcs => Ok(Link::Grpc(
                grpc::GrpcLink::connect(addr, Some(need_tls()?), timeout, max_message).await?,
            )),
            Transport::Quic => Ok(Link::Quic(
                quic::QuicLink::connect(addr, need_tls()?, max_message).await?,
            )),
        }
    }

    pub(crate) async fn name(&self) -> Result<String, TransportError> {
        match self {
            Link::Grpc(l) => l.name().await,
            Link::Quic(l) => l.name().await,
        }
    }

    pub(crate) async fn start_session(
        &self,
        req: SessionRequest,
    ) -> Result<SessionReply, TransportError> {
        match self {
            Link::Grpc(l) => l.start_session(req).await,
            Link::Quic(l) => l.start_session(req).await,
        }
    }

    pub(crate) async fn describe(&self) -> Result<proto::DescribeReply, TransportError> {
        match self {
            Link::Grpc(l) => l.describe().await,
            Link::Quic(l) => l.describe().await,
        }
    }

    pub(crate) async fn probe(
        &self,
        req: proto::ProbeRequest,
    ) -> Result<proto::ProbeReply, TransportError> {
        match self {
            Link::Grpc(l) => l.probe(req).await,
            Link::Quic(l) => l.probe(req).await,
        }
    }

    /// Opens the data stream: the transport sends what `outgoing` yields and
    /// ends the stream when it ends.
    pub(crate) async fn open(&self, outgoing: Outgoing) -> Result<Inbound, TransportError> {
        match self {
            Link::Grpc(l) => Ok(Inbound::Grpc(l.open(outgoing).await?)),
            Link::Quic(l) => Ok(Inbound::Quic(l.open(outgoing).await?)),
        }
    }
}

/// The node's side of an open data stream.
pub(crate) enum Inbound {
    Grpc(grpc::GrpcInbound),
    Quic(quic::QuicInbound),
}

impl Inbound {
    /// The next message; `Ok(None)` once the node has ended the stream.
    pub(crate) async fn next(&mut self) -> Result<Option<FromNode>, TransportError> {
        match self {
            Inbound::Grpc(s) => s.next().await,
            Inbound::Quic(s) => s.next().await,
        }
    }
}

/// The samples queued for one connection, as a stream for the transport.
///
/// Each sample's id goes into the connection's [`InFlight`] when the
/// transport takes it, i.e. before it can reach the node, so an answer can be
/// checked against what was really sent on this connection without sharing a
/// lock with the issuing thread. The transport takes no more samples than
/// that window allows.
pub(crate) struct Outgoing {
    queue: mpsc::UnboundedReceiver<Queued>,
    window: Arc<InFlight>,
}

/// A sample on its way to the transport, with when the QDL was asked to
/// send it.
pub(crate) type Queued = (ToNode, Instant);

impl Outgoing {
    pub(crate) fn new(queue: mpsc::UnboundedReceiver<Queued>, window: Arc<InFlight>) -> Self {
        Self { queue, window }
    }
}

impl Stream for Outgoing {
    type Item = ToNode;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ToNode>> {
        if self.window.poll_room(cx).is_pending() {
            return Poll::Pending;
        }
        let polled = self.queue.poll_recv(cx);
        if let Poll::Ready(Some((
            ToNode {
                kind: Some(to_node::Kind::Sample(s)),
            },
            sent,
        ))) = &polled
        {
            self.window.took(s.id, *sent);
        }
        polled.map(|m| m.map(|(msg, _)| msg))
    }
}

/// Response ids are distinct engine counters (or, from the official
/// LoadGen, addresses): a multiply-and-fold spreads them well at a fraction
/// of SipHash's cost.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0 ^ u64::from(b));
        }
    }
    fn write_u64(&mut self, x: u64) {
        let h = x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 32);
    }
}

/// Ids in flight and when each was issued.
pub(crate) type IdMap = HashMap<u64, Instant, BuildHasherDefault<IdHasher>>;

/// How many samples one connection may have taken for sending and not yet
/// had answered; the rest wait in its queue. The node's flow-control windows
/// are sized in bytes for large inputs: with small inputs they would let
/// hundreds of thousands of samples be under way at once, to no gain in
/// throughput, and the per-sample bookkeeping of both ends would no longer
/// fit the caches.
#[derive(Debug)]
pub(crate) struct InFlight {
    /// The ids taken and not yet answered: added by the transport's task,
    /// taken out by the receive side.
    ids: Mutex<IdMap>,
    limit: u64,
    /// Written by the transport's task only.
    taken: AtomicU64,
    /// Written by the receive side only.
    answered: AtomicU64,
    /// The transport's task, when the window is full.
    waiting: AtomicBool,
    waker: Mutex<Option<Waker>>,
    /// The receive side has ended: no limit any more.
    closed: AtomicBool,
}

impl InFlight {
    pub(crate) fn new(limit: u64) -> Self {
        Self {
            ids: Mutex::default(),
            limit: limit.max(1),
            taken: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            waiting: AtomicBool::new(false),
            waker: Mutex::new(None),
            closed: AtomicBool::new(false),
        }
    }

    fn in_flight(&self) -> u64 {
        let answered = self.answered.load(Ordering::SeqCst);
        self.taken.load(Ordering::SeqCst).saturating_sub(answered)
    }

    fn has_room(&self) -> bool {
        self.in_flight() < self.limit || self.closed.load(Ordering::SeqCst)
    }

    /// Ready when a sample may be taken; otherwise the task is woken once a
    /// quarter of the window is free again.
    fn poll_room(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.has_room() {
            return Poll::Ready(());
        }
        *self.waker.lock().unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
        self.waiting.store(true, Ordering::SeqCst);
        // Answers that came in meanwhile would not have seen `waiting`.
        if self.has_room() {
            self.waiting.store(false, Ordering::SeqCst);
            return Poll::Ready(());
        }
        Poll::Pending
    }

    fn took(&self, id: u64, sent: Instant) {
        self.ids().insert(id, sent);
        self.taken.fetch_add(1, Ordering::SeqCst);
    }

    /// The ids in flight, for the receive side to check and take answers
    /// from (one lock per message it handles).
    pub(crate) fn ids(&self) -> MutexGuard<'_, IdMap> {
        self.ids.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `n` samples were answered (or failed).
    pub(crate) fn answered(&self, n: u64) {
        self.answered.fetch_add(n, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) && self.in_flight() <= self.limit - self.limit / 4 {
            self.wake();
        }
    }

    /// The receive side has ended: the transport may take everything left.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.wake();
    }

    fn wake(&self) {
        self.waiting.store(false, Ordering::SeqCst);
        let waker = self
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Wake;

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Count(AtomicU64);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn woken(c: &Count) -> u64 {
        c.0.load(Ordering::SeqCst)
    }

    #[test]
    fn a_full_window_waits_until_a_quarter_is_answered() {
        let count = Arc::new(Count::default());
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let w = InFlight::new(8);
        for id in 0..8 {
            assert!(w.poll_room(&mut cx).is_ready());
            w.took(id, Instant::now());
        }
        assert!(w.poll_room(&mut cx).is_pending());
        w.answered(1);
        assert_eq!(woken(&count), 0, "7 of 8 under way: not yet");
        assert!(w.poll_room(&mut cx).is_ready(), "but a sample may go");
        w.took(8, Instant::now());
        assert!(w.poll_room(&mut cx).is_pending());
        w.answered(2);
        assert_eq!(woken(&count), 1, "6 of 8 under way: woken");
        w.answered(2);
        assert_eq!(woken(&count), 1, "woken once per wait");
        assert!(w.poll_room(&mut cx).is_ready());
    }

    #[test]
    fn a_closed_window_has_no_limit_and_wakes_its_waiter() {
        let count = Arc::new(Count::default());
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let w = InFlight::new(1);
        w.took(0, Instant::now());
        assert!(w.poll_room(&mut cx).is_pending());
        w.close();
        assert_eq!(woken(&count), 1);
        for id in 1..4 {
            assert!(w.poll_room(&mut cx).is_ready());
            w.took(id, Instant::now());
        }
        assert_eq!(w.ids().len(), 4);
    }

    #[test]
    fn id_hasher_spreads_strided_ids() {
        // Ids of one connection under round-robin are strided; the low bits
        // of the hash (the bucket index) must still vary.
        let low: std::collections::HashSet<u64> = (0..64u64)
            .map(|i| {
                let mut h = IdHasher::default();
                h.write_u64(1 + 4 * i);
                h.finish() & 63
            })
            .collect();
        assert!(low.len() > 32, "{}", low.len());
    }
}
