//! A LoadGen run stays VALID beside a hostile client doing its worst to the
//! same sut-node: idle and silent connections, Infer streams whose answers
//! are never read, compressed inputs that declare far more than the node's
//! input limit, probe replies asked for and never read (both transports),
//! compressed inputs that each decode to the input limit, and connections
//! that start no session filling every place. The node's memory stays
//! bounded meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::time::{Duration, Instant};

use bytes::Bytes;
use proto::sut_node_client::SutNodeClient;
use proto::{to_node, Codec, SampleRequest, SessionRequest, ToNode};
use tests::hostile::{
    connections_without_sessions, decode_bombs, probe_replies_never_read,
    quic_probe_replies_never_read, slow_streams, streamed_zstd, unfinished_messages,
};
use tests::{detail_value, loadgen, scratch, sut_list, text, SutNode};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// Resident memory of `pid` in MiB.
fn rss_mib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kib| kib.parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024)
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

/// Opens streams that send samples as fast as the node takes them and never
/// read an answer, plus streams of small zstd frames that each declare 1 GiB,
/// plus silent TCP connections; keeps them all open until dropped.
async fn attack(addr: String) -> Vec<Box<dyn std::any::Any + Send>> {
    let mut held: Vec<Box<dyn std::any::Any + Send>> = Vec::new();
    for _ in 0..10 {
        if let Ok(tcp) = tokio::net::TcpStream::connect(&addr).await {
            held.push(Box::new(tcp));
        }
    }
    let bomb = compression::CodecSpec::from(compression::CodecKind::Zstd)
        .codec()
        .compress(&[0u8; 1 << 20]);
    for stream in 0..4u64 {
        let Ok(mut client) = SutNodeClient::connect(format!("http://{addr}")).await else {
            continue;
        };
        let _ = client
            .start_session(SessionRequest {
                protocol_version: proto::PROTOCOL_VERSION,
                model: "resnet50".into(),
                scenario: "Server".into(),
                input_codec: Codec::Zstd as i32,
                ..Default::default()
            })
            .await;
        let (tx, rx) = mpsc::channel(16);
        let Ok(answers) = client.infer(ReceiverStream::new(rx)).await else {
            continue;
        };
        let bomb = bomb.clone();
        tokio::spawn(async move {
            for id in 0.. {
                let s = match stream % 2 {
                    0 => sample(id, vec![7u8; 4096], Codec::None),
                    _ => sample(id, bomb.clone(), Codec::Zstd),
                };
                if tx.send(s).await.is_err() {
                    return;
                }
            }
        });
        held.push(Box::new((client, answers)));
    }
    held
}

#[test]
fn a_run_stays_valid_beside_a_hostile_client() {
    let node = SutNode::start(
        "sturdy",
        &[
            "--benchmark",
            "resnet50",
            "--max-input-bytes",
            "65536",
            "--output-size",
            "4096",
            "--max-waiting-answer-bytes",
            "65536",
            "--max-connections-per-peer",
            "32",
        ],
    );
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let held = runtime.block_on(attack(node.addr.clone()));
    assert!(
        held.len() >= 12,
        "the attack got {} connections in",
        held.len()
    );
    // The largest probe replies, never read: 4 GiB over gRPC, 1.75 GiB over
    // QUIC, were they held.
    let addr = node.addr.parse().expect("an address");
    let quic = node
        .quic
        .as_deref()
        .expect("QUIC")
        .parse()
        .expect("an address");
    let pin = node.fingerprint.clone().expect("a fingerprint");
    let probes = runtime.block_on(async {
        let grpc = probe_replies_never_read(addr, 2).await;
        let quic = quic_probe_replies_never_read(quic, &pin, 7).await;
        (grpc, quic)
    });
    assert_eq!(
        (probes.0.held(), probes.1.held()),
        (18, 8),
        "every probe stream opened"
    );

    // A generous bound: the test is about the node serving at all, not
    // about this (shared) host's latency.
    let (o, out) = server_run(
        &node,
        "hostile",
        &["--sample-bytes", "4096", "--set", "target_latency=10000"],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(validity(&out), Some("VALID".into()), "{}", text(&o.stdout));
    // The attacker's unread answers and queued inputs are bounded: far
    // below what its streams sent.
    let rss = rss_mib(node.pid());
    assert!(rss < 256, "the node holds {rss} MiB");
    drop((held, probes));
    drop(runtime);
}

/// A Server run of `loadgen-node` against `node` with `extra` flags; its
/// output and logs' directory.
fn server_run(node: &SutNode, tag: &str, extra: &[&str]) -> (std::process::Output, tests::Scratch) {
    let out = scratch(tag);
    let sut = sut_list(std::slice::from_ref(node));
    let mut args = vec![
        "--sut",
        &sut,
        "--model",
        "resnet50",
        "--scenario",
        "Server",
        "--mode",
        "PerformanceOnly",
        "--set",
        "target_qps=200",
        "--set",
        "min_duration=3000",
        "--total-sample-count",
        "256",
        "--no-trace",
        "--output-dir",
        out.to_str().expect("utf-8 path"),
    ];
    args.extend_from_slice(extra);
    (loadgen(&args), out)
}

fn validity(out: &std::path::Path) -> Option<String> {
    detail_value(out, "result_validity").and_then(|v| v.as_str().map(String::from))
}

#[test]
fn a_compressed_run_stays_valid_beside_inputs_that_decode_to_the_limit() {
    // A node with the default flags: a streamed frame (no size in its
    // header) is charged at the 64 MiB input limit until decoded. Each bomb
    // is such a frame, decoding to just that, on eight connections that read
    // their answers: the node's budget is always spent, and the run's small
    // inputs wait for their turns of it, of the decode pool and of the
    // batcher.
    let node = SutNode::start("fair", &[]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let addr = node.addr.parse().expect("an address");
    let bombs = runtime.block_on(decode_bombs(addr, 8, streamed_zstd(64 << 20)));
    assert_eq!(bombs.held(), 8);
    // Small inputs, compressed. The bound: far below the tens of seconds a
    // sample waited when the spent budget was gathered by one waiter charged
    // at the limit (p99 68 s, INVALID), far above what it waits for now
    // (about one bomb decoded and one run: p99 0.5 s in a debug build on a
    // shared 2-core host).
    let (o, out) = server_run(
        &node,
        "hostile-bombs",
        &[
            "--input-codec",
            "zstd",
            "--sample-bytes",
            "4096",
            "--set",
            "target_latency=5000",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(validity(&out), Some("VALID".into()), "{}", text(&o.stdout));
    drop(bombs);
    drop(runtime);
}

#[test]
fn a_loadgen_node_gets_in_past_connections_that_start_no_session() {
    // Every place of a node with the default limits taken: 64 connections
    // (the per-address limit) from this host's address and from three more.
    let node = SutNode::start("crowded", &[]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let addr = node.addr.parse().expect("an address");
    let from: Vec<std::net::IpAddr> = (1..=4).map(|i| [127, 0, 0, i].into()).collect();
    let flood = runtime.block_on(connections_without_sessions(addr, &from, 64));
    assert_eq!(flood.held(), 256);
    // A generous bound: the test is about getting in, not this (shared)
    // host's latency.
    let (o, out) = server_run(
        &node,
        "hostile-crowded",
        &["--sample-bytes", "4096", "--set", "target_latency=10000"],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(validity(&out), Some("VALID".into()), "{}", text(&o.stdout));
    drop(flood);
    drop(runtime);
}

/// `n` connections to `addr`, each with an accepted session; with
/// `samples`, each has sent a sample on its Infer stream (and read its
/// answer), as a run's connection has. Held until dropped.
async fn sessions(addr: &str, n: usize, samples: bool) -> Vec<Box<dyn std::any::Any + Send>> {
    let mut held: Vec<Box<dyn std::any::Any + Send>> = Vec::new();
    for _ in 0..n {
        let mut client = SutNodeClient::connect(format!("http://{addr}"))
            .await
            .expect("a connection");
        let reply = client
            .start_session(SessionRequest {
                protocol_version: proto::PROTOCOL_VERSION,
                model: "resnet50".into(),
                scenario: "Server".into(),
                input_codec: Codec::None as i32,
                ..Default::default()
            })
            .await
            .expect("a session")
            .into_inner();
        assert!(reply.refusal.is_empty(), "{}", reply.refusal);
        if !samples {
            held.push(Box::new(client));
            continue;
        }
        let (tx, rx) = mpsc::channel(1);
        tx.send(sample(1, vec![1u8; 16], Codec::None))
            .await
            .unwrap();
        let mut answers = client
            .infer(ReceiverStream::new(rx))
            .await
            .expect("an Infer stream")
            .into_inner();
        // Until its answer: the node has seen the sample.
        loop {
            let m = answers
                .message()
                .await
                .expect("the stream")
                .expect("a message");
            if !m.answers.is_empty() {
                break;
            }
        }
        held.push(Box::new((client, tx, answers)));
    }
    held
}

#[test]
fn a_loadgen_node_gets_in_past_sessions_that_send_no_sample() {
    // Every place of this address (64 by default) held by a connection with
    // a session accepted, none of which ever sends a sample: the run's
    // connections take their places, oldest first.
    let node = SutNode::start("idle-sessions", &[]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let held = runtime.block_on(sessions(&node.addr, 64, false));
    assert_eq!(held.len(), 64);
    let (o, out) = server_run(
        &node,
        "hostile-idle-sessions",
        &["--sample-bytes", "4096", "--set", "target_latency=10000"],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(validity(&out), Some("VALID".into()), "{}", text(&o.stdout));
    drop(held);
    drop(runtime);
}

#[test]
fn a_loadgen_node_refused_at_a_limit_is_told_which() {
    // Both places of this address held by connections whose sessions have
    // carried samples: a run's, which nothing takes from them.
    let node = SutNode::start("full", &["--max-connections-per-peer", "2"]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let held = runtime.block_on(sessions(&node.addr, 2, true));
    let (o, _) = server_run(&node, "hostile-full", &["--sample-bytes", "4096"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("2 connections open from 127.0.0.1, the --max-connections-per-peer limit")
            && err.contains("in a session that has carried samples")
            && err.contains("tried 6 times"),
        "{err}"
    );
    drop(held);
    drop(runtime);
}

#[test]
fn memory_a_burst_of_slow_streams_took_is_given_back_once_it_ends() {
    let node = SutNode::start("burst", &["--output-size", "65536"]);
    let before = rss_mib(node.pid());
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let addr = node.addr.parse().expect("an address");
    // 64 streams that send 64 KiB samples and never read their 64 KiB
    // answers: each makes the node hold up to its answer limit (16 MiB).
    let burst = runtime.block_on(slow_streams(addr, 8, 8, 64 << 10));
    assert_eq!(burst.held(), 72);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut peak = before;
    while peak < before + 256 {
        assert!(Instant::now() < deadline, "the burst took {peak} MiB only");
        std::thread::sleep(Duration::from_millis(50));
        peak = peak.max(rss_mib(node.pid()));
    }
    // Its connections closed (with the runtime that drives them), the node
    // gives the memory back.
    drop(burst);
    drop(runtime);
    let mut now = rss_mib(node.pid());
    while now > before + 100 {
        assert!(
            Instant::now() < deadline,
            "the node still holds {now} MiB, {before} MiB before a burst of {peak} MiB"
        );
        std::thread::sleep(Duration::from_millis(50));
        now = rss_mib(node.pid());
    }
}

#[test]
fn unfinished_messages_on_every_stream_cost_the_nodes_budget_not_its_memory() {
    // 4 connections of 8 Infer streams, each sending 8 MiB of a 60 MiB
    // message and never the rest: 256 MiB, were they held. The node holds
    // its budget of unfinished bytes (32 MiB here), 64 KiB a stream, and
    // what its HTTP/2 windows let each connection send unread (16 MiB).
    let node = SutNode::start("unfinished", &["--max-decoded-bytes", "33554432"]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let addr = node.addr.parse().expect("an address");
    let before = rss_mib(node.pid());
    let attack = runtime.block_on(unfinished_messages(addr, 4, 8, 60 << 20, 8 << 20));
    assert_eq!(attack.held(), 4 * 8 + 4);
    // Until the node has taken all it will: its memory stops growing.
    let mut last = rss_mib(node.pid());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = rss_mib(node.pid());
        if now <= last + 1 || Instant::now() > deadline {
            last = now;
            break;
        }
        last = now;
    }
    let grown = last.saturating_sub(before);
    assert!(grown < 160, "the node grew by {grown} MiB");
    // A run beside it, its samples whole in their frames, is not held back.
    let (o, out) = server_run(
        &node,
        "hostile-unfinished",
        &["--sample-bytes", "4096", "--set", "target_latency=10000"],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(validity(&out), Some("VALID".into()), "{}", text(&o.stdout));
    drop(attack);
    drop(runtime);
}
