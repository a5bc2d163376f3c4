//! What a node is told to be: its name, benchmark, batching, codecs and
//! limits.

use std::time::Duration;

use crate::batcher::BatchPolicy;
use crate::codec;
use crate::limits::Limits;

/// A node's settings.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The node's name, as `StartSession` and the ready line report it.
    pub name: String,
    /// The model this node serves; `None` accepts any.
    pub model: Option<String>,
    /// How samples are grouped into the backend's batches.
    pub batch: BatchPolicy,
    /// Idle time after which a stream gets a heartbeat; `None`: never.
    pub heartbeat: Option<Duration>,
    /// On shutdown, how long open streams may take to answer the samples
    /// they already sent before they are cut.
    pub shutdown_grace: Duration,
    /// The output codec and the bound on decoded inputs.
    pub codecs: codec::NodeCodecs,
    /// What clients may make the node hold.
    pub limits: Limits,
}
