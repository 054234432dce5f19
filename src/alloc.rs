//! The process allocator: mimalloc, asked for alignment only when a layout needs more than
//! mimalloc gives every block anyway.
//!
//! The `mimalloc` crate hands every allocation to `mi_malloc_aligned`. With mimalloc 3 that call
//! takes a fast path only when the size class's page has a block on its free list; otherwise a
//! size that is not a power of two (24, 40, 56... bytes, most of a request's allocations) falls to
//! over-allocation: slower and larger. Profiled: 18 allocations per GET request, a third of them
//! over-allocated, 8 % of the server's user-space instructions. Plain `mi_malloc` has no such
//! cliff, and every mimalloc block is aligned to 16 bytes when it is 16 bytes or larger (its size
//! classes are multiples of 16 from there), to 8 otherwise: the same rule std's own `System`
//! allocator applies to `malloc`.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::{c_int, c_long, c_void};

use libmimalloc_sys as mi;

/// Alignment every mimalloc block of at least this size has.
const MIN_ALIGN: usize = 16;

pub struct Mimalloc;

fn plain(layout: &Layout) -> bool {
    layout.align() <= MIN_ALIGN && layout.align() <= layout.size()
}

// SAFETY: mimalloc's functions are thread-safe and return null on failure, as GlobalAlloc
// requires; pointers are freed by the allocator that made them (all of them are mimalloc's).
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain(&layout) {
            mi::mi_malloc(layout.size()) as *mut u8
        } else {
            mi::mi_malloc_aligned(layout.size(), layout.align()) as *mut u8
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain(&layout) {
            mi::mi_zalloc(layout.size()) as *mut u8
        } else {
            mi::mi_zalloc_aligned(layout.size(), layout.align()) as *mut u8
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        mi::mi_free(ptr as *mut c_void);
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= MIN_ALIGN && layout.align() <= new_size {
            mi::mi_realloc(ptr as *mut c_void, new_size) as *mut u8
        } else {
            mi::mi_realloc_aligned(ptr as *mut c_void, new_size, layout.align()) as *mut u8
        }
    }
}

// Not re-exported by libmimalloc-sys without its `extended` feature, whose option constants stop
// before `purge_delay` for mimalloc 3; declared here, with that one index.
extern "C" {
    fn mi_option_set(option: c_int, value: c_long);
    fn mi_collect(force: bool);
}

/// `mi_option_purge_delay` in mimalloc 3's `mi_option_e` (mimalloc.h of libmimalloc-sys 0.1.49);
/// a test checks that the index still holds that option's built-in default.
const PURGE_DELAY: c_int = 15;

/// Milliseconds mimalloc keeps freed memory before returning it to the OS, unless the operator
/// set `MIMALLOC_PURGE_DELAY`. Why: a checkpoint frees a memtable (up to 128 MB of journal
/// records) every few seconds under sustained writes, and the next table fills the same amount
/// again. With mimalloc's 1 s delay that memory went back to the OS in between and came back a
/// page fault at a time: 0.55 faults per deposit at 128 connections, 0.27 with 10 s, and the
/// `madvise` calls gone (docs/storage.md, "The allocator").
pub const PURGE_DELAY_MS: c_long = 10_000;

/// How often the purge thread asks mimalloc to return what has been free for the delay.
const PURGE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Applies [`PURGE_DELAY_MS`] and starts the purge thread; called once at start.
pub fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: mimalloc's option setters take any option index and value, from any thread.
        unsafe { mi_option_set(PURGE_DELAY, PURGE_DELAY_MS) };
    }
    // mimalloc purges only from inside its own calls: a server gone quiet after a burst of writes
    // kept its peak memory (560 MB, 30 s after the burst, where a 1 s delay had gone down to
    // 300 MB). This thread's calls give the expired memory back within a few seconds of the delay.
    let spawned = std::thread::Builder::new().name("pfm-purge".into()).spawn(|| loop {
        std::thread::sleep(PURGE_EVERY);
        release_expired();
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the memory purge thread");
    }
}

/// Returns to the OS the memory that has been free for longer than the purge delay (not the
/// rest: a non-forced collect of this thread's heap, whose arena purge is process-wide).
fn release_expired() {
    // SAFETY: mi_collect takes no pointers and may be called from any thread.
    unsafe { mi_collect(false) };
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" {
        fn mi_option_get(option: c_int) -> c_long;
    }

    #[test]
    fn the_purge_delay_index_is_mimallocs_purge_delay() {
        // Its built-in default, 1000 ms, belongs to no option near it: were mimalloc's option
        // list to shift, this index would name another option and this fails.
        // SAFETY: reading an option only reads it; these indices exist in every mimalloc 3.
        let (before, at, after) = unsafe {
            (mi_option_get(PURGE_DELAY - 1), mi_option_get(PURGE_DELAY), mi_option_get(PURGE_DELAY + 1))
        };
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(at, 1000);
        }
        assert_ne!(before, 1000);
        assert_ne!(after, 1000);
    }

    #[test]
    fn every_block_has_its_layouts_alignment() {
        let a = Mimalloc;
        let mut held = Vec::new();
        for size in 1..=600usize {
            for align in [1usize, 2, 4, 8, 16, 32, 64, 128, 4096] {
                let l = Layout::from_size_align(size, align).unwrap();
                // SAFETY: non-zero size; freed below with the same layout.
                let p = unsafe {
                    if size % 2 == 0 {
                        a.alloc(l)
                    } else {
                        a.alloc_zeroed(l)
                    }
                };
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "size {size} align {align}");
                if size % 2 == 1 {
                    // SAFETY: p points to `size` zeroed bytes.
                    assert!(unsafe { std::slice::from_raw_parts(p, size) }.iter().all(|b| *b == 0));
                }
                // SAFETY: p is valid for `size` bytes.
                unsafe { p.write_bytes(0xAB, size) };
                held.push((p, l));
            }
        }
        for (p, l) in held.drain(..) {
            // Grow and shrink, keeping the first bytes and the alignment.
            let bigger = l.size() * 3 + 5;
            // SAFETY: p came from `a` with layout l.
            let q = unsafe { a.realloc(p, l, bigger) };
            assert!(!q.is_null());
            assert_eq!(q as usize % l.align(), 0);
            // SAFETY: the first l.size() bytes were kept.
            assert!(unsafe { std::slice::from_raw_parts(q, l.size()) }.iter().all(|b| *b == 0xAB));
            let nl = Layout::from_size_align(bigger, l.align()).unwrap();
            // SAFETY: q came from `a` with layout nl.
            let r = unsafe { a.realloc(q, nl, 1) };
            assert_eq!(r as usize % l.align(), 0);
            // SAFETY: r came from `a` with size 1 and l's alignment.
            unsafe { a.dealloc(r, Layout::from_size_align(1, l.align()).unwrap()) };
        }
    }
}
