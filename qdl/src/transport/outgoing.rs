//! The samples queued for one connection and its window of samples in
//! flight: what every transport's sender takes from, and what the receive
//! side checks each answer against.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use proto::{to_node, ToNode};
use tokio::sync::mpsc;
use tokio_stream::Stream;

/// The samples queued for one connection, as a stream for the transport.
///
/// Each sample's id goes into the connection's [`InFlight`] when the
/// transport takes it, i.e. before it can reach the node, so an answer can be
/// checked against what was really sent on this connection without sharing a
/// lock with the issuing thread. The transport takes no more samples than
/// that window allows. Samples are taken from the queue in runs (up to
/// `RUN` and the room left), their ids recorded under one lock, then handed
/// out one by one.
pub(crate) struct Outgoing {
    queue: mpsc::UnboundedReceiver<Queued>,
    window: Arc<InFlight>,
    /// Taken from the queue and recorded, not yet handed to the transport.
    taken: VecDeque<ToNode>,
    /// Reused for each run taken from the queue.
    run: Vec<Queued>,
}

/// The most samples taken from the queue at once.
const RUN: usize = 64;

/// A sample on its way to the transport, with when the QDL was asked to
/// send it.
pub(crate) type Queued = (ToNode, Instant);

impl Outgoing {
    pub(crate) fn new(queue: mpsc::UnboundedReceiver<Queued>, window: Arc<InFlight>) -> Self {
        Self {
            queue,
            window,
            taken: VecDeque::with_capacity(RUN),
            run: Vec::with_capacity(RUN),
        }
    }
}

impl Stream for Outgoing {
    type Item = ToNode;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ToNode>> {
        let this = &mut *self;
        if let Some(m) = this.taken.pop_front() {
            return Poll::Ready(Some(m));
        }
        let mut window = this.window.lock();
        let room = window.room(this.window.limit);
        if room == 0 {
            window.waiting = Some(cx.waker().clone());
            return Poll::Pending;
        }
        match this.queue.poll_recv_many(cx, &mut this.run, room.min(RUN)) {
            Poll::Pending => return Poll::Pending,
            // The queue's end.
            Poll::Ready(0) => return Poll::Ready(None),
            Poll::Ready(_) => {}
        }
        for (msg, sent) in this.run.drain(..) {
            if let ToNode {
                kind: Some(to_node::Kind::Sample(s)),
            } = &msg
            {
                window.ids.insert(s.id, sent);
            }
            this.taken.push_back(msg);
        }
        drop(window);
        Poll::Ready(this.taken.pop_front())
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

/// A set of ids in flight.
pub(crate) type IdSet = std::collections::HashSet<u64, BuildHasherDefault<IdHasher>>;

/// How many samples one connection may have taken for sending and not yet
/// had answered, and which; the rest wait in its queue. The node's
/// flow-control windows are sized in bytes for large inputs: with small
/// inputs they would let hundreds of thousands of samples be under way at
/// once, to no gain in throughput, and the per-sample bookkeeping of both
/// ends would no longer fit the caches.
#[derive(Debug)]
pub(crate) struct InFlight {
    limit: usize,
    state: Mutex<Window>,
}

/// What the transport's task and the receive side share.
#[derive(Debug, Default)]
pub(crate) struct Window {
    /// The ids taken and not yet answered, and when each was issued.
    pub(crate) ids: IdMap,
    /// Those of them whose first token has arrived: a sample has one.
    pub(crate) first_tokens: IdSet,
    /// The transport's task, waiting for room.
    waiting: Option<Waker>,
    /// The receive side has ended: no limit any more.
    closed: bool,
}

impl Window {
    /// How many more samples may be taken.
    fn room(&self, limit: usize) -> usize {
        if self.closed {
            usize::MAX
        } else {
            limit.saturating_sub(self.ids.len())
        }
    }

    /// The waiting task, once a quarter of the window is free: woken then
    /// rather than at every answer, it takes samples in runs.
    #[must_use = "wake the task after unlocking"]
    pub(crate) fn waker_to_wake(&mut self, limit: usize) -> Option<Waker> {
        if self.closed || self.ids.len() <= limit - limit / 4 {
            self.waiting.take()
        } else {
            None
        }
    }
}

impl InFlight {
    pub(crate) fn new(limit: u64) -> Self {
        Self {
            limit: usize::try_from(limit).unwrap_or(usize::MAX).max(1),
            state: Mutex::default(),
        }
    }

    /// The window, locked: the receive side takes each message's answers
    /// out under one lock, then wakes what [`Window::waker_to_wake`] gives.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Window> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// The receive side has ended: the transport may take everything left.
    pub(crate) fn close(&self) {
        let waker = {
            let mut w = self.lock();
            w.closed = true;
            w.waiting.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
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

    /// An `Outgoing` over a window of `limit`, its queue's sender, and the
    /// wake-ups of the task polling it.
    fn outgoing(limit: u64) -> (Outgoing, mpsc::UnboundedSender<Queued>, Arc<Count>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let out = Outgoing::new(rx, Arc::new(InFlight::new(limit)));
        (out, tx, Arc::new(Count::default()))
    }

    fn sample(id: u64) -> Queued {
        let request = proto::SampleRequest {
            id,
            ..Default::default()
        };
        let msg = ToNode {
            kind: Some(to_node::Kind::Sample(request)),
        };
        (msg, Instant::now())
    }

    fn poll(out: &mut Outgoing, count: &Arc<Count>) -> Poll<Option<ToNode>> {
        let waker = Waker::from(count.clone());
        Pin::new(out).poll_next(&mut Context::from_waker(&waker))
    }

    #[test]
    fn a_run_is_recorded_before_its_first_sample_is_handed_out() {
        let (mut out, tx, count) = outgoing(3);
        for id in 0..10 {
            tx.send(sample(id)).unwrap();
        }
        let window = Arc::clone(&out.window);
        assert!(matches!(poll(&mut out, &count), Poll::Ready(Some(_))));
        // The window's three, recorded at once; the rest stay queued.
        let mut ids: Vec<u64> = window.lock().ids.keys().copied().collect();
        ids.sort_unstable();
        assert_eq!(ids, [0, 1, 2]);
        assert!(matches!(poll(&mut out, &count), Poll::Ready(Some(_))));
        assert!(matches!(poll(&mut out, &count), Poll::Ready(Some(_))));
        assert!(poll(&mut out, &count).is_pending());
    }

    /// The receive side's part: answers `ids`, then wakes what it must.
    fn answer(out: &Outgoing, ids: &[u64]) {
        let waker = {
            let mut w = out.window.lock();
            for id in ids {
                assert!(w.ids.remove(id).is_some(), "{id} in flight");
            }
            w.waker_to_wake(out.window.limit())
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    #[test]
    fn a_full_window_waits_until_a_quarter_is_answered() {
        let (mut out, tx, count) = outgoing(8);
        for id in 0..10 {
            tx.send(sample(id)).unwrap();
        }
        for _ in 0..8 {
            assert!(poll(&mut out, &count).is_ready());
        }
        assert!(poll(&mut out, &count).is_pending(), "8 under way: full");
        answer(&out, &[0]);
        assert_eq!(woken(&count), 0, "7 of 8 under way: not yet woken");
        assert!(poll(&mut out, &count).is_ready(), "but a sample may go");
        assert!(poll(&mut out, &count).is_pending());
        answer(&out, &[1, 2]);
        assert_eq!(woken(&count), 1, "6 of 8 under way: woken");
        answer(&out, &[3]);
        assert_eq!(woken(&count), 1, "woken once per wait");
        assert!(poll(&mut out, &count).is_ready());
        assert_eq!(out.window.lock().ids.len(), 6);
    }

    #[test]
    fn a_closed_window_has_no_limit_and_wakes_its_waiter() {
        let (mut out, tx, count) = outgoing(1);
        for id in 0..4 {
            tx.send(sample(id)).unwrap();
        }
        assert!(poll(&mut out, &count).is_ready());
        assert!(poll(&mut out, &count).is_pending());
        out.window.close();
        assert_eq!(woken(&count), 1);
        for _ in 1..4 {
            assert!(poll(&mut out, &count).is_ready());
        }
        drop(tx);
        assert!(
            matches!(poll(&mut out, &count), Poll::Ready(None)),
            "the queue's end"
        );
        assert_eq!(out.window.lock().ids.len(), 4);
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
