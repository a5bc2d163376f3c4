//! The kserve backend against an in-process fake KServe v2 server.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status, Streaming};

use super::output::typed_to_bytes;
use super::*;
use pb::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};
use pb::model_infer_response::InferOutputTensor;
use pb::model_metadata_response::TensorMetadata;
use pb::InferTensorContents;

/// Models: "echo" answers the input as raw bytes; "double" answers each FP32
/// element doubled, as typed contents; both take FP32 [-1, -1]. A sample
/// starting with b"FAIL" is refused with INVALID_ARGUMENT. Every infer call
/// takes `delay`, and the most calls in flight at once are counted.
#[derive(Clone, Default)]
struct Fake {
    delay: Duration,
    in_flight: Arc<AtomicUsize>,
    most_in_flight: Arc<AtomicUsize>,
}

impl Fake {
    fn known(model: &str) -> bool {
        model == "echo" || model == "double"
    }

    fn answer(&self, request: &ModelInferRequest) -> Result<ModelInferResponse, Status> {
        if !Self::known(&request.model_name) {
            return Err(Status::not_found(format!(
                "no model {:?}",
                request.model_name
            )));
        }
        let input = request
            .inputs
            .first()
            .ok_or_else(|| Status::invalid_argument("no input"))?;
        let raw = request
            .raw_input_contents
            .first()
            .ok_or_else(|| Status::invalid_argument("no raw input"))?;
        if input.name != "x" || input.datatype != "FP32" {
            return Err(Status::invalid_argument("wrong input tensor"));
        }
        let elements: i64 = input.shape.iter().product();
        if elements * 4 != raw.len() as i64 {
            return Err(Status::invalid_argument("shape does not match the data"));
        }
        if raw.starts_with(b"FAIL") {
            return Err(Status::invalid_argument("sample rejected"));
        }
        let mut response = ModelInferResponse {
            model_name: request.model_name.clone(),
            id: request.id.clone(),
            ..Default::default()
        };
        let mut out = InferOutputTensor {
            name: "y".into(),
            datatype: "FP32".into(),
            shape: input.shape.clone(),
            ..Default::default()
        };
        if request.model_name == "echo" {
            response.raw_output_contents.push(raw.clone());
        } else {
            let doubled = raw
                .chunks_exact(4)
                .map(|c| 2.0 * f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            out.contents = Some(InferTensorContents {
                fp32_contents: doubled,
                ..Default::default()
            });
        }
        response.outputs.push(out);
        Ok(response)
    }

    async fn timed<T>(&self, f: impl FnOnce() -> T) -> T {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        f()
    }
}

type ResponseStream =
    Pin<Box<dyn Stream<Item = Result<pb::ModelStreamInferResponse, Status>> + Send>>;

fn final_flag(v: bool) -> HashMap<String, pb::InferParameter> {
    HashMap::from([(
        "triton_final_response".to_string(),
        pb::InferParameter {
            parameter_choice: Some(pb::infer_parameter::ParameterChoice::BoolParam(v)),
        },
    )])
}

#[tonic::async_trait]
impl GrpcInferenceService for Fake {
    async fn server_live(
        &self,
        _: Request<pb::ServerLiveRequest>,
    ) -> Result<Response<pb::ServerLiveResponse>, Status> {
        Ok(Response::new(pb::ServerLiveResponse { live: true }))
    }

    async fn server_ready(
        &self,
        _: Request<pb::ServerReadyRequest>,
    ) -> Result<Response<pb::ServerReadyResponse>, Status> {
        Ok(Response::new(pb::ServerReadyResponse { ready: true }))
    }

    async fn model_ready(
        &self,
        r: Request<pb::ModelReadyRequest>,
    ) -> Result<Response<pb::ModelReadyResponse>, Status> {
        let ready = Self::known(&r.get_ref().name);
        Ok(Response::new(pb::ModelReadyResponse { ready }))
    }

    async fn model_metadata(
        &self,
        r: Request<pb::ModelMetadataRequest>,
    ) -> Result<Response<pb::ModelMetadataResponse>, Status> {
        Ok(Response::new(pb::ModelMetadataResponse {
            name: r.get_ref().name.clone(),
            inputs: vec![TensorMetadata {
                name: "x".into(),
                datatype: "FP32".into(),
                shape: vec![-1, -1],
            }],
            ..Default::default()
        }))
    }

    async fn model_infer(
        &self,
        r: Request<ModelInferRequest>,
    ) -> Result<Response<ModelInferResponse>, Status> {
        self.timed(|| self.answer(r.get_ref()).map(Response::new))
            .await
    }

    type ModelStreamInferStream = ResponseStream;

    /// Each request gets two responses: the first half of the answer, then
    /// the rest marked final; or one error message.
    async fn model_stream_infer(
        &self,
        r: Request<Streaming<ModelInferRequest>>,
    ) -> Result<Response<ResponseStream>, Status> {
        let mut inbound = r.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let fake = self.clone();
        tokio::spawn(async move {
            while let Some(Ok(request)) = inbound.next().await {
                let (fake, tx) = (fake.clone(), tx.clone());
                tokio::spawn(async move {
                    let id = request.id.clone();
                    match fake.timed(|| fake.answer(&request)).await {
                        Ok(mut whole) => {
                            let raw = whole.raw_output_contents.pop().unwrap_or_default();
                            let half = raw.len() / 2;
                            for (part, last) in
                                [(raw.slice(..half), false), (raw.slice(half..), true)]
                            {
                                let mut r = whole.clone();
                                r.raw_output_contents = vec![part];
                                r.parameters = final_flag(last);
                                let m = pb::ModelStreamInferResponse {
                                    error_message: String::new(),
                                    infer_response: Some(r),
                                };
                                let _ = tx.send(Ok(m)).await;
                            }
                        }
                        Err(status) => {
                            let m = pb::ModelStreamInferResponse {
                                error_message: status.message().to_string(),
                                infer_response: Some(ModelInferResponse {
                                    id,
                                    ..Default::default()
                                }),
                            };
                            let _ = tx.send(Ok(m)).await;
                        }
                    }
                });
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Serves `fake` on a free loopback port of its own runtime.
fn serve(fake: Fake) -> (tokio::runtime::Runtime, String) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let incoming = rt
        .block_on(async { TcpIncoming::bind("127.0.0.1:0".parse().expect("address")) })
        .expect("bind");
    let addr = incoming.local_addr().expect("address");
    rt.spawn(
        tonic::transport::Server::builder()
            .add_service(GrpcInferenceServiceServer::new(fake))
            .serve_with_incoming(incoming),
    );
    (rt, format!("http://{addr}"))
}

fn args() -> KserveOptions {
    KserveOptions {
        kserve_input_name: None,
        kserve_input_datatype: None,
        kserve_input_shape: None,
        kserve_output_name: None,
        kserve_model_version: String::new(),
        kserve_stream: false,
        kserve_timeout: 10.0,
    }
}

fn floats(v: &[f32]) -> Bytes {
    v.iter()
        .flat_map(|f| f.to_le_bytes())
        .collect::<Vec<u8>>()
        .into()
}

#[derive(Default)]
struct Collect(Vec<(usize, Bytes)>);
impl SampleSink for Collect {
    fn first_token(&mut self, index: usize, payload: Bytes) {
        self.0.push((index, payload));
    }
}

fn backend(url: &str, model: &str, args: KserveOptions) -> Kserve {
    Kserve::new(Some(url.into()), Some(model.into()), args).expect("config")
}

#[test]
fn forwards_a_batch_concurrently_and_returns_raw_and_typed_outputs() {
    let fake = Fake {
        delay: Duration::from_millis(200),
        ..Default::default()
    };
    let most = fake.most_in_flight.clone();
    let (_server, url) = serve(fake);

    // The leading -1 is read as the batch of one; the other one comes from
    // the sample's size.
    let echo = backend(&url, "echo", args());
    echo.warm_up().expect("warm-up");
    assert_eq!(echo.input.get().map(|i| i.shape.clone()), Some(vec![1, -1]));
    let inputs: Vec<Bytes> = (0..8).map(|i| floats(&[i as f32, 0.5])).collect();
    let out = echo
        .infer(&inputs, BatchInfo::default(), &mut Collect::default())
        .expect("batch");
    for (o, i) in out.iter().zip(&inputs) {
        assert_eq!(o.as_ref().map(|a| &a.payload), Ok(i));
    }
    // Eight 200 ms requests, all at once.
    assert_eq!(most.load(Ordering::SeqCst), 8);

    let double = backend(&url, "double", args());
    double.warm_up().expect("warm-up");
    let out = double
        .infer(
            &[floats(&[1.5, -2.0])],
            BatchInfo::default(),
            &mut Collect::default(),
        )
        .expect("batch");
    assert_eq!(
        out[0].as_ref().map(|a| a.payload.clone()),
        Ok(floats(&[3.0, -4.0]))
    );
}

#[test]
fn a_server_error_fails_only_its_sample_with_the_server_status() {
    let (_server, url) = serve(Fake::default());
    let b = backend(&url, "echo", args());
    b.warm_up().expect("warm-up");
    let inputs = [
        floats(&[1.0]),
        Bytes::from_static(b"FAIL"),
        floats(&[1.0, 2.0, 3.0]),
    ];
    let out = b
        .infer(&inputs, BatchInfo::default(), &mut Collect::default())
        .expect("batch");
    assert!(out[0].is_ok() && out[2].is_ok(), "{out:?}");
    let err = out[1].as_ref().expect_err("refused").to_string();
    assert!(
        err.contains("InvalidArgument") && err.contains("sample rejected"),
        "{err}"
    );
    // A sample that is not whole FP32 elements never leaves the node.
    let out = b
        .infer(
            &[Bytes::from_static(b"abc")],
            BatchInfo::default(),
            &mut Collect::default(),
        )
        .expect("batch");
    let err = out[0].as_ref().expect_err("refused").to_string();
    assert!(err.contains("4-byte elements"), "{err}");
}

#[test]
fn the_stream_mode_gathers_responses_and_reports_the_first_as_first_token() {
    let (_server, url) = serve(Fake::default());
    let b = backend(
        &url,
        "echo",
        KserveOptions {
            kserve_stream: true,
            ..args()
        },
    );
    b.warm_up().expect("warm-up");
    let inputs = [
        floats(&[1.0, 2.0]),
        Bytes::from_static(b"FAIL"),
        floats(&[3.0, 4.0]),
    ];
    let mut sink = Collect::default();
    let out = b
        .infer(&inputs, BatchInfo::default(), &mut sink)
        .expect("batch");
    for i in [0, 2] {
        let answer = out[i].as_ref().expect("answered");
        assert_eq!(answer.payload, inputs[i]);
        assert_eq!(answer.n_tokens, 2);
    }
    let err = out[1].as_ref().expect_err("refused").to_string();
    assert!(err.contains("sample rejected"), "{err}");
    sink.0.sort_by_key(|(i, _)| *i);
    assert_eq!(
        sink.0,
        vec![(0, inputs[0].slice(..4)), (2, inputs[2].slice(..4))]
    );
}

#[test]
fn warm_up_names_an_unreachable_server_or_a_missing_model() {
    // A port held, on which nothing listens.
    let closed = testkit::ClosedPort::new();
    let addr = closed.addr();
    let b = backend(&format!("http://{addr}"), "echo", args());
    let err = b.warm_up().expect_err("unreachable").to_string();
    assert!(
        err.contains("unreachable") && err.contains(&addr.to_string()),
        "{err}"
    );

    let (_server, url) = serve(Fake::default());
    let err = backend(&url, "nope", args())
        .warm_up()
        .expect_err("no such model")
        .to_string();
    assert!(err.contains("\"nope\" is not ready"), "{err}");
}

#[test]
fn shapes_and_typed_contents() {
    assert_eq!(parse_shape("1,3,-1"), Ok(vec![1, 3, -1]));
    assert!(parse_shape("1,-1,-1").is_err());
    assert!(parse_shape("1,x").is_err());
    assert_eq!(resolve_shape(&[1, -1], 32, 4), Ok(vec![1, 8]));
    assert_eq!(resolve_shape(&[2, 4], 32, 4), Ok(vec![2, 4]));
    assert!(resolve_shape(&[2, 3], 32, 4).is_err());
    assert!(resolve_shape(&[3, -1], 32, 4).is_err());
    let c = InferTensorContents {
        int_contents: vec![1, -1],
        bytes_contents: vec![Bytes::from_static(b"ab")],
        ..Default::default()
    };
    assert_eq!(
        &typed_to_bytes("INT16", &c).unwrap()[..],
        &[1, 0, 0xff, 0xff]
    );
    assert_eq!(&typed_to_bytes("BYTES", &c).unwrap()[..], b"\x02\0\0\0ab");
    assert!(typed_to_bytes("FP16", &c).is_err());
}

#[test]
fn missing_flags_are_refused() {
    assert!(matches!(
        Kserve::new(None, Some("m".into()), args()),
        Err(KserveConfigError::NoServerUrl)
    ));
    assert!(matches!(
        Kserve::new(Some("h:1".into()), None, args()),
        Err(KserveConfigError::NoModelName)
    ));
    let bad_shape = KserveOptions {
        kserve_input_shape: Some("1,two".into()),
        ..args()
    };
    assert!(matches!(
        Kserve::new(Some("h:1".into()), Some("m".into()), bad_shape),
        Err(KserveConfigError::BadShape(..))
    ));
}
