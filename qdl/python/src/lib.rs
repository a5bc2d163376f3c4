//! `mlperf_net_qdl`: the QDL as a Python extension module, so that a Python
//! harness of the official LoadGen (`mlperf_loadgen`) can run its benchmark
//! against sut-nodes over the network:
//!
//! ```python
//! qdl = mlperf_net_qdl.Qdl(["10.0.0.2:50051", "10.0.0.3:50051"],
//!                          model="resnet50", scenario="Offline")
//! sut = lg.ConstructQDL(qdl.issue_query, qdl.flush_queries, qdl.name)
//! ```
//!
//! The harness's QSL stores each loaded sample's bytes with `qdl.load`;
//! answers go to `mlperf_loadgen.QuerySamplesComplete` straight from the
//! QDL's network threads, one call per batch of answers that arrived
//! together, the GIL held only for that call. See docs/python.md.

#![warn(missing_docs)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard};
use std::time::Duration;

use bytes::Bytes;
use compression::CodecSpec;
use loadgen_engine::{QuerySample, QuerySampleIndex, QuerySampleResponse};
use proto::tls::{ClientTls, ClientTlsOptions, OptionSpelling};
use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyConnectionError, PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};
use qdl::{Codec, ForeignLoadGen, ForeignSut, NodeList, Qdl, QdlConfig, QdlError, StoredSample};

/// The samples the harness's QSL loaded, as the QDL sends them.
#[derive(Default)]
struct Samples(RwLock<HashMap<QuerySampleIndex, StoredSample>>);

impl Samples {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<QuerySampleIndex, StoredSample>> {
        // Inserts and removes are single operations: a panic cannot leave
        // the map half-changed.
        self.0.write().unwrap_or_else(|p| p.into_inner())
    }
}

impl qdl::SampleData for Samples {
    fn sample(&self, index: QuerySampleIndex) -> Option<StoredSample> {
        self.0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&index)
            .cloned()
    }
}

/// `mlperf_loadgen`'s completion entry points, called from the QDL's
/// network threads.
struct PythonLoadGen {
    samples_complete: Py<PyAny>,
    first_token_complete: Py<PyAny>,
    response: Py<PyAny>,
}

impl PythonLoadGen {
    fn import(py: Python<'_>) -> PyResult<Self> {
        let lg = py.import("mlperf_loadgen").map_err(|e| {
            PyRuntimeError::new_err(format!(
                "the QDL hands answers to the official LoadGen's Python module, which cannot \
                 be imported ({e}); install it: pip install mlcommons-loadgen"
            ))
        })?;
        Ok(Self {
            samples_complete: lg.getattr("QuerySamplesComplete")?.unbind(),
            first_token_complete: lg.getattr("FirstTokenComplete")?.unbind(),
            response: lg.getattr("QuerySampleResponse")?.unbind(),
        })
    }

    /// One call of `entry` with every response of the batch. The answers'
    /// bytes are not copied: the LoadGen gets their address, valid for the
    /// duration of the call, and copies what it logs.
    fn call(&self, entry: &Py<PyAny>, responses: &[QuerySampleResponse<'_>]) {
        Python::attach(|py| {
            let result = (|| {
                let list = PyList::empty(py);
                for r in responses {
                    let data = match r.data.is_empty() {
                        true => 0,
                        false => r.data.as_ptr() as usize,
                    };
                    list.append(
                        self.response
                            .call1(py, (r.id, data, r.data.len(), r.n_tokens))?,
                    )?;
                }
                entry.call1(py, (list,))
            })();
            if let Err(e) = result {
                // Nothing to return it to: these calls come from the
                // network threads.
                eprintln!("mlperf_net_qdl: handing answers to the LoadGen failed:");
                e.print(py);
            }
        });
    }
}

impl ForeignLoadGen for PythonLoadGen {
    fn samples_complete(&self, responses: &[QuerySampleResponse<'_>]) {
        self.call(&self.samples_complete, responses);
    }

    fn first_token_complete(&self, responses: &[QuerySampleResponse<'_>]) {
        self.call(&self.first_token_complete, responses);
    }
}

fn config_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn seconds(name: &str, value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| config_error(format!("{name} must be a positive number of seconds")))
}

/// The sut-nodes: a list of addresses, or one string of comma-separated
/// addresses; each `dns://NAME:PORT` is resolved now, once.
fn node_list(nodes: &Bound<'_, PyAny>) -> PyResult<NodeList> {
    let addrs: Vec<String> = match nodes.cast::<PyString>() {
        Ok(s) => vec![s.to_str()?.to_string()],
        Err(_) => nodes.extract().map_err(|_| {
            config_error("nodes must be a list of addresses (host:port, quic://host:port, ...)")
        })?,
    };
    qdl::find_nodes(&addrs.join(","), None, Duration::ZERO, |_| {}).map_err(config_error)
}

/// How node certificates are checked, by the rules of loadgen-node's
/// --tls-* flags (`proto::tls::ClientTlsOptions`).
fn client_tls(
    pins: Vec<String>,
    ca: Option<String>,
    insecure: bool,
    client_cert: Option<String>,
    client_key: Option<String>,
) -> PyResult<Option<ClientTls>> {
    let options = ClientTlsOptions {
        pins: &pins,
        ca: ca.as_deref().map(Path::new),
        insecure,
        client_cert: client_cert.as_deref().map(Path::new),
        client_key: client_key.as_deref().map(Path::new),
    };
    options
        .resolve(OptionSpelling::Keyword)
        .map_err(config_error)
}

fn connect_error(e: QdlError) -> PyErr {
    match e {
        QdlError::Address { .. } | QdlError::Policy { .. } | QdlError::Config(_) => config_error(e),
        _ => PyConnectionError::new_err(format!("cannot reach the sut-nodes: {e}")),
    }
}

/// The Query Dispatch Library: the official LoadGen's SUT, forwarding every
/// sample to the sut-nodes. Connects when created, raising `ValueError` for a
/// bad option and `ConnectionError` when a node cannot be reached, refuses
/// the session or is not ready.
///
/// Hand its `issue_query`, `flush_queries` and `name` to
/// `mlperf_loadgen.ConstructQDL`, store each sample the QSL loads with
/// `load`, and call `finish` once the test has ended. Also a context manager
/// (`with Qdl(...) as qdl:`), which finishes on exit.
///
/// Args:
///     nodes: the sut-nodes, a list of addresses or one comma-separated
///         string: `host:port` or `grpc://host:port` (gRPC), `grpcs://...`
///         (gRPC over TLS), `quic://host:port`, or `dns://NAME:PORT` (one node
///         per address of NAME, resolved once, now).
///     model: the benchmark's model name (mlperf.conf's, e.g. `"resnet50"`);
///         every node checks it when the session starts.
///     scenario: `"Offline"`, `"Server"`, `"SingleStream"` or
///         `"MultiStream"`; checked by every node too.
///     connections_per_node: connections to each node, each with its own
///         stream; `None` sizes them to the host and the nodes.
///     dispatch: how samples are spread over the connections:
///         `"least-outstanding"`, `"round-robin"` or `"weighted:3,1"` (one
///         weight per node).
///     input_codec: `"none"`, `"zstd"`, `"zstd:LEVEL"` (1 to 22) or `"lz4"`:
///         each sample is compressed once, by `load`. Refused where the rules
///         allow the benchmark no compression, unless `open_division`.
///     open_division: lift the rules on which benchmarks' data may travel
///         compressed (inputs and answers).
///     rules: the round of the rules that applies: `"v6.1"` (current) or
///         `"v5.1"`.
///     node_timeout: seconds a node with samples outstanding may stay silent
///         before the run fails.
///     progress_timeout: seconds a node may send only heartbeats before the
///         run fails; 0 waits for ever.
///     connect_timeout: seconds each connection step, and each `name` round
///         trip, may take.
///     max_answer_bytes: the largest answer accepted, once decoded; `None`:
///         the benchmark's largest (1 GiB for a model outside the suite).
///     qdl_threads: threads of the network runtime (`--qdl-threads`); `None`
///         sizes them to the host. `io_threads`, its former name, is
///         accepted too.
///     max_in_flight: samples one connection may have sent and not yet had
///         answered (at least 1).
///     token_latencies: judge the run on token latencies (each answer with
///         its first token and token count); `None`: as the benchmark is.
///     mode: the run's test mode, told to the nodes (whose answers may
///         differ between accuracy and performance runs, as DLRMv3's do):
///         a `mlperf_loadgen.TestMode` or its name ("AccuracyOnly",
///         "PerformanceOnly", "SubmissionRun", "FindPeakPerformance");
///         `None`: not said (nodes answer as in a performance run).
///     tls_pin: SHA-256 fingerprints of the nodes' certificates, as 64 hex
///         digits (sut-node prints its own at start).
///     tls_ca: a PEM file of the CA certificates the nodes' chains must lead
///         to, instead of pins.
///     tls_insecure: accept any certificate (development only).
///     tls_client_cert: a PEM certificate chain to present to nodes that
///         require mutual TLS; goes with `tls_client_key`.
///     tls_client_key: the PEM private key of `tls_client_cert`.
/// The session mode of `mode`: a `TestMode` of the LoadGen (by its name)
/// or the name itself.
fn run_mode(mode: &Bound<'_, PyAny>) -> PyResult<qdl::RunMode> {
    let name: String = match mode.extract::<String>() {
        Ok(name) => name,
        Err(_) => mode
            .getattr("name")
            .and_then(|n| n.extract())
            .map_err(|_| config_error("mode: expected a TestMode or its name"))?,
    };
    qdl::run_mode(&name).ok_or_else(|| {
        config_error(format!(
            "mode: unknown test mode {name:?} (expected AccuracyOnly, PerformanceOnly, \
             SubmissionRun or FindPeakPerformance)"
        ))
    })
}

#[pyclass(frozen, name = "Qdl", module = "mlperf_net_qdl")]
struct PyQdl {
    /// `None` once finished.
    sut: RwLock<Option<ForeignSut>>,
    samples: Arc<Samples>,
    input_codec: CodecSpec,
    node_names: Vec<String>,
    /// Why the run failed, kept when the QDL is finished.
    run_failure: OnceLock<String>,
    /// Why `Name()` failed, if it did.
    name_failure: OnceLock<String>,
}

impl PyQdl {
    fn sut(&self) -> RwLockReadGuard<'_, Option<ForeignSut>> {
        // Only `finish` writes, with a single `take`.
        self.sut.read().unwrap_or_else(|p| p.into_inner())
    }

    fn finished() -> PyErr {
        PyRuntimeError::new_err("the QDL is finished; create a new one for the next test")
    }
}

#[pymethods]
impl PyQdl {
    /// Connects `connections_per_node` connections to every node and starts
    /// a session for `model` and `scenario` on each (the arguments are
    /// described with the class).
    #[new]
    #[pyo3(signature = (
        nodes, *, model, scenario,
        connections_per_node = None,
        dispatch = "least-outstanding",
        input_codec = "none",
        open_division = false,
        rules = "v6.1",
        node_timeout = 10.0,
        progress_timeout = 120.0,
        connect_timeout = 10.0,
        max_answer_bytes = None,
        qdl_threads = None,
        io_threads = None,
        max_in_flight = qdl::DEFAULT_MAX_IN_FLIGHT,
        token_latencies = None,
        mode = None,
        tls_pin = Vec::new(),
        tls_ca = None,
        tls_insecure = false,
        tls_client_cert = None,
        tls_client_key = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        nodes: &Bound<'_, PyAny>,
        model: String,
        scenario: String,
        connections_per_node: Option<usize>,
        dispatch: &str,
        input_codec: &str,
        open_division: bool,
        rules: &str,
        node_timeout: f64,
        progress_timeout: f64,
        connect_timeout: f64,
        max_answer_bytes: Option<usize>,
        qdl_threads: Option<usize>,
        io_threads: Option<usize>,
        max_in_flight: u64,
        token_latencies: Option<bool>,
        mode: Option<&Bound<'_, PyAny>>,
        tls_pin: Vec<String>,
        tls_ca: Option<String>,
        tls_insecure: bool,
        tls_client_cert: Option<String>,
        tls_client_key: Option<String>,
    ) -> PyResult<Self> {
        let codec: CodecSpec = input_codec
            .parse()
            .map_err(|e| config_error(format!("input_codec: {e}")))?;
        let round: facts::benchmarks::Round = rules
            .parse()
            .map_err(|e| config_error(format!("rules: {e}")))?;
        let compression = facts::benchmarks::check_compression(&model, round, open_division);
        if let (Err(why), true) = (&compression, codec.compresses()) {
            return Err(config_error(format!(
                "input_codec {codec}: {}",
                why.replace("loadgen-node --open-division", "open_division=True")
            )));
        }
        let mode = mode.map(run_mode).transpose()?.unwrap_or_default();
        let qdl_threads = match (qdl_threads, io_threads) {
            (Some(_), Some(_)) => {
                return Err(config_error(
                    "qdl_threads and io_threads (its former name) are both given",
                ))
            }
            (given, former) => given.or(former),
        };
        let model_name = model.clone();
        let found = node_list(nodes)?;
        let config = QdlConfig {
            nodes: found.nodes,
            resolved: found.resolved.iter().map(ToString::to_string).collect(),
            policy: dispatch
                .parse()
                .map_err(|e| config_error(format!("dispatch: {e}")))?,
            connections_per_node,
            model,
            scenario,
            input_codec: Codec::from(codec.kind),
            node_timeout: seconds("node_timeout", node_timeout)?,
            progress_timeout: match progress_timeout {
                0.0 => None,
                secs => Some(seconds("progress_timeout", secs)?),
            },
            connect_timeout: seconds("connect_timeout", connect_timeout)?,
            max_answer_bytes: max_answer_bytes.unwrap_or_else(|| {
                facts::benchmarks::find(&model_name)
                    .map_or(qdl::DEFAULT_MAX_ANSWER_BYTES, |b| b.max_output_bytes)
            }),
            tls: client_tls(
                tls_pin,
                tls_ca,
                tls_insecure,
                tls_client_cert,
                tls_client_key,
            )?,
            qdl_threads,
            max_in_flight: max_in_flight.max(1),
            token_latencies: token_latencies
                .unwrap_or_else(|| facts::benchmarks::find(&model_name).is_some_and(|b| b.llm)),
            mode,
            answer_compression_refused: compression.err(),
        };
        // The official LoadGen records calls in the order its calling
        // threads' log buffers are read: in token runs, one thread hands it
        // every first token and answer (every scenario but Offline needs a
        // sample's first token before its answer).
        let first_tokens = config.token_latencies.then(|| config.scenario != "Offline");
        let loadgen = Arc::new(PythonLoadGen::import(py)?);
        let samples = Arc::new(Samples::default());
        let data = samples.clone();
        let qdl = py
            .detach(move || Qdl::connect(config, data))
            .map_err(connect_error)?;
        let node_names = qdl.node_names();
        let mut sut = ForeignSut::new(qdl, loadgen);
        if let Some(required) = first_tokens {
            sut = sut
                .with_first_tokens(required)
                .map_err(|e| config_error(format!("cannot start the delivery thread: {e}")))?;
        }
        Ok(Self {
            sut: RwLock::new(Some(sut)),
            samples,
            input_codec: codec,
            node_names,
            run_failure: OnceLock::new(),
            name_failure: OnceLock::new(),
        })
    }

    /// Stores a sample as the QSL loaded it, for the QSL's
    /// `LoadSamplesToRam`. Its bytes are copied (and compressed, with an
    /// input codec) now, untimed.
    ///
    /// Args:
    ///     index: the sample's index in the data set (`QuerySampleIndex`).
    ///     data: its bytes: any object with the buffer protocol (bytes,
    ///         bytearray, a C-contiguous numpy array).
    ///
    /// Raises:
    ///     ValueError: the buffer is not C-contiguous.
    fn load(
        &self,
        py: Python<'_>,
        index: QuerySampleIndex,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let buffer = PyUntypedBuffer::get(data)?;
        if !buffer.is_c_contiguous() {
            return Err(PyValueError::new_err(format!(
                "sample {index}: the data must be C-contiguous (numpy.ascontiguousarray)"
            )));
        }
        // SAFETY: a C-contiguous buffer is `len_bytes` bytes from `buf_ptr`;
        // the buffer, and so the memory, lives until the copy is made.
        let raw = unsafe {
            std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, buffer.len_bytes())
        }
        .to_vec();
        buffer.release(py);
        let spec = self.input_codec;
        let stored = py.detach(move || match spec.compresses() {
            false => StoredSample::raw(Bytes::from(raw)),
            true => StoredSample {
                payload: Bytes::from(spec.codec().compress(&raw)),
                codec: Codec::from(spec.kind),
                raw_len: raw.len(),
            },
        });
        self.samples.write().insert(index, stored);
        Ok(())
    }

    /// Forgets sample `index` (`int`), for the QSL's
    /// `UnloadSamplesFromRam`.
    fn unload(&self, index: QuerySampleIndex) {
        self.samples.write().remove(&index);
    }

    /// The LoadGen's `IssueQuery`: sends each sample to a node and returns
    /// at once; answers reach `mlperf_loadgen.QuerySamplesComplete` as they
    /// arrive.
    ///
    /// Args:
    ///     samples: the LoadGen's list of `QuerySample` (each with `.id` and
    ///         `.index`).
    ///
    /// Raises:
    ///     RuntimeError: the QDL is finished.
    fn issue_query(&self, py: Python<'_>, samples: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut issued = Vec::with_capacity(samples.len().unwrap_or(0));
        for s in samples.try_iter()? {
            let s = s?;
            issued.push(QuerySample {
                id: s.getattr(intern!(py, "id"))?.extract()?,
                index: s.getattr(intern!(py, "index"))?.extract()?,
            });
        }
        let guard = self.sut();
        let sut = guard.as_ref().ok_or_else(Self::finished)?;
        // Without the GIL: the network threads need it to complete samples.
        py.detach(|| sut.issue_query(&issued));
        Ok(())
    }

    /// The LoadGen's `FlushQueries`: nothing waits to be sent.
    fn flush_queries(&self) {
        if let Some(sut) = self.sut().as_ref() {
            sut.flush_queries();
        }
    }

    /// The LoadGen's `Name()`: asks every node for its name (a round trip
    /// each) and returns `Network SUT (N nodes: a, b)`. Never raises, as the
    /// LoadGen cannot take an exception here: a failure is kept in
    /// `failure` and named in the returned string.
    fn name(&self, py: Python<'_>) -> String {
        let guard = self.sut();
        let result = match guard.as_ref() {
            Some(sut) => py.detach(|| sut.name()).map_err(|e| e.0),
            None => Err("the QDL is finished".to_string()),
        };
        result.unwrap_or_else(|reason| {
            let reason = format!("Name() failed: {reason}");
            eprintln!("mlperf_net_qdl: {reason}");
            let _ = self.name_failure.set(reason.clone());
            format!("Network SUT ({reason})")
        })
    }

    /// Why the run failed (a node lost, stalled, or answering with errors;
    /// or `Name()` failed), or `None`. Once it failed, every sample was
    /// completed with an empty answer so that the LoadGen's test ends: its
    /// logs are not a result.
    #[getter]
    fn failure(&self) -> Option<String> {
        let guard = self.sut();
        guard
            .as_ref()
            .and_then(|s| s.failure().map(str::to_string))
            .or_else(|| self.run_failure.get().cloned())
            .or_else(|| self.name_failure.get().cloned())
    }

    /// The nodes' names, as their sessions reported them, in node order.
    #[getter]
    fn node_names(&self) -> Vec<String> {
        self.node_names.clone()
    }

    /// What the QDL knows about the run, as a list of (key, value) string
    /// pairs: transport, nodes, connections, codecs, bytes on the wire.
    ///
    /// Raises:
    ///     RuntimeError: the QDL is finished.
    fn report(&self) -> PyResult<Vec<(String, String)>> {
        use loadgen_engine::SystemUnderTest;
        let guard = self.sut();
        let sut = guard.as_ref().ok_or_else(Self::finished)?;
        Ok(sut.qdl().report())
    }

    /// Ends the sessions after the test (call it once `StartTest` has
    /// returned). The network threads stay, idle, until the process exits:
    /// the official LoadGen must not see a thread that completed samples
    /// exit.
    fn finish(&self, py: Python<'_>) {
        let sut = self.sut.write().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(sut) = sut {
            if let Some(f) = sut.failure() {
                let _ = self.run_failure.set(f.to_string());
            }
            py.detach(move || sut.finish());
        }
    }

    /// Returns the QDL itself, for `with Qdl(...) as qdl:`.
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Finishes the QDL (see `finish`); an exception in the block is not
    /// suppressed.
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.finish(py);
        false
    }
}

impl Drop for PyQdl {
    fn drop(&mut self) {
        // Not finished: keep its threads (and sessions) until the process
        // exits rather than let threads that completed samples exit.
        if let Some(sut) = self.sut.get_mut().ok().and_then(Option::take) {
            std::mem::forget(sut);
        }
    }
}

/// The Network division's Query Dispatch Library for the official LoadGen's
/// Python harnesses: `Qdl` forwards the LoadGen's samples to sut-nodes over
/// gRPC or QUIC and hands their answers back to `mlperf_loadgen`.
#[pymodule]
fn mlperf_net_qdl(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyQdl>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
