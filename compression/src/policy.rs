//! Which benchmarks may use which codec, per direction.
//!
//! | direction | benchmarks | closed / network division | open division |
//! | --- | --- | --- | --- |
//! | inputs (LoadGen node to sut-node) | the LLMs: gptj, llama2-70b, llama2-70b-interactive, llama3.1-405b, llama3.1-8b, mixtral-8x7b, deepseek-r1, and any model whose name starts with `llama`, `mixtral`, `gpt` or `deepseek`; stable-diffusion-xl | uncompressed only | any codec |
//! | inputs | every other benchmark | any codec | any codec |
//! | outputs (sut-node to LoadGen node) | all | any codec | any codec |
//!
//! Compression is always lossless and per sample; the QSL compresses inputs
//! at load time (untimed), the sut-node decodes them inside its own time.

use crate::CodecKind;

/// The rule the input table enforces, as quoted in refusals.
pub const INPUT_RULE: &str = "in the closed and network divisions, the inputs of the LLM \
     benchmarks (gptj, llama2-70b, llama2-70b-interactive, llama3.1-405b, llama3.1-8b, \
     mixtral-8x7b, deepseek-r1, and any llama*, mixtral*, gpt* or deepseek* model) and of \
     stable-diffusion-xl must be sent uncompressed";

/// Benchmarks whose inputs may not be compressed, by exact name.
pub const UNCOMPRESSED_INPUT_MODELS: &[&str] = &[
    "gptj",
    "llama2-70b",
    "llama2-70b-interactive",
    "llama3.1-405b",
    "llama3.1-8b",
    "mixtral-8x7b",
    "deepseek-r1",
    "stable-diffusion-xl",
];

/// Model-name prefixes (the LLM families) whose inputs may not be compressed.
pub const UNCOMPRESSED_INPUT_PREFIXES: &[&str] = &["llama", "mixtral", "gpt", "deepseek"];

/// The submission division, as far as codecs are concerned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Division {
    /// Closed or network division: the table applies.
    #[default]
    Closed,
    /// Open division: any lossless codec in either direction.
    Open,
}

/// Why a codec is refused for a benchmark.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{codec} input compression is refused for model {model:?}: {rule}. The open division \
     allows it (loadgen-node --open-division); otherwise use --input-codec none"
)]
pub struct PolicyError {
    pub model: String,
    pub codec: CodecKind,
    pub rule: &'static str,
}

/// Whether the rules require `model`'s inputs to travel uncompressed in the
/// closed and network divisions.
pub fn inputs_must_be_uncompressed(model: &str) -> bool {
    let m = model.trim().to_ascii_lowercase();
    UNCOMPRESSED_INPUT_MODELS.contains(&m.as_str())
        || UNCOMPRESSED_INPUT_PREFIXES.iter().any(|p| m.starts_with(p))
}

/// Checks the codec of `model`'s inputs. `none` is always allowed.
pub fn check_input(model: &str, codec: CodecKind, division: Division) -> Result<(), PolicyError> {
    if codec == CodecKind::None || division == Division::Open || !inputs_must_be_uncompressed(model)
    {
        return Ok(());
    }
    Err(PolicyError {
        model: model.to_string(),
        codec,
        rule: INPUT_RULE,
    })
}

/// Checks the codec of `model`'s answers: every benchmark may compress them.
pub fn check_output(
    _model: &str,
    _codec: CodecKind,
    _division: Division,
) -> Result<(), PolicyError> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_input_table() {
        let refused = [
            "gptj",
            "llama2-70b",
            "llama2-70b-interactive",
            "llama3.1-405b",
            "llama3.1-8b",
            "mixtral-8x7b",
            "deepseek-r1",
            "stable-diffusion-xl",
            // Future members of the LLM families.
            "llama4-maverick",
            "mixtral-8x22b",
            "gpt-oss-120b",
            "deepseek-v3",
            "Llama2-70B",
        ];
        let allowed = [
            "resnet50",
            "retinanet",
            "bert",
            "3d-unet",
            "dlrm-v2",
            "rgat",
            "pointpainting",
            "whisper",
            "stable-diffusion-v1",
        ];
        for codec in [CodecKind::Zstd, CodecKind::Lz4] {
            for m in refused {
                let e = check_input(m, codec, Division::Closed).unwrap_err();
                let text = e.to_string();
                assert!(
                    text.contains(&format!(
                        "{codec} input compression is refused for model \"{m}\""
                    )) && text.contains("must be sent uncompressed")
                        && text.contains("--open-division"),
                    "{text}"
                );
                assert_eq!(check_input(m, codec, Division::Open), Ok(()));
                assert_eq!(check_output(m, codec, Division::Closed), Ok(()));
            }
            for m in allowed {
                assert_eq!(check_input(m, codec, Division::Closed), Ok(()), "{m}");
            }
        }
        for m in refused {
            assert_eq!(check_input(m, CodecKind::None, Division::Closed), Ok(()));
        }
    }
}
