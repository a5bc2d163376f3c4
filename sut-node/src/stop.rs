//! The node's shutdown signal, as every task waits on it.

use tokio::sync::watch;

/// Completes once the node is shutting down.
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    // An error means the node is gone, which is a stop too.
    let _ = stop.wait_for(|s| *s).await;
}
