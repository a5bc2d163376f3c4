//! Property tests of every codec on random data: round trips at every size
//! up to 1 MB and every zstd level, the size limit, and arbitrary bytes
//! decoded as frames (an error or data within the limit, never a panic).

use compression::{decompress, CodecError, CodecKind, CodecSpec};
use proptest::prelude::*;

/// Data of `len` bytes: uniformly random, runs of repeated bytes, or a small
/// alphabet, so both incompressible and compressible inputs are covered.
fn data(max_len: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..=max_len),
        prop::collection::vec((any::<u8>(), 1usize..600), 0..=max_len / 300).prop_map(
            move |runs| {
                let mut v = Vec::new();
                for (b, n) in runs {
                    v.extend(std::iter::repeat_n(b, n));
                }
                v.truncate(max_len);
                v
            }
        ),
        (0..=max_len, any::<u64>()).prop_map(|(len, seed)| {
            let mut s = seed | 1;
            (0..len)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    b"ACGT"[(s % 4) as usize]
                })
                .collect()
        }),
    ]
}

fn spec() -> impl Strategy<Value = CodecSpec> {
    prop_oneof![
        Just(CodecSpec::NONE),
        Just(CodecSpec::from(CodecKind::Lz4)),
        Just(CodecSpec::from(CodecKind::Zstd)),
        (1i32..=22).prop_map(|level| CodecSpec {
            kind: CodecKind::Zstd,
            level: Some(level),
        }),
    ]
}

fn round_trip(spec: CodecSpec, data: &[u8]) -> Result<(), TestCaseError> {
    let codec = spec.codec();
    let frame = codec.compress(data);
    let back = decompress(spec.kind, &frame, data.len())
        .map_err(|e| TestCaseError::fail(format!("{spec}: {e}")))?;
    prop_assert_eq!(&back, &data, "{}: round trip", spec);
    if !data.is_empty() {
        match decompress(spec.kind, &frame, data.len() - 1) {
            Err(CodecError::TooLarge { .. }) => {}
            other => prop_assert!(
                false,
                "{}: one byte under the limit: {:?}",
                spec,
                other.map(|v| v.len())
            ),
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Samples up to 1 MB, every codec and zstd level.
    #[test]
    fn large_samples_round_trip(spec in spec(), data in data(1 << 20)) {
        round_trip(spec, &data)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Small samples (tokens, answers), where frame overheads dominate.
    #[test]
    fn small_samples_round_trip(spec in spec(), data in data(512)) {
        round_trip(spec, &data)?;
    }

    /// Arbitrary bytes given to a decoder: an error, or data within the
    /// limit; never a panic or an allocation past the limit.
    #[test]
    fn garbage_never_panics(kind in prop_oneof![Just(CodecKind::Zstd), Just(CodecKind::Lz4)],
                            frame in prop::collection::vec(any::<u8>(), 0..4096),
                            max_len in 0usize..100_000) {
        if let Ok(out) = decompress(kind, &frame, max_len) {
            prop_assert!(out.len() <= max_len);
        }
    }

    /// Valid frames with bytes flipped: an error or data within the limit.
    #[test]
    fn damaged_frames_never_panic(spec in spec(), data in data(20_000),
                                  flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..), 1..8)) {
        let mut frame = spec.codec().compress(&data);
        if frame.is_empty() {
            return Ok(());
        }
        for (at, x) in flips {
            let i = at.index(frame.len());
            frame[i] ^= x;
        }
        if let Ok(out) = decompress(spec.kind, &frame, data.len()) {
            prop_assert!(out.len() <= data.len());
            if spec.kind == CodecKind::Zstd {
                // zstd frames carry a checksum: damage never decodes silently
                // into other data.
                prop_assert_eq!(out, data);
            }
        }
    }
}
