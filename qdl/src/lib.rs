//! The Query Dispatch Library (QDL): one system under test for the LoadGen
//! that forwards every sample over the network to one or more sut-nodes
//! (MLPerf Inference, Network division).
//!
//! The QDL does no pre-processing, batching, padding, caching or
//! post-processing: each sample's bytes, as the QSL loaded them, are sent to a
//! node the moment the LoadGen issues it, and each answer is handed to the
//! LoadGen as it arrives (decompressed if the node compressed it, the one
//! step the rules allow in the timed path).
//!
//! Data path: `issue_query` (LoadGen's issuing thread) looks up the sample's
//! bytes, picks a connection by the [`DispatchPolicy`] and pushes one
//! `ToNode` onto that connection's unbounded queue: no lock, no task spawn,
//! no copy. The transport streams the queue to the node; each connection's
//! receive task turns every `FromNode` into one `query_samples_complete` call.
//! A watchdog per connection aborts the run when a node with outstanding
//! samples goes silent. Every failure aborts the run through the Completer
//! with a reason that names the node, so a run never hangs.
//!
//! The QDL is the engine's SUT; the QSL hands it the loaded samples through
//! [`SampleData`]:
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use bytes::Bytes;
//! use loadgen_engine::null_sut::SizedQsl;
//! use loadgen_engine::runner::{start_test, LogSettings};
//! use loadgen_engine::{QuerySampleIndex, Scenario, TestSettings};
//! use qdl::{Qdl, QdlConfig, SampleData, StoredSample};
//!
//! /// Every sample is 64 bytes of its index.
//! struct Data;
//!
//! impl SampleData for Data {
//!     fn sample(&self, index: QuerySampleIndex) -> Option<StoredSample> {
//!         Some(StoredSample::raw(Bytes::from(vec![index as u8; 64])))
//!     }
//! }
//!
//! let config = QdlConfig {
//!     nodes: vec!["127.0.0.1:50051".parse()?, "quic://127.0.0.1:50052".parse()?],
//!     model: "resnet50".into(),
//!     scenario: "Offline".into(),
//!     ..QdlConfig::default()
//! };
//! let qdl = Qdl::connect(config, Arc::new(Data))?;
//! let settings = TestSettings {
//!     scenario: Scenario::Offline,
//!     ..TestSettings::default()
//! };
//! let outcome = start_test(&qdl, &SizedQsl::new(1024, 1024), &settings, &LogSettings::default(), None)?;
//! println!("{}", outcome.performance.map(|p| p.summary).unwrap_or_default());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod breakdown;
mod config;
mod conn;
mod error;
mod foreign;
mod policy;
pub mod probe;
mod report;
pub mod trace;
mod transport;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use compression::wire::wire_name;
use loadgen_engine::sut::SutError;
use loadgen_engine::{Completer, QuerySample, QuerySampleIndex, SystemUnderTest};
use proto::tls::ClientTls;
use proto::{to_node, SampleRequest, SessionReply, SessionRequest, ToNode, PROTOCOL_VERSION};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

pub use config::{
    default_io_threads, NodeAddr, QdlConfig, Transport, DEFAULT_MAX_ANSWER_BYTES,
    DEFAULT_MAX_IN_FLIGHT,
};
pub use conn::{decode_output, Counters};
pub use error::QdlError;
pub use foreign::{ForeignLoadGen, ForeignSut};
pub use policy::DispatchPolicy;
pub use proto::Codec;

use conn::{Conn, Receiver, RunState};
use transport::{InFlight, Inbound, Link, Outgoing, Queued};

/// How long dropping a `Qdl` waits for the nodes to end their streams after
/// it ended its own.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The QSL's loaded samples, as the QDL reads them.
pub trait SampleData: Send + Sync {
    /// Sample `index` as loaded (and possibly compressed, before the run) by
    /// the QSL; `None` if it is not loaded. Called on the issuing thread for
    /// every sample: it must be cheap (`Bytes` clones share the data).
    fn sample(&self, index: QuerySampleIndex) -> Option<StoredSample>;
}

/// One loaded sample: the bytes the QDL sends as they are, their codec, and
/// the sample's size before compression (for the report's ratio).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSample {
    pub payload: Bytes,
    pub codec: Codec,
    pub raw_len: usize,
}

impl StoredSample {
    /// An uncompressed sample.
    pub fn raw(payload: Bytes) -> Self {
        Self {
            raw_len: payload.len(),
            payload,
            codec: Codec::None,
        }
    }
}

/// Traffic of one connection, for the run's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionStats {
    pub node: NodeAddr,
    /// The name the node gave in its session.
    pub node_name: String,
    /// Which of the node's connections (0-based).
    pub connection: usize,
    pub counters: Counters,
}

/// Per-connection traffic since `connect`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QdlStats {
    pub connections: Vec<ConnectionStats>,
}

impl QdlStats {
    /// The sum over all connections.
    pub fn total(&self) -> Counters {
        let mut t = Counters::default();
        for c in &self.connections {
            t += c.counters;
        }
        t
    }
}

/// The QDL's counters and timings, apart from its connections.
#[derive(Clone)]
pub struct QdlView {
    /// (address, name) of each node.
    nodes: Vec<(NodeAddr, String)>,
    /// Connection `c` belongs to node `c / per_node`.
    conns: Vec<Arc<Conn>>,
    per_node: usize,
}

impl QdlView {
    /// Traffic per connection so far.
    pub fn stats(&self) -> QdlStats {
        QdlStats {
            connections: self
                .conns
                .iter()
                .enumerate()
                .map(|(c, conn)| {
                    let (addr, name) = &self.nodes[c / self.per_node];
                    ConnectionStats {
                        node: addr.clone(),
                        node_name: name.clone(),
                        connection: c % self.per_node,
                        counters: conn.counters(),
                    }
                })
                .collect(),
        }
    }

    /// Where the answers' time went so far: per node and over the run.
    pub fn breakdown(&self) -> breakdown::Breakdown {
        let mut b = breakdown::Breakdown::default();
        for (n, (addr, name)) in self.nodes.iter().enumerate() {
            let mut t = breakdown::Timings::default();
            for conn in &self.conns[n * self.per_node..(n + 1) * self.per_node] {
                t.add(conn.timings());
            }
            b.overall.merge(&t);
            b.nodes.push((name.clone(), addr.to_string(), t));
        }
        b
    }
}

struct Node {
    addr: NodeAddr,
    name: String,
    /// The codec of its answers, from its session.
    output_codec: Codec,
    /// Its first connection, which also carries the Name RPC.
    link: Link,
}

/// The network SUT. Serves one LoadGen test (one `start_test`); connect a new
/// one for the next.
pub struct Qdl {
    nodes: Vec<Node>,
    /// Connection `c` belongs to node `c / per_node`.
    conns: Vec<Arc<Conn>>,
    per_node: usize,
    queues: Vec<mpsc::UnboundedSender<Queued>>,
    dispatcher: policy::Dispatcher,
    data: Arc<dyn SampleData>,
    input_codec: Codec,
    connect_timeout: Duration,
    run: Arc<RunState>,
    /// When the first sample was issued: the start of the payload rates.
    first_issue: OnceLock<Instant>,
    tasks: Vec<JoinHandle<()>>,
    /// Spans of sampled samples, once `trace_samples` is called.
    trace: Arc<OnceLock<trace::SampleTrace>>,
    runtime: IoRuntime,
}

/// The QDL's own runtime. Shut down without blocking, so that a `Qdl` (or a
/// failed `connect`) can be dropped anywhere, async code included.
struct IoRuntime(Option<Runtime>);

impl IoRuntime {
    fn get(&self) -> &Runtime {
        // Only `drop` takes it out.
        self.0
            .as_ref()
            .expect("the runtime lives as long as the Qdl")
    }
}

impl Drop for IoRuntime {
    fn drop(&mut self) {
        if let Some(r) = self.0.take() {
            r.shutdown_background();
        }
    }
}

/// One connection, its session accepted and its data stream open.
struct Opened {
    link: Link,
    session: SessionReply,
    queue: mpsc::UnboundedSender<Queued>,
    inbound: Inbound,
    window: Arc<InFlight>,
}

fn label(addr: &NodeAddr, name: Option<&str>) -> String {
    match name {
        Some(n) => format!("sut-node {addr} (name {n})"),
        None => format!("sut-node {addr}"),
    }
}

impl Qdl {
    /// [`Qdl::connect`], retried while a node answers that it is not ready
    /// (its backend still loading), for up to `wait`; `waiting` is told which
    /// node is waited for, before each retry. Other failures end it at once.
    pub fn connect_when_ready(
        config: QdlConfig,
        data: Arc<dyn SampleData>,
        wait: Duration,
        mut waiting: impl FnMut(&str, Duration),
    ) -> Result<Qdl, QdlError> {
        let started = Instant::now();
        loop {
            match Qdl::connect(config.clone(), Arc::clone(&data)) {
                Err(QdlError::NotReady { node }) if started.elapsed() < wait => {
                    waiting(&node, started.elapsed());
                    std::thread::sleep(READY_POLL.min(wait.saturating_sub(started.elapsed())));
                }
                other => return other,
            }
        }
    }

    /// Opens `connections_per_node` connections to every node, starts a
    /// session on each and opens its data stream. Fails on the first node
    /// that cannot be reached, refuses the session, is not ready, speaks
    /// another protocol version or cannot exchange the configured codecs.
    pub fn connect(config: QdlConfig, data: Arc<dyn SampleData>) -> Result<Qdl, QdlError> {
        config.validate()?;
        let io = IoRuntime(Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(config.io_threads.max(1))
                .thread_name("qdl-io")
                .enable_all()
                .build()
                .map_err(QdlError::Runtime)?,
        ));
        let runtime = io.get();
        let per_node = config.connections_per_node;
        let request = SessionRequest {
            protocol_version: PROTOCOL_VERSION,
            model: config.model.clone(),
            scenario: config.scenario.clone(),
            input_codec: config.input_codec as i32,
        };
        let opened = block_on(
            runtime,
            open_all(
                config.nodes.clone(),
                per_node,
                request,
                config.input_codec,
                config.connect_timeout,
                config.tls.clone().map(Arc::new),
                StreamLimits {
                    max_message: max_message(config.max_answer_bytes),
                    max_in_flight: config.max_in_flight,
                },
            ),
        )
        .ok_or_else(|| QdlError::Config("the QDL's runtime stopped while connecting".into()))??;

        let names = node_names(&config.nodes, per_node, &opened)?;
        let run = Arc::new(RunState::new());
        let trace = Arc::new(OnceLock::new());
        let mut nodes = Vec::with_capacity(config.nodes.len());
        let mut conns = Vec::with_capacity(opened.len());
        let mut queues = Vec::with_capacity(opened.len());
        let mut tasks = Vec::with_capacity(opened.len());
        for (c, o) in opened.into_iter().enumerate() {
            let n = c / per_node;
            let addr = &config.nodes[n];
            if c % per_node == 0 {
                tracing::info!(
                    "connected to {}: backend {:?}, max batch size {}, {} connection(s)",
                    label(addr, Some(&names[n])),
                    o.session.backend,
                    o.session.max_batch_size,
                    per_node
                );
                nodes.push(Node {
                    // The transport really used: grpc:// with TLS is grpcs.
                    addr: addr.effective(config.tls.is_some()),
                    name: names[n].clone(),
                    // Checked by `check_session`: a codec this QDL decodes.
                    output_codec: Codec::try_from(o.session.output_codec).unwrap_or(Codec::None),
                    link: o.link.clone(),
                });
            }
            let conn = Arc::new(Conn::new(label(addr, Some(&names[n]))));
            let receiver = Receiver::new(
                conn.clone(),
                run.clone(),
                o.inbound,
                o.window,
                config.max_answer_bytes,
                trace.clone(),
            );
            tasks.push(runtime.spawn(receiver.run()));
            runtime.spawn(conn::watchdog(
                conn.clone(),
                run.clone(),
                conn::Deadlines {
                    stall: config.stall_timeout,
                    progress: config.progress_timeout,
                },
            ));
            conns.push(conn);
            queues.push(o.queue);
        }
        Ok(Qdl {
            nodes,
            conns,
            per_node,
            queues,
            dispatcher: policy::Dispatcher::new(&config.policy, config.nodes.len(), per_node),
            data,
            input_codec: config.input_codec,
            connect_timeout: config.connect_timeout,
            run,
            first_issue: OnceLock::new(),
            tasks,
            trace,
            runtime: io,
        })
    }

    /// Traces about `ratio` (0 to 1) of the samples from now on (see
    /// [`trace::SampleTrace`]), with the global tracer provider's tracer.
    /// Returns the tracing, for setting the parent of the samples' spans;
    /// the first call's ratio stays.
    pub fn trace_samples(&self, ratio: f64) -> &trace::SampleTrace {
        self.trace.get_or_init(|| trace::SampleTrace::new(ratio))
    }

    /// The nodes' names, as their sessions reported them, in node order.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// Traffic per connection so far.
    pub fn stats(&self) -> QdlStats {
        self.view().stats()
    }

    /// Where the answers' time went so far: per node and over the run.
    pub fn breakdown(&self) -> breakdown::Breakdown {
        self.view().breakdown()
    }

    /// The counters and timings, readable from anywhere at any time (metrics
    /// scrapes) without holding the QDL.
    pub fn view(&self) -> QdlView {
        QdlView {
            nodes: self
                .nodes
                .iter()
                .map(|n| (n.addr.clone(), n.name.clone()))
                .collect(),
            conns: self.conns.clone(),
            per_node: self.per_node,
        }
    }

    fn fail_sample(&self, completer: &Completer, reason: String) {
        self.run.fail(reason.clone());
        // In case the run had already failed for another reason, or is
        // shutting down: this query must not wait for an answer either.
        completer.abort(reason);
    }
}

impl SystemUnderTest for Qdl {
    /// Asks every node for its name (a round trip each, concurrently) and
    /// returns `Network SUT (N nodes: a, b, ...)`. Node names must be unique.
    fn name(&self) -> Result<String, SutError> {
        let runtime = self.runtime.get();
        let timeout = self.connect_timeout;
        let calls: Vec<(usize, Link)> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (i, n.link.clone()))
            .collect();
        let answers = block_on(runtime, async move {
            let mut set = JoinSet::new();
            for (i, link) in calls {
                set.spawn(async move {
                    let r = match tokio::time::timeout(timeout, link.name()).await {
                        Ok(r) => r.map_err(|e| e.0),
                        Err(_) => Err(format!("no answer within {timeout:?}")),
                    };
                    (i, r)
                });
            }
            let mut out = BTreeMap::new();
            while let Some(done) = set.join_next().await {
                if let Ok((i, r)) = done {
                    out.insert(i, r);
                }
            }
            out
        })
        .ok_or_else(|| SutError("the QDL's runtime stopped".into()))?;

        let mut names = Vec::with_capacity(self.nodes.len());
        for (i, node) in self.nodes.iter().enumerate() {
            let fail = |reason: String| {
                SutError(
                    QdlError::Rpc {
                        node: label(&node.addr, Some(&node.name)),
                        step: "Name",
                        reason,
                    }
                    .to_string(),
                )
            };
            match answers.get(&i) {
                Some(Ok(name)) => match check_node_name(name) {
                    Ok(()) => names.push(name.clone()),
                    Err(reason) => return Err(fail(reason)),
                },
                Some(Err(e)) => return Err(fail(e.clone())),
                None => return Err(fail("the call did not complete".into())),
            }
        }
        let addrs: Vec<&NodeAddr> = self.nodes.iter().map(|n| &n.addr).collect();
        check_unique(&names, &addrs).map_err(|e| SutError(e.to_string()))?;
        let n = names.len();
        Ok(format!(
            "Network SUT ({n} node{}: {})",
            if n == 1 { "" } else { "s" },
            names.join(", ")
        ))
    }

    fn issue_query(&self, samples: &[QuerySample], completer: &Completer) {
        if samples.is_empty() {
            return;
        }
        if !self.run.attach(completer) {
            return;
        }
        // One clock read per call: its samples are all sent now.
        let sent = Instant::now();
        self.first_issue.get_or_init(|| sent);
        for s in samples {
            let Some(StoredSample {
                payload,
                codec,
                raw_len,
            }) = self.data.sample(s.index)
            else {
                return self.fail_sample(
                    completer,
                    format!(
                        "the QSL has no loaded data for sample index {} (response id {})",
                        s.index, s.id
                    ),
                );
            };
            if codec != self.input_codec && codec != Codec::None {
                return self.fail_sample(
                    completer,
                    format!(
                        "sample index {} is encoded as {}, but the sessions announced {}",
                        s.index,
                        codec.as_str_name(),
                        self.input_codec.as_str_name()
                    ),
                );
            }
            let c = self.dispatcher.pick(|c| self.conns[c].outstanding());
            let conn = &self.conns[c];
            conn.count_sent(payload.len(), raw_len);
            let traceparent = match self.trace.get() {
                Some(t) if t.sampled(s.id) => t.begin(s.id, &conn.label, payload.len()),
                _ => String::new(),
            };
            let msg = ToNode {
                kind: Some(to_node::Kind::Sample(SampleRequest {
                    id: s.id,
                    payload,
                    codec: codec as i32,
                    traceparent,
                })),
            };
            if self.queues[c].send((msg, sent)).is_err() {
                return self.fail_sample(completer, format!("{}: stream closed", conn.label));
            }
        }
    }

    /// Nothing to flush: every sample was sent when it was issued.
    fn flush_queries(&self) {}

    /// Transport, nodes, connections, codecs and bytes on the wire (see
    /// `report.rs`).
    fn report(&self) -> Vec<(String, String)> {
        report::facts(self)
    }
}

impl Qdl {
    /// Closes the sessions as dropping does, but leaves the network threads
    /// running (idle) until the process exits, for a foreign LoadGen that
    /// must not see the threads that completed its samples exit.
    pub(crate) fn close_keeping_threads(mut self) {
        self.close();
        std::mem::forget(self.runtime.0.take());
    }

    /// Ends every data stream and waits (briefly) for the nodes to end
    /// theirs, so both sides see a clean close rather than a reset.
    fn close(&mut self) {
        self.run.begin_close();
        self.queues.clear();
        let tasks = std::mem::take(&mut self.tasks);
        let Some(runtime) = self.runtime.0.as_ref() else {
            return; // closed already, its threads kept
        };
        let _ = block_on_timeout(runtime, CLOSE_GRACE, async move {
            for t in tasks {
                let _ = t.await;
            }
        });
    }
}

impl Drop for Qdl {
    fn drop(&mut self) {
        self.close();
        // The runtime itself goes with `self.runtime`, after this.
    }
}

/// The largest message accepted from a node, so that the answer limit holds
/// while receiving: one answer of `max_answer_bytes` (a node packs smaller
/// ones into messages of about 1 MiB), plus framing and codec overhead.
fn max_message(max_answer_bytes: usize) -> usize {
    max_answer_bytes.max(1 << 20).saturating_add(64 << 10)
}

/// Runs `fut` on `runtime` and waits for it from this thread. Unlike
/// `Runtime::block_on` this also works from inside another runtime.
fn block_on<F>(runtime: &Runtime, fut: F) -> Option<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (tx, rx) = std_mpsc::sync_channel(1);
    runtime.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().ok()
}

fn block_on_timeout<F>(runtime: &Runtime, limit: Duration, fut: F) -> Option<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    block_on(runtime, async move {
        tokio::time::timeout(limit, fut).await.ok()
    })
    .flatten()
}

/// Opens every connection concurrently; the first failure wins (the others
/// are cancelled).
async fn open_all(
    nodes: Vec<NodeAddr>,
    per_node: usize,
    request: SessionRequest,
    input_codec: Codec,
    timeout: Duration,
    tls: Option<Arc<ClientTls>>,
    limits: StreamLimits,
) -> Result<Vec<Opened>, QdlError> {
    let mut set = JoinSet::new();
    for (n, addr) in nodes.iter().enumerate() {
        for k in 0..per_node {
            let (addr, request, tls) = (addr.clone(), request.clone(), tls.clone());
            set.spawn(async move {
                let r =
                    open_one(&addr, request, input_codec, timeout, tls.as_deref(), limits).await;
                (n * per_node + k, r)
            });
        }
    }
    let mut opened: Vec<Option<Opened>> = (0..nodes.len() * per_node).map(|_| None).collect();
    while let Some(done) = set.join_next().await {
        match done {
            Ok((c, r)) => opened[c] = Some(r?),
            Err(e) => return Err(QdlError::Config(format!("a connection task failed: {e}"))),
        }
    }
    opened
        .into_iter()
        .map(|o| o.ok_or_else(|| QdlError::Config("a connection was not opened".into())))
        .collect()
}

async fn open_one(
    addr: &NodeAddr,
    request: SessionRequest,
    input_codec: Codec,
    timeout: Duration,
    tls: Option<&ClientTls>,
    limits: StreamLimits,
) -> Result<Opened, QdlError> {
    let node = label(addr, None);
    let late = |what: &str| format!("no {what} within {timeout:?}");
    let connect = Link::connect(addr, tls, timeout, limits.max_message);
    let link = match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(l)) => l,
        Ok(Err(e)) => return Err(QdlError::Connect { node, reason: e.0 }),
        Err(_) => {
            return Err(QdlError::Connect {
                node,
                reason: late("connection"),
            })
        }
    };
    let rpc_err = |node: &str, step: &'static str, reason: String| QdlError::Rpc {
        node: node.to_string(),
        step,
        reason,
    };
    let session = match tokio::time::timeout(timeout, link.start_session(request)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(rpc_err(&node, "StartSession", e.0)),
        Err(_) => return Err(rpc_err(&node, "StartSession", late("reply"))),
    };
    // A name that is refused below stays out of every message.
    let node = match check_node_name(&session.node_name) {
        Ok(()) => label(addr, Some(&session.node_name)),
        Err(_) => node,
    };
    check_session(&node, &session, input_codec)?;

    let (queue, queued) = mpsc::unbounded_channel();
    let window = Arc::new(InFlight::new(limits.max_in_flight));
    let outgoing = Outgoing::new(queued, window.clone());
    let inbound = match tokio::time::timeout(timeout, link.open(outgoing)).await {
        Ok(Ok(i)) => i,
        Ok(Err(e)) => return Err(rpc_err(&node, "opening the Infer stream", e.0)),
        Err(_) => return Err(rpc_err(&node, "opening the Infer stream", late("reply"))),
    };
    Ok(Opened {
        link,
        session,
        queue,
        inbound,
        window,
    })
}

/// The bounds of one connection's data stream.
#[derive(Clone, Copy)]
struct StreamLimits {
    /// Largest message accepted from the node.
    max_message: usize,
    /// Samples taken for sending and not yet answered (see `InFlight`).
    max_in_flight: u64,
}

fn check_session(node: &str, s: &SessionReply, input_codec: Codec) -> Result<(), QdlError> {
    let node = node.to_string();
    if s.protocol_version != PROTOCOL_VERSION {
        return Err(QdlError::Version {
            node,
            node_version: s.protocol_version,
            ours: PROTOCOL_VERSION,
        });
    }
    if !s.refusal.is_empty() {
        return Err(QdlError::Refused {
            node,
            reason: s.refusal.clone(),
        });
    }
    if !s.ready {
        return Err(QdlError::NotReady { node });
    }
    if let Err(reason) = check_node_name(&s.node_name) {
        return Err(QdlError::Incompatible { node, reason });
    }
    if input_codec != Codec::None && !s.input_codecs.contains(&(input_codec as i32)) {
        let decodes: Vec<String> = s.input_codecs.iter().map(|c| wire_name(*c)).collect();
        return Err(QdlError::Incompatible {
            node,
            reason: format!(
                "the node cannot decode {} inputs (it decodes {}); send inputs in a codec it \
                 decodes (loadgen-node --input-codec) or update the node",
                wire_name(input_codec as i32),
                if decodes.is_empty() {
                    "none".to_string()
                } else {
                    decodes.join(", ")
                }
            ),
        });
    }
    match Codec::try_from(s.output_codec) {
        Ok(c) if conn::can_decode(c) => Ok(()),
        Ok(c) => Err(QdlError::Incompatible {
            node,
            reason: format!(
                "the node answers in {}, which this QDL cannot decode",
                wire_name(c as i32)
            ),
        }),
        Err(_) => Err(QdlError::Incompatible {
            node,
            reason: format!("the node answers in unknown codec {}", s.output_codec),
        }),
    }
}

/// Each node's name from its sessions; all its connections must agree, and
/// no two nodes may share a name.
fn node_names(
    addrs: &[NodeAddr],
    per_node: usize,
    opened: &[Opened],
) -> Result<Vec<String>, QdlError> {
    let mut names = Vec::with_capacity(addrs.len());
    for (n, addr) in addrs.iter().enumerate() {
        let sessions = &opened[n * per_node..(n + 1) * per_node];
        let name = sessions[0].session.node_name.clone();
        if let Some(other) = sessions.iter().find(|o| o.session.node_name != name) {
            return Err(QdlError::Incompatible {
                node: label(addr, None),
                reason: format!(
                    "its connections report different names ({name:?} and {:?})",
                    other.session.node_name
                ),
            });
        }
        names.push(name);
    }
    let refs: Vec<&NodeAddr> = addrs.iter().collect();
    check_unique(&names, &refs)?;
    Ok(names)
}

/// How often a node that is not ready is asked again.
const READY_POLL: Duration = Duration::from_secs(1);

/// The longest node name accepted, in bytes.
pub const MAX_NODE_NAME_BYTES: usize = 128;

/// A node name goes into the logs and the summary: it must be short,
/// printable text. Returns why it is not.
pub fn check_node_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the node reported an empty name".into());
    }
    if name.len() > MAX_NODE_NAME_BYTES {
        return Err(format!(
            "the node reported a name of {} bytes (at most {MAX_NODE_NAME_BYTES})",
            name.len()
        ));
    }
    let unprintable = |c: char| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}');
    if let Some((at, c)) = name.char_indices().find(|&(_, c)| unprintable(c)) {
        return Err(format!(
            "the node reported a name with the unprintable character U+{:04X} at byte {at} \
             (names must be printable text)",
            c as u32
        ));
    }
    Ok(())
}

fn check_unique(names: &[String], addrs: &[&NodeAddr]) -> Result<(), QdlError> {
    let mut by_name: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (name, addr) in names.iter().zip(addrs) {
        by_name.entry(name).or_default().push(addr.to_string());
    }
    let dups: Vec<String> = by_name
        .into_iter()
        .filter(|(_, a)| a.len() > 1)
        .map(|(name, a)| format!("{name:?} ({})", a.join(", ")))
        .collect();
    if dups.is_empty() {
        Ok(())
    } else {
        Err(QdlError::DuplicateNames(dups.join("; ")))
    }
}
