//! The network SUT itself: [`Qdl`] connects to the nodes, sends each issued
//! sample on the connection its [`DispatchPolicy`](crate::DispatchPolicy)
//! picks, and owns the runtime whose tasks complete the answers.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use loadgen_engine::sut::SutError;
use loadgen_engine::{Completer, QuerySample, SystemUnderTest};
use proto::{to_node, Codec, SampleRequest, SessionRequest, ToNode, PROTOCOL_VERSION};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

use crate::breakdown::Breakdown;
use crate::config::{NodeAddr, QdlConfig, Sizing};
use crate::conn::{self, Conn, Receiver, RunState};
use crate::error::QdlError;
use crate::network_report;
use crate::policy;
use crate::sample::{SampleData, StoredSample};
use crate::session::{
    check_answers_uncompressed, check_node_name, check_unique, label, max_message, node_names,
    open_all, StreamLimits,
};
use crate::spans::SampleTrace;
use crate::stats::{QdlStats, QdlView};
use crate::transport::{Link, Queued};
use crate::watchdog;

/// How long dropping a `Qdl` waits for the nodes to end their streams after
/// it ended its own.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// One node, as its first session described it.
struct Node {
    /// The transport really used (grpc:// with TLS is grpcs).
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
    /// The threads and connections per node, and how they were chosen.
    sizing: Sizing,
    /// What the node list's `dns://` entries resolved to.
    resolved: Vec<String>,
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
    trace: Arc<OnceLock<SampleTrace>>,
    runtime: IoRuntime,
}

/// The QDL's own runtime. Shut down without blocking, so that a `Qdl` (or a
/// failed `connect`) can be dropped anywhere, async code included.
struct IoRuntime(Option<Runtime>);

impl IoRuntime {
    fn get(&self) -> &Runtime {
        // Invariant: only `drop` takes it out, so it is here for any caller.
        #[allow(clippy::expect_used)]
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
        let sizing = config.sizing();
        let io = IoRuntime(Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(sizing.qdl_threads)
                .thread_name("qdl-io")
                .enable_all()
                .build()
                .map_err(QdlError::Runtime)?,
        ));
        let runtime = io.get();
        let per_node = sizing.connections_per_node;
        let request = SessionRequest {
            protocol_version: PROTOCOL_VERSION,
            model: config.model.clone(),
            scenario: config.scenario.clone(),
            input_codec: config.input_codec as i32,
            token_latencies: config.token_latencies,
            mode: config.mode as i32,
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
        if let Some(why) = &config.answer_compression_refused {
            check_answers_uncompressed(&config.nodes, per_node, &names, &opened, why)?;
        }
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
            runtime.spawn(conn::watch(
                conn.clone(),
                run.clone(),
                watchdog::Deadlines {
                    stall: config.node_timeout,
                    // Heartbeats never keep a run going without answers:
                    // with no progress limit of its own, the stall limit.
                    progress: config.progress_timeout.unwrap_or(config.node_timeout),
                },
            ));
            conns.push(conn);
            queues.push(o.queue);
        }
        Ok(Qdl {
            nodes,
            conns,
            per_node,
            sizing,
            resolved: config.resolved.clone(),
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
    /// [`SampleTrace`]), with the global tracer provider's tracer.
    /// Returns the tracing, for setting the parent of the samples' spans;
    /// the first call's ratio stays.
    pub fn trace_samples(&self, ratio: f64) -> &SampleTrace {
        self.trace.get_or_init(|| SampleTrace::new(ratio))
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
    pub fn breakdown(&self) -> Breakdown {
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
        // The first failure's reason is the run's.
        completer.abort(self.run.failure().cloned().unwrap_or(reason));
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
                // The stream is gone; its receive task reads what the node
                // said last and reports it: wait for that before reporting
                // the bare closing.
                conn.wait_receive_ended(CLOSE_GRACE);
                return self.fail_sample(completer, format!("{}: stream closed", conn.label));
            }
        }
    }

    /// Nothing to flush: every sample was sent when it was issued.
    fn flush_queries(&self) {}

    /// Transport, nodes, connections, codecs and bytes on the wire (see
    /// `network_report.rs`).
    fn report(&self) -> Vec<(String, String)> {
        let nodes = self.nodes.iter();
        network_report::facts(&network_report::Run {
            nodes: nodes
                .map(|n| network_report::RunNode {
                    name: &n.name,
                    addr: &n.addr,
                    output_codec: n.output_codec,
                })
                .collect(),
            connections: self.conns.len(),
            sizing: self.sizing,
            resolved: &self.resolved,
            input_codec: self.input_codec,
            total: self.stats().total(),
            since_first_issue: self
                .first_issue
                .get()
                .map_or(Duration::ZERO, |t| t.elapsed()),
        })
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

/// How often a node that is not ready is asked again.
const READY_POLL: Duration = Duration::from_secs(1);
