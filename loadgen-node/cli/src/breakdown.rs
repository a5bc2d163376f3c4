//! The run's latency breakdown (from the QDL, so for either engine):
//! printed after the result and written as `mlperf_net_breakdown.json`
//! beside the MLPerf logs, never into them.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use qdl::breakdown::{Breakdown, Part, Timings};
use qdl::{Counters, QdlView};
use serde_json::{json, Value};

/// The file's name in the output directory.
pub const FILE: &str = "mlperf_net_breakdown.json";

const QUANTILES: [(&str, f64); 3] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)];

/// Prints the breakdown and writes its file; a file that cannot be written
/// is reported, and leaves the run's result as it is.
pub fn report(qdl: &QdlView, dir: &Path) {
    let b = qdl.breakdown();
    if b.overall.answers() == 0 {
        return;
    }
    print!("{}", text(&b));
    if let Err(e) = write(&b, &traffic(qdl), dir) {
        eprintln!("loadgen-node: warning: {e:#}");
    }
}

/// Each node's traffic, in node order.
fn traffic(qdl: &QdlView) -> Vec<Counters> {
    let stats = qdl.stats();
    let mut out: Vec<(String, Counters)> = Vec::new();
    for c in stats.connections {
        match out.last_mut() {
            Some((name, t)) if *name == c.node_name => *t += c.counters,
            _ => out.push((c.node_name, c.counters)),
        }
    }
    out.into_iter().map(|(_, t)| t).collect()
}

/// `traffic`: each node's counters, in the breakdown's node order.
pub fn write(b: &Breakdown, traffic: &[Counters], dir: &Path) -> Result<PathBuf> {
    let path = dir.join(FILE);
    let body =
        serde_json::to_string_pretty(&to_json(b, traffic)).context("encoding the breakdown")?;
    std::fs::write(&path, body + "\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

pub fn to_json(b: &Breakdown, traffic: &[Counters]) -> Value {
    json!({
        "unit": "ns",
        "parts": {
            "total": "QDL send to answer decoded, on the LoadGen host",
            "wire_and_qdl": "total minus the node's time: both ways on the wire, and the QDL",
            "node_queue": "on the node: receipt to the start of the sample's batch",
            "node_compute": "on the node: the batch's compute",
            "node_send": "on the node: output to answer handed to its transport",
            "qdl_decode": "in the QDL: answer message in hand to decoded",
        },
        "overall": timings_json(&b.overall),
        "nodes": b.nodes.iter().enumerate().map(|(i, (name, addr, t))| {
            let mut v = timings_json(t);
            v["name"] = json!(name);
            v["address"] = json!(addr);
            if let Some(c) = traffic.get(i) {
                v["samples_sent"] = json!(c.samples_sent);
                v["errors_received"] = json!(c.errors_received);
                v["bytes_sent"] = json!(c.bytes_sent);
                v["bytes_received"] = json!(c.bytes_received);
            }
            v
        }).collect::<Vec<_>>(),
    })
}

fn timings_json(t: &Timings) -> Value {
    let mut v = json!({
        "answers": t.answers(),
        "answers_without_node_timings": t.untimed,
    });
    for p in Part::ALL {
        let h = t.part(p);
        let mut s = json!({ "count": h.count(), "max": h.max() });
        for (name, q) in QUANTILES {
            s[name] = json!(h.quantile(q));
        }
        v[p.name()] = s;
    }
    v
}

/// The printed table: one block per node, and one for the run when there
/// are several.
pub fn text(b: &Breakdown) -> String {
    let mut out = format!(
        "\nWhere the time went (not part of the MLPerf logs; also in {FILE}), in microseconds:\n"
    );
    let mut block = |title: String, t: &Timings| {
        let _ = writeln!(
            out,
            "  {title}: {} answers{}\n    {:<14}{:>10}{:>10}{:>10}{:>10}",
            t.answers(),
            match t.untimed {
                0 => String::new(),
                n => format!(" ({n} without the node's timings)"),
            },
            "",
            "p50",
            "p90",
            "p99",
            "max"
        );
        for p in Part::ALL {
            let h = t.part(p);
            let _ = write!(out, "    {:<14}", p.name());
            for (_, q) in QUANTILES {
                let _ = write!(out, "{:>10}", us(h.quantile(q)));
            }
            let _ = writeln!(out, "{:>10}", us(h.max()));
        }
    };
    for (name, addr, t) in &b.nodes {
        block(format!("node {name} ({addr})"), t);
    }
    if b.nodes.len() > 1 {
        block(format!("all {} nodes", b.nodes.len()), &b.overall);
    }
    out
}

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1e3)
}
