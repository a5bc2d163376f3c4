//! `loadgen-node preflight`: measures the network to each sut-node before
//! any run (round trips, payload throughput each way with the benchmark's
//! sample size, clock offset), finds the NIC behind each connection on both
//! ends, prints a table, writes `network.json`, checks the rules' minimum
//! bandwidth for a target throughput, and fills the Network-division fields
//! of the system description.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use proto::{DescribeReply, Nic};
use qdl::probe::NodeProbe;
use qdl::{NodeAddr, Transport};
use serde_json::{json, Map, Value};

use crate::args::{positive_seconds, SutArg};
use crate::benchmarks::{self, Benchmark, Round, Rules, Volume};
use crate::exit::Exit;
use crate::qsl::synthetic_sample;
use crate::tls::TlsArgs;

/// The system description's Network-division fields, which the submission
/// checker requires once `is_network` is "True"; preflight measures most.
pub const NETWORK_FIELDS: &[&str] = &[
    "is_network",
    "network_type",
    "network_media",
    "network_rate",
    "nic_loadgen",
    "number_nic_loadgen",
    "net_software_stack_loadgen",
    "network_protocol",
    "number_connections",
    "nic_sut",
    "number_nic_sut",
    "net_software_stack_sut",
    "network_topology",
];

/// Marks what only the submitter can fill in.
pub const PLACEHOLDER: &str = "[FILL IN]";

/// The flags of `loadgen-node preflight`.
#[derive(clap::Args, Debug, Clone)]
pub struct PreflightArgs {
    /// The sut-nodes, as for a run (`host:port`, `grpcs://`, `quic://`,
    /// `dns://NAME:PORT`).
    #[arg(long, required_unless_present = "sut_file")]
    pub sut: Option<SutArg>,

    /// More sut-nodes, one address per line, as for a run.
    #[arg(long, value_name = "FILE")]
    pub sut_file: Option<PathBuf>,

    /// The benchmark: its sample size is what the throughput probes send.
    #[arg(
        long = "benchmark",
        visible_alias = "model",
        value_name = "NAME",
        default_value = "resnet50"
    )]
    pub model: String,

    /// The throughput the submission targets (samples/s): checks the rules'
    /// minimum ingress and egress bandwidth against the measured ones.
    #[arg(long, value_name = "QPS")]
    pub target_qps: Option<f64>,

    /// Bytes per input element in the rules' bandwidth formula [default: the
    /// benchmark's preprocessed input type, e.g. 4 for fp32 ResNet50].
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..=16))]
    pub dtype_size: Option<u64>,

    /// Bytes per output element in the rules' egress formula [default: the
    /// reference answer's type, e.g. 2 for WAN-2.2's bf16 video].
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..=16))]
    pub output_dtype_size: Option<u64>,

    /// The round of the rules whose bandwidth appendix applies: v6.1 (the
    /// current rules) or v5.1.
    #[arg(long, value_name = "ROUND", default_value_t = Round::CURRENT)]
    pub rules: Round,

    /// Bytes of each probe payload instead of the benchmark's sample size.
    #[arg(long, value_name = "BYTES")]
    pub sample_bytes: Option<usize>,

    /// Codec of the probe payloads, as the run's --input-codec.
    #[arg(long, value_name = "CODEC", default_value = "none")]
    pub input_codec: compression::CodecSpec,

    /// Connections to every node, as the run's --connections-per-node
    /// [default: sized to this host and the nodes, as the run's].
    #[arg(long, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub connections_per_node: Option<usize>,

    /// Round trips of small messages measured per node.
    #[arg(long, default_value_t = 200)]
    pub round_trips: usize,

    /// Seconds of each throughput measurement (one per direction and node).
    #[arg(long, default_value = "2", value_name = "SECONDS", value_parser = positive_seconds)]
    pub seconds: Duration,

    /// Probes in flight on every connection during a throughput measurement.
    #[arg(long, default_value_t = 4)]
    pub in_flight: usize,

    /// Seconds to wait for each connection.
    #[arg(long, default_value = "5", value_name = "SECONDS", value_parser = positive_seconds)]
    pub connect_timeout: Duration,

    /// Where the measurements go.
    #[arg(long, default_value = "network.json", value_name = "FILE")]
    pub output: PathBuf,

    /// Write (or merge into an existing) system description JSON the
    /// Network-division fields; what cannot be measured is marked [FILL IN].
    #[arg(long, value_name = "FILE")]
    pub system_json: Option<PathBuf>,

    #[command(flatten)]
    pub(crate) tls: TlsArgs,
}

/// What was measured of one node.
struct NodeReport {
    addr: NodeAddr,
    remote: Option<IpAddr>,
    described: DescribeReply,
    node_nic: Option<Nic>,
    local_nic: Option<Nic>,
    rtt_p50: Duration,
    rtt_p99: Duration,
    clock_offset_ns: i64,
    /// Bytes per second LoadGen -> node and node -> LoadGen, on the wire.
    up_bps: f64,
    down_bps: f64,
    up_samples_per_s: f64,
    down_samples_per_s: f64,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// The local interface that routes to `remote`.
fn local_nic(remote: IpAddr, nics: &[Nic]) -> Option<Nic> {
    let bind: SocketAddr = match remote {
        IpAddr::V4(_) => "0.0.0.0:0".parse().ok()?,
        IpAddr::V6(_) => "[::]:0".parse().ok()?,
    };
    // Connecting a UDP socket sends nothing; it only picks the route.
    let socket = UdpSocket::bind(bind).ok()?;
    socket.connect(SocketAddr::new(remote, 9)).ok()?;
    let local = socket.local_addr().ok()?.ip();
    facts::host::nic_with_address(nics, &local).cloned()
}

fn nic_text(n: &Option<Nic>) -> String {
    match n {
        None => "unknown".into(),
        Some(n) => {
            let speed = match n.speed_mbps {
                0 => "speed unknown".to_string(),
                s => rate(s),
            };
            let driver = match n.driver.as_str() {
                "" => n.link_type.clone(),
                d => d.to_string(),
            };
            format!("{} ({driver}, {speed}, MTU {})", n.name, n.mtu)
        }
    }
}

fn rate(mbps: u64) -> String {
    match mbps {
        m if m >= 1000 && m % 1000 == 0 => format!("{} Gbit/s", m / 1000),
        m if m >= 1000 => format!("{:.1} Gbit/s", m as f64 / 1000.0),
        m => format!("{m} Mbit/s"),
    }
}

fn gbits(bytes_per_s: f64) -> String {
    format!("{:.2} Gbit/s", bytes_per_s * 8.0 / 1e9)
}

/// Measures every node, prints the table and writes the files.
pub fn preflight(args: &PreflightArgs) -> Result<Exit> {
    let bench = benchmarks::find(&args.model);
    let sample_bytes = match (args.sample_bytes, bench) {
        (Some(b), _) => b,
        (None, Some(b)) => b.input_bytes(),
        (None, None) => bail!(
            "--model {}: not a benchmark this node knows ({}); give --sample-bytes N",
            args.model,
            benchmarks::names().join(", ")
        ),
    };
    let (duration, timeout) = (args.seconds, args.connect_timeout);
    let tls = args.tls.client_tls()?;
    let list = match &args.sut {
        Some(SutArg::Null) => {
            bail!("--sut null: preflight measures the network to sut-nodes; name them")
        }
        Some(nodes) => nodes.to_string(),
        None => String::new(),
    };
    let found = qdl::find_nodes(&list, args.sut_file.as_deref(), Duration::ZERO, |_| {})
        .context("the sut-nodes (--sut, --sut-file)")?;
    let addrs = found.nodes;
    let per_node =
        qdl::Sizing::here(addrs.len(), None, args.connections_per_node).connections_per_node;
    // One sample, encoded as the run would send it.
    let raw = synthetic_sample(0, sample_bytes);
    let payload = Bytes::from(args.input_codec.codec().compress(&raw));
    let local_nics = facts::host::nics();

    let mut reports = Vec::new();
    for addr in &addrs {
        eprintln!("loadgen-node: measuring {addr}");
        let probe = NodeProbe::connect(addr, tls.as_ref(), per_node, timeout)
            .with_context(|| format!("preflight of {addr}"))?;
        // A node started with --no-describe is measured all the same; what
        // it would have said is left to fill in.
        let described = match probe.describe() {
            Ok(d) => d,
            Err(e) if e.to_string().contains("does not describe itself") => {
                eprintln!("loadgen-node: {e}; its OS, kernel and NICs are left to fill in");
                DescribeReply::default()
            }
            Err(e) => return Err(e.into()),
        };
        let trips = probe.round_trips(args.round_trips)?;
        let mut rtts = trips.rtts.clone();
        rtts.sort();
        let up = probe.throughput(payload.clone(), 0, duration, args.in_flight)?;
        let down = probe.throughput(Bytes::new(), sample_bytes as u64, duration, args.in_flight)?;
        let remote = probe.remote_ip();
        reports.push(NodeReport {
            // gRPC addresses are reached over TLS when TLS is configured.
            addr: addr.effective(tls.is_some()),
            remote,
            node_nic: remote
                .and_then(|ip| facts::host::nic_with_address(&described.nics, &ip).cloned()),
            local_nic: remote.and_then(|ip| local_nic(ip, &local_nics)),
            described,
            rtt_p50: percentile(&rtts, 0.50),
            rtt_p99: percentile(&rtts, 0.99),
            clock_offset_ns: trips.clock_offset_ns,
            up_bps: up.bytes_up as f64 / up.elapsed.as_secs_f64(),
            down_bps: down.bytes_down as f64 / down.elapsed.as_secs_f64(),
            up_samples_per_s: up.requests as f64 / up.elapsed.as_secs_f64(),
            down_samples_per_s: down.requests as f64 / down.elapsed.as_secs_f64(),
        });
    }

    print_table(&reports, sample_bytes, payload.len());
    let bandwidth = match args.target_qps {
        Some(qps) => Some(bandwidth_verdict(args, bench, qps, &reports)?),
        None => None,
    };
    let report = json!({
        "model": args.model,
        "sample_bytes": sample_bytes,
        "input_codec": args.input_codec.to_string(),
        "payload_bytes_on_wire": payload.len(),
        "connections_per_node": per_node,
        "loadgen": {
            "os": facts::host::os_name(),
            "kernel": facts::host::kernel(),
            "version": format!("loadgen-node {}", env!("CARGO_PKG_VERSION")),
        },
        "nodes": reports.iter().map(node_json).collect::<Vec<_>>(),
        "bandwidth": bandwidth.as_ref().map(|b| b.json.clone()),
    });
    write_json(&args.output, &report)?;
    println!("network description: {}", args.output.display());
    if let Some(path) = &args.system_json {
        merge_system_json(path, &system_fields(args, per_node, &reports))?;
        println!("system description network fields: {}", path.display());
    }
    Ok(match bandwidth {
        Some(b) if !b.passed => Exit::BelowBandwidth,
        _ => Exit::Done,
    })
}

fn print_table(reports: &[NodeReport], sample_bytes: usize, wire_bytes: usize) {
    println!(
        "sample: {sample_bytes} bytes ({wire_bytes} on the wire); throughput: LoadGen->node (in) / node->LoadGen (out)"
    );
    println!(
        "{:<28} {:>10} {:>10} {:>12} {:>14} {:>14}  {:<36} {:<36}",
        "node", "RTT p50", "RTT p99", "clock ofs", "in", "out", "local NIC", "node NIC"
    );
    for r in reports {
        println!(
            "{:<28} {:>8.0}us {:>8.0}us {:>10.3}ms {:>14} {:>14}  {:<36} {:<36}",
            match r.described.node_name.as_str() {
                "" => r.addr.authority().to_string(),
                name => format!("{name} ({})", r.addr.authority()),
            },
            r.rtt_p50.as_secs_f64() * 1e6,
            r.rtt_p99.as_secs_f64() * 1e6,
            r.clock_offset_ns as f64 / 1e6,
            gbits(r.up_bps),
            gbits(r.down_bps),
            nic_text(&r.local_nic),
            nic_text(&r.node_nic),
        );
    }
    for r in reports {
        let d = &r.described;
        if d.node_name.is_empty() {
            println!(
                "  {}: not described (sut-node --no-describe); in {:.0} samples/s, out {:.0} \
                 samples/s",
                r.addr.authority(),
                r.up_samples_per_s,
                r.down_samples_per_s
            );
            continue;
        }
        println!(
            "  {}: {} {}; {} ({}); {}; in {:.0} samples/s, out {:.0} samples/s",
            d.node_name,
            d.os,
            d.kernel,
            d.node_version,
            d.backend,
            match d.backend_version.as_str() {
                "" => "backend version unknown",
                v => v,
            },
            r.up_samples_per_s,
            r.down_samples_per_s
        );
    }
}

fn nic_json(n: &Option<Nic>) -> Value {
    match n {
        None => Value::Null,
        Some(n) => json!({
            "name": n.name, "driver": n.driver, "speed_mbps": n.speed_mbps,
            "mtu": n.mtu, "link_type": n.link_type, "addresses": n.addresses,
        }),
    }
}

fn node_json(r: &NodeReport) -> Value {
    let d = &r.described;
    json!({
        "address": r.addr.to_string(),
        "ip": r.remote.map(|i| i.to_string()),
        "transport": r.addr.transport.describe(false),
        "described": !d.node_name.is_empty(),
        "name": d.node_name,
        "node_version": d.node_version,
        "backend": d.backend,
        "backend_version": d.backend_version,
        "os": d.os,
        "kernel": d.kernel,
        "nics": d.nics.iter().map(|n| nic_json(&Some(n.clone()))).collect::<Vec<_>>(),
        "node_nic": nic_json(&r.node_nic),
        "local_nic": nic_json(&r.local_nic),
        "rtt_p50_us": r.rtt_p50.as_secs_f64() * 1e6,
        "rtt_p99_us": r.rtt_p99.as_secs_f64() * 1e6,
        "clock_offset_ms": r.clock_offset_ns as f64 / 1e6,
        "in_bytes_per_s": r.up_bps,
        "out_bytes_per_s": r.down_bps,
        "in_samples_per_s": r.up_samples_per_s,
        "out_samples_per_s": r.down_samples_per_s,
    })
}

/// Bytes per element of the benchmark's input: its tensor's type, or 1 for
/// a sample of several tensors (counted in bytes).
fn input_dtype_size(b: &Benchmark) -> u64 {
    match b.input {
        [one] => benchmarks::dtype_bytes(one.dtype) as u64,
        _ => 1,
    }
}

/// Bytes per element of the reference answer, where its size divides by
/// the rules' element count (WAN-2.2's bf16 video: 2); else 4.
fn output_dtype_size(b: &Benchmark, egress: Volume) -> u64 {
    match egress {
        Volume::Elements(n) if n > 0 && (b.output_bytes as u64).is_multiple_of(n) => {
            (b.output_bytes as u64 / n).max(1)
        }
        _ => 4,
    }
}

struct BandwidthVerdict {
    passed: bool,
    json: Value,
}

/// The rules' minimum bandwidth at `qps` against the sum of the nodes'
/// measured throughputs (each node measured alone).
fn bandwidth_verdict(
    args: &PreflightArgs,
    bench: Option<&benchmarks::Benchmark>,
    qps: f64,
    reports: &[NodeReport],
) -> Result<BandwidthVerdict> {
    let rules = bench.and_then(|b| b.rules(args.rules));
    let (
        Some(b),
        Some(Rules {
            ingress: Some(ingress),
            egress: Some(egress),
            ..
        }),
    ) = (bench, rules)
    else {
        bail!(
            "--target-qps: the {} rules have no minimum bandwidth for {} (they have one for: {})",
            args.rules,
            args.model,
            benchmarks::BENCHMARKS
                .iter()
                .filter(|b| b.rules(args.rules).is_some_and(|r| r.ingress.is_some()))
                .map(|b| b.model)
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let dtype_in = args.dtype_size.unwrap_or_else(|| input_dtype_size(b));
    let dtype_out = args
        .output_dtype_size
        .unwrap_or_else(|| output_dtype_size(b, *egress));
    let measured_in: f64 = reports.iter().map(|r| r.up_bps).sum();
    let measured_out: f64 = reports.iter().map(|r| r.down_bps).sum();
    let mut passed = true;
    let mut rows = Vec::new();
    println!(
        "bandwidth rule ({} rules) for {} at {qps} samples/s (dtype size in {dtype_in}, out {dtype_out} bytes):",
        args.rules, args.model
    );
    for (what, volume, dtype, measured) in [
        ("ingress", *ingress, dtype_in, measured_in),
        ("egress", *egress, dtype_out, measured_out),
    ] {
        let (required, formula) = match volume {
            Volume::Negligible => (0.0, "negligible: more than 0".to_string()),
            Volume::Elements(n) => (
                qps * n as f64 * dtype as f64,
                format!("{qps} x {n} x {dtype}"),
            ),
            Volume::Bytes(n) => (qps * n as f64, format!("{qps} x {n} bytes")),
        };
        let ok = measured > required;
        passed &= ok;
        let margin = (required > 0.0).then(|| (measured / required - 1.0) * 100.0);
        println!(
            "  {what}: required {} (= {formula}), measured {}: {}{}",
            gbits(required),
            gbits(measured),
            if ok { "PASS" } else { "FAIL" },
            margin.map_or(String::new(), |m| format!(" (margin {m:+.1}%)"))
        );
        rows.push(json!({
            "direction": what, "required_bytes_per_s": required, "measured_bytes_per_s": measured,
            "passed": ok, "margin_percent": margin,
        }));
    }
    Ok(BandwidthVerdict {
        passed,
        json: json!({
            "target_qps": qps, "rules": args.rules.as_str(), "dtype_size": dtype_in,
            "output_dtype_size": dtype_out, "checks": rows, "passed": passed,
        }),
    })
}

fn distinct<T: PartialEq>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

fn network_type(nics: &[&Nic]) -> String {
    let kinds = distinct(nics.iter().map(|n| match n.link_type.as_str() {
        "ether" => "Ethernet".to_string(),
        "infiniband" => "InfiniBand".to_string(),
        "loopback" => "loopback (single host; not a network)".to_string(),
        other => format!("{PLACEHOLDER} link type {other}"),
    }));
    match kinds.is_empty() {
        true => format!("{PLACEHOLDER} e.g. Ethernet"),
        false => kinds.join(", "),
    }
}

/// The Network-division fields of the system description, from what was
/// measured and described.
fn system_fields(
    args: &PreflightArgs,
    per_node: usize,
    reports: &[NodeReport],
) -> Map<String, Value> {
    let local: Vec<&Nic> = distinct(reports.iter().filter_map(|r| r.local_nic.as_ref()));
    let remote: Vec<(String, &Nic)> = distinct(
        reports
            .iter()
            .filter_map(|r| Some((r.described.node_name.clone(), r.node_nic.as_ref()?))),
    );
    let speeds = distinct(local.iter().map(|n| n.speed_mbps).filter(|s| *s > 0));
    let nic_desc = |n: &Nic| {
        format!(
            "{PLACEHOLDER} NIC model; interface {} (driver {}, {})",
            n.name,
            if n.driver.is_empty() {
                "none"
            } else {
                &n.driver
            },
            match n.speed_mbps {
                0 => "speed unknown".to_string(),
                s => rate(s),
            }
        )
    };
    let transports = distinct(reports.iter().map(|r| r.addr.transport));
    let protocol = transports
        .iter()
        .map(|t| match t {
            Transport::Grpc => "gRPC over HTTP/2 over TCP/IP",
            Transport::Grpcs => "gRPC over HTTP/2 over TLS 1.3 over TCP/IP",
            Transport::Quic => "QUIC (TLS 1.3) over UDP/IP",
        })
        .collect::<Vec<_>>()
        .join("; ");
    let protocol = match args.input_codec.compresses() {
        true => format!("{protocol}; inputs {}-compressed", args.input_codec),
        false => format!("{protocol}; payloads uncompressed"),
    };
    // The libraries that carry the bytes, per transport.
    let libraries = transports
        .iter()
        .map(|t| match t {
            Transport::Grpc => "tonic gRPC, hyper HTTP/2, tokio; kernel TCP/IP",
            Transport::Grpcs => "tonic gRPC, hyper HTTP/2, rustls TLS 1.3, tokio; kernel TCP/IP",
            Transport::Quic => "quinn QUIC, rustls TLS 1.3, tokio; kernel UDP/IP",
        })
        .collect::<Vec<_>>()
        .join(" / ");
    let loadgen_stack = format!(
        "mlperf-net loadgen-node {} ({libraries}) on {}, {}",
        env!("CARGO_PKG_VERSION"),
        facts::host::os_name(),
        facts::host::kernel()
    );
    let sut_stacks = distinct(reports.iter().map(|r| {
        format!(
            "{} ({} backend; {libraries}) on {}, {}",
            r.described.node_version, r.described.backend, r.described.os, r.described.kernel
        )
    }));
    let mut m = Map::new();
    let mut set = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    set("is_network", json!("True"));
    set("network_type", json!(network_type(&local)));
    set(
        "network_media",
        json!(format!("{PLACEHOLDER} e.g. copper DAC, multi-mode fiber")),
    );
    set(
        "network_rate",
        json!(match speeds.is_empty() {
            true => format!("{PLACEHOLDER} link rate (not reported by the NIC)"),
            false => speeds
                .iter()
                .map(|s| rate(*s))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    );
    set(
        "nic_loadgen",
        json!(local
            .iter()
            .map(|n| nic_desc(n))
            .collect::<Vec<_>>()
            .join("; ")),
    );
    set("number_nic_loadgen", json!(local.len().to_string()));
    set("net_software_stack_loadgen", json!(loadgen_stack));
    set("network_protocol", json!(protocol));
    set(
        "number_connections",
        json!((reports.len() * per_node).to_string()),
    );
    set(
        "nic_sut",
        json!(remote
            .iter()
            .map(|(node, n)| format!("{node}: {}", nic_desc(n)))
            .collect::<Vec<_>>()
            .join("; ")),
    );
    set("number_nic_sut", json!(remote.len().to_string()));
    set("net_software_stack_sut", json!(sut_stacks.join("; ")));
    set(
        "network_topology",
        json!(format!(
            "1 LoadGen node, {} sut-node(s); {PLACEHOLDER} switch model and topology",
            reports.len()
        )),
    );
    m
}

fn write_json(path: &Path, value: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value)? + "\n";
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

fn is_placeholder(v: &Value) -> bool {
    v.as_str().is_some_and(|s| s.contains(PLACEHOLDER))
}

/// Writes `fields` into the system description at `path` (created when
/// missing): a field already filled in by hand is kept where ours would only
/// be a placeholder.
pub fn merge_system_json(path: &Path, fields: &Map<String, Value>) -> Result<()> {
    let mut doc = match std::fs::read_to_string(path) {
        Ok(text) => match serde_json::from_str::<Value>(&text)
            .with_context(|| format!("{}: not JSON", path.display()))?
        {
            Value::Object(m) => m,
            _ => bail!("{}: not a JSON object", path.display()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Map::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    for (k, v) in fields {
        let keep = doc
            .get(k)
            .is_some_and(|old| is_placeholder(v) && !is_placeholder(old) && old != "");
        if !keep {
            doc.insert(k.clone(), v.clone());
        }
    }
    write_json(path, &Value::Object(doc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_sizes_follow_the_table() {
        let find = |m| benchmarks::find(m).unwrap();
        assert_eq!(input_dtype_size(find("resnet50")), 4);
        assert_eq!(input_dtype_size(find("llama2-70b")), 4);
        assert_eq!(input_dtype_size(find("qwen3-vl-235b-a22b")), 1);
        let wan = find("wan-2.2-t2v-a14b");
        let egress = wan.rules(Round::CURRENT).unwrap().egress.unwrap();
        assert_eq!(output_dtype_size(wan, egress), 2);
    }

    #[test]
    fn merging_keeps_hand_filled_fields() {
        let dir = testkit::Scratch::new("sysjson");
        let path = dir.join("system.json");
        std::fs::write(
            &path,
            r#"{"system_name": "x", "network_media": "optical fiber", "network_rate": "old"}"#,
        )
        .unwrap();
        let mut f = Map::new();
        f.insert(
            "network_media".into(),
            json!(format!("{PLACEHOLDER} media")),
        );
        f.insert("network_rate".into(), json!("100 Gbit/s"));
        f.insert("is_network".into(), json!("True"));
        merge_system_json(&path, &f).unwrap();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["system_name"], "x");
        assert_eq!(v["network_media"], "optical fiber");
        assert_eq!(v["network_rate"], "100 Gbit/s");
        assert_eq!(v["is_network"], "True");
        std::fs::write(&path, "[1]").unwrap();
        assert!(merge_system_json(&path, &f)
            .unwrap_err()
            .to_string()
            .contains("not a JSON object"));
    }

    #[test]
    fn rates_and_percentiles() {
        assert_eq!(rate(100_000), "100 Gbit/s");
        assert_eq!(rate(2_500), "2.5 Gbit/s");
        assert_eq!(rate(100), "100 Mbit/s");
        let v: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(percentile(&v, 0.5), Duration::from_micros(50));
        assert_eq!(percentile(&v, 0.99), Duration::from_micros(99));
    }
}
