//! The QDL against in-process fake sut-nodes, driven by the real LoadGen
//! engine: names, the data path, and every way a node can fail a run.

mod common;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use loadgen_engine::{Scenario, SystemUnderTest, TestMode, TestSettings};
use proto::{Codec, PROTOCOL_VERSION};
use qdl::breakdown::Part;
use qdl::{DispatchPolicy, Qdl, QdlConfig, QdlError};

fn connect_err(config: QdlConfig) -> QdlError {
    match Qdl::connect(config, Samples::new(8)) {
        Ok(_) => panic!("connect should fail"),
        Err(e) => e,
    }
}

#[test]
fn name_is_a_round_trip_to_every_node_and_aggregates_them() {
    let a = FakeNode::start(Behaviour::named("alpha"));
    let b = FakeNode::start(Behaviour::named("beta"));
    let qdl = connect(&[&a, &b], 8);
    assert_eq!(qdl.node_names(), ["alpha", "beta"]);
    assert_eq!(qdl.name().unwrap(), "Network SUT (2 nodes: alpha, beta)");
    assert_eq!(qdl.name().unwrap(), "Network SUT (2 nodes: alpha, beta)");
    for n in [&a, &b] {
        assert_eq!(n.log.name_calls.load(Ordering::SeqCst), 2);
        // One session per connection, saying what this run is.
        let sessions = n.log.sessions.lock().unwrap();
        assert_eq!(sessions.len(), 2);
        for s in sessions.iter() {
            assert_eq!(s.protocol_version, PROTOCOL_VERSION);
            assert_eq!(
                (s.model.as_str(), s.scenario.as_str()),
                ("resnet50", "SingleStream")
            );
            assert_eq!(s.input_codec, Codec::None as i32);
        }
    }
    let one = FakeNode::start(Behaviour::named("solo"));
    assert_eq!(
        connect(&[&one], 8).name().unwrap(),
        "Network SUT (1 node: solo)"
    );
}

#[test]
fn duplicate_node_names_are_rejected() {
    let a = FakeNode::start(Behaviour::named("twin"));
    let b = FakeNode::start(Behaviour::named("twin"));
    let e = connect_err(config(&[&a, &b]));
    assert!(matches!(e, QdlError::DuplicateNames(_)), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("\"twin\"") && msg.contains(&a.addr) && msg.contains(&b.addr),
        "{msg}"
    );

    // Names that become duplicates after the sessions (a node restarted with
    // another configuration) are caught by the Name round trip itself.
    let c = FakeNode::start(Behaviour {
        name_reply: Some("same".into()),
        ..Behaviour::named("c")
    });
    let d = FakeNode::start(Behaviour {
        name_reply: Some("same".into()),
        ..Behaviour::named("d")
    });
    let qdl = connect(&[&c, &d], 8);
    let e = qdl.name().unwrap_err().to_string();
    assert!(e.contains("unique") && e.contains("\"same\""), "{e}");
}

#[test]
fn names_of_other_characters_than_host_names_are_refused_naming_node_and_character() {
    let long = "n".repeat(qdl::MAX_NODE_NAME_BYTES + 1);
    let cases = [
        ("a\n:::MLLOG {}", "U+000A (a control character) at byte 1"),
        ("tab\there", "U+0009 (a control character) at byte 3"),
        (long.as_str(), "129 bytes long (at most 128)"),
        (
            "node\u{202E}b-edon",
            "U+202E (RIGHT-TO-LEFT OVERRIDE) at byte 4",
        ),
        ("node\u{200B}a", "U+200B (ZERO WIDTH SPACE) at byte 4"),
        ("node a", "U+0020 (SPACE) at byte 4"),
    ];
    for (name, why) in cases {
        let good = FakeNode::start(Behaviour::named("ok"));
        let bad = FakeNode::start(Behaviour::named(name));
        let e = connect_err(config(&[&good, &bad])).to_string();
        let node = format!("sut-node {}:", bad.addr);
        assert!(e.contains(&node) && e.contains(why), "{e}");
        assert!(!e.contains(name), "the refused name stays out: {e}");
    }
    // A name changed after the session is checked by the Name round trip.
    let n = FakeNode::start(Behaviour {
        name_reply: Some("x\r\nResult is : VALID".into()),
        ..Behaviour::named("n")
    });
    let e = connect(&[&n], 8).name().unwrap_err().to_string();
    assert!(
        e.contains(&n.label("n")) && e.contains("U+000D (a control character) at byte 1"),
        "{e}"
    );
}

#[test]
fn samples_cross_the_network_and_answers_complete_the_right_ids() {
    let a = FakeNode::start(Behaviour::named("n1"));
    let b = FakeNode::start(Behaviour::named("n2"));
    let total = 64;
    let qdl = Qdl::connect(
        QdlConfig {
            policy: DispatchPolicy::RoundRobin,
            ..config(&[&a, &b])
        },
        Samples::new(total),
    )
    .expect("connects");
    let settings = TestSettings {
        mode: TestMode::SubmissionRun,
        ..single_stream(200)
    };
    let ran = run(&qdl, &settings, total, "data-path");
    assert_eq!(ran.outcome.run_error, None);
    assert!(detail_values(&ran.dir, "error_runtime").is_empty());
    assert_eq!(
        detail_values(&ran.dir, "sut_name"),
        ["Network SUT (2 nodes: n1, n2)"]
    );

    // Accuracy phase: every sample once, each with the answer computed from
    // its own bytes, so bytes and ids both made the round trip intact.
    let entries = accuracy(&ran.dir);
    assert_eq!(entries.len(), total);
    let mut seen = vec![false; total];
    for e in &entries {
        let idx = e["qsl_idx"].as_u64().unwrap() as usize;
        seen[idx] = true;
        let want = facts::synthetic::answer(&sample_bytes(idx), ANSWER_LEN);
        assert_eq!(e["data"], hex(&want), "sample {idx}");
    }
    assert!(seen.iter().all(|&s| s));

    // The nodes received the samples' exact bytes, each id once.
    let stats = qdl.stats();
    let total_stats = stats.total();
    let mut ids = HashMap::new();
    for n in [&a, &b] {
        let got = n.log.samples.lock().unwrap();
        assert!(got.len() >= 100, "round-robin gives each node half");
        for (id, payload, codec) in got.iter() {
            assert_eq!(*codec, Codec::None as i32);
            assert!(
                ids.insert(*id, payload.clone()).is_none(),
                "id {id} sent twice"
            );
        }
    }
    assert_eq!(ids.len() as u64, total_stats.samples_sent);
    assert!(total_stats.samples_sent >= total as u64 + 200);
    assert_eq!(total_stats.answers_received, total_stats.samples_sent);
    assert_eq!(total_stats.errors_received, 0);
    let payload_bytes: u64 = ids.values().map(|p| p.len() as u64).sum();
    assert_eq!(total_stats.bytes_sent, payload_bytes);
    assert_eq!(
        total_stats.bytes_received,
        total_stats.answers_received * ANSWER_LEN as u64
    );
    assert_eq!(stats.connections.len(), 4);
    for c in &stats.connections {
        assert!(c.counters.samples_sent > 0, "{c:?}");
        assert!(["n1", "n2"].contains(&c.node_name.as_str()));
    }

    // Every answer's time, per node: the node's parts as it reported them,
    // inside the QDL's total.
    let b = qdl.breakdown();
    assert_eq!(b.overall.answers(), total_stats.answers_received);
    assert_eq!(b.overall.untimed, 0);
    assert_eq!(b.nodes.len(), 2);
    for (name, _, t) in &b.nodes {
        assert!(t.answers() >= 100, "{name}");
        assert_eq!(t.part(Part::NodeQueue).max(), 1_000);
        assert_eq!(t.part(Part::NodeCompute).quantile(0.5), 2_000);
        assert_eq!(t.part(Part::NodeSend).quantile(0.99), 500);
        let total = t.part(Part::Total);
        let wire = t.part(Part::WireAndQdl);
        assert!(total.quantile(0.5) > 3_500, "{name}");
        assert!(wire.max() + 3_500 == total.max(), "{name}");
    }
}

#[test]
fn weighted_dispatch_follows_the_weights() {
    let a = FakeNode::start(Behaviour::named("big"));
    let b = FakeNode::start(Behaviour::named("small"));
    let qdl = Qdl::connect(
        QdlConfig {
            policy: "weighted:3,1".parse().unwrap(),
            ..config(&[&a, &b])
        },
        Samples::new(64),
    )
    .expect("connects");
    let ran = run(&qdl, &single_stream(400), 64, "weighted");
    assert_eq!(ran.outcome.run_error, None);
    let big = a.log.received.load(Ordering::SeqCst) as i64;
    let small = b.log.received.load(Ordering::SeqCst) as i64;
    assert!(big + small >= 400);
    assert!((big - 3 * small).abs() <= 3, "{big} vs {small}");
}

#[test]
fn offline_batches_of_answers_complete_correctly() {
    let node = FakeNode::start(Behaviour::named("batcher"));
    let total = 2000;
    let qdl = connect(&[&node], total);
    let settings = TestSettings {
        scenario: Scenario::Offline,
        mode: TestMode::AccuracyOnly,
        ..single_stream(1)
    };
    let ran = run(&qdl, &settings, total, "offline");
    assert_eq!(ran.outcome.run_error, None);
    let entries = accuracy(&ran.dir);
    assert_eq!(entries.len(), total);
    for e in &entries {
        let idx = e["qsl_idx"].as_u64().unwrap() as usize;
        let want = facts::synthetic::answer(&sample_bytes(idx), ANSWER_LEN);
        assert_eq!(e["data"], hex(&want), "sample {idx}");
    }
    let t = qdl.stats().total();
    assert_eq!((t.samples_sent, t.answers_received), (2000, 2000));
}

#[test]
fn first_tokens_and_token_counts_reach_the_engine() {
    let node = FakeNode::start(Behaviour {
        first_tokens: true,
        ..Behaviour::named("llm")
    });
    let total = 32;
    let qdl = connect(&[&node], total);
    let settings = TestSettings {
        mode: TestMode::AccuracyOnly,
        use_token_latencies: true,
        ..single_stream(1)
    };
    let ran = run(&qdl, &settings, total, "tokens");
    assert_eq!(ran.outcome.run_error, None);
    let entries = accuracy(&ran.dir);
    assert_eq!(entries.len(), total);
    for e in &entries {
        let idx = e["qsl_idx"].as_u64().unwrap() as usize;
        let want = facts::synthetic::answer(&sample_bytes(idx), ANSWER_LEN);
        assert_eq!(e["token_data"], hex(&want[..4]), "sample {idx}");
        assert_eq!(e["token_count"], N_TOKENS, "sample {idx}");
    }
    assert_eq!(qdl.stats().total().first_tokens_received, total as u64);
}

#[test]
fn a_node_closing_its_stream_ends_the_run_promptly_naming_it() {
    let good = FakeNode::start(Behaviour::named("steady"));
    let bad = FakeNode::start(Behaviour {
        close_at: Some(25),
        ..Behaviour::named("closer")
    });
    let qdl = Qdl::connect(
        QdlConfig {
            // Long enough that the reason can only be the stream's end.
            node_timeout: Duration::from_secs(60),
            connections_per_node: Some(1),
            policy: DispatchPolicy::RoundRobin,
            ..config(&[&good, &bad])
        },
        Samples::new(64),
    )
    .expect("connects");
    let ran = run(&qdl, &single_stream(200), 64, "closed");
    let err = ran.outcome.run_error.expect("the run fails");
    assert!(
        err.contains(&format!("{}: stream closed", bad.label("closer"))),
        "{err}"
    );
    assert_eq!(detail_values(&ran.dir, "result_validity"), ["INVALID"]);
}

#[test]
fn a_stream_error_ends_the_run_with_the_status() {
    let node = FakeNode::start(Behaviour {
        status_at: Some(30),
        ..Behaviour::named("crashy")
    });
    let qdl = Qdl::connect(
        QdlConfig {
            node_timeout: Duration::from_secs(60),
            ..config(&[&node])
        },
        Samples::new(64),
    )
    .expect("connects");
    let ran = run(&qdl, &single_stream(200), 64, "status");
    let err = ran.outcome.run_error.expect("the run fails");
    assert!(
        err.contains(&format!(
            "{}: stream error: Internal: backend crashed",
            node.label("crashy")
        )),
        "{err}"
    );
}

#[test]
fn a_silent_node_is_aborted_after_the_node_timeout() {
    let node = FakeNode::start(Behaviour {
        silent_from: Some(10),
        ..Behaviour::named("sleepy")
    });
    let stall = Duration::from_millis(300);
    let qdl = Qdl::connect(
        QdlConfig {
            node_timeout: stall,
            ..config(&[&node])
        },
        Samples::new(64),
    )
    .expect("connects");
    let ran = run(&qdl, &single_stream(200), 64, "stalled");
    let err = ran.outcome.run_error.expect("the run fails");
    assert!(
        err.contains(&format!("{}: stalled", node.label("sleepy")))
            && err.contains("with 1 sample outstanding"),
        "{err}"
    );
    // When the watchdog fires is its rules' business (qdl/src/watchdog.rs).
    // The node got exactly the samples up to the one it never answered.
    assert_eq!(node.log.samples.lock().unwrap().len(), 10);
}

#[test]
fn a_node_that_heartbeats_and_never_answers_ends_the_run_at_the_node_timeout() {
    // A mock: its heartbeats go on while nothing is answered, which no real
    // node does but one whose backend hangs behind a live process.
    let node = FakeNode::start(Behaviour {
        hung_from: Some(10),
        ..Behaviour::named("hung")
    });
    let qdl = Qdl::connect(
        QdlConfig {
            node_timeout: Duration::from_millis(400),
            // No progress limit of its own: the node timeout's.
            progress_timeout: None,
            ..config(&[&node])
        },
        Samples::new(64),
    )
    .expect("connects");
    let ran = run(&qdl, &single_stream(200), 64, "hung");
    let err = ran.outcome.run_error.expect("the run ends");
    assert!(
        err.contains(&format!("{}: no progress", node.label("hung")))
            && err.contains("heartbeats but no answer or error for 400ms"),
        "{err}"
    );
    assert_eq!(detail_values(&ran.dir, "result_validity"), ["INVALID"]);
    // Heartbeats every 100 ms: far more than one arrived meanwhile.
    assert!(qdl.stats().total().messages_received > 3);
}

#[test]
fn first_tokens_sent_again_are_no_progress() {
    // A mock that re-sends every sample's first token at each heartbeat and
    // answers none: the run ends on the second first token of a sample.
    let node = FakeNode::start(Behaviour {
        first_tokens_forever: true,
        ..Behaviour::named("chatty")
    });
    let qdl = Qdl::connect(
        QdlConfig {
            node_timeout: Duration::from_secs(30),
            progress_timeout: Some(Duration::from_secs(30)),
            ..config(&[&node])
        },
        Samples::new(64),
    )
    .expect("connects");
    let settings = TestSettings {
        use_token_latencies: true,
        ..single_stream(200)
    };
    let ran = run(&qdl, &settings, 64, "tokens-forever");
    let err = ran.outcome.run_error.expect("the run ends");
    assert!(
        err.contains(&format!(
            "{}: a second first token for response id",
            node.label("chatty")
        )),
        "{err}"
    );
    assert!(ran.took < Duration::from_secs(20), "{:?}", ran.took);
}

#[test]
fn token_counts_no_answer_can_hold_are_refused_naming_the_node() {
    for (n, tag) in [(i64::MAX, "i64max"), (i64::from(u32::MAX), "u32max")] {
        let node = FakeNode::start(Behaviour {
            first_tokens: true,
            n_tokens: Some(n),
            ..Behaviour::named("boastful")
        });
        let qdl = connect(&[&node], 32);
        let settings = TestSettings {
            use_token_latencies: true,
            ..single_stream(10)
        };
        let ran = run(&qdl, &settings, 32, tag);
        let err = ran.outcome.run_error.expect("the run fails");
        assert!(
            err.contains(&format!(
                "{}: malformed answer for response id",
                node.label("boastful")
            )) && err.contains(&format!("{n} tokens")),
            "{err}"
        );
        assert_eq!(detail_values(&ran.dir, "result_validity"), ["INVALID"]);
    }
}

#[test]
fn an_answer_for_an_id_never_sent_aborts_the_run() {
    let node = FakeNode::start(Behaviour {
        wrong_id_at: Some(7),
        ..Behaviour::named("confused")
    });
    let qdl = connect(&[&node], 64);
    let ran = run(&qdl, &single_stream(200), 64, "wrong-id");
    let err = ran.outcome.run_error.expect("the run fails");
    assert!(
        err.contains(&node.label("confused")) && err.contains("not outstanding on this connection"),
        "{err}"
    );
}

#[test]
fn a_sample_error_from_a_node_aborts_the_run_with_its_message() {
    let node = FakeNode::start(Behaviour {
        error_at: Some(3),
        ..Behaviour::named("oom")
    });
    let qdl = connect(&[&node], 64);
    let ran = run(&qdl, &single_stream(200), 64, "sample-error");
    let err = ran.outcome.run_error.expect("the run fails");
    assert!(
        err.contains(&node.label("oom")) && err.contains("out of GPU memory"),
        "{err}"
    );
    assert_eq!(qdl.stats().total().errors_received, 1);
}

#[test]
fn a_sample_missing_from_the_qsl_aborts_the_run() {
    let node = FakeNode::start(Behaviour::named("n"));
    // 64 samples in the QSL, only 10 loaded.
    let qdl = connect(&[&node], 10);
    let settings = TestSettings {
        mode: TestMode::AccuracyOnly,
        ..single_stream(1)
    };
    let ran = run(&qdl, &settings, 64, "missing");
    let err = ran.outcome.run_error.expect("the run fails");
    assert!(err.contains("no loaded data for sample index"), "{err}");
}

#[test]
fn a_qdl_serves_one_test() {
    let node = FakeNode::start(Behaviour::named("n"));
    let qdl = connect(&[&node], 16);
    let first = run(&qdl, &single_stream(20), 16, "first");
    assert_eq!(first.outcome.run_error, None);
    let second = run(&qdl, &single_stream(20), 16, "second");
    let err = second.outcome.run_error.expect("refused");
    assert!(err.contains("one test only"), "{err}");
}

#[test]
fn dropping_the_qdl_ends_the_streams_cleanly() {
    let node = FakeNode::start(Behaviour::named("n"));
    let qdl = connect(&[&node], 16);
    let ran = run(&qdl, &single_stream(20), 16, "drop");
    assert_eq!(ran.outcome.run_error, None);
    assert_eq!(node.log.clean_ends.load(Ordering::SeqCst), 0);
    drop(qdl);
    // Drop waits for the node to end its side, which it does after seeing
    // the end of ours.
    assert_eq!(node.log.clean_ends.load(Ordering::SeqCst), 2);
}

#[test]
fn sessions_that_cannot_run_fail_connect_naming_the_node() {
    let cases = [
        (
            Behaviour {
                refusal: "model resnet50 is not loaded here (serving bert)".into(),
                ..Behaviour::named("r")
            },
            "session refused: model resnet50 is not loaded here",
        ),
        (
            Behaviour {
                ready: false,
                ..Behaviour::named("r")
            },
            "not ready",
        ),
        (
            Behaviour {
                version: PROTOCOL_VERSION + 1,
                ..Behaviour::named("r")
            },
            "protocol version mismatch",
        ),
    ];
    for (b, why) in cases {
        let good = FakeNode::start(Behaviour::named("ok"));
        let node = FakeNode::start(b);
        let e = connect_err(config(&[&good, &node])).to_string();
        assert!(e.contains(&node.label("r")) && e.contains(why), "{e}");
    }
}

#[test]
fn an_unreachable_node_fails_connect_as_refused() {
    // A port held, on which nothing listens.
    let closed = testkit::ClosedPort::new();
    let port = closed.port();
    let good = FakeNode::start(Behaviour::named("ok"));
    let mut config = config(&[&good]);
    config
        .nodes
        .push(format!("grpc://127.0.0.1:{port}").parse().unwrap());
    let e = connect_err(config).to_string();
    // Refused, not timed out ("no connection within").
    assert!(
        e.contains(&format!("sut-node 127.0.0.1:{port}: cannot connect")),
        "{e}"
    );
}

#[test]
fn connect_waits_for_a_node_whose_backend_is_loading() {
    let good = FakeNode::start(Behaviour::named("ok"));
    let loading = FakeNode::start(Behaviour {
        loading_sessions: 3,
        ..Behaviour::named("slow")
    });
    let mut told = Vec::new();
    let qdl = Qdl::connect_when_ready(
        config(&[&good, &loading]),
        Samples::new(8),
        Duration::from_secs(60),
        |node, _| told.push(node.to_string()),
    )
    .expect("connects once the node is ready");
    assert_eq!(qdl.node_names(), ["ok", "slow"]);
    assert!(!told.is_empty(), "the wait was reported");
    assert!(told.iter().all(|n| n.contains(&loading.addr)), "{told:?}");

    // A node that stays loading fails once the wait is over, naming it.
    let never = FakeNode::start(Behaviour {
        ready: false,
        ..Behaviour::named("never")
    });
    let started = Instant::now();
    let e = Qdl::connect_when_ready(
        config(&[&never]),
        Samples::new(8),
        Duration::from_millis(1500),
        |_, _| {},
    )
    .err()
    .expect("fails");
    assert!(started.elapsed() >= Duration::from_millis(1500));
    assert!(
        matches!(e, QdlError::NotReady { .. }) && e.to_string().contains(&never.addr),
        "{e}"
    );
}
