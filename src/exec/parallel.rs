//! Running a launch's programs on the calling thread and rayon's pool together.
//!
//! A launch through MLX starts on MLX's stream thread, outside the pool. A parallel iterator
//! there parks that thread until pool threads wake up and finish everything: the launch
//! pays the wake-up of every worker before any work starts, and a 2-core machine runs a
//! launch with one core's thread asleep. Here the calling thread runs the first program at
//! once and, when the rest looks longer than a wake-up, takes pieces from a shared counter
//! while `current_num_threads() - 1` pool threads take pieces from the same counter as they
//! wake; a helper that wakes after the work is gone returns without being waited for.
//! Measured on the 2-core CI machine (layer_norm 4096x1024 f32 through MLX, compiled
//! executor): 0.92–0.97 ms against 1.04–1.06 ms per launch with the parallel iterator (the
//! two alternating in one process, medians of three runs); a 2-program launch no longer
//! wakes the pool at all.
//!
//! Called from inside a pool (`ThreadPool::install`), the caller is one of that pool's
//! threads and `current_num_threads() - 1` others join it: a one-thread pool runs the
//! programs in order on the caller, which tests use to get a deterministic schedule.

use std::any::Any;
use std::ops::Range;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::error::Result;

/// Below this much estimated work a launch runs on the calling thread alone: waking a
/// sleeping pool thread costs tens of microseconds here (and the woken thread can preempt
/// the caller on a 2-core machine), more than it would save.
const INLINE: Duration = Duration::from_micros(40);

/// Runs `work(state, range)` over `0..total` in ranges that together cover each index once:
/// first `0..1` on the calling thread, timed; then, if the rest looks longer than
/// [`INLINE`], in about `pieces_per_thread` pieces per thread, dealt from a shared counter
/// to the calling thread and up to `rayon::current_num_threads() - 1` pool threads, each
/// participating thread making its `state` with `init` before its first range.
///
/// Stops handing out pieces after the first error and returns the error of the lowest
/// range that failed. Pieces are dealt in order and a piece once dealt runs to its end, so
/// when `work` stops a range at its first error (as both executors do), the error is the
/// one of the lowest failing index whatever the schedule: a launch reports its
/// lowest-numbered failing program. A panic in `work` is propagated after every thread has
/// stopped.
pub(crate) fn run_pieces<S>(
    total: usize,
    pieces_per_thread: usize,
    init: impl Fn() -> S + Sync,
    work: impl Fn(&mut S, Range<usize>) -> Result<()> + Sync,
) -> Result<()> {
    if total == 0 {
        return Ok(());
    }
    let mut first = init();
    let t = Instant::now();
    work(&mut first, 0..1)?;
    let rest = total - 1;
    let threads = rayon::current_num_threads();
    if rest == 0 || threads == 1 || t.elapsed().as_nanos() * (rest as u128) < INLINE.as_nanos() {
        return work(&mut first, 1..total);
    }
    let per = rest.div_ceil(threads * pieces_per_thread.max(1));
    let n = rest.div_ceil(per);
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let failed = Mutex::new(None);
    let deal = |state: &mut Option<S>| {
        while !stop.load(Relaxed) {
            let piece = next.fetch_add(1, Relaxed);
            if piece >= n {
                break;
            }
            let state = state.get_or_insert_with(&init);
            let range = 1 + piece * per..(1 + (piece + 1) * per).min(total);
            if let Err(e) = work(state, range) {
                stop.store(true, Relaxed);
                let mut f = failed.lock().unwrap_or_else(PoisonError::into_inner);
                if f.as_ref().is_none_or(|&(p, _)| piece < p) {
                    *f = Some((piece, e));
                }
            }
        }
    };
    let mut mine = Some(first);
    with_helpers((threads - 1).min(n - 1), &|| deal(&mut None), || {
        deal(&mut mine)
    });
    match failed.into_inner().unwrap_or_else(PoisonError::into_inner) {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// The word a [`Gate`] keeps its state in: the subset of an atomic `usize`'s operations it
/// uses, so that tests can run the same gate on a model checker's atomics.
pub(crate) trait GateWord {
    /// `fetch_update(Acquire, Acquire, f)`.
    fn update(&self, f: impl FnMut(usize) -> Option<usize>) -> Result<usize, usize>;
    /// `fetch_or(bits, AcqRel)`.
    fn or(&self, bits: usize) -> usize;
    /// `fetch_sub(1, Release)`.
    fn decrement(&self) -> usize;
    /// `load(Acquire)`.
    fn get(&self) -> usize;
}

impl GateWord for AtomicUsize {
    fn update(&self, f: impl FnMut(usize) -> Option<usize>) -> Result<usize, usize> {
        self.fetch_update(Acquire, Acquire, f)
    }
    fn or(&self, bits: usize) -> usize {
        self.fetch_or(bits, AcqRel)
    }
    fn decrement(&self) -> usize {
        self.fetch_sub(1, Release)
    }
    fn get(&self) -> usize {
        self.load(Acquire)
    }
}

/// Whether helpers may still enter a launch, and how many are inside, in one word: the top
/// bit is "closed", the rest counts helpers inside. A helper enters only with a
/// compare-and-swap that sees the bit clear and counts itself; the caller sets the bit with
/// one read-modify-write and then waits for the count to drop to zero. All of these act on
/// one location, so its modification order puts every entry either before the close (the
/// caller then sees the helper counted, and its acquire load of the count reaching zero
/// synchronises with the helper's release on leaving) or after it (the entry fails): no
/// helper is inside once `close_and_wait` returns. `parallel_tests::gate_model` checks this
/// on every interleaving with `loom`.
pub(crate) struct Gate<W> {
    word: W,
}

const CLOSED: usize = 1 << (usize::BITS - 1);

impl<W: GateWord> Gate<W> {
    /// An open gate over `word` (which must hold 0).
    pub(crate) fn new(word: W) -> Gate<W> {
        Gate { word }
    }

    /// Helper side: `true` if the gate was open and the helper is now counted inside (it
    /// must call [`Gate::leave`] when done); `false` once closed.
    pub(crate) fn enter(&self) -> bool {
        self.word
            .update(|s| (s & CLOSED == 0).then_some(s + 1))
            .is_ok()
    }

    /// Helper side: leaves after a successful [`Gate::enter`].
    pub(crate) fn leave(&self) {
        self.word.decrement();
    }

    /// Caller side: closes the gate and waits (calling `pause` between checks) until no
    /// helper is inside.
    pub(crate) fn close_and_wait(&self, mut pause: impl FnMut(u32)) {
        let mut inside = self.word.or(CLOSED) & !CLOSED;
        let mut spins = 0u32;
        while inside != 0 {
            pause(spins);
            spins = spins.saturating_add(1);
            inside = self.word.get() & !CLOSED;
        }
    }
}

/// What the helpers of one launch share with its caller.
struct Shared {
    /// The worker loop, in the caller's frame (its lifetime erased). A helper calls it only
    /// between a successful `gate.enter()` and its `gate.leave()`; the caller closes the gate
    /// and waits for helpers inside before it leaves `with_helpers`, also when unwinding, so
    /// no helper calls it after the frame is gone ([`Gate`]).
    body: *const (dyn Fn() + Sync),
    gate: Gate<AtomicUsize>,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

// SAFETY: `body` is only dereferenced under the gate's protocol, while the closure it points
// to (which is `Sync`) is alive; the other fields are thread-safe.
unsafe impl Send for Shared {}
// SAFETY: as for `Send`.
unsafe impl Sync for Shared {}

/// Closes the launch and waits for helpers still inside `body` (at most one piece each:
/// nothing is left to hand out when the caller gets here).
struct Close<'a>(&'a Shared);

impl Drop for Close<'_> {
    fn drop(&mut self) {
        self.0.gate.close_and_wait(|spins| {
            if spins < 1 << 12 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        });
    }
}

/// Runs `mine` on the calling thread and offers `body` to `helpers` pool threads. A helper
/// that wakes after the caller has finished does nothing, so the caller never waits for a
/// sleeping thread to wake up; one that started is waited for.
fn with_helpers(helpers: usize, body: &(dyn Fn() + Sync), mine: impl FnOnce()) {
    // SAFETY: only the lifetime is erased; see `Shared::body` for why it is never used
    // after `body` is gone.
    let erased: &'static (dyn Fn() + Sync) = unsafe { std::mem::transmute(body) };
    let shared = Arc::new(Shared {
        body: erased,
        gate: Gate::new(AtomicUsize::new(0)),
        panic: Mutex::new(None),
    });
    for _ in 0..helpers {
        let shared = Arc::clone(&shared);
        rayon::spawn(move || {
            if shared.gate.enter() {
                // SAFETY: inside the gate: the caller waits before `body` goes away.
                let body = unsafe { &*shared.body };
                if let Err(p) = catch_unwind(AssertUnwindSafe(body)) {
                    *shared.panic.lock().unwrap_or_else(PoisonError::into_inner) = Some(p);
                }
                shared.gate.leave();
            }
        });
    }
    let close = Close(&shared);
    mine();
    drop(close);
    let panic = shared
        .panic
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    if let Some(p) = panic {
        resume_unwind(p);
    }
}
