//! The QDL's traffic counters and answer timings, readable while a run goes
//! on (progress lines, metrics scrapes) and after it (the run's report).

use std::sync::Arc;

use crate::breakdown::{Breakdown, Timings};
use crate::config::NodeAddr;
use crate::conn::{Conn, Counters};

/// Traffic of one connection, for the run's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionStats {
    /// The node's address, with the transport really used.
    pub node: NodeAddr,
    /// The name the node gave in its session.
    pub node_name: String,
    /// Which of the node's connections (0-based).
    pub connection: usize,
    /// What it carried so far.
    pub counters: Counters,
}

/// Per-connection traffic since `connect`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QdlStats {
    /// Node by node, each node's connections in order.
    pub connections: Vec<ConnectionStats>,
}

impl QdlStats {
    /// The sum over all connections.
    pub fn total(&self) -> Counters {
        let mut t = Counters::default();
        for c in &self.connections {
            t += c.counters;
        }
        t
    }
}

/// The QDL's counters and timings, held apart from the QDL: a clone can go to
/// another thread (metrics, progress) and be read after the QDL is gone.
#[derive(Clone)]
pub struct QdlView {
    /// (address, name) of each node.
    pub(crate) nodes: Vec<(NodeAddr, String)>,
    /// Connection `c` belongs to node `c / per_node`.
    pub(crate) conns: Vec<Arc<Conn>>,
    pub(crate) per_node: usize,
}

impl QdlView {
    /// Traffic per connection so far.
    pub fn stats(&self) -> QdlStats {
        QdlStats {
            connections: self
                .conns
                .iter()
                .enumerate()
                .map(|(c, conn)| {
                    let (addr, name) = &self.nodes[c / self.per_node];
                    ConnectionStats {
                        node: addr.clone(),
                        node_name: name.clone(),
                        connection: c % self.per_node,
                        counters: conn.counters(),
                    }
                })
                .collect(),
        }
    }

    /// Where the answers' time went so far: per node and over the run.
    pub fn breakdown(&self) -> Breakdown {
        let mut b = Breakdown::default();
        for (n, (addr, name)) in self.nodes.iter().enumerate() {
            let mut t = Timings::default();
            for conn in &self.conns[n * self.per_node..(n + 1) * self.per_node] {
                t.add(conn.timings());
            }
            b.overall.merge(&t);
            b.nodes.push((name.clone(), addr.to_string(), t));
        }
        b
    }
}
