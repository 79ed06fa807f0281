//! The compiled CPU back end: a kernel's IR as one C++ function that runs a range of
//! programs, for `exec::native` to build with clang and call from its worker threads.
//!
//! The body is printed by the shared printer with the [`CPU`] dialect: one thread per
//! program, so each block is a local array and each op a loop over it, which clang
//! vectorises (`-O2 -march=native`). The one-thread specialisations (index recipes and
//! lazy values, unswitched masks, peeled loops, reduction lanes, whole-block accesses and
//! row copies, branch-free conditions, shifted pointer blocks, row checks once per loop and
//! packed tiles)
//! are decided by the plan ([`crate::opt::cpu`]) and spelled by this module's lowering
//! stage (`CpuStage` and its `lazy`, `unswitch`, `peel`, `shift` and `access` parts), which
//! the GPU printers never carry. Packed tiles (a cache per worker thread of a `tl.dot`
//! operand's tiles) are declared before the loop over programs.
//!
//! The function reads its arguments from arrays the host fills:
//!
//! ```text
//! extern "C" void tm_run(void* const* tm_args,   // per parameter: buffer, or the scalar's bytes
//!                        const int64_t* tm_lens,   // per parameter: elements of its buffer
//!                        const int64_t* tm_grid,   // programs per axis
//!                        int64_t tm_start, int64_t tm_end,  // flat program ids to run
//!                        tm_ctx* tm_status);       // failure record (see cpu_runtime.h)
//! ```
//!
//! Slot `params.len()` of `tm_args` is the table of slot kinds (`tm_lens` holds its length)
//! and the slots after it are the buffers of pointer-table entries; pointers cast from
//! integers (`int_to_ptr`) reach them through `tm_dyn` views, which check the slot, its
//! dtype, writability and the offset on every access (`cpu_runtime.h`).
//!
//! Program `p` has ids `(p % g0, p / g0 % g1, p / (g0 g1))`, as in the interpreter. The run
//! stops after the first program that made an out-of-bounds access.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::dialect::CPU;
use super::lower::{check_block_shapes, printer_of, unsupported_on, Lowering};
use super::{abi, LaunchOptions, LayoutChoice};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::{Kernel, Op, ParamKind, Value};
use crate::opt::cpu::{AllTrue, CpuPlan};
use crate::opt::plan::KernelPlan;
use crate::opt::{Chip, HardwareProfile};

mod access;
mod lazy;
mod peel;
mod shift;
mod unswitch;

/// What the one-thread specialisations need while the shared printer runs: the plan's
/// decisions ([`KernelPlan::cpu`]) and what spelling them has printed so far. Only the
/// compiled CPU executor's printer carries one.
#[derive(Clone)]
pub(super) struct CpuStage {
    /// The decisions spelled.
    pub plan: CpuPlan,
    /// Per lazy block computed from other variables: every variable it reads, directly or
    /// through other lazy blocks (a parallel assignment must not overwrite them first).
    pub lazy_reads: HashMap<String, BTreeSet<String>>,
    /// Per lazy block: how many lazy blocks deep its evaluation goes (1: it reads only
    /// stored variables), at most the plan's [`CpuPlan::lazy_depth`].
    pub lazy_depth: HashMap<String, usize>,
    /// Open splits, one frame per region being lowered with [`Lowering::region_split`].
    pub splits: Vec<Vec<unswitch::Split>>,
    /// Masks whose reads go through a split's compile-time flag (`flag || mask[i]`).
    pub flags: HashMap<Value, String>,
    /// Per unswitched mask, the plan's test that it is all true ([`CpuPlan::unswitch_tests`]).
    pub tests: BTreeMap<Value, AllTrue>,
    /// Per load whose rows are checked once before its loop
    /// ([`CpuPlan::rows_checked_once`]): the table of which rows run +1.
    pub row_runs: HashMap<crate::ir::OpId, String>,
    /// Per packed load's result ([`CpuPlan::packed`]): whether this iteration found its
    /// tile in the cache (the dot then skips prefetching the next iteration's rows).
    pub packed_hits: HashMap<Value, String>,
    /// Per load read in place ([`CpuPlan::rows_in_place`]): its table of row pointers.
    pub row_ptrs: HashMap<Value, String>,
    /// The trip counters of the `for` loops being printed, innermost last.
    pub loops: Vec<String>,
    /// Declarations printed once per call of `tm_run`, before its loop over programs (the
    /// caches of packed tiles, [`CpuPlan::packed`]).
    pub preamble: Vec<String>,
}

impl CpuStage {
    /// The state for spelling `plan` for `kernel`, before anything is printed.
    pub fn new(plan: CpuPlan, kernel: &Kernel) -> CpuStage {
        CpuStage {
            tests: plan.unswitch_tests(kernel),
            plan,
            lazy_reads: HashMap::new(),
            lazy_depth: HashMap::new(),
            splits: Vec::new(),
            flags: HashMap::new(),
            row_runs: HashMap::new(),
            packed_hits: HashMap::new(),
            row_ptrs: HashMap::new(),
            loops: Vec::new(),
            preamble: Vec::new(),
        }
    }
}

/// Philox-4x32 as Triton computes it (`philox_impl`); an aggregate result, since Metal's
/// `uint4(a, b, c, d)` constructor has no C++ spelling for clang's vector types.
pub(super) const PHILOX: &str = concat!(
    "
struct tm_uint4 {
  uint v[4];
  inline uint operator[](int i) const { return v[i]; }
};
inline tm_uint4 tm_philox(uint c0, uint c1, uint c2, uint c3, uint k0, uint k1, uint rounds) {
",
    super::dialect::philox_rounds!("mulhi"),
    "  return tm_uint4{{c0, c1, c2, c3}};\n}\n"
);

/// Largest sum of a program's local arrays: programs run on rayon's worker threads, whose
/// stacks are 2 MiB (kernels with larger blocks are `Unsupported` here; the interpreter,
/// `Target::Cpu`, runs them).
pub const MAX_LOCAL_BYTES: usize = 1 << 20;

/// A kernel printed for the compiled CPU executor.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuProgram {
    /// The kernel's name.
    pub name: String,
    /// The whole C++ translation unit (runtime header, helpers, `tm_run`).
    pub source: String,
    /// Whether every access to an output is a relaxed atomic (programs may share elements).
    pub shared_outputs: bool,
    /// Upper bound on the stack bytes of one program's local arrays.
    pub local_bytes: usize,
    /// Layout decisions, for debugging.
    pub layouts: Vec<LayoutChoice>,
    /// The plan the printer spelled.
    pub plan: KernelPlan,
}

/// The launch options the compiled CPU executor plans with: one thread per program, the
/// CPU profile.
pub fn cpu_options() -> LaunchOptions {
    LaunchOptions {
        num_warps: 1,
        reduction_layout: None,
        target: HardwareProfile::of(Chip::Cpu),
        num_stages: 1,
    }
}

/// The plan [`compile`] spells for `kernel`: the shared decisions of a one-thread program
/// and the compiled CPU executor's own ([`KernelPlan::cpu`]), for inspection or to
/// override and pass to [`compile_with`].
pub fn plan(kernel: &Kernel) -> KernelPlan {
    let opts = cpu_options();
    crate::opt::plan::plan(kernel, &opts, printer_of(&CPU, &opts))
}

/// Prints `kernel` for the compiled CPU executor. With `shared_outputs`, loads from and
/// stores to outputs are relaxed atomics (needed unless every output is proven to be
/// written at disjoint elements by different programs, and read by none). Errors: a dtype
/// or construct the dialect lacks ([`crate::Error::Unsupported`]), blocks whose arrays
/// would not fit on a worker's stack, parameter names that clash with generated code.
pub fn compile(kernel: &Kernel, shared_outputs: bool) -> Result<CpuProgram> {
    check_block_shapes(&CPU, kernel)?;
    print(kernel, shared_outputs, plan(kernel))
}

/// [`compile`] spelling `plan` (from [`plan`], possibly overridden) instead of the default
/// plan. Errors as [`compile`], and `InvalidArgument` when the plan was made for another
/// kernel or printer, has no CPU decisions, or fails [`KernelPlan::verify`].
pub fn compile_with(
    kernel: &Kernel,
    shared_outputs: bool,
    plan: &KernelPlan,
) -> Result<CpuProgram> {
    let want = printer_of(&CPU, &cpu_options());
    if plan.kernel != kernel.name || plan.printer != want || plan.cpu.is_none() {
        return Err(Error::InvalidArgument(format!(
            "layout plan given for kernel `{}` on {:?}{}; compiling `{}` for {} needs {want:?}              and CPU decisions (see codegen::cpu::plan)",
            plan.kernel,
            plan.printer,
            if plan.cpu.is_none() {
                " without CPU decisions"
            } else {
                ""
            },
            kernel.name,
            CPU.title
        )));
    }
    check_block_shapes(&CPU, kernel)?;
    plan.verify(kernel)?;
    print(kernel, shared_outputs, plan.clone())
}

/// Prints `kernel` spelling `plan`, its block shapes and dtypes already checked.
fn print(kernel: &Kernel, shared_outputs: bool, plan: KernelPlan) -> Result<CpuProgram> {
    let names: Vec<&str> = kernel.params.iter().map(|p| p.name.as_str()).collect();
    let idents = abi::param_idents(&kernel.name, &names)?;
    let opts = cpu_options();
    let mut lw = Lowering::with_plan(kernel, &CPU, &opts, plan);
    lw.atomic_outputs |= shared_outputs;
    lw.compute_provenance()?;
    lw.region_split(kernel.body)?;
    lw.end_splits();
    let scratch_bytes: usize = lw.scratch.iter().map(|(dt, n)| n * dt.size_bytes()).sum();
    let local_bytes = lw.local_bytes + scratch_bytes;
    if local_bytes > MAX_LOCAL_BYTES {
        return Err(unsupported_on(
            &CPU,
            kernel,
            format!(
                "blocks of {local_bytes} bytes per program (at most {MAX_LOCAL_BYTES} fit on a \
                 worker thread's stack)"
            ),
        ));
    }

    let mut s = CPU.header(&lw.helpers);
    s.push_str(
        "\nextern \"C\" __attribute__((visibility(\"default\"))) void tm_run(void* const* tm_args, \
         const int64_t* tm_lens, const int64_t* tm_grid, int64_t tm_start, int64_t tm_end, \
         tm_ctx* tm_status) {\n",
    );
    s.push_str("  (void)tm_args; (void)tm_lens;\n");
    for a in 0..3 {
        s.push_str(&format!("  const int tm_np{a} = (int)tm_grid[{a}];\n"));
    }
    s.push_str("  (void)tm_np0; (void)tm_np1; (void)tm_np2;\n");
    s.push_str("  const uint tm_lid = 0u;\n  (void)tm_lid;\n");
    for (i, (p, n)) in kernel.params.iter().zip(&idents).enumerate() {
        match p.kind {
            ParamKind::Ptr(dt) => {
                let ct = lw.cty(dt)?;
                let ct = if p.stored {
                    ct.to_string()
                } else {
                    format!("const {ct}")
                };
                s.push_str(&format!(
                    "  const tm_buf<{ct}> {n}{{({ct}*)tm_args[{i}], tm_lens[{i}], tm_status, {i}}};\n"
                ));
            }
            ParamKind::Scalar(dt) => {
                let ct = lw.cty(dt)?;
                s.push_str(&format!("  const {ct} {n} = *(const {ct}*)tm_args[{i}];\n"));
            }
        }
        s.push_str(&format!("  (void){n};\n"));
    }
    let n = kernel.params.len();
    let casts = kernel
        .ops
        .iter()
        .any(|o| matches!(o.op, Op::IntToPtr { .. }));
    s.push_str(&if !casts {
        String::new()
    } else {
        format!(
            "  const tm_slot_table tm_slots{{tm_args, tm_lens, (const int64_t*)tm_args[{n}], \
         tm_lens[{n}], tm_status}};\n  (void)tm_slots;\n"
        )
    });
    let pointees: std::collections::BTreeSet<DType> = kernel
        .ops
        .iter()
        .filter(|o| matches!(o.op, Op::IntToPtr { .. }))
        .filter_map(|o| o.result().map(|r| kernel.ty(r).dtype))
        .collect();
    for d in pointees {
        let (ct, kind, short) = (lw.cty(d)?, super::int_to_ptr_kind(d), d.short_name());
        s.push_str(&format!(
            "  const tm_dyn<{ct}, false> tm_tab_{short}{{&tm_slots, {kind}}};\n  \
             const tm_dyn<{ct}, true> tm_tabw_{short}{{&tm_slots, {kind}}};\n  \
             (void)tm_tab_{short}; (void)tm_tabw_{short};\n"
        ));
    }
    for l in lw.cpu.iter().flat_map(|c| &c.preamble) {
        s.push_str(&format!("  {l}\n"));
    }
    s.push_str("  for (int64_t tm_p = tm_start; tm_p < tm_end; ++tm_p) {\n");
    s.push_str("    const int tm_pid0 = (int)(tm_p % tm_grid[0]);\n");
    s.push_str("    const int tm_pid1 = (int)(tm_p / tm_grid[0] % tm_grid[1]);\n");
    s.push_str("    const int tm_pid2 = (int)(tm_p / (tm_grid[0] * tm_grid[1]));\n");
    s.push_str("    tm_status->pid[0] = tm_pid0; tm_status->pid[1] = tm_pid1; tm_status->pid[2] = tm_pid2;\n");
    s.push_str("    {\n");
    for (dt, elems) in &lw.scratch {
        let ct = lw.cty(*dt)?;
        s.push_str(&format!("  {ct} tm_smem_{}[{elems}];\n", dt.short_name()));
    }
    s.push_str("#line 1 \"kernel.cpp\"\n");
    for l in &lw.lines {
        s.push_str(l);
        s.push('\n');
    }
    s.push_str("    }\n    if (tm_status->failed) break;\n  }\n  tm_fence_streams();\n}\n");
    Ok(CpuProgram {
        name: kernel.name.clone(),
        source: s,
        shared_outputs,
        local_bytes,
        layouts: lw.layouts,
        plan: lw.plan,
    })
}
