//! A `/metrics` endpoint in the Prometheus text exposition format (0.0.4):
//! a writer of the format, and a small HTTP server on its own thread that
//! renders the page on every scrape. Scrapes never touch the timed path:
//! the page is built from atomics read at scrape time.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// The page being written. Each family's series must be written together:
/// its `# HELP` and `# TYPE` lines come with its first series.
#[derive(Default)]
pub struct Page {
    out: String,
    family: String,
}

/// Label pairs of one series.
pub type Labels<'a> = &'a [(&'a str, &'a str)];

impl Page {
    /// An empty page.
    pub fn new() -> Self {
        Self::default()
    }

    /// One series of counter family `name`: a total that only grows.
    pub fn counter(&mut self, name: &str, help: &str, labels: Labels<'_>, value: u64) {
        self.head(name, help, "counter");
        self.sample(name, "", labels, None, value as f64);
    }

    /// One series of gauge family `name`: a value that goes up and down.
    pub fn gauge(&mut self, name: &str, help: &str, labels: Labels<'_>, value: f64) {
        self.head(name, help, "gauge");
        self.sample(name, "", labels, None, value);
    }

    /// `counts[i]`: observations in bucket `i` (not cumulative): those at or
    /// below `bounds[i]` and above the bound before; `counts` has one more
    /// entry than `bounds`, for those above the last bound.
    pub fn histogram(
        &mut self,
        name: &str,
        help: &str,
        labels: Labels<'_>,
        bounds: &[f64],
        counts: &[u64],
        sum: f64,
    ) {
        self.head(name, help, "histogram");
        let mut seen = 0u64;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            let le = match bounds.get(i) {
                Some(b) => number(*b),
                None => "+Inf".to_string(),
            };
            self.sample(name, "_bucket", labels, Some(("le", &le)), seen as f64);
        }
        self.sample(name, "_sum", labels, None, sum);
        self.sample(name, "_count", labels, None, seen as f64);
    }

    /// `quantiles`: (quantile, value) pairs.
    pub fn summary(
        &mut self,
        name: &str,
        help: &str,
        labels: Labels<'_>,
        quantiles: &[(f64, f64)],
        count: u64,
    ) {
        self.head(name, help, "summary");
        for (q, v) in quantiles {
            self.sample(name, "", labels, Some(("quantile", &number(*q))), *v);
        }
        self.sample(name, "_count", labels, None, count as f64);
    }

    /// The page's text, as a scrape receives it.
    pub fn finish(self) -> String {
        self.out
    }

    fn head(&mut self, name: &str, help: &str, kind: &str) {
        if self.family == name {
            return;
        }
        self.family = name.to_string();
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(
        &mut self,
        name: &str,
        suffix: &str,
        labels: Labels<'_>,
        extra: Option<(&str, &str)>,
        value: f64,
    ) {
        self.out.push_str(name);
        self.out.push_str(suffix);
        let mut all = labels.iter().copied().chain(extra).peekable();
        if all.peek().is_some() {
            self.out.push('{');
            for (i, (k, v)) in all.enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let v = v
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                let _ = write!(self.out, "{k}=\"{v}\"");
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", number(value));
    }
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

/// Serves `GET /metrics` on `addr` from a thread of its own, rendering the
/// page with `render` on every scrape; returns the bound address (`:0`
/// picks a free port). The thread lives as long as the process.
pub fn serve(addr: &str, render: impl Fn() -> String + Send + 'static) -> io::Result<SocketAddr> {
    let addr = addr
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address"))?;
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                // One scrape at a time; a client that stalls is cut by the
                // timeouts, never holds the thread for long.
                let _ = answer(conn, &render);
            }
        })?;
    Ok(bound)
}

/// Most bytes of a request read before answering.
const MAX_REQUEST: usize = 8 << 10;

fn answer(mut conn: TcpStream, render: &dyn Fn() -> String) -> io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    conn.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_REQUEST {
        let n = conn.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let mut words = head.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => ("200 OK", render()),
        ("GET" | "HEAD", _) => ("404 Not Found", "only /metrics is served here\n".into()),
        _ => ("405 Method Not Allowed", "GET /metrics\n".into()),
    };
    let mut reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if method != "HEAD" {
        reply.push_str(&body);
    }
    conn.write_all(reply.as_bytes())?;
    conn.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_text_format() {
        let mut p = Page::new();
        p.counter("x_total", "Things.", &[("node", "a\"b")], 3);
        p.counter("x_total", "Things.", &[("node", "c")], 4);
        p.gauge("depth", "Depth.\nnow", &[], 1.5);
        p.histogram("h", "H.", &[("k", "v")], &[1.0, 2.5], &[1, 0, 2], 9.0);
        p.summary("s", "S.", &[], &[(0.5, 10.0), (0.99, 20.0)], 7);
        assert_eq!(
            p.finish(),
            "# HELP x_total Things.\n# TYPE x_total counter\nx_total{node=\"a\\\"b\"} 3\n\
             x_total{node=\"c\"} 4\n\
             # HELP depth Depth.\\nnow\n# TYPE depth gauge\ndepth 1.5\n\
             # HELP h H.\n# TYPE h histogram\nh_bucket{k=\"v\",le=\"1\"} 1\n\
             h_bucket{k=\"v\",le=\"2.5\"} 1\nh_bucket{k=\"v\",le=\"+Inf\"} 3\n\
             h_sum{k=\"v\"} 9\nh_count{k=\"v\"} 3\n\
             # HELP s S.\n# TYPE s summary\ns{quantile=\"0.5\"} 10\ns{quantile=\"0.99\"} 20\n\
             s_count 7\n"
        );
    }

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn serves_the_page_on_every_scrape() {
        let n = std::sync::atomic::AtomicU64::new(0);
        let addr = serve("127.0.0.1:0", move || {
            let v = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            format!("scrapes {v}\n")
        })
        .unwrap();
        let r = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(
            r.contains("version=0.0.4") && r.ends_with("\r\n\r\nscrapes 0\n"),
            "{r}"
        );
        assert!(get(addr, "GET /metrics?x=1 HTTP/1.1\r\n\r\n").ends_with("scrapes 1\n"));
        assert!(get(addr, "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get(addr, "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        // A client that sends nothing and hangs up leaves the server serving.
        drop(TcpStream::connect(addr).unwrap());
        assert!(get(addr, "GET /metrics HTTP/1.0\r\n\r\n").ends_with("scrapes 2\n"));
    }
}
