//! OpenTelemetry traces across the two processes: loadgen-node and a
//! sut-node, both with `--otlp`, export to an OTLP collector run by the
//! test (the real OTLP protobufs, decoded), and a traced sample's spans form
//! one tree from the QDL's send to the node's answer.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tests::collector::{Collector, ReceivedSpan};
use tests::{
    detail_is_intact, detail_value, loadgen, scratch, sut_list, text, SutNode, SMALL_DATA,
};

const QUERIES: usize = 20;

/// A short SingleStream run of `QUERIES` samples through `node`.
fn run(
    node: &SutNode,
    otlp: &str,
    ratio: &str,
    tag: &str,
) -> (std::process::Output, tests::Scratch) {
    let out = scratch(tag);
    let dir = out.to_str().expect("utf-8 path").to_string();
    let sut = sut_list(std::slice::from_ref(node));
    let count = format!("min_query_count={QUERIES}");
    let mut args = vec!["--sut", sut.as_str(), "--scenario", "SingleStream"];
    args.extend_from_slice(SMALL_DATA);
    args.extend_from_slice(&["--set", "min_duration=0", "--set", &count]);
    args.extend_from_slice(&["--set", "max_query_count=20"]);
    args.extend_from_slice(&["--otlp", otlp, "--otlp-sample-ratio", ratio]);
    args.extend_from_slice(&["--progress-interval", "0", "--output-dir", &dir]);
    let o = loadgen(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    (o, out)
}

fn named<'a>(spans: &'a [ReceivedSpan], service: &str, name: &str) -> Vec<&'a ReceivedSpan> {
    spans
        .iter()
        .filter(|s| s.service == service && s.name == name)
        .collect()
}

#[test]
fn a_traced_sample_is_one_tree_from_the_qdl_to_the_node() {
    let collector = Collector::start();
    let node = SutNode::start("traced", &["--otlp", &collector.endpoint]);
    let (o, _) = run(&node, &collector.endpoint, "1", "otlp-tree");
    let stderr = text(&o.stderr);
    // Run, series, two sessions and every sample's span.
    let exported = format!(
        "{} spans exported, 0 dropped (queue full), 0 failed to export, 0 unsent at exit",
        QUERIES + 4
    );
    assert!(stderr.contains(&exported), "{stderr}");

    // The node's spans come once its answers are sent; its session's once
    // the stream has ended, after every sample's.
    let spans = collector.wait_for(Duration::from_secs(20), |s| {
        named(s, "sut-node", "sut-node.sample").len() >= QUERIES
            && named(s, "sut-node", "sut-node.session").len() == 2
            && named(s, "loadgen-node", "loadgen-node.run").len() == 1
    });
    let by_id: HashMap<&[u8], &ReceivedSpan> =
        spans.iter().map(|s| (s.span_id.as_slice(), s)).collect();
    let parent = |s: &ReceivedSpan| by_id.get(s.parent_span_id.as_slice()).copied();

    // loadgen-node: run > session (x2, one per connection) and run > series.
    let run = named(&spans, "loadgen-node", "loadgen-node.run")[0];
    assert!(run.parent_span_id.is_empty(), "the run is a root span");
    assert_eq!(run.attr("scenario"), Some("SingleStream"));
    let sessions = named(&spans, "loadgen-node", "loadgen-node.session");
    assert_eq!(sessions.len(), 2, "--connections-per-node 2");
    let mut sent = 0;
    for s in &sessions {
        assert_eq!(s.parent_span_id, run.span_id);
        assert_eq!(s.attr("node_name"), Some("traced"));
        sent += s
            .attr("samples_sent")
            .and_then(|v| v.parse::<usize>().ok())
            .expect("samples_sent");
    }
    assert_eq!(sent, QUERIES);
    let series = named(&spans, "loadgen-node", "loadgen-node.series");
    assert_eq!(series.len(), 1, "one performance series");
    assert_eq!(series[0].parent_span_id, run.span_id);
    assert_eq!(series[0].attr("kind"), Some("performance"));

    // Every sample traced (ratio 1): qdl.sample under the series, and the
    // node's span for it a child of it, in the same trace.
    let qdl = named(&spans, "loadgen-node", "qdl.sample");
    assert_eq!(qdl.len(), QUERIES);
    let node_samples = named(&spans, "sut-node", "sut-node.sample");
    assert_eq!(node_samples.len(), QUERIES);
    for n in &node_samples {
        let q = parent(n).unwrap_or_else(|| panic!("the node's span has no parent here: {n:?}"));
        assert_eq!(q.name, "qdl.sample");
        assert_eq!(q.service, "loadgen-node");
        assert_eq!(q.trace_id, n.trace_id, "one trace across both processes");
        assert_eq!(q.attr("sample.id"), n.attr("sample.id"));
        assert_eq!(q.parent_span_id, series[0].span_id);
        assert_eq!(q.trace_id, run.trace_id);
        // One host, one clock: the node's time is inside the QDL's.
        assert!(
            q.start_ns <= n.start_ns && n.end_ns <= q.end_ns,
            "{q:?} {n:?}"
        );
    }

    // Under each node sample: queue, batch (with compute) and answer, in
    // order, inside it.
    for n in &node_samples {
        let children = |p: &ReceivedSpan| -> Vec<&ReceivedSpan> {
            spans
                .iter()
                .filter(|s| s.parent_span_id == p.span_id)
                .collect()
        };
        let kids = children(n);
        let one = |name: &str| {
            let found: Vec<_> = kids.iter().filter(|s| s.name == name).collect();
            assert_eq!(found.len(), 1, "{name} under {n:?}: {kids:?}");
            *found[0]
        };
        let (queue, batch, answer) = (one("queue"), one("batch"), one("answer"));
        assert_eq!(kids.len(), 3, "{kids:?}");
        let compute = children(batch);
        assert_eq!(compute.len(), 1);
        assert_eq!(compute[0].name, "compute");
        assert!(batch.attr("batch.size").is_some_and(|s| s != "0"));
        for s in [queue, batch, answer, compute[0]] {
            assert_eq!(s.trace_id, n.trace_id);
            assert!(
                n.start_ns <= s.start_ns && s.end_ns <= n.end_ns,
                "{s:?} in {n:?}"
            );
        }
        assert!(queue.end_ns <= batch.start_ns && batch.start_ns <= answer.start_ns);
    }
    // The node's session spans (one per stream).
    for s in named(&spans, "sut-node", "sut-node.session") {
        assert_eq!(s.attr("node"), Some("traced"));
    }
}

#[test]
fn ratio_zero_traces_the_run_but_no_sample() {
    let collector = Collector::start();
    let node = SutNode::start("untraced", &["--otlp", &collector.endpoint]);
    run(&node, &collector.endpoint, "0", "otlp-zero");
    // The node's session spans end after its last answer: once they are
    // here, any sample span would be too.
    let spans = collector.wait_for(Duration::from_secs(20), |s| {
        named(s, "sut-node", "sut-node.session").len() == 2
            && named(s, "loadgen-node", "loadgen-node.run").len() == 1
    });
    assert_eq!(
        named(&spans, "loadgen-node", "loadgen-node.series").len(),
        1
    );
    assert_eq!(
        named(&spans, "loadgen-node", "loadgen-node.session").len(),
        2
    );
    for name in [
        "qdl.sample",
        "sut-node.sample",
        "queue",
        "batch",
        "compute",
        "answer",
    ] {
        assert!(!spans.iter().any(|s| s.name == name), "{name} with ratio 0");
    }
}

#[test]
fn an_unreachable_collector_neither_fails_nor_holds_up_the_run() {
    // A port nobody listens on: connections are refused.
    let closed = tests::ClosedPort::new();
    let endpoint = format!("http://{}", closed.addr());
    let node = SutNode::start("lonely", &["--otlp", &endpoint]);
    let started = Instant::now();
    let (o, dir) = run(&node, &endpoint, "1", "otlp-unreachable");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let stderr = text(&o.stderr);
    assert!(
        stderr.contains("loadgen-node: warning: OTLP traces to")
            && stderr.contains("0 spans exported")
            && stderr.contains("failed to export"),
        "{stderr}"
    );
    // The run ended as usual (exit 0, checked by `run`), its logs whole.
    let dir = std::path::Path::new(&dir);
    assert!(detail_is_intact(dir));
    assert!(detail_value(dir, "result_validity").is_some());
    let summary = std::fs::read_to_string(dir.join("mlperf_log_summary.txt")).unwrap_or_default();
    assert!(summary.contains("Result is :"), "{summary}");
}
