//! Serving a node: its lifecycle (warm-up, readiness, shutdown) and its
//! transports, gRPC here and QUIC in `quic`, both over the control plane of
//! `node` and the data path of `infer`.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use proto::sut_node_server::SutNodeServer;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;
use tonic::transport::Server;
use tracing::{info, warn};

use crate::backend::Backend;
use crate::grpc_framed::FramedRoutes;
use crate::infer::DataPath;
use crate::listen;
use crate::node::{Node, Service};
pub use crate::node::{ServeError, SCENARIOS};
pub use crate::node_config::NodeConfig;
use crate::stop::stopped;
use crate::whole_messages::WholeMessages;

/// Largest message the node sends (answers of some benchmarks are far above
/// gRPC's 4 MiB default); what it accepts is `Limits::max_message_bytes`.
const MAX_MESSAGE_BYTES: usize = 1 << 30;
/// HTTP/2 windows: the connection's is larger than a stream's, so a stream
/// held back by a full batcher queue never blocks Health or a new stream on
/// the same connection. A stream's holds about a dozen ResNet50 inputs: with
/// less, the sender often has room for only part of a sample, which then
/// arrives in two DATA frames and must be copied together. What a client can
/// make the node hold unread is the connection's window per connection.
const STREAM_WINDOW: u32 = 8 << 20;
const CONNECTION_WINDOW: u32 = 16 << 20;
/// Largest HTTP/2 DATA frame the node accepts: with the default (16 KiB) a
/// ResNet50 input arrives as 37 frames, each its own header, poll and
/// buffer; messages are held until complete anyway, so larger frames delay
/// nothing.
const MAX_FRAME: u32 = 1 << 20;

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
        describe: true,
    };
    serve_on(endpoints, config, backend, shutdown, on_ready).await
}

/// Where a node serves: gRPC on a TCP listener (plain, or TLS), QUIC on a
/// quinn endpoint (see `quic::endpoint`), or both at once.
pub struct Endpoints {
    /// The TCP listener gRPC serves on; `None`: no gRPC.
    pub grpc: Option<TcpListener>,
    /// TLS for gRPC; its ALPN must be `h2`.
    pub grpc_tls: Option<rustls::ServerConfig>,
    /// The QUIC endpoint, its TLS already set; `None`: no QUIC.
    pub quic: Option<quinn::Endpoint>,
    /// Whether `Describe` answers (OS, kernel, NIC names and addresses,
    /// versions), to whoever may connect: with mutual TLS, clients with a
    /// certificate of its CA; without, anyone. `false`: it is refused.
    pub describe: bool,
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
    let grace = config.shutdown_grace;
    let data = Arc::new(DataPath::start(
        config,
        Arc::clone(&backend),
        stop_rx.clone(),
    )?);
    let node = Arc::new(Node::new(data, Arc::clone(&backend), endpoints.describe));

    let mut servers: JoinSet<Result<(), ServeError>> = JoinSet::new();
    if let Some(listener) = endpoints.grpc {
        let limits = node.config().limits;
        let control = SutNodeServer::new(Service(Arc::clone(&node)))
            .max_decoding_message_size(limits.max_message_bytes)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let service = FramedRoutes::new(control, Arc::clone(&node));
        let max_message = limits.max_message_bytes;
        let router = Server::builder()
            // Requests' messages reach tonic only once complete, so that a
            // declared length is never reserved before its bytes arrive.
            // The Infer and Probe routes frame their requests themselves,
            // holding only what has arrived (`grpc_framed`).
            .layer(tower::util::MapRequestLayer::new(
                move |request: http::Request<tonic::body::Body>| {
                    let path = request.uri().path();
                    if path == proto::INFER_PATH || path == proto::PROBE_PATH {
                        return request;
                    }
                    request
                        .map(|body| tonic::body::Body::new(WholeMessages::new(body, max_message)))
                },
            ))
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_frame_size(MAX_FRAME)
            .max_concurrent_streams(limits.max_streams_per_connection)
            .add_service(service);
        let mut stop = stop_rx.clone();
        let stopping = async move { stopped(&mut stop).await };
        match endpoints.grpc_tls {
            None => {
                let slots = Arc::clone(&node.grpc_slots);
                let incoming = listen::incoming(
                    listener,
                    slots,
                    limits,
                    stop_rx.clone(),
                    true,
                    |tcp| async { Ok(tcp) },
                );
                servers.spawn(async move {
                    Ok(router
                        .serve_with_incoming_shutdown(incoming, stopping)
                        .await?)
                });
            }
            Some(tls) => {
                let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
                let slots = Arc::clone(&node.grpc_slots);
                let incoming = listen::incoming(
                    listener,
                    slots,
                    limits,
                    stop_rx.clone(),
                    false,
                    move |tcp| acceptor.accept(tcp),
                );
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
    crate::memory::reuse_freed_buffers();
    tokio::spawn(crate::memory::give_back_after_bursts(stop_rx.clone()));

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
    node.data.batcher.close();
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
