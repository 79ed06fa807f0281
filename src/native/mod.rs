//! The compiled CPU executor: the kernel printed as C++ by the shared printer
//! (`codegen::cpu`), built once per kernel with clang (`clang`) and run natively, in
//! parallel over programs like the interpreter (`exec`), whose argument binding and worker
//! pool it shares. It sits above both the printers and the executors.
//!
//! Same arguments, same semantics, same errors as [`crate::exec::execute`]: every access is
//! checked against its buffer (the generated code records the first out-of-bounds access
//! of a program, touches nothing outside the buffer, and stops the run; the error names the
//! kernel, the op, the program and the offset), integer corner cases are defined as the
//! interpreter defines them, and loads and stores of an output that programs might share
//! are relaxed atomics unless the launch proves them disjoint (`disjoint::disjoint_stores`:
//! no element one program stores is touched by another), so racing programs never make a
//! data race. Floating point results may differ from the
//! interpreter's in the last bits (`exp`/`exp2` are the runtime's own vectorisable
//! polynomial, within 1 ulp like Rust's; summation order).
//!
//! Building needs clang >= 15 (the emulator's, found the same way:
//! `TRITON_METAL_EMU_CXX`, else the newest `clang++-N`); the shared objects are cached on
//! disk under `clang::cache_dir`, keyed by a digest of source, flags, compiler and host CPU, so
//! a kernel is compiled once per machine (the 86 kernels of tests/ops.rs took about 8 s
//! together on 2 cores), then loaded once per process.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

use crate::clang::{self, Build};
use crate::codegen::cpu;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::exec::{bind, launch_err, parallel, Bound, Data, ExecArg};
use crate::ir::{Kernel, Op, OpId, ParamKind, UnaryOp};
use crate::opt::plan::KernelPlan;

/// The program-range status the generated code fills (`tm_ctx` in `cpu_runtime.h`).
#[repr(C, align(64))]
struct Ctx {
    failed: i64,
    op: i64,
    bad_op: i64,
    param: i64,
    offset: i64,
    len: i64,
    pid: [i64; 3],
    sink: Sink,
}

/// Where a bad access goes instead (`alignas(64)` in C++).
#[repr(C, align(64))]
struct Sink([u8; 64]);

// The C++ side asserts the same layout.
const _: () = assert!(std::mem::size_of::<Ctx>() == 192 && std::mem::offset_of!(Ctx, sink) == 128);

/// `tm_run(args, lens, grid, start, end, ctx)`; see `codegen::cpu`.
type RunFn = unsafe extern "C" fn(*const *mut c_void, *const i64, *const i64, i64, i64, *mut Ctx);

/// clang flags: `-fwrapv` gives signed overflow Triton's wrap-around, `-ffp-contract=off`
/// keeps `a * b + c` two roundings as in the interpreter, `-fno-math-errno` lets clang
/// vectorise math calls (through glibc's libmvec on x86-64 Linux).
const FLAGS: &[&str] = &[
    "-std=c++20",
    "-O2",
    "-march=native",
    "-shared",
    "-fPIC",
    "-fno-exceptions",
    "-fno-rtti",
    "-w",
    "-ferror-limit=20",
    "-fno-color-diagnostics",
    "-ffp-contract=off",
    "-fwrapv",
    "-fno-math-errno",
    // A frame larger than the stack faults on the guard page instead of writing past it.
    "-fstack-clash-protection",
];

/// Extra flags for compute-bound kernels (a `tl.dot`, or `exp`/`exp2`, whose polynomial
/// is most of the work): vectorised over 512 bits where the CPU has them (matmul 1024³
/// 24.9 → 22.2 ms; softmax 4096×1024 1.57 → 1.30 ms with the runtime's `exp`, measured in a
/// scratch harness; both on an AVX-512 Xeon), while memory-bound kernels
/// keep clang's 256 (512 made row-sum 20% and layer_norm 17% slower there;
/// benches/README.md).
#[cfg(target_arch = "x86_64")]
const WIDE_FLAGS: &[&str] = &["-mprefer-vector-width=512"];
#[cfg(not(target_arch = "x86_64"))]
const WIDE_FLAGS: &[&str] = &[];

/// Whether `k` is compute-bound in the sense of [`WIDE_FLAGS`].
fn compute_bound(k: &Kernel) -> bool {
    k.ops.iter().any(|o| {
        matches!(
            o.op,
            Op::Dot { .. }
                | Op::Unary {
                    kind: UnaryOp::Exp | UnaryOp::Exp2,
                    ..
                }
        )
    })
}

/// glibc's vector math (`log`, `sin`, ... over 8 floats at once; `exp` and `exp2` are the
/// runtime's own); the library is part of libc6.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
const VECTOR_MATH: &[&str] = &["-fveclib=libmvec", "-Wl,--no-as-needed", "-lmvec"];
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
const VECTOR_MATH: &[&str] = &[];

/// True when kernels can be compiled here (a clang >= 15 was found).
pub fn available() -> bool {
    clang::clang().is_some()
}

/// What `-march=native` depends on: the host's vector extensions.
fn host_key() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        let f = [
            ("avx2", std::arch::is_x86_feature_detected!("avx2")),
            ("fma", std::arch::is_x86_feature_detected!("fma")),
            ("f16c", std::arch::is_x86_feature_detected!("f16c")),
            ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
            ("avx512bw", std::arch::is_x86_feature_detected!("avx512bw")),
        ];
        f.iter()
            .filter(|(_, on)| *on)
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(",")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        std::env::consts::ARCH.to_string()
    }
}

/// Loaded programs, by kernel IR text (constexprs folded in) and shared-output mode; and,
/// so that a launch need not print the text, by kernel name with the kernel itself, which
/// a launch compares structurally (much cheaper than printing: the text and its compare
/// were 60% of a launch's fixed cost).
#[derive(Default)]
struct Programs {
    by_text: HashMap<(String, bool), RunFnPtr>,
    by_kernel: HashMap<String, Vec<(bool, Kernel, RunFnPtr)>>,
}

impl Programs {
    fn find(&self, k: &Kernel, shared: bool) -> Option<RunFn> {
        let list = self.by_kernel.get(k.name.as_str())?;
        list.iter()
            .find(|(s, kk, _)| *s == shared && kk == k)
            .map(|(_, _, f)| f.0)
    }

    /// Remembers `f` for `k`, unless `k` does not equal itself (a NaN constant), which
    /// would never be found and only grow the list.
    // Comparing `k` with itself is the point: NaN makes a kernel unequal to itself.
    #[allow(clippy::eq_op)]
    fn remember(&mut self, k: &Kernel, shared: bool, f: RunFn) {
        if k == k {
            let list = self.by_kernel.entry(k.name.clone()).or_default();
            list.push((shared, k.clone(), RunFnPtr(f)));
        }
    }
}

/// How many programs are remembered by kernel (not by text) under `name`.
#[cfg(test)]
pub(crate) fn remembered(name: &str) -> usize {
    programs()
        .lock()
        .map(|p| p.by_kernel.get(name).map_or(0, Vec::len))
        .unwrap_or(0)
}

fn programs() -> &'static Mutex<Programs> {
    static P: OnceLock<Mutex<Programs>> = OnceLock::new();
    P.get_or_init(|| Mutex::new(Programs::default()))
}

#[derive(Clone, Copy)]
struct RunFnPtr(RunFn);

/// The compiled program of `k` (`shared`: atomic output accesses), built on first use;
/// spelling `plan` when given (programs of given plans are found by their text only).
fn program(k: &Kernel, shared: bool, plan: Option<&KernelPlan>) -> Result<RunFn> {
    let lock = || {
        programs().lock().map_err(|_| Error::Runtime {
            kernel: k.name.clone(),
            msg: "compiled-kernel cache lock poisoned by a panic".into(),
        })
    };
    if plan.is_none() {
        if let Some(f) = lock()?.find(k, shared) {
            return Ok(f);
        }
    }
    let key = match plan {
        None => (k.ir(), shared),
        Some(p) => (format!("{}\n{p}", k.ir()), shared),
    };
    {
        let mut p = lock()?;
        if let Some(f) = p.by_text.get(&key).map(|f| f.0) {
            if plan.is_none() {
                p.remember(k, shared, f);
            }
            return Ok(f);
        }
    }
    let prog = match plan {
        None => cpu::compile(k, shared)?,
        Some(p) => cpu::compile_with(k, shared, p)?,
    };
    let body = prog
        .source
        .split("#line 1 \"kernel.cpp\"\n")
        .nth(1)
        .unwrap_or_default();
    // The same inspection hooks as the GPU back ends (`codegen::msl`).
    if crate::settings::debug_enabled() {
        eprintln!("[triton-metal] IR before lowering:\n{}", k.ir());
        eprintln!("[triton-metal] layout plan:\n{}", prog.plan);
        for l in &prog.layouts {
            eprintln!("[triton-metal]   layout: {} -> {}", l.op, l.layout);
        }
        eprintln!(
            "[triton-metal] compiled CPU program of `{}` (shared outputs: {shared}):\n{body}",
            k.name
        );
    }
    if let Some(dir) = crate::cache::source_dir()? {
        crate::cache::write_atomic(&dir, &format!("{}.cpp", k.name), prog.source.as_bytes())?;
    }
    let build = Build {
        flags: if compute_bound(k) {
            [FLAGS, VECTOR_MATH, WIDE_FLAGS].concat()
        } else {
            [FLAGS, VECTOR_MATH].concat()
        },
        symbol: b"tm_run\0",
        backend: "cpu",
        source_tag: "kernel.cpp",
        key: host_key(),
    };
    let addr = clang::load_symbol(&prog.source, &k.name, body, &build)?;
    // SAFETY: `codegen::cpu` prints `tm_run` with exactly this signature.
    let f = unsafe { std::mem::transmute::<*const c_void, RunFn>(addr) };
    let mut p = lock()?;
    p.by_text.insert(key, RunFnPtr(f));
    if plan.is_none() {
        p.remember(k, shared, f);
    }
    Ok(f)
}

/// The bytes of a scalar argument in its parameter's dtype.
fn scalar_bytes(d: DType, v: &Data) -> Option<[u8; 8]> {
    let mut b = [0u8; 8];
    match (v, d) {
        (Data::Bool(x), _) => b[0] = *x.first()? as u8,
        (Data::I32(x), _) => b[..4].copy_from_slice(&x.first()?.to_le_bytes()),
        (Data::I64(x), _) => b.copy_from_slice(&x.first()?.to_le_bytes()),
        (Data::F32(x), DType::F16) => {
            b[..2].copy_from_slice(&half::f16::from_f32(*x.first()?).to_le_bytes())
        }
        (Data::F32(x), DType::BF16) => {
            b[..2].copy_from_slice(&half::bf16::from_f32(*x.first()?).to_le_bytes())
        }
        (Data::F32(x), _) => b[..4].copy_from_slice(&x.first()?.to_le_bytes()),
        (Data::F64(x), _) => b.copy_from_slice(&x.first()?.to_le_bytes()),
        (Data::Ptr(_), _) => return None,
    }
    Some(b)
}

/// Raw launch arguments, shared read-only by the worker threads.
struct Args {
    ptrs: Vec<*mut c_void>,
    lens: Vec<i64>,
}
// SAFETY: the pointers are the launch's buffers (borrowed for its duration) and its scalar
// storage; worker threads only pass them to the compiled program, whose accesses to shared
// outputs are atomic unless the launch proved them disjoint.
unsafe impl Sync for Args {}

/// [`crate::exec::execute`] through compiled code. Errors as there, plus
/// [`Error::Unsupported`] when no clang is available or the kernel uses something the
/// compiled back end lacks (blocks too large for a worker's stack), and
/// [`Error::Compile`] if clang fails.
pub fn execute_native(kernel: &Kernel, grid: [usize; 3], args: &mut [ExecArg<'_>]) -> Result<()> {
    execute(kernel, None, grid, args)
}

/// [`execute_native`] with the program printed from `plan` (`codegen::cpu::plan`, its
/// decisions possibly overridden) instead of the default plan. Errors as there, plus
/// [`Error::InvalidArgument`] when the plan does not fit the kernel
/// (`codegen::cpu::compile_with`).
pub fn execute_native_with(
    kernel: &Kernel,
    plan: &KernelPlan,
    grid: [usize; 3],
    args: &mut [ExecArg<'_>],
) -> Result<()> {
    execute(kernel, Some(plan), grid, args)
}

fn execute(
    kernel: &Kernel,
    plan: Option<&KernelPlan>,
    grid: [usize; 3],
    args: &mut [ExecArg<'_>],
) -> Result<()> {
    let k = kernel;
    let Bound {
        mems,
        scalars,
        table,
    } = bind(k, grid, args)?;
    let total = grid
        .iter()
        .try_fold(1usize, |a, &g| a.checked_mul(g))
        .ok_or_else(|| launch_err(k, format!("grid {grid:?} is too large")))?;
    // Outputs that programs may share (or read) are accessed atomically.
    let shared = k
        .params
        .iter()
        .zip(&mems)
        .any(|(p, m)| p.stored && m.as_ref().is_some_and(|m| !m.is_plain()));
    let run = program(k, shared, plan)?;
    let mut scalar_store: Vec<[u8; 8]> = Vec::with_capacity(k.params.len());
    for (p, s) in k.params.iter().zip(&scalars) {
        let b = match (p.kind, s) {
            (ParamKind::Scalar(d), Some(v)) => scalar_bytes(d, v).unwrap_or_default(),
            _ => [0; 8],
        };
        scalar_store.push(b);
    }
    let mut a = Args {
        ptrs: Vec::with_capacity(k.params.len()),
        lens: Vec::with_capacity(k.params.len()),
    };
    // Slot `params.len()` holds the kinds of all slots (`tm_slots` in the generated code):
    // per pointer-table entry its dtype's code, doubled, plus 1 when writable; -1 elsewhere.
    let first_entry = k.params.len() + 1;
    let mut kinds: Vec<i64> = vec![-1; first_entry];
    kinds.extend(
        table
            .iter()
            .map(|t| 2 * crate::codegen::int_to_ptr_kind(t.dtype) as i64 + t.writable as i64),
    );
    for (i, m) in mems.iter().enumerate() {
        if i == k.params.len() {
            a.ptrs.push(kinds.as_mut_ptr().cast());
            a.lens.push(kinds.len() as i64);
            continue;
        }
        match m {
            Some(m) => {
                // An empty buffer's address is never dereferenced (accesses are bounds-checked).
                if m.len() > 0 && (m.as_ptr() as usize) % m.elem_bytes() != 0 {
                    return Err(launch_err(
                        k,
                        format!(
                            "buffer for {} is not aligned to its {}-byte elements (the compiled \
                             CPU executor reads elements in place)",
                            crate::exec::slot_name(k, &table, i),
                            m.elem_bytes()
                        ),
                    ));
                }
                a.ptrs.push(m.as_ptr().cast());
                a.lens.push(m.len() as i64);
            }
            None => {
                a.ptrs.push(scalar_store[i].as_mut_ptr().cast());
                a.lens.push(1);
            }
        }
    }
    if mems.len() == k.params.len() {
        a.ptrs.push(kinds.as_mut_ptr().cast());
        a.lens.push(kinds.len() as i64);
    }
    let g = [grid[0] as i64, grid[1] as i64, grid[2] as i64];
    let table = &table;
    let a = &a;
    // Enough pieces to balance the pool, few enough that each runs many programs.
    parallel::run_pieces(
        total,
        8,
        || (),
        |(), programs| {
            let (start, end) = (programs.start as i64, programs.end as i64);
            let mut ctx = Ctx {
                failed: 0,
                op: -1,
                bad_op: -1,
                param: 0,
                offset: 0,
                len: 0,
                pid: [0; 3],
                sink: Sink([0; 64]),
            };
            // SAFETY: `tm_run` reads `params.len()` pointers and lengths, the grid, and
            // writes only `ctx` and, through bounds-checked views, the buffers (outputs:
            // mutable for this launch; atomically where programs may share elements).
            unsafe {
                run(
                    a.ptrs.as_ptr(),
                    a.lens.as_ptr(),
                    g.as_ptr(),
                    start,
                    end,
                    &mut ctx,
                )
            };
            if ctx.failed == 0 {
                return Ok(());
            }
            Err(out_of_bounds(k, table, &ctx))
        },
    )
}

fn out_of_bounds(k: &Kernel, table: &[crate::exec::TableSlot], c: &Ctx) -> Error {
    if c.failed == 2 {
        let at = u32::try_from(c.bad_op)
            .ok()
            .filter(|&i| (i as usize) < k.ops.len())
            .map_or_else(String::new, |i| {
                format!(" (built at {})", k.op(OpId(i)).loc)
            });
        return Error::Runtime {
            kernel: k.name.clone(),
            msg: format!(
                "`for` loop{at} in program ({}, {}, {}): range step is 0",
                c.pid[0], c.pid[1], c.pid[2]
            ),
        };
    }
    let slot = c.param as usize;
    let param = crate::exec::slot_name(k, table, slot);
    let op = u32::try_from(c.bad_op)
        .ok()
        .filter(|&i| (i as usize) < k.ops.len())
        .map(OpId);
    let what = match op {
        Some(id) => {
            let d = k.op(id);
            format!("op `{}` ({id}, built at {})", d.op.name(), d.loc)
        }
        None => "an access".to_string(),
    };
    let why = match c.failed {
        // A pointer cast from an integer that is no address of this launch, or to
        // another pointee dtype than its entry's.
        3 => {
            let pointee = op
                .and_then(|id| k.op(id).op.operands().first().map(|&v| k.ty(v).dtype))
                .unwrap_or(DType::I64);
            crate::exec::bad_pointer_msg(k, table, slot, pointee)
        }
        4 => format!(
            "{param} is read-only (an input array: give the table out(..) or inout(..) entries \
             to write through them)"
        ),
        _ => format!(
            "offset {} is out of bounds for {param} ({} elements)",
            c.offset, c.len
        ),
    };
    Error::Runtime {
        kernel: k.name.clone(),
        msg: format!(
            "{what} in program ({}, {}, {}): {why}",
            c.pid[0], c.pid[1], c.pid[2]
        ),
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod ubsan_tests;
