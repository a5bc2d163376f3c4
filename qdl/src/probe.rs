//! Network measurements of one sut-node before a run (`loadgen-node
//! preflight`): round trips of small messages, payload throughput each way
//! over the transport the run will use, the node's clock offset and its
//! self-description. Uses the `Describe` and `Probe` calls only: no session,
//! no inference.

use std::net::{IpAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use bytes::Bytes;
use proto::tls::ClientTls;
use proto::{DescribeReply, ProbeRequest};
use tokio::runtime::Runtime;

use crate::config::NodeAddr;
use crate::error::QdlError;
use crate::transport::Link;

/// The largest probe reply accepted: the node answers at most 256 MiB,
/// plus the message's own fields.
const MAX_PROBE_MESSAGE: usize = (256 << 20) + 4096;

/// Open connections to one node.
pub struct NodeProbe {
    rt: Runtime,
    links: Vec<Link>,
    node: String,
    remote: Option<IpAddr>,
}

/// Round-trip times of small probes, and the node's clock offset taken at
/// the fastest one (node clock minus ours at the midpoint).
#[derive(Clone, Debug)]
pub struct RoundTrips {
    /// Each probe's round trip, in the order sent.
    pub rtts: Vec<Duration>,
    /// Node clock minus ours, in nanoseconds.
    pub clock_offset_ns: i64,
}

/// What a throughput measurement moved.
#[derive(Clone, Copy, Debug)]
pub struct Throughput {
    /// Requests answered, over all connections.
    pub requests: u64,
    /// Payload bytes sent to the node.
    pub bytes_up: u64,
    /// Payload bytes the node sent back.
    pub bytes_down: u64,
    /// From the start until the last request ended.
    pub elapsed: Duration,
}

impl NodeProbe {
    /// Opens `connections` connections to the node at `addr`.
    pub fn connect(
        addr: &NodeAddr,
        tls: Option<&ClientTls>,
        connections: usize,
        timeout: Duration,
    ) -> Result<NodeProbe, QdlError> {
        let addr = addr.effective(tls.is_some());
        let node = format!("sut-node {addr}");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(QdlError::Runtime)?;
        let links = rt.block_on(async {
            let mut links = Vec::new();
            for _ in 0..connections.max(1) {
                let link = tokio::time::timeout(
                    timeout,
                    Link::connect(&addr, tls, timeout, MAX_PROBE_MESSAGE),
                )
                .await
                .map_err(|_| QdlError::Connect {
                    node: node.clone(),
                    reason: format!("no connection within {timeout:?}"),
                })?
                .map_err(|e| QdlError::Connect {
                    node: node.clone(),
                    reason: e.0,
                })?;
                links.push(link);
            }
            Ok::<_, QdlError>(links)
        })?;
        let remote = addr
            .authority()
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .map(|a| a.ip());
        Ok(NodeProbe {
            rt,
            links,
            node,
            remote,
        })
    }

    /// The node's IP address as this host reaches it.
    pub fn remote_ip(&self) -> Option<IpAddr> {
        self.remote
    }

    fn rpc_error(&self, step: &'static str, reason: String) -> QdlError {
        QdlError::Rpc {
            node: self.node.clone(),
            step,
            reason,
        }
    }

    /// The node's self-description: name, versions, backend, OS, kernel and
    /// network interfaces.
    pub fn describe(&self) -> Result<DescribeReply, QdlError> {
        self.rt
            .block_on(self.links[0].describe())
            .map_err(|e| self.rpc_error("Describe", e.0))
    }

    /// `count` small probes, one at a time on the first connection.
    pub fn round_trips(&self, count: usize) -> Result<RoundTrips, QdlError> {
        let link = &self.links[0];
        let mut rtts = Vec::with_capacity(count);
        let mut best: Option<(Duration, i64)> = None;
        for _ in 0..count.max(1) {
            let sent_ns = facts::host::unix_time_ns();
            let start = Instant::now();
            let reply = self
                .rt
                .block_on(link.probe(ProbeRequest {
                    payload: Bytes::new(),
                    reply_bytes: 0,
                }))
                .map_err(|e| self.rpc_error("Probe", e.0))?;
            let rtt = start.elapsed();
            let midpoint = sent_ns as i128 + rtt.as_nanos() as i128 / 2;
            let offset = (reply.unix_time_ns as i128 - midpoint) as i64;
            if best.is_none_or(|(b, _)| rtt < b) {
                best = Some((rtt, offset));
            }
            rtts.push(rtt);
        }
        Ok(RoundTrips {
            rtts,
            clock_offset_ns: best.map_or(0, |(_, o)| o),
        })
    }

    /// Sends `payload` and asks `reply_bytes` back, `in_flight` requests at
    /// a time on every connection, for `duration`.
    pub fn throughput(
        &self,
        payload: Bytes,
        reply_bytes: u64,
        duration: Duration,
        in_flight: usize,
    ) -> Result<Throughput, QdlError> {
        let start = Instant::now();
        let deadline = start + duration;
        let result = self.rt.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for link in &self.links {
                for _ in 0..in_flight.max(1) {
                    let link = link.clone();
                    let payload = payload.clone();
                    tasks.spawn(async move {
                        let mut done = 0u64;
                        let mut down = 0u64;
                        while Instant::now() < deadline {
                            let reply = link
                                .probe(ProbeRequest {
                                    payload: payload.clone(),
                                    reply_bytes,
                                })
                                .await?;
                            done += 1;
                            down += reply.payload.len() as u64;
                        }
                        Ok::<_, crate::error::TransportError>((done, down))
                    });
                }
            }
            let (mut requests, mut bytes_down) = (0, 0);
            while let Some(r) = tasks.join_next().await {
                let (n, d) = r.map_err(|e| crate::error::TransportError(e.to_string()))??;
                requests += n;
                bytes_down += d;
            }
            Ok::<_, crate::error::TransportError>((requests, bytes_down))
        });
        let (requests, bytes_down) = result.map_err(|e| self.rpc_error("Probe", e.0))?;
        Ok(Throughput {
            requests,
            bytes_up: requests * payload.len() as u64,
            bytes_down,
            elapsed: start.elapsed(),
        })
    }
}
