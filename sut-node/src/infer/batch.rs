//! The hand-off to the batcher and back: a sample on its way through the
//! batcher (`Job`), and the batcher's worker, which runs each batch through
//! the backend and delivers each output to the outbox of the stream its
//! sample came from. `batch_runner` runs on the batcher's worker thread;
//! it touches the streams' outboxes (under their locks), the budgets'
//! shares the samples hold, and the node's figures.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tracing::error;

use super::budget::{HeldBudgets, Permits};
use super::outbox::{mono_ns, Reply, Timing};
use crate::backend::{Backend, BatchInfo, Output, SampleFailure, SampleSink};
use crate::batcher::Turn;
use crate::metrics::{Batches, NODE as METRICS};

/// A sample on its way through the batcher.
pub(crate) struct Job {
    pub(super) id: u64,
    pub(super) input: Bytes,
    pub(super) reply: Arc<Reply>,
    /// Its share of the node's and its connection's decoded-bytes budgets,
    /// given back once it has run (with the rest of its group of batches).
    pub(super) budget: Option<Permits>,
    /// When the reader had its message: the start of the node's time.
    pub(super) received: std::time::Instant,
    /// The trace it continues, when the LoadGen node traces it.
    pub(super) trace: Option<Box<crate::otlp::SampleTrace>>,
}

/// A sample costs the worker about its input's bytes (those of the
/// synthetic backend, the copies and pre-processing of real ones).
impl crate::batcher::Weighed for Job {
    fn weight(&self) -> u64 {
        self.input.len() as u64
    }
}

/// The batcher's worker: runs a batch through the backend and delivers each
/// output to the stream its sample came from.
pub(super) fn batch_runner(
    backend: Arc<dyn Backend>,
    outstanding: Arc<AtomicU64>,
) -> impl FnMut(&mut Vec<Job>, Turn) + Send + 'static {
    let mut inputs: Vec<Bytes> = Vec::new();
    let mut modes: Vec<crate::backend::RunMode> = Vec::new();
    let mut answered: Vec<bool> = Vec::new();
    // When the last batch was ready: a batch run back to back with it
    // starts then (or when its last sample came, if later), which saves a
    // clock read per batch when busy.
    let mut last_ready = std::time::Instant::now();
    mono_ns(last_ready); // the epoch, before any sample
    let mut batches = Batches::default();
    let mut held = HeldBudgets::default();
    move |jobs: &mut Vec<Job>, Turn { back_to_back, more }| {
        inputs.clear();
        inputs.extend(jobs.iter_mut().map(|job| std::mem::take(&mut job.input)));
        modes.clear();
        modes.extend(jobs.iter().map(|job| job.reply.mode));
        answered.clear();
        answered.resize(jobs.len(), false);
        let started = if back_to_back {
            jobs.iter().map(|j| j.received).fold(last_ready, Ord::max)
        } else {
            std::time::Instant::now()
        };
        let mut sink = Sink {
            jobs,
            answered: &mut answered,
            outstanding: &outstanding,
            started,
        };
        let info = BatchInfo {
            back_to_back,
            modes: &modes,
        };
        let result = catch_unwind(AssertUnwindSafe(|| backend.infer(&inputs, info, &mut sink)));
        let ready = std::time::Instant::now();
        last_ready = ready;
        batches.batch(jobs.len(), ready.saturating_duration_since(started));
        let answered = &answered[..];
        let failure = match result {
            Ok(Ok(outputs)) if outputs.len() == jobs.len() => {
                deliver(jobs, answered, outputs.into_iter(), started, ready);
                None
            }
            Ok(Ok(outputs)) => Some(SampleFailure::Miscounted {
                returned: outputs.len(),
                batch: jobs.len(),
            }),
            Ok(Err(e)) => Some(SampleFailure::Batch(e)),
            Err(_) => Some(SampleFailure::Panicked),
        };
        if let Some(failure) = failure {
            error!("batch of {} samples failed: {failure}", jobs.len());
            deliver(
                jobs,
                answered,
                std::iter::repeat_with(|| Err(failure.clone())),
                started,
                ready,
            );
        }
        let late = answered.iter().filter(|a| !**a).count();
        outstanding.fetch_sub(late as u64, Ordering::Relaxed);
        for permits in jobs.iter_mut().filter_map(|job| job.budget.take()) {
            held.keep(permits);
        }
        // The figures and the budgets' shares go back once the group of
        // batches ends (groups form only of fast batches).
        if !more {
            held.give_back();
            METRICS.add_batches(&mut batches);
        }
    }
}

/// Appends each job's output to its stream's outbox, locking each stream
/// once per run of consecutive jobs from it, and wakes the writers. Jobs
/// already answered (`answered[i]`) are skipped, their outputs dropped.
fn deliver(
    jobs: &[Job],
    answered: &[bool],
    outputs: impl Iterator<Item = Output>,
    started: std::time::Instant,
    ready: std::time::Instant,
) {
    let mut outputs = jobs.iter().zip(answered).zip(outputs).peekable();
    while let Some(&((first, _), _)) = outputs.peek() {
        let reply = &first.reply;
        let mut outbox = reply.lock();
        let mut added = 0;
        let same_stream = |((job, _), _): &((&Job, &bool), Output)| Arc::ptr_eq(&job.reply, reply);
        while let Some(((job, &sent), output)) = outputs.next_if(same_stream) {
            if !sent {
                let timing = Timing::of(job.received, started, ready);
                if let Some(t) = &job.trace {
                    let t = crate::otlp::batched(t, job.id, started, ready, jobs.len());
                    outbox.traced.push(t);
                }
                added += outbox.push_output(job.id, output, timing);
                outbox.pending = outbox.pending.saturating_sub(1);
            }
        }
        drop(outbox);
        reply.produced(added);
        reply.wake.notify_one();
    }
}

/// Sends a batch's first tokens, and the answers a backend has early, to
/// their streams right away.
struct Sink<'a> {
    jobs: &'a [Job],
    /// Samples answered through `answer_now`.
    answered: &'a mut [bool],
    outstanding: &'a AtomicU64,
    /// When the batch started.
    started: std::time::Instant,
}

impl SampleSink for Sink<'_> {
    fn first_token(&mut self, index: usize, payload: Bytes) {
        if let Some(job) = self.jobs.get(index) {
            let added = job.reply.lock().push_first_token(job.id, payload);
            job.reply.produced(added);
            job.reply.wake.notify_one();
        }
    }

    fn answer_now(&mut self, index: usize, output: &Output) {
        let (Some(job), Some(answered)) = (self.jobs.get(index), self.answered.get_mut(index))
        else {
            return;
        };
        if std::mem::replace(answered, true) {
            return; // sent already
        }
        {
            let mut outbox = job.reply.lock();
            let now = std::time::Instant::now();
            let timing = Timing::of(job.received, self.started, now);
            if let Some(t) = &job.trace {
                let t = crate::otlp::batched(t, job.id, self.started, now, self.jobs.len());
                outbox.traced.push(t);
            }
            let added = outbox.push_output(job.id, output.clone(), timing);
            outbox.pending = outbox.pending.saturating_sub(1);
            drop(outbox);
            job.reply.produced(added);
        }
        job.reply.wake.notify_one();
        self.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infer::outbox::nanos;

    fn answer(id: u64, len: usize) -> Output {
        Ok(crate::backend::Answer {
            payload: Bytes::from(vec![id as u8; len]),
            n_tokens: 0,
        })
    }

    /// Answers sample 0 early (twice: the second is ignored), checks it is in
    /// the outbox while the batch still runs, then returns both outputs.
    struct EarlyFirst(Arc<Reply>);

    impl Backend for EarlyFirst {
        fn name(&self) -> &str {
            "early-first"
        }
        fn warm_up(&self) -> Result<(), crate::backend::BackendError> {
            Ok(())
        }
        fn infer(
            &self,
            _: &[Bytes],
            _: BatchInfo,
            sink: &mut dyn SampleSink,
        ) -> Result<Vec<Output>, crate::backend::BackendError> {
            sink.answer_now(0, &answer(10, 1));
            sink.answer_now(0, &answer(10, 1));
            let early: Vec<u64> = self.0.lock().answers.iter().map(|a| a.id).collect();
            assert_eq!(early, [10], "sample 0 is answered before the batch ends");
            Ok(vec![answer(10, 1), answer(11, 1)])
        }
    }

    #[test]
    fn answers_sent_early_leave_before_the_batch_ends_and_only_once() {
        let reply = Arc::new(Reply::default());
        reply.lock().pending = 2;
        let outstanding = Arc::new(AtomicU64::new(2));
        let mut run = batch_runner(
            Arc::new(EarlyFirst(Arc::clone(&reply))),
            Arc::clone(&outstanding),
        );
        let job = |id| Job {
            id,
            input: Bytes::from_static(b"x"),
            reply: Arc::clone(&reply),
            budget: None,
            received: std::time::Instant::now(),
            trace: None,
        };
        run(
            &mut vec![job(10), job(11)],
            Turn {
                back_to_back: false,
                more: false,
            },
        );
        let outbox = reply.lock();
        let ids: Vec<u64> = outbox.answers.iter().map(|a| a.id).collect();
        assert_eq!(ids, [10, 11]);
        assert_eq!(outbox.pending, 0);
        assert_eq!(outstanding.load(Ordering::Relaxed), 0);
    }

    /// Answers each sample at once.
    struct Echo;

    impl Backend for Echo {
        fn name(&self) -> &str {
            "echo"
        }
        fn warm_up(&self) -> Result<(), crate::backend::BackendError> {
            Ok(())
        }
        fn infer(
            &self,
            inputs: &[Bytes],
            _: BatchInfo,
            _: &mut dyn SampleSink,
        ) -> Result<Vec<Output>, crate::backend::BackendError> {
            Ok(inputs.iter().map(|_| answer(1, 1)).collect())
        }
    }

    #[test]
    fn timings_count_from_receipt_to_start_to_ready() {
        let received = std::time::Instant::now();
        let ms = std::time::Duration::from_millis;
        let timing = Timing::of(received, received + ms(10), received + ms(30));
        let reply = Reply::default();
        let added = reply.lock().push_output(1, answer(1, 1), timing);
        assert!(added > 0);
        let mut messages = std::collections::VecDeque::new();
        reply.lock().take_into(&mut messages);
        let a = &messages[0].answers[0];
        assert_eq!(
            (a.node_queue_ns, a.node_compute_ns),
            (10_000_000, 20_000_000)
        );
        // Until sent: when the output was ready, on the node's own scale.
        assert_eq!(a.node_send_ns, mono_ns(received + ms(30)));
    }

    #[test]
    fn answers_carry_the_nodes_timings() {
        let reply = Arc::new(Reply::default());
        reply.lock().pending = 1;
        let mut run = batch_runner(Arc::new(Echo), Arc::new(AtomicU64::new(1)));
        let received = std::time::Instant::now() - std::time::Duration::from_millis(10);
        let before = std::time::Instant::now();
        run(
            &mut vec![Job {
                id: 1,
                input: Bytes::from_static(b"x"),
                reply: Arc::clone(&reply),
                budget: None,
                received,
                trace: None,
            }],
            Turn {
                back_to_back: false,
                more: false,
            },
        );
        let after = std::time::Instant::now();
        let mut messages = std::collections::VecDeque::new();
        reply.lock().take_into(&mut messages);
        let a = &messages[0].answers[0];
        // The batch started and ended between `before` and `after`.
        let span = nanos(after - before);
        assert!(a.node_queue_ns >= 10_000_000, "{}", a.node_queue_ns);
        assert!(a.node_compute_ns <= span, "{} > {span}", a.node_compute_ns);
        assert!(
            (mono_ns(before)..=mono_ns(after)).contains(&a.node_send_ns),
            "{}",
            a.node_send_ns
        );
    }
}
