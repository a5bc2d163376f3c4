//! `none`: the raw bytes.

use crate::{CodecError, CodecKind, SampleCodec};

/// The identity codec. Its frames are the data itself; the size limit still
/// applies when decoding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Identity;

impl SampleCodec for Identity {
    fn kind(&self) -> CodecKind {
        CodecKind::None
    }

    fn compress(&self, data: &[u8]) -> Vec<u8> {
        data.to_vec()
    }

    fn decompress(&self, frame: &[u8], max_len: usize) -> Result<Vec<u8>, CodecError> {
        if frame.len() > max_len {
            return Err(CodecError::TooLarge {
                codec: CodecKind::None,
                frame_len: frame.len(),
                how: "holds",
                size: frame.len() as u64,
                max_len,
            });
        }
        Ok(frame.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_within_the_limit() {
        assert_eq!(Identity.compress(b"abc"), b"abc");
        assert_eq!(Identity.decompress(b"abc", 3).unwrap(), b"abc");
        let e = Identity.decompress(b"abcd", 3).unwrap_err();
        assert!(matches!(e, CodecError::TooLarge { size: 4, .. }), "{e}");
    }
}
