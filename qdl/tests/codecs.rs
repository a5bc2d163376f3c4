//! Codecs through the QDL, against in-process fake sut-nodes: compressed
//! samples sent as stored, compressed answers decoded before completion,
//! the negotiation at session start, the report, and bombs and corrupt
//! answers ending the run INVALID with a reason naming the node.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

mod common;

use std::collections::HashMap;

use common::*;
use compression::{CodecKind, CodecSpec};
use loadgen_engine::{SystemUnderTest, TestMode, TestSettings};
use proto::Codec;
use qdl::{Qdl, QdlConfig, QdlError};

fn facts(qdl: &Qdl) -> HashMap<String, String> {
    qdl.report().into_iter().collect()
}

#[test]
fn compressed_samples_and_answers_cross_intact() {
    let a = FakeNode::start(Behaviour {
        output_codec: Codec::Lz4,
        ..Behaviour::named("a")
    });
    let b = FakeNode::start(Behaviour {
        output_codec: Codec::Zstd,
        ..Behaviour::named("b")
    });
    let total = 64;
    let spec: CodecSpec = "zstd:5".parse().unwrap();
    let data = Compressed::new(total, spec);
    let qdl = Qdl::connect(
        QdlConfig {
            input_codec: Codec::Zstd,
            ..config(&[&a, &b])
        },
        data.clone(),
    )
    .expect("connects");
    let settings = TestSettings {
        mode: TestMode::AccuracyOnly,
        ..single_stream(1)
    };
    let ran = run(&qdl, &settings, total, "codecs-round-trip");
    assert_eq!(ran.outcome.run_error, None);

    // Every answer is the one for its sample's uncompressed bytes, so the
    // node decoded the input and the QDL decoded the answer.
    let entries = accuracy(&ran.dir);
    assert_eq!(entries.len(), total);
    for e in &entries {
        let idx = e["qsl_idx"].as_u64().unwrap() as usize;
        let want = facts::synthetic::answer(&sample_bytes(idx), ANSWER_LEN);
        assert_eq!(e["data"], hex(&want), "sample {idx}");
    }

    // The sessions announced zstd; the nodes got the stored frames unchanged.
    let mut sent = 0u64;
    for n in [&a, &b] {
        for s in n.log.sessions.lock().unwrap().iter() {
            assert_eq!(s.input_codec, Codec::Zstd as i32);
        }
        for (_, payload, codec) in n.log.samples.lock().unwrap().iter() {
            assert_eq!(*codec, Codec::Zstd as i32);
            assert!(data.0.iter().any(|s| s.payload == *payload));
            sent += payload.len() as u64;
        }
    }

    let t = qdl.stats().total();
    assert_eq!(t.bytes_sent, sent);
    let raw: u64 = (0..total).map(|i| sample_bytes(i).len() as u64).sum();
    assert_eq!(t.uncompressed_bytes_sent, raw);
    assert_eq!(
        t.uncompressed_bytes_received,
        total as u64 * ANSWER_LEN as u64
    );
    assert!(t.bytes_received > 0 && t.bytes_received != t.uncompressed_bytes_received);

    let f = facts(&qdl);
    assert_eq!(f["network_transport"], "grpc");
    assert_eq!(f["network_input_codec"], "zstd");
    assert_eq!(f["network_output_codec"], "a: lz4, b: zstd");
    assert_eq!(
        f["network_nodes"],
        format!("2 (a at {}, b at {})", a.addr, b.addr)
    );
    // Neither count given: both sized to this host and the two nodes.
    let sized = qdl::Sizing::here(2, None, None);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let to = format!(
        "sized to {cores} core{} and 2 nodes",
        if cores == 1 { "" } else { "s" }
    );
    assert_eq!(
        f["network_connections"],
        format!(
            "{} ({} per node, {to})",
            2 * sized.connections_per_node,
            sized.connections_per_node
        )
    );
    assert_eq!(
        f["network_qdl_threads"],
        format!("{} ({to})", sized.qdl_threads)
    );
    assert_eq!(f["network_bytes_sent"], t.bytes_sent.to_string());
    assert_eq!(f["network_bytes_received"], t.bytes_received.to_string());
    assert_eq!(
        f["network_input_compression_ratio"],
        format!("{:.3}", raw as f64 / sent as f64)
    );
    let out = t.uncompressed_bytes_received as f64 / t.bytes_received as f64;
    assert_eq!(f["network_output_compression_ratio"], format!("{out:.3}"));

    // The engine logged the report: detail records and the summary block.
    assert_eq!(detail_values(&ran.dir, "network_input_codec"), ["zstd"]);
    let summary = std::fs::read_to_string(ran.dir.join("mlperf_log_summary.txt")).unwrap();
    assert!(summary.contains("System under test"), "{summary}");
    assert!(
        summary.contains("network_output_codec : a: lz4, b: zstd"),
        "{summary}"
    );
    assert!(
        summary.contains("network_input_compression_ratio : "),
        "{summary}"
    );
}

#[test]
fn first_tokens_are_decoded_too() {
    let node = FakeNode::start(Behaviour {
        first_tokens: true,
        output_codec: Codec::Lz4,
        ..Behaviour::named("llm")
    });
    let total = 16;
    let qdl = connect(&[&node], total);
    let settings = TestSettings {
        mode: TestMode::AccuracyOnly,
        use_token_latencies: true,
        ..single_stream(1)
    };
    let ran = run(&qdl, &settings, total, "codecs-tokens");
    assert_eq!(ran.outcome.run_error, None);
    for e in &accuracy(&ran.dir) {
        let idx = e["qsl_idx"].as_u64().unwrap() as usize;
        let want = facts::synthetic::answer(&sample_bytes(idx), ANSWER_LEN);
        assert_eq!(e["token_data"], hex(&want[..4]), "sample {idx}");
        assert_eq!(e["data"], hex(&want), "sample {idx}");
    }
    assert_eq!(facts(&qdl)["network_output_codec"], "lz4");
}

#[test]
fn a_node_that_cannot_decode_the_input_codec_is_refused_before_the_run() {
    let good = FakeNode::start(Behaviour::named("ok"));
    let old = FakeNode::start(Behaviour {
        input_codecs: vec![Codec::None],
        ..Behaviour::named("old")
    });
    let e = match Qdl::connect(
        QdlConfig {
            input_codec: Codec::Lz4,
            ..config(&[&good, &old])
        },
        Compressed::new(8, CodecSpec::from(CodecKind::Lz4)),
    ) {
        Ok(_) => panic!("connect should fail"),
        Err(e) => e,
    };
    assert!(matches!(e, QdlError::Incompatible { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&old.label("old"))
            && msg.contains("cannot decode lz4 inputs (it decodes none)")
            && msg.contains("--input-codec"),
        "{msg}"
    );
    // The refused node never got a sample: nothing ran.
    assert_eq!(old.log.samples.lock().unwrap().len(), 0);
}

/// A run whose node answers sample number 5 badly ends INVALID, naming it.
fn bad_answer_ends_the_run(b: Behaviour, tag: &str, why: &str) {
    let name = b.name.clone();
    let node = FakeNode::start(b);
    let qdl = Qdl::connect(
        QdlConfig {
            max_answer_bytes: 1 << 20,
            ..config(&[&node])
        },
        Samples::new(64),
    )
    .expect("connects");
    let ran = run(&qdl, &single_stream(200), 64, tag);
    let err = ran.outcome.run_error.expect("the run fails");
    assert!(
        err.contains(&node.label(&name))
            && err.contains("answer for response id")
            && err.contains(why),
        "{err}"
    );
    assert_eq!(detail_values(&ran.dir, "result_validity"), ["INVALID"]);
    let summary = std::fs::read_to_string(ran.dir.join("mlperf_log_summary.txt")).unwrap();
    assert!(summary.contains(&node.label(&name)), "{summary}");
}

#[test]
fn a_decompression_bomb_ends_the_run_invalid_naming_the_node() {
    bad_answer_ends_the_run(
        Behaviour {
            output_codec: Codec::Zstd,
            bomb_at: Some(5),
            ..Behaviour::named("bomber")
        },
        "codecs-bomb",
        "zstd frame of",
    );
    // The limit and the claim are both in the reason.
    let node = FakeNode::start(Behaviour {
        output_codec: Codec::Zstd,
        bomb_at: Some(1),
        ..Behaviour::named("bomber2")
    });
    let qdl = Qdl::connect(
        QdlConfig {
            max_answer_bytes: 1000,
            ..config(&[&node])
        },
        Samples::new(8),
    )
    .expect("connects");
    let ran = run(&qdl, &single_stream(20), 8, "codecs-bomb-2");
    let err = ran.outcome.run_error.expect("the run fails");
    assert!(
        err.contains("declares 1073741824 bytes, more than the limit of 1000 bytes"),
        "{err}"
    );
}

#[test]
fn an_answer_over_the_limit_is_refused_while_it_arrives() {
    // 4 MiB in one message against a 1000-byte answer limit: the transport
    // refuses the message at its header (its limit is about 1 MiB), before
    // buffering it.
    let node = FakeNode::start(Behaviour {
        huge_at: Some(1),
        ..Behaviour::named("huge")
    });
    let qdl = Qdl::connect(
        QdlConfig {
            max_answer_bytes: 1000,
            ..config(&[&node])
        },
        Samples::new(8),
    )
    .expect("connects");
    let ran = run(&qdl, &single_stream(20), 8, "codecs-huge");
    let err = ran.outcome.run_error.expect("the run fails");
    assert!(err.contains(&node.label("huge")), "{err}");
    assert!(err.contains("too large"), "{err}");
}

#[test]
fn a_corrupt_answer_ends_the_run_invalid_naming_the_node() {
    for (codec, why) in [
        (Codec::Lz4, "corrupt lz4 frame"),
        (Codec::Zstd, "corrupt zstd frame"),
    ] {
        bad_answer_ends_the_run(
            Behaviour {
                output_codec: codec,
                corrupt_at: Some(5),
                ..Behaviour::named("garbler")
            },
            &format!("codecs-corrupt-{}", CodecKind::from(codec)),
            why,
        );
    }
}
