//! Decoded-input budgets: how many bytes of received, not yet run samples
//! the node holds, in total and for each connection. A sample is charged
//! when it is taken off its stream, before it is decoded, at the most its
//! frame may decode to, and cut down to its real size once decoded. A
//! reader that finds a budget spent stops reading its stream (the
//! transport's flow control then holds the client back) until samples have
//! run.
//!
//! The per-connection budget keeps one client from taking the node's whole
//! budget, and names the connection for the batcher. When the node's budget
//! is spent, the connections that wait for it take it one at a time, the
//! one holding least of its share first (`Budget::take_fairly`): a client
//! whose few small inputs are all it holds does not wait behind one input of
//! every client that holds its whole share.
//!
//! Runs in each stream's reader task (taking shares, waiting for them) and
//! on the batcher's worker thread (giving them back once samples have run);
//! it touches only the budgets' semaphores and their waiting lists.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::{oneshot, AcquireError, OwnedSemaphorePermit, Semaphore};

/// Bytes are counted in KiB, so that any budget fits a semaphore.
const UNIT: usize = 1024;

/// The units a budget of `bytes` holds (at least one).
fn total_units(bytes: usize) -> usize {
    bytes.div_ceil(UNIT).max(1)
}

/// A budget of decoded bytes: a semaphore counted in KiB.
#[derive(Debug)]
pub(crate) struct Budget {
    units: Arc<Semaphore>,
    total: usize,
    /// Who waits for units next (see `take_fairly`).
    gate: Arc<Mutex<Gate>>,
}

/// The waiters of `Budget::take_fairly`: one waits on the semaphore, the
/// others in order of what they hold.
#[derive(Debug, Default)]
struct Gate {
    /// One is waiting on the semaphore.
    busy: bool,
    /// The others: by units held, then arrival.
    waiting: BTreeMap<(usize, u64), oneshot::Sender<()>>,
    arrivals: u64,
}

impl Gate {
    /// The semaphore to the next waiter (one that gave up passes it on).
    fn pass(&mut self) {
        while let Some((_, next)) = self.waiting.pop_first() {
            if next.send(()).is_ok() {
                return;
            }
        }
        self.busy = false;
    }
}

impl Budget {
    pub(crate) fn new(bytes: usize) -> Self {
        let total = total_units(bytes).min(Semaphore::MAX_PERMITS);
        Self {
            units: Arc::new(Semaphore::new(total)),
            total,
            gate: Arc::default(),
        }
    }

    /// Units held now.
    pub(crate) fn held(&self) -> usize {
        self.total.saturating_sub(self.units.available_permits())
    }

    /// `units` of the budget, for a connection that holds `held` of its
    /// share: waiters take the semaphore's units one at a time, the one that
    /// holds least first (first come, first served among equals). `None` if
    /// the budget is closed.
    pub(crate) async fn take_fairly(
        &self,
        held: usize,
        units: u32,
    ) -> Option<OwnedSemaphorePermit> {
        let mut turn = GateTurn {
            gate: Arc::clone(&self.gate),
            rx: None,
        };
        {
            let mut gate = self.gate.lock().unwrap_or_else(PoisonError::into_inner);
            if gate.busy {
                let (tx, rx) = oneshot::channel();
                gate.arrivals += 1;
                let arrival = gate.arrivals;
                gate.waiting.insert((held, arrival), tx);
                turn.rx = Some(rx);
            } else {
                gate.busy = true;
            }
        }
        if let Some(rx) = turn.rx.as_mut() {
            // The budget is gone if the sender is (the node stopping).
            rx.await.ok()?;
            turn.rx = None;
        }
        Arc::clone(&self.units).acquire_many_owned(units).await.ok()
    }

    /// The units `len` bytes take: at most the whole budget, so that any
    /// input the limits accept can run, alone if need be.
    pub(crate) fn units(&self, len: usize) -> u32 {
        u32::try_from(len.div_ceil(UNIT).clamp(1, self.total)).unwrap_or(u32::MAX)
    }

    pub(crate) fn semaphore(&self) -> &Arc<Semaphore> {
        &self.units
    }
}

/// A place at a budget's gate: dropped, it passes the semaphore on (if it
/// had it, or was given it while it gave up waiting).
struct GateTurn {
    gate: Arc<Mutex<Gate>>,
    /// Set while waiting for the semaphore.
    rx: Option<oneshot::Receiver<()>>,
}

impl Drop for GateTurn {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            // Closed first: it cannot be given the semaphore after the check.
            rx.close();
            if rx.try_recv().is_err() {
                return;
            }
        }
        let mut gate = self.gate.lock().unwrap_or_else(PoisonError::into_inner);
        gate.pass();
    }
}

/// One connection's share: its budget and its number (the batcher's key).
#[derive(Debug)]
pub(crate) struct Connection {
    pub(crate) id: u64,
    pub(crate) budget: Budget,
}

/// The budgets of the connections with open Infer streams, by peer address
/// (which names a TCP connection or a QUIC connection while it is open).
#[derive(Debug)]
pub(crate) struct Connections {
    per_connection_bytes: usize,
    next_id: AtomicU64,
    open: Mutex<HashMap<SocketAddr, Weak<Connection>>>,
}

impl Connections {
    pub(crate) fn new(per_connection_bytes: usize) -> Self {
        Self {
            per_connection_bytes,
            next_id: AtomicU64::new(1),
            open: Mutex::default(),
        }
    }

    /// The share of the connection from `peer`, shared by its streams and
    /// gone with the last of them. Without an address (a transport that
    /// cannot tell), each stream is a connection of its own.
    pub(crate) fn of(&self, peer: Option<SocketAddr>) -> Arc<Connection> {
        let Some(peer) = peer else {
            return self.fresh();
        };
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = open.get(&peer).and_then(Weak::upgrade) {
            return c;
        }
        // Forget closed connections now and then; the table stays as large
        // as the connections with streams open (bounded by the limits).
        if open.len() >= 64 && open.len().is_power_of_two() {
            open.retain(|_, c| c.strong_count() > 0);
        }
        let c = self.fresh();
        open.insert(peer, Arc::downgrade(&c));
        c
    }

    fn fresh(&self) -> Arc<Connection> {
        Arc::new(Connection {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            budget: Budget::new(self.per_connection_bytes),
        })
    }
}

/// A sample's shares: its connection's and the node's.
pub(crate) type Permits = (OwnedSemaphorePermit, OwnedSemaphorePermit);

/// Both budgets' units at once, if both have them now.
pub(crate) fn try_budget(own: &Budget, node: &Budget, mine: u32, all: u32) -> Option<Permits> {
    let own = Arc::clone(own.semaphore())
        .try_acquire_many_owned(mine)
        .ok()?;
    let shared = Arc::clone(node.semaphore())
        .try_acquire_many_owned(all)
        .ok()?;
    Some((own, shared))
}

/// Both budgets' units, waiting for them: the connection's first, so that a
/// connection over its share does not hold any of the node's meanwhile; then
/// the node's, those that hold least of their shares first.
pub(crate) async fn wait_budget(
    own: &Budget,
    node: &Budget,
    mine: u32,
    all: u32,
) -> Option<Permits> {
    let mine = Arc::clone(own.semaphore())
        .acquire_many_owned(mine)
        .await
        .ok()?;
    let shared = node.take_fairly(own.held(), all).await?;
    Some((mine, shared))
}

/// Gives back what `permit` holds beyond `units`. (An input never decodes
/// to more than its bound, so there is never less.)
pub(crate) fn shrink(permit: &mut OwnedSemaphorePermit, units: u32) {
    let excess = permit.num_permits().saturating_sub(units as usize);
    if excess > 0 {
        drop(permit.split(excess));
    }
}

/// The shares of the budgets that samples held until they ran, merged per
/// budget until given back: a release takes the semaphore's lock, so it is
/// paid once per group of batches rather than once per sample.
#[derive(Default)]
pub(crate) struct HeldBudgets {
    node: Option<OwnedSemaphorePermit>,
    /// One per connection (a group holds samples of a few).
    connections: Vec<OwnedSemaphorePermit>,
}

impl HeldBudgets {
    /// Keeps one sample's shares until `give_back`.
    pub(crate) fn keep(&mut self, (own, shared): Permits) {
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

    /// Gives every share back (dropping a permit frees its units).
    pub(crate) fn give_back(&mut self) {
        self.node = None;
        self.connections.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_kib_and_never_exceed_the_budget() {
        let b = Budget::new(10 * UNIT);
        assert_eq!(b.units(0), 1);
        assert_eq!(b.units(1), 1);
        assert_eq!(b.units(UNIT + 1), 2);
        assert_eq!(b.units(1 << 30), 10, "a huge input takes the whole budget");
        assert_eq!(b.semaphore().available_permits(), 10);
    }

    /// Polls `f` once.
    fn poll_once<F: std::future::Future + Unpin>(f: &mut F) -> Option<F::Output> {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match std::pin::Pin::new(f).poll(&mut cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        }
    }

    #[test]
    fn a_spent_budget_goes_first_to_the_waiter_that_holds_least() {
        let budget = Budget::new(8 * UNIT);
        let mut all = poll_once(&mut Box::pin(budget.take_fairly(0, 8)))
            .unwrap()
            .unwrap();
        // Waiting, in this order: two that hold much, then one that holds
        // little; and one that gives up.
        let mut heavy_a = Box::pin(budget.take_fairly(100, 4));
        let mut heavy_b = Box::pin(budget.take_fairly(100, 4));
        let mut gives_up = Box::pin(budget.take_fairly(0, 1));
        let mut light = Box::pin(budget.take_fairly(1, 1));
        for waiting in [&mut heavy_a, &mut heavy_b, &mut gives_up, &mut light] {
            assert!(poll_once(waiting).is_none());
        }
        drop(gives_up);
        // Units come back one at a time: the first waiter (heavy_a, on the
        // semaphore) needs four; once it has them, the light one goes next.
        for _ in 0..3 {
            drop(all.split(1));
            assert!(poll_once(&mut heavy_a).is_none());
        }
        drop(all.split(1));
        let a = poll_once(&mut heavy_a).unwrap().unwrap();
        drop(all.split(1));
        let l = poll_once(&mut light).unwrap().unwrap();
        assert_eq!((a.num_permits(), l.num_permits()), (4, 1));
        assert!(poll_once(&mut heavy_b).is_none());
        drop((all, a, l));
        assert_eq!(poll_once(&mut heavy_b).unwrap().unwrap().num_permits(), 4);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn streams_of_one_connection_share_its_budget_until_the_last_ends() {
        let connections = Connections::new(4 * UNIT);
        let a: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let b: SocketAddr = "10.0.0.1:5001".parse().unwrap();
        let first = connections.of(Some(a));
        let second = connections.of(Some(a));
        assert!(Arc::ptr_eq(&first, &second));
        assert_ne!(connections.of(Some(b)).id, first.id);
        let id = first.id;
        drop((first, second));
        // The address may be reused by a new connection: a fresh share.
        assert_ne!(connections.of(Some(a)).id, id);
        // No address: a share of its own.
        assert_ne!(connections.of(None).id, connections.of(None).id);
    }
}

/// Bytes of an unfinished message a stream holds without charge: one small
/// input split across transport frames never waits.
pub(crate) const UNFINISHED_FREE: usize = 64 << 10;

/// What a stream holds of a message still arriving (a gRPC message, a QUIC
/// frame), charged to the node's budget of such bytes beyond
/// [`UNFINISHED_FREE`]: when that budget is spent, the stream reads no more
/// (the transport's flow control holds its client back) until other
/// messages have been finished or dropped. Many streams each sending most
/// of a message and never the rest then hold that budget, not the host's
/// memory.
pub(crate) struct Unfinished {
    units: Arc<Semaphore>,
    total: u32,
    /// Units held now.
    charged: u32,
    /// Waiting for more: the acquisition and how many it asked for.
    waiting: Option<(Acquiring, u32)>,
}

type Acquiring = Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>;

impl std::fmt::Debug for Unfinished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Unfinished({} units)", self.charged)
    }
}

impl Unfinished {
    /// Charged to `budget`, the node's (one per node, shared by all streams).
    pub(crate) fn new(budget: &Budget) -> Self {
        Self {
            units: Arc::clone(budget.semaphore()),
            total: u32::try_from(budget.total).unwrap_or(u32::MAX),
            charged: 0,
            waiting: None,
        }
    }

    /// The stream holds `buffered` bytes of unfinished messages: `Ready` once
    /// they are paid for (what it holds beyond them given back), `Pending`
    /// while it waits for the budget. A budget that is closed charges nothing.
    pub(crate) fn poll_charge(&mut self, cx: &mut Context<'_>, buffered: usize) -> Poll<()> {
        loop {
            let over = buffered.saturating_sub(UNFINISHED_FREE);
            // At most the whole budget: any message the limits accept can
            // arrive, alone if need be.
            let need = u32::try_from(over.div_ceil(UNIT))
                .unwrap_or(u32::MAX)
                .min(self.total);
            if let Some((acquiring, n)) = &mut self.waiting {
                match acquiring.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(permit)) => {
                        permit.forget();
                        self.charged += *n;
                    }
                    Poll::Ready(Err(_)) => {
                        self.waiting = None;
                        return Poll::Ready(());
                    }
                }
                self.waiting = None;
                continue;
            }
            if need <= self.charged {
                let back = self.charged - need;
                if back > 0 {
                    self.units.add_permits(back as usize);
                    self.charged = need;
                }
                return Poll::Ready(());
            }
            let more = need - self.charged;
            let units = Arc::clone(&self.units);
            self.waiting = Some((Box::pin(units.acquire_many_owned(more)), more));
        }
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if self.charged > 0 {
            self.units.add_permits(self.charged as usize);
        }
    }
}

#[cfg(test)]
mod unfinished_tests {
    use super::*;

    #[tokio::test]
    async fn unfinished_messages_wait_for_the_nodes_budget_and_give_it_back() {
        let node = Budget::new(1 << 20);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let (mut a, mut b) = (Unfinished::new(&node), Unfinished::new(&node));
        // The free part costs nothing.
        assert!(a.poll_charge(&mut cx, UNFINISHED_FREE).is_ready());
        assert_eq!(node.held(), 0);
        assert!(a
            .poll_charge(&mut cx, UNFINISHED_FREE + (600 << 10))
            .is_ready());
        assert_eq!(node.held(), 600);
        // Another stream's unfinished message waits for what is left.
        assert!(b
            .poll_charge(&mut cx, UNFINISHED_FREE + (600 << 10))
            .is_pending());
        assert!(b
            .poll_charge(&mut cx, UNFINISHED_FREE + (600 << 10))
            .is_pending());
        // The first finishes its message: its bytes go back, the other goes on.
        assert!(a.poll_charge(&mut cx, 0).is_ready());
        assert!(b
            .poll_charge(&mut cx, UNFINISHED_FREE + (600 << 10))
            .is_ready());
        assert_eq!(node.held(), 600);
        // A message larger than the whole budget can still arrive, alone.
        drop(b);
        assert_eq!(node.held(), 0);
        assert!(a.poll_charge(&mut cx, 8 << 20).is_ready());
        assert_eq!(node.held(), 1024);
        drop(a);
        assert_eq!(node.held(), 0);
    }
}
