//! Token ids on the wire: prompts in, generated ids out, little endian,
//! int32 or int64. The backend runs without a tokenizer: the LoadGen node
//! sends token ids and the accuracy scripts decode the ids sent back.

use bytes::Bytes;

/// How token ids are encoded on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TokenDtype {
    /// 4-byte little-endian signed integers.
    #[default]
    Int32,
    /// 8-byte little-endian signed integers.
    Int64,
}

impl TokenDtype {
    pub(super) fn width(self) -> usize {
        match self {
            Self::Int32 => 4,
            Self::Int64 => 8,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Int32 => "int32",
            Self::Int64 => "int64",
        }
    }
}

/// The prompt in `input`: token ids encoded as `dtype`.
pub fn parse_token_ids(input: &[u8], dtype: TokenDtype) -> Result<Vec<u32>, String> {
    let width = dtype.width();
    if input.is_empty() {
        return Err("empty prompt: no token ids".to_string());
    }
    if !input.len().is_multiple_of(width) {
        return Err(format!(
            "input of {} bytes is not a whole number of {} token ids ({width} bytes each)",
            input.len(),
            dtype.name()
        ));
    }
    input
        .chunks_exact(width)
        .enumerate()
        .map(|(i, bytes)| {
            let id = match dtype {
                TokenDtype::Int32 => {
                    i64::from(i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
                }
                TokenDtype::Int64 => {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(bytes);
                    i64::from_le_bytes(b)
                }
            };
            u32::try_from(id)
                .map_err(|_| format!("token id {id} at position {i} is negative or too large"))
        })
        .collect()
}

/// `ids` encoded as `dtype`, for an answer.
pub fn encode_token_ids(ids: &[u32], dtype: TokenDtype) -> Bytes {
    let mut out = Vec::with_capacity(ids.len() * dtype.width());
    for &id in ids {
        match dtype {
            // Ids come from a vocabulary far below 2^31.
            TokenDtype::Int32 => out.extend_from_slice(&(id as i32).to_le_bytes()),
            TokenDtype::Int64 => out.extend_from_slice(&i64::from(id).to_le_bytes()),
        }
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_int32_and_int64_token_ids() {
        let bytes: Vec<u8> = [1i32, 9906, 49151]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            parse_token_ids(&bytes, TokenDtype::Int32).unwrap(),
            [1, 9906, 49151]
        );
        let bytes: Vec<u8> = [7i64, 0].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(parse_token_ids(&bytes, TokenDtype::Int64).unwrap(), [7, 0]);
    }

    #[test]
    fn token_id_errors_say_what_is_wrong() {
        let err = parse_token_ids(&[0; 6], TokenDtype::Int32).unwrap_err();
        assert!(err.contains("6 bytes") && err.contains("int32"), "{err}");
        let err = parse_token_ids(&[0; 12], TokenDtype::Int64).unwrap_err();
        assert!(err.contains("int64"), "{err}");
        let err = parse_token_ids(&[], TokenDtype::Int32).unwrap_err();
        assert!(err.contains("empty"), "{err}");
        let err = parse_token_ids(&(-5i32).to_le_bytes(), TokenDtype::Int32).unwrap_err();
        assert!(err.contains("-5"), "{err}");
        let err = parse_token_ids(&(1i64 << 40).to_le_bytes(), TokenDtype::Int64).unwrap_err();
        assert!(err.contains("too large"), "{err}");
    }

    #[test]
    fn encodes_token_ids_little_endian() {
        assert_eq!(
            &encode_token_ids(&[1, 258], TokenDtype::Int32)[..],
            [1, 0, 0, 0, 2, 1, 0, 0]
        );
        assert_eq!(encode_token_ids(&[3], TokenDtype::Int64).len(), 8);
        let ids = [0, 5, 49151];
        for dtype in [TokenDtype::Int32, TokenDtype::Int64] {
            assert_eq!(
                parse_token_ids(&encode_token_ids(&ids, dtype), dtype).unwrap(),
                ids
            );
        }
    }
}
