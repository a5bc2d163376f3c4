//! `mlperf_log_accuracy.json` (`logging.cc`, `AsyncLog::LogAccuracy`): a JSON array with one entry per
//! logged sample, in the order completions were processed.

use std::io::{self, Write};

/// One logged sample.
pub(crate) struct AccuracyEntry<'a> {
    pub seq_id: u64,
    pub qsl_idx: usize,
    pub data: &'a [u8],
    /// `Some` when token latencies are used: (first-token data for non-Offline
    /// scenarios, token count).
    pub tokens: Option<(Option<&'a [u8]>, i64)>,
}

pub(crate) struct AccuracyLog<W: Write> {
    out: W,
    entries: u64,
    line: Vec<u8>,
}

impl<W: Write> AccuracyLog<W> {
    /// Writes the opening bracket.
    pub(crate) fn new(mut out: W) -> io::Result<Self> {
        out.write_all(b"[")?;
        Ok(Self {
            out,
            entries: 0,
            line: Vec::with_capacity(256),
        })
    }

    pub(crate) fn write(&mut self, e: &AccuracyEntry<'_>) -> io::Result<()> {
        self.line.clear();
        self.line
            .extend_from_slice(if self.entries == 0 { b"\n{ " } else { b",\n{ " });
        write!(
            self.line,
            "\"seq_id\" : {}, \"qsl_idx\" : {}, \"data\" : \"",
            e.seq_id, e.qsl_idx
        )?;
        self.hex(e.data)?;
        self.line.push(b'"');
        if let Some((token_data, count)) = e.tokens {
            if let Some(td) = token_data {
                self.line.extend_from_slice(b", \"token_data\" : \"");
                self.hex(td)?;
                self.line.push(b'"');
            }
            write!(self.line, ", \"token_count\" : {count}")?;
        }
        self.line.extend_from_slice(b" }");
        self.entries += 1;
        self.out.write_all(&self.line)
    }

    /// Appends `data` in hex to the line, writing the line out whenever it
    /// grows past [`HEX_CHUNK`]: an answer of hundreds of MB (WAN-2.2's
    /// videos) costs a chunk here, not twice its size.
    fn hex(&mut self, data: &[u8]) -> io::Result<()> {
        for part in data.chunks(HEX_CHUNK / 2) {
            push_hex(&mut self.line, part);
            if self.line.len() >= HEX_CHUNK {
                self.out.write_all(&self.line)?;
                self.line.clear();
            }
        }
        Ok(())
    }

    pub(crate) fn entries(&self) -> u64 {
        self.entries
    }

    /// Writes the closing bracket and returns the writer.
    pub(crate) fn finish(mut self) -> io::Result<W> {
        self.out.write_all(b"\n]\n")?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// The most bytes one entry of an answer of `answer_bytes` takes, with
/// `tokens` when token latencies are used (`Some(first-token bytes)`, 0 in
/// Offline, which logs no token data): its fixed text with the largest ids,
/// and the data in hex.
pub(crate) fn entry_bytes(answer_bytes: u64, tokens: Option<u64>) -> u64 {
    let mut log = AccuracyLog::new(Vec::new()).unwrap_or_else(|_| unreachable!());
    let _ = log.write(&AccuracyEntry {
        seq_id: u64::MAX,
        qsl_idx: usize::MAX,
        data: &[],
        tokens: tokens.map(|first| ((first > 0).then_some(&[][..]), i64::MAX)),
    });
    // The opening bracket stands for the comma of a later entry.
    let text = log.out.len() as u64;
    let data = answer_bytes.saturating_add(tokens.unwrap_or(0));
    text.saturating_add(data.saturating_mul(2))
}

/// Bytes of hex held before they are written.
const HEX_CHUNK: usize = 64 << 10;

fn push_hex(out: &mut Vec<u8>, data: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.reserve(data.len() * 2);
    for b in data {
        out.push(HEX[(b >> 4) as usize]);
        out.push(HEX[(b & 15) as usize]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_the_official_one() {
        let mut log = AccuracyLog::new(Vec::new()).unwrap();
        log.write(&AccuracyEntry {
            seq_id: 0,
            qsl_idx: 784,
            data: &[0xA0, 0x1E, 0, 0],
            tokens: Some((Some(&[0xA0, 0x1E, 0, 0]), 2)),
        })
        .unwrap();
        log.write(&AccuracyEntry {
            seq_id: 1,
            qsl_idx: 5,
            data: &[],
            tokens: None,
        })
        .unwrap();
        let text = String::from_utf8(log.finish().unwrap()).unwrap();
        assert_eq!(
            text,
            "[\n{ \"seq_id\" : 0, \"qsl_idx\" : 784, \"data\" : \"A01E0000\", \"token_data\" : \"A01E0000\", \"token_count\" : 2 },\n{ \"seq_id\" : 1, \"qsl_idx\" : 5, \"data\" : \"\" }\n]\n"
        );
    }

    /// A writer that remembers its largest single write.
    #[derive(Default)]
    struct Largest {
        bytes: Vec<u8>,
        largest: usize,
    }

    impl Write for Largest {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.largest = self.largest.max(b.len());
            self.bytes.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_huge_answer_is_written_in_chunks_and_reads_the_same() {
        let data: Vec<u8> = (0..1_000_003u32).map(|i| (i * 7) as u8).collect();
        let mut log = AccuracyLog::new(Largest::default()).unwrap();
        log.write(&AccuracyEntry {
            seq_id: 3,
            qsl_idx: 1,
            data: &data,
            tokens: None,
        })
        .unwrap();
        let out = log.finish().unwrap();
        assert!(out.largest <= HEX_CHUNK + 64, "{}", out.largest);
        let mut whole = Vec::new();
        push_hex(&mut whole, &data);
        let text = String::from_utf8(out.bytes).unwrap();
        let expected = format!(
            "[\n{{ \"seq_id\" : 3, \"qsl_idx\" : 1, \"data\" : \"{}\" }}\n]\n",
            String::from_utf8(whole).unwrap()
        );
        assert!(text == expected, "the chunked log differs");
    }

    #[test]
    fn an_entry_takes_at_most_its_estimate() {
        for (answer, tokens) in [(0u64, None), (8, None), (4096, Some(4)), (12, Some(0))] {
            let mut log = AccuracyLog::new(Vec::new()).unwrap();
            log.write(&AccuracyEntry {
                seq_id: 123_456_789,
                qsl_idx: 50_000,
                data: &vec![7; answer as usize],
                tokens: tokens.map(|t| ((t > 0).then_some(&[1u8; 4][..t as usize]), 99)),
            })
            .unwrap();
            // As a later entry: the bracket counts as its comma.
            let written = log.out.len() as u64;
            let most = entry_bytes(answer, tokens);
            assert!(written <= most && most < written + 64, "{written} {most}");
        }
    }

    #[test]
    fn empty_log() {
        let log = AccuracyLog::new(Vec::new()).unwrap();
        assert_eq!(log.finish().unwrap(), b"[\n]\n");
    }
}
