//! `tcp-floor`: raw TCP moving samples the way the QDL does, with nothing
//! else on the path: the floor against which the QDL's throughput, latency
//! and CPU per sample are read.
//!
//! ```text
//! tcp-floor serve [--listen 127.0.0.1:0] [--answer-bytes 16]
//! tcp-floor send --connect ADDR --streams N --bytes B (--secs S | --count C)
//!                [--window W] [--rate QPS] [--spin-us US] [--seed N]
//! ```
//!
//! Wire: each sample is a frame `[u32 big-endian length][payload]`; each
//! answer is `[u32 big-endian length][answer bytes]`.
//!
//! `serve` prints the bound port as its first stdout line, then accepts any
//! number of connections, one thread each. For every whole frame it reads it
//! writes one answer of `--answer-bytes` bytes; answers to frames that
//! arrived together are written in one `write` before the thread next
//! blocks reading. It runs until its stdin reaches end of file (the parent
//! closes it), then prints one JSON line `{"cpu_s", "samples", "bytes"}`
//! (its own user+system CPU seconds, the frames and payload bytes read) and
//! exits.
//!
//! `send` opens N connections (TCP_NODELAY), one thread each, and writes
//! every frame with one `writev` of header and payload; a reader thread per
//! connection reads the answers.
//! - Without `--rate`: closed loop, for throughput; each connection keeps up
//!   to `--window` samples unanswered.
//! - With `--rate QPS`: open loop, as MLPerf's Server scenario: Poisson
//!   arrivals at QPS in total (QPS/N per connection, exponential gaps from a
//!   seeded generator). A sample's latency runs from its scheduled send
//!   time to its answer fully read, so queueing counts. The writer sleeps
//!   until `--spin-us` (default 100) before each send time and spins the
//!   rest, so its CPU includes up to that much spinning per sample (at high
//!   rates, a core per connection).
//!
//! It then prints one JSON line: `streams`, `bytes_per_sample`, `samples`
//! (answers read; any shortfall is an error), `secs` (first send to last
//! answer), `gbit_s` and `samples_per_s` of payload, `cpu_s` (its own CPU
//! seconds), and with `--rate` also `p50_us`, `p99_us` and `p999_us`.

#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, IoSlice, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{ArgGroup, Parser, Subcommand};
use rand_mt::Mt64;

/// Largest frame accepted: a length beyond it means a broken peer.
const MAX_FRAME: u32 = 1 << 30;

/// Raw TCP moving length-prefixed samples and answers: the floor of the
/// network path.
///
/// Samples are frames [u32 big-endian length][payload]; answers are
/// [u32 big-endian length][answer bytes].
///
/// serve prints its port first, answers every frame on any number of
/// connections (a thread each) and, once its stdin reaches end of file,
/// prints {"cpu_s","samples","bytes"} and exits.
///
/// send opens --streams connections (TCP_NODELAY, a writev per frame) and
/// prints {"streams","bytes_per_sample","samples","secs","gbit_s",
/// "samples_per_s","cpu_s"}: without --rate a closed loop of --window
/// samples unanswered per connection; with --rate an open loop of Poisson
/// arrivals whose latency, from scheduled send to answer read, adds
/// "p50_us","p99_us","p999_us".
#[derive(Parser)]
#[command(name = "tcp-floor", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Answer every frame; on end of stdin print {"cpu_s","samples","bytes"}.
    ///
    /// Prints the bound port as its first line. Answers to frames that
    /// arrived together go out in one write. cpu_s: this process's user and
    /// system CPU seconds; samples and bytes: frames and payload bytes read.
    Serve(ServeArgs),
    /// Send frames over N connections; print one JSON line of figures.
    ///
    /// Each connection has a writing thread (one writev of header and
    /// payload per frame) and a reading thread. Closed loop without --rate;
    /// with --rate, Poisson arrivals (seeded) at --rate in total, each
    /// sample's latency counted from its scheduled send time to its answer
    /// fully read. samples: answers read (fewer than sent is an error);
    /// secs: first send to last answer; gbit_s: payload.
    Send(SendArgs),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on (port 0: any free port, printed first).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// Bytes in each answer (after its 4-byte length).
    #[arg(long, default_value_t = 16)]
    answer_bytes: u32,
}

#[derive(clap::Args)]
#[command(group(ArgGroup::new("length").required(true).args(["secs", "count"])))]
struct SendArgs {
    /// The server's address (host:port).
    #[arg(long)]
    connect: String,
    /// Connections, one sending thread and one reading thread each.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    streams: u32,
    /// Payload bytes per sample.
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=MAX_FRAME as i64))]
    bytes: u32,
    /// Send samples for this many seconds.
    #[arg(long)]
    secs: Option<f64>,
    /// Send this many samples in all (spread evenly over the connections).
    #[arg(long)]
    count: Option<u64>,
    /// Closed loop: samples unanswered per connection.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    window: u32,
    /// Open loop: Poisson arrivals at this many samples per second in all.
    #[arg(long)]
    rate: Option<f64>,
    /// Open loop: µs before each send time to spin rather than sleep (a
    /// sleep wakes tens of µs late, which counts as latency; the spin counts
    /// as CPU). 0: sleep only.
    #[arg(long, default_value_t = 100)]
    spin_us: u64,
    /// Seed of the arrival times (connection i uses seed + i).
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Serve(a) => serve(&a),
        Command::Send(a) => send(&a),
    }
}

fn serve(args: &ServeArgs) -> Result<()> {
    let listener =
        TcpListener::bind(&args.listen).with_context(|| format!("listening on {}", args.listen))?;
    let port = listener.local_addr().context("the bound address")?.port();
    let mut out = std::io::stdout();
    writeln!(out, "{port}").context("printing the port")?;
    out.flush().context("printing the port")?;

    let samples = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let answer_bytes = args.answer_bytes;
    {
        let (samples, bytes) = (samples.clone(), bytes.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let conn = match conn {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("tcp-floor serve: accept: {e}");
                        continue;
                    }
                };
                let (samples, bytes) = (samples.clone(), bytes.clone());
                std::thread::spawn(move || {
                    if let Err(e) = answer_all(conn, answer_bytes, &samples, &bytes) {
                        eprintln!("tcp-floor serve: {e:#}");
                    }
                });
            }
        });
    }

    std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink()).context("reading stdin")?;
    let line = serde_json::json!({
        "cpu_s": own_cpu_secs()?,
        "samples": samples.load(Ordering::Relaxed),
        "bytes": bytes.load(Ordering::Relaxed),
    });
    writeln!(out, "{line}").context("printing the figures")?;
    out.flush().context("printing the figures")?;
    // The connection threads may still be blocked in reads: end them all.
    std::process::exit(0)
}

/// Reads frames until the peer closes, answering each.
fn answer_all(
    conn: TcpStream,
    answer_bytes: u32,
    samples: &AtomicU64,
    bytes: &AtomicU64,
) -> Result<()> {
    conn.set_nodelay(true).context("TCP_NODELAY")?;
    let mut writer = conn.try_clone().context("cloning the socket")?;
    let mut reader = BufReader::with_capacity(256 << 10, conn);
    let mut answer = answer_bytes.to_be_bytes().to_vec();
    answer.resize(4 + answer_bytes as usize, 0xa5);
    let mut answers = Vec::new();
    let mut scratch = vec![0u8; 1 << 20];
    loop {
        let Some(len) = read_len(&mut reader)? else {
            return Ok(());
        };
        discard(&mut reader, len as usize, &mut scratch).context("reading a payload")?;
        samples.fetch_add(1, Ordering::Relaxed);
        bytes.fetch_add(u64::from(len), Ordering::Relaxed);
        answers.extend_from_slice(&answer);
        // Write before the next read could block.
        if !whole_frame_in(reader.buffer()) {
            writer.write_all(&answers).context("writing answers")?;
            answers.clear();
        }
    }
}

/// Whether `buf` starts with a whole frame.
fn whole_frame_in(buf: &[u8]) -> bool {
    match buf.first_chunk::<4>() {
        Some(len) => buf.len() - 4 >= u32::from_be_bytes(*len) as usize,
        None => false,
    }
}

/// The next frame's length; None at a clean end of stream between frames.
fn read_len(reader: &mut impl BufRead) -> Result<Option<u32>> {
    let mut len = [0u8; 4];
    if reader.fill_buf().context("reading a length")?.is_empty() {
        return Ok(None);
    }
    reader.read_exact(&mut len).context("reading a length")?;
    let len = u32::from_be_bytes(len);
    if len > MAX_FRAME {
        bail!("a frame of {len} bytes (the most is {MAX_FRAME})");
    }
    Ok(Some(len))
}

/// Reads and drops `len` bytes.
fn discard(reader: &mut impl Read, mut len: usize, scratch: &mut [u8]) -> std::io::Result<()> {
    while len > 0 {
        let n = len.min(scratch.len());
        reader.read_exact(&mut scratch[..n])?;
        len -= n;
    }
    Ok(())
}

/// What one connection did.
#[derive(Default)]
struct StreamResult {
    answers: u64,
    last_answer: Option<Instant>,
    /// Latencies in ns, open loop only.
    latencies: Vec<u64>,
}

fn send(args: &SendArgs) -> Result<()> {
    if let Some(r) = args.rate {
        if !(r.is_finite() && r > 0.0) {
            bail!("--rate must be a positive number of samples per second, not {r}");
        }
    }
    if let Some(s) = args.secs {
        if !(s.is_finite() && s > 0.0) {
            bail!("--secs must be a positive number of seconds, not {s}");
        }
    }
    let streams = args.streams as u64;
    let mut conns = Vec::new();
    for i in 0..streams {
        let c = TcpStream::connect(&args.connect)
            .with_context(|| format!("connecting to {}", args.connect))?;
        c.set_nodelay(true).context("TCP_NODELAY")?;
        // Samples of connection i: its share of --count.
        let quota = args.count.map(|c| c / streams + u64::from(i < c % streams));
        conns.push((c, quota));
    }
    let payload = Arc::new(vec![0x5au8; args.bytes as usize]);
    let start = Instant::now();
    let end = args.secs.map(|s| start + Duration::from_secs_f64(s));
    let threads: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, (conn, quota))| {
            let payload = payload.clone();
            let plan = Plan {
                quota,
                end,
                window: args.window as usize,
                spin: Duration::from_micros(args.spin_us),
                // Poisson arrivals per connection: their sum is Poisson at --rate.
                arrivals: args.rate.map(|r| {
                    (
                        r / streams as f64,
                        Mt64::new(args.seed.wrapping_add(i as u64)),
                    )
                }),
            };
            std::thread::spawn(move || run_stream(conn, &payload, plan, start))
        })
        .collect();
    let mut total = StreamResult::default();
    for t in threads {
        let r = t
            .join()
            .map_err(|_| anyhow::anyhow!("a connection's thread panicked"))??;
        total.answers += r.answers;
        total.last_answer = total.last_answer.max(r.last_answer);
        total.latencies.extend(r.latencies);
    }
    let secs = total
        .last_answer
        .map_or(0.0, |t| t.duration_since(start).as_secs_f64());
    let rate = |x: f64| if secs > 0.0 { x / secs } else { 0.0 };
    let mut line = serde_json::json!({
        "streams": args.streams,
        "bytes_per_sample": args.bytes,
        "samples": total.answers,
        "secs": secs,
        "gbit_s": rate(total.answers as f64 * f64::from(args.bytes) * 8.0 / 1e9),
        "samples_per_s": rate(total.answers as f64),
        "cpu_s": own_cpu_secs()?,
    });
    if args.rate.is_some() {
        let mut l = total.latencies;
        l.sort_unstable();
        let pick = |q: f64| {
            let i = ((l.len() as f64 * q).ceil() as usize).clamp(1, l.len().max(1)) - 1;
            l.get(i).map_or(0.0, |&ns| ns as f64 / 1e3)
        };
        line["p50_us"] = pick(0.50).into();
        line["p99_us"] = pick(0.99).into();
        line["p999_us"] = pick(0.999).into();
    }
    println!("{line}");
    Ok(())
}

/// When one connection sends its samples.
struct Plan {
    /// Samples to send, or None to send until `end`.
    quota: Option<u64>,
    end: Option<Instant>,
    /// Closed loop: samples unanswered at most.
    window: usize,
    /// Open loop: samples per second and the generator of the gaps.
    arrivals: Option<(f64, Mt64)>,
    /// Open loop: how long before a send time to stop sleeping.
    spin: Duration,
}

/// Sends one connection's samples and reads their answers on a second
/// thread; each sample's scheduled send time travels to the reader through
/// a channel, which in the closed loop is bounded by the window.
fn run_stream(
    conn: TcpStream,
    payload: &[u8],
    mut plan: Plan,
    start: Instant,
) -> Result<StreamResult> {
    let read_side = conn.try_clone().context("cloning the socket")?;
    let (tx, rx) = match plan.arrivals {
        // The open loop never waits for answers before sending.
        Some(_) => {
            let (tx, rx) = mpsc::channel();
            (Sender::Open(tx), rx)
        }
        None => {
            // The reader holds one more than the channel while it waits.
            let (tx, rx) = mpsc::sync_channel(plan.window - 1);
            (Sender::Closed(tx), rx)
        }
    };
    let timed = plan.arrivals.is_some();
    let reader = std::thread::spawn(move || {
        let r = read_answers(&read_side, &rx, timed);
        if r.is_err() {
            // Unblocks the writer.
            let _ = read_side.shutdown(std::net::Shutdown::Both);
        }
        r
    });

    let header = (payload.len() as u32).to_be_bytes();
    let mut next = start;
    let mut sent = 0u64;
    let mut conn = &conn;
    let sending = loop {
        if plan.quota.is_some_and(|q| sent >= q) {
            break Ok(());
        }
        if let Some((rate, rng)) = plan.arrivals.as_mut() {
            next += Duration::from_secs_f64(exponential(rng) / *rate);
            wait_until(next, plan.spin);
        } else {
            next = Instant::now();
        }
        if plan.end.is_some_and(|e| next >= e) {
            break Ok(());
        }
        if !tx.send(next) {
            break Ok(()); // The reader failed: its error is reported below.
        }
        if let Err(e) = write_frame(&mut conn, &header, payload) {
            break Err(e);
        }
        sent += 1;
    };
    drop(tx);
    let _ = conn.shutdown(std::net::Shutdown::Write);
    let result = reader
        .join()
        .map_err(|_| anyhow::anyhow!("a reader thread panicked"))?;
    // A reader's error is the cause of a writer's (it shuts the socket).
    let result = result?;
    sending.context("writing a sample")?;
    if result.answers != sent {
        bail!(
            "{sent} samples sent on a connection, {} answered",
            result.answers
        );
    }
    Ok(result)
}

enum Sender {
    Open(mpsc::Sender<Instant>),
    Closed(mpsc::SyncSender<Instant>),
}

impl Sender {
    /// False once the reader is gone.
    fn send(&self, t: Instant) -> bool {
        match self {
            Sender::Open(tx) => tx.send(t).is_ok(),
            Sender::Closed(tx) => tx.send(t).is_ok(),
        }
    }
}

/// Reads one answer per send time received, until the writer is done.
fn read_answers(
    conn: &TcpStream,
    send_times: &mpsc::Receiver<Instant>,
    timed: bool,
) -> Result<StreamResult> {
    let mut reader = BufReader::with_capacity(64 << 10, conn);
    let mut scratch = vec![0u8; 64 << 10];
    let mut r = StreamResult::default();
    // The closed loop's window is the channel's bound: an answer read frees
    // a place once its send time is taken off the channel.
    for at in send_times {
        let len = read_len(&mut reader)?.context("the server closed the connection early")?;
        discard(&mut reader, len as usize, &mut scratch).context("reading an answer")?;
        let now = Instant::now();
        r.answers += 1;
        r.last_answer = Some(now);
        if timed {
            r.latencies
                .push(now.saturating_duration_since(at).as_nanos() as u64);
        }
    }
    Ok(r)
}

/// One frame in one `writev` (repeated only for what a short write left).
fn write_frame(conn: &mut impl Write, header: &[u8; 4], payload: &[u8]) -> Result<()> {
    let mut bufs = [IoSlice::new(header), IoSlice::new(payload)];
    let mut bufs = &mut bufs[..];
    while !bufs.is_empty() {
        let n = conn.write_vectored(bufs)?;
        if n == 0 {
            bail!("the connection accepts no more bytes");
        }
        IoSlice::advance_slices(&mut bufs, n);
    }
    Ok(())
}

/// An exponential variate of mean 1.
fn exponential(rng: &mut Mt64) -> f64 {
    // Uniform in (0, 1]: 53 random bits, never 0.
    let u = ((rng.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64;
    -u.ln()
}

/// Sleeps until `spin` before `t`, then spins: a plain sleep wakes tens of
/// µs late, which would count as latency.
fn wait_until(t: Instant, spin: Duration) {
    let now = Instant::now();
    if t > now + spin {
        std::thread::sleep(t - now - spin);
    }
    while Instant::now() < t {
        std::hint::spin_loop();
    }
}

/// User plus system CPU seconds of this process, all its threads.
fn own_cpu_secs() -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").context("reading /proc/self/stat")?;
    // Fields after the command name (which may hold spaces and parentheses).
    let rest = stat
        .rfind(')')
        .and_then(|i| stat.get(i + 2..))
        .context("/proc/self/stat: no command name")?;
    let field = |n: usize| -> Result<f64> {
        rest.split_whitespace()
            .nth(n)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("/proc/self/stat: field {}", n + 3))
    };
    // utime and stime, fields 14 and 15 of proc(5).
    Ok((field(11)? + field(12)?) / clock_ticks_per_sec())
}

/// The kernel's clock ticks per second (USER_HZ), from the auxiliary vector
/// (`AT_CLKTCK`), read without libc.
fn clock_ticks_per_sec() -> f64 {
    const AT_CLKTCK: usize = 17;
    const WORD: usize = std::mem::size_of::<usize>();
    let word = |b: &[u8]| b.try_into().map(usize::from_ne_bytes).ok();
    std::fs::read("/proc/self/auxv")
        .ok()
        .and_then(|aux| {
            aux.chunks_exact(2 * WORD)
                .find(|pair| word(&pair[..WORD]) == Some(AT_CLKTCK))
                .and_then(|pair| word(&pair[WORD..]))
        })
        .filter(|&hz| hz > 0)
        // USER_HZ is 100 on every common architecture.
        .map_or(100.0, |hz| hz as f64)
}
