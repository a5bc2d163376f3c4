//! The `SutNode` service over QUIC (quinn): the same messages as gRPC, framed
//! as `proto::quic` describes, one bidirectional stream per request. Control
//! requests go to the gRPC service's own handlers; an Infer stream goes
//! through the same data path (`infer`) as a gRPC one.
//!
//! Tasks: one per connection (accepts its streams) and one per stream; an
//! Infer stream's task reads nothing itself and writes the answers, its
//! reader is `infer`'s. Nothing is spawned per sample.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use prost::Message;
use proto::framing::{
    encode_error, encode_message, Frame, FrameDecoder, FrameError, FrameWriter, MAX_CONTROL_FRAME,
    MAX_DATA_FRAME,
};
use proto::quic::{self, stream_type, udp_socket, MAX_WRITE};
use proto::sut_node_server::SutNode;
use proto::{FromNode, HealthRequest, NameRequest, SessionRequest, ToNode};
use quinn::{RecvStream, SendStream};
use tokio::task::JoinSet;
use tokio_stream::Stream;
use tonic::transport::server::TcpConnectInfo;
use tracing::{debug, info, warn};

use crate::infer;
use crate::limits::Limits;
use crate::listen::{Evict, Slot, Throttled};
use crate::node::{Node, OverQuic, ServeError, Service};
use crate::stop::stopped;

/// How long a stream may take to say what it is, and a control stream to
/// send its request.
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long, after its last frame, a stream waits for the client to
/// acknowledge it before the connection may close.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(2);
/// The node's QUIC settings: those of `proto::quic` (the LoadGen node's
/// too), with `max_streams` bidirectional streams open at once per
/// connection, and no keep-alives: one side's keep-alives keep a connection
/// open, and the LoadGen node sends its own, so a client gone silent meets
/// the node's idle timeout instead of being kept alive by the node.
pub fn transport_config(max_streams: u32) -> quinn::TransportConfig {
    let mut t = quic::transport_config(max_streams);
    t.keep_alive_interval(None);
    t
}

/// A QUIC endpoint on `addr` (UDP) serving with `tls` (its ALPN must be
/// `proto::quic::ALPN`) within `limits`: a connection silent for their idle
/// timeout (no packet at all, the client's keep-alives included) is closed;
/// QUIC takes the shorter of this and the client's own.
pub fn endpoint(
    addr: SocketAddr,
    tls: rustls::ServerConfig,
    limits: &Limits,
) -> std::io::Result<quinn::Endpoint> {
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
        .map_err(|e| std::io::Error::other(format!("TLS configuration for QUIC: {e}")))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = transport_config(limits.max_streams_per_connection);
    // Out of QUIC's range (about 146,000 years) only if longer than the
    // flag allows.
    if let Ok(idle) = quinn::IdleTimeout::try_from(limits.idle_timeout) {
        transport.max_idle_timeout(Some(idle));
    }
    config.transport_config(Arc::new(transport));
    let socket = udp_socket(addr)?;
    quic::endpoint(socket, Some(config))
}

/// Accepts connections until the node stops, then lets the open ones finish
/// (each Infer stream ends by itself within the shutdown grace).
pub(crate) async fn serve(endpoint: quinn::Endpoint, node: Arc<Node>) -> Result<(), ServeError> {
    let mut stop = node.data.stop.clone();
    let mut connections = JoinSet::new();
    let slots = Arc::clone(&node.quic_slots);
    let (mut refused, mut evicted) = (Throttled::default(), Throttled::default());
    loop {
        let incoming = tokio::select! {
            _ = stopped(&mut stop) => break,
            i = endpoint.accept() => i,
            // Reap finished connections as we go.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let Some(incoming) = incoming else { break };
        let peer = incoming.remote_address();
        let evict = Arc::new(tokio::sync::Notify::new());
        match slots.take(peer, Evict::Notify(Arc::clone(&evict))) {
            Ok(taken) => {
                if let Some((other, limit)) = taken.evicted {
                    evicted.warn(&format!(
                        "QUIC connection from {other} closed to make room for one from {peer}: \
                         {limit}"
                    ));
                }
                let node = Arc::clone(&node);
                connections.spawn(connection(incoming, node, taken.slot, evict));
            }
            Err(why) => {
                refused.warn(&format!("QUIC connection from {peer} refused: {why}"));
                incoming.refuse();
            }
        }
    }
    endpoint.set_server_config(None);
    while connections.join_next().await.is_some() {}
    endpoint.close(0u32.into(), b"sut-node stopped");
    let _ = tokio::time::timeout(DELIVERY_TIMEOUT, endpoint.wait_idle()).await;
    Ok(())
}

/// The code a QUIC connection is closed with when it makes room for
/// another (see `listen::Slots`).
const EVICTED: u32 = 1;

/// Serves one connection; `_slot` holds its place in the limits, until
/// `evict` says to make room.
async fn connection(
    incoming: quinn::Incoming,
    node: Arc<Node>,
    _slot: Slot,
    evict: Arc<tokio::sync::Notify>,
) {
    let peer = incoming.remote_address();
    let handshake = node.config().limits.handshake_timeout;
    let shake = tokio::time::timeout(handshake, incoming);
    let conn = tokio::select! {
        c = shake => match c {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                // An unknown client (mutual TLS) ends here.
                warn!(%peer, "QUIC connection refused: {e}");
                return;
            }
            Err(_) => {
                warn!(%peer, "QUIC connection closed: no handshake within {handshake:?}");
                return;
            }
        },
        _ = evict.notified() => return,
    };
    debug!(%peer, "QUIC connection");
    let mut stop = node.data.stop.clone();
    let mut streams = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = stopped(&mut stop) => break,
            _ = evict.notified() => {
                conn.close(
                    EVICTED.into(),
                    b"sut-node closed this connection, which had sent no sample, to make room for another",
                );
                break;
            }
            s = conn.accept_bi() => s,
            Some(_) = streams.join_next(), if !streams.is_empty() => continue,
        };
        match accepted {
            Ok((send, recv)) => {
                streams.spawn(stream(send, recv, Arc::clone(&node), peer));
            }
            Err(e) => {
                debug!(%peer, "QUIC connection ended: {e}");
                break;
            }
        }
    }
    // Open streams end by themselves (shutdown grace, or their client gone).
    while streams.join_next().await.is_some() {}
    // Let the client read what the streams sent and close first: a close
    // from here discards whatever it has received but not read yet (such as
    // the error frame that says the node is shutting down).
    let _ = tokio::time::timeout(DELIVERY_TIMEOUT, conn.closed()).await;
    conn.close(0u32.into(), b"");
}

async fn stream(mut send: SendStream, mut recv: RecvStream, node: Arc<Node>, peer: SocketAddr) {
    let mut kind = [0u8; 1];
    match tokio::time::timeout(FIRST_BYTE_TIMEOUT, recv.read_exact(&mut kind)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return warn!(%peer, "QUIC stream ended before its type: {e}"),
        Err(_) => return warn!(%peer, "QUIC stream sent no type within {FIRST_BYTE_TIMEOUT:?}"),
    }
    let service = Service(Arc::clone(&node));
    let service = &service;
    let mut out = BytesMut::new();
    let reply = match kind[0] {
        stream_type::NAME => {
            let m = control(
                &mut recv,
                peer,
                move |r: tonic::Request<NameRequest>| async move { service.name(r).await },
            )
            .await;
            encoded(m, &mut out)
        }
        stream_type::START_SESSION => {
            let m =
                control(
                    &mut recv,
                    peer,
                    move |r: tonic::Request<SessionRequest>| async move {
                        service.start_session(r).await
                    },
                )
                .await;
            encoded(m, &mut out)
        }
        stream_type::HEALTH => {
            let m = control(
                &mut recv,
                peer,
                move |r: tonic::Request<HealthRequest>| async move { service.health(r).await },
            )
            .await;
            encoded(m, &mut out)
        }
        stream_type::DESCRIBE => {
            let m = control(
                &mut recv,
                peer,
                move |r: tonic::Request<proto::DescribeRequest>| async move {
                    service.describe(r).await
                },
            )
            .await;
            encoded(m, &mut out)
        }
        stream_type::PROBE => return probe(send, recv, &node, peer).await,
        stream_type::INFER => return infer_stream(send, recv, node, peer).await,
        other => Err(format!("unknown stream type {other}")),
    };
    if let Err(e) = reply {
        warn!(%peer, "answering a QUIC stream with an error: {e}");
        out.clear();
        encode_error(&e, &mut out);
    }
    finish(&mut send, out.freeze()).await;
}

/// Answers a probe stream: its request (probes carry sample-sized payloads:
/// the data path's limit), then the reply's chunks, written as the client
/// takes them (cut from one static buffer: a reply never read costs nothing).
async fn probe(mut send: SendStream, mut recv: RecvStream, node: &Node, peer: SocketAddr) {
    let mut decoder = FrameDecoder::new(data_frame_limit(node));
    let read = tokio::time::timeout(FIRST_BYTE_TIMEOUT, read_frame(&mut recv, &mut decoder));
    let reply = match read.await {
        Ok(Ok(Some(frame))) => frame
            .decode::<proto::ProbeRequest>("request")
            .map_err(|e| e.to_string())
            .and_then(|request| crate::describe::probe(&request)),
        Ok(Ok(None)) => Err("the stream ended before its request".into()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(format!("no request within {FIRST_BYTE_TIMEOUT:?}")),
    };
    match reply {
        Ok(chunks) => {
            for chunk in chunks {
                if send.write_chunk(chunk).await.is_err() {
                    return;
                }
            }
            finish(&mut send, Bytes::new()).await;
        }
        Err(e) => {
            warn!(%peer, "answering a QUIC stream with an error: {e}");
            let mut out = BytesMut::new();
            encode_error(&e, &mut out);
            finish(&mut send, out.freeze()).await;
        }
    }
}

/// The largest Infer or Probe frame accepted: the node's message limit.
fn data_frame_limit(node: &Node) -> usize {
    node.config().limits.max_message_bytes.min(MAX_DATA_FRAME)
}

fn encoded(reply: Result<impl Message, String>, out: &mut BytesMut) -> Result<(), String> {
    encode_message(&reply?, out).map_err(|e| e.to_string())
}

/// Reads a control request, runs it through the gRPC service's handler and
/// returns its reply, or the error to send.
async fn control<Req, Rep, F, Fut>(
    recv: &mut RecvStream,
    peer: SocketAddr,
    handle: F,
) -> Result<Rep, String>
where
    Req: Message + Default,
    F: FnOnce(tonic::Request<Req>) -> Fut,
    Fut: Future<Output = Result<tonic::Response<Rep>, tonic::Status>>,
{
    let mut decoder = FrameDecoder::new(MAX_CONTROL_FRAME);
    let read = tokio::time::timeout(FIRST_BYTE_TIMEOUT, read_frame(recv, &mut decoder));
    let request: Req = match read.await {
        Ok(Ok(Some(frame))) => frame.decode("request").map_err(|e| e.to_string())?,
        Ok(Ok(None)) => return Err("the stream ended before its request".into()),
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err(format!("no request within {FIRST_BYTE_TIMEOUT:?}")),
    };
    let mut request = tonic::Request::new(request);
    request.extensions_mut().insert(TcpConnectInfo {
        local_addr: None,
        remote_addr: Some(peer),
    });
    request.extensions_mut().insert(OverQuic);
    match handle(request).await {
        Ok(reply) => Ok(reply.into_inner()),
        Err(status) => Err(status.message().to_string()),
    }
}

/// The next frame of `recv`; `None` at a clean end of the stream.
async fn read_frame(
    recv: &mut RecvStream,
    decoder: &mut FrameDecoder,
) -> Result<Option<Frame>, String> {
    loop {
        if let Some(frame) = decoder.next_frame().map_err(|e| e.to_string())? {
            return Ok(Some(frame));
        }
        match recv.read_chunk(usize::MAX, true).await {
            Ok(Some(chunk)) => decoder.push(chunk.bytes),
            Ok(None) => {
                decoder.finish().map_err(|e| e.to_string())?;
                return Ok(None);
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Writes `last` and ends the stream, then waits (briefly) until the client
/// has it, so closing the connection cannot lose it.
async fn finish(send: &mut SendStream, last: Bytes) {
    if !last.is_empty() && send.write_chunk(last).await.is_err() {
        return;
    }
    if send.finish().is_ok() {
        let _ = tokio::time::timeout(DELIVERY_TIMEOUT, send.stopped()).await;
    }
}

async fn infer_stream(mut send: SendStream, recv: RecvStream, node: Arc<Node>, peer: SocketAddr) {
    if let Some(refusal) = node.infer_refusal(Some(peer)) {
        let mut out = BytesMut::new();
        encode_error(refusal.message(), &mut out);
        return finish(&mut send, out.freeze()).await;
    }
    let mut w = FrameWriter::new();
    let stream = node.streams.fetch_add(1, Ordering::Relaxed) + 1;
    info!(stream, %peer, transport = "quic", "infer stream opened");
    // The stream is accepted: say so at once, as gRPC's response headers do.
    let accept = FromNode {
        heartbeat: true,
        ..FromNode::default()
    };
    if w.message(&accept).is_err() {
        return;
    }
    let input = QuicSamples {
        recv,
        decoder: FrameDecoder::new(data_frame_limit(&node)),
        unfinished: crate::infer::Unfinished::new(&node.data.unfinished),
    };
    let connection = node.data.connections.of(Some(peer));
    let input = crate::listen::SamplesSeen::new(input, Arc::clone(&node.quic_slots), Some(peer));
    let mode = node.session_mode(Some(peer));
    let mut answers =
        infer::open(stream, input, connection, mode, Arc::clone(&node.data)).into_inner();
    loop {
        let chunks = w.take_chunks();
        if !chunks.is_empty() {
            let sent = send.write_all_chunks(chunks).await;
            chunks.clear();
            if sent.is_err() {
                // The client is gone; dropping `answers` tells the writer.
                return;
            }
        }
        // Everything the node has ready, in one write.
        let Some(first) = answers.recv().await else {
            break;
        };
        let mut next = Some(first);
        while let Some(item) = next.take() {
            match item {
                Ok(message) => {
                    if let Err(e) = w.from_node(&message) {
                        w.error(&format!("sut-node cannot send an answer: {e}"));
                        break;
                    }
                }
                Err(status) => {
                    w.error(status.message());
                    break;
                }
            }
            if w.len() < MAX_WRITE {
                next = answers.try_recv().ok();
            }
        }
    }
    if send.write_all_chunks(w.take_chunks()).await.is_ok() {
        finish(&mut send, Bytes::new()).await;
    }
}

/// An Infer stream's `ToNode` frames, as `infer`'s reader reads them.
struct QuicSamples {
    recv: RecvStream,
    decoder: FrameDecoder,
    /// What its unfinished frame costs the node's budget.
    unfinished: crate::infer::Unfinished,
}

impl Stream for QuicSamples {
    type Item = Result<ToNode, FrameError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let recv = &mut this.recv;
        let unfinished = &mut this.unfinished;
        this.decoder.poll_messages_charged(
            "ToNode",
            cx,
            |cx| {
                // `read_chunk` is cancel-safe: polling a fresh one each time
                // loses nothing and leaves the waker registered.
                let read = recv.read_chunk(usize::MAX, true);
                tokio::pin!(read);
                read.poll(cx).map(|r| match r {
                    Ok(chunk) => chunk.map(|c| Ok(c.bytes)),
                    Err(e) => Some(Err(e.to_string())),
                })
            },
            |cx, held| unfinished.poll_charge(cx, held),
        )
    }
}
