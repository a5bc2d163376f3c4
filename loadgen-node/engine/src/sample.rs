//! What passes between the engine and a SUT for each sample (the official
//! LoadGen's `query_sample.h`).

/// Opaque handle of one issued sample. Never 0. The SUT hands it back verbatim.
pub type ResponseId = u64;
/// Position of a sample in the QSL, `0 <= index < total_sample_count`.
pub type QuerySampleIndex = usize;

/// One sample of a query, as handed to the SUT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuerySample {
    pub id: ResponseId,
    pub index: QuerySampleIndex,
}

/// The SUT's answer for one sample.
#[derive(Clone, Copy, Debug)]
pub struct QuerySampleResponse<'a> {
    pub id: ResponseId,
    pub data: &'a [u8],
    /// Number of generated tokens (LLM benchmarks); 0 otherwise.
    pub n_tokens: i64,
}

impl<'a> QuerySampleResponse<'a> {
    pub fn new(id: ResponseId, data: &'a [u8]) -> Self {
        Self {
            id,
            data,
            n_tokens: 0,
        }
    }
}
