//! The codec interface and the names and errors every codec shares: the
//! leaf that the codecs (`none`, `zstd`, `lz4`) build on.

use std::fmt;

/// The compressed form of one sample's bytes, and back.
///
/// Implementations are stateless from the caller's view and may be shared
/// between threads; each call handles one whole sample.
pub trait SampleCodec: Send + Sync + fmt::Debug {
    /// Which codec this is.
    fn kind(&self) -> CodecKind;

    /// One self-contained frame holding `data`.
    fn compress(&self, data: &[u8]) -> Vec<u8>;

    /// The bytes of `frame`, which must be exactly one payload made by
    /// [`SampleCodec::compress`] of this kind (or by another encoder of the
    /// same format). Fails, without allocating the output, when the frame
    /// declares or would produce more than `max_len` bytes, and fails when
    /// the frame is corrupt or truncated.
    fn decompress(&self, frame: &[u8], max_len: usize) -> Result<Vec<u8>, CodecError>;
}

/// The codecs of the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CodecKind {
    /// The raw bytes.
    None,
    /// Zstandard, one frame with its content size in the header.
    Zstd,
    /// LZ4 block format, with the decoded size as a 4-byte little-endian
    /// prefix.
    Lz4,
}

impl CodecKind {
    /// Every codec, in wire order.
    pub const ALL: [CodecKind; 3] = [CodecKind::None, CodecKind::Zstd, CodecKind::Lz4];

    /// The name used on command lines and in reports: `none`, `zstd`, `lz4`.
    pub fn name(self) -> &'static str {
        match self {
            CodecKind::None => "none",
            CodecKind::Zstd => "zstd",
            CodecKind::Lz4 => "lz4",
        }
    }
}

impl fmt::Display for CodecKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a payload could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The frame declares (or, decoding, produces) more bytes than allowed.
    #[error("{codec} frame of {frame_len} bytes {}", too_large(how, *size, *max_len))]
    TooLarge {
        /// The frame's codec.
        codec: CodecKind,
        /// Bytes of the frame.
        frame_len: usize,
        /// "declares" (from its header), "decodes to more than", or "holds"
        /// (raw bytes).
        how: &'static str,
        /// Decoded bytes the frame declares or holds (for "decodes to more
        /// than": the limit itself, as the true size is not known).
        size: u64,
        /// The limit on decoded bytes.
        max_len: usize,
    },
    /// The frame is not a valid frame of its codec.
    #[error("corrupt {codec} frame of {frame_len} bytes: {reason}")]
    Corrupt {
        /// The frame's codec.
        codec: CodecKind,
        /// Bytes of the frame.
        frame_len: usize,
        /// The decoder's complaint.
        reason: String,
    },
    /// A wire codec value this build does not know.
    #[error("unknown codec value {0} (known: 0 none, 1 zstd, 2 lz4)")]
    Unknown(i32),
}

/// What happened to a frame over the limit, by `CodecError::TooLarge`'s `how`.
fn too_large(how: &str, size: u64, max_len: usize) -> String {
    match how {
        "declares" => format!(
            "declares {size} bytes, more than the limit of {max_len} bytes (refused before \
             allocating its output)"
        ),
        "decodes to more than" => format!(
            "decodes to more than the limit of {max_len} bytes (decoding stopped one byte past \
             the limit, its output dropped)"
        ),
        "holds" => format!(
            "holds {size} bytes, more than the limit of {max_len} bytes (refused before copying \
             it)"
        ),
        other => format!("{other} {size} bytes, more than the limit of {max_len} bytes"),
    }
}

impl CodecError {
    pub(crate) fn corrupt(codec: CodecKind, frame: &[u8], reason: impl Into<String>) -> Self {
        CodecError::Corrupt {
            codec,
            frame_len: frame.len(),
            reason: reason.into(),
        }
    }

    pub(crate) fn declares(codec: CodecKind, frame: &[u8], size: u64, max_len: usize) -> Self {
        CodecError::TooLarge {
            codec,
            frame_len: frame.len(),
            how: "declares",
            size,
            max_len,
        }
    }
}
