//! Finding the nodes of a run: the entries of `--sut` and the lines of a
//! `--sut-file`, each one node address (`host:port`, `grpc://`, `grpcs://`,
//! `quic://`) or a DNS name whose every A and AAAA record is one node
//! (`dns://NAME:PORT`; `dns+grpcs://`, `dns+quic://` for the other
//! transports). Names are resolved once, here, before any node is asked its
//! name; what each resolved to goes into the run's network facts.
//!
//! A launcher writes a `--sut-file` (one address per line, `#` comments); a
//! Kubernetes headless Service or a round-robin DNS name is a `dns://` entry,
//! with `?nodes=N` to wait until all N nodes are published.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, ToSocketAddrs};
use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, Instant};

use crate::config::{NodeAddr, Transport};
use crate::error::QdlError;

/// One entry of a node list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeEntry {
    /// One node.
    Node(NodeAddr),
    /// Every address of a DNS name, one node each.
    Dns(DnsNodes),
}

/// `dns://NAME:PORT[?nodes=N]`: the nodes are every address NAME resolves
/// to, all listening on PORT. The scheme says the transport: `dns://` and
/// `dns+grpc://` gRPC (over TLS when the run has TLS settings),
/// `dns+grpcs://` gRPC over TLS, `dns+quic://` QUIC. Over TLS, each node's
/// certificate is checked against NAME.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsNodes {
    /// How every node of the name is reached.
    pub transport: Transport,
    /// The DNS name, as given.
    pub name: String,
    /// The port every node listens on.
    pub port: u16,
    /// `?nodes=N`: wait until the name has exactly N addresses.
    pub expect: Option<usize>,
}

impl fmt::Display for DnsNodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match self.transport {
            Transport::Grpc => "dns",
            Transport::Grpcs => "dns+grpcs",
            Transport::Quic => "dns+quic",
        };
        write!(f, "{scheme}://{}:{}", self.name, self.port)?;
        match self.expect {
            Some(n) => write!(f, "?nodes={n}"),
            None => Ok(()),
        }
    }
}

impl fmt::Display for NodeEntry {
    /// As written on a command line; it parses back to the same entry.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeEntry::Node(a) => f.write_str(&a.url()),
            NodeEntry::Dns(d) => d.fmt(f),
        }
    }
}

impl FromStr for NodeEntry {
    type Err = QdlError;

    fn from_str(input: &str) -> Result<Self, QdlError> {
        let bad = |reason: String| QdlError::Address {
            input: input.to_string(),
            reason,
        };
        let Some((scheme, rest)) = input.split_once("://") else {
            return input.parse().map(NodeEntry::Node);
        };
        let transport = match scheme.to_ascii_lowercase().as_str() {
            "dns" | "dns+grpc" => Transport::Grpc,
            "dns+grpcs" => Transport::Grpcs,
            "dns+quic" => Transport::Quic,
            _ => return input.parse().map(NodeEntry::Node),
        };
        let (authority, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        let (name, port) = authority
            .rsplit_once(':')
            .ok_or_else(|| bad("expected dns://NAME:PORT".into()))?;
        if name.is_empty() {
            return Err(bad("the name is empty".into()));
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        {
            return Err(bad(format!(
                "'{name}' is not a DNS name (letters, digits, '.', '-' and '_' only)"
            )));
        }
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| bad(format!("'{port}' is not a port number (1 to 65535)")))?;
        let expect = match query {
            None => None,
            Some(q) => match q.split_once('=') {
                Some(("nodes", n)) => Some(
                    n.parse::<usize>()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| bad(format!("nodes={n}: expected a count of 1 or more")))?,
                ),
                _ => return Err(bad(format!("unknown option '{q}' (expected nodes=N)"))),
            },
        };
        Ok(NodeEntry::Dns(DnsNodes {
            transport,
            name: name.to_string(),
            port,
            expect,
        }))
    }
}

/// A node entry and where it was given, for error messages.
#[derive(Clone, Debug)]
struct Given {
    entry: NodeEntry,
    /// `--sut`, or `FILE line N`.
    whence: String,
}

/// The entries of a comma-separated list (`--sut`); an empty list has none.
pub fn parse_list(list: &str) -> Result<Vec<NodeEntry>, QdlError> {
    if list.trim().is_empty() {
        return Ok(Vec::new());
    }
    list.split(',').map(|e| e.trim().parse()).collect()
}

/// The entries of a node file: one per line; `#` starts a comment; blank
/// lines are skipped. Errors name the file and the line.
pub fn read_file(path: &Path) -> Result<Vec<NodeEntry>, QdlError> {
    Ok(file_entries(path)?.into_iter().map(|g| g.entry).collect())
}

fn file_entries(path: &Path) -> Result<Vec<Given>, QdlError> {
    let text = loadgen_engine::disk::read_text_bounded(path, loadgen_engine::disk::MAX_TEXT_FILE)
        .map_err(|e| QdlError::Discovery {
        whence: path.display().to_string(),
        reason: format!("cannot read it: {e}"),
    })?;
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let whence = format!("{} line {}", path.display(), i + 1);
        let entry = line.parse().map_err(|e: QdlError| QdlError::Discovery {
            whence: whence.clone(),
            reason: e.to_string(),
        })?;
        entries.push(Given { entry, whence });
    }
    if entries.is_empty() {
        return Err(QdlError::Discovery {
            whence: path.display().to_string(),
            reason: "no sut-node address in it".into(),
        });
    }
    Ok(entries)
}

/// The nodes of a run, and what each DNS name resolved to.
#[derive(Clone, Debug, Default)]
pub struct NodeList {
    /// Every node, in the order given (a name's addresses sorted).
    pub nodes: Vec<NodeAddr>,
    /// One per `dns://` entry.
    pub resolved: Vec<Resolution>,
}

/// What one `dns://` entry resolved to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolution {
    /// The entry.
    pub entry: DnsNodes,
    /// Its addresses, sorted (IPv4 first), each one node.
    pub addrs: Vec<IpAddr>,
}

impl fmt::Display for Resolution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let addrs: Vec<String> = self.addrs.iter().map(IpAddr::to_string).collect();
        write!(f, "{} -> {}", self.entry, addrs.join(" "))
    }
}

/// Looks up a name's addresses.
pub trait Resolver {
    /// Every address of `name`, in any order, duplicates allowed.
    fn lookup(&mut self, name: &str, port: u16) -> std::io::Result<Vec<IpAddr>>;
}

/// The host's resolver (`getaddrinfo`: `/etc/hosts`, then the DNS servers of
/// `/etc/resolv.conf`, with its search domains), as every other program on
/// the host resolves names.
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn lookup(&mut self, name: &str, port: u16) -> std::io::Result<Vec<IpAddr>> {
        Ok((name, port).to_socket_addrs()?.map(|a| a.ip()).collect())
    }
}

/// The time of a wait: how long since it began, and sleeping.
pub trait WaitClock {
    /// Time since the wait began.
    fn elapsed(&self) -> Duration;
    /// Sleeps for `d`.
    fn sleep(&mut self, d: Duration);
}

/// The monotonic clock and the thread's sleep.
pub struct RealClock(Instant);

impl RealClock {
    /// A wait beginning now.
    pub fn start() -> Self {
        RealClock(Instant::now())
    }
}

impl WaitClock for RealClock {
    fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
    fn sleep(&mut self, d: Duration) {
        std::thread::sleep(d);
    }
}

/// How often a name that is not yet usable is looked up again.
pub const RESOLVE_POLL: Duration = Duration::from_secs(1);

/// How often the same wait is reported again.
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// The nodes of `sut` (a comma-separated list; empty for none) and of
/// `sut_file`, in that order, each DNS name resolved by the host's
/// resolver. A name that does not resolve yet, or has fewer or more
/// addresses than its `?nodes=N`, is looked up again every second for up to
/// `wait`; `waiting` is given a line to show meanwhile (once every 10 s).
pub fn find_nodes(
    sut: &str,
    sut_file: Option<&Path>,
    wait: Duration,
    waiting: impl FnMut(&str),
) -> Result<NodeList, QdlError> {
    find_nodes_with(
        sut,
        sut_file,
        wait,
        &mut SystemResolver,
        &mut RealClock::start(),
        waiting,
    )
}

/// [`find_nodes`] with the resolver and the clock given.
pub fn find_nodes_with(
    sut: &str,
    sut_file: Option<&Path>,
    wait: Duration,
    resolver: &mut dyn Resolver,
    clock: &mut dyn WaitClock,
    mut waiting: impl FnMut(&str),
) -> Result<NodeList, QdlError> {
    let mut given: Vec<Given> = parse_list(sut)?
        .into_iter()
        .map(|entry| Given {
            entry,
            whence: "--sut".into(),
        })
        .collect();
    if let Some(path) = sut_file {
        given.extend(file_entries(path)?);
    }
    if given.is_empty() {
        return Err(QdlError::Config("no sut-node given".into()));
    }
    let mut list = NodeList::default();
    // Where each address was given, so that one given twice is named twice.
    let mut seen: HashMap<(IpOrHost, u16), String> = HashMap::new();
    for g in given {
        let (addrs, whence) = match g.entry {
            NodeEntry::Node(a) => (vec![a], g.whence),
            NodeEntry::Dns(d) => {
                let addrs = resolve(&d, wait, resolver, clock, &mut waiting)?;
                let nodes = addrs
                    .iter()
                    .map(|ip| NodeAddr {
                        transport: d.transport,
                        host: ip.to_string(),
                        port: d.port,
                        tls_name: Some(d.name.clone()),
                    })
                    .collect();
                let whence = format!("{} ({d})", g.whence);
                list.resolved.push(Resolution { entry: d, addrs });
                (nodes, whence)
            }
        };
        for a in addrs {
            let key = (IpOrHost::of(&a.host), a.port);
            if let Some(first) = seen.insert(key, whence.clone()) {
                return Err(QdlError::Config(format!(
                    "sut-node {a} is listed twice: by {first} and by {whence}"
                )));
            }
            list.nodes.push(a);
        }
    }
    Ok(list)
}

/// A host as compared for duplicates: addresses by value (`::1` and
/// `0:0::1` are one), names by their lower-case spelling.
#[derive(Hash, PartialEq, Eq)]
enum IpOrHost {
    Ip(IpAddr),
    Host(String),
}

impl IpOrHost {
    fn of(host: &str) -> Self {
        match host.parse() {
            Ok(ip) => IpOrHost::Ip(ip),
            Err(_) => IpOrHost::Host(host.to_ascii_lowercase()),
        }
    }
}

/// The addresses of one name, sorted and without duplicates, once they
/// are usable: at least one, and exactly `expect` when given.
fn resolve(
    d: &DnsNodes,
    wait: Duration,
    resolver: &mut dyn Resolver,
    clock: &mut dyn WaitClock,
    waiting: &mut dyn FnMut(&str),
) -> Result<Vec<IpAddr>, QdlError> {
    let mut reported: Option<(String, Duration)> = None;
    loop {
        let why_not = match resolver.lookup(&d.name, d.port) {
            Ok(mut addrs) => {
                addrs.sort();
                addrs.dedup();
                match d.expect {
                    _ if addrs.is_empty() => "no address".to_string(),
                    Some(n) if addrs.len() != n => format!(
                        "{} address{}, {n} expected",
                        addrs.len(),
                        if addrs.len() == 1 { "" } else { "es" }
                    ),
                    _ => return Ok(addrs),
                }
            }
            Err(e) => format!("cannot resolve it: {e}"),
        };
        let waited = clock.elapsed();
        if waited >= wait {
            return Err(QdlError::Discovery {
                whence: d.to_string(),
                reason: if wait.is_zero() {
                    why_not
                } else {
                    format!("{why_not} after waiting {} s", waited.as_secs())
                },
            });
        }
        let due = match &reported {
            Some((last, at)) => *last != why_not || waited >= *at + REPORT_EVERY,
            None => true,
        };
        if due {
            waiting(&format!(
                "waiting for {d}: {why_not} ({} s so far)",
                waited.as_secs()
            ));
            reported = Some((why_not, waited));
        }
        clock.sleep(RESOLVE_POLL.min(wait.saturating_sub(waited)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Answers from a script, one per lookup (the last one repeats).
    struct Scripted(Vec<std::io::Result<Vec<IpAddr>>>, usize);

    impl Resolver for Scripted {
        fn lookup(&mut self, name: &str, _port: u16) -> std::io::Result<Vec<IpAddr>> {
            assert_eq!(name, "fleet.test");
            let i = self.1.min(self.0.len() - 1);
            self.1 += 1;
            match &self.0[i] {
                Ok(a) => Ok(a.clone()),
                Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
            }
        }
    }

    /// Time that passes only by sleeping.
    #[derive(Default)]
    struct Virtual(Duration);

    impl WaitClock for Virtual {
        fn elapsed(&self) -> Duration {
            self.0
        }
        fn sleep(&mut self, d: Duration) {
            self.0 += d;
        }
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn find(
        sut: &str,
        file: Option<&Path>,
        wait: u64,
        answers: Vec<std::io::Result<Vec<IpAddr>>>,
    ) -> (Result<NodeList, String>, Vec<String>, Duration) {
        let mut clock = Virtual::default();
        let mut lines = Vec::new();
        let r = find_nodes_with(
            sut,
            file,
            Duration::from_secs(wait),
            &mut Scripted(answers, 0),
            &mut clock,
            |l| lines.push(l.to_string()),
        )
        .map_err(|e| e.to_string());
        (r, lines, clock.0)
    }

    #[test]
    fn parses_dns_entries_with_each_transport() {
        let e: NodeEntry = "dns://sut-nodes.mlperf.svc:50051".parse().unwrap();
        let NodeEntry::Dns(d) = e else {
            panic!("{e:?}")
        };
        assert_eq!(
            (d.transport, d.name.as_str(), d.port, d.expect),
            (Transport::Grpc, "sut-nodes.mlperf.svc", 50051, None)
        );
        for (input, transport) in [
            ("DNS+GRPC://n:1", Transport::Grpc),
            ("dns+grpcs://n:1", Transport::Grpcs),
            ("dns+quic://n:1?nodes=4", Transport::Quic),
        ] {
            let NodeEntry::Dns(d) = input.parse().unwrap() else {
                panic!("{input}")
            };
            assert_eq!(d.transport, transport, "{input}");
        }
        let d: NodeEntry = "dns+quic://n:1?nodes=4".parse().unwrap();
        assert!(
            matches!(&d, NodeEntry::Dns(d) if d.expect == Some(4) && d.to_string() == "dns+quic://n:1?nodes=4")
        );
        // The other forms are single nodes.
        let q: NodeEntry = "quic://h:2".parse().unwrap();
        assert_eq!(q, NodeEntry::Node("quic://h:2".parse().unwrap()));
    }

    #[test]
    fn rejects_bad_dns_entries_with_reasons() {
        for (input, why) in [
            ("dns://n", "NAME:PORT"),
            ("dns://:1", "name is empty"),
            ("dns://a/b:1", "not a DNS name"),
            ("dns://n:0", "not a port"),
            ("dns://n:x", "not a port"),
            ("dns://n:1?nodes=0", "count of 1 or more"),
            ("dns://n:1?count=3", "unknown option"),
            ("dns+http://n:1", "unknown scheme"),
        ] {
            let e = input.parse::<NodeEntry>().unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(input), "{input}: {e}");
        }
    }

    #[test]
    fn a_name_becomes_one_node_per_address_sorted_and_checked_against_the_name() {
        let (r, lines, _) = find(
            "a:1,dns+quic://fleet.test:7000",
            None,
            0,
            vec![Ok(ips(&["127.0.0.3", "::1", "127.0.0.2", "127.0.0.3"]))],
        );
        let list = r.unwrap();
        let shown: Vec<String> = list.nodes.iter().map(|n| n.to_string()).collect();
        assert_eq!(
            shown,
            ["a:1", "127.0.0.2:7000", "127.0.0.3:7000", "[::1]:7000"]
        );
        assert!(
            list.nodes[1..]
                .iter()
                .all(|n| n.transport == Transport::Quic
                    && n.tls_name.as_deref() == Some("fleet.test"))
        );
        assert_eq!(list.nodes[0].tls_name, None);
        assert_eq!(
            list.resolved[0].to_string(),
            "dns+quic://fleet.test:7000 -> 127.0.0.2 127.0.0.3 ::1"
        );
        assert!(lines.is_empty());
    }

    #[test]
    fn waits_until_the_expected_count_then_takes_that_answer() {
        let not_yet = std::io::Error::other("Name or service not known");
        let (r, lines, waited) = find(
            "dns://fleet.test:1?nodes=3",
            None,
            60,
            vec![
                Err(not_yet),
                Ok(ips(&["10.0.0.1"])),
                Ok(ips(&["10.0.0.1", "10.0.0.2"])),
                Ok(ips(&["10.0.0.2", "10.0.0.1", "10.0.0.3"])),
            ],
        );
        assert_eq!(r.unwrap().nodes.len(), 3);
        assert_eq!(waited, 3 * RESOLVE_POLL);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].contains("cannot resolve it"), "{lines:?}");
        assert!(lines[2].contains("2 addresses, 3 expected"), "{lines:?}");
    }

    #[test]
    fn gives_up_after_the_wait_saying_what_it_saw() {
        let (r, lines, waited) = find(
            "dns://fleet.test:1?nodes=4",
            None,
            25,
            vec![Ok(ips(&["10.0.0.1", "10.0.0.2"]))],
        );
        let e = r.unwrap_err();
        assert!(
            e.contains("dns://fleet.test:1?nodes=4")
                && e.contains("2 addresses, 4 expected after waiting 25 s"),
            "{e}"
        );
        assert_eq!(waited, Duration::from_secs(25));
        // The same state is reported at 0, 10 and 20 s.
        assert_eq!(lines.len(), 3, "{lines:?}");
        // Without a wait, at once.
        let (r, _, waited) = find("dns://fleet.test:1", None, 0, vec![Ok(Vec::new())]);
        assert!(r.unwrap_err().ends_with("no address"));
        assert_eq!(waited, Duration::ZERO);
    }

    #[test]
    fn a_file_of_addresses_with_comments_follows_the_list() {
        let dir = testkit::Scratch::new("qdl-discover");
        let path = dir.join("nodes.txt");
        let mut f = std::fs::File::create(&path).unwrap();
        writeln!(
            f,
            "# written by the launcher\n\nnode-1:50051\n  quic://node-2:50051   # GPU 1\n\
             dns://fleet.test:9\ngrpcs://[::1]:5\n"
        )
        .unwrap();
        let (r, _, _) = find("node-0:50051", Some(&path), 0, vec![Ok(ips(&["10.1.0.1"]))]);
        let shown: Vec<String> = r.unwrap().nodes.iter().map(|n| n.to_string()).collect();
        assert_eq!(
            shown,
            [
                "node-0:50051",
                "node-1:50051",
                "node-2:50051",
                "10.1.0.1:9",
                "[::1]:5"
            ]
        );
        // The file alone.
        let (r, _, _) = find("", Some(&path), 0, vec![Ok(ips(&["10.1.0.1"]))]);
        assert_eq!(r.unwrap().nodes.len(), 4);

        // A bad line is named by file and line.
        std::fs::write(&path, "node-1:50051\n# fine\nnode-2\n").unwrap();
        let (r, _, _) = find("", Some(&path), 0, vec![]);
        let e = r.unwrap_err();
        assert!(
            e.contains(&format!("{} line 3", path.display())) && e.contains("host:port"),
            "{e}"
        );
        // Nothing in it, or no file at all.
        std::fs::write(&path, "# none yet\n").unwrap();
        let e = find("", Some(&path), 0, vec![]).0.unwrap_err();
        assert!(e.contains("no sut-node address"), "{e}");
        let missing = dir.join("missing.txt");
        let e = find("", Some(&missing), 0, vec![]).0.unwrap_err();
        assert!(
            e.contains("missing.txt") && e.contains("cannot read"),
            "{e}"
        );
        let e = find("", None, 0, vec![]).0.unwrap_err();
        assert!(e.contains("no sut-node given"), "{e}");
    }

    #[test]
    fn a_node_given_twice_is_named_with_both_places() {
        let (r, _, _) = find(
            "127.0.0.2:9,dns://fleet.test:9",
            None,
            0,
            vec![Ok(ips(&["127.0.0.1", "127.0.0.2"]))],
        );
        let e = r.unwrap_err();
        assert!(
            e.contains("127.0.0.2:9 is listed twice")
                && e.contains("--sut and by --sut (dns://fleet.test:9)"),
            "{e}"
        );
        let (r, _, _) = find("Node-A:1,node-a:1", None, 0, vec![]);
        assert!(r.unwrap_err().contains("listed twice"));
    }
}
