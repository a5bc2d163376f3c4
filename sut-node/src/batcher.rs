//! Dynamic batching, independent of any backend.
//!
//! Jobs from any number of streams queue up; one dedicated worker thread
//! takes up to `max_batch_size` of them at a time and runs them. While the
//! worker is busy, jobs accumulate, so the next batch is as full as the load
//! allows. With a partial batch the worker waits until the oldest job has
//! waited `max_wait` (or the batch fills) before running it.
//!
//! The queue is mutex-protected deques rather than a channel so that a
//! submitter pushes a whole chunk of jobs, and the worker takes a whole
//! batch, under one lock each. The queue holds at most `capacity` jobs:
//! `submit` waits for room, which pushes back on the network stream.
//!
//! Jobs are queued by source (the node's connections), and a batch takes
//! each next job from the source whose jobs, that one included, weigh least
//! (a job's weight is what it costs the worker, roughly: a sample's input
//! bytes), counted from when the source last had jobs queued: sources of
//! equal jobs take turns, one job each, and a client that floods the node,
//! or sends inputs far larger than another's, delays that other's samples
//! by about one job of its own, not by its whole backlog nor by one job of
//! every other busy client.
//!
//! When batches run fast (under `FAST_BATCH` each) and several full ones
//! are queued, the worker takes up to `GROUP_JOBS` jobs' worth of them under
//! one lock and runs them one after the other: with small batches (one
//! sample each, say) the queue's lock and room are then paid once per group
//! rather than once per batch, and another source's job waits behind a
//! group (at most about a millisecond) rather than one batch. `run` is told
//! whether more batches of the group follow, so that it can put off its own
//! bookkeeping until the group ends.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use thiserror::Error;
use tokio::sync::Semaphore;

/// How jobs are grouped into batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchPolicy {
    /// At least 1.
    pub max_batch_size: usize,
    /// How long a job may wait for its batch to fill; zero: run what is
    /// queued as soon as the worker is free.
    pub max_wait: Duration,
}

/// At most this many jobs (whole batches, at least one) are taken from the
/// queue at once, when batches run fast.
const GROUP_JOBS: usize = 64;
/// Batches that took less than this each, on average over their group, are
/// fast: the next group may hold several.
const FAST_BATCH: Duration = Duration::from_micros(20);

/// Where a batch stands among the batches run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    /// Ready when the previous batch finished, so the worker went straight
    /// on to it without waiting (as on a fully busy accelerator).
    pub back_to_back: bool,
    /// More batches, already taken from the queue, follow at once.
    pub more: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("the batcher is closed")]
pub(crate) struct Closed;

/// What a job costs the worker, roughly, in any unit all jobs share: the
/// sources share the worker by it.
pub(crate) trait Weighed {
    fn weight(&self) -> u64;
}

pub(crate) struct Batcher<J> {
    shared: Arc<Shared<J>>,
    capacity: usize,
}

struct Shared<J> {
    state: Mutex<State<J>>,
    /// Signalled when the idle worker has something to do.
    work: Condvar,
    /// Free room in the queue, in jobs.
    room: Semaphore,
    policy: BatchPolicy,
    /// Set with `State::closed`, read between the batches of a group.
    closed: AtomicBool,
    /// The clock the rules are handed: `Instant::now` but in tests.
    clock: fn() -> Instant,
}

struct State<J> {
    /// The sources with jobs queued, in the order they came.
    sources: VecDeque<Source<J>>,
    /// The weight taken from the source served last, before that job:
    /// where a source that starts queueing begins.
    now: u64,
    /// Jobs queued, all sources together.
    queued: usize,
    closed: bool,
    /// The worker waits on `work`: only then do submitters signal it.
    worker_waiting: bool,
}

/// One source's jobs, oldest first, with when each was queued.
struct Source<J> {
    id: u64,
    jobs: VecDeque<(Instant, J)>,
    /// The weight of its jobs taken so far.
    taken: u64,
}

impl<J> Shared<J> {
    fn lock(&self) -> MutexGuard<'_, State<J>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<J: Weighed> State<J> {
    fn push(&mut self, source: u64, now: Instant, jobs: impl ExactSizeIterator<Item = J>) {
        self.queued += jobs.len();
        let queued = jobs.map(|job| (now, job));
        match self.sources.iter_mut().find(|s| s.id == source) {
            Some(s) => {
                if s.jobs.is_empty() {
                    // Time without jobs earns nothing.
                    s.taken = s.taken.max(self.now);
                }
                s.jobs.extend(queued)
            }
            None => self.sources.push_back(Source {
                id: source,
                jobs: queued.collect(),
                taken: self.now,
            }),
        }
    }

    /// When the job that has waited longest was queued.
    fn oldest(&self) -> Option<Instant> {
        self.sources
            .iter()
            .filter_map(|s| s.jobs.front().map(|(at, _)| *at))
            .min()
    }

    /// Moves up to `n` jobs into `batch`, each the next of the source whose
    /// jobs, that one included, weigh least (the first of them in line).
    fn take(&mut self, n: usize, batch: &mut impl Extend<J>) {
        let n = n.min(self.queued);
        self.queued -= n;
        if self.sources.len() == 1 {
            // The common case, one client: its jobs in order, in one go.
            // Its queue stays, empty, for its next jobs (no allocation).
            let only = &mut self.sources[0].jobs;
            batch.extend(only.drain(..n).map(|(_, job)| job));
            return;
        }
        // Sources left empty by the case above are dropped here.
        self.sources.retain(|s| !s.jobs.is_empty());
        let mut taken = 0;
        while taken < n {
            // The source that would have taken least once its next job is
            // taken: a light job goes before heavy ones that tie with it.
            let lightest = self
                .sources
                .iter()
                .enumerate()
                .filter_map(|(i, s)| {
                    let (_, next) = s.jobs.front()?;
                    Some((s.taken.saturating_add(next.weight()), i))
                })
                .min()
                .map(|(_, i)| i);
            let Some(source) = lightest.and_then(|i| self.sources.get_mut(i)) else {
                break;
            };
            let Some((_, job)) = source.jobs.pop_front() else {
                break;
            };
            self.now = self.now.max(source.taken);
            source.taken = source.taken.saturating_add(job.weight());
            batch.extend(Some(job));
            taken += 1;
        }
    }
}

impl<J: Weighed + Send + 'static> Batcher<J> {
    /// Starts the worker thread, which calls `run` with each batch (never
    /// empty) and its `Turn`. `run` may drain the batch; whatever it leaves
    /// is dropped.
    pub fn start(
        policy: BatchPolicy,
        capacity: usize,
        run: impl FnMut(&mut Vec<J>, Turn) + Send + 'static,
    ) -> std::io::Result<Self> {
        Self::start_with_clock(policy, capacity, run, Instant::now)
    }

    fn start_with_clock(
        policy: BatchPolicy,
        capacity: usize,
        run: impl FnMut(&mut Vec<J>, Turn) + Send + 'static,
        clock: fn() -> Instant,
    ) -> std::io::Result<Self> {
        let policy = BatchPolicy {
            max_batch_size: policy.max_batch_size.max(1),
            ..policy
        };
        // Bounded so that any chunk's permit count fits the semaphore's u32.
        let capacity = capacity.clamp(1, 1 << 30);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                sources: VecDeque::new(),
                now: 0,
                queued: 0,
                closed: false,
                worker_waiting: false,
            }),
            work: Condvar::new(),
            room: Semaphore::new(capacity),
            policy,
            closed: AtomicBool::new(false),
            clock,
        });
        let worker = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("sut-node-batcher".into())
            .spawn(move || work(&worker, run))?;
        Ok(Self { shared, capacity })
    }

    /// Queues all of `jobs` from `source` (leaving it empty), waiting for
    /// room in the queue as needed. Cancel-safe: if the future is dropped,
    /// or the batcher is closed, the jobs not yet queued are left in `jobs`.
    pub async fn submit(&self, source: u64, jobs: &mut Vec<J>) -> Result<(), Closed> {
        while !jobs.is_empty() {
            let n = jobs.len().min(self.capacity);
            let permits = u32::try_from(n).map_err(|_| Closed)?;
            self.shared
                .room
                .acquire_many(permits)
                .await
                .map_err(|_| Closed)?
                // Given back by the worker when it takes the jobs.
                .forget();
            let mut state = self.shared.lock();
            if state.closed {
                return Err(Closed);
            }
            let was_empty = state.queued == 0;
            state.push(source, (self.shared.clock)(), jobs.drain(..n));
            // A worker waiting on a partial batch only cares once it is full.
            let full = state.queued >= self.shared.policy.max_batch_size;
            if state.worker_waiting && (was_empty || full) {
                self.shared.work.notify_one();
            }
        }
        Ok(())
    }
}

impl<J> Batcher<J> {
    /// Stops the worker after its current batch; queued jobs (those of its
    /// group included) are dropped and submitters get `Closed`.
    pub fn close(&self) {
        close(&self.shared);
    }
}

impl<J> Drop for Batcher<J> {
    fn drop(&mut self) {
        close(&self.shared);
    }
}

fn close<J>(shared: &Shared<J>) {
    let mut state = shared.lock();
    state.closed = true;
    shared.closed.store(true, Ordering::Relaxed);
    state.sources.clear();
    state.queued = 0;
    shared.room.close();
    shared.work.notify_one();
}

fn work<J: Weighed>(shared: &Shared<J>, mut run: impl FnMut(&mut Vec<J>, Turn)) {
    let mut rules = Rules::new(shared.policy);
    let max_batch_size = rules.max_batch_size;
    let mut group: VecDeque<J> = VecDeque::with_capacity(rules.fast_group * max_batch_size);
    let mut batch = Vec::with_capacity(max_batch_size);
    // Whether the next batch follows the previous one without a wait.
    let mut back_to_back = false;
    loop {
        let mut state = shared.lock();
        loop {
            if state.closed {
                return;
            }
            let timeout = match rules.wait(state.queued, state.oldest(), shared.clock) {
                Wait::Run => break,
                Wait::ForJobs => None,
                Wait::Until(at) => Some(at.saturating_duration_since((shared.clock)())),
            };
            state.worker_waiting = true;
            back_to_back = false;
            state = match timeout {
                None => shared
                    .work
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(t) => {
                    let waited = shared.work.wait_timeout(state, t);
                    waited.unwrap_or_else(PoisonError::into_inner).0
                }
            };
            state.worker_waiting = false;
        }
        let n = rules.group_jobs(state.queued);
        state.take(n, &mut group);
        drop(state);
        shared.room.add_permits(n);
        let started = (shared.clock)();
        while !group.is_empty() {
            if shared.closed.load(Ordering::Relaxed) {
                return;
            }
            let size = group.len().min(max_batch_size);
            batch.extend(group.drain(..size));
            let more = !group.is_empty();
            run(&mut batch, Turn { back_to_back, more });
            batch.clear();
            back_to_back = true;
        }
        rules.group_ran(n, (shared.clock)().saturating_duration_since(started));
    }
}

/// What the worker does next (see `Rules::wait`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Take a batch (or a group of them) now.
    Run,
    /// Wait for a partial batch to fill until then, or for more jobs.
    Until(Instant),
    /// Nothing is queued: wait for jobs.
    ForJobs,
}

/// The worker's timing rules, handed the time: when a batch is cut (full,
/// or its oldest job has waited `max_wait`), and how many jobs a group
/// takes (whole batches, several while batches run fast).
#[derive(Debug)]
struct Rules {
    max_batch_size: usize,
    max_wait: Duration,
    /// Whole batches per group while batches are fast: at least one.
    fast_group: usize,
    /// Whole batches the next group may take.
    group_batches: usize,
}

impl Rules {
    fn new(policy: BatchPolicy) -> Self {
        let max_batch_size = policy.max_batch_size.max(1);
        Self {
            max_batch_size,
            max_wait: policy.max_wait,
            fast_group: (GROUP_JOBS / max_batch_size).max(1),
            group_batches: 1,
        }
    }

    /// With `queued` jobs, the oldest queued at `oldest`, at `now()`: a
    /// full batch runs; a partial one once its oldest job has waited
    /// `max_wait` (at once with no `max_wait`). The time is asked only for
    /// a partial batch with a wait, so a busy worker reads no clock here.
    fn wait(&self, queued: usize, oldest: Option<Instant>, now: impl FnOnce() -> Instant) -> Wait {
        if queued >= self.max_batch_size {
            return Wait::Run;
        }
        let Some(oldest) = oldest else {
            return Wait::ForJobs;
        };
        if self.max_wait.is_zero() {
            return Wait::Run;
        }
        let cut = oldest + self.max_wait;
        if now() >= cut {
            Wait::Run
        } else {
            Wait::Until(cut)
        }
    }

    /// How many of `queued` jobs the worker takes at once: up to the group's
    /// whole batches; a partial batch (it waited for its time) only alone,
    /// so that what is queued later still fills the next batches.
    fn group_jobs(&self, queued: usize) -> usize {
        match (queued / self.max_batch_size).min(self.group_batches) {
            0 => queued,
            full => full * self.max_batch_size,
        }
    }

    /// A group of `jobs` jobs took `took` to run: the next group takes
    /// `fast_group` batches if its batches were fast (under `FAST_BATCH`
    /// each, on average), else one.
    fn group_ran(&mut self, jobs: usize, took: Duration) {
        let batches = u32::try_from(jobs.div_ceil(self.max_batch_size)).unwrap_or(u32::MAX);
        let fast = took < FAST_BATCH.saturating_mul(batches);
        self.group_batches = if fast { self.fast_group } else { 1 };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::sync::mpsc;
    use std::task::{Context, Poll, Waker};

    const LONG: Duration = Duration::from_secs(10);

    /// Jobs of these tests weigh 1 below 1000, then 1 more per thousand.
    impl Weighed for u32 {
        fn weight(&self) -> u64 {
            u64::from(*self / 1000 + 1)
        }
    }

    fn rules(max_batch_size: usize, max_wait: Duration) -> Rules {
        Rules::new(policy(max_batch_size, max_wait))
    }

    /// `rules` after a group of fast batches.
    fn fast(mut rules: Rules) -> Rules {
        rules.group_ran(rules.max_batch_size, Duration::ZERO);
        rules
    }

    #[test]
    fn groups_take_whole_batches_and_a_partial_one_only_alone() {
        assert_eq!(fast(rules(1, Duration::ZERO)).group_jobs(200), 64);
        let eights = fast(rules(8, Duration::ZERO));
        assert_eq!(eights.group_jobs(200), 64);
        // Whole batches only: the 3 left over wait for more.
        assert_eq!(eights.group_jobs(19), 16);
        assert_eq!(eights.group_jobs(5), 5);
        // Slow batches (and before the first group): one at a time.
        assert_eq!(rules(8, Duration::ZERO).group_jobs(200), 8);
        assert_eq!(rules(100, Duration::ZERO).group_jobs(200), 100);
        // A batch larger than a group's jobs: groups of one batch.
        assert_eq!(fast(rules(100, Duration::ZERO)).group_jobs(200), 100);
    }

    #[test]
    fn only_fast_batches_make_the_next_group_larger() {
        let mut r = rules(1, Duration::ZERO);
        // 20 µs a batch is the boundary: ten batches in 200 µs are not fast.
        let limit = FAST_BATCH * 10;
        r.group_ran(10, limit - Duration::from_nanos(1));
        assert_eq!(r.group_batches, 64, "just under: fast");
        r.group_ran(10, limit);
        assert_eq!(r.group_batches, 1, "at the boundary: slow");
        r.group_ran(10, limit - Duration::from_nanos(1));
        r.group_ran(10, limit + Duration::from_nanos(1));
        assert_eq!(r.group_batches, 1, "over: slow");
        // Batches, not jobs, are counted: 2 batches of 8 jobs.
        let mut r = rules(8, Duration::ZERO);
        r.group_ran(16, FAST_BATCH * 2 - Duration::from_nanos(1));
        assert_eq!(r.group_batches, 8);
    }

    /// For rules that need no time: a busy worker reads no clock.
    fn no_clock() -> Instant {
        panic!("the rule asked for the time")
    }

    #[test]
    fn a_partial_batch_is_cut_max_wait_after_its_oldest_job() {
        let max_wait = Duration::from_millis(50);
        let r = rules(4, max_wait);
        let t0 = Instant::now();
        let cut = t0 + max_wait;
        let ns = Duration::from_nanos(1);
        assert_eq!(r.wait(0, None, no_clock), Wait::ForJobs);
        assert_eq!(r.wait(2, Some(t0), || t0), Wait::Until(cut));
        assert_eq!(
            r.wait(2, Some(t0), || cut - ns),
            Wait::Until(cut),
            "just before"
        );
        assert_eq!(r.wait(2, Some(t0), || cut), Wait::Run, "at the deadline");
        assert_eq!(r.wait(2, Some(t0), || cut + ns), Wait::Run, "after");
        // The oldest job counts, not the latest.
        assert_eq!(r.wait(3, Some(t0 + ns), || cut), Wait::Until(cut + ns));
    }

    #[test]
    fn a_full_batch_is_cut_at_once() {
        let r = rules(4, Duration::from_secs(3600));
        let t0 = Instant::now();
        assert_eq!(
            r.wait(3, Some(t0), || t0),
            Wait::Until(t0 + Duration::from_secs(3600))
        );
        assert_eq!(r.wait(4, Some(t0), no_clock), Wait::Run, "exactly full");
        assert_eq!(r.wait(5, Some(t0), no_clock), Wait::Run);
    }

    #[test]
    fn without_max_wait_what_is_queued_runs_at_once() {
        let r = rules(4, Duration::ZERO);
        let t0 = Instant::now();
        assert_eq!(r.wait(1, Some(t0), no_clock), Wait::Run);
        assert_eq!(r.wait(0, None, no_clock), Wait::ForJobs);
    }

    #[tokio::test]
    async fn every_job_runs_once_in_order_with_the_group_end_marked() {
        let policy = BatchPolicy {
            max_batch_size: 3,
            max_wait: Duration::ZERO,
        };
        let (tx, rx) = mpsc::channel();
        let batcher = Batcher::start(policy, 100_000, move |jobs: &mut Vec<u32>, turn: Turn| {
            let _ = tx.send((jobs.clone(), turn));
        })
        .unwrap();
        let mut jobs: Vec<u32> = (0..30_000).collect();
        batcher.submit(1, &mut jobs).await.unwrap();
        let mut seen = Vec::new();
        let mut last = None;
        while seen.len() < 30_000 {
            let (batch, turn) = rx.recv_timeout(LONG).unwrap();
            assert!(!batch.is_empty() && batch.len() <= 3, "{batch:?}");
            // After a batch with more to come, the next is back to back.
            if let Some(Turn { more: true, .. }) = last {
                assert!(turn.back_to_back);
            }
            seen.extend(batch);
            last = Some(turn);
        }
        assert_eq!(seen, (0..30_000).collect::<Vec<_>>());
        assert_eq!(
            last.map(|t| t.more),
            Some(false),
            "the last batch ends its group"
        );
    }

    /// A clock that moves a millisecond at each reading: every group of
    /// batches is slow, so the worker takes one batch at a time.
    fn slow_clock() -> Instant {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        static READINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let ms = READINGS.fetch_add(1, Ordering::Relaxed);
        *START.get_or_init(Instant::now) + Duration::from_millis(ms)
    }

    /// Each batch run, and whether it was back to back.
    type Batches = mpsc::Receiver<(Vec<u32>, bool)>;

    /// A batcher whose worker reports each batch, then blocks in `run`
    /// until the test opens the gate once.
    fn gated(policy: BatchPolicy, capacity: usize) -> (Batcher<u32>, Batches, mpsc::Sender<()>) {
        let (batches_tx, batches) = mpsc::channel();
        let (gate, gate_rx) = mpsc::channel::<()>();
        let run = move |jobs: &mut Vec<u32>, turn: Turn| {
            let _ = batches_tx.send((jobs.clone(), turn.back_to_back));
            let _ = gate_rx.recv();
        };
        let batcher = Batcher::start_with_clock(policy, capacity, run, slow_clock).unwrap();
        (batcher, batches, gate)
    }

    /// The next batch's jobs.
    fn jobs(batches: &Batches) -> Vec<u32> {
        batches.recv_timeout(LONG).unwrap().0
    }

    fn wait_until_idle<J>(batcher: &Batcher<J>) {
        let deadline = Instant::now() + LONG;
        while !batcher.shared.lock().worker_waiting {
            assert!(Instant::now() < deadline, "the worker never went idle");
            std::thread::yield_now();
        }
    }

    fn policy(max_batch_size: usize, max_wait: Duration) -> BatchPolicy {
        BatchPolicy {
            max_batch_size,
            max_wait,
        }
    }

    #[tokio::test]
    async fn jobs_queued_behind_a_busy_worker_form_full_batches() {
        let (batcher, batches, gate) = gated(policy(4, Duration::ZERO), 64);
        batcher.submit(0, &mut vec![0]).await.unwrap();
        assert_eq!(batches.recv_timeout(LONG).unwrap(), (vec![0], false));
        // The worker is blocked in `run`: these all queue up.
        let mut jobs: Vec<u32> = (1..=10).collect();
        batcher.submit(0, &mut jobs).await.unwrap();
        assert!(jobs.is_empty());
        for _ in 0..4 {
            gate.send(()).unwrap();
        }
        assert_eq!(
            batches.recv_timeout(LONG).unwrap(),
            (vec![1, 2, 3, 4], true)
        );
        assert_eq!(
            batches.recv_timeout(LONG).unwrap(),
            (vec![5, 6, 7, 8], true)
        );
        assert_eq!(batches.recv_timeout(LONG).unwrap(), (vec![9, 10], true));

        // Once the worker has had to wait, the next batch is not back to back.
        wait_until_idle(&batcher);
        batcher.submit(0, &mut vec![11]).await.unwrap();
        assert_eq!(batches.recv_timeout(LONG).unwrap(), (vec![11], false));
    }

    #[tokio::test]
    async fn sources_take_turns_within_a_batch() {
        let (batcher, batches, gate) = gated(policy(4, Duration::ZERO), 64);
        batcher.submit(9, &mut vec![0]).await.unwrap();
        assert_eq!(jobs(&batches), vec![0]);
        // While the worker is busy, a flood from source 1, two from source 2.
        batcher.submit(1, &mut (10..18).collect()).await.unwrap();
        batcher.submit(2, &mut vec![20, 21]).await.unwrap();
        gate.send(()).unwrap();
        assert_eq!(jobs(&batches), vec![10, 20, 11, 21]);
        gate.send(()).unwrap();
        assert_eq!(jobs(&batches), vec![12, 13, 14, 15]);
        // A newcomer gets its turn before the flood's rest.
        batcher.submit(3, &mut vec![30]).await.unwrap();
        gate.send(()).unwrap();
        assert_eq!(jobs(&batches), vec![30, 16, 17]);
    }

    #[tokio::test]
    async fn sources_of_heavy_jobs_delay_a_light_one_by_their_weight_not_their_turns() {
        let (batcher, batches, gate) = gated(policy(4, Duration::ZERO), 64);
        batcher.submit(9, &mut vec![0]).await.unwrap();
        assert_eq!(jobs(&batches), vec![0]);
        // Three sources of heavy jobs (weight 100 each), busy.
        for s in 1..=3u32 {
            let heavy = 99_000 + 100 * s;
            batcher
                .submit(u64::from(s), &mut (heavy..heavy + 8).collect())
                .await
                .unwrap();
        }
        gate.send(()).unwrap();
        assert_eq!(jobs(&batches), vec![99_100, 99_200, 99_300, 99_101]);
        // A source of light jobs comes: it starts where the heavy ones are,
        // and its jobs weigh little: all three go first. Taking turns
        // instead, it would have one job a batch, after one of each heavy
        // source.
        batcher.submit(4, &mut vec![1, 2, 3]).await.unwrap();
        gate.send(()).unwrap();
        assert_eq!(jobs(&batches), vec![1, 2, 3, 99_201]);
        gate.send(()).unwrap();
    }

    #[tokio::test]
    async fn a_partial_batch_runs_once_its_wait_is_over() {
        // When exactly is `Rules::wait`'s; here, that the waiting worker
        // wakes for it, on the real clock.
        let (tx, rx) = mpsc::channel();
        let run = move |jobs: &mut Vec<u32>, _: Turn| {
            let _ = tx.send(jobs.clone());
        };
        let batcher = Batcher::start(policy(4, Duration::from_millis(1)), 64, run).unwrap();
        batcher.submit(0, &mut vec![1, 2]).await.unwrap();
        assert_eq!(rx.recv_timeout(LONG).unwrap(), vec![1, 2]);
    }

    #[tokio::test]
    async fn a_batch_runs_as_soon_as_it_is_full() {
        let (batcher, batches, _gate) = gated(policy(4, Duration::from_secs(3600)), 64);
        batcher.submit(0, &mut vec![1, 2]).await.unwrap();
        batcher.submit(0, &mut vec![3, 4, 5]).await.unwrap();
        assert_eq!(jobs(&batches), vec![1, 2, 3, 4]);
    }

    fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        f.poll(&mut Context::from_waker(Waker::noop()))
    }

    #[tokio::test]
    async fn submit_waits_for_room_in_the_queue() {
        let (batcher, batches, gate) = gated(policy(8, Duration::ZERO), 2);
        batcher.submit(0, &mut vec![0]).await.unwrap();
        assert_eq!(jobs(&batches), vec![0]);
        batcher.submit(0, &mut vec![1, 2]).await.unwrap();

        // The queue is full and the worker is blocked: no room.
        let mut third = vec![3];
        let mut submit = Box::pin(batcher.submit(0, &mut third));
        assert!(poll_once(submit.as_mut()).is_pending());

        gate.send(()).unwrap();
        tokio::time::timeout(LONG, submit).await.unwrap().unwrap();
        assert_eq!(jobs(&batches), vec![1, 2]);
        gate.send(()).unwrap();
        assert_eq!(jobs(&batches), vec![3]);
    }

    #[tokio::test]
    async fn a_closed_batcher_refuses_jobs_and_drops_its_queue() {
        let (batcher, batches, gate) = gated(policy(1, Duration::ZERO), 64);
        batcher.submit(0, &mut vec![0]).await.unwrap();
        assert_eq!(jobs(&batches), vec![0]);
        batcher.submit(0, &mut vec![1]).await.unwrap();
        batcher.close();
        let mut late = vec![2];
        assert_eq!(batcher.submit(0, &mut late).await, Err(Closed));
        assert_eq!(late, vec![2], "jobs not queued stay with the caller");
        gate.send(()).unwrap();
        // The worker exits without running the queued job.
        assert_eq!(
            batches.recv_timeout(LONG),
            Err(mpsc::RecvTimeoutError::Disconnected)
        );
    }
}
