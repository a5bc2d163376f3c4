//! The SutNode service in-process on 127.0.0.1, driven by the generated
//! tonic client.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use proto::sut_node_client::SutNodeClient;
use proto::{
    to_node, Codec, FromNode, HealthRequest, NameRequest, SampleRequest, SessionRequest, ToNode,
};
use sut_node::backend::synthetic::{ServiceTime, Synthetic, SyntheticConfig};
use sut_node::backend::{Answer, Backend, BackendError, BatchInfo, Output, SampleSink};
use sut_node::batcher::BatchPolicy;
use sut_node::codec::NodeCodecs;
use sut_node::server::{serve, NodeConfig, ServeError};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Streaming};

/// Upper bound for anything the tests wait for.
const LONG: Duration = Duration::from_secs(20);

async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(LONG, f)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

fn config(name: &str) -> NodeConfig {
    NodeConfig {
        name: name.into(),
        model: None,
        batch: BatchPolicy {
            max_batch_size: 1,
            max_wait: Duration::ZERO,
        },
        heartbeat: None,
        shutdown_grace: Duration::from_secs(10),
        codecs: NodeCodecs::default(),
        limits: sut_node::limits::Limits::default(),
    }
}

fn synthetic(service_time: &str, output_size: usize, llm_tokens: u32) -> Arc<dyn Backend> {
    Arc::new(Synthetic::new(SyntheticConfig {
        layout: Default::default(),
        service_time: service_time.parse::<ServiceTime>().unwrap(),
        output_size,
        llm_tokens,
        seed: 1,
    }))
}

struct Node {
    client: SutNodeClient<Channel>,
    addr: std::net::SocketAddr,
    ready: Option<oneshot::Receiver<()>>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ServeError>>,
}

impl Node {
    async fn start(config: NodeConfig, backend: Arc<dyn Backend>) -> Node {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let (ready_tx, ready) = oneshot::channel();
        let task = tokio::spawn(serve(
            listener,
            config,
            backend,
            async {
                let _ = stopped.await;
            },
            move || {
                let _ = ready_tx.send(());
            },
        ));
        let client = within("connect", SutNodeClient::connect(format!("http://{addr}")))
            .await
            .unwrap();
        Node {
            client,
            addr,
            ready: Some(ready),
            stop: Some(stop),
            task,
        }
    }

    /// Started and warmed up.
    async fn ready(config: NodeConfig, backend: Arc<dyn Backend>) -> Node {
        let mut node = Node::start(config, backend).await;
        node.wait_ready().await;
        node
    }

    async fn wait_ready(&mut self) {
        let ready = self.ready.take().expect("waited for once");
        within("ready", ready).await.unwrap();
    }

    /// Shuts the node down and checks that `serve` returns cleanly.
    async fn stop(mut self) {
        let _ = self.stop.take().map(|s| s.send(()));
        within("serve to return", self.task).await.unwrap().unwrap();
    }

    /// An Infer stream whose input stays open while the sender lives.
    async fn open_stream(&mut self) -> (mpsc::Sender<ToNode>, Streaming<FromNode>) {
        let (tx, rx) = mpsc::channel(1024);
        let response = within("infer", self.client.infer(ReceiverStream::new(rx)))
            .await
            .unwrap();
        (tx, response.into_inner())
    }

    async fn outstanding(&mut self) -> u64 {
        self.client
            .health(HealthRequest {})
            .await
            .unwrap()
            .into_inner()
            .outstanding
    }
}

fn sample(id: u64, payload: Vec<u8>, codec: Codec) -> ToNode {
    ToNode {
        kind: Some(to_node::Kind::Sample(SampleRequest {
            id,
            payload: Bytes::from(payload),
            codec: codec as i32,
            ..Default::default()
        })),
    }
}

/// A different input for each id, of varying length (empty included).
fn input(id: u64) -> Vec<u8> {
    (0..id % 97).map(|i| (id * 31 + i) as u8).collect()
}

async fn next(stream: &mut Streaming<FromNode>) -> FromNode {
    within("a FromNode", stream.message())
        .await
        .unwrap()
        .expect("stream ended early")
}

fn session(model: &str, scenario: &str) -> SessionRequest {
    SessionRequest {
        protocol_version: proto::PROTOCOL_VERSION,
        model: model.into(),
        scenario: scenario.into(),
        input_codec: Codec::None as i32,
        ..Default::default()
    }
}

#[tokio::test]
async fn name_and_session_checks() {
    let config = NodeConfig {
        model: Some("resnet50".into()),
        batch: BatchPolicy {
            max_batch_size: 16,
            max_wait: Duration::ZERO,
        },
        ..config("node-a")
    };
    let mut node = Node::ready(config, synthetic("fixed:0", 4, 0)).await;
    let c = &mut node.client;

    assert_eq!(
        c.name(NameRequest {}).await.unwrap().into_inner().name,
        "node-a"
    );

    let reply = c
        .start_session(session("resnet50", "Server"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply.refusal, "");
    assert!(reply.ready);
    assert_eq!(reply.protocol_version, proto::PROTOCOL_VERSION);
    assert_eq!(reply.node_name, "node-a");
    assert_eq!(reply.backend, "synthetic");
    assert_eq!(reply.max_batch_size, 16);
    assert_eq!(
        reply.input_codecs,
        vec![Codec::None as i32, Codec::Zstd as i32, Codec::Lz4 as i32]
    );
    assert_eq!(reply.output_codec, Codec::None as i32);

    let refusal = |r: tonic::Response<proto::SessionReply>| r.into_inner().refusal;
    let wrong_version = SessionRequest {
        protocol_version: 99,
        ..session("resnet50", "Offline")
    };
    let r = refusal(c.start_session(wrong_version).await.unwrap());
    assert!(r.contains("version 99"), "{r}");
    assert!(
        r.contains(&format!("version {}", proto::PROTOCOL_VERSION)),
        "{r}"
    );

    let r = refusal(c.start_session(session("bert", "Offline")).await.unwrap());
    assert!(r.contains("bert") && r.contains("resnet50"), "{r}");

    let unknown = SessionRequest {
        input_codec: 9,
        ..session("resnet50", "Offline")
    };
    let r = refusal(c.start_session(unknown).await.unwrap());
    assert!(
        r.contains("cannot decode unknown codec 9 inputs; it decodes none, zstd, lz4"),
        "{r}"
    );

    let r = refusal(c.start_session(session("resnet50", "Batch")).await.unwrap());
    assert!(r.contains("Batch"), "{r}");

    // This connection's session was refused: its Infer stream is too.
    let (_tx, rx) = mpsc::channel::<ToNode>(1);
    let e = c.infer(ReceiverStream::new(rx)).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert!(
        e.message()
            .contains("session was refused (unknown scenario"),
        "{e}"
    );
    // An accepted session opens the way again.
    c.start_session(session("resnet50", "Server"))
        .await
        .unwrap();
    let (tx, rx) = mpsc::channel::<ToNode>(1);
    let mut answers = c.infer(ReceiverStream::new(rx)).await.unwrap().into_inner();
    tx.send(sample(1, input(1), Codec::None)).await.unwrap();
    assert_eq!(next(&mut answers).await.answers[0].id, 1);

    node.stop().await;
}

/// A message on the Infer stream's path that does not decode as a `ToNode`:
/// field 1 (the sample) holding bytes that are no `SampleRequest`.
#[derive(Clone, PartialEq, prost::Message)]
struct Garbage {
    #[prost(bytes = "vec", tag = "1")]
    sample: Vec<u8>,
}

#[tokio::test]
async fn a_malformed_message_ends_the_infer_stream_with_an_error() {
    let mut node = Node::ready(config("node-m"), synthetic("fixed:0", 4, 0)).await;
    // One good sample first: it is still answered.
    let (tx, mut answers) = node.open_stream().await;
    tx.send(sample(1, input(1), Codec::None)).await.unwrap();
    assert_eq!(next(&mut answers).await.answers[0].id, 1);
    drop((tx, answers));

    let endpoint = Channel::from_shared(format!("http://{}", node.addr)).unwrap();
    let channel = within("connect", endpoint.connect()).await.unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    within("ready", grpc.ready()).await.unwrap();
    let bad = Garbage {
        sample: vec![0xff; 7],
    };
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/mlperf_net.v1.SutNode/Infer");
    let codec = tonic_prost::ProstCodec::<Garbage, FromNode>::default();
    let request = tonic::Request::new(tokio_stream::iter([bad]));
    let mut stream = within("infer", grpc.streaming(request, path, codec))
        .await
        .unwrap()
        .into_inner();
    let end = loop {
        match within("the stream's end", stream.message()).await {
            Ok(Some(m)) => assert!(m.answers.is_empty(), "nothing to answer"),
            Ok(None) => panic!("the stream ended with OK"),
            Err(status) => break status,
        }
    };
    assert_eq!(end.code(), Code::InvalidArgument, "{end}");
    assert!(end.message().contains("malformed message"), "{end}");
    node.stop().await;
}

/// A backend for timing-independent tests: warm-up and the first batch can
/// be held until the test releases them.
struct Gated {
    warm_up: Mutex<Option<std_mpsc::Receiver<()>>>,
    first_batch: Mutex<Option<std_mpsc::Receiver<()>>>,
    hold_first: AtomicBool,
    /// The size of each batch, as it starts.
    batches: mpsc::UnboundedSender<usize>,
}

impl Gated {
    fn new(hold_warm_up: bool, hold_first_batch: bool) -> (Arc<Self>, Gates) {
        let (warm_tx, warm_rx) = std_mpsc::channel();
        let (batch_tx, batch_rx) = std_mpsc::channel();
        let (batches_tx, batches) = mpsc::unbounded_channel();
        let backend = Arc::new(Gated {
            warm_up: Mutex::new(hold_warm_up.then_some(warm_rx)),
            first_batch: Mutex::new(Some(batch_rx)),
            hold_first: AtomicBool::new(hold_first_batch),
            batches: batches_tx,
        });
        let gates = Gates {
            warm_up: warm_tx,
            first_batch: batch_tx,
            batches,
        };
        (backend, gates)
    }
}

struct Gates {
    warm_up: std_mpsc::Sender<()>,
    first_batch: std_mpsc::Sender<()>,
    batches: mpsc::UnboundedReceiver<usize>,
}

impl Backend for Gated {
    fn name(&self) -> &str {
        "gated"
    }

    fn warm_up(&self) -> Result<(), BackendError> {
        if let Some(gate) = self.warm_up.lock().unwrap().take() {
            gate.recv()
                .map_err(|_| BackendError("warm-up gate dropped".into()))?;
        }
        Ok(())
    }

    fn infer(
        &self,
        inputs: &[Bytes],
        _: BatchInfo,
        _: &mut dyn SampleSink,
    ) -> Result<Vec<Output>, BackendError> {
        let _ = self.batches.send(inputs.len());
        if self.hold_first.swap(false, Ordering::SeqCst) {
            if let Some(gate) = self.first_batch.lock().unwrap().take() {
                let _ = gate.recv();
            }
        }
        Ok(inputs
            .iter()
            .map(|input| {
                Ok(Answer {
                    payload: Bytes::from(facts::synthetic::answer(input, 8)),
                    n_tokens: 0,
                })
            })
            .collect())
    }
}

#[tokio::test]
async fn not_ready_until_the_backend_has_warmed_up() {
    let (backend, gates) = Gated::new(true, false);
    let mut node = Node::start(config("loading"), backend).await;

    let health = node
        .client
        .health(HealthRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(!health.ready);
    let reply = node
        .client
        .start_session(session("any", "Offline"))
        .await
        .unwrap()
        .into_inner();
    assert!(!reply.ready);
    assert_eq!(reply.refusal, "", "loading is not a refusal");
    let (_tx, rx) = mpsc::channel::<ToNode>(1);
    let err = node
        .client
        .infer(ReceiverStream::new(rx))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);

    gates.warm_up.send(()).unwrap();
    node.wait_ready().await;
    let health = node
        .client
        .health(HealthRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(health.ready);
    let reply = node
        .client
        .start_session(session("any", "Offline"))
        .await
        .unwrap()
        .into_inner();
    assert!(reply.ready);
    assert_eq!(reply.backend, "gated");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sample_gets_its_synthetic_answer() {
    let config = NodeConfig {
        batch: BatchPolicy {
            max_batch_size: 8,
            max_wait: Duration::from_micros(200),
        },
        ..config("node-b")
    };
    let mut node = Node::ready(config, synthetic("batch:20+5", 24, 0)).await;

    let n = 500u64;
    let mut requests: Vec<ToNode> = (0..n)
        .map(|id| sample(id, input(id), Codec::None))
        .collect();
    // Undecodable samples get errors; an empty message is skipped.
    requests.insert(100, sample(1000, vec![1, 2], Codec::Zstd));
    requests.insert(200, ToNode { kind: None });
    requests.push(ToNode {
        kind: Some(to_node::Kind::Sample(SampleRequest {
            id: 1001,
            payload: Bytes::new(),
            codec: 77,
            ..Default::default()
        })),
    });
    let response = within("infer", node.client.infer(tokio_stream::iter(requests)))
        .await
        .unwrap();
    let mut stream = response.into_inner();

    let mut answers = HashMap::new();
    let mut errors = HashMap::new();
    // The input ends after the last sample: the node ends the stream once
    // it has answered everything.
    while let Some(message) = within("answers", stream.message()).await.unwrap() {
        assert!(message.first_tokens.is_empty());
        for a in message.answers {
            assert_eq!(a.codec, Codec::None as i32);
            assert_eq!(a.n_tokens, 0);
            assert!(
                answers.insert(a.id, a.payload).is_none(),
                "id {} twice",
                a.id
            );
        }
        for e in message.errors {
            assert!(errors.insert(e.id, e.message).is_none());
        }
    }
    assert_eq!(answers.len() as u64, n);
    for id in 0..n {
        let expected = facts::synthetic::answer(&input(id), 24);
        assert_eq!(answers[&id], expected, "answer of sample {id}");
    }
    assert_eq!(errors.len(), 2);
    assert!(
        errors[&1000].contains("corrupt zstd frame"),
        "{}",
        errors[&1000]
    );
    assert!(
        errors[&1001].contains("unknown codec 77"),
        "{}",
        errors[&1001]
    );
    assert_eq!(node.outstanding().await, 0);
    node.stop().await;
}

#[tokio::test]
async fn answers_ready_together_leave_in_one_message() {
    // Single-threaded runtime: when Health reports the samples received,
    // the reader has queued them (both happen in one poll of its task).
    let (backend, mut gates) = Gated::new(false, true);
    let config = NodeConfig {
        batch: BatchPolicy {
            max_batch_size: 64,
            max_wait: Duration::ZERO,
        },
        ..config("node-c")
    };
    let mut node = Node::ready(config, backend).await;
    let (tx, mut stream) = node.open_stream().await;

    tx.send(sample(0, input(0), Codec::None)).await.unwrap();
    assert_eq!(within("first batch", gates.batches.recv()).await, Some(1));
    // The backend holds that batch: the next samples queue up behind it.
    for id in 1..=20 {
        tx.send(sample(id, input(id), Codec::None)).await.unwrap();
    }
    within("20 samples queued", async {
        while node.outstanding().await < 21 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    gates.first_batch.send(()).unwrap();
    assert_eq!(within("second batch", gates.batches.recv()).await, Some(20));

    let mut seen = HashSet::new();
    let mut biggest = 0;
    while seen.len() < 21 {
        let message = next(&mut stream).await;
        biggest = biggest.max(message.answers.len());
        for a in message.answers {
            assert_eq!(a.payload, facts::synthetic::answer(&input(a.id), 8));
            seen.insert(a.id);
        }
    }
    assert!(
        biggest >= 20,
        "a batch's answers came in messages of at most {biggest}"
    );
    drop(tx);
    assert!(within("end", stream.message()).await.unwrap().is_none());
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llm_mode_sends_the_first_token_before_the_answer() {
    let config = NodeConfig {
        batch: BatchPolicy {
            max_batch_size: 4,
            max_wait: Duration::ZERO,
        },
        ..config("llm")
    };
    let mut node = Node::ready(config, synthetic("fixed:2000", 16, 7)).await;
    let n = 40u64;
    let requests: Vec<ToNode> = (0..n)
        .map(|id| sample(id, input(id), Codec::None))
        .collect();
    let response = within("infer", node.client.infer(tokio_stream::iter(requests)))
        .await
        .unwrap();
    let mut stream = response.into_inner();

    let mut first_tokens = HashMap::new();
    let mut answered = 0;
    while let Some(message) = within("answers", stream.message()).await.unwrap() {
        // Within a message, first tokens come before answers.
        for t in message.first_tokens {
            assert!(first_tokens.insert(t.id, t.payload).is_none());
        }
        for a in message.answers {
            let expected = facts::synthetic::answer(&input(a.id), 16);
            assert_eq!(a.payload, expected);
            assert_eq!(a.n_tokens, 7);
            let token = first_tokens.get(&a.id);
            assert_eq!(
                token.map(|t| &t[..]),
                Some(&expected[..4]),
                "sample {}: answer without an earlier first token",
                a.id
            );
            answered += 1;
        }
    }
    assert_eq!(answered, n);
    node.stop().await;
}

#[tokio::test]
async fn an_idle_stream_gets_heartbeats() {
    let config = NodeConfig {
        heartbeat: Some(Duration::from_millis(20)),
        ..config("idle")
    };
    let mut node = Node::ready(config, synthetic("fixed:0", 4, 0)).await;
    let (tx, mut stream) = node.open_stream().await;
    for _ in 0..3 {
        let message = next(&mut stream).await;
        assert!(message.heartbeat);
        assert!(message.answers.is_empty() && message.errors.is_empty());
    }
    // Still a working stream after idling.
    tx.send(sample(5, input(5), Codec::None)).await.unwrap();
    let answer = loop {
        let message = next(&mut stream).await;
        if let Some(a) = message.answers.into_iter().next() {
            break a;
        }
        assert!(message.heartbeat);
    };
    assert_eq!(answer.id, 5);
    assert!(
        next(&mut stream).await.heartbeat,
        "heartbeats resume when idle again"
    );
    node.stop().await;
}

#[tokio::test]
async fn shutdown_answers_samples_in_flight_then_ends_the_streams() {
    let (backend, mut gates) = Gated::new(false, true);
    let mut node = Node::ready(config("stopping"), backend).await;
    let (idle_tx, mut idle) = node.open_stream().await;
    let (busy_tx, mut busy) = node.open_stream().await;
    busy_tx
        .send(sample(9, input(9), Codec::None))
        .await
        .unwrap();
    assert_eq!(within("batch", gates.batches.recv()).await, Some(1));

    // Sample 9 is in the backend when the node is told to stop.
    let _ = node.stop.take().map(|s| s.send(()));
    let status = within("idle stream end", idle.message()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert!(status.message().contains("shutting down"), "{status}");

    gates.first_batch.send(()).unwrap();
    let message = next(&mut busy).await;
    assert_eq!(message.answers.len(), 1);
    assert_eq!(message.answers[0].id, 9);
    let status = within("busy stream end", busy.message()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);

    within("serve to return", node.task).await.unwrap().unwrap();
    drop((idle_tx, busy_tx));
}

#[tokio::test]
async fn shutdown_cuts_streams_whose_samples_outlast_the_grace_time() {
    let (backend, mut gates) = Gated::new(false, true);
    let config = NodeConfig {
        shutdown_grace: Duration::from_millis(50),
        ..config("cut")
    };
    let mut node = Node::ready(config, backend).await;
    let (tx, mut stream) = node.open_stream().await;
    tx.send(sample(3, input(3), Codec::None)).await.unwrap();
    assert_eq!(within("batch", gates.batches.recv()).await, Some(1));

    let _ = node.stop.take().map(|s| s.send(()));
    let status = within("stream end", stream.message()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert!(
        status
            .message()
            .contains("unanswered samples on this stream: 1"),
        "{status}"
    );
    within("serve to return", node.task).await.unwrap().unwrap();
    // Lets the backend's worker thread finish.
    drop(gates);
}

#[tokio::test]
async fn a_client_that_does_not_read_its_answers_gets_no_more_samples_taken() {
    const ANSWER: usize = 64 << 10;
    let config = NodeConfig {
        limits: sut_node::limits::Limits {
            max_waiting_answer_bytes: 256 << 10,
            ..sut_node::limits::Limits::default()
        },
        ..config("node-slow-reader")
    };
    let mut node = Node::ready(config, synthetic("fixed:0", ANSWER, 0)).await;
    let (tx, rx) = mpsc::channel(1);
    let response = within("infer", node.client.infer(ReceiverStream::new(rx)))
        .await
        .unwrap();
    let mut answers = response.into_inner();
    // Never reading the answers, send until the node stops taking samples
    // (a send that waits a whole second), at most 1000 (64 MiB of answers).
    let mut sent = 0u64;
    while sent < 1000 {
        let s = sample(sent, vec![sent as u8; 64 << 10], Codec::None);
        match tokio::time::timeout(Duration::from_secs(1), tx.send(s)).await {
            Ok(r) => r.unwrap(),
            Err(_) => break,
        }
        sent += 1;
    }
    // The bound: the waiting answers, HTTP/2's windows of inputs and the
    // batcher; far below 1000 samples.
    assert!(
        sent < 300,
        "the node took {sent} samples from a client that reads nothing"
    );
    // Once the client reads, every sample it sent is answered.
    drop(tx);
    let mut ids = HashSet::new();
    while let Some(m) = within("answers", answers.message()).await.unwrap() {
        for a in m.answers {
            assert_eq!(a.payload.len(), ANSWER);
            ids.insert(a.id);
        }
    }
    assert_eq!(ids.len() as u64, sent);
    node.stop().await;
}

/// Reads until the node closes the connection (EOF or reset).
async fn closed_by_node(tcp: &mut tokio::net::TcpStream) {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 1024];
    loop {
        match within("the node to close the connection", tcp.read(&mut buf)).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

#[tokio::test]
async fn connections_over_the_limits_make_room_or_are_refused_and_silent_ones_are_closed() {
    use tokio::io::AsyncWriteExt;
    let config = NodeConfig {
        limits: sut_node::limits::Limits {
            max_connections_per_peer: 3,
            handshake_timeout: Duration::from_millis(300),
            ..sut_node::limits::Limits::default()
        },
        ..config("node-limits")
    };
    // The test's own client holds one of this address's three places, in a
    // session: it keeps it.
    let mut node = Node::ready(config, synthetic("fixed:0", 4, 0)).await;
    let reply = node
        .client
        .start_session(session("resnet50", "Server"))
        .await
        .unwrap()
        .into_inner();
    assert!(reply.refusal.is_empty(), "{}", reply.refusal);
    let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let mut first = tokio::net::TcpStream::connect(node.addr).await.unwrap();
    first.write_all(preface).await.unwrap();
    let mut second = tokio::net::TcpStream::connect(node.addr).await.unwrap();
    second.write_all(preface).await.unwrap();
    // A fourth connection from this address takes the place of the oldest
    // one without a session, which is closed at once.
    let mut third = tokio::net::TcpStream::connect(node.addr).await.unwrap();
    third.write_all(preface).await.unwrap();
    closed_by_node(&mut first).await;
    // One that sends nothing takes the next one's place, then is closed
    // after the handshake timeout.
    let mut silent = tokio::net::TcpStream::connect(node.addr).await.unwrap();
    closed_by_node(&mut second).await;
    closed_by_node(&mut silent).await;
    // The client in a session still gets answers.
    assert_eq!(node.outstanding().await, 0);
    drop(third);
    node.stop().await;
}

#[tokio::test]
async fn decoded_inputs_waiting_to_run_stay_within_the_budget() {
    const INPUT: usize = 16 << 10;
    let (backend, mut gates) = Gated::new(false, true);
    let config = NodeConfig {
        limits: sut_node::limits::Limits {
            max_decoded_bytes: 4 * INPUT,
            ..sut_node::limits::Limits::default()
        },
        ..config("node-budget")
    };
    let mut node = Node::ready(config, backend).await;
    let (tx, mut stream) = node.open_stream().await;
    // Small zstd frames that each decode to 16 KiB.
    let frame = compression::CodecSpec::from(compression::CodecKind::Zstd)
        .codec()
        .compress(&[0u8; INPUT]);
    assert!(frame.len() < 100);
    let compressed = |id| sample(id, frame.clone(), Codec::Zstd);
    tx.send(compressed(0)).await.unwrap();
    assert_eq!(within("first batch", gates.batches.recv()).await, Some(1));
    // The backend holds sample 0; of the next 20, only those that fit in
    // the budget (with sample 0: four) are taken.
    for id in 1..=20 {
        tx.send(compressed(id)).await.unwrap();
    }
    let mut outstanding = 0;
    while outstanding < 4 {
        outstanding = node.outstanding().await;
    }
    for _ in 0..20 {
        let now = node.outstanding().await;
        assert!(now <= 4, "{now} samples held with a budget of four");
    }
    // Once the backend runs, every sample is answered.
    gates.first_batch.send(()).unwrap();
    drop(tx);
    let mut answered = HashSet::new();
    while let Some(m) = within("answers", stream.message()).await.unwrap() {
        answered.extend(m.answers.iter().map(|a| a.id));
    }
    assert_eq!(answered.len(), 21);
    node.stop().await;
}

#[tokio::test]
async fn a_message_over_the_limit_is_refused_at_its_header() {
    let config = NodeConfig {
        limits: sut_node::limits::Limits {
            max_message_bytes: 64 << 10,
            ..sut_node::limits::Limits::default()
        },
        ..config("node-small")
    };
    let node = Node::ready(config, synthetic("fixed:0", 4, 0)).await;
    let endpoint = Channel::from_shared(format!("http://{}", node.addr)).unwrap();
    let channel = within("connect", endpoint.connect()).await.unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    within("ready", grpc.ready()).await.unwrap();
    // 200 KiB in one message, over the node's 64 KiB.
    let big = Garbage {
        sample: vec![0u8; 200 << 10],
    };
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/mlperf_net.v1.SutNode/Infer");
    let codec = tonic_prost::ProstCodec::<Garbage, FromNode>::default();
    let request = tonic::Request::new(tokio_stream::iter([big]));
    let mut stream = within("infer", grpc.streaming(request, path, codec))
        .await
        .unwrap()
        .into_inner();
    let end = loop {
        match within("the stream's end", stream.message()).await {
            Ok(Some(m)) => assert!(m.answers.is_empty()),
            Ok(None) => panic!("the stream ended with OK"),
            Err(status) => break status,
        }
    };
    assert!(end.message().contains("too large"), "{end}");
    node.stop().await;
}

/// A memory figure of this process (the node runs in it) from
/// /proc/self/status (`VmSize`, `VmRSS`...), in MiB.
fn memory_mib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap();
    kib / 1024
}

/// Virtual memory of this process, in MiB.
fn vm_size_mib() -> u64 {
    memory_mib("VmSize")
}

#[tokio::test]
async fn declared_message_lengths_reserve_nothing_until_their_bytes_come() {
    const MAX: usize = 32 << 20;
    let config = NodeConfig {
        limits: sut_node::limits::Limits {
            max_message_bytes: MAX,
            ..sut_node::limits::Limits::default()
        },
        ..config("node-declared")
    };
    let mut node = Node::ready(config, synthetic("fixed:0", 4, 0)).await;
    let before = vm_size_mib();
    // 16 connections x 7 streams, each declaring an almost maximal message
    // (3.5 GiB in all) and sending nothing after the header.
    let mut held: Vec<Box<dyn std::any::Any + Send>> = Vec::new();
    let mut declared = 0;
    for _ in 0..16 {
        let tcp = tokio::net::TcpStream::connect(node.addr).await.unwrap();
        let (client, connection) = within("h2 handshake", h2::client::handshake(tcp))
            .await
            .unwrap();
        let mut pings = {
            let mut connection = connection;
            let pings = connection.ping_pong().unwrap();
            tokio::spawn(connection);
            pings
        };
        let mut client = within("h2 ready", client.ready()).await.unwrap();
        for _ in 0..7 {
            let request =
                http::Request::post(format!("http://{}/mlperf_net.v1.SutNode/Infer", node.addr))
                    .header("content-type", "application/grpc")
                    .header("te", "trailers")
                    .body(())
                    .unwrap();
            let (response, mut body) = client.send_request(request, false).unwrap();
            let mut header = vec![0u8];
            header.extend_from_slice(&((MAX - 1) as u32).to_be_bytes());
            body.send_data(Bytes::from(header), false).unwrap();
            declared += MAX - 1;
            held.push(Box::new((response, body)));
            client = within("h2 ready", client.ready()).await.unwrap();
        }
        // The node has read every frame sent before the pong.
        within("pong", pings.ping(h2::Ping::opaque()))
            .await
            .unwrap();
        held.push(Box::new(client));
    }
    assert!(declared >= 3 << 30);
    // The node still serves a real client; by its answer, the streams
    // opened before it have had their headers read.
    let (tx, mut stream) = node.open_stream().await;
    tx.send(sample(1, input(1), Codec::None)).await.unwrap();
    assert_eq!(next(&mut stream).await.answers.len(), 1);
    let after = vm_size_mib();
    assert!(
        after < before + 1024,
        "virtual memory grew from {before} to {after} MiB for headers alone"
    );
    drop(held);
    drop(tx);
    node.stop().await;
}

#[tokio::test]
async fn one_connection_holds_at_most_its_share_of_the_budget() {
    const INPUT: usize = 16 << 10;
    let (backend, mut gates) = Gated::new(false, true);
    let config = NodeConfig {
        limits: sut_node::limits::Limits {
            max_decoded_bytes: 16 * INPUT,
            max_decoded_bytes_per_connection: 3 * INPUT,
            ..sut_node::limits::Limits::default()
        },
        ..config("node-share")
    };
    let mut node = Node::ready(config, backend).await;
    // Two streams on the node's client's one connection.
    let (tx1, mut stream1) = node.open_stream().await;
    let (tx2, mut stream2) = node.open_stream().await;
    tx1.send(sample(0, vec![0u8; INPUT], Codec::None))
        .await
        .unwrap();
    assert_eq!(within("first batch", gates.batches.recv()).await, Some(1));
    // The backend holds sample 0; of the next 20, only those that fit in
    // the connection's share (with sample 0: three) are taken.
    for id in 1..=20 {
        let tx = if id % 2 == 0 { &tx1 } else { &tx2 };
        tx.send(sample(id, vec![0u8; INPUT], Codec::None))
            .await
            .unwrap();
    }
    let mut outstanding = 0;
    while outstanding < 3 {
        outstanding = node.outstanding().await;
    }
    for _ in 0..20 {
        let now = node.outstanding().await;
        assert!(now <= 3, "{now} samples held with a share of three");
    }
    // Another connection has its own share of the node's budget.
    let mut other = within(
        "connect",
        SutNodeClient::connect(format!("http://{}", node.addr)),
    )
    .await
    .unwrap();
    let (tx3, rx3) = mpsc::channel(16);
    let mut stream3 = within("infer", other.infer(ReceiverStream::new(rx3)))
        .await
        .unwrap()
        .into_inner();
    tx3.send(sample(100, vec![0u8; INPUT], Codec::None))
        .await
        .unwrap();
    while node.outstanding().await < 4 {}

    gates.first_batch.send(()).unwrap();
    drop((tx1, tx2, tx3));
    let mut answered = HashSet::new();
    for stream in [&mut stream1, &mut stream2, &mut stream3] {
        while let Some(m) = within("answers", stream.message()).await.unwrap() {
            answered.extend(m.answers.iter().map(|a| a.id));
        }
    }
    assert_eq!(answered.len(), 22);
    node.stop().await;
}

/// Resident memory of this process, in MiB.
fn rss_mib() -> u64 {
    memory_mib("VmRSS")
}

#[tokio::test]
async fn probe_replies_never_read_cost_the_node_no_memory() {
    use sut_node::describe::MAX_PROBE_REPLY;
    let mut node = Node::ready(config("node-probe"), synthetic("fixed:0", 4, 0)).await;
    let before = rss_mib();
    // A raw HTTP/2 client asks the largest reply on all 8 streams its
    // connection may open (2 GiB in all) and reads nothing past each reply's
    // first bytes: its stream windows (64 KiB each) stay closed.
    let tcp = tokio::net::TcpStream::connect(node.addr).await.unwrap();
    let handshake = h2::client::Builder::new()
        .initial_window_size(64 << 10)
        .initial_connection_window_size(1 << 20)
        .handshake::<_, Bytes>(tcp);
    let (client, connection) = within("h2 handshake", handshake).await.unwrap();
    let mut pings = {
        let mut connection = connection;
        let pings = connection.ping_pong().unwrap();
        tokio::spawn(connection);
        pings
    };
    let mut client = within("h2 ready", client.ready()).await.unwrap();
    let probe = proto::ProbeRequest {
        payload: Bytes::new(),
        reply_bytes: MAX_PROBE_REPLY,
    };
    let mut message = vec![0u8];
    message.extend_from_slice(&(probe.encoded_len() as u32).to_be_bytes());
    message.extend_from_slice(&probe.encode_to_vec());
    let mut held = Vec::new();
    for _ in 0..8 {
        let request = http::Request::post(format!("http://{}{}", node.addr, proto::PROBE_PATH))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (response, mut body) = client.send_request(request, false).unwrap();
        body.send_data(Bytes::from(message.clone()), true).unwrap();
        let mut reply = within("the reply's headers", response)
            .await
            .unwrap()
            .into_body();
        // The reply is under way (the node has made it, as far as it does).
        let first = within("the reply's first bytes", reply.data()).await;
        assert!(first.is_some_and(|d| d.is_ok_and(|d| !d.is_empty())));
        held.push(reply);
        client = within("h2 ready", client.ready()).await.unwrap();
    }
    within("pong", pings.ping(h2::Ping::opaque()))
        .await
        .unwrap();
    let grown = rss_mib().saturating_sub(before);
    assert!(
        grown < 256,
        "the node grew by {grown} MiB for replies nobody reads"
    );
    // A real client's probe is still answered.
    let reply = node
        .client
        .probe(proto::ProbeRequest {
            payload: Bytes::from(vec![1u8; 1000]),
            reply_bytes: 3 << 20,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply.payload, vec![0u8; 3 << 20]);
    assert!(reply.unix_time_ns > 0);
    drop(held);
    node.stop().await;
}

#[tokio::test]
async fn describe_is_refused_when_turned_off() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let endpoints = sut_node::server::Endpoints {
        grpc: Some(listener),
        grpc_tls: None,
        quic: None,
        describe: false,
    };
    let task = tokio::spawn(sut_node::server::serve_on(
        endpoints,
        config("node-quiet"),
        synthetic("fixed:0", 4, 0),
        async {
            let _ = stopped.await;
        },
        || {},
    ));
    let mut client = within("connect", SutNodeClient::connect(format!("http://{addr}")))
        .await
        .unwrap();
    let refused = client
        .describe(proto::DescribeRequest {})
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);
    assert!(
        refused
            .message()
            .contains("node-quiet does not describe itself")
            && refused.message().contains("--no-describe"),
        "{refused}"
    );
    // The rest answers as ever.
    let name = client.name(NameRequest {}).await.unwrap().into_inner().name;
    assert_eq!(name, "node-quiet");
    let _ = stop.send(());
    within("serve to return", task).await.unwrap().unwrap();
}
