//! The connections' places within the limits (in total and per IP address,
//! for both transports; those whose session has carried samples keep
//! theirs), and the gRPC
//! server's accept loop: a refused client told why, a deadline for the TLS
//! handshake or the first bytes, an idle timeout, and no busy loop when
//! accepting fails (out of file descriptors): it waits and says so.
//!
//! The timing rules are plain state handed the time: `Liveness` (the
//! handshake and idle timeouts), `Throttled` (warnings at most one per
//! `WARN_EVERY`) and `AcceptRetry` (no accept before `ACCEPT_RETRY` after a
//! failed one). The accept loop and `Guarded` only sleep until the deadline
//! they give and report what happened.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::time::Sleep;
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
/// address). When the limits are reached, a new connection takes the place
/// of another (of its own address, when that address is at its limit),
/// which is closed: the oldest that has started no session, or else the
/// oldest whose session has sent no sample yet. Only a connection whose
/// session has carried samples keeps its place whatever comes: neither
/// connections that never start a session nor sessions that never send a
/// sample can lock a LoadGen node out. (With mutual TLS every client holds
/// a certificate of the client CA; they rank alike.)
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
    stage: Stage,
    evict: Evict,
}

/// How far a connection has come; the later, the longer it keeps its place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    /// No session accepted.
    Open,
    /// A session accepted, no sample sent on it yet.
    Session,
    /// Its session has carried samples: it is a run's, never closed.
    Samples,
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
/// (its address and why: the limit, and how far it had come), if one was.
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
            let candidates = |stage: Stage| {
                t.open
                    .iter()
                    .find(|(_, e)| {
                        e.stage == stage
                            && !matches!(e.evict, Evict::Unable)
                            && (!same_ip || e.peer.ip() == ip)
                    })
                    .map(|(id, _)| *id)
            };
            let victim = candidates(Stage::Open).or_else(|| candidates(Stage::Session));
            let Some(victim) = victim else {
                return Err(format!(
                    "{limit}, every one of them in a session that has carried samples"
                ));
            };
            if let Some(e) = t.remove(victim) {
                e.evict.now();
                let stage = match e.stage {
                    Stage::Open => "it had started no session",
                    _ => "its session had sent no sample",
                };
                evicted = Some((e.peer, format!("{stage}; {limit}")));
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
                stage: Stage::Open,
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
    /// then it is closed to make room only after those that have none.
    pub(crate) fn session(&self, peer: SocketAddr, accepted: bool) {
        self.set_stage(peer, |s| match (accepted, s) {
            (false, _) => Stage::Open,
            (true, Stage::Samples) => Stage::Samples,
            (true, _) => Stage::Session,
        });
    }

    /// Records that the connection from `peer` has sent a sample in its
    /// session: then it is never closed to make room.
    pub(crate) fn samples(&self, peer: SocketAddr) {
        self.set_stage(peer, |s| match s {
            Stage::Open => Stage::Open,
            _ => Stage::Samples,
        });
    }

    fn set_stage(&self, peer: SocketAddr, next: impl FnOnce(Stage) -> Stage) {
        let mut t = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(id) = t.by_peer.get(&peer).copied() else {
            return;
        };
        if let Some(e) = t.open.get_mut(&id) {
            e.stage = next(e.stage);
        }
    }
}

/// An Infer stream's messages, which tell the connection's place of its
/// first sample (see [`Slots::samples`]).
pub(crate) struct SamplesSeen<S> {
    inner: S,
    slots: Option<(Arc<Slots>, SocketAddr)>,
}

impl<S> SamplesSeen<S> {
    pub(crate) fn new(inner: S, slots: Arc<Slots>, peer: Option<SocketAddr>) -> Self {
        Self {
            inner,
            slots: peer.map(|p| (slots, p)),
        }
    }
}

impl<S, E> tokio_stream::Stream for SamplesSeen<S>
where
    S: tokio_stream::Stream<Item = Result<proto::ToNode, E>> + Unpin,
{
    type Item = Result<proto::ToNode, E>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = Pin::new(&mut self.inner).poll_next(cx);
        if let Poll::Ready(Some(Ok(m))) = &next {
            if matches!(m.kind, Some(proto::to_node::Kind::Sample(_))) {
                if let Some((slots, peer)) = self.slots.take() {
                    slots.samples(peer);
                }
            }
        }
        next
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
        match self.on_warning(now()) {
            None => {}
            Some(0) => warn!("{message}"),
            Some(more) => warn!("{message} (and {more} more like it)"),
        }
    }

    /// A warning at `now`: `Some(warnings suppressed since the last one
    /// logged)` if this one is logged, `None` if it is suppressed.
    fn on_warning(&mut self, now: Instant) -> Option<u64> {
        if self.last.is_some_and(|t| now < t + WARN_EVERY) {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// The accept loop's rule after a failed accept (out of file descriptors,
/// say): no new try before `ACCEPT_RETRY` has passed, so that the loop
/// waits rather than spins.
#[derive(Debug, Default)]
struct AcceptRetry {
    resume_at: Option<Instant>,
}

impl AcceptRetry {
    /// Accepting failed at `now`.
    fn on_failed(&mut self, now: Instant) {
        self.resume_at = Some(now + ACCEPT_RETRY);
    }

    /// Until when the loop, at `now`, waits before it accepts again;
    /// `None`: it accepts now.
    fn wait_until(&self, now: Instant) -> Option<Instant> {
        self.resume_at.filter(|at| now < *at)
    }
}

/// The listeners' clock: tokio's, so that paused time pauses it.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
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
        let mut retry = AcceptRetry::default();
        loop {
            if let Some(at) = retry.wait_until(now()) {
                tokio::time::sleep_until(at.into()).await;
            }
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
                    retry.on_failed(now());
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
                        tell_refused(tcp, &why, &telling, TELLING_TIME);
                    }
                    continue;
                }
            };
            if let Some((other, limit)) = taken.evicted {
                evicted.warn(&format!(
                    "gRPC connection from {other} closed to make room for one from {peer}: \
                     {limit}"
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

/// Tells a refused gRPC client why: each of its first requests is answered
/// with RESOURCE_EXHAUSTED and the reason (which its error then shows), and
/// the connection stays open until the client goes, [`MAX_TOLD_REQUESTS`]
/// are answered, or `within` has passed. No GOAWAY goes with the answers
/// before the last: one that reaches a client between its request and its
/// next check of the connection fails that request with the GOAWAY (hyper's
/// client does that), and the reason is lost.
fn tell_refused(tcp: TcpStream, why: &str, telling: &Arc<Semaphore>, within: Duration) {
    let Ok(turn) = Arc::clone(telling).try_acquire_owned() else {
        return;
    };
    let status =
        tonic::Status::resource_exhausted(format!("sut-node refused the connection: {why}"));
    tokio::spawn(async move {
        let _turn = turn;
        let _ = tokio::time::timeout(within, async {
            let mut conn = h2::server::handshake(tcp).await?;
            let mut told = 0;
            while let Some(request) = conn.accept().await {
                let (_, mut respond) = request?;
                let _ = respond.send_response(refusal(&status), true);
                told += 1;
                if told == MAX_TOLD_REQUESTS {
                    conn.graceful_shutdown();
                    break;
                }
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

/// A connection's timing rule, handed the time: it ends once it has
/// carried nothing for too long. Before its first bytes from the client,
/// the handshake timeout; after them, the idle timeout, counted from the
/// latest bytes either way.
#[derive(Debug)]
struct Liveness {
    idle: Duration,
    deadline: Instant,
    /// The client has sent its first bytes.
    started: bool,
}

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Silence {
    /// Nothing from the client within the handshake timeout.
    NothingSent,
    /// Nothing either way within the idle timeout.
    Idle,
}

impl Liveness {
    /// A connection opened at `now`.
    fn new(now: Instant, limits: &Limits) -> Self {
        Self {
            idle: limits.idle_timeout,
            deadline: now + limits.handshake_timeout,
            started: false,
        }
    }

    /// Bytes came from the client at `now`.
    fn on_read(&mut self, now: Instant) {
        self.started = true;
        self.deadline = now + self.idle;
    }

    /// Bytes went to the client at `now`; they count only once the client
    /// has sent some. Returns whether the deadline moved.
    fn on_write(&mut self, now: Instant) -> bool {
        if self.started {
            self.deadline = now + self.idle;
        }
        self.started
    }

    fn next_deadline(&self) -> Instant {
        self.deadline
    }

    /// Why the connection ends at `now`, if it does.
    fn expired(&self, now: Instant) -> Option<Silence> {
        (now >= self.deadline).then_some(match self.started {
            true => Silence::Idle,
            false => Silence::NothingSent,
        })
    }
}

/// A connection that holds its [`Slot`] and ends with an error when it has
/// carried nothing for too long (see [`Liveness`]).
pub(crate) struct Guarded<S> {
    inner: S,
    liveness: Liveness,
    deadline: Pin<Box<Sleep>>,
    _slot: Slot,
}

impl<S> Guarded<S> {
    fn new(inner: S, slot: Slot, limits: &Limits) -> Self {
        let liveness = Liveness::new(now(), limits);
        let deadline = tokio::time::sleep_until(liveness.next_deadline().into());
        Self {
            inner,
            liveness,
            deadline: Box::pin(deadline),
            _slot: slot,
        }
    }

    fn bytes_read(&mut self) {
        self.liveness.on_read(now());
        self.rearm();
    }

    fn bytes_written(&mut self) {
        if self.liveness.on_write(now()) {
            self.rearm();
        }
    }

    fn rearm(&mut self) {
        let at = self.liveness.next_deadline();
        self.deadline.as_mut().reset(at.into());
    }

    /// The error that ends the connection once its deadline has passed.
    fn expired(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        if self.deadline.as_mut().poll(cx).is_pending() {
            return None;
        }
        // Ready: tokio's clock has reached the deadline.
        let passed = self.deadline.deadline().into_std();
        let what = match self.liveness.expired(passed)? {
            Silence::Idle => "idle",
            Silence::NothingSent => "sent nothing",
        };
        Some(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("connection {what} too long"),
        ))
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
                    this.bytes_read();
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
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.bytes_written();
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
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.bytes_written();
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
        // Both in sessions that have sent nothing: the older makes room.
        let (a4, evicted, _) = take("10.0.0.1:4").unwrap();
        let (peer, why) = evicted.unwrap();
        assert_eq!(peer, addr("10.0.0.1:2"));
        assert!(why.contains("its session had sent no sample"), "{why}");
        assert!(notified(&a2_closed));
        drop(a2);
        // Sessions that have carried samples keep their places.
        slots.session(addr("10.0.0.1:4"), true);
        slots.samples(addr("10.0.0.1:3"));
        slots.samples(addr("10.0.0.1:4"));
        let e = take("10.0.0.1:5").err().unwrap();
        assert!(
            e.contains("--max-connections-per-peer")
                && e.contains("in a session that has carried samples"),
            "{e}"
        );
        // The node is full (a3, a4, b1): a connection from elsewhere
        // replaces b1, the only one without a session.
        let (_b1, _, b1_closed) = take("10.0.0.2:1").unwrap();
        let (_c1, evicted, _) = take("10.0.0.3:1").unwrap();
        let (peer, limit) = evicted.unwrap();
        assert_eq!(peer, addr("10.0.0.2:1"));
        assert!(limit.contains("--max-connections limit"), "{limit}");
        assert!(notified(&b1_closed));
        slots.session(addr("10.0.0.3:1"), true);
        slots.samples(addr("10.0.0.3:1"));
        let e = take("10.0.0.4:1").err().unwrap();
        assert!(e.contains("--max-connections limit"), "{e}");
        // A session refused later: its connection may make room again.
        slots.session(addr("10.0.0.3:1"), false);
        let (_d1, evicted, _) = take("10.0.0.4:1").unwrap();
        assert_eq!(evicted.unwrap().0, addr("10.0.0.3:1"));
        // A place freed is free.
        drop(a4);
        let t = slots.table.lock().unwrap();
        assert_eq!((t.open.len(), t.per_ip.len(), t.by_peer.len()), (2, 2, 2));
    }

    fn limits() -> Limits {
        Limits {
            handshake_timeout: Duration::from_millis(100),
            idle_timeout: Duration::from_millis(300),
            ..Limits::default()
        }
    }

    const NS: Duration = Duration::from_nanos(1);

    #[test]
    fn a_silent_connection_ends_at_the_handshake_timeout() {
        let t0 = Instant::now();
        let shake = t0 + Duration::from_millis(100);
        let mut l = Liveness::new(t0, &limits());
        assert_eq!(l.next_deadline(), shake);
        assert_eq!(l.expired(shake - NS), None, "just before");
        assert_eq!(l.expired(shake), Some(Silence::NothingSent), "at");
        assert_eq!(l.expired(shake + NS), Some(Silence::NothingSent), "after");
        // The node's own bytes do not keep a silent client's connection.
        assert!(!l.on_write(t0 + Duration::from_millis(50)));
        assert_eq!(l.next_deadline(), shake);
    }

    #[test]
    fn a_connection_ends_once_idle_for_the_idle_timeout() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut l = Liveness::new(t0, &limits());
        l.on_read(t0 + ms(90));
        // The idle timeout now, not the (shorter) handshake one.
        let idle = t0 + ms(390);
        assert_eq!(l.next_deadline(), idle);
        assert_eq!(l.expired(t0 + ms(100)), None);
        assert_eq!(l.expired(idle - NS), None, "just before");
        assert_eq!(l.expired(idle), Some(Silence::Idle), "at");
        assert_eq!(l.expired(idle + NS), Some(Silence::Idle), "after");
        // Bytes either way push it back.
        assert!(l.on_write(t0 + ms(200)));
        assert_eq!(l.expired(idle), None);
        assert_eq!(l.next_deadline(), t0 + ms(500));
        l.on_read(t0 + ms(450));
        assert_eq!(l.expired(t0 + ms(750) - NS), None);
        assert_eq!(l.expired(t0 + ms(750)), Some(Silence::Idle));
    }

    #[test]
    fn warnings_of_a_kind_are_logged_at_most_once_per_interval() {
        let t0 = Instant::now();
        let mut w = Throttled::default();
        assert_eq!(w.on_warning(t0), Some(0));
        assert_eq!(w.on_warning(t0 + WARN_EVERY - NS), None, "just before");
        assert_eq!(w.on_warning(t0 + WARN_EVERY - NS), None);
        // At the interval's end: logged, with the count of those suppressed.
        assert_eq!(w.on_warning(t0 + WARN_EVERY), Some(2), "at");
        assert_eq!(w.on_warning(t0 + WARN_EVERY + NS), None);
        assert_eq!(w.on_warning(t0 + 3 * WARN_EVERY), Some(1), "after");
    }

    #[test]
    fn after_a_failed_accept_the_loop_waits_before_trying_again() {
        let t0 = Instant::now();
        let mut r = AcceptRetry::default();
        assert_eq!(r.wait_until(t0), None);
        r.on_failed(t0);
        let again = t0 + ACCEPT_RETRY;
        assert_eq!(r.wait_until(t0), Some(again), "at once: no spinning");
        assert_eq!(r.wait_until(again - NS), Some(again), "just before");
        assert_eq!(r.wait_until(again), None, "at");
        assert_eq!(r.wait_until(again + NS), None, "after");
        // Each failure starts the wait again.
        r.on_failed(again);
        assert_eq!(r.wait_until(again), Some(again + ACCEPT_RETRY));
    }

    #[tokio::test]
    async fn a_refused_client_is_told_why_at_each_request_and_never_sent_away_first() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let telling = Arc::new(Semaphore::new(1));
            tell_refused(tcp, "full", &telling, Duration::from_secs(60));
        });
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (client, conn) = h2::client::handshake(tcp).await.unwrap();
        let conn = tokio::spawn(conn);
        let ask = || {
            http::Request::post(format!("http://{addr}/sutnode.SutNode/StartSession"))
                .header("content-type", "application/grpc")
                .body(())
                .unwrap()
        };
        for n in 1..=MAX_TOLD_REQUESTS {
            // Ready again after an answer: no GOAWAY came with it (one
            // would fail this request, not tell it why).
            let mut ready = client.clone().ready().await.unwrap_or_else(|e| {
                panic!("request {n}: the connection was closed after an answer: {e}")
            });
            let (answer, _) = ready.send_request(ask(), true).unwrap();
            let answer = answer.await.unwrap();
            let status = tonic::Status::from_header_map(answer.headers()).expect("a gRPC status");
            assert_eq!(status.code(), tonic::Code::ResourceExhausted, "request {n}");
            assert!(
                status
                    .message()
                    .contains("sut-node refused the connection: full"),
                "request {n}: {}",
                status.message()
            );
        }
        // Then the node closes the connection.
        let ended = tokio::time::timeout(Duration::from_secs(60), conn).await;
        assert!(ended.is_ok(), "the connection is still open");
    }

    #[tokio::test]
    async fn a_connection_ends_when_silent_then_when_idle() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // When exactly is `Liveness`'s; here, that the connection wakes,
        // ends with the reason, and frees its place.
        let limits = Limits {
            handshake_timeout: Duration::from_millis(1),
            idle_timeout: Duration::from_millis(1),
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
        let e = idle.read(&mut buf).await.unwrap_err();
        assert!(e.to_string().contains("idle"), "{e}");
        drop((silent, idle));
        assert_eq!(slots.table.lock().unwrap().open.len(), 0, "places freed");
    }
}
