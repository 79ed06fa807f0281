//! Tests of `parallel::run_pieces`: coverage, order, errors, panics, use of the pool.

use super::parallel::run_pieces;
use crate::error::Error;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

fn err(i: usize) -> Error {
    Error::Runtime {
        kernel: "k".into(),
        msg: format!("index {i};"),
    }
}

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

/// Runs `0..total` with `each` per index; returns how often each index ran, how many
/// states were made and which threads ran something.
fn run(threads: usize, total: usize, each: impl Fn(usize) + Sync) -> (Vec<usize>, usize, usize) {
    let runs: Vec<AtomicUsize> = (0..total).map(|_| AtomicUsize::new(0)).collect();
    let inits = AtomicUsize::new(0);
    let who = Mutex::new(HashSet::new());
    pool(threads)
        .install(|| {
            run_pieces(
                total,
                4,
                || inits.fetch_add(1, Relaxed),
                |_, range| {
                    who.lock().unwrap().insert(std::thread::current().id());
                    for i in range {
                        runs[i].fetch_add(1, Relaxed);
                        each(i);
                    }
                    Ok(())
                },
            )
        })
        .unwrap();
    let runs = runs.into_iter().map(AtomicUsize::into_inner).collect();
    (runs, inits.into_inner(), who.into_inner().unwrap().len())
}

#[test]
fn every_index_runs_once_on_any_pool() {
    for threads in [1, 2, 4] {
        for total in [0, 1, 2, 3, 17, 1000] {
            let (runs, inits, _) = run(threads, total, |_| ());
            assert!(runs.iter().all(|&r| r == 1), "{threads} {total}");
            assert!(inits <= threads.min(total), "{threads} {total}");
        }
    }
}

#[test]
fn long_launches_use_the_pool() {
    // 64 x 0.5 ms is far above the inline budget: pool threads join the caller.
    let (runs, inits, who) = run(2, 64, |_| std::thread::sleep(Duration::from_micros(500)));
    assert!(runs.iter().all(|&r| r == 1));
    assert_eq!((inits, who), (2, 2));
    // From outside any pool (MLX's stream thread), with the global pool's threads.
    let outside = std::thread::spawn(|| {
        let runs: Vec<AtomicUsize> = (0..40).map(|_| AtomicUsize::new(0)).collect();
        run_pieces(
            40,
            8,
            || (),
            |_, range| {
                for i in range {
                    runs[i].fetch_add(1, Relaxed);
                    std::thread::sleep(Duration::from_micros(200));
                }
                Ok(())
            },
        )
        .unwrap();
        runs
    });
    assert!(outside.join().unwrap().iter().all(|r| r.load(Relaxed) == 1));
}

#[test]
fn one_thread_runs_in_order_with_one_state() {
    let order = Mutex::new(Vec::new());
    pool(1)
        .install(|| {
            run_pieces(
                5,
                2,
                || 10,
                |s, range| {
                    for i in range {
                        *s += 1;
                        order.lock().unwrap().push((i, *s));
                    }
                    Ok(())
                },
            )
        })
        .unwrap();
    let want: Vec<(usize, i32)> = (0..5).map(|i| (i, 11 + i as i32)).collect();
    assert_eq!(order.into_inner().unwrap(), want);
}

#[test]
fn reports_the_lowest_failing_index_and_stops() {
    // On one thread, in order: index 3 fails and nothing after it runs.
    let ran = AtomicUsize::new(0);
    let e = pool(1)
        .install(|| {
            run_pieces(
                10,
                4,
                || (),
                |_, range| {
                    for i in range {
                        ran.fetch_add(1, Relaxed);
                        if i >= 3 {
                            return Err(err(i));
                        }
                    }
                    Ok(())
                },
            )
        })
        .unwrap_err();
    assert!(e.to_string().contains("index 3;"), "{e}");
    assert_eq!(ran.load(Relaxed), 4);
    // In parallel (slow indices, so the pool joins), every index from `bad` on fails and
    // later ones fail sooner: the lowest is reported, whoever ran it and whenever.
    for threads in [2, 4] {
        for bad in [0, 7, 30] {
            let e = pool(threads)
                .install(|| {
                    run_pieces(
                        32,
                        4,
                        || (),
                        |_, range| {
                            for i in range {
                                let us = 50 * (32 - i as u64);
                                std::thread::sleep(Duration::from_micros(us));
                                if i >= bad {
                                    return Err(err(i));
                                }
                            }
                            Ok(())
                        },
                    )
                })
                .unwrap_err();
            assert!(e.to_string().contains(&format!("index {bad};")), "{e}");
        }
    }
}

#[test]
fn a_panic_reaches_the_caller() {
    for (total, slow) in [(8, false), (64, true)] {
        let r = std::panic::catch_unwind(|| {
            pool(2).install(|| {
                run_pieces(
                    total,
                    4,
                    || (),
                    |_, range| {
                        for i in range {
                            if slow {
                                std::thread::sleep(Duration::from_micros(200));
                            }
                            assert!(i != total - 3, "index {i}");
                        }
                        Ok(())
                    },
                )
            })
        });
        assert!(r.is_err(), "{total}");
    }
}

/// The helpers' handshake (`parallel::Gate`, the code `run_pieces` uses) on `loom`'s atomics,
/// every interleaving and every weak-memory outcome it models: a helper touches the
/// caller's borrowed data only inside the gate, the caller frees that data right after
/// `close_and_wait`, and loom reports any access that could race with the free.
#[test]
fn gate_model() {
    use super::parallel::{Gate, GateWord};
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::{AtomicUsize, Ordering::*};
    use loom::sync::Arc;

    struct Word(AtomicUsize);
    impl GateWord for Word {
        fn update(&self, f: impl FnMut(usize) -> Option<usize>) -> Result<usize, usize> {
            self.0.fetch_update(Acquire, Acquire, f)
        }
        fn or(&self, bits: usize) -> usize {
            self.0.fetch_or(bits, AcqRel)
        }
        fn decrement(&self) -> usize {
            self.0.fetch_sub(1, Release)
        }
        fn get(&self) -> usize {
            self.0.load(Acquire)
        }
    }

    for helpers in 1..=2 {
        loom::model(move || {
            // The caller's frame: `body` borrows it, the caller ends it after closing.
            let frame = Arc::new(UnsafeCell::new(7u32));
            let gate = Arc::new(Gate::new(Word(AtomicUsize::new(0))));
            let threads: Vec<_> = (0..helpers)
                .map(|_| {
                    let (frame, gate) = (frame.clone(), gate.clone());
                    loom::thread::spawn(move || {
                        if gate.enter() {
                            // SAFETY (model): a read loom checks against the caller's write.
                            let v = frame.with(|p| unsafe { *p });
                            assert_eq!(v, 7, "the body ran after its frame ended");
                            gate.leave();
                        }
                    })
                })
                .collect();
            gate.close_and_wait(|_| loom::thread::yield_now());
            // SAFETY (model): the frame ends; loom fails the model if a helper can still read.
            frame.with_mut(|p| unsafe { *p = 0 });
            // A helper that enters now finds the gate closed.
            assert!(!gate.enter());
            for t in threads {
                t.join().unwrap();
            }
        });
    }
}
