//! Finding the nodes: `--sut-file` beside `--sut`, and `dns://` names
//! answered by a real DNS server.
//!
//! The DNS test needs dnsmasq (DNSMASQ_BIN; tests/dns/run.sh installs
//! Debian's and sets it), root, and `unshare`: dnsmasq serves the test's
//! names on a loopback address, and loadgen-node runs in a mount namespace
//! whose /etc/resolv.conf names that server, so it resolves them through the
//! host's own resolver as in any deployment. It skips, saying why, where any
//! of these is missing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use testkit::Started;
use tests::{binary, detail_value, loadgen, scratch, text, SutNode};

use tests::SMALL_DATA as DATA;

/// A short Offline run's flags after the node flags.
fn offline(out: &Path) -> Vec<String> {
    let mut args: Vec<String> = ["--scenario", "Offline", "--mode", "PerformanceOnly"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(DATA.iter().map(|s| s.to_string()));
    for s in ["target_qps=2000", "min_duration=200"] {
        args.extend(["--set".to_string(), s.to_string()]);
    }
    args.extend(["--output-dir".to_string(), out.display().to_string()]);
    args
}

fn detail_str(out: &Path, key: &str) -> String {
    detail_value(out, key)
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_else(|| panic!("{key} missing in {}", out.display()))
}

/// Checks a completed run against the nodes it must have named.
fn assert_ran_on(o: &Output, out: &Path, names: &[&str]) {
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let sut = detail_str(out, "sut_name");
    assert!(
        sut.starts_with(&format!("Network SUT ({} nodes: ", names.len())),
        "{sut}"
    );
    for n in names {
        assert!(sut.contains(n), "{sut} lacks {n}");
    }
    assert_eq!(detail_value(out, "num_errors"), Some(0.into()));
}

#[test]
fn a_sut_file_adds_its_nodes_after_the_sut_list() {
    let nodes: Vec<SutNode> = ["file-a", "file-b", "file-c"]
        .iter()
        .map(|n| SutNode::start(n, &[]))
        .collect();
    let dir = scratch("sut-file");
    let file = dir.join("nodes.txt");
    std::fs::write(
        &file,
        format!(
            "# written by a launcher\n\n  {}   # the second node\ngrpc://{}\n",
            nodes[1].addr, nodes[2].addr
        ),
    )
    .unwrap();
    let out = dir.join("run");
    let mut args = vec![
        "--sut".to_string(),
        nodes[0].addr.clone(),
        "--sut-file".to_string(),
        file.display().to_string(),
    ];
    args.extend(offline(&out));
    let o = loadgen(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_ran_on(&o, &out, &["file-a", "file-b", "file-c"]);
    // In the order given: --sut first, then the file's lines.
    let listed = detail_str(&out, "network_nodes");
    assert_eq!(
        listed,
        format!(
            "3 (file-a at {}, file-b at {}, file-c at {})",
            nodes[0].addr, nodes[1].addr, nodes[2].addr
        )
    );
    // No name was resolved, so no record of one.
    assert_eq!(detail_value(&out, "network_nodes_resolved"), None);

    // The file alone is the whole list.
    let out = dir.join("alone");
    let mut args = vec!["--sut-file".to_string(), file.display().to_string()];
    args.extend(offline(&out));
    let o = loadgen(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_ran_on(&o, &out, &["file-b", "file-c"]);

    // A bad line stops the run before it starts, naming the file and line.
    std::fs::write(&file, format!("{}\n# fine\nnode-2\n", nodes[0].addr)).unwrap();
    let out = dir.join("bad");
    let mut args = vec!["--sut-file".to_string(), file.display().to_string()];
    args.extend(offline(&out));
    let o = loadgen(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("{} line 3", file.display())) && err.contains("\"node-2\""),
        "{err}"
    );
    assert!(!out.join("mlperf_log_detail.txt").exists());
}

/// dnsmasq on a loopback address of its own, answering for a hosts file.
struct Dns {
    child: Child,
    /// The resolv.conf naming it, bound over /etc/resolv.conf for loadgen-node.
    resolv: PathBuf,
}

impl Drop for Dns {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Dns {
    /// Starts `bin` serving `records` (address, name); Err says why it
    /// cannot run here.
    fn start(bin: &str, dir: &Path, records: &[(String, &str)]) -> Result<Dns, String> {
        let hosts = dir.join("hosts");
        let lines: String = records.iter().map(|(a, n)| format!("{a} {n}\n")).collect();
        std::fs::write(&hosts, lines).map_err(|e| e.to_string())?;
        // An address of its own in 127.53.0.0/16, so that two runs of this
        // test, or another DNS server on the host, do not meet.
        let listen = format!(
            "127.53.{}.{}",
            std::process::id() / 250 % 250,
            std::process::id() % 250 + 1
        );
        let mut child = Command::new(bin)
            .args(["--keep-in-foreground", "--no-resolv", "--no-hosts"])
            .arg(format!("--addn-hosts={}", hosts.display()))
            .args(["--bind-interfaces", "--port=53", "--pid-file="])
            .arg(format!("--listen-address={listen}"))
            .args(["--log-queries", "--log-facility=-"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {bin}: {e}"))?;
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("{line}");
                let _ = tx.send(line);
            }
        });
        let resolv = dir.join("resolv.conf");
        std::fs::write(
            &resolv,
            format!("nameserver {listen}\noptions attempts:2 timeout:1\n"),
        )
        .map_err(|e| e.to_string())?;
        let mut dns = Dns { child, resolv };
        // Ready once it has read the hosts file; gone if it could not bind.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(line) if line.contains("read ") && line.contains("hosts") => break,
                Ok(_) => {}
                Err(_) if Instant::now() > deadline => {
                    return Err("dnsmasq did not start within 10 s".into())
                }
                Err(_) => {
                    if let Ok(Some(s)) = dns.child.try_wait() {
                        return Err(format!("dnsmasq exited ({s}): see its lines above"));
                    }
                }
            }
        }
        // The mount namespace must work too.
        let o = dns.run("getent", &["ahosts".into(), records[0].1.into()]);
        if !o.status.success() {
            return Err(format!(
                "cannot resolve through it in a mount namespace: {}",
                text(&o.stderr).trim()
            ));
        }
        Ok(dns)
    }

    /// Runs `program` with `args` in a mount namespace where
    /// /etc/resolv.conf names this server.
    fn run(&self, program: &str, args: &[String]) -> Output {
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg("mount --bind \"$0\" /etc/resolv.conf && exec \"$@\"")
            .arg(&self.resolv)
            .arg(program)
            .args(args)
            .output()
            .expect("unshare runs")
    }

    fn loadgen(&self, args: &[String]) -> Output {
        self.run(&binary("loadgen-node").display().to_string(), args)
    }
}

/// Nodes named `names`, one on each of `hosts` (each `host` as `--listen`
/// takes it), all on the same port, as a DNS name with several addresses
/// and one port describes them. The port is one that was free on every
/// host a moment ago; if a node finds it taken meanwhile, every node is
/// started again on another.
fn on_one_port(hosts: &[String], names: &[String], extra: &[&str]) -> (u16, Vec<SutNode>) {
    let pick = || {
        (0..50)
            .map(|_| testkit::free_tcp_port())
            .find(|port| {
                hosts.iter().all(|h| {
                    let a = format!("{h}:{port}");
                    TcpListener::bind(&a).is_ok() && UdpSocket::bind(&a).is_ok()
                })
            })
            .unwrap_or_else(|| panic!("no port free on all of {hosts:?}"))
    };
    testkit::with_free_port(pick, |port| {
        let mut nodes = Vec::new();
        for (h, n) in hosts.iter().zip(names) {
            match SutNode::try_start_at(&format!("{h}:{port}"), n, extra) {
                Ok(node) => nodes.push(node),
                Err(e) if testkit::says_address_in_use(&e) => return Started::PortTaken,
                Err(e) => panic!("{e}"),
            }
        }
        Started::Up((port, nodes))
    })
}

/// A CA, and one certificate it signs for `names`: (CA, cert, key) paths.
fn pki(dir: &Path, names: &[&str]) -> (String, String, String) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "fleet CA");
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    let paths = ["ca.pem", "node.pem", "node.key"].map(|f| dir.join(f));
    std::fs::write(&paths[0], ca.pem()).unwrap();
    std::fs::write(&paths[1], cert.pem()).unwrap();
    std::fs::write(&paths[2], key.serialize_pem()).unwrap();
    let [ca, cert, key] = paths.map(|p| p.display().to_string());
    (ca, cert, key)
}

#[test]
fn dns_names_served_by_a_real_dns_server() {
    let Ok(bin) = std::env::var("DNSMASQ_BIN") else {
        println!(
            "dns discovery test: skipped (DNSMASQ_BIN is not set; tests/dns/run.sh installs \
             dnsmasq and runs it)"
        );
        return;
    };
    let dir = scratch("dns");
    let ipv6 = TcpListener::bind("[::1]:0").is_ok();

    // fleet.test: three (four with IPv6) nodes on one port, their gRPC over
    // TLS and their QUIC certified for the name only, not for any address.
    let mut fleet_hosts = vec!["127.0.0.2", "127.0.0.3", "127.0.0.4"];
    if ipv6 {
        fleet_hosts.push("::1");
    }
    let bracketed = |h: &str| {
        if h.contains(':') {
            format!("[{h}]")
        } else {
            h.to_string()
        }
    };
    let (ca, cert, key) = pki(&dir, &["fleet.test"]);
    let fleet_names: Vec<String> = (1..=fleet_hosts.len())
        .map(|i| format!("fleet-{i}"))
        .collect();
    let fleet_listen: Vec<String> = fleet_hosts.iter().map(|h| bracketed(h)).collect();
    let (port, _fleet) = on_one_port(
        &fleet_listen,
        &fleet_names,
        &["--tls-cert", &cert, "--tls-key", &key],
    );
    // plain.test: two plain gRPC nodes; a third is given by its address.
    let (plain_port, plain) = on_one_port(
        &["127.0.0.5".into(), "127.0.0.6".into()],
        &["plain-1".into(), "plain-2".into()],
        &[],
    );
    let extra = SutNode::start("plain-3", &[]);

    let mut records: Vec<(String, &str)> = fleet_hosts
        .iter()
        .map(|h| (h.to_string(), "fleet.test"))
        .collect();
    records.push(("127.0.0.6".into(), "plain.test"));
    records.push(("127.0.0.5".into(), "plain.test"));
    let dns = match Dns::start(&bin, &dir, &records) {
        Ok(d) => d,
        Err(why) => {
            println!("dns discovery test: skipped ({why})");
            return;
        }
    };
    let with = |nodes: &[&str], out: &Path| {
        let mut a: Vec<String> = nodes.iter().map(|s| s.to_string()).collect();
        a.extend(offline(out));
        a
    };

    // dns:// beside an address: one node per record, sorted, named in the
    // network facts with what the name resolved to.
    let out = dir.join("plain");
    let sut = format!("dns://plain.test:{plain_port},{}", extra.addr);
    let o = dns.loadgen(&with(&["--sut", &sut], &out));
    assert_ran_on(&o, &out, &["plain-1", "plain-2", "plain-3"]);
    assert_eq!(
        detail_str(&out, "network_nodes"),
        format!(
            "3 (plain-1 at 127.0.0.5:{plain_port}, plain-2 at 127.0.0.6:{plain_port}, \
             plain-3 at {})",
            extra.addr
        )
    );
    assert_eq!(
        detail_str(&out, "network_nodes_resolved"),
        format!("dns://plain.test:{plain_port} -> 127.0.0.5 127.0.0.6")
    );
    assert_eq!(plain.len(), 2);

    // A launcher's file naming the fleet by DNS over QUIC, checked against
    // the CA: each node's certificate is valid for the name only, so this
    // also shows that the name, not the address, is what is checked.
    let n = fleet_hosts.len();
    let file = dir.join("nodes.txt");
    std::fs::write(
        &file,
        format!("# the fleet\ndns+quic://fleet.test:{port}?nodes={n}\n"),
    )
    .unwrap();
    let out = dir.join("quic");
    let names: Vec<&str> = fleet_names.iter().map(String::as_str).collect();
    let o = dns.loadgen(&with(
        &["--sut-file", &file.display().to_string(), "--tls-ca", &ca],
        &out,
    ));
    assert_ran_on(&o, &out, &names);
    assert_eq!(detail_str(&out, "network_transport"), "quic");
    let mut expected =
        format!("dns+quic://fleet.test:{port}?nodes={n} -> 127.0.0.2 127.0.0.3 127.0.0.4");
    if ipv6 {
        expected.push_str(" ::1");
    }
    assert_eq!(detail_str(&out, "network_nodes_resolved"), expected);

    // The same nodes over gRPC with TLS.
    let out = dir.join("grpcs");
    let sut = format!("dns+grpcs://fleet.test:{port}");
    let o = dns.loadgen(&with(&["--sut", &sut, "--tls-ca", &ca], &out));
    assert_ran_on(&o, &out, &names);
    assert_eq!(detail_str(&out, "network_transport"), "grpcs");

    // Fewer nodes than ?nodes=N after --ready-timeout: the run does not
    // start, and says what it saw.
    let out = dir.join("short");
    let sut = format!("dns://plain.test:{plain_port}?nodes=3");
    let o = dns.loadgen(&with(&["--sut", &sut, "--ready-timeout", "2"], &out));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&sut) && err.contains("2 addresses, 3 expected after waiting 2 s"),
        "{err}"
    );
    assert!(err.contains("waiting for"), "the wait is shown: {err}");

    // A name the server does not know.
    let o = dns.loadgen(&with(
        &["--sut", "dns://nowhere.test:50051", "--ready-timeout", "0"],
        &dir.join("nowhere"),
    ));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("dns://nowhere.test:50051: cannot resolve it"),
        "{err}"
    );
}
