//! The answers of one `ModelStreamInfer` stream, put back together.
//!
//! A batch's requests share one stream, and their responses come back in any
//! order, tied to their request by id. [`StreamReassembly`] is fed what the
//! stream delivers and hands each sample's first token and answer to the
//! batch's [`SampleSink`] as soon as it has them; it does no I/O, so the
//! stream's rules are tested here without a server.
//!
//! A request's responses are gathered until the server marks one final
//! (Triton's `triton_final_response`), or, from servers that do not mark
//! them, until the first. The first response with an output is the sample's
//! first token; the answer is all its responses' outputs end to end, and
//! `n_tokens` is the number of responses with an output.

use std::collections::HashMap;
use std::time::Duration;

use bytes::BytesMut;

use super::output::output_bytes;
use super::pb;
use crate::backend::{Answer, Output, SampleFailure, SampleSink};

/// The reassembly of one batch's stream.
pub(super) struct StreamReassembly {
    /// The output tensor that is the answer (`--kserve-output-name`).
    output_name: Option<String>,
    /// Request id → sample index, for the requests sent.
    by_id: HashMap<String, usize>,
    /// Each sample's output, once it has one.
    outputs: Vec<Option<Output>>,
    /// Each sample's answer so far and its number of responses with output.
    partial: Vec<(BytesMut, i64)>,
    /// Samples sent and not yet answered.
    open: usize,
}

impl StreamReassembly {
    /// A batch of `samples` samples, none of them sent yet.
    pub(super) fn new(samples: usize, output_name: Option<String>) -> Self {
        Self {
            output_name,
            by_id: HashMap::with_capacity(samples),
            outputs: vec![None; samples],
            partial: vec![(BytesMut::new(), 0); samples],
            open: 0,
        }
    }

    /// Sample `index` was sent as the request with id `id`.
    pub(super) fn sent(&mut self, index: usize, id: String) {
        if index < self.outputs.len() && self.by_id.insert(id, index).is_none() {
            self.open += 1;
        }
    }

    /// Sample `index` could not be sent: it fails with `error`.
    pub(super) fn not_sent(&mut self, index: usize, error: String) {
        if let Some(slot) = self.outputs.get_mut(index) {
            *slot = Some(Err(SampleFailure::Backend(error)));
        }
    }

    /// Whether every sample sent has its output (or the stream failed): no
    /// need to read the stream further.
    pub(super) fn is_complete(&self) -> bool {
        self.open == 0
    }

    /// One message of the stream. Responses to unknown ids, and to samples
    /// already answered, are ignored.
    pub(super) fn response(&mut self, m: pb::ModelStreamInferResponse, sink: &mut dyn SampleSink) {
        let response = m.infer_response.unwrap_or_default();
        let Some(&i) = self.by_id.get(&response.id) else {
            if !m.error_message.is_empty() && response.id.is_empty() {
                // An error the server could not tie to a request: every open
                // sample fails with it.
                self.fail_open(&format!("inference server: {}", m.error_message));
            }
            return;
        };
        if self.outputs[i].is_some() {
            return;
        }
        if !m.error_message.is_empty() {
            let message = format!("inference server: {}", m.error_message);
            self.close(i, Err(SampleFailure::Backend(message)));
            return;
        }
        if !response.outputs.is_empty() || !response.raw_output_contents.is_empty() {
            match output_bytes(&response, self.output_name.as_deref()) {
                Ok(bytes) => {
                    let (buf, n) = &mut self.partial[i];
                    if *n == 0 {
                        sink.first_token(i, bytes.clone());
                    }
                    buf.extend_from_slice(&bytes);
                    *n += 1;
                }
                Err(e) => {
                    self.close(i, Err(SampleFailure::Backend(e)));
                    return;
                }
            }
        }
        if is_final(&response) {
            let (buf, n) = std::mem::take(&mut self.partial[i]);
            let output = if n == 0 {
                Err(SampleFailure::Backend(
                    "the inference server's final response has no output".to_string(),
                ))
            } else {
                Ok(Answer {
                    payload: buf.freeze(),
                    n_tokens: n,
                })
            };
            // Each sample's answer leaves when its last response arrives,
            // not with the batch's slowest.
            sink.answer_now(i, &output);
            self.close(i, output);
        }
    }

    /// The stream failed: every sample without an output fails with `error`.
    pub(super) fn stream_failed(&mut self, error: &str) {
        self.fail_open(error);
    }

    /// Every sample's output; those the stream left unanswered (it ended, or
    /// was cut at `timeout`) fail.
    pub(super) fn finish(self, timeout: Duration) -> Vec<Output> {
        self.outputs
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    Err(SampleFailure::Backend(format!(
                        "the inference server's stream ended without an answer (or not within {timeout:?})"
                    )))
                })
            })
            .collect()
    }

    fn close(&mut self, i: usize, output: Output) {
        self.outputs[i] = Some(output);
        self.open = self.open.saturating_sub(1);
    }

    fn fail_open(&mut self, error: &str) {
        for slot in self.outputs.iter_mut().filter(|s| s.is_none()) {
            *slot = Some(Err(SampleFailure::Backend(error.to_string())));
        }
        self.open = 0;
    }
}

/// Whether a response is its request's last: Triton's
/// `triton_final_response`, and every response of servers that do not send
/// it.
fn is_final(response: &pb::ModelInferResponse) -> bool {
    match response.parameters.get("triton_final_response") {
        Some(pb::InferParameter {
            parameter_choice: Some(pb::infer_parameter::ParameterChoice::BoolParam(b)),
        }) => *b,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    /// What the reassembly handed to the sink, in order.
    #[derive(Default)]
    struct Record {
        first: Vec<(usize, Bytes)>,
        answers: Vec<(usize, Output)>,
    }

    impl SampleSink for Record {
        fn first_token(&mut self, index: usize, payload: Bytes) {
            self.first.push((index, payload));
        }
        fn answer_now(&mut self, index: usize, output: &Output) {
            self.answers.push((index, output.clone()));
        }
    }

    /// A response to request `id` with `raw` as its output; `last`: the
    /// `triton_final_response` flag, None for none.
    fn part(id: &str, raw: &'static [u8], last: Option<bool>) -> pb::ModelStreamInferResponse {
        let mut response = pb::ModelInferResponse {
            id: id.into(),
            raw_output_contents: vec![Bytes::from_static(raw)],
            ..Default::default()
        };
        if let Some(b) = last {
            response.parameters.insert(
                "triton_final_response".into(),
                pb::InferParameter {
                    parameter_choice: Some(pb::infer_parameter::ParameterChoice::BoolParam(b)),
                },
            );
        }
        pb::ModelStreamInferResponse {
            error_message: String::new(),
            infer_response: Some(response),
        }
    }

    fn error(id: &str, message: &str) -> pb::ModelStreamInferResponse {
        pb::ModelStreamInferResponse {
            error_message: message.into(),
            infer_response: Some(pb::ModelInferResponse {
                id: id.into(),
                ..Default::default()
            }),
        }
    }

    /// A batch of `n` samples, sample i sent as request id `r{i}`.
    fn batch(n: usize) -> StreamReassembly {
        let mut r = StreamReassembly::new(n, None);
        for i in 0..n {
            r.sent(i, format!("r{i}"));
        }
        r
    }

    fn answer(payload: &'static [u8], n_tokens: i64) -> Output {
        Ok(Answer {
            payload: Bytes::from_static(payload),
            n_tokens,
        })
    }

    const LIMIT: Duration = Duration::from_secs(5);

    #[test]
    fn responses_in_order_make_each_answer_with_its_first_token() {
        let (mut r, mut sink) = (batch(2), Record::default());
        for m in [
            part("r0", b"ab", Some(false)),
            part("r0", b"cd", Some(true)),
            part("r1", b"x", Some(false)),
            part("r1", b"yz", Some(true)),
        ] {
            assert!(!r.is_complete());
            r.response(m, &mut sink);
        }
        assert!(r.is_complete());
        assert_eq!(
            sink.first,
            vec![
                (0, Bytes::from_static(b"ab")),
                (1, Bytes::from_static(b"x"))
            ]
        );
        assert_eq!(
            sink.answers,
            vec![(0, answer(b"abcd", 2)), (1, answer(b"xyz", 2))]
        );
        assert_eq!(r.finish(LIMIT), vec![answer(b"abcd", 2), answer(b"xyz", 2)]);
    }

    #[test]
    fn interleaved_responses_go_to_their_own_samples() {
        let (mut r, mut sink) = (batch(3), Record::default());
        for m in [
            part("r2", b"c1", Some(false)),
            part("r0", b"a1", Some(false)),
            part("r2", b"c2", Some(true)),
            part("r1", b"b1", None),
            part("r0", b"a2", Some(false)),
            part("r0", b"a3", Some(true)),
        ] {
            r.response(m, &mut sink);
        }
        assert!(r.is_complete());
        let order: Vec<usize> = sink.answers.iter().map(|(i, _)| *i).collect();
        assert_eq!(order, [2, 1, 0], "answers leave as they complete");
        let firsts: Vec<usize> = sink.first.iter().map(|(i, _)| *i).collect();
        assert_eq!(firsts, [2, 0, 1]);
        assert_eq!(
            r.finish(LIMIT),
            vec![answer(b"a1a2a3", 3), answer(b"b1", 1), answer(b"c1c2", 2)]
        );
    }

    #[test]
    fn unknown_ids_and_responses_after_the_final_one_are_ignored() {
        let (mut r, mut sink) = (batch(1), Record::default());
        r.response(part("nobody", b"zz", Some(true)), &mut sink);
        r.response(part("", b"zz", Some(true)), &mut sink);
        r.response(error("nobody", "not ours"), &mut sink);
        assert!(!r.is_complete());
        assert!(sink.first.is_empty());
        r.response(part("r0", b"ok", Some(true)), &mut sink);
        r.response(part("r0", b"again", Some(true)), &mut sink);
        r.response(error("r0", "late"), &mut sink);
        assert_eq!(sink.answers, vec![(0, answer(b"ok", 1))]);
        assert_eq!(r.finish(LIMIT), vec![answer(b"ok", 1)]);
    }

    #[test]
    fn a_request_sent_twice_under_one_id_counts_once() {
        let mut r = StreamReassembly::new(2, None);
        r.sent(0, "same".into());
        r.sent(0, "same".into());
        r.response(part("same", b"ok", None), &mut Record::default());
        assert!(r.is_complete());
    }

    #[test]
    fn an_error_fails_its_sample_only() {
        let (mut r, mut sink) = (batch(2), Record::default());
        r.response(part("r0", b"a", Some(false)), &mut sink);
        r.response(error("r0", "out of memory"), &mut sink);
        assert!(!r.is_complete());
        r.response(part("r1", b"b", Some(true)), &mut sink);
        assert!(r.is_complete());
        let out = r.finish(LIMIT);
        assert_eq!(
            out[0],
            Err(SampleFailure::Backend(
                "inference server: out of memory".to_string()
            ))
        );
        assert_eq!(out[1], answer(b"b", 1));
    }

    #[test]
    fn an_error_without_an_id_fails_every_open_sample() {
        let (mut r, mut sink) = (batch(3), Record::default());
        r.response(part("r1", b"done", None), &mut sink);
        r.response(part("r0", b"half", Some(false)), &mut sink);
        r.response(error("", "model unloaded"), &mut sink);
        assert!(r.is_complete());
        let failed = Err(SampleFailure::Backend(
            "inference server: model unloaded".to_string(),
        ));
        assert_eq!(
            r.finish(LIMIT),
            vec![failed.clone(), answer(b"done", 1), failed]
        );
    }

    #[test]
    fn a_failed_stream_fails_the_samples_still_open() {
        let (mut r, mut sink) = (batch(2), Record::default());
        r.response(part("r0", b"a", Some(true)), &mut sink);
        r.response(part("r1", b"b", Some(false)), &mut sink);
        r.stream_failed("inference server Unavailable: connection reset");
        assert!(r.is_complete());
        let out = r.finish(LIMIT);
        assert_eq!(out[0], answer(b"a", 1));
        assert_eq!(
            out[1],
            Err(SampleFailure::Backend(
                "inference server Unavailable: connection reset".to_string()
            ))
        );
    }

    #[test]
    fn samples_still_pending_when_the_stream_ends_fail() {
        let (mut r, mut sink) = (batch(2), Record::default());
        r.response(part("r1", b"b", Some(false)), &mut sink);
        assert!(!r.is_complete());
        let out = r.finish(LIMIT);
        for o in &out {
            let e = o.as_ref().expect_err("no answer").to_string();
            assert!(
                e.contains("ended without an answer") && e.contains("5s"),
                "{e}"
            );
        }
        assert_eq!(sink.first, vec![(1, Bytes::from_static(b"b"))]);
    }

    #[test]
    fn a_final_response_without_output_fails_the_sample() {
        let (mut r, mut sink) = (batch(1), Record::default());
        let mut empty = part("r0", b"", Some(true));
        if let Some(response) = &mut empty.infer_response {
            response.raw_output_contents.clear();
        }
        r.response(empty, &mut sink);
        assert!(r.is_complete());
        let (i, output) = &sink.answers[0];
        assert_eq!(*i, 0);
        let e = output.as_ref().expect_err("no output").to_string();
        assert!(e.contains("final response has no output"), "{e}");
    }

    #[test]
    fn a_missing_named_output_fails_the_sample() {
        let mut r = StreamReassembly::new(1, Some("logits".into()));
        r.sent(0, "r0".into());
        let mut sink = Record::default();
        r.response(part("r0", b"x", None), &mut sink);
        assert!(r.is_complete());
        assert!(sink.first.is_empty());
        let out = r.finish(LIMIT);
        let e = out[0].as_ref().expect_err("no such output").to_string();
        assert!(e.contains("\"logits\""), "{e}");
    }

    #[test]
    fn samples_not_sent_keep_their_error() {
        let mut r = StreamReassembly::new(2, None);
        r.not_sent(0, "sample too large".into());
        r.sent(1, "r1".into());
        r.response(part("r1", b"ok", None), &mut Record::default());
        assert!(r.is_complete());
        assert_eq!(
            r.finish(LIMIT),
            vec![
                Err(SampleFailure::Backend("sample too large".to_string())),
                answer(b"ok", 1)
            ]
        );
    }
}
