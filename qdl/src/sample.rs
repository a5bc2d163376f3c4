//! The samples the QDL sends: the QSL keeps them loaded and hands each one
//! over, by index, as the LoadGen issues it.

use bytes::Bytes;
use loadgen_engine::QuerySampleIndex;
use proto::Codec;

/// The QSL's loaded samples, as the QDL reads them.
pub trait SampleData: Send + Sync {
    /// Sample `index` as loaded (and possibly compressed, before the run) by
    /// the QSL; `None` if it is not loaded. Called on the issuing thread for
    /// every sample: it must be cheap (`Bytes` clones share the data).
    fn sample(&self, index: QuerySampleIndex) -> Option<StoredSample>;
}

/// One loaded sample: the bytes the QDL sends as they are, their codec, and
/// the sample's size before compression (for the report's ratio).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSample {
    /// What goes on the wire, unchanged: raw, or compressed in `codec`.
    pub payload: Bytes,
    /// How `payload` is encoded: `None`, or the codec every session
    /// announced.
    pub codec: Codec,
    /// The sample's size before compression, in bytes.
    pub raw_len: usize,
}

impl StoredSample {
    /// An uncompressed sample.
    pub fn raw(payload: Bytes) -> Self {
        Self {
            raw_len: payload.len(),
            payload,
            codec: Codec::None,
        }
    }
}
