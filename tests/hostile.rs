//! Hostile clients of a sut-node, on the wire, for the hostile tests and the
//! hostile bench: each attack runs on its own tasks until its [`Attack`] is
//! dropped.

use std::any::Any;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;
use proto::sut_node_client::SutNodeClient;
use proto::{to_node, Codec, ProbeRequest, SampleRequest, ToNode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;
use tokio_stream::StreamExt;

/// The largest probe reply a node answers.
const MAX_PROBE_REPLY: u64 = 256 << 20;

/// An attack under way: its tasks, and what it holds open.
#[derive(Default)]
pub struct Attack {
    tasks: JoinSet<()>,
    held: Vec<Box<dyn Any + Send>>,
}

impl Attack {
    /// Connections or streams the attack holds open.
    pub fn held(&self) -> usize {
        self.held.len()
    }
}

/// gRPC: `connections` connections, each asking the largest probe reply on
/// 8 streams (a connection's limit) and reading nothing past each reply's
/// first bytes, so that its stream windows stay closed. 2 GiB a connection,
/// were replies held.
pub async fn probe_replies_never_read(addr: SocketAddr, connections: usize) -> Attack {
    let mut attack = Attack::default();
    let probe = ProbeRequest {
        payload: Bytes::new(),
        reply_bytes: MAX_PROBE_REPLY,
    };
    let mut message = vec![0u8];
    message.extend_from_slice(&(probe.encoded_len() as u32).to_be_bytes());
    message.extend_from_slice(&probe.encode_to_vec());
    for _ in 0..connections {
        let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
            continue;
        };
        let handshake = h2::client::Builder::new()
            .initial_window_size(64 << 10)
            .initial_connection_window_size(1 << 20)
            .handshake::<_, Bytes>(tcp);
        let Ok((client, connection)) = handshake.await else {
            continue;
        };
        attack.tasks.spawn(async move {
            let _ = connection.await;
        });
        let Ok(mut client) = client.ready().await else {
            continue;
        };
        for _ in 0..8 {
            let request = http::Request::post(format!("http://{addr}{}", proto::PROBE_PATH))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(())
                .expect("a request");
            let Ok((response, mut body)) = client.send_request(request, false) else {
                break;
            };
            let _ = body.send_data(Bytes::from(message.clone()), true);
            let Ok(response) = response.await else { break };
            let mut reply = response.into_body();
            // The reply is under way.
            let _ = reply.data().await;
            attack.held.push(Box::new((body, reply)));
            match client.clone().ready().await {
                Ok(c) => client = c,
                Err(_) => break,
            }
        }
        attack.held.push(Box::new(client));
    }
    attack
}

/// QUIC: one connection asking the largest probe reply on `streams` streams
/// and reading nothing past each reply's first bytes (its stream windows are
/// 64 KiB).
pub async fn quic_probe_replies_never_read(addr: SocketAddr, pin: &str, streams: usize) -> Attack {
    let mut attack = Attack::default();
    let Some((endpoint, conn)) = quic_connect(addr, pin).await else {
        return attack;
    };
    let mut request = BytesMut::new();
    request.put_u8(proto::quic::stream_type::PROBE);
    let probe = ProbeRequest {
        payload: Bytes::new(),
        reply_bytes: MAX_PROBE_REPLY,
    };
    proto::framing::encode_message(&probe, &mut request).expect("a frame");
    for _ in 0..streams {
        let Ok((mut send, mut recv)) = conn.open_bi().await else {
            break;
        };
        if send.write_all(&request).await.is_err() || send.finish().is_err() {
            break;
        }
        let _ = recv.read_chunk(1 << 10, true).await;
        attack.held.push(Box::new((send, recv)));
    }
    attack.held.push(Box::new((endpoint, conn)));
    attack
}

async fn quic_connect(addr: SocketAddr, pin: &str) -> Option<(quinn::Endpoint, quinn::Connection)> {
    let tls = proto::tls::ClientTls {
        check: proto::tls::ServerCheck::Pinned(vec![pin.parse().ok()?]),
        identity: None,
    };
    let (crypto, _) = tls.client_config(proto::quic::ALPN).ok()?;
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(crypto).ok()?;
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").ok()?;
    let mut endpoint = proto::quic::endpoint(socket, None).ok()?;
    let mut transport = proto::quic::transport_config(0);
    transport.stream_receive_window((64u32 << 10).into());
    transport.receive_window((1u32 << 20).into());
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(Arc::new(transport));
    endpoint.set_default_client_config(config);
    let conn = endpoint.connect(addr, "localhost").ok()?.await.ok()?;
    Some((endpoint, conn))
}

/// A zstd frame of `len` zeros streamed, that is without its size in its
/// header (as the codecs never write it): a node charges it at its limit.
pub fn streamed_zstd(len: usize) -> Bytes {
    let mut out = Vec::new();
    let mut encoder = zstd::stream::Encoder::new(&mut out, 1).expect("an encoder");
    std::io::Write::write_all(&mut encoder, &vec![0u8; len]).expect("compressed");
    encoder.finish().expect("a frame");
    Bytes::from(out)
}

/// `connections` connections, each with an Infer stream that sends `bomb`
/// (a compressed input) as fast as the node takes it, and reads the answers:
/// each bomb within every limit of the node.
pub async fn decode_bombs(addr: SocketAddr, connections: usize, bomb: Bytes) -> Attack {
    let mut attack = Attack::default();
    for _ in 0..connections {
        let Ok(mut client) = SutNodeClient::connect(format!("http://{addr}")).await else {
            continue;
        };
        let bomb = bomb.clone();
        let samples = tokio_stream::iter(0u64..).map(move |id| ToNode {
            kind: Some(to_node::Kind::Sample(SampleRequest {
                id,
                payload: bomb.clone(),
                codec: Codec::Zstd as i32,
                ..Default::default()
            })),
        });
        let Ok(answers) = client.infer(samples).await else {
            continue;
        };
        let mut answers = answers.into_inner();
        attack
            .tasks
            .spawn(async move { while let Ok(Some(_)) = answers.message().await {} });
        attack.held.push(Box::new(client));
    }
    attack
}

/// Connections that start no session: `per_address` from each address of
/// `from` (loopback addresses all reach 127.0.0.1), each with HTTP/2's
/// preface sent, replaced a second after the node closes it.
pub async fn connections_without_sessions(
    addr: SocketAddr,
    from: &[IpAddr],
    per_address: usize,
) -> Attack {
    let mut attack = Attack::default();
    for &ip in from {
        for _ in 0..per_address {
            let (opened, open) = tokio::sync::oneshot::channel();
            attack.tasks.spawn(async move {
                let mut opened = Some(opened);
                loop {
                    if let Ok(mut tcp) = connect_from(ip, addr).await {
                        if tcp
                            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                            .await
                            .is_ok()
                        {
                            // Opened, as far as this client can tell.
                            opened.take().map(|o| o.send(()));
                            let mut buf = [0u8; 1024];
                            while matches!(tcp.read(&mut buf).await, Ok(n) if n > 0) {}
                        }
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            });
            let _ = open.await;
            attack.held.push(Box::new(ip));
        }
    }
    attack
}

async fn connect_from(ip: IpAddr, addr: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(ip, 0))?;
    socket.connect(addr).await
}

/// `connections` connections of `streams` Infer streams each, sending
/// samples of `sample_bytes` as fast as the node takes them and never
/// reading an answer: the node holds what its limits let such streams make
/// it hold, until the attack ends.
pub async fn slow_streams(
    addr: SocketAddr,
    connections: usize,
    streams: usize,
    sample_bytes: usize,
) -> Attack {
    let mut attack = Attack::default();
    let payload = Bytes::from(vec![7u8; sample_bytes]);
    for _ in 0..connections {
        let Ok(client) = SutNodeClient::connect(format!("http://{addr}")).await else {
            continue;
        };
        for _ in 0..streams {
            let payload = payload.clone();
            let samples = tokio_stream::iter(0u64..).map(move |id| ToNode {
                kind: Some(to_node::Kind::Sample(SampleRequest {
                    id,
                    payload: payload.clone(),
                    ..Default::default()
                })),
            });
            if let Ok(answers) = client.clone().infer(samples).await {
                attack.held.push(Box::new(answers));
            }
        }
        attack.held.push(Box::new(client));
    }
    attack
}

/// gRPC: `connections` connections of `streams` Infer streams each, every
/// stream sending the first `send` bytes of a message that announces
/// `announce` (within the node's message limit) and never the rest.
/// Without a budget for unfinished messages the node would hold
/// `connections * streams * send` bytes.
pub async fn unfinished_messages(
    addr: SocketAddr,
    connections: usize,
    streams: usize,
    announce: usize,
    send: usize,
) -> Attack {
    let mut attack = Attack::default();
    let mut message = BytesMut::with_capacity(5 + send);
    message.put_u8(0);
    message.put_u32(u32::try_from(announce).unwrap_or(u32::MAX));
    message.put_bytes(7, send.min(announce));
    let message = message.freeze();
    for _ in 0..connections {
        let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
            continue;
        };
        let Ok((client, connection)) = h2::client::handshake(tcp).await else {
            continue;
        };
        attack.tasks.spawn(async move {
            let _ = connection.await;
        });
        let Ok(mut client) = client.ready().await else {
            continue;
        };
        for _ in 0..streams {
            let request = http::Request::post(format!("http://{addr}{}", proto::INFER_PATH))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(())
                .expect("a request");
            let Ok((response, mut body)) = client.send_request(request, false) else {
                break;
            };
            // Queued here; sent as the node's windows let it.
            let _ = body.send_data(message.clone(), false);
            attack.held.push(Box::new((body, response)));
            match client.clone().ready().await {
                Ok(c) => client = c,
                Err(_) => break,
            }
        }
        attack.held.push(Box::new(client));
    }
    attack
}
