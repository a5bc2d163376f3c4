//! Decoded-input budgets: how many bytes of received, not yet run samples
//! the node holds, in total and for each connection. A sample is charged
//! when it is taken off its stream, before it is decoded, at the most its
//! frame may decode to, and cut down to its real size once decoded. A
//! reader that finds a budget spent stops reading its stream (the
//! transport's flow control then holds the client back) until samples have
//! run.
//!
//! The per-connection budget keeps one client from taking the node's whole
//! budget, and names the connection for the batcher's round robin.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::Semaphore;

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
}

impl Budget {
    pub(crate) fn new(bytes: usize) -> Self {
        let total = total_units(bytes).min(Semaphore::MAX_PERMITS);
        Self {
            units: Arc::new(Semaphore::new(total)),
            total,
        }
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
