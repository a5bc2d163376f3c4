//! The approved lossless codecs of the network protocol: `none`, `zstd` and
//! `lz4`, applied to one sample (or one answer) at a time, never across
//! samples.
//!
//! - [`SampleCodec`]: the codec interface; one implementation per codec,
//!   reached through [`CodecSpec::codec`] and [`CodecKind::decoder`].
//! - [`CodecSpec`]: what an operator asks for (`none`, `zstd[:LEVEL]`,
//!   `lz4`), parsed from the command line; [`CodecSpec::codec`] builds it.
//! - [`decompress`]: decodes a payload of a given [`CodecKind`], bounded by a
//!   maximum decoded size. A frame that declares more than that is refused
//!   before the memory for it is allocated, and one that produces more is cut
//!   off one byte past it, so a small payload can never make its receiver
//!   allocate gigabytes (no decompression bombs). [`output_bound`] says, from
//!   the frame alone, how much decoding it may hold at most.
//!
//! A leaf: the protocol's crate maps [`CodecKind`] to its wire values.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;
use std::str::FromStr;

mod codec;
mod lz4;
mod none;
mod zstd;

pub use codec::{CodecError, CodecKind, SampleCodec};

// Here rather than in `codec`, which the codecs themselves build on.
impl CodecKind {
    /// A decoder of this codec (decoding needs no level).
    pub fn decoder(self) -> &'static dyn SampleCodec {
        match self {
            CodecKind::None => &none::Identity,
            CodecKind::Zstd => &zstd::DEFAULT,
            CodecKind::Lz4 => &lz4::Lz4,
        }
    }
}

/// Decodes `frame`, a payload of codec `kind`, into at most `max_len` bytes.
pub fn decompress(kind: CodecKind, frame: &[u8], max_len: usize) -> Result<Vec<u8>, CodecError> {
    kind.decoder().decompress(frame, max_len)
}

/// The most bytes [`decompress`] may hold for the output of `frame` under
/// `max_len`, known before decoding: its declared size when its header
/// declares one (0 when that is over the limit or impossible: it is refused
/// unread), else `max_len + 1` (the streaming decoder's cut-off).
pub fn output_bound(kind: CodecKind, frame: &[u8], max_len: usize) -> usize {
    let declared = match kind {
        CodecKind::None => Some(frame.len() as u64),
        CodecKind::Zstd => zstd::declared_len(frame),
        CodecKind::Lz4 => lz4::declared_len(frame),
    };
    match declared {
        Some(size) if size <= max_len as u64 => size as usize,
        Some(_) => 0,
        None => max_len.saturating_add(1),
    }
}

/// A codec as an operator chooses it: `none`, `zstd`, `zstd:LEVEL` or `lz4`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CodecSpec {
    /// The codec.
    pub kind: CodecKind,
    /// The zstd level, 1 (fastest) to 22 (smallest); `None` for zstd's
    /// default (3) and for the other codecs.
    pub level: Option<i32>,
}

impl CodecSpec {
    /// No compression.
    pub const NONE: CodecSpec = CodecSpec {
        kind: CodecKind::None,
        level: None,
    };

    /// The codec this spec describes.
    pub fn codec(&self) -> Box<dyn SampleCodec> {
        match self.kind {
            CodecKind::None => Box::new(none::Identity),
            CodecKind::Zstd => Box::new(zstd::Zstd::new(self.level.unwrap_or(zstd::DEFAULT_LEVEL))),
            CodecKind::Lz4 => Box::new(lz4::Lz4),
        }
    }

    /// Whether this spec compresses at all.
    pub fn compresses(&self) -> bool {
        self.kind != CodecKind::None
    }
}

impl Default for CodecSpec {
    fn default() -> Self {
        Self::NONE
    }
}

impl From<CodecKind> for CodecSpec {
    fn from(kind: CodecKind) -> Self {
        Self { kind, level: None }
    }
}

impl fmt::Display for CodecSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.kind, self.level) {
            (CodecKind::Zstd, Some(level)) => write!(f, "zstd:{level}"),
            (kind, _) => f.write_str(kind.name()),
        }
    }
}

/// Why a codec spec could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The name is none of the codecs'; it holds the spec as given.
    #[error("unknown codec {0:?}: expected none, zstd, zstd:LEVEL or lz4")]
    UnknownName(String),
    /// A zstd level that is no whole number in range: (the level, the
    /// spec as given).
    #[error(
        "invalid zstd level {0:?} in {1:?}: expected a whole number from {min} to {max}",
        min = zstd::MIN_LEVEL,
        max = zstd::MAX_LEVEL
    )]
    BadLevel(String, String),
    /// A level given to a codec that has none: (the codec, the spec as
    /// given).
    #[error("{0} takes no level ({1:?}); only zstd has levels (zstd:LEVEL)")]
    LevelNotAllowed(CodecKind, String),
}

impl FromStr for CodecSpec {
    type Err = SpecError;

    fn from_str(input: &str) -> Result<Self, SpecError> {
        let text = input.trim();
        let (name, level) = match text.split_once(':') {
            Some((name, level)) => (name, Some(level)),
            None => (text, None),
        };
        let kind = match name.to_ascii_lowercase().as_str() {
            "none" => CodecKind::None,
            "zstd" => CodecKind::Zstd,
            "lz4" => CodecKind::Lz4,
            _ => return Err(SpecError::UnknownName(input.to_string())),
        };
        let Some(level) = level else {
            return Ok(CodecSpec { kind, level: None });
        };
        if kind != CodecKind::Zstd {
            return Err(SpecError::LevelNotAllowed(kind, input.to_string()));
        }
        let bad = || SpecError::BadLevel(level.to_string(), input.to_string());
        let n: i32 = level.trim().parse().map_err(|_| bad())?;
        if !(zstd::MIN_LEVEL..=zstd::MAX_LEVEL).contains(&n) {
            return Err(bad());
        }
        Ok(CodecSpec {
            kind,
            level: Some(n),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_print() {
        for (text, kind, level, shown) in [
            ("none", CodecKind::None, None, "none"),
            ("zstd", CodecKind::Zstd, None, "zstd"),
            ("zstd:1", CodecKind::Zstd, Some(1), "zstd:1"),
            ("ZSTD:22", CodecKind::Zstd, Some(22), "zstd:22"),
            (" lz4 ", CodecKind::Lz4, None, "lz4"),
        ] {
            let spec: CodecSpec = text.parse().unwrap();
            assert_eq!((spec.kind, spec.level), (kind, level), "{text}");
            assert_eq!(spec.to_string(), shown);
            assert_eq!(spec.codec().kind(), kind);
        }
        assert_eq!(CodecSpec::default(), CodecSpec::NONE);
        assert!(!CodecSpec::NONE.compresses());
        assert!(CodecSpec::from(CodecKind::Lz4).compresses());
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let err = |s: &str| s.parse::<CodecSpec>().unwrap_err().to_string();
        let e = err("gzip");
        assert!(
            e.contains("unknown codec \"gzip\"") && e.contains("zstd:LEVEL"),
            "{e}"
        );
        for bad in ["zstd:0", "zstd:23", "zstd:-1", "zstd:x", "zstd:"] {
            let e = err(bad);
            assert!(
                e.contains("invalid zstd level") && e.contains("1 to 22"),
                "{bad}: {e}"
            );
        }
        let e = err("lz4:3");
        assert!(e.contains("lz4 takes no level"), "{e}");
        assert!(err("").contains("unknown codec"));
    }

    #[test]
    fn output_bounds_come_from_the_frame_alone() {
        let data = vec![3u8; 10_000];
        for kind in CodecKind::ALL {
            let frame = CodecSpec::from(kind).codec().compress(&data);
            assert_eq!(output_bound(kind, &frame, 1 << 20), 10_000, "{kind}");
            // Over the limit: refused unread, nothing held.
            assert_eq!(output_bound(kind, &frame, 9_999), 0, "{kind}");
        }
        // No declared size: what the streaming decoder may reach.
        let mut streamed = Vec::new();
        let mut enc = ::zstd::stream::Encoder::new(&mut streamed, 3).unwrap();
        std::io::Write::write_all(&mut enc, &data).unwrap();
        enc.finish().unwrap();
        assert_eq!(
            output_bound(CodecKind::Zstd, &streamed, 1 << 20),
            (1 << 20) + 1
        );
        assert_eq!(output_bound(CodecKind::Zstd, b"junk", 1 << 20), 0);
        assert_eq!(output_bound(CodecKind::Lz4, b"\x01", 1 << 20), 0);
    }

    #[test]
    fn errors_name_the_codec_and_the_sizes() {
        let e = CodecError::declares(CodecKind::Zstd, &[0; 13], 1 << 40, 1024).to_string();
        assert!(
            e.contains("zstd frame of 13 bytes declares 1099511627776 bytes")
                && e.contains("limit of 1024"),
            "{e}"
        );
        assert!(e.contains("refused before allocating"), "{e}");
        let e = CodecError::TooLarge {
            codec: CodecKind::Zstd,
            frame_len: 13,
            how: "decodes to more than",
            size: 1024,
            max_len: 1024,
        }
        .to_string();
        assert_eq!(
            e,
            "zstd frame of 13 bytes decodes to more than the limit of 1024 bytes (decoding \
             stopped one byte past the limit, its output dropped)"
        );
        let e = crate::none::Identity
            .decompress(&[0; 5], 4)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("holds 5 bytes") && e.contains("before copying"),
            "{e}"
        );
        let e = CodecError::corrupt(CodecKind::Lz4, &[1, 2], "truncated").to_string();
        assert_eq!(e, "corrupt lz4 frame of 2 bytes: truncated");
    }
}
