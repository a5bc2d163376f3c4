//! Real inference servers for the forwarding backends' tests: started as a
//! process group, killed with it when dropped (also when a test fails).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// An environment variable that the backend's setup script exports.
pub fn setup_var(name: &str, script: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: `source tests/backends/{script}` first (tests/backends/run.sh does)")
    })
}

pub struct InferenceServer {
    child: Child,
    pub log: PathBuf,
}

impl InferenceServer {
    /// Starts `cmd` in its own process group, output to `log`.
    pub fn start(mut cmd: Command, log: &Path) -> InferenceServer {
        let out = std::fs::File::create(log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
        InferenceServer {
            child,
            log: log.to_path_buf(),
        }
    }

    /// Starts the server `command` makes for `n` ports on 127.0.0.1 (free a
    /// moment ago; such servers must be told theirs) and waits until `GET
    /// ready_path` on the first answers 200. Started again on fresh ports
    /// when it exits saying that one was taken meanwhile; panics with its
    /// log if it exits otherwise or is not ready within `limit`.
    pub fn start_on_free_ports(
        n: usize,
        log: &Path,
        ready_path: &str,
        limit: Duration,
        command: impl Fn(&[u16]) -> Command,
    ) -> (InferenceServer, Vec<u16>) {
        for _ in 0..20 {
            let ports: Vec<u16> = (0..n).map(|_| testkit::free_tcp_port()).collect();
            let mut server = InferenceServer::start(command(&ports), log);
            match server.wait_ready(ports[0], ready_path, limit) {
                Ok(()) => return (server, ports),
                Err(said) if testkit::says_address_in_use(&said) => continue,
                Err(said) => panic!("{said}"),
            }
        }
        panic!("every set of ports tried was taken before the server could bind it (20 tries)");
    }

    /// Waits until `GET path` on `port` answers 200; the reason, with the
    /// server's log, if it does not within `limit` or the server exits.
    fn wait_ready(&mut self, port: u16, path: &str, limit: Duration) -> Result<(), String> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "the server exited ({status}):\n{}",
                    self.log_text()
                ));
            }
            if http_status(port, path) == Some(200) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Err(format!(
            "the server was not ready within {limit:?}:\n{}",
            self.log_text()
        ))
    }

    pub fn log_text(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for InferenceServer {
    fn drop(&mut self) {
        // The whole group: servers start workers of their own.
        let pgid = self.child.id() as i32;
        // SAFETY: kill(2) on a process group this test created.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// The status of `GET path` on 127.0.0.1:`port`, if it answers.
pub fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    conn.write_all(request.as_bytes()).ok()?;
    let mut head = [0u8; 12];
    conn.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}
