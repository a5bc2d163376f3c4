//! The node's codecs: decoding of sample inputs (any codec of the protocol,
//! bounded by a maximum decoded size) before the batcher, and compression of
//! answers and first tokens with the node's output codec. Both run inside
//! the node, so their time is the SUT's time. See `compression` for the
//! codecs themselves.

use bytes::Bytes;
use compression::{CodecKind, CodecSpec, SampleCodec};
use proto::codec::{wire_name, WireCodec};
use proto::{Codec, FromNode};

/// The input codecs this node decodes, as reported by `StartSession`.
pub const INPUT_CODECS: &[Codec] = &[Codec::None, Codec::Zstd, Codec::Lz4];

/// Default bound on one decoded input when the node's benchmark is not
/// known: 64 MiB.
pub const DEFAULT_MAX_INPUT_BYTES: usize = 64 << 20;

/// The default bound on one decoded input for `benchmark`: four times its
/// input size (inputs vary around the average), at least 1 MiB; or
/// [`DEFAULT_MAX_INPUT_BYTES`] for a benchmark this node does not know.
pub fn default_max_input_bytes(benchmark: &str) -> usize {
    match facts::benchmarks::find(benchmark) {
        Some(b) => (4 * b.input_bytes()).max(1 << 20),
        None => DEFAULT_MAX_INPUT_BYTES,
    }
}

/// The node's codec settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeCodecs {
    /// The codec of every answer and first token.
    pub output: CodecSpec,
    /// Largest input accepted, raw or once decoded; a sample above it gets a
    /// `SampleError` (and its frame is never decoded past the limit).
    pub max_input_bytes: usize,
}

impl Default for NodeCodecs {
    fn default() -> Self {
        Self {
            output: CodecSpec::NONE,
            max_input_bytes: DEFAULT_MAX_INPUT_BYTES,
        }
    }
}

/// Whether this node decodes `codec` (a raw wire value).
pub fn can_decode(codec: i32) -> bool {
    INPUT_CODECS.iter().any(|c| *c as i32 == codec)
}

/// Human-readable name of a raw codec value, for error messages: `zstd`, or
/// `unknown codec 7`.
pub fn codec_name(codec: i32) -> String {
    wire_name(codec)
}

/// The names of [`INPUT_CODECS`], for messages.
pub fn input_codec_names() -> String {
    INPUT_CODECS
        .iter()
        .map(|c| CodecKind::from(*c).name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a sample's input cannot be given to the backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// Sent with a codec this node does not decode.
    #[error("this sut-node cannot decode {} inputs", codec_name(*.0))]
    UnknownCodec(i32),
    /// A raw input over the limit.
    #[error("the input is {len} bytes, more than this sut-node's --max-input-bytes {max}")]
    TooLarge {
        /// The input's size in bytes.
        len: usize,
        /// The limit in bytes (`--max-input-bytes`).
        max: usize,
    },
    /// A compressed input that is corrupt or decodes to more than the limit.
    #[error("cannot decode the input (--max-input-bytes {max}): {reason}")]
    Undecodable {
        /// The limit in bytes (`--max-input-bytes`).
        max: usize,
        /// What the codec found.
        reason: compression::CodecError,
    },
}

/// The backend's input for a sample's payload sent with `codec`: the payload
/// itself, or its decoded bytes. Inputs over `max_len` bytes are refused.
pub fn decode_input(codec: i32, payload: Bytes, max_len: usize) -> Result<Bytes, InputError> {
    let kind = CodecKind::from_wire(codec).map_err(|_| InputError::UnknownCodec(codec))?;
    if kind == CodecKind::None {
        if payload.len() > max_len {
            return Err(InputError::TooLarge {
                len: payload.len(),
                max: max_len,
            });
        }
        return Ok(payload);
    }
    compression::decompress(kind, &payload, max_len)
        .map(Bytes::from)
        .map_err(|e| InputError::Undecodable {
            max: max_len,
            reason: e,
        })
}

/// The most bytes decoding `payload` (sent with `codec`) under `max_len`
/// may hold, known before decoding it (see `compression::output_bound`): the
/// budgets charge a sample this much until its real size is known.
pub fn input_bound(codec: i32, payload: &[u8], max_len: usize) -> usize {
    match CodecKind::from_wire(codec) {
        Ok(kind) => compression::output_bound(kind, payload, max_len),
        Err(_) => 0,
    }
}

/// Compresses every first token and answer of `message` with `codec` (a
/// no-op for `none`), marking each payload with its codec.
pub fn encode_output(codec: &dyn SampleCodec, message: &mut FromNode) {
    let kind = codec.kind();
    if kind == CodecKind::None {
        return;
    }
    let wire = kind.wire();
    for t in &mut message.first_tokens {
        t.payload = Bytes::from(codec.compress(&t.payload));
        t.codec = wire;
    }
    for a in &mut message.answers {
        a.payload = Bytes::from(codec.compress(&a.payload));
        a.codec = wire;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::{FirstToken, SampleAnswer};

    const MAX: usize = 1 << 20;

    #[test]
    fn decodes_every_codec_of_the_protocol() {
        let input: Vec<u8> = (0..10_000u32).map(|i| (i % 97) as u8).collect();
        for kind in CodecKind::ALL {
            let frame = CodecSpec::from(kind).codec().compress(&input);
            let got = decode_input(kind.wire(), Bytes::from(frame), MAX).unwrap();
            assert_eq!(got.as_ref(), &input[..], "{kind}");
            assert!(can_decode(kind.wire()));
        }
        let err = decode_input(42, Bytes::new(), MAX).unwrap_err().to_string();
        assert!(err.contains("unknown codec 42"), "{err}");
        assert!(!can_decode(42));
        assert_eq!(input_codec_names(), "none, zstd, lz4");
    }

    #[test]
    fn bombs_and_corrupt_frames_are_refused_with_the_reason() {
        let zeros = vec![0u8; 4 << 20];
        for kind in [CodecKind::Zstd, CodecKind::Lz4] {
            let bomb = Bytes::from(CodecSpec::from(kind).codec().compress(&zeros));
            assert!(bomb.len() < 64 << 10);
            let err = decode_input(kind.wire(), bomb, MAX)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!("{kind} frame of"))
                    && err.contains("declares 4194304 bytes")
                    && err.contains("--max-input-bytes 1048576"),
                "{err}"
            );
            let err = decode_input(kind.wire(), Bytes::from_static(b"\x10\0\0\0garbage"), MAX)
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("corrupt {kind} frame")), "{err}");
        }
        let err = decode_input(Codec::None as i32, Bytes::from(vec![0; 11]), 10)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("11 bytes, more than") && err.contains("10"),
            "{err}"
        );
    }

    #[test]
    fn answers_and_first_tokens_are_compressed() {
        let payload = Bytes::from(vec![5u8; 1000]);
        let mut m = FromNode {
            first_tokens: vec![FirstToken {
                id: 1,
                payload: payload.slice(..4),
                codec: 0,
            }],
            answers: vec![SampleAnswer {
                id: 1,
                payload: payload.clone(),
                codec: 0,
                n_tokens: 3,
                ..SampleAnswer::default()
            }],
            ..FromNode::default()
        };
        let unchanged = m.clone();
        encode_output(CodecSpec::NONE.codec().as_ref(), &mut m);
        assert_eq!(m, unchanged);

        let lz4 = CodecSpec::from(CodecKind::Lz4).codec();
        encode_output(lz4.as_ref(), &mut m);
        assert_eq!(m.answers[0].codec, Codec::Lz4 as i32);
        assert_eq!(m.first_tokens[0].codec, Codec::Lz4 as i32);
        assert!(m.answers[0].payload.len() < 100);
        assert_eq!(lz4.decompress(&m.answers[0].payload, MAX).unwrap(), payload);
        assert_eq!(
            lz4.decompress(&m.first_tokens[0].payload, MAX).unwrap(),
            &payload[..4]
        );
        assert_eq!(m.answers[0].n_tokens, 3);
    }
}
