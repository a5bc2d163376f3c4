//! Serving a LoadGen other than this project's engine: the official LoadGen,
//! driven from C++ (`loadgen-node --engine official`) or from a Python
//! harness.
//!
//! The official LoadGen's response ids are the addresses of its own records:
//! completing an id twice, or one it did not issue, corrupts its memory. And
//! it cannot abort a test: a sample never completed keeps it waiting for
//! ever. So [`ForeignSut`] stands between it and the QDL and keeps the set of
//! outstanding ids: each is completed exactly once, and once the QDL fails,
//! every outstanding sample and every later one is completed at once with an
//! empty answer, so that the test ends promptly. The failure is kept for the
//! caller, who must not present that run's logs as a result.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use loadgen_engine::sut::SutError;
use loadgen_engine::{
    Completer, CompletionSink, QuerySample, QuerySampleResponse, SystemUnderTest,
};

use crate::Qdl;

/// The foreign LoadGen's completion entry points (`QuerySamplesComplete`,
/// `FirstTokenComplete`). Called from the QDL's network threads, which live
/// as long as the [`ForeignSut`] (see [`ForeignSut::finish`]), and, when the
/// run fails, from the thread that issues.
pub trait ForeignLoadGen: Send + Sync {
    fn samples_complete(&self, responses: &[QuerySampleResponse<'_>]);
    fn first_tokens_complete(&self, responses: &[QuerySampleResponse<'_>]);
    /// The run failed (called once, after the outstanding samples were
    /// completed). The official LoadGen goes on issuing until its minimum
    /// duration and query count are met whatever happens; a caller that
    /// cannot wait that long ends the process here.
    fn failed(&self, _reason: &str) {}
}

/// Samples completed in one call while draining after a failure: the
/// official 6.0.17 core crashes when a thread that completed 1,024 or more
/// samples in one call exits.
const DRAIN_CHUNK: usize = 512;

struct Tracker {
    out: Arc<dyn ForeignLoadGen>,
    outstanding: Mutex<HashSet<u64>>,
    failed: AtomicBool,
    failure: OnceLock<String>,
}

impl Tracker {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<u64>> {
        // A panic while holding the lock leaves a set that is still
        // consistent (inserts and removes are single operations).
        self.outstanding
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Completes `ids` with empty answers, in small calls.
    fn complete_empty(&self, ids: &[u64]) {
        for chunk in ids.chunks(DRAIN_CHUNK) {
            let responses: Vec<QuerySampleResponse<'_>> = chunk
                .iter()
                .map(|&id| QuerySampleResponse::new(id, &[]))
                .collect();
            self.out.samples_complete(&responses);
        }
    }

    fn drain(&self) {
        let ids: Vec<u64> = self.lock().drain().collect();
        self.complete_empty(&ids);
    }
}

impl CompletionSink for Tracker {
    fn query_samples_complete(&self, responses: &[QuerySampleResponse<'_>]) {
        // Usually every id is outstanding and the slice goes on as it is.
        // An id that is not (completed by a drain after a failure, or never
        // issued) must not reach the LoadGen: from the first such id on, the
        // ones to pass on are collected.
        let mut known: Option<Vec<QuerySampleResponse<'_>>> = None;
        {
            let mut set = self.lock();
            for (i, r) in responses.iter().enumerate() {
                let outstanding = set.remove(&r.id);
                match (&mut known, outstanding) {
                    (None, true) | (Some(_), false) => {}
                    (None, false) => known = Some(responses[..i].to_vec()),
                    (Some(v), true) => v.push(*r),
                }
            }
        }
        match known {
            None => self.out.samples_complete(responses),
            Some(v) => {
                tracing::warn!(
                    "{} answer(s) for samples not outstanding were dropped",
                    responses.len() - v.len()
                );
                if !v.is_empty() {
                    self.out.samples_complete(&v);
                }
            }
        }
    }

    fn first_token_complete(&self, responses: &[QuerySampleResponse<'_>]) {
        let set = self.lock();
        if responses.iter().all(|r| set.contains(&r.id)) {
            drop(set);
            self.out.first_tokens_complete(responses);
            return;
        }
        let known: Vec<QuerySampleResponse<'_>> = responses
            .iter()
            .filter(|r| set.contains(&r.id))
            .copied()
            .collect();
        drop(set);
        if !known.is_empty() {
            self.out.first_tokens_complete(&known);
        }
    }

    fn abort(&self, reason: String) {
        let first = self.failure.set(reason).is_ok();
        self.failed.store(true, Ordering::SeqCst);
        self.drain();
        if let (true, Some(reason)) = (first, self.failure.get()) {
            tracing::error!("the network SUT failed: {reason}");
            self.out.failed(reason);
        }
    }
}

/// The QDL as the SUT of a foreign LoadGen.
pub struct ForeignSut {
    qdl: Qdl,
    tracker: Arc<Tracker>,
    completer: Completer,
}

impl ForeignSut {
    pub fn new(qdl: Qdl, out: Arc<dyn ForeignLoadGen>) -> Self {
        let tracker = Arc::new(Tracker {
            out,
            outstanding: Mutex::new(HashSet::new()),
            failed: AtomicBool::new(false),
            failure: OnceLock::new(),
        });
        let completer = Completer::to_sink(tracker.clone());
        Self {
            qdl,
            tracker,
            completer,
        }
    }

    /// `Name()`: a round trip to every node (see [`Qdl`]'s `name`).
    pub fn name(&self) -> Result<String, SutError> {
        self.qdl.name()
    }

    /// `IssueQuery()`: hands the samples to the QDL, or, once the run has
    /// failed, completes them at once.
    pub fn issue_query(&self, samples: &[QuerySample]) {
        if self.tracker.failed.load(Ordering::SeqCst) {
            let ids: Vec<u64> = samples.iter().map(|s| s.id).collect();
            return self.tracker.complete_empty(&ids);
        }
        // Known before any answer can arrive.
        self.tracker.lock().extend(samples.iter().map(|s| s.id));
        self.qdl.issue_query(samples, &self.completer);
    }

    /// `FlushQueries()`.
    pub fn flush_queries(&self) {
        self.qdl.flush_queries();
    }

    /// Ends the run (as a failing node does): every outstanding and later
    /// sample is completed at once; the first reason is kept.
    pub fn fail(&self, reason: String) {
        self.tracker.abort(reason);
    }

    /// Why the run failed, if it did.
    pub fn failure(&self) -> Option<&str> {
        self.tracker.failure.get().map(String::as_str)
    }

    /// The QDL, for its statistics and report.
    pub fn qdl(&self) -> &Qdl {
        &self.qdl
    }

    /// Ends the sessions cleanly but keeps the network threads alive until
    /// the process exits: they called the foreign LoadGen's completion entry
    /// points, and the official 6.0.17 core crashes when such a thread exits.
    pub fn finish(self) {
        self.qdl.close_keeping_threads();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records every call, as (first id of the call, ids, total bytes).
    #[derive(Default)]
    struct Recorder {
        completed: Mutex<Vec<Vec<(u64, usize)>>>,
        first_tokens: Mutex<Vec<u64>>,
    }

    impl ForeignLoadGen for Recorder {
        fn samples_complete(&self, responses: &[QuerySampleResponse<'_>]) {
            let call = responses.iter().map(|r| (r.id, r.data.len())).collect();
            self.completed.lock().unwrap().push(call);
        }
        fn first_tokens_complete(&self, responses: &[QuerySampleResponse<'_>]) {
            self.first_tokens
                .lock()
                .unwrap()
                .extend(responses.iter().map(|r| r.id));
        }
    }

    fn tracker(ids: impl IntoIterator<Item = u64>) -> (Arc<Recorder>, Tracker) {
        let rec = Arc::new(Recorder::default());
        let t = Tracker {
            out: rec.clone(),
            outstanding: Mutex::new(ids.into_iter().collect()),
            failed: AtomicBool::new(false),
            failure: OnceLock::new(),
        };
        (rec, t)
    }

    #[test]
    fn each_sample_is_completed_once_and_unknown_ids_never_reach_the_loadgen() {
        let (rec, t) = tracker([10, 20, 30]);
        t.query_samples_complete(&[
            QuerySampleResponse::new(10, b"ab"),
            QuerySampleResponse::new(20, b"c"),
        ]);
        // 20 again (a duplicate), 99 (never issued), 30 (outstanding).
        t.query_samples_complete(&[
            QuerySampleResponse::new(20, b"x"),
            QuerySampleResponse::new(99, b"y"),
            QuerySampleResponse::new(30, b"zzz"),
        ]);
        let calls = rec.completed.lock().unwrap().clone();
        assert_eq!(calls, vec![vec![(10, 2), (20, 1)], vec![(30, 3)]]);
        assert!(t.lock().is_empty());
    }

    #[test]
    fn first_tokens_pass_only_for_outstanding_samples() {
        let (rec, t) = tracker([1, 2]);
        t.first_token_complete(&[
            QuerySampleResponse::new(1, b"t"),
            QuerySampleResponse::new(7, b"t"),
        ]);
        assert_eq!(*rec.first_tokens.lock().unwrap(), vec![1]);
        // First tokens do not complete the sample.
        assert_eq!(t.lock().len(), 2);
    }

    #[test]
    fn abort_completes_every_outstanding_sample_empty_in_small_calls() {
        let (rec, t) = tracker(1..=1300);
        t.abort("node gone".into());
        t.abort("a later reason".into());
        let calls = rec.completed.lock().unwrap().clone();
        assert!(calls.iter().all(|c| c.len() <= DRAIN_CHUNK));
        let mut ids: Vec<u64> = calls.iter().flatten().map(|&(id, _)| id).collect();
        ids.sort_unstable();
        assert_eq!(ids, (1..=1300).collect::<Vec<_>>());
        assert!(calls.iter().flatten().all(|&(_, len)| len == 0));
        assert_eq!(t.failure.get().map(String::as_str), Some("node gone"));
        // An answer arriving after the drain is dropped, not completed twice.
        t.query_samples_complete(&[QuerySampleResponse::new(5, b"late")]);
        assert_eq!(rec.completed.lock().unwrap().len(), calls.len());
    }
}
