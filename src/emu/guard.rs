//! Kernel buffers between inaccessible guard pages, so that an access outside a buffer
//! faults at the access itself (the shim reports the address, the instruction and the
//! thread) instead of reading or writing a neighbour.
//!
//! Pages are coarser than elements, so a buffer touches only one of its guards: with
//! [`Edge::End`] its last byte is the last one before the trailing guard (any access past
//! the end faults), with [`Edge::Start`] its first byte follows the leading guard (any
//! access before the start faults). The bytes between the buffer and the other guard are
//! canaries: a write there is found after the launch ([`Guarded::overrun`]), a read there
//! sees 0xfe bytes. Running a kernel with both edges (the emulator's schedules alternate
//! them) checks every access on both sides.

use std::ffi::c_void;

/// Which edge of a buffer touches its guard page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Edge {
    /// The buffer ends at the trailing guard.
    End,
    /// The buffer starts at the leading guard.
    Start,
}

const CANARY: u8 = 0xfe;
const PROT_NONE: i32 = 0;
const PROT_READ: i32 = 1;
const PROT_WRITE: i32 = 2;
const MAP_PRIVATE: i32 = 2;
#[cfg(target_os = "macos")]
const MAP_ANONYMOUS: i32 = 0x1000;
#[cfg(not(target_os = "macos"))]
const MAP_ANONYMOUS: i32 = 0x20;
#[cfg(target_os = "macos")]
const SC_PAGESIZE: i32 = 29;
#[cfg(not(target_os = "macos"))]
const SC_PAGESIZE: i32 = 30;

extern "C" {
    fn mmap(addr: *mut c_void, len: usize, prot: i32, flags: i32, fd: i32, off: i64)
        -> *mut c_void;
    fn mprotect(addr: *mut c_void, len: usize, prot: i32) -> i32;
    fn munmap(addr: *mut c_void, len: usize) -> i32;
    fn sysconf(name: i32) -> i64;
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { sysconf(SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// One mapping: guard page, the buffer's pages, guard page.
pub(crate) struct Guarded {
    base: *mut u8,
    map_len: usize,
    /// Offset of the buffer's first byte from `base`.
    start: usize,
    /// The buffer's length in bytes.
    pub len: usize,
    /// The accessible pages: `[page, page + pages_len)` from `base`.
    page: usize,
    pages_len: usize,
}

impl Guarded {
    /// A mapping holding `bytes`, `edge` against its guard.
    pub fn new(bytes: &[u8], edge: Edge) -> Result<Guarded, String> {
        let page = page_size();
        let pages_len = bytes.len().div_ceil(page) * page;
        let map_len = pages_len + 2 * page;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            mmap(
                std::ptr::null_mut(),
                map_len,
                PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base as isize == -1 || base.is_null() {
            return Err(format!("cannot map {map_len} bytes for a kernel buffer"));
        }
        let base = base.cast::<u8>();
        let start = match edge {
            Edge::End => page + pages_len - bytes.len(),
            Edge::Start => page,
        };
        // SAFETY: both ranges lie inside the mapping just made; `start + len` is within the
        // accessible pages.
        unsafe {
            std::ptr::write_bytes(base.add(page), CANARY, pages_len);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(start), bytes.len());
            let ok = mprotect(base.cast(), page, PROT_NONE) == 0
                && mprotect(base.add(page + pages_len).cast(), page, PROT_NONE) == 0;
            if !ok {
                munmap(base.cast(), map_len);
                return Err("cannot protect the guard pages of a kernel buffer".into());
            }
        }
        Ok(Guarded {
            base,
            map_len,
            start,
            len: bytes.len(),
            page,
            pages_len,
        })
    }

    /// The buffer's first byte, as the kernel sees it.
    pub fn ptr(&self) -> *mut c_void {
        // SAFETY: `start` is inside the mapping.
        unsafe { self.base.add(self.start).cast() }
    }

    /// The buffer's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        // SAFETY: `[start, start + len)` is mapped readable and initialised.
        unsafe { std::slice::from_raw_parts(self.base.add(self.start), self.len).to_vec() }
    }

    /// Where `addr` lies relative to the buffer's first byte, if inside this mapping.
    pub fn offset_of(&self, addr: usize) -> Option<isize> {
        let base = self.base as usize;
        (base..base + self.map_len)
            .contains(&addr)
            .then(|| addr as isize - (base + self.start) as isize)
    }

    /// Offset (relative to the buffer's first byte) of the first changed canary byte.
    pub fn overrun(&self) -> Option<isize> {
        // SAFETY: the accessible pages are mapped readable.
        let pages = unsafe { std::slice::from_raw_parts(self.base.add(self.page), self.pages_len) };
        let first = self.start - self.page;
        let before = &pages[..first];
        let after = &pages[first + self.len..];
        if let Some(i) = before.iter().position(|b| *b != CANARY) {
            return Some(i as isize - first as isize);
        }
        after
            .iter()
            .position(|b| *b != CANARY)
            .map(|i| (self.len + i) as isize)
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe {
            munmap(self.base.cast(), self.map_len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_touch_their_guard_and_keep_their_bytes() {
        let data: Vec<u8> = (0..100).collect();
        for edge in [Edge::End, Edge::Start] {
            let g = Guarded::new(&data, edge).unwrap();
            assert_eq!(g.bytes(), data);
            assert_eq!(g.overrun(), None);
            let p = g.ptr() as usize;
            assert_eq!(g.offset_of(p + 3), Some(3));
            match edge {
                Edge::End => assert_eq!((p + 100) % page_size(), 0),
                Edge::Start => assert_eq!(p % page_size(), 0),
            }
        }
        let empty = Guarded::new(&[], Edge::End).unwrap();
        assert_eq!(empty.bytes(), Vec::<u8>::new());
    }
}
