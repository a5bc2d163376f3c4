//! The node's TLS: its certificate (from PEM files, or self-signed at start
//! for development), the client CA of mutual TLS, the rustls configuration
//! of each transport, and the TLS acceptor in front of the gRPC server.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use proto::tls::rustls::pki_types::CertificateDer;
use proto::tls::{self, Fingerprint, Identity, TlsError};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tracing::{debug, warn};

use crate::server::stopped;

/// A client that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The node's certificate and, with mutual TLS, the CA of its clients.
#[derive(Debug)]
pub struct NodeTls {
    pub identity: Identity,
    pub client_ca: Option<Vec<CertificateDer<'static>>>,
}

impl NodeTls {
    /// `cert` and `key` (PEM) if given, else a self-signed certificate for
    /// `names` and the node's loopback names; `client_ca` (PEM) turns on
    /// mutual TLS.
    pub fn load(
        cert_and_key: Option<(&Path, &Path)>,
        client_ca: Option<&Path>,
        names: &[String],
        addrs: &[SocketAddr],
    ) -> Result<Self, TlsError> {
        let identity = match cert_and_key {
            Some((cert, key)) => Identity::from_pem_files(cert, key)?,
            None => Identity::self_signed(subject_names(names, addrs))?,
        };
        let client_ca = client_ca.map(tls::read_certs).transpose()?;
        Ok(Self {
            identity,
            client_ca,
        })
    }

    pub fn fingerprint(&self) -> Fingerprint {
        self.identity.fingerprint()
    }

    /// The configuration of a transport, by its ALPN protocol.
    pub fn server_config(&self, alpn: &[u8]) -> Result<rustls::ServerConfig, TlsError> {
        tls::server_config(&self.identity, self.client_ca.as_deref(), alpn)
    }
}

/// The names a generated certificate is for: loopback, the given names that
/// are valid host names, and the listening addresses.
fn subject_names(names: &[String], addrs: &[SocketAddr]) -> Vec<String> {
    let mut out = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    for n in names {
        let host_like = !n.is_empty()
            && n.len() <= 253
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if host_like {
            out.push(n.clone());
        }
    }
    for a in addrs {
        let ip: IpAddr = a.ip();
        if !ip.is_unspecified() {
            out.push(ip.to_string());
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The TLS connections of `listener`, handshakes done, for the gRPC server.
/// Each handshake runs on its own (a slow client holds up no other); a
/// client that fails it (e.g. no certificate signed by the client CA, with
/// mutual TLS) is refused and logged.
pub(crate) fn incoming(
    listener: TcpListener,
    config: rustls::ServerConfig,
    stop: watch::Receiver<bool>,
) -> ReceiverStream<std::io::Result<TlsStream<TcpStream>>> {
    let acceptor = TlsAcceptor::from(std::sync::Arc::new(config));
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let mut stop = stop;
        loop {
            let accepted = tokio::select! {
                _ = stopped(&mut stop) => return,
                a = listener.accept() => a,
            };
            let (tcp, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: retry shortly.
                    warn!("accepting a gRPC connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        debug!(%peer, "TLS connection");
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Ok(Err(e)) => warn!(%peer, "TLS connection refused: {e}"),
                    Err(_) => warn!(%peer, "TLS handshake not done within {HANDSHAKE_TIMEOUT:?}"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_certificates_name_loopback_and_the_listening_addresses() {
        let addrs: Vec<SocketAddr> =
            vec!["0.0.0.0:1".parse().unwrap(), "10.1.2.3:1".parse().unwrap()];
        let names = subject_names(&["node-a".into(), "bad name!".into()], &addrs);
        for n in ["localhost", "127.0.0.1", "::1", "node-a", "10.1.2.3"] {
            assert!(names.contains(&n.to_string()), "{names:?}");
        }
        assert!(!names.iter().any(|n| n == "0.0.0.0" || n.contains(' ')));
        let tls = NodeTls::load(None, None, &["node-a".into()], &addrs).unwrap();
        assert!(tls.client_ca.is_none());
        tls.server_config(proto::quic::ALPN).unwrap();
        tls.server_config(b"h2").unwrap();
    }
}
