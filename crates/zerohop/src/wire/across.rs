//! Whether objects pickle for another machine: on while any [`AcrossMachines`] block is open.
//!
//! Process-wide, because Ray and Dask pickle on threads of their own, outside the block that
//! asked for bytes. A count of open blocks, not a flag that each block sets and restores:
//! blocks on two threads overlap in any order, and a block that restored the setting it found
//! would switch bytes off under a block still open, or leave them on after both closed.

use std::sync::atomic::{AtomicUsize, Ordering};

static OPEN_BLOCKS: AtomicUsize = AtomicUsize::new(0);

/// Whether objects pickle for another machine now: host data as bytes, never as a
/// shared-memory handle that only this machine can open, and CUDA data staged through the
/// host.
pub fn across_machines() -> bool {
    OPEN_BLOCKS.load(Ordering::SeqCst) > 0
}

/// An open block: objects pickle for another machine until every open block is dropped.
#[must_use = "the setting lasts only while the block is held"]
#[derive(Debug)]
pub struct AcrossMachines(());

impl AcrossMachines {
    pub fn open() -> Self {
        // A usize count of live guards cannot overflow: each guard takes memory.
        OPEN_BLOCKS.fetch_add(1, Ordering::SeqCst);
        AcrossMachines(())
    }
}

impl Drop for AcrossMachines {
    fn drop(&mut self) {
        // Only a guard that incremented the count decrements it, so it never goes below 0.
        OPEN_BLOCKS.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;

    /// Two threads' blocks overlap (opened A, B; closed A, B): the setting stays on until
    /// the last one closes, then goes off. Other tests in this process may hold a block, so
    /// the test counts its own blocks rather than asserting the global setting goes off.
    #[test]
    fn overlapping_blocks_on_two_threads_keep_the_setting_until_the_last_closes() {
        let barrier = Barrier::new(2);
        let before = OPEN_BLOCKS.load(Ordering::SeqCst);
        std::thread::scope(|s| {
            let first = s.spawn(|| {
                let block = AcrossMachines::open();
                barrier.wait(); // both open
                barrier.wait(); // the first closes ...
                drop(block);
                barrier.wait();
            });
            let second = s.spawn(|| {
                let block = AcrossMachines::open();
                barrier.wait();
                barrier.wait();
                barrier.wait(); // ... and the second is still on
                assert!(across_machines());
                drop(block);
            });
            first.join().unwrap();
            second.join().unwrap();
        });
        assert_eq!(OPEN_BLOCKS.load(Ordering::SeqCst), before);
    }
}
