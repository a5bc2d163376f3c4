//! Memory given back after a burst. glibc's allocator keeps what a burst of
//! clients made the node allocate (buffers of many streams, in arenas of
//! every thread) once it is freed, for reuse, and returns to the system
//! only what lies at the top of its heaps: after a flood of slow streams, a
//! node would keep the flood's peak for good. So every second the node asks
//! the allocator how much it holds free; when that has been over
//! [`IDLE_FREE_BYTES`] at two checks in a row (so nothing reused it in
//! between: a burst is over, not under way), it gives it back
//! (`malloc_trim`). Other allocators (musl's) give memory back themselves.

use std::time::Duration;

use tokio::sync::watch;
use tracing::info;

use crate::stop::stopped;

/// Free memory the allocator may keep for reuse.
pub(crate) const IDLE_FREE_BYTES: usize = 64 << 20;
/// How often the allocator is asked.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// When to give free memory back: told what the allocator holds free at
/// each check.
#[derive(Debug, Default)]
pub(crate) struct Reclaim {
    /// Checks in a row that found more than [`IDLE_FREE_BYTES`] free.
    over: u32,
}

impl Reclaim {
    /// Whether to give back the `free` bytes the allocator holds now.
    pub(crate) fn check(&mut self, free: usize) -> bool {
        if free <= IDLE_FREE_BYTES {
            self.over = 0;
            return false;
        }
        self.over += 1;
        if self.over < 2 {
            return false;
        }
        self.over = 0;
        true
    }
}

/// Lets freed receive buffers be reused without fresh pages. A sample's
/// payload keeps the HTTP/2 read buffer it arrived in until the sample has
/// run, so every large input is read into newly allocated memory; by default
/// glibc maps allocations of its size afresh or trims the top of the heap as
/// they are freed, and the next read into them pays a page fault and the
/// zeroing of every page (a tenth of the node's time with ResNet50 inputs).
/// Allocations up to [`HEAP_ALLOCATIONS`] (a read buffer holds at most a
/// few HTTP/2 frames of 1 MiB) come from the heaps, and up to
/// [`KEPT_AT_TOP`] may stay free at a heap's top; larger allocations (long
/// answers) are mapped and unmapped as before, and what a burst leaves goes
/// back through [`give_back_after_bursts`].
pub(crate) fn reuse_freed_buffers() {
    allocator::keep_freed(HEAP_ALLOCATIONS, KEPT_AT_TOP);
}

/// See [`reuse_freed_buffers`].
const HEAP_ALLOCATIONS: usize = 4 << 20;
/// See [`reuse_freed_buffers`]: the inputs a connection's HTTP/2 window
/// lets be under way (`server.rs`).
const KEPT_AT_TOP: usize = 16 << 20;

/// Checks the allocator every second until the node stops, giving back
/// what it held free after each burst.
pub(crate) async fn give_back_after_bursts(mut stop: watch::Receiver<bool>) {
    let Some(_) = allocator::free_bytes() else {
        return;
    };
    let mut reclaim = Reclaim::default();
    let mut every = tokio::time::interval(CHECK_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stopped(&mut stop) => return,
            _ = every.tick() => {}
        }
        let free = allocator::free_bytes().unwrap_or(0);
        if reclaim.check(free) {
            // Off the network threads: trimming walks every arena.
            let left = tokio::task::spawn_blocking(|| {
                allocator::give_back();
                allocator::free_bytes().unwrap_or(0)
            })
            .await
            .unwrap_or(free);
            info!(
                "gave back {} MiB of memory freed after a burst",
                free.saturating_sub(left) >> 20
            );
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod allocator {
    /// Bytes glibc's allocator holds free, in all its arenas.
    pub(super) fn free_bytes() -> Option<usize> {
        // SAFETY: mallinfo2 only reads the allocator's own bookkeeping.
        let info = unsafe { libc::mallinfo2() };
        Some(info.fordblks)
    }

    /// Returns the free pages of every arena to the system.
    pub(super) fn give_back() {
        // SAFETY: malloc_trim only releases memory the allocator holds free.
        unsafe { libc::malloc_trim(0) };
    }

    /// Allocations under `heap` bytes come from the heaps, and up to `top`
    /// bytes may stay free at a heap's top.
    pub(super) fn keep_freed(heap: usize, top: usize) {
        let int = |n: usize| libc::c_int::try_from(n).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only changes the allocator's thresholds; a value
        // it refuses leaves the default.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, int(heap));
            libc::mallopt(libc::M_TRIM_THRESHOLD, int(top));
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod allocator {
    pub(super) fn free_bytes() -> Option<usize> {
        None
    }

    pub(super) fn give_back() {}

    pub(super) fn keep_freed(_heap: usize, _top: usize) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_memory_goes_back_once_a_burst_is_over_not_while_it_is_reused() {
        let mut r = Reclaim::default();
        let burst = 900 << 20;
        // Little free: kept.
        assert!(!r.check(IDLE_FREE_BYTES));
        // Much free at one check (a burst under way, reusing it): kept.
        assert!(!r.check(burst));
        assert!(!r.check(10 << 20));
        // Much free at two checks in a row: given back, once.
        assert!(!r.check(burst));
        assert!(r.check(burst));
        assert!(!r.check(burst));
        assert!(r.check(burst));
    }
}
