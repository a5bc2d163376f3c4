//! What the forwarding backends (`kserve`, `openai`) share: their own tokio
//! runtime, which the batcher's worker thread blocks on for each batch.
//!
//! The worker thread is not a runtime thread, so it may `block_on`; the
//! requests of a batch run as tasks on the runtime's threads, all at once, and
//! their I/O stays off the node's own runtime (which serves the LoadGen node).

use std::future::Future;

use tokio::sync::mpsc::UnboundedReceiver;

use super::SampleFailure;

pub struct Runtime(Option<tokio::runtime::Runtime>);

impl Runtime {
    pub fn new(name: &str) -> std::io::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            // Forwarding is I/O: two threads keep up with many requests.
            .worker_threads(2)
            .thread_name(format!("{name}-client"))
            .enable_all()
            .build()?;
        Ok(Self(Some(rt)))
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        // Invariant: only `drop` takes it out, so it is here for any caller.
        #[allow(clippy::expect_used)]
        self.0.as_ref().expect("runtime present until dropped")
    }

    /// Makes the runtime current, for code that spawns on it when built.
    pub fn enter(&self) -> tokio::runtime::EnterGuard<'_> {
        self.rt().enter()
    }

    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt().block_on(f)
    }

    /// Runs every task concurrently; hands each result to `done`, on the
    /// calling thread, as it comes, with the task's position in `tasks`.
    pub fn each<T, I>(&self, tasks: I, mut done: impl FnMut(usize, Result<T, SampleFailure>))
    where
        I: IntoIterator,
        I::Item: Future<Output = Result<T, SampleFailure>> + Send + 'static,
        T: Send + 'static,
    {
        self.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            let mut index = std::collections::HashMap::new();
            for (i, task) in tasks.into_iter().enumerate() {
                index.insert(set.spawn(task).id(), i);
            }
            while let Some(joined) = set.join_next_with_id().await {
                match joined {
                    Ok((id, result)) => {
                        if let Some(&i) = index.get(&id) {
                            done(i, result);
                        }
                    }
                    Err(e) => {
                        if let Some(&i) = index.get(&e.id()) {
                            let failed = format!("forwarding task failed: {e}");
                            done(i, Err(SampleFailure::Backend(failed)));
                        }
                    }
                }
            }
        })
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // The backend may be dropped on an async thread, where a blocking
        // shutdown would panic.
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// Blocks on a batch: `start` sets its requests going and returns where their
/// events arrive; each event goes to `handle` on the calling thread (so it may
/// use the batch's `SampleSink` as events come), until `handle` returns
/// false or every sender is gone.
pub fn run_batch<T, S>(rt: &Runtime, start: S, mut handle: impl FnMut(T) -> bool)
where
    S: Future<Output = UnboundedReceiver<T>>,
{
    rt.block_on(async {
        let mut rx = start.await;
        while let Some(event) = rx.recv().await {
            if !handle(event) {
                break;
            }
        }
    })
}
