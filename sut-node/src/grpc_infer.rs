//! The gRPC transport's Infer route, framed here (`proto::framing`, gRPC's
//! own message framing) rather than by tonic: tonic's decoder copies every
//! request byte into its buffer before decoding, where here a sample's
//! payload reaches the backend as a slice of the HTTP/2 frame it came in.
//! The control calls stay with tonic's generated service; [`WithInfer`]
//! takes the Infer path before it.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as _, Frame as BodyFrame};
use proto::framing::{FrameDecoder, FrameError, FrameWriter, MAX_DATA_FRAME};
use proto::{FromNode, ToNode};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::Status;
use tracing::info;

use crate::infer;
use crate::node::Node;

/// Most bytes of answers gathered into one body chunk.
const MAX_CHUNK_BYTES: usize = 1 << 20;

/// `inner` (the generated service), with its Infer path served here.
#[derive(Clone)]
pub(crate) struct WithInfer<S> {
    inner: S,
    node: Arc<Node>,
}

impl<S> WithInfer<S> {
    pub(crate) fn new(inner: S, node: Arc<Node>) -> Self {
        Self { inner, node }
    }
}

impl<S: NamedService> NamedService for WithInfer<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tower::Service<http::Request<Body>> for WithInfer<S>
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
        if request.uri().path() == proto::INFER_PATH {
            let response = open(&self.node, request);
            Box::pin(async move { Ok(response) })
        } else {
            Box::pin(self.inner.call(request))
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
    let input = Samples {
        body: request.into_inner(),
        decoder: FrameDecoder::grpc(max),
    };
    let connection = node.data.connections.of(peer);
    let answers = infer::open(stream, input, connection, Arc::clone(&node.data));
    let mut response = http::Response::new(Body::new(Answers {
        answers,
        writer: FrameWriter::new(),
        ready: VecDeque::new(),
        end: None,
        ended: false,
    }));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    response
}

/// An Infer request's `ToNode` messages, as `infer.rs` reads them.
struct Samples {
    body: Body,
    decoder: FrameDecoder,
}

impl Stream for Samples {
    type Item = Result<ToNode, FrameError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let body = &mut this.body;
        this.decoder.poll_messages("ToNode", cx, |cx| loop {
            match std::task::ready!(Pin::new(&mut *body).poll_frame(cx)) {
                None => return Poll::Ready(None),
                Some(Err(status)) => return Poll::Ready(Some(Err(status.message().to_string()))),
                // Requests carry no trailers worth reading.
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Poll::Ready(Some(Ok(data)));
                    }
                }
            }
        })
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
                let mut trailers = http::HeaderMap::new();
                if let Err(unsayable) = status.add_header(&mut trailers) {
                    // A message that cannot be a header value: say so instead.
                    let _ = unsayable.add_header(&mut trailers);
                }
                return Poll::Ready(Some(Ok(BodyFrame::trailers(trailers))));
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
