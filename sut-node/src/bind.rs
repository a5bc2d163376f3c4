//! The node's listening sockets: gRPC on TCP and QUIC on UDP, by default on
//! the same port number, with the TLS identity a transport needs. Nothing
//! here serves; [`bind`] hands [`server::serve_on`](crate::server::serve_on)
//! its [`Endpoints`].

use std::net::SocketAddr;
use std::path::PathBuf;

use proto::tls::{Fingerprint, TlsError};

use crate::limits::Limits;
use crate::server::Endpoints;
use crate::tls::NodeTls;

/// Where and how a node listens, as its options say.
#[derive(Debug, Clone)]
pub struct ListenPlan {
    /// `host:port` for gRPC (and QUIC on the same port); port 0 picks one.
    pub listen: String,
    /// Serve gRPC (TCP).
    pub grpc: bool,
    /// Serve QUIC (UDP).
    pub quic: bool,
    /// QUIC's own `host:port`, instead of the gRPC port's number on UDP.
    pub quic_listen: Option<String>,
    /// gRPC over TLS (QUIC always is).
    pub grpc_tls: bool,
    /// The node's certificate chain and key (PEM); `None`: self-signed at
    /// start.
    pub cert_and_key: Option<(PathBuf, PathBuf)>,
    /// Mutual TLS: the CA (PEM) client certificates must be signed by.
    pub client_ca: Option<PathBuf>,
    /// Whether `Describe` answers.
    pub describe: bool,
}

/// The node's certificate, for the line that prints its fingerprint.
#[derive(Debug, Clone)]
pub struct Certificate {
    /// Its SHA-256 fingerprint (what `loadgen-node --tls-pin` takes).
    pub fingerprint: Fingerprint,
    /// Where it came from: its files, or generated at start.
    pub origin: String,
    /// Whether clients must present a certificate (mutual TLS).
    pub mutual_tls: bool,
}

/// The sockets, bound.
pub struct Bound {
    /// What the server serves on.
    pub endpoints: Endpoints,
    /// gRPC's address, when gRPC is on.
    pub grpc_addr: Option<SocketAddr>,
    /// QUIC's address, when QUIC is on.
    pub quic_addr: Option<SocketAddr>,
    /// The certificate, when a transport uses TLS.
    pub certificate: Option<Certificate>,
}

/// Why the node could not listen.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Both transports are off.
    #[error("--no-grpc and --no-quic leave nothing to serve")]
    NothingToServe,
    /// An address that does not resolve.
    #[error("{option} {addr}: {reason}")]
    Address {
        /// The option that gave it.
        option: &'static str,
        /// The address as given.
        addr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The TLS identity or client CA.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The gRPC port.
    #[error("cannot listen for gRPC on TCP {addr}: {source}")]
    Grpc {
        /// The address as given.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The QUIC port.
    #[error(
        "cannot listen for QUIC on UDP {addr}{whose}: {source}; free that port, move QUIC with \
         --quic-listen ADDR, or turn it off with --no-quic"
    )]
    Quic {
        /// The address tried.
        addr: SocketAddr,
        /// " (the gRPC port's number, on UDP)" when it was that.
        whose: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// `--listen HOST:0`: every port picked for gRPC had its UDP twin
    /// taken.
    #[error("no free TCP port with a free UDP twin for gRPC and QUIC on {0} ({1} tries)")]
    NoTwinPorts(String, usize),
}

/// How many ports `--listen HOST:0` tries for gRPC before giving up on one
/// whose UDP twin is free too.
const TWIN_TRIES: usize = 20;

/// Binds what `plan` asks for. QUIC goes on `quic_listen`, or on the gRPC
/// port's number; with `listen HOST:0` the port is picked for gRPC first,
/// and another one if its UDP twin is taken. `name` goes into a self-signed
/// certificate with the host's name.
pub async fn bind(name: &str, plan: &ListenPlan, limits: &Limits) -> Result<Bound, BindError> {
    if !plan.grpc && !plan.quic {
        return Err(BindError::NothingToServe);
    }
    let grpc_tls_on = plan.grpc && plan.grpc_tls;
    let listen_addr = resolve("--listen", &plan.listen).await?;
    let quic_listen = match &plan.quic_listen {
        Some(a) => Some(resolve("--quic-listen", a).await?),
        None => None,
    };

    let tls = if plan.quic || grpc_tls_on {
        let cert_and_key = plan
            .cert_and_key
            .as_ref()
            .map(|(c, k)| (c.as_path(), k.as_path()));
        let addrs: Vec<SocketAddr> = [Some(listen_addr), quic_listen]
            .into_iter()
            .flatten()
            .collect();
        let names = [name.to_string(), facts::host::hostname()];
        Some(NodeTls::load(
            cert_and_key,
            plan.client_ca.as_deref(),
            &names,
            &addrs,
        )?)
    } else {
        None
    };
    let certificate = tls.as_ref().map(|t| Certificate {
        fingerprint: t.fingerprint(),
        origin: t.identity.origin.clone(),
        mutual_tls: t.client_ca.is_some(),
    });
    let server_config = |alpn: &[u8]| -> Result<_, BindError> {
        match &tls {
            Some(tls) => Ok(tls.server_config(alpn)?),
            None => Err(TlsError::Config("TLS is not set up".into()).into()),
        }
    };
    let grpc_tls = grpc_tls_on.then(|| server_config(b"h2")).transpose()?;
    let quic_tls = plan
        .quic
        .then(|| server_config(proto::quic::ALPN))
        .transpose()?;

    let bound = |grpc: Option<tokio::net::TcpListener>, quic: Option<quinn::Endpoint>| {
        let grpc_addr = grpc.as_ref().and_then(|l| l.local_addr().ok());
        let quic_addr = quic.as_ref().and_then(|e| e.local_addr().ok());
        Bound {
            endpoints: Endpoints {
                grpc,
                grpc_tls: grpc_tls.clone(),
                quic,
                describe: plan.describe,
            },
            grpc_addr,
            quic_addr,
            certificate: certificate.clone(),
        }
    };
    let bind_grpc = || async {
        tokio::net::TcpListener::bind(listen_addr)
            .await
            .map_err(|source| BindError::Grpc {
                addr: plan.listen.clone(),
                source,
            })
    };
    let Some(quic_tls) = quic_tls else {
        return Ok(bound(Some(bind_grpc().await?), None));
    };
    let bind_quic = |addr: SocketAddr| crate::quic::endpoint(addr, quic_tls.clone(), limits);
    if !plan.grpc {
        let target = quic_listen.unwrap_or(listen_addr);
        let quic = bind_quic(target).map_err(|source| BindError::Quic {
            addr: target,
            whose: "",
            source,
        })?;
        return Ok(bound(None, Some(quic)));
    }
    if let Some(target) = quic_listen {
        let grpc = bind_grpc().await?;
        let quic = bind_quic(target).map_err(|source| BindError::Quic {
            addr: target,
            whose: "",
            source,
        })?;
        return Ok(bound(Some(grpc), Some(quic)));
    }
    // QUIC on the gRPC port's number.
    let tries = if listen_addr.port() == 0 {
        TWIN_TRIES
    } else {
        1
    };
    for _ in 0..tries {
        let grpc = bind_grpc().await?;
        let port = grpc
            .local_addr()
            .map_err(|source| BindError::Grpc {
                addr: plan.listen.clone(),
                source,
            })?
            .port();
        let twin = SocketAddr::new(listen_addr.ip(), port);
        match twin_attempt(bind_quic(twin), tries > 1) {
            Twin::Bound(quic) => return Ok(bound(Some(grpc), Some(quic))),
            Twin::TryAnother => continue,
            Twin::Failed(source) => {
                return Err(BindError::Quic {
                    addr: twin,
                    whose: " (the gRPC port's number, on UDP)",
                    source,
                })
            }
        }
    }
    Err(BindError::NoTwinPorts(plan.listen.clone(), tries))
}

/// What one try at QUIC on the gRPC port's twin came to.
enum Twin<E> {
    Bound(E),
    /// The twin is taken and the gRPC port was picked: pick another.
    TryAnother,
    Failed(std::io::Error),
}

/// The rule for one try: a taken twin of a picked port means another try;
/// any other failure, or a taken twin of a port the user named, is final.
fn twin_attempt<E>(result: std::io::Result<E>, port_was_picked: bool) -> Twin<E> {
    match result {
        Ok(e) => Twin::Bound(e),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && port_was_picked => Twin::TryAnother,
        Err(e) => Twin::Failed(e),
    }
}

/// `addr` (`host:port`) resolved to its first address.
async fn resolve(option: &'static str, addr: &str) -> Result<SocketAddr, BindError> {
    let refused = |reason: String| BindError::Address {
        option,
        addr: addr.to_string(),
        reason,
    };
    tokio::net::lookup_host(addr)
        .await
        .map_err(|e| refused(format!("not a usable host:port ({e})")))?
        .next()
        .ok_or_else(|| refused("resolves to no address".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Error, ErrorKind};

    fn plan(listen: &str) -> ListenPlan {
        ListenPlan {
            listen: listen.into(),
            grpc: true,
            quic: true,
            quic_listen: None,
            grpc_tls: false,
            cert_and_key: None,
            client_ca: None,
            describe: true,
        }
    }

    #[test]
    fn a_taken_twin_is_tried_again_only_for_a_picked_port() {
        let taken = || Err::<(), _>(Error::from(ErrorKind::AddrInUse));
        assert!(matches!(twin_attempt(taken(), true), Twin::TryAnother));
        assert!(matches!(twin_attempt(taken(), false), Twin::Failed(_)));
        let denied = Err::<(), _>(Error::from(ErrorKind::PermissionDenied));
        assert!(matches!(twin_attempt(denied, true), Twin::Failed(_)));
        assert!(matches!(twin_attempt(Ok(()), false), Twin::Bound(())));
    }

    #[tokio::test]
    async fn quic_goes_on_the_grpc_ports_number() {
        let b = bind("n", &plan("127.0.0.1:0"), &Limits::default())
            .await
            .expect("bound");
        let (grpc, quic) = (b.grpc_addr.expect("grpc"), b.quic_addr.expect("quic"));
        assert_eq!(grpc.port(), quic.port());
        assert!(b.certificate.is_some_and(|c| !c.mutual_tls));
    }

    #[tokio::test]
    async fn a_named_port_whose_twin_is_taken_says_how_to_move_quic() {
        // UDP held; its TCP twin taken meanwhile by someone else would end
        // this test with gRPC's error instead: then try another.
        for _ in 0..20 {
            let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
            let port = udp.local_addr().expect("its address").port();
            match bind("n", &plan(&format!("127.0.0.1:{port}")), &Limits::default()).await {
                Err(BindError::Grpc { .. }) => continue,
                Err(e @ BindError::Quic { .. }) => {
                    let e = e.to_string();
                    assert!(
                        e.contains(&format!("UDP 127.0.0.1:{port} (the gRPC port's number"))
                            && e.contains("--quic-listen"),
                        "{e}"
                    );
                    return;
                }
                Err(e) => panic!("{e}"),
                Ok(_) => panic!("QUIC bound on a UDP port held by this test"),
            }
        }
        panic!("every TCP twin tried was taken");
    }

    #[tokio::test]
    async fn nothing_to_serve_and_bad_addresses_are_refused() {
        let mut nothing = plan("127.0.0.1:0");
        nothing.grpc = false;
        nothing.quic = false;
        let e = bind("n", &nothing, &Limits::default())
            .await
            .err()
            .expect("refused");
        assert!(matches!(e, BindError::NothingToServe));
        let e = bind("n", &plan("no-port"), &Limits::default())
            .await
            .err()
            .expect("refused");
        assert!(e.to_string().starts_with("--listen no-port: "), "{e}");
        let mut only_quic = plan("127.0.0.1:0");
        only_quic.grpc = false;
        let b = bind("n", &only_quic, &Limits::default())
            .await
            .expect("bound");
        assert!(b.grpc_addr.is_none() && b.quic_addr.is_some());
    }
}
