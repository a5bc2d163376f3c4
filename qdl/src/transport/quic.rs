//! QUIC (quinn): one QUIC connection per [`QuicLink`], on the QDL's runtime.
//! Every request is a bidirectional stream of its own, framed as
//! `proto::quic` describes: the control requests (Name, StartSession) come
//! and go; the Infer stream lasts the run, `ToNode` frames up and `FromNode`
//! frames down.
//!
//! One task per connection writes the samples: it takes everything queued
//! at once (one write for a burst); the connection's receive task reads the
//! answers through [`QuicInbound`]. Nothing is spawned per sample.

use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;

use bytes::{BufMut, BytesMut};
use prost::Message;
use proto::framing::{
    encode_message, Frame, FrameDecoder, FrameWriter, MAX_CONTROL_FRAME, MAX_DATA_FRAME,
};
use proto::quic::{stream_type, transport_config, udp_socket, ALPN, MAX_WRITE};
use proto::tls::{ClientTls, Presented};
use proto::{FromNode, NameReply, NameRequest, SessionReply, SessionRequest};
use quinn::{RecvStream, SendStream};
use tokio_stream::{Stream, StreamExt};

use super::Outgoing;
use crate::config::NodeAddr;
use crate::error::TransportError;

/// The node opens no streams.
const NODE_STREAMS: u32 = 0;

#[derive(Clone)]
pub(crate) struct QuicLink {
    conn: quinn::Connection,
    /// Largest frame accepted on the Infer stream.
    max_message: usize,
    /// The UDP socket; it lives as long as a clone of the link.
    _endpoint: quinn::Endpoint,
}

impl QuicLink {
    pub(crate) async fn connect(
        addr: &NodeAddr,
        tls: &ClientTls,
        max_message: usize,
    ) -> Result<Self, TransportError> {
        let remote: SocketAddr = tokio::net::lookup_host(addr.authority())
            .await
            .map_err(|e| TransportError(format!("cannot resolve {addr}: {e}")))?
            .next()
            .ok_or_else(|| TransportError(format!("{addr} resolves to no address")))?;
        let local: SocketAddr = if remote.is_ipv6() {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        };
        let socket = udp_socket(local)
            .map_err(|e| TransportError(format!("cannot open a UDP socket: {e}")))?;
        let endpoint = proto::quic::endpoint(socket, None)
            .map_err(|e| TransportError(format!("cannot open a QUIC endpoint: {e}")))?;
        let (crypto, presented) = tls
            .client_config(ALPN)
            .map_err(|e| TransportError(e.to_string()))?;
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(crypto)
            .map_err(|e| TransportError(format!("TLS configuration for QUIC: {e}")))?;
        let mut config = quinn::ClientConfig::new(Arc::new(crypto));
        config.transport_config(Arc::new(transport_config(NODE_STREAMS)));
        let name = super::tls::server_name(addr)?.to_str().into_owned();
        let conn = endpoint
            .connect_with(config, remote, &name)
            .map_err(|e| TransportError(format!("cannot connect: {e}")))?
            .await
            .map_err(|e| handshake_error(e, tls, &presented))?;
        Ok(Self {
            conn,
            max_message,
            _endpoint: endpoint,
        })
    }

    pub(crate) async fn name(&self) -> Result<String, TransportError> {
        let reply: NameReply = self.call(stream_type::NAME, &NameRequest {}).await?;
        Ok(reply.name)
    }

    pub(crate) async fn start_session(
        &self,
        req: SessionRequest,
    ) -> Result<SessionReply, TransportError> {
        self.call(stream_type::START_SESSION, &req).await
    }

    pub(crate) async fn describe(&self) -> Result<proto::DescribeReply, TransportError> {
        self.call(stream_type::DESCRIBE, &proto::DescribeRequest {})
            .await
    }

    pub(crate) async fn probe(
        &self,
        req: proto::ProbeRequest,
    ) -> Result<proto::ProbeReply, TransportError> {
        self.call_sized(
            stream_type::PROBE,
            &req,
            self.max_message.min(MAX_DATA_FRAME),
        )
        .await
    }

    /// One control request on a stream of its own.
    async fn call<Rep: Message + Default>(
        &self,
        kind: u8,
        request: &impl Message,
    ) -> Result<Rep, TransportError> {
        self.call_sized(kind, request, MAX_CONTROL_FRAME).await
    }

    /// `call` with replies of up to `max` bytes.
    async fn call_sized<Rep: Message + Default>(
        &self,
        kind: u8,
        request: &impl Message,
        max: usize,
    ) -> Result<Rep, TransportError> {
        let (mut send, mut recv) = self.conn.open_bi().await.map_err(text)?;
        let mut buf = BytesMut::new();
        buf.put_u8(kind);
        encode_message(request, &mut buf).map_err(text)?;
        send.write_chunk(buf.freeze()).await.map_err(text)?;
        send.finish().map_err(text)?;
        let mut decoder = FrameDecoder::new(max);
        match read_frame(&mut recv, &mut decoder).await? {
            Some(Frame::Message(body)) => body
                .message::<Rep>()
                .map_err(|e| TransportError(format!("undecodable reply: {e}"))),
            Some(Frame::Error(e)) => Err(TransportError(e)),
            None => Err(TransportError(
                "the node ended the stream without a reply".into(),
            )),
        }
    }

    /// Opens the Infer stream: waits for the node to accept it, then starts
    /// the task that writes `outgoing` to it.
    pub(crate) async fn open(&self, outgoing: Outgoing) -> Result<QuicInbound, TransportError> {
        let (mut send, mut recv) = self.conn.open_bi().await.map_err(text)?;
        send.write_chunk(bytes::Bytes::from_static(&[stream_type::INFER]))
            .await
            .map_err(text)?;
        let mut decoder = FrameDecoder::new(self.max_message.min(MAX_DATA_FRAME));
        match read_frame(&mut recv, &mut decoder).await? {
            Some(Frame::Message(_)) => {}
            Some(Frame::Error(e)) => return Err(TransportError(e)),
            None => return Err(TransportError("the node ended the stream at once".into())),
        }
        tokio::spawn(send_samples(send, outgoing));
        Ok(QuicInbound { recv, decoder })
    }
}

/// Writes the queued samples until the queue ends (the QDL closes), then
/// ends the stream. A failed write ends it too: the receive side reports why.
async fn send_samples(mut send: SendStream, mut outgoing: Outgoing) {
    let mut w = FrameWriter::new();
    while let Some(first) = outgoing.next().await {
        let mut next = Some(first);
        while let Some(message) = next.take() {
            if let Err(e) = w.to_node(&message) {
                tracing::error!("cannot send a sample: {e}");
                let _ = send.reset(1u32.into());
                return;
            }
            if w.len() < MAX_WRITE {
                // Whatever else is queued goes in the same write.
                next = std::future::poll_fn(|cx| {
                    Poll::Ready(match std::pin::Pin::new(&mut outgoing).poll_next(cx) {
                        Poll::Ready(m) => m,
                        Poll::Pending => None,
                    })
                })
                .await;
            }
        }
        let chunks = w.take_chunks();
        let sent = send.write_all_chunks(chunks).await;
        chunks.clear();
        if sent.is_err() {
            return;
        }
    }
    let _ = send.finish();
}

/// The node's side of an open Infer stream.
pub(crate) struct QuicInbound {
    recv: RecvStream,
    decoder: FrameDecoder,
}

impl QuicInbound {
    /// The next message; `Ok(None)` once the node has ended the stream.
    pub(crate) async fn next(&mut self) -> Result<Option<FromNode>, TransportError> {
        match read_frame(&mut self.recv, &mut self.decoder).await? {
            Some(Frame::Message(body)) => body
                .message::<FromNode>()
                .map(Some)
                .map_err(|e| TransportError(format!("undecodable FromNode message: {e}"))),
            Some(Frame::Error(e)) => Err(TransportError(format!("the node ended the stream: {e}"))),
            None => Ok(None),
        }
    }
}

/// The next frame of `recv`; `None` at a clean end of the stream.
async fn read_frame(
    recv: &mut RecvStream,
    decoder: &mut FrameDecoder,
) -> Result<Option<Frame>, TransportError> {
    loop {
        if let Some(frame) = decoder.next_frame().map_err(text)? {
            return Ok(Some(frame));
        }
        match recv.read_chunk(usize::MAX, true).await {
            Ok(Some(chunk)) => decoder.push(chunk.bytes),
            Ok(None) => {
                decoder.finish().map_err(text)?;
                return Ok(None);
            }
            Err(e) => return Err(text(e)),
        }
    }
}

fn text(e: impl std::fmt::Display) -> TransportError {
    TransportError(e.to_string())
}

/// A failed handshake, said plainly: a pin mismatch with both fingerprints,
/// a refused client certificate, or quinn's reason.
fn handshake_error(
    e: quinn::ConnectionError,
    tls: &ClientTls,
    presented: &Presented,
) -> TransportError {
    if let Some(why) = tls.pin_mismatch(presented) {
        return TransportError(why);
    }
    TransportError(format!("QUIC handshake failed: {e}"))
}
