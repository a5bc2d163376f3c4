//! A stream's inputs being decoded, handed back in the order they came:
//! raw payloads as they are; compressed ones decoded on the blocking pool,
//! several of one stream at once (at most `width`, and no more than the
//! pool's turns, one per core, shared fairly by the connections: see
//! `decode_pool`), so that decoding never holds up the network threads nor
//! waits on one core.
//!
//! `Decodes` belongs to one stream's reader task; the decodes themselves run
//! on tokio's blocking threads, each holding a turn of the `DecodePool`
//! while it runs. Nothing else is touched.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;

use super::decode_pool::DecodePool;
use crate::backend::SampleFailure;
use crate::codec::InputError;

/// What a sample's input needs before it can run.
pub(super) enum Input<F> {
    /// A compressed input: `F` decodes it, on the pool.
    Compressed(F),
    /// A raw input, already checked: nothing to do off the network thread.
    Ready(Result<Bytes, InputError>),
}

/// A sample's input, or why it cannot run.
pub(super) type Decoded = Result<Bytes, SampleFailure>;

pub(super) struct Decodes<T> {
    width: usize,
    queue: VecDeque<(T, Decoding)>,
}

enum Decoding {
    Done(Result<Bytes, InputError>),
    Running(tokio::task::JoinHandle<Result<Bytes, InputError>>),
}

impl<T> Decodes<T> {
    pub(super) fn new(width: usize) -> Self {
        Self {
            width: width.max(1),
            queue: VecDeque::new(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }

    /// Queues `input`: a compressed one starts on the pool once connection
    /// `conn` has a turn for its `bound` bytes (`turn`: the pool, `conn`,
    /// `bound`).
    pub(super) async fn start(
        &mut self,
        meta: T,
        (pool, conn, bound): (&Arc<DecodePool>, u64, usize),
        input: Input<impl FnOnce() -> Result<Bytes, InputError> + Send + 'static>,
    ) {
        let decoding = match input {
            Input::Ready(done) => Decoding::Done(done),
            // The turn is held while the decode runs, not until its result
            // is taken: streams waiting for turns never wait on each other.
            Input::Compressed(work) => {
                let mut turn = pool.turn(conn, bound as u64).await;
                Decoding::Running(tokio::task::spawn_blocking(move || {
                    let decoded = work();
                    turn.decoded(decoded.as_ref().map_or(0, Bytes::len));
                    decoded
                }))
            }
        };
        self.queue.push_back((meta, decoding));
    }

    /// The oldest input if it is decoded; waits for it when `width` are
    /// under way, or with `all` (the end of a turn of reading).
    pub(super) async fn next(&mut self, all: bool) -> Option<(T, Decoded)> {
        let ready = match &self.queue.front()?.1 {
            Decoding::Done(_) => true,
            Decoding::Running(task) => task.is_finished(),
        };
        if !ready && !all && self.queue.len() < self.width {
            return None;
        }
        let (meta, decoding) = self.queue.pop_front()?;
        let result = match decoding {
            Decoding::Done(r) => r.map_err(SampleFailure::from),
            Decoding::Running(task) => match task.await {
                Ok(r) => r.map_err(SampleFailure::from),
                Err(e) => Err(SampleFailure::DecodingAborted(e.to_string())),
            },
        };
        Some((meta, result))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decode, for inputs that have none.
    type Work = fn() -> Result<Bytes, InputError>;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_streams_inputs_decode_at_once_and_come_back_in_order() {
        // Two decodes that each finish only once the other has started:
        // one at a time, the first would time out.
        let pool = Arc::new(DecodePool::new(2));
        let (a_started, a_seen) = std::sync::mpsc::channel::<()>();
        let (b_started, b_seen) = std::sync::mpsc::channel::<()>();
        let wait = std::time::Duration::from_secs(20);
        let mut decodes = Decodes::new(2);
        let work_a = move || {
            let _ = a_started.send(());
            match b_seen.recv_timeout(wait) {
                Ok(()) => Ok(Bytes::from_static(b"a")),
                Err(_) => panic!("b never ran beside a"),
            }
        };
        let work_b = move || {
            let _ = b_started.send(());
            match a_seen.recv_timeout(wait) {
                Ok(()) => Ok(Bytes::from_static(b"b")),
                Err(_) => panic!("a never ran beside b"),
            }
        };
        decodes
            .start(1, (&pool, 1, 1), Input::Compressed(work_a))
            .await;
        decodes
            .start(2, (&pool, 1, 1), Input::Compressed(work_b))
            .await;
        // A raw input behind them waits its turn.
        let raw: Input<Work> = Input::Ready(Ok(Bytes::from_static(b"c")));
        decodes.start(3, (&pool, 1, 1), raw).await;
        let mut got = Vec::new();
        while let Some((id, r)) = decodes.next(true).await {
            got.push((id, r));
        }
        assert_eq!(
            got,
            vec![
                (1, Ok(Bytes::from_static(b"a"))),
                (2, Ok(Bytes::from_static(b"b"))),
                (3, Ok(Bytes::from_static(b"c"))),
            ]
        );
        // Turns given back: both at once again.
        let both = (pool.turn(1, 1).await, pool.turn(2, 1).await);
        drop(both);
    }

    #[tokio::test]
    async fn a_decode_done_but_not_taken_holds_no_turn() {
        // Two streams, one turn: the first stream's finished decode, not
        // yet taken, must not keep the second waiting (they would wait on
        // each other once both hold a result and want a turn).
        let pool = Arc::new(DecodePool::new(1));
        let (mut first, mut second) = (Decodes::new(4), Decodes::new(4));
        first
            .start(
                1,
                (&pool, 1, 1),
                Input::Compressed(|| Ok(Bytes::from_static(b"1"))),
            )
            .await;
        let started = second.start(
            2,
            (&pool, 2, 1),
            Input::Compressed(|| Ok(Bytes::from_static(b"2"))),
        );
        tokio::time::timeout(std::time::Duration::from_secs(20), started)
            .await
            .expect("the second stream got the turn");
        assert_eq!(second.next(true).await.map(|d| d.0), Some(2));
        assert_eq!(first.next(true).await.map(|d| d.0), Some(1));
    }

    #[tokio::test]
    async fn a_decoded_input_waits_behind_an_older_one_until_the_width_is_reached() {
        let pool = Arc::new(DecodePool::new(4));
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let mut decodes = Decodes::new(2);
        let slow = move || {
            let _ = gate.recv();
            Ok(Bytes::from_static(b"slow"))
        };
        decodes
            .start(1, (&pool, 1, 4), Input::Compressed(slow))
            .await;
        // Below the width, a running decode is not waited for.
        assert!(decodes.next(false).await.is_none());
        let raw: Input<Work> = Input::Ready(Ok(Bytes::new()));
        decodes.start(2, (&pool, 1, 0), raw).await;
        // The width is reached: the oldest is awaited, so release it.
        let _ = release.send(());
        assert_eq!(decodes.next(false).await.map(|d| d.0), Some(1));
        assert_eq!(decodes.next(false).await.map(|d| d.0), Some(2));
        assert!(decodes.next(false).await.is_none());
    }
}
