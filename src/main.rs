//! `meshnft`: the CNI plugin a runtime execs (with `CNI_COMMAND` set), and
//! the operator commands (without it). Links `meshnft-plugin` only.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

fn main() {
    std::process::exit(meshnft_plugin::main_entry())
}

/// Bytes of the arena: zero-filled static memory (`.bss`), so only the
/// pages an allocation touches cost anything (a page fault each, then
/// resident memory); a verb's small allocations come from it.
const ARENA: usize = 8 << 20;
/// Requests of this size or larger (a big batch, a big dump) go to the
/// system allocator, which gives their memory back when they are freed.
const LARGE: usize = 64 << 10;

#[repr(C, align(4096))]
struct Space(UnsafeCell<[u8; ARENA]>);
// SAFETY: bytes of the arena are only reached through pointers handed out
// by `Bump`, each range to one owner at a time (see `TOP`).
unsafe impl Sync for Space {}

static SPACE: Space = Space(UnsafeCell::new([0; ARENA]));
/// Offset of the first free byte of [`SPACE`]: ranges below it are handed
/// out, moved by compare-and-swap so that threads never share one.
static TOP: AtomicUsize = AtomicUsize::new(0);

/// The plugin's allocator: a bump allocator over [`SPACE`]. The plugin is
/// a short-lived process (one verb, then exit); musl's allocator (the
/// shipped static binary) maps and unmaps a page or two for most
/// allocations, ~70 `mmap`/`munmap` calls and their page faults per ADD.
/// Here an allocation is an atomic add; memory freed is reused only when
/// it was the last allocation (a growing `Vec` or `String` grows in
/// place), the rest waits for the process's exit. Requests of [`LARGE`]
/// bytes or more, and everything once the arena is full, go to the system
/// allocator.
struct Bump;

fn base() -> usize {
    SPACE.0.get() as usize
}

fn in_arena(p: *mut u8) -> bool {
    let a = p as usize;
    a >= base() && a < base() + ARENA
}

// SAFETY: every range handed out is inside `SPACE`, aligned as asked, and
// reserved by the compare-and-swap on `TOP` for its caller alone; pointers
// from the system allocator are recognised by their address (outside
// `SPACE`) and given back to it.
unsafe impl GlobalAlloc for Bump {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if l.size() >= LARGE {
            // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
            return unsafe { System.alloc(l) };
        }
        let mut top = TOP.load(Relaxed);
        loop {
            let start = (base() + top).next_multiple_of(l.align()) - base();
            let end = start + l.size();
            if end > ARENA {
                // SAFETY: as above.
                return unsafe { System.alloc(l) };
            }
            match TOP.compare_exchange_weak(top, end, Relaxed, Relaxed) {
                Ok(_) => return (base() + start) as *mut u8,
                Err(now) => top = now,
            }
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if !in_arena(p) {
            // SAFETY: `p` came from `System.alloc` with this layout.
            return unsafe { System.dealloc(p, l) };
        }
        // The last allocation gives its bytes back; any other waits for exit.
        let off = p as usize - base();
        let _ = TOP.compare_exchange(off + l.size(), off, Relaxed, Relaxed);
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if !in_arena(p) {
            // SAFETY: `p` came from `System.alloc` with layout `l`.
            return unsafe { System.realloc(p, l, new) };
        }
        let off = p as usize - base();
        if new <= l.size() {
            let _ = TOP.compare_exchange(off + l.size(), off + new, Relaxed, Relaxed);
            return p;
        }
        if new < LARGE
            && off + new <= ARENA
            && TOP
                .compare_exchange(off + l.size(), off + new, Relaxed, Relaxed)
                .is_ok()
        {
            return p;
        }
        // SAFETY: `new` is non-zero and, rounded up to `l.align()`, does not
        // overflow (the `realloc` contract).
        let nl = unsafe { Layout::from_size_align_unchecked(new, l.align()) };
        // SAFETY: a fresh block of `new` > `l.size()` bytes, then the old
        // block's bytes copied into it and the old block released.
        unsafe {
            let q = self.alloc(nl);
            if !q.is_null() {
                std::ptr::copy_nonoverlapping(p, q, l.size());
                self.dealloc(p, l);
            }
            q
        }
    }
}

#[global_allocator]
static ALLOC: Bump = Bump;
