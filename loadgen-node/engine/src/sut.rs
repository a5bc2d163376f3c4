//! The two seams between the engine and the outside world: the system under
//! test (which answers queries) and the query sample library (which owns the
//! data).

use crate::completion::Completer;

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

/// Error a SUT or QSL reports to the engine; it ends the run.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SutError(pub String);

/// A system under test. Implementations must be cheap to call from the
/// issuing thread: `issue_query` should hand the samples off and return.
pub trait SystemUnderTest: Send + Sync {
    /// Name of the system; called once per test (timed) and once per summary.
    fn name(&self) -> Result<String, SutError>;
    /// Take a query. Every sample must be completed exactly once through
    /// `completer`, from this call or later from any thread.
    fn issue_query(&self, samples: &[QuerySample], completer: &Completer);
    /// Called once after the last `issue_query` of a series.
    fn flush_queries(&self) {}
    /// Facts about the run the SUT wants on record (a network SUT: transport,
    /// codecs, bytes on the wire), as `(key, value)` pairs. Asked once at the
    /// end of the test; each pair becomes a detail-log record and a line of a
    /// block at the end of the summary.
    fn report(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// The data set. Loading and unloading happen outside the timed path.
pub trait QuerySampleLibrary: Send + Sync {
    fn name(&self) -> String;
    fn total_sample_count(&self) -> usize;
    fn performance_sample_count(&self) -> usize;
    fn load_samples(&self, indices: &[QuerySampleIndex]) -> Result<(), SutError>;
    fn unload_samples(&self, indices: &[QuerySampleIndex]) -> Result<(), SutError>;
}
