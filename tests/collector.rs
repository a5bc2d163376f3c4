//! A minimal OpenTelemetry collector for the tests and benches: an OTLP/gRPC
//! `TraceService` on a loopback port that decodes the real OTLP protobufs
//! (`opentelemetry-proto`) and keeps every span it is sent.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;

/// One span as received.
#[derive(Clone, Debug)]
pub struct ReceivedSpan {
    /// The resource's `service.name`.
    pub service: String,
    pub name: String,
    pub trace_id: Vec<u8>,
    pub span_id: Vec<u8>,
    /// Empty for a root span.
    pub parent_span_id: Vec<u8>,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Attributes, values as text.
    pub attributes: Vec<(String, String)>,
}

impl ReceivedSpan {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Clone, Default)]
struct Sink {
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    /// Keeps only this many spans (the benches' collector counts the rest).
    keep: usize,
    seen: Arc<Mutex<u64>>,
}

fn text(v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn attrs(kvs: &[KeyValue]) -> Vec<(String, String)> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), text(&kv.value)))
        .collect()
}

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut received = Vec::new();
        for rs in request.into_inner().resource_spans {
            let resource = rs
                .resource
                .map(|r| attrs(&r.attributes))
                .unwrap_or_default();
            let service = resource
                .iter()
                .find(|(k, _)| k == "service.name")
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for s in ss.spans {
                    received.push(ReceivedSpan {
                        service: service.clone(),
                        name: s.name,
                        trace_id: s.trace_id,
                        span_id: s.span_id,
                        parent_span_id: s.parent_span_id,
                        start_ns: s.start_time_unix_nano,
                        end_ns: s.end_time_unix_nano,
                        attributes: attrs(&s.attributes),
                    });
                }
            }
        }
        *self.seen.lock().unwrap_or_else(PoisonError::into_inner) += received.len() as u64;
        let mut spans = self.spans.lock().unwrap_or_else(PoisonError::into_inner);
        let room = self.keep.saturating_sub(spans.len());
        spans.extend(received.into_iter().take(room));
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// The collector, serving until dropped.
pub struct Collector {
    /// `http://127.0.0.1:PORT`, for `--otlp`.
    pub endpoint: String,
    sink: Sink,
    _runtime: tokio::runtime::Runtime,
}

impl Collector {
    /// Serves on a free loopback port, keeping every span.
    pub fn start() -> Collector {
        Self::keeping(usize::MAX)
    }

    /// Serves on a free loopback port, keeping the first `keep` spans and
    /// counting all.
    pub fn keeping(keep: usize) -> Collector {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("the collector's runtime");
        let sink = Sink {
            keep,
            ..Sink::default()
        };
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("a loopback port");
        let addr: SocketAddr = listener.local_addr().expect("its address");
        let service = TraceServiceServer::new(sink.clone());
        runtime.spawn(async move {
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await;
        });
        Collector {
            endpoint: format!("http://{addr}"),
            sink,
            _runtime: runtime,
        }
    }

    /// The spans kept so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.sink
            .spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every span received so far, kept or not.
    pub fn seen(&self) -> u64 {
        *self
            .sink
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The spans once `done` says they are all here; panics after `limit`.
    pub fn wait_for(
        &self,
        limit: Duration,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let deadline = Instant::now() + limit;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "the collector did not receive the expected spans within {limit:?}; got: {:#?}",
                spans
                    .iter()
                    .map(|s| (&s.service, &s.name))
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
