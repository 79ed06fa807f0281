//! Barriers on emulated Metal, checked in every schedule the emulator has
//! (`LaneOrder::ALL`: lane order both ways, one SIMD-group running ahead of the others,
//! seeded random).
//!
//! - A `debug_barrier` opening a loop body or a branch orders the accesses before it (the
//!   previous iteration's, those before the branch), and the optimiser keeps it.
//! - Every `threadgroup_barrier` in the Metal generated for the examples' kernels is
//!   needed: deleting it alone changes the result (or faults) in some schedule, unless it
//!   provably guards nothing ([`barrier_separates_disjoint_accesses`]) or orders only
//!   loads whose values nothing uses ([`broadcast_barrier_orders_only_dead_reads`]).

#[allow(dead_code, unused_imports)]
#[path = "../examples/dropout.rs"]
mod dropout;
#[allow(dead_code, unused_imports)]
#[path = "../examples/fused_softmax.rs"]
mod fused_softmax;
#[allow(dead_code, unused_imports)]
#[path = "../examples/layer_norm.rs"]
mod layer_norm;
#[allow(dead_code, unused_imports)]
#[path = "../examples/matmul.rs"]
mod matmul;
#[allow(dead_code, unused_imports)]
#[path = "../examples/row_sum.rs"]
mod row_sum;
#[allow(dead_code, unused_imports)]
#[path = "../examples/strided.rs"]
mod strided;
#[allow(dead_code, unused_imports)]
#[path = "../examples/vector_add.rs"]
mod vector_add;

use triton_metal::codegen::ReductionLayout;
use triton_metal::emu::{self, EmuBuffer, Emulator, LaneOrder, MetalLaunch};
use triton_metal::passes::PassOptions;
use triton_metal::runtime::{cdiv, out, Launch, Target};
use triton_metal::tl::{self, JitKernel};
use triton_metal::DType::{F16, F32};
use triton_metal::{mlx, Array, Result};

fn iota(n: usize) -> Result<Array> {
    Array::from_slice(&(0..n).map(|i| i as f32).collect::<Vec<_>>(), &[n])
}

/// Which of the two region-opening barriers [`ping_pong`] has.
#[derive(Clone, Copy)]
struct Opening {
    loop_body: bool,
    branch: bool,
}

/// Reverses a block through `buf` six times, then once more in a branch. The barrier
/// opening the loop body orders the previous iteration's store before this iteration's
/// load; the one opening the branch orders the loop's last store before the branch's load.
fn ping_pong(opening: Opening) -> Result<JitKernel> {
    tl::jit("ping_pong", move |k| {
        let (buf, x) = (k.ptr(F32, "buf"), k.ptr(F32, "x"));
        let block = k.constexpr("BLOCK");
        let offs = tl::arange(0, block);
        tl::store(buf + offs, tl::load(x + offs));
        tl::range(0, 6, 1).for_each(|_| {
            if opening.loop_body {
                tl::debug_barrier();
            }
            let v = tl::load(buf + ((block - 1) - offs));
            tl::debug_barrier();
            tl::store(buf + offs, v * 2.0 + offs.cast(F32));
        });
        tl::if_then(tl::program_id(0).eq(0), || {
            if opening.branch {
                tl::debug_barrier();
            }
            let v = tl::load(buf + ((block - 1) - offs));
            tl::debug_barrier();
            tl::store(buf + offs, v - 1.0);
        });
    })
}

#[test]
fn a_barrier_opening_a_loop_body_or_a_branch_orders_what_came_before() -> Result<()> {
    if !Emulator::should_run("a_barrier_opening_a_loop_body_or_a_branch_orders_what_came_before")? {
        return Ok(());
    }
    let x = iota(256)?;
    let run = |k: &JitKernel, target: Target| -> Result<Vec<f32>> {
        k.launch()
            .grid([1])
            .args((out(&[256], F32).fill(f64::NAN), &x))
            .constexpr("BLOCK", 256)
            .optimize(PassOptions::default())
            .target(target)
            .run()?[0]
            .to_vec::<f32>()
    };
    let both = Opening {
        loop_body: true,
        branch: true,
    };
    let kernel = ping_pong(both)?;
    let want = run(&kernel, Target::Cpu)?;
    for order in LaneOrder::ALL {
        assert_eq!(run(&kernel, Target::Emulated(order))?, want, "{order}");
    }
    // Without either barrier the emulator sees the race, so the check above can fail.
    for racy in [
        Opening {
            loop_body: false,
            ..both
        },
        Opening {
            branch: false,
            ..both
        },
    ] {
        let racy = ping_pong(racy)?;
        assert_eq!(run(&racy, Target::Cpu)?, want);
        let mut differs = 0;
        for order in LaneOrder::ALL {
            differs += (run(&racy, Target::Emulated(order))? != want) as usize;
        }
        assert!(differs > 0, "no schedule exposed the missing barrier");
    }
    Ok(())
}

/// One kernel launch whose barriers are deleted one at a time.
struct Case {
    name: String,
    launch: MetalLaunch,
    /// The interpreter's outputs, to check the unmodified kernel against.
    reference: Vec<Array>,
    /// Largest |emulated - interpreted| allowed (float reductions reassociate).
    tolerance: f64,
}

fn case(name: &str, launch: Launch<'_>, tolerance: f64) -> Result<Case> {
    let emulated = launch.emulated()?;
    let reference = launch.target(Target::Cpu).run()?;
    Ok(Case {
        name: name.into(),
        launch: emulated,
        reference,
        tolerance,
    })
}

/// The examples' kernels at small, ragged sizes; reductions in every layout.
fn cases() -> Result<Vec<Case>> {
    let mut cases = Vec::new();

    let add = vector_add::add_kernel()?;
    let (x, y) = (mlx::random::normal(&[1000], F32, 0)?, iota(1000)?);
    cases.push(case(
        "vector_add",
        add.launch()
            .grid([cdiv(1000, 256)])
            .args((&x, &y, out(&[1000], F32).fill(f64::NAN), 1000))
            .constexpr("BLOCK_SIZE", 256),
        0.0,
    )?);

    let softmax = fused_softmax::softmax_kernel()?;
    let (rows, cols) = (3usize, 300usize);
    let x = mlx::random::normal(&[rows, cols], F32, 1)?;
    for layout in ReductionLayout::ALL {
        cases.push(case(
            &format!("softmax {layout:?}"),
            softmax
                .launch()
                .grid([rows])
                .args((
                    out(&[rows, cols], F32).fill(f64::NAN),
                    &x,
                    cols as i32,
                    cols as i32,
                    cols as i32,
                ))
                .constexpr("BLOCK_SIZE", 512)
                .reduction_layout(layout),
            1e-6,
        )?);
    }

    let layer_norm = layer_norm::layer_norm_kernel()?;
    let (rows, cols) = (3usize, 300usize);
    let x = mlx::random::normal(&[rows, cols], F32, 2)?;
    // The example's block: 256 columns over the 128 threads of 4 SIMD-groups.
    let w = mlx::random::uniform(&[cols], F32, 0.5, 1.5, 3)?;
    let b = mlx::random::uniform(&[cols], F32, -0.5, 0.5, 4)?;
    for layout in ReductionLayout::ALL {
        cases.push(case(
            &format!("layer_norm {layout:?}"),
            layer_norm
                .launch()
                .grid([rows])
                .args((
                    &x,
                    out(&[rows, cols], F32).fill(f64::NAN),
                    &w,
                    &b,
                    cols as i32,
                    cols as i32,
                    1e-5f32,
                ))
                .constexpr("BLOCK_SIZE", 256)
                .reduction_layout(layout),
            1e-5,
        )?);
    }

    let row_sum = row_sum::row_sum_kernel()?;
    let (rows, cols) = (3usize, 700usize);
    let x = mlx::random::uniform(&[rows, cols], F32, -1.0, 1.0, 5)?;
    for layout in ReductionLayout::ALL {
        cases.push(case(
            &format!("row_sum {layout:?}"),
            row_sum
                .launch()
                .grid([rows])
                .args((&x, out(&[rows], F32).fill(f64::NAN), cols as i32))
                .constexpr("BLOCK_SIZE", 512)
                .reduction_layout(layout),
            1e-4,
        )?);
    }

    for dtype in [F32, F16] {
        let matmul = matmul::matmul_kernel()?;
        // The example's blocks, ragged sizes.
        let (m, n, k) = (130usize, 70usize, 80usize);
        let a = mlx::random::normal(&[m, k], dtype, 6)?;
        let b = mlx::random::normal(&[k, n], dtype, 7)?;
        cases.push(case(
            &format!("matmul {dtype}"),
            matmul
                .launch()
                .grid([cdiv(m, 64) * cdiv(n, 64)])
                .args((
                    &a,
                    &b,
                    out(&[m, n], dtype).fill(f64::NAN),
                    m as i32,
                    n as i32,
                    k as i32,
                    k as i32,
                    1,
                    n as i32,
                    1,
                    n as i32,
                    1,
                ))
                .constexpr("BLOCK_SIZE_M", 64)
                .constexpr("BLOCK_SIZE_N", 64)
                .constexpr("BLOCK_SIZE_K", 32)
                .constexpr("GROUP_SIZE_M", 8),
            if dtype == F16 { 2e-2 } else { 1e-4 },
        )?);
    }

    let dropout = dropout::dropout_kernel()?;
    let x = mlx::random::uniform(&[3000], F32, 1.0, 2.0, 8)?;
    cases.push(case(
        "dropout",
        dropout
            .launch()
            .grid([cdiv(3000, 1024)])
            .args((&x, out(&[3000], F32).fill(f64::NAN), 3000, 0.3f32, 123))
            .constexpr("BLOCK_SIZE", 1024),
        0.0,
    )?);

    let strided = strided::strided_kernel()?;
    let x = iota(3000)?;
    cases.push(case(
        "strided",
        strided
            .launch()
            .grid([cdiv(1000, 256)])
            .args((&x, out(&[1000], F32).fill(f64::NAN), 3, 1000))
            .constexpr("BLOCK_SIZE", 256),
        0.0,
    )?);
    Ok(cases)
}

/// Whether `name` occurs in `text` as a whole identifier, and how often.
fn mentions(text: &str, name: &str) -> usize {
    let ident = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    text.match_indices(name)
        .filter(|(i, _)| {
            !ident(text[..*i].chars().next_back()) && !ident(text[i + name.len()..].chars().next())
        })
        .count()
}

/// A proof from the source alone that deleting the `n`-th barrier changes nothing: it sits
/// in the kernel's top-level code (no loop or branch around it, so every thread passes it
/// once), and nothing before it touches memory that the code from it to the next top-level
/// barrier (or the end) touches: each threadgroup array used there is only declared before
/// it, and each output is named on at most one side. Threadgroup memory is reached only
/// through the arrays' names (no `threadgroup` pointer is declared anywhere: a kernel whose
/// buffers are views of one arena gets no proof from this rule), inputs are
/// only read, and SIMD-group collectives exchange registers, not memory. A barrier orders
/// a memory access before it against a conflicting one (one of them a write) after it,
/// before the next barrier orders them anyway; here there is no such pair. (This covers a
/// barrier that nothing precedes, and one between phases that use different arrays.)
fn barrier_separates_disjoint_accesses(source: &str, n: usize, outputs: &[String]) -> bool {
    let starts: Vec<usize> = source.match_indices(BARRIER).map(|(i, _)| i).collect();
    let top_level = |i: usize| source[..i].matches('{').count() == source[..i].matches('}').count();
    let Some(&at) = starts.get(n).filter(|&&at| top_level(at)) else {
        return false;
    };
    let end = starts[n + 1..]
        .iter()
        .copied()
        .find(|&i| top_level(i))
        .unwrap_or(source.len());
    let (before, between) = (&source[..at], &source[at..end]);
    let decl = |l: &str| l.trim_start().starts_with("threadgroup ");
    if source
        .lines()
        .any(|l| l.contains("threadgroup ") && !decl(l))
    {
        return false;
    }
    let arrays = threadgroup_arrays(source);
    // Views of one arena (`threadgroup T* const v = ... tm_arena + offset`) may share
    // bytes, so their names do not tell memory apart: then the barrier is redundant only
    // when one side uses none of them (declarations aside).
    let disjoint = if source.lines().any(|l| decl(l) && l.contains('*')) {
        let uses = |text: &str| {
            text.lines()
                .filter(|l| !decl(l))
                .any(|l| arrays.iter().any(|a| mentions(l, a) > 0))
        };
        !(uses(before) && uses(between))
    } else {
        arrays
            .iter()
            .all(|a| mentions(between, a) == 0 || mentions(before, a) <= 1)
    };
    disjoint
        && outputs
            .iter()
            .all(|o| mentions(before, o) == 0 || mentions(between, o) == 0)
}

const BARRIER: &str = "threadgroup_barrier(";

/// The threadgroup arrays (and views of the arena) `source` declares.
fn threadgroup_arrays(source: &str) -> Vec<&str> {
    source
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("threadgroup "))
        .filter_map(|decl| decl.split(['[', '=']).next()?.split_whitespace().last())
        .collect()
}

/// How many of the `threads` threads pass `guard`, a store's condition of the form
/// `(tm_lid & M) == 0`, optionally `&& tm_l < L` with `tm_l` defined in `code` as
/// `(tm_i0 & A) | (tm_lid << S)` and `tm_i0` as 0; `None` for any other form.
fn storing_threads(guard: &str, code: &str, threads: usize) -> Option<usize> {
    let uint = |s: &str| s.trim().trim_end_matches('u').parse::<usize>().ok();
    let mut terms = guard.split(" && ");
    let mask = uint(
        terms
            .next()?
            .strip_prefix("(tm_lid & ")?
            .strip_suffix(") == 0")?,
    )?;
    let mut bound = threads;
    if let Some(term) = terms.next() {
        let limit = uint(term.strip_prefix("tm_l < ")?)?;
        let lines: Vec<&str> = code.lines().map(str::trim).collect();
        lines.contains(&"const uint tm_i0 = 0u;").then_some(())?;
        let shift = lines.iter().find_map(|l| {
            let rest = l.strip_prefix("const uint tm_l = (tm_i0 & ")?;
            uint(rest.split_once(") | (tm_lid << ")?.1.strip_suffix(");")?)
        })?;
        // tm_l == tm_lid << shift.
        bound = bound.min(limit.div_ceil(1 << shift));
    }
    terms
        .next()
        .is_none()
        .then(|| (0..bound).filter(|l| (l & mask) == 0).count())
}

/// A proof from the source alone that deleting the `n`-th barrier can change no output: the
/// barrier before a reduction's result is broadcast through threadgroup memory.
///
/// It sits in top-level code. Between it and the next barrier the only threadgroup access
/// is one store, `if ((tm_lid & M) == 0 ...) buf[0u] = part[...];`, made by one thread
/// ([`storing_threads`]). Between the previous barrier and it, `buf` is only read, each read
/// into `part` (`part[..] = ... buf[..] ...`), and `part` is never mentioned after the
/// store. The barrier orders those reads against the store: the storing thread made its
/// own reads before its store (program order), and a read racing with the store in any
/// other thread lands in that thread's `part`, which nothing uses any more. Nothing was
/// written to `buf` since the previous barrier, so the store races with no other store,
/// and everything after the next barrier is ordered by it. (The deletion leaves a race on
/// a dead load only: no schedule can change an output, which is all the emulator compares.)
fn broadcast_barrier_orders_only_dead_reads(source: &str, n: usize, threads: usize) -> bool {
    let starts: Vec<usize> = source.match_indices(BARRIER).map(|(i, _)| i).collect();
    let (Some(&at), Some(&prev), Some(&next)) = (
        starts.get(n),
        n.checked_sub(1).and_then(|p| starts.get(p)),
        starts.get(n + 1),
    ) else {
        return false;
    };
    let top_level = |s: &str| s.matches('{').count() == s.matches('}').count();
    if !top_level(&source[..prev]) || !top_level(&source[..at]) || !top_level(&source[..next]) {
        return false;
    }
    let (before, after) = (&source[prev..at], &source[at..next]);
    let arrays = threadgroup_arrays(source);
    let touched: Vec<&str> = arrays
        .iter()
        .copied()
        .filter(|a| mentions(after, a) > 0)
        .collect();
    let [buf] = touched[..] else {
        return false;
    };
    if mentions(after, buf) != 1 {
        return false;
    }
    let Some(store) = after.lines().map(str::trim).find(|l| mentions(l, buf) == 1) else {
        return false;
    };
    let Some((guard, part)) = store
        .strip_prefix("if (")
        .and_then(|r| r.split_once(&format!(") {buf}[0u] = ")))
        .and_then(|(guard, rhs)| Some((guard, rhs.split('[').next()?)))
    else {
        return false;
    };
    if storing_threads(guard, after, threads) != Some(1) {
        return false;
    }
    let reads_into_part = before
        .lines()
        .map(str::trim)
        .filter(|l| mentions(l, buf) > 0)
        .all(|l| {
            l.split_once(" = ").is_some_and(|(lhs, _)| {
                lhs.starts_with(&format!("{part}[")) && mentions(lhs, buf) == 0
            })
        });
    let after_store = &source[at + after.find(store).unwrap_or(0) + store.len()..];
    reads_into_part && mentions(after_store, part) == 0
}

/// `source` without its `n`-th `threadgroup_barrier(...);` statement.
fn delete_barrier(source: &str, n: usize) -> Option<String> {
    let start = source.match_indices(BARRIER).nth(n)?.0;
    let end = start + source[start..].find(';')? + 1;
    Some(format!("{}{}", &source[..start], &source[end..]))
}

/// Whether some schedule tells the mutant from the unmodified kernel's outputs `base`:
/// a different output bit pattern, or an error (a fault, a deadlock).
fn caught(mutant: &MetalLaunch, base: &[EmuBuffer]) -> Result<Option<String>> {
    for order in LaneOrder::ALL {
        match emu::run(&mutant.clone().lane_order(order)) {
            Err(e) => return Ok(Some(format!("{order}: {e}"))),
            Ok(out) => {
                if let Some((o, _)) = out.iter().zip(base).find(|(a, b)| a.bytes != b.bytes) {
                    return Ok(Some(format!("{order}: output `{}` differs", o.name)));
                }
            }
        }
    }
    Ok(None)
}

/// The source with the `n`-th barrier's line marked, for a failure message.
fn around_barrier(source: &str, n: usize) -> String {
    let Some((at, _)) = source.match_indices(BARRIER).nth(n) else {
        return String::new();
    };
    let line = source[..at].matches('\n').count();
    source
        .lines()
        .enumerate()
        .map(|(i, l)| format!("{}{l}\n", if i == line { ">>> " } else { "    " }))
        .collect()
}

#[test]
fn every_barrier_in_the_examples_kernels_is_needed_or_proven_redundant() -> Result<()> {
    if !Emulator::should_run("every_barrier_in_the_examples_kernels_is_needed")? {
        return Ok(());
    }
    let cases = cases()?;
    let mut mutants = Vec::new();
    let mut bases = Vec::new();
    for (ci, c) in cases.iter().enumerate() {
        // The unmodified kernel: the same outputs in every schedule, and the interpreter's.
        let base = emu::run_all_orders(&c.launch)?;
        for (got, want) in base.iter().zip(&c.reference) {
            let got = got.to_array()?;
            let err = triton_metal::testing::max_abs_diff(&got, want)?;
            assert!(
                err <= c.tolerance,
                "{}: emulated output `{}` is {err} away from the interpreter's",
                c.name,
                want.dtype()
            );
        }
        bases.push(base);
        let n = c.launch.source.matches(BARRIER).count();
        mutants.extend((0..n).map(|i| (ci, i)));
    }
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let results: Vec<(usize, usize, Option<String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let (cases, bases, mutants) = (&cases, &bases, &mutants);
                s.spawn(move || -> Result<Vec<(usize, usize, Option<String>)>> {
                    let mut found = Vec::new();
                    for &(ci, i) in mutants.iter().skip(w).step_by(workers) {
                        let c = &cases[ci];
                        let source = delete_barrier(&c.launch.source, i)
                            .expect("the barrier was counted in this source");
                        let mutant = MetalLaunch {
                            source,
                            workers: 1,
                            ..c.launch.clone()
                        };
                        found.push((ci, i, caught(&mutant, &bases[ci])?));
                    }
                    Ok(found)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker thread"))
            .collect::<Result<Vec<_>>>()
            .map(|v| v.into_iter().flatten().collect())
    })?;
    let (mut detected, mut redundant, mut problems) = (0, 0, Vec::new());
    for (ci, i, how) in &results {
        let c = &cases[*ci];
        let name = &c.name;
        let outputs: Vec<String> = c.launch.outputs.iter().map(|o| o.name.clone()).collect();
        let threads: usize = (0..3)
            .map(|d| c.launch.threadgroup[d].min(c.launch.grid[d]))
            .product();
        let listed = barrier_separates_disjoint_accesses(&c.launch.source, *i, &outputs)
            || broadcast_barrier_orders_only_dead_reads(&c.launch.source, *i, threads);
        match (how, listed) {
            (Some(_), false) => detected += 1,
            (None, true) => redundant += 1,
            (None, false) => problems.push(format!(
                "{name}: deleting barrier #{i} went unnoticed in every schedule (prove it \
                 redundant here, or make the emulator catch it):\n{}",
                around_barrier(&cases[*ci].launch.source, *i)
            )),
            (Some(how), true) => problems.push(format!(
                "{name}: barrier #{i} is proven redundant but deleting it was caught ({how})"
            )),
        }
    }
    eprintln!(
        "barrier deletions: {} tried in {} kernels, {detected} caught, {redundant} proven redundant",
        results.len(),
        cases.len()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}
