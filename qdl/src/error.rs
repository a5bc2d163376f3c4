//! Errors of the QDL. Every error about a node names it (`sut-node ADDR`, plus
//! `(name N)` once its session told us its name), so an operator can tell
//! which machine to look at.

/// Why a configuration could not be parsed or the QDL could not connect.
#[derive(Debug, thiserror::Error)]
pub enum QdlError {
    /// A `--sut` address that does not parse.
    #[error("invalid sut-node address {input:?}: {reason}")]
    Address {
        /// The address as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A node list that cannot be read or resolved: a `--sut-file` (or one
    /// of its lines), or a `dns://` name.
    #[error("{whence}: {reason}")]
    Discovery {
        /// The file, `FILE line N`, or the `dns://` entry.
        whence: String,
        /// What is wrong.
        reason: String,
    },
    /// A dispatch policy that does not parse or does not fit the nodes.
    #[error("invalid dispatch policy {input:?}: {reason}")]
    Policy {
        /// The policy as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Settings that cannot work (no nodes, zero connections...), or a
    /// connection task that failed inside the QDL.
    #[error("invalid QDL configuration: {0}")]
    Config(String),
    /// The QDL's own threads could not be started.
    #[error("cannot start the QDL's I/O runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// A node that cannot be reached (or whose TLS handshake fails).
    #[error("{node}: cannot connect: {reason}")]
    Connect {
        /// The node, as errors name it.
        node: String,
        /// Why, from the transport.
        reason: String,
    },
    /// A call to a node that failed or timed out.
    #[error("{node}: {step} failed: {reason}")]
    Rpc {
        /// The node, as errors name it.
        node: String,
        /// Which call (`StartSession`, `Name`, ...).
        step: &'static str,
        /// Why, from the transport or the node.
        reason: String,
    },
    /// A node that refused the session (wrong model or scenario, say).
    #[error("{node}: session refused: {reason}")]
    Refused {
        /// The node, as errors name it.
        node: String,
        /// The node's reason.
        reason: String,
    },
    /// A node whose backend is still loading: worth asking again
    /// (`Qdl::connect_when_ready`).
    #[error("{node}: not ready (its backend is still loading); retry once it reports ready")]
    NotReady {
        /// The node, as errors name it.
        node: String,
    },
    /// A node that speaks another version of the protocol.
    #[error(
        "{node}: protocol version mismatch: the node speaks version {node_version}, \
         this LoadGen node speaks version {ours}"
    )]
    Version {
        /// The node, as errors name it.
        node: String,
        /// The version it speaks.
        node_version: u32,
        /// The version this QDL speaks.
        ours: u32,
    },
    /// A node whose session cannot serve this run: codecs neither side can
    /// use, or a node name that is empty, too long or holds a character a
    /// node name may not hold.
    #[error("{node}: {reason}")]
    Incompatible {
        /// The node, as errors name it.
        node: String,
        /// What does not fit, and what to change.
        reason: String,
    },
    /// Two or more nodes with the same name: the summary could not tell
    /// them apart.
    #[error("sut-node names must be unique, but these are used more than once: {0}")]
    DuplicateNames(String),
}

/// A failure inside one transport, before the caller adds the node's label.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct TransportError(pub(crate) String);

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
