//! A node out of file descriptors (idle connections have taken them all)
//! says so, closes the connections that send nothing, and then serves a
//! real client again. (That its accept loop waits between failed accepts
//! rather than spin is `listen`'s `AcceptRetry` rule, tested there.)
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The node's descriptor limit: room for its own files, a few connections.
const NOFILE: libc::rlim_t = 64;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn name_round_trip(addr: &str) -> Result<String, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let connect = proto::sut_node_client::SutNodeClient::connect(format!("http://{addr}"));
        let mut client = tokio::time::timeout(Duration::from_secs(3), connect)
            .await
            .map_err(|_| "connect timed out".to_string())?
            .map_err(|e| e.to_string())?;
        let reply =
            tokio::time::timeout(Duration::from_secs(3), client.name(proto::NameRequest {}))
                .await
                .map_err(|_| "Name timed out".to_string())?
                .map_err(|e| e.to_string())?;
        Ok(reply.into_inner().name)
    })
}

#[test]
fn out_of_descriptors_the_node_waits_then_serves_again() {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sut-node"));
    command
        .args([
            "serve",
            "--backend",
            "synthetic",
            "--listen",
            "127.0.0.1:0",
            "--no-quic",
        ])
        .args(["--name", "fd-node", "--handshake-timeout", "2"])
        .args(["--max-connections-per-peer", "1000"])
        .args(["--max-connections", "1000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs in the child.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: NOFILE,
                rlim_max: NOFILE,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut node = Killed(command.spawn().expect("sut-node starts"));
    let mut ready = String::new();
    BufReader::new(node.0.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    let addr = ready
        .split_whitespace()
        .skip_while(|w| *w != "on")
        .nth(1)
        .expect("the ready line names the address")
        .to_string();
    let mut stderr = node.0.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut all = String::new();
        let _ = stderr.read_to_string(&mut all);
        all
    });

    // Silent connections until the node has no descriptor left: the kernel
    // still completes them (the listen backlog), the node cannot accept.
    let mut silent: Vec<TcpStream> = (0..NOFILE + 32)
        .map(|_| TcpStream::connect(&addr).expect("connect"))
        .collect();
    // The node closes the silent ones after the handshake timeout, accepts
    // the backlog in turn, and a real client is served within a few rounds.
    let deadline = Instant::now() + Duration::from_secs(30);
    let name = loop {
        match name_round_trip(&addr) {
            Ok(name) => break name,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
            }
            Err(e) => panic!("no answer after the silent connections: {e}"),
        }
    };
    assert_eq!(name, "fd-node");
    silent.clear();
    drop(node);
    let log = log.join().unwrap();
    assert!(
        log.contains("accepting a gRPC connection failed"),
        "the node did not say why it could not accept: {log}"
    );
}
