//! Node addresses and the QDL's configuration.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use proto::tls::ClientTls;
use proto::{Codec, RunMode};

use crate::error::QdlError;
use crate::policy::DispatchPolicy;

/// How the QDL talks to a node. Each transport lives in its own module under
/// `transport/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// gRPC over HTTP/2 on TCP (`grpc://host:port`, or plain `host:port`);
    /// over TLS when the configuration has TLS settings.
    Grpc,
    /// gRPC over HTTP/2 over TLS on TCP (`grpcs://host:port`).
    Grpcs,
    /// The same protocol over QUIC on UDP (`quic://host:port`), always TLS 1.3.
    Quic,
}

impl Transport {
    /// `grpc`, `grpcs` (gRPC over TLS) or `quic`: what a connection to a
    /// node uses, given whether the configuration has TLS settings.
    pub fn describe(self, tls_configured: bool) -> &'static str {
        match self {
            Transport::Grpc if !tls_configured => "grpc",
            Transport::Grpc | Transport::Grpcs => "grpcs",
            Transport::Quic => "quic",
        }
    }
}

/// Where a sut-node listens: `host:port`, `grpc://host:port`,
/// `grpcs://host:port`, `quic://host:port`, with IPv6 addresses in brackets
/// (`quic://[v6addr]:port`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NodeAddr {
    /// From the scheme; `grpc` without one.
    pub transport: Transport,
    /// A host name or IP address; IPv6 addresses without brackets.
    pub host: String,
    /// The node's listening port (UDP for QUIC, TCP otherwise).
    pub port: u16,
    /// The name its TLS certificate is checked against, when not `host`:
    /// the DNS name a `dns://` entry resolved to this address.
    pub tls_name: Option<String>,
}

impl NodeAddr {
    /// `host:port`, with brackets around an IPv6 address.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl NodeAddr {
    /// The address as written on a command line, scheme included
    /// (`quic://host:port`); it parses back to the same address.
    pub fn url(&self) -> String {
        let scheme = match self.transport {
            Transport::Grpc => "grpc",
            Transport::Grpcs => "grpcs",
            Transport::Quic => "quic",
        };
        format!("{scheme}://{}", self.authority())
    }

    /// This address with the transport a connection to it really uses:
    /// `Grpcs` for `grpc://` when the configuration has TLS settings.
    pub fn effective(&self, tls_configured: bool) -> NodeAddr {
        let transport = match self.transport {
            Transport::Grpc if tls_configured => Transport::Grpcs,
            t => t,
        };
        NodeAddr {
            transport,
            ..self.clone()
        }
    }
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.authority())
    }
}

impl FromStr for NodeAddr {
    type Err = QdlError;

    fn from_str(input: &str) -> Result<Self, QdlError> {
        let bad = |reason: &str| QdlError::Address {
            input: input.to_string(),
            reason: reason.to_string(),
        };
        let (transport, rest) = match input.split_once("://") {
            None => (Transport::Grpc, input),
            Some((scheme, rest)) => match scheme.to_ascii_lowercase().as_str() {
                "grpc" => (Transport::Grpc, rest),
                "grpcs" => (Transport::Grpcs, rest),
                "quic" => (Transport::Quic, rest),
                _ => {
                    return Err(bad(&format!(
                        "unknown scheme '{scheme}://' (expected host:port, grpc://, grpcs:// \
                         or quic://host:port, or dns://NAME:PORT for every address of a name)"
                    )))
                }
            },
        };
        let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| bad("an IPv6 address needs a closing ']'"))?;
            let port = after
                .strip_prefix(':')
                .ok_or_else(|| bad("expected host:port"))?;
            (host, port)
        } else {
            let (host, port) = rest
                .rsplit_once(':')
                .ok_or_else(|| bad("expected host:port"))?;
            if host.contains(':') {
                return Err(bad("write an IPv6 address in brackets: [addr]:port"));
            }
            (host, port)
        };
        if host.is_empty() {
            return Err(bad("the host is empty"));
        }
        if host.contains(['/', '?', '#', '@']) {
            return Err(bad("expected only host:port (no path, query or user)"));
        }
        let port: u16 = port
            .parse()
            .map_err(|_| bad(&format!("'{port}' is not a port number")))?;
        if port == 0 {
            return Err(bad("port 0 cannot be connected to"));
        }
        Ok(NodeAddr {
            transport,
            host: host.to_string(),
            port,
            tls_name: None,
        })
    }
}

/// Default bound on one decoded answer: 1 GiB.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 1 << 30;

/// Default bound on the samples one connection has under way (see
/// [`QdlConfig::max_in_flight`]).
pub const DEFAULT_MAX_IN_FLIGHT: u64 = 16 << 10;

/// Everything `Qdl::connect` needs besides the sample data.
#[derive(Clone, Debug)]
pub struct QdlConfig {
    /// The sut-nodes, in the order their names are reported.
    pub nodes: Vec<NodeAddr>,
    /// What each `dns://` entry of the node list resolved to, as
    /// `ENTRY -> ADDR ADDR...` ([`NodeList::resolved`](crate::NodeList)),
    /// for the run's network facts.
    pub resolved: Vec<String>,
    /// Which connection each sample goes to.
    pub policy: DispatchPolicy,
    /// Independent connections (each with its own Infer stream) per node;
    /// `None`: sized to the host ([`Sizing`]).
    pub connections_per_node: Option<usize>,
    /// Benchmark model, checked by each node at session start.
    pub model: String,
    /// The LoadGen scenario (`Offline`, `Server`...), checked likewise.
    pub scenario: String,
    /// The codec of the payloads the `SampleData` hands out.
    pub input_codec: Codec,
    /// A node with samples outstanding that sends nothing (no answer, no
    /// heartbeat) for this long aborts the run.
    pub node_timeout: Duration,
    /// A node with samples outstanding that sends only heartbeats or first
    /// tokens (no answer or error) for this long aborts the run: its
    /// backend is hung. `None`: `node_timeout`. No run waits for ever on a
    /// node that only sends heartbeats.
    pub progress_timeout: Option<Duration>,
    /// Bound on each step of opening a connection, and on the Name RPC.
    pub connect_timeout: Duration,
    /// Largest answer (or first token) accepted, once decoded: a compressed
    /// answer declaring or producing more fails the run without being
    /// decoded.
    pub max_answer_bytes: usize,
    /// How node certificates are checked, and the client certificate of
    /// mutual TLS. QUIC and `grpcs://` nodes need it; with it, `grpc://`
    /// nodes use TLS too.
    pub tls: Option<ClientTls>,
    /// Threads of the QDL's network runtime (1 to [`MAX_QDL_THREADS`]);
    /// `None`: sized to the host ([`Sizing`]).
    pub qdl_threads: Option<usize>,
    /// Samples one connection may have sent and not yet had answered; the
    /// rest wait in its queue. Bounds the work under way when inputs are
    /// small, where the node's flow-control windows (sized in bytes) would
    /// not.
    pub max_in_flight: u64,
    /// The session is judged on token latencies (mlperf.conf's
    /// `use_token_latencies`): nodes whose answers carry no token counts
    /// refuse it.
    pub token_latencies: bool,
    /// The run's test mode, told to every node in its session: backends
    /// whose answers differ between accuracy and performance runs (DLRMv3's)
    /// answer in the layout of the mode. `Unspecified`: the node answers as
    /// in a performance run.
    pub mode: RunMode,
    /// Why the benchmark's answers may not travel compressed, if the rules
    /// say so: a node with an output codec is then refused at connection.
    pub answer_compression_refused: Option<String>,
}

/// The session mode of a LoadGen test mode, by the LoadGen's name
/// (`AccuracyOnly`, `PerformanceOnly`, `SubmissionRun`,
/// `FindPeakPerformance`, as `TestMode`'s values are called).
pub fn run_mode(loadgen_name: &str) -> Option<RunMode> {
    match loadgen_name {
        "AccuracyOnly" => Some(RunMode::AccuracyOnly),
        "PerformanceOnly" => Some(RunMode::PerformanceOnly),
        "SubmissionRun" => Some(RunMode::Submission),
        "FindPeakPerformance" => Some(RunMode::FindPeakPerformance),
        _ => None,
    }
}

/// The most network threads a QDL starts: far more than any host's cores,
/// and few enough that a mistyped count is refused rather than starting
/// threads until the process runs out of them.
pub const MAX_QDL_THREADS: usize = 1024;

/// Most connections per node the sizing opens: one node seldom needs more
/// streams than this to fill its link, and each costs the node a session.
pub const MAX_SIZED_CONNECTIONS_PER_NODE: usize = 16;

/// The QDL's network threads and connections per node, and whether they
/// were sized to the host or given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizing {
    /// Threads of the QDL's network runtime.
    pub qdl_threads: usize,
    /// Connections (each with its own Infer stream) per node.
    pub connections_per_node: usize,
    /// The cores and nodes the threads were sized to; `None`: given.
    pub threads_sized_to: Option<(usize, usize)>,
    /// The cores and nodes the connections were sized to; `None`: given.
    pub connections_sized_to: Option<(usize, usize)>,
}

impl Sizing {
    /// Sizes what is not `given` to a host of `cores` cores driving `nodes`
    /// nodes. One core is left to the LoadGen's issuing thread and the
    /// network gets the rest, but at least two threads where there are two
    /// cores: with one, a connection's write of a large sample held up the
    /// other connections and every answer (p99 added latency of ResNet50
    /// inputs at half the path's throughput 9 to 10 ms with one thread, 2.5
    /// to 7 ms with two, on 2 cores; see docs/performance.md), and the
    /// issuing thread sleeps between queries. At least as many connections
    /// as threads (a connection's work runs on one thread at a time), 2 to
    /// [`MAX_SIZED_CONNECTIONS_PER_NODE`] per node, and no more threads than
    /// connections.
    pub fn for_host(
        cores: usize,
        nodes: usize,
        given_threads: Option<usize>,
        given_connections: Option<usize>,
    ) -> Self {
        let nodes = nodes.max(1);
        let spare = cores.saturating_sub(1).max(1);
        let connections = given_connections.unwrap_or_else(|| {
            given_threads
                .unwrap_or(spare)
                .div_ceil(nodes)
                .clamp(2, MAX_SIZED_CONNECTIONS_PER_NODE)
        });
        let threads =
            given_threads.unwrap_or_else(|| spare.max(cores.min(2)).min(nodes * connections));
        Self {
            qdl_threads: threads,
            connections_per_node: connections,
            threads_sized_to: given_threads.is_none().then_some((cores, nodes)),
            connections_sized_to: given_connections.is_none().then_some((cores, nodes)),
        }
    }

    /// [`Sizing::for_host`] for this host's cores.
    pub fn here(
        nodes: usize,
        given_threads: Option<usize>,
        given_connections: Option<usize>,
    ) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::for_host(cores, nodes, given_threads, given_connections)
    }
}

impl Default for QdlConfig {
    fn default() -> Self {
        Self {
            nodes: Vec::new(),
            resolved: Vec::new(),
            policy: DispatchPolicy::default(),
            connections_per_node: None,
            model: String::new(),
            scenario: String::new(),
            input_codec: Codec::None,
            node_timeout: Duration::from_secs(10),
            progress_timeout: Some(Duration::from_secs(120)),
            connect_timeout: Duration::from_secs(10),
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
            tls: None,
            qdl_threads: None,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            token_latencies: false,
            mode: RunMode::Unspecified,
            answer_compression_refused: None,
        }
    }
}

impl QdlConfig {
    /// A configuration with the defaults for everything else.
    pub fn new(
        nodes: Vec<NodeAddr>,
        model: impl Into<String>,
        scenario: impl Into<String>,
    ) -> Self {
        Self {
            nodes,
            model: model.into(),
            scenario: scenario.into(),
            ..Self::default()
        }
    }

    /// The threads and connections per node this configuration runs with.
    pub fn sizing(&self) -> Sizing {
        Sizing::here(
            self.nodes.len(),
            self.qdl_threads,
            self.connections_per_node,
        )
    }

    pub(crate) fn validate(&self) -> Result<(), QdlError> {
        let bad = |s: String| Err(QdlError::Config(s));
        if self.nodes.is_empty() {
            return bad("no sut-node given".into());
        }
        if self.connections_per_node == Some(0) {
            return bad("connections_per_node must be at least 1".into());
        }
        if let Some(threads) = self
            .qdl_threads
            .filter(|t| !(1..=MAX_QDL_THREADS).contains(t))
        {
            return bad(format!(
                "qdl_threads must be 1 to {MAX_QDL_THREADS}, not {threads}"
            ));
        }
        if self.node_timeout.is_zero()
            || self.connect_timeout.is_zero()
            || self.progress_timeout.is_some_and(|p| p.is_zero())
        {
            return bad(
                "node_timeout, connect_timeout and progress_timeout must be positive".into(),
            );
        }
        if self.max_answer_bytes == 0 {
            return bad("max_answer_bytes must be at least 1".into());
        }
        let mut seen = std::collections::HashSet::new();
        for n in &self.nodes {
            if !seen.insert(n) {
                return bad(format!("sut-node {n} is listed twice"));
            }
            if self.tls.is_none() && n.transport != Transport::Grpc {
                return bad(format!(
                    "sut-node {n} is reached over TLS ({}), which needs a way to check its \
                     certificate: its SHA-256 fingerprint (loadgen-node --tls-pin, printed by the \
                     node at start), a CA (--tls-ca FILE), or --tls-insecure (development only)",
                    n.transport.describe(true)
                ));
            }
        }
        self.policy.check(self.nodes.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_say_no_mode_unless_given_and_modes_go_by_the_loadgens_names() {
        assert_eq!(QdlConfig::default().mode, RunMode::Unspecified);
        for (name, mode) in [
            ("AccuracyOnly", RunMode::AccuracyOnly),
            ("PerformanceOnly", RunMode::PerformanceOnly),
            ("SubmissionRun", RunMode::Submission),
            ("FindPeakPerformance", RunMode::FindPeakPerformance),
        ] {
            assert_eq!(run_mode(name), Some(mode), "{name}");
        }
        assert_eq!(run_mode("accuracy"), None);
    }

    fn parse(s: &str) -> Result<NodeAddr, String> {
        s.parse::<NodeAddr>().map_err(|e| e.to_string())
    }

    #[test]
    fn parses_host_port_with_or_without_scheme() {
        let a = parse("127.0.0.1:50051").unwrap();
        assert_eq!(
            (a.transport, a.host.as_str(), a.port),
            (Transport::Grpc, "127.0.0.1", 50051)
        );
        let b = parse("grpc://node-3.example:7000").unwrap();
        assert_eq!((b.host.as_str(), b.port), ("node-3.example", 7000));
        let c = parse("GRPC://[::1]:9").unwrap();
        assert_eq!((c.host.as_str(), c.port), ("::1", 9));
        assert_eq!(c.to_string(), "[::1]:9");
        assert_eq!(b.to_string(), "node-3.example:7000");
        for a in [&a, &b, &c] {
            assert_eq!(&parse(&a.url()).unwrap(), a);
        }
    }

    #[test]
    fn parses_every_scheme() {
        let q = parse("quic://node-3:7000").unwrap();
        assert_eq!(
            (q.transport, q.host.as_str(), q.port),
            (Transport::Quic, "node-3", 7000)
        );
        let q6 = parse("QUIC://[::1]:9").unwrap();
        assert_eq!(
            (q6.transport, q6.to_string()),
            (Transport::Quic, "[::1]:9".to_string())
        );
        assert_eq!(parse("grpcs://h:1").unwrap().transport, Transport::Grpcs);
        assert_eq!(Transport::Grpc.describe(false), "grpc");
        assert_eq!(Transport::Grpc.describe(true), "grpcs");
        let g = parse("h:1").unwrap();
        assert_eq!(g.effective(true).transport, Transport::Grpcs);
        assert_eq!(g.effective(false), g);
        assert_eq!(q.effective(true), q);
        assert_eq!(Transport::Quic.describe(false), "quic");
    }

    #[test]
    fn rejects_bad_addresses_with_reasons() {
        for (input, why) in [
            ("http://h:1", "unknown scheme"),
            ("h", "host:port"),
            (":80", "host is empty"),
            ("h:http", "not a port"),
            ("h:70000", "not a port"),
            ("h:0", "port 0"),
            ("::1:80", "brackets"),
            ("[::1:80", "closing"),
            ("grpc://h/x:1", "no path"),
        ] {
            let e = parse(input).unwrap_err();
            assert!(e.contains(why) && e.contains(input), "{input}: {e}");
        }
    }

    #[test]
    fn sizing_leaves_a_core_to_the_loadgen_and_spreads_the_rest() {
        let sized = |cores, nodes| {
            let s = Sizing::for_host(cores, nodes, None, None);
            (s.qdl_threads, s.connections_per_node)
        };
        // Two threads wherever there are two cores.
        assert_eq!(sized(1, 1), (1, 2));
        assert_eq!(sized(2, 1), (2, 2));
        assert_eq!(sized(2, 8), (2, 2));
        assert_eq!(sized(3, 1), (2, 2));
        assert_eq!(sized(4, 1), (3, 3));
        // A connection per network thread, spread over the nodes.
        assert_eq!(sized(16, 1), (15, 15));
        assert_eq!(sized(16, 4), (15, 4));
        assert_eq!(sized(16, 64), (15, 2));
        // One node gets at most 16 connections, and threads follow them.
        assert_eq!(sized(64, 1), (16, 16));
        assert_eq!(sized(64, 8), (63, 8));
        let s = Sizing::for_host(16, 4, None, None);
        assert_eq!(s.threads_sized_to, Some((16, 4)));
        assert_eq!(s.connections_sized_to, Some((16, 4)));
    }

    #[test]
    fn sizing_keeps_what_is_given() {
        // Given threads get enough connections to keep them busy.
        let s = Sizing::for_host(2, 1, Some(8), None);
        assert_eq!((s.qdl_threads, s.connections_per_node), (8, 8));
        assert_eq!(
            (s.threads_sized_to, s.connections_sized_to),
            (None, Some((2, 1)))
        );
        // Given connections bound the threads.
        let s = Sizing::for_host(16, 2, None, Some(1));
        assert_eq!((s.qdl_threads, s.connections_per_node), (2, 1));
        let s = Sizing::for_host(16, 2, Some(3), Some(5));
        assert_eq!((s.qdl_threads, s.connections_per_node), (3, 5));
        assert_eq!((s.threads_sized_to, s.connections_sized_to), (None, None));
    }

    #[test]
    fn validation_catches_unusable_configs() {
        let n = |s: &str| s.parse::<NodeAddr>().unwrap();
        let ok = QdlConfig::new(vec![n("a:1"), n("b:1")], "m", "Offline");
        assert!(ok.validate().is_ok());
        assert_eq!(ok.connections_per_node, None);
        assert_eq!(ok.policy, DispatchPolicy::LeastOutstanding);
        let twice = QdlConfig::new(vec![n("a:1"), n("grpc://a:1")], "m", "Offline");
        assert!(twice
            .validate()
            .unwrap_err()
            .to_string()
            .contains("a:1 is listed twice"));
        let none = QdlConfig::default();
        assert!(none.validate().is_err());
        let weights = QdlConfig {
            policy: DispatchPolicy::Weighted(vec![1]),
            ..ok.clone()
        };
        assert!(weights
            .validate()
            .unwrap_err()
            .to_string()
            .contains("2 nodes"));
        let zero = QdlConfig {
            connections_per_node: Some(0),
            ..ok.clone()
        };
        assert!(zero.validate().is_err());
        for threads in [0, MAX_QDL_THREADS + 1] {
            let e = QdlConfig {
                qdl_threads: Some(threads),
                ..ok.clone()
            }
            .validate()
            .unwrap_err()
            .to_string();
            assert!(
                e.contains(&format!("qdl_threads must be 1 to 1024, not {threads}")),
                "{e}"
            );
        }
        // QUIC and grpcs:// need a way to check the node's certificate.
        let quic = QdlConfig::new(vec![n("a:1"), n("quic://b:1")], "m", "Offline");
        let e = quic.validate().unwrap_err().to_string();
        assert!(e.contains("b:1") && e.contains("--tls-pin"), "{e}");
        let insecure = QdlConfig {
            tls: Some(ClientTls {
                check: proto::tls::ServerCheck::Insecure,
                identity: None,
            }),
            ..quic
        };
        assert!(insecure.validate().is_ok());
    }
}
