//! An in-process SUT that answers at once, and a QSL that holds no data:
//! together they measure the engine's own overhead and replay reference runs.

use crate::completion::Completer;
use crate::sut::{
    QuerySample, QuerySampleIndex, QuerySampleLibrary, QuerySampleResponse, SutError,
    SystemUnderTest,
};

/// How the null SUT answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NullAnswer {
    /// Data = the sample's QSL index as 4 little-endian bytes.
    Index,
    /// LLM-like: first token `index*10`, then tokens `index*10 + t` for
    /// `t in 0 .. 2 + index % 7`, as i32 little-endian.
    Tokens,
}

/// Completes every sample synchronously inside `issue_query`, in order.
pub struct NullSut {
    name: String,
    answer: NullAnswer,
}

impl NullSut {
    /// A SUT reporting `name` and answering as `answer` says.
    pub fn new(name: impl Into<String>, answer: NullAnswer) -> Self {
        Self {
            name: name.into(),
            answer,
        }
    }
}

impl Default for NullSut {
    fn default() -> Self {
        Self::new("Null SUT", NullAnswer::Index)
    }
}

impl SystemUnderTest for NullSut {
    fn name(&self) -> Result<String, SutError> {
        Ok(self.name.clone())
    }

    fn issue_query(&self, samples: &[QuerySample], completer: &Completer) {
        match self.answer {
            NullAnswer::Index => {
                let data: Vec<[u8; 4]> = samples
                    .iter()
                    .map(|s| (s.index as u32).to_le_bytes())
                    .collect();
                let responses: Vec<QuerySampleResponse<'_>> = samples
                    .iter()
                    .zip(&data)
                    .map(|(s, d)| QuerySampleResponse::new(s.id, d))
                    .collect();
                completer.query_samples_complete(&responses);
            }
            NullAnswer::Tokens => {
                let first: Vec<[u8; 4]> = samples
                    .iter()
                    .map(|s| ((s.index * 10) as i32).to_le_bytes())
                    .collect();
                let firsts: Vec<QuerySampleResponse<'_>> = samples
                    .iter()
                    .zip(&first)
                    .map(|(s, d)| QuerySampleResponse::new(s.id, d))
                    .collect();
                completer.first_token_complete(&firsts);
                let outputs: Vec<(Vec<u8>, i64)> =
                    samples.iter().map(|s| token_output(s.index)).collect();
                let responses: Vec<QuerySampleResponse<'_>> = samples
                    .iter()
                    .zip(&outputs)
                    .map(|(s, (d, n))| QuerySampleResponse {
                        id: s.id,
                        data: d,
                        n_tokens: *n,
                    })
                    .collect();
                completer.query_samples_complete(&responses);
            }
        }
    }
}

fn token_output(index: QuerySampleIndex) -> (Vec<u8>, i64) {
    let n = 2 + index % 7;
    let bytes = (0..n)
        .flat_map(|t| ((index * 10 + t) as i32).to_le_bytes())
        .collect();
    (bytes, n as i64)
}

/// A QSL of the given sizes with nothing to load.
pub struct SizedQsl {
    /// Name reported to the logs.
    pub name: String,
    /// Total sample count.
    pub total: usize,
    /// Performance sample count.
    pub performance: usize,
}

impl SizedQsl {
    /// A QSL named "Null QSL" with these counts.
    pub fn new(total: usize, performance: usize) -> Self {
        Self {
            name: "Null QSL".into(),
            total,
            performance,
        }
    }
}

impl QuerySampleLibrary for SizedQsl {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn total_sample_count(&self) -> usize {
        self.total
    }
    fn performance_sample_count(&self) -> usize {
        self.performance
    }
    fn load_samples(&self, _indices: &[QuerySampleIndex]) -> Result<(), SutError> {
        Ok(())
    }
    fn unload_samples(&self, _indices: &[QuerySampleIndex]) -> Result<(), SutError> {
        Ok(())
    }
}
