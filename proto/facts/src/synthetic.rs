//! The answer of the `synthetic` backend: a deterministic function of the
//! input bytes, so an accuracy run can prove that every sample's data crossed
//! the network and came back to the right response id.

const MUL: u64 = 0x0000_0100_0000_01b3;

/// One step of the multiplicative hash: `word` into `h`.
fn mix(h: u64, word: u64) -> u64 {
    let h = (h ^ word).wrapping_mul(MUL);
    h ^ (h >> 29)
}

/// A multiplicative hash of the input, then a splitmix64 stream: `len`
/// bytes. The input is hashed in four independent lanes of 8-byte words (32
/// bytes a step), so that the multiplications overlap: inputs are megabytes,
/// and the node's cost must stay well below the network's.
pub fn answer(input: &[u8], len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    AnswerStream::new(input).fill(&mut out);
    out
}

/// The answer of an input as a stream of bytes, so that an answer of
/// hundreds of MB can be made, or checked, a piece at a time: the first `n`
/// bytes of any answer of the input are [`answer`]`(input, n)`.
pub struct AnswerStream {
    state: u64,
    /// The current word and how many of its bytes are used.
    word: [u8; 8],
    used: usize,
}

impl AnswerStream {
    /// The answer stream of `input`, at its first byte (the input is hashed
    /// here, once).
    pub fn new(input: &[u8]) -> Self {
        let word = |w: &[u8]| {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            u64::from_le_bytes(b)
        };
        let seed = 0xcbf2_9ce4_8422_2325 ^ input.len() as u64;
        let mut lanes = [seed, seed ^ 1, seed ^ 2, seed ^ 3];
        let mut blocks = input.chunks_exact(32);
        for block in &mut blocks {
            for (i, lane) in lanes.iter_mut().enumerate() {
                *lane = mix(*lane, word(&block[i * 8..i * 8 + 8]));
            }
        }
        let mut h = lanes.into_iter().fold(seed, mix);
        let mut words = blocks.remainder().chunks_exact(8);
        for w in &mut words {
            h = mix(h, word(w));
        }
        for &b in words.remainder() {
            h = (h ^ b as u64).wrapping_mul(MUL);
        }
        Self {
            state: h,
            word: [0; 8],
            used: 8,
        }
    }

    /// The next `out.len()` bytes of the answer.
    pub fn fill(&mut self, out: &mut [u8]) {
        let mut at = 0;
        while at < out.len() {
            if self.used == 8 {
                self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = self.state;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                self.word = (z ^ (z >> 31)).to_le_bytes();
                self.used = 0;
            }
            let take = (8 - self.used).min(out.len() - at);
            out[at..at + take].copy_from_slice(&self.word[self.used..self.used + take]);
            self.used += take;
            at += take;
        }
    }
}

/// Candidates of DLRMv3's synthetic answers of `output_size` bytes: a
/// float32 score per candidate (the suite table's 2048), at least one.
pub fn dlrm_v3_candidates(output_size: usize) -> usize {
    (output_size / 4).max(1)
}

/// DLRMv3's synthetic answer of `input`, in the layout TEST08 reads, as
/// float32 values: `[ts_idx, query_idx, predictions, labels, weights,
/// candidates]` in an accuracy run, `[ts_idx, query_idx, predictions]`
/// otherwise. Every value comes from the input's [`AnswerStream`]: the
/// request's key (two 24-bit numbers, exact in float32), then each
/// candidate's prediction (in [0.01, 0.99)) and label (0 or 1); weights
/// are 1. The predictions of both layouts are the same, so the normalized
/// entropy of a performance run's answer equals the accuracy run's.
pub fn dlrm_v3_answer(input: &[u8], candidates: usize, accuracy: bool) -> Vec<u8> {
    let mut stream = AnswerStream::new(input);
    let mut next = || {
        let mut w = [0u8; 8];
        stream.fill(&mut w);
        u64::from_le_bytes(w)
    };
    let key = next();
    let floats = if accuracy {
        3 + 3 * candidates
    } else {
        2 + candidates
    };
    let mut values: Vec<f32> = Vec::with_capacity(floats);
    values.push((key & 0xff_ffff) as f32);
    values.push(((key >> 24) & 0xff_ffff) as f32);
    let mut labels = Vec::with_capacity(if accuracy { candidates } else { 0 });
    for _ in 0..candidates {
        let x = next();
        values.push(0.01 + 0.98 * ((x >> 40) as f32 / (1u32 << 24) as f32));
        if accuracy {
            labels.push((x & 1) as f32);
        }
    }
    if accuracy {
        values.extend(labels);
        values.extend(std::iter::repeat_n(1.0f32, candidates));
        values.push(candidates as f32);
    }
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dlrm_v3_answers_have_the_layout_of_their_mode() {
        let floats = |b: Vec<u8>| -> Vec<f32> {
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        let acc = floats(dlrm_v3_answer(b"request", 5, true));
        let perf = floats(dlrm_v3_answer(b"request", 5, false));
        assert_eq!(acc.len(), 3 + 3 * 5);
        assert_eq!(perf.len(), 2 + 5);
        assert_eq!(acc[..7], perf[..], "the same key and predictions");
        assert_eq!(acc[17], 5.0);
        assert!(acc[2..7].iter().all(|p| (0.01..0.99).contains(p)));
        assert!(acc[7..12].iter().all(|l| *l == 0.0 || *l == 1.0));
        assert!(acc[12..17].iter().all(|w| *w == 1.0));
        assert!(acc[..2]
            .iter()
            .all(|k| k.fract() == 0.0 && *k < (1u32 << 24) as f32));
        assert_ne!(perf, floats(dlrm_v3_answer(b"requesu", 5, false)));
        assert_eq!(dlrm_v3_candidates(2048 * 4), 2048);
        assert_eq!(dlrm_v3_candidates(2), 1);
    }

    #[test]
    fn depends_on_every_byte_and_has_the_asked_length() {
        let a = answer(b"sample one", 20);
        assert_eq!(a.len(), 20);
        assert_eq!(a, answer(b"sample one", 20));
        assert_ne!(a, answer(b"sample onf", 20));
        assert_ne!(answer(b"12345678abc", 8), answer(b"12345679abc", 8));
        assert_ne!(answer(b"\0", 8), answer(b"\0\0", 8));
        assert_eq!(&answer(b"x", 3)[..], &answer(b"x", 11)[..3]);
        // A stream read in pieces of any size gives the same bytes.
        let whole = answer(b"pieces", 100);
        let mut stream = AnswerStream::new(b"pieces");
        let mut pieces = Vec::new();
        for n in [1, 7, 8, 3, 0, 13, 68] {
            let mut part = vec![0; n];
            stream.fill(&mut part);
            pieces.extend(part);
        }
        assert_eq!(pieces, whole);
        assert!(answer(b"", 0).is_empty());
        // Every lane, the remainder's words and its last bytes.
        let base: Vec<u8> = (0..75u8).collect();
        for at in [0, 8, 16, 24, 31, 32, 40, 64, 72, 74] {
            let mut changed = base.clone();
            changed[at] ^= 1;
            assert_ne!(answer(&base, 8), answer(&changed, 8), "byte {at}");
        }
    }

    #[test]
    fn matches_the_python_check_of_the_accuracy_log() {
        // The same inputs through `synthetic_answer` in tests/python/run.sh.
        let hex = |b: Vec<u8>| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let counting: Vec<u8> = (0..75).collect();
        assert_eq!(hex(answer(&counting, 12)), "5b7c2d65ed2a50eee2925daf");
        let mut long: Vec<u8> = (0..=255).cycle().take(768).collect();
        long.extend_from_slice(b"xyz");
        assert_eq!(hex(answer(&long, 12)), "3dd83d94217c8320088a674a");
        assert_eq!(hex(answer(b"", 12)), "668b25468bee147b4e72cf85");
    }
}
