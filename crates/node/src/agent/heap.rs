//! The node process's global allocator: mimalloc, with a count of the bytes
//! its allocations hold ([`heap_bytes`], `meshnft_agent_heap_bytes`).

/// The global allocator of the `meshnft-node` binary (mimalloc, compiled in
/// statically). The image's binaries are static musl ones, and musl's own
/// allocator (mallocng: one lock, `mmap`/`munmap` for every large block)
/// took about a third of the node agent's CPU while 60 pods started: the
/// watch's JSON, the pod round trips and their `Value` trees are
/// allocation-heavy. The plugin keeps its own bump allocator (src/main.rs).
///
/// Every allocation also counts its bytes, so that the agent can tell its live heap
/// ([`heap_bytes`], `meshnft_agent_heap_bytes`) from its RSS, which also holds the pages
/// mimalloc keeps for reuse: a relaxed atomic add per allocation and per free.
///
/// A unit struct: its one value is `meshnft_node::Allocator`.
pub struct Allocator;

/// Bytes allocated through [`Allocator`] and not yet freed.
static HEAP: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Bytes the node process's allocations hold now (its live heap), as
/// [`Allocator`] counts them: the sizes asked for, without mimalloc's own
/// rounding, metadata and free pages. 0 where [`Allocator`] is not the global
/// allocator (tests).
pub fn heap_bytes() -> usize {
    HEAP.load(std::sync::atomic::Ordering::Relaxed)
}

// SAFETY: every call is passed to mimalloc with the caller's own arguments,
// as `GlobalAlloc` requires; the counter is bookkeeping only.
unsafe impl std::alloc::GlobalAlloc for Allocator {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        let p = unsafe { mimalloc::MiMalloc.alloc(l) };
        if !p.is_null() {
            HEAP.fetch_add(l.size(), std::sync::atomic::Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, l: std::alloc::Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { mimalloc::MiMalloc.alloc_zeroed(l) };
        if !p.is_null() {
            HEAP.fetch_add(l.size(), std::sync::atomic::Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        // SAFETY: `p` came from this allocator with layout `l`.
        unsafe { mimalloc::MiMalloc.dealloc(p, l) };
        HEAP.fetch_sub(l.size(), std::sync::atomic::Ordering::Relaxed);
    }

    unsafe fn realloc(&self, p: *mut u8, l: std::alloc::Layout, new: usize) -> *mut u8 {
        // SAFETY: `p` came from this allocator with layout `l`, as the caller guarantees.
        let q = unsafe { mimalloc::MiMalloc.realloc(p, l, new) };
        if !q.is_null() {
            HEAP.fetch_add(new, std::sync::atomic::Ordering::Relaxed);
            HEAP.fetch_sub(l.size(), std::sync::atomic::Ordering::Relaxed);
        }
        q
    }
}

/// Keeps transparent huge pages (THP) out of the node process:
/// `prctl(PR_SET_THP_DISABLE, 1)` (prctl(2); the kernel's
/// Documentation/admin-guide/mm/transhuge.rst), which holds for the whole
/// process, for the mappings it has and those it makes, and which its
/// children inherit.
///
/// Why: mimalloc reserves its arena as one 1 GiB mapping and asks for huge
/// pages on it (`madvise(MADV_HUGEPAGE)`, its `allow_thp` option, on by
/// default on Linux). Where THP is `madvise` or `always` (most nodes), a
/// touched 2 MiB range of the arena is then backed by a whole 2 MiB page,
/// and khugepaged collapses partly used ranges back into such pages (by
/// default a range with a single 4 KiB page in use), so the free pages
/// mimalloc gives back return. The agent's live heap is under 1 MiB; with
/// huge pages, 6 of its 11 MiB of anonymous memory were three of them
/// (docs/testing.md#soak).
///
/// # Errors
/// The prctl's errno (`EINVAL` on a kernel before 3.15, which has no such
/// prctl).
pub fn refuse_huge_pages() -> Result<(), nix::Error> {
    nix::sys::prctl::set_thp_disable(true)
}

#[cfg(test)]
mod tests {
    use super::{Allocator, heap_bytes};
    use std::alloc::{GlobalAlloc, Layout};

    /// The count follows what is held: an allocation, its growth, its zeroed
    /// sibling, and nothing once both are freed. (The tests' global allocator
    /// is the system's, so only these calls move the count.)
    #[test]
    fn the_heap_count_follows_allocations_and_frees() {
        let before = heap_bytes();
        let l = Layout::from_size_align(1000, 8).expect("layout");
        // SAFETY: a valid layout; each pointer is freed once, with its own layout.
        unsafe {
            let p = Allocator.alloc(l);
            assert!(!p.is_null());
            assert_eq!(heap_bytes(), before + 1000);
            let p = Allocator.realloc(p, l, 5000);
            assert!(!p.is_null());
            assert_eq!(heap_bytes(), before + 5000);
            let z = Allocator.alloc_zeroed(l);
            assert!(!z.is_null() && *z == 0);
            assert_eq!(heap_bytes(), before + 6000);
            Allocator.dealloc(z, l);
            Allocator.dealloc(p, Layout::from_size_align(5000, 8).expect("layout"));
        }
        assert_eq!(heap_bytes(), before);
    }
}
