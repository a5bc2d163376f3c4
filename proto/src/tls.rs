//! TLS for both transports (QUIC always, gRPC on request), shared by both
//! ends: certificates (generated for development, or read from PEM files),
//! SHA-256 fingerprints and pinning, CA verification and mutual TLS.
//!
//! Everything uses rustls with the `ring` provider, TLS 1.3 only.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls13_signature, CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use sha2::{Digest, Sha256};

/// The rustls both ends build on, so that their versions never differ.
pub use rustls;

/// Why a certificate, key or TLS configuration could not be had.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file could not be read.
    #[error("cannot read {what} {path}: {source}")]
    Read {
        /// What the file was to hold (`certificate file`, `private key`).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file's PEM held no usable certificate or key.
    #[error("{path}: {reason}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What was wrong with its contents.
        reason: String,
    },
    /// A pinned fingerprint is not 64 hex digits (colons allowed).
    #[error("invalid certificate fingerprint {input:?}: {reason}")]
    Fingerprint {
        /// The fingerprint as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A self-signed certificate could not be generated.
    #[error("cannot generate a certificate: {0}")]
    Generate(String),
    /// rustls refused the configuration (versions, key, CA bundle).
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// The crypto of every TLS configuration here.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A certificate's SHA-256 fingerprint.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// The SHA-256 of `cert`'s DER bytes.
    pub(crate) fn of(cert: &CertificateDer<'_>) -> Self {
        Self(Sha256::digest(cert.as_ref()).into())
    }
}

/// Lowercase hex, 64 digits.
impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// 64 hex digits, either case, optionally in colon-separated pairs (as
/// `openssl x509 -fingerprint -sha256` prints them).
impl std::str::FromStr for Fingerprint {
    type Err = TlsError;

    fn from_str(input: &str) -> Result<Self, TlsError> {
        let bad = |reason: &str| TlsError::Fingerprint {
            input: input.to_string(),
            reason: reason.to_string(),
        };
        let hex: Vec<u8> = input.trim().bytes().filter(|b| *b != b':').collect();
        if hex.len() != 64 {
            return Err(bad("expected 64 hex digits (a SHA-256 digest)"));
        }
        let mut out = [0u8; 32];
        for (i, pair) in hex.chunks_exact(2).enumerate() {
            let digit = |c: u8| (c as char).to_digit(16);
            match (digit(pair[0]), digit(pair[1])) {
                (Some(h), Some(l)) => out[i] = (h * 16 + l) as u8,
                _ => return Err(bad("not a hex digit")),
            }
        }
        Ok(Self(out))
    }
}

/// A certificate chain and its private key.
pub struct Identity {
    /// The chain, leaf first.
    pub(crate) certs: Vec<CertificateDer<'static>>,
    /// The leaf's private key.
    pub(crate) key: PrivateKeyDer<'static>,
    /// Where it came from, for logs.
    pub origin: String,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("origin", &self.origin)
            .field("fingerprint", &self.fingerprint())
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// A self-signed certificate for `names` (DNS names or IP addresses),
    /// with a fresh key.
    pub fn self_signed(names: Vec<String>) -> Result<Self, TlsError> {
        let generated = rcgen::generate_simple_self_signed(names)
            .map_err(|e| TlsError::Generate(e.to_string()))?;
        Ok(Self {
            certs: vec![generated.cert.der().clone()],
            key: PrivateKeyDer::Pkcs8(generated.signing_key.serialize_der().into()),
            origin: "self-signed, generated at start".into(),
        })
    }

    /// A PEM certificate chain (leaf first) and a PEM private key.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let certs = read_certs(cert)?;
        let bytes = read(key, "private key")?;
        let key = PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::Pem {
            path: key.to_path_buf(),
            reason: format!("no usable private key: {e}"),
        })?;
        Ok(Self {
            certs,
            key,
            origin: cert.display().to_string(),
        })
    }

    /// The leaf certificate's fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        self.certs
            .first()
            .map(Fingerprint::of)
            .unwrap_or(Fingerprint([0; 32]))
    }

    fn parts(&self) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        (self.certs.clone(), self.key.clone_key())
    }
}

fn read(path: &Path, what: &'static str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// Every certificate of a PEM file; at least one.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(path, "certificate file")?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_path_buf(),
            reason: "no PEM certificate in it".into(),
        });
    }
    Ok(certs)
}

fn roots(certs: &[CertificateDer<'static>]) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for c in certs {
        store
            .add(c.clone())
            .map_err(|e| TlsError::Config(format!("unusable CA certificate: {e}")))?;
    }
    Ok(store)
}

/// A node's TLS: its identity and, for mutual TLS, the CA its clients'
/// certificates must be signed by.
pub fn server_config(
    identity: &Identity,
    client_ca: Option<&[CertificateDer<'static>]>,
    alpn: &[u8],
) -> Result<rustls::ServerConfig, TlsError> {
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider())
                    .build()
                    .map_err(|e| TlsError::Config(format!("client CA: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let (certs, key) = identity.parts();
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(format!("certificate and key: {e}")))?;
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(config)
}

/// How the LoadGen node checks a node's certificate.
#[derive(Clone, Debug)]
pub enum ServerCheck {
    /// The leaf certificate's SHA-256 fingerprint must be one of these.
    Pinned(Vec<Fingerprint>),
    /// The chain must lead to one of these CA certificates, for the node's
    /// host name or IP address.
    Ca(Vec<CertificateDer<'static>>),
    /// Any certificate (development only).
    Insecure,
}

/// The LoadGen node's TLS settings.
#[derive(Clone, Debug)]
pub struct ClientTls {
    /// How the node's certificate is checked.
    pub check: ServerCheck,
    /// The certificate to present to nodes that require one (mutual TLS).
    pub identity: Option<Arc<Identity>>,
}

/// How a user names the LoadGen node's TLS options: loadgen-node's flags
/// (`--tls-pin`) or the Python module's keyword arguments (`tls_pin`). The
/// rules are the same; only the names in the messages differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptionSpelling {
    /// loadgen-node's command-line flags: `--tls-pin`.
    Flag,
    /// The Python module's keyword arguments: `tls_pin`.
    Keyword,
}

impl OptionSpelling {
    /// `base` (`tls-pin`) as this spelling writes it.
    pub fn name(self, base: &str) -> String {
        match self {
            OptionSpelling::Flag => format!("--{base}"),
            OptionSpelling::Keyword => base.replace('-', "_"),
        }
    }
}

/// The LoadGen node's TLS options as given, before any file is read: one
/// way to check the nodes' certificates (pins, a CA bundle, or none at all)
/// and, for mutual TLS, a certificate and its key.
#[derive(Clone, Debug, Default)]
pub struct ClientTlsOptions<'a> {
    /// SHA-256 fingerprints of the nodes' leaf certificates (`tls-pin`), as
    /// 64 hex digits, colons allowed.
    pub pins: &'a [String],
    /// A PEM bundle of the CA certificates that nodes' chains must lead to
    /// (`tls-ca`).
    pub ca: Option<&'a Path>,
    /// Accept any certificate (`tls-insecure`; development only).
    pub insecure: bool,
    /// The PEM certificate chain to present for mutual TLS
    /// (`tls-client-cert`); goes with `client_key`.
    pub client_cert: Option<&'a Path>,
    /// The PEM private key of `client_cert` (`tls-client-key`).
    pub client_key: Option<&'a Path>,
}

/// Why TLS options were refused; the options are named as the user spelled
/// them.
#[derive(Debug, thiserror::Error)]
pub enum TlsOptionError {
    /// A client certificate without its key, or a key without its
    /// certificate.
    #[error("{cert} and {key} go together")]
    HalfAnIdentity {
        /// The certificate's option.
        cert: String,
        /// The key's option.
        key: String,
    },
    /// A client certificate, but no way to check the nodes' certificates.
    #[error("{cert}: also say how to check the sut-nodes' certificates: {checks}")]
    NoCheck {
        /// The client certificate's option.
        cert: String,
        /// The options that would say how, any one of them.
        checks: String,
    },
    /// More than one way to check the nodes' certificates.
    #[error("give only one of {checks}")]
    SeveralChecks {
        /// The options, of which only one may be given.
        checks: String,
    },
    /// An option's file or fingerprint was refused.
    #[error("{option}: {source}")]
    File {
        /// The option.
        option: String,
        /// Why it was refused.
        source: TlsError,
    },
}

impl ClientTlsOptions<'_> {
    /// The QDL's TLS settings: `None` when no option was given; otherwise
    /// exactly one check, and the client identity read from its files.
    pub fn resolve(&self, spelling: OptionSpelling) -> Result<Option<ClientTls>, TlsOptionError> {
        let name = |base| spelling.name(base);
        let file = |option: String, source| TlsOptionError::File { option, source };
        let checks = || {
            let [pin, ca, insecure] = ["tls-pin", "tls-ca", "tls-insecure"].map(name);
            format!("{pin}, {ca} and {insecure}")
        };
        let identity = match (self.client_cert, self.client_key) {
            (Some(cert), Some(key)) => Some(Arc::new(
                Identity::from_pem_files(cert, key).map_err(|e| {
                    let pair = format!("{}/{}", name("tls-client-cert"), name("tls-client-key"));
                    file(pair, e)
                })?,
            )),
            (None, None) => None,
            _ => {
                return Err(TlsOptionError::HalfAnIdentity {
                    cert: name("tls-client-cert"),
                    key: name("tls-client-key"),
                })
            }
        };
        let check = match (self.pins.is_empty(), self.ca, self.insecure) {
            (true, None, false) if identity.is_none() => return Ok(None),
            (true, None, false) => {
                return Err(TlsOptionError::NoCheck {
                    cert: name("tls-client-cert"),
                    checks: checks().replace(" and ", " or "),
                })
            }
            (false, None, false) => ServerCheck::Pinned(
                self.pins
                    .iter()
                    .map(|p| p.parse::<Fingerprint>())
                    .collect::<Result<_, _>>()
                    .map_err(|e| file(name("tls-pin"), e))?,
            ),
            (true, Some(ca), false) => {
                ServerCheck::Ca(read_certs(ca).map_err(|e| file(name("tls-ca"), e))?)
            }
            (true, None, true) => ServerCheck::Insecure,
            _ => return Err(TlsOptionError::SeveralChecks { checks: checks() }),
        };
        Ok(Some(ClientTls { check, identity }))
    }
}

/// What the node presented during a handshake, for error messages.
#[derive(Debug, Default)]
pub struct Presented(Mutex<Option<Fingerprint>>);

impl Presented {
    /// The fingerprint of the leaf certificate the node presented, if the
    /// handshake got that far.
    pub(crate) fn fingerprint(&self) -> Option<Fingerprint> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, f: Fingerprint) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(f);
    }
}

impl ClientTls {
    /// A client configuration for one connection, and where the handshake
    /// records the certificate the node presented.
    pub fn client_config(
        &self,
        alpn: &[u8],
    ) -> Result<(rustls::ClientConfig, Arc<Presented>), TlsError> {
        let presented = Arc::new(Presented::default());
        let verifier: Arc<dyn ServerCertVerifier> = match &self.check {
            ServerCheck::Pinned(pins) => Arc::new(Check {
                pins: Some(pins.clone()),
                webpki: None,
                presented: presented.clone(),
                algorithms: provider().signature_verification_algorithms,
            }),
            ServerCheck::Insecure => Arc::new(Check {
                pins: None,
                webpki: None,
                presented: presented.clone(),
                algorithms: provider().signature_verification_algorithms,
            }),
            ServerCheck::Ca(ca) => Arc::new(Check {
                pins: None,
                webpki: Some(
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots(ca)?), provider())
                        .build()
                        .map_err(|e| TlsError::Config(format!("CA bundle: {e}")))?,
                ),
                presented: presented.clone(),
                algorithms: provider().signature_verification_algorithms,
            }),
        };
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsError::Config(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let mut config = match &self.identity {
            None => builder.with_no_client_auth(),
            Some(id) => {
                let (certs, key) = id.parts();
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| TlsError::Config(format!("client certificate and key: {e}")))?
            }
        };
        config.alpn_protocols = vec![alpn.to_vec()];
        Ok((config, presented))
    }

    /// Why a handshake that failed after the node presented a certificate
    /// failed, when it is a pin mismatch: names both fingerprints.
    pub fn pin_mismatch(&self, presented: &Presented) -> Option<String> {
        let ServerCheck::Pinned(pins) = &self.check else {
            return None;
        };
        let seen = presented.fingerprint()?;
        if pins.contains(&seen) {
            return None;
        }
        let pinned: Vec<String> = pins.iter().map(|p| p.to_string()).collect();
        Some(format!(
            "TLS certificate pin mismatch: the node presented a certificate with SHA-256 \
             fingerprint {seen}, but the pinned fingerprint{} {}",
            if pins.len() == 1 { " is" } else { "s are" },
            pinned.join(", ")
        ))
    }
}

/// The client's certificate check: records the presented leaf, then checks
/// it against the pins, or the CA, or (insecure) not at all. Handshake
/// signatures are always verified.
#[derive(Debug)]
struct Check {
    pins: Option<Vec<Fingerprint>>,
    webpki: Option<Arc<WebPkiServerVerifier>>,
    presented: Arc<Presented>,
    algorithms: WebPkiSupportedAlgorithms,
}

#[derive(Debug, thiserror::Error)]
#[error("certificate SHA-256 fingerprint {0} is not pinned")]
struct NotPinned(Fingerprint);

impl ServerCertVerifier for Check {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let seen = Fingerprint::of(end_entity);
        self.presented.set(seen);
        if let Some(pins) = &self.pins {
            if !pins.contains(&seen) {
                return Err(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::Other(rustls::OtherError(Arc::new(NotPinned(seen)))),
                ));
            }
        }
        if let Some(webpki) = &self.webpki {
            return webpki.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            );
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        // Only TLS 1.3 is offered.
        Err(rustls::Error::PeerIncompatible(
            rustls::PeerIncompatible::Tls12NotOffered,
        ))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_parse_in_either_notation_and_print_as_hex() {
        let id = Identity::self_signed(vec!["localhost".into()]).unwrap();
        let f = id.fingerprint();
        let hex = f.to_string();
        assert_eq!(hex.len(), 64);
        assert_eq!(hex.parse::<Fingerprint>().unwrap(), f);
        let colons: Vec<String> = f.0.iter().map(|b| format!("{b:02X}")).collect();
        assert_eq!(colons.join(":").parse::<Fingerprint>().unwrap(), f);
        for bad in ["", "abc", &"g".repeat(64), &hex[..62]] {
            assert!(bad.parse::<Fingerprint>().is_err(), "{bad}");
        }
        // Two generated certificates differ.
        let other = Identity::self_signed(vec!["localhost".into()]).unwrap();
        assert_ne!(other.fingerprint(), f);
    }

    #[test]
    fn configurations_build_for_every_mode() {
        let id = Identity::self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
        let ca = id.certs.clone();
        server_config(&id, None, b"x").unwrap();
        server_config(&id, Some(&ca), b"x").unwrap();
        for check in [
            ServerCheck::Pinned(vec![id.fingerprint()]),
            ServerCheck::Ca(ca.clone()),
            ServerCheck::Insecure,
        ] {
            let tls = ClientTls {
                check,
                identity: Some(Arc::new(
                    Identity::self_signed(vec!["client".into()]).unwrap(),
                )),
            };
            let (config, presented) = tls.client_config(b"x").unwrap();
            assert_eq!(config.alpn_protocols, vec![b"x".to_vec()]);
            assert_eq!(presented.fingerprint(), None);
            assert_eq!(tls.pin_mismatch(&presented), None);
        }
    }

    #[test]
    fn a_pin_mismatch_names_both_fingerprints() {
        let pinned: Fingerprint = "11".repeat(32).parse().unwrap();
        let seen: Fingerprint = "22".repeat(32).parse().unwrap();
        let tls = ClientTls {
            check: ServerCheck::Pinned(vec![pinned]),
            identity: None,
        };
        let presented = Presented::default();
        presented.set(seen);
        let why = tls.pin_mismatch(&presented).unwrap();
        assert!(
            why.contains(&pinned.to_string()) && why.contains(&seen.to_string()),
            "{why}"
        );
        presented.set(pinned);
        assert_eq!(tls.pin_mismatch(&presented), None);
    }

    #[test]
    fn tls_options_name_themselves_as_the_user_spelled_them() {
        let pin = "ab".repeat(32);
        let pins = [pin.clone()];
        let both = ClientTlsOptions {
            pins: &pins,
            insecure: true,
            ..ClientTlsOptions::default()
        };
        for (spelling, expected) in [
            (
                OptionSpelling::Flag,
                "give only one of --tls-pin, --tls-ca and --tls-insecure",
            ),
            (
                OptionSpelling::Keyword,
                "give only one of tls_pin, tls_ca and tls_insecure",
            ),
        ] {
            assert_eq!(both.resolve(spelling).unwrap_err().to_string(), expected);
        }
        let cert = Path::new("c.pem");
        let half = ClientTlsOptions {
            client_cert: Some(cert),
            ..ClientTlsOptions::default()
        };
        let e = half
            .resolve(OptionSpelling::Keyword)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "tls_client_cert and tls_client_key go together");
        let bad = ["xyz".to_string()];
        let e = ClientTlsOptions {
            pins: &bad,
            ..ClientTlsOptions::default()
        }
        .resolve(OptionSpelling::Keyword)
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("tls_pin: ") && e.contains("xyz"), "{e}");
        assert!(ClientTlsOptions::default()
            .resolve(OptionSpelling::Flag)
            .unwrap()
            .is_none());
        let pinned = ClientTlsOptions {
            pins: &pins,
            ..ClientTlsOptions::default()
        };
        match pinned.resolve(OptionSpelling::Flag).unwrap().unwrap().check {
            ServerCheck::Pinned(p) => assert_eq!(p[0].to_string(), pin),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn pem_files_are_read_with_clear_errors() {
        let dir = testkit::Scratch::new("proto-tls");
        let generated = rcgen::generate_simple_self_signed(vec!["node".to_string()]).unwrap();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert, generated.cert.pem()).unwrap();
        std::fs::write(&key, generated.signing_key.serialize_pem()).unwrap();
        let id = Identity::from_pem_files(&cert, &key).unwrap();
        assert_eq!(id.fingerprint(), Fingerprint::of(generated.cert.der()));

        let e = Identity::from_pem_files(&dir.join("missing.pem"), &key).unwrap_err();
        assert!(e.to_string().contains("missing.pem"), "{e}");
        let e = Identity::from_pem_files(&key, &key).unwrap_err();
        assert!(e.to_string().contains("no PEM certificate"), "{e}");
        let e = Identity::from_pem_files(&cert, &cert).unwrap_err();
        assert!(e.to_string().contains("private key"), "{e}");
    }
}
