//! What the node's Infer streams share: the settings, the batcher (started
//! here, with its worker running the backend) and the budgets. Made once,
//! when the node starts; read by every stream's reader and writer task.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::batch::{batch_runner, Job};
use super::budget::{Budget, Connections, NodeBudget};
use super::decode_pool::DecodePool;
use crate::backend::Backend;
use crate::batcher::Batcher;
use crate::node_config::NodeConfig;

/// What the node's Infer streams share: the settings, the batcher and the
/// budgets.
pub(crate) struct DataPath {
    pub(crate) config: NodeConfig,
    /// Samples received and not yet answered, all streams together.
    pub(crate) outstanding: Arc<AtomicU64>,
    pub(crate) batcher: Batcher<Job>,
    /// Becomes true when the node shuts down.
    pub(crate) stop: tokio::sync::watch::Receiver<bool>,
    /// The decoded-bytes budget of the samples received and not yet run,
    /// those being decoded included (`Limits::max_decoded_bytes`).
    pub(crate) decoded: NodeBudget,
    /// The bytes the streams hold of messages still arriving, beyond a
    /// small free part each (`budget::Unfinished`): a budget of its own, as
    /// large as the decoded one.
    pub(crate) unfinished: Budget,
    /// Each connection's share of it (`Limits::max_decoded_bytes_per_connection`).
    pub(crate) connections: Connections,
    /// Turns to decode compressed inputs, one per core, shared fairly by
    /// the connections; one stream may use them all.
    pub(super) decoding: Arc<DecodePool>,
    pub(super) decoding_turns: usize,
}

impl DataPath {
    /// Starts the batcher's worker, which runs `backend`.
    pub(crate) fn start(
        config: NodeConfig,
        backend: Arc<dyn Backend>,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> std::io::Result<Self> {
        let outstanding = Arc::new(AtomicU64::new(0));
        // Enough to keep full batches coming, small enough to push back on a
        // client that sends faster than the backend answers.
        let capacity = (4 * config.batch.max_batch_size).max(1024);
        let batcher = Batcher::start(
            config.batch,
            capacity,
            batch_runner(backend, Arc::clone(&outstanding)),
        )?;
        let limits = config.limits;
        let decoding_turns = std::thread::available_parallelism().map_or(2, |n| n.get());
        Ok(Self {
            config,
            outstanding,
            batcher,
            stop,
            decoded: NodeBudget::new(limits.max_decoded_bytes),
            unfinished: Budget::new(limits.max_decoded_bytes),
            connections: Connections::new(limits.max_decoded_bytes_per_connection),
            decoding: Arc::new(DecodePool::new(decoding_turns)),
            decoding_turns,
        })
    }
}
