//! The shared C-family printer: lowers a kernel's block-level IR to per-thread code.
//!
//! Each program is one threadgroup. A scalar value (program ids, loads through scalar
//! pointers, reduction results) is uniform: every thread computes it into one variable. A
//! block value lives in a per-thread register array under its [`BlockedLayout`]; a `splat`
//! stays a scalar until something needs it as an array. Pointers are element offsets from
//! the parameter they derive from, so loads print as `x_ptr[offset]` whatever address space
//! MLX gives the buffer. Data moves between threads only through threadgroup memory, in the
//! buffers the plan lists (`opt::buffers`); a barrier between ops is printed where the plan
//! has one (`opt::barriers`), and within one op's lowering where a write could overtake the
//! op's own pending reads or a read could overtake a write (`Hazard`).
//!
//! Reductions and scans are in `reduce.rs`, `tl.dot` in `dot.rs`.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::dialect::Dialect;
use super::layout::BlockedLayout;
use super::{LaunchOptions, LayoutChoice};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::{
    AtomicOp, BinaryOp, CmpPred, Const, Kernel, MemScope, MemSem, Op, OpId, ParamKind, RegionId,
    Type, UnaryOp, Value,
};
use crate::opt::axis::AxisInfo;
use crate::opt::barriers::When;
pub(super) use crate::opt::blocked::bit_fields;
use crate::opt::plan::{KernelPlan, MatrixUnit, Printer};

/// How a value is held by each thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Repr {
    /// A uniform scalar: a variable name or a literal.
    Scalar(String),
    /// A block whose elements all equal a uniform scalar.
    Splat(String),
    /// A block in a register array of its layout.
    Block(String),
}

/// Threadgroup-memory hazards since the last barrier.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Hazard {
    /// Some thread may still read the scratch arrays: the next write needs a barrier first.
    pub reads_pending: bool,
}

#[derive(Clone)]
pub(super) struct Lowering<'k> {
    pub k: &'k Kernel,
    pub d: &'static Dialect,
    pub opts: &'k LaunchOptions,
    pub threads: usize,
    pub vec: usize,
    pub reprs: Vec<Option<Repr>>,
    /// The parameter a pointer value derives from.
    pub prov: Vec<Option<usize>>,
    pub names: HashSet<String>,
    /// The identifier of each parameter in generated code ([`super::abi::param_ident`]).
    pub idents: Vec<String>,
    /// Per base name given to [`Lowering::fresh`]: the first suffix not yet tried (names
    /// are never freed, so earlier suffixes stay taken; keeps naming linear).
    pub fresh_next: HashMap<String, usize>,
    pub lines: Vec<String>,
    pub indent: usize,
    /// Scratch elements needed per element type (dialects without a threadgroup arena:
    /// one array per dtype).
    pub scratch: BTreeMap<DType, usize>,
    /// The plan's threadgroup buffers the code printed so far goes through, by op, role and
    /// dtype (dialects with an arena, see [`Lowering::arena_decls`]).
    pub smem_used: Vec<(OpId, crate::opt::smem::Role, DType)>,
    /// How each value is held ([`crate::opt::buffers::held`]): dialects with an arena keep
    /// a recipe exactly where it says so, which is where the plan moves no data.
    pub held: Vec<crate::opt::buffers::Held>,
    /// The op being lowered.
    pub cur_op: Option<OpId>,
    pub hazard: Hazard,
    pub helpers: BTreeSet<&'static str>,
    pub layouts: Vec<LayoutChoice>,
    pub atomic_outputs: bool,
    pub off_dtype: DType,
    pub uses_simd: bool,
    /// Per block value, when it is a pure function of its element index (built from
    /// `arange`, uniform scalars and elementwise ops): that function as a C expression in
    /// [`FLAT`]. Broadcasts and permutes of such values are recomputed in place instead of
    /// moving data through threadgroup memory.
    pub recipes: Vec<Option<String>>,
    /// Contiguity facts per value (vector loads and stores).
    pub axis: Vec<AxisInfo>,
    /// Contiguity that holds where a run-time check of the offsets passes
    /// ([`crate::opt::axis::analyse_unchecked`]).
    pub axis_unchecked: Vec<AxisInfo>,
    /// Accumulators held in `simdgroup_matrix` fragments across a loop: value -> array.
    pub frags: HashMap<Value, String>,
    /// Values the plan keeps in `mma.sync` fragments that are still to be spelled there
    /// (a resident accumulator's rescale and its factor; a dot result kept in fragments and
    /// the elementwise ops over it).
    pub(super) frag_vals: HashMap<Value, super::mma::FragVal>,
    /// Per dot whose loop-invariant operand A was staged before its loop: the buffer.
    pub(super) hoisted: HashMap<OpId, String>,
    /// The warp grid of each `mma.sync` fragment array, by array name.
    pub frag_grid: HashMap<String, crate::opt::plan::WarpGrid>,
    /// Row vectors the plan keeps in the row slices of `mma.sync` fragments
    /// ([`crate::opt::rows`]): value -> the grid whose rows they follow.
    pub slices: HashMap<Value, crate::opt::plan::WarpGrid>,
    /// Registers of the loop-carried arrays holding row slices, by array name.
    pub slice_vars: HashMap<String, usize>,
    /// Bytes of register arrays declared so far (an upper bound on their stack use: arrays
    /// of disjoint scopes are counted as if they all lived at once).
    pub local_bytes: usize,
    /// The decisions this printer spells.
    pub plan: KernelPlan,
    /// The compiled CPU executor's state, when the plan has its decisions
    /// ([`KernelPlan::cpu`]); the GPU printers carry none.
    pub cpu: Option<super::cpu::CpuStage>,
    /// Per parameter: updated in place through a GPU dialect ([`in_place_names`]): the
    /// program reads the argument's contents from an extra input and flags each element it
    /// writes in an extra output.
    pub in_place: Vec<bool>,
    /// Per pointer value: cast from an integer (`int_to_ptr`) or derived from one, so its
    /// buffer is chosen at run time and travels in its bits (a pointer-table slot above a
    /// 48-bit element offset, as the CPU executor packs pointers). Only the compiled CPU
    /// executor's dialect prints such pointers (through `tm_dyn` views of the slots).
    pub dynamic: Vec<bool>,
    /// Dot operands whose loads were issued ahead into a loop's ring ([`super::ahead`]):
    /// their representation points at the current iteration's buffer.
    pub ring_vals: HashSet<Value>,
    /// Per load issued ahead through whole chunks: the arrays (declared before its loop)
    /// of each chunk's first offset at the loop's start and, when the axis analysis cannot
    /// prove the chunk's offsets run +1, whether they do (`ahead.rs`).
    pub ring_chunks: HashMap<OpId, (String, Option<String>)>,
    /// Per chunk of a recomputed ring load whose pointers are affine in the induction
    /// variable ([`crate::opt::pipeline::affine_in_iv`]): its first offset at the loop's start
    /// and its change per iteration, an array read at `tm_c` or one value (`ahead.rs`).
    pub ring_affine: HashMap<OpId, (String, String)>,
    /// The loop's flag (declared before it) telling that every chunk of every load of its
    /// ring is copied whole, so each iteration issues its copies with no test.
    pub ring_fast: Option<String>,
    /// While printing one version of a loop whose ring has a fast flag
    /// ([`Lowering::for_loop`]): `true` in the version that runs when the flag holds (its
    /// copies untested), `false` in the other.
    pub ring_version: Option<bool>,
    /// Bytes of dynamic shared memory the rings need (the largest ring of the kernel).
    pub ring_bytes: usize,
    /// One-thread programs: dot operands loaded in a `for` loop through carried pointers
    /// the loop advances by a loop-invariant step, with that pointer and step (the dot
    /// prefetches the next iteration's rows; [`Self::cpu_prefetch_prologue`]).
    pub prefetch: HashMap<Value, (Value, Value)>,
}

/// The generated names of parameter `i`'s extra input (the argument's contents) and flag
/// output when it is updated in place (`tm_` names are never a parameter's identifier).
pub(super) fn in_place_names(i: usize) -> (String, String) {
    (format!("tm_in_{i}"), format!("tm_wr_{i}"))
}

/// What `d` offers the planner for a program of `opts.num_warps` warps.
pub(super) fn printer_of(d: &Dialect, opts: &LaunchOptions) -> Printer {
    let matrix = if d.mma_m16n8k16 && opts.target.chip == crate::opt::Chip::Sm90 {
        MatrixUnit::Wgmma
    } else if d.mma_m16n8k16 {
        MatrixUnit::MmaM16N8K16
    } else if d.matrix_8x8 && opts.target.simdgroup_matrix {
        MatrixUnit::Simdgroup8x8
    } else {
        MatrixUnit::None
    };
    Printer {
        threads: opts.num_warps as usize * d.simd_width,
        matrix,
        widest_vector: d.widest_vector(),
        static_shared: (d.name == "cuda").then_some(super::cuda::STATIC_SHARED_LIMIT),
    }
}

/// Placeholder for the flat element index in a recipe.
pub(super) const FLAT: &str = "{L}";

/// Longest recipe kept by dialects without threadgroup memory (the compiled CPU executor's lazy
/// blocks); longer ones are cheaper to move than to recompute. The GPU dialects keep a recipe
/// exactly where `opt::buffers::held` says so.
const MAX_RECIPE: usize = 400;

pub(super) fn unsupported(k: &Kernel, what: impl std::fmt::Display) -> Error {
    unsupported_on(&super::dialect::METAL, k, what)
}

/// Every block dimension must be a power of two (layouts split flat indices into bits).
pub(super) fn check_block_shapes(d: &Dialect, k: &Kernel) -> Result<()> {
    check_dtypes(d, k)?;
    match k
        .values
        .iter()
        .find(|v| v.ty.shape.iter().any(|n| !n.is_power_of_two()))
    {
        Some(v) => Err(unsupported_on(
            d,
            k,
            format!("block shape {} (dims must be powers of two)", v.ty),
        )),
        None => Ok(()),
    }
}

/// Every dtype of `k` (parameters, operands and results) has a spelling in `d`; otherwise
/// `Unsupported` naming the first op that uses one without (with its source line) and the
/// targets that run it (only the CPU targets have f64).
fn check_dtypes(d: &Dialect, k: &Kernel) -> Result<()> {
    let missing = |dt: DType| d.type_name(dt).is_none();
    let why = |dt: DType| {
        if dt == DType::F64 {
            let why = if d.name == "metal" {
                "Apple GPUs have no fp64".to_string()
            } else {
                format!("{} code is not generated for f64", d.title)
            };
            format!(
                "({why}: run the kernel on Target::Cpu or Target::CpuCompiled, or compute in \
                 F32)"
            )
        } else {
            "(run the kernel on Target::Cpu)".to_string()
        }
    };
    if let Some((p, dt)) = k.params.iter().find_map(|p| {
        let (ParamKind::Ptr(dt) | ParamKind::Scalar(dt)) = p.kind;
        missing(dt).then_some((p, dt))
    }) {
        return Err(unsupported_on(
            d,
            k,
            format!("dtype {dt} of parameter `{}` {}", p.name, why(dt)),
        ));
    }
    for id in k.walk() {
        let data = k.op(id);
        let mut bad = None;
        data.op.for_each_operand(|v| {
            if bad.is_none() && missing(k.ty(v).dtype) {
                bad = Some(k.ty(v).dtype);
            }
        });
        if let Some(dt) = bad.or_else(|| {
            data.results
                .iter()
                .map(|v| k.ty(v).dtype)
                .find(|&dt| missing(dt))
        }) {
            return Err(unsupported_on(
                d,
                k,
                format!(
                    "dtype {dt} in op `{}` at {} {}",
                    data.op.name(),
                    data.loc,
                    why(dt)
                ),
            ));
        }
    }
    Ok(())
}

/// The unsigned type of offsets of type `off` (their wrapping arithmetic).
pub(super) fn unsigned_offset(off: DType) -> &'static str {
    if off == DType::I64 {
        "ulong"
    } else {
        "uint"
    }
}

/// `Error::Unsupported` naming the kernel, the construct and the target language.
pub(super) fn unsupported_on(d: &Dialect, k: &Kernel, what: impl std::fmt::Display) -> Error {
    Error::Unsupported(format!("kernel `{}`: {what} on {}", k.name, d.title))
}

impl<'k> Lowering<'k> {
    /// The printer for `k` spelling `plan` (verified by the caller).
    pub fn with_plan(
        k: &'k Kernel,
        d: &'static Dialect,
        opts: &'k LaunchOptions,
        mut plan: KernelPlan,
    ) -> Lowering<'k> {
        let threads = opts.num_warps as usize * d.simd_width;
        if plan.arena.buffers.is_empty() {
            // Overrides drop the buffers, which follow from the decisions.
            plan.place_arena(k, opts);
        }
        let idents: Vec<String> = k
            .params
            .iter()
            .map(|p| super::abi::param_ident(&p.name).into_owned())
            .collect();
        let mut names: HashSet<String> = idents.iter().cloned().collect();
        names.insert(k.name.clone());
        let axis = crate::opt::axis::analyse(k);
        let axis_unchecked = crate::opt::axis::analyse_unchecked(k);
        let slices = if plan.printer.matrix.mma_sync() {
            crate::opt::rows::kept(k, &plan)
                .into_iter()
                .flat_map(|c| c.values.into_iter().map(move |v| (v, c.grid)))
                .collect()
        } else {
            HashMap::new()
        };
        let mut lw = Lowering {
            vec: plan.vec,
            k,
            d,
            opts,
            threads,
            reprs: vec![None; k.values.len()],
            prov: vec![None; k.values.len()],
            names,
            idents,
            fresh_next: HashMap::new(),
            lines: Vec::new(),
            indent: 1,
            scratch: BTreeMap::new(),
            smem_used: Vec::new(),
            held: crate::opt::buffers::held(k),
            cur_op: None,
            hazard: Hazard::default(),
            helpers: BTreeSet::new(),
            layouts: Vec::new(),
            atomic_outputs: k
                .ops
                .iter()
                .any(|o| matches!(o.op, Op::AtomicRmw { .. } | Op::AtomicCas { .. })),
            off_dtype: crate::opt::buffers::offset_dtype(k),
            uses_simd: false,
            recipes: vec![None; k.values.len()],
            axis,
            axis_unchecked,
            frags: HashMap::new(),
            frag_vals: HashMap::new(),
            frag_grid: HashMap::new(),
            slices,
            slice_vars: HashMap::new(),
            hoisted: HashMap::new(),
            local_bytes: 0,
            cpu: plan.cpu.clone().map(|c| super::cpu::CpuStage::new(c, k)),
            plan,
            in_place: vec![false; k.params.len()],
            dynamic: vec![false; k.values.len()],
            ring_vals: HashSet::new(),
            ring_chunks: HashMap::new(),
            ring_affine: HashMap::new(),
            ring_fast: None,
            ring_version: None,
            ring_bytes: 0,
            prefetch: HashMap::new(),
        };
        if k.params.iter().any(|p| lw.word_param(p)) {
            lw.helpers.insert("atomic_words");
        }
        lw
    }

    /// Whether output `p` lives in 32-bit words ([`Dialect::word_atomic_outputs`]).
    fn word_param(&self, p: &crate::ir::Param) -> bool {
        self.d.word_atomic_outputs
            && self.atomic_outputs
            && p.stored
            && matches!(p.kind, ParamKind::Ptr(dt) if dt.size_bytes() != 4)
    }

    /// The element type of `ptr`'s output when that output lives in 32-bit words.
    pub(super) fn in_words(&self, ptr: Value) -> Option<DType> {
        let p = &self.k.params[self.prov[ptr.index()]?];
        match p.kind {
            ParamKind::Ptr(dt) if self.word_param(p) => Some(dt),
            _ => None,
        }
    }

    /// Marks the parameters of `params` that the kernel stores to as updated in place (see
    /// [`Lowering::in_place`]); call before lowering.
    pub fn set_in_place(&mut self, params: &[usize]) -> Result<()> {
        for &i in params {
            let Some(p) = self.k.params.get(i) else {
                continue;
            };
            if !p.stored {
                continue;
            }
            self.in_place[i] = true;
            let (src, flag) = in_place_names(i);
            self.names.insert(src);
            self.names.insert(flag);
            if self.atomic_outputs {
                // `tm_in_place_init`, for atomics and stores to the parameter (and its
                // variants for outputs kept in 32-bit words).
                self.helpers.insert("in_place");
                if self.word_param(p) {
                    self.helpers.insert("in_place_words");
                }
            }
        }
        Ok(())
    }

    // ---- small printing helpers -------------------------------------------------------

    pub fn line(&mut self, s: impl AsRef<str>) {
        let pad = "  ".repeat(self.indent);
        self.lines.push(format!("{pad}{}", s.as_ref()));
    }

    pub fn open(&mut self, s: impl AsRef<str>) {
        self.line(format!("{} {{", s.as_ref()));
        self.indent += 1;
    }

    pub fn close(&mut self) {
        self.indent -= 1;
        self.line("}");
    }

    /// A fresh identifier built from `base` (never a parameter, never reused).
    pub fn fresh(&mut self, base: &str) -> String {
        let base: String = base
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        // Bases made from parameter names may be anything a parameter may be called: one
        // whose suffixed names are not safe identifiers is replaced.
        let plain = |c: &str| super::abi::param_ident(c) == c;
        let base = if plain(&format!("{base}_1")) {
            base
        } else {
            "v".to_string()
        };
        let mut n = self.fresh_next.get(&base).copied().unwrap_or(0);
        loop {
            let cand = if n == 0 && base.ends_with(|c: char| c.is_ascii_digit()) {
                format!("{base}_")
            } else if n == 0 {
                base.clone()
            } else {
                format!("{base}_{n}")
            };
            if !self.names.contains(&cand) && plain(&cand) {
                self.names.insert(cand.clone());
                self.fresh_next.insert(base, n + 1);
                return cand;
            }
            n += 1;
        }
    }

    pub fn ty(&self, v: Value) -> &'k Type {
        self.k.ty(v)
    }

    /// The element type a value is stored as (pointers are offsets).
    pub fn edt(&self, v: Value) -> DType {
        let t = self.ty(v);
        if t.ptr {
            self.off_dtype
        } else {
            t.dtype
        }
    }

    pub fn cty(&self, dtype: DType) -> Result<&'static str> {
        self.d
            .type_name(dtype)
            .ok_or_else(|| unsupported_on(self.d, self.k, format!("dtype {dtype}")))
    }

    pub fn layout_of(&self, n: usize) -> BlockedLayout {
        crate::opt::blocked::layout_of(n, self.vec, self.opts.vector_elems(), self.threads)
    }

    pub fn layout(&self, v: Value) -> BlockedLayout {
        self.layout_of(self.ty(v).numel())
    }

    pub fn repr(&self, v: Value) -> &Repr {
        self.reprs[v.index()]
            .as_ref()
            .expect("operands are lowered before their uses (the verifier checks dominance)")
    }

    pub fn set(&mut self, v: Value, r: Repr) {
        self.reprs[v.index()] = Some(r);
    }

    /// Element `i` of `v` (a C expression); scalars and splats ignore `i`.
    pub fn el(&self, v: Value, i: &str) -> String {
        match self.repr(v) {
            Repr::Scalar(s) | Repr::Splat(s) => s.clone(),
            Repr::Block(a) => match self.flag(v) {
                Some(f) => format!("({f} || {a}[{i}])"),
                None => format!("{a}[{i}]"),
            },
        }
    }

    /// The value as a function of its flat index, if it is one (uniform values are).
    pub fn recipe(&self, v: Value) -> Option<String> {
        match self.repr(v) {
            Repr::Scalar(s) | Repr::Splat(s) => Some(s.clone()),
            Repr::Block(_) => {
                let r = self.recipes[v.index()].clone()?;
                Some(match self.flag(v) {
                    Some(f) => format!("({f} || {r})"),
                    None => r,
                })
            }
        }
    }

    /// Moves `src` into `res`'s layout where result element `l` is source element
    /// `src_index(l)`: recomputed from its recipe when it has one, else through threadgroup
    /// memory.
    fn relayout(
        &mut self,
        res: Value,
        src: Value,
        base: &str,
        src_index: &dyn Fn(&str) -> String,
    ) -> Result<()> {
        let Some(r) = self.recipe(src).filter(|_| !self.shape_through_memory()) else {
            return self.convert(res, src, base, src_index);
        };
        let at = |l: &str| r.replace(FLAT, &format!("({})", src_index(l)));
        let dt = self.edt(res);
        let name = if self.ty(res).is_scalar() {
            let name = self.fresh(base);
            let ct = self.cty(dt)?;
            self.line(format!("const {ct} {name} = {};", at("0u")));
            self.set(res, Repr::Scalar(name.clone()));
            name
        } else if self.lazy_recipes() {
            // Computed where it is read, like the recipe it comes from.
            let name = self.lazy_block(base, dt, &at(FLAT))?;
            self.set(res, Repr::Block(name.clone()));
            self.recipes[res.index()] = Some(at(FLAT));
            name
        } else {
            let lay = self.layout(res);
            let name = self.declare_block(base, dt, lay.n)?;
            self.open_regs(lay, true);
            self.line(format!("{name}[tm_i] = {};", at("tm_l")));
            self.close();
            self.set(res, Repr::Block(name.clone()));
            self.recipes[res.index()] = Some(at(FLAT));
            name
        };
        self.layouts.push(LayoutChoice {
            op: format!("{base} {name}: {} -> {}", self.ty(src), self.ty(res)),
            layout: "recomputed from the element index (no data movement)".into(),
        });
        Ok(())
    }

    pub fn is_uniform(&self, v: Value) -> bool {
        matches!(self.repr(v), Repr::Scalar(_) | Repr::Splat(_))
    }

    /// Opens `for (tm_i ...)` over the registers of layout `lay`, with `tm_l` the flat
    /// index; the caller closes it.
    pub fn open_regs(&mut self, lay: BlockedLayout, need_flat: bool) {
        self.open(format!(
            "for (uint tm_i = 0; tm_i < {}u; ++tm_i)",
            lay.regs()
        ));
        if need_flat {
            let e = lay.flat_expr("tm_i", "tm_lid");
            self.line(format!("const uint tm_l = {e};"));
        }
    }

    /// Opens a loop over `regs` registers (`tm_i`).
    pub fn open_reg_loop(&mut self, regs: usize) {
        self.open(format!("for (uint tm_i = 0; tm_i < {regs}u; ++tm_i)"));
    }

    /// Registers per thread of block `v`: its blocked layout's, or two per 16-row tile of
    /// its grid for a row vector kept in fragment rows.
    pub fn regs_of(&self, v: Value) -> usize {
        match self.slices.get(&v) {
            Some(g) => 2 * g.fm,
            None => self.layout(v).regs(),
        }
    }

    /// Declares a register array for a block value of type `ty`.
    pub fn declare_block(&mut self, base: &str, dtype: DType, n: usize) -> Result<String> {
        let name = self.fresh(base);
        let c = self.cty(dtype)?;
        let r = self.layout_of(n).regs();
        self.line(format!("{c} {name}[{r}];"));
        self.local_bytes += r * dtype.size_bytes();
        Ok(name)
    }

    /// Turns `v` into a register array (splats are filled).
    pub fn materialize(&mut self, v: Value) -> Result<String> {
        match self.repr(v).clone() {
            Repr::Block(a) => Ok(a),
            Repr::Scalar(s) | Repr::Splat(s) => {
                let lay = self.layout(v);
                let a = self.declare_block("splat", self.edt(v), lay.n)?;
                self.open_regs(lay, false);
                self.line(format!("{a}[tm_i] = {s};"));
                self.close();
                self.set(v, Repr::Block(a.clone()));
                if !self.d.shared_array.is_empty() {
                    // Still one value at every index: later layout changes recompute it, as
                    // the plan has them (`opt::buffers::held`).
                    self.recipes[v.index()] = Some(s);
                }
                Ok(a)
            }
        }
    }

    // ---- threadgroup memory -----------------------------------------------------------

    /// The declarations of the threadgroup arena and of each buffer's view of it, from the
    /// plan's arena (the views of the buffers the printed code uses). An error names the
    /// kernel, the op, its line and the bytes when the arena is over the plan's budget;
    /// `memory` names that memory ("threadgroup memory on M1").
    pub fn arena_decls(&mut self, memory: &str) -> Result<Vec<String>> {
        use crate::opt::smem::Buffer;
        self.plan.arena.verify(self.k, &self.k.name)?;
        let bytes = self.plan.arena.within_limit(self.k, memory)?;
        let mut used: Vec<&Buffer> = self
            .plan
            .arena
            .buffers
            .iter()
            .filter(|b| self.smem_used.contains(&(b.op, b.role, b.dtype)))
            .collect();
        used.sort_by_key(|b| (b.offset, b.op, b.role));
        if used.is_empty() {
            return Ok(Vec::new());
        }
        let cuda = self.d.name == "cuda";
        let mut out = vec![if cuda {
            format!("  __shared__ __align__(16) unsigned char tm_arena[{bytes}];")
        } else {
            format!(
                "  {} float4 tm_arena[{}];",
                self.d.shared_array,
                bytes.div_ceil(16)
            )
        }];
        for b in used {
            let ct = self.cty(b.dtype)?;
            let id = Buffer::ident(b.op, b.role, b.dtype);
            let off = b.offset;
            out.push(if cuda {
                format!("  {ct}* const {id} = reinterpret_cast<{ct}*>(tm_arena + {off});")
            } else {
                let sa = self.d.shared_array;
                format!("  {sa} {ct}* const {id} = ({sa} {ct}*)(({sa} uchar*)tm_arena + {off});")
            });
        }
        Ok(out)
    }

    /// A scratch array of `dtype` with at least `elems` elements for the op being lowered
    /// (a reduction's, scan's, shape op's or atomic's conversion).
    pub fn scratch_array(&mut self, dtype: DType, elems: usize) -> Result<String> {
        let role = match self.cur_op {
            Some(op) => crate::opt::smem::Role::of_op(&self.k.op(op).op),
            None => crate::opt::smem::Role::Shape,
        };
        self.smem_buf(role, dtype, elems)
    }

    /// The buffer of `role` (at least `elems` elements of `dtype`) the op being lowered
    /// converts through: a view of the plan's arena, or, in dialects without one (one
    /// thread per program), the per-dtype array.
    pub fn smem_buf(
        &mut self,
        role: crate::opt::smem::Role,
        dtype: DType,
        elems: usize,
    ) -> Result<String> {
        self.cty(dtype)?;
        if self.d.shared_array.is_empty() {
            let e = self.scratch.entry(dtype).or_insert(0);
            *e = (*e).max(elems);
            return Ok(format!("tm_smem_{}", dtype.short_name()));
        }
        let op = self
            .cur_op
            .ok_or_else(|| unsupported_on(self.d, self.k, "threadgroup memory outside any op"))?;
        let need = elems * dtype.size_bytes();
        match self.plan.arena.find(op, role, dtype) {
            Some(b) if b.bytes >= need => {}
            found => {
                let o = self.k.op(op);
                return Err(Error::InvalidArgument(format!(
                    "layout plan of `{}`: {op} (`{}` at {}) needs a threadgroup buffer of {need} \
                     bytes of {dtype} for {}, and the plan has {} (an internal error when the \
                     plan is the optimizer's own)",
                    self.k.name,
                    o.op.name(),
                    o.loc,
                    role.name(),
                    found.map_or("none".to_string(), |b| format!("{} bytes", b.bytes))
                )));
            }
        }
        if !self.smem_used.contains(&(op, role, dtype)) {
            self.smem_used.push((op, role, dtype));
        }
        Ok(crate::opt::smem::Buffer::ident(op, role, dtype))
    }

    /// Whether the plan moves the result of the shape op being lowered through threadgroup
    /// memory (its source is a block held in registers, [`crate::opt::buffers::held`]).
    pub(super) fn shape_through_memory(&self) -> bool {
        !self.d.shared_array.is_empty()
            && self.cur_op.is_some_and(|op| {
                self.plan
                    .arena
                    .buffers
                    .iter()
                    .any(|b| b.op == op && b.role == crate::opt::smem::Role::Shape)
            })
    }

    /// Before threads write scratch: waits for pending reads.
    pub fn smem_write_begin(&mut self) {
        if self.hazard.reads_pending {
            self.line(self.d.barrier);
            self.hazard.reads_pending = false;
        }
    }

    /// After threads wrote scratch: makes the writes visible before anyone reads.
    pub fn smem_write_end(&mut self) {
        self.line(self.d.barrier);
        self.hazard.reads_pending = false;
    }

    /// After threads read scratch.
    pub fn smem_read_done(&mut self) {
        self.hazard.reads_pending = true;
    }

    /// Writes every held element of `src` to `arr[base + pos(flat)]`.
    pub fn stage(
        &mut self,
        src: Value,
        arr: &str,
        base: usize,
        pos: &dyn Fn(&str) -> String,
    ) -> Result<()> {
        let lay = self.layout(src);
        let x = self.el(src, "tm_i");
        self.open_regs(lay, true);
        let p = pos("tm_l");
        let at = if base == 0 {
            p
        } else {
            format!("{base}u + {p}")
        };
        if lay.has_idle_threads() {
            self.line(format!("if (tm_l < {}u) {arr}[{at}] = {x};", lay.n));
        } else {
            self.line(format!("{arr}[{at}] = {x};"));
        }
        self.close();
        Ok(())
    }

    /// Fills a new block (`n` elements) with `expr(flat)` read from scratch.
    pub fn gather(
        &mut self,
        base: &str,
        dtype: DType,
        n: usize,
        expr: &dyn Fn(&str) -> String,
    ) -> Result<String> {
        let lay = self.layout_of(n);
        let name = self.declare_block(base, dtype, n)?;
        self.open_regs(lay, true);
        let e = expr("tm_l");
        if lay.has_idle_threads() {
            let c = self.cty(dtype)?;
            self.line(format!("{name}[tm_i] = tm_l < {n}u ? {e} : {c}(0);"));
        } else {
            self.line(format!("{name}[tm_i] = {e};"));
        }
        self.close();
        Ok(name)
    }

    // ---- literals and types -----------------------------------------------------------

    pub fn literal(&self, c: Const, dtype: DType) -> Result<String> {
        let cty = self.cty(dtype)?;
        Ok(match dtype {
            DType::Bool => (if c.as_i64() != 0 { "true" } else { "false" }).into(),
            DType::I32 => {
                let v = c.as_i64() as i32;
                if v == i32::MIN {
                    "(-2147483647 - 1)".into()
                } else {
                    v.to_string()
                }
            }
            DType::I64 => {
                let v = c.as_i64();
                if v == i64::MIN {
                    format!("{cty}(-9223372036854775807L - 1)")
                } else {
                    format!("{cty}({v}L)")
                }
            }
            DType::U32 => format!("{}u", c.as_i64() as u32),
            DType::U64 => format!("{cty}({}UL)", c.as_i64() as u64),
            DType::I8 => format!("{cty}({})", c.as_i64() as i8),
            DType::I16 => format!("{cty}({})", c.as_i64() as i16),
            DType::U8 => format!("{cty}({})", c.as_i64() as u8),
            DType::U16 => format!("{cty}({})", c.as_i64() as u16),
            DType::F32 | DType::F16 | DType::BF16 => {
                // Rounded once to the 16-bit types (see `f64_to_f32_odd`).
                let v = if dtype == DType::F32 {
                    c.as_f64() as f32
                } else {
                    crate::dtype::f64_to_f32_odd(c.as_f64())
                };
                let f = if v.is_nan() {
                    self.d.nan.to_string()
                } else if v.is_infinite() {
                    format!("{}{}", if v < 0.0 { "-" } else { "" }, self.d.infinity)
                } else {
                    let s = format!("{v:?}");
                    let s = if s.contains(['.', 'e', 'E']) {
                        s
                    } else {
                        format!("{s}.0")
                    };
                    format!("{s}f")
                };
                if dtype == DType::F32 {
                    f
                } else {
                    format!("{cty}({f})")
                }
            }
            DType::F64 => {
                let v = c.as_f64();
                if v.is_nan() {
                    "__builtin_nan(\"\")".into()
                } else if v.is_infinite() {
                    format!("{}__builtin_inf()", if v < 0.0 { "-" } else { "" })
                } else {
                    // Rust's shortest representation that reads back as `v`.
                    let s = format!("{v:?}");
                    if s.contains(['.', 'e', 'E']) {
                        s
                    } else {
                        format!("{s}.0")
                    }
                }
            }
        })
    }

    // ---- driving ----------------------------------------------------------------------

    /// Pointer provenance: the one parameter each pointer value is an offset into.
    pub fn compute_provenance(&mut self) -> Result<()> {
        for (i, p) in self.k.params.iter().enumerate() {
            let r = if matches!(p.kind, ParamKind::Ptr(_)) {
                self.prov[p.value.index()] = Some(i);
                "0".to_string()
            } else {
                self.idents[i].clone()
            };
            self.reprs[p.value.index()] = Some(Repr::Scalar(r));
        }
        for id in self.k.walk() {
            let data = self.k.op(id);
            let get = |v: Value, prov: &Vec<Option<usize>>| prov[v.index()];
            let setp = |v: Value, p: Option<usize>, prov: &mut Vec<Option<usize>>| {
                if p.is_some() {
                    prov[v.index()] = p;
                }
            };
            match &data.op {
                Op::AddPtr { ptr, .. } => {
                    let p = get(*ptr, &self.prov);
                    setp(data.results.start_value(), p, &mut self.prov);
                }
                Op::Splat { src }
                | Op::Broadcast { src }
                | Op::ExpandDims { src, .. }
                | Op::Reshape { src }
                | Op::Permute { src, .. } => {
                    let p = get(*src, &self.prov);
                    setp(data.results.start_value(), p, &mut self.prov);
                }
                Op::Split { src } => {
                    let p = get(*src, &self.prov);
                    for r in data.results.iter() {
                        setp(r, p, &mut self.prov);
                    }
                }
                Op::Select {
                    on_true, on_false, ..
                }
                | Op::Join {
                    lhs: on_true,
                    rhs: on_false,
                } => {
                    let (a, b) = (get(*on_true, &self.prov), get(*on_false, &self.prov));
                    if a.is_some() && b.is_some() && a != b {
                        return Err(unsupported_on(
                            self.d,
                            self.k,
                            format!("`{}` of pointers into different parameters", data.op.name()),
                        ));
                    }
                    setp(data.results.start_value(), a.or(b), &mut self.prov);
                }
                Op::For { init, body, .. } => {
                    let args = self.k.region(*body).args.clone();
                    for (k, v) in init.iter().enumerate() {
                        let p = get(*v, &self.prov);
                        setp(args[k + 1], p, &mut self.prov);
                        if let Some(r) = data.results.get(k) {
                            setp(r, p, &mut self.prov);
                        }
                    }
                }
                Op::While { init, cond, body } => {
                    for (k, v) in init.iter().enumerate() {
                        let p = get(*v, &self.prov);
                        for r in [*cond, *body] {
                            let a = self.k.region(r).args[k];
                            setp(a, p, &mut self.prov);
                        }
                        if let Some(r) = data.results.get(k) {
                            setp(r, p, &mut self.prov);
                        }
                    }
                }
                Op::If { then_region, .. } => {
                    if let Some(&last) = self.k.region(*then_region).ops.last() {
                        if let Op::Yield { values } = &self.k.op(last).op {
                            for (k, v) in values.iter().enumerate() {
                                let p = get(*v, &self.prov);
                                if let Some(r) = data.results.get(k) {
                                    setp(r, p, &mut self.prov);
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        self.compute_dynamic()
    }

    /// Marks the pointers cast from integers and those derived from them
    /// ([`Lowering::dynamic`]), which mix with no parameter's pointers.
    fn compute_dynamic(&mut self) -> Result<()> {
        if !self
            .k
            .ops
            .iter()
            .any(|o| matches!(o.op, Op::IntToPtr { .. }))
        {
            return Ok(());
        }
        for id in self.k.walk() {
            let data = self.k.op(id);
            let mut flows: Vec<(Value, Value)> = Vec::new();
            match &data.op {
                Op::IntToPtr { .. } => self.dynamic[data.results.start_value().index()] = true,
                Op::AddPtr { ptr: src, .. }
                | Op::Splat { src }
                | Op::Broadcast { src }
                | Op::ExpandDims { src, .. }
                | Op::Reshape { src }
                | Op::Permute { src, .. } => flows.push((*src, data.results.start_value())),
                Op::Split { src } => flows.extend(data.results.iter().map(|r| (*src, r))),
                Op::Select {
                    on_true, on_false, ..
                }
                | Op::Join {
                    lhs: on_true,
                    rhs: on_false,
                } => {
                    let (a, b) = (*on_true, *on_false);
                    let dynamic = |v: Value| self.dynamic[v.index()];
                    let param = |v: Value| self.prov[v.index()].is_some();
                    if (dynamic(a) && param(b)) || (dynamic(b) && param(a)) {
                        return Err(unsupported_on(
                            self.d,
                            self.k,
                            format!(
                                "`{}` of a pointer cast from an integer and a pointer argument",
                                data.op.name()
                            ),
                        ));
                    }
                    flows.push((a, data.results.start_value()));
                    flows.push((b, data.results.start_value()));
                }
                Op::For { init, body, .. } => {
                    let args = self.k.region(*body).args.clone();
                    for (k, v) in init.iter().enumerate() {
                        flows.push((*v, args[k + 1]));
                        flows.extend(data.results.get(k).map(|r| (*v, r)));
                    }
                }
                Op::While { init, cond, body } => {
                    for (k, v) in init.iter().enumerate() {
                        for r in [*cond, *body] {
                            flows.push((*v, self.k.region(r).args[k]));
                        }
                        flows.extend(data.results.get(k).map(|r| (*v, r)));
                    }
                }
                Op::If { then_region, .. } => {
                    if let Some(&last) = self.k.region(*then_region).ops.last() {
                        if let Op::Yield { values } = &self.k.op(last).op {
                            for (k, v) in values.iter().enumerate() {
                                flows.extend(data.results.get(k).map(|r| (*v, r)));
                            }
                        }
                    }
                }
                _ => {}
            }
            for (from, to) in flows {
                if self.dynamic[from.index()] {
                    self.dynamic[to.index()] = true;
                }
            }
        }
        Ok(())
    }

    /// Lowers the ops of region `r` (but not its `yield`); returns the yielded values.
    pub fn region(&mut self, r: RegionId) -> Result<Vec<Value>> {
        self.region_ops(r, false)
    }

    /// [`Lowering::region`], opening a split after each mask worth unswitching when
    /// `split` (see [`Lowering::region_split`]).
    pub(super) fn region_ops(&mut self, r: RegionId, split: bool) -> Result<Vec<Value>> {
        let ops = self.k.region(r).ops.clone();
        let mut yielded = Vec::new();
        for id in ops {
            if let Op::Yield { values } = &self.k.op(id).op {
                yielded = values.clone();
                continue;
            }
            self.op(id)?;
            if split {
                let results: Vec<Value> = self.k.op(id).results.iter().collect();
                for v in results {
                    self.maybe_split(v);
                }
            }
        }
        Ok(yielded)
    }

    pub(super) fn param_name(&self, v: Value) -> Result<String> {
        self.base_name(v, false)
    }

    /// The view that accesses through pointer `v` index: its parameter's, or for a pointer
    /// cast from an integer the slots' view of its pointee type (`write`: the one that
    /// refuses read-only slots).
    pub(super) fn base_name(&self, v: Value, write: bool) -> Result<String> {
        if self.prov[v.index()].is_none() && self.dynamic[v.index()] && self.d.name == "cpu" {
            let w = if write { "w" } else { "" };
            return Ok(format!("tm_tab{w}_{}", self.ty(v).dtype.short_name()));
        }
        let p = self.prov[v.index()].ok_or_else(|| {
            unsupported_on(self.d, self.k, "a pointer not derived from a parameter")
        })?;
        Ok(self.idents[p].clone())
    }

    pub(super) fn is_output_ptr(&self, v: Value) -> bool {
        self.prov[v.index()].is_some_and(|p| self.k.params[p].stored)
    }

    /// The parameter `v` derives from when that parameter is updated in place.
    pub(super) fn in_place_param(&self, v: Value) -> Option<usize> {
        self.prov[v.index()].filter(|&p| self.in_place[p])
    }

    /// `e`, an atomic update of element `off` of the in-place parameter `i`, after the
    /// element has been made to hold the argument's value (`tm_in_place_init`).
    fn in_place_atomic(&self, i: usize, ptr: Value, off: &str, e: String) -> Result<String> {
        Ok(format!("({}, {e})", self.in_place_init(i, ptr, off)?))
    }

    /// The call making element `off` of the in-place parameter `i` (through `ptr`) hold
    /// the argument's value, in a kernel with atomics (`tm_in_place_init`, or its variant for
    /// an output kept in 32-bit words).
    fn in_place_init(&self, i: usize, ptr: Value, off: &str) -> Result<String> {
        let p = self.param_name(ptr)?;
        let (src, flag) = in_place_names(i);
        Ok(match self.in_words(ptr) {
            Some(dt) => {
                let wide = if dt.size_bytes() == 8 { "8" } else { "" };
                format!(
                    "tm_in_place_init_pk{wide}<{}>(&{flag}[{off}], {p}, {off}, {src}[{off}])",
                    self.cty(dt)?
                )
            }
            None => format!("tm_in_place_init(&{flag}[{off}], &{p}[{off}], {src}[{off}])"),
        })
    }

    /// Base name for values loaded through / offset from parameter `p`.
    pub(super) fn stem(&self, v: Value) -> String {
        match self.prov[v.index()] {
            Some(p) => {
                let n = &self.k.params[p].name;
                n.strip_suffix("_ptr")
                    .or_else(|| n.strip_suffix("ptr"))
                    .filter(|s| !s.is_empty())
                    .unwrap_or(n)
                    .to_string()
            }
            None => "v".into(),
        }
    }

    pub(super) fn op(&mut self, id: OpId) -> Result<()> {
        let for_op = matches!(self.k.op(id).op, Op::For { .. });
        let writes = self
            .plan
            .arena
            .buffers
            .iter()
            .any(|b| b.op == id && !(for_op && b.role == crate::opt::smem::Role::AccOut));
        if writes {
            // Whether reads of other ops may still be pending is the plan's to say.
            self.hazard.reads_pending = self.plan.barrier(id, When::Before).is_some();
        }
        let outer = self.cur_op.replace(id);
        let r = self.op_inner(id);
        self.cur_op = outer;
        r
    }

    fn op_inner(&mut self, id: OpId) -> Result<()> {
        let data = self.k.op(id);
        let res = data.results.start_value();
        if let Some(m) = self.d.op_marker {
            if matches!(
                data.op,
                Op::Load { .. } | Op::Store { .. } | Op::AtomicRmw { .. } | Op::AtomicCas { .. }
            ) {
                self.line(m.replace("{id}", &id.index().to_string()));
            }
        }
        match &data.op {
            Op::ProgramId { axis } => {
                let n = self.fresh(&format!("pid{axis}"));
                self.line(format!(
                    "const int {n} = {};",
                    self.d.program_id[*axis as usize]
                ));
                self.set(res, Repr::Scalar(n));
            }
            Op::NumPrograms { axis } => {
                let n = self.fresh(&format!("num_programs{axis}"));
                self.line(format!(
                    "const int {n} = {};",
                    self.d.num_programs[*axis as usize]
                ));
                self.set(res, Repr::Scalar(n));
            }
            Op::Constant { value } => {
                let lit = self.literal(*value, self.edt(res))?;
                if self.ty(res).is_block() {
                    self.set(res, Repr::Splat(lit));
                } else {
                    self.set(res, Repr::Scalar(lit));
                }
            }
            Op::Arange { start, .. } if self.lazy_recipes() => {
                let r = format!("({start} + int({FLAT}))");
                let n = self.lazy_block("arange", DType::I32, &r)?;
                self.set(res, Repr::Block(n));
                self.recipes[res.index()] = Some(r);
            }
            Op::Arange { start, .. } => {
                let lay = self.layout(res);
                let n = self.declare_block("arange", DType::I32, lay.n)?;
                self.open_regs(lay, true);
                let off = if *start == 0 {
                    String::new()
                } else {
                    format!("{start} + ")
                };
                self.line(format!("{n}[tm_i] = {off}int(tm_l);"));
                self.close();
                self.set(res, Repr::Block(n));
                self.recipes[res.index()] = Some(format!("({off}int({FLAT}))"));
            }
            Op::Splat { src } => {
                let s = match self.repr(*src) {
                    Repr::Scalar(s) | Repr::Splat(s) => s.clone(),
                    Repr::Block(_) => unreachable!("splat of a block is rejected by the verifier"),
                };
                self.set(res, Repr::Splat(s));
            }
            Op::Unary { kind, src } => {
                let dt = self.edt(res);
                let f = self.unary_expr(*kind, dt)?;
                self.elementwise(res, &[*src], kind.name(), &|a| f.replace("{x}", &a[0]))?;
            }
            Op::Binary { kind, lhs, rhs } => {
                let dt = self.edt(*lhs);
                let f = self.binary_expr(*kind, dt)?;
                self.elementwise(res, &[*lhs, *rhs], kind.name(), &|a| {
                    f.replace("{a}", &a[0]).replace("{b}", &a[1])
                })?;
            }
            Op::Cmp { pred, lhs, rhs } => {
                let sym = match pred {
                    CmpPred::Lt => "<",
                    CmpPred::Le => "<=",
                    CmpPred::Gt => ">",
                    CmpPred::Ge => ">=",
                    CmpPred::Eq => "==",
                    CmpPred::Ne => "!=",
                };
                let up = self.upcast_if_bf16(self.edt(*lhs));
                self.elementwise(res, &[*lhs, *rhs], pred.name(), &|a| {
                    format!("({} {sym} {})", up(&a[0]), up(&a[1]))
                })?;
            }
            Op::Select {
                cond,
                on_true,
                on_false,
            } => {
                self.elementwise(res, &[*cond, *on_true, *on_false], "select", &|a| {
                    format!("({} ? {} : {})", a[0], a[1], a[2])
                })?;
            }
            Op::Fma { a, b, c } => {
                let dt = self.edt(res);
                let ct = self.cty(dt)?;
                self.elementwise(res, &[*a, *b, *c], "fma", &|x| {
                    if dt == DType::BF16 {
                        format!(
                            "{ct}(fma(float({}), float({}), float({})))",
                            x[0], x[1], x[2]
                        )
                    } else if dt == DType::F64 {
                        format!("__builtin_fma({}, {}, {})", x[0], x[1], x[2])
                    } else {
                        format!("fma({}, {}, {})", x[0], x[1], x[2])
                    }
                })?;
            }
            Op::Clamp {
                src,
                lo,
                hi,
                propagate_nan,
            } => {
                let dt = self.edt(res);
                let ct = self.cty(dt)?;
                let nan = *propagate_nan;
                self.helpers.insert("minmax");
                self.elementwise(res, &[*src, *lo, *hi], "clamp", &|x| {
                    let (s, l, h) = (&x[0], &x[1], &x[2]);
                    let body = if matches!(dt, DType::F32 | DType::F64) {
                        format!("tm_fmin(tm_fmax({s}, {l}), {h})")
                    } else {
                        format!("{ct}(tm_fmin(tm_fmax(float({s}), float({l})), float({h})))")
                    };
                    if nan {
                        format!("(tm_isnan_f(float({s})) ? {s} : {body})")
                    } else {
                        body
                    }
                })?;
            }
            Op::Cast { src } => {
                let (from, to) = (self.edt(*src), self.edt(res));
                let ct = self.cty(to)?;
                let f2i = match to {
                    _ if !from.is_float() => None,
                    DType::I8 => Some("tm_f2i8"),
                    DType::I16 => Some("tm_f2i16"),
                    DType::I32 => Some("tm_f2i32"),
                    DType::I64 => Some("tm_f2i64"),
                    DType::U8 => Some("tm_f2u8"),
                    DType::U16 => Some("tm_f2u16"),
                    DType::U32 => Some("tm_f2u32"),
                    DType::U64 => Some("tm_f2u64"),
                    _ => None,
                };
                if f2i.is_some() {
                    self.helpers.insert("f2i");
                }
                self.elementwise(res, &[*src], "cast", &|a| {
                    if let Some(f) = f2i {
                        // Saturating, NaN-defined (see `value_helpers` in dialect.rs).
                        if matches!(from, DType::F32 | DType::F64) {
                            format!("{f}({})", a[0])
                        } else {
                            format!("{f}(float({}))", a[0])
                        }
                    } else if from == DType::F64 && matches!(to, DType::F16 | DType::BF16) {
                        // Rounded once (see `f64_to_f32_odd`).
                        format!("{ct}(tm_d2f_odd({}))", a[0])
                    } else if (from == DType::BF16 && !to.is_float())
                        || (to == DType::BF16 && !from.is_float())
                        || (from == DType::BF16 && to == DType::F16)
                        || (from == DType::F16 && to == DType::BF16)
                    {
                        format!("{ct}(float({}))", a[0])
                    } else {
                        format!("{ct}({})", a[0])
                    }
                })?;
            }
            Op::Bitcast { src } => {
                let ct = self.cty(self.edt(res))?;
                let t = self.d.bitcast.replace("{ty}", ct);
                self.elementwise(res, &[*src], "bitcast", &|a| t.replace("{x}", &a[0]))?;
            }
            Op::IntToPtr { src } => {
                if self.d.name != "cpu" {
                    return Err(Error::Unsupported(format!(
                        "kernel `{}`: {}",
                        self.k.name,
                        crate::ir::int_to_ptr_unsupported(self.d.title)
                    )));
                }
                let kind = int_to_ptr_kind(self.ty(res).dtype);
                self.elementwise(res, &[*src], "dptr", &|a| {
                    format!("tm_int_to_ptr(tm_slots, {}, {kind})", a[0])
                })?;
            }
            Op::AddPtr { ptr, offset } if self.dynamic[ptr.index()] => {
                self.elementwise(res, &[*ptr, *offset], "dptr_off", &|a| {
                    format!("tm_padd({}, long({}))", a[0], a[1])
                })?;
            }
            Op::AddPtr { ptr, offset } => {
                // Element offsets wrap modulo 2^bits (a sum out of the offset type's range,
                // as masked-off lanes may form, is not undefined): added in the unsigned
                // type, the offset first converted to the offsets' type (sign-extended).
                let ot = self.cty(self.off_dtype)?;
                let ut = unsigned_offset(self.off_dtype);
                let same = self.ty(*offset).dtype == self.off_dtype;
                let stem = self.stem(*ptr);
                self.elementwise(res, &[*ptr, *offset], &format!("{stem}_off"), &|a| {
                    if a[0] == "0" {
                        format!("{ot}({})", a[1])
                    } else if same {
                        format!("{ot}({ut}({}) + {ut}({}))", a[0], a[1])
                    } else {
                        format!("{ot}({ut}({}) + {ut}({ot}({})))", a[0], a[1])
                    }
                })?;
            }
            Op::Load { ptr, mask, other } => self.load(id, res, *ptr, *mask, *other)?,
            Op::Store { ptr, value, mask } => self.store(id, *ptr, *value, *mask)?,
            Op::AtomicRmw {
                kind,
                ptr,
                value,
                mask,
                sem,
                scope,
            } => self.atomic(res, Some(*kind), *ptr, None, *value, *mask, (*sem, *scope))?,
            Op::AtomicCas {
                ptr,
                cmp,
                value,
                sem,
                scope,
            } => self.atomic(res, None, *ptr, Some(*cmp), *value, None, (*sem, *scope))?,
            Op::Broadcast { src } => self.broadcast(res, *src)?,
            Op::ExpandDims { src, .. } | Op::Reshape { src } => self.reshape(res, *src)?,
            Op::Permute { src, order } => self.permute(res, *src, order)?,
            Op::Join { lhs, rhs } => self.join(res, *lhs, *rhs)?,
            Op::Split { src } => self.split(data.results.iter().collect(), *src)?,
            Op::Dot { a, b, acc } => self.dot(res, *a, *b, *acc)?,
            Op::Reduce {
                kind,
                axis,
                srcs,
                combine,
            } => self.reduce(id, *kind, *axis as usize, srcs, *combine)?,
            Op::Scan {
                kind,
                axis,
                reverse,
                srcs,
                combine,
            } => self.scan(id, *kind, *axis as usize, *reverse, srcs, *combine)?,
            Op::Philox {
                counters,
                key,
                rounds,
            } => self.philox(id, counters, key, *rounds)?,
            Op::DebugBarrier => {
                self.line(self.d.device_barrier);
                self.line(self.d.barrier);
                self.hazard.reads_pending = false;
            }
            Op::For {
                lo,
                hi,
                step,
                init,
                body,
            } => self.for_loop(id, *lo, *hi, *step, init, *body)?,
            Op::While { init, cond, body } => self.while_loop(id, init, *cond, *body)?,
            Op::If {
                cond,
                then_region,
                else_region,
            } => self.if_op(id, *cond, *then_region, *else_region)?,
            Op::Yield { .. } => {}
        }
        Ok(())
    }

    fn upcast_if_bf16(&self, dt: DType) -> impl Fn(&str) -> String {
        move |x: &str| {
            if dt == DType::BF16 {
                format!("float({x})")
            } else {
                x.to_string()
            }
        }
    }

    /// Prints an elementwise op: a scalar when every operand is uniform, else a loop over
    /// registers. `f` builds the element expression from the operands' element expressions.
    pub fn elementwise(
        &mut self,
        res: Value,
        args: &[Value],
        base: &str,
        f: &dyn Fn(&[String]) -> String,
    ) -> Result<()> {
        if let Some(&fv) = self.frag_vals.get(&res) {
            return self.mma_elementwise(res, args, base, f, fv);
        }
        if let Some(&g) = self.slices.get(&res) {
            return self.slice_elementwise(res, args, base, f, g);
        }
        let dt = self.edt(res);
        let ct = self.cty(dt)?;
        if args.iter().all(|a| self.is_uniform(*a)) {
            let xs: Vec<String> = args.iter().map(|a| self.el(*a, "")).collect();
            let name = self.fresh(base);
            self.line(format!("const {ct} {name} = {};", f(&xs)));
            let block = self.ty(res).is_block();
            self.set(
                res,
                if block {
                    Repr::Splat(name)
                } else {
                    Repr::Scalar(name)
                },
            );
            return Ok(());
        }
        let rs: Option<Vec<String>> = args.iter().map(|a| self.recipe(*a)).collect();
        let recipe = rs.map(|rs| f(&rs)).filter(|r| {
            if self.d.shared_array.is_empty() {
                r.len() <= MAX_RECIPE
            } else {
                matches!(
                    self.held.get(res.index()),
                    Some(crate::opt::buffers::Held::Recipe(_) | crate::opt::buffers::Held::Uniform)
                )
            }
        });
        if let Some(r) = recipe.clone() {
            if self.lazy_recipes() {
                return self.recipe_block(res, base, dt, r);
            }
        }
        if self.lazy_elementwise(res, args, base, ct, f) {
            return Ok(());
        }
        let lay = self.layout(res);
        let name = self.declare_block(base, dt, lay.n)?;
        let xs: Vec<String> = args.iter().map(|a| self.el(*a, "tm_i")).collect();
        self.open_regs(lay, false);
        self.line(format!("{name}[tm_i] = {};", f(&xs)));
        self.close();
        self.set(res, Repr::Block(name));
        self.recipes[res.index()] = recipe;
        Ok(())
    }

    fn unary_expr(&mut self, kind: UnaryOp, dt: DType) -> Result<String> {
        let ct = self.cty(dt)?;
        let func = match kind {
            UnaryOp::Exp => "exp",
            UnaryOp::Exp2 => "exp2",
            UnaryOp::Log => "log",
            UnaryOp::Log2 => "log2",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Erf => "erf",
            UnaryOp::Floor => "floor",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Abs => {
                return Ok(if dt.is_float() {
                    if dt == DType::F64 {
                        "__builtin_fabs({x})".into()
                    } else if dt == DType::BF16 {
                        format!("{ct}(fabs(float({{x}})))")
                    } else {
                        "fabs({x})".into()
                    }
                } else if dt.is_signed_int() {
                    // Wrapping (abs(INT_MIN) = INT_MIN), without C's overflow.
                    let u = if dt.size_bytes() == 8 {
                        "ulong"
                    } else {
                        "uint"
                    };
                    format!("{ct}({{x}} < 0 ? {u}(0) - {u}({{x}}) : {u}({{x}}))")
                } else {
                    "{x}".into()
                });
            }
            k => return self.math_unary(k, dt),
        };
        if dt == DType::F64 {
            return self.f64_unary(func);
        }
        let call = match self.d.override_for(func) {
            Some(t) => {
                // An override's helper is keyed by the op it spells (`tm_erf`, CUDA's
                // `tm_ex2`); a dialect without one prints nothing for the key.
                self.helpers.insert(func);
                t.to_string()
            }
            None => format!("{func}({{x}})"),
        };
        Ok(match dt {
            DType::F32 => call,
            // Transcendentals on 16-bit floats run in float and round once.
            DType::F16 | DType::BF16 => format!("{ct}({})", call.replace("{x}", "float({x})")),
            _ => {
                return Err(unsupported_on(
                    self.d,
                    self.k,
                    format!("`{}` on {dt}", kind.name()),
                ))
            }
        })
    }

    pub(super) fn binary_expr(&mut self, kind: BinaryOp, dt: DType) -> Result<String> {
        let ct = self.cty(dt)?;
        let float = dt.is_float();
        if float {
            // Never the language's fmax/fmin: see `value_helpers` in dialect.rs.
            let f = match kind {
                BinaryOp::Max => Some("tm_fmax"),
                BinaryOp::Min => Some("tm_fmin"),
                BinaryOp::MaxNan => Some("tm_fmax_nan"),
                BinaryOp::MinNan => Some("tm_fmin_nan"),
                _ => None,
            };
            if let Some(f) = f {
                self.helpers.insert("minmax");
                return Ok(if matches!(dt, DType::F32 | DType::F64) {
                    format!("{f}({{a}}, {{b}})")
                } else {
                    // Exact: the result is one of the operands, widened and narrowed back.
                    format!("{ct}({f}(float({{a}}), float({{b}})))")
                });
            }
        }
        let bits = dt.size_bytes() * 8;
        // Integer results Triton leaves undefined are defined as the CPU executor defines
        // them (x / 0 = all ones, x % 0 = x, MIN / -1 wraps, over-wide shifts give 0 or the
        // sign), which also keeps idle threads' padding registers from trapping.
        let neg = match dt.size_bytes() {
            8 => format!("{ct}(0ul - ulong({{a}}))"),
            _ => format!("{ct}(0u - uint({{a}}))"),
        };
        let signed = dt.is_signed_int();
        // Integer arithmetic wraps (Triton's two's complement). C-family signed overflow is
        // undefined, and 8/16-bit operands promote to `int` (where `ushort * ushort` can
        // overflow), so signed and narrow integers compute in `uint`/`ulong` and convert back.
        let u = if bits == 64 { "ulong" } else { "uint" };
        let wrap = !float && dt != DType::Bool && (signed || bits < 32);
        let e = match kind {
            BinaryOp::Add if wrap => format!("{ct}({u}({{a}}) + {u}({{b}}))"),
            BinaryOp::Sub if wrap => format!("{ct}({u}({{a}}) - {u}({{b}}))"),
            BinaryOp::Mul if wrap => format!("{ct}({u}({{a}}) * {u}({{b}}))"),
            BinaryOp::Add => "({a} + {b})".to_string(),
            BinaryOp::Sub => "({a} - {b})".into(),
            BinaryOp::Mul => "({a} * {b})".into(),
            BinaryOp::Div if float => "({a} / {b})".into(),
            BinaryOp::Div if signed => format!(
                "({{b}} == 0 ? {ct}(-1) : ({{b}} == -1 ? {neg} : {ct}({{a}} / {{b}})))"
            ),
            BinaryOp::Div => format!("({{b}} == 0 ? {ct}(-1) : {ct}({{a}} / {{b}}))"),
            BinaryOp::Rem if dt == DType::F64 => "__builtin_fmod({a}, {b})".into(),
            BinaryOp::Rem if float => "fmod({a}, {b})".into(),
            BinaryOp::Rem if signed => {
                format!("(({{b}} == 0 || {{b}} == -1) ? ({{b}} == 0 ? {{a}} : {ct}(0)) : {ct}({{a}} % {{b}}))")
            }
            BinaryOp::Rem => format!("({{b}} == 0 ? {{a}} : {ct}({{a}} % {{b}}))"),
            BinaryOp::And => "({a} & {b})".into(),
            BinaryOp::Or => "({a} | {b})".into(),
            BinaryOp::Xor => "({a} ^ {b})".into(),
            BinaryOp::Shl if !float => {
                format!("(ulong({{b}}) >= {bits}ul ? {ct}(0) : {ct}({u}({{a}}) << {{b}}))")
            }
            BinaryOp::Shl => format!("(ulong({{b}}) >= {bits}ul ? {ct}(0) : {ct}({{a}} << {{b}}))"),
            BinaryOp::Shr if signed => format!(
                "(ulong({{b}}) >= {bits}ul ? ({{a}} < 0 ? {ct}(-1) : {ct}(0)) : {ct}({{a}} >> {{b}}))"
            ),
            BinaryOp::Shr => format!("(ulong({{b}}) >= {bits}ul ? {ct}(0) : {ct}({{a}} >> {{b}}))"),
            BinaryOp::Max | BinaryOp::MaxNan => "max({a}, {b})".into(),
            BinaryOp::Min | BinaryOp::MinNan => "min({a}, {b})".into(),
            // Triton's `umulhi`: the high half of the unsigned product, whatever the sign.
            BinaryOp::MulHi if signed => {
                let u = if bits == 64 { "ulong" } else { "uint" };
                let m = self
                    .d
                    .mulhi
                    .replace("{a}", &format!("{u}({{a}})"))
                    .replace("{b}", &format!("{u}({{b}})"));
                format!("{ct}({m})")
            }
            BinaryOp::MulHi => self.d.mulhi.into(),
            k => return self.math_binary(k, dt),
        };
        Ok(match dt {
            // bfloat arithmetic runs in float and rounds once per op.
            DType::BF16 => format!(
                "{ct}({})",
                e.replace("{a}", "float({a})").replace("{b}", "float({b})")
            ),
            DType::Bool if matches!(kind, BinaryOp::And | BinaryOp::Or | BinaryOp::Xor) => {
                format!("bool({e})")
            }
            d if d.size_bytes() < 4 && !float => format!("{ct}({e})"),
            _ => e,
        })
    }

    // ---- memory -----------------------------------------------------------------------

    pub(super) fn access(&self, ptr: Value, off: &str) -> Result<String> {
        let p = self.param_name(ptr)?;
        let read = |p: &str| -> Result<String> {
            if let Some(dt) = self.in_words(ptr) {
                let wide = if dt.size_bytes() == 8 { "8" } else { "" };
                return Ok(format!("tm_pk_load{wide}<{}>({p}, {off})", self.cty(dt)?));
            }
            Ok(
                if (self.atomic_outputs && self.is_output_ptr(ptr)) || self.dynamic[ptr.index()] {
                    self.d
                        .atomic_load
                        .replace("{addr}", &format!("&{p}[{off}]"))
                } else {
                    format!("{p}[{off}]")
                },
            )
        };
        Ok(match self.in_place_param(ptr) {
            // An element the kernel has written is read back; any other is the argument's.
            Some(i) => {
                let (src, flag) = in_place_names(i);
                let written = if self.atomic_outputs {
                    self.d
                        .atomic_load
                        .replace("{addr}", &format!("&{flag}[{off}]"))
                } else {
                    format!("{flag}[{off}]")
                };
                format!("({written} != 0 ? {} : {src}[{off}])", read(&p)?)
            }
            None => read(&p)?,
        })
    }

    fn load(
        &mut self,
        id: OpId,
        res: Value,
        ptr: Value,
        mask: Option<Value>,
        other: Option<Value>,
    ) -> Result<()> {
        if self.in_ring(res) {
            // Copied ahead into the loop's ring; the dot reads it there.
            return Ok(());
        }
        let dt = self.edt(res);
        let ct = self.cty(dt)?;
        let stem = self.stem(ptr);
        let zero = format!("{ct}(0)");
        if self.ty(res).is_scalar() {
            let name = self.fresh(&stem);
            let a = self.access(ptr, &self.el(ptr, ""))?;
            let e = match mask {
                Some(m) => {
                    let o = other.map_or(zero, |o| self.el(o, ""));
                    format!("{} ? {a} : {o}", self.el(m, ""))
                }
                None => a,
            };
            self.line(format!("const {ct} {name} = {e};"));
            self.set(res, Repr::Scalar(name));
            return Ok(());
        }
        let lay = self.layout(res);
        let lazy = self.lazy_load_ok(res, ptr, lay);
        if !lazy && self.load_packed(id, res, ptr, mask, other, lay, &zero)? {
            return Ok(());
        }
        let name = self.declare_block(&stem, dt, lay.n)?;
        let fast = if lazy {
            self.fresh(&format!("{stem}_in_bounds"))
        } else {
            String::new()
        };
        let whole_block = !lazy && self.open_whole_load(id, &name, ptr, mask, other, lay, &zero)?;
        if lazy {
            // One bounds check of the whole block; the eager load below runs only when it
            // fails (a ragged last block), reading the active lanes with checks.
            self.line(format!(
                "const bool {fast} = tm_in_bounds({}, {}, {});",
                self.param_name(ptr)?,
                self.el(ptr, "0u"),
                lay.n
            ));
            self.open(format!("if (!{fast})"));
        }
        self.layouts.push(LayoutChoice {
            op: format!("load {name}: {}", self.ty(res)),
            layout: format!(
                "blocked: {} per chunk, {} threads, {} registers",
                lay.vec,
                lay.threads,
                lay.regs()
            ),
        });
        if let Some(c) = self.contiguous_rows(id, res, ptr) {
            self.load_rows(id, &name, ptr, mask, other, lay, c, &zero)?;
        } else if let Some(vt) = self.vector_type(ptr, dt, lay)? {
            self.load_vector(&name, &vt, ptr, mask, other, lay, &zero)?;
        } else {
            let guard = lay.has_idle_threads();
            self.open_regs(lay, guard);
            let a = self.access(ptr, &self.el(ptr, "tm_i"))?;
            let mut conds = Vec::new();
            if guard {
                conds.push(format!("tm_l < {}u", lay.n));
            }
            if let Some(m) = mask {
                conds.push(self.el(m, "tm_i"));
            }
            let o = other.map_or(zero.clone(), |o| self.el(o, "tm_i"));
            if conds.is_empty() {
                self.line(format!("{name}[tm_i] = {a};"));
            } else {
                self.line(format!(
                    "{name}[tm_i] = ({}) ? {a} : {o};",
                    conds.join(" && ")
                ));
            }
            self.close();
        }
        if lazy {
            self.close();
            return self.lazy_load(res, ptr, mask, other, &name, &fast, &zero);
        }
        if whole_block {
            self.close();
        }
        self.set(res, Repr::Block(name));
        Ok(())
    }

    /// The packed vector type for a chunk-wide access through `ptr`, when the offsets are
    /// contiguous over each chunk and the element type has one.
    fn vector_type(&mut self, ptr: Value, dt: DType, lay: BlockedLayout) -> Result<Option<String>> {
        let Some(p) = self.prov[ptr.index()] else {
            return Ok(None);
        };
        let param = &self.k.params[p];
        let ok = self.d.vector_load(lay.vec).is_some()
            && self.axis_unchecked[ptr.index()].contig >= lay.vec as u64
            && matches!(
                dt,
                DType::F32
                    | DType::F16
                    | DType::I32
                    | DType::U32
                    | DType::I16
                    | DType::U16
                    | DType::I8
                    | DType::U8
            )
            && !(self.atomic_outputs && param.stored)
            && !self.in_place[p]
            && matches!(self.repr(ptr), Repr::Block(_));
        if !ok {
            return Ok(None);
        }
        self.helpers.insert("packed");
        Ok(Some(
            self.d
                .vector_type
                .replace("{ty}", self.cty(dt)?)
                .replace("{n}", &lay.vec.to_string()),
        ))
    }

    /// The dialect's chunk access through a base pointer at an offset that is a multiple of
    /// the chunk (`v` elements), when the integer analysis proves every chunk's first
    /// offset through `ptr` is one: [`super::dialect::Dialect::aligned_offset_access`].
    fn aligned_offset(&self, ptr: Value, v: usize) -> Option<(&'static str, &'static str)> {
        self.d
            .aligned_offset_access
            .filter(|_| self.axis[ptr.index()].div >= v as u64)
    }

    /// Conditions under which a whole chunk (registers `tm_i ..`) through `ptr` may be
    /// accessed at once; and the per-element conditions (index `tm_i + tm_e`) otherwise.
    /// Offsets whose runs are contiguous only where no remainder wrapped
    /// ([`crate::opt::axis::analyse_unchecked`]) are checked to be consecutive, in the
    /// offsets' unsigned type (no overflow).
    fn chunk_conds(
        &self,
        ptr: Value,
        mask: Option<Value>,
        lay: BlockedLayout,
    ) -> Result<(Vec<String>, Vec<String>)> {
        let (mut whole, mut each) = (Vec::new(), Vec::new());
        if self.axis[ptr.index()].contig < lay.vec as u64 {
            let ut = self.cty(if self.off_dtype == DType::I64 {
                DType::U64
            } else {
                DType::U32
            })?;
            let first = self.el(ptr, "tm_i");
            for e in 1..lay.vec {
                whole.push(format!(
                    "{ut}({}) == {ut}({first}) + {e}u",
                    self.el(ptr, &format!("tm_i + {e}u"))
                ));
            }
        }
        if lay.has_idle_threads() {
            whole.push(format!("tm_l < {}u", lay.n));
            each.push(format!("tm_l < {}u", lay.n));
        }
        if let Some(m) = mask {
            if self.axis[m.index()].cst >= lay.vec as u64 || self.is_uniform(m) {
                whole.push(self.el(m, "tm_i"));
            } else {
                for e in 0..lay.vec {
                    whole.push(self.el(m, &format!("tm_i + {e}u")));
                }
            }
            each.push(self.el(m, "tm_i + tm_e"));
        }
        if each.is_empty() {
            each.push("true".into());
        }
        Ok((whole, each))
    }

    /// The conjunction of side-effect-free conditions: with `&` where the plan has them
    /// evaluated without branches ([`crate::opt::cpu::CpuPlan::branch_free`]), else `&&`.
    pub(super) fn all_of(&self, conds: &[String]) -> String {
        if self.cpu.as_ref().is_some_and(|c| c.plan.branch_free) {
            conds
                .iter()
                .map(|c| format!("bool({c})"))
                .collect::<Vec<_>>()
                .join(" & ")
        } else {
            conds.join(" && ")
        }
    }

    /// Opens `for (tm_c ...)` over the chunks of layout `lay`: `tm_i` is the chunk's first
    /// register and, with `need_flat`, `tm_l` its first element's flat index; the caller
    /// closes it.
    pub(super) fn open_chunks(&mut self, lay: BlockedLayout, need_flat: bool) {
        self.open(format!(
            "for (uint tm_c = 0; tm_c < {}u; ++tm_c)",
            lay.regs() / lay.vec
        ));
        self.line(format!("const uint tm_i = tm_c * {}u;", lay.vec));
        if need_flat {
            self.line(format!(
                "const uint tm_l = {};",
                lay.flat_expr("tm_i", "tm_lid")
            ));
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn load_vector(
        &mut self,
        name: &str,
        vt: &str,
        ptr: Value,
        mask: Option<Value>,
        other: Option<Value>,
        lay: BlockedLayout,
        zero: &str,
    ) -> Result<()> {
        let p = self.param_name(ptr)?;
        let (whole, each) = self.chunk_conds(ptr, mask, lay)?;
        let v = lay.vec;
        self.open_chunks(lay, lay.has_idle_threads());
        let off = self.el(ptr, "tm_i");
        let at = self.aligned_offset(ptr, v);
        let body = |me: &mut Self| {
            // `vector_type` admitted this width only if the dialect has a load for it.
            let load = match at {
                Some((load, _)) => load
                    .replace("{n}", &v.to_string())
                    .replace("{b}", &p)
                    .replace("{o}", &off),
                None => {
                    me.d.vector_load(v)
                        .unwrap_or_default()
                        .replace("{p}", &format!("{p} + {off}"))
                }
            };
            me.line(format!("const {vt} tm_v = {load};"));
            me.line(format!(
                "for (uint tm_e = 0; tm_e < {v}u; ++tm_e) {name}[tm_i + tm_e] = tm_v[tm_e];"
            ));
        };
        if whole.is_empty() {
            body(self);
        } else {
            self.open(format!("if ({})", self.all_of(&whole)));
            body(self);
            self.indent -= 1;
            self.line("} else {");
            self.indent += 1;
            let o = other.map_or(zero.to_string(), |o| self.el(o, "tm_i + tm_e"));
            let a = self.access(ptr, &self.el(ptr, "tm_i + tm_e"))?;
            self.line(format!(
                "for (uint tm_e = 0; tm_e < {v}u; ++tm_e) {name}[tm_i + tm_e] = ({}) ? {a} : {o};",
                each.join(" && ")
            ));
            self.close();
        }
        self.close();
        self.layouts.push(LayoutChoice {
            op: format!("load {name}"),
            layout: format!("vectorised: {vt} per chunk"),
        });
        Ok(())
    }

    fn store_vector(
        &mut self,
        vt: &str,
        ptr: Value,
        value: Value,
        mask: Option<Value>,
        lay: BlockedLayout,
    ) -> Result<()> {
        let p = self.param_name(ptr)?;
        let (whole, each) = self.chunk_conds(ptr, mask, lay)?;
        let v = lay.vec;
        self.open_chunks(lay, lay.has_idle_threads());
        let off = self.el(ptr, "tm_i");
        let val = self.el(value, "tm_i + tm_e");
        let at = self.aligned_offset(ptr, v);
        let body = |me: &mut Self| {
            me.line(format!("{vt} tm_v;"));
            me.line(format!(
                "for (uint tm_e = 0; tm_e < {v}u; ++tm_e) tm_v[tm_e] = {val};"
            ));
            me.line(match at {
                Some((_, store)) => store
                    .replace("{b}", &p)
                    .replace("{o}", &off)
                    .replace("{v}", "tm_v"),
                None => {
                    me.d.vector_store
                        .replace("{vt}", vt)
                        .replace("{p}", &format!("{p} + {off}"))
                        .replace("{v}", "tm_v")
                }
            });
        };
        if whole.is_empty() {
            body(self);
        } else {
            self.open(format!("if ({})", self.all_of(&whole)));
            body(self);
            self.indent -= 1;
            self.line("} else {");
            self.indent += 1;
            let s = self.store_stmt(ptr, &self.el(ptr, "tm_i + tm_e"), &val)?;
            self.line(format!(
                "for (uint tm_e = 0; tm_e < {v}u; ++tm_e) if ({}) {s}",
                each.join(" && ")
            ));
            self.close();
        }
        self.close();
        self.layouts.push(LayoutChoice {
            op: format!("store {p}"),
            layout: format!("vectorised: {vt} per chunk"),
        });
        Ok(())
    }

    /// The statement storing `val` to element `off` of `ptr`'s argument (packed 16-bit
    /// words, atomic outputs and arguments updated in place included).
    pub(super) fn store_stmt(&self, ptr: Value, off: &str, val: &str) -> Result<String> {
        let p = self.base_name(ptr, true)?;
        let store = if let Some(dt) = self.in_words(ptr) {
            let wide = if dt.size_bytes() == 8 { "8" } else { "" };
            format!("tm_pk_store{wide}<{}>({p}, {off}, {val});", self.cty(dt)?)
        } else if self.atomic_outputs || self.dynamic[ptr.index()] {
            self.d
                .atomic_store
                .replace("{addr}", &format!("&{p}[{off}]"))
                .replace("{val}", val)
        } else {
            format!("{p}[{off}] = {val};")
        };
        Ok(match self.in_place_param(ptr) {
            // With atomics about, the element is first made to hold the argument's value,
            // so an atomic's copy-in can never land after this store.
            Some(i) if self.atomic_outputs => {
                format!("{{ {}; {store} }}", self.in_place_init(i, ptr, off)?)
            }
            Some(i) => {
                let (_, flag) = in_place_names(i);
                format!("{{ {store} {flag}[{off}] = 1; }}")
            }
            None => store,
        })
    }

    fn store(&mut self, id: OpId, ptr: Value, value: Value, mask: Option<Value>) -> Result<()> {
        if self.ty(ptr).is_scalar() {
            // One writer: every thread holds the same value.
            let mut cond = "tm_lid == 0".to_string();
            if let Some(m) = mask {
                cond = format!("{cond} && {}", self.el(m, ""));
            }
            let s = self.store_stmt(ptr, &self.el(ptr, ""), &self.el(value, ""))?;
            self.line(format!("if ({cond}) {s}"));
            return Ok(());
        }
        if let Some(arr) = self.frags.get(&value).cloned() {
            return self.mma_store(ptr, value, mask, &arr);
        }
        let lay = self.layout(ptr);
        let whole_block = self.open_whole_store(id, ptr, value, mask, lay)?;
        let r = match self.contiguous_rows(id, value, ptr) {
            Some(c) => self.store_rows(id, ptr, value, mask, lay, c),
            None => self.store_checked(ptr, value, mask, lay),
        };
        if whole_block {
            self.close();
        }
        r
    }

    /// [`Self::store`] of a block, each chunk or element bounds-checked.
    fn store_checked(
        &mut self,
        ptr: Value,
        value: Value,
        mask: Option<Value>,
        lay: BlockedLayout,
    ) -> Result<()> {
        if let Some(vt) = self.vector_type(ptr, self.edt(value), lay)? {
            return self.store_vector(&vt, ptr, value, mask, lay);
        }
        let guard = lay.has_idle_threads();
        self.open_regs(lay, guard);
        let s = self.store_stmt(ptr, &self.el(ptr, "tm_i"), &self.el(value, "tm_i"))?;
        let mut conds = Vec::new();
        if guard {
            conds.push(format!("tm_l < {}u", lay.n));
        }
        if let Some(m) = mask {
            conds.push(self.el(m, "tm_i"));
        }
        if conds.is_empty() {
            self.line(s);
        } else {
            self.line(format!("if ({}) {s}", conds.join(" && ")));
        }
        self.close();
        Ok(())
    }

    /// The expression of one atomic on element `off` of `ptr`'s argument, returning the old
    /// value (`kind` `None`: compare-and-swap of `cmp` by `val`).
    fn atomic_expr(
        &mut self,
        kind: Option<AtomicOp>,
        ptr: Value,
        off: &str,
        (cmp, val): (&str, &str),
        (sem, scope): (Option<MemSem>, MemScope),
    ) -> Result<String> {
        let dt = self.ty(ptr).dtype;
        let op = kind.map_or("cas", |k| k.name());
        let ord = (self.d.atomic_order)
            .spell(sem, scope)
            .map_err(|why| unsupported_on(self.d, self.k, format!("`atomic_{op}` with {why}")))?;
        if self.d.word_atomic_outputs && dt.size_bytes() == 8 {
            return Err(unsupported_on(
                self.d,
                self.k,
                format!(
                    "`atomic_{op}` on {dt} (Apple GPUs have no 64-bit atomic read-modify-write; \
                     use a 32-bit dtype, or run on Target::Cpu, Target::CpuCompiled or CUDA)"
                ),
            ));
        }
        let p = self.base_name(ptr, true)?;
        let ct = self.cty(dt)?;
        if self.in_words(ptr).is_some() {
            // A 16-bit element inside its 32-bit word: a compare-and-swap loop on the word.
            return match kind {
                None => Ok(format!("tm_pk_cas<{ct}>({p}, {off}, {cmp}, {val})")),
                Some(AtomicOp::Add) if dt.is_float() => {
                    Ok(format!("tm_pk_add<{ct}>({p}, {off}, {val})"))
                }
                Some(k) => Err(unsupported_on(
                    self.d,
                    self.k,
                    format!("`atomic_{}` on {dt}", k.name()),
                )),
            };
        }
        self.helpers.insert("atomic");
        let addr = format!("&{p}[{off}]");
        let sub = |t: &str, name: &str, v: &str| {
            t.replace("{op}", name)
                .replace("{addr}", &addr)
                .replace("{val}", v)
                .replace("{ord}", ord)
        };
        let (rmw, helper) = (self.d.atomic_rmw, self.d.atomic_helper);
        Ok(match kind {
            None => {
                self.helpers.insert("atomic_cas");
                sub(helper, "cas", &format!("{cmp}, {val}"))
            }
            Some(AtomicOp::Max | AtomicOp::Min) if dt.is_float() => {
                self.helpers.insert("atomic_fminmax");
                let name = if kind == Some(AtomicOp::Max) {
                    "fmax"
                } else {
                    "fmin"
                };
                sub(helper, name, val)
            }
            Some(AtomicOp::And | AtomicOp::Or | AtomicOp::Xor) if dt.is_float() => {
                return Err(unsupported_on(self.d, self.k, "bitwise atomics on floats"));
            }
            Some(AtomicOp::Add) => sub(rmw, "fetch_add", val),
            Some(AtomicOp::Max) => sub(rmw, "fetch_max", val),
            Some(AtomicOp::Min) => sub(rmw, "fetch_min", val),
            Some(AtomicOp::And) => sub(rmw, "fetch_and", val),
            Some(AtomicOp::Or) => sub(rmw, "fetch_or", val),
            Some(AtomicOp::Xor) => sub(rmw, "fetch_xor", val),
            Some(AtomicOp::Xchg) => sub(rmw, "exchange", val),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn atomic(
        &mut self,
        res: Value,
        kind: Option<AtomicOp>,
        ptr: Value,
        cmp: Option<Value>,
        value: Value,
        mask: Option<Value>,
        order: (Option<MemSem>, MemScope),
    ) -> Result<()> {
        let dt = self.edt(res);
        let ct = self.cty(dt)?;
        let name_base = format!("{}_old", self.stem(ptr));
        if self.ty(ptr).is_scalar() {
            // One thread updates; the old value reaches everyone through scratch.
            let c = cmp.map(|c| self.el(c, "")).unwrap_or_default();
            let (off, v) = (self.el(ptr, ""), self.el(value, ""));
            let mut e = self.atomic_expr(kind, ptr, &off, (&c, &v), order)?;
            if let Some(i) = self.in_place_param(ptr) {
                e = self.in_place_atomic(i, ptr, &off, e)?;
            }
            let mut cond = "tm_lid == 0".to_string();
            if let Some(m) = mask {
                cond = format!("{cond} && {}", self.el(m, ""));
            }
            let s = self.scratch_array(dt, 1)?;
            self.smem_write_begin();
            self.line(format!("if (tm_lid == 0) {s}[0] = {ct}(0);"));
            self.line(format!("if ({cond}) {s}[0] = {e};"));
            self.smem_write_end();
            let name = self.fresh(&name_base);
            self.line(format!("const {ct} {name} = {s}[0];"));
            self.smem_read_done();
            self.set(res, Repr::Scalar(name));
            return Ok(());
        }
        let lay = self.layout(ptr);
        let name = self.declare_block(&name_base, dt, lay.n)?;
        let guard = lay.has_idle_threads();
        self.open_regs(lay, guard);
        let c = cmp.map(|c| self.el(c, "tm_i")).unwrap_or_default();
        let (off, v) = (self.el(ptr, "tm_i"), self.el(value, "tm_i"));
        let mut e = self.atomic_expr(kind, ptr, &off, (&c, &v), order)?;
        if let Some(i) = self.in_place_param(ptr) {
            e = self.in_place_atomic(i, ptr, &off, e)?;
        }
        let mut conds = Vec::new();
        if guard {
            conds.push(format!("tm_l < {}u", lay.n));
        }
        if let Some(m) = mask {
            conds.push(self.el(m, "tm_i"));
        }
        if conds.is_empty() {
            self.line(format!("{name}[tm_i] = {e};"));
        } else {
            self.line(format!(
                "{name}[tm_i] = ({}) ? {e} : {ct}(0);",
                conds.join(" && ")
            ));
        }
        self.close();
        self.set(res, Repr::Block(name));
        Ok(())
    }

    // ---- shape ops (through threadgroup memory) ---------------------------------------

    /// Moves `src` into a new block of `res`'s layout where element `l` of the result is
    /// element `src_index(l)` of the source.
    fn convert(
        &mut self,
        res: Value,
        src: Value,
        base: &str,
        src_index: &dyn Fn(&str) -> String,
    ) -> Result<()> {
        let dt = self.edt(res);
        let n_src = self.ty(src).numel();
        let s = self.scratch_array(dt, n_src)?;
        self.smem_write_begin();
        self.stage(src, &s, 0, &|l| l.to_string())?;
        self.smem_write_end();
        let n = self.ty(res).numel();
        let name = if self.ty(res).is_scalar() {
            let name = self.fresh(base);
            let ct = self.cty(dt)?;
            self.line(format!("const {ct} {name} = {s}[{}];", src_index("0u")));
            self.set(res, Repr::Scalar(name.clone()));
            name
        } else {
            let name = self.gather(base, dt, n, &|l| format!("{s}[{}]", src_index(l)))?;
            self.set(res, Repr::Block(name.clone()));
            name
        };
        self.smem_read_done();
        self.layouts.push(LayoutChoice {
            op: format!("{base} {name}: {} -> {}", self.ty(src), self.ty(res)),
            layout: "convert through threadgroup memory".into(),
        });
        Ok(())
    }

    fn broadcast(&mut self, res: Value, src: Value) -> Result<()> {
        if let Some(&fv) = self.frag_vals.get(&res) {
            return self.mma_broadcast_factor(res, src, fv);
        }
        if self.is_uniform(src) && !self.shape_through_memory() {
            let s = self.el(src, "");
            self.set(res, Repr::Splat(s));
            return Ok(());
        }
        let (ss, ds) = (self.ty(src).shape.clone(), self.ty(res).shape.clone());
        if ss == ds {
            let r = self.repr(src).clone();
            self.set(res, r);
            self.recipes[res.index()] = self.recipes[src.index()].clone();
            return Ok(());
        }
        // Bit fields: result dim d sits at bits [dpos, dpos + w); source at spos.
        let fields = bit_fields(&ds)
            .into_iter()
            .zip(bit_fields(&ss))
            .filter(|(_, (_, sw))| *sw > 0)
            .map(|((dp, w), (sp, _))| (dp, w, sp))
            .collect::<Vec<_>>();
        self.relayout(res, src, "bcast", &|l| remap_expr(l, &fields))
    }

    fn reshape(&mut self, res: Value, src: Value) -> Result<()> {
        let r = self.repr(src).clone();
        let to_scalar = self.ty(res).is_scalar();
        if to_scalar && self.shape_through_memory() {
            return self.relayout(res, src, "elem", &|_| "0u".into());
        }
        match r {
            Repr::Scalar(s) | Repr::Splat(s) => self.set(
                res,
                if to_scalar {
                    Repr::Scalar(s)
                } else {
                    Repr::Splat(s)
                },
            ),
            Repr::Block(_) if to_scalar => self.relayout(res, src, "elem", &|_| "0u".into())?,
            // The layout depends only on the element count, which a reshape keeps.
            Repr::Block(a) => {
                self.set(res, Repr::Block(a));
                self.recipes[res.index()] = self.recipes[src.index()].clone();
            }
        }
        Ok(())
    }

    fn permute(&mut self, res: Value, src: Value, order: &[u32]) -> Result<()> {
        if self.is_uniform(src) && !self.shape_through_memory() {
            let s = self.el(src, "");
            self.set(res, Repr::Splat(s));
            return Ok(());
        }
        let ss = self.ty(src).shape.clone();
        let ds = self.ty(res).shape.clone();
        let sf = bit_fields(&ss);
        let fields: Vec<(u32, u32, u32)> = bit_fields(&ds)
            .into_iter()
            .enumerate()
            .map(|(i, (dp, w))| (dp, w, sf[order[i] as usize].0))
            .filter(|f| f.1 > 0)
            .collect();
        self.relayout(res, src, "perm", &|l| remap_expr(l, &fields))
    }

    fn join(&mut self, res: Value, lhs: Value, rhs: Value) -> Result<()> {
        let dt = self.edt(res);
        let n = self.ty(lhs).numel();
        let s = self.scratch_array(dt, 2 * n)?;
        self.smem_write_begin();
        for (k, v) in [lhs, rhs].into_iter().enumerate() {
            self.materialize(v)?;
            self.stage(v, &s, k * n, &|l| l.to_string())?;
        }
        self.smem_write_end();
        let name = self.gather("joined", dt, 2 * n, &|l| {
            format!("{s}[(({l} & 1u) * {n}u) + ({l} >> 1)]")
        })?;
        self.smem_read_done();
        self.set(res, Repr::Block(name));
        Ok(())
    }

    fn split(&mut self, results: Vec<Value>, src: Value) -> Result<()> {
        if self.is_uniform(src) && !self.shape_through_memory() {
            let s = self.el(src, "");
            for r in results {
                let repr = if self.ty(r).is_block() {
                    Repr::Splat(s.clone())
                } else {
                    Repr::Scalar(s.clone())
                };
                self.set(r, repr);
            }
            return Ok(());
        }
        let dt = self.edt(src);
        let n = self.ty(src).numel();
        let s = self.scratch_array(dt, n)?;
        self.smem_write_begin();
        self.stage(src, &s, 0, &|l| l.to_string())?;
        self.smem_write_end();
        for (k, r) in results.into_iter().enumerate() {
            if self.ty(r).is_scalar() {
                let name = self.fresh("half");
                let ct = self.cty(dt)?;
                self.line(format!("const {ct} {name} = {s}[{k}u];"));
                self.set(r, Repr::Scalar(name));
            } else {
                let name =
                    self.gather("half", dt, n / 2, &|l| format!("{s}[({l} << 1) | {k}u]"))?;
                self.set(r, Repr::Block(name));
            }
        }
        self.smem_read_done();
        Ok(())
    }

    fn philox(
        &mut self,
        id: OpId,
        counters: &[Value; 4],
        key: &[Value; 2],
        rounds: u32,
    ) -> Result<()> {
        self.helpers.insert("philox");
        let results: Vec<Value> = self.k.op(id).results.iter().collect();
        let args: Vec<Value> = counters.iter().chain(key.iter()).copied().collect();
        let uniform = args.iter().all(|a| self.is_uniform(*a));
        let block = self.ty(results[0]).is_block();
        let lay = self.layout(results[0]);
        let tmp = self.fresh("philox");
        let names: Vec<String> = (0..4).map(|k| self.fresh(&format!("rand{k}"))).collect();
        if uniform {
            let xs: Vec<String> = args.iter().map(|a| self.el(*a, "")).collect();
            self.line(format!(
                "const {} {tmp} = tm_philox({}, {rounds}u);",
                self.d.uint4,
                xs.join(", ")
            ));
            for (k, n) in names.iter().enumerate() {
                self.line(format!("const uint {n} = {tmp}[{k}];"));
                let r = if block {
                    Repr::Splat(n.clone())
                } else {
                    Repr::Scalar(n.clone())
                };
                self.set(results[k], r);
            }
            return Ok(());
        }
        for n in &names {
            self.line(format!("uint {n}[{}];", lay.regs()));
        }
        let xs: Vec<String> = args.iter().map(|a| self.el(*a, "tm_i")).collect();
        self.open_regs(lay, false);
        self.line(format!(
            "const {} {tmp} = tm_philox({}, {rounds}u);",
            self.d.uint4,
            xs.join(", ")
        ));
        for (k, n) in names.iter().enumerate() {
            self.line(format!("{n}[tm_i] = {tmp}[{k}];"));
        }
        self.close();
        for (k, n) in names.into_iter().enumerate() {
            self.set(results[k], Repr::Block(n));
        }
        Ok(())
    }

    // ---- control flow -----------------------------------------------------------------

    /// Declares a mutable variable for a carried value of type of `v` and returns its repr.
    fn carried_var(&mut self, v: Value, base: &str) -> Result<Repr> {
        let dt = self.edt(v);
        let ct = self.cty(dt)?;
        let name = self.fresh(base);
        if self.ty(v).is_block() {
            let r = self.regs_of(v);
            if self.slices.contains_key(&v) {
                self.slice_vars.insert(name.clone(), r);
            }
            self.line(format!("{ct} {name}[{r}];"));
            self.local_bytes += r * dt.size_bytes();
            Ok(Repr::Block(name))
        } else {
            self.line(format!("{ct} {name};"));
            Ok(Repr::Scalar(name))
        }
    }

    /// Assigns `vals` to the carried variables `vars` as one parallel assignment.
    pub(super) fn assign_carried(&mut self, vars: &[Repr], vals: &[Value]) -> Result<()> {
        let var_names: Vec<&str> = vars
            .iter()
            .map(|r| match r {
                Repr::Scalar(s) | Repr::Block(s) | Repr::Splat(s) => s.as_str(),
            })
            .collect();
        // A value that is itself one of the variables, or a lazy block reading one, must be
        // read before any is written (reading its own variable at the same index is fine).
        let mut staged: Vec<Option<String>> = vec![None; vals.len()];
        for (k, v) in vals.iter().enumerate() {
            let src_name = match self.repr(*v) {
                Repr::Scalar(s) | Repr::Block(s) | Repr::Splat(s) => s.clone(),
            };
            let lazy = self.lazy_reads_of(&src_name);
            let clobbered = var_names
                .iter()
                .enumerate()
                .any(|(j, n)| j != k && (*n == src_name || lazy.is_some_and(|r| r.contains(*n))));
            if clobbered {
                let tmp = self.fresh("carry");
                let dt = self.edt(*v);
                let ct = self.cty(dt)?;
                if self.ty(*v).is_block() {
                    let regs = self.regs_of(*v);
                    self.line(format!("{ct} {tmp}[{regs}];"));
                    self.open_reg_loop(regs);
                    self.line(format!("{tmp}[tm_i] = {};", self.el(*v, "tm_i")));
                    self.close();
                } else {
                    self.line(format!("const {ct} {tmp} = {};", self.el(*v, "")));
                }
                staged[k] = Some(tmp);
            }
        }
        for (k, v) in vals.iter().enumerate() {
            let src = |i: &str| match &staged[k] {
                Some(t) if self.ty(*v).is_block() => format!("{t}[{i}]"),
                Some(t) => t.clone(),
                None => self.el(*v, i),
            };
            match &vars[k] {
                Repr::Block(a) => {
                    if src("tm_i") == format!("{a}[tm_i]") {
                        continue;
                    }
                    // A row-slice variable has its own register count (its initial value
                    // is uniform, of no layout).
                    let regs = match self.slice_vars.get(a) {
                        Some(&r) => r,
                        None => self.regs_of(*v),
                    };
                    let s = src("tm_i");
                    self.open_reg_loop(regs);
                    self.line(format!("{a}[tm_i] = {s};"));
                    self.close();
                }
                Repr::Scalar(a) | Repr::Splat(a) => {
                    let s = src("");
                    if &s != a {
                        self.line(format!("{a} = {s};"));
                    }
                }
            }
        }
        Ok(())
    }

    /// Goes back to `snap`, a copy of this lowering taken earlier, to print the same ops
    /// again (another version of a loop): what was printed since, the names taken and what
    /// the printed code needs stay.
    fn restart_from(&mut self, snap: Lowering<'k>) {
        let lines = std::mem::take(&mut self.lines);
        let names = std::mem::take(&mut self.names);
        let fresh = std::mem::take(&mut self.fresh_next);
        let helpers = std::mem::take(&mut self.helpers);
        let scratch = std::mem::take(&mut self.scratch);
        let smem_used = std::mem::take(&mut self.smem_used);
        let (local, ring_bytes) = (self.local_bytes, self.ring_bytes);
        let (simd, atomics) = (self.uses_simd, self.atomic_outputs);
        *self = snap;
        self.lines = lines;
        self.names = names;
        self.fresh_next = fresh;
        self.helpers.extend(helpers);
        for (dt, n) in scratch {
            let e = self.scratch.entry(dt).or_insert(0);
            *e = (*e).max(n);
        }
        for u in smem_used {
            if !self.smem_used.contains(&u) {
                self.smem_used.push(u);
            }
        }
        self.local_bytes = self.local_bytes.max(local);
        self.ring_bytes = self.ring_bytes.max(ring_bytes);
        self.uses_simd |= simd;
        self.atomic_outputs |= atomics;
    }

    fn for_loop(
        &mut self,
        id: OpId,
        lo: Value,
        hi: Value,
        step: Value,
        init: &[Value],
        body: RegionId,
    ) -> Result<()> {
        let args = self.k.region(body).args.clone();
        let results: Vec<Value> = self.k.op(id).results.iter().collect();
        let resident = self.plan.resident(id).to_vec();
        let mut vars = Vec::new();
        let mut frag_of = vec![None; init.len()];
        for (k, v) in init.iter().enumerate() {
            if resident.contains(&k) {
                let sh = &self.ty(*v).shape;
                let (m, n) = (sh[0], sh[1]);
                let chain =
                    crate::opt::plan::resident_chain(self.k, body, k, self.plan.printer.matrix)
                        .ok_or_else(|| {
                            unsupported_on(self.d, self.k, "a resident slot without its dot")
                        })?;
                let f = self.frags_from(*v, m, n, chain.dot)?;
                self.frags.insert(args[k + 1], f.clone());
                if let Some(r) = chain.scale {
                    let grid = self.grid_of(&f, m, n)?;
                    for (op, in_place) in [(r.bcast, None), (r.mul, Some(args[k + 1]))] {
                        if let Some(x) = self.k.op(op).result() {
                            self.frag_vals
                                .insert(x, super::mma::FragVal { grid, in_place });
                        }
                    }
                }
                frag_of[k] = Some((f, m, n));
                vars.push(Repr::Block(String::new()));
                continue;
            }
            // The block argument's type is the initial value's; its layout may differ (a
            // row vector kept in fragment rows starts from a uniform value).
            let r = self.carried_var(args[k + 1], &format!("acc{k}"))?;
            vars.push(r);
        }
        let keep = |xs: &[Value]| -> Vec<Value> {
            xs.iter()
                .enumerate()
                .filter(|(k, _)| frag_of[*k].is_none())
                .map(|(_, v)| *v)
                .collect()
        };
        let kept_vars: Vec<Repr> = vars
            .iter()
            .enumerate()
            .filter(|(k, _)| frag_of[*k].is_none())
            .map(|(_, r)| r.clone())
            .collect();
        let dt = self.edt(lo);
        let iv_t = self.cty(dt)?;
        let (l, h, s) = (self.el(lo, ""), self.el(hi, ""), self.el(step, ""));
        // Python's `range`: a negative step counts down. The trip count is computed once,
        // in unsigned arithmetic of the bounds' width (exact: it is below 2^width), and the
        // induction variable is `lo + t * step`, wrapping, so no bound near the type's
        // limits can overflow or loop forever. A zero step runs no iteration (the compiled
        // CPU executor also reports it; the interpreter refuses it).
        let (u, one) = if dt.size_bytes() == 8 {
            ("ulong", "1ul")
        } else {
            ("uint", "1u")
        };
        let trips = self.fresh("trips");
        let up =
            format!("(({l}) < ({h}) ? ({u}({h}) - {u}({l}) - {one}) / {u}({s}) + {one} : {u}(0))");
        let count = if dt.is_signed_int() {
            let down = format!(
                "(({l}) > ({h}) ? ({u}({l}) - {u}({h}) - {one}) / ({u}(0) - {u}({s})) + {one} : {u}(0))"
            );
            format!("({s}) > 0 ? {up} : ({s}) < 0 ? {down} : {u}(0)")
        } else {
            format!("({s}) != 0 ? {up} : {u}(0)")
        };
        self.line(format!("const {u} {trips} = {count};"));
        // The bounds as they were when the loop started.
        let (l, s) = {
            let (lv, sv) = (self.fresh("lo"), self.fresh("step"));
            self.line(format!("const {iv_t} {lv} = {l};"));
            self.line(format!("const {iv_t} {sv} = {s};"));
            (lv, sv)
        };
        if let Some(z) = self.d.zero_step {
            self.line(format!(
                "if (({s}) == 0) {}",
                z.replace("{id}", &id.index().to_string())
            ));
        }
        let prefetched = self.cpu_prefetch_prologue(id)?;
        let peel = self.uniform_inits_to_peel(id, init, &frag_of);
        let start = match &peel {
            Some(uniform) => {
                let cond = format!("{trips} > 0");
                self.peel_first_iteration(body, init, &vars, uniform, iv_t, (&l, &cond))?;
                one
            }
            None => {
                self.assign_carried(&kept_vars, &keep(init))?;
                if u == "ulong" {
                    "0ul"
                } else {
                    "0u"
                }
            }
        };
        let shift_slots = match peel {
            Some(_) => Vec::new(),
            None => self.shifted_slots(id),
        };
        let shifts = self.open_shifts(&shift_slots, &mut vars)?;
        self.open_row_checks(body, &shifts)?;
        // Assigned at the end of each iteration: neither in fragments nor shifted.
        let assigned = |k: usize| frag_of[k].is_none() && !shifts.iter().any(|s| s.slot == k);
        let body_vars: Vec<Repr> = (0..vars.len())
            .filter(|&k| assigned(k))
            .map(|k| vars[k].clone())
            .collect();
        let iv = self.fresh("iv");
        let t = self.fresh("t");
        self.set(args[0], Repr::Scalar(iv.clone()));
        for (k, r) in vars.iter().enumerate() {
            self.set(args[k + 1], r.clone());
        }
        let (ring, dbuf) = match (&peel, self.d.mma_m16n8k16) {
            (Some(_), _) => (None, None),
            (None, true) => (self.ring_of(id), None),
            (None, false) => (None, self.dbuf_of(id)),
        };
        for d in self.k.region(body).ops.clone() {
            if self.plan.hoists(d) && self.plan.hoistable(self.k, d) == Some(id) {
                self.mma_hoist_operand(d)?;
            }
        }
        if let Some(ring) = &ring {
            self.ring_prologue(ring, body, (&l, &s, &trips), (iv_t, u))?;
        }
        if let Some(d) = &dbuf {
            self.dbuf_prologue(d, body, (&l, &trips))?;
        }
        // A ring whose copies can all be issued untested (its flag computed before the
        // loop) gets two versions of the loop, the flag choosing one: the version that runs
        // on aligned operands holds no element-wise copy path at all.
        let versions: &[Option<bool>] = match (&ring, &self.ring_fast) {
            (Some(_), Some(_)) => &[Some(true), Some(false)],
            _ => &[None],
        };
        let mut snapshot = None;
        if let (Some(f), true) = (self.ring_fast.clone(), versions.len() > 1) {
            self.open(format!("if ({f})"));
            snapshot = Some(self.clone());
        }
        for (n, &version) in versions.iter().enumerate() {
            if n > 0 {
                if let Some(snap) = &snapshot {
                    self.restart_from(snap.clone());
                }
                self.indent -= 1;
                self.line("} else {");
                self.indent += 1;
            }
            self.ring_version = version;
            self.open(format!("for ({u} {t} = {start}; {t} < {trips}; ++{t})"));
            if let Some(c) = self.cpu.as_mut() {
                c.loops.push(t.clone());
            }
            self.line(format!(
                "const {iv_t} {iv} = {iv_t}({u}({l}) + {t} * {u}({s}));"
            ));
            // The previous iteration's reads of scratch are pending at the top of the body.
            self.hazard.reads_pending = true;
            if let Some(ring) = &ring {
                self.ring_iteration(ring, body, (&iv, &s, &trips, &t), (iv_t, u))?;
            }
            let next = match &dbuf {
                Some(d) => self.dbuf_iteration(d, body, (&iv, &s, &trips, &t), (iv_t, u))?,
                None => Vec::new(),
            };
            let ys = self.region_split(body)?;
            if let Some(d) = &dbuf {
                self.dbuf_iteration_end(d, &next, (&t, &trips))?;
            }
            let steps = self.stage_shifts(&shifts, &ys)?;
            let body_ys: Vec<Value> = (0..ys.len())
                .filter(|&k| assigned(k))
                .map(|k| ys[k])
                .collect();
            self.assign_carried(&body_vars, &body_ys)?;
            self.advance_shifts(&shifts, &steps)?;
            self.end_splits();
            self.close();
            if let Some(c) = self.cpu.as_mut() {
                c.loops.pop();
            }
        }
        self.ring_version = None;
        if snapshot.is_some() {
            self.close();
        }
        if let Some(ring) = &ring {
            self.ring_epilogue(ring);
        }
        if let Some(d) = &dbuf {
            self.dbuf_epilogue(d);
        }
        if let Some(uniform) = &peel {
            self.end_peel(init, &vars, uniform)?;
        }
        for v in prefetched {
            self.prefetch.remove(&v);
        }
        self.hazard.reads_pending =
            self.d.shared_array.is_empty() || self.plan.barrier(id, When::After).is_some();
        let stored = if frag_of.iter().any(Option::is_some) && self.plan.keeps_fragments(id) {
            self.plan.fragment_regions(self.k)
        } else {
            Vec::new()
        };
        for (k, r) in results.into_iter().enumerate() {
            let region = stored.iter().find(|g| g.from_loop == Some((id, k)));
            match (&frag_of[k], region) {
                (Some((f, m, n)), Some(g)) => {
                    self.keep_region_in_fragments(g, r, f.clone(), *m, *n)?
                }
                (Some((f, m, n)), None) => self.frags_to_block(r, f, *m, *n)?,
                (None, _) => self.set(r, vars[k].clone()),
            }
        }
        Ok(())
    }

    fn while_loop(
        &mut self,
        id: OpId,
        init: &[Value],
        cond: RegionId,
        body: RegionId,
    ) -> Result<()> {
        let results: Vec<Value> = self.k.op(id).results.iter().collect();
        let mut vars = Vec::new();
        for (k, v) in init.iter().enumerate() {
            vars.push(self.carried_var(*v, &format!("carry{k}"))?);
        }
        self.assign_carried(&vars, init)?;
        for r in [cond, body] {
            let args = self.k.region(r).args.clone();
            for (k, a) in args.into_iter().enumerate() {
                self.set(a, vars[k].clone());
            }
        }
        self.open("while (true)");
        self.hazard.reads_pending = true;
        let c = self.region(cond)?;
        let cv = c.first().copied().ok_or_else(|| {
            unsupported_on(self.d, self.k, "a while condition that yields nothing")
        })?;
        self.line(format!("if (!{}) break;", self.el(cv, "")));
        let ys = self.region_split(body)?;
        self.assign_carried(&vars, &ys)?;
        self.end_splits();
        self.close();
        self.hazard.reads_pending = true;
        for (k, r) in results.into_iter().enumerate() {
            self.set(r, vars[k].clone());
        }
        Ok(())
    }

    fn if_op(&mut self, id: OpId, cond: Value, then_r: RegionId, else_r: RegionId) -> Result<()> {
        let results: Vec<Value> = self.k.op(id).results.iter().collect();
        let mut vars = Vec::new();
        for (k, v) in results.iter().enumerate() {
            vars.push(self.carried_var(*v, &format!("if{k}"))?);
        }
        let before = self.hazard;
        self.open(format!("if ({})", self.el(cond, "")));
        let ys = self.region_split(then_r)?;
        self.assign_carried(&vars, &ys)?;
        self.end_splits();
        let after_then = self.hazard;
        self.indent -= 1;
        self.line("} else {");
        self.indent += 1;
        self.hazard = before;
        let ys = self.region_split(else_r)?;
        self.assign_carried(&vars, &ys)?;
        self.end_splits();
        self.close();
        self.hazard.reads_pending |= after_then.reads_pending;
        for (k, r) in results.into_iter().enumerate() {
            self.set(r, vars[k].clone());
        }
        Ok(())
    }
}

/// C expression moving bit fields `(from, width, to)` of `l` into a new index.
pub(super) fn remap_expr(l: &str, fields: &[(u32, u32, u32)]) -> String {
    if fields.is_empty() {
        return "0u".into();
    }
    fields
        .iter()
        .map(|&(from, w, to)| {
            let mask = (1u64 << w) - 1;
            let f = if from == 0 {
                format!("({l} & {mask}u)")
            } else {
                format!("(({l} >> {from}) & {mask}u)")
            };
            if to == 0 {
                f
            } else {
                format!("({f} << {to})")
            }
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

trait StartValue {
    fn start_value(self) -> Value;
}

impl StartValue for crate::ir::ValueRange {
    /// The first result, or a dangling value for ops without results (never read).
    fn start_value(self) -> Value {
        Value(self.start)
    }
}

/// The code of a pointee dtype in the compiled CPU executor's table of slots: its index in
/// [`DType::ALL`] (`exec::native` fills the table with the same codes).
pub fn int_to_ptr_kind(d: DType) -> usize {
    DType::ALL
        .iter()
        .position(|&x| x == d)
        .unwrap_or(usize::MAX)
}
