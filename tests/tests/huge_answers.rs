//! WAN-2.2's answers: one 720p video per sample, 449,740,800 bytes in bf16,
//! from a synthetic node over gRPC and QUIC. The node answers with the
//! table's size for its `--benchmark`, loadgen-node accepts exactly that
//! much by default and no byte more, the rules' refusal of compression holds
//! for answers too, and loadgen-node holds each answer once.

use tests::{loadgen, loadgen_measured, pins, quic_list, scratch, text, SutNode};

const WAN: &str = "wan-2.2-t2v-a14b";
const ANSWER: u64 = 224_870_400 * 2;

fn run(
    sut: &str,
    scenario: &str,
    mode: &str,
    queries: &str,
    extra: &[&str],
) -> (std::process::Output, u64) {
    let out = scratch(&format!("wan-{scenario}-{mode}"));
    let out_s = out.display().to_string();
    let mut args = vec![
        "--sut",
        sut,
        "--model",
        WAN,
        "--scenario",
        scenario,
        "--mode",
        mode,
        "--performance-sample-count",
        "2",
        "--no-trace",
        "--progress-interval",
        "0",
        "--set",
        "min_duration=0",
        "--set",
        &queries,
        "--output-dir",
        &out_s,
    ];
    args.extend(extra);
    if !args.contains(&"--total-sample-count") {
        args.extend(["--total-sample-count", "2"]);
    }
    let r = loadgen_measured(&args);
    let _ = std::fs::remove_dir_all(&out);
    r
}

#[test]
fn video_sized_answers_travel_whole_and_are_held_once() {
    let node = SutNode::start("wan", &["--benchmark", WAN, "--service-time", "fixed:0"]);
    // SingleStream over gRPC: one answer at a time, held once.
    let (o, peak) = run(
        &node.addr,
        "SingleStream",
        "PerformanceOnly",
        "max_query_count=2",
        &["--set", "min_query_count=2"],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("Result is"), "{}", text(&o.stdout));
    assert!(peak < ANSWER * 3 / 2, "loadgen-node peaked at {peak} bytes");

    // Offline accuracy over QUIC: both answers logged as the official
    // LoadGen logs them (hex), each the synthetic answer of its sample.
    // Bounded: an answer being received on each of the two connections, and
    // at most 1 GiB of answers waiting for the accuracy log.
    let quic = quic_list(std::slice::from_ref(&node));
    let pin = pins(std::slice::from_ref(&node));
    let (o, peak) = run(
        &quic,
        "Offline",
        "AccuracyOnly",
        "min_query_count=2",
        &[
            "--tls-pin",
            &pin,
            "--verify-synthetic",
            "--total-sample-count",
            "2",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("all 2 logged answers match"),
        "{}",
        text(&o.stdout)
    );
    assert!(
        peak < 2 * ANSWER + (1 << 30) + (256 << 20),
        "loadgen-node peaked at {peak} bytes"
    );
}

#[test]
fn a_byte_more_than_the_rules_video_is_refused_and_so_is_compressing_it() {
    let big = SutNode::start(
        "wan-big",
        &[
            "--benchmark",
            WAN,
            "--service-time",
            "fixed:0",
            "--output-size",
            &(ANSWER + 1).to_string(),
        ],
    );
    let (o, _) = run(
        &big.addr,
        "SingleStream",
        "PerformanceOnly",
        "max_query_count=1",
        &["--set", "min_query_count=1"],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&ANSWER.to_string()),
        "the limit is named: {err}"
    );

    let lz4 = SutNode::start(
        "wan-lz4",
        &[
            "--benchmark",
            WAN,
            "--output-codec",
            "lz4",
            "--output-size",
            "64",
        ],
    );
    let o = loadgen(&["--sut", &lz4.addr, "--model", WAN, "--scenario", "Offline"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("compresses its answers (lz4)") && err.contains("no compression"),
        "{err}"
    );
}
