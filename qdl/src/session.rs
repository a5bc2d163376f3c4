//! Opening the connections: every node's sessions started concurrently, and
//! what a session must agree to (protocol version, codecs, a printable and
//! unique node name) before any sample is sent.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use compression::wire::wire_name;
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
    let rpc_err = |node: &str, step: &'static str, reason: String| QdlError::Rpc {
        node: node.to_string(),
        step,
        reason,
    };
    let session = match tokio::time::timeout(timeout, link.start_session(request)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(rpc_err(&node, "StartSession", e.0)),
        Err(_) => return Err(rpc_err(&node, "StartSession", late("reply"))),
    };
    // A name that is refused below stays out of every message.
    let node = match check_node_name(&session.node_name) {
        Ok(()) => label(addr, Some(&session.node_name)),
        Err(_) => node,
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
pub const MAX_NODE_NAME_BYTES: usize = 128;

/// A node name goes into the logs and the summary: it must be short,
/// printable text. Returns why it is not.
pub(crate) fn check_node_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the node reported an empty name".into());
    }
    if name.len() > MAX_NODE_NAME_BYTES {
        return Err(format!(
            "the node reported a name of {} bytes (at most {MAX_NODE_NAME_BYTES})",
            name.len()
        ));
    }
    let unprintable = |c: char| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}');
    if let Some((at, c)) = name.char_indices().find(|&(_, c)| unprintable(c)) {
        return Err(format!(
            "the node reported a name with the unprintable character U+{:04X} at byte {at} \
             (names must be printable text)",
            c as u32
        ));
    }
    Ok(())
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
