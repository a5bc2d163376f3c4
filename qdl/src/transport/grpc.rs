//! gRPC over HTTP/2 (tonic): one HTTP/2 connection per [`GrpcLink`], with the
//! bidirectional `Infer` stream on it; over TLS (`tls.rs`) when asked.
//!
//! The control calls go through tonic's generated client. The Infer stream
//! is framed here (`proto::framing`, gRPC's own message framing): tonic's
//! encoder would copy every sample's payload into its buffer and its decoder
//! every answer's, where these bodies pass large payloads on as they are.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame as BodyFrame};
use proto::framing::{Frame, FrameDecoder, FrameWriter};
use proto::sut_node_client::SutNodeClient;
use proto::tls::ClientTls;
use proto::{FromNode, NameRequest, SessionReply, SessionRequest};
use tokio_stream::Stream;
use tonic::client::GrpcService;
use tonic::transport::{Channel, Endpoint};

use super::Outgoing;
use crate::config::NodeAddr;
use crate::error::TransportError;

/// Large inputs (whole images, volumes) exceed tonic's 4 MiB default; the
/// protocol's own framing bounds a message at 4 GiB.
const MAX_SENT_MESSAGE: usize = u32::MAX as usize;
/// Most bytes of samples gathered into one body chunk before it is handed on.
const MAX_CHUNK_BYTES: usize = 1 << 20;
/// Pings keep an idle connection (a long QSL load) open past the node's
/// idle timeout.
const KEEP_ALIVE: Duration = Duration::from_secs(20);

#[derive(Clone)]
pub(crate) struct GrpcLink {
    client: SutNodeClient<Channel>,
    channel: Channel,
    max_message: usize,
}

impl GrpcLink {
    pub(crate) async fn connect(
        addr: &NodeAddr,
        tls: Option<&ClientTls>,
        timeout: Duration,
        max_message: usize,
    ) -> Result<Self, TransportError> {
        let endpoint = Endpoint::from_shared(format!("http://{}", addr.authority()))
            .map_err(|e| TransportError::chain(&e))?
            .connect_timeout(timeout)
            // Samples are small, latency-bound writes: never wait for Nagle.
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEP_ALIVE)
            .keep_alive_while_idle(true);
        let channel = match tls {
            None => endpoint
                .connect()
                .await
                .map_err(|e| TransportError::chain(&e))?,
            Some(tls) => {
                let (connector, presented) = super::tls::grpc_connector(addr, tls)?;
                endpoint
                    .connect_with_connector(connector)
                    .await
                    .map_err(|e| match tls.pin_mismatch(&presented) {
                        Some(why) => TransportError(why),
                        None => {
                            let mut err = TransportError::chain(&e);
                            if err.0.contains("InvalidContentType") {
                                err.0.push_str(
                                    " (the node seems to serve gRPC without TLS: start it with \
                                     --tls, or reach it over quic://)",
                                );
                            }
                            err
                        }
                    })?
            }
        };
        let client = SutNodeClient::new(channel.clone())
            .max_decoding_message_size(max_message)
            .max_encoding_message_size(MAX_SENT_MESSAGE);
        Ok(Self {
            client,
            channel,
            max_message,
        })
    }

    pub(crate) async fn name(&self) -> Result<String, TransportError> {
        let reply = self
            .client
            .clone()
            .name(NameRequest {})
            .await
            .map_err(status_text)?;
        Ok(reply.into_inner().name)
    }

    pub(crate) async fn start_session(
        &self,
        req: SessionRequest,
    ) -> Result<SessionReply, TransportError> {
        let reply = self
            .client
            .clone()
            .start_session(req)
            .await
            .map_err(status_text)?;
        Ok(reply.into_inner())
    }

    pub(crate) async fn describe(&self) -> Result<proto::DescribeReply, TransportError> {
        let reply = self
            .client
            .clone()
            .describe(proto::DescribeRequest {})
            .await
            .map_err(status_text)?;
        Ok(reply.into_inner())
    }

    pub(crate) async fn probe(
        &self,
        req: proto::ProbeRequest,
    ) -> Result<proto::ProbeReply, TransportError> {
        let reply = self.client.clone().probe(req).await.map_err(status_text)?;
        Ok(reply.into_inner())
    }

    /// Opens the Infer stream: the request's body is `outgoing`'s samples,
    /// the response's the node's answers.
    pub(crate) async fn open(&self, outgoing: Outgoing) -> Result<GrpcInbound, TransportError> {
        let request = http::Request::post(proto::INFER_PATH)
            .header(http::header::CONTENT_TYPE, "application/grpc")
            .header(http::header::TE, "trailers")
            .body(tonic::body::Body::new(SampleBody::new(outgoing)))
            .map_err(|e| TransportError::chain(&e))?;
        let mut channel = self.channel.clone();
        std::future::poll_fn(|cx| GrpcService::poll_ready(&mut channel, cx))
            .await
            .map_err(|e| TransportError::chain(&e))?;
        let response = GrpcService::call(&mut channel, request)
            .await
            .map_err(|e| TransportError::chain(&e))?;
        // A refusal comes as a response of headers only, its status in them.
        let refused = tonic::Status::from_header_map(response.headers());
        if let Some(status) = refused.filter(|s| s.code() != tonic::Code::Ok) {
            return Err(status_text(status));
        }
        if response.status() != http::StatusCode::OK {
            return Err(TransportError(format!(
                "the node answered the Infer stream with HTTP status {}",
                response.status()
            )));
        }
        Ok(GrpcInbound {
            body: response.into_body(),
            decoder: FrameDecoder::grpc(self.max_message),
            ended: false,
        })
    }
}

/// The Infer request's body: the queued samples, framed, in chunks of what
/// was queued together; large payloads are chunks of their own, uncopied.
struct SampleBody {
    outgoing: Outgoing,
    writer: FrameWriter,
    ready: VecDeque<Bytes>,
    queue_ended: bool,
}

impl SampleBody {
    fn new(outgoing: Outgoing) -> Self {
        Self {
            outgoing,
            writer: FrameWriter::new(),
            ready: VecDeque::new(),
            queue_ended: false,
        }
    }
}

impl Body for SampleBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<BodyFrame<Bytes>, tonic::Status>>> {
        let this = self.get_mut();
        loop {
            if let Some(chunk) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(BodyFrame::data(chunk))));
            }
            if this.queue_ended {
                // The QDL closed: the request ends, and the node ends its
                // answers once the last sample is answered.
                return Poll::Ready(None);
            }
            // Whatever is queued now goes out together.
            while this.writer.len() < MAX_CHUNK_BYTES {
                match Pin::new(&mut this.outgoing).poll_next(cx) {
                    Poll::Ready(Some(message)) => {
                        if let Err(e) = this.writer.to_node(&message) {
                            return Poll::Ready(Some(Err(tonic::Status::invalid_argument(
                                format!("cannot send a sample: {e}"),
                            ))));
                        }
                    }
                    Poll::Ready(None) => {
                        this.queue_ended = true;
                        break;
                    }
                    Poll::Pending => break,
                }
            }
            if this.writer.is_empty() && !this.queue_ended {
                return Poll::Pending;
            }
            this.ready.extend(this.writer.take_chunks().drain(..));
        }
    }
}

/// The node's side of an open Infer stream: the response body's messages,
/// then the status in its trailers.
pub(crate) struct GrpcInbound {
    body: tonic::body::Body,
    decoder: FrameDecoder,
    ended: bool,
}

impl GrpcInbound {
    /// The next message; `Ok(None)` once the node has ended the stream
    /// with status OK.
    pub(crate) async fn next(&mut self) -> Result<Option<FromNode>, TransportError> {
        loop {
            match self
                .decoder
                .next_frame()
                .map_err(|e| TransportError(e.to_string()))?
            {
                Some(Frame::Message(body)) => {
                    return body
                        .message::<FromNode>()
                        .map(Some)
                        .map_err(|e| TransportError(format!("undecodable FromNode message: {e}")))
                }
                // gRPC framing has no error frames (its decoder refuses them).
                Some(Frame::Error(text)) => return Err(TransportError(text)),
                None => {}
            }
            if self.ended {
                return Ok(None);
            }
            let frame = std::future::poll_fn(|cx| Pin::new(&mut self.body).poll_frame(cx)).await;
            match frame {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.decoder.push(data),
                    Err(frame) => {
                        self.ended = true;
                        self.decoder
                            .finish()
                            .map_err(|e| TransportError(e.to_string()))?;
                        let trailers = frame.into_trailers().unwrap_or_default();
                        return match tonic::Status::from_header_map(&trailers) {
                            Some(s) if s.code() == tonic::Code::Ok => Ok(None),
                            Some(s) => Err(status_text(s)),
                            None => Err(TransportError(
                                "the node ended the stream without a gRPC status".into(),
                            )),
                        };
                    }
                },
                Some(Err(status)) => {
                    self.ended = true;
                    return Err(status_text(status));
                }
                None => {
                    self.ended = true;
                    return Err(TransportError(
                        "the node ended the stream without a gRPC status".into(),
                    ));
                }
            }
        }
    }
}

/// A status as one line: its code and message (and the transport error under
/// it, if any), without tonic's metadata dump.
pub(crate) fn status_text(s: tonic::Status) -> TransportError {
    let mut text = format!("{:?}", s.code());
    if !s.message().is_empty() {
        text.push_str(": ");
        text.push_str(s.message());
    }
    if let Some(src) = std::error::Error::source(&s) {
        let inner = TransportError::chain(src).0;
        if !text.contains(&inner) {
            text.push_str(" (");
            text.push_str(&inner);
            text.push(')');
        }
    }
    TransportError(text)
}
