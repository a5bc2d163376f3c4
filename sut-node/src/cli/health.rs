//! `sut-node health`: one `Health` call to a running node, for container
//! health checks and scripts.

use anyhow::{Context, Result};
use clap::Args;
use facts::exit::Exit;

#[derive(Args, Debug)]
pub struct HealthArgs {
    /// The node's gRPC address.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:50051")]
    addr: String,

    /// Give up after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 3.0)]
    timeout: f64,
}

/// Asks the node whether it is ready: `Done` when it is, `NotReady` when it
/// says it is not; an error when it does not answer.
pub async fn health(args: HealthArgs) -> Result<Exit> {
    use proto::sut_node_client::SutNodeClient;
    let url = format!("http://{}", args.addr);
    let limit = sut_node::timeout_secs(args.timeout).with_context(|| {
        format!(
            "--timeout {}: must be a number of seconds, more than 0 and at most a year (31536000)",
            args.timeout
        )
    })?;
    let ask = async {
        let mut client = SutNodeClient::connect(url).await?;
        let reply = client.health(proto::HealthRequest {}).await?.into_inner();
        anyhow::Ok(reply)
    };
    let reply = tokio::time::timeout(limit, ask)
        .await
        .with_context(|| format!("{}: no answer within {:.1} s", args.addr, args.timeout))?
        .with_context(|| format!("{}: health check failed", args.addr))?;
    println!(
        "{}: {} ({} samples outstanding)",
        args.addr,
        if reply.ready { "ready" } else { "not ready" },
        reply.outstanding
    );
    Ok(if reply.ready {
        Exit::Done
    } else {
        Exit::NotReady
    })
}
