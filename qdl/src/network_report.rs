//! What the QDL reports about a run (`SystemUnderTest::report`): each pair
//! becomes a detail-log record and a line of the summary's "System under
//! test" block.
//!
//! | key | value |
//! | --- | --- |
//! | `network_transport` | how the nodes are reached (`grpc`); `NAME: T, ...` when they differ |
//! | `network_nodes` | `N (NAME at ADDR, ...)` |
//! | `network_nodes_resolved` | only when the node list had `dns://` entries: each, and the addresses it resolved to (`dns://NAME:PORT -> ADDR ADDR ...; ...`) |
//! | `network_connections` | `C (K per node, sized to N cores and M nodes)`, or `given` for `--connections-per-node` |
//! | `network_qdl_threads` | the QDL's network threads, `T (sized to N cores and M nodes)` or `T (given)` |
//! | `network_input_codec` | the codec of the samples sent (`none`, `zstd`, `lz4`) |
//! | `network_output_codec` | the nodes' answer codec; `NAME: C, ...` when they differ |
//! | `network_bytes_sent` | sample payload bytes sent, as sent (compressed, if they are) |
//! | `network_bytes_received` | answer and first-token payload bytes received, as received |
//! | `network_input_compression_ratio` | uncompressed / sent bytes of the samples sent (`n/a` before any) |
//! | `network_output_compression_ratio` | decoded / received bytes of the answers (`n/a` before any) |
//! | `network_payload_rate_sent` | `network_bytes_sent` over the time from the first sample issued to the report (the run's end), in Gbit/s |
//! | `network_payload_rate_received` | `network_bytes_received` over the same time, in Gbit/s |
//!
//! Everything comes from the per-connection counters, read once here: the
//! hot path only adds to relaxed atomics.

use std::time::Duration;

use compression::CodecKind;
use proto::Codec;

use crate::config::{NodeAddr, Sizing};
use crate::conn::Counters;

/// What the report is made from, read from the QDL when the LoadGen asks.
pub(crate) struct Run<'a> {
    pub(crate) nodes: Vec<RunNode<'a>>,
    pub(crate) connections: usize,
    /// Connections per node and network threads, and how they were chosen.
    pub(crate) sizing: Sizing,
    /// What the node list's `dns://` entries resolved to.
    pub(crate) resolved: &'a [String],
    pub(crate) input_codec: Codec,
    /// The sum of every connection's counters.
    pub(crate) total: Counters,
    /// From the first sample issued to now: the payload rates' time.
    pub(crate) since_first_issue: Duration,
}

/// One node, as its session described it.
pub(crate) struct RunNode<'a> {
    pub(crate) name: &'a str,
    pub(crate) addr: &'a NodeAddr,
    pub(crate) output_codec: Codec,
}

pub(crate) fn facts(run: &Run<'_>) -> Vec<(String, String)> {
    let total = run.total;
    let names: Vec<&str> = run.nodes.iter().map(|n| n.name).collect();
    let transports: Vec<String> = run
        .nodes
        .iter()
        .map(|n| format!("{:?}", n.addr.transport).to_ascii_lowercase())
        .collect();
    let output_codecs: Vec<String> = run
        .nodes
        .iter()
        .map(|n| CodecKind::from(n.output_codec).name().to_string())
        .collect();
    let nodes = run
        .nodes
        .iter()
        .map(|n| format!("{} at {}", n.name, n.addr))
        .collect::<Vec<_>>()
        .join(", ");
    let secs = run.since_first_issue.as_secs_f64();
    let mut facts = vec![
        fact("network_transport", per_node(&names, &transports)),
        fact("network_nodes", format!("{} ({nodes})", run.nodes.len())),
    ];
    if !run.resolved.is_empty() {
        facts.push(fact("network_nodes_resolved", run.resolved.join("; ")));
    }
    facts.extend([
        fact(
            "network_connections",
            format!(
                "{} ({} per node, {})",
                run.connections,
                run.sizing.connections_per_node,
                chosen(run.sizing.connections_sized_to)
            ),
        ),
        fact(
            "network_qdl_threads",
            format!(
                "{} ({})",
                run.sizing.qdl_threads,
                chosen(run.sizing.threads_sized_to)
            ),
        ),
        fact(
            "network_input_codec",
            CodecKind::from(run.input_codec).name().to_string(),
        ),
        fact("network_output_codec", per_node(&names, &output_codecs)),
        fact("network_bytes_sent", total.bytes_sent.to_string()),
        fact("network_bytes_received", total.bytes_received.to_string()),
        fact(
            "network_input_compression_ratio",
            ratio(total.uncompressed_bytes_sent, total.bytes_sent),
        ),
        fact(
            "network_output_compression_ratio",
            ratio(total.uncompressed_bytes_received, total.bytes_received),
        ),
        fact("network_payload_rate_sent", gbits(total.bytes_sent, secs)),
        fact(
            "network_payload_rate_received",
            gbits(total.bytes_received, secs),
        ),
    ]);
    facts
}

/// How a count was chosen: sized to the host's cores and the nodes, or
/// given.
fn chosen(sized_to: Option<(usize, usize)>) -> String {
    match sized_to {
        Some((cores, nodes)) => format!(
            "sized to {cores} core{} and {nodes} node{}",
            if cores == 1 { "" } else { "s" },
            if nodes == 1 { "" } else { "s" }
        ),
        None => "given".to_string(),
    }
}

fn fact(key: &str, value: String) -> (String, String) {
    (key.to_string(), value)
}

/// The value shared by every node, or `name: value` for each when they
/// differ.
fn per_node(names: &[&str], values: &[String]) -> String {
    match values.first() {
        Some(first) if values.iter().all(|v| v == first) => first.clone(),
        Some(_) => names
            .iter()
            .zip(values)
            .map(|(n, v)| format!("{n}: {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        None => String::new(),
    }
}

/// `uncompressed / wire` with three decimals; `n/a` when nothing travelled.
fn ratio(uncompressed: u64, wire: u64) -> String {
    if wire == 0 {
        "n/a".to_string()
    } else {
        format!("{:.3}", uncompressed as f64 / wire as f64)
    }
}

/// `bytes` over `secs` as Gbit/s with three decimals; `n/a` before any
/// time has passed.
fn gbits(bytes: u64, secs: f64) -> String {
    if secs > 0.0 {
        format!("{:.3} Gbit/s", bytes as f64 * 8.0 / secs / 1e9)
    } else {
        "n/a".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_per_node_only_when_they_differ() {
        let same = ["lz4".to_string(), "lz4".to_string()];
        assert_eq!(per_node(&["a", "b"], &same), "lz4");
        let differ = ["lz4".to_string(), "none".to_string()];
        assert_eq!(per_node(&["a", "b"], &differ), "a: lz4, b: none");
        assert_eq!(per_node(&[], &[]), "");
    }

    #[test]
    fn ratios() {
        assert_eq!(ratio(300, 100), "3.000");
        assert_eq!(ratio(100, 108), "0.926");
        assert_eq!(ratio(0, 0), "n/a");
    }

    #[test]
    fn rates() {
        assert_eq!(gbits(1_250_000_000, 2.0), "5.000 Gbit/s");
        assert_eq!(gbits(0, 1.0), "0.000 Gbit/s");
        assert_eq!(gbits(100, 0.0), "n/a");
    }
}
