//! `lz4`: the LZ4 block format with the decoded size as a 4-byte
//! little-endian prefix (lz4_flex's "size prepended" layout).
//!
//! The prefix is checked before anything is allocated: against the limit,
//! and against what a block of the frame's length can possibly produce
//! (LZ4 expands at most about 255 times: each extra byte of a match length
//! adds 255 bytes), so a tiny frame cannot claim gigabytes even under a
//! generous limit. The block is then decoded into exactly that many bytes;
//! the safe decoder never writes past them.

use crate::{CodecError, CodecKind, SampleCodec};

/// Bytes of the size prefix.
const PREFIX: usize = 4;
/// Most bytes one byte of an LZ4 block can decode to.
const MAX_EXPANSION: u64 = 255;
/// Slack for the smallest blocks (token and literals before the first
/// match).
const SLACK: u64 = 64;

/// LZ4, block format, size prepended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Lz4;

/// The most bytes a block of `block_len` bytes can decode to.
pub(crate) fn max_decoded_len(block_len: usize) -> u64 {
    (block_len as u64)
        .saturating_mul(MAX_EXPANSION)
        .saturating_add(SLACK)
}

/// The size `frame`'s prefix declares (`u64::MAX` when the frame is too
/// short to have one, or its block too short to hold that much: refused
/// unread).
pub(crate) fn declared_len(frame: &[u8]) -> Option<u64> {
    let (Some(prefix), Some(block)) = (frame.get(..PREFIX), frame.get(PREFIX..)) else {
        return Some(u64::MAX);
    };
    let mut le = [0u8; PREFIX];
    le.copy_from_slice(prefix);
    let size = u32::from_le_bytes(le) as u64;
    Some(if size > max_decoded_len(block.len()) {
        u64::MAX
    } else {
        size
    })
}

impl SampleCodec for Lz4 {
    fn kind(&self) -> CodecKind {
        CodecKind::Lz4
    }

    fn compress(&self, data: &[u8]) -> Vec<u8> {
        lz4_flex::block::compress_prepend_size(data)
    }

    fn decompress(&self, frame: &[u8], max_len: usize) -> Result<Vec<u8>, CodecError> {
        let corrupt = |reason: String| CodecError::corrupt(CodecKind::Lz4, frame, reason);
        let (Some(prefix), Some(block)) = (frame.get(..PREFIX), frame.get(PREFIX..)) else {
            return Err(corrupt(format!(
                "truncated: shorter than its {PREFIX}-byte size prefix"
            )));
        };
        let mut le = [0u8; PREFIX];
        le.copy_from_slice(prefix);
        let size = u32::from_le_bytes(le) as u64;
        if size > max_len as u64 {
            return Err(CodecError::declares(CodecKind::Lz4, frame, size, max_len));
        }
        if size > max_decoded_len(block.len()) {
            return Err(corrupt(format!(
                "declares {size} bytes, more than a block of {} bytes can hold",
                block.len()
            )));
        }
        // `size <= max_len`, so it fits a usize.
        let size = size as usize;
        let mut out = vec![0u8; size];
        let written = lz4_flex::block::decompress_into(block, &mut out)
            .map_err(|e| corrupt(e.to_string()))?;
        if written != size {
            return Err(corrupt(format!(
                "decodes to {written} bytes but declares {size}"
            )));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_limit() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i / 9) as u8).collect();
        let frame = Lz4.compress(&data);
        assert_eq!(&frame[..4], &(data.len() as u32).to_le_bytes());
        assert_eq!(Lz4.decompress(&frame, data.len()).unwrap(), data);
        let e = Lz4.decompress(&frame, data.len() - 1).unwrap_err();
        assert!(matches!(e, CodecError::TooLarge { .. }), "{e}");
        assert_eq!(Lz4.decompress(&Lz4.compress(b""), 0).unwrap(), b"");
    }

    #[test]
    fn the_expansion_bound_holds_for_the_most_compressible_data() {
        for len in [0usize, 1, 5, 13, 100, 4096, 1 << 20, 16 << 20] {
            let frame = Lz4.compress(&vec![0u8; len]);
            assert!(
                len as u64 <= max_decoded_len(frame.len() - PREFIX),
                "{len} bytes in a block of {}",
                frame.len() - PREFIX
            );
        }
    }

    #[test]
    fn a_bomb_is_refused_from_its_prefix() {
        // 9 bytes claiming 4 GiB - 1: refused without allocating.
        let mut bomb = u32::MAX.to_le_bytes().to_vec();
        bomb.extend_from_slice(&[0x1f, 0, 0, 0, 0]);
        let e = Lz4.decompress(&bomb, 1 << 20).unwrap_err();
        assert!(
            matches!(e, CodecError::TooLarge { size, .. } if size == u32::MAX as u64),
            "{e}"
        );
        // Under a limit that allows it, the claim is still impossible.
        let e = Lz4.decompress(&bomb, usize::MAX).unwrap_err();
        assert!(
            e.to_string().contains("more than a block of 5 bytes"),
            "{e}"
        );
        // A real highly compressed frame over the limit.
        let frame = Lz4.compress(&vec![0u8; 8 << 20]);
        let e = Lz4.decompress(&frame, 1 << 20).unwrap_err();
        assert!(
            matches!(e, CodecError::TooLarge { size, .. } if size == 8 << 20),
            "{e}"
        );
    }

    #[test]
    fn corrupt_and_truncated_frames_are_errors() {
        let data: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
        let frame = Lz4.compress(&data);
        for bad in [&b""[..], &b"\x01\x00"[..], &frame[..frame.len() / 2]] {
            let e = Lz4.decompress(bad, 1 << 20).unwrap_err();
            assert!(matches!(e, CodecError::Corrupt { .. }), "{e}");
        }
        // Declares fewer bytes than the block holds.
        let mut short = frame.clone();
        short[..4].copy_from_slice(&1000u32.to_le_bytes());
        let e = Lz4.decompress(&short, 1 << 20).unwrap_err();
        assert!(e.to_string().starts_with("corrupt lz4 frame"), "{e}");
        // Declares more bytes than the block holds.
        let mut long = frame.clone();
        long[..4].copy_from_slice(&(data.len() as u32 + 10).to_le_bytes());
        let e = Lz4.decompress(&long, 1 << 20).unwrap_err();
        assert!(
            e.to_string()
                .contains("decodes to 50000 bytes but declares 50010"),
            "{e}"
        );
    }
}
