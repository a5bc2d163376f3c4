//! Opening the connections: every node's sessions started concurrently, and
//! what a session must agree to (protocol version, codecs, a printable and
//! unique node name) before any sample is sent.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use proto::codec::wire_name;
use proto::tls::ClientTls;
use proto::{Codec, SessionReply, SessionRequest, PROTOCOL_VERSION};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::config::NodeAddr;
use crate::conn;
use crate::error::QdlError;
use crate::transport::{InFlight, Inbound, Link, Outgoing, Queued};

/// One connection, its session accepted and its data stream open.
pub(crate) struct Opened {
    pub(crate) link: Link,
    pub(crate) session: SessionReply,
    pub(crate) queue: mpsc::UnboundedSender<Queued>,
    pub(crate) inbound: Inbound,
    pub(crate) window: Arc<InFlight>,
}

/// How messages and errors name a node.
pub(crate) fn label(addr: &NodeAddr, name: Option<&str>) -> String {
    match name {
        Some(n) => format!("sut-node {addr} (name {n})"),
        None => format!("sut-node {addr}"),
    }
}

/// The largest message accepted from a node, so that the answer limit holds
/// while receiving: one answer of `max_answer_bytes` (a node packs smaller
/// ones into messages of about 1 MiB), plus framing and codec overhead.
pub(crate) fn max_message(max_answer_bytes: usize) -> usize {
    max_answer_bytes.max(1 << 20).saturating_add(64 << 10)
}

/// Opens every connection concurrently; the first failure wins (the others
/// are cancelled).
pub(crate) async fn open_all(
    nodes: Vec<NodeAddr>,
    per_node: usize,
    request: SessionRequest,
    input_codec: Codec,
    timeout: Duration,
    tls: Option<Arc<ClientTls>>,
    limits: StreamLimits,
) -> Result<Vec<Opened>, QdlError> {
    let mut set = JoinSet::new();
    for (n, addr) in nodes.iter().enumerate() {
        for k in 0..per_node {
            let (addr, request, tls) = (addr.clone(), request.clone(), tls.clone());
            set.spawn(async move {
                let r =
                    open_one(&addr, request, input_codec, timeout, tls.as_deref(), limits).await;
                (n * per_node + k, r)
            });
        }
    }
    let mut opened: Vec<Option<Opened>> = (0..nodes.len() * per_node).map(|_| None).collect();
    while let Some(done) = set.join_next().await {
        match done {
            Ok((c, r)) => opened[c] = Some(r?),
            Err(e) => return Err(QdlError::Config(format!("a connection task failed: {e}"))),
        }
    }
    opened
        .into_iter()
        .map(|o| o.ok_or_else(|| QdlError::Config("a connection was not opened".into())))
        .collect()
}

async fn open_one(
    addr: &NodeAddr,
    request: SessionRequest,
    input_codec: Codec,
    timeout: Duration,
    tls: Option<&ClientTls>,
    limits: StreamLimits,
) -> Result<Opened, QdlError> {
    let late = |what: &str| format!("no {what} within {timeout:?}");
    let rpc_err = |node: &str, step: &'static str, reason: String| QdlError::Rpc {
        node: node.to_string(),
        step,
        reason,
    };
    let mut refusals = Refusals::default();
    let (link, session) = loop {
        match start(addr, request.clone(), timeout, tls, limits).await {
            Err(e) if refused_connection(&e) => match refusals.next_wait() {
                Some(wait) => tokio::time::sleep(wait).await,
                None => return Err(refusals.explained(e)),
            },
            r => break r?,
        }
    };
    // A name that is refused below stays out of every message.
    let node = match check_node_name(&session.node_name) {
        Ok(()) => label(addr, Some(&session.node_name)),
        Err(_) => label(addr, None),
    };
    check_session(&node, &session, input_codec)?;

    let (queue, queued) = mpsc::unbounded_channel();
    let window = Arc::new(InFlight::new(limits.max_in_flight));
    let outgoing = Outgoing::new(queued, window.clone());
    let inbound = match tokio::time::timeout(timeout, link.open(outgoing)).await {
        Ok(Ok(i)) => i,
        Ok(Err(e)) => return Err(rpc_err(&node, "opening the Infer stream", e.0)),
        Err(_) => return Err(rpc_err(&node, "opening the Infer stream", late("reply"))),
    };
    Ok(Opened {
        link,
        session,
        queue,
        inbound,
        window,
    })
}

/// Connects to the node and starts a session on the connection.
async fn start(
    addr: &NodeAddr,
    request: SessionRequest,
    timeout: Duration,
    tls: Option<&ClientTls>,
    limits: StreamLimits,
) -> Result<(Link, SessionReply), QdlError> {
    let node = label(addr, None);
    let late = |what: &str| format!("no {what} within {timeout:?}");
    let connect = Link::connect(addr, tls, timeout, limits.max_message);
    let link = match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(l)) => l,
        Ok(Err(e)) => return Err(QdlError::Connect { node, reason: e.0 }),
        Err(_) => {
            return Err(QdlError::Connect {
                node,
                reason: late("connection"),
            })
        }
    };
    let reason = match tokio::time::timeout(timeout, link.start_session(request)).await {
        Ok(Ok(session)) => return Ok((link, session)),
        Ok(Err(e)) => e.0,
        Err(_) => late("reply"),
    };
    Err(QdlError::Rpc {
        node,
        step: "StartSession",
        reason,
    })
}

/// What a connection the node closed at once, or refused, looks like from
/// here: a node at its connection limits says so (gRPC: RESOURCE_EXHAUSTED
/// and why; QUIC: the transport's refusal), a node restarting refuses or
/// resets. Worth a few more tries.
fn refused_connection(e: &QdlError) -> bool {
    let reason = match e {
        QdlError::Connect { reason, .. } => reason,
        QdlError::Rpc {
            step: "StartSession",
            reason,
            ..
        } => reason,
        _ => return false,
    };
    let reason = reason.to_ascii_lowercase();
    [
        NODE_REFUSAL,
        "refused to accept a new connection",
        "connection refused",
        "connection reset",
        "connection closed",
        "broken pipe",
        // An HTTP/2 GOAWAY without an error: a node closing gracefully.
        "connection error received: not a result of an error",
    ]
    .iter()
    .any(|m| reason.contains(m))
}

/// How a node at its connection limits begins the reason it gives.
const NODE_REFUSAL: &str = "sut-node refused the connection";

/// The waits between the tries of a connection the node refuses: 0.1 s,
/// then twice the one before, five times (3.1 s in all).
#[derive(Default)]
struct Refusals {
    retries: u32,
    waited: Duration,
}

const REFUSED_RETRIES: u32 = 5;
const FIRST_REFUSED_WAIT: Duration = Duration::from_millis(100);

impl Refusals {
    /// How long to wait before the next try; `None` once tried enough.
    fn next_wait(&mut self) -> Option<Duration> {
        if self.retries >= REFUSED_RETRIES {
            return None;
        }
        let wait = FIRST_REFUSED_WAIT * 2u32.pow(self.retries);
        self.retries += 1;
        self.waited += wait;
        Some(wait)
    }

    /// `e`, the last refusal, saying how often it came and, unless the node
    /// said so itself, which limits may be behind it.
    fn explained(&self, e: QdlError) -> QdlError {
        let tried = format!(
            "tried {} times over {:.1} s",
            self.retries + 1,
            self.waited.as_secs_f64()
        );
        let told = |reason: &str| reason.to_ascii_lowercase().contains(NODE_REFUSAL);
        let explain = |reason: String| {
            if told(&reason) {
                format!("{reason} ({tried})")
            } else {
                format!(
                    "{reason} ({tried}; a node at its connection limits closes new connections \
                     at once: see its log, and its --max-connections and \
                     --max-connections-per-peer)"
                )
            }
        };
        match e {
            QdlError::Connect { node, reason } => QdlError::Connect {
                node,
                reason: explain(reason),
            },
            QdlError::Rpc { node, step, reason } => QdlError::Rpc {
                node,
                step,
                reason: explain(reason),
            },
            other => other,
        }
    }
}

/// The bounds of one connection's data stream.
#[derive(Clone, Copy)]
pub(crate) struct StreamLimits {
    /// Largest message accepted from the node.
    pub(crate) max_message: usize,
    /// Samples taken for sending and not yet answered (see `InFlight`).
    pub(crate) max_in_flight: u64,
}

fn check_session(node: &str, s: &SessionReply, input_codec: Codec) -> Result<(), QdlError> {
    let node = node.to_string();
    if s.protocol_version != PROTOCOL_VERSION {
        return Err(QdlError::Version {
            node,
            node_version: s.protocol_version,
            ours: PROTOCOL_VERSION,
        });
    }
    if !s.refusal.is_empty() {
        return Err(QdlError::Refused {
            node,
            reason: s.refusal.clone(),
        });
    }
    if !s.ready {
        return Err(QdlError::NotReady { node });
    }
    if let Err(reason) = check_node_name(&s.node_name) {
        return Err(QdlError::Incompatible { node, reason });
    }
    if input_codec != Codec::None && !s.input_codecs.contains(&(input_codec as i32)) {
        let decodes: Vec<String> = s.input_codecs.iter().map(|c| wire_name(*c)).collect();
        return Err(QdlError::Incompatible {
            node,
            reason: format!(
                "the node cannot decode {} inputs (it decodes {}); send inputs in a codec it \
                 decodes (loadgen-node --input-codec) or update the node",
                wire_name(input_codec as i32),
                if decodes.is_empty() {
                    "none".to_string()
                } else {
                    decodes.join(", ")
                }
            ),
        });
    }
    match Codec::try_from(s.output_codec) {
        Ok(c) if conn::can_decode(c) => Ok(()),
        Ok(c) => Err(QdlError::Incompatible {
            node,
            reason: format!(
                "the node answers in {}, which this QDL cannot decode",
                wire_name(c as i32)
            ),
        }),
        Err(_) => Err(QdlError::Incompatible {
            node,
            reason: format!("the node answers in unknown codec {}", s.output_codec),
        }),
    }
}

/// Refuses nodes that compress their answers where the rules allow no
/// compression for the benchmark (`why` says so).
pub(crate) fn check_answers_uncompressed(
    addrs: &[NodeAddr],
    per_node: usize,
    names: &[String],
    opened: &[Opened],
    why: &str,
) -> Result<(), QdlError> {
    for (c, o) in opened.iter().enumerate() {
        if o.session.output_codec != Codec::None as i32 {
            let n = c / per_node;
            return Err(QdlError::Incompatible {
                node: label(&addrs[n], Some(&names[n])),
                reason: format!(
                    "the node compresses its answers ({}), but {why}; start it with \
                     --output-codec none",
                    wire_name(o.session.output_codec)
                ),
            });
        }
    }
    Ok(())
}

/// Each node's name from its sessions; all its connections must agree, and
/// no two nodes may share a name.
pub(crate) fn node_names(
    addrs: &[NodeAddr],
    per_node: usize,
    opened: &[Opened],
) -> Result<Vec<String>, QdlError> {
    let mut names = Vec::with_capacity(addrs.len());
    for (n, addr) in addrs.iter().enumerate() {
        let sessions = &opened[n * per_node..(n + 1) * per_node];
        let name = sessions[0].session.node_name.clone();
        if let Some(other) = sessions.iter().find(|o| o.session.node_name != name) {
            return Err(QdlError::Incompatible {
                node: label(addr, None),
                reason: format!(
                    "its connections report different names ({name:?} and {:?})",
                    other.session.node_name
                ),
            });
        }
        names.push(name);
    }
    let refs: Vec<&NodeAddr> = addrs.iter().collect();
    check_unique(&names, &refs)?;
    Ok(names)
}

/// The longest node name accepted, in bytes.
pub const MAX_NODE_NAME_BYTES: usize = facts::node_name::MAX_BYTES;

/// A node name goes into the logs and the summary: it must be short and
/// hold only the characters of `facts::node_name`. Returns why it is not.
pub(crate) fn check_node_name(name: &str) -> Result<(), String> {
    match facts::node_name::problem(name) {
        None => Ok(()),
        Some(problem) => Err(format!("the node reported a name that {problem}")),
    }
}

pub(crate) fn check_unique(names: &[String], addrs: &[&NodeAddr]) -> Result<(), QdlError> {
    let mut by_name: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (name, addr) in names.iter().zip(addrs) {
        by_name.entry(name).or_default().push(addr.to_string());
    }
    let dups: Vec<String> = by_name
        .into_iter()
        .filter(|(_, a)| a.len() > 1)
        .map(|(name, a)| format!("{name:?} ({})", a.join(", ")))
        .collect();
    if dups.is_empty() {
        Ok(())
    } else {
        Err(QdlError::DuplicateNames(dups.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connect(reason: &str) -> QdlError {
        QdlError::Connect {
            node: "sut-node 10.0.0.1:50051".into(),
            reason: reason.into(),
        }
    }

    fn rpc(step: &'static str, reason: &str) -> QdlError {
        QdlError::Rpc {
            node: "sut-node 10.0.0.1:50051".into(),
            step,
            reason: reason.into(),
        }
    }

    #[test]
    fn refused_connections_are_tried_again_briefly() {
        let mut r = Refusals::default();
        let waits: Vec<u128> = std::iter::from_fn(|| r.next_wait())
            .map(|w| w.as_millis())
            .collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600]);
        assert_eq!(r.next_wait(), None);

        let told = "ResourceExhausted: sut-node refused the connection: 64 connections open \
                    from 10.0.0.9, the --max-connections-per-peer limit, every one of them in \
                    a session";
        for refused in [
            rpc("StartSession", told),
            rpc(
                "StartSession",
                "Unavailable: error trying to connect: Connection reset by peer (os error 104)",
            ),
            connect("transport error: Connection refused (os error 111)"),
            connect("aborted by peer: the server refused to accept a new connection"),
            // A node closing at once, without a word (over TLS, or older).
            rpc(
                "StartSession",
                "Cancelled: operation was canceled (transport error: operation was canceled: \
                 connection closed)",
            ),
            // A node closing gracefully as the request went out.
            rpc(
                "StartSession",
                "Internal: h2 protocol error: http2 error (transport error: http2 error: \
                 connection error received: not a result of an error)",
            ),
        ] {
            assert!(refused_connection(&refused), "{refused}");
        }
        for not in [
            rpc("Name", "Unavailable: connection reset"),
            rpc("StartSession", "no reply within 5s"),
            connect("invalid peer certificate: UnknownIssuer"),
            QdlError::NotReady { node: "n".into() },
        ] {
            assert!(!refused_connection(&not), "{not}");
        }

        // The node's own reason is kept; tries are counted.
        let e = r.explained(rpc("StartSession", told)).to_string();
        assert!(e.contains("--max-connections-per-peer limit"), "{e}");
        assert!(e.ends_with("(tried 6 times over 3.1 s)"), "{e}");
        // Without one, the message says which limits may be behind it.
        let e = r.explained(connect("Connection reset by peer")).to_string();
        assert!(
            e.contains("tried 6 times over 3.1 s; a node at its connection limits")
                && e.contains("--max-connections-per-peer"),
            "{e}"
        );
    }
}
