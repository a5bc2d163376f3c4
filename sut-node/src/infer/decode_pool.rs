//! The turns of the pool that decodes compressed inputs (one per core),
//! shared fairly by the node's connections.
//!
//! A turn goes to the waiting connection that will have had the fewest
//! bytes decoded once its next input is (fair queueing by bytes, counted
//! from when it last started waiting): a connection streaming inputs that
//! decode to the message limit gets as many bytes decoded as any other, not
//! as many turns, so a connection of small inputs waits for the decodes
//! under way, not behind every decode the others have queued. A connection
//! that waited for nothing banks no credit: it starts at the bytes of the
//! latest turn given.
//!
//! [`Schedule`] is the plain logic, handed each request and each decode's
//! real size; [`DecodePool`] the glue that parks the waiting tasks.
//!
//! Asked for turns by the streams' reader tasks; a turn is given back on the
//! blocking thread that ran its decode. It touches only its own schedule.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

/// Which waiting request gets each free turn.
#[derive(Debug)]
pub(crate) struct Schedule<W> {
    free: usize,
    conns: HashMap<u64, Conn<W>>,
    /// The connections with requests waiting, by their bytes with their
    /// next request's, then by connection number: the first is served next.
    order: BTreeSet<(u64, u64)>,
    /// The bytes of the connection served last, before that turn: where a
    /// connection that starts waiting begins.
    now: u64,
}

#[derive(Debug)]
struct Conn<W> {
    /// Bytes charged so far (a request at the bound its frame declares,
    /// corrected to the real size once decoded).
    bytes: u64,
    /// Its requests waiting, in order: (bytes asked, waiter).
    waiting: VecDeque<(u64, W)>,
    /// Its turns under way.
    running: usize,
}

impl<W> Conn<W> {
    /// Its place in `Schedule::order`, while it has requests waiting.
    fn key(&self, conn: u64) -> Option<(u64, u64)> {
        let (next, _) = self.waiting.front()?;
        Some((self.bytes.saturating_add(*next), conn))
    }
}

/// A turn given: to whom, for how many bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Grant<W> {
    pub(crate) conn: u64,
    pub(crate) bytes: u64,
    pub(crate) waiter: W,
}

impl<W> Schedule<W> {
    pub(crate) fn new(turns: usize) -> Self {
        Self {
            free: turns.max(1),
            conns: HashMap::new(),
            order: BTreeSet::new(),
            now: 0,
        }
    }

    /// Connection `conn` asks a turn to decode up to `bytes`; the turn is
    /// given at once if one is free.
    pub(crate) fn ask(&mut self, conn: u64, bytes: u64, waiter: W) -> Option<Grant<W>> {
        let now = self.now;
        let c = self.conns.entry(conn).or_insert_with(|| Conn {
            bytes: now,
            waiting: VecDeque::new(),
            running: 0,
        });
        if c.waiting.is_empty() {
            // Idle time earns nothing.
            c.bytes = c.bytes.max(now);
            c.waiting.push_back((bytes, waiter));
            self.order.extend(c.key(conn));
        } else {
            c.waiting.push_back((bytes, waiter));
        }
        self.next()
    }

    /// A turn of `conn` charged `charged` bytes has ended, having decoded
    /// `decoded` (at most `charged`): the turn goes to the next request.
    pub(crate) fn done(&mut self, conn: u64, charged: u64, decoded: u64) -> Option<Grant<W>> {
        self.free += 1;
        if let Some(c) = self.conns.get_mut(&conn) {
            // Its place among the waiting moves with its bytes.
            if let Some(key) = c.key(conn) {
                self.order.remove(&key);
            }
            c.bytes = c.bytes.saturating_sub(charged.saturating_sub(decoded));
            self.order.extend(c.key(conn));
            c.running = c.running.saturating_sub(1);
            if c.running == 0 && c.waiting.is_empty() {
                self.conns.remove(&conn);
            }
        }
        self.next()
    }

    /// A turn to the first waiting connection, if one is free.
    fn next(&mut self) -> Option<Grant<W>> {
        if self.free == 0 {
            return None;
        }
        let (_, conn) = self.order.pop_first()?;
        let c = self.conns.get_mut(&conn)?;
        let (bytes, waiter) = c.waiting.pop_front()?;
        self.free -= 1;
        self.now = self.now.max(c.bytes);
        c.bytes = c.bytes.saturating_add(bytes);
        c.running += 1;
        self.order.extend(c.key(conn));
        Some(Grant {
            conn,
            bytes,
            waiter,
        })
    }

    /// Turns free now.
    #[cfg(test)]
    fn free(&self) -> usize {
        self.free
    }
}

/// The decode pool's turns, for the node's readers.
pub(crate) struct DecodePool {
    schedule: Mutex<Schedule<oneshot::Sender<()>>>,
}

/// A turn of the pool: held while a decode runs, given back when dropped.
pub(crate) struct Turn {
    pool: Arc<DecodePool>,
    conn: u64,
    charged: u64,
    decoded: u64,
}

impl DecodePool {
    pub(crate) fn new(turns: usize) -> Self {
        Self {
            schedule: Mutex::new(Schedule::new(turns)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Schedule<oneshot::Sender<()>>> {
        self.schedule.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a turn of connection `conn`, to decode up to `bytes`.
    pub(crate) async fn turn(self: &Arc<Self>, conn: u64, bytes: u64) -> Turn {
        let (tx, rx) = oneshot::channel();
        let granted = self.lock().ask(conn, bytes, tx);
        let mut waiting = Waiting {
            pool: Arc::clone(self),
            conn,
            bytes,
            rx: Some(rx),
        };
        if let Some(grant) = granted {
            self.hand_on(grant);
        }
        if let Some(rx) = waiting.rx.as_mut() {
            // Fails only if the pool is gone (the node stopping).
            let _ = rx.await;
        }
        waiting.rx = None;
        Turn {
            pool: Arc::clone(self),
            conn,
            charged: bytes,
            // Until decoded, all of it.
            decoded: bytes,
        }
    }

    /// Gives a granted turn to its waiter; one that stopped waiting passes
    /// it on at once.
    fn hand_on(&self, mut grant: Grant<oneshot::Sender<()>>) {
        loop {
            if grant.waiter.send(()).is_ok() {
                return;
            }
            match self.lock().done(grant.conn, grant.bytes, 0) {
                Some(next) => grant = next,
                None => return,
            }
        }
    }
}

/// A request waiting for its turn; if the wait is given up (its future
/// dropped), a turn granted meanwhile goes on to the next request.
struct Waiting {
    pool: Arc<DecodePool>,
    conn: u64,
    bytes: u64,
    rx: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else {
            return;
        };
        // Closed first: no turn can be granted to it after the check.
        rx.close();
        if rx.try_recv().is_ok() {
            let next = self.pool.lock().done(self.conn, self.bytes, 0);
            if let Some(next) = next {
                self.pool.hand_on(next);
            }
        }
    }
}

impl Turn {
    /// The decode produced `bytes`: the connection is charged that, not the
    /// bound it asked for.
    pub(crate) fn decoded(&mut self, bytes: usize) {
        self.decoded = (bytes as u64).min(self.charged);
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let next = self.pool.lock().done(self.conn, self.charged, self.decoded);
        if let Some(next) = next {
            self.pool.hand_on(next);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `turns` turns of a schedule in which each connection always
    /// has requests waiting (`sizes`: the bytes of each one's requests),
    /// the oldest turn ending first; returns the bytes each decoded.
    fn busy(turns: usize, sizes: &[u64], grants: usize) -> Vec<u64> {
        let mut s = Schedule::new(turns);
        let mut running = VecDeque::new();
        for (conn, &size) in sizes.iter().enumerate() {
            for _ in 0..2 * turns {
                if let Some(g) = s.ask(conn as u64, size, ()) {
                    running.push_back(g);
                }
            }
        }
        let mut decoded = vec![0; sizes.len()];
        for _ in 0..grants {
            let g = running.pop_front().expect("a turn under way");
            decoded[g.conn as usize] += g.bytes;
            // It asks again at once, as a busy stream does.
            running.extend(s.ask(g.conn, g.bytes, ()));
            running.extend(s.done(g.conn, g.bytes, g.bytes));
        }
        decoded
    }

    #[test]
    fn busy_connections_get_the_same_bytes_decoded_not_the_same_turns() {
        // Eight connections of 4 MiB bombs and one of 150 KiB inputs.
        let mut sizes = vec![4 << 20; 8];
        sizes.push(150 << 10);
        let decoded = busy(2, &sizes, 5000);
        let (least, most) = (decoded.iter().min(), decoded.iter().max());
        let (least, most) = (*least.unwrap() as f64, *most.unwrap() as f64);
        assert!(least > 0.9 * most, "{decoded:?}");
    }

    #[test]
    fn a_light_connection_waits_only_for_the_decodes_under_way() {
        let mut s = Schedule::new(2);
        // A bomb stream has two turns and eight more requests queued.
        let mut under_way: Vec<_> = (0..10).filter_map(|_| s.ask(1, 4 << 20, "bomb")).collect();
        assert_eq!((under_way.len(), s.free()), (2, 0));
        // A small input arrives: it is next, before the queued bombs.
        assert_eq!(s.ask(2, 150 << 10, "small"), None);
        let first = under_way.remove(0);
        let next = s.done(first.conn, first.bytes, first.bytes).unwrap();
        assert_eq!((next.conn, next.waiter), (2, "small"));
        // After it, the bomb stream again.
        let next = s.done(2, 150 << 10, 150 << 10).unwrap();
        assert_eq!((next.conn, next.waiter), (1, "bomb"));
    }

    #[test]
    fn idle_time_banks_no_credit_and_small_decodes_are_charged_as_such() {
        let mut s = Schedule::new(1);
        // Connection 1 decodes a lot alone.
        for _ in 0..100 {
            let g = s.ask(1, 1000, 1).unwrap();
            assert!(s.done(g.conn, g.bytes, g.bytes).is_none());
        }
        // Connection 2, idle until now, then both always waiting: 2 starts
        // where 1 was, so they alternate instead of 2 taking 100 turns.
        let g = s.ask(1, 1000, 1).unwrap();
        assert_eq!(s.ask(1, 1000, 1), None);
        assert_eq!(s.ask(2, 1000, 2), None);
        assert_eq!(s.ask(2, 1000, 2), None);
        let mut order = vec![];
        let mut g = g;
        for _ in 0..3 {
            order.push(g.waiter);
            let conn = g.conn;
            g = s.done(conn, g.bytes, g.bytes).unwrap();
            // Each asks again.
            assert_eq!(s.ask(conn, 1000, conn), None);
        }
        order.push(g.waiter);
        assert_eq!(order, [1, 2, 1, 2]);

        // A request charged at its bound and decoded to less is charged
        // what it decoded: a connection of such frames is not held back.
        let mut s = Schedule::new(1);
        let g = s.ask(1u64, 1 << 20, 1u64).unwrap();
        assert_eq!(s.ask(1, 1000, 1), None);
        assert_eq!(s.ask(2, 1000, 2), None);
        assert_eq!(s.ask(2, 1000, 2), None);
        // It decoded 10 bytes: 1 would have 1010 after its next, 2 1000.
        let g = s.done(g.conn, g.bytes, 10).unwrap();
        assert_eq!(g.waiter, 2);
        // 2 would have 2000: 1 goes first, which it would not had it been
        // charged its bound.
        assert_eq!(s.done(g.conn, g.bytes, g.bytes).unwrap().waiter, 1);
    }

    #[tokio::test]
    async fn a_wait_given_up_passes_its_turn_on() {
        let pool = Arc::new(DecodePool::new(1));
        let held = pool.turn(1, 100).await;
        // Connection 2 waits, then gives up; connection 3 waits.
        let mut given_up = Box::pin(pool.turn(2, 100));
        assert!(futures_poll(&mut given_up).is_none());
        let mut waiting = Box::pin(pool.turn(3, 100));
        assert!(futures_poll(&mut waiting).is_none());
        drop(given_up);
        drop(held);
        let turn = futures_poll(&mut waiting).expect("the turn went on to 3");
        assert_eq!(turn.conn, 3);
        drop(turn);
        // Every turn is back.
        assert_eq!(pool.lock().free(), 1);
        assert!(pool.lock().conns.is_empty());
    }

    /// Polls `f` once.
    fn futures_poll<F: std::future::Future + Unpin>(f: &mut F) -> Option<F::Output> {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match std::pin::Pin::new(f).poll(&mut cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn every_turn_comes_back_from_connections_decoding_at_once() {
        let pool = Arc::new(DecodePool::new(2));
        let mut tasks = tokio::task::JoinSet::new();
        for conn in 0..9u64 {
            let pool = Arc::clone(&pool);
            tasks.spawn(async move {
                let mut decodes = Vec::new();
                for i in 0..500u64 {
                    let bytes = if conn == 0 { 150 << 10 } else { 64 << 20 };
                    let mut turn = pool.turn(conn, bytes).await;
                    decodes.push(tokio::task::spawn_blocking(move || {
                        turn.decoded(if i % 3 == 0 { 10 } else { bytes as usize });
                    }));
                }
                for d in decodes {
                    d.await.unwrap();
                }
            });
        }
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
        let s = pool.lock();
        assert_eq!((s.free(), s.conns.len(), s.order.len()), (2, 0, 0));
    }
}
