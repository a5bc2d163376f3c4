//! A LoadGen run stays VALID beside a hostile client doing its worst to the
//! same sut-node: idle and silent connections, Infer streams whose answers
//! are never read, and compressed inputs that declare far more than the
//! node's input limit. The node's memory stays bounded meanwhile.

use bytes::Bytes;
use proto::sut_node_client::SutNodeClient;
use proto::{to_node, Codec, SampleRequest, SessionRequest, ToNode};
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

    let out = scratch("hostile");
    let o = loadgen(&[
        "--sut",
        &sut_list(std::slice::from_ref(&node)),
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
        // A generous bound: the test is about the node serving at all, not
        // about this (shared) host's latency.
        "--set",
        "target_latency=10000",
        "--sample-bytes",
        "4096",
        "--total-sample-count",
        "256",
        "--no-trace",
        "--output-dir",
        out.to_str().expect("utf-8 path"),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        detail_value(&out, "result_validity").and_then(|v| v.as_str().map(String::from)),
        Some("VALID".into()),
        "{}",
        text(&o.stdout)
    );
    // The attacker's unread answers and queued inputs are bounded: far
    // below what its streams sent.
    let rss = rss_mib(node.pid());
    assert!(rss < 256, "the node holds {rss} MiB");
    drop(held);
    drop(runtime);
}
