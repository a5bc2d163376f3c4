//! The suite: every model of LoadGen 6.0.17's mlperf.conf, with what both
//! ends of the network need to know of it. The LoadGen node's synthetic data
//! set sends what the real one would, a sut-node sizes its limits from the
//! inputs it will get and its synthetic backend answers with the real
//! answer's size, and the rules of each round (which codecs, which minimum
//! bandwidth, which audits, which checker folder) are looked up here and
//! nowhere else.
//!
//! Facts come from two places: the MLPerf Inference rules
//! (mlcommons/inference_policies, `inference_rules.adoc`: the Network
//! division's table of allowed compression and the bandwidth appendix) and
//! the submission checker's constants (mlcommons/inference,
//! `tools/submission/submission_checker/constants.py`: the benchmarks of each
//! round, their data set sizes and the audits they require). A round is a
//! choice: [`Round::CURRENT`] unless the user names another.

use std::fmt;
use std::str::FromStr;

/// A round of the rules whose tables this product knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Round {
    /// The 5.1 rules, the last form of those this product was first built
    /// on: DLRMv2 and SDXL rows in the Network division's tables, none for
    /// DLRMv3, WAN-2.2 or Qwen3-VL. Benchmarks and audits as the submission
    /// checker's oldest round (v6.0) lists them.
    V5_1,
    /// The current rules (the tables of the 6.0 rules, unchanged in 6.1):
    /// DLRMv3, WAN-2.2 and Qwen3-VL rows, none for DLRMv2 or SDXL.
    /// Benchmarks and audits as the submission checker's v6.1.
    #[default]
    V6_1,
}

impl Round {
    /// Every round, oldest first.
    pub(crate) const ALL: [Round; 2] = [Round::V5_1, Round::V6_1];
    /// The rules a run follows unless told otherwise.
    pub const CURRENT: Round = Round::V6_1;

    /// `v5.1`, `v6.1`.
    pub fn as_str(self) -> &'static str {
        match self {
            Round::V5_1 => "v5.1",
            Round::V6_1 => "v6.1",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Round {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Round {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Round::ALL
            .into_iter()
            .find(|r| r.as_str() == s.trim())
            .ok_or_else(|| format!("unknown round `{s}` (known: v5.1, v6.1)"))
    }
}

/// What the rules' table allows on the wire between the LoadGen node and
/// the sut-nodes. The table is written for the QSL's inputs; where a row
/// allows no compression the answers travel uncompressed too (the only
/// large-output row, WAN-2.2, is of that kind), and where it allows lossless
/// compression the SUT may compress its answers, which the QDL decompresses
/// inside the timed path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// No compression, or a lossless one approved by the working group.
    Lossless,
    /// "No compression allowed", or no row for the benchmark at all.
    None,
}

/// Bytes per sample in one direction, as the rules' bandwidth appendix
/// counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Volume {
    /// "negligible": any bandwidth above 0 will do.
    Negligible,
    /// This many elements of the data's type (the `dtype_size` of the
    /// formula, which the submitter states).
    Elements(u64),
    /// A fixed number of bytes, whatever the types.
    Bytes(u64),
}

/// A compliance audit the submission checker requires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Audit {
    /// TEST01: accuracy in performance mode; a share of the performance
    /// run's answers is logged and checked against the accuracy run's.
    Test01,
    /// TEST04: the SUT does not cache answers; the same sample issued over
    /// and over must not run faster than distinct ones.
    Test04,
    /// TEST06: an LLM's output is consistent (first token, token counts, no
    /// early end-of-sequence).
    Test06,
    /// TEST07: accuracy in performance mode over the full data set, against
    /// an accuracy threshold.
    Test07,
    /// TEST08: accuracy in performance mode for DLRMv3.
    Test08,
    /// TEST09: an LLM's output token lengths in performance mode stay within
    /// the benchmark's bounds.
    Test09,
}

impl Audit {
    /// The name the compliance folders and the submission checker give it
    /// (`TEST01`).
    pub fn name(self) -> &'static str {
        match self {
            Audit::Test01 => "TEST01",
            Audit::Test04 => "TEST04",
            Audit::Test06 => "TEST06",
            Audit::Test07 => "TEST07",
            Audit::Test08 => "TEST08",
            Audit::Test09 => "TEST09",
        }
    }
}

/// One benchmark's rules in one round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// The submission checker's benchmark folders for this model, one per
    /// accuracy target; the first is the default.
    pub checker: &'static [&'static str],
    /// What may be compressed on the wire.
    pub compression: Compression,
    /// Per sample from the LoadGen node to the SUT; `None`: the round's
    /// bandwidth appendix has no row for it.
    pub ingress: Option<Volume>,
    /// Per sample from the SUT back.
    pub egress: Option<Volume>,
    /// The audits a submission needs.
    pub audits: &'static [Audit],
}

/// One tensor of an input sample, as the reference implementation hands it
/// to the SUT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tensor {
    /// What the tensor holds (`image`, `input_ids`...), as the suite's
    /// table names it.
    pub name: &'static str,
    /// The `.npy` type (`<f4`, `<i8`, `|u1`...).
    pub dtype: &'static str,
    /// The shape of one sample's tensor (the average where it varies).
    pub shape: &'static [usize],
}

impl Tensor {
    /// Bytes of the tensor's data.
    pub const fn bytes(&self) -> usize {
        let mut n = dtype_bytes(self.dtype);
        let mut i = 0;
        while i < self.shape.len() {
            n *= self.shape[i];
            i += 1;
        }
        n
    }
}

/// Bytes of one element of an `.npy` type.
pub const fn dtype_bytes(dtype: &str) -> usize {
    let b = dtype.as_bytes();
    // `<f4`, `|u1`: the digits after the kind letter.
    let mut n = 0;
    let mut i = 2;
    while i < b.len() {
        n = n * 10 + (b[i] - b'0') as usize;
        i += 1;
    }
    n
}

/// One benchmark of the suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Benchmark {
    /// The model name of mlperf.conf's keys, which the official LoadGen is
    /// given.
    pub model: &'static str,
    /// Other names users write for it (`llama3.1-8b` for `llama3_1-8b`).
    pub aliases: &'static [&'static str],
    /// One input sample's tensors. A sample of several tensors travels in
    /// the multi-tensor layout (each tensor's `.npy` bytes, header included,
    /// back to back; see docs/protocol.md).
    pub input: &'static [Tensor],
    /// Bytes of one answer as the reference SUT gives it (the synthetic
    /// backend answers with this many).
    pub output_bytes: usize,
    /// The largest answer accepted by default: the rules' output size where
    /// it is fixed, with room where it varies.
    pub max_output_bytes: usize,
    /// Samples in the data set (the QSL's total sample count).
    pub total_samples: usize,
    /// Samples the QSL keeps in memory at once for a performance run (the
    /// QSL's performance sample count).
    pub performance_samples: usize,
    /// Judged on token latencies (mlperf.conf's `use_token_latencies`):
    /// each answer comes with a first token and a token count.
    pub llm: bool,
    /// An interactive variant: its Server runs are the checker's
    /// `Interactive` scenario of the base benchmark.
    pub interactive: bool,
    /// Its rules in each round, oldest first (as [`Round`] lists them);
    /// `None`: not a benchmark of that round.
    pub rounds: [Option<Rules>; 2],
    /// Why a retired benchmark is refused over the network.
    pub retired: Option<&'static str>,
    /// The settings of its TEST07 (accuracy in performance mode on a
    /// compliance data set of its own), when it has that audit.
    pub test07: Option<Test07>,
    /// The settings of its TEST09 (mean output length in performance mode).
    pub test09: Option<Test09>,
}

/// TEST07 of one benchmark, as the release's `compliance/TEST07/<model>`
/// gives it: every sample of a compliance data set of its own, issued once
/// in performance mode and logged, scored by the benchmark's accuracy
/// script, whose score must reach the threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Test07 {
    /// Samples of the compliance data set.
    pub samples: usize,
    /// `test07_accuracy_threshold`, as the audit.config writes it.
    pub accuracy_threshold: &'static str,
    /// The pattern of the score in the accuracy script's output (one group:
    /// the number), as the verification script's default.
    pub score_pattern: &'static str,
}

/// TEST09 of one benchmark, as the release's `compliance/TEST09/<model>`
/// gives it: every sample of the data set issued once in performance mode
/// and logged; the answers' mean length in tokens must lie within the
/// bounds (the reference's mean, less and more 10 %).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Test09 {
    /// `test09_min_output_tokens`, as the audit.config writes it.
    pub min_output_tokens: &'static str,
    /// `test09_max_output_tokens`, as the audit.config writes it.
    pub max_output_tokens: &'static str,
}

/// TEST08's relative tolerance of the normalized entropy, the release's
/// default.
pub const TEST08_TOLERANCE: f64 = 0.001;

const GPT_OSS_TEST07: Test07 = Test07 {
    samples: 990,
    accuracy_threshold: "60.698",
    score_pattern: r"'exact_match':\s*([\d.]+)",
};

const GPT_OSS_TEST09: Test09 = Test09 {
    min_output_tokens: "1150.38",
    max_output_tokens: "1406.02",
};

impl Benchmark {
    /// Its rules in `round`, if it is a benchmark of that round.
    pub fn rules(&self, round: Round) -> Option<&Rules> {
        self.rounds[round.index()].as_ref()
    }

    /// The rounds it belongs to, for messages (`v6.0, v6.1`).
    pub fn round_names(&self) -> String {
        let names: Vec<&str> = Round::ALL
            .into_iter()
            .filter(|r| self.rules(*r).is_some())
            .map(Round::as_str)
            .collect();
        match names.is_empty() {
            true => "none".into(),
            false => names.join(", "),
        }
    }

    /// Bytes of one input sample as it travels: the tensor's data, or for
    /// several tensors their `.npy` files back to back.
    pub fn input_bytes(&self) -> usize {
        match self.input {
            [one] => one.bytes(),
            many => many.iter().map(|t| npy_header_len(t) + t.bytes()).sum(),
        }
    }
}

/// The length of the `.npy` header (version 1.0) of `t`, as
/// [`npy_header`] writes it.
fn npy_header_len(t: &Tensor) -> usize {
    npy_header(t.dtype, t.shape).len()
}

/// An `.npy` version 1.0 header for an array of `dtype` and `shape`, padded
/// so that the data starts on a 64-byte boundary.
pub fn npy_header(dtype: &str, shape: &[usize]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut dict = format!("{{'descr': '{dtype}', 'fortran_order': False, 'shape': {shape}, }}");
    let unpadded = 10 + dict.len() + 1;
    dict.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out
}

const fn t(name: &'static str, dtype: &'static str, shape: &'static [usize]) -> Tensor {
    Tensor { name, dtype, shape }
}

use Audit::*;
use Compression::{Lossless, None as Uncompressed};
use Volume::*;

const fn rules(
    checker: &'static [&'static str],
    compression: Compression,
    bandwidth: Option<(Volume, Volume)>,
    audits: &'static [Audit],
) -> Option<Rules> {
    let (ingress, egress) = match bandwidth {
        Some((i, e)) => (Some(i), Some(e)),
        None => (None, None),
    };
    Some(Rules {
        checker,
        compression,
        ingress,
        egress,
        audits,
    })
}

/// A row of the bandwidth appendix: bytes in, bytes out.
const fn bw(ingress: Volume, egress: Volume) -> Option<(Volume, Volume)> {
    Some((ingress, egress))
}

/// No row in the round's bandwidth appendix.
const NO_ROW: Option<(Volume, Volume)> = None;

const MIB: usize = 1 << 20;

/// A benchmark with the fields most share filled in.
const BASE: Benchmark = Benchmark {
    model: "",
    aliases: &[],
    input: &[],
    output_bytes: 8,
    max_output_bytes: MIB,
    total_samples: 1024,
    performance_samples: 1024,
    llm: false,
    interactive: false,
    rounds: [None, None],
    retired: None,
    test07: None,
    test09: None,
};

/// An LLM answer: token ids as int32, `tokens` of them on average; at most
/// `max_tokens`, with room.
const fn tokens(avg: usize) -> usize {
    avg * 4
}

/// Every model of LoadGen 6.0.17's mlperf.conf. Inputs are the preprocessed
/// tensors of the reference implementations: ResNet50 3x224x224 fp32,
/// RetinaNet 3x800x800 fp32, BERT its three 384-token int64 tensors stacked, 3D-UNet
/// one 128^3 fp32 sub-volume, the LLMs their average prompt as int32 token
/// ids, SDXL two 77-token prompts as int64, DLRMv2 270 user-item pairs of 13
/// dense fp32 and 26 sparse int64 features, DLRMv3 one request (2 ids, the
/// user's 6 history features, 6 features of each of 2048 candidates, int64),
/// Qwen3-VL a product's text and photo (27,051 bytes together, the rules'
/// figure), WAN-2.2 a prompt's text.
pub const BENCHMARKS: &[Benchmark] = &[
    Benchmark {
        model: "resnet50",
        input: &[t("image", "<f4", &[3, 224, 224])],
        total_samples: 50_000,
        performance_samples: 1024,
        rounds: [
            rules(&["resnet"], Lossless, bw(Elements(150_528), Negligible), &[Test01, Test04]),
            rules(&["resnet"], Lossless, bw(Elements(150_528), Negligible), &[Test01, Test04]),
        ],
        ..BASE
    },
    Benchmark {
        model: "retinanet",
        input: &[t("image", "<f4", &[3, 800, 800])],
        // Up to 100 boxes of 7 floats.
        output_bytes: 100 * 7 * 4,
        total_samples: 24_781,
        performance_samples: 64,
        rounds: [
            rules(&["retinanet"], Lossless, bw(Elements(1_920_000), Negligible), &[Test01]),
            None,
        ],
        ..BASE
    },
    Benchmark {
        model: "bert",
        // Token ids, input mask and segment ids, stacked.
        input: &[t("inputs", "<i8", &[3, 384])],
        // Start and end logits of each token.
        output_bytes: 384 * 2 * 4,
        total_samples: 10_833,
        performance_samples: 10_833,
        rounds: [
            rules(&["bert-99", "bert-99.9"], Lossless, bw(Elements(1_152), Negligible), &[Test01]),
            rules(&["bert-99", "bert-99.9"], Lossless, bw(Elements(1_152), Negligible), &[Test01]),
        ],
        ..BASE
    },
    Benchmark {
        model: "3d-unet",
        input: &[t("volume", "<f4", &[1, 128, 128, 128])],
        // A label per voxel of the average case.
        output_bytes: 32_944_795,
        // Cases vary in size: room for four times the average, in fp32.
        max_output_bytes: 4 * 32_944_795 * 4,
        total_samples: 43,
        performance_samples: 43,
        rounds: [
            rules(&["3d-unet-99", "3d-unet-99.9"], Lossless, bw(Elements(32_944_795), Elements(32_944_795)), &[Test01]),
            rules(&["3d-unet-99", "3d-unet-99.9"], Lossless, bw(Elements(32_944_795), Elements(32_944_795)), &[Test01]),
        ],
        ..BASE
    },
    Benchmark {
        model: "dlrm-v2",
        input: &[t("dense", "<f4", &[270, 13]), t("sparse", "<i8", &[270, 26])],
        // A click probability per pair.
        output_bytes: 270 * 4,
        total_samples: 330_067,
        performance_samples: 204_800,
        rounds: [
            rules(&["dlrm-v2-99", "dlrm-v2-99.9"], Lossless, bw(Bytes(270 * (13 * 4 + 26 * 8)), Negligible), &[Test01]),
            None,
        ],
        ..BASE
    },
    Benchmark {
        model: "dlrm-v3",
        input: &[t("ids", "<i8", &[2]), t("history", "<i8", &[6, 1]), t("candidates", "<i8", &[6, 2048])],
        // A score per candidate.
        output_bytes: 2048 * 4,
        total_samples: 349_823,
        performance_samples: 349_823,
        rounds: [
            rules(&["dlrm-v3"], Uncompressed, NO_ROW, &[Test08]),
            rules(&["dlrm-v3"], Lossless, bw(Bytes(98_368), Negligible), &[Test08]),
        ],
        ..BASE
    },
    Benchmark {
        model: "gptj",
        input: &[t("input_ids", "<i4", &[1024])],
        // Its token rate is inferred from the samples (mlperf.conf's
        // infer_token_latencies): answers carry no tokens of their own.
        output_bytes: tokens(128),
        total_samples: 13_368,
        performance_samples: 13_368,
        ..BASE
    },
    Benchmark {
        model: "llama2-70b",
        input: &[t("input_ids", "<i4", &[1024])],
        output_bytes: tokens(294),
        total_samples: 24_576,
        performance_samples: 24_576,
        llm: true,
        rounds: [
            rules(&["llama2-70b-99", "llama2-70b-99.9"], Uncompressed, bw(Elements(1_024), Elements(1_024)), &[Test06]),
            rules(&["llama2-70b-99.9"], Uncompressed, bw(Elements(1_024), Elements(1_024)), &[Test06]),
        ],
        ..BASE
    },
    Benchmark {
        model: "llama2-70b-interactive",
        input: &[t("input_ids", "<i4", &[1024])],
        output_bytes: tokens(294),
        total_samples: 24_576,
        performance_samples: 24_576,
        llm: true,
        interactive: true,
        rounds: [
            rules(&["llama2-70b-99", "llama2-70b-99.9"], Uncompressed, bw(Elements(1_024), Elements(1_024)), &[Test06]),
            rules(&["llama2-70b-99.9"], Uncompressed, bw(Elements(1_024), Elements(1_024)), &[Test06]),
        ],
        ..BASE
    },
    Benchmark {
        model: "llama3_1-405b",
        aliases: &["llama3.1-405b"],
        input: &[t("input_ids", "<i4", &[9_400])],
        output_bytes: tokens(700),
        total_samples: 8_313,
        performance_samples: 8_313,
        llm: true,
        rounds: [
            rules(&["llama3.1-405b"], Uncompressed, bw(Elements(20_000), Elements(20_000)), &[Test06]),
            None,
        ],
        ..BASE
    },
    Benchmark {
        model: "llama3_1-405b-interactive",
        aliases: &["llama3.1-405b-interactive"],
        input: &[t("input_ids", "<i4", &[9_400])],
        output_bytes: tokens(700),
        total_samples: 8_313,
        performance_samples: 8_313,
        llm: true,
        interactive: true,
        rounds: [
            rules(&["llama3.1-405b"], Uncompressed, bw(Elements(20_000), Elements(20_000)), &[Test06]),
            None,
        ],
        ..BASE
    },
    Benchmark {
        model: "llama3_1-8b",
        aliases: &["llama3.1-8b"],
        input: &[t("input_ids", "<i4", &[1_024])],
        output_bytes: tokens(128),
        total_samples: 13_368,
        performance_samples: 13_368,
        llm: true,
        rounds: [
            rules(&["llama3.1-8b"], Uncompressed, bw(Elements(2_048), Negligible), &[Test06]),
            rules(&["llama3.1-8b"], Uncompressed, bw(Elements(2_048), Negligible), &[Test06]),
        ],
        ..BASE
    },
    Benchmark {
        model: "llama3_1-8b-edge",
        aliases: &["llama3.1-8b-edge"],
        input: &[t("input_ids", "<i4", &[1_024])],
        output_bytes: tokens(128),
        total_samples: 5_000,
        performance_samples: 5_000,
        llm: true,
        rounds: [
            rules(&["llama3.1-8b-edge"], Uncompressed, bw(Elements(2_048), Negligible), &[]),
            rules(&["llama3.1-8b-edge"], Uncompressed, bw(Elements(2_048), Negligible), &[]),
        ],
        ..BASE
    },
    Benchmark {
        model: "llama3_1-8b-interactive",
        aliases: &["llama3.1-8b-interactive"],
        input: &[t("input_ids", "<i4", &[1_024])],
        output_bytes: tokens(128),
        total_samples: 13_368,
        performance_samples: 13_368,
        llm: true,
        interactive: true,
        rounds: [
            rules(&["llama3.1-8b"], Uncompressed, bw(Elements(2_048), Negligible), &[Test06]),
            rules(&["llama3.1-8b"], Uncompressed, bw(Elements(2_048), Negligible), &[Test06]),
        ],
        ..BASE
    },
    Benchmark {
        model: "mixtral-8x7b",
        input: &[t("input_ids", "<i4", &[2_048])],
        output_bytes: tokens(145),
        total_samples: 15_000,
        performance_samples: 15_000,
        llm: true,
        rounds: [
            rules(&["mixtral-8x7b"], Uncompressed, bw(Elements(2_048), Elements(2_048)), &[Test06]),
            None,
        ],
        ..BASE
    },
    Benchmark {
        model: "deepseek-r1",
        input: &[t("input_ids", "<i4", &[800])],
        output_bytes: tokens(3_886),
        total_samples: 4_388,
        performance_samples: 4_388,
        llm: true,
        rounds: [
            rules(&["deepseek-r1"], Uncompressed, bw(Elements(3_136), Elements(32_768)), &[Test06]),
            rules(&["deepseek-r1"], Uncompressed, bw(Elements(3_136), Elements(20_000)), &[Test06]),
        ],
        ..BASE
    },
    Benchmark {
        model: "deepseek-r1-interactive",
        input: &[t("input_ids", "<i4", &[800])],
        output_bytes: tokens(3_886),
        total_samples: 4_388,
        performance_samples: 4_388,
        llm: true,
        interactive: true,
        rounds: [
            rules(&["deepseek-r1"], Uncompressed, bw(Elements(3_136), Elements(32_768)), &[Test06]),
            rules(&["deepseek-r1"], Uncompressed, bw(Elements(3_136), Elements(20_000)), &[Test06]),
        ],
        ..BASE
    },
    Benchmark {
        model: "gpt-oss-120b",
        // The rules' input figure: 15,330 tokens.
        input: &[t("input_ids", "<i4", &[15_330])],
        // The reference's mean answer: 1,278 tokens, the middle of TEST09's
        // bounds (its mean, less and more 10 %).
        output_bytes: tokens(1_278),
        total_samples: 6_396,
        performance_samples: 6_396,
        llm: true,
        rounds: [
            rules(&["gpt-oss-120b"], Uncompressed, NO_ROW, &[Test07, Test09]),
            rules(&["gpt-oss-120b"], Uncompressed, bw(Elements(15_330), Elements(32_768)), &[Test07, Test09]),
        ],
        test07: Some(GPT_OSS_TEST07),
        test09: Some(GPT_OSS_TEST09),
        ..BASE
    },
    Benchmark {
        model: "gpt-oss-120b-interactive",
        input: &[t("input_ids", "<i4", &[15_330])],
        // The reference's mean answer: 1,278 tokens, the middle of TEST09's
        // bounds (its mean, less and more 10 %).
        output_bytes: tokens(1_278),
        total_samples: 6_396,
        performance_samples: 6_396,
        llm: true,
        interactive: true,
        rounds: [
            rules(&["gpt-oss-120b"], Uncompressed, NO_ROW, &[Test07, Test09]),
            rules(&["gpt-oss-120b"], Uncompressed, bw(Elements(15_330), Elements(32_768)), &[Test07, Test09]),
        ],
        test07: Some(GPT_OSS_TEST07),
        test09: Some(GPT_OSS_TEST09),
        ..BASE
    },
    Benchmark {
        model: "qwen3-vl-235b-a22b",
        input: &[t("text", "|u1", &[3_051]), t("image", "|u1", &[24_000])],
        // A JSON object of about 500 bytes.
        output_bytes: 500,
        total_samples: 48_289,
        performance_samples: 48_289,
        rounds: [
            rules(&["qwen3-vl-235b-a22b"], Uncompressed, NO_ROW, &[]),
            rules(&["qwen3-vl-235b-a22b"], Uncompressed, bw(Elements(27_051), Elements(500)), &[]),
        ],
        ..BASE
    },
    Benchmark {
        model: "stable-diffusion-xl",
        input: &[t("prompt_ids", "<i8", &[2, 77])],
        // A 1024x1024 RGB image.
        output_bytes: 1024 * 1024 * 3,
        max_output_bytes: 4 * 1024 * 1024 * 3,
        total_samples: 5_000,
        performance_samples: 5_000,
        rounds: [
            rules(&["stable-diffusion-xl"], Uncompressed, bw(Elements(77), Elements(3_145_728)), &[Test01, Test04]),
            rules(&["stable-diffusion-xl"], Uncompressed, NO_ROW, &[Test01, Test04]),
        ],
        ..BASE
    },
    Benchmark {
        model: "wan-2.2-t2v-a14b",
        input: &[t("prompt", "|u1", &[256])],
        // One video per sample: the rules' 224,870,400 elements (81 frames
        // of 720p RGB), in bf16.
        output_bytes: 224_870_400 * 2,
        max_output_bytes: 224_870_400 * 2,
        total_samples: 248,
        performance_samples: 248,
        rounds: [
            rules(&["wan-2.2-t2v-a14b"], Uncompressed, NO_ROW, &[Test04]),
            rules(&["wan-2.2-t2v-a14b"], Uncompressed, bw(Negligible, Elements(224_870_400)), &[Test04]),
        ],
        ..BASE
    },
    Benchmark {
        model: "rgat",
        input: &[t("node_id", "<i8", &[1])],
        total_samples: 788_379,
        performance_samples: 788_379,
        rounds: [
            rules(&["rgat"], Uncompressed, bw(Negligible, Negligible), &[Test01]),
            rules(&["rgat"], Uncompressed, bw(Negligible, Negligible), &[Test01]),
        ],
        ..BASE
    },
    Benchmark {
        model: "pointpainting",
        input: &[t("points", "<f4", &[5, 40_000])],
        // Up to 500 boxes of 9 floats.
        output_bytes: 500 * 9 * 4,
        total_samples: 39_987,
        performance_samples: 1_024,
        rounds: [
            rules(&["pointpainting"], Uncompressed, NO_ROW, &[Test01, Test04]),
            None,
        ],
        ..BASE
    },
    Benchmark {
        model: "whisper",
        input: &[t("audio", "<f4", &[30 * 16_000])],
        output_bytes: tokens(128),
        llm: true,
        total_samples: 1_633,
        performance_samples: 1_633,
        rounds: [
            rules(&["whisper"], Uncompressed, NO_ROW, &[Test01]),
            rules(&["whisper"], Uncompressed, NO_ROW, &[Test01]),
        ],
        ..BASE
    },
    Benchmark {
        model: "yolo",
        input: &[t("image", "<f4", &[3, 640, 640])],
        // Up to 300 boxes of 6 floats.
        output_bytes: 300 * 6 * 4,
        total_samples: 1_525,
        performance_samples: 64,
        rounds: [
            rules(&["yolo-99", "yolo-95"], Uncompressed, NO_ROW, &[Test01]),
            rules(&["yolo-99", "yolo-95"], Uncompressed, NO_ROW, &[Test01]),
        ],
        ..BASE
    },
    Benchmark {
        model: "dlrm",
        input: &[t("features", "<f4", &[13 + 26])],
        retired: Some("DLRM (v1) was retired from MLPerf Inference before v3.0; its successors are dlrm-v2 and dlrm-v3"),
        ..BASE
    },
    Benchmark {
        model: "rnnt",
        input: &[t("audio", "<f4", &[15 * 16_000])],
        retired: Some("RNN-T was retired from MLPerf Inference after v3.1; whisper is the speech benchmark"),
        ..BASE
    },
    Benchmark {
        model: "ssd-mobilenet",
        input: &[t("image", "<f4", &[3, 300, 300])],
        retired: Some("SSD-MobileNet was retired from MLPerf Inference after v1.1; retinanet and yolo are the detection benchmarks"),
        ..BASE
    },
];

/// Names of models outside the suite whose inputs are still refused
/// compression: the LLM families, whose every row says "No compression
/// allowed".
const UNCOMPRESSED_FAMILIES: &[&str] = &["llama", "mixtral", "gpt", "deepseek", "qwen"];

/// Whether `model`'s data may travel compressed (inputs from the QSL,
/// answers from the SUT) under `round`'s rules; the open division allows any
/// lossless codec. The error is the reason, quoting the rules.
pub fn check_compression(model: &str, round: Round, open_division: bool) -> Result<(), String> {
    if open_division {
        return Ok(());
    }
    let refused = |why: String| {
        Err(format!(
            "{why}; the open division allows compression (loadgen-node --open-division)"
        ))
    };
    match find(model) {
        Some(b) => match b.rules(round) {
            Some(r) if r.compression == Compression::Lossless => Ok(()),
            Some(_) => refused(format!(
                "the {round} rules allow no compression for {} (inference_rules.adoc, \
                 \"Benchmarks and QSL Preprocessing\": no compression, or no row for it)",
                b.model
            )),
            None => refused(format!(
                "{} is not a benchmark of the {round} rules, which give it no compression \
                 option",
                b.model
            )),
        },
        None => {
            let m = model.trim().to_ascii_lowercase();
            match UNCOMPRESSED_FAMILIES.iter().any(|f| m.starts_with(f)) {
                true => refused(format!(
                    "{model} is a language model, and the rules allow no compression for any \
                     of them"
                )),
                false => Ok(()),
            }
        }
    }
}

/// The benchmark of this model name or alias, if it is one of the suite.
pub fn find(model: &str) -> Option<&'static Benchmark> {
    BENCHMARKS
        .iter()
        .find(|b| b.model == model || b.aliases.contains(&model))
}

/// The mlperf.conf name of `model` (`llama3_1-8b` for `llama3.1-8b`); a
/// name outside the suite as it is.
pub fn canonical(model: &str) -> &str {
    find(model).map_or(model, |b| b.model)
}

/// A benchmark of a round's submission checker that the official LoadGen
/// 6.0.17 does not run: its mlperf.conf has no settings for it, so neither
/// engine can make a run the checker would take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotRun {
    /// The checker's benchmark folder.
    pub checker: &'static str,
    /// The category whose required scenarios list it.
    pub category: &'static str,
    /// Why loadgen-node cannot run it, for `suite` and a plan's refusal.
    pub reason: &'static str,
}

/// The checker's benchmarks of v6.1 that 6.0.17's mlperf.conf does not know
/// (the checker's v6.0 has none).
pub const NOT_RUN_V6_1: &[NotRun] = &[
    NotRun {
        checker: "e2e-rag-qna",
        category: "datacenter",
        reason: "not in LoadGen 6.0.17's mlperf.conf: the question answering (FRAMES) of the \
                 end-to-end retrieval-augmented pipeline, run by that pipeline's own harness, \
                 added to the checker after 6.0.17",
    },
    NotRun {
        checker: "e2e-rag-db",
        category: "datacenter",
        reason: "not in LoadGen 6.0.17's mlperf.conf: the vector-database build (a measured \
                 one-time operation) of the end-to-end retrieval-augmented pipeline, run by \
                 that pipeline's own harness, added to the checker after 6.0.17",
    },
    NotRun {
        checker: "qwen3.6-27b",
        category: "edge",
        reason: "not in LoadGen 6.0.17's mlperf.conf: the edge agentic benchmark (BFCL v4 \
                 accuracy, a recorded agentic-coding session replayed for performance), \
                 added to the checker after 6.0.17",
    },
];

/// The checker's benchmarks of `round` that 6.0.17's LoadGen does not run.
pub fn not_run(round: Round) -> &'static [NotRun] {
    match round {
        Round::V5_1 => &[],
        Round::V6_1 => NOT_RUN_V6_1,
    }
}

/// Files the checker requires beside an accuracy log, besides
/// `accuracy.txt`: samples of the benchmark's output for a reviewer to look
/// at, which the benchmark's own accuracy tooling writes (the checker's
/// `REQUIRED_ACC_BENCHMARK`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccuracyExtras {
    /// The folder in the accuracy directory (`videos`, `images`).
    pub dir: &'static str,
    /// The sample files it must hold, by data set index (with
    /// `extension`), and a `captions.txt`.
    pub samples: &'static [&'static str],
    /// The sample files' extension (`mp4`).
    pub extension: &'static str,
}

/// What the checker's folder `checker` needs beside its accuracy logs in
/// `round` (the checker's v6.1 for v6.1, its v6.0 for v5.1).
pub fn accuracy_extras(checker: &str, round: Round) -> Option<AccuracyExtras> {
    const WAN_V6_0: &[&str] = &[
        "130", "106", "84", "59", "12", "31", "86", "122", "233", "96",
    ];
    const WAN_V6_1: &[&str] = &[
        "130", "106", "84", "59", "12", "123", "43", "22", "238", "32",
    ];
    const SDXL_V6_0: &[&str] = &[
        "1311", "2476", "3644", "2188", "4114", "52", "388", "1195", "3427", "2289",
    ];
    let (dir, samples, extension) = match (checker, round) {
        ("wan-2.2-t2v-a14b", Round::V6_1) => ("videos", WAN_V6_1, "mp4"),
        ("wan-2.2-t2v-a14b", Round::V5_1) => ("videos", WAN_V6_0, "mp4"),
        ("stable-diffusion-xl", Round::V5_1) => ("images", SDXL_V6_0, "png"),
        _ => return None,
    };
    Some(AccuracyExtras {
        dir,
        samples,
        extension,
    })
}

impl AccuracyExtras {
    /// The files missing from the accuracy directory `acc`, as paths
    /// relative to it.
    pub fn missing(&self, acc: &std::path::Path) -> Vec<String> {
        let dir = acc.join(self.dir);
        let mut missing: Vec<String> = self
            .samples
            .iter()
            .map(|s| format!("{s}.{}", self.extension))
            .chain(std::iter::once("captions.txt".to_string()))
            .filter(|f| !dir.join(f).is_file())
            .map(|f| format!("{}/{f}", self.dir))
            .collect();
        missing.sort();
        missing
    }
}

/// The names, for error messages.
pub fn names() -> Vec<&'static str> {
    BENCHMARKS.iter().map(|b| b.model).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `b`'s inputs may be compressed in `round`.
    fn input_compression(b: &Benchmark, round: Round) -> Compression {
        b.rules(round).map_or(Compression::None, |r| r.compression)
    }

    #[test]
    fn lookup() {
        let r = find("resnet50").expect("resnet50");
        assert_eq!(r.input_bytes(), 602_112);
        assert!(!r.llm);
        assert!(find("llama2-70b").is_some_and(|b| b.llm));
        assert_eq!(find("llama3.1-8b").map(|b| b.model), Some("llama3_1-8b"));
        assert!(find("nope").is_none());
        assert!(names().contains(&"bert"));
    }

    #[test]
    fn the_rules_figures() {
        // The rules' bandwidth appendix.
        let wan = find("wan-2.2-t2v-a14b").unwrap();
        let rules = wan.rules(Round::V6_1).unwrap();
        assert_eq!(rules.egress, Some(Elements(224_870_400)));
        assert_eq!(wan.output_bytes, 224_870_400 * 2);
        let dlrm = find("dlrm-v3").unwrap();
        assert_eq!(
            dlrm.rules(Round::V6_1).unwrap().ingress,
            Some(Bytes(98_368))
        );
        // Its synthetic request: the same int64 values, each tensor with
        // its .npy header.
        let data: usize = dlrm.input.iter().map(Tensor::bytes).sum();
        assert_eq!(data, (2 + 6 + 6 * 2048) * 8);
        assert_eq!(data, 98_368);
        let qwen: usize = find("qwen3-vl-235b-a22b")
            .unwrap()
            .input
            .iter()
            .map(Tensor::bytes)
            .sum();
        assert_eq!(qwen, 27_051);
        // DLRMv3's compression row is new in the current rules; DLRMv2's
        // and SDXL's are gone from them.
        assert_eq!(input_compression(dlrm, Round::V6_1), Compression::Lossless);
        assert_eq!(input_compression(dlrm, Round::V5_1), Compression::None);
        let sdxl = find("stable-diffusion-xl").unwrap();
        assert!(sdxl.rules(Round::V5_1).unwrap().ingress.is_some());
        assert!(sdxl.rules(Round::V6_1).unwrap().ingress.is_none());
        assert!(find("dlrm-v2").unwrap().rules(Round::V6_1).is_none());
        assert_eq!(
            input_compression(find("rgat").unwrap(), Round::V6_1),
            Compression::None
        );
        assert_eq!(find("bert").unwrap().input_bytes(), 9_216);
    }

    #[test]
    fn every_name_is_unique_and_every_current_benchmark_has_a_checker_folder() {
        let mut all: Vec<&str> = BENCHMARKS
            .iter()
            .flat_map(|b| std::iter::once(b.model).chain(b.aliases.iter().copied()))
            .collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
        for b in BENCHMARKS {
            for r in Round::ALL {
                if let Some(rules) = b.rules(r) {
                    assert!(!rules.checker.is_empty(), "{} {r}", b.model);
                }
            }
            assert!(b.retired.is_none() || b.rules(Round::CURRENT).is_none());
            assert!(b.output_bytes <= b.max_output_bytes, "{}", b.model);
        }
    }

    #[test]
    fn compression_follows_the_round() {
        for m in ["resnet50", "bert", "3d-unet", "retinanet"] {
            assert_eq!(check_compression(m, Round::V5_1, false), Ok(()), "{m}");
        }
        assert_eq!(check_compression("dlrm-v3", Round::V6_1, false), Ok(()));
        for (m, round) in [
            ("dlrm-v3", Round::V5_1),
            ("dlrm-v2", Round::V6_1),
            ("llama2-70b", Round::V6_1),
            ("wan-2.2-t2v-a14b", Round::V6_1),
            ("rgat", Round::V6_1),
            ("gptj", Round::V5_1),
            ("llama4-maverick", Round::V6_1),
        ] {
            let e = check_compression(m, round, false).unwrap_err();
            assert!(e.contains(m) && e.contains("--open-division"), "{e}");
            assert_eq!(check_compression(m, round, true), Ok(()));
        }
        assert_eq!(check_compression("dlrm-v2", Round::V5_1, false), Ok(()));
        assert_eq!(
            check_compression("my-own-vision-model", Round::V6_1, false),
            Ok(())
        );
    }

    #[test]
    fn the_checkers_output_samples_are_named() {
        let wan = accuracy_extras("wan-2.2-t2v-a14b", Round::V6_1).unwrap();
        let dir = testkit::Scratch::new("facts-extras");
        std::fs::create_dir_all(dir.join("videos")).unwrap();
        let missing = wan.missing(&dir);
        assert_eq!(missing.len(), 11);
        assert!(
            missing.contains(&"videos/238.mp4".to_string()),
            "{missing:?}"
        );
        for f in missing {
            std::fs::write(dir.join(f), b"x").unwrap();
        }
        assert!(wan.missing(&dir).is_empty());
        assert!(accuracy_extras("stable-diffusion-xl", Round::V6_1).is_none());
        assert_eq!(
            accuracy_extras("stable-diffusion-xl", Round::V5_1)
                .unwrap()
                .dir,
            "images"
        );
        assert!(accuracy_extras("resnet", Round::V6_1).is_none());
    }

    #[test]
    fn npy_headers_are_aligned_and_parse_back() {
        let h = npy_header("<i8", &[6, 2048]);
        assert_eq!(h.len() % 64, 0);
        let text = String::from_utf8_lossy(&h[10..]);
        assert!(text.contains("'shape': (6, 2048)"), "{text}");
        assert!(String::from_utf8_lossy(&npy_header("|u1", &[3])).contains("(3,)"));
        assert_eq!(dtype_bytes("<f4"), 4);
        assert_eq!(dtype_bytes("|u1"), 1);
    }
}
