//! What the workspace's tests need from the host they run on, in one place:
//!
//! - [`Scratch`]: a test's own directory under the temporary directory,
//!   removed when the test passes and kept, with its path printed, when it
//!   fails;
//! - [`ClosedPort`]: a loopback port on which nothing listens, held for as
//!   long as the test counts on that (a port merely freed can be handed to
//!   the next test that binds port 0);
//! - [`with_free_port`]: a server that must be told its port before it
//!   starts (an outside program), started again on another port when the
//!   one it was given was taken in between.
//!
//! The suite's runner (`tests/run.sh`) points `TMPDIR` at one directory per
//! run and checks that the tests left nothing in it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test support: a failed expectation is the calling test's failure
#![warn(missing_docs)]

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};

/// A fresh directory for one test, removed on drop unless the thread is
/// panicking (a failed test), in which case it is kept and its path printed.
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    /// `NAME` under the temporary directory, with the process id so that two
    /// test binaries never share one; emptied first if an earlier run of the
    /// same process id left it.
    pub fn new(name: &str) -> Scratch {
        let path = std::env::temp_dir().join(format!("mlperf-net-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        if let Err(e) = std::fs::create_dir_all(&path) {
            panic!(
                "cannot create the scratch directory {}: {e}",
                path.display()
            );
        }
        Scratch { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.path.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("scratch directory kept: {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// A TCP port on 127.0.0.1 that is bound but never listens: a connection to
/// it is refused at once, and no other socket can take the port while this
/// value lives.
#[derive(Debug)]
pub struct ClosedPort {
    _socket: socket2::Socket,
    port: u16,
}

impl ClosedPort {
    /// Binds a fresh loopback port (port 0) without listening on it.
    pub fn new() -> ClosedPort {
        use socket2::{Domain, Protocol, Socket, Type};
        let socket =
            Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).expect("a TCP socket");
        socket
            .bind(&SocketAddr::from(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).into())
            .expect("bind 127.0.0.1:0");
        let port = socket
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .map(|a| a.port())
            .expect("the bound port");
        ClosedPort {
            _socket: socket,
            port,
        }
    }

    /// The port number, refused to every connection while `self` lives.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Default for ClosedPort {
    fn default() -> Self {
        Self::new()
    }
}

/// How a start on a given port ended, for [`with_free_port`].
pub enum Started<T> {
    /// The server started on the port; `T` is what `start` made of it.
    Up(T),
    /// The port was taken before the server could bind it: try another.
    PortTaken,
}

/// Runs `start` with a port that was free a moment ago (`pick` says which:
/// it binds and lets go), again with a fresh one each time `start` reports
/// that the port had been taken meanwhile, up to 20 times. For servers that
/// must be told their port before they start and cannot report the one the
/// kernel gave them.
pub fn with_free_port<T>(
    mut pick: impl FnMut() -> u16,
    mut start: impl FnMut(u16) -> Started<T>,
) -> T {
    for _ in 0..20 {
        if let Started::Up(t) = start(pick()) {
            return t;
        }
    }
    panic!("every port tried was taken before the server could bind it (20 tries)");
}

/// A TCP port on 127.0.0.1 that was free when asked: for [`with_free_port`].
pub fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// Whether text a server printed says that its address was in use.
pub fn says_address_in_use(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.contains("address already in use") || t.contains("address in use") || t.contains("eaddrinuse")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_port_refuses_and_stays_taken() {
        let closed = ClosedPort::new();
        let e = std::net::TcpStream::connect(closed.addr()).expect_err("nothing listens");
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
        assert!(std::net::TcpListener::bind(closed.addr()).is_err());
    }

    #[test]
    fn scratch_goes_on_success_and_stays_on_failure() {
        let kept = std::thread::spawn(|| {
            let s = Scratch::new("testkit-kept");
            let p = s.to_path_buf();
            std::fs::write(s.join("f"), b"x").unwrap();
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                let _s = s;
                panic!("a failing test");
            }))
            .expect_err("it panicked");
            p
        })
        .join()
        .unwrap();
        assert!(kept.join("f").exists(), "kept after a failure");
        std::fs::remove_dir_all(&kept).unwrap();

        let s = Scratch::new("testkit-gone");
        let p = s.to_path_buf();
        drop(s);
        assert!(!p.exists());
    }

    #[test]
    fn a_taken_port_is_tried_again() {
        let mut tries = 0;
        let port = with_free_port(free_tcp_port, |p| {
            tries += 1;
            if tries < 3 {
                Started::PortTaken
            } else {
                Started::Up(p)
            }
        });
        assert_eq!(tries, 3);
        assert!(port > 0);
    }
}
