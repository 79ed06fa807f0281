//! Argument buffers shared by all programs of a launch: the interpreter's only `unsafe`
//! besides the lifetime erasure that lets pool threads help a launch (`parallel`).
//!
//! Programs run in parallel on several threads and may all write the same output buffer, as
//! GPU threads do. Rust forbids unsynchronised writes to memory another thread may touch,
//! so every access to a writable buffer is an atomic access (relaxed for plain loads and
//! stores, which compiles to ordinary moves; read-modify-write for the atomic ops). A race
//! between two programs is then the kernel's own bug with a well-defined outcome, never
//! undefined behaviour. Read-only buffers are never written by anyone during a launch, so
//! they are read with plain (unaligned) loads and bulk copies.
//!
//! The exception: a writable buffer that `disjoint.rs` proves, for one launch, is loaded and
//! stored by each program in a window no other program reaches (and never accessed
//! atomically) is marked `plain`, and its loads and stores are ordinary (vectorised, bulk)
//! accesses. An element one program stores is then touched by no other thread, and the
//! elements several threads read are written by none, so plain accesses cannot race; and
//! since the decision is per buffer per launch, plain and atomic accesses never mix on the
//! same memory.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Raw element types, by width: 1, 2, 4 or 8 bytes.
pub(crate) trait Raw: Copy + Default + Send + Sync + 'static {
    /// The matching atomic integer.
    type Atomic;
    /// Bytes per element.
    const SIZE: usize;
    /// Relaxed atomic load.
    fn load(a: &Self::Atomic) -> Self;
    /// Relaxed atomic store.
    fn store(a: &Self::Atomic, v: Self);
    /// Compare-and-swap (strong, sequentially consistent); `Ok(old)` when it swapped.
    fn cas(a: &Self::Atomic, old: Self, new: Self) -> Result<Self, Self>;
}

macro_rules! raw {
    ($t:ty, $a:ty) => {
        impl Raw for $t {
            type Atomic = $a;
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn load(a: &$a) -> $t {
                a.load(Ordering::Relaxed)
            }
            #[inline(always)]
            fn store(a: &$a, v: $t) {
                a.store(v, Ordering::Relaxed)
            }
            #[inline(always)]
            fn cas(a: &$a, old: $t, new: $t) -> Result<$t, $t> {
                a.compare_exchange(old, new, Ordering::SeqCst, Ordering::SeqCst)
            }
        }
    };
}
raw!(u8, AtomicU8);
raw!(u16, AtomicU16);
raw!(u32, AtomicU32);
raw!(u64, AtomicU64);

/// Value types with the size of a [`Raw`] type for which every bit pattern is valid.
pub(crate) trait Bits: Copy {
    /// The raw type of the same width.
    type Raw: Raw;
    /// Reinterprets raw bits.
    fn from_raw(r: Self::Raw) -> Self;
}

macro_rules! bits {
    ($t:ty, $r:ty, $f:expr) => {
        impl Bits for $t {
            type Raw = $r;
            #[inline(always)]
            fn from_raw(r: $r) -> $t {
                $f(r)
            }
        }
    };
}
bits!(f32, u32, f32::from_bits);
bits!(f64, u64, f64::from_bits);
bits!(i32, u32, |r: u32| r as i32);
bits!(i64, u64, |r: u64| r as i64);

/// One pointer argument's buffer for the duration of a launch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mem<'a> {
    ptr: *mut u8,
    bytes: usize,
    /// Element size of the argument's pointee dtype.
    elem: usize,
    writable: bool,
    /// Loads and stores are plain (see the module docs and [`Mem::assume_disjoint`]).
    plain: bool,
    _borrow: PhantomData<&'a [u8]>,
}

// SAFETY: a `Mem` is built only from a `&'a [u8]` (never written: `writable` is false, so
// every write path below refuses it) or from a `&'a mut [u8]` that the launch borrows
// exclusively for `'a` and whose every access goes through `AtomicU*` of matching width at
// an aligned address (alignment checked in `Mem::writable`; an empty buffer has no element
// to access), except that after `assume_disjoint` loads and stores are plain, which its
// contract keeps to elements that no other thread writes and, where written, no other
// thread touches. Shared access from many threads is therefore data-race free.
unsafe impl Send for Mem<'_> {}
// SAFETY: see `Send` above.
unsafe impl Sync for Mem<'_> {}

impl<'a> Mem<'a> {
    /// A read-only buffer of elements of `elem` bytes.
    pub(crate) fn read_only(buf: &'a [u8], elem: usize) -> Mem<'a> {
        Mem {
            ptr: buf.as_ptr() as *mut u8,
            bytes: buf.len(),
            elem,
            writable: false,
            plain: false,
            _borrow: PhantomData,
        }
    }

    /// A writable buffer; `None` when it is not aligned to `elem` (atomics need that). An
    /// empty buffer is never accessed (every access is bounds-checked), so its dangling
    /// address need not be aligned.
    pub(crate) fn writable(buf: &'a mut [u8], elem: usize) -> Option<Mem<'a>> {
        if !buf.is_empty() && (buf.as_ptr() as usize) % elem != 0 {
            return None;
        }
        huge_pages(buf);
        Some(Mem {
            ptr: buf.as_mut_ptr(),
            bytes: buf.len(),
            elem,
            writable: true,
            plain: false,
            _borrow: PhantomData,
        })
    }

    /// This buffer with plain (non-atomic) loads and stores.
    ///
    /// # Safety
    ///
    /// For the whole launch, no element that one program stores may be loaded or stored by
    /// another program, and nothing may run an atomic on the buffer
    /// (`disjoint::disjoint_stores` proves this for a kernel, grid and scalar arguments).
    pub(crate) unsafe fn assume_disjoint(self) -> Mem<'a> {
        Mem {
            plain: self.writable,
            ..self
        }
    }

    /// Number of whole elements.
    pub(crate) fn len(&self) -> usize {
        self.bytes / self.elem
    }

    /// True if stores and atomics are allowed.
    pub(crate) fn is_writable(&self) -> bool {
        self.writable
    }

    /// True if loads and stores are plain (proven disjoint between programs).
    pub(crate) fn is_plain(&self) -> bool {
        self.plain
    }

    /// The buffer's first byte (for compiled kernels, which check bounds themselves).
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Bytes per element.
    pub(crate) fn elem_bytes(&self) -> usize {
        self.elem
    }

    /// True if elements `[start, start + n)` of width `R::SIZE` lie inside the buffer.
    #[inline(always)]
    fn fits<R: Raw>(&self, start: usize, n: usize) -> bool {
        R::SIZE == self.elem
            && start
                .checked_add(n)
                .and_then(|e| e.checked_mul(R::SIZE))
                .is_some_and(|e| e <= self.bytes)
    }

    /// The atomic at element `i`; caller checked `fits` and `writable`.
    #[inline(always)]
    fn atomic<R: Raw>(&self, i: usize) -> &R::Atomic {
        // SAFETY: `fits` put element `i` inside the exclusively borrowed buffer (so it is not
        // empty), `writable` guarantees it came from `&mut [u8]` with `elem`-aligned base
        // (checked for every non-empty buffer), so the address is
        // aligned for `R::Atomic` (same size and alignment as `R`); every other access to
        // this memory during the launch is atomic too.
        unsafe { &*(self.ptr.add(i * R::SIZE) as *const R::Atomic) }
    }

    /// Element `i`, or `None` when out of bounds.
    #[inline(always)]
    pub(crate) fn get<R: Raw>(&self, i: usize) -> Option<R> {
        if !self.fits::<R>(i, 1) {
            return None;
        }
        if self.writable && !self.plain {
            Some(R::load(self.atomic::<R>(i)))
        } else {
            // SAFETY: in bounds (checked above); read-only buffers are never written
            // during the launch, and an element of a plain buffer that this program may
            // read is written by no other thread (`assume_disjoint`'s contract), so a plain
            // unaligned read cannot race.
            Some(unsafe { std::ptr::read_unaligned(self.ptr.add(i * R::SIZE) as *const R) })
        }
    }

    /// Appends `f` of elements `[start, start + n)` to `out`; false when out of bounds.
    #[inline(always)]
    pub(crate) fn extend_run<R: Raw, S>(
        &self,
        start: usize,
        n: usize,
        out: &mut Vec<S>,
        f: impl Fn(R) -> S,
    ) -> bool {
        if !self.fits::<R>(start, n) {
            return false;
        }
        if self.writable && !self.plain {
            out.extend(self.atomics::<R>(start, n).iter().map(|a| f(R::load(a))));
        } else {
            // SAFETY: the range is in bounds (checked above), and no other thread writes it
            // during the launch (read-only, or plain: `assume_disjoint`'s contract). A loop
            // of unaligned loads vectorises like memcpy.
            self.prefetch_next(start, n, R::SIZE);
            let base = unsafe { self.ptr.add(start * R::SIZE) } as *const R;
            out.extend((0..n).map(|k| f(unsafe { std::ptr::read_unaligned(base.add(k)) })));
        }
        true
    }

    /// Appends elements `[start, start + n)` to `out` bit for bit (a `memcpy` for read-only
    /// buffers); false when out of bounds.
    #[inline(always)]
    pub(crate) fn copy_run<S: Bits>(&self, start: usize, n: usize, out: &mut Vec<S>) -> bool {
        if !self.fits::<S::Raw>(start, n) {
            return false;
        }
        if self.writable && !self.plain {
            let atomics = self.atomics::<S::Raw>(start, n);
            out.extend(atomics.iter().map(|a| S::from_raw(S::Raw::load(a))));
        } else {
            self.prefetch_next(start, n, S::Raw::SIZE);
            out.reserve(n);
            let len = out.len();
            // SAFETY: the source range is in bounds (checked above) and no other thread
            // writes it during the launch (read-only, or plain: `assume_disjoint`'s
            // contract); the destination is `n` reserved elements of `out`, and every bit
            // pattern is a valid `S` (`Bits` is only implemented for such types), so setting
            // the length after the copy exposes initialised values only.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.ptr.add(start * S::Raw::SIZE),
                    out.as_mut_ptr().add(len) as *mut u8,
                    n * S::Raw::SIZE,
                );
                out.set_len(len + n);
            }
        }
        true
    }

    /// Asks the CPU to start fetching the run after `[start, start + n)` (elements of
    /// `size` bytes). Kernels walk their inputs block after block (a row in a loop, the
    /// next program's block), and between two loads the executor spends a while on other
    /// ops with no memory request in flight; prefetching the likely next block keeps DRAM
    /// busy meanwhile. Only a hint: nothing is read, and addresses are clamped to the
    /// buffer.
    #[inline(always)]
    fn prefetch_next(&self, start: usize, n: usize, size: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            const LINE: usize = 64;
            // Short runs are not worth it, and runs over 8 KiB stream well on their own
            // (prefetching them measured slower on vector add: it evicts data in use).
            if n * size < 1024 || n * size > 8192 {
                return;
            }
            let lo = (start + n) * size;
            let hi = (lo + (n * size).min(4096)).min(self.bytes);
            let mut at = lo;
            while at < hi {
                // SAFETY: `at < self.bytes`, so the address lies inside the buffer; a
                // prefetch never faults and changes no memory.
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        self.ptr.add(at) as *const i8,
                    )
                };
                at += LINE;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (start, n, size);
    }

    /// Elements `[start, start + n)` of a read-only buffer viewed in place, for the whole
    /// launch; `None` for a writable buffer, a range out of bounds, or a misaligned start.
    pub(crate) fn view_run<S: Bits>(&self, start: usize, n: usize) -> Option<&'a [S]> {
        if self.writable || !self.fits::<S::Raw>(start, n) {
            return None;
        }
        // SAFETY: in bounds (checked above).
        let p = unsafe { self.ptr.add(start * S::Raw::SIZE) };
        if (p as usize) % std::mem::align_of::<S>() != 0 {
            return None;
        }
        self.prefetch_next(start, n, S::Raw::SIZE);
        // SAFETY: the range is in bounds and aligned for `S`, every bit pattern is a valid
        // `S` (`Bits`), and a read-only buffer is a shared borrow for `'a` that nothing
        // writes during the launch.
        Some(unsafe { std::slice::from_raw_parts(p as *const S, n) })
    }

    /// Stores element `i`; false when out of bounds or read-only.
    #[inline(always)]
    pub(crate) fn set<R: Raw>(&self, i: usize, v: R) -> bool {
        if !self.writable || !self.fits::<R>(i, 1) {
            return false;
        }
        if self.plain {
            // SAFETY: in bounds (checked above), aligned (`writable`), and no other thread
            // touches an element this program stores during the launch
            // (`assume_disjoint`'s contract).
            unsafe { (self.ptr.add(i * R::SIZE) as *mut R).write(v) };
        } else {
            R::store(self.atomic::<R>(i), v);
        }
        true
    }

    /// Stores `f` of `vals` at `[start, start + vals.len())`; false when out of bounds or
    /// read-only.
    #[inline(always)]
    pub(crate) fn set_run<R: Raw, S: Copy>(
        &self,
        start: usize,
        vals: &[S],
        f: impl Fn(S) -> R,
    ) -> bool {
        if !self.writable || !self.fits::<R>(start, vals.len()) {
            return false;
        }
        if self.plain {
            // SAFETY: the range is in bounds (checked above) and aligned (`writable`), and
            // no other thread touches it during the launch (`assume_disjoint`'s contract),
            // so this program may view it as its own `&mut [R]`.
            let dst = unsafe {
                std::slice::from_raw_parts_mut(self.ptr.add(start * R::SIZE) as *mut R, vals.len())
            };
            for (d, v) in dst.iter_mut().zip(vals) {
                *d = f(*v);
            }
            return true;
        }
        for (a, v) in self.atomics::<R>(start, vals.len()).iter().zip(vals) {
            R::store(a, f(*v));
        }
        true
    }

    /// The atomics at elements `[start, start + n)`; caller checked `fits` and `writable`.
    #[inline(always)]
    fn atomics<R: Raw>(&self, start: usize, n: usize) -> &[R::Atomic] {
        // SAFETY: as for `atomic`: the range is inside the exclusively borrowed, aligned
        // buffer, atomics have the size and alignment of `R`, and all accesses to it during
        // the launch are atomic.
        unsafe { std::slice::from_raw_parts(self.ptr.add(start * R::SIZE) as *const R::Atomic, n) }
    }

    /// Atomically replaces element `i` by `f(old)` (a CAS loop); returns the old bits, or
    /// `None` when out of bounds or read-only.
    pub(crate) fn update<R: Raw>(&self, i: usize, f: impl Fn(R) -> R) -> Option<R> {
        debug_assert!(!self.plain, "a plain buffer has no atomics");
        if !self.writable || !self.fits::<R>(i, 1) {
            return None;
        }
        let a = self.atomic::<R>(i);
        let mut old = R::load(a);
        loop {
            match R::cas(a, old, f(old)) {
                Ok(prev) => return Some(prev),
                Err(now) => old = now,
            }
        }
    }

    /// Atomic compare-and-swap of element `i`; returns the old bits.
    pub(crate) fn compare_swap<R: Raw>(&self, i: usize, cmp: R, new: R) -> Option<R> {
        debug_assert!(!self.plain, "a plain buffer has no atomics");
        if !self.writable || !self.fits::<R>(i, 1) {
            return None;
        }
        Some(match R::cas(self.atomic::<R>(i), cmp, new) {
            Ok(v) | Err(v) => v,
        })
    }
}

/// Smallest buffer worth backing by transparent huge pages.
const HUGE_PAGE_MIN: usize = 8 << 20;

/// Asks Linux to back the 2 MiB-aligned interior of a large output buffer with transparent
/// huge pages. MLX allocates every output anew and glibc serves allocations this large with
/// a fresh `mmap`, so without this the kernel's first stores fault in one 4 KiB page at a
/// time (a quarter of vector add's time, measured with `perf`); with it, one fault per
/// 2 MiB. Purely advisory: contents are unchanged, and failure (THP disabled, `madvise`
/// refused) only leaves the old behaviour.
fn huge_pages(buf: &mut [u8]) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        if buf.len() < HUGE_PAGE_MIN {
            return;
        }
        let start = buf.as_mut_ptr() as usize;
        let lo = start.next_multiple_of(HUGE);
        let hi = (start + buf.len()) / HUGE * HUGE;
        if hi > lo {
            // SAFETY: `[lo, hi)` lies inside `buf`, which we borrow exclusively, and
            // MADV_HUGEPAGE only changes how the kernel backs those pages, never their
            // contents.
            unsafe {
                libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = buf;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_writability_are_checked() {
        let ro = [1u8, 0, 0, 0, 2, 0, 0, 0];
        let m = Mem::read_only(&ro, 4);
        assert_eq!(m.len(), 2);
        assert_eq!(m.get::<u32>(1), Some(2));
        assert_eq!(m.get::<u32>(2), None);
        assert!(!m.set::<u32>(0, 5));
        let mut out = vec![0u32; 4];
        // SAFETY (test): viewing a u32 buffer as bytes.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, out.len() * 4) };
        let w = Mem::writable(bytes, 4).expect("aligned");
        assert!(w.set_run::<u32, u32>(1, &[7, 8, 9], |x| x));
        assert!(!w.set_run::<u32, u32>(2, &[7, 8, 9], |x| x));
        let mut got = Vec::new();
        assert!(m.extend_run::<u32, f32>(0, 2, &mut got, |b| b as f32));
        assert_eq!(got, [1.0, 2.0]);
        assert!(!m.extend_run::<u32, f32>(1, 2, &mut got, |b| b as f32));
        assert_eq!(w.update::<u32>(3, |x| x + 1), Some(9));
        assert_eq!(w.compare_swap::<u32>(0, 0, 4), Some(0));
        assert_eq!(out, vec![4, 7, 8, 10]);
    }

    #[test]
    fn plain_accesses_are_bounds_checked() {
        let mut out = vec![u32::MAX; 6];
        // SAFETY (test): viewing a u32 buffer as bytes.
        let bytes = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, 24) };
        // SAFETY (test): one thread.
        let w = unsafe { Mem::writable(bytes, 4).expect("aligned").assume_disjoint() };
        assert!(w.set_run::<u32, f32>(1, &[1.5, 2.5, 3.5], |x| x as u32));
        assert!(!w.set_run::<u32, f32>(4, &[1.0, 2.0, 3.0], |x| x as u32));
        assert!(w.set::<u32>(5, 9));
        assert!(!w.set::<u32>(6, 9));
        // The program reads back what it stored, with the same bounds checks.
        assert_eq!(w.get::<u32>(2), Some(2));
        assert_eq!(w.get::<u32>(6), None);
        let mut got: Vec<i32> = Vec::new();
        assert!(w.copy_run::<i32>(0, 3, &mut got));
        assert!(w.extend_run::<u32, i32>(3, 3, &mut got, |x| x as i32));
        assert!(!w.extend_run::<u32, i32>(4, 3, &mut got, |x| x as i32));
        assert_eq!(got, [-1, 1, 2, 3, -1, 9]);
        // Read-only buffers stay read-only.
        let ro = [0u8; 8];
        // SAFETY (test): nothing is written.
        let r = unsafe { Mem::read_only(&ro, 4).assume_disjoint() };
        assert!(!r.set::<u32>(0, 1));
        assert_eq!(out, [u32::MAX, 1, 2, 3, u32::MAX, 9]);
    }

    #[test]
    fn huge_page_advice_keeps_contents() {
        // Big enough to be advised, with a ragged tail past the last 2 MiB boundary.
        let n = (HUGE_PAGE_MIN + (3 << 20) + 4 * 37) / 4;
        let mut buf: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2654435761)).collect();
        let want = buf.clone();
        // SAFETY (test): viewing a u32 buffer as bytes.
        let bytes = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut u8, n * 4) };
        let w = Mem::writable(bytes, 4).expect("aligned");
        let mut got: Vec<i32> = Vec::new();
        assert!(w.copy_run(0, n, &mut got));
        assert_eq!(got.len(), n);
        assert!(got.iter().zip(&want).all(|(&g, &w)| g as u32 == w));
        assert!(w.set_run::<u32, u32>(n - 3, &[1, 2, 3], |x| x));
        assert!(!w.set_run::<u32, u32>(n - 2, &[1, 2, 3], |x| x));
        assert_eq!(buf[n - 4..], [want[n - 4], 1, 2, 3]);
    }
}
