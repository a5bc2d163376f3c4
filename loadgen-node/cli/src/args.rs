//! The flags of one test run, as typed values: clap's value parsers refuse a
//! bad address, policy, codec, duration or setting before anything starts.
//! `RunArgs` is also how a run is handed to a process of its own
//! ([`RunArgs::to_argv`]): the flags that reproduce it, exactly.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use facts::benchmarks::Round;
use loadgen_engine::{config, Scenario, TestMode};
use qdl::discover::{self, NodeEntry};
use qdl::DispatchPolicy;
use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::tls::TlsArgs;

/// Which LoadGen runs the test.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// This project's engine: trace-exact with the official LoadGen 6.0.17,
    /// for development, regression runs and bring-up.
    Native,
    /// The official LoadGen, compiled unaltered into this binary (cargo
    /// feature `official-loadgen`): the engine of runs to be submitted.
    Official,
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Engine::Native => "native",
            Engine::Official => "official",
        })
    }
}

/// `--sut`: the in-process null SUT, or the sut-nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SutArg {
    /// `null`: the engine's own SUT, answering at once (measures the harness).
    Null,
    /// The sut-nodes (addresses, or DNS names of several), in the order
    /// their names are reported; empty when `--sut-file` gives them all.
    Nodes(Vec<NodeEntry>),
}

impl FromStr for SutArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim() == "null" {
            return Ok(SutArg::Null);
        }
        discover::parse_list(s)
            .map(SutArg::Nodes)
            .map_err(|e| e.to_string())
    }
}

impl fmt::Display for SutArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SutArg::Null => f.write_str("null"),
            SutArg::Nodes(nodes) => {
                let entries: Vec<String> = nodes.iter().map(NodeEntry::to_string).collect();
                f.write_str(&entries.join(","))
            }
        }
    }
}

/// One `--set KEY=VALUE`: a user.conf setting of the run's model and
/// scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetArg {
    pub(crate) key: String,
    pub(crate) value: String,
}

impl FromStr for SetArg {
    type Err = String;

    fn from_str(kv: &str) -> Result<Self, String> {
        let Some((k, v)) = kv.split_once('=') else {
            return Err(format!(
                "`{kv}`: expected KEY=VALUE, e.g. --set min_duration=1000"
            ));
        };
        let key = k.trim();
        if config::MLPERF_CONF_KEYS.contains(&key) {
            return Err(format!(
                "`{kv}`: `{key}` may only come from mlperf.conf; pass a whole file with --conf"
            ));
        }
        if !config::KEYS.contains(&key) {
            return Err(format!(
                "`{kv}`: unknown setting `{key}`; known settings: {}",
                config::KEYS.join(", ")
            ));
        }
        let value = v.trim();
        if value.is_empty() || value.contains(char::is_whitespace) {
            return Err(format!("`{kv}`: the value must be one word"));
        }
        Ok(SetArg {
            key: key.to_string(),
            value: value.to_string(),
        })
    }
}

impl fmt::Display for SetArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.key, self.value)
    }
}

/// A number of seconds, 0 or more, as a duration (clap value parser).
pub fn seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    Duration::try_from_secs_f64(secs).map_err(|_| format!("`{s}`: expected 0 or more seconds"))
}

/// A positive number of seconds (clap value parser).
pub fn positive_seconds(s: &str) -> Result<Duration, String> {
    match seconds(s)? {
        d if d.is_zero() => Err(format!("`{s}`: expected more than 0 seconds")),
        d => Ok(d),
    }
}

/// At most a day: how long to wait for nodes whose backend still loads.
fn ready_seconds(s: &str) -> Result<Duration, String> {
    match seconds(s)? {
        d if d.as_secs() > 86_400 => Err(format!("`{s}`: at most 86400 seconds")),
        d => Ok(d),
    }
}

/// A share from 0 to 1 (clap value parser).
fn ratio(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("`{s}`: expected a number from 0 to 1")),
    }
}

/// The flags of one test run.
#[derive(clap::Args, Serialize, Debug, Clone, PartialEq)]
pub struct RunArgs {
    /// Which LoadGen drives the QDL: native, or official (the official
    /// LoadGen compiled in; builds with the `official-loadgen` feature).
    #[arg(long, value_enum, default_value = "native")]
    #[serde(serialize_with = "display")]
    pub engine: Engine,

    /// The system under test: a comma-separated list of sut-node addresses
    /// (`host:port` or `grpc://host:port` for gRPC, `grpcs://host:port` for
    /// gRPC over TLS, `quic://host:port` for QUIC; kinds may be mixed;
    /// `dns://NAME:PORT` for one node per address of a DNS name, resolved
    /// once before the run, `?nodes=N` to wait for N of them, and
    /// `dns+grpcs://`, `dns+quic://` for the other transports), or `null`
    /// for the in-process null SUT that measures the harness itself
    /// [default: null, or none with --sut-file].
    #[arg(
        long,
        default_value = "null",
        hide_default_value = true,
        default_value_if("sut_file", clap::builder::ArgPredicate::IsPresent, "")
    )]
    #[serde(serialize_with = "display")]
    pub sut: SutArg,

    /// More sut-nodes, after those of --sut: a file of one address per line
    /// (any form --sut takes), `#` starting a comment, as a launcher writes
    /// it (deploy/slurm/).
    #[arg(long, value_name = "FILE")]
    pub sut_file: Option<PathBuf>,

    /// The benchmark, as mlperf.conf's keys name it (resnet50, bert,
    /// llama3_1-8b, wan-2.2-t2v-a14b...) or as it is usually spelled
    /// (llama3.1-8b); `loadgen-node suite` lists them. (--model is its
    /// former name.)
    #[arg(
        long = "benchmark",
        visible_alias = "model",
        value_name = "NAME",
        default_value = "resnet50"
    )]
    #[serde(rename = "benchmark")]
    pub model: String,

    /// SingleStream, MultiStream, Server or Offline.
    #[arg(long, default_value = "Offline")]
    #[serde(serialize_with = "display")]
    pub scenario: Scenario,

    /// PerformanceOnly, AccuracyOnly, SubmissionRun or FindPeakPerformance.
    /// Overrides any `mode` key of the config files.
    #[arg(long)]
    #[serde(serialize_with = "display_option")]
    pub mode: Option<TestMode>,

    /// mlperf.conf to use instead of the built-in 6.0.17 one (a new round's
    /// seeds, say). Replaces the built-in file entirely.
    #[arg(long, value_name = "MLPERF_CONF")]
    pub conf: Option<PathBuf>,

    /// user.conf with this system's settings (target_qps, target_latency...).
    #[arg(long, value_name = "USER_CONF")]
    pub user_conf: Option<PathBuf>,

    /// Extra user.conf setting for this model and scenario, e.g.
    /// `--set min_duration=1000 --set target_qps=5000`. Applied after
    /// --user-conf. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    #[serde(serialize_with = "display_each")]
    pub set: Vec<SetArg>,

    /// Audit configuration of a compliance test (TEST01, TEST04, TEST06...).
    /// Without it, ./audit.config is used when it exists.
    #[arg(long, value_name = "FILE")]
    pub audit_config: Option<PathBuf>,

    /// Number of samples in the data set (default: the --dataset's files, or
    /// the benchmark's data set size for the synthetic data set; 1024 with
    /// the null SUT).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub total_sample_count: Option<usize>,

    /// Number of samples the QSL holds in memory at once (default: the
    /// benchmark's performance sample count, at most the total).
    #[arg(long)]
    pub performance_sample_count: Option<usize>,

    /// Directory of preprocessed samples, one `.npy` file each (sample i is
    /// the i-th file in name order). Without it, a synthetic data set with
    /// the benchmark's real input size is used, so nothing is downloaded.
    #[arg(long, value_name = "DIR")]
    pub dataset: Option<PathBuf>,

    /// Synthetic data set: bytes per sample instead of the benchmark's input
    /// size (e.g. 64 to measure the harness rather than the network); at
    /// most 1 GiB.
    #[arg(long, value_name = "BYTES",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 30))]
    pub sample_bytes: Option<usize>,

    /// How samples are spread over the sut-nodes: least-outstanding,
    /// round-robin, or weighted:W1,W2,... (one weight per node, in node
    /// order: --sut, each name's addresses sorted, then --sut-file).
    #[arg(long, default_value = "least-outstanding")]
    #[serde(serialize_with = "display")]
    pub dispatch: DispatchPolicy,

    /// Connections (gRPC or QUIC, each with one data stream) opened to every
    /// sut-node, 1 to 1024 [default: sized to the host: at least one per
    /// network thread, spread over the nodes, 2 to 16 per node].
    #[arg(long, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub connections_per_node: Option<usize>,

    /// Threads of the QDL's network runtime, 1 to 1024 [default: sized to
    /// the host: one per core but one, left to the LoadGen's issuing thread,
    /// at least 2 (on a host of 2 cores or more), and no more than the
    /// connections].
    #[arg(long, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=qdl::MAX_QDL_THREADS as u64))]
    pub qdl_threads: Option<usize>,

    /// Samples one connection may have sent and not yet had answered; the
    /// rest wait in the QDL's queue. The default keeps the node busy at any
    /// rate this host can issue, while bounding the work under way with
    /// small inputs (large ones are bounded by the node's flow control).
    #[arg(long, value_name = "N", default_value_t = qdl::DEFAULT_MAX_IN_FLIGHT,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_in_flight: u64,

    /// A sut-node with samples outstanding that sends nothing (no answer, no
    /// heartbeat) for this many seconds ends the run as INVALID.
    #[arg(long, default_value = "10", value_name = "SECONDS", value_parser = positive_seconds)]
    #[serde(serialize_with = "duration")]
    pub node_timeout: Duration,

    /// A sut-node with samples outstanding that sends only heartbeats or
    /// first tokens (no answer or error) for this many seconds ends the run
    /// as INVALID: its backend is hung. 0: the --node-timeout (no run waits
    /// for ever on a node that only sends heartbeats).
    #[arg(long, default_value = "120", value_name = "SECONDS", value_parser = seconds)]
    #[serde(serialize_with = "duration")]
    pub progress_timeout: Duration,

    /// Seconds to wait for sut-nodes whose backend is still loading (each
    /// retried every second, the one waited for printed), at most 86400;
    /// 0: fail at once.
    #[arg(long, default_value = "300", value_name = "SECONDS", value_parser = ready_seconds)]
    #[serde(serialize_with = "duration")]
    pub ready_timeout: Duration,

    /// After an accuracy run against `synthetic` sut-nodes, check that every
    /// logged answer is the one for the sample issued under that id.
    #[arg(long)]
    pub verify_synthetic: bool,

    /// Where the mlperf_log_* files go (created if missing).
    #[arg(long, default_value = ".")]
    pub output_dir: PathBuf,

    /// Where loadgen-node's own files of the run go (the latency breakdown
    /// and, for the official engine with --set, the merged user.conf it
    /// hands the LoadGen) [default: the output directory]. `submission` and
    /// `audit` keep them out of the submission tree this way.
    #[arg(long, value_name = "DIR")]
    pub extras_dir: Option<PathBuf>,

    /// Do not write mlperf_log_trace.json (it is large on long runs).
    #[arg(long)]
    pub no_trace: bool,

    /// Null SUT only: answer like an LLM (first token, then tokens).
    #[arg(long)]
    pub null_tokens: bool,

    /// Codec of the samples sent to the sut-nodes: none, zstd, zstd:LEVEL (1
    /// to 22) or lz4. The QSL compresses each sample on its own when it loads
    /// it (untimed); the nodes decode it inside their time. Refused where
    /// the rules (--rules) allow no compression, unless --open-division.
    #[arg(long, value_name = "CODEC", default_value = "none")]
    #[serde(serialize_with = "display")]
    pub input_codec: compression::CodecSpec,

    /// An open-division run: lifts the closed and network divisions' rules
    /// on which benchmarks' data may travel compressed.
    #[arg(long)]
    pub open_division: bool,

    /// The round of the rules the run follows: v6.1, the current rules, or
    /// v5.1, the tables this product was first built on (DLRMv2 and SDXL
    /// rows, none for DLRMv3, WAN-2.2 or Qwen3-VL). It decides which
    /// benchmarks may compress their data and, for `audit` and
    /// `submission`, which audits and checker folders apply.
    #[arg(long, value_name = "ROUND", default_value_t = Round::CURRENT)]
    #[serde(serialize_with = "display")]
    pub rules: Round,

    /// Largest answer (or first token) accepted from a sut-node once decoded,
    /// in bytes: a larger one, or a compressed answer declaring or producing
    /// more, ends the run (INVALID) without being held [default: the
    /// benchmark's largest answer in the suite table, at least 1 MiB
    /// (WAN-2.2: 449,740,800, its bf16 video); 1 GiB for a model outside
    /// it].
    #[arg(long, value_name = "BYTES",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_answer_bytes: Option<usize>,

    /// Where stderr is not a terminal, print a progress line every this
    /// many seconds (on a terminal the live line is redrawn twice a second).
    /// 0: no progress output at all.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = seconds)]
    #[serde(serialize_with = "duration")]
    pub progress_interval: Duration,

    /// Serve Prometheus metrics at http://ADDR/metrics while the run lasts
    /// (host:port): per node samples issued, completed and outstanding,
    /// bytes, and latencies; with the native engine, the series' live
    /// figures too.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,

    /// Export OpenTelemetry traces over OTLP/gRPC to this collector (e.g.
    /// http://127.0.0.1:4317): spans of the run, each series, each
    /// connection's session, and of a sampled subset of samples, continued
    /// by the sut-nodes (those started with --otlp). Export is off the timed
    /// path; spans that do not fit its queue are dropped and counted.
    #[arg(long, value_name = "ENDPOINT")]
    pub otlp: Option<String>,

    /// With --otlp: the share of samples traced, from 0 (none) to 1 (all).
    #[arg(long, value_name = "RATIO", default_value = "0.001", value_parser = ratio)]
    pub otlp_sample_ratio: f64,

    /// After the run, write a self-contained HTML report of it (latency
    /// distribution and timeline, breakdown per node, settings, validity);
    /// `loadgen-node report DIR` makes the same from an output directory.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,

    #[command(flatten)]
    #[serde(flatten)]
    pub(crate) tls: TlsArgs,
}

fn display<T: fmt::Display, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

fn display_option<T: fmt::Display, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.collect_str(v),
        None => s.serialize_none(),
    }
}

fn display_each<T: fmt::Display, S: Serializer>(v: &[T], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|x| x.to_string()))
}

/// Seconds to the nanosecond, as the flags take them (`10`, `0.25`).
fn duration<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    let text = match d.subsec_nanos() {
        0 => d.as_secs().to_string(),
        ns => format!("{}.{ns:09}", d.as_secs())
            .trim_end_matches('0')
            .to_string(),
    };
    s.serialize_str(&text)
}

impl RunArgs {
    /// The flags that give these arguments back when parsed: how a run is
    /// handed to a `loadgen-node` process of its own, and how it is shown
    /// to be run again by hand. Every field is a flag of the same name
    /// (`output_dir` is `--output-dir`); a test checks that this holds for
    /// every flag, so a new flag needs nothing here.
    pub fn to_argv(&self) -> Result<Vec<OsString>> {
        let Value::Object(fields) = serde_json::to_value(self).context("encoding the run flags")?
        else {
            bail!("the run flags did not encode as a table");
        };
        let mut argv = Vec::new();
        for (name, value) in fields {
            let flag = format!("--{}", name.replace('_', "-"));
            let values = match value {
                Value::Null | Value::Bool(false) => continue,
                Value::Bool(true) => {
                    argv.push(OsString::from(flag));
                    continue;
                }
                Value::Array(items) => items,
                one => vec![one],
            };
            for v in values {
                let text = match v {
                    Value::String(s) => s,
                    Value::Number(n) => n.to_string(),
                    other => bail!("{flag}: cannot be passed on as a flag ({other})"),
                };
                argv.push(OsString::from(&flag));
                argv.push(OsString::from(text));
            }
        }
        Ok(argv)
    }

    /// The directory of loadgen-node's own files of the run.
    pub fn extras_dir(&self) -> PathBuf {
        self.extras_dir
            .clone()
            .unwrap_or_else(|| self.output_dir.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser, Debug)]
    struct Flags {
        #[command(flatten)]
        run: RunArgs,
    }

    fn parse(argv: &[&str]) -> Result<RunArgs, clap::Error> {
        Flags::try_parse_from(std::iter::once("loadgen-node").chain(argv.iter().copied()))
            .map(|f| f.run)
    }

    /// Flags far from every default, so that a field left out of `to_argv`
    /// (or given another flag name) changes what is parsed back.
    const EVERY_FLAG: &[&str] = &[
        "--engine",
        "official",
        "--sut",
        "quic://a:1,grpcs://[::1]:2,b:3,dns+quic://n.example:4?nodes=3",
        "--sut-file",
        "nodes.txt",
        "--model",
        "bert",
        "--scenario",
        "Server",
        "--mode",
        "AccuracyOnly",
        "--conf",
        "m.conf",
        "--user-conf",
        "u conf",
        "--set",
        "min_duration=1000",
        "--set",
        "target_qps=12.5",
        "--audit-config",
        "a.config",
        "--total-sample-count",
        "7",
        "--performance-sample-count",
        "5",
        "--dataset",
        "/data",
        "--sample-bytes",
        "64",
        "--dispatch",
        "weighted:3,1,1",
        "--connections-per-node",
        "3",
        "--qdl-threads",
        "4",
        "--max-in-flight",
        "9",
        "--node-timeout",
        "2.5",
        "--progress-timeout",
        "0",
        "--ready-timeout",
        "0.000000001",
        "--verify-synthetic",
        "--output-dir",
        "out",
        "--extras-dir",
        "extras",
        "--no-trace",
        "--null-tokens",
        "--input-codec",
        "zstd:7",
        "--open-division",
        "--rules",
        "v5.1",
        "--max-answer-bytes",
        "1000",
        "--progress-interval",
        "0.1",
        "--metrics",
        "127.0.0.1:9",
        "--otlp",
        "http://c:4317",
        "--otlp-sample-ratio",
        "0.25",
        "--report",
        "r.html",
        "--tls-pin",
        "ab,cd",
        "--tls-ca",
        "ca.pem",
        "--tls-insecure",
        "--tls-client-cert",
        "c.pem",
        "--tls-client-key",
        "k.pem",
    ];

    #[test]
    fn argv_gives_back_the_same_flags() {
        let args = parse(EVERY_FLAG).unwrap();
        let argv = args.to_argv().unwrap();
        let back = Flags::try_parse_from(std::iter::once(OsString::from("x")).chain(argv))
            .unwrap()
            .run;
        assert_eq!(back, args);
        let defaults = parse(&[]).unwrap();
        let argv = defaults.to_argv().unwrap();
        let back = Flags::try_parse_from(std::iter::once(OsString::from("x")).chain(argv))
            .unwrap()
            .run;
        assert_eq!(back, defaults);
    }

    #[test]
    fn every_flag_is_passed_on() {
        let args = parse(EVERY_FLAG).unwrap();
        let argv: Vec<String> = args
            .to_argv()
            .unwrap()
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        for arg in Flags::command().get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if long == "help" {
                continue;
            }
            assert!(
                argv.contains(&format!("--{long}")),
                "--{long} is not passed on: {argv:?}"
            );
        }
    }

    #[test]
    fn bad_values_are_refused_by_the_parser() {
        for (flags, why) in [
            (&["--sut", "a:1,h"][..], "expected host:port"),
            (&["--dispatch", "fastest"], "fastest"),
            (&["--set", "min_duration"], "KEY=VALUE"),
            (&["--set", "qsl_rng_seed=1"], "only come from mlperf.conf"),
            (&["--set", "min_durations=1"], "unknown setting"),
            (&["--node-timeout", "0"], "more than 0"),
            (&["--progress-timeout=-1"], "0 or more"),
            (&["--progress-interval", "soon"], "not a number"),
            (&["--ready-timeout", "90000"], "86400"),
            (&["--otlp-sample-ratio", "2"], "from 0 to 1"),
            (&["--input-codec", "gzip"], "gzip"),
        ] {
            let e = parse(flags).unwrap_err().to_string();
            assert!(e.contains(why), "{flags:?}: {e}");
        }
    }
}
