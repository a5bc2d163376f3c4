//! sut-node's exit statuses are the shared scheme's (`facts::exit`, the one
//! loadgen-node uses too): refused flags and a node that does not answer
//! are errors (1), help and a ready node are done (0).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use facts::exit::Exit;

fn status(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sut-node"))
        .args(args)
        .output()
        .expect("sut-node runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn code(e: Exit) -> Option<i32> {
    Some(i32::from(e.code()))
}

#[test]
fn flags_and_health_end_with_the_shared_statuses() {
    let (c, err) = status(&["serve", "--backend", "synthetic", "--no-such-flag"]);
    assert_eq!(c, code(Exit::Error), "{err}");
    assert!(err.contains("--no-such-flag"), "{err}");
    assert_eq!(status(&["--help"]).0, code(Exit::Done));
    let (c, err) = status(&["serve", "--backend", "synthetic", "--no-grpc", "--no-quic"]);
    assert_eq!(c, code(Exit::Error), "{err}");
    assert!(err.contains("leave nothing to serve"), "{err}");

    let closed = testkit::ClosedPort::new();
    let (c, err) = status(&["health", "--addr", &closed.addr(), "--timeout", "5"]);
    assert_eq!(c, code(Exit::Error), "{err}");

    let mut node = Command::new(env!("CARGO_BIN_EXE_sut-node"))
        .args(["serve", "--listen", "127.0.0.1:0", "--no-quic"])
        .args(["--backend", "synthetic", "--name", "exit-test"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("sut-node starts");
    let mut line = String::new();
    BufReader::new(node.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("the ready line");
    let addr = line
        .split(" ready on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected ready line: {line}"))
        .to_string();
    let (c, err) = status(&["health", "--addr", &addr]);
    let _ = node.kill();
    let _ = node.wait();
    assert_eq!(c, code(Exit::Done), "{err}");
}
