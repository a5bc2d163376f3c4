//! Inference backends. Each one implements [`Backend`] in its own module.
//!
//! Backends are synchronous: the batcher calls them from its own worker
//! thread, never from the async runtime, so a backend may block on its
//! accelerator (or sleep, for the synthetic one) as long as a batch takes.

use bytes::Bytes;
use thiserror::Error;

mod forward;
pub mod kserve;
#[cfg(feature = "llm")]
pub mod llm;
#[cfg(feature = "onnx")]
pub mod onnx;
pub mod openai;
mod spec;
pub mod synthetic;

pub use spec::{build, BackendSpec, BuildError};

/// A sample's final answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The answer's bytes as the backend produced them (before the output
    /// codec compresses them for the wire).
    pub payload: Bytes,
    /// LLM backends: the number of generated tokens; 0 otherwise.
    pub n_tokens: i64,
}

/// One sample's result: its answer, or why this sample alone failed (the
/// rest of its batch is unaffected).
pub type Output = Result<Answer, SampleFailure>;

/// A failure of the backend itself: at load time, or for a whole batch.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct BackendError(pub String);

/// Why one sample got no answer. It becomes text only on the wire: the
/// message of the sample's `SampleError`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SampleFailure {
    /// Its input could not be decoded, or is over `--max-input-bytes`.
    #[error(transparent)]
    Input(#[from] crate::codec::InputError),
    /// Its decoding stopped before it finished (the decoding task died).
    #[error("decoding failed: {0}")]
    DecodingAborted(String),
    /// The backend could not answer this sample.
    #[error("{0}")]
    Backend(String),
    /// The backend failed the sample's whole batch.
    #[error("backend failed: {0}")]
    Batch(BackendError),
    /// The backend returned a wrong number of outputs for the batch.
    #[error("backend returned {returned} outputs for a batch of {batch}")]
    Miscounted {
        /// How many outputs the backend returned.
        returned: usize,
        /// How many samples the batch held.
        batch: usize,
    },
    /// The backend panicked while running the batch.
    #[error("backend panicked")]
    Panicked,
}

/// The LoadGen's test mode of a session (`SessionRequest.mode`).
pub use proto::RunMode;

/// What the batcher says about a batch besides its inputs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchInfo<'a> {
    /// The batch was already waiting when the previous one finished, so it
    /// follows that one without a gap, as on a fully busy accelerator.
    pub back_to_back: bool,
    /// The test mode of each sample's session, in the batch's order (empty:
    /// all performance).
    pub modes: &'a [RunMode],
}

impl BatchInfo<'_> {
    /// Whether sample `index` of the batch belongs to an accuracy run, whose
    /// answers some benchmarks lay out otherwise (DLRMv3's carry labels and
    /// weights).
    pub fn accuracy(&self, index: usize) -> bool {
        self.modes.get(index) == Some(&RunMode::AccuracyOnly)
    }
}

/// Where a backend sends a sample's results as soon as it has them, before
/// the rest of its batch is done: its first token (LLM benchmarks measure the
/// time to first token) and, for backends whose samples finish at different
/// times (one generation after another, concurrent requests to an inference
/// server), its answer, so that no sample's latency includes its batch-mates'
/// work.
pub trait SampleSink {
    /// `index` is the sample's position in the batch given to `infer`.
    fn first_token(&mut self, index: usize, payload: Bytes);

    /// Sends sample `index`'s output now. The entry `infer` later returns for
    /// that sample must be the same; the node sends it once.
    fn answer_now(&mut self, index: usize, output: &Output) {
        let _ = (index, output);
    }
}

/// What a session asks of the node's answers, for
/// [`Backend::cannot_serve`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionNeeds<'a> {
    /// The benchmark, as the session names it.
    pub model: &'a str,
    /// The LoadGen judges the session on token latencies (LLM benchmarks):
    /// every answer must carry its token count, more than one, and (but in
    /// Offline) follow its first token.
    pub token_latencies: bool,
}

/// What runs a node's samples: an accelerator's runtime, an inference server
/// the node forwards to, or the synthetic emulation.
///
/// The batcher calls a backend from its one worker thread: [`warm_up`] once
/// before the node reports ready, then [`infer`] with each batch of decoded
/// inputs (at most `--max-batch-size` of them). A backend may block as long
/// as a batch takes. It must return one [`Output`] per input, in order: an
/// [`Answer`] (its bytes go back to the LoadGen node as they are; for an
/// LLM, with the number of tokens generated) or a [`SampleFailure`] that
/// fails that sample alone. An `Err` fails the whole batch.
///
/// A new backend, in its own module under `backend/` and made by
/// [`build`] from a [`BackendSpec`] variant of its own:
///
/// ```
/// use bytes::Bytes;
/// use sut_node::backend::{
///     Answer, Backend, BackendError, BatchInfo, Output, SampleFailure, SampleSink,
/// };
///
/// /// Answers each input with its first byte; refuses empty inputs.
/// struct FirstByte;
///
/// impl Backend for FirstByte {
///     fn name(&self) -> &str {
///         "first-byte"
///     }
///
///     fn warm_up(&self) -> Result<(), BackendError> {
///         // Load weights, compile kernels, run a dummy batch: whatever makes
///         // the first real batch as fast as the next.
///         Ok(())
///     }
///
///     fn infer(
///         &self,
///         inputs: &[Bytes],
///         _info: BatchInfo,
///         _sink: &mut dyn SampleSink,
///     ) -> Result<Vec<Output>, BackendError> {
///         Ok(inputs
///             .iter()
///             .map(|input| match input.first() {
///                 Some(b) => Ok(Answer {
///                     payload: Bytes::copy_from_slice(&[*b]),
///                     n_tokens: 0,
///                 }),
///                 None => Err(SampleFailure::Backend("empty input".into())),
///             })
///             .collect())
///     }
/// }
///
/// // What the batcher does with it (a sink that takes no early results).
/// struct Later;
/// impl SampleSink for Later {
///     fn first_token(&mut self, _index: usize, _payload: Bytes) {}
/// }
/// let backend = FirstByte;
/// backend.warm_up()?;
/// let inputs = [Bytes::from_static(b"xy"), Bytes::new()];
/// let outputs = backend.infer(&inputs, BatchInfo::default(), &mut Later)?;
/// assert_eq!(outputs[0].as_ref().map(|a| a.payload.clone()), Ok(Bytes::from_static(b"x")));
/// assert!(outputs[1].is_err());
/// # Ok::<(), BackendError>(())
/// ```
///
/// [`warm_up`]: Backend::warm_up
/// [`infer`]: Backend::infer
pub trait Backend: Send + Sync + 'static {
    /// Reported to the LoadGen node in `SessionReply.backend`.
    fn name(&self) -> &str;

    /// Why this backend cannot answer a session that needs `needs`, if it
    /// cannot: the node refuses the session with this reason, before any
    /// sample is sent. By default a backend answers any session that is
    /// not judged on token latencies; one that counts tokens says so here.
    fn cannot_serve(&self, needs: &SessionNeeds<'_>) -> Option<String> {
        needs.token_latencies.then(|| {
            format!(
                "the {} backend's answers carry no token counts, and a {} session is judged on \
                 token latencies (each answer's token count, after its first token)",
                self.name(),
                needs.model
            )
        })
    }

    /// Loads the model and runs whatever makes the first real batch as fast
    /// as the next ones. The node reports ready only after this returns.
    fn warm_up(&self) -> Result<(), BackendError>;

    /// Runs one batch of decoded inputs and returns one output per input, in
    /// order. LLM backends call `first_token` for each sample before
    /// returning, and backends whose samples finish at different times
    /// `answer_now` as each one does; others ignore the sink.
    fn infer(
        &self,
        inputs: &[Bytes],
        info: BatchInfo,
        sink: &mut dyn SampleSink,
    ) -> Result<Vec<Output>, BackendError>;
}
