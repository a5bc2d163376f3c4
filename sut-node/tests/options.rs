//! `sut-node` options that are out of range fail at once with a message
//! naming the option (and the file and line for --config), never a panic,
//! an allocation abort or an endless read.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::process::Command;

fn sut_node(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sut-node"))
        .args(args)
        .output()
        .expect("sut-node runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn out_of_range_options_are_refused_naming_them() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["health", "--timeout", "1e20"],
            "--timeout 100000000000000000000: must be",
        ),
        (&["health", "--timeout", "inf"], "--timeout inf: must be"),
        (&["health", "--timeout", "0"], "--timeout 0: must be"),
        (
            &[
                "serve",
                "--backend",
                "kserve",
                "--server-url",
                "h:1",
                "--model-name",
                "m",
                "--kserve-timeout",
                "1e20",
            ],
            "--kserve-timeout must be",
        ),
        (
            &[
                "serve",
                "--backend",
                "openai",
                "--server-url",
                "http://h:1",
                "--model-name",
                "m",
                "--openai-timeout",
                "1e20",
            ],
            "--openai-timeout must be",
        ),
        (
            &[
                "serve",
                "--backend",
                "synthetic",
                "--max-batch-size",
                "1000000000",
            ],
            "--max-batch-size",
        ),
        (
            &[
                "serve",
                "--backend",
                "synthetic",
                "--output-size",
                "100000000000",
            ],
            "--output-size",
        ),
        (
            &["serve", "--backend", "synthetic", "--threads", "100000"],
            "--threads",
        ),
        (
            &["serve", "--backend", "synthetic", "--config", "/dev/zero"],
            "/dev/zero: larger than",
        ),
        (
            &["serve", "--backend", "synthetic", "--name", "node\u{202E}a"],
            "holds U+202E (RIGHT-TO-LEFT OVERRIDE) at byte 4",
        ),
        (
            &["serve", "--backend", "synthetic", "--name", "node\u{200B}"],
            "holds U+200B (ZERO WIDTH SPACE) at byte 4",
        ),
    ];
    for (args, why) in cases {
        let (code, err) = sut_node(args);
        assert!(
            matches!(code, Some(1 | 2)),
            "{args:?}: exit {code:?}: {err}"
        );
        assert!(err.contains(why), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn a_config_value_of_the_wrong_type_names_file_and_line() {
    let dir = testkit::Scratch::new("sut-node-options");
    let path = dir.join("node.toml");
    std::fs::write(&path, "backend = \"synthetic\"\nheartbeat_ms = -5\n").unwrap();
    let (code, err) = sut_node(&["serve", "--config", path.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("{}:2: key `heartbeat_ms`", path.display())),
        "{err}"
    );
}

#[test]
fn the_former_name_of_server_url_still_works() {
    // Without a server URL the kserve backend asks for one; given through
    // `--upstream` (or a config file's `upstream`), it goes on to the next
    // missing option.
    let (code, err) = sut_node(&["serve", "--backend", "kserve"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("needs --server-url URL"), "{err}");
    let (code, err) = sut_node(&["serve", "--backend", "kserve", "--upstream", "h:1"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("needs --model-name NAME"), "{err}");
    let dir = testkit::Scratch::new("sut-node-alias");
    let path = dir.join("node.toml");
    std::fs::write(&path, "backend = \"openai\"\nupstream = \"http://h:1\"\n").unwrap();
    let (code, err) = sut_node(&["serve", "--config", path.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("needs --model-name NAME"), "{err}");
}
