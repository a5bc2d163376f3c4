//! Errors of the QDL. Every error about a node names it (`sut-node ADDR`, plus
//! `(name N)` once its session told us its name), so an operator can tell
//! which machine to look at.

/// Why a configuration could not be parsed or the QDL could not connect.
#[derive(Debug, thiserror::Error)]
pub enum QdlError {
    #[error("invalid sut-node address {input:?}: {reason}")]
    Address { input: String, reason: String },
    #[error("invalid dispatch policy {input:?}: {reason}")]
    Policy { input: String, reason: String },
    #[error("invalid QDL configuration: {0}")]
    Config(String),
    #[error("cannot start the QDL's I/O runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("{node}: cannot connect: {reason}")]
    Connect { node: String, reason: String },
    #[error("{node}: {step} failed: {reason}")]
    Rpc {
        node: String,
        step: &'static str,
        reason: String,
    },
    #[error("{node}: session refused: {reason}")]
    Refused { node: String, reason: String },
    #[error("{node}: not ready (its backend is still loading); retry once it reports ready")]
    NotReady { node: String },
    #[error(
        "{node}: protocol version mismatch: the node speaks version {node_version}, \
         this LoadGen node speaks version {ours}"
    )]
    Version {
        node: String,
        node_version: u32,
        ours: u32,
    },
    #[error("{node}: {reason}")]
    Incompatible { node: String, reason: String },
    #[error("sut-node names must be unique, but these are used more than once: {0}")]
    DuplicateNames(String),
}

/// A failure inside one transport, before the caller adds the node's label.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct TransportError(pub String);

impl TransportError {
    /// The error and its whole source chain: tonic's top-level messages
    /// ("transport error") alone do not say what went wrong.
    pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> Self {
        let mut text = e.to_string();
        let mut cur = e.source();
        while let Some(s) = cur {
            let msg = s.to_string();
            if !text.contains(&msg) {
                text.push_str(": ");
                text.push_str(&msg);
            }
            cur = s.source();
        }
        Self(text)
    }
}
