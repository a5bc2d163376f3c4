//! Checks an accuracy run against `synthetic` sut-nodes: every logged answer
//! must be the synthetic function of the very sample the LoadGen issued under
//! that id. A match proves the sample's data crossed the network and its
//! answer came back to the right response id.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use crate::exit::Exit;
use crate::qsl::DataSource;

/// Why an accuracy log could not be checked.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The log could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The log.
        path: String,
        /// The read's error.
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    /// The log is not JSON of LoadGen's accuracy-log form.
    Malformed {
        /// The log.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

/// What the check found.
#[derive(Debug, Default, PartialEq)]
pub struct Verdict {
    /// Entries checked.
    pub checked: usize,
    /// `(seq_id, qsl_idx, what is wrong)` of each bad entry.
    pub mismatches: Vec<(u64, u64, String)>,
}

impl Verdict {
    /// At least one entry was checked and none was wrong.
    pub fn passed(&self) -> bool {
        self.checked > 0 && self.mismatches.is_empty()
    }
}

/// How a benchmark's synthetic answers are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `facts::synthetic::answer` of the sample, of any length.
    Bytes,
    /// DLRMv3's float32 requests (`facts::synthetic::dlrm_v3_answer`), in
    /// either of TEST08's layouts: an accuracy run's `[ts_idx, query_idx,
    /// predictions, labels, weights, candidates]` or a performance run's
    /// `[ts_idx, query_idx, predictions]`; or the bytes of a node started
    /// without `--benchmark dlrm-v3`.
    DlrmV3,
}

impl Layout {
    /// The layout of `model`'s synthetic answers (`sut-node --benchmark`).
    pub fn of(model: &str) -> Self {
        if facts::benchmarks::canonical(model) == "dlrm-v3" {
            Self::DlrmV3
        } else {
            Self::Bytes
        }
    }
}

/// The largest DLRMv3 answer checked: far above the suite's (2048
/// candidates, 24 KiB in an accuracy run); a longer one is a mismatch.
const MAX_DLRM_ANSWER: usize = 16 << 20;

/// Why a DLRMv3 answer is not the synthetic one of `input`, if it is not.
fn dlrm_v3_mismatch(input: &[u8], answer: &[u8]) -> Option<String> {
    if !answer.len().is_multiple_of(4) || answer.len() < 12 {
        return Some(format!(
            "{} bytes: not a DLRMv3 answer of float32 values",
            answer.len()
        ));
    }
    let floats = answer.len() / 4;
    let last = answer.len() - 4;
    let tail = f32::from_le_bytes([
        answer[last],
        answer[last + 1],
        answer[last + 2],
        answer[last + 3],
    ]);
    let candidates = tail as usize;
    let accuracy = tail.is_finite()
        && tail >= 1.0
        && tail.fract() == 0.0
        && candidates.checked_mul(3).and_then(|c| c.checked_add(3)) == Some(floats);
    let expected = if accuracy {
        facts::synthetic::dlrm_v3_answer(input, candidates, true)
    } else {
        facts::synthetic::dlrm_v3_answer(input, floats - 2, false)
    };
    (expected != answer).then(|| "the answer is not that of this sample's data".into())
}

/// Checks every entry of `accuracy_log` against `data`, whose answers have
/// `layout`. The log is read as a stream, each answer's hex compared with
/// its expected bytes piece by piece: an answer of hundreds of MB (WAN-2.2's
/// videos, 900 MB of hex) costs a buffer, not its size. A DLRMv3 answer,
/// whose layout shows only at its end, is read whole, up to 16 MiB.
pub fn check(
    accuracy_log: &Path,
    data: &DataSource,
    layout: Layout,
) -> Result<Verdict, VerifyError> {
    let path = accuracy_log.display().to_string();
    let file = std::fs::File::open(accuracy_log).map_err(|source| VerifyError::Io {
        path: path.clone(),
        source,
    })?;
    let mut log = LogReader {
        r: std::io::BufReader::with_capacity(1 << 16, file),
        path,
        layout,
    };
    let mut verdict = Verdict::default();
    log.expect(b'[')?;
    let mut n = 0;
    loop {
        match log.next_token()? {
            b']' => return Ok(verdict),
            b',' if n > 0 => continue,
            b'{' => {}
            other => {
                return Err(log.malformed(format!("entry {n}: unexpected `{}`", other as char)))
            }
        }
        let (seq, idx, why) = log.entry(n, data)?;
        verdict.checked += 1;
        if let Some(why) = why {
            verdict.mismatches.push((seq, idx, why));
        }
        n += 1;
    }
}

/// The value of each byte as a hex digit; 16 and above: not one.
const HEX_VALUE: [u8; 256] = {
    let mut t = [255u8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// The reader's next bytes (none at the end of the file).
fn fill<'a, R: BufRead>(r: &'a mut R, path: &str) -> Result<&'a [u8], VerifyError> {
    r.fill_buf().map_err(|source| VerifyError::Io {
        path: path.to_string(),
        source,
    })
}

/// A streaming reader of an accuracy log's JSON: an array of flat objects of
/// numbers and strings.
struct LogReader<R: BufRead> {
    r: R,
    path: String,
    layout: Layout,
}

impl<R: BufRead> LogReader<R> {
    fn malformed(&self, reason: String) -> VerifyError {
        VerifyError::Malformed {
            path: self.path.clone(),
            reason,
        }
    }

    /// The next byte, or an error at the end of the file.
    fn byte(&mut self) -> Result<u8, VerifyError> {
        let buf = fill(&mut self.r, &self.path)?;
        let Some(&b) = buf.first() else {
            return Err(self.malformed("the file ends inside the array".into()));
        };
        self.r.consume(1);
        Ok(b)
    }

    /// The next byte that is not white space.
    fn next_token(&mut self) -> Result<u8, VerifyError> {
        loop {
            let b = self.byte()?;
            if !b.is_ascii_whitespace() {
                return Ok(b);
            }
        }
    }

    fn expect(&mut self, want: u8) -> Result<(), VerifyError> {
        match self.next_token()? {
            b if b == want => Ok(()),
            b => Err(self.malformed(format!(
                "expected `{}`, found `{}`",
                want as char, b as char
            ))),
        }
    }

    /// A short string (a key), after its opening quote.
    fn short_string(&mut self) -> Result<String, VerifyError> {
        let mut s = Vec::new();
        loop {
            match self.byte()? {
                b'"' => return Ok(String::from_utf8_lossy(&s).into_owned()),
                _ if s.len() > 64 => return Err(self.malformed("a key is too long".into())),
                b => s.push(b),
            }
        }
    }

    /// A number's digits, the first given; returns it and the byte after.
    fn number(&mut self, first: u8) -> Result<(u64, u8), VerifyError> {
        let mut v: u64 = 0;
        let mut b = first;
        while b.is_ascii_digit() {
            v = v
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(b - b'0')))
                .ok_or_else(|| self.malformed("a number is too large".into()))?;
            b = self.byte()?;
        }
        Ok((v, b))
    }

    /// A string's bytes, after its opening quote, handed to `f` a buffer at
    /// a time.
    fn string_pieces(&mut self, mut f: impl FnMut(&[u8])) -> Result<(), VerifyError> {
        loop {
            let buf = fill(&mut self.r, &self.path)?;
            if buf.is_empty() {
                return Err(self.malformed("the file ends inside a string".into()));
            }
            match buf.iter().position(|&b| b == b'"') {
                Some(end) => {
                    f(&buf[..end]);
                    self.r.consume(end + 1);
                    return Ok(());
                }
                None => {
                    let n = buf.len();
                    f(buf);
                    self.r.consume(n);
                }
            }
        }
    }

    /// One entry, after its `{`: its seq_id and qsl_idx, and why its data
    /// is not the synthetic answer of its sample, if it is not.
    fn entry(
        &mut self,
        n: usize,
        data: &DataSource,
    ) -> Result<(u64, u64, Option<String>), VerifyError> {
        let (mut seq, mut idx, mut why) = (None, None, None);
        let mut seen_data = false;
        loop {
            match self.next_token()? {
                b'}' => break,
                b',' => continue,
                b'"' => {}
                b => return Err(self.malformed(format!("entry {n}: unexpected `{}`", b as char))),
            }
            let key = self.short_string()?;
            self.expect(b':')?;
            let first = self.next_token()?;
            match (key.as_str(), first) {
                ("data", b'"') => {
                    let idx = idx
                        .ok_or_else(|| self.malformed(format!("entry {n}: data before qsl_idx")))?;
                    why = self.compare(idx, data)?;
                    seen_data = true;
                }
                (_, b'"') => self.string_pieces(|_| ())?,
                (_, b) if b.is_ascii_digit() => {
                    let (v, after) = self.number(b)?;
                    match key.as_str() {
                        "seq_id" => seq = Some(v),
                        "qsl_idx" => idx = Some(v),
                        _ => {}
                    }
                    match after {
                        b'}' => break,
                        b',' => {}
                        b if b.is_ascii_whitespace() => {}
                        b => {
                            return Err(self.malformed(format!(
                                "entry {n}: unexpected `{}` after {key}",
                                b as char
                            )))
                        }
                    }
                }
                (_, b) => {
                    return Err(self.malformed(format!("entry {n}: {key} holds `{}`", b as char)))
                }
            }
        }
        match (seq, idx, seen_data) {
            (Some(seq), Some(idx), true) => Ok((seq, idx, why)),
            (_, Some(idx), _) => {
                Err(self.malformed(format!("entry {n} (qsl_idx {idx}) lacks seq_id or data")))
            }
            _ => Err(self.malformed(format!("entry {n} lacks seq_id, qsl_idx or data"))),
        }
    }

    /// Reads a data string whole (up to `MAX_DLRM_ANSWER` bytes), then
    /// compares it with DLRMv3's synthetic answer of `input`.
    fn compare_whole(&mut self, input: &[u8]) -> Result<Option<String>, VerifyError> {
        let mut too_long = false;
        let mut hex = Hex::default();
        let mut got = Vec::new();
        self.string_pieces(|piece| {
            hex.decode(piece, |b| match got.len() >= MAX_DLRM_ANSWER {
                true => too_long = true,
                false => got.push(b),
            })
        })?;
        Ok(if !hex.whole() {
            Some("data is not hexadecimal".into())
        } else if too_long {
            Some(format!(
                "the answer is longer than {MAX_DLRM_ANSWER} bytes, more than any DLRMv3 answer"
            ))
        } else if facts::synthetic::answer(input, got.len()) == got {
            // A node started without `--benchmark dlrm-v3` answers bytes.
            None
        } else {
            dlrm_v3_mismatch(input, &got)
        })
    }

    /// Reads a data string, comparing it with the synthetic answer of
    /// sample `idx` as it goes.
    fn compare(&mut self, idx: u64, data: &DataSource) -> Result<Option<String>, VerifyError> {
        let input = match data.read(idx as usize) {
            Ok(i) => i,
            Err(e) => {
                self.string_pieces(|_| ())?;
                return Ok(Some(e.0));
            }
        };
        if self.layout == Layout::DlrmV3 {
            return self.compare_whole(&input);
        }
        let mut expected = facts::synthetic::AnswerStream::new(&input);
        let mut same = true;
        let mut hex = Hex::default();
        let (mut got, mut want) = (Vec::with_capacity(1 << 15), vec![0u8; 1 << 15]);
        // A buffer of the reader may hold more than `want`: compared a
        // window at a time.
        let mut compare = |got: &mut Vec<u8>| {
            for chunk in got.chunks(want.len()) {
                let want = &mut want[..chunk.len()];
                expected.fill(want);
                same &= chunk == &want[..];
            }
            got.clear();
        };
        self.string_pieces(|piece| {
            hex.decode(piece, |b| got.push(b));
            if got.len() >= 1 << 14 {
                compare(&mut got);
            }
        })?;
        compare(&mut got);
        Ok(match (hex.whole(), same) {
            (false, _) => Some("data is not hexadecimal".into()),
            (true, false) => Some("the answer is not that of this sample's data".into()),
            (true, true) => None,
        })
    }
}

/// Hexadecimal text decoded piece by piece, as a data string arrives.
#[derive(Default)]
struct Hex {
    /// The high half of a byte whose low half is still to come.
    nibble: Option<u8>,
    /// A character that is no hexadecimal digit was seen.
    bad: bool,
}

impl Hex {
    /// Hands each whole byte of `piece` (and the half before it) to `out`.
    fn decode(&mut self, piece: &[u8], mut out: impl FnMut(u8)) {
        for &c in piece {
            let v = HEX_VALUE[c as usize];
            if v > 15 {
                self.bad = true;
                continue;
            }
            match self.nibble.take() {
                None => self.nibble = Some(v),
                Some(high) => out(high << 4 | v),
            }
        }
    }

    /// Whether the text was hexadecimal, of whole bytes.
    fn whole(&self) -> bool {
        !self.bad && self.nibble.is_none()
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
    #[arg(
        long = "benchmark",
        visible_alias = "model",
        value_name = "NAME",
        default_value = "resnet50"
    )]
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
    let verdict = check(&args.accuracy_log, &data, Layout::of(&args.model))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qsl::synthetic_sample;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02X}")).collect()
    }

    #[test]
    fn dlrm_v3_answers_are_checked_in_either_layout() {
        let data = DataSource::Synthetic {
            sample_bytes: 64,
            total: 4,
            tensors: &[],
        };
        let sample = |i| synthetic_sample(i, 64);
        let acc = facts::synthetic::dlrm_v3_answer(&sample(0), 3, true);
        let perf = facts::synthetic::dlrm_v3_answer(&sample(1), 3, false);
        let other = facts::synthetic::dlrm_v3_answer(&sample(3), 3, true);
        // A node started without --benchmark dlrm-v3 answers bytes.
        let bytes = facts::synthetic::answer(&sample(2), 20);
        let dir = testkit::Scratch::new("verify-dlrm");
        let path = dir.join("log.json");
        std::fs::write(
            &path,
            log_of(&[
                (0, acc),
                (1, perf),
                (2, bytes.clone()),
                (0, other),
                (1, bytes),
            ]),
        )
        .unwrap();
        let v = check(&path, &data, Layout::DlrmV3).unwrap();
        assert_eq!(v.checked, 5);
        let bad: Vec<u64> = v.mismatches.iter().map(|m| m.0).collect();
        assert_eq!(bad, [3, 4], "{:?}", v.mismatches);
        assert!(v.mismatches[0].2.contains("not that of this sample"));
    }

    /// An accuracy log of one entry per (qsl_idx, answer), as the LoadGen
    /// writes it.
    fn log_of(answers: &[(u64, Vec<u8>)]) -> String {
        let entries: Vec<String> = answers
            .iter()
            .enumerate()
            .map(|(i, (idx, a))| {
                format!(
                    "{{ \"seq_id\" : {i}, \"qsl_idx\" : {idx}, \"data\" : \"{}\" }}",
                    hex(a)
                )
            })
            .collect();
        format!("[\n{}\n]\n", entries.join(",\n"))
    }

    #[test]
    fn every_benchmarks_answer_size_is_checked() {
        let dir = testkit::Scratch::new("verify-sizes");
        let path = dir.join("mlperf_log_accuracy.json");
        let data = DataSource::Synthetic {
            sample_bytes: 64,
            total: 4,
            tensors: &[],
        };
        // Each size of the table (the largest, WAN-2.2's 450 MB videos, has
        // its own test), and the sizes around the reader's buffers.
        let mut sizes: Vec<usize> = crate::benchmarks::BENCHMARKS
            .iter()
            .flat_map(|b| [b.output_bytes, b.output_bytes + 1])
            .filter(|n| *n <= 64 << 20)
            .collect();
        sizes.extend([1, 16_383, 16_384, 32_767, 32_768, 32_769, 49_151, 65_537]);
        for n in sizes {
            let good = facts::synthetic::answer(&synthetic_sample(1, 64), n);
            let mut bad = good.clone();
            if let Some(last) = bad.last_mut() {
                *last ^= 1;
            }
            std::fs::write(&path, log_of(&[(1, good), (1, bad)])).unwrap();
            let v = check(&path, &data, Layout::Bytes).unwrap();
            assert_eq!(v.checked, 2, "{n} bytes");
            assert_eq!(v.mismatches.len(), 1, "{n} bytes: {v:?}");
            assert_eq!(v.mismatches[0].0, 1, "{n} bytes");
        }
    }

    #[test]
    fn malformed_logs_name_the_file_and_the_entry() {
        let dir = testkit::Scratch::new("verify-malformed");
        let path = dir.join("mlperf_log_accuracy.json");
        let data = DataSource::Synthetic {
            sample_bytes: 64,
            total: 4,
            tensors: &[],
        };
        let good = facts::synthetic::answer(&synthetic_sample(1, 64), 8);
        let first = format!("{{\"seq_id\":0,\"qsl_idx\":1,\"data\":\"{}\"}}", hex(&good));
        for (text, entry) in [
            (
                format!("[{first},{{\"qsl_idx\":2}}]"),
                "entry 1 (qsl_idx 2)",
            ),
            (
                format!("[{first},{{\"seq_id\":1,\"qsl_idx\":x}}]"),
                "entry 1",
            ),
            (
                format!("[{first},{{\"seq_id\":1,\"data\":\"00\"}}]"),
                "entry 1",
            ),
            (
                format!("[{first},{{\"seq_id\":1,\"qsl_idx\":99999999999999999999999}}]"),
                "too large",
            ),
            (format!("[{first},7]"), "entry 1"),
            (format!("{{{first}}}"), "expected `[`"),
        ] {
            std::fs::write(&path, &text).unwrap();
            let err = check(&path, &data, Layout::Bytes).unwrap_err().to_string();
            assert!(err.contains(&path.display().to_string()), "{err}");
            assert!(err.contains(entry), "{text}: {err}");
        }
    }

    #[test]
    fn matches_and_mismatches() {
        let data = DataSource::Synthetic {
            sample_bytes: 32,
            total: 10,
            tensors: &[],
        };
        let good = facts::synthetic::answer(&synthetic_sample(3, 32), 8);
        let other = facts::synthetic::answer(&synthetic_sample(4, 32), 8);
        let log = format!(
            "[\n{{ \"seq_id\" : 0, \"qsl_idx\" : 3, \"data\" : \"{}\" }},\n{{ \"seq_id\" : 1, \"qsl_idx\" : 3, \"data\" : \"{}\" }}\n]\n",
            hex(&good),
            hex(&other)
        );
        let dir = testkit::Scratch::new("verify");
        let path = dir.join("mlperf_log_accuracy.json");
        std::fs::write(&path, log).unwrap();
        let v = check(&path, &data, Layout::Bytes).unwrap();
        assert_eq!(v.checked, 2);
        assert_eq!(v.mismatches.len(), 1);
        assert_eq!((v.mismatches[0].0, v.mismatches[0].1), (1, 3));
        assert!(!v.passed());

        std::fs::write(&path, "[{\"seq_id\": 1}]").unwrap();
        assert!(check(&path, &data, Layout::Bytes)
            .unwrap_err()
            .to_string()
            .contains("entry 0 lacks"));

        // Token fields, odd and bad hex, a sample outside the data set, an
        // empty log, and a log cut short.
        let tokens = format!(
            "[{{\"seq_id\":5,\"qsl_idx\":3,\"data\":\"{}\",\"token_data\":\"AB\",\"token_count\":2}},\n\
             {{ \"seq_id\" : 6, \"qsl_idx\" : 3, \"data\" : \"ABC\" }},\n\
             {{ \"seq_id\" : 7, \"qsl_idx\" : 3, \"data\" : \"ZZ\" }},\n\
             {{ \"seq_id\" : 8, \"qsl_idx\" : 99, \"data\" : \"00\" }}]",
            hex(&good)
        );
        std::fs::write(&path, tokens).unwrap();
        let v = check(&path, &data, Layout::Bytes).unwrap();
        assert_eq!(v.checked, 4);
        let why: Vec<&str> = v.mismatches.iter().map(|m| m.2.as_str()).collect();
        assert_eq!(
            why[..2],
            ["data is not hexadecimal", "data is not hexadecimal"]
        );
        assert!(why[2].contains("not in the data set"), "{why:?}");
        std::fs::write(&path, "[\n]\n").unwrap();
        assert_eq!(check(&path, &data, Layout::Bytes).unwrap().checked, 0);
        std::fs::write(
            &path,
            format!("[{{\"seq_id\":0,\"qsl_idx\":3,\"data\":\"{}", hex(&good)),
        )
        .unwrap();
        assert!(check(&path, &data, Layout::Bytes)
            .unwrap_err()
            .to_string()
            .contains("ends inside"));
    }
}
