//! `zstd`: Zstandard. Each payload is one frame whose header declares its
//! content size (the one-shot encoder always writes it).
//!
//! Decoding is bounded in two ways. A frame that declares its size is
//! checked against the limit before anything is allocated, then decoded in
//! one shot into a buffer of exactly that size (the decoder cannot write past
//! it, so a frame that produces more than it declares is an error). A payload
//! without a declared size (streamed frames, several frames, skippable
//! frames) goes through the streaming decoder, whose output grows in steps
//! and is cut off one byte past the limit.

use std::cell::RefCell;

use ::zstd::zstd_safe::{self, CCtx, CParameter, DCtx, InBuffer, OutBuffer, ResetDirective};

use crate::{CodecError, CodecKind, SampleCodec};

/// Lowest level accepted: `zstd:1`, the fastest.
pub(crate) const MIN_LEVEL: i32 = 1;
/// Highest level accepted: `zstd:22`, the smallest output.
pub(crate) const MAX_LEVEL: i32 = 22;
/// zstd's own default.
pub(crate) const DEFAULT_LEVEL: i32 = 3;

/// The zstd codec at the default level (decoding ignores the level).
pub(crate) const DEFAULT: Zstd = Zstd {
    level: DEFAULT_LEVEL,
};

/// First output step of the streaming decoder; it doubles from there.
const FIRST_STEP: usize = 64 << 10;

thread_local! {
    // Contexts are costly to create (hundreds of KiB); each thread keeps one.
    static CCTX: RefCell<CCtx<'static>> = RefCell::new(CCtx::create());
    static DCTX: RefCell<DCtx<'static>> = RefCell::new(DCtx::create());
}

/// Zstandard at one compression level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Zstd {
    level: i32,
}

impl Zstd {
    /// `level` is clamped to [`MIN_LEVEL`]..=[`MAX_LEVEL`] (a
    /// [`crate::CodecSpec`] has checked it already).
    pub(crate) fn new(level: i32) -> Self {
        Self {
            level: level.clamp(MIN_LEVEL, MAX_LEVEL),
        }
    }
}

impl Default for Zstd {
    fn default() -> Self {
        DEFAULT
    }
}

fn error_text(code: usize) -> String {
    zstd_safe::get_error_name(code).to_string()
}

/// The size `frame` declares, when it is one frame whose header declares
/// it (`Some(u64::MAX)` when it is not a zstd frame at all: refused unread).
pub(crate) fn declared_len(frame: &[u8]) -> Option<u64> {
    match zstd_safe::get_frame_content_size(frame) {
        Err(_) => Some(u64::MAX),
        Ok(Some(size)) if zstd_safe::find_frame_compressed_size(frame) == Ok(frame.len()) => {
            Some(size)
        }
        Ok(_) => None,
    }
}

impl SampleCodec for Zstd {
    fn kind(&self) -> CodecKind {
        CodecKind::Zstd
    }

    fn compress(&self, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(zstd_safe::compress_bound(data.len()));
        let result = CCTX.with(|c| {
            let mut c = c.borrow_mut();
            c.set_parameter(CParameter::CompressionLevel(self.level))?;
            // A 4-byte checksum of the content: corruption is detected, not
            // decoded into wrong data.
            c.set_parameter(CParameter::ChecksumFlag(true))?;
            c.compress2(&mut out, data)
        });
        match result {
            Ok(_) => out,
            // With room for compress_bound bytes and a valid level, zstd only
            // fails when it cannot allocate its tables: out of memory.
            Err(code) => panic!(
                "zstd could not compress {} bytes at level {}: {}",
                data.len(),
                self.level,
                error_text(code)
            ),
        }
    }

    fn decompress(&self, frame: &[u8], max_len: usize) -> Result<Vec<u8>, CodecError> {
        let corrupt = |reason: String| CodecError::corrupt(CodecKind::Zstd, frame, reason);
        let declared = zstd_safe::get_frame_content_size(frame)
            .map_err(|_| corrupt("not a zstd frame (bad magic number or header)".into()))?;
        let first_frame = zstd_safe::find_frame_compressed_size(frame);
        match (declared, first_frame) {
            (Some(size), Ok(len)) if len == frame.len() => {
                if size > max_len as u64 {
                    return Err(CodecError::declares(CodecKind::Zstd, frame, size, max_len));
                }
                // `size <= max_len`, so it fits a usize.
                let size = size as usize;
                let mut out = Vec::with_capacity(size);
                DCTX.with(|d| d.borrow_mut().decompress(&mut out, frame))
                    .map_err(|code| corrupt(error_text(code)))?;
                if out.len() != size {
                    return Err(corrupt(format!(
                        "decodes to {} bytes but declares {size}",
                        out.len()
                    )));
                }
                Ok(out)
            }
            (_, Err(code)) => Err(corrupt(error_text(code))),
            _ => DCTX.with(|d| stream(&mut d.borrow_mut(), frame, max_len)),
        }
    }
}

/// Decodes a payload of unknown size with the streaming decoder, never
/// holding more than `max_len + 1` bytes of output.
fn stream(dctx: &mut DCtx<'_>, frame: &[u8], max_len: usize) -> Result<Vec<u8>, CodecError> {
    let corrupt = |reason: String| CodecError::corrupt(CodecKind::Zstd, frame, reason);
    dctx.reset(ResetDirective::SessionOnly)
        .map_err(|code| corrupt(error_text(code)))?;
    let cap = max_len.saturating_add(1);
    let mut out: Vec<u8> = Vec::new();
    let mut input = InBuffer::around(frame);
    loop {
        if out.len() == out.capacity() {
            let want = out.capacity().saturating_mul(2).max(FIRST_STEP).min(cap);
            if want <= out.len() {
                break; // the output reached the cap: too large
            }
            out.reserve_exact(want - out.len());
        }
        let (in_before, out_before) = (input.pos(), out.len());
        let hint = {
            let pos = out.len();
            let mut output = OutBuffer::around_pos(&mut out, pos);
            dctx.decompress_stream(&mut output, &mut input)
                .map_err(|code| corrupt(error_text(code)))?
        };
        if out.len() > max_len {
            break;
        }
        if hint == 0 && input.pos() == frame.len() {
            return Ok(out); // the last frame is complete and flushed
        }
        let progress = input.pos() != in_before || out.len() != out_before;
        if !progress && out.len() < out.capacity() {
            return Err(corrupt(
                "truncated: the frame ends before its last block".into(),
            ));
        }
    }
    Err(CodecError::TooLarge {
        codec: CodecKind::Zstd,
        frame_len: frame.len(),
        how: "decodes to more than",
        size: max_len as u64,
        max_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streamed(data: &[u8]) -> Vec<u8> {
        // The streaming encoder writes no content size in the header.
        let mut out = Vec::new();
        let mut enc = ::zstd::stream::Encoder::new(&mut out, 3).unwrap();
        std::io::Write::write_all(&mut enc, data).unwrap();
        enc.finish().unwrap();
        out
    }

    #[test]
    fn round_trip_with_the_size_in_the_header() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i / 7) as u8).collect();
        let z = Zstd::new(3);
        let frame = z.compress(&data);
        assert!(frame.len() < data.len() / 4, "{}", frame.len());
        assert_eq!(
            zstd_safe::get_frame_content_size(&frame).ok(),
            Some(Some(data.len() as u64))
        );
        assert_eq!(z.decompress(&frame, data.len()).unwrap(), data);
        let e = z.decompress(&frame, data.len() - 1).unwrap_err();
        assert!(
            matches!(e, CodecError::TooLarge { how: "declares", size, .. } if size == data.len() as u64),
            "{e}"
        );
        assert_eq!(z.decompress(&z.compress(b""), 0).unwrap(), b"");
    }

    #[test]
    fn streamed_and_concatenated_frames_decode_within_the_limit() {
        let data = vec![7u8; 300_000];
        let frame = streamed(&data);
        assert_eq!(zstd_safe::get_frame_content_size(&frame).ok(), Some(None));
        assert_eq!(DEFAULT.decompress(&frame, data.len()).unwrap(), data);
        let e = DEFAULT.decompress(&frame, data.len() - 1).unwrap_err();
        assert!(
            matches!(
                e,
                CodecError::TooLarge {
                    how: "decodes to more than",
                    ..
                }
            ),
            "{e}"
        );

        let mut two = DEFAULT.compress(b"hello ");
        two.extend(DEFAULT.compress(b"world"));
        assert_eq!(DEFAULT.decompress(&two, 11).unwrap(), b"hello world");
        assert!(DEFAULT.decompress(&two, 10).is_err());
    }

    #[test]
    fn a_bomb_is_refused_from_its_header() {
        // 1 GiB of zeros compresses to a few dozen KiB; the header says so.
        let frame = DEFAULT.compress(&vec![0u8; 64 << 20]);
        assert!(frame.len() < 8 << 10, "{}", frame.len());
        let e = DEFAULT.decompress(&frame, 1 << 20).unwrap_err();
        assert!(
            matches!(e, CodecError::TooLarge { size, .. } if size == 64 << 20),
            "{e}"
        );
        // The same data without a declared size is cut off at the limit.
        let frame = streamed(&vec![0u8; 64 << 20]);
        let e = DEFAULT.decompress(&frame, 1 << 20).unwrap_err();
        assert!(matches!(e, CodecError::TooLarge { .. }), "{e}");
    }

    #[test]
    fn corrupt_and_truncated_frames_are_errors() {
        let data: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
        let frame = DEFAULT.compress(&data);
        for bad in [
            &b""[..],
            &b"not zstd at all"[..],
            &frame[..frame.len() / 2],
            &frame[..4],
        ] {
            let e = DEFAULT.decompress(bad, 1 << 20).unwrap_err();
            assert!(matches!(e, CodecError::Corrupt { .. }), "{e}");
        }
        let mut flipped = frame.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0x55;
        flipped[mid + 1] ^= 0xAA;
        assert!(DEFAULT.decompress(&flipped, 1 << 20).is_err());
        // Trailing garbage after a valid frame.
        let mut trailing = frame.clone();
        trailing.extend_from_slice(b"junk");
        let e = DEFAULT.decompress(&trailing, 1 << 20).unwrap_err();
        assert!(matches!(e, CodecError::Corrupt { .. }), "{e}");
        let streamed = streamed(&data);
        let e = DEFAULT
            .decompress(&streamed[..streamed.len() - 3], 1 << 20)
            .unwrap_err();
        assert!(e.to_string().contains("corrupt zstd frame"), "{e}");
    }
}
