//! Options of the kserve backend.

use sut_node::backend::kserve::KserveOptions;

/// Options of the kserve backend (with the shared `--server-url` and
/// `--model-name`).
#[derive(clap::Args, Debug, Clone)]
pub struct KserveArgs {
    /// Name of the model's input tensor [default: the only input in the
    /// model's metadata].
    #[arg(long, value_name = "NAME", help_heading = "KServe backend")]
    pub kserve_input_name: Option<String>,

    /// Datatype of the input tensor (KServe names: FP32, INT64, UINT8,
    /// BYTES, ...) [default: from the model's metadata].
    #[arg(long, value_name = "TYPE", help_heading = "KServe backend")]
    pub kserve_input_datatype: Option<String>,

    /// Shape of one sample's input tensor, comma-separated, e.g.
    /// 1,3,224,224; at most one -1, worked out from the sample's size
    /// [default: from the model's metadata, a leading -1 read as 1].
    #[arg(
        long,
        value_name = "DIMS",
        allow_hyphen_values = true,
        help_heading = "KServe backend"
    )]
    pub kserve_input_shape: Option<String>,

    /// Output tensor whose bytes are the answer [default: the first output
    /// of the response].
    #[arg(long, value_name = "NAME", help_heading = "KServe backend")]
    pub kserve_output_name: Option<String>,

    /// Version of the model to ask for [default: the server's choice].
    #[arg(
        long,
        value_name = "VERSION",
        default_value = "",
        hide_default_value = true,
        help_heading = "KServe backend"
    )]
    pub kserve_model_version: String,

    /// Send the requests over ModelStreamInfer (for decoupled models, e.g.
    /// LLMs on Triton) instead of ModelInfer.
    #[arg(long, help_heading = "KServe backend")]
    pub kserve_stream: bool,

    /// Seconds a request may take before its sample fails.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 60.0,
        help_heading = "KServe backend"
    )]
    pub kserve_timeout: f64,
}

impl From<KserveArgs> for KserveOptions {
    fn from(a: KserveArgs) -> Self {
        Self {
            kserve_input_name: a.kserve_input_name,
            kserve_input_datatype: a.kserve_input_datatype,
            kserve_input_shape: a.kserve_input_shape,
            kserve_output_name: a.kserve_output_name,
            kserve_model_version: a.kserve_model_version,
            kserve_stream: a.kserve_stream,
            kserve_timeout: a.kserve_timeout,
        }
    }
}
