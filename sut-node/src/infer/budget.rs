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
//! is spent, the connections that wait for it are served fairly by bytes
//! ([`NodeBudget`]): a client whose few small inputs are all it holds does
//! not wait behind inputs of other clients charged at the message limit.
//!
//! Runs in each stream's reader task (taking shares, waiting for them) and
//! on the batcher's worker thread (giving them back once samples have run);
//! it touches only the budgets and their waiting lists.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

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

/// A budget of decoded bytes: a semaphore counted in KiB, first come, first
/// served (one connection's streams, or the node's unfinished messages).
#[derive(Debug)]
pub(crate) struct Budget {
    units: Arc<Semaphore>,
    total: usize,
}

impl Budget {
    pub(crate) fn new(bytes: usize) -> Self {
        let total = total_units(bytes).min(Semaphore::MAX_PERMITS);
        Self {
            units: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// Units held now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.total.saturating_sub(self.units.available_permits())
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

/// The node's budget of decoded bytes, shared by every connection and given
/// out fairly once spent.
///
/// Each waiting request is stamped on arrival with the units its connection
/// will have been given once it is served, counted from the later of its
/// connection's previous stamp and the start of the latest grant (fair
/// queueing by bytes, as the decode pool gives its turns). The request with
/// the lowest stamp is served once all its units are free, and nobody
/// behind it before. No waiter sits on units it cannot use yet (as a
/// waiter parked on a semaphore would, taking each unit given back), so a
/// request charged at the message limit does not keep the small inputs of
/// other connections waiting while its units come back one by one; nor do
/// they starve it: its turn comes once they have been given as many bytes.
#[derive(Debug)]
pub(crate) struct NodeBudget {
    pool: Arc<Mutex<Pool>>,
    total: usize,
}

#[derive(Debug)]
struct Pool {
    free: usize,
    /// The waiting requests, by stamp, then arrival: the first goes next.
    waiting: BTreeMap<(u64, u64), Request>,
    /// Each connection's latest stamp, while it is later than `now`.
    stamps: HashMap<u64, u64>,
    /// Where the latest grant started: a connection that waited for nothing
    /// starts there (idle time earns no credit).
    now: u64,
    arrivals: u64,
}

#[derive(Debug)]
struct Request {
    start: u64,
    units: usize,
    grant: oneshot::Sender<Share>,
}

fn lock(pool: &Mutex<Pool>) -> MutexGuard<'_, Pool> {
    pool.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Pool {
    /// The free units to the first waiters, for as long as the first fits.
    fn serve(&mut self, pool: &Arc<Mutex<Pool>>) {
        while let Some(first) = self.waiting.first_entry() {
            if first.get().units > self.free {
                return;
            }
            let request = first.remove();
            self.free -= request.units;
            self.now = self.now.max(request.start);
            let now = self.now;
            self.stamps.retain(|_, stamp| *stamp > now);
            let share = Share {
                pool: Arc::clone(pool),
                units: request.units,
            };
            if let Err(mut unsent) = request.grant.send(share) {
                // Its waiter has gone: the units stay free (taken back here,
                // so that dropping the share does not lock the pool again).
                self.free += std::mem::take(&mut unsent.units);
            }
        }
    }
}

impl NodeBudget {
    pub(crate) fn new(bytes: usize) -> Self {
        let total = total_units(bytes);
        Self {
            pool: Arc::new(Mutex::new(Pool {
                free: total,
                waiting: BTreeMap::new(),
                stamps: HashMap::new(),
                now: 0,
                arrivals: 0,
            })),
            total,
        }
    }

    /// Units held now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.total.saturating_sub(lock(&self.pool).free)
    }

    /// The units `len` bytes take: at most the whole budget, so that any
    /// input the limits accept can run, alone if need be.
    pub(crate) fn units(&self, len: usize) -> usize {
        len.div_ceil(UNIT).clamp(1, self.total)
    }

    /// `units` at once, if they are free and nobody waits for any.
    pub(crate) fn try_take(&self, units: usize) -> Option<Share> {
        let mut pool = lock(&self.pool);
        if !pool.waiting.is_empty() || pool.free < units {
            return None;
        }
        pool.free -= units;
        Some(Share {
            pool: Arc::clone(&self.pool),
            units,
        })
    }

    /// `units` for connection `conn`, in its fair turn (see [`NodeBudget`]).
    /// `None` only if the budget has gone.
    pub(crate) async fn take(&self, conn: u64, units: usize) -> Option<Share> {
        // More than the whole budget would never be served.
        let units = units.min(self.total);
        let (tx, rx) = oneshot::channel();
        let key = {
            let mut pool = lock(&self.pool);
            let start = pool.stamps.get(&conn).copied().unwrap_or(0).max(pool.now);
            let stamp = start.saturating_add(units as u64);
            pool.stamps.insert(conn, stamp);
            pool.arrivals += 1;
            let key = (stamp, pool.arrivals);
            let request = Request {
                start,
                units,
                grant: tx,
            };
            pool.waiting.insert(key, request);
            // It may be first, and fit.
            pool.serve(&self.pool);
            key
        };
        let mut waiting = Waiting {
            pool: &self.pool,
            key,
            rx: Some(rx),
        };
        let share = waiting.rx.as_mut()?.await.ok();
        waiting.rx = None;
        share
    }
}

/// A request waiting for its share: dropped before it is served, it leaves
/// the queue (and those behind it may go).
struct Waiting<'a> {
    pool: &'a Arc<Mutex<Pool>>,
    key: (u64, u64),
    rx: Option<oneshot::Receiver<Share>>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let Some(rx) = self.rx.take() else {
            return;
        };
        {
            let mut pool = lock(self.pool);
            if pool.waiting.remove(&self.key).is_some() {
                pool.serve(self.pool);
            }
        }
        // A share granted meanwhile goes back as `rx` drops, the pool unlocked.
        drop(rx);
    }
}

/// Units of the node's budget, given back when dropped.
#[derive(Debug)]
pub(crate) struct Share {
    pool: Arc<Mutex<Pool>>,
    units: usize,
}

impl Share {
    /// Units held.
    #[cfg(test)]
    fn units(&self) -> usize {
        self.units
    }

    /// Gives back what it holds beyond `units`. (An input never decodes to
    /// more than its bound, so there is never less.)
    pub(crate) fn shrink(&mut self, units: usize) {
        let excess = self.units.saturating_sub(units);
        if excess > 0 {
            self.units -= excess;
            give_back(&self.pool, excess);
        }
    }

    /// Adds `other`'s units to these; `other` back if it is a share of
    /// another budget.
    fn merge(&mut self, mut other: Share) -> Result<(), Share> {
        if !Arc::ptr_eq(&self.pool, &other.pool) {
            return Err(other);
        }
        self.units += std::mem::take(&mut other.units);
        Ok(())
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        if self.units > 0 {
            give_back(&self.pool, self.units);
        }
    }
}

fn give_back(pool: &Arc<Mutex<Pool>>, units: usize) {
    let mut p = lock(pool);
    p.free += units;
    p.serve(pool);
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
pub(crate) type Permits = (OwnedSemaphorePermit, Share);

/// Both budgets' units at once, if both have them now (and nobody waits
/// for the node's).
pub(crate) fn try_budget(
    connection: &Connection,
    node: &NodeBudget,
    mine: u32,
    all: usize,
) -> Option<Permits> {
    let own = Arc::clone(connection.budget.semaphore())
        .try_acquire_many_owned(mine)
        .ok()?;
    let shared = node.try_take(all)?;
    Some((own, shared))
}

/// Both budgets' units, waiting for them: the connection's first, so that a
/// connection over its share does not hold any of the node's meanwhile; then
/// the node's, in the connection's fair turn.
pub(crate) async fn wait_budget(
    connection: &Connection,
    node: &NodeBudget,
    mine: u32,
    all: usize,
) -> Option<Permits> {
    let mine = Arc::clone(connection.budget.semaphore())
        .acquire_many_owned(mine)
        .await
        .ok()?;
    let shared = node.take(connection.id, all).await?;
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
/// budget until given back: a release takes the budget's lock, so it is
/// paid once per group of batches rather than once per sample.
#[derive(Default)]
pub(crate) struct HeldBudgets {
    node: Option<Share>,
    /// One per connection (a group holds samples of a few).
    connections: Vec<OwnedSemaphorePermit>,
}

impl HeldBudgets {
    /// Keeps one sample's shares until `give_back`.
    pub(crate) fn keep(&mut self, (own, shared): Permits) {
        match &mut self.node {
            Some(all) => {
                // (A share of another budget replaces it: dropping the
                // previous one gives it back.)
                if let Err(other) = all.merge(shared) {
                    self.node = Some(other);
                }
            }
            None => self.node = Some(shared),
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

    /// Gives every share back (dropping a share frees its units).
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
    fn a_request_at_the_limit_does_not_hold_back_small_ones_as_units_come_back() {
        let budget = NodeBudget::new(100 * UNIT);
        assert_eq!(
            budget.units(1 << 30),
            100,
            "a huge input takes the whole budget"
        );
        let mut all = budget.try_take(100).unwrap();
        // Connection 1 waits for the whole budget (an input charged at the
        // message limit), then connection 2 for one unit.
        let mut large = Box::pin(budget.take(1, 100));
        let mut small = Box::pin(budget.take(2, 1));
        assert!(poll_once(&mut large).is_none());
        assert!(poll_once(&mut small).is_none());
        // Nobody takes units past a waiter, even when they are free.
        all.shrink(99);
        assert!(budget.try_take(1).is_none());
        // The one unit given back goes to the small request.
        let s = poll_once(&mut small).unwrap().unwrap();
        assert_eq!(s.units(), 1);
        assert!(poll_once(&mut large).is_none());
        drop(all);
        assert!(poll_once(&mut large).is_none(), "one unit is still held");
        drop(s);
        assert_eq!(poll_once(&mut large).unwrap().unwrap().units(), 100);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn a_large_request_is_served_once_the_others_have_had_as_many_bytes() {
        let budget = NodeBudget::new(10 * UNIT);
        let hold = budget.try_take(9).unwrap();
        let mut large = Box::pin(budget.take(1, 10));
        assert!(poll_once(&mut large).is_none());
        // The free unit goes to connection 2, again and again, until it has
        // been given as many bytes as connection 1 waits for.
        for _ in 0..9 {
            let s = poll_once(&mut Box::pin(budget.take(2, 1)))
                .unwrap()
                .unwrap();
            drop(s);
        }
        let mut tenth = Box::pin(budget.take(2, 1));
        assert!(poll_once(&mut tenth).is_none(), "it is connection 1's turn");
        drop(hold);
        let l = poll_once(&mut large).unwrap().unwrap();
        assert!(poll_once(&mut tenth).is_none());
        drop(l);
        assert_eq!(poll_once(&mut tenth).unwrap().unwrap().units(), 1);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn a_waiter_that_gives_up_lets_those_behind_it_go_and_holds_nothing() {
        let budget = NodeBudget::new(10 * UNIT);
        let all = budget.try_take(10).unwrap();
        let mut first = Box::pin(budget.take(1, 8));
        let mut second = Box::pin(budget.take(2, 9));
        assert!(poll_once(&mut first).is_none());
        assert!(poll_once(&mut second).is_none());
        drop(all);
        // First was served (its share sent), but gives up before taking it.
        drop(first);
        assert_eq!(budget.held(), 9, "its share came back, and went on");
        assert_eq!(poll_once(&mut second).unwrap().unwrap().units(), 9);
        // One that gives up while it waits leaves the queue.
        let all = budget.try_take(10).unwrap();
        let mut gives_up = Box::pin(budget.take(3, 10));
        let mut behind = Box::pin(budget.take(4, 10));
        assert!(poll_once(&mut gives_up).is_none());
        assert!(poll_once(&mut behind).is_none());
        drop(all);
        drop(gives_up);
        assert_eq!(poll_once(&mut behind).unwrap().unwrap().units(), 10);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn shares_merge_per_budget_and_go_back_when_dropped() {
        let (node, other) = (NodeBudget::new(10 * UNIT), NodeBudget::new(10 * UNIT));
        let mut a = node.try_take(3).unwrap();
        a.merge(node.try_take(2).unwrap()).unwrap();
        assert_eq!(a.units(), 5);
        let foreign = a.merge(other.try_take(4).unwrap()).unwrap_err();
        assert_eq!((a.units(), foreign.units()), (5, 4));
        a.shrink(1);
        assert_eq!((node.held(), other.held()), (1, 4));
        drop((a, foreign));
        assert_eq!((node.held(), other.held()), (0, 0));
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
