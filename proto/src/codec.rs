//! The mapping between the codecs (`compression::CodecKind`) and the
//! protocol's [`Codec`] (and its raw `i32` wire values). The one place where
//! the two meet, so that the codecs know nothing of the wire.

use compression::{CodecError, CodecKind};

use crate::Codec;

impl From<CodecKind> for Codec {
    fn from(kind: CodecKind) -> Codec {
        match kind {
            CodecKind::None => Codec::None,
            CodecKind::Zstd => Codec::Zstd,
            CodecKind::Lz4 => Codec::Lz4,
        }
    }
}

impl From<Codec> for CodecKind {
    fn from(codec: Codec) -> CodecKind {
        match codec {
            Codec::None => CodecKind::None,
            Codec::Zstd => CodecKind::Zstd,
            Codec::Lz4 => CodecKind::Lz4,
        }
    }
}

/// A codec's raw wire value (a payload's or a session's `codec`), both ways.
pub trait WireCodec: Sized {
    /// The codec of a raw wire value.
    fn from_wire(value: i32) -> Result<Self, CodecError>;
    /// The raw wire value.
    fn wire(self) -> i32;
}

impl WireCodec for CodecKind {
    fn from_wire(value: i32) -> Result<CodecKind, CodecError> {
        Codec::try_from(value)
            .map(CodecKind::from)
            .map_err(|_| CodecError::Unknown(value))
    }

    fn wire(self) -> i32 {
        Codec::from(self) as i32
    }
}

/// The name of a raw wire value, for messages: `zstd`, or `unknown codec 7`.
pub fn wire_name(value: i32) -> String {
    match CodecKind::from_wire(value) {
        Ok(kind) => kind.name().to_string(),
        Err(_) => format!("unknown codec {value}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_codec_maps_both_ways() {
        for kind in CodecKind::ALL {
            assert_eq!(CodecKind::from(Codec::from(kind)), kind);
            assert_eq!(CodecKind::from_wire(kind.wire()), Ok(kind));
        }
        assert_eq!(CodecKind::Zstd.wire(), Codec::Zstd as i32);
        assert_eq!(CodecKind::from_wire(9), Err(CodecError::Unknown(9)));
        assert_eq!(wire_name(2), "lz4");
        assert_eq!(wire_name(-1), "unknown codec -1");
    }
}
