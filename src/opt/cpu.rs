//! The one-thread specialisations of the compiled CPU executor's C++, decided from the
//! kernel IR and its integer facts, each with the fact that drove it.
//!
//! A program of the compiled CPU executor is one thread, so every block is a local array
//! the printer loops over, and a block's flat index is its register index. [`plan`]
//! decides, for the printer (`codegen::cpu`) to spell:
//! - **index recipes** ([`CpuPlan::recipes`]): blocks that are pure functions of their
//!   element index (`arange`, index arithmetic, masks) are computed where they are read
//!   instead of filled into arrays;
//! - **lazy values** ([`CpuPlan::lazy`]): a value whose readers each read every element
//!   once, in its own region, is computed inside its reader's loop instead of stored (for a
//!   load: read from its read-only argument where it is used); chains of such values go at
//!   most [`CpuPlan::lazy_depth`] deep;
//! - **unswitched masks** ([`CpuPlan::unswitched`]): a mask built from index arithmetic,
//!   whose all-true test reads a few elements (runs of [`MIN_RUN`] or more consecutive or
//!   equal indices compared with a uniform bound), is tested once per block and the rest of
//!   its region printed twice, once with the mask known true; at most [`MAX_OPEN`] at once;
//! - **peeled loops** ([`CpuPlan::peeled`]): a `for` with a short straight-line body whose
//!   carried blocks start uniform (`tl.zeros` accumulators) runs its first iteration apart,
//!   where those blocks are still one value;
//! - **reduction lanes** ([`CpuPlan::lanes`]): a reduction folds its axis in that many
//!   independent accumulators, combined pairwise at the end;
//! - **whole-block accesses** ([`CpuPlan::whole`]): a load or store whose offsets run +1
//!   over the whole block is bounds-checked once and then runs as one plain loop;
//! - **row copies** ([`CpuPlan::rows`]): a load of two or more dimensions whose rows span a
//!   cache line or more copies each row at once where the row checks pass;
//! - **branch-free conditions** ([`CpuPlan::branch_free`]): the conditions of a chunk or
//!   row of an access are combined with `&`, without branches, so that clang tests mask
//!   lanes as one vector;
//! - **tabled index blocks** ([`CpuPlan::tabled`]): an integer `/` or `%` block that a
//!   broadcast reads many times per element is filled into an array once, and its index
//!   recipe reads the array instead of dividing again at every element of the broadcast;
//! - **shifted pointer blocks** ([`CpuPlan::shifted`]): a pointer block a `for` loop
//!   carries and advances by a uniform offset each iteration (`a_ptrs += BLOCK_K *
//!   stride_ak`) is held as its start plus one scalar offset, so the update is one add
//!   instead of one per element;
//! - **row checks once per loop** ([`CpuPlan::rows_checked_once`]): a load copied by rows
//!   through such a shifted block, whose rows are checked to run +1 at run time, checks
//!   them once before the loop (a uniform shift keeps them running +1 or not);
//! - **packed tiles** ([`CpuPlan::packed`]): a `tl.dot` operand B copied by rows through a
//!   shifted block of a read-only argument is copied into a per-thread cache of tiles, one
//!   slot per iteration (modulo the slots), keyed by its rows' offsets; the next programs
//!   that read the same tile at the same offsets (Triton's grouped ordering runs the
//!   programs sharing a column block one after another) read the slot instead of copying;
//! - **rows read in place** ([`CpuPlan::rows_in_place`]): a `tl.dot` operand A of `f32`
//!   copied by rows from a read-only argument is not copied where a row passes its checks:
//!   the dot reads that row where it lies (through a table of row pointers; rows that fail
//!   are copied element by element, as before), accumulating in vector registers.
//!
//! Every decision can be overridden (the `set_*` methods) on the plan given to
//! `codegen::cpu::compile_with`; [`CpuPlan::verify`] refuses what the kernel cannot take.
//! The decisions are the `cpu ...` lines of the kernel plan's text form
//! ([`super::plan::KernelPlan`]).

use std::collections::BTreeMap;
use std::fmt;

use super::axis::AxisInfo;
use super::blocked::BlockedLayout;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::{BinaryOp, CmpPred, Kernel, Op, OpId, ReduceKind, RegionId, Value, ValueDef};

/// Shortest run of consecutive or equal indices an unswitched mask's test reads by its ends
/// (shorter runs would make the test cost about as much as a masked pass).
pub const MIN_RUN: u64 = 16;

/// Unswitched masks open at once: the code after the last one is printed 2^n times.
pub const MAX_OPEN: usize = 2;

/// Largest `for` body peeled (ops), since peeling prints the body twice.
pub const MAX_PEEL_OPS: usize = 64;

/// Independent accumulators of a reduction's fold.
pub const REDUCE_LANES: usize = 32;

/// Longest chain of lazy blocks reading one another.
pub const LAZY_DEPTH: usize = 16;

/// Bytes of one packed load's cache of tiles ([`CpuPlan::packed`]), on the stack of each
/// worker thread.
pub const PACK_BYTES: usize = 256 << 10;

/// Most slots of one packed load's cache.
pub const MAX_PACK_SLOTS: usize = 16;

/// The compiled CPU executor's decisions for one kernel, each with its reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuPlan {
    /// Whether blocks that are pure functions of their element index are computed where
    /// they are read.
    pub recipes: bool,
    /// Why [`Self::recipes`].
    pub recipes_why: String,
    /// Longest chain of lazy values reading one another; the next value of a longer chain
    /// is stored.
    pub lazy_depth: usize,
    /// Why [`Self::lazy_depth`].
    pub lazy_depth_why: String,
    /// Whether the conditions of a chunk or row of an access are combined with `&` (each
    /// evaluated, no branches) instead of `&&`.
    pub branch_free: bool,
    /// Why [`Self::branch_free`].
    pub branch_free_why: String,
    lazy: BTreeMap<Value, (bool, String)>,
    unswitch: BTreeMap<Value, (bool, String)>,
    peel: BTreeMap<OpId, (Vec<usize>, String)>,
    lanes: BTreeMap<OpId, (usize, String)>,
    whole: BTreeMap<OpId, (bool, String)>,
    rows: BTreeMap<OpId, (bool, String)>,
    table: BTreeMap<Value, (bool, String)>,
    shift: BTreeMap<OpId, (Vec<usize>, String)>,
    rowcheck: BTreeMap<OpId, (bool, String)>,
    pack: BTreeMap<OpId, (usize, String)>,
    inplace: BTreeMap<OpId, (bool, String)>,
}

/// The decisions for `k` on a one-thread program; `resident(op)` tells whether the plan
/// keeps carried values of `for` loop `op` in matrix fragments (such loops are not peeled),
/// `layout(n)` the blocked layout of an `n`-element block.
pub fn plan(
    k: &Kernel,
    resident: impl Fn(OpId) -> bool,
    layout: impl Fn(usize) -> BlockedLayout,
) -> CpuPlan {
    let mut p = CpuPlan {
        recipes: true,
        recipes_why: "one thread per program: a block's flat index is its register index".into(),
        lazy_depth: LAZY_DEPTH,
        lazy_depth_why: format!(
            "chains of more than {LAZY_DEPTH} lazy blocks nest too deep for clang to inline \
             quickly"
        ),
        branch_free: true,
        branch_free_why: "one thread per program: every condition is a cheap read of local \
                          arrays, so a chunk's are all evaluated and clang tests its lanes as \
                          one vector"
            .into(),
        lazy: BTreeMap::new(),
        unswitch: BTreeMap::new(),
        peel: BTreeMap::new(),
        lanes: BTreeMap::new(),
        whole: BTreeMap::new(),
        rows: BTreeMap::new(),
        table: BTreeMap::new(),
        shift: BTreeMap::new(),
        rowcheck: BTreeMap::new(),
        pack: BTreeMap::new(),
        inplace: BTreeMap::new(),
    };
    for (i, why) in lazy_values(k).into_iter().enumerate() {
        if let Some(why) = why {
            p.lazy.insert(Value(i as u32), (true, why));
        }
    }
    for (i, why) in tables(k).into_iter().enumerate() {
        if let Some(why) = why {
            p.table.insert(Value(i as u32), (true, why));
        }
    }
    let facts = Facts::new(k);
    facts.plan_splits(k.body, true, 0, &mut p.unswitch);
    for (i, o) in k.ops.iter().enumerate() {
        let id = OpId(i as u32);
        match &o.op {
            Op::For { init, body, .. } if !resident(id) => {
                if let Ok((slots, why)) = facts.peelable(*body, init) {
                    if !slots.is_empty() {
                        p.peel.insert(id, (slots, why));
                    }
                }
                if p.peeled(id).is_empty() {
                    let (slots, why) = facts.shiftable(*body, init);
                    if !slots.is_empty() {
                        p.shift.insert(id, (slots, why));
                    }
                }
            }
            Op::Reduce {
                kind, srcs, axis, ..
            } if *kind != ReduceKind::Custom => {
                let n = k
                    .ty(srcs[0])
                    .shape
                    .get(*axis as usize)
                    .copied()
                    .unwrap_or(1);
                if n > REDUCE_LANES {
                    let why = format!(
                        "{n} elements per output: {REDUCE_LANES} independent folds keep the \
                         dependency chains short (the same on every host; clang picks the \
                         vector width)"
                    );
                    p.lanes.insert(id, (REDUCE_LANES, why));
                }
            }
            Op::Load { ptr, .. } | Op::Store { ptr, .. } => {
                if let Ok(why) = facts.whole_block(*ptr) {
                    p.whole.insert(id, (true, why));
                }
                if let Some(why) = facts.rows(id, &layout) {
                    p.rows.insert(id, (true, why));
                }
            }
            _ => {}
        }
    }
    let rows: Vec<OpId> = p
        .rows
        .iter()
        .filter(|(_, r)| r.0)
        .map(|(o, _)| *o)
        .collect();
    for op in rows {
        if let Ok(why) = facts.rows_once(op, &p) {
            p.rowcheck.insert(op, (true, why));
        }
        if let Ok((slots, why)) = facts.packable(op, &p) {
            p.pack.insert(op, (slots, why));
        }
        if let Ok(why) = facts.in_place_rows(op, &p) {
            p.inplace.insert(op, (true, why));
        }
    }
    p
}

impl CpuPlan {
    /// Whether `v` is computed where its readers read it.
    pub fn lazy(&self, v: Value) -> bool {
        self.lazy.get(&v).is_some_and(|x| x.0)
    }

    /// Computes `v` where it is read (`on`) or stores it, recording `why`.
    pub fn set_lazy(&mut self, v: Value, on: bool, why: impl Into<String>) {
        self.lazy.insert(v, (on, why.into()));
    }

    /// Whether mask `v` is unswitched.
    pub fn unswitched(&self, v: Value) -> bool {
        self.unswitch.get(&v).is_some_and(|x| x.0)
    }

    /// Unswitches mask `v` (`on`) or reads it per element, recording `why`.
    pub fn set_unswitched(&mut self, v: Value, on: bool, why: impl Into<String>) {
        self.unswitch.insert(v, (on, why.into()));
    }

    /// The carried slots of `for` loop `op` whose first iteration is printed apart (empty:
    /// not peeled).
    pub fn peeled(&self, op: OpId) -> &[usize] {
        self.peel.get(&op).map_or(&[], |x| &x.0)
    }

    /// Peels `for` loop `op` with `slots` still uniform in its first iteration (empty: not
    /// peeled), recording `why`.
    pub fn set_peeled(&mut self, op: OpId, slots: Vec<usize>, why: impl Into<String>) {
        self.peel.insert(op, (slots, why.into()));
    }

    /// Independent accumulators of reduction `op`'s fold (1: one chain).
    pub fn lanes(&self, op: OpId) -> usize {
        self.lanes.get(&op).map_or(1, |x| x.0)
    }

    /// Folds reduction `op` in `lanes` accumulators, recording `why`.
    pub fn set_lanes(&mut self, op: OpId, lanes: usize, why: impl Into<String>) {
        self.lanes.insert(op, (lanes, why.into()));
    }

    /// Whether block load or store `op` is bounds-checked once for the whole block and then
    /// runs as one plain loop (falling back to checked chunks when the check fails).
    pub fn whole(&self, op: OpId) -> bool {
        self.whole.get(&op).is_some_and(|x| x.0)
    }

    /// Checks block access `op` once for the whole block (`on`) or per chunk, recording
    /// `why`.
    pub fn set_whole(&mut self, op: OpId, on: bool, why: impl Into<String>) {
        self.whole.insert(op, (on, why.into()));
    }

    /// Whether block load `op` copies each of its rows (along the last dimension) at once
    /// where the row's checks pass (a store: stores a row's elements without checking each
    /// again).
    pub fn rows(&self, op: OpId) -> bool {
        self.rows.get(&op).is_some_and(|x| x.0)
    }

    /// Moves block load or store `op` by rows (`on`) or by chunks, recording `why`.
    pub fn set_rows(&mut self, op: OpId, on: bool, why: impl Into<String>) {
        self.rows.insert(op, (on, why.into()));
    }

    /// Accesses with a whole-block decision: the op, checked once or not, and why.
    pub fn whole_decisions(&self) -> impl Iterator<Item = (OpId, bool, &str)> {
        self.whole.iter().map(|(o, (on, w))| (*o, *on, w.as_str()))
    }

    /// Loads and stores with a row-copy decision: the op, by rows or not, and why.
    pub fn rows_decisions(&self) -> impl Iterator<Item = (OpId, bool, &str)> {
        self.rows.iter().map(|(o, (on, w))| (*o, *on, w.as_str()))
    }

    /// Whether index block `v` (an integer `/` or `%`) is filled into an array once and
    /// its recipe reads the array.
    pub fn tabled(&self, v: Value) -> bool {
        self.table.get(&v).is_some_and(|x| x.0)
    }

    /// Fills index block `v` into an array once (`on`) or recomputes it where it is read,
    /// recording `why`.
    pub fn set_tabled(&mut self, v: Value, on: bool, why: impl Into<String>) {
        self.table.insert(v, (on, why.into()));
    }

    /// The carried slots of `for` loop `op` held as their start plus one scalar offset
    /// (empty: none).
    pub fn shifted(&self, op: OpId) -> &[usize] {
        self.shift.get(&op).map_or(&[], |x| &x.0)
    }

    /// Holds carried slots `slots` of `for` loop `op` as their start plus one scalar offset
    /// (empty: every slot as a block), recording `why`.
    pub fn set_shifted(&mut self, op: OpId, slots: Vec<usize>, why: impl Into<String>) {
        self.shift.insert(op, (slots, why.into()));
    }

    /// Loops with a shift decision: the op, its shifted slots, and why.
    pub fn shift_decisions(&self) -> impl Iterator<Item = (OpId, &[usize], &str)> {
        self.shift
            .iter()
            .map(|(o, (s, w))| (*o, s.as_slice(), w.as_str()))
    }

    /// Whether block load `op`, copied by rows through a shifted pointer block, checks
    /// that its rows run +1 once before the loop instead of at every iteration.
    pub fn rows_checked_once(&self, op: OpId) -> bool {
        self.rowcheck.get(&op).is_some_and(|x| x.0)
    }

    /// Checks load `op`'s rows once before its loop (`on`) or at every iteration,
    /// recording `why`.
    pub fn set_rows_checked_once(&mut self, op: OpId, on: bool, why: impl Into<String>) {
        self.rowcheck.insert(op, (on, why.into()));
    }

    /// Loads with a row-check decision: the op, checked once or not, and why.
    pub fn rowcheck_decisions(&self) -> impl Iterator<Item = (OpId, bool, &str)> {
        self.rowcheck
            .iter()
            .map(|(o, (on, w))| (*o, *on, w.as_str()))
    }

    /// Slots of block load `op`'s cache of packed tiles (0: not packed).
    pub fn packed(&self, op: OpId) -> usize {
        self.pack.get(&op).map_or(0, |x| x.0)
    }

    /// Packs load `op`'s tiles into a cache of `slots` slots (0: copies each tile where
    /// it is loaded), recording `why`.
    pub fn set_packed(&mut self, op: OpId, slots: usize, why: impl Into<String>) {
        self.pack.insert(op, (slots, why.into()));
    }

    /// Whether block load `op`'s whole rows are read where they lie by the `tl.dot` that
    /// reads it, instead of copied.
    pub fn rows_in_place(&self, op: OpId) -> bool {
        self.inplace.get(&op).is_some_and(|x| x.0)
    }

    /// Overrides [`Self::rows_in_place`] for `op`.
    pub fn set_rows_in_place(&mut self, op: OpId, on: bool, why: impl Into<String>) {
        self.inplace.insert(op, (on, why.into()));
    }

    /// Loads with an in-place decision: the op, whether its rows are read in place, and why.
    pub fn in_place_decisions(&self) -> impl Iterator<Item = (OpId, bool, &str)> {
        self.inplace.iter().map(|(o, (b, w))| (*o, *b, w.as_str()))
    }

    /// Loads with a pack decision: the op, its slots (0: not packed), and why.
    pub fn pack_decisions(&self) -> impl Iterator<Item = (OpId, usize, &str)> {
        self.pack.iter().map(|(o, (n, w))| (*o, *n, w.as_str()))
    }

    /// Per mask the plan unswitches, the test the printer spells to find it all true
    /// (masks the kernel gives no such test are left out: `verify` refuses them).
    pub fn unswitch_tests(&self, k: &Kernel) -> BTreeMap<Value, AllTrue> {
        if !self.unswitch.values().any(|u| u.0) {
            return BTreeMap::new();
        }
        let facts = Facts::new(k);
        self.unswitch
            .iter()
            .filter(|(_, u)| u.0)
            .filter_map(|(&v, _)| Some((v, facts.all_true(v)?)))
            .collect()
    }

    /// Values with a lazy decision: the value, computed where read or not, and why.
    pub fn lazy_decisions(&self) -> impl Iterator<Item = (Value, bool, &str)> {
        self.lazy.iter().map(|(v, (on, w))| (*v, *on, w.as_str()))
    }

    /// Masks with an unswitch decision: the mask, unswitched or not, and why.
    pub fn unswitch_decisions(&self) -> impl Iterator<Item = (Value, bool, &str)> {
        self.unswitch
            .iter()
            .map(|(v, (on, w))| (*v, *on, w.as_str()))
    }

    /// Checks every decision against `kernel` on a program of `threads` threads: the ops and
    /// values exist and are of the decision's kind, and the facts the decision needs hold.
    pub fn verify(&self, kernel: &Kernel, threads: usize, name: &str) -> Result<()> {
        let bad = |what: String| {
            Err(Error::InvalidArgument(format!(
                "layout plan of `{name}`: {what}"
            )))
        };
        if threads != 1 {
            return bad(format!(
                "CPU decisions on a program of {threads} threads (they need one thread per \
                 program)"
            ));
        }
        if self.lazy_depth == 0 {
            return bad("lazy chains of depth 0 (at least 1)".into());
        }
        let n = kernel.values.len();
        let lazy = lazy_values(kernel);
        for (&v, (on, _)) in &self.lazy {
            if v.index() >= n {
                return bad(format!("{v}: no such value"));
            }
            if *on && lazy[v.index()].is_none() {
                return bad(format!(
                    "{v} computed where read, but its readers do not each read it once in its \
                     own region"
                ));
            }
        }
        let facts = Facts::new(kernel);
        for (&v, (on, _)) in &self.unswitch {
            if v.index() >= n {
                return bad(format!("{v}: no such value"));
            }
            if *on {
                if let Err(e) = facts.splittable(v) {
                    return bad(format!("{v} unswitched: {e}"));
                }
            }
        }
        for (&op, (slots, _)) in &self.peel {
            let Some(Op::For { init, body, .. }) = kernel.ops.get(op.index()).map(|o| &o.op) else {
                return bad(format!("{op}: peeling on an op that is not a `for`"));
            };
            if slots.is_empty() {
                continue;
            }
            let ok = match facts.peelable(*body, init) {
                Err(e) => Err(e),
                Ok((uniform, _)) => match slots.iter().find(|s| !uniform.contains(s)) {
                    Some(s) => Err(format!(
                        "carried slot {s} does not start as a uniform block"
                    )),
                    None => Ok(()),
                },
            };
            if let Err(e) = ok {
                return bad(format!("{op} peeled: {e}"));
            }
        }
        for (&op, (slots, _)) in &self.shift {
            let Some(Op::For { init, body, .. }) = kernel.ops.get(op.index()).map(|o| &o.op) else {
                return bad(format!("{op}: shifted slots on an op that is not a `for`"));
            };
            if slots.is_empty() {
                continue;
            }
            if !self.peeled(op).is_empty() {
                return bad(format!(
                    "{op}: shifted slots in a peeled loop (its first iteration is printed apart)"
                ));
            }
            let (ok, _) = facts.shiftable(*body, init);
            if let Some(s) = slots.iter().find(|s| !ok.contains(s)) {
                return bad(format!(
                    "{op} shifted: carried slot {s} is no pointer block the loop advances by a \
                     uniform offset"
                ));
            }
        }
        for (&op, (on, _)) in &self.rowcheck {
            if !matches!(
                kernel.ops.get(op.index()).map(|o| &o.op),
                Some(Op::Load { .. })
            ) {
                return bad(format!("{op}: row checks on an op that is not a load"));
            }
            if *on {
                if let Err(e) = facts.rows_once(op, self) {
                    return bad(format!("{op} checks its rows once: {e}"));
                }
            }
        }
        for (&op, &(on, _)) in &self.inplace {
            if !matches!(
                kernel.ops.get(op.index()).map(|o| &o.op),
                Some(Op::Load { .. })
            ) {
                return bad(format!(
                    "{op}: rows read in place on an op that is not a load"
                ));
            }
            if on {
                if let Err(e) = facts.in_place_rows(op, self) {
                    return bad(format!("{op} read in place: {e}"));
                }
            }
        }
        for (&op, &(slots, _)) in &self.pack {
            if !matches!(
                kernel.ops.get(op.index()).map(|o| &o.op),
                Some(Op::Load { .. })
            ) {
                return bad(format!("{op}: packed tiles on an op that is not a load"));
            }
            if slots == 0 {
                continue;
            }
            match facts.packable(op, self) {
                Err(e) => return bad(format!("{op} packed: {e}")),
                Ok((most, _)) if slots > most => {
                    return bad(format!(
                        "{op} packed in {slots} slots (at most {most}: {MAX_PACK_SLOTS}, and \
                         {PACK_BYTES} bytes)"
                    ))
                }
                Ok(_) => {}
            }
        }
        for (&v, (on, _)) in &self.table {
            if v.index() >= n {
                return bad(format!("{v}: no such value"));
            }
            let ty = kernel.ty(v);
            if *on && (!ty.is_block() || ty.ptr || !ty.dtype.is_int()) {
                return bad(format!(
                    "{v} tabled, but it is not a block of integers ({})",
                    ty
                ));
            }
        }
        for (&op, &(lanes, _)) in &self.lanes {
            match kernel.ops.get(op.index()).map(|o| &o.op) {
                Some(Op::Reduce { kind, .. }) if *kind != ReduceKind::Custom => {}
                _ => {
                    return bad(format!(
                        "{op}: lanes on an op that is not a builtin reduction"
                    ))
                }
            }
            if !lanes.is_power_of_two() || lanes > 1024 {
                return bad(format!(
                    "{op}: {lanes} reduction lanes (a power of two up to 1024)"
                ));
            }
        }
        for (&op, (on, _)) in &self.whole {
            let ptr = match kernel.ops.get(op.index()).map(|o| &o.op) {
                Some(Op::Load { ptr, .. } | Op::Store { ptr, .. }) => *ptr,
                _ => {
                    return bad(format!(
                        "{op}: a whole-block access on an op that is not a load or store"
                    ))
                }
            };
            if *on {
                if let Err(e) = facts.whole_block(ptr) {
                    return bad(format!("{op} checked once for the whole block: {e}"));
                }
            }
        }
        for (&op, (on, _)) in &self.rows {
            let res = match kernel.ops.get(op.index()).map(|o| (&o.op, o.result())) {
                Some((Op::Load { .. }, Some(res))) => res,
                Some((Op::Store { value, .. }, _)) => *value,
                _ => {
                    return bad(format!(
                        "{op}: row copies on an op that is not a load or store"
                    ))
                }
            };
            if *on && kernel.ty(res).shape.len() < 2 {
                return bad(format!(
                    "{op} copied by rows: a block of {} dimension(s) (rows need two or more)",
                    kernel.ty(res).shape.len()
                ));
            }
        }
        Ok(())
    }

    /// Reads one line of the text form (`cpu ...`) into `self`; `None` when it is not one.
    pub fn parse_line(&mut self, line: &str) -> Option<()> {
        let rest = line.trim().strip_prefix("cpu ")?;
        let (body, why) = rest.split_once(" ; ")?;
        let why = why.to_string();
        let w: Vec<&str> = body.split_whitespace().collect();
        let onoff = |s: &str| match s {
            "on" => Some(true),
            "off" => Some(false),
            _ => None,
        };
        match w.as_slice() {
            [r] if r.starts_with("recipes=") => {
                self.recipes = onoff(r.strip_prefix("recipes=")?)?;
                self.recipes_why = why;
            }
            [d] if d.starts_with("lazy_depth=") => {
                self.lazy_depth = d.strip_prefix("lazy_depth=")?.parse().ok()?;
                self.lazy_depth_why = why;
            }
            [b] if b.starts_with("branch_free=") => {
                self.branch_free = onoff(b.strip_prefix("branch_free=")?)?;
                self.branch_free_why = why;
            }
            [v, what] if v.starts_with('%') => {
                let v = Value(v.strip_prefix('%')?.parse().ok()?);
                match *what {
                    "lazy" => self.set_lazy(v, true, why),
                    "stored" => self.set_lazy(v, false, why),
                    "unswitch" => self.set_unswitched(v, true, why),
                    "masked" => self.set_unswitched(v, false, why),
                    "table" => self.set_tabled(v, true, why),
                    "recomputed" => self.set_tabled(v, false, why),
                    _ => return None,
                }
            }
            [op, what] if op.starts_with("op") => {
                let op = OpId(op.strip_prefix("op")?.parse().ok()?);
                if let Some(s) = what.strip_prefix("peel=") {
                    let slots = match s {
                        "none" => Vec::new(),
                        s => s
                            .split(',')
                            .map(|x| x.parse().ok())
                            .collect::<Option<Vec<usize>>>()?,
                    };
                    self.set_peeled(op, slots, why);
                } else if let Some(s) = what.strip_prefix("shift=") {
                    let slots = match s {
                        "none" => Vec::new(),
                        s => s
                            .split(',')
                            .map(|x| x.parse().ok())
                            .collect::<Option<Vec<usize>>>()?,
                    };
                    self.set_shifted(op, slots, why);
                } else if let Some(s) = what.strip_prefix("rowcheck=") {
                    let once = match s {
                        "once" => true,
                        "each" => false,
                        _ => return None,
                    };
                    self.set_rows_checked_once(op, once, why);
                } else if let Some(s) = what.strip_prefix("inplace=") {
                    self.set_rows_in_place(op, onoff(s)?, why);
                } else if let Some(s) = what.strip_prefix("pack=") {
                    let slots = match s {
                        "off" => 0,
                        s => s.parse().ok()?,
                    };
                    self.set_packed(op, slots, why);
                } else if let Some(s) = what.strip_prefix("whole=") {
                    self.set_whole(op, onoff(s)?, why);
                } else if let Some(s) = what.strip_prefix("rows=") {
                    self.set_rows(op, onoff(s)?, why);
                } else {
                    let lanes = what.strip_prefix("lanes=")?.parse().ok()?;
                    self.set_lanes(op, lanes, why);
                }
            }
            _ => return None,
        }
        Some(())
    }

    /// An empty plan (nothing specialised), for [`Self::parse_line`] to fill.
    pub fn empty() -> CpuPlan {
        CpuPlan {
            recipes: false,
            recipes_why: String::new(),
            lazy_depth: LAZY_DEPTH,
            lazy_depth_why: String::new(),
            branch_free: false,
            branch_free_why: String::new(),
            lazy: BTreeMap::new(),
            unswitch: BTreeMap::new(),
            peel: BTreeMap::new(),
            lanes: BTreeMap::new(),
            whole: BTreeMap::new(),
            rows: BTreeMap::new(),
            table: BTreeMap::new(),
            shift: BTreeMap::new(),
            rowcheck: BTreeMap::new(),
            pack: BTreeMap::new(),
            inplace: BTreeMap::new(),
        }
    }
}

impl fmt::Display for CpuPlan {
    /// One line per decision, each `  cpu ... ; why`: `recipes=on`, `lazy_depth=16`,
    /// `branch_free=on`, `%N lazy` / `%N stored`, `%N unswitch` / `%N masked`, `opN peel=0,1`
    /// (`peel=none`), `opN lanes=32`, `opN whole=on`, `opN rows=on` (`off`: not done),
    /// `%N table` / `%N recomputed`, `opN shift=1,2` (`shift=none`), `opN rowcheck=once`
    /// (`each`), `opN pack=16` (`pack=off`), `opN inplace=on` (`off`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on = |b: bool| if b { "on" } else { "off" };
        writeln!(
            f,
            "  cpu recipes={} ; {}",
            on(self.recipes),
            self.recipes_why
        )?;
        writeln!(
            f,
            "  cpu lazy_depth={} ; {}",
            self.lazy_depth, self.lazy_depth_why
        )?;
        writeln!(
            f,
            "  cpu branch_free={} ; {}",
            on(self.branch_free),
            self.branch_free_why
        )?;
        for (v, (b, why)) in &self.lazy {
            let what = if *b { "lazy" } else { "stored" };
            writeln!(f, "  cpu {v} {what} ; {why}")?;
        }
        for (v, (b, why)) in &self.unswitch {
            let what = if *b { "unswitch" } else { "masked" };
            writeln!(f, "  cpu {v} {what} ; {why}")?;
        }
        for (op, (slots, why)) in &self.peel {
            writeln!(f, "  cpu {op} peel={} ; {why}", slot_list(slots))?;
        }
        for (op, (lanes, why)) in &self.lanes {
            writeln!(f, "  cpu {op} lanes={lanes} ; {why}")?;
        }
        for (op, (b, why)) in &self.whole {
            writeln!(f, "  cpu {op} whole={} ; {why}", on(*b))?;
        }
        for (op, (b, why)) in &self.rows {
            writeln!(f, "  cpu {op} rows={} ; {why}", on(*b))?;
        }
        for (v, (b, why)) in &self.table {
            let what = if *b { "table" } else { "recomputed" };
            writeln!(f, "  cpu {v} {what} ; {why}")?;
        }
        for (op, (slots, why)) in &self.shift {
            writeln!(f, "  cpu {op} shift={} ; {why}", slot_list(slots))?;
        }
        for (op, (b, why)) in &self.rowcheck {
            let what = if *b { "once" } else { "each" };
            writeln!(f, "  cpu {op} rowcheck={what} ; {why}")?;
        }
        for (op, (slots, why)) in &self.pack {
            let n = if *slots == 0 {
                "off".to_string()
            } else {
                slots.to_string()
            };
            writeln!(f, "  cpu {op} pack={n} ; {why}")?;
        }
        for (op, (b, why)) in &self.inplace {
            writeln!(f, "  cpu {op} inplace={} ; {why}", on(*b))?;
        }
        Ok(())
    }
}

/// `1,2`, or `none` for no slots.
fn slot_list(slots: &[usize]) -> String {
    if slots.is_empty() {
        return "none".into();
    }
    slots
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Per value, why it is filled into an array once (a table its index recipe reads) instead
/// of recomputed at every element that reads it: an integer `/` or `%` block that reaches a
/// broadcast to more elements through ops that keep its element count (elementwise ops,
/// `expand_dims`, `reshape`, `permute`). Recomputed, the broadcast's readers divide once per
/// element of the broadcast (a 64-row offset block `% M` read by a 64×64 pointer block: 4096
/// divisions); tabled, once per element of the block (64), and a table read costs less
/// than an integer division.
pub fn tables(k: &Kernel) -> Vec<Option<String>> {
    let n = k.values.len();
    let mut users: Vec<Vec<OpId>> = vec![Vec::new(); n];
    for (i, o) in k.ops.iter().enumerate() {
        o.op.for_each_operand(|v| {
            if v.index() < n {
                users[v.index()].push(OpId(i as u32));
            }
        });
    }
    let mut out = vec![None; n];
    for o in &k.ops {
        let Op::Binary { kind, .. } = &o.op else {
            continue;
        };
        if !matches!(kind, BinaryOp::Div | BinaryOp::Rem) {
            continue;
        }
        let Some(r) = o.results.get(0) else {
            continue;
        };
        let ty = k.ty(r);
        if !ty.is_block() || ty.ptr || !ty.dtype.is_int() {
            continue;
        }
        let count = ty.numel();
        let mut todo = vec![r];
        let mut seen = 0;
        let mut wide = None;
        while let Some(v) = todo.pop() {
            seen += 1;
            if seen > 64 || wide.is_some() {
                break;
            }
            for &u in &users[v.index()] {
                let op = &k.op(u).op;
                let Some(res) = k.op(u).results.get(0) else {
                    continue;
                };
                let m = k.ty(res).numel();
                match op {
                    Op::Broadcast { .. } if m > count => wide = Some(m),
                    op if m == count
                        && (op.is_elementwise()
                            || matches!(
                                op,
                                Op::ExpandDims { .. } | Op::Reshape { .. } | Op::Permute { .. }
                            )) =>
                    {
                        todo.push(res)
                    }
                    _ => {}
                }
            }
        }
        if let Some(m) = wide {
            let what = if *kind == BinaryOp::Div { "/" } else { "%" };
            out[r.index()] = Some(format!(
                "integer `{what}` over {count} elements read through a broadcast to {m}: {count} \
                 divisions per block instead of one at each of the {m}"
            ));
        }
    }
    out
}

/// Per value, why it may be computed where it is read, for one-thread programs: each
/// reader is an op of the region that defines the value and reads each element once
/// (elementwise ops, loads, stores, atomics, builtin reductions, the `yield` of a `for`
/// body, which assigns it to a loop variable element by element), and either
/// - the value has one use;
/// - it has one reader, an elementwise op reading it more than once at the same index
///   (`d * d`: the compiler evaluates it once);
/// - it is a load read by several such ops (other than `yield`): each re-reads the
///   argument, which is cheaper than storing the block and reading it back (the printer
///   re-reads only read-only arguments over consecutive offsets).
///
/// Loop and `if` operands are excluded: they are copied into variables before the region
/// runs.
pub fn lazy_values(k: &Kernel) -> Vec<Option<String>> {
    let n = k.values.len();
    let mut uses = vec![0u32; n];
    // Distinct readers of each value, in program order.
    let mut users: Vec<Vec<(usize, OpId)>> = vec![Vec::new(); n];
    let mut home: Vec<Option<usize>> = vec![None; n];
    for (ri, r) in k.regions.iter().enumerate() {
        for &id in &r.ops {
            let data = k.op(id);
            for v in data.results.iter() {
                home[v.index()] = Some(ri);
            }
            data.op.for_each_operand(|v| {
                uses[v.index()] += 1;
                if users[v.index()].last() != Some(&(ri, id)) {
                    users[v.index()].push((ri, id));
                }
            });
        }
    }
    (0..n)
        .map(|v| {
            let reads_once = |&(ri, id): &(usize, OpId)| {
                let for_body = || {
                    k.regions[ri]
                        .parent
                        .is_some_and(|p| matches!(k.op(p).op, Op::For { .. }))
                };
                home[v] == Some(ri)
                    && match &k.op(id).op {
                        // Assigned to the loop's variables, element by element.
                        Op::Yield { .. } => for_body(),
                        op if op.is_elementwise() => true,
                        Op::AddPtr { .. }
                        | Op::Load { .. }
                        | Op::Store { .. }
                        | Op::AtomicRmw { .. } => true,
                        Op::Reduce { kind, .. } => *kind != ReduceKind::Custom,
                        _ => false,
                    }
            };
            let is_load = || {
                k.def_op(Value(v as u32))
                    .is_some_and(|d| matches!(k.op(d).op, Op::Load { .. }))
            };
            match users[v].as_slice() {
                [] => None,
                [one] => {
                    let op = &k.op(one.1).op;
                    if !reads_once(one) {
                        None
                    } else if uses[v] == 1 {
                        Some(format!("one use, by `{}` of its region", op.name()))
                    } else if op.is_elementwise() {
                        Some(format!(
                            "read {} times at the same index by one `{}`",
                            uses[v],
                            op.name()
                        ))
                    } else if is_load() {
                        Some(format!(
                            "a load read {} times by one `{}` of its region",
                            uses[v],
                            op.name()
                        ))
                    } else {
                        None
                    }
                }
                many => (is_load()
                    && many
                        .iter()
                        .all(|u| reads_once(u) && !matches!(k.op(u.1).op, Op::Yield { .. })))
                .then(|| {
                    format!(
                        "a load read by {} ops of its region, each reading every element once",
                        many.len()
                    )
                }),
            }
        })
        .collect()
}

/// How the printer tests that every element of an unswitched mask is true, reading a few
/// of them ([`CpuPlan::unswitch_tests`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllTrue {
    /// The mask is one uniform value: that value.
    Uniform(Value),
    /// The mask is `lhs & rhs` (or a broadcast or reshape of it): both tests.
    And(Box<AllTrue>, Box<AllTrue>),
    /// The mask is `x pred bound` (or a broadcast or reshape of it), `bound` uniform and
    /// `x` a block of `dtype` (32- or 64-bit integers) whose `runs` aligned runs of `run`
    /// elements each step by `step` (0: equal, 1: consecutive, not wrapping): the compare
    /// holds everywhere when it holds at each run's ends (its first element when equal).
    Runs {
        /// The integer block.
        x: Value,
        /// The comparison, with `x` on its left.
        pred: CmpPred,
        /// The uniform bound.
        bound: Value,
        /// `x`'s element type.
        dtype: DType,
        /// Elements per run.
        run: u64,
        /// Runs in the block.
        runs: u64,
        /// Step between a run's consecutive elements (0 or 1).
        step: u64,
    },
}

impl fmt::Display for AllTrue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllTrue::Uniform(v) => write!(f, "{v} is"),
            AllTrue::And(a, b) => write!(f, "{a} and {b}"),
            AllTrue::Runs {
                x,
                pred,
                dtype,
                run,
                step,
                ..
            } => {
                let what = if *step == 0 { "equal" } else { "consecutive" };
                write!(
                    f,
                    "`{}` of {x} (runs of {run} {what} {dtype}) against a uniform bound holds \
                     at each run's ends",
                    pred.name()
                )
            }
        }
    }
}

/// The IR facts the unswitch and peel decisions read.
struct Facts<'k> {
    k: &'k Kernel,
    /// Per value: the printer holds it as one uniform value (scalars, constants, splats,
    /// and what elementwise ops, broadcasts and reshapes make of uniform values only).
    uniform: Vec<bool>,
    /// Per value: a block `bool` used as a load/store/atomic mask or a `where` condition
    /// and computed from index arithmetic only.
    masks: Vec<bool>,
    axis: Vec<AxisInfo>,
    /// Contiguity where a run-time check of the offsets passes
    /// ([`super::axis::analyse_unchecked`]).
    axis_unchecked: Vec<AxisInfo>,
}

impl<'k> Facts<'k> {
    fn new(k: &'k Kernel) -> Facts<'k> {
        let n = k.values.len();
        let mut memo = vec![None; n];
        let uniform = (0..n)
            .map(|i| uniform(k, Value(i as u32), &mut memo))
            .collect();
        Facts {
            k,
            uniform,
            masks: unswitchable_masks(k),
            axis: super::axis::analyse(k),
            axis_unchecked: super::axis::analyse_unchecked(k),
        }
    }

    /// Why an access through `ptr` may be checked once for the whole block and run as one
    /// plain loop (its offsets run +1 over the whole block), or why not.
    fn whole_block(&self, ptr: Value) -> std::result::Result<String, String> {
        let ty = self.k.ty(ptr);
        if !ty.is_block() || self.uniform[ptr.index()] {
            return Err(format!("{ptr} is not a block of distinct addresses"));
        }
        let (n, contig) = (ty.numel() as u64, self.axis[ptr.index()].contig);
        if contig < n {
            return Err(format!(
                "the offsets through {ptr} run +1 over {contig} of its {n} elements, not all"
            ));
        }
        Ok(format!(
            "offsets through {ptr} run +1 over all {n} elements: one bounds check for the \
             block, then one plain loop"
        ))
    }

    /// Why block load or store `op` moves its rows at once, when it pays: two or more
    /// dimensions, rows (along the last) of a cache line or more, at least two of them,
    /// chunks that hold no padding, offsets running +1 along each row or along chunks where
    /// a run-time check passes (each row then checks its own).
    fn rows(&self, op: OpId, layout: &impl Fn(usize) -> BlockedLayout) -> Option<String> {
        let data = self.k.op(op);
        let (ptr, res, what) = match (&data.op, data.result()) {
            (Op::Load { ptr, .. }, Some(res)) => (ptr, res, "one copy"),
            (Op::Store { ptr, value, .. }, _) => (ptr, *value, "its elements stored unchecked"),
            _ => return None,
        };
        let ty = self.k.ty(res);
        let c = *ty.shape.last()?;
        let lay = layout(ty.numel());
        let bytes = c * ty.dtype.size_bytes();
        let contig = self.axis_unchecked[ptr.index()].contig;
        let ok = ty.shape.len() >= 2
            && c < lay.n
            && bytes >= 64
            && !lay.has_idle_threads()
            && contig >= c.min(lay.vec) as u64;
        ok.then(|| {
            format!(
                "{} rows of {c} {} ({bytes} bytes, a cache line or more), offsets through {ptr} \
                 running +1 over {contig}: one bounds check per row, then {what}",
                lay.n / c,
                ty.dtype
            )
        })
    }

    /// Decides the unswitched masks of region `r` (of the regions the printer unswitches
    /// in when `split`), with `open` splits already open around it; nested regions first,
    /// as the printer lowers an op's regions before it looks at the op's results.
    fn plan_splits(
        &self,
        r: RegionId,
        split: bool,
        open: usize,
        out: &mut BTreeMap<Value, (bool, String)>,
    ) {
        let mut mine = 0;
        for &id in &self.k.region(r).ops {
            let data = self.k.op(id);
            match &data.op {
                Op::Yield { .. } => continue,
                Op::For { body, .. } => self.plan_splits(*body, true, open + mine, out),
                Op::While { cond, body, .. } => {
                    self.plan_splits(*cond, false, open + mine, out);
                    self.plan_splits(*body, true, open + mine, out);
                }
                Op::If {
                    then_region,
                    else_region,
                    ..
                } => {
                    self.plan_splits(*then_region, true, open + mine, out);
                    self.plan_splits(*else_region, true, open + mine, out);
                }
                op => {
                    for sub in op.regions() {
                        self.plan_splits(sub, false, open + mine, out);
                    }
                }
            }
            if !split {
                continue;
            }
            for v in data.results.iter() {
                if open + mine >= MAX_OPEN {
                    break;
                }
                if let Ok(why) = self.splittable(v) {
                    out.insert(v, (true, why));
                    mine += 1;
                }
            }
        }
    }

    /// Why mask `v` may be unswitched, or why not.
    fn splittable(&self, v: Value) -> std::result::Result<String, String> {
        if !self.masks.get(v.index()).copied().unwrap_or(false) {
            return Err("not a block mask built from index arithmetic alone".into());
        }
        if self.uniform[v.index()] {
            return Err("a uniform mask (nothing to unswitch)".into());
        }
        self.all_true(v)
            .map(|t| format!("index-only mask; all true when {t}, tested once"))
            .ok_or_else(|| {
                format!(
                    "no all-true test reading a few elements (runs of {MIN_RUN}+ consecutive or \
                     equal indices against a uniform bound)"
                )
            })
    }

    /// The test, reading a few elements, that every element of the bool block `v` is true;
    /// `None` when no such test is known.
    fn all_true(&self, v: Value) -> Option<AllTrue> {
        if self.uniform[v.index()] {
            return Some(AllTrue::Uniform(v));
        }
        match &self.k.op(self.k.def_op(v)?).op {
            Op::Binary {
                kind: BinaryOp::And,
                lhs,
                rhs,
            } => Some(AllTrue::And(
                Box::new(self.all_true(*lhs)?),
                Box::new(self.all_true(*rhs)?),
            )),
            // Every source element appears in the result and nothing else does.
            Op::Broadcast { src } | Op::ExpandDims { src, .. } | Op::Reshape { src } => {
                self.all_true(*src)
            }
            Op::Cmp { pred, lhs, rhs } => {
                self.compare_all(*pred, *lhs, *rhs, self.k.ty(v).numel() as u64)
            }
            _ => None,
        }
    }

    /// [`Self::all_true`] for `lhs pred rhs` over `n` elements: one side uniform, the other
    /// a 32- or 64-bit integer block whose aligned runs of [`MIN_RUN`]+ elements are
    /// constant or step by +1.
    fn compare_all(&self, pred: CmpPred, lhs: Value, rhs: Value, n: u64) -> Option<AllTrue> {
        let (x, bound, pred) = if self.uniform[rhs.index()] {
            (lhs, rhs, pred)
        } else if self.uniform[lhs.index()] {
            let flipped = match pred {
                CmpPred::Lt => CmpPred::Gt,
                CmpPred::Le => CmpPred::Ge,
                CmpPred::Gt => CmpPred::Lt,
                CmpPred::Ge => CmpPred::Le,
                CmpPred::Eq | CmpPred::Ne => return None,
            };
            (rhs, lhs, flipped)
        } else {
            return None;
        };
        if matches!(pred, CmpPred::Eq | CmpPred::Ne) {
            return None;
        }
        // 32- and 64-bit only: a run of at most 2^20 elements cannot wrap all the way round,
        // so `first <= last` is exactly "the run did not wrap".
        let dtype = self.k.ty(x).dtype;
        if !matches!(dtype, DType::I32 | DType::I64 | DType::U32 | DType::U64) {
            return None;
        }
        let info = self.axis[x.index()];
        let (run, step) = if info.cst >= MIN_RUN && n % info.cst == 0 {
            (info.cst, 0)
        } else if info.contig >= MIN_RUN && n % info.contig == 0 {
            (info.contig, 1)
        } else {
            return None;
        };
        Some(AllTrue::Runs {
            x,
            pred,
            bound,
            dtype,
            run,
            runs: n / run,
            step,
        })
    }

    /// For a `for` over `body` with initial values `init`: the carried slots that start as
    /// uniform blocks and why peeling pays, or why the loop cannot be peeled.
    fn peelable(
        &self,
        body: RegionId,
        init: &[Value],
    ) -> std::result::Result<(Vec<usize>, String), String> {
        let ops = &self.k.region(body).ops;
        if ops.len() > MAX_PEEL_OPS {
            return Err(format!(
                "a body of {} ops (at most {MAX_PEEL_OPS} are printed twice)",
                ops.len()
            ));
        }
        if let Some(&id) = ops.iter().find(|&&id| {
            let op = &self.k.op(id).op;
            op.regions().next().is_some() || matches!(op, Op::Dot { .. })
        }) {
            return Err(format!(
                "the body holds `{}` (only straight-line bodies without `tl.dot` are peeled)",
                self.k.op(id).op.name()
            ));
        }
        let slots: Vec<usize> = init
            .iter()
            .enumerate()
            .filter(|(_, v)| self.k.ty(**v).is_block() && self.uniform[v.index()])
            .map(|(s, _)| s)
            .collect();
        let why = format!(
            "{}-op straight-line body; carried block(s) {} start uniform: the first \
             iteration computes from one value instead of filled arrays",
            ops.len(),
            slots
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        Ok((slots, why))
    }
}

impl Facts<'_> {
    /// For a `for` over `body` with initial values `init`: the carried slots that are
    /// pointer blocks the body advances by a uniform offset (its `yield` gives `arg + off`
    /// for the slot's own argument `arg` and a uniform `off`), and why holding them as their
    /// start plus one scalar pays. Element `i` of the slot in iteration `t` is then its
    /// start's element `i` plus the sum of the offsets so far, in the offsets' wrapping
    /// arithmetic. Kernels that cast integers to pointers have none (such pointers carry
    /// their buffer in their bits).
    fn shiftable(&self, body: RegionId, init: &[Value]) -> (Vec<usize>, String) {
        let k = self.k;
        if k.ops.iter().any(|o| matches!(o.op, Op::IntToPtr { .. })) {
            return (Vec::new(), String::new());
        }
        let region = k.region(body);
        let Some(&last) = region.ops.last() else {
            return (Vec::new(), String::new());
        };
        let Op::Yield { values } = &k.op(last).op else {
            return (Vec::new(), String::new());
        };
        let slots: Vec<usize> = init
            .iter()
            .enumerate()
            .filter(|&(s, v)| {
                let ty = k.ty(*v);
                let (Some(&arg), Some(&y)) = (region.args.get(s + 1), values.get(s)) else {
                    return false;
                };
                ty.is_block()
                    && ty.ptr
                    && !self.uniform[v.index()]
                    && k.def_op(y).is_some_and(|d| {
                        matches!(k.op(d).op, Op::AddPtr { ptr, offset }
                            if ptr == arg && self.uniform[offset.index()])
                    })
            })
            .map(|(s, _)| s)
            .collect();
        let n = slots
            .iter()
            .map(|&s| k.ty(init[s]).numel())
            .max()
            .unwrap_or(0);
        let why = format!(
            "carried pointer block(s) {} advanced by a uniform offset each iteration: held as \
             their start plus one scalar, one add per iteration instead of {n}",
            slot_list(&slots)
        );
        (slots, why)
    }

    /// Why block load `op` of `plan` may check that its rows run +1 once before its loop,
    /// or why not: the plan copies it by rows, its offsets are not proven to run +1 along
    /// a row (so each row's copy checks them), and its pointer is a carried slot of a `for`
    /// that the plan holds as start plus shift, so every iteration's offsets are the
    /// start's plus one uniform value, and a row runs +1 exactly when the start's does.
    fn rows_once(&self, op: OpId, plan: &CpuPlan) -> std::result::Result<String, String> {
        let k = self.k;
        let (Op::Load { ptr, .. }, Some(res)) = (&k.op(op).op, k.op(op).result()) else {
            return Err("not a load".into());
        };
        if !plan.rows(op) {
            return Err("not copied by rows".into());
        }
        let c = k.ty(res).shape.last().copied().unwrap_or(1) as u64;
        if self.axis[ptr.index()].contig >= c {
            return Err(format!(
                "the offsets through {ptr} are proven to run +1 along rows (nothing to check)"
            ));
        }
        let Some(ValueDef::RegionArg(r, i)) = k.value(*ptr).map(|v| v.def) else {
            return Err(format!("{ptr} is not a loop's carried value"));
        };
        let Some(for_op) = k.region(r).parent.filter(|&p| {
            matches!(k.op(p).op, Op::For { .. })
                && i >= 1
                && plan.shifted(p).contains(&(i as usize - 1))
        }) else {
            return Err(format!(
                "{ptr} is not a carried slot the plan holds as start plus shift"
            ));
        };
        Ok(format!(
            "rows of {c} through {ptr}, slot {} of {for_op} held as start plus shift: they run \
             +1 in every iteration exactly when they do at the start, checked once before the loop",
            i - 1
        ))
    }

    /// Why block load `op` of `plan` can be read in place by its `tl.dot`, or why not: the
    /// plan copies it by rows, it is an `f32` tile read only as operand A of `tl.dot`s of
    /// `f32` B and accumulator whose rows of C go four at a time along columns in vectors
    /// of 16 (`M % 4 == 0`, `N % 16 == 0`), and its pointer comes from a read-only argument
    /// (so a row read when the dot runs holds what the load would have copied).
    fn in_place_rows(&self, op: OpId, plan: &CpuPlan) -> std::result::Result<String, String> {
        let k = self.k;
        let (Op::Load { ptr, .. }, Some(res)) = (&k.op(op).op, k.op(op).result()) else {
            return Err("not a load".into());
        };
        if !plan.rows(op) || plan.whole(op) || plan.lazy(res) {
            return Err("not copied by rows (and only by rows: not whole, not lazy)".into());
        }
        let ty = k.ty(res);
        if ty.shape.len() != 2 || ty.dtype != DType::F32 {
            return Err(format!("{ty} is not an f32 tile"));
        }
        let mut dots = 0;
        for o in &k.ops {
            let mut used = false;
            o.op.for_each_operand(|v| used |= v == res);
            if !used {
                continue;
            }
            let Op::Dot { a, b, acc, .. } = &o.op else {
                return Err(format!(
                    "{res} is read by `{}`, not only by `tl.dot`s",
                    o.op.name()
                ));
            };
            let (tb, tc) = (k.ty(*b), k.ty(*acc));
            if *a != res || *b == res || *acc == res {
                return Err(format!("{res} is not only a `tl.dot`'s operand A"));
            }
            if tb.dtype != DType::F32 || tc.dtype != DType::F32 || tc.shape.len() != 2 {
                return Err(format!("a `tl.dot` of {tb} into {tc}, not f32"));
            }
            let (m, n) = (tc.shape[0], tc.shape[1]);
            if m % 4 != 0 || n % 16 != 0 {
                return Err(format!(
                    "C of {m}x{n} (rows of C go 4 at a time, columns 16)"
                ));
            }
            dots += 1;
        }
        if dots == 0 {
            return Err(format!("{res} is no `tl.dot`'s operand A"));
        }
        let param = self
            .source_param(*ptr)
            .ok_or_else(|| format!("{ptr} does not come from one argument"))?;
        let p = &k.params[param];
        if p.stored {
            return Err(format!("argument `{}` is written by the kernel", p.name));
        }
        Ok(format!(
            "`tl.dot` operand A, {ty} of read-only `{}`: whole rows read where they lie",
            p.name
        ))
    }

    /// The argument pointer `v` points into, following offsets, shape ops and the `for`
    /// slots that carry it (starting from it and advanced from themselves by offsets).
    fn source_param(&self, v: Value) -> Option<usize> {
        let k = self.k;
        // Back through offsets and shape ops: the value reached (a parameter or a slot).
        let root = |mut v: Value| loop {
            match k.value(v).map(|d| d.def) {
                Some(ValueDef::OpResult(d, _)) => match &k.op(d).op {
                    Op::AddPtr { ptr, .. } => v = *ptr,
                    Op::Splat { src }
                    | Op::Broadcast { src }
                    | Op::ExpandDims { src, .. }
                    | Op::Reshape { src } => v = *src,
                    _ => return None,
                },
                _ => return Some(v),
            }
        };
        let mut v = root(v)?;
        loop {
            match k.value(v)?.def {
                ValueDef::Param(p) => return Some(p as usize),
                ValueDef::RegionArg(r, i) if i > 0 => {
                    let parent = k.region(r).parent?;
                    let Op::For { init, .. } = &k.op(parent).op else {
                        return None;
                    };
                    let slot = i as usize - 1;
                    let yielded = match k.region(r).ops.last().map(|&y| &k.op(y).op) {
                        Some(Op::Yield { values }) => *values.get(slot)?,
                        _ => return None,
                    };
                    if root(yielded)? != v {
                        return None;
                    }
                    v = root(*init.get(slot)?)?;
                }
                _ => return None,
            }
        }
    }

    /// The most slots of a cache of packed tiles for block load `op` of `plan`, and why it
    /// pays, or why it cannot be packed: the plan copies it by rows, it is the B operand of
    /// a `tl.dot`, its pointer is a carried slot of the innermost enclosing loop, a `for`
    /// that the plan holds as start plus shift (its trip counter picks the slot) and does
    /// not peel, and the slot starts from a read-only argument (what one program copied is
    /// what the next would read at the same offsets).
    fn packable(&self, op: OpId, plan: &CpuPlan) -> std::result::Result<(usize, String), String> {
        let k = self.k;
        let (Op::Load { ptr, .. }, Some(res)) = (&k.op(op).op, k.op(op).result()) else {
            return Err("not a load".into());
        };
        if !plan.rows(op) {
            return Err("not copied by rows".into());
        }
        let ty = k.ty(res);
        if ty.shape.len() != 2 {
            return Err(format!(
                "a block of {} dimension(s), not a tile",
                ty.shape.len()
            ));
        }
        if !k
            .ops
            .iter()
            .any(|o| matches!(o.op, Op::Dot { b, .. } if b == res))
        {
            return Err(format!("{res} is no `tl.dot`'s operand B"));
        }
        let Some(ValueDef::RegionArg(r, i)) = k.value(*ptr).map(|v| v.def) else {
            return Err(format!("{ptr} is not a loop's carried value"));
        };
        let Some(for_op) = k.region(r).parent else {
            return Err(format!("{ptr} is not a loop's carried value"));
        };
        let Op::For { init, .. } = &k.op(for_op).op else {
            return Err(format!("{ptr} is not carried by a `for`"));
        };
        let slot = (i as usize).wrapping_sub(1);
        if i == 0 || !plan.shifted(for_op).contains(&slot) || !plan.peeled(for_op).is_empty() {
            return Err(format!(
                "{ptr} is not a carried slot the plan holds as start plus shift in a loop it \
                 does not peel"
            ));
        }
        // The innermost loop around the load is that `for`.
        let mut reg = k.op(op).parent;
        while let Some(p) = k.region(reg).parent {
            if matches!(k.op(p).op, Op::For { .. } | Op::While { .. }) {
                if p != for_op {
                    return Err(format!("{op} sits in a loop inside {for_op}"));
                }
                break;
            }
            reg = k.op(p).parent;
        }
        let mut v = init[slot];
        let param = loop {
            match k.value(v).map(|d| d.def) {
                Some(ValueDef::Param(p)) => break p as usize,
                Some(ValueDef::OpResult(d, _)) => match &k.op(d).op {
                    Op::AddPtr { ptr, .. } => v = *ptr,
                    Op::Splat { src }
                    | Op::Broadcast { src }
                    | Op::ExpandDims { src, .. }
                    | Op::Reshape { src } => v = *src,
                    _ => return Err(format!("{ptr} does not start from one argument")),
                },
                _ => return Err(format!("{ptr} does not start from one argument")),
            }
        };
        let p = &k.params[param];
        if p.stored {
            return Err(format!("argument `{}` is written by the kernel", p.name));
        }
        let bytes = ty.numel() * ty.dtype.size_bytes();
        let slots = MAX_PACK_SLOTS.min(PACK_BYTES / bytes.max(1));
        if slots < 2 {
            return Err(format!(
                "tiles of {bytes} bytes (two must fit in {PACK_BYTES})"
            ));
        }
        Ok((
            slots,
            format!(
                "`tl.dot` operand B, {} tile of read-only `{}` through {ptr} (slot {slot} of \
                 {for_op}, start plus shift): the programs that share its column block read \
                 the same tiles, kept in {slots} slots of {bytes} bytes per worker thread, \
                 keyed by their rows' offsets",
                ty, p.name
            ),
        ))
    }
}

/// Whether the printer holds `v` as one uniform value.
fn uniform(k: &Kernel, v: Value, memo: &mut Vec<Option<bool>>) -> bool {
    if k.ty(v).is_scalar() {
        return true;
    }
    if let Some(r) = memo[v.index()] {
        return r;
    }
    memo[v.index()] = Some(false);
    let mut all = |vs: &[Value]| vs.iter().all(|x| uniform(k, *x, memo));
    let r = match k.def_op(v).map(|id| &k.op(id).op) {
        Some(Op::Constant { .. } | Op::Splat { .. }) => true,
        Some(
            Op::Unary { src, .. }
            | Op::Cast { src }
            | Op::Bitcast { src }
            | Op::IntToPtr { src }
            | Op::Broadcast { src }
            | Op::ExpandDims { src, .. }
            | Op::Reshape { src }
            | Op::Permute { src, .. }
            | Op::Split { src },
        ) => all(&[*src]),
        Some(Op::Binary { lhs, rhs, .. } | Op::Cmp { lhs, rhs, .. }) => all(&[*lhs, *rhs]),
        Some(Op::AddPtr { ptr, offset }) => all(&[*ptr, *offset]),
        Some(Op::Select {
            cond,
            on_true,
            on_false,
        }) => all(&[*cond, *on_true, *on_false]),
        Some(Op::Fma { a, b, c }) => all(&[*a, *b, *c]),
        Some(Op::Clamp { src, lo, hi, .. }) => all(&[*src, *lo, *hi]),
        Some(Op::Philox { counters, key, .. }) => all(counters) && all(key),
        _ => false,
    };
    memo[v.index()] = Some(r);
    r
}

/// Per value: a block `bool` used as a load/store/atomic mask or a `where` condition and
/// computed from index arithmetic only.
fn unswitchable_masks(k: &Kernel) -> Vec<bool> {
    let n = k.values.len();
    let mut used_as_mask = vec![false; n];
    for o in &k.ops {
        let m = match &o.op {
            Op::Load { mask, .. } | Op::Store { mask, .. } | Op::AtomicRmw { mask, .. } => *mask,
            Op::Select { cond, .. } => Some(*cond),
            _ => None,
        };
        if let Some(m) = m {
            used_as_mask[m.index()] = true;
        }
    }
    let mut memo: Vec<Option<bool>> = vec![None; n];
    (0..n)
        .map(|i| {
            let ty = &k.values[i].ty;
            used_as_mask[i]
                && ty.is_block()
                && ty.dtype == DType::Bool
                && index_only(k, Value(i as u32), &mut memo)
        })
        .collect()
}

/// Whether `v` is a uniform scalar or a block built from index arithmetic alone.
fn index_only(k: &Kernel, v: Value, memo: &mut Vec<Option<bool>>) -> bool {
    if let Some(r) = memo[v.index()] {
        return r;
    }
    // Cycles cannot occur (SSA), but a loop-carried block has no defining op: not indexed.
    memo[v.index()] = Some(false);
    let r = k.ty(v).is_scalar()
        || match k.def_op(v).map(|id| &k.op(id).op) {
            Some(Op::ProgramId { .. } | Op::NumPrograms { .. })
            | Some(Op::Constant { .. } | Op::Arange { .. }) => true,
            Some(
                Op::Splat { src }
                | Op::Broadcast { src }
                | Op::ExpandDims { src, .. }
                | Op::Reshape { src }
                | Op::Cast { src },
            ) => index_only(k, *src, memo),
            Some(Op::Binary { lhs, rhs, .. } | Op::Cmp { lhs, rhs, .. }) => {
                index_only(k, *lhs, memo) && index_only(k, *rhs, memo)
            }
            Some(Op::Select {
                cond,
                on_true,
                on_false,
            }) => {
                index_only(k, *cond, memo)
                    && index_only(k, *on_true, memo)
                    && index_only(k, *on_false, memo)
            }
            _ => false,
        };
    memo[v.index()] = Some(r);
    r
}
