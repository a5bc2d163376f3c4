//! Where the binary's logs and spans go: stderr (RUST_LOG, default info),
//! and an OTLP collector with `serve --otlp`.

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Result;
use tracing_subscriber::EnvFilter;

/// How long, at exit, queued spans may take to reach the collector.
pub const OTLP_FLUSH: Duration = Duration::from_secs(5);

/// Sets up logging, and the OTLP exporter of node `name` when `otlp` names
/// a collector. Call once, from inside the runtime.
pub fn start(otlp: Option<&str>, name: &str) -> Result<Option<otlp::Otlp>> {
    use tracing_subscriber::prelude::*;
    let exporter = match otlp {
        Some(endpoint) => {
            let mut settings = otlp::Settings::new(endpoint, "sut-node");
            settings
                .attributes
                .push(("service.instance.id".into(), name.to_string()));
            let exporter = otlp::Otlp::start(settings)?;
            sut_node::otlp::enable();
            Some(exporter)
        }
        None => None,
    };
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")));
    tracing_subscriber::registry()
        .with(log)
        .with(exporter.as_ref().map(|e| e.layer()))
        .init();
    Ok(exporter)
}
