//! Completion bookkeeping: the only engine code a SUT's threads run.
//!
//! Every issued sample occupies a slot of a fixed ring, indexed by its sample
//! sequence id. The issuing thread fills the slot and publishes it with one
//! release store; a completing thread validates the response id against the
//! slot's tag, claims it with one compare-and-swap, and hands a small record to
//! the aggregator thread (statistics, accuracy log, trace) through a channel.
//! No lock is taken on this path.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::{self, Thread};

use crate::aggregator::{Completed, Event, LogBudget};
use crate::clock::Clock;
use crate::sample::{QuerySampleIndex, QuerySampleResponse, ResponseId};

/// Completion records are sent in chunks of this many, so that a huge Offline
/// completion call does not build one huge message.
const CHUNK: usize = 4096;

#[derive(Default)]
struct Slot {
    /// `(seq + 1) << 2 | log_accuracy << 1 | done`; 0 = never used.
    tag: AtomicU64,
    scheduled_ns: AtomicI64,
    issued_ns: AtomicI64,
    /// First-token time + 1; 0 = no first token yet.
    first_token_ns: AtomicI64,
    index: AtomicU64,
    query_seq: AtomicU64,
}

const DONE: u64 = 1;
const LOG: u64 = 2;

fn tag_seq(tag: u64) -> u64 {
    tag >> 2
}

struct Shared {
    clock: Arc<dyn Clock>,
    slots: Box<[Slot]>,
    completed: AtomicU64,
    waiting: AtomicBool,
    issuer: Thread,
    aborted: AtomicBool,
    abort_reason: Mutex<Option<String>>,
    events: mpsc::Sender<Event>,
    /// Send first-token events even for samples not accuracy-logged (trace).
    trace_first_tokens: bool,
    log_budget: Arc<LogBudget>,
}

/// Handle through which a SUT completes samples. Cheap to clone; usable from
/// any thread.
#[derive(Clone)]
pub struct Completer(Target);

#[derive(Clone)]
enum Target {
    /// This engine's completion ring.
    Ring(Ring),
    /// Another LoadGen (the official one, through its own entry points).
    Sink(Arc<dyn CompletionSink>),
}

/// Where a [`Completer`] forwards completions when a LoadGen other than this
/// engine runs the test, so that a SUT written against this crate (the QDL)
/// can serve that LoadGen unchanged.
pub trait CompletionSink: Send + Sync {
    /// Samples are answered (LoadGen's `QuerySamplesComplete`).
    fn query_samples_complete(&self, responses: &[QuerySampleResponse<'_>]);
    /// The first tokens of samples are ready (LoadGen's `FirstTokenComplete`).
    fn first_token_complete(&self, responses: &[QuerySampleResponse<'_>]);
    /// The SUT cannot go on: the sink must end the test promptly, with
    /// `reason` on record.
    fn abort(&self, reason: String);
}

impl std::fmt::Debug for Completer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Target::Ring(r) => f
                .debug_struct("Completer")
                .field("capacity", &r.shared.slots.len())
                .finish(),
            Target::Sink(_) => f.write_str("Completer(sink)"),
        }
    }
}

impl Completer {
    /// A Completer that hands every call to `sink`.
    pub fn to_sink(sink: Arc<dyn CompletionSink>) -> Self {
        Self(Target::Sink(sink))
    }

    /// Records that every response in `responses` is done.
    #[inline]
    pub fn query_samples_complete(&self, responses: &[QuerySampleResponse<'_>]) {
        match &self.0 {
            Target::Ring(r) => r.query_samples_complete(responses),
            Target::Sink(s) => s.query_samples_complete(responses),
        }
    }

    /// Records the first token of each response (TTFT).
    pub fn first_token_complete(&self, responses: &[QuerySampleResponse<'_>]) {
        match &self.0 {
            Target::Ring(r) => r.first_token_complete(responses),
            Target::Sink(s) => s.first_token_complete(responses),
        }
    }

    /// Ends the run promptly: the issuer stops issuing and stops waiting, and
    /// the result is INVALID with this reason. The first reason wins.
    pub fn abort(&self, reason: String) {
        match &self.0 {
            Target::Ring(r) => r.abort(reason),
            Target::Sink(s) => s.abort(reason),
        }
    }
}

impl Completer {
    /// Whether both handles complete into the same test.
    pub fn same_test(&self, other: &Completer) -> bool {
        match (&self.0, &other.0) {
            (Target::Ring(a), Target::Ring(b)) => Arc::ptr_eq(&a.shared, &b.shared),
            (Target::Sink(a), Target::Sink(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl From<Ring> for Completer {
    fn from(r: Ring) -> Self {
        Self(Target::Ring(r))
    }
}

/// The engine's side of completions: a fixed ring of slots the issuing
/// thread fills and completing threads claim. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Ring {
    shared: Arc<Shared>,
}

impl Ring {
    /// Must be created on the issuing thread: it is the one woken up by
    /// completions.
    pub(crate) fn new(
        clock: Arc<dyn Clock>,
        capacity: usize,
        events: mpsc::Sender<Event>,
        trace_first_tokens: bool,
    ) -> Self {
        let slots = (0..capacity.max(1)).map(|_| Slot::default()).collect();
        Self {
            shared: Arc::new(Shared {
                clock,
                slots,
                completed: AtomicU64::new(0),
                waiting: AtomicBool::new(false),
                issuer: thread::current(),
                aborted: AtomicBool::new(false),
                abort_reason: Mutex::new(None),
                events,
                trace_first_tokens,
                log_budget: Arc::default(),
            }),
        }
    }

    /// One timestamp is taken for the whole call, as the official LoadGen
    /// does.
    fn query_samples_complete(&self, responses: &[QuerySampleResponse<'_>]) {
        let s = &*self.shared;
        let now = s.clock.now_ns();
        let mut batch = Vec::with_capacity(responses.len().min(CHUNK));
        let mut count = 0u64;
        for r in responses {
            match self.claim(r, now) {
                Ok(c) => {
                    batch.push(c);
                    count += 1;
                    if batch.len() == CHUNK {
                        let full = std::mem::replace(&mut batch, Vec::with_capacity(CHUNK));
                        let _ = s.events.send(Event::Completed(full));
                    }
                }
                Err(msg) => {
                    let _ = s.events.send(Event::Error(msg));
                }
            }
        }
        if !batch.is_empty() {
            let _ = s.events.send(Event::Completed(batch));
        }
        // Counted only after the records are queued, so the issuer never moves
        // on before the aggregator can see them.
        if count > 0 {
            s.completed.fetch_add(count, Ordering::SeqCst);
            if s.waiting.load(Ordering::SeqCst) {
                s.issuer.unpark();
            }
        }
    }

    fn first_token_complete(&self, responses: &[QuerySampleResponse<'_>]) {
        let s = &*self.shared;
        let now = s.clock.now_ns();
        for r in responses {
            let seq = r.id.wrapping_sub(1);
            let slot = &s.slots[(seq % s.slots.len() as u64) as usize];
            let tag = slot.tag.load(Ordering::Acquire);
            if r.id == 0 || tag_seq(tag) != r.id {
                let _ = s
                    .events
                    .send(Event::Error(unknown_id_message(r.id, tag_seq(tag))));
                continue;
            }
            if tag & DONE != 0 {
                let _ = s.events.send(Event::Error(
                    "Attempted to record token latency after sample was completed".into(),
                ));
                continue;
            }
            let _ = slot.first_token_ns.compare_exchange(
                0,
                now + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
            let logged = tag & LOG != 0;
            if logged || s.trace_first_tokens {
                let data = logged.then(|| r.data.into());
                let _ = s.events.send(Event::FirstToken {
                    seq,
                    at_ns: now,
                    data,
                });
            }
        }
    }

    fn abort(&self, reason: String) {
        let s = &*self.shared;
        if let Ok(mut r) = s.abort_reason.lock() {
            if r.is_none() {
                *r = Some(reason);
            }
        }
        s.aborted.store(true, Ordering::SeqCst);
        s.issuer.unpark();
    }

    fn claim(&self, r: &QuerySampleResponse<'_>, now: i64) -> Result<Completed, String> {
        let s = &*self.shared;
        let seq = r.id.wrapping_sub(1);
        let slot = &s.slots[(seq % s.slots.len() as u64) as usize];
        loop {
            let tag = slot.tag.load(Ordering::Acquire);
            if r.id == 0 || tag_seq(tag) != r.id {
                return Err(unknown_id_message(r.id, tag_seq(tag)));
            }
            if tag & DONE != 0 {
                return Err("Attempted to complete a sample twice.".into());
            }
            // Read before claiming: once claimed the issuer may reuse the slot.
            let c = Completed {
                seq,
                query_seq: slot.query_seq.load(Ordering::Relaxed),
                index: slot.index.load(Ordering::Relaxed) as usize,
                scheduled_ns: slot.scheduled_ns.load(Ordering::Relaxed),
                issued_ns: slot.issued_ns.load(Ordering::Relaxed),
                completed_ns: now,
                first_token_ns: match slot.first_token_ns.load(Ordering::Acquire) {
                    0 => None,
                    t => Some(t - 1),
                },
                n_tokens: r.n_tokens,
                data: (tag & LOG != 0).then(|| s.log_budget.take(r.data)),
            };
            if slot
                .tag
                .compare_exchange(tag, tag | DONE, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Ok(c);
            }
        }
    }

    // ---- issuing side (engine only) ----

    /// Fills the slot of sample `seq`; returns its response id. Waits while
    /// the slot still holds an unfinished sample (more than `capacity` samples
    /// outstanding); the wait counts in the latency, as it should.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn publish(
        &self,
        seq: u64,
        index: QuerySampleIndex,
        query_seq: u64,
        scheduled_ns: i64,
        issued_ns: i64,
        log: bool,
    ) -> ResponseId {
        let s = &*self.shared;
        let slot = &s.slots[(seq % s.slots.len() as u64) as usize];
        let free = || {
            let tag = slot.tag.load(Ordering::Acquire);
            tag == 0 || tag & DONE != 0 || self.aborted()
        };
        let mut spins = 0u32;
        while !free() {
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else if !self.wait_for_completion(&free) {
                // A virtual clock with nothing scheduled: only a thread of
                // the SUT's own can still free the slot.
                thread::yield_now();
            }
        }
        slot.scheduled_ns.store(scheduled_ns, Ordering::Relaxed);
        slot.issued_ns.store(issued_ns, Ordering::Relaxed);
        slot.first_token_ns.store(0, Ordering::Relaxed);
        slot.index.store(index as u64, Ordering::Relaxed);
        slot.query_seq.store(query_seq, Ordering::Relaxed);
        let id = seq + 1;
        slot.tag
            .store(id << 2 | (log as u64) << 1, Ordering::Release);
        id
    }

    /// Number of samples completed since the test started.
    #[inline]
    pub(crate) fn completed(&self) -> u64 {
        self.shared.completed.load(Ordering::SeqCst)
    }

    pub(crate) fn aborted(&self) -> bool {
        self.shared.aborted.load(Ordering::Relaxed)
    }

    pub(crate) fn abort_reason(&self) -> Option<String> {
        if !self.shared.aborted.load(Ordering::SeqCst) {
            return None;
        }
        self.shared.abort_reason.lock().ok().and_then(|r| r.clone())
    }

    /// Blocks until `target` samples have completed in total; false if the run
    /// was aborted first. Spins briefly (fast SUTs answer within
    /// microseconds), then parks until a completion wakes it.
    pub(crate) fn wait_for(&self, target: u64) -> bool {
        let s = &*self.shared;
        let mut spins = 0u32;
        loop {
            if s.completed.load(Ordering::SeqCst) >= target {
                return true;
            }
            if s.aborted.load(Ordering::SeqCst) {
                return false;
            }
            if spins < 200 {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            if !self.wait_for_completion(&|| s.completed.load(Ordering::SeqCst) >= target) {
                // A virtual clock with nothing left to happen.
                return s.completed.load(Ordering::SeqCst) >= target;
            }
        }
    }

    /// The issuer's wait for the next completion or abort, unless `ready`
    /// already holds. It goes through the clock, so that a virtual clock runs
    /// the completions scheduled meanwhile. False when none can ever come.
    fn wait_for_completion(&self, ready: &dyn Fn() -> bool) -> bool {
        let s = &*self.shared;
        s.waiting.store(true, Ordering::SeqCst);
        // A completion counted after this load sees `waiting` and unparks us,
        // so the wait returns at once; one counted before it is seen by
        // `ready`.
        s.completed.load(Ordering::SeqCst);
        let more = ready() || s.aborted.load(Ordering::SeqCst) || s.clock.wait_for_event();
        s.waiting.store(false, Ordering::SeqCst);
        more
    }

    pub(crate) fn send(&self, e: Event) {
        let _ = self.shared.events.send(e);
    }
}

fn unknown_id_message(id: ResponseId, slot_holds: u64) -> String {
    if id != 0 && slot_holds > id {
        "Attempted to complete a sample twice.".to_string()
    } else {
        format!("Received a response with an unknown response id {id}.")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{MonoClock, VirtualClock};

    fn ring(capacity: usize) -> (Ring, mpsc::Receiver<Event>) {
        let (tx, rx) = mpsc::channel();
        (
            Ring::new(Arc::new(MonoClock::start()), capacity, tx, false),
            rx,
        )
    }

    /// Publishes sample `seq` (index `seq * 10`, accuracy-logged) and returns
    /// its response id.
    fn publish(r: &Ring, seq: u64) -> ResponseId {
        r.publish(seq, seq as usize * 10, seq, 0, 0, true)
    }

    fn complete(r: &Ring, id: ResponseId) {
        Completer::from(r.clone())
            .query_samples_complete(&[QuerySampleResponse::new(id, &[id as u8])]);
    }

    /// A completed sample as the tests compare it: (seq, index, data).
    type Done = (u64, usize, Vec<u8>);

    /// (completed samples, error messages), in order.
    fn drain(rx: &mpsc::Receiver<Event>) -> (Vec<Done>, Vec<String>) {
        let (mut done, mut errors) = (Vec::new(), Vec::new());
        while let Ok(e) = rx.try_recv() {
            match e {
                Event::Completed(batch) => done.extend(batch.into_iter().map(|c| {
                    (
                        c.seq,
                        c.index,
                        c.data.as_deref().map(Vec::from).unwrap_or_default(),
                    )
                })),
                Event::Error(m) => errors.push(m),
                _ => {}
            }
        }
        (done, errors)
    }

    #[test]
    fn slots_are_reused_after_wrap_around_with_each_sample_s_own_record() {
        let (r, rx) = ring(4);
        for round in 0..3u64 {
            let ids: Vec<_> = (round * 4..round * 4 + 4).map(|s| publish(&r, s)).collect();
            // Completed out of order.
            for &id in ids.iter().rev() {
                complete(&r, id);
            }
        }
        assert_eq!(r.completed(), 12);
        let (mut done, errors) = drain(&rx);
        assert!(errors.is_empty(), "{errors:?}");
        done.sort();
        let want: Vec<_> = (0..12u64)
            .map(|s| (s, s as usize * 10, vec![(s + 1) as u8]))
            .collect();
        assert_eq!(done, want);
    }

    #[test]
    fn duplicate_stale_and_unknown_ids_are_errors_and_count_nothing() {
        let (r, rx) = ring(2);
        let first = publish(&r, 0);
        complete(&r, first);
        complete(&r, first); // duplicate while the slot still holds it
        publish(&r, 1);
        let reused = publish(&r, 2); // takes the slot `first` had
        complete(&r, first); // stale: the slot holds a newer sample
        complete(&r, 1000); // never issued
        complete(&r, 0); // never a valid id
        assert_eq!(r.completed(), 1);
        let (done, errors) = drain(&rx);
        assert_eq!(done.len(), 1);
        assert_eq!(
            errors,
            [
                "Attempted to complete a sample twice.",
                "Attempted to complete a sample twice.",
                "Received a response with an unknown response id 1000.",
                "Received a response with an unknown response id 0.",
            ]
        );
        // The reused slot still completes normally.
        complete(&r, reused);
        assert_eq!(r.completed(), 2);
    }

    #[test]
    fn a_first_token_after_completion_is_an_error() {
        let (r, rx) = ring(2);
        let id = publish(&r, 0);
        let c = Completer::from(r.clone());
        c.first_token_complete(&[QuerySampleResponse::new(id, b"t")]);
        complete(&r, id);
        c.first_token_complete(&[QuerySampleResponse::new(id, b"t")]);
        let (done, errors) = drain(&rx);
        assert_eq!(done.len(), 1);
        assert_eq!(
            errors,
            ["Attempted to record token latency after sample was completed"]
        );
    }

    #[test]
    fn abort_releases_an_issuer_waiting_for_a_full_ring_and_keeps_the_first_reason() {
        let (r, _rx) = ring(1);
        publish(&r, 0); // never completed: the only slot stays busy
        let issuer = {
            let r = r.clone();
            // Blocks in publish until the slot frees or the run is aborted.
            thread::spawn(move || publish(&r, 1))
        };
        let c = Completer::from(r.clone());
        c.abort("node gone".into());
        c.abort("later".into());
        assert_eq!(issuer.join().expect("issuer thread"), 2);
        assert!(r.aborted());
        assert_eq!(r.abort_reason().as_deref(), Some("node gone"));
        assert!(!r.wait_for(5), "waiting after an abort returns at once");
    }

    #[test]
    fn a_full_ring_waits_in_virtual_time_for_the_completion_that_frees_its_slot() {
        let clock = Arc::new(VirtualClock::new());
        let (tx, rx) = mpsc::channel();
        let r = Ring::new(clock.clone(), 2, tx, false);
        let first = publish(&r, 0);
        publish(&r, 1);
        let c = Completer::from(r.clone());
        clock.schedule(5_000, move || {
            c.query_samples_complete(&[QuerySampleResponse::new(first, &[])])
        });
        // Sample 2 needs the slot of sample 0, freed at 5 us.
        assert_eq!(publish(&r, 2), 3);
        assert_eq!(clock.now_ns(), 5_000);
        assert_eq!(r.completed(), 1);
        let (done, errors) = drain(&rx);
        assert_eq!((done.len(), errors.len()), (1, 0));
    }

    #[test]
    fn a_completion_from_another_thread_wakes_the_waiting_issuer() {
        let (r, _rx) = ring(8);
        let ids: Vec<_> = (0..8).map(|s| publish(&r, s)).collect();
        let completer = Completer::from(r.clone());
        let worker = thread::spawn(move || {
            for id in ids {
                completer.query_samples_complete(&[QuerySampleResponse::new(id, &[])]);
            }
        });
        assert!(r.wait_for(8));
        worker.join().expect("worker");
        assert_eq!(r.completed(), 8);
    }

    #[test]
    fn a_sink_completer_forwards_every_call() {
        #[derive(Default)]
        struct Counting(Mutex<(usize, usize, Vec<String>)>);
        impl CompletionSink for Counting {
            fn query_samples_complete(&self, r: &[QuerySampleResponse<'_>]) {
                self.0.lock().unwrap().0 += r.len();
            }
            fn first_token_complete(&self, r: &[QuerySampleResponse<'_>]) {
                self.0.lock().unwrap().1 += r.len();
            }
            fn abort(&self, reason: String) {
                self.0.lock().unwrap().2.push(reason);
            }
        }
        let sink = Arc::new(Counting::default());
        let c = Completer::to_sink(sink.clone());
        let other = Completer::to_sink(Arc::new(Counting::default()));
        assert!(c.same_test(&c.clone()) && !c.same_test(&other));
        c.query_samples_complete(&[
            QuerySampleResponse::new(7, b"a"),
            QuerySampleResponse::new(8, b"b"),
        ]);
        c.first_token_complete(&[QuerySampleResponse::new(7, b"a")]);
        c.abort("x".into());
        assert_eq!(*sink.0.lock().unwrap(), (2, 1, vec!["x".to_string()]));
    }
}
