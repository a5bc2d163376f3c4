//! The gRPC server's accept loop: connections within the limits (in total
//! and per IP address), a deadline for the TLS handshake or the first bytes,
//! an idle timeout, and no busy loop when accepting fails (out of file
//! descriptors): it waits and says so.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, Sleep};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;
use tracing::{debug, warn};

use crate::limits::Limits;
use crate::stop::stopped;

/// How long the loop waits after accepting failed.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// At most one warning of a kind per this time; the rest are counted.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// The connections served, by IP address, against the limits.
pub(crate) struct Slots {
    limits: Limits,
    counts: Arc<Mutex<Counts>>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// One connection's place; freed when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    ip: IpAddr,
    counts: Arc<Mutex<Counts>>,
}

impl Slots {
    pub(crate) fn new(limits: Limits) -> Self {
        Self {
            limits,
            counts: Arc::default(),
        }
    }

    /// A place for a connection from `ip`, or why there is none.
    pub(crate) fn take(&self, ip: IpAddr) -> Result<Slot, String> {
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if c.total >= self.limits.max_connections {
            return Err(format!(
                "{} connections open, the --max-connections limit",
                c.total
            ));
        }
        let mine = c.per_ip.entry(ip).or_default();
        if *mine >= self.limits.max_connections_per_peer {
            return Err(format!(
                "{mine} connections open from {ip}, the --max-connections-per-peer limit"
            ));
        }
        *mine += 1;
        c.total += 1;
        Ok(Slot {
            ip,
            counts: Arc::clone(&self.counts),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                c.per_ip.remove(&self.ip);
            }
        }
    }
}

/// Warnings of one kind, at most one per [`WARN_EVERY`].
#[derive(Default)]
pub(crate) struct Throttled {
    last: Option<Instant>,
    suppressed: u64,
}

impl Throttled {
    pub(crate) fn warn(&mut self, message: &str) {
        let now = Instant::now();
        if self.last.is_some_and(|t| now < t + WARN_EVERY) {
            self.suppressed += 1;
            return;
        }
        let more = std::mem::take(&mut self.suppressed);
        if more > 0 {
            warn!("{message} (and {more} more like it)");
        } else {
            warn!("{message}");
        }
        self.last = Some(now);
    }
}

/// The connections of `listener` within the limits, each through
/// `handshake` (TLS, or nothing) within the handshake timeout.
pub(crate) fn incoming<S, F, Fut>(
    listener: TcpListener,
    limits: Limits,
    stop: watch::Receiver<bool>,
    handshake: F,
) -> ReceiverStream<io::Result<Guarded<S>>>
where
    S: Send + 'static,
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = io::Result<S>> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let slots = Slots::new(limits);
        let (mut failed, mut refused) = (Throttled::default(), Throttled::default());
        let mut stop = stop;
        loop {
            let accepted = tokio::select! {
                _ = stopped(&mut stop) => return,
                a = listener.accept() => a,
            };
            let (tcp, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait, do not spin.
                    failed.warn(&format!(
                        "accepting a gRPC connection failed: {e}; retrying in {ACCEPT_RETRY:?}"
                    ));
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            };
            let slot = match slots.take(peer.ip()) {
                Ok(slot) => slot,
                Err(why) => {
                    refused.warn(&format!("gRPC connection from {peer} closed: {why}"));
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let (shake, tx) = (handshake(tcp), tx.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(limits.handshake_timeout, shake).await {
                    Ok(Ok(stream)) => {
                        debug!(%peer, "gRPC connection");
                        let _ = tx.send(Ok(Guarded::new(stream, slot, &limits))).await;
                    }
                    Ok(Err(e)) => warn!(%peer, "gRPC connection refused: {e}"),
                    Err(_) => warn!(
                        %peer,
                        "gRPC connection closed: no handshake within {:?}",
                        limits.handshake_timeout
                    ),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// A connection that holds its [`Slot`] and ends with an error when it has
/// carried nothing for too long: before its first bytes, the handshake
/// timeout; after them, the idle timeout.
pub(crate) struct Guarded<S> {
    inner: S,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
    started: bool,
    _slot: Slot,
}

impl<S> Guarded<S> {
    fn new(inner: S, slot: Slot, limits: &Limits) -> Self {
        Self {
            inner,
            idle: limits.idle_timeout,
            deadline: Box::pin(tokio::time::sleep(limits.handshake_timeout)),
            started: false,
            _slot: slot,
        }
    }

    fn active(&mut self) {
        self.started = true;
        self.deadline.as_mut().reset(Instant::now() + self.idle);
    }

    /// The error that ends the connection once its deadline has passed.
    fn expired(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        self.deadline.as_mut().poll(cx).is_ready().then(|| {
            let what = match self.started {
                true => "idle",
                false => "sent nothing",
            };
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("connection {what} too long"),
            )
        })
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.active();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match this.expired(cx) {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            },
            other => other,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) && this.started {
            this.active();
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) && this.started {
            this.active();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S: Connected> Connected for Guarded<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_bound_connections_in_total_and_per_address() {
        let slots = Slots::new(Limits {
            max_connections: 3,
            max_connections_per_peer: 2,
            ..Limits::default()
        });
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let a1 = slots.take(a).unwrap();
        let _a2 = slots.take(a).unwrap();
        assert!(slots
            .take(a)
            .unwrap_err()
            .contains("--max-connections-per-peer"));
        let _b1 = slots.take(b).unwrap();
        assert!(slots
            .take(b)
            .unwrap_err()
            .contains("--max-connections limit"));
        drop(a1);
        let _b2 = slots.take(b).unwrap();
    }

    #[tokio::test]
    async fn a_connection_ends_when_silent_then_when_idle() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let limits = Limits {
            handshake_timeout: Duration::from_millis(100),
            idle_timeout: Duration::from_millis(300),
            ..Limits::default()
        };
        let slots = Slots::new(limits);
        let ip: IpAddr = "10.0.0.1".parse().unwrap();

        let (_client, server) = tokio::io::duplex(64);
        let mut silent = Guarded::new(server, slots.take(ip).unwrap(), &limits);
        let e = silent.read(&mut [0u8; 8]).await.unwrap_err();
        assert!(e.to_string().contains("sent nothing"), "{e}");

        let (mut client, server) = tokio::io::duplex(64);
        let mut idle = Guarded::new(server, slots.take(ip).unwrap(), &limits);
        client.write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(idle.read(&mut buf).await.unwrap(), 5);
        let started = Instant::now();
        let e = idle.read(&mut buf).await.unwrap_err();
        assert!(e.to_string().contains("idle"), "{e}");
        // The idle timeout, not the (shorter) handshake one.
        assert!(started.elapsed() >= Duration::from_millis(300));
        drop((silent, idle));
        assert_eq!(slots.counts.lock().unwrap().total, 0, "places freed");
    }
}
