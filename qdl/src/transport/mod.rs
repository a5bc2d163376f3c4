//! The seam between the QDL and the wire: a [`Link`] is one connection to a
//! node that carries the control RPCs and one Infer stream, which takes
//! [`ToNode`](proto::ToNode) messages from an [`Outgoing`] queue and yields
//! [`FromNode`] messages through an [`Inbound`]. One module per transport;
//! adding one means a variant in each enum here and in `config::Transport`.
//! The queue and its window of samples in flight, which every transport
//! shares, are in `outgoing`.

pub(crate) mod grpc;
mod outgoing;
pub(crate) mod quic;
mod tls;

use std::time::Duration;

use proto::tls::ClientTls;
use proto::{FromNode, SessionReply, SessionRequest};

use crate::config::{NodeAddr, Transport};
use crate::error::TransportError;

pub(crate) use outgoing::{InFlight, Outgoing, Queued};

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
