//! What passes between the engine and a SUT for each sample (the official
//! LoadGen's `query_sample.h`).

/// Opaque handle of one issued sample. Never 0. The SUT hands it back verbatim.
pub type ResponseId = u64;
/// Position of a sample in the QSL, `0 <= index < total_sample_count`.
pub type QuerySampleIndex = usize;

/// One sample of a query, as handed to the SUT. Laid out as the official
/// LoadGen's `mlperf::QuerySample` (an id, then an index, 64 bits each), so
/// that a query from it is handed over without a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct QuerySample {
    /// Handle to answer with.
    pub id: ResponseId,
    /// Which sample of the QSL to run.
    pub index: QuerySampleIndex,
}

/// The SUT's answer for one sample.
#[derive(Clone, Copy, Debug)]
pub struct QuerySampleResponse<'a> {
    /// The [`QuerySample::id`] being answered.
    pub id: ResponseId,
    /// The output, written to the accuracy log when the sample is logged.
    pub data: &'a [u8],
    /// Number of generated tokens (LLM benchmarks); 0 otherwise.
    pub n_tokens: i64,
}

impl<'a> QuerySampleResponse<'a> {
    /// An answer with no token count.
    pub fn new(id: ResponseId, data: &'a [u8]) -> Self {
        Self {
            id,
            data,
            n_tokens: 0,
        }
    }
}
