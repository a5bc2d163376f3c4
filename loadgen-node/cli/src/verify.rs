//! Checks an accuracy run against `synthetic` sut-nodes: every logged answer
//! must be the synthetic function of the very sample the LoadGen issued under
//! that id. A match proves the sample's data crossed the network and its
//! answer came back to the right response id.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::exit::Exit;
use crate::qsl::DataSource;

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Malformed { path: String, reason: String },
}

/// What the check found.
#[derive(Debug, Default, PartialEq)]
pub struct Verdict {
    pub checked: usize,
    /// `(seq_id, qsl_idx, what is wrong)` of each bad entry.
    pub mismatches: Vec<(u64, u64, String)>,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        self.checked > 0 && self.mismatches.is_empty()
    }
}

/// Checks every entry of `accuracy_log` against `data`.
pub fn check(accuracy_log: &Path, data: &DataSource) -> Result<Verdict, VerifyError> {
    let path = accuracy_log.display().to_string();
    let text = std::fs::read_to_string(accuracy_log).map_err(|source| VerifyError::Io {
        path: path.clone(),
        source,
    })?;
    let malformed = |reason: String| VerifyError::Malformed {
        path: path.clone(),
        reason,
    };
    let entries: Vec<Value> =
        serde_json::from_str(&text).map_err(|e| malformed(format!("not a JSON array: {e}")))?;
    let mut verdict = Verdict::default();
    for (n, e) in entries.iter().enumerate() {
        let (Some(seq), Some(idx), Some(hex)) = (
            e["seq_id"].as_u64(),
            e["qsl_idx"].as_u64(),
            e["data"].as_str(),
        ) else {
            return Err(malformed(format!(
                "entry {n} lacks seq_id, qsl_idx or data"
            )));
        };
        verdict.checked += 1;
        let Some(got) = from_hex(hex) else {
            verdict
                .mismatches
                .push((seq, idx, "data is not hexadecimal".into()));
            continue;
        };
        let input = match data.read(idx as usize) {
            Ok(i) => i,
            Err(e) => {
                verdict.mismatches.push((seq, idx, e.0));
                continue;
            }
        };
        if got != proto::synthetic::answer(&input, got.len()) {
            verdict.mismatches.push((
                seq,
                idx,
                "the answer is not that of this sample's data".into(),
            ));
        }
    }
    Ok(verdict)
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qsl::synthetic_sample;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02X}")).collect()
    }

    #[test]
    fn matches_and_mismatches() {
        let data = DataSource::Synthetic {
            sample_bytes: 32,
            total: 10,
            tensors: &[],
        };
        let good = proto::synthetic::answer(&synthetic_sample(3, 32), 8);
        let other = proto::synthetic::answer(&synthetic_sample(4, 32), 8);
        let log = format!(
            "[\n{{ \"seq_id\" : 0, \"qsl_idx\" : 3, \"data\" : \"{}\" }},\n{{ \"seq_id\" : 1, \"qsl_idx\" : 3, \"data\" : \"{}\" }}\n]\n",
            hex(&good),
            hex(&other)
        );
        let path = std::env::temp_dir().join(format!("verify-{}.json", std::process::id()));
        std::fs::write(&path, log).unwrap();
        let v = check(&path, &data).unwrap();
        assert_eq!(v.checked, 2);
        assert_eq!(v.mismatches.len(), 1);
        assert_eq!((v.mismatches[0].0, v.mismatches[0].1), (1, 3));
        assert!(!v.passed());

        std::fs::write(&path, "[{\"seq_id\": 1}]").unwrap();
        assert!(check(&path, &data)
            .unwrap_err()
            .to_string()
            .contains("entry 0 lacks"));
    }
}

/// The first mismatches of a failed check, on stderr.
pub fn print_mismatches(verdict: &Verdict) {
    for (seq, idx, why) in verdict.mismatches.iter().take(10) {
        eprintln!("  seq_id {seq}, qsl_idx {idx}: {why}");
    }
}

/// `loadgen-node check-synthetic`: the accuracy script of synthetic
/// sut-nodes.
#[derive(clap::Args, Debug)]
pub struct CheckSyntheticArgs {
    /// The accuracy run's mlperf_log_accuracy.json.
    #[arg(long, value_name = "FILE")]
    pub accuracy_log: PathBuf,
    /// The benchmark the run used (its synthetic data set).
    #[arg(long, default_value = "resnet50")]
    pub model: String,
    /// The run's --sample-bytes, if it gave one.
    #[arg(long, value_name = "BYTES",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 30))]
    pub sample_bytes: Option<usize>,
    /// The run's --total-sample-count, if it gave one.
    #[arg(long)]
    pub total_sample_count: Option<usize>,
    /// The run's --dataset, if it gave one.
    #[arg(long, value_name = "DIR")]
    pub dataset: Option<PathBuf>,
}

/// Checks every answer of an accuracy log against the synthetic function of
/// its sample and prints the share that match in the accuracy scripts' form
/// (`accuracy=P%, good=G, total=T`), so that a submission plan on synthetic
/// nodes can name it as its accuracy_command.
pub fn check_synthetic(args: &CheckSyntheticArgs) -> anyhow::Result<Exit> {
    let data = DataSource::for_run(
        &args.model,
        args.dataset.as_deref(),
        args.sample_bytes,
        args.total_sample_count,
    )?;
    let verdict = check(&args.accuracy_log, &data)?;
    let good = verdict.checked - verdict.mismatches.len();
    let share = match verdict.checked {
        0 => 0.0,
        n => 100.0 * good as f64 / n as f64,
    };
    println!(
        "accuracy={share:.3}%, good={good}, total={}",
        verdict.checked
    );
    if verdict.passed() {
        return Ok(Exit::Done);
    }
    print_mismatches(&verdict);
    Ok(Exit::SyntheticMismatch)
}
