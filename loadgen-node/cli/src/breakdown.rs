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
/// The file also has the tail of a long run, which the printed table leaves
/// out.
const FILE_QUANTILES: [(&str, f64); 4] =
    [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999)];

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
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
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
        for (name, q) in FILE_QUANTILES {
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
        let untimed = match t.untimed {
            0 => String::new(),
            n => format!(" ({n} without the node's timings)"),
        };
        let rows = Part::ALL.map(|p| {
            let h = t.part(p);
            let [p50, p90, p99] = QUANTILES.map(|(_, q)| h.quantile(q));
            (p.name(), [p50, p90, p99, h.max()])
        });
        out += &format!("  {title}: {} answers{untimed}\n", t.answers());
        out += &table(&rows);
    };
    for (name, addr, t) in &b.nodes {
        block(format!("node {name} ({addr})"), t);
    }
    if b.nodes.len() > 1 {
        block(format!("all {} nodes", b.nodes.len()), &b.overall);
    }
    out
}

/// One block's columns: each part's p50, p90, p99 and max, in microseconds.
/// Ten characters wide while every value fits with two spaces before it,
/// wider when one does not, so that values never run together.
fn table(rows: &[(&str, [u64; 4])]) -> String {
    let cells: Vec<[String; 4]> = rows.iter().map(|(_, v)| v.map(us)).collect();
    let w = cells
        .iter()
        .flatten()
        .map(|c| c.len() + 2)
        .fold(10, usize::max);
    let mut out = format!(
        "    {:<14}{:>w$}{:>w$}{:>w$}{:>w$}\n",
        "", "p50", "p90", "p99", "max"
    );
    for ((name, _), cells) in rows.iter().zip(&cells) {
        let _ = write!(out, "    {name:<14}");
        for c in cells {
            let _ = write!(out, "{c:>w$}");
        }
        out.push('\n');
    }
    out
}

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_ten_wide_while_values_fit() {
        let t = table(&[("node_send", [1_500, 22_000, 333_333, 4_000_000])]);
        assert_eq!(
            t,
            "                         p50       p90       p99       max\n\
             \x20   node_send            1.5      22.0     333.3    4000.0\n"
        );
    }

    #[test]
    fn large_values_widen_the_columns_and_stay_apart() {
        // An Offline run at official length: minutes of latency.
        let rows = [
            (
                "total",
                [
                    339_302_416_460,
                    339_885_356_067,
                    678_416_796_467,
                    678_416_796_467,
                ],
            ),
            ("qdl_decode", [1_000, 2_000, 3_000, 4_000]),
        ];
        let t = table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            [
                "total",
                "339302416.5",
                "339885356.1",
                "678416796.5",
                "678416796.5"
            ]
        );
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["qdl_decode", "1.0", "2.0", "3.0", "4.0"]
        );
        // Every column is as wide as the widest value and two spaces.
        assert!(lines.iter().all(|l| l.len() == 4 + 14 + 4 * 13), "{t}");
    }
}
