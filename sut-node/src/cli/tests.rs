//! The flags become the library's options as they say.

use clap::Parser;

use super::*;

#[derive(Parser, Debug)]
struct Forwarders {
    #[command(flatten)]
    kserve: kserve::KserveArgs,
    #[command(flatten)]
    openai: openai::OpenaiArgs,
}

fn forwarders(args: &[&str]) -> Forwarders {
    Forwarders::try_parse_from(std::iter::once("t").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

#[test]
fn kserve_defaults_are_the_library_defaults_and_flags_reach_it() {
    use sut_node::backend::kserve::KserveOptions;
    let o: KserveOptions = forwarders(&[]).kserve.into();
    assert_eq!(o, KserveOptions::default());
    let o: KserveOptions = forwarders(&[
        "--kserve-input-shape",
        "-1,4",
        "--kserve-stream",
        "--kserve-output-name",
        "y",
        "--kserve-timeout",
        "2.5",
    ])
    .kserve
    .into();
    assert_eq!(o.kserve_input_shape.as_deref(), Some("-1,4"));
    assert_eq!(o.kserve_output_name.as_deref(), Some("y"));
    assert!(o.kserve_stream);
    assert_eq!(o.kserve_timeout, 2.5);
}

#[test]
fn openai_defaults_are_the_library_defaults_and_kinds_map() {
    use sut_node::backend::openai::{AnswerKind, OpenaiOptions, PromptKind};
    let o: OpenaiOptions = forwarders(&[]).openai.into();
    assert_eq!(o, OpenaiOptions::default());
    let o: OpenaiOptions = forwarders(&[
        "--openai-prompt",
        "text",
        "--openai-answer",
        "token-ids",
        "--openai-max-tokens",
        "7",
    ])
    .openai
    .into();
    assert_eq!(o.openai_prompt, PromptKind::Text);
    assert_eq!(o.openai_answer, AnswerKind::TokenIds);
    assert_eq!(o.openai_max_tokens, 7);
    assert!(Forwarders::try_parse_from(["t", "--openai-max-tokens", "0"]).is_err());
}

#[cfg(feature = "llm")]
#[test]
fn llm_defaults_are_the_library_defaults_and_dtypes_map() {
    use sut_node::backend::llm::{self as lib, DeviceSpec, LlmOptions};
    #[derive(Parser, Debug)]
    struct Llm {
        #[command(flatten)]
        llm: llm::LlmArgs,
    }
    let parse = |args: &[&str]| -> LlmOptions {
        Llm::try_parse_from(std::iter::once("t").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
            .llm
            .into()
    };
    assert_eq!(parse(&[]), LlmOptions::default());
    let o = parse(&[
        "--device",
        "cuda:1",
        "--llm-input-dtype",
        "int64",
        "--llm-dtype",
        "bf16",
    ]);
    assert_eq!(o.device, DeviceSpec::Cuda(1));
    assert_eq!(o.llm_input_dtype, lib::TokenDtype::Int64);
    assert_eq!(o.llm_output_dtype, lib::TokenDtype::Int32);
    assert_eq!(o.llm_dtype, Some(lib::WeightDtype::Bf16));
}

#[cfg(feature = "onnx")]
#[test]
fn onnx_defaults_are_the_library_defaults_and_enums_map() {
    use sut_node::backend::onnx::{self as lib, OnnxOptions};
    #[derive(Parser, Debug)]
    struct Onnx {
        #[command(flatten)]
        onnx: onnx::OnnxArgs,
    }
    let parse = |args: &[&str]| -> OnnxOptions {
        Onnx::try_parse_from(std::iter::once("t").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
            .onnx
            .into()
    };
    assert_eq!(parse(&[]), OnnxOptions::default());
    let o = parse(&[
        "--provider",
        "tensorrt",
        "--onnx-output",
        "raw",
        "--onnx-label-dtype",
        "int64",
        "--onnx-label-offset",
        "-1",
    ]);
    assert_eq!(o.provider, lib::Provider::Tensorrt);
    assert_eq!(o.onnx_output, lib::OutputMode::Raw);
    assert_eq!(o.onnx_label_dtype, lib::LabelDtype::Int64);
    assert_eq!(o.onnx_label_offset, -1);
}
