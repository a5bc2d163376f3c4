//! The LoadGen node's TLS options: how sut-node certificates are checked
//! (pinned fingerprints, a CA bundle, or, for development, not at all) and
//! the client certificate of mutual TLS.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use proto::tls::{ClientTls, ClientTlsOptions, OptionSpelling};

/// TLS: always on for `quic://` nodes; for gRPC, on with any of these flags
/// (or a `grpcs://` address).
#[derive(Args, serde::Serialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsArgs {
    /// Accept only sut-node certificates with one of these SHA-256
    /// fingerprints (64 hex digits, colons allowed; each sut-node prints its
    /// own at start). Comma-separated.
    #[arg(
        long,
        value_name = "SHA256HEX[,...]",
        value_delimiter = ',',
        help_heading = "TLS"
    )]
    pub tls_pin: Vec<String>,

    /// Accept sut-node certificates signed by a CA of this PEM bundle, for
    /// the host name or IP address in --sut.
    #[arg(long, value_name = "FILE", help_heading = "TLS")]
    pub tls_ca: Option<PathBuf>,

    /// Accept any sut-node certificate, unverified (development only: a
    /// warning is printed).
    #[arg(long, help_heading = "TLS")]
    pub tls_insecure: bool,

    /// Mutual TLS: the certificate (PEM) to present to sut-nodes that
    /// require one.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_client_key",
        help_heading = "TLS"
    )]
    pub tls_client_cert: Option<PathBuf>,

    /// The private key (PEM) of --tls-client-cert.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_client_cert",
        help_heading = "TLS"
    )]
    pub tls_client_key: Option<PathBuf>,
}

impl TlsArgs {
    /// The QDL's TLS settings; `None` when no TLS flag was given.
    pub fn client_tls(&self) -> Result<Option<ClientTls>> {
        let options = ClientTlsOptions {
            pins: &self.tls_pin,
            ca: self.tls_ca.as_deref(),
            insecure: self.tls_insecure,
            client_cert: self.tls_client_cert.as_deref(),
            client_key: self.tls_client_key.as_deref(),
        };
        Ok(options.resolve(OptionSpelling::Flag)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::tls::ServerCheck;

    #[test]
    fn flags_map_to_one_check() {
        assert!(TlsArgs::default().client_tls().unwrap().is_none());
        let pin = "ab".repeat(32);
        let t = TlsArgs {
            tls_pin: vec![pin.clone(), "CD".repeat(32)],
            ..TlsArgs::default()
        };
        match t.client_tls().unwrap().unwrap().check {
            ServerCheck::Pinned(p) => {
                assert_eq!(p.len(), 2);
                assert_eq!(p[0].to_string(), pin);
            }
            other => panic!("{other:?}"),
        }
        let insecure = TlsArgs {
            tls_insecure: true,
            ..TlsArgs::default()
        };
        assert!(matches!(
            insecure.client_tls().unwrap().unwrap().check,
            ServerCheck::Insecure
        ));
        let both = TlsArgs {
            tls_insecure: true,
            tls_pin: vec![pin],
            ..TlsArgs::default()
        };
        assert!(both
            .client_tls()
            .unwrap_err()
            .to_string()
            .contains("only one"));
        let bad = TlsArgs {
            tls_pin: vec!["xyz".into()],
            ..TlsArgs::default()
        };
        let e = format!("{:#}", bad.client_tls().unwrap_err());
        assert!(e.contains("--tls-pin") && e.contains("xyz"), "{e}");
        let missing = TlsArgs {
            tls_ca: Some("/nonexistent/ca.pem".into()),
            ..TlsArgs::default()
        };
        let e = format!("{:#}", missing.client_tls().unwrap_err());
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
    }
}
