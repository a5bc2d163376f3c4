//! The bytes path: how much of what the wire carries the QDL reaches with
//! the benchmarks' real input sizes, loopback, one synthetic sut-node.
//!
//! Measured side by side in one run, as Gbit/s of payload:
//! - raw TCP: the same bytes, one write per sample, from this process to a
//!   second process (this bench's executable run again as the receiver):
//!   the physical limit of this path on this host;
//! - plain quinn: one QUIC stream carrying the same bytes to a second
//!   process, with the transport settings of the QDL and the node: QUIC's
//!   own limit here; in the case with several connections per node also
//!   over as many connections at once, each from its own endpoint as the
//!   QDL's, to one receiving endpoint (as a node has) and to one process
//!   each;
//! - gRPC, gRPC over TLS and QUIC through loadgen-node, the QDL and a
//!   synthetic node (Offline), each also as a ratio to raw TCP (and QUIC to
//!   plain quinn over as many connections, to one endpoint).
//!
//! Cases: ResNet50 fp32 (602,112 B) and uint8 (150,528 B) inputs, BERT
//! (3x384 int32, 4,608 B), a 3D-UNet-sized answer (128^3 bytes of labels,
//! 2,097,152 B, from small inputs; the node's answers are random, so
//! `--output-codec lz4` shows the codec's cost, not a gain), and ResNet50
//! fp32 with `--input-codec lz4|zstd` (closed division allows compressed
//! image inputs), and WAN-2.2's answer (one 720p video in bf16, 449,740,800
//! B; a few samples: the node makes each answer before sending it, which
//! raw TCP does not).
//!
//! `cargo bench -p tests --bench bytes` (builds the release binaries
//! first). BENCH_QUICK=1 shortens every run; BENCH_CASES=name,name picks
//! cases (r50-fp32, r50-u8, bert, unet-answer, unet-answer-lz4, r50-lz4,
//! r50-zstd, r50-quic-conns, wan-answer).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench: a failed step ends it, saying which
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tests::{detail_value, scratch, text, SutNode};

/// Which role this executable plays when it runs again as the receiver.
const ROLE: &str = "BYTES_BENCH_ROLE";
/// Where the receiver finds the certificate and key of the quinn transfer.
const CERT_DIR: &str = "BYTES_BENCH_CERTS";
/// How many connections the quinn receiver accepts.
const RECEIVER_CONNS: &str = "BYTES_BENCH_CONNS";

const RESNET50_FP32: usize = 602_112;
const RESNET50_U8: usize = 150_528;
const BERT: usize = 4_608;
const UNET_ANSWER: usize = 2_097_152;
const WAN_ANSWER: usize = 224_870_400 * 2;

fn main() {
    match std::env::var(ROLE).as_deref() {
        Ok("tcp") => return tcp_receiver(),
        Ok("quinn") => return quinn_receiver(),
        _ => {}
    }
    let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1");
    let picked: Vec<String> = std::env::var("BENCH_CASES")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let loadgen = tests::build_release();
    let bench = Bench {
        loadgen,
        secs: if quick { 2.0 } else { 6.0 },
        raw_bytes: if quick { 1 << 30 } else { 4 << 30 },
        certs: write_certs(),
    };

    let plain = SutNode::start("bytes-1", &[]);
    let tls = SutNode::start("bytes-2", &["--tls", "--no-quic"]);
    let answers = ["--output-size", "2097152"];
    let big = SutNode::start("bytes-3", &answers);
    let big_lz4 = SutNode::start(
        "bytes-4",
        &[&answers[..], &["--output-codec", "lz4"]].concat(),
    );
    let wan_answers = WAN_ANSWER.to_string();
    let huge = SutNode::start("bytes-5", &["--output-size", &wan_answers]);
    let pin = |n: &SutNode| vec!["--tls-pin".to_string(), n.fingerprint.clone().expect("pin")];
    let grpc = |n: &SutNode| Way {
        label: "grpc",
        sut: n.addr.clone(),
        flags: vec![],
    };
    let quic = |n: &SutNode, extra: &[&str]| Way {
        label: "quic",
        sut: format!("quic://{}", n.quic.clone().expect("QUIC address")),
        flags: [pin(n), extra.iter().map(|s| s.to_string()).collect()].concat(),
    };
    let tls_way = Way {
        label: "grpc+tls",
        sut: format!("grpcs://{}", tls.addr),
        flags: pin(&tls),
    };
    let input = |name: &'static str, bytes: usize, codec: &'static str| Case {
        name,
        bytes,
        sample_bytes: bytes,
        answer_bytes: None,
        codec,
    };
    let answer = |name: &'static str, codec: &'static str| Case {
        name,
        bytes: UNET_ANSWER,
        sample_bytes: 64,
        answer_bytes: Some(UNET_ANSWER),
        codec,
    };
    let cases: Vec<(Case, Vec<Way>)> = vec![
        (
            input("r50-fp32", RESNET50_FP32, "none"),
            vec![grpc(&plain), tls_way.clone(), quic(&plain, &[])],
        ),
        (
            input("r50-u8", RESNET50_U8, "none"),
            vec![grpc(&plain), tls_way.clone(), quic(&plain, &[])],
        ),
        (
            input("bert", BERT, "none"),
            vec![grpc(&plain), tls_way.clone(), quic(&plain, &[])],
        ),
        (
            answer("unet-answer", "none"),
            vec![grpc(&big), quic(&big, &[])],
        ),
        (
            answer("unet-answer-lz4", "lz4"),
            vec![grpc(&big_lz4), quic(&big_lz4, &[])],
        ),
        (
            input("r50-lz4", RESNET50_FP32, "lz4"),
            vec![grpc(&plain), quic(&plain, &[])],
        ),
        (
            input("r50-zstd", RESNET50_FP32, "zstd"),
            vec![grpc(&plain), quic(&plain, &[])],
        ),
        (
            Case {
                name: "wan-answer",
                bytes: WAN_ANSWER,
                sample_bytes: 256,
                answer_bytes: Some(WAN_ANSWER),
                codec: "none",
            },
            vec![grpc(&huge), quic(&huge, &[])],
        ),
        (
            input("r50-quic-conns", RESNET50_FP32, "none"),
            vec![
                quic(&plain, &["--connections-per-node", "1"]),
                quic(&plain, &["--connections-per-node", "2"]),
                quic(&plain, &["--connections-per-node", "4"]),
                grpc_conns(&plain, 1),
                grpc_conns(&plain, 4),
            ],
        ),
    ];

    println!(
        "The bytes path: payload Gbit/s over loopback, one synthetic node, Offline \
         ({} cores{})",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if quick { ", BENCH_QUICK" } else { "" }
    );
    println!("  ratio: to raw TCP (and QUIC's also to plain quinn) measured in this run");
    println!();
    println!(
        "  {:<16} {:>9} | {:>8} | {:>8} | through the QDL",
        "case", "bytes", "raw TCP", "quinn"
    );
    for (case, ways) in &cases {
        if !picked.is_empty() && !picked.iter().any(|p| p == case.name) {
            continue;
        }
        let raw = bench.raw_tcp(case.bytes);
        let quinn = bench.quinn_bulk(case.bytes);
        let mut cells = Vec::new();
        // Plain quinn over as many connections as a QUIC way uses, to one
        // receiving endpoint (as a node) and to one process each.
        let mut spread = Vec::new();
        for way in ways {
            let g = bench.through_qdl(way, case);
            let mut cell = format!("{} {g:.2} ({:.2}x", way.describe(), g / raw);
            if way.label == "quic" {
                let conns = way.connections();
                let reference = if conns > 1 {
                    let one = bench.quinn_spread(case.bytes, conns, 1);
                    let each = bench.quinn_spread(case.bytes, conns, conns);
                    spread.push(format!(
                        "plain quinn x{conns}: {one:.2} to one endpoint, \
                         {each:.2} to {conns} processes"
                    ));
                    one
                } else {
                    quinn
                };
                cell.push_str(&format!(", {:.2}x quinn x{conns}", g / reference));
            }
            cell.push(')');
            cells.push(cell);
        }
        println!(
            "  {:<16} {:>9} | {raw:>8.2} | {quinn:>8.2} | {}",
            case.name,
            case.bytes,
            cells.join(" | ")
        );
        for line in spread {
            println!("  {:<16} {:>9}   {line}", "", "");
        }
    }
}

fn grpc_conns(n: &SutNode, conns: u32) -> Way {
    Way {
        label: "grpc",
        sut: n.addr.clone(),
        flags: vec!["--connections-per-node".into(), conns.to_string()],
    }
}

/// One way of reaching a node: a label, the `--sut` value, extra flags.
#[derive(Clone)]
struct Way {
    label: &'static str,
    sut: String,
    flags: Vec<String>,
}

impl Way {
    /// Its `--connections-per-node`, or 1.
    fn connections(&self) -> usize {
        self.flags
            .iter()
            .position(|f| f == "--connections-per-node")
            .and_then(|i| self.flags.get(i + 1))
            .map_or(1, |n| n.parse().expect("a number of connections"))
    }

    fn describe(&self) -> String {
        match self
            .flags
            .iter()
            .position(|f| f == "--connections-per-node")
        {
            Some(i) => format!("{} x{}", self.label, self.flags[i + 1]),
            None => self.label.to_string(),
        }
    }
}

/// What travels: `bytes` per sample in the measured direction.
struct Case {
    name: &'static str,
    bytes: usize,
    sample_bytes: usize,
    /// Answers of this size (the measured direction is then down).
    answer_bytes: Option<usize>,
    codec: &'static str,
}

struct Bench {
    loadgen: PathBuf,
    /// Aimed length of each QDL run.
    secs: f64,
    /// Bytes of each raw transfer.
    raw_bytes: usize,
    certs: tests::Scratch,
}

impl Bench {
    /// Payload Gbit/s of one Offline run through the QDL.
    fn through_qdl(&self, way: &Way, case: &Case) -> f64 {
        // Aim at `secs` at 4 Gbit/s; slower ways take longer, faster ones
        // less, never under 64 samples.
        // Videos: a few are enough, and each is seconds of work.
        let least = if case.bytes > 64 << 20 { 6.0 } else { 64.0 };
        let samples = ((4e9 / 8.0 / case.bytes as f64) * self.secs).max(least);
        let out = scratch(&format!("bytes-{}-{}", case.name, way.label));
        let mut cmd = Command::new(&self.loadgen);
        tests::synthetic_run_args(&mut cmd, &way.sut, "Offline", case.sample_bytes, &out)
            .args(["--input-codec", case.codec])
            .args(&way.flags)
            // Offline issues target_qps x min_duration x 1.1 samples (the
            // rules' 24,576 at least, unless min_query_count says less).
            .args(["--set", "min_duration=1000"])
            .arg("--set")
            .arg(format!("target_qps={:.0}", samples / 1.1));
        if let Some(a) = case.answer_bytes {
            cmd.arg("--max-answer-bytes").arg((2 * a).to_string());
        }
        let o = cmd.output().expect("loadgen-node runs");
        if !o.status.success() {
            panic!(
                "loadgen-node failed on {} over {}: {}",
                case.name,
                way.label,
                text(&o.stderr)
            );
        }
        let sps = number(&out, "result_samples_per_second");
        let _ = std::fs::remove_dir_all(&out);
        sps * case.bytes as f64 * 8.0 / 1e9
    }

    /// Gbit/s of `raw_bytes` written one sample at a time over one TCP
    /// connection to another process, until it confirms it read them all.
    fn raw_tcp(&self, sample: usize) -> f64 {
        let (mut child, port) = receiver("tcp", &[]);
        let count = self.raw_bytes / sample;
        let mut tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect to the receiver");
        tcp.set_nodelay(true).expect("nodelay");
        let buf = vec![0x5au8; sample];
        let start = Instant::now();
        tcp.write_all(&((count * sample) as u64).to_be_bytes())
            .expect("write");
        for _ in 0..count {
            tcp.write_all(&buf).expect("write");
        }
        let mut ack = [0u8; 1];
        tcp.read_exact(&mut ack)
            .expect("the receiver's confirmation");
        let secs = start.elapsed().as_secs_f64();
        let _ = child.wait();
        (count * sample) as f64 * 8.0 / secs / 1e9
    }

    /// Gbit/s of `raw_bytes` sent as one chunk per sample on one quinn
    /// stream to another process (TLS 1.3, the QDL's transport settings).
    fn quinn_bulk(&self, sample: usize) -> f64 {
        self.quinn_spread(sample, 1, 1)
    }

    /// `quinn_bulk` over `conns` connections at once, each with its own
    /// endpoint (UDP socket) as the QDL's, sending an equal share, to
    /// `receivers` processes (1: one endpoint takes them all, as a node
    /// does; `conns`: one process and socket each).
    fn quinn_spread(&self, sample: usize, conns: usize, receivers: usize) -> f64 {
        let per_receiver = (conns / receivers).to_string();
        let per_receiver = Path::new(&per_receiver);
        let children: Vec<(Child, u16)> = (0..receivers)
            .map(|_| {
                receiver(
                    "quinn",
                    &[(CERT_DIR, &self.certs), (RECEIVER_CONNS, per_receiver)],
                )
            })
            .collect();
        let ports: Vec<u16> = children.iter().map(|(_, p)| *p).collect();
        let count = self.raw_bytes / sample / conns;
        let cert = std::fs::read(self.certs.join("cert.der")).expect("certificate");
        let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
        let secs = rt.block_on(async {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(cert.into()).expect("root certificate");
            let mut config =
                quinn::ClientConfig::with_root_certificates(Arc::new(roots)).expect("client TLS");
            config.transport_config(Arc::new(proto::quic::transport_config(0)));
            let mut streams = Vec::new();
            for c in 0..conns {
                let socket =
                    proto::quic::udp_socket(([127, 0, 0, 1], 0).into()).expect("UDP socket");
                let endpoint = proto::quic::endpoint(socket, None).expect("endpoint");
                let port = ports[c % receivers];
                let conn = endpoint
                    .connect_with(config.clone(), ([127, 0, 0, 1], port).into(), "localhost")
                    .expect("connect")
                    .await
                    .expect("handshake");
                let stream = conn.open_bi().await.expect("stream");
                streams.push((endpoint, conn, stream));
            }
            let payload = Bytes::from(vec![0x5au8; sample]);
            let start = Instant::now();
            let sending: Vec<_> = streams
                .into_iter()
                .map(|(endpoint, conn, (mut send, mut recv))| {
                    let payload = payload.clone();
                    tokio::spawn(async move {
                        for _ in 0..count {
                            send.write_chunk(payload.clone()).await.expect("write");
                        }
                        send.finish().expect("finish");
                        let mut ack = [0u8; 1];
                        recv.read_exact(&mut ack).await.expect("confirmation");
                        (endpoint, conn)
                    })
                })
                .collect();
            let mut done = Vec::new();
            for s in sending {
                done.push(s.await.expect("a sender"));
            }
            let secs = start.elapsed().as_secs_f64();
            for (endpoint, conn) in done {
                conn.close(0u32.into(), b"done");
                endpoint.wait_idle().await;
            }
            secs
        });
        for (mut child, _) in children {
            let _ = child.wait();
        }
        (count * conns * sample) as f64 * 8.0 / secs / 1e9
    }
}

fn number(dir: &Path, key: &str) -> f64 {
    detail_value(dir, key)
        .and_then(|v| v.as_f64())
        .unwrap_or_else(|| panic!("{key} missing in {}", dir.display()))
}

/// Starts this executable again as the receiver `role`; returns it and the
/// port it prints.
fn receiver(role: &str, env: &[(&str, &Path)]) -> (Child, u16) {
    let exe = std::env::current_exe().expect("own executable");
    let mut cmd = Command::new(exe);
    cmd.env(ROLE, role).stdout(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("the receiver starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("the receiver's port");
    let port = line.trim().parse().expect("a port number");
    (child, port)
}

/// A self-signed certificate for `localhost`, as DER files in a scratch
/// directory.
fn write_certs() -> tests::Scratch {
    let dir = scratch("bytes-certs");
    let cert =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("certificate");
    std::fs::write(dir.join("cert.der"), cert.cert.der()).expect("write");
    std::fs::write(dir.join("key.der"), cert.signing_key.serialize_der()).expect("write");
    dir
}

/// The raw TCP receiver: reads the announced number of bytes, confirms.
fn tcp_receiver() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    println!("{}", listener.local_addr().expect("address").port());
    let _ = std::io::stdout().flush();
    let (mut tcp, _) = listener.accept().expect("accept");
    let mut len = [0u8; 8];
    tcp.read_exact(&mut len).expect("length");
    let mut left = u64::from_be_bytes(len);
    let mut buf = vec![0u8; 1 << 20];
    while left > 0 {
        let n = tcp.read(&mut buf).expect("read");
        assert!(n > 0, "the sender stopped early");
        left = left.saturating_sub(n as u64);
    }
    tcp.write_all(&[1]).expect("confirm");
}

/// The plain quinn receiver: accepts `RECEIVER_CONNS` connections (one if
/// unset) and reads the first stream of each to its end, confirms.
fn quinn_receiver() {
    let dir = PathBuf::from(std::env::var(CERT_DIR).expect("certificate directory"));
    let conns: usize =
        std::env::var(RECEIVER_CONNS).map_or(1, |v| v.parse().expect("a number of connections"));
    let cert = std::fs::read(dir.join("cert.der")).expect("certificate");
    let key = std::fs::read(dir.join("key.der")).expect("key");
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    rt.block_on(async {
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.into());
        let mut config =
            quinn::ServerConfig::with_single_cert(vec![cert.into()], key).expect("server TLS");
        config.transport_config(Arc::new(proto::quic::transport_config(4)));
        let socket = proto::quic::udp_socket(([127, 0, 0, 1], 0).into()).expect("UDP socket");
        let port = socket.local_addr().expect("address").port();
        let endpoint = proto::quic::endpoint(socket, Some(config)).expect("endpoint");
        println!("{port}");
        let _ = std::io::stdout().flush();
        let mut readers = Vec::new();
        for _ in 0..conns {
            let conn = endpoint
                .accept()
                .await
                .expect("a connection")
                .await
                .expect("handshake");
            readers.push(tokio::spawn(async move {
                let (mut send, mut recv) = conn.accept_bi().await.expect("stream");
                while recv
                    .read_chunk(usize::MAX, true)
                    .await
                    .expect("read")
                    .is_some()
                {}
                send.write_all(&[1]).await.expect("confirm");
                let _ = send.finish();
                // Until the sender closes the connection.
                let _ = tokio::time::timeout(Duration::from_secs(5), conn.closed()).await;
            }));
        }
        for r in readers {
            r.await.expect("a reader");
        }
    });
}
