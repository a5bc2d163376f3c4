//! The node's codecs over a real Infer stream: compressed inputs decoded
//! before the backend, answers and first tokens compressed with the output
//! codec, bombs and corrupt frames answered with a SampleError, and a
//! stream of small compressed inputs served at its pace beside streams of
//! inputs that each decode to the limit.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_stream::StreamExt;

use bytes::Bytes;
use compression::{CodecKind, CodecSpec};
use proto::codec::WireCodec;
use proto::sut_node_client::SutNodeClient;
use proto::{to_node, Codec, FromNode, SampleRequest, SessionRequest, ToNode};
use sut_node::backend::synthetic::{ServiceTime, Synthetic, SyntheticConfig};
use sut_node::batcher::BatchPolicy;
use sut_node::codec::NodeCodecs;
use sut_node::server::{serve, NodeConfig};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tonic::transport::Channel;

const LONG: Duration = Duration::from_secs(20);
const ANSWER: usize = 2048;
const MAX_INPUT: usize = 1 << 20;

/// A ready synthetic node with `codecs`; stops when the sender is dropped.
async fn node(
    codecs: NodeCodecs,
    llm_tokens: u32,
) -> (SutNodeClient<Channel>, oneshot::Sender<()>) {
    let (addr, stop) = node_with(codecs, llm_tokens, 4, sut_node::limits::Limits::default()).await;
    let client = SutNodeClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    (client, stop)
}

/// A ready synthetic node with `codecs`, batches of up to `max_batch_size`
/// and `limits`: its address.
async fn node_with(
    codecs: NodeCodecs,
    llm_tokens: u32,
    max_batch_size: usize,
    limits: sut_node::limits::Limits,
) -> (std::net::SocketAddr, oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = NodeConfig {
        name: "codec-node".into(),
        model: None,
        batch: BatchPolicy {
            max_batch_size,
            max_wait: Duration::ZERO,
        },
        heartbeat: None,
        shutdown_grace: Duration::from_secs(5),
        codecs,
        limits,
    };
    let backend = Arc::new(Synthetic::new(SyntheticConfig {
        layout: Default::default(),
        service_time: "fixed:0".parse::<ServiceTime>().unwrap(),
        output_size: ANSWER,
        llm_tokens,
        seed: 1,
    }));
    let (stop, stopped) = oneshot::channel::<()>();
    let (ready_tx, ready) = oneshot::channel();
    tokio::spawn(serve(
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
    tokio::time::timeout(LONG, ready).await.unwrap().unwrap();
    (addr, stop)
}

fn sample(id: u64, payload: Vec<u8>, codec: i32) -> ToNode {
    ToNode {
        kind: Some(to_node::Kind::Sample(SampleRequest {
            id,
            payload: Bytes::from(payload),
            codec,
            ..Default::default()
        })),
    }
}

/// An image-like input: smooth, so it compresses.
fn input(id: u64) -> Vec<u8> {
    (0..30_000u64)
        .map(|i| ((i / 50 + id) % 256) as u8)
        .collect()
}

/// Sends `requests` on one stream and collects every message until the node
/// ends it.
async fn exchange(client: &mut SutNodeClient<Channel>, requests: Vec<ToNode>) -> Vec<FromNode> {
    let response = tokio::time::timeout(LONG, client.infer(tokio_stream::iter(requests)))
        .await
        .unwrap()
        .unwrap();
    let mut stream = response.into_inner();
    let mut out = Vec::new();
    while let Some(m) = tokio::time::timeout(LONG, stream.message())
        .await
        .unwrap()
        .unwrap()
    {
        out.push(m);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_inputs_are_decoded_and_answers_compressed() {
    for output in ["none", "zstd", "zstd:9", "lz4"] {
        let output: CodecSpec = output.parse().unwrap();
        let (mut client, _stop) = node(
            NodeCodecs {
                output,
                max_input_bytes: MAX_INPUT,
            },
            0,
        )
        .await;
        let reply = client
            .start_session(SessionRequest {
                protocol_version: proto::PROTOCOL_VERSION,
                model: "resnet50".into(),
                scenario: "Offline".into(),
                input_codec: Codec::Zstd as i32,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(reply.refusal, "");
        assert_eq!(reply.output_codec, output.kind.wire());

        // Every input codec on the same stream: the codec is per sample.
        let mut requests = Vec::new();
        for id in 0..60u64 {
            let kind = CodecKind::ALL[id as usize % 3];
            let frame = CodecSpec::from(kind).codec().compress(&input(id));
            requests.push(sample(id, frame, kind.wire()));
        }
        let mut answers = HashMap::new();
        for m in exchange(&mut client, requests).await {
            assert!(m.errors.is_empty(), "{:?}", m.errors);
            for a in m.answers {
                assert_eq!(a.codec, output.kind.wire());
                let data = compression::decompress(output.kind, &a.payload, ANSWER).unwrap();
                answers.insert(a.id, data);
            }
        }
        assert_eq!(answers.len(), 60);
        for (id, data) in answers {
            assert_eq!(
                data,
                facts::synthetic::answer(&input(id), ANSWER),
                "{output}: {id}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_tokens_are_compressed_too() {
    let (mut client, _stop) = node(
        NodeCodecs {
            output: CodecSpec::from(CodecKind::Lz4),
            max_input_bytes: MAX_INPUT,
        },
        8,
    )
    .await;
    let requests = (0..10u64)
        .map(|id| sample(id, input(id), Codec::None as i32))
        .collect();
    let mut tokens = 0;
    for m in exchange(&mut client, requests).await {
        for t in m.first_tokens {
            assert_eq!(t.codec, Codec::Lz4 as i32);
            let data = compression::decompress(CodecKind::Lz4, &t.payload, 64).unwrap();
            let full = facts::synthetic::answer(&input(t.id), ANSWER);
            assert_eq!(data, &full[..data.len()]);
            tokens += 1;
        }
        for a in m.answers {
            assert_eq!(a.codec, Codec::Lz4 as i32);
            assert_eq!(a.n_tokens, 8);
        }
    }
    assert_eq!(tokens, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bombs_and_corrupt_inputs_get_sample_errors() {
    let (mut client, _stop) = node(
        NodeCodecs {
            output: CodecSpec::NONE,
            max_input_bytes: MAX_INPUT,
        },
        0,
    )
    .await;
    let zeros = vec![0u8; 64 << 20];
    let zstd_bomb = CodecSpec::from(CodecKind::Zstd).codec().compress(&zeros);
    let lz4_bomb = CodecSpec::from(CodecKind::Lz4).codec().compress(&zeros);
    assert!(zstd_bomb.len() < 8 << 10);
    let mut corrupt = CodecSpec::from(CodecKind::Zstd).codec().compress(&input(3));
    let mid = corrupt.len() / 2;
    corrupt[mid] ^= 0xff;
    let requests = vec![
        sample(1, zstd_bomb, Codec::Zstd as i32),
        sample(2, lz4_bomb, Codec::Lz4 as i32),
        sample(3, corrupt, Codec::Zstd as i32),
        sample(4, vec![0xff; 3], Codec::Lz4 as i32),
        sample(5, vec![1; MAX_INPUT + 1], Codec::None as i32),
        sample(6, input(6), Codec::None as i32),
    ];
    let mut errors = HashMap::new();
    let mut answered = Vec::new();
    for m in exchange(&mut client, requests).await {
        for e in m.errors {
            errors.insert(e.id, e.message);
        }
        answered.extend(m.answers.iter().map(|a| a.id));
    }
    assert_eq!(answered, [6], "the good sample is still answered");
    for (id, want) in [
        (1, "zstd frame of"),
        (2, "lz4 frame of"),
        (3, "corrupt zstd frame"),
        (4, "corrupt lz4 frame"),
        (5, "1048577 bytes, more than"),
    ] {
        let e = &errors[&id];
        assert!(e.contains(want), "sample {id}: {e}");
    }
    for id in [1, 2] {
        assert!(
            errors[&id].contains("declares 67108864 bytes, more than the limit of 1048576"),
            "{}",
            errors[&id]
        );
    }
}

/// A zstd frame of `len` zeros without its size in the header (the codecs
/// always write it): the node charges it at its input limit.
fn streamed_zstd(len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = zstd::stream::Encoder::new(&mut out, 1).unwrap();
    std::io::Write::write_all(&mut encoder, &vec![0u8; len]).unwrap();
    encoder.finish().unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_compressed_inputs_wait_for_about_one_input_of_the_limit_not_one_of_each_stream() {
    // A node whose inputs decode to at most 4 MiB, its budgets in the
    // defaults' proportions (a connection holds a quarter of the node's).
    const LIMIT: usize = 4 << 20;
    let codecs = NodeCodecs {
        output: CodecSpec::NONE,
        max_input_bytes: LIMIT,
    };
    let limits = sut_node::limits::Limits {
        max_message_bytes: LIMIT + sut_node::limits::MESSAGE_OVERHEAD,
        max_decoded_bytes: 8 * LIMIT,
        max_decoded_bytes_per_connection: 2 * LIMIT,
        ..sut_node::limits::Limits::default()
    };
    let (addr, _stop) = node_with(codecs, 0, 1, limits).await;
    // Eight connections stream inputs that each decode to the limit, and
    // read their answers; the synthetic backend's work grows with the input.
    let bomb = Bytes::from(streamed_zstd(LIMIT));
    let (bombs_answered, mut answered_rx) = tokio::sync::watch::channel(0u64);
    let bombs_answered = Arc::new(bombs_answered);
    let mut bombers = Vec::new();
    for _ in 0..8 {
        let mut client = SutNodeClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        let bomb = bomb.clone();
        let samples = tokio_stream::iter(0u64..).map(move |id| ToNode {
            kind: Some(to_node::Kind::Sample(SampleRequest {
                id,
                payload: bomb.clone(),
                codec: Codec::Zstd as i32,
                ..Default::default()
            })),
        });
        let mut answers = client.infer(samples).await.unwrap().into_inner();
        // (The call keeps its connection open once the client is dropped.)
        let counted = Arc::clone(&bombs_answered);
        bombers.push(tokio::spawn(async move {
            while let Ok(Some(m)) = answers.message().await {
                counted.send_modify(|n| *n += m.answers.len() as u64);
            }
        }));
    }
    // They are under way.
    tokio::time::timeout(LONG, answered_rx.wait_for(|n| *n >= 16))
        .await
        .unwrap()
        .unwrap();
    // A LoadGen node's connection sends its samples one at a time, each
    // once the previous one is answered; meanwhile the node answers about
    // one input of the limit per sample (the one it is on), where taking
    // turns a sample waited for one of every other busy connection.
    let mut client = SutNodeClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let mut answers = client
        .infer(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let small = CodecSpec::from(CodecKind::Zstd).codec().compress(&input(1));
    let before = *bombs_answered.borrow();
    const SAMPLES: u64 = 20;
    for id in 0..SAMPLES {
        tx.send(sample(id, small.clone(), Codec::Zstd as i32))
            .await
            .unwrap();
        loop {
            let m = tokio::time::timeout(LONG, answers.message())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            if m.answers.iter().any(|a| a.id == id) {
                break;
            }
        }
    }
    let meanwhile = *bombs_answered.borrow() - before;
    assert!(
        meanwhile < 4 * SAMPLES,
        "{meanwhile} inputs of the limit answered while {SAMPLES} small ones were"
    );
    for b in bombers {
        b.abort();
    }
}
