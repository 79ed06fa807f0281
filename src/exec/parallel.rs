//! Running a launch's pieces (programs, or ranges of programs) on the calling thread and
//! rayon's pool together.
//!
//! A launch through MLX starts on MLX's stream thread, outside the pool. A parallel iterator
//! there parks that thread until pool threads wake up and finish everything: the launch
//! pays the wake-up of every worker before any work starts, and a 2-core machine runs a
//! launch with one core's thread asleep. Here the calling thread takes pieces from a shared
//! counter at once, and `current_num_threads() - 1` pool threads take pieces from the same
//! counter as they wake, so the pool stays as busy as before and no piece waits for a
//! wake-up. (Measured on the 2-core CI machine, layer_norm 4096x1024 f32 through MLX with
//! the compiled executor, the two ways alternating in one process: 0.92–0.97 ms against
//! 1.04–1.06 ms per launch, medians of three runs.)
//!
//! Called from inside a pool (`ThreadPool::install`), the caller is one of that pool's
//! threads and `current_num_threads() - 1` others join it: a one-thread pool runs the pieces
//! in order on the caller, which tests use to get a deterministic schedule.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, PoisonError};

use crate::error::Result;

/// Runs `work(state, piece)` once for each `piece` in `0..n`, on the calling thread and on
/// up to `rayon::current_num_threads() - 1` pool threads, each participating thread making
/// its `state` with `init` before its first piece.
///
/// Stops handing out pieces after the first error; the error returned is the one of the
/// lowest-numbered piece that failed (so a launch where one program fails reports that
/// program, whichever thread ran it). A panic in `work` is propagated after every thread
/// has stopped.
pub(crate) fn run_pieces<S>(
    n: usize,
    init: impl Fn() -> S + Sync,
    work: impl Fn(&mut S, usize) -> Result<()> + Sync,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let failed = Mutex::new(None);
    let worker = || {
        let mut state = None;
        while !stop.load(Relaxed) {
            let piece = next.fetch_add(1, Relaxed);
            if piece >= n {
                break;
            }
            let state = state.get_or_insert_with(&init);
            if let Err(e) = work(state, piece) {
                stop.store(true, Relaxed);
                let mut f = failed.lock().unwrap_or_else(PoisonError::into_inner);
                if f.as_ref().is_none_or(|&(p, _)| piece < p) {
                    *f = Some((piece, e));
                }
            }
        }
    };
    let helpers = rayon::current_num_threads().min(n).saturating_sub(1);
    if helpers == 0 {
        worker();
    } else {
        rayon::in_place_scope(|s| {
            for _ in 0..helpers {
                s.spawn(|_| worker());
            }
            worker();
        });
    }
    match failed.into_inner().unwrap_or_else(PoisonError::into_inner) {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::run_pieces;
    use crate::error::Error;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    use std::sync::Mutex;

    fn err(piece: usize) -> Error {
        Error::Runtime {
            kernel: "k".into(),
            msg: format!("piece {piece}"),
        }
    }

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
    }

    #[test]
    fn every_piece_runs_once_on_any_pool() {
        for threads in [1, 2, 4] {
            for n in [0, 1, 2, 3, 17, 1000] {
                let runs: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                let inits = AtomicUsize::new(0);
                pool(threads)
                    .install(|| {
                        run_pieces(
                            n,
                            || inits.fetch_add(1, Relaxed),
                            |_, p| {
                                runs[p].fetch_add(1, Relaxed);
                                Ok(())
                            },
                        )
                    })
                    .unwrap();
                assert!(runs.iter().all(|r| r.load(Relaxed) == 1), "{threads} {n}");
                // One state per participating thread, and none without work.
                assert!(inits.load(Relaxed) <= threads.min(n), "{threads} {n}");
            }
        }
        // From outside any pool (MLX's stream thread), with the global pool's helpers.
        let runs: Vec<AtomicUsize> = (0..100).map(|_| AtomicUsize::new(0)).collect();
        let outside = std::thread::spawn(move || {
            run_pieces(
                100,
                || (),
                |_, p| {
                    runs[p].fetch_add(1, Relaxed);
                    Ok(())
                },
            )
            .unwrap();
            runs
        });
        let runs = outside.join().unwrap();
        assert!(runs.iter().all(|r| r.load(Relaxed) == 1));
    }

    #[test]
    fn one_thread_runs_in_order_with_one_state() {
        let order = Mutex::new(Vec::new());
        pool(1)
            .install(|| {
                run_pieces(
                    5,
                    || 10,
                    |s, p| {
                        *s += 1;
                        order.lock().unwrap().push((p, *s));
                        Ok(())
                    },
                )
            })
            .unwrap();
        let want: Vec<(usize, i32)> = (0..5).map(|p| (p, 11 + p as i32)).collect();
        assert_eq!(order.into_inner().unwrap(), want);
    }

    #[test]
    fn reports_the_lowest_failing_piece_and_stops() {
        // In order on one thread: piece 3 fails, nothing after it runs.
        let ran = AtomicUsize::new(0);
        let e = pool(1)
            .install(|| {
                run_pieces(
                    10,
                    || (),
                    |_, p| {
                        ran.fetch_add(1, Relaxed);
                        if p >= 3 {
                            Err(err(p))
                        } else {
                            Ok(())
                        }
                    },
                )
            })
            .unwrap_err();
        assert!(e.to_string().contains("piece 3"), "{e}");
        assert_eq!(ran.load(Relaxed), 4);
        // In parallel, the only failing piece is the one reported, whoever ran it.
        for threads in [2, 4] {
            for bad in [0, 7, 63] {
                let e = pool(threads)
                    .install(|| {
                        run_pieces(
                            64,
                            || (),
                            |_, p| if p == bad { Err(err(p)) } else { Ok(()) },
                        )
                    })
                    .unwrap_err();
                assert!(e.to_string().contains(&format!("piece {bad}")), "{e}");
            }
        }
    }

    #[test]
    fn a_panic_reaches_the_caller() {
        let r = std::panic::catch_unwind(|| {
            pool(2).install(|| {
                run_pieces(
                    8,
                    || (),
                    |_, p| {
                        assert!(p != 5, "piece five");
                        Ok(())
                    },
                )
            })
        });
        assert!(r.is_err());
    }
}
