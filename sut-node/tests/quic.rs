//! The node's QUIC service in-process on 127.0.0.1, driven by a plain quinn
//! client speaking the framing of `proto::quic`: the control requests, the
//! Infer stream, and malformed input, which must end a stream cleanly and
//! leave the node serving.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;
use proto::framing::{encode_message, Frame, FrameDecoder, FrameWriter};
use proto::quic::{stream_type, ALPN};
use proto::tls::{ClientTls, ServerCheck};
use proto::{
    to_node, FromNode, HealthReply, HealthRequest, NameReply, NameRequest, SampleRequest,
    SessionReply, SessionRequest, ToNode,
};
use sut_node::backend::synthetic::{Synthetic, SyntheticConfig};
use sut_node::batcher::BatchPolicy;
use sut_node::codec::NodeCodecs;
use sut_node::server::{serve_on, Endpoints, NodeConfig};
use sut_node::tls::NodeTls;
use tokio::sync::oneshot;

const LONG: Duration = Duration::from_secs(20);
const OUTPUT: usize = 8;

async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(LONG, f)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

struct Node {
    conn: quinn::Connection,
    _client: quinn::Endpoint,
    addr: std::net::SocketAddr,
    fingerprint: proto::tls::Fingerprint,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

/// The LoadGen node's QUIC settings (it accepts no streams from the node).
fn loadgen_transport() -> quinn::TransportConfig {
    proto::quic::transport_config(0)
}

impl Node {
    async fn start(name: &str) -> Node {
        let limits = sut_node::limits::Limits::default();
        Node::start_with(name, limits, OUTPUT, loadgen_transport()).await
    }

    /// A node within `limits` whose answers are `output` bytes, and a
    /// client connected to it with `client_transport`.
    async fn start_with(
        name: &str,
        limits: sut_node::limits::Limits,
        output: usize,
        client_transport: quinn::TransportConfig,
    ) -> Node {
        let tls = NodeTls::load(None, None, &[], &[]).unwrap();
        let endpoint = sut_node::quic::endpoint(
            "127.0.0.1:0".parse().unwrap(),
            tls.server_config(ALPN).unwrap(),
            &limits,
        )
        .unwrap();
        let addr = endpoint.local_addr().unwrap();
        let config = NodeConfig {
            name: name.into(),
            model: None,
            batch: BatchPolicy {
                max_batch_size: 4,
                max_wait: Duration::ZERO,
            },
            heartbeat: Some(Duration::from_millis(50)),
            shutdown_grace: Duration::from_secs(5),
            codecs: NodeCodecs::default(),
            limits,
        };
        let backend = Arc::new(Synthetic::new(SyntheticConfig {
            layout: Default::default(),
            service_time: "fixed:0".parse().unwrap(),
            output_size: output,
            llm_tokens: 0,
            seed: 1,
        }));
        let endpoints = Endpoints {
            grpc: None,
            grpc_tls: None,
            quic: Some(endpoint),
            describe: true,
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let (ready_tx, ready) = oneshot::channel();
        let task = tokio::spawn(async move {
            serve_on(
                endpoints,
                config,
                backend,
                async {
                    let _ = stopped.await;
                },
                move || {
                    let _ = ready_tx.send(());
                },
            )
            .await
            .unwrap();
        });
        within("ready", ready).await.unwrap();
        let fingerprint = tls.fingerprint();
        let (client, conn) = connect(addr, fingerprint, client_transport).await;
        Node {
            conn,
            _client: client,
            addr,
            fingerprint,
            stop: Some(stop),
            task,
        }
    }

    /// Another client of the node, from an endpoint of its own.
    async fn connect(
        &self,
        transport: quinn::TransportConfig,
    ) -> (quinn::Endpoint, quinn::Connection) {
        connect(self.addr, self.fingerprint, transport).await
    }

    /// Opens a stream of `kind` and sends `bytes` on it (then ends it if
    /// `finish`); returns every frame of the answer and how it ended.
    async fn exchange(
        &self,
        kind: u8,
        bytes: &[u8],
        finish: bool,
    ) -> (Vec<Frame>, Result<(), String>) {
        let (mut send, mut recv) = self.conn.open_bi().await.unwrap();
        let mut first = BytesMut::new();
        first.put_u8(kind);
        first.put_slice(bytes);
        send.write_all(&first).await.unwrap();
        if finish {
            send.finish().unwrap();
        }
        let mut decoder = FrameDecoder::new(1 << 20);
        let mut frames = Vec::new();
        let end = within("the answer", async {
            loop {
                loop {
                    match decoder.next_frame() {
                        Ok(Some(f)) => frames.push(f),
                        Ok(None) => break,
                        Err(e) => return Err(e.to_string()),
                    }
                }
                match recv.read_chunk(usize::MAX, true).await {
                    Ok(Some(c)) => decoder.push(c.bytes),
                    Ok(None) => return decoder.finish().map_err(|e| e.to_string()),
                    Err(e) => return Err(e.to_string()),
                }
            }
        })
        .await;
        (frames, end)
    }

    async fn control<Rep: Message + Default>(&self, kind: u8, request: &impl Message) -> Rep {
        let mut body = BytesMut::new();
        encode_message(request, &mut body).unwrap();
        let (frames, end) = self.exchange(kind, &body, true).await;
        end.unwrap();
        assert_eq!(frames.len(), 1, "{frames:?}");
        frames[0].clone().decode("reply").unwrap()
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        within("the node to stop", &mut self.task).await.unwrap();
    }
}

async fn connect(
    addr: std::net::SocketAddr,
    fingerprint: proto::tls::Fingerprint,
    transport: quinn::TransportConfig,
) -> (quinn::Endpoint, quinn::Connection) {
    let tls = ClientTls {
        check: ServerCheck::Pinned(vec![fingerprint]),
        identity: None,
    };
    let (crypto, _) = tls.client_config(ALPN).unwrap();
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(crypto).unwrap();
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut client = proto::quic::endpoint(socket, None).unwrap();
    let mut cc = quinn::ClientConfig::new(Arc::new(crypto));
    cc.transport_config(Arc::new(transport));
    client.set_default_client_config(cc);
    let conn = within("connect", client.connect(addr, "localhost").unwrap())
        .await
        .unwrap();
    (client, conn)
}

fn sample(id: u64) -> ToNode {
    ToNode {
        kind: Some(to_node::Kind::Sample(SampleRequest {
            id,
            payload: Bytes::from(vec![id as u8; 100 + id as usize]),
            codec: 0,
            ..Default::default()
        })),
    }
}

#[tokio::test]
async fn control_requests_and_the_infer_stream() {
    let node = Node::start("quic-node").await;
    let name: NameReply = node.control(stream_type::NAME, &NameRequest {}).await;
    assert_eq!(name.name, "quic-node");
    let session: SessionReply = node
        .control(
            stream_type::START_SESSION,
            &SessionRequest {
                protocol_version: proto::PROTOCOL_VERSION,
                model: "resnet50".into(),
                scenario: "Server".into(),
                input_codec: 0,
                ..Default::default()
            },
        )
        .await;
    assert!(session.ready && session.refusal.is_empty(), "{session:?}");
    assert_eq!(session.node_name, "quic-node");
    let refused: SessionReply = node
        .control(
            stream_type::START_SESSION,
            &SessionRequest {
                protocol_version: proto::PROTOCOL_VERSION,
                model: "m".into(),
                scenario: "Nope".into(),
                input_codec: 0,
                ..Default::default()
            },
        )
        .await;
    assert!(refused.refusal.contains("Nope"), "{refused:?}");
    let health: HealthReply = node.control(stream_type::HEALTH, &HealthRequest {}).await;
    assert!(health.ready);

    // The connection's session was refused: so is its Infer stream, until
    // a session is accepted.
    let (frames, _) = node.exchange(stream_type::INFER, b"", true).await;
    assert!(
        matches!(&frames[..], [Frame::Error(e)] if e.contains("session was refused")),
        "{frames:?}"
    );
    let accepted: SessionReply = node
        .control(
            stream_type::START_SESSION,
            &SessionRequest {
                protocol_version: proto::PROTOCOL_VERSION,
                model: "m".into(),
                scenario: "Offline".into(),
                input_codec: 0,
                ..Default::default()
            },
        )
        .await;
    assert_eq!(accepted.refusal, "");

    // 200 samples in one go, then the end of the stream.
    let mut w = FrameWriter::new();
    for id in 1..=200 {
        w.to_node(&sample(id)).unwrap();
    }
    let mut body = Vec::new();
    for c in w.take_chunks().iter() {
        body.extend_from_slice(c);
    }
    let (frames, end) = node.exchange(stream_type::INFER, &body, true).await;
    end.unwrap();
    let messages: Vec<FromNode> = frames
        .into_iter()
        .map(|f| f.decode("FromNode").unwrap())
        .collect();
    assert!(messages[0].heartbeat, "accepted at once with a heartbeat");
    let mut ids: Vec<u64> = Vec::new();
    for m in &messages {
        assert!(m.errors.is_empty(), "{:?}", m.errors);
        for a in &m.answers {
            let Some(to_node::Kind::Sample(s)) = sample(a.id).kind else {
                unreachable!()
            };
            assert_eq!(a.payload, facts::synthetic::answer(&s.payload, OUTPUT));
            ids.push(a.id);
        }
    }
    ids.sort_unstable();
    assert_eq!(ids, (1..=200).collect::<Vec<_>>());
    assert!(
        messages.len() < 200,
        "answers ready together leave together ({} messages)",
        messages.len()
    );
    node.stop().await;
}

#[tokio::test]
async fn malformed_streams_end_cleanly_and_the_node_keeps_serving() {
    let node = Node::start("sturdy").await;

    // An unknown stream type: an error frame.
    let (frames, end) = node.exchange(99, b"", true).await;
    end.unwrap();
    assert!(
        matches!(&frames[..], [Frame::Error(e)] if e.contains("unknown stream type 99")),
        "{frames:?}"
    );
    // A control request that does not decode, one with a bad frame kind,
    // one that ends inside its frame: error frames.
    for body in [
        &[0u8, 0, 0, 0, 3, 0xff, 0xff, 0xff][..],
        &[7u8, 0, 0, 0, 0][..],
        &[0u8, 0, 0, 0, 9, 1][..],
    ] {
        let (frames, end) = node.exchange(stream_type::START_SESSION, body, true).await;
        end.unwrap();
        assert!(
            matches!(&frames[..], [Frame::Error(_)]),
            "{body:?}: {frames:?}"
        );
    }
    // A control frame announcing 4 GiB: refused at its header.
    let (frames, _) = node
        .exchange(stream_type::NAME, &[0, 0xff, 0xff, 0xff, 0xff], false)
        .await;
    assert!(
        matches!(&frames[..], [Frame::Error(e)] if e.contains("limit")),
        "{frames:?}"
    );

    // Infer streams fed garbage: a sample first, then a bad frame, a frame
    // announcing 4 GiB, or a body that is not a ToNode. The sample is
    // answered, then the stream ends with an error frame that says why;
    // nothing is buffered for the 4 GiB.
    let mut good = BytesMut::new();
    encode_message(&sample(1), &mut good).unwrap();
    for tail in [
        &[9u8, 1, 2, 3, 4, 5][..],
        &[0u8, 0xff, 0xff, 0xff, 0xff, 0][..],
        &[0u8, 0, 0, 0, 2, 0xff, 0xff][..],
    ] {
        let mut body = good.to_vec();
        body.extend_from_slice(tail);
        let (frames, end) = node.exchange(stream_type::INFER, &body, false).await;
        end.unwrap();
        let Some((Frame::Error(why), messages)) = frames.split_last() else {
            panic!("{tail:?}: no error frame at the end: {frames:?}");
        };
        assert!(why.contains("malformed message"), "{tail:?}: {why}");
        let answered: usize = messages
            .iter()
            .map(|f| {
                f.clone()
                    .decode::<FromNode>("FromNode")
                    .unwrap()
                    .answers
                    .len()
            })
            .sum();
        assert_eq!(answered, 1, "{tail:?}");
    }

    // Still serving.
    let name: NameReply = node.control(stream_type::NAME, &NameRequest {}).await;
    assert_eq!(name.name, "sturdy");
    node.stop().await;
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_nodes_idle_timeout() {
    // Longer than the LoadGen node's keep-alive interval (2 s).
    let limits = sut_node::limits::Limits {
        idle_timeout: Duration::from_secs(4),
        ..sut_node::limits::Limits::default()
    };
    // A client that never sends keep-alives and asks for no idle timeout
    // of its own: the node's decides.
    let mut silent = loadgen_transport();
    silent.keep_alive_interval(None);
    silent.max_idle_timeout(None);
    let node = Node::start_with("quic-idle", limits, OUTPUT, silent).await;
    // The LoadGen node's own connection, as idle, but with its keep-alives.
    let (_endpoint, kept) = node.connect(loadgen_transport()).await;
    let reason = within("the node to close the connection", node.conn.closed()).await;
    // Timed out on both sides at once, or, when a late packet of the client
    // reaches a node that has already forgotten the connection, reset.
    assert!(
        matches!(
            reason,
            quinn::ConnectionError::TimedOut | quinn::ConnectionError::Reset
        ),
        "{reason}"
    );
    // Idle as long, the kept-alive connection is still served.
    assert!(kept.close_reason().is_none(), "{:?}", kept.close_reason());
    let (mut send, mut recv) = within("a stream", kept.open_bi()).await.unwrap();
    let mut body = BytesMut::new();
    body.put_u8(stream_type::NAME);
    encode_message(&NameRequest {}, &mut body).unwrap();
    send.write_all(&body).await.unwrap();
    send.finish().unwrap();
    let reply = within("the reply", recv.read_to_end(1 << 20))
        .await
        .unwrap();
    let mut decoder = FrameDecoder::new(1 << 20);
    decoder.push(Bytes::from(reply));
    let name: NameReply = decoder
        .next_frame()
        .unwrap()
        .unwrap()
        .decode("reply")
        .unwrap();
    assert_eq!(name.name, "quic-idle");
}

/// Whether `f` is ready at its first poll.
fn ready_now<F: Future>(f: F) -> Option<F::Output> {
    let f = std::pin::pin!(f);
    match f.poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
        std::task::Poll::Ready(r) => Some(r),
        std::task::Poll::Pending => None,
    }
}

#[tokio::test]
async fn a_connection_opens_at_most_its_limit_of_streams_at_once() {
    let limits = sut_node::limits::Limits {
        max_streams_per_connection: 2,
        ..sut_node::limits::Limits::default()
    };
    let node = Node::start_with("quic-streams", limits, OUTPUT, loadgen_transport()).await;
    // Two requests under way: typed, their request not sent yet.
    let mut open = Vec::new();
    for _ in 0..2 {
        let (mut send, recv) = within("a stream", node.conn.open_bi()).await.unwrap();
        send.write_all(&[stream_type::NAME]).await.unwrap();
        open.push((send, recv));
    }
    // The node's limit, known since the handshake: no third stream now.
    assert!(
        ready_now(node.conn.open_bi()).is_none(),
        "a third stream opened beside two"
    );
    let third = tokio::spawn({
        let conn = node.conn.clone();
        async move { conn.open_bi().await }
    });
    // Once one of them is done, the third opens.
    let (mut send, mut recv) = open.remove(0);
    let mut body = BytesMut::new();
    encode_message(&NameRequest {}, &mut body).unwrap();
    send.write_all(&body).await.unwrap();
    send.finish().unwrap();
    within("the reply", recv.read_to_end(1 << 20))
        .await
        .unwrap();
    let (mut send, mut recv) = within("the third stream", third).await.unwrap().unwrap();
    let mut body = BytesMut::new();
    body.put_u8(stream_type::NAME);
    encode_message(&NameRequest {}, &mut body).unwrap();
    send.write_all(&body).await.unwrap();
    send.finish().unwrap();
    let reply = within("the reply", recv.read_to_end(1 << 20))
        .await
        .unwrap();
    assert!(!reply.is_empty());
    drop(open);
    node.stop().await;
}

#[tokio::test]
async fn a_probe_over_the_message_limit_is_refused_at_its_header() {
    let limits = sut_node::limits::Limits {
        max_message_bytes: 64 << 10,
        ..sut_node::limits::Limits::default()
    };
    let node = Node::start_with("quic-probe", limits, OUTPUT, loadgen_transport()).await;
    // A probe within the limit is answered.
    let probe = proto::ProbeRequest {
        payload: Bytes::from(vec![1u8; 32 << 10]),
        reply_bytes: 16,
    };
    let reply: proto::ProbeReply = node.control(stream_type::PROBE, &probe).await;
    assert_eq!(reply.payload.len(), 16);
    // One announcing 200 KiB, its body never sent: refused at once.
    let mut header = vec![0u8];
    header.extend_from_slice(&(200u32 << 10).to_be_bytes());
    let (frames, _) = node.exchange(stream_type::PROBE, &header, false).await;
    assert!(
        matches!(&frames[..], [Frame::Error(e)] if e.contains("limit")),
        "{frames:?}"
    );
    node.stop().await;
}

#[tokio::test]
async fn a_client_that_does_not_read_its_answers_gets_no_more_samples_taken() {
    const ANSWER: usize = 64 << 10;
    let limits = sut_node::limits::Limits {
        max_waiting_answer_bytes: 256 << 10,
        ..sut_node::limits::Limits::default()
    };
    let node = Node::start_with("quic-slow-reader", limits, ANSWER, loadgen_transport()).await;
    let (mut send, mut recv) = within("a stream", node.conn.open_bi()).await.unwrap();
    send.write_all(&[stream_type::INFER]).await.unwrap();
    // Never reading the answers, send until the node stops taking samples
    // (a write that waits a whole second), at most 1000 (64 MiB of answers).
    let mut sent = 0u64;
    while sent < 1000 {
        let s = ToNode {
            kind: Some(to_node::Kind::Sample(SampleRequest {
                id: sent,
                payload: Bytes::from(vec![sent as u8; 64 << 10]),
                ..Default::default()
            })),
        };
        let mut frame = BytesMut::new();
        encode_message(&s, &mut frame).unwrap();
        match tokio::time::timeout(Duration::from_secs(1), send.write_all(&frame)).await {
            Ok(r) => r.unwrap(),
            Err(_) => break,
        }
        sent += 1;
    }
    // The bound: the waiting answers, the stream's QUIC windows of inputs
    // and of answers (8 MiB each, 128 samples each) and the batcher; far
    // below 1000 samples.
    assert!(
        sent < 300,
        "the node took {sent} samples from a client that reads nothing"
    );
    // Once the client reads, every sample it sent is answered. (The write
    // that timed out may have sent part of its frame: the stream is reset
    // rather than finished, after the answers.)
    let mut decoder = FrameDecoder::new(1 << 20);
    let mut ids = std::collections::HashSet::new();
    within("the answers", async {
        while (ids.len() as u64) < sent {
            match decoder.next_frame().unwrap() {
                Some(Frame::Error(e)) => panic!("{e}"),
                Some(f) => {
                    let m: FromNode = f.decode("FromNode").unwrap();
                    for a in m.answers {
                        assert_eq!(a.payload.len(), ANSWER);
                        ids.insert(a.id);
                    }
                }
                None => match recv.read_chunk(usize::MAX, true).await.unwrap() {
                    Some(c) => decoder.push(c.bytes),
                    None => break,
                },
            }
        }
    })
    .await;
    assert_eq!(ids.len() as u64, sent);
    let _ = send.reset(0u32.into());
    node.stop().await;
}

/// Resident memory of this process (the node runs in it), in MiB.
fn rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap();
    kib / 1024
}

#[tokio::test]
async fn probe_replies_never_read_cost_the_node_no_memory() {
    use sut_node::describe::MAX_PROBE_REPLY;
    let node = Node::start("quic-probe-flood").await;
    let before = rss_mib();
    // A client with small stream windows asks the largest reply on 7
    // streams (1.75 GiB in all) and reads nothing past each reply's first
    // bytes.
    let mut transport = loadgen_transport();
    transport.stream_receive_window((64u32 << 10).into());
    transport.receive_window((1u32 << 20).into());
    let (_client, conn) = node.connect(transport).await;
    let mut request = BytesMut::new();
    request.put_u8(stream_type::PROBE);
    let probe = proto::ProbeRequest {
        payload: Bytes::new(),
        reply_bytes: MAX_PROBE_REPLY,
    };
    encode_message(&probe, &mut request).unwrap();
    let mut held = Vec::new();
    for _ in 0..7 {
        let (mut send, mut recv) = within("a stream", conn.open_bi()).await.unwrap();
        send.write_all(&request).await.unwrap();
        send.finish().unwrap();
        // The reply is under way (the node has made it, as far as it does).
        let first = within("the reply's first bytes", recv.read_chunk(1 << 10, true)).await;
        assert!(first.is_ok_and(|c| c.is_some_and(|c| !c.bytes.is_empty())));
        held.push((send, recv));
    }
    let grown = rss_mib().saturating_sub(before);
    assert!(
        grown < 256,
        "the node grew by {grown} MiB for replies nobody reads"
    );
    // A real client's probe is still answered.
    let reply: proto::ProbeReply = node
        .control(
            stream_type::PROBE,
            &proto::ProbeRequest {
                payload: Bytes::from(vec![1u8; 1000]),
                reply_bytes: 512 << 10,
            },
        )
        .await;
    assert_eq!(reply.payload, vec![0u8; 512 << 10]);
    drop(held);
    drop(conn);
    node.stop().await;
}
