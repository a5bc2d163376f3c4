//! `loadgen-node preflight`: measures the network to each sut-node before
//! any run (round trips, payload throughput each way with the benchmark's
//! sample size, clock offset), finds the NIC behind each connection on both
//! ends, prints a table, writes `network.json`, checks the rules' minimum
//! bandwidth for a target throughput, and fills the Network-division fields
//! of the system description.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use proto::{DescribeReply, Nic};
use qdl::probe::NodeProbe;
use qdl::{NodeAddr, Transport};
use serde_json::{json, Map, Value};

use crate::benchmarks;
use crate::qsl::synthetic_sample;
use crate::tls::TlsArgs;

/// Exit status when the measured bandwidth is below the rules' minimum.
pub const BANDWIDTH_FAILED: u8 = 5;

/// Marks what only the submitter can fill in.
pub const PLACEHOLDER: &str = "[FILL IN]";

/// The flags of `loadgen-node preflight`.
#[derive(clap::Args, Debug, Clone)]
pub struct PreflightArgs {
    /// The sut-nodes, as for a run (`host:port`, `grpcs://`, `quic://`).
    #[arg(long)]
    pub sut: String,

    /// The benchmark: its sample size is what the throughput probes send.
    #[arg(long, default_value = "resnet50")]
    pub model: String,

    /// The throughput the submission targets (samples/s): checks the rules'
    /// minimum ingress and egress bandwidth against the measured ones.
    #[arg(long, value_name = "QPS")]
    pub target_qps: Option<f64>,

    /// Bytes per input element in the rules' bandwidth formula [default: the
    /// benchmark's preprocessed input type, e.g. 4 for fp32 ResNet50].
    #[arg(long, value_name = "BYTES")]
    pub dtype_size: Option<u64>,

    /// Bytes of each probe payload instead of the benchmark's sample size.
    #[arg(long, value_name = "BYTES")]
    pub sample_bytes: Option<usize>,

    /// Codec of the probe payloads, as the run's --input-codec.
    #[arg(long, value_name = "CODEC", default_value = "none")]
    pub input_codec: compression::CodecSpec,

    /// Connections to every node, as the run's --connections-per-node.
    #[arg(long, default_value_t = 2)]
    pub connections_per_node: usize,

    /// Round trips of small messages measured per node.
    #[arg(long, default_value_t = 200)]
    pub round_trips: usize,

    /// Seconds of each throughput measurement (one per direction and node).
    #[arg(long, default_value_t = 2.0, value_name = "SECONDS")]
    pub seconds: f64,

    /// Probes in flight on every connection during a throughput measurement.
    #[arg(long, default_value_t = 4)]
    pub in_flight: usize,

    /// Seconds to wait for each connection.
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    pub connect_timeout: f64,

    /// Where the measurements go.
    #[arg(long, default_value = "network.json", value_name = "FILE")]
    pub output: PathBuf,

    /// Write (or merge into an existing) system description JSON the
    /// Network-division fields; what cannot be measured is marked [FILL IN].
    #[arg(long, value_name = "FILE")]
    pub system_json: Option<PathBuf>,

    #[command(flatten)]
    pub tls: TlsArgs,
}

/// Input and output elements per sample in the rules' minimum-bandwidth
/// table (bytes/s = throughput x elements x dtype size).
pub fn bandwidth_rule(model: &str) -> Option<(u64, u64)> {
    Some(match model {
        "resnet50" => (224 * 224 * 3, 0),
        "bert" => (384 * 3, 0),
        "3d-unet" => (32_944_795, 32_944_795),
        _ => return None,
    })
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
    proto::host::nic_with_address(nics, &local).cloned()
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
pub fn preflight(args: &PreflightArgs) -> Result<ExitCode> {
    let bench = benchmarks::find(&args.model);
    let sample_bytes = match (args.sample_bytes, bench) {
        (Some(b), _) => b,
        (None, Some(b)) => b.input_bytes,
        (None, None) => bail!(
            "--model {}: not a benchmark this node knows ({}); give --sample-bytes N",
            args.model,
            benchmarks::names().join(", ")
        ),
    };
    let duration = Duration::try_from_secs_f64(args.seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .context("--seconds must be a positive number")?;
    let timeout = Duration::try_from_secs_f64(args.connect_timeout)
        .ok()
        .filter(|d| !d.is_zero())
        .context("--connect-timeout must be a positive number")?;
    let tls = args.tls.client_tls()?;
    let addrs = args
        .sut
        .split(',')
        .map(|a| a.trim().parse::<NodeAddr>())
        .collect::<Result<Vec<_>, _>>()
        .context("--sut")?;
    // One sample, encoded as the run would send it.
    let raw = synthetic_sample(0, sample_bytes);
    let payload = Bytes::from(args.input_codec.codec().compress(&raw));
    let local_nics = proto::host::nics();

    let mut reports = Vec::new();
    for addr in &addrs {
        eprintln!("loadgen-node: measuring {addr}");
        let probe = NodeProbe::connect(addr, tls.as_ref(), args.connections_per_node, timeout)
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
                .and_then(|ip| proto::host::nic_with_address(&described.nics, &ip).cloned()),
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
        "connections_per_node": args.connections_per_node,
        "loadgen": {
            "os": proto::host::os_name(),
            "kernel": proto::host::kernel(),
            "version": format!("loadgen-node {}", env!("CARGO_PKG_VERSION")),
        },
        "nodes": reports.iter().map(node_json).collect::<Vec<_>>(),
        "bandwidth": bandwidth.as_ref().map(|b| b.json.clone()),
    });
    write_json(&args.output, &report)?;
    println!("network description: {}", args.output.display());
    if let Some(path) = &args.system_json {
        merge_system_json(path, &system_fields(args, &reports))?;
        println!("system description network fields: {}", path.display());
    }
    Ok(match bandwidth {
        Some(b) if !b.passed => ExitCode::from(BANDWIDTH_FAILED),
        _ => ExitCode::SUCCESS,
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
    let Some((elements_in, elements_out)) = bandwidth_rule(&args.model) else {
        bail!(
            "--target-qps: no minimum-bandwidth rule known for {} (known: resnet50, bert, 3d-unet)",
            args.model
        );
    };
    let dtype = args.dtype_size.unwrap_or_else(|| {
        // The preprocessed input's element size, where it divides evenly.
        bench
            .map(|b| b.input_bytes as u64)
            .filter(|b| elements_in > 0 && b % elements_in == 0)
            .map_or(4, |b| b / elements_in)
    });
    let measured_in: f64 = reports.iter().map(|r| r.up_bps).sum();
    let measured_out: f64 = reports.iter().map(|r| r.down_bps).sum();
    let mut passed = true;
    let mut rows = Vec::new();
    println!(
        "bandwidth rule for {} at {qps} samples/s (dtype size {dtype} bytes):",
        args.model
    );
    for (what, elements, measured) in [
        ("ingress", elements_in, measured_in),
        ("egress", elements_out, measured_out),
    ] {
        if elements == 0 {
            println!("  {what}: no minimum");
            continue;
        }
        let required = qps * elements as f64 * dtype as f64;
        let ok = measured >= required;
        passed &= ok;
        let margin = (measured / required - 1.0) * 100.0;
        println!(
            "  {what}: required {} (= {qps} x {elements} x {dtype}), measured {}: {} (margin {margin:+.1}%)",
            gbits(required),
            gbits(measured),
            if ok { "PASS" } else { "FAIL" }
        );
        rows.push(json!({
            "direction": what, "required_bytes_per_s": required, "measured_bytes_per_s": measured,
            "passed": ok, "margin_percent": margin,
        }));
    }
    Ok(BandwidthVerdict {
        passed,
        json: json!({ "target_qps": qps, "dtype_size": dtype, "checks": rows, "passed": passed }),
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
fn system_fields(args: &PreflightArgs, reports: &[NodeReport]) -> Map<String, Value> {
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
        proto::host::os_name(),
        proto::host::kernel()
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
        json!((reports.len() * args.connections_per_node.max(1)).to_string()),
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
    fn bandwidth_table() {
        assert_eq!(bandwidth_rule("resnet50"), Some((150_528, 0)));
        assert_eq!(bandwidth_rule("bert"), Some((1_152, 0)));
        assert_eq!(bandwidth_rule("3d-unet"), Some((32_944_795, 32_944_795)));
        assert_eq!(bandwidth_rule("llama2-70b"), None);
    }

    #[test]
    fn merging_keeps_hand_filled_fields() {
        let path = std::env::temp_dir().join(format!("sysjson-{}.json", std::process::id()));
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
