//! The heap of tern's short-lived plugin binaries (tern, tern-tuning, tern-ipam, tern-lookup).
//!
//! A plugin lives for one CNI verb, a few milliseconds, so what it needs from an allocator is
//! that nothing is paid twice: musl's own allocator (mallocng), which the static builds link,
//! maps a group of slots from the kernel and hands it back as soon as the group empties, so a
//! netlink buffer or a JSON document freed and then wanted again costs an `mmap`, page faults
//! and a `munmap` each time (25 `mmap` and 19 `munmap` in one tern ADD, 4 and 4 with glibc).
//! [`PluginHeap`] keeps what it takes: talc (a dlmalloc-style allocator) carves every allocation
//! from blocks of at least 1 MiB that it takes from the system allocator on demand and keeps
//! until the block is wholly free again. It costs nothing before `main` (no CPU probing, no
//! thread-local set-up), and pages count in the resident set only once touched.
//! docs/BENCHMARKS.md, "a heap kept for the process's life", has the measured difference.
//!
//! The long-lived tern-agent keeps the system allocator: it frees memory it will not want again.

use std::alloc::System;

use spin::{mutex::SpinMutex, relax::Yield};
use talc::{source::GlobalAllocSource, TalcLock};

/// The lock around the heap: a spin lock that yields the CPU while it waits, so a thread whose
/// holder was preempted (tern's pod-netns thread, on a node running eight ADDs on two cores)
/// lets it run instead of spinning out its time slice. It never allocates, as a lock inside an
/// allocator must not (a parking lock's wait queue would).
type HeapLock = SpinMutex<(), Yield>;

/// The global allocator of a plugin binary, declared in its `main.rs`:
///
/// ```ignore
/// #[global_allocator]
/// static HEAP: tern_node::alloc::PluginHeap = tern_node::alloc::plugin_heap();
/// ```
///
/// Blocks come from [`System`] (musl's allocator in a release build): 1 MiB, or an allocation
/// that does not fit one rounded up to whole MiB; a block goes back to it once wholly free.
/// Out of memory is reported as usual, by a null pointer from `alloc`.
pub type PluginHeap = TalcLock<HeapLock, GlobalAllocSource<System>>;

/// A [`PluginHeap`] with no block taken yet: the first allocation takes the first block.
pub const fn plugin_heap() -> PluginHeap {
    TalcLock::new(GlobalAllocSource::new(System))
}

#[cfg(test)]
mod tests {
    use std::alloc::{GlobalAlloc, Layout};
    use std::sync::Arc;

    use super::*;

    /// Fills `len` bytes at a fresh allocation with `byte`, and returns it.
    fn filled(heap: &PluginHeap, len: usize, byte: u8) -> (*mut u8, Layout) {
        let layout = Layout::from_size_align(len, 16).unwrap_or_else(|e| panic!("{e}"));
        // SAFETY: `layout` has a non-zero size; the pointer is checked before use.
        #[allow(unsafe_code)]
        let p = unsafe { heap.alloc(layout) };
        assert!(!p.is_null(), "allocation of {len} bytes failed");
        // SAFETY: `p` is valid for `len` bytes, just allocated.
        #[allow(unsafe_code)]
        unsafe {
            p.write_bytes(byte, len)
        };
        (p, layout)
    }

    /// Whether all `len` bytes at `p` are `byte`.
    fn holds(p: *mut u8, len: usize, byte: u8) -> bool {
        // SAFETY: callers pass a live allocation of at least `len` bytes.
        #[allow(unsafe_code)]
        let bytes = unsafe { std::slice::from_raw_parts(p, len) };
        bytes.iter().all(|b| *b == byte)
    }

    #[test]
    fn allocations_past_a_block_and_larger_than_one_keep_their_bytes() {
        let heap = plugin_heap();
        // 3 MiB in 48 KiB pieces spans several 1 MiB blocks; then one of 5 MiB, larger than a block.
        let mut live: Vec<(*mut u8, Layout, u8)> = (0..64u8)
            .map(|i| {
                let (p, l) = filled(&heap, 48 << 10, i);
                (p, l, i)
            })
            .collect();
        let (big, big_layout) = filled(&heap, 5 << 20, 0xAB);
        for (p, l, byte) in &live {
            assert!(holds(*p, l.size(), *byte), "piece {byte} was overwritten");
        }
        assert!(holds(big, big_layout.size(), 0xAB));
        // Free every other piece and grow the rest in place or by moving: contents survive.
        for (p, l, _) in live.iter().step_by(2) {
            // SAFETY: `p` was allocated by `heap` with `l` and is freed once.
            #[allow(unsafe_code)]
            unsafe {
                heap.dealloc(*p, *l)
            };
        }
        for (p, l, byte) in live.iter_mut().skip(1).step_by(2) {
            // SAFETY: `p` is live, allocated by `heap` with `l`; the new size is non-zero.
            #[allow(unsafe_code)]
            let grown = unsafe { heap.realloc(*p, *l, l.size() * 3) };
            assert!(!grown.is_null());
            assert!(
                holds(grown, l.size(), *byte),
                "piece {byte} lost its bytes in realloc"
            );
            *p = grown;
            *l = Layout::from_size_align(l.size() * 3, 16).unwrap_or_else(|e| panic!("{e}"));
        }
        for (p, l, byte) in live.iter().skip(1).step_by(2) {
            assert!(holds(*p, l.size() / 3, *byte));
            // SAFETY: as above, freed once.
            #[allow(unsafe_code)]
            unsafe {
                heap.dealloc(*p, *l)
            };
        }
        // SAFETY: allocated by `heap` with `big_layout`, freed once.
        #[allow(unsafe_code)]
        unsafe {
            heap.dealloc(big, big_layout)
        };
    }

    /// Four threads released at once by a barrier, allocating and freeing back to back: without
    /// the lock they corrupt talc's lists within a few hundred rounds (checked with a lock that
    /// does nothing: 20 failures in 20 runs, against 8 in 20 for two threads that yielded between
    /// allocating and checking, which rarely overlapped).
    #[test]
    fn threads_allocating_at_once_never_share_a_byte() {
        const THREADS: usize = 4;
        let heap = Arc::new(plugin_heap());
        let start = Arc::new(std::sync::Barrier::new(THREADS));
        let workers: Vec<_> = (1..=THREADS)
            .map(|t| {
                let byte = u8::try_from(t * 0x11).unwrap_or(0xFF);
                let heap = Arc::clone(&heap);
                let start = Arc::clone(&start);
                std::thread::spawn(move || {
                    start.wait();
                    for round in 0..20_000usize {
                        let len = 16 + (round * 37) % 4096;
                        let (p, l) = filled(&heap, len, byte);
                        assert!(
                            holds(p, len, byte),
                            "another thread wrote into this allocation"
                        );
                        // SAFETY: allocated by `heap` with `l`, freed once.
                        #[allow(unsafe_code)]
                        unsafe {
                            heap.dealloc(p, l)
                        };
                    }
                })
            })
            .collect();
        for w in workers {
            assert!(w.join().is_ok(), "a worker panicked");
        }
    }
}
