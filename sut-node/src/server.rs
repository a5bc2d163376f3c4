//! The `SutNode` gRPC service: the node's lifecycle (warm-up, readiness,
//! shutdown) and its RPCs. The `Infer` data path is in `infer.rs`.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use proto::sut_node_server::{SutNode, SutNodeServer};
use proto::{
    FromNode, HealthReply, HealthRequest, NameReply, NameRequest, SessionReply, SessionRequest,
    ToNode,
};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch, Semaphore};
use tokio::task::JoinSet;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Server;
use tonic::{Request, Response, Status, Streaming};
use tracing::{info, warn};

use crate::backend::{Backend, BackendError};
use crate::batcher::{BatchPolicy, Batcher};
use crate::budget::{Budget, Connections};
use crate::codec;
use crate::infer::{self, batch_runner, Job};
use crate::limits::Limits;
use crate::listen;
use crate::whole_messages::WholeMessages;

/// The scenarios a session may name (LoadGen's spelling).
pub const SCENARIOS: [&str; 4] = ["SingleStream", "MultiStream", "Server", "Offline"];

/// Largest message the node sends (answers of some benchmarks are far above
/// gRPC's 4 MiB default); what it accepts is `Limits::max_message_bytes`.
const MAX_MESSAGE_BYTES: usize = 1 << 30;
/// HTTP/2 windows: the connection's is larger than a stream's, so a stream
/// held back by a full batcher queue never blocks Health or a new stream on
/// the same connection.
const STREAM_WINDOW: u32 = 2 << 20;
const CONNECTION_WINDOW: u32 = 8 << 20;

#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub name: String,
    /// The model this node serves; `None` accepts any.
    pub model: Option<String>,
    pub batch: BatchPolicy,
    /// Idle time after which a stream gets a heartbeat; `None`: never.
    pub heartbeat: Option<Duration>,
    /// On shutdown, how long open streams may take to answer the samples
    /// they already sent before they are cut.
    pub shutdown_grace: Duration,
    /// The output codec and the bound on decoded inputs.
    pub codecs: codec::NodeCodecs,
    /// What clients may make the node hold.
    pub limits: Limits,
}

#[derive(Debug, Error)]
pub enum ServeError {
    #[error("backend {backend} failed to load: {source}")]
    WarmUp {
        backend: String,
        source: BackendError,
    },
    #[error("backend {0} panicked while loading")]
    WarmUpPanic(String),
    #[error("cannot start a thread: {0}")]
    Thread(#[from] std::io::Error),
    #[error("gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("the gRPC server task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Serves the node on `listener` until `shutdown` completes (then lets open
/// streams finish, see [`NodeConfig::shutdown_grace`]). The backend warms up
/// in the background while `Health` already answers; `on_ready` is called
/// once it is ready.
pub async fn serve(
    listener: TcpListener,
    config: NodeConfig,
    backend: Arc<dyn Backend>,
    shutdown: impl Future<Output = ()> + Send,
    on_ready: impl FnOnce() + Send,
) -> Result<(), ServeError> {
    let endpoints = Endpoints {
        grpc: Some(listener),
        grpc_tls: None,
        quic: None,
    };
    serve_on(endpoints, config, backend, shutdown, on_ready).await
}

/// Where a node serves: gRPC on a TCP listener (plain, or TLS), QUIC on a
/// quinn endpoint (see `quic::endpoint`), or both at once.
pub struct Endpoints {
    pub grpc: Option<TcpListener>,
    /// TLS for gRPC; its ALPN must be `h2`.
    pub grpc_tls: Option<rustls::ServerConfig>,
    pub quic: Option<quinn::Endpoint>,
}

/// [`serve`] on any [`Endpoints`]: both transports share the backend, the
/// batcher and the data path.
pub async fn serve_on(
    endpoints: Endpoints,
    config: NodeConfig,
    backend: Arc<dyn Backend>,
    shutdown: impl Future<Output = ()> + Send,
    on_ready: impl FnOnce() + Send,
) -> Result<(), ServeError> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let outstanding = Arc::new(AtomicU64::new(0));
    // Enough to keep full batches coming, small enough to push back on a
    // client that sends faster than the backend answers.
    let capacity = (4 * config.batch.max_batch_size).max(1024);
    let batcher = Batcher::start(
        config.batch,
        capacity,
        batch_runner(Arc::clone(&backend), Arc::clone(&outstanding)),
    )?;
    let grace = config.shutdown_grace;
    let config_limits = config.limits;
    let node = Arc::new(Node {
        backend_name: backend.name().to_string(),
        config,
        ready: AtomicBool::new(false),
        outstanding,
        batcher,
        stop: stop_rx.clone(),
        streams: AtomicU64::new(0),
        refused: Mutex::new(HashMap::new()),
        decoded: Budget::new(config_limits.max_decoded_bytes),
        connections: Connections::new(config_limits.max_decoded_bytes_per_connection),
        decoding: Arc::new(Semaphore::new(
            std::thread::available_parallelism().map_or(2, |n| n.get()),
        )),
    });

    let mut servers: JoinSet<Result<(), ServeError>> = JoinSet::new();
    if let Some(listener) = endpoints.grpc {
        let limits = node.config.limits;
        let service = SutNodeServer::new(Service(Arc::clone(&node)))
            .max_decoding_message_size(limits.max_message_bytes)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let max_message = limits.max_message_bytes;
        let router = Server::builder()
            // Requests' messages reach tonic only once complete, so that a
            // declared length is never reserved before its bytes arrive.
            .layer(tower::util::MapRequestLayer::new(
                move |request: http::Request<tonic::body::Body>| {
                    request
                        .map(|body| tonic::body::Body::new(WholeMessages::new(body, max_message)))
                },
            ))
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_concurrent_streams(limits.max_streams_per_connection)
            .add_service(service);
        let mut stop = stop_rx.clone();
        let stopping = async move { stopped(&mut stop).await };
        match endpoints.grpc_tls {
            None => {
                let incoming =
                    listen::incoming(listener, limits, stop_rx.clone(), |tcp| async { Ok(tcp) });
                servers.spawn(async move {
                    Ok(router
                        .serve_with_incoming_shutdown(incoming, stopping)
                        .await?)
                });
            }
            Some(tls) => {
                let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
                let incoming = listen::incoming(listener, limits, stop_rx.clone(), move |tcp| {
                    acceptor.accept(tcp)
                });
                servers.spawn(async move {
                    Ok(router
                        .serve_with_incoming_shutdown(incoming, stopping)
                        .await?)
                });
            }
        }
    }
    if let Some(endpoint) = endpoints.quic {
        servers.spawn(crate::quic::serve(endpoint, Arc::clone(&node)));
    }

    let result = tokio::select! {
        r = warm_up_then_wait(&node, backend, shutdown, on_ready) => r,
        Some(r) = servers.join_next() => {
            // A server only stops by itself on an error.
            r??;
            return Ok(());
        }
    };

    info!("shutting down: no new connections; open streams get {grace:?} to finish");
    stop_tx.send_replace(true);
    // Streams end by themselves within the grace time; the margin covers
    // the connections' goodbyes.
    let all_ended = async {
        while let Some(r) = servers.join_next().await {
            r??;
        }
        Ok::<(), ServeError>(())
    };
    match tokio::time::timeout(grace + Duration::from_secs(1), all_ended).await {
        Ok(r) => r?,
        Err(_) => {
            warn!("connections still open after the grace time: closing them");
            servers.abort_all();
        }
    }
    node.batcher.close();
    info!("stopped");
    result
}

async fn warm_up_then_wait(
    node: &Node,
    backend: Arc<dyn Backend>,
    shutdown: impl Future<Output = ()>,
    on_ready: impl FnOnce(),
) -> Result<(), ServeError> {
    tokio::pin!(shutdown);
    let name = node.backend_name.clone();
    info!(backend = %name, "warming up the backend");
    // A plain thread, not spawn_blocking: a shutdown during a long model
    // load must not wait for the load to finish.
    let (done_tx, done) = oneshot::channel();
    std::thread::Builder::new()
        .name("sut-node-warm-up".into())
        .spawn(move || {
            let _ = done_tx.send(catch_unwind(AssertUnwindSafe(|| backend.warm_up())));
        })?;
    let warmed = tokio::select! {
        r = done => r,
        _ = &mut shutdown => return Ok(()),
    };
    match warmed {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(source))) => {
            return Err(ServeError::WarmUp {
                backend: name,
                source,
            })
        }
        Ok(Err(_)) | Err(_) => return Err(ServeError::WarmUpPanic(name)),
    }
    node.ready.store(true, Ordering::Release);
    info!(backend = %name, "ready");
    on_ready();
    shutdown.await;
    Ok(())
}

pub(crate) struct Node {
    pub(crate) config: NodeConfig,
    backend_name: String,
    /// Set once the backend has warmed up.
    ready: AtomicBool,
    /// Samples received and not yet answered, all streams together.
    pub(crate) outstanding: Arc<AtomicU64>,
    pub(crate) batcher: Batcher<Job>,
    /// Becomes true when the node shuts down.
    pub(crate) stop: watch::Receiver<bool>,
    /// Numbers the Infer streams in the logs.
    pub(crate) streams: AtomicU64,
    /// The decoded-bytes budget of the samples received and not yet run
    /// (`Limits::max_decoded_bytes`).
    pub(crate) decoded: Budget,
    /// Each connection's share of it (`Limits::max_decoded_bytes_per_connection`).
    pub(crate) connections: Connections,
    /// Turns to decode compressed inputs, one per core.
    pub(crate) decoding: Arc<Semaphore>,
    /// Connections (by peer address) whose last session was refused, with
    /// the reason: their Infer streams are refused too.
    refused: Mutex<HashMap<SocketAddr, String>>,
}

/// Most connections whose refused session is remembered; past it the oldest
/// knowledge is dropped, so a client cannot grow the table without bound.
const MAX_REFUSED_PEERS: usize = 4096;

impl Node {
    /// Why an Infer stream from `peer` cannot open now, if it cannot.
    pub(crate) fn infer_refusal(&self, peer: Option<SocketAddr>) -> Option<Status> {
        if !self.ready.load(Ordering::Acquire) {
            return Some(Status::unavailable(format!(
                "sut-node {} is not ready: its backend is still loading",
                self.config.name
            )));
        }
        let refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        let reason = refused.get(&peer?)?;
        Some(Status::failed_precondition(format!(
            "this connection's session was refused ({reason}); start an accepted session first"
        )))
    }

    /// Remembers whether `peer`'s latest session was refused.
    fn session_outcome(&self, peer: Option<SocketAddr>, refusal: &str) {
        let Some(peer) = peer else { return };
        let mut refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        if refusal.is_empty() {
            refused.remove(&peer);
            return;
        }
        if refused.len() >= MAX_REFUSED_PEERS {
            refused.clear();
        }
        refused.insert(peer, refusal.to_string());
    }
}

/// Completes once the node is shutting down.
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    // An error means the node is gone, which is a stop too.
    let _ = stop.wait_for(|s| *s).await;
}

/// Why a session is refused, if it is.
fn refusal(config: &NodeConfig, request: &SessionRequest) -> Option<String> {
    if request.protocol_version != proto::PROTOCOL_VERSION {
        return Some(format!(
            "protocol version mismatch: the LoadGen node speaks version {}, this sut-node version {}",
            request.protocol_version,
            proto::PROTOCOL_VERSION
        ));
    }
    if let Some(model) = &config.model {
        if *model != request.model {
            return Some(format!(
                "model mismatch: the session is for model {:?}, this sut-node serves {:?}",
                request.model, model
            ));
        }
    }
    if !SCENARIOS.contains(&request.scenario.as_str()) {
        return Some(format!(
            "unknown scenario {:?}: expected one of {}",
            request.scenario,
            SCENARIOS.join(", ")
        ));
    }
    if !codec::can_decode(request.input_codec) {
        return Some(format!(
            "this sut-node cannot decode {} inputs; it decodes {}",
            codec::codec_name(request.input_codec),
            codec::input_codec_names()
        ));
    }
    None
}

pub(crate) struct Service(pub(crate) Arc<Node>);

#[tonic::async_trait]
impl SutNode for Service {
    async fn name(&self, _: Request<NameRequest>) -> Result<Response<NameReply>, Status> {
        Ok(Response::new(NameReply {
            name: self.0.config.name.clone(),
        }))
    }

    async fn start_session(
        &self,
        request: Request<SessionRequest>,
    ) -> Result<Response<SessionReply>, Status> {
        let node = &self.0;
        let remote = request.remote_addr();
        let peer = peer(&request);
        let request = request.into_inner();
        let refusal = refusal(&node.config, &request).unwrap_or_default();
        node.session_outcome(remote, &refusal);
        let ready = node.ready.load(Ordering::Acquire);
        crate::metrics::NODE.session(refusal.is_empty());
        if refusal.is_empty() {
            info!(
                %peer,
                model = %request.model,
                scenario = %request.scenario,
                input_codec = %codec::codec_name(request.input_codec),
                output_codec = %node.config.codecs.output,
                ready,
                "session accepted"
            );
        } else {
            warn!(%peer, "session refused: {refusal}");
        }
        Ok(Response::new(SessionReply {
            protocol_version: proto::PROTOCOL_VERSION,
            node_name: node.config.name.clone(),
            ready,
            refusal,
            backend: node.backend_name.clone(),
            max_batch_size: u32::try_from(node.config.batch.max_batch_size).unwrap_or(u32::MAX),
            input_codecs: codec::INPUT_CODECS.iter().map(|c| *c as i32).collect(),
            output_codec: node.config.codecs.output.kind.wire(),
        }))
    }

    async fn health(&self, _: Request<HealthRequest>) -> Result<Response<HealthReply>, Status> {
        Ok(Response::new(HealthReply {
            ready: self.0.ready.load(Ordering::Acquire),
            outstanding: self.0.outstanding.load(Ordering::Relaxed),
        }))
    }

    async fn describe(
        &self,
        _: Request<proto::DescribeRequest>,
    ) -> Result<Response<proto::DescribeReply>, Status> {
        let node = &self.0;
        Ok(Response::new(crate::describe::describe(
            &node.config.name,
            &node.backend_name,
        )))
    }

    async fn probe(
        &self,
        request: Request<proto::ProbeRequest>,
    ) -> Result<Response<proto::ProbeReply>, Status> {
        crate::describe::probe(request.get_ref())
            .map(Response::new)
            .map_err(Status::invalid_argument)
    }

    type InferStream = ReceiverStream<Result<FromNode, Status>>;

    async fn infer(
        &self,
        request: Request<Streaming<ToNode>>,
    ) -> Result<Response<Self::InferStream>, Status> {
        let node = &self.0;
        if let Some(refusal) = node.infer_refusal(request.remote_addr()) {
            return Err(refusal);
        }
        let stream = node.streams.fetch_add(1, Ordering::Relaxed) + 1;
        info!(stream, peer = %peer(&request), "infer stream opened");
        let connection = node.connections.of(request.remote_addr());
        let answers = infer::open(stream, request.into_inner(), connection, Arc::clone(node));
        Ok(Response::new(answers))
    }
}

fn peer<T>(request: &Request<T>) -> String {
    request
        .remote_addr()
        .map_or_else(|| "unknown".to_string(), |a: SocketAddr| a.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::Codec;

    fn config(model: Option<&str>) -> NodeConfig {
        NodeConfig {
            name: "n".into(),
            model: model.map(String::from),
            batch: BatchPolicy {
                max_batch_size: 1,
                max_wait: Duration::ZERO,
            },
            heartbeat: None,
            shutdown_grace: Duration::ZERO,
            codecs: codec::NodeCodecs::default(),
            limits: Limits::default(),
        }
    }

    fn session(model: &str, scenario: &str, codec: i32) -> SessionRequest {
        SessionRequest {
            protocol_version: proto::PROTOCOL_VERSION,
            model: model.into(),
            scenario: scenario.into(),
            input_codec: codec,
        }
    }

    #[test]
    fn sessions_are_checked_for_version_model_scenario_and_codec() {
        let none = Codec::None as i32;
        let node = config(Some("resnet50"));
        for scenario in SCENARIOS {
            assert_eq!(refusal(&node, &session("resnet50", scenario, none)), None);
        }
        assert_eq!(
            refusal(&config(None), &session("bert", "Offline", none)),
            None
        );

        let old = SessionRequest {
            protocol_version: proto::PROTOCOL_VERSION + 1,
            ..session("resnet50", "Offline", none)
        };
        let r = refusal(&node, &old).unwrap();
        assert!(
            r.contains(&format!("version {}", proto::PROTOCOL_VERSION + 1)),
            "{r}"
        );
        assert!(
            r.contains(&format!("version {}", proto::PROTOCOL_VERSION)),
            "{r}"
        );

        let r = refusal(&node, &session("bert", "Offline", none)).unwrap();
        assert!(r.contains("\"bert\"") && r.contains("\"resnet50\""), "{r}");

        let r = refusal(&node, &session("resnet50", "offline", none)).unwrap();
        assert!(r.contains("unknown scenario \"offline\""), "{r}");

        for c in [Codec::Zstd, Codec::Lz4] {
            assert_eq!(
                refusal(&node, &session("resnet50", "Server", c as i32)),
                None
            );
        }
        let r = refusal(&node, &session("resnet50", "Server", 7)).unwrap();
        assert!(
            r.contains("cannot decode unknown codec 7 inputs") && r.contains("none, zstd, lz4"),
            "{r}"
        );
    }
}
