//! `loadgen-node --metrics ADDR`: the run's figures in the Prometheus text
//! format at http://ADDR/metrics, read at scrape time from the engine's live
//! figures and the QDL's per-connection counters and timings.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use loadgen_engine::live::LiveStats;
use metrics_endpoint::Page;
use qdl::breakdown::Part;
use qdl::{Counters, QdlView};

/// Starts serving the engine's live figures (the native engine's) and the
/// QDL's (a network run's).
pub fn serve(addr: &str, live: Option<Arc<LiveStats>>, qdl: Option<QdlView>) -> Result<SocketAddr> {
    let at = metrics_endpoint::serve(addr, move || render(live.as_deref(), qdl.as_ref()))
        .with_context(|| format!("--metrics {addr}: cannot listen"))?;
    eprintln!("loadgen-node: metrics on http://{at}/metrics");
    Ok(at)
}

const QUANTILES: [f64; 3] = [0.5, 0.9, 0.99];

pub fn render(live: Option<&LiveStats>, qdl: Option<&QdlView>) -> String {
    let mut p = Page::new();
    if let Some(live) = live {
        series(&mut p, live);
    }
    if let Some(qdl) = qdl {
        network(&mut p, qdl);
    }
    p.finish()
}

fn series(p: &mut Page, live: &LiveStats) {
    let s = live.snapshot();
    p.gauge(
        "loadgen_series_samples_issued",
        "Samples issued in the series in progress.",
        &[],
        s.issued as f64,
    );
    p.gauge(
        "loadgen_series_samples_completed",
        "Samples completed in the series in progress.",
        &[],
        s.completed as f64,
    );
    let percentile = format!("{}", s.target_percentile * 100.0);
    p.gauge(
        "loadgen_series_latency_seconds",
        "Running latency at the target percentile of the performance series in progress \
         (0 until measured).",
        &[("percentile", &percentile)],
        s.percentile_latency_ns as f64 / 1e9,
    );
    p.gauge(
        "loadgen_series_latency_bound_seconds",
        "The Server latency bound (0: none).",
        &[],
        s.target_latency_ns as f64 / 1e9,
    );
}

fn network(p: &mut Page, qdl: &QdlView) {
    let mut per_node: BTreeMap<String, Counters> = BTreeMap::new();
    for c in qdl.stats().connections {
        *per_node.entry(c.node_name).or_default() += c.counters;
    }
    type Field = fn(&Counters) -> u64;
    let counters: [(&str, &str, Field); 5] = [
        (
            "loadgen_node_samples_issued_total",
            "Samples sent to the node.",
            |c| c.samples_sent,
        ),
        (
            "loadgen_node_samples_completed_total",
            "Answers received from the node.",
            |c| c.answers_received,
        ),
        (
            "loadgen_node_samples_failed_total",
            "Errors received from the node.",
            |c| c.errors_received,
        ),
        (
            "loadgen_node_bytes_sent_total",
            "Sample payload bytes sent to the node, as sent.",
            |c| c.bytes_sent,
        ),
        (
            "loadgen_node_bytes_received_total",
            "Answer and first-token payload bytes received from the node, as received.",
            |c| c.bytes_received,
        ),
    ];
    for (name, help, field) in counters {
        for (node, c) in &per_node {
            p.counter(name, help, &[("node", node)], field(c));
        }
    }
    for (node, c) in &per_node {
        let done = c.answers_received + c.errors_received;
        p.gauge(
            "loadgen_node_samples_outstanding",
            "Samples sent to the node and not answered yet.",
            &[("node", node)],
            c.samples_sent.saturating_sub(done) as f64,
        );
    }
    let breakdown = qdl.breakdown();
    for part in Part::ALL {
        for (node, _, t) in &breakdown.nodes {
            let h = t.part(part);
            let q: Vec<(f64, f64)> = QUANTILES
                .iter()
                .map(|&q| (q, h.quantile(q) as f64 / 1e9))
                .collect();
            p.summary(
                "loadgen_node_latency_seconds",
                "Answers' time by part (see mlperf_net_breakdown.json): total is QDL send to \
                 answer decoded; to within 1.6%.",
                &[("node", node), ("part", part.name())],
                &q,
                h.count(),
            );
        }
    }
}
