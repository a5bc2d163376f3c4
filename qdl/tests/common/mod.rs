//! An in-process fake sut-node (a small tonic server on 127.0.0.1:0) whose
//! misbehaviours are switched on per test, a data set, and a helper that runs
//! a whole LoadGen test against a `Qdl`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure
#![allow(dead_code)] // each test binary uses a different part

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use compression::{CodecKind, CodecSpec};
use loadgen_engine::null_sut::SizedQsl;
use loadgen_engine::runner::{start_test, LogSettings, TestOutcome};
use loadgen_engine::TestSettings;
use proto::codec::WireCodec;
use proto::sut_node_server::{SutNode, SutNodeServer};
use proto::{
    to_node, Codec, FirstToken, FromNode, HealthReply, HealthRequest, NameReply, NameRequest,
    SampleAnswer, SampleError, SessionReply, SessionRequest, ToNode, PROTOCOL_VERSION,
};
use qdl::{NodeAddr, Qdl, QdlConfig, SampleData, StoredSample};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status, Streaming};

/// Length of every answer: `facts::synthetic::answer(payload, ANSWER_LEN)`.
pub const ANSWER_LEN: usize = 16;
/// Tokens reported per answer by a node with `first_tokens` on.
pub const N_TOKENS: i64 = 5;

/// What a fake node does. The default answers every sample correctly and
/// sends a heartbeat every 100 ms.
#[derive(Clone, Debug)]
pub struct Behaviour {
    /// The name in its sessions.
    pub name: String,
    /// The Name RPC's answer, when it should differ from `name`.
    pub name_reply: Option<String>,
    pub refusal: String,
    pub ready: bool,
    /// Not ready for its first N sessions (a backend still loading).
    pub loading_sessions: usize,
    pub version: u32,
    /// Input codecs announced in its sessions (it decodes them all).
    pub input_codecs: Vec<Codec>,
    /// Its answers and first tokens are compressed with this codec.
    pub output_codec: Codec,
    /// Answer sample number N with a zstd frame declaring 1 GiB.
    pub bomb_at: Option<u64>,
    /// Answer sample number N with a damaged frame of its output codec.
    pub corrupt_at: Option<u64>,
    /// Answer sample number N with 4 MiB of raw bytes.
    pub huge_at: Option<u64>,
    /// Send each sample's first token (the first 4 answer bytes) first.
    pub first_tokens: bool,
    /// End the answer stream on receiving the node's sample number N
    /// (1-based, counted over all its streams).
    pub close_at: Option<u64>,
    /// From sample number N on, answer nothing and send no heartbeat.
    pub silent_from: Option<u64>,
    /// From sample number N on, answer nothing but keep sending heartbeats
    /// (no real peer does: a backend hung behind a live node).
    pub hung_from: Option<u64>,
    /// Never answer; at every heartbeat, send again the first token of
    /// every sample received (no real peer does: a node that looks busy).
    pub first_tokens_forever: bool,
    /// The token count of every answer, instead of its own.
    pub n_tokens: Option<i64>,
    /// Answer sample number N with a SampleError.
    pub error_at: Option<u64>,
    /// Answer sample number N with a wrong id.
    pub wrong_id_at: Option<u64>,
    /// Fail the answer stream with an error status on sample number N.
    pub status_at: Option<u64>,
    pub heartbeat: Option<Duration>,
    /// Keep every sample in `NodeLog::samples` (off for throughput runs).
    pub record: bool,
}

impl Behaviour {
    pub fn named(name: &str) -> Self {
        Self {
            name: name.into(),
            name_reply: None,
            refusal: String::new(),
            ready: true,
            loading_sessions: 0,
            version: PROTOCOL_VERSION,
            input_codecs: vec![Codec::None, Codec::Zstd, Codec::Lz4],
            output_codec: Codec::None,
            bomb_at: None,
            corrupt_at: None,
            huge_at: None,
            first_tokens: false,
            close_at: None,
            silent_from: None,
            hung_from: None,
            first_tokens_forever: false,
            n_tokens: None,
            error_at: None,
            wrong_id_at: None,
            status_at: None,
            heartbeat: Some(Duration::from_millis(100)),
            record: true,
        }
    }
}

/// What a fake node saw.
#[derive(Default)]
pub struct NodeLog {
    pub sessions: Mutex<Vec<SessionRequest>>,
    pub name_calls: AtomicU64,
    pub received: AtomicU64,
    /// Every sample received: (id, payload, codec).
    pub samples: Mutex<Vec<(u64, Bytes, i32)>>,
    /// Infer streams the client ended cleanly (end of stream, not a reset).
    pub clean_ends: AtomicU64,
}

struct Service {
    b: Behaviour,
    log: Arc<NodeLog>,
}

enum Reply {
    /// The answer for this (decoded) input.
    Answer(u64, Bytes),
    Error(u64),
    Bomb(u64),
    Huge(u64),
    Corrupt(u64, Bytes),
    /// End the answer stream with an error status.
    Fail,
}

#[tonic::async_trait]
impl SutNode for Service {
    async fn name(&self, _: Request<NameRequest>) -> Result<Response<NameReply>, Status> {
        self.log.name_calls.fetch_add(1, Ordering::SeqCst);
        let name = self
            .b
            .name_reply
            .clone()
            .unwrap_or_else(|| self.b.name.clone());
        Ok(Response::new(NameReply { name }))
    }

    async fn start_session(
        &self,
        req: Request<SessionRequest>,
    ) -> Result<Response<SessionReply>, Status> {
        let seen = {
            let mut sessions = self.log.sessions.lock().unwrap();
            sessions.push(req.into_inner());
            sessions.len()
        };
        Ok(Response::new(SessionReply {
            protocol_version: self.b.version,
            node_name: self.b.name.clone(),
            ready: self.b.ready && seen > self.b.loading_sessions,
            refusal: self.b.refusal.clone(),
            backend: "fake".into(),
            max_batch_size: 1,
            input_codecs: self.b.input_codecs.iter().map(|c| *c as i32).collect(),
            output_codec: self.b.output_codec as i32,
        }))
    }

    async fn health(&self, _: Request<HealthRequest>) -> Result<Response<HealthReply>, Status> {
        Ok(Response::new(HealthReply {
            ready: self.b.ready,
            outstanding: 0,
        }))
    }

    async fn describe(
        &self,
        _: Request<proto::DescribeRequest>,
    ) -> Result<Response<proto::DescribeReply>, Status> {
        Err(Status::unimplemented(
            "the mock node does not describe itself",
        ))
    }

    async fn probe(
        &self,
        _: Request<proto::ProbeRequest>,
    ) -> Result<Response<proto::ProbeReply>, Status> {
        Err(Status::unimplemented(
            "the mock node does not answer probes",
        ))
    }

    type InferStream = UnboundedReceiverStream<Result<FromNode, Status>>;

    async fn infer(
        &self,
        req: Request<Streaming<ToNode>>,
    ) -> Result<Response<Self::InferStream>, Status> {
        let mut inbound = req.into_inner();
        let (out, out_rx) = mpsc::unbounded_channel();
        let (replies, mut replies_rx) = mpsc::unbounded_channel::<Reply>();
        let silent = Arc::new(AtomicBool::new(false));
        // Samples whose first tokens are sent again and again.
        let tokened = Arc::new(Mutex::new(Vec::<u64>::new()));
        let (b, log, quiet) = (self.b.clone(), self.log.clone(), silent.clone());
        let tokened_in = Arc::clone(&tokened);
        tokio::spawn(async move {
            loop {
                match inbound.message().await {
                    Ok(Some(ToNode {
                        kind: Some(to_node::Kind::Sample(s)),
                    })) => {
                        // Counted over the node, all its streams together.
                        let n = log.received.fetch_add(1, Ordering::SeqCst) + 1;
                        if b.record {
                            let mut all = log.samples.lock().unwrap();
                            all.push((s.id, s.payload.clone(), s.codec));
                        }
                        if b.close_at == Some(n) {
                            return; // drops `replies`: the answer stream ends
                        }
                        if b.status_at == Some(n) {
                            let _ = replies.send(Reply::Fail);
                            continue;
                        }
                        if b.silent_from.is_some_and(|k| n >= k) {
                            quiet.store(true, Ordering::SeqCst);
                            continue;
                        }
                        if b.hung_from.is_some_and(|k| n >= k) {
                            continue;
                        }
                        if b.first_tokens_forever {
                            tokened_in.lock().unwrap().push(s.id);
                            continue;
                        }
                        let id = if b.wrong_id_at == Some(n) {
                            s.id + 1_000_000
                        } else {
                            s.id
                        };
                        // A real node decodes inside its own time; so does this one.
                        let input = CodecKind::from_wire(s.codec)
                            .and_then(|k| compression::decompress(k, &s.payload, usize::MAX))
                            .map(Bytes::from);
                        let r = match input {
                            _ if b.error_at == Some(n) => Reply::Error(id),
                            _ if b.bomb_at == Some(n) => Reply::Bomb(id),
                            _ if b.huge_at == Some(n) => Reply::Huge(id),
                            Ok(input) if b.corrupt_at == Some(n) => Reply::Corrupt(id, input),
                            Ok(input) => Reply::Answer(id, input),
                            Err(_) => Reply::Error(id),
                        };
                        let _ = replies.send(r);
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        log.clean_ends.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    Err(_) => return,
                }
            }
        });
        let b = self.b.clone();
        tokio::spawn(async move {
            let mut batch = Vec::new();
            let mut beat = tokio::time::interval(b.heartbeat.unwrap_or(Duration::from_secs(3600)));
            loop {
                tokio::select! {
                    got = replies_rx.recv_many(&mut batch, 256) => {
                        if got == 0 {
                            return; // drops `out`: the answer stream ends
                        }
                        let fail = batch.iter().any(|r| matches!(r, Reply::Fail));
                        for m in messages(&b, batch.drain(..)) {
                            if out.send(Ok(m)).is_err() {
                                return;
                            }
                        }
                        if fail {
                            let _ = out.send(Err(Status::internal("backend crashed")));
                            return;
                        }
                    }
                    _ = beat.tick(), if b.heartbeat.is_some() && !silent.load(Ordering::SeqCst) => {
                        let first_tokens: Vec<FirstToken> = tokened
                            .lock()
                            .unwrap()
                            .iter()
                            .map(|&id| FirstToken { id, payload: Bytes::from_static(b"tokn"), codec: Codec::None as i32 })
                            .collect();
                        let _ = out.send(Ok(FromNode { heartbeat: true, first_tokens, ..FromNode::default() }));
                    }
                }
            }
        });
        Ok(Response::new(UnboundedReceiverStream::new(out_rx)))
    }
}

/// The answer messages for a batch of replies: all first tokens in one
/// message (if enabled), then all answers and errors in another.
fn messages(b: &Behaviour, batch: impl Iterator<Item = Reply>) -> Vec<FromNode> {
    let mut tokens = FromNode::default();
    let mut answers = FromNode::default();
    let out = CodecSpec::from(CodecKind::from(b.output_codec)).codec();
    let encode = |data: &[u8]| Bytes::from(out.compress(data));
    let codec = b.output_codec as i32;
    for r in batch {
        match r {
            Reply::Answer(id, payload) => {
                let data = facts::synthetic::answer(&payload, ANSWER_LEN);
                if b.first_tokens {
                    tokens.first_tokens.push(FirstToken {
                        id,
                        payload: encode(&data[..4]),
                        codec,
                    });
                }
                answers.answers.push(SampleAnswer {
                    id,
                    payload: encode(&data),
                    codec,
                    n_tokens: b
                        .n_tokens
                        .unwrap_or(if b.first_tokens { N_TOKENS } else { 0 }),
                    // Timings as a sut-node reports them, so the QDL
                    // records every part of the breakdown.
                    node_queue_ns: 1_000,
                    node_compute_ns: 2_000,
                    node_send_ns: 500,
                });
            }
            Reply::Huge(id) => answers.answers.push(SampleAnswer {
                id,
                payload: Bytes::from(vec![7u8; 4 << 20]),
                codec: Codec::None as i32,
                ..SampleAnswer::default()
            }),
            Reply::Bomb(id) => answers.answers.push(SampleAnswer {
                id,
                payload: Bytes::from(zstd_bomb()),
                codec: Codec::Zstd as i32,
                ..SampleAnswer::default()
            }),
            Reply::Corrupt(id, payload) => {
                let mut frame = out.compress(&facts::synthetic::answer(&payload, ANSWER_LEN));
                // Past any header: the block itself is damaged.
                let last = frame.len() - 1;
                frame[last] ^= 0xff;
                frame.truncate(frame.len().max(6) - 2);
                answers.answers.push(SampleAnswer {
                    id,
                    payload: Bytes::from(frame),
                    codec,
                    ..SampleAnswer::default()
                });
            }
            Reply::Error(id) => answers.errors.push(SampleError {
                id,
                message: "out of GPU memory".into(),
            }),
            Reply::Fail => {}
        }
    }
    [tokens, answers]
        .into_iter()
        .filter(|m| !m.first_tokens.is_empty() || !m.answers.is_empty() || !m.errors.is_empty())
        .collect()
}

/// A fake node serving on 127.0.0.1 until dropped.
pub struct FakeNode {
    pub addr: String,
    pub log: Arc<NodeLog>,
    stop: Option<oneshot::Sender<()>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl FakeNode {
    pub fn start(b: Behaviour) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fake-node")
            .enable_all()
            .build()
            .expect("runtime");
        let log = Arc::new(NodeLog::default());
        let incoming = {
            let _guard = runtime.enter();
            TcpIncoming::bind("127.0.0.1:0".parse().unwrap())
                .expect("bind")
                // As a real node must: answers are small writes.
                .with_nodelay(Some(true))
        };
        let addr = incoming.local_addr().expect("local addr").to_string();
        let (stop, stopped) = oneshot::channel::<()>();
        let service = SutNodeServer::new(Service {
            b,
            log: log.clone(),
        });
        runtime.spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await
                .expect("fake node serves");
        });
        Self {
            addr,
            log,
            stop: Some(stop),
            runtime: Some(runtime),
        }
    }

    pub fn node_addr(&self) -> NodeAddr {
        self.addr.parse().expect("address")
    }

    /// How the QDL names this node in its errors.
    pub fn label(&self, name: &str) -> String {
        format!("sut-node {} (name {name})", self.addr)
    }
}

impl Drop for FakeNode {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(r) = self.runtime.take() {
            r.shutdown_background();
        }
    }
}

/// Sample `i`'s bytes: distinct per sample and of varying length.
pub fn sample_bytes(i: usize) -> Bytes {
    Bytes::from(format!("sample {i}:{}", "#".repeat(i % 37)))
}

/// The data set: `loaded` samples (indices beyond are "not loaded").
pub struct Samples(pub Vec<Bytes>);

impl Samples {
    pub fn new(loaded: usize) -> Arc<Self> {
        Arc::new(Self((0..loaded).map(sample_bytes).collect()))
    }
}

impl SampleData for Samples {
    fn sample(&self, index: usize) -> Option<StoredSample> {
        self.0.get(index).map(|b| StoredSample::raw(b.clone()))
    }
}

/// The data set of [`Samples`], each sample compressed with one codec, as the
/// LoadGen node's QSL stores them.
pub struct Compressed(pub Vec<StoredSample>);

impl Compressed {
    pub fn new(loaded: usize, spec: CodecSpec) -> Arc<Self> {
        let codec = spec.codec();
        Arc::new(Self(
            (0..loaded)
                .map(|i| {
                    let raw = sample_bytes(i);
                    StoredSample {
                        payload: Bytes::from(codec.compress(&raw)),
                        codec: Codec::from(spec.kind),
                        raw_len: raw.len(),
                    }
                })
                .collect(),
        ))
    }
}

impl SampleData for Compressed {
    fn sample(&self, index: usize) -> Option<StoredSample> {
        self.0.get(index).cloned()
    }
}

/// A 1 GiB zstd frame of zeros: a few dozen KiB on the wire, made once.
pub fn zstd_bomb() -> Vec<u8> {
    static BOMB: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    BOMB.get_or_init(|| {
        // Streaming keeps the memory of making it small; the size is declared
        // in the header like the one-shot encoder's.
        let mut out = Vec::new();
        let mut enc = zstd::stream::Encoder::new(&mut out, 1).expect("encoder");
        enc.set_pledged_src_size(Some(1 << 30))
            .expect("pledged size");
        enc.include_contentsize(true).expect("content size");
        let chunk = vec![0u8; 1 << 20];
        for _ in 0..1024 {
            std::io::Write::write_all(&mut enc, &chunk).expect("compress");
        }
        enc.finish().expect("finish");
        out
    })
    .clone()
}

pub fn config(nodes: &[&FakeNode]) -> QdlConfig {
    QdlConfig::new(
        nodes.iter().map(|n| n.node_addr()).collect(),
        "resnet50",
        "SingleStream",
    )
}

pub fn connect(nodes: &[&FakeNode], samples: usize) -> Qdl {
    Qdl::connect(config(nodes), Samples::new(samples)).expect("connects")
}

/// SingleStream, at least `queries` queries, no minimum duration.
pub fn single_stream(queries: u64) -> TestSettings {
    TestSettings {
        min_query_count: queries,
        min_duration_ms: 0,
        ..TestSettings::default()
    }
}

pub struct Ran {
    pub outcome: TestOutcome,
    pub dir: testkit::Scratch,
    pub took: Duration,
}

/// Runs a whole test against `qdl` with a QSL of `total` samples (all of
/// them in the performance set).
pub fn run(qdl: &Qdl, settings: &TestSettings, total: usize, name: &str) -> Ran {
    let dir = testkit::Scratch::new(&format!("qdl-test-{name}"));
    let log = LogSettings {
        outdir: dir.to_path_buf(),
        enable_trace: false,
        ..LogSettings::default()
    };
    let qsl = SizedQsl::new(total, total);
    let t0 = Instant::now();
    let outcome = start_test(qdl, &qsl, settings, &log, None).expect("the test runs");
    Ran {
        outcome,
        dir,
        took: t0.elapsed(),
    }
}

pub fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02X}")).collect()
}

/// The accuracy log's entries.
pub fn accuracy(dir: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("mlperf_log_accuracy.json")).expect("accuracy log");
    let v: serde_json::Value = serde_json::from_str(&text).expect("accuracy log is JSON");
    v.as_array().expect("an array").clone()
}

/// The values of every detail-log record with this key.
pub fn detail_values(dir: &std::path::Path, key: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("mlperf_log_detail.txt"))
        .expect("detail log")
        .lines()
        .filter_map(|l| l.strip_prefix(":::MLLOG "))
        .map(|j| serde_json::from_str::<serde_json::Value>(j).expect("detail record"))
        .filter(|r| r["key"] == key)
        .map(|r| r["value"].clone())
        .collect()
}
