//! The seam between the QDL and the wire: a [`Link`] is one connection to a
//! node that carries the control RPCs and one Infer stream, which takes
//! [`ToNode`] messages from an [`Outgoing`] queue and yields [`FromNode`]
//! messages through an [`Inbound`]. One module per transport; adding one
//! means a variant in each enum here and in `config::Transport`.

pub(crate) mod grpc;
pub(crate) mod quic;
mod tls;

use std::pin::Pin;
use std::sync::mpsc as std_mpsc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use proto::tls::ClientTls;
use proto::{to_node, FromNode, SessionReply, SessionRequest, ToNode};
use tokio::sync::mpsc;
use tokio_stream::Stream;

use crate::config::{NodeAddr, Transport};
use crate::error::TransportError;

/// One connection to a node.
#[derive(Clone)]
pub(crate) enum Link {
    Grpc(grpc::GrpcLink),
    Quic(quic::QuicLink),
}

impl Link {
    /// Connects over the address's transport: gRPC (over TLS with `tls`, or
    /// for `grpcs://`), or QUIC (always TLS; `tls` required). A message from
    /// the node over `max_message` bytes ends the stream as it arrives.
    pub(crate) async fn connect(
        addr: &NodeAddr,
        tls: Option<&ClientTls>,
        timeout: Duration,
        max_message: usize,
    ) -> Result<Self, TransportError> {
        let need_tls = || {
            tls.ok_or_else(|| {
                TransportError(format!(
                    "{} needs TLS settings to check the node's certificate",
                    addr.transport.describe(true)
                ))
            })
        };
        match addr.transport {
            Transport::Grpc => Ok(Link::Grpc(
                grpc::GrpcLink::connect(addr, tls, timeout, max_message).await?,
            )),
            Transport::Grpcs => Ok(Link::Grpc(
                grpc::GrpcLink::connect(addr, Some(need_tls()?), timeout, max_message).await?,
            )),
            Transport::Quic => Ok(Link::Quic(
                quic::QuicLink::connect(addr, need_tls()?, max_message).await?,
            )),
        }
    }

    pub(crate) async fn name(&self) -> Result<String, TransportError> {
        match self {
            Link::Grpc(l) => l.name().await,
            Link::Quic(l) => l.name().await,
        }
    }

    pub(crate) async fn start_session(
        &self,
        req: SessionRequest,
    ) -> Result<SessionReply, TransportError> {
        match self {
            Link::Grpc(l) => l.start_session(req).await,
            Link::Quic(l) => l.start_session(req).await,
        }
    }

    pub(crate) async fn describe(&self) -> Result<proto::DescribeReply, TransportError> {
        match self {
            Link::Grpc(l) => l.describe().await,
            Link::Quic(l) => l.describe().await,
        }
    }

    pub(crate) async fn probe(
        &self,
        req: proto::ProbeRequest,
    ) -> Result<proto::ProbeReply, TransportError> {
        match self {
            Link::Grpc(l) => l.probe(req).await,
            Link::Quic(l) => l.probe(req).await,
        }
    }

    /// Opens the data stream: the transport sends what `outgoing` yields and
    /// ends the stream when it ends.
    pub(crate) async fn open(&self, outgoing: Outgoing) -> Result<Inbound, TransportError> {
        match self {
            Link::Grpc(l) => Ok(Inbound::Grpc(l.open(outgoing).await?)),
            Link::Quic(l) => Ok(Inbound::Quic(l.open(outgoing).await?)),
        }
    }
}

/// The node's side of an open data stream.
pub(crate) enum Inbound {
    Grpc(grpc::GrpcInbound),
    Quic(quic::QuicInbound),
}

impl Inbound {
    /// The next message; `Ok(None)` once the node has ended the stream.
    pub(crate) async fn next(&mut self) -> Result<Option<FromNode>, TransportError> {
        match self {
            Inbound::Grpc(s) => s.next().await,
            Inbound::Quic(s) => s.next().await,
        }
    }
}

/// The samples queued for one connection, as a stream for the transport.
///
/// Each sample's id is reported to the connection's receive side when the
/// transport takes it, i.e. before it can reach the node, so an answer can be
/// checked against what was really sent on this connection without sharing a
/// lock with the issuing thread.
pub(crate) struct Outgoing {
    queue: mpsc::UnboundedReceiver<Queued>,
    sent_ids: std_mpsc::Sender<(u64, Instant)>,
}

/// A sample on its way to the transport, with when the QDL was asked to
/// send it.
pub(crate) type Queued = (ToNode, Instant);

impl Outgoing {
    pub(crate) fn new(
        queue: mpsc::UnboundedReceiver<Queued>,
        sent_ids: std_mpsc::Sender<(u64, Instant)>,
    ) -> Self {
        Self { queue, sent_ids }
    }
}

impl Stream for Outgoing {
    type Item = ToNode;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ToNode>> {
        let polled = self.queue.poll_recv(cx);
        if let Poll::Ready(Some((
            ToNode {
                kind: Some(to_node::Kind::Sample(s)),
            },
            sent,
        ))) = &polled
        {
            // The receive side may be gone (run over); nothing to record then.
            let _ = self.sent_ids.send((s.id, *sent));
        }
        polled.map(|m| m.map(|(msg, _)| msg))
    }
}
