//! The facts of the system that both ends (and the tests) share, apart from
//! the wire itself (the `proto` crate): each benchmark with the rules of its
//! round, the synthetic backend's deterministic answer, what a node name may
//! hold, what a host tells of itself, and the exit statuses of both
//! binaries.

#![warn(missing_docs)]

pub mod benchmarks;
pub mod exit;
pub mod host;
pub mod node_name;
pub mod synthetic;
