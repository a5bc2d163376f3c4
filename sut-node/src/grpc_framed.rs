//! The gRPC transport's routes framed here (`proto::framing`, gRPC's own
//! message framing) rather than by tonic, whose codec copies every message
//! into its buffer: Infer, where a sample's payload reaches the backend as a
//! slice of the HTTP/2 frame it came in; and Probe, whose reply (up to
//! 256 MiB) is cut from one static buffer of zeros, so that replies a client
//! asks for and never reads cost the node nothing. The other control calls
//! stay with tonic's generated service; [`FramedRoutes`] takes these paths
//! before it.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as _, Frame as BodyFrame};
use proto::framing::{FrameDecoder, FrameError, FrameWriter, ProbeReplyChunks, MAX_DATA_FRAME};
use proto::{FromNode, ProbeRequest, ToNode};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::Status;
use tracing::info;

use crate::infer;
use crate::node::Node;

/// Most bytes of answers gathered into one body chunk.
const MAX_CHUNK_BYTES: usize = 1 << 20;

/// `inner` (the generated service), with its Infer and Probe paths served
/// here.
#[derive(Clone)]
pub(crate) struct FramedRoutes<S> {
    inner: S,
    node: Arc<Node>,
}

impl<S> FramedRoutes<S> {
    pub(crate) fn new(inner: S, node: Arc<Node>) -> Self {
        Self { inner, node }
    }
}

impl<S: NamedService> NamedService for FramedRoutes<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tower::Service<http::Request<Body>> for FramedRoutes<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future =
        Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send + 'static>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        match request.uri().path() {
            proto::INFER_PATH => {
                let response = open(&self.node, request);
                Box::pin(async move { Ok(response) })
            }
            proto::PROBE_PATH => {
                let node = Arc::clone(&self.node);
                Box::pin(async move { Ok(probe(&node, request).await) })
            }
            _ => Box::pin(self.inner.call(request)),
        }
    }
}

/// Opens an Infer stream: its request body's samples go to the data path,
/// whose answers are the response body. A refusal is a response of headers
/// only, as tonic's would be.
fn open(node: &Arc<Node>, request: http::Request<Body>) -> http::Response<Body> {
    let request = tonic::Request::from_http(request);
    let peer = request.remote_addr();
    if let Some(refusal) = node.infer_refusal(peer) {
        return refusal.into_http();
    }
    let stream = node.streams.fetch_add(1, Ordering::Relaxed) + 1;
    let shown = peer.map_or_else(|| "unknown".to_string(), |a| a.to_string());
    info!(stream, peer = %shown, "infer stream opened");
    let max = node.config().limits.max_message_bytes.min(MAX_DATA_FRAME);
    let input = Requests::<ToNode>::new(request.into_inner(), max, "ToNode")
        .charged(infer::Unfinished::new(&node.data.unfinished));
    let input = crate::listen::SamplesSeen::new(input, Arc::clone(&node.grpc_slots), peer);
    let connection = node.data.connections.of(peer);
    let mode = node.session_mode(peer);
    let answers = infer::open(stream, input, connection, mode, Arc::clone(&node.data));
    let mut response = http::Response::new(Body::new(Answers {
        answers,
        writer: FrameWriter::new(),
        ready: VecDeque::new(),
        end: None,
        ended: false,
    }));
    grpc_content(&mut response);
    response
}

fn grpc_content(response: &mut http::Response<Body>) {
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
}

/// Answers a Probe: its request (at most the node's message limit, holding
/// only what has arrived), then the reply's chunks as they are sent.
async fn probe(node: &Node, request: http::Request<Body>) -> http::Response<Body> {
    let max = node.config().limits.max_message_bytes.min(MAX_DATA_FRAME);
    let mut requests = Requests::<ProbeRequest>::new(request.into_body(), max, "ProbeRequest")
        .charged(infer::Unfinished::new(&node.data.unfinished));
    let request = match requests.next().await {
        Some(Ok(request)) => request,
        Some(Err(e)) => return Status::invalid_argument(e.to_string()).into_http(),
        None => return Status::invalid_argument("the stream ended before its request").into_http(),
    };
    match crate::describe::probe(&request) {
        Ok(chunks) => {
            let mut response = http::Response::new(Body::new(ProbeReply {
                chunks,
                ended: false,
            }));
            grpc_content(&mut response);
            response
        }
        Err(why) => Status::invalid_argument(why).into_http(),
    }
}

/// A Probe response's body: the reply's chunks, then an OK status.
struct ProbeReply {
    chunks: ProbeReplyChunks,
    ended: bool,
}

impl http_body::Body for ProbeReply {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<BodyFrame<Bytes>, Status>>> {
        let this = self.get_mut();
        if let Some(chunk) = this.chunks.next() {
            return Poll::Ready(Some(Ok(BodyFrame::data(chunk))));
        }
        if std::mem::replace(&mut this.ended, true) {
            return Poll::Ready(None);
        }
        Poll::Ready(Some(Ok(BodyFrame::trailers(trailers(Status::ok(""))))))
    }
}

/// The trailers that end a response with `status`.
fn trailers(status: Status) -> http::HeaderMap {
    let mut trailers = http::HeaderMap::new();
    if let Err(unsayable) = status.add_header(&mut trailers) {
        // A message that cannot be a header value: say so instead.
        let _ = unsayable.add_header(&mut trailers);
    }
    trailers
}

/// A request body's messages: an Infer stream's `ToNode`s, as `infer`'s reader
/// reads them, or a Probe's one request.
struct Requests<M> {
    body: Body,
    decoder: FrameDecoder,
    /// The message's name, for errors.
    what: &'static str,
    /// What its unfinished message costs the node's budget.
    unfinished: Option<infer::Unfinished>,
    _message: PhantomData<fn() -> M>,
}

impl<M> Requests<M> {
    fn new(body: Body, max: usize, what: &'static str) -> Self {
        Self {
            body,
            decoder: FrameDecoder::grpc(max),
            what,
            unfinished: None,
            _message: PhantomData,
        }
    }

    /// Its unfinished message charged to `unfinished`.
    fn charged(mut self, unfinished: infer::Unfinished) -> Self {
        self.unfinished = Some(unfinished);
        self
    }
}

impl<M: prost::Message + Default> Stream for Requests<M> {
    type Item = Result<M, FrameError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let body = &mut this.body;
        let unfinished = &mut this.unfinished;
        this.decoder.poll_messages_charged(
            this.what,
            cx,
            |cx| loop {
                match std::task::ready!(Pin::new(&mut *body).poll_frame(cx)) {
                    None => return Poll::Ready(None),
                    Some(Err(status)) => {
                        return Poll::Ready(Some(Err(status.message().to_string())))
                    }
                    // Requests carry no trailers worth reading.
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            return Poll::Ready(Some(Ok(data)));
                        }
                    }
                }
            },
            |cx, held| match unfinished {
                Some(u) => u.poll_charge(cx, held),
                None => Poll::Ready(()),
            },
        )
    }
}

/// An Infer response's body: the answers, framed, in chunks of what was
/// ready together; then the stream's status in the trailers.
struct Answers {
    answers: ReceiverStream<Result<FromNode, Status>>,
    writer: FrameWriter,
    ready: VecDeque<Bytes>,
    /// The status to end with, once the data before it is out.
    end: Option<Status>,
    ended: bool,
}

impl http_body::Body for Answers {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<BodyFrame<Bytes>, Status>>> {
        let this = self.get_mut();
        loop {
            if let Some(chunk) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(BodyFrame::data(chunk))));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            if let Some(status) = this.end.take() {
                this.ended = true;
                return Poll::Ready(Some(Ok(BodyFrame::trailers(trailers(status)))));
            }
            // Everything the node has ready goes out together.
            while this.writer.len() < MAX_CHUNK_BYTES && this.end.is_none() {
                match Pin::new(&mut this.answers).poll_next(cx) {
                    Poll::Ready(Some(Ok(message))) => {
                        if let Err(e) = this.writer.from_node(&message) {
                            this.end = Some(Status::internal(format!(
                                "sut-node cannot send an answer: {e}"
                            )));
                        }
                    }
                    Poll::Ready(Some(Err(status))) => this.end = Some(status),
                    Poll::Ready(None) => this.end = Some(Status::ok("")),
                    Poll::Pending => break,
                }
            }
            if this.writer.is_empty() && this.end.is_none() {
                return Poll::Pending;
            }
            this.ready.extend(this.writer.take_chunks().drain(..));
        }
    }
}
