//! The node's TLS: its certificate (from PEM files, or self-signed at start
//! for development), the client CA of mutual TLS, the rustls configuration
//! of each transport (the gRPC server's acceptor runs in `listen.rs`).

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use proto::tls::rustls::pki_types::CertificateDer;
use proto::tls::{self, Fingerprint, Identity, TlsError};

/// The node's certificate and, with mutual TLS, the CA of its clients.
#[derive(Debug)]
pub struct NodeTls {
    /// The certificate chain and private key the node presents.
    pub(crate) identity: Identity,
    /// With mutual TLS: the CA certificates a client's certificate must
    /// chain to; `None`: clients are not authenticated.
    pub(crate) client_ca: Option<Vec<CertificateDer<'static>>>,
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

    /// The SHA-256 fingerprint of the node's certificate, which a LoadGen
    /// node pins with `--tls-pin`.
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
