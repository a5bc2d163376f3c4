//! The connections' places within the limits (in total and per IP address,
//! for both transports; those in a session keep theirs), and the gRPC
//! server's accept loop: a refused client told why, a deadline for the TLS
//! handshake or the first bytes, an idle timeout, and no busy loop when
//! accepting fails (out of file descriptors): it waits and says so.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};
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

/// The connections served, against the limits (in total and per IP
/// address). A connection that has started a session keeps its place; when
/// the limits are reached, a new connection takes the place of the oldest
/// one that has started none (of its own address, when that address is at
/// its limit), which is closed: connections that never start a session
/// cannot lock a LoadGen node out.
pub(crate) struct Slots {
    limits: Limits,
    table: Arc<Mutex<Table>>,
}

#[derive(Default)]
struct Table {
    next: u64,
    /// By number: oldest first.
    open: BTreeMap<u64, Entry>,
    per_ip: HashMap<IpAddr, usize>,
    /// The number of the connection from each peer address.
    by_peer: HashMap<SocketAddr, u64>,
}

struct Entry {
    peer: SocketAddr,
    /// It has started a session that was accepted.
    session: bool,
    evict: Evict,
}

/// How to close a connection that must make room for another.
pub(crate) enum Evict {
    /// A TCP connection's socket (a descriptor of its own): shut down, the
    /// connection's reads and writes fail at once, whatever stage it is at.
    Socket(socket2::Socket),
    /// A QUIC connection's task closes it when notified.
    Notify(Arc<tokio::sync::Notify>),
    /// None: the node had no descriptor left to keep one of its own.
    Unable,
}

impl Evict {
    fn now(&self) {
        match self {
            Evict::Socket(socket) => {
                let _ = socket.shutdown(std::net::Shutdown::Both);
            }
            Evict::Notify(notify) => notify.notify_one(),
            Evict::Unable => {}
        }
    }
}

/// One connection's place; freed when dropped.
pub(crate) struct Slot {
    id: u64,
    table: Arc<Mutex<Table>>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Slot({})", self.id)
    }
}

/// A place taken: the slot, and the connection closed to make room for it
/// (its address and the limit), if one was.
pub(crate) struct Taken {
    pub(crate) slot: Slot,
    pub(crate) evicted: Option<(SocketAddr, String)>,
}

impl Slots {
    pub(crate) fn new(limits: Limits) -> Self {
        Self {
            limits,
            table: Arc::default(),
        }
    }

    /// A place for a connection from `peer`, closed with `evict` should it
    /// have to make room before it starts a session; or why there is none.
    pub(crate) fn take(&self, peer: SocketAddr, evict: Evict) -> Result<Taken, String> {
        let mut t = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let ip = peer.ip();
        let mine = t.per_ip.get(&ip).copied().unwrap_or(0);
        let limit = if mine >= self.limits.max_connections_per_peer {
            Some(format!(
                "{mine} connections open from {ip}, the --max-connections-per-peer limit"
            ))
        } else if t.open.len() >= self.limits.max_connections {
            Some(format!(
                "{} connections open, the --max-connections limit",
                t.open.len()
            ))
        } else {
            None
        };
        let mut evicted = None;
        if let Some(limit) = limit {
            // At its address's limit, only a connection of the same address
            // frees a place in both limits.
            let same_ip = mine >= self.limits.max_connections_per_peer;
            let victim = t
                .open
                .iter()
                .find(|(_, e)| {
                    !e.session
                        && !matches!(e.evict, Evict::Unable)
                        && (!same_ip || e.peer.ip() == ip)
                })
                .map(|(id, _)| *id);
            let Some(victim) = victim else {
                return Err(format!("{limit}, every one of them in a session"));
            };
            if let Some(e) = t.remove(victim) {
                e.evict.now();
                evicted = Some((e.peer, limit));
            }
        }
        let id = t.next;
        t.next += 1;
        *t.per_ip.entry(ip).or_default() += 1;
        t.by_peer.insert(peer, id);
        t.open.insert(
            id,
            Entry {
                peer,
                session: false,
                evict,
            },
        );
        Ok(Taken {
            slot: Slot {
                id,
                table: Arc::clone(&self.table),
            },
            evicted,
        })
    }

    /// Records whether the connection from `peer` has a session accepted:
    /// then it is never closed to make room.
    pub(crate) fn session(&self, peer: SocketAddr, accepted: bool) {
        let mut t = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(id) = t.by_peer.get(&peer).copied() else {
            return;
        };
        if let Some(e) = t.open.get_mut(&id) {
            e.session = accepted;
        }
    }
}

impl Table {
    fn remove(&mut self, id: u64) -> Option<Entry> {
        let e = self.open.remove(&id)?;
        let ip = e.peer.ip();
        if let Some(n) = self.per_ip.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.per_ip.remove(&ip);
            }
        }
        if self.by_peer.get(&e.peer) == Some(&id) {
            self.by_peer.remove(&e.peer);
        }
        Some(e)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut t = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        // Gone already if it was evicted.
        let _ = t.remove(self.id);
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

/// The connections of `listener` within the limits of `slots`, each through
/// `handshake` (TLS, or nothing) within the handshake timeout. With
/// `plain_http2` (no TLS), a refused client is told why in gRPC's terms.
pub(crate) fn incoming<S, F, Fut>(
    listener: TcpListener,
    slots: Arc<Slots>,
    limits: Limits,
    stop: watch::Receiver<bool>,
    plain_http2: bool,
    handshake: F,
) -> ReceiverStream<io::Result<Guarded<S>>>
where
    S: Send + 'static,
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = io::Result<S>> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let (mut failed, mut refused) = (Throttled::default(), Throttled::default());
        let mut evicted = Throttled::default();
        let telling = Arc::new(Semaphore::new(MAX_TOLD_AT_ONCE));
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
            // A descriptor of its own, to shut it down should it have to
            // make room for another (out of descriptors: it will not).
            let evict = match socket2::SockRef::from(&tcp).try_clone() {
                Ok(socket) => Evict::Socket(socket),
                Err(_) => Evict::Unable,
            };
            let taken = match slots.take(peer, evict) {
                Ok(taken) => taken,
                Err(why) => {
                    refused.warn(&format!("gRPC connection from {peer} refused: {why}"));
                    if plain_http2 {
                        tell_refused(tcp, &why, &telling);
                    }
                    continue;
                }
            };
            if let Some((other, limit)) = taken.evicted {
                evicted.warn(&format!(
                    "gRPC connection from {other} closed to make room for one from {peer}: \
                     it had started no session ({limit})"
                ));
            }
            let slot = taken.slot;
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

/// Refused clients told why at once, at most; the others are closed
/// without a word.
const MAX_TOLD_AT_ONCE: usize = 16;
/// How long a refused connection stays open for its client to read why.
const TELLING_TIME: Duration = Duration::from_secs(1);

/// Requests of a refused client answered, at most.
const MAX_TOLD_REQUESTS: usize = 4;

/// Tells a refused gRPC client why: its first requests are answered with
/// RESOURCE_EXHAUSTED and the reason (which its error then shows), then the
/// connection is closed; after [`TELLING_TIME`] at the most.
fn tell_refused(tcp: TcpStream, why: &str, telling: &Arc<Semaphore>) {
    let Ok(turn) = Arc::clone(telling).try_acquire_owned() else {
        return;
    };
    let status =
        tonic::Status::resource_exhausted(format!("sut-node refused the connection: {why}"));
    tokio::spawn(async move {
        let _turn = turn;
        let _ = tokio::time::timeout(TELLING_TIME, async {
            let mut conn = h2::server::handshake(tcp).await?;
            for _ in 0..MAX_TOLD_REQUESTS {
                let Some(request) = conn.accept().await else {
                    break;
                };
                let (_, mut respond) = request?;
                let _ = respond.send_response(refusal(&status), true);
                conn.graceful_shutdown();
            }
            // Until the client has read the answers and gone.
            std::future::poll_fn(|cx| conn.poll_closed(cx)).await
        })
        .await;
    });
}

/// A gRPC response of headers only: `status`.
fn refusal(status: &tonic::Status) -> http::Response<()> {
    let mut response = http::Response::new(());
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    if let Err(unsayable) = status.add_header(headers) {
        let _ = unsayable.add_header(headers);
    }
    response
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

    fn notify() -> (Evict, Arc<tokio::sync::Notify>) {
        let n = Arc::new(tokio::sync::Notify::new());
        (Evict::Notify(Arc::clone(&n)), n)
    }

    /// Whether `n` was notified (without waiting).
    fn notified(n: &tokio::sync::Notify) -> bool {
        let waiting = n.notified();
        tokio::pin!(waiting);
        waiting.as_mut().enable()
    }

    #[test]
    fn connections_without_a_session_make_room_oldest_first() {
        let slots = Slots::new(Limits {
            max_connections: 3,
            max_connections_per_peer: 2,
            ..Limits::default()
        });
        let addr = |s: &str| -> SocketAddr { s.parse().unwrap() };
        let take = |peer: &str| {
            let (evict, n) = notify();
            slots
                .take(addr(peer), evict)
                .map(|t| (t.slot, t.evicted, n))
        };
        let (_a1, none, a1_closed) = take("10.0.0.1:1").unwrap();
        assert!(none.is_none());
        let (a2, _, a2_closed) = take("10.0.0.1:2").unwrap();
        slots.session(addr("10.0.0.1:2"), true);
        // The address is at its limit: its oldest connection without a
        // session makes room, the one in a session stays.
        let (_a3, evicted, _) = take("10.0.0.1:3").unwrap();
        let (peer, limit) = evicted.unwrap();
        assert_eq!(peer, addr("10.0.0.1:1"));
        assert!(limit.contains("--max-connections-per-peer"), "{limit}");
        assert!(notified(&a1_closed) && !notified(&a2_closed));
        slots.session(addr("10.0.0.1:3"), true);
        let e = take("10.0.0.1:4").err().unwrap();
        assert!(
            e.contains("--max-connections-per-peer") && e.contains("in a session"),
            "{e}"
        );
        // The node is full (a2, a3, b1): a connection from elsewhere
        // replaces b1, the only one without a session.
        let (_b1, _, b1_closed) = take("10.0.0.2:1").unwrap();
        let (_c1, evicted, _) = take("10.0.0.3:1").unwrap();
        let (peer, limit) = evicted.unwrap();
        assert_eq!(peer, addr("10.0.0.2:1"));
        assert!(limit.contains("--max-connections limit"), "{limit}");
        assert!(notified(&b1_closed));
        slots.session(addr("10.0.0.3:1"), true);
        let e = take("10.0.0.4:1").err().unwrap();
        assert!(e.contains("--max-connections limit"), "{e}");
        // A session refused later: its connection may make room again.
        slots.session(addr("10.0.0.3:1"), false);
        let (_d1, evicted, _) = take("10.0.0.4:1").unwrap();
        assert_eq!(evicted.unwrap().0, addr("10.0.0.3:1"));
        // A place freed is free.
        drop(a2);
        let t = slots.table.lock().unwrap();
        assert_eq!((t.open.len(), t.per_ip.len(), t.by_peer.len()), (2, 2, 2));
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
        let take = |port| {
            let peer = SocketAddr::from(([10, 0, 0, 1], port));
            slots.take(peer, notify().0).unwrap().slot
        };

        let (_client, server) = tokio::io::duplex(64);
        let mut silent = Guarded::new(server, take(1), &limits);
        let e = silent.read(&mut [0u8; 8]).await.unwrap_err();
        assert!(e.to_string().contains("sent nothing"), "{e}");

        let (mut client, server) = tokio::io::duplex(64);
        let mut idle = Guarded::new(server, take(2), &limits);
        client.write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(idle.read(&mut buf).await.unwrap(), 5);
        let started = Instant::now();
        let e = idle.read(&mut buf).await.unwrap_err();
        assert!(e.to_string().contains("idle"), "{e}");
        // The idle timeout, not the (shorter) handshake one.
        assert!(started.elapsed() >= Duration::from_millis(300));
        drop((silent, idle));
        assert_eq!(slots.table.lock().unwrap().open.len(), 0, "places freed");
    }
}
