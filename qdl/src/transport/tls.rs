//! gRPC over TLS: a connector for tonic that opens the TCP connection
//! (Nagle off) and runs the TLS handshake with the QDL's own rustls
//! configuration, so pinning, CA checks and client certificates work as on
//! QUIC.

use std::sync::Arc;

use hyper_util::rt::TokioIo;
use proto::tls::rustls::pki_types::ServerName;
use proto::tls::{ClientTls, Presented};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use tonic::transport::Uri;

use crate::config::NodeAddr;
use crate::error::TransportError;

/// The TLS name of a node: the DNS name it was found by, else its host
/// name or IP address.
pub(crate) fn server_name(addr: &NodeAddr) -> Result<ServerName<'static>, TransportError> {
    let name = addr.tls_name.as_ref().unwrap_or(&addr.host);
    ServerName::try_from(name.clone())
        .map_err(|e| TransportError(format!("{name:?} is not a valid TLS server name: {e}")))
}

/// A connector for `Endpoint::connect_with_connector`, and where its
/// handshake records the certificate the node presented.
#[allow(clippy::type_complexity)]
pub(crate) fn grpc_connector(
    addr: &NodeAddr,
    tls: &ClientTls,
) -> Result<
    (
        impl tower::Service<
                Uri,
                Response = TokioIo<TlsStream<TcpStream>>,
                Error = std::io::Error,
                Future = impl Send,
            > + Send
            + Clone
            + 'static,
        Arc<Presented>,
    ),
    TransportError,
> {
    let (config, presented) = tls
        .client_config(b"h2")
        .map_err(|e| TransportError(e.to_string()))?;
    let connector = TlsConnector::from(Arc::new(config));
    let name = server_name(addr)?;
    let authority = addr.authority();
    let service = tower::service_fn(move |_: Uri| {
        let (connector, name, authority) = (connector.clone(), name.clone(), authority.clone());
        async move {
            let tcp = TcpStream::connect(&authority).await?;
            // Samples are small, latency-bound writes: never wait for Nagle.
            tcp.set_nodelay(true)?;
            let stream = connector.connect(name, tcp).await?;
            Ok(TokioIo::new(stream))
        }
    });
    Ok((service, presented))
}
