//! The two seams between the engine and the outside world: the system under
//! test (which answers queries) and the query sample library (which owns the
//! data).

use crate::completion::Completer;
pub use crate::sample::{QuerySample, QuerySampleIndex, QuerySampleResponse, ResponseId};

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
    /// Name of the library, as logged.
    fn name(&self) -> String;
    /// Number of samples in the data set; indices run below it.
    fn total_sample_count(&self) -> usize;
    /// Number of samples that fit in memory at once: the size of each
    /// loadable set of a performance run.
    fn performance_sample_count(&self) -> usize;
    /// Bring these samples into memory before queries use them.
    fn load_samples(&self, indices: &[QuerySampleIndex]) -> Result<(), SutError>;
    /// Release samples loaded before; no query uses them any more.
    fn unload_samples(&self, indices: &[QuerySampleIndex]) -> Result<(), SutError>;
}
