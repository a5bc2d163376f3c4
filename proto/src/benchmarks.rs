//! What both ends know about each MLPerf Inference benchmark: the data set's
//! sizes and the size of one preprocessed input, so that the LoadGen node's
//! synthetic data set sends what the real one would, and a sut-node sizes its
//! message limit from the inputs it will get.

/// One benchmark of the suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Benchmark {
    /// The model name used in mlperf.conf keys.
    pub model: &'static str,
    /// Bytes of one preprocessed input sample as the reference
    /// implementation feeds it (the average for variable-length inputs).
    pub input_bytes: usize,
    /// Samples in the data set, and how many the QSL keeps in memory.
    pub total_samples: usize,
    pub performance_samples: usize,
    /// Generative benchmarks report token latencies (TTFT/TPOT).
    pub llm: bool,
}

const fn b(
    model: &'static str,
    input_bytes: usize,
    total_samples: usize,
    performance_samples: usize,
    llm: bool,
) -> Benchmark {
    Benchmark {
        model,
        input_bytes,
        total_samples,
        performance_samples,
        llm,
    }
}

/// The benchmarks of the 6.0 suite. Input sizes: ResNet50 3x224x224 fp32,
/// RetinaNet 3x800x800 fp32, BERT 3x384 int64 (ids, mask, segments),
/// 3D-UNet one 128^3 fp32 sub-volume, DLRMv2 13 dense fp32 + 26 sparse
/// int64 ids, the LLMs their average prompt as int32 token ids, SDXL two
/// 77-token prompts as int64.
pub const BENCHMARKS: &[Benchmark] = &[
    b("resnet50", 3 * 224 * 224 * 4, 50_000, 1024, false),
    b("retinanet", 3 * 800 * 800 * 4, 24_781, 64, false),
    b("bert", 3 * 384 * 8, 10_833, 10_833, false),
    b("3d-unet", 128 * 128 * 128 * 4, 43, 43, false),
    b("dlrm-v2", 13 * 4 + 26 * 8, 204_800, 204_800, false),
    b("gptj", 1024 * 4, 13_368, 13_368, true),
    b("llama2-70b", 1024 * 4, 24_576, 24_576, true),
    b("llama2-70b-interactive", 1024 * 4, 24_576, 24_576, true),
    b("llama3.1-405b", 9_400 * 4, 8_313, 8_313, true),
    b("llama3.1-8b", 1_024 * 4, 13_368, 13_368, true),
    b("mixtral-8x7b", 2_048 * 4, 15_000, 15_000, true),
    b("deepseek-r1", 800 * 4, 4_388, 4_388, true),
    b("stable-diffusion-xl", 2 * 77 * 8, 5_000, 5_000, false),
    b("rgat", 8, 788_379, 788_379, false),
    b("pointpainting", 5 * 40_000 * 4, 39_987, 1024, false),
    b("whisper", 30 * 16_000 * 4, 1_633, 1_633, false),
];

/// The benchmark of this model name, if it is one of the suite.
pub fn find(model: &str) -> Option<&'static Benchmark> {
    BENCHMARKS.iter().find(|b| b.model == model)
}

/// The names, for error messages.
pub fn names() -> Vec<&'static str> {
    BENCHMARKS.iter().map(|b| b.model).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup() {
        let r = find("resnet50").expect("resnet50");
        assert_eq!(r.input_bytes, 602_112);
        assert!(!r.llm);
        assert!(find("llama2-70b").is_some_and(|b| b.llm));
        assert!(find("nope").is_none());
        assert!(names().contains(&"bert"));
    }
}
