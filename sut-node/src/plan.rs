//! A node, prepared once from its options (the binary's flags and `--config`
//! file, or any other front end): everything `serve` needs, resolved and
//! checked before anything binds or loads.

use crate::backend::BackendSpec;
use crate::bind::ListenPlan;
use crate::node_config::NodeConfig;

/// One node, ready to start.
#[derive(Debug, Clone)]
pub struct ServePlan {
    /// Its name, benchmark, batching, codecs and limits.
    pub node: NodeConfig,
    /// The backend it runs.
    pub backend: BackendSpec,
    /// Where and how it listens.
    pub listen: ListenPlan,
    /// Where its Prometheus page is served (`host:port`), if anywhere.
    pub metrics: Option<String>,
    /// The OTLP collector its spans go to, if any.
    pub otlp: Option<String>,
    /// Threads of its network runtime; `None`: one per core.
    pub threads: Option<usize>,
}
