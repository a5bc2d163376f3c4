//! The node's control plane, whatever the transport: names, sessions,
//! health, descriptions, probes, and the opening of Infer streams (whose
//! data path is `infer`). gRPC serves it as is; QUIC calls it per request.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use proto::codec::WireCodec;
use proto::sut_node_server::SutNode;
use proto::{
    FromNode, HealthReply, HealthRequest, NameReply, NameRequest, SessionReply, SessionRequest,
    ToNode,
};
use thiserror::Error;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::{info, warn};

use crate::backend::{Backend, BackendError, RunMode, SessionNeeds};
use crate::codec;
use crate::infer::DataPath;
use crate::listen::Slots;
use crate::node_config::NodeConfig;

/// The scenarios a session may name (LoadGen's spelling).
pub const SCENARIOS: [&str; 4] = ["SingleStream", "MultiStream", "Server", "Offline"];

/// Why the node stopped serving.
#[derive(Debug, Error)]
pub enum ServeError {
    #[error("backend {backend} failed to load: {source}")]
    /// The backend's loading or warm-up failed.
    WarmUp {
        /// The backend's name.
        backend: String,
        /// Its error.
        source: BackendError,
    },
    #[error("backend {0} panicked while loading")]
    /// The backend (named here) panicked while loading.
    WarmUpPanic(String),
    #[error("cannot start a thread: {0}")]
    /// A worker thread could not be spawned.
    Thread(#[from] std::io::Error),
    #[error("gRPC server failed: {0}")]
    /// The gRPC server stopped with an error.
    Transport(#[from] tonic::transport::Error),
    #[error("the gRPC server task failed: {0}")]
    /// The gRPC server's task panicked or was cancelled.
    Task(#[from] tokio::task::JoinError),
}

/// A serving node: its data path, and what the control requests know.
pub(crate) struct Node {
    /// What the Infer streams share (settings included).
    pub(crate) data: Arc<DataPath>,
    pub(crate) backend_name: String,
    /// Asked whether it can answer each session.
    backend: Arc<dyn Backend>,
    /// Set once the backend has warmed up.
    pub(crate) ready: AtomicBool,
    /// Numbers the Infer streams in the logs.
    pub(crate) streams: AtomicU64,
    /// Whether `Describe` answers (`--no-describe`: no).
    describe: bool,
    /// Connections (by peer address) whose last session was refused, with
    /// the reason: their Infer streams are refused too.
    refused: Mutex<HashMap<SocketAddr, String>>,
    /// Connections (by peer address) whose latest accepted session is an
    /// accuracy run: their samples are answered as such.
    accuracy: Mutex<HashSet<SocketAddr>>,
    /// The places of each transport's connections: those with an accepted
    /// session keep theirs.
    pub(crate) grpc_slots: Arc<Slots>,
    pub(crate) quic_slots: Arc<Slots>,
}

/// Marks a control request that came over QUIC (whose connections have
/// places of their own).
#[derive(Clone, Copy, Debug)]
pub(crate) struct OverQuic;

/// Most connections whose refused session is remembered; past it the oldest
/// knowledge is dropped, so a client cannot grow the table without bound.
const MAX_REFUSED_PEERS: usize = 4096;

impl Node {
    pub(crate) fn new(data: Arc<DataPath>, backend: Arc<dyn Backend>, describe: bool) -> Self {
        let limits = data.config.limits;
        Self {
            data,
            backend_name: backend.name().to_string(),
            backend,
            ready: AtomicBool::new(false),
            streams: AtomicU64::new(0),
            describe,
            refused: Mutex::default(),
            accuracy: Mutex::default(),
            grpc_slots: Arc::new(Slots::new(limits)),
            quic_slots: Arc::new(Slots::new(limits)),
        }
    }

    pub(crate) fn config(&self) -> &NodeConfig {
        &self.data.config
    }

    /// Why an Infer stream from `peer` cannot open now, if it cannot.
    pub(crate) fn infer_refusal(&self, peer: Option<SocketAddr>) -> Option<Status> {
        if !self.ready.load(Ordering::Acquire) {
            return Some(Status::unavailable(format!(
                "sut-node {} is not ready: its backend is still loading",
                self.config().name
            )));
        }
        let refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        let reason = refused.get(&peer?)?;
        Some(Status::failed_precondition(format!(
            "this connection's session was refused ({reason}); start an accepted session first"
        )))
    }

    /// The test mode of the latest accepted session on `peer`'s
    /// connection: that of the samples its Infer streams carry.
    pub(crate) fn session_mode(&self, peer: Option<SocketAddr>) -> RunMode {
        let accuracy = self.accuracy.lock().unwrap_or_else(PoisonError::into_inner);
        match peer {
            Some(peer) if accuracy.contains(&peer) => RunMode::AccuracyOnly,
            _ => RunMode::PerformanceOnly,
        }
    }

    /// Remembers the test mode of `peer`'s accepted session. Past
    /// `MAX_REFUSED_PEERS` connections the oldest knowledge is dropped (their
    /// samples are then answered as in a performance run).
    fn session_mode_is(&self, peer: Option<SocketAddr>, mode: RunMode) {
        let Some(peer) = peer else { return };
        let mut accuracy = self.accuracy.lock().unwrap_or_else(PoisonError::into_inner);
        if mode != RunMode::AccuracyOnly {
            accuracy.remove(&peer);
            return;
        }
        if accuracy.len() >= MAX_REFUSED_PEERS {
            accuracy.clear();
        }
        accuracy.insert(peer);
    }

    /// Remembers whether `peer`'s latest session was refused; a connection
    /// with an accepted one keeps its place in the limits.
    fn session_outcome(&self, peer: Option<SocketAddr>, over_quic: bool, refusal: &str) {
        let Some(peer) = peer else { return };
        let slots = if over_quic {
            &self.quic_slots
        } else {
            &self.grpc_slots
        };
        slots.session(peer, refusal.is_empty());
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

/// Why a session is refused, if it is.
fn refusal(config: &NodeConfig, backend: &dyn Backend, request: &SessionRequest) -> Option<String> {
    if request.protocol_version != proto::PROTOCOL_VERSION {
        return Some(format!(
            "protocol version mismatch: the LoadGen node speaks version {}, this sut-node version {}",
            request.protocol_version,
            proto::PROTOCOL_VERSION
        ));
    }
    if let Some(model) = &config.model {
        if facts::benchmarks::canonical(model) != facts::benchmarks::canonical(&request.model) {
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
    backend.cannot_serve(&SessionNeeds {
        model: &request.model,
        token_latencies: request.token_latencies,
    })
}

pub(crate) struct Service(pub(crate) Arc<Node>);

#[tonic::async_trait]
impl SutNode for Service {
    async fn name(&self, _: Request<NameRequest>) -> Result<Response<NameReply>, Status> {
        Ok(Response::new(NameReply {
            name: self.0.config().name.clone(),
        }))
    }

    async fn start_session(
        &self,
        request: Request<SessionRequest>,
    ) -> Result<Response<SessionReply>, Status> {
        let node = &self.0;
        let remote = request.remote_addr();
        let over_quic = request.extensions().get::<OverQuic>().is_some();
        let peer = peer(&request);
        let request = request.into_inner();
        let refusal = refusal(node.config(), node.backend.as_ref(), &request).unwrap_or_default();
        node.session_outcome(remote, over_quic, &refusal);
        if refusal.is_empty() {
            node.session_mode_is(remote, request.mode());
        }
        let ready = node.ready.load(Ordering::Acquire);
        crate::metrics::NODE.session(refusal.is_empty());
        if refusal.is_empty() {
            info!(
                %peer,
                model = %request.model,
                scenario = %request.scenario,
                mode = request.mode().as_str_name(),
                input_codec = %codec::codec_name(request.input_codec),
                output_codec = %node.config().codecs.output,
                ready,
                "session accepted"
            );
        } else {
            warn!(%peer, "session refused: {refusal}");
        }
        Ok(Response::new(SessionReply {
            protocol_version: proto::PROTOCOL_VERSION,
            node_name: node.config().name.clone(),
            ready,
            refusal,
            backend: node.backend_name.clone(),
            max_batch_size: u32::try_from(node.config().batch.max_batch_size).unwrap_or(u32::MAX),
            input_codecs: codec::INPUT_CODECS.iter().map(|c| *c as i32).collect(),
            output_codec: node.config().codecs.output.kind.wire(),
        }))
    }

    async fn health(&self, _: Request<HealthRequest>) -> Result<Response<HealthReply>, Status> {
        Ok(Response::new(HealthReply {
            ready: self.0.ready.load(Ordering::Acquire),
            outstanding: self.0.data.outstanding.load(Ordering::Relaxed),
        }))
    }

    async fn describe(
        &self,
        _: Request<proto::DescribeRequest>,
    ) -> Result<Response<proto::DescribeReply>, Status> {
        let node = &self.0;
        if !node.describe {
            return Err(Status::permission_denied(format!(
                "sut-node {} does not describe itself (it was started with --no-describe)",
                node.config().name
            )));
        }
        Ok(Response::new(crate::describe::describe(
            &node.config().name,
            &node.backend_name,
        )))
    }

    /// Not reached: `grpc_framed::FramedRoutes` serves Probe before this
    /// service sees it, framing the reply itself.
    async fn probe(
        &self,
        _request: Request<proto::ProbeRequest>,
    ) -> Result<Response<proto::ProbeReply>, Status> {
        Err(Status::internal("sut-node: Probe reached the wrong route"))
    }

    type InferStream = ReceiverStream<Result<FromNode, Status>>;

    /// Not reached: `grpc_framed::FramedRoutes` serves the Infer path before
    /// this service sees it, framing the stream itself.
    async fn infer(
        &self,
        _request: Request<Streaming<ToNode>>,
    ) -> Result<Response<Self::InferStream>, Status> {
        Err(Status::internal("sut-node: Infer reached the wrong route"))
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
    use crate::backend::synthetic::{ServiceTime, Synthetic, SyntheticConfig};
    use crate::backend::{BatchInfo, Output, SampleSink};
    use crate::batcher::BatchPolicy;
    use crate::limits::Limits;
    use bytes::Bytes;
    use proto::Codec;
    use std::time::Duration;

    /// The synthetic backend, answering with `llm_tokens` tokens each.
    fn synthetic(llm_tokens: u32) -> Synthetic {
        Synthetic::new(SyntheticConfig {
            layout: Default::default(),
            service_time: ServiceTime::Fixed(Duration::ZERO),
            output_size: 4,
            llm_tokens,
            seed: 0,
        })
    }

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
            token_latencies: false,
            mode: proto::RunMode::Unspecified as i32,
        }
    }

    #[test]
    fn sessions_are_checked_for_version_model_scenario_and_codec() {
        let none = Codec::None as i32;
        let node = config(Some("resnet50"));
        let synthetic = synthetic(0);
        let refusal = |c: &NodeConfig, r: &SessionRequest| refusal(c, &synthetic, r);
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

    #[test]
    fn an_old_clients_session_says_no_mode_and_is_served_as_a_performance_run() {
        use prost::Message;
        // A SessionRequest as a LoadGen node that predates `mode` encodes
        // it: fields 1 to 5 only.
        let mut old = vec![0x08, proto::PROTOCOL_VERSION as u8, 0x12, 7];
        old.extend(b"dlrm-v3");
        old.extend([0x1a, 7]);
        old.extend(b"Offline");
        old.extend([0x20, 0, 0x28, 0]);
        let request = SessionRequest::decode(&old[..]).unwrap();
        assert_eq!(request.model, "dlrm-v3");
        assert_eq!(request.mode(), RunMode::Unspecified);
        assert_eq!(refusal(&config(None), &synthetic(0), &request), None);

        let (_stop, stop) = tokio::sync::watch::channel(false);
        let backend: Arc<dyn Backend> = Arc::new(synthetic(0));
        let data = Arc::new(DataPath::start(config(None), Arc::clone(&backend), stop).unwrap());
        let node = Node::new(data, backend, false);
        let (a, b): (SocketAddr, SocketAddr) = (
            "127.0.0.1:5001".parse().unwrap(),
            "127.0.0.1:5002".parse().unwrap(),
        );
        node.session_mode_is(Some(a), request.mode());
        assert_eq!(node.session_mode(Some(a)), RunMode::PerformanceOnly);
        // An accuracy session is remembered for its connection alone, until
        // the connection's next session says otherwise.
        node.session_mode_is(Some(b), RunMode::AccuracyOnly);
        assert_eq!(node.session_mode(Some(b)), RunMode::AccuracyOnly);
        assert_eq!(node.session_mode(Some(a)), RunMode::PerformanceOnly);
        assert_eq!(node.session_mode(None), RunMode::PerformanceOnly);
        node.session_mode_is(Some(b), request.mode());
        assert_eq!(node.session_mode(Some(b)), RunMode::PerformanceOnly);
    }

    /// A backend that answers without tokens, as most do.
    struct Plain;

    impl Backend for Plain {
        fn name(&self) -> &str {
            "plain"
        }
        fn warm_up(&self) -> Result<(), BackendError> {
            Ok(())
        }
        fn infer(
            &self,
            _: &[Bytes],
            _: BatchInfo,
            _: &mut dyn SampleSink,
        ) -> Result<Vec<Output>, BackendError> {
            Ok(Vec::new())
        }
    }

    #[test]
    fn a_session_judged_on_tokens_is_refused_by_a_backend_that_answers_without() {
        let any = config(None);
        let llm = SessionRequest {
            token_latencies: true,
            ..session("llama3_1-8b", "Server", Codec::None as i32)
        };
        // A synthetic node started without --benchmark (nor --llm-tokens).
        let r = refusal(&any, &synthetic(0), &llm).unwrap();
        assert!(
            r.contains("llama3_1-8b session is judged on token latencies")
                && r.contains("--benchmark llama3_1-8b"),
            "{r}"
        );
        let r = refusal(&any, &synthetic(1), &llm).unwrap();
        assert!(r.contains("--llm-tokens 2 or more"), "{r}");
        assert_eq!(refusal(&any, &synthetic(8), &llm), None);
        // Other backends say so unless they count tokens.
        let r = refusal(&any, &Plain, &llm).unwrap();
        assert!(
            r.contains("the plain backend's answers carry no token counts"),
            "{r}"
        );
        // A session without token latencies is served by any of them.
        let plain = session("llama3_1-8b", "Server", Codec::None as i32);
        assert_eq!(refusal(&any, &synthetic(0), &plain), None);
        assert_eq!(refusal(&any, &Plain, &plain), None);
    }
}
