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
//!
//! A caller that ends the process when the run fails
//! ([`ForeignSut::ending_the_process`]) needs no such set: the QDL already
//! completes only ids it sent, each once (an answer for any other id fails
//! the run), and nothing has to be drained. That saves two hash-set
//! operations per sample on the timed path.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};

use loadgen_engine::sut::SutError;
use loadgen_engine::{
    Completer, CompletionSink, QuerySample, QuerySampleResponse, SystemUnderTest,
};

use crate::sut::Qdl;

/// The foreign LoadGen's completion entry points (`QuerySamplesComplete`,
/// `FirstTokenComplete`). Called from the QDL's network threads, which live
/// as long as the [`ForeignSut`] (see [`ForeignSut::finish`]), or, in runs
/// with token latencies, from its one delivery thread, which lives as long
/// as the process; and, when the run fails, from the thread that issues.
pub trait ForeignLoadGen: Send + Sync {
    /// Hands answers to the foreign LoadGen (`QuerySamplesComplete`); each
    /// id once.
    fn samples_complete(&self, responses: &[QuerySampleResponse<'_>]);
    /// Hands first tokens to the foreign LoadGen (`FirstTokenComplete`),
    /// before their samples' answers.
    fn first_token_complete(&self, responses: &[QuerySampleResponse<'_>]);
    /// The run failed (called once, after the outstanding samples were
    /// completed, if they are tracked). The official LoadGen goes on issuing
    /// until its minimum duration and query count are met whatever happens;
    /// a caller that cannot wait that long ends the process here, and must
    /// with [`ForeignSut::ending_the_process`].
    fn failed(&self, _reason: &str) {}
}

/// Samples completed in one call while draining after a failure: the
/// official 6.0.17 core crashes when a thread that completed 1,024 or more
/// samples in one call exits.
const DRAIN_CHUNK: usize = 512;

/// Response ids are distinct addresses: one multiply spreads them well
/// enough, far cheaper than the default hasher on a path that sees every
/// sample twice.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type IdSet = HashSet<u64, BuildHasherDefault<IdHasher>>;

/// A sample's first token before its answer (see the module's
/// documentation).
struct FirstTokens {
    /// Every scenario but Offline: an answer needs its first token first.
    required: bool,
    /// Samples whose first token was passed on and whose answer was not yet.
    pending: Mutex<IdSet>,
}

/// What [`FirstTokens`] makes of one call's ids: which pass, and the first
/// answer refused for want of its first token.
#[derive(Debug, PartialEq)]
struct Sorted {
    pass: Vec<usize>,
    refused: Vec<u64>,
}

impl FirstTokens {
    fn new(required: bool) -> Self {
        Self {
            required,
            pending: Mutex::new(IdSet::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, IdSet> {
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// First tokens for `ids` (outstanding ones): each passes once.
    fn first_tokens(&self, ids: impl Iterator<Item = u64>) -> Sorted {
        let mut pending = self.lock();
        let pass = ids
            .enumerate()
            .filter(|&(_, id)| pending.insert(id))
            .map(|(i, _)| i)
            .collect();
        Sorted {
            pass,
            refused: Vec::new(),
        }
    }

    /// Answers for `ids` (outstanding ones): each passes if its first token
    /// did, or if first tokens are optional.
    fn answers(&self, ids: impl Iterator<Item = u64>) -> Sorted {
        let mut pending = self.lock();
        let mut sorted = Sorted {
            pass: Vec::new(),
            refused: Vec::new(),
        };
        for (i, id) in ids.enumerate() {
            if pending.remove(&id) || !self.required {
                sorted.pass.push(i);
            } else {
                sorted.refused.push(id);
            }
        }
        sorted
    }
}

/// A response owned, to cross to the delivery thread.
struct Owned {
    id: u64,
    data: Vec<u8>,
    n_tokens: i64,
}

enum Call {
    FirstTokens(Vec<Owned>),
    Answers(Vec<Owned>),
}

/// Makes every call to the foreign LoadGen from one thread, in the order
/// they were made (see the module's documentation).
struct Delivery {
    out: Arc<dyn ForeignLoadGen>,
    calls: mpsc::Sender<Call>,
}

impl Delivery {
    fn start(out: Arc<dyn ForeignLoadGen>) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Call>();
        let inner = out.clone();
        std::thread::Builder::new()
            .name("qdl-deliver".into())
            .spawn(move || {
                for call in rx {
                    let (first, owned) = match &call {
                        Call::FirstTokens(v) => (true, v),
                        Call::Answers(v) => (false, v),
                    };
                    let responses: Vec<QuerySampleResponse<'_>> = owned
                        .iter()
                        .map(|o| QuerySampleResponse {
                            id: o.id,
                            data: &o.data,
                            n_tokens: o.n_tokens,
                        })
                        .collect();
                    match first {
                        true => inner.first_token_complete(&responses),
                        false => inner.samples_complete(&responses),
                    }
                }
                // The official 6.0.17 core crashes when a thread that called
                // it exits: this one stays until the process ends.
                loop {
                    std::thread::park();
                }
            })?;
        Ok(Self { out, calls: tx })
    }

    fn send(&self, call: Call) {
        // The thread never ends while the sender lives.
        let _ = self.calls.send(call);
    }

    fn own(responses: &[QuerySampleResponse<'_>]) -> Vec<Owned> {
        responses
            .iter()
            .map(|r| Owned {
                id: r.id,
                data: r.data.to_vec(),
                n_tokens: r.n_tokens,
            })
            .collect()
    }
}

impl ForeignLoadGen for Delivery {
    fn samples_complete(&self, responses: &[QuerySampleResponse<'_>]) {
        self.send(Call::Answers(Self::own(responses)));
    }
    fn first_token_complete(&self, responses: &[QuerySampleResponse<'_>]) {
        self.send(Call::FirstTokens(Self::own(responses)));
    }
    fn failed(&self, reason: &str) {
        self.out.failed(reason);
    }
}

struct Tracker {
    out: Arc<dyn ForeignLoadGen>,
    /// The outstanding ids; `None` when a failure ends the process.
    outstanding: Option<Mutex<IdSet>>,
    /// Runs with token latencies: first tokens before answers.
    tokens: Option<FirstTokens>,
    failed: AtomicBool,
    failure: OnceLock<String>,
}

impl Tracker {
    fn lock(&self) -> Option<std::sync::MutexGuard<'_, IdSet>> {
        // A panic while holding the lock leaves a set that is still
        // consistent (inserts and removes are single operations).
        self.outstanding
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
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

    /// Outstanding samples' first tokens, to the LoadGen as the token rule
    /// lets them.
    fn first_tokens(&self, responses: &[QuerySampleResponse<'_>]) {
        let Some(tokens) = &self.tokens else {
            return self.out.first_token_complete(responses);
        };
        let sorted = tokens.first_tokens(responses.iter().map(|r| r.id));
        self.pass(responses, &sorted.pass, |r| {
            self.out.first_token_complete(r)
        });
    }

    /// Outstanding samples' answers, to the LoadGen as the token rule lets
    /// them; an answer that needed its first token first fails the run.
    fn answers(&self, responses: &[QuerySampleResponse<'_>]) {
        let Some(tokens) = &self.tokens else {
            return self.out.samples_complete(responses);
        };
        let sorted = tokens.answers(responses.iter().map(|r| r.id));
        self.pass(responses, &sorted.pass, |r| self.out.samples_complete(r));
        if let Some(id) = sorted.refused.first() {
            self.abort(format!(
                "the answer for response id {id} came before its first token: the official \
                 LoadGen records a first token before its sample's answer in this scenario"
            ));
            // Tracked (the process goes on): completed empty like every
            // other outstanding sample of a failed run, so that the test ends.
            if self.outstanding.is_some() {
                self.complete_empty(&sorted.refused);
            }
        }
    }

    /// Hands `responses[i]` for each `i` of `pass` to `to`: the slice as it
    /// is when all pass.
    fn pass(
        &self,
        responses: &[QuerySampleResponse<'_>],
        pass: &[usize],
        to: impl Fn(&[QuerySampleResponse<'_>]),
    ) {
        if pass.len() == responses.len() {
            to(responses);
        } else if !pass.is_empty() {
            let some: Vec<QuerySampleResponse<'_>> = pass.iter().map(|&i| responses[i]).collect();
            to(&some);
        }
    }

    fn drain(&self) {
        let ids: Vec<u64> = match self.lock() {
            Some(mut set) => set.drain().collect(),
            None => return,
        };
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
        if let Some(mut set) = self.lock() {
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
            None => self.answers(responses),
            Some(v) => {
                tracing::warn!(
                    "{} answer(s) for samples not outstanding were dropped",
                    responses.len() - v.len()
                );
                if !v.is_empty() {
                    self.answers(&v);
                }
            }
        }
    }

    fn first_token_complete(&self, responses: &[QuerySampleResponse<'_>]) {
        let Some(set) = self.lock() else {
            return self.first_tokens(responses);
        };
        if responses.iter().all(|r| set.contains(&r.id)) {
            drop(set);
            self.first_tokens(responses);
            return;
        }
        let known: Vec<QuerySampleResponse<'_>> = responses
            .iter()
            .filter(|r| set.contains(&r.id))
            .copied()
            .collect();
        drop(set);
        if !known.is_empty() {
            self.first_tokens(&known);
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
    /// A failed run is drained: every outstanding and later sample is
    /// completed at once, so that the LoadGen ends its test.
    pub fn new(qdl: Qdl, out: Arc<dyn ForeignLoadGen>) -> Self {
        Self::with(qdl, out, Some(Mutex::new(IdSet::default())))
    }

    /// For a caller whose [`ForeignLoadGen::failed`] ends the process: no
    /// outstanding ids are kept (see the module's documentation).
    pub fn ending_the_process(qdl: Qdl, out: Arc<dyn ForeignLoadGen>) -> Self {
        Self::with(qdl, out, None)
    }

    fn with(qdl: Qdl, out: Arc<dyn ForeignLoadGen>, outstanding: Option<Mutex<IdSet>>) -> Self {
        let tracker = Arc::new(Tracker {
            out,
            outstanding,
            tokens: None,
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

    /// For a run with token latencies, before its first sample: every call
    /// to the foreign LoadGen is made from one delivery thread, in order, and
    /// each sample's first token passes before its answer; `required`
    /// (every scenario but Offline): an answer whose first token has not
    /// come fails the run (see the module's documentation).
    pub fn with_first_tokens(self, required: bool) -> std::io::Result<Self> {
        let Self {
            qdl,
            tracker,
            completer,
        } = self;
        drop(completer);
        let old = Arc::try_unwrap(tracker)
            .map_err(|_| std::io::Error::other("first tokens ordered after the run started"))?;
        let tracker = Arc::new(Tracker {
            out: Arc::new(Delivery::start(old.out)?),
            outstanding: old.outstanding,
            tokens: Some(FirstTokens::new(required)),
            failed: old.failed,
            failure: old.failure,
        });
        let completer = Completer::to_sink(tracker.clone());
        Ok(Self {
            qdl,
            tracker,
            completer,
        })
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
        if let Some(mut set) = self.tracker.lock() {
            set.reserve(samples.len());
            set.extend(samples.iter().map(|s| s.id));
        }
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
        fn first_token_complete(&self, responses: &[QuerySampleResponse<'_>]) {
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
            outstanding: Some(Mutex::new(ids.into_iter().collect())),
            tokens: None,
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
        assert!(t.lock().expect("tracked").is_empty());
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
        assert_eq!(t.lock().expect("tracked").len(), 2);
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

    #[test]
    fn untracked_answers_pass_straight_through_and_a_failure_is_reported_once() {
        #[derive(Default)]
        struct Failing(Recorder, Mutex<Vec<String>>);
        impl ForeignLoadGen for Failing {
            fn samples_complete(&self, r: &[QuerySampleResponse<'_>]) {
                self.0.samples_complete(r)
            }
            fn first_token_complete(&self, r: &[QuerySampleResponse<'_>]) {
                self.0.first_token_complete(r)
            }
            fn failed(&self, reason: &str) {
                self.1.lock().unwrap().push(reason.to_string());
            }
        }
        let out = Arc::new(Failing::default());
        let t = Tracker {
            out: out.clone(),
            outstanding: None,
            tokens: None,
            failed: AtomicBool::new(false),
            failure: OnceLock::new(),
        };
        t.query_samples_complete(&[QuerySampleResponse::new(4, b"ab")]);
        t.first_token_complete(&[QuerySampleResponse::new(5, b"t")]);
        t.abort("node gone".into());
        t.abort("later".into());
        assert_eq!(*out.0.completed.lock().unwrap(), vec![vec![(4, 2)]]);
        assert_eq!(*out.0.first_tokens.lock().unwrap(), vec![5]);
        assert_eq!(*out.1.lock().unwrap(), vec!["node gone".to_string()]);
    }

    #[test]
    fn the_token_rule_passes_first_tokens_once_and_answers_after_them() {
        let rule = FirstTokens::new(true);
        // First tokens of 1 and 2; 1 again is dropped.
        assert_eq!(
            rule.first_tokens([1, 2, 1].into_iter()),
            Sorted {
                pass: vec![0, 1],
                refused: vec![]
            }
        );
        // 2 and 1 answered after their first tokens; 3 had none.
        assert_eq!(
            rule.answers([2, 3, 1].into_iter()),
            Sorted {
                pass: vec![0, 2],
                refused: vec![3]
            }
        );
        assert!(rule.lock().is_empty());
        // Offline: an answer without a first token passes as it is.
        let optional = FirstTokens::new(false);
        assert_eq!(
            optional.answers([7].into_iter()),
            Sorted {
                pass: vec![0],
                refused: vec![]
            }
        );
    }

    /// Records every call with the thread that made it.
    #[derive(Default)]
    struct Threads(Mutex<Vec<(&'static str, u64, std::thread::ThreadId)>>);

    impl ForeignLoadGen for Threads {
        fn samples_complete(&self, r: &[QuerySampleResponse<'_>]) {
            let t = std::thread::current().id();
            self.0
                .lock()
                .unwrap()
                .extend(r.iter().map(|r| ("answer", r.id, t)));
        }
        fn first_token_complete(&self, r: &[QuerySampleResponse<'_>]) {
            let t = std::thread::current().id();
            self.0
                .lock()
                .unwrap()
                .extend(r.iter().map(|r| ("first", r.id, t)));
        }
    }

    #[test]
    fn first_tokens_and_answers_from_two_threads_reach_the_loadgen_from_one_in_order() {
        let rec = Arc::new(Threads::default());
        let t = Arc::new(Tracker {
            out: Arc::new(Delivery::start(rec.clone()).unwrap()),
            outstanding: Some(Mutex::new([1, 2].into_iter().collect())),
            tokens: Some(FirstTokens::new(true)),
            failed: AtomicBool::new(false),
            failure: OnceLock::new(),
        });
        // Each sample's first token on one thread, its answer on another,
        // one after the other, as the QDL's receive tasks may make them.
        for id in [1u64, 2] {
            let a = t.clone();
            std::thread::spawn(move || {
                a.first_token_complete(&[QuerySampleResponse::new(id, b"t")])
            })
            .join()
            .unwrap();
            let b = t.clone();
            std::thread::spawn(move || {
                b.query_samples_complete(&[QuerySampleResponse {
                    id,
                    data: b"answer",
                    n_tokens: 4,
                }])
            })
            .join()
            .unwrap();
        }
        // A first token after its answer never reaches the LoadGen.
        t.first_token_complete(&[QuerySampleResponse::new(1, b"t")]);
        let calls = loop {
            let calls = rec.0.lock().unwrap().clone();
            if calls.len() >= 4 {
                break calls;
            }
            std::thread::yield_now();
        };
        let order: Vec<(&str, u64)> = calls.iter().map(|&(k, id, _)| (k, id)).collect();
        assert_eq!(
            order,
            vec![("first", 1), ("answer", 1), ("first", 2), ("answer", 2)]
        );
        assert!(calls.iter().all(|c| c.2 == calls[0].2));
        assert_ne!(calls[0].2, std::thread::current().id());
        assert!(t.failure.get().is_none());
    }

    #[test]
    fn an_answer_before_its_first_token_fails_the_run_and_is_completed_empty() {
        let (rec, mut t) = tracker([1, 2]);
        t.tokens = Some(FirstTokens::new(true));
        t.first_token_complete(&[QuerySampleResponse::new(1, b"t")]);
        t.query_samples_complete(&[
            QuerySampleResponse::new(1, b"ab"),
            QuerySampleResponse::new(2, b"cd"),
        ]);
        assert!(t.failure.get().is_some_and(|f| f.contains("response id 2")));
        assert_eq!(*rec.first_tokens.lock().unwrap(), vec![1]);
        // 1 with its answer; 2 only as a failed run's empty completion.
        assert_eq!(
            *rec.completed.lock().unwrap(),
            vec![vec![(1, 2)], vec![(2, 0)]]
        );
    }
}
