//! Spelling of [`crate::opt::plan::Decision::Ahead`] on CUDA: a `for` loop's `tl.dot`
//! operand loads become asynchronous copies (`cp.async`) into a ring of `stages`
//! shared-memory buffers, issued `stages - 1` iterations ahead of the dot that reads them.
//!
//! Before the loop, iterations `0 .. stages - 1` are issued (each its own commit group).
//! At the top of iteration `t` the program waits until iteration `t`'s group has landed
//! (`cp.async.wait_group stages - 2`), passes a barrier (which also tells every thread that
//! the buffer read in iteration `t - 1` is free), issues iteration `t + stages - 1` into
//! that buffer, and the dot reads buffer `t % stages` with `ldmatrix`, as it would read
//! its own staging buffer. Each buffer holds A and B in the layout the dot reads
//! ([`ring_operand_tile`]): rows padded by 8 elements for `ldmatrix`, or unpadded in the
//! 128-byte swizzle for `wgmma`.
//!
//! A chunk of a thread's elements that lies in one row of the tile is copied with one
//! 4-, 8- or 16-byte `cp.async` when its elements are consecutive in memory and aligned; a
//! mask constant over the chunk gives the copy's source size (0: the chunk is filled with
//! zeros, nothing read). Any other chunk is written element by element (masked elements
//! take 0, as `other` is 0 or absent), so every load's meaning is kept. A loop that adds
//! the same step to every pointer keeps each chunk's first offset before it, and tests
//! once whether its offsets run +1 where the axis analysis does not prove it; pointers the
//! loop recomputes from its induction variable, when affine in it
//! ([`crate::opt::pipeline::affine_in_iv`]), are copied from their first offsets plus `t`
//! times their change per iteration. One flag, the same for the whole block, then tells
//! whether every chunk of every thread is whole and aligned in every iteration, and picks
//! between two versions of the loop ([`Lowering::for_loop`]): one issues its copies with
//! no test at all, the other keeps the element-wise path.

use std::collections::HashMap;

use super::lower::{unsigned_offset, unsupported_on, Lowering, Repr};
use crate::error::Result;
use crate::ir::{Op, OpId, RegionId, Value};
use crate::opt::pipeline::{ring_loads, AheadLoad};
use crate::opt::plan::{
    dot_dims, ring_operand_align, ring_operand_tile, WGMMA_RING_ALIGN, WGMMA_SWIZZLE_COLS,
};

/// The ring of one loop.
pub(super) struct Ring {
    /// Each load issued ahead, with its byte offset inside a buffer.
    loads: Vec<(AheadLoad, usize)>,
    /// Buffers.
    stages: usize,
    /// Bytes of one buffer.
    stage_bytes: usize,
    /// A dot reading the ring is spelled as `wgmma`: the ring starts 1024-byte aligned and
    /// the async proxy is fenced before the dot reads what the copies wrote.
    wgmma: bool,
}

/// Element offset, in a ring buffer's tile of `rows` rows of `row` elements (pitch
/// `pitch`), of the element at flat index `l` of the tile: row-major with padded rows, or
/// for a `wgmma` operand the swizzled blocks of [`ring_operand_tile`].
fn tile_offset(wgmma: bool, (rows, row, pitch): (usize, usize, usize), l: &str) -> String {
    if !wgmma {
        return format!("({l} / {row}u) * {pitch}u + {l} % {row}u");
    }
    let w = WGMMA_SWIZZLE_COLS;
    format!(
        "({l} % {row}u) / {w}u * {}u + ({l} / {row}u) * {w}u + (((({l} % {w}u) >> 3) ^ (({l} / {row}u) & 7u)) << 3) + ({l} & 7u)",
        rows * w
    )
}

/// The flat index, in a `[k, n]` operand copied along K, of element `e` of the chunk at
/// column `tm_n` starting at row `tm_k` ([`Lowering::open_k_chunks`]).
fn k_chunk_flat(n: usize, e: usize) -> String {
    format!("((tm_k + {e}u) * {n}u + tm_n)")
}

impl Lowering<'_> {
    /// Whether every chunk of `v` elements of load `l` through `ptr` starts a multiple of
    /// `v` elements from the base, in every iteration: then the base's alignment is the
    /// chunks'.
    ///
    /// Where the integer analysis does not prove the chunk's offsets run +1, every use of
    /// this answer also tests that they do (`tm_cr`), so the facts that hold under that
    /// test ([`crate::opt::axis::analyse_unchecked`]) apply.
    fn chunks_follow_base(&self, ptr: Value, l: &AheadLoad, v: usize) -> bool {
        let facts = if self.axis[ptr.index()].contig >= v as u64 {
            &self.axis
        } else {
            &self.axis_unchecked
        };
        let whole = |x: Value| facts[x.index()].div >= v as u64;
        whole(ptr) && whole(l.step)
    }

    /// The ring of `for` loop `id`, when the plan issues its dot operand loads ahead.
    pub(super) fn ring_of(&self, id: OpId) -> Option<Ring> {
        let mut loads = ring_loads(self.k, id, self.plan.resident(id), self.plan.vec)?;
        let stages = self.plan.ahead(loads.first()?.load)?;
        if loads
            .iter()
            .any(|l| self.plan.ahead(l.load) != Some(stages))
        {
            return None;
        }
        loads.sort_by_key(|l| (l.dot, l.operand));
        let mut off = 0usize;
        let mut out = Vec::new();
        let wgmma = loads.iter().any(|l| self.plan.wgmma(l.dot));
        for l in loads {
            let (rows, _, pitch) =
                ring_operand_tile(&self.plan, l.dot, dot_dims(self.k, l.dot)?, l.operand);
            let bytes = rows * pitch * self.edt(self.k.op(l.load).result()?).size_bytes();
            out.push((l, off));
            off += bytes.next_multiple_of(ring_operand_align(wgmma));
        }
        Some(Ring {
            loads: out,
            stages,
            stage_bytes: off,
            wgmma,
        })
    }

    /// Lowers `ops` (pure ops of `body`) again with the induction variable read as `iv`.
    pub(super) fn relower(&mut self, body: RegionId, ops: &[OpId], iv: &str) -> Result<()> {
        let arg = self.k.region(body).args[0];
        let saved = self.reprs[arg.index()].clone();
        self.set(arg, Repr::Scalar(iv.to_string()));
        let mark = self.layouts.len();
        let r = ops.iter().try_for_each(|&op| self.op(op));
        self.layouts.truncate(mark);
        self.reprs[arg.index()] = saved;
        r
    }

    /// The chunk width load `i` of `ring` is copied in, when it is copied a whole chunk
    /// per `cp.async` (4, 8 or 16 bytes of one tile row, every thread busy).
    fn ring_chunk(&self, ring: &Ring, i: usize) -> Option<usize> {
        let (l, _) = &ring.loads[i];
        let res = self.k.op(l.load).result()?;
        let dims = dot_dims(self.k, l.dot)?;
        let (_, row, _) = ring_operand_tile(&self.plan, l.dot, dims, l.operand);
        let lay = self.layout(res);
        let v = lay.vec;
        let bytes = v * self.edt(res).size_bytes();
        (matches!(bytes, 4 | 8 | 16) && row % v == 0 && !lay.has_idle_threads()).then_some(v)
    }

    /// Before the loop, for each load of `ring` copied in whole chunks: each chunk's first
    /// offset at the loop's start (`tm_co<load>`), and whether the chunk's offsets run +1
    /// (`tm_cr<load>`) where the axis analysis does not prove it. The loop adds the same
    /// step to every offset, so both hold for every iteration, and the copies need neither
    /// the carried offsets nor a test of each element.
    ///
    /// Returns what makes every carried load's chunks whole, aligned +1 runs (C conditions,
    /// tested once before the loop), or `None` when some load can never be copied so;
    /// recomputed loads are left to [`Self::ring_affine_starts`].
    fn ring_chunk_starts(&mut self, ring: &Ring) -> Result<Option<Vec<String>>> {
        // Whether every chunk of this thread is aligned and runs +1, and every mask is
        // constant over each chunk: then each iteration copies with `cp.async` alone.
        let mut fast: Option<Vec<String>> = Some(Vec::new());
        for i in 0..ring.loads.len() {
            let Some(v) = self.ring_chunk(ring, i) else {
                fast = None;
                continue;
            };
            let (l, _) = &ring.loads[i];
            if l.carried.is_none() {
                // Recomputed for each iteration: only its affine form can be tested once.
                continue;
            }
            let load = self.k.op(l.load);
            let (Some(res), Op::Load { ptr, mask, .. }) = (load.result(), &load.op) else {
                fast = None;
                continue;
            };
            let (ptr, mask) = (*ptr, *mask);
            let Repr::Block(offs) = self.repr(ptr).clone() else {
                fast = None;
                continue;
            };
            let lay = self.layout(res);
            let chunks = lay.regs() / v;
            let ot = self.cty(self.off_dtype)?;
            let uot = unsigned_offset(self.off_dtype);
            let id = l.load.index();
            let co = format!("tm_co{id}");
            self.line(format!("{ot} {co}[{chunks}];"));
            let proven = self.axis[ptr.index()].contig >= v as u64;
            let cr = (!proven).then(|| format!("tm_cr{id}"));
            if let Some(cr) = &cr {
                self.line(format!("bool {cr}[{chunks}];"));
            }
            self.line("#pragma unroll");
            self.open(format!("for (uint tm_c = 0; tm_c < {chunks}u; ++tm_c)"));
            self.line(format!("{co}[tm_c] = {offs}[tm_c * {v}u];"));
            if let Some(cr) = &cr {
                let runs: Vec<String> = (1..v)
                    .map(|e| {
                        format!(
                            "{offs}[tm_c * {v}u + {e}u] == {ot}({uot}({offs}[tm_c * {v}u]) + {e}u)"
                        )
                    })
                    .collect();
                self.line(format!("{cr}[tm_c] = {};", runs.join(" && ")));
            }
            self.close();
            let bytes = v * self.edt(res).size_bytes();
            let mask_ok = mask.is_none_or(|m| self.axis[m.index()].cst >= v as u64);
            match (&mut fast, self.chunks_follow_base(ptr, l, v) && mask_ok) {
                (Some(f), true) => {
                    let base = self.param_name(ptr)?;
                    f.push(format!(
                        "(reinterpret_cast<ulong>({base}) & {}ul) == 0",
                        bytes - 1
                    ));
                    if let Some(cr) = &cr {
                        f.extend((0..chunks).map(|c| format!("{cr}[{c}]")));
                    }
                }
                _ => fast = None,
            }
            self.ring_chunks.insert(l.load, (co, cr));
        }
        Ok(fast)
    }

    /// The recipe (element-index expression) of the first value of carried slot `slot`
    /// of the `for` loop with body `body`, when it has one.
    fn carried_init(&self, body: RegionId, slot: usize) -> Option<String> {
        let f = self.k.region(body).parent?;
        let Op::For { init, .. } = &self.k.op(f).op else {
            return None;
        };
        let v = *init.get(slot)?;
        match self.repr(v) {
            Repr::Block(_) => self.recipe(v),
            _ => None,
        }
    }

    /// Copies load `l`'s elements of iteration `abs` of the loop (counted from its first)
    /// into buffer `stage`, `dist` steps after the carried pointers' (C expressions).
    fn ring_issue(
        &mut self,
        ring: &Ring,
        i: usize,
        stage: &str,
        (dist, abs): (usize, &str),
        fast: bool,
    ) -> Result<()> {
        let (l, off) = &ring.loads[i];
        if l.operand == 1 && self.plan.kmajor(l.dot) {
            return self.ring_issue_along_k(l, *off, stage, (ring.stage_bytes, abs), fast);
        }
        let load = self.k.op(l.load);
        let (Some(res), Op::Load { ptr, mask, .. }) = (load.result(), &load.op) else {
            return Ok(());
        };
        let (ptr, mask) = (*ptr, *mask);
        let dims = dot_dims(self.k, l.dot)
            .ok_or_else(|| unsupported_on(self.d, self.k, "a batched dot issued ahead"))?;
        let tile = ring_operand_tile(&self.plan, l.dot, dims, l.operand);
        let swz = self.plan.wgmma(l.dot);
        let dt = self.edt(res);
        let ct = self.cty(dt)?;
        let base = self.param_name(ptr)?;
        let Repr::Block(offs) = self.repr(ptr).clone() else {
            return Err(unsupported_on(
                self.d,
                self.k,
                "a dot operand issued ahead through uniform pointers",
            ));
        };
        let ot = self.cty(self.off_dtype)?;
        let uot = unsigned_offset(self.off_dtype);
        let lay = self.layout(res);
        let step = self.el(l.step, "0u");
        // Pointers the body computes from the induction variable were just recomputed for
        // this iteration (`ring_issue_all`): their offsets are the ones to read.
        let recomputed = l.carried.is_none();
        // Offsets as the carried ones `dist` steps on, or from the loop's start `abs` steps
        // on (unsigned, so a wrap is not undefined).
        let addr = |lw: &Self, i: &str| {
            if recomputed {
                return format!("{offs}[{i}]");
            }
            format!(
                "{ot}({uot}({offs}[{i}]) + {uot}({dist}) * {uot}({}))",
                lw.el(l.step, i)
            )
        };
        let from_start =
            |first: &str| format!("{ot}({uot}({first}) + {uot}({abs}) * {uot}({step}))");
        // A mask element: recomputed from its element index where it has a recipe.
        let masked = |lw: &Self, i: &str, flat: &str| {
            mask.map(|m| match lw.recipe(m) {
                Some(r) => r.replace(super::lower::FLAT, &format!("({flat})")),
                None => lw.el(m, i),
            })
        };
        self.line(format!(
            "{ct}* const tm_rb = reinterpret_cast<{ct}*>(tm_ring + ({stage}) * {}u + {off}u);",
            ring.stage_bytes
        ));
        let chunks = match self.ring_chunks.get(&l.load).cloned() {
            Some((co, cr)) => Some((Some(co), cr)),
            // A recomputed pointer's chunks: offsets from its registers, the +1 run tested
            // here where the axis analysis does not prove it.
            None if recomputed => {
                let v = self.ring_chunk(ring, i).unwrap_or(1);
                let proven = self.axis[ptr.index()].contig >= v as u64;
                let cr = (!proven && v > 1).then(|| {
                    (1..v)
                        .map(|e| format!("{offs}[tm_i + {e}u] == {ot}({uot}({offs}[tm_i]) + {e}u)"))
                        .collect::<Vec<_>>()
                        .join(" && ")
                });
                Some((None, cr.map(|c| format!("({c})"))))
            }
            None => None,
        };
        match (self.ring_chunk(ring, i), chunks) {
            (Some(v), Some((co, cr))) => {
                let bytes = v * dt.size_bytes();
                // Unrolled, so the per-chunk arrays stay in registers.
                self.line("#pragma unroll");
                self.open_chunks(lay, true);
                // A chunk stays inside one 16-byte unit of the swizzle, so its elements
                // stay consecutive.
                self.line(format!(
                    "{ct}* const tm_d = tm_rb + {};",
                    tile_offset(swz, tile, "tm_l")
                ));
                let first = match (&co, self.affine_offset(l, abs)?) {
                    (Some(co), _) => from_start(&format!("{co}[tm_c]")),
                    (None, Some(o)) => o,
                    (None, None) => format!("{offs}[tm_i]"),
                };
                self.line(format!("const {ct}* const tm_s = {base} + {first};"));
                // Offsets that are multiples of the chunk leave only the base's alignment
                // to test: the same for every chunk, so the compiler hoists it.
                let aligned = if self.chunks_follow_base(ptr, l, v) {
                    base.clone()
                } else {
                    "tm_s".to_string()
                };
                let mut conds = vec![format!(
                    "(reinterpret_cast<ulong>({aligned}) & {}ul) == 0",
                    bytes - 1
                )];
                if let Some(cr) = &cr {
                    conds.push(if co.is_some() {
                        format!("{cr}[tm_c]")
                    } else {
                        cr.clone()
                    });
                }
                // A mask constant over each chunk copies the chunk or fills it with zeros
                // (`cp.async` reads `src-size` bytes, 0 when masked off, and fills the
                // rest); one that varies inside it copies only chunks wholly in.
                let constant = mask.is_some_and(|m| self.axis[m.index()].cst >= v as u64);
                let size = match (mask, constant) {
                    (None, _) => bytes.to_string(),
                    (Some(_), true) => {
                        let m0 = masked(self, "tm_i", "tm_l").unwrap_or_default();
                        format!("({m0}) ? {bytes}u : 0u")
                    }
                    (Some(_), false) => {
                        for e in 0..v {
                            if let Some(m) =
                                masked(self, &format!("tm_i + {e}u"), &format!("tm_l + {e}u"))
                            {
                                conds.push(m);
                            }
                        }
                        bytes.to_string()
                    }
                };
                let kind = if bytes == 16 { "cg" } else { "ca" };
                let copy = format!(
                    "asm volatile(\"cp.async.{kind}.shared.global [%0], [%1], {bytes}, %2;\" :: \"r\"((uint)__cvta_generic_to_shared(tm_d)), \"l\"(tm_s), \"r\"({size}) : \"memory\");"
                );
                if fast {
                    // Every chunk checked before the loop (`tm_fast`).
                    self.line(copy);
                    self.close();
                    return Ok(());
                }
                self.open(format!("if ({})", conds.join(" && ")));
                self.line(copy);
                self.indent -= 1;
                self.line("} else {");
                self.indent += 1;
                // Misaligned or not a +1 run: element by element, each offset from the
                // loop's start (the recipe of the carried pointers' first value when it
                // has one, else the carried offsets).
                // A recomputed pointer's offsets at any element come from its recipe.
                let first = match l.carried {
                    Some(c) => self.carried_init(self.k.op(l.load).parent, c),
                    None => self.recipe(ptr),
                };
                // Without a recipe the offsets array is read at `tm_i + tm_e`: unrolled, so
                // it stays in registers.
                self.line(if first.is_none() && recomputed {
                    "#pragma unroll"
                } else {
                    "#pragma unroll 1"
                });
                self.open(format!("for (uint tm_e = 0; tm_e < {v}u; ++tm_e)"));
                let a = match &first {
                    Some(r) if recomputed => {
                        format!("{base}[{}]", r.replace(super::lower::FLAT, "(tm_l + tm_e)"))
                    }
                    Some(r) => format!(
                        "{base}[{}]",
                        from_start(&r.replace(super::lower::FLAT, "(tm_l + tm_e)"))
                    ),
                    None => format!("{base}[{}]", addr(self, "tm_i + tm_e")),
                };
                match masked(self, "tm_i + tm_e", "tm_l + tm_e") {
                    Some(m) => self.line(format!("tm_d[tm_e] = ({m}) ? {a} : {ct}(0);")),
                    None => self.line(format!("tm_d[tm_e] = {a};")),
                }
                self.close();
                self.close();
                self.close();
            }
            _ => {
                let guard = lay.has_idle_threads();
                // Unrolled, so the offsets array stays in registers.
                self.line("#pragma unroll");
                self.open_regs(lay, guard);
                let a = format!("{base}[{}]", addr(self, "tm_i"));
                let dst = format!("tm_rb[{}]", tile_offset(swz, tile, "tm_l"));
                match masked(self, "tm_i", "tm_l") {
                    Some(m) => self.line(format!("{dst} = ({m}) ? {a} : {ct}(0);")),
                    None => self.line(format!("{dst} = {a};")),
                }
                self.close();
            }
        }
        Ok(())
    }

    /// Copies load `l`, operand B `[k, n]` of a dot whose ring holds B column by column
    /// ([`crate::opt::plan::KernelPlan::kmajor`]), into its tile `[n][k]` at byte `off` of
    /// buffer `stage`: 16 bytes along K per `cp.async`, each element's offset and mask from
    /// their recipes (recomputed for this iteration). A chunk whose offsets do not run +1,
    /// are misaligned, or whose mask is mixed is copied element by element; where
    /// [`crate::opt::axis::step_along`] proves the offsets step by 1 along K, or the mask
    /// constant along it, those are not tested.
    fn ring_issue_along_k(
        &mut self,
        l: &AheadLoad,
        off: usize,
        stage: &str,
        (stage_bytes, abs): (usize, &str),
        fast: bool,
    ) -> Result<()> {
        let load = self.k.op(l.load);
        let (Some(res), Op::Load { ptr, mask, .. }) = (load.result(), &load.op) else {
            return Ok(());
        };
        let (ptr, mask) = (*ptr, *mask);
        let dims = dot_dims(self.k, l.dot)
            .ok_or_else(|| unsupported_on(self.d, self.k, "a batched dot issued ahead"))?;
        let (n, kk, pitch) = ring_operand_tile(&self.plan, l.dot, dims, 1);
        let dt = self.edt(res);
        let ct = self.cty(dt)?;
        let base = self.param_name(ptr)?;
        let no_recipe = || {
            unsupported_on(
                self.d,
                self.k,
                "operand B copied along K without recipes for its offsets and mask",
            )
        };
        let rp = self.recipe(ptr).ok_or_else(no_recipe)?;
        let rm = match mask {
            Some(m) => Some(self.recipe(m).ok_or_else(no_recipe)?),
            None => None,
        };
        let ot = self.cty(self.off_dtype)?;
        let uot = unsigned_offset(self.off_dtype);
        let v = (16 / dt.size_bytes()).min(kk);
        let at = |r: &str, e: usize| r.replace(super::lower::FLAT, &k_chunk_flat(n, e));
        self.line(format!(
            "{ct}* const tm_rb = reinterpret_cast<{ct}*>(tm_ring + ({stage}) * {stage_bytes}u + {off}u);"
        ));
        self.open_k_chunks((n, kk), v);
        // Chunks of 8 along K stay inside one 16-byte unit of the swizzle.
        self.line(format!(
            "{ct}* const tm_d = tm_rb + {};",
            tile_offset(
                self.plan.wgmma(l.dot),
                (n, kk, pitch),
                &format!("(tm_n * {kk}u + tm_k)")
            )
        ));
        let first = match self.affine_offset(l, abs)? {
            Some(o) => o,
            None => at(&rp, 0),
        };
        self.line(format!("const {ot} tm_o = {first};"));
        // Offsets proven to step by 1 along K, and a mask proven constant along it, need
        // no test per element.
        let runs_proven = crate::opt::axis::step_along(self.k, ptr, 0) == Some(1);
        let mask_constant =
            mask.is_some_and(|m| crate::opt::axis::step_along(self.k, m, 0) == Some(0));
        let mut conds = vec![format!(
            "(reinterpret_cast<ulong>({base} + tm_o) & {}ul) == 0",
            v * dt.size_bytes() - 1
        )];
        if !runs_proven {
            conds.extend((1..v).map(|e| format!("{} == {ot}({uot}(tm_o) + {e}u)", at(&rp, e))));
        }
        let size = match &rm {
            Some(r) if mask_constant => {
                self.line(format!("const bool tm_m0 = {};", at(r, 0)));
                format!("tm_m0 ? {}u : 0u", v * dt.size_bytes())
            }
            Some(r) => {
                for e in 0..v {
                    self.line(format!("const bool tm_m{e} = {};", at(r, e)));
                }
                let all: Vec<String> = (0..v).map(|e| format!("tm_m{e}")).collect();
                conds.push(format!(
                    "(({}) || !({}))",
                    all.join(" && "),
                    all.join(" || ")
                ));
                format!("tm_m0 ? {}u : 0u", v * dt.size_bytes())
            }
            None => (v * dt.size_bytes()).to_string(),
        };
        let bytes = v * dt.size_bytes();
        let copy = format!(
            "asm volatile(\"cp.async.cg.shared.global [%0], [%1], {bytes}, %2;\" :: \"r\"((uint)__cvta_generic_to_shared(tm_d)), \"l\"({base} + tm_o), \"r\"({size}) : \"memory\");"
        );
        if fast {
            // Every chunk checked before the loop (`tm_fast`).
            self.line(copy);
            self.close();
            return Ok(());
        }
        self.open(format!("if ({})", conds.join(" && ")));
        self.line(copy);
        self.indent -= 1;
        self.line("} else {");
        self.indent += 1;
        for e in 0..v {
            let a = format!("{base}[{}]", at(&rp, e));
            let m = if mask_constant { 0 } else { e };
            match &rm {
                Some(_) => self.line(format!("tm_d[{e}] = tm_m{m} ? {a} : {ct}(0);")),
                None => self.line(format!("tm_d[{e}] = {a};")),
            }
        }
        self.close();
        self.close();
        Ok(())
    }

    /// The offset of chunk `tm_c` of load `l` in iteration `abs` (counted from the loop's
    /// first), when its pointers are affine in the induction variable
    /// ([`Self::ring_affine_starts`]): the first offset plus `abs` times the change.
    fn affine_offset(&self, l: &AheadLoad, abs: &str) -> Result<Option<String>> {
        let Some((ao, ad)) = self.ring_affine.get(&l.load) else {
            return Ok(None);
        };
        let ot = self.cty(self.off_dtype)?;
        let uot = unsigned_offset(self.off_dtype);
        Ok(Some(format!(
            "{ot}({uot}({ao}[tm_c]) + {uot}({abs}) * {uot}({ad}))"
        )))
    }

    /// Opens the loop over this thread's chunks of `v` elements along K of a `[k, n]`
    /// operand copied along K: `tm_c` counts them, `tm_n` and `tm_k` give the chunk's
    /// column and first row (the element at flat index [`k_chunk_flat`]).
    fn open_k_chunks(&mut self, (n, kk): (usize, usize), v: usize) {
        let chunks = n * kk / v;
        let per = chunks.div_ceil(self.threads);
        self.line("#pragma unroll");
        self.open(format!("for (uint tm_c = 0; tm_c < {per}u; ++tm_c)"));
        self.line(format!(
            "const uint tm_q = (tm_c * {}u + tm_lid) * {v}u;",
            self.threads
        ));
        if per * self.threads != chunks {
            self.line(format!("if (tm_q >= {}u) break;", n * kk));
        }
        self.line(format!("const uint tm_n = tm_q / {kk}u;"));
        self.line(format!("const uint tm_k = tm_q % {kk}u;"));
    }

    /// Before the loop, for each recomputed load of `ring` whose pointers are affine in
    /// the induction variable ([`crate::opt::pipeline::affine_in_iv`]) and whose offsets are
    /// 32-bit: each chunk's first offset at the loop's start (`tm_ao<load>`, from the
    /// pointer's recipe with the induction variable at `lo`) and its change per iteration
    /// (`tm_ad<load>`, the recipe at `lo + step` less that). Iteration `t` then copies from
    /// `tm_ao + t * tm_ad`, exact in wrapping 32-bit arithmetic, instead of evaluating the
    /// offsets for its induction variable.
    ///
    /// Returns, per such load whose chunks can be copied whole with no test, what makes
    /// them aligned in every iteration (C conditions on the first offsets and the change
    /// per iteration, tested once before the loop).
    fn ring_affine_starts(
        &mut self,
        ring: &Ring,
        body: RegionId,
        (lo, step): (&str, &str),
        (iv_t, u): (&str, &str),
    ) -> Result<HashMap<OpId, Vec<String>>> {
        let mut fast = HashMap::new();
        if self.off_dtype != crate::dtype::DType::I32 {
            return Ok(fast);
        }
        let ot = self.cty(self.off_dtype)?;
        let uot = unsigned_offset(self.off_dtype);
        for i in 0..ring.loads.len() {
            let (l, _) = &ring.loads[i];
            let load = self.k.op(l.load);
            let (Some(res), Op::Load { ptr, mask, .. }) = (load.result(), &load.op) else {
                continue;
            };
            let (ptr, mask) = (*ptr, *mask);
            if l.carried.is_some() {
                continue;
            }
            let Some(uniform) = crate::opt::pipeline::affine_in_iv(self.k, body, ptr) else {
                continue;
            };
            let Some(dims) = dot_dims(self.k, l.dot) else {
                continue;
            };
            let dt = self.edt(res);
            // Operand B copied along K: its tile `[n][k]` and the chunk width there.
            let along_k = (l.operand == 1 && self.plan.kmajor(l.dot)).then(|| {
                let (n, kk, _) = ring_operand_tile(&self.plan, l.dot, dims, 1);
                (n, kk, (16 / dt.size_bytes()).min(kk))
            });
            // The chunks, as the copies walk them, and the flat index of each one's first
            // element.
            let (chunks, flat, v) = if let Some((n, kk, v)) = along_k {
                ((n * kk / v).div_ceil(self.threads), k_chunk_flat(n, 0), v)
            } else {
                let Some(v) = self.ring_chunk(ring, i) else {
                    continue;
                };
                (self.layout(res).regs() / v, "tm_l".to_string(), v)
            };
            let mut recipes = Vec::new();
            for at in [
                format!("{iv_t}({u}({lo}))"),
                format!("{iv_t}({u}({lo}) + {u}({step}))"),
            ] {
                self.relower(body, &l.ptr_ops, &at)?;
                match self.recipe(ptr) {
                    Some(r) => recipes.push(r),
                    None => break,
                }
            }
            let [r0, r1] = recipes.as_slice() else {
                continue;
            };
            let at = |r: &str, f: &str| r.replace(super::lower::FLAT, &format!("({f})"));
            let id = l.load.index();
            let ao = format!("tm_ao{id}");
            self.line(format!("{ot} {ao}[{chunks}];"));
            // The change per iteration: one value when it is the same for every element
            // (that of element 0), else one per chunk.
            let ad = if uniform {
                let ad = format!("tm_ad{id}");
                self.line(format!(
                    "const {ot} {ad} = {ot}({uot}({}) - {uot}({}));",
                    at(r1, "0u"),
                    at(r0, "0u")
                ));
                ad
            } else {
                self.line(format!("{ot} tm_ad{id}[{chunks}];"));
                format!("tm_ad{id}[tm_c]")
            };
            if let Some((n, kk, _)) = along_k {
                self.open_k_chunks((n, kk), v);
            } else {
                self.line("#pragma unroll");
                self.open_chunks(self.layout(res), true);
            }
            self.line(format!("{ao}[tm_c] = {};", at(r0, &flat)));
            if !uniform {
                self.line(format!(
                    "{ad} = {ot}({uot}({}) - {uot}({ao}[tm_c]));",
                    at(r1, &flat)
                ));
            }
            self.close();
            // Whole chunks with no test in every iteration: offsets proven to run +1 over a
            // chunk, a mask proven constant over it, every thread holding its chunks, and
            // the base, each first offset and each change per iteration multiples of a
            // chunk.
            let (runs, mask_ok, whole) = if let Some((n, kk, _)) = along_k {
                (
                    crate::opt::axis::step_along(self.k, ptr, 0) == Some(1),
                    mask.is_none_or(|m| crate::opt::axis::step_along(self.k, m, 0) == Some(0)),
                    (n * kk / v) % self.threads == 0,
                )
            } else {
                (
                    self.axis[ptr.index()].contig >= v as u64,
                    mask.is_none_or(|m| self.axis[m.index()].cst >= v as u64),
                    true,
                )
            };
            if runs && mask_ok && whole {
                let bytes = v * dt.size_bytes();
                let base = self.param_name(ptr)?;
                let mut c = vec![format!(
                    "(reinterpret_cast<ulong>({base}) & {}ul) == 0",
                    bytes - 1
                )];
                if v > 1 {
                    c.extend((0..chunks).map(|k| format!("{uot}({ao}[{k}]) % {v}u == 0")));
                    if uniform {
                        c.push(format!("{uot}({ad}) % {v}u == 0"));
                    } else {
                        c.extend((0..chunks).map(|k| format!("{uot}(tm_ad{id}[{k}]) % {v}u == 0")));
                    }
                }
                fast.insert(l.load, c);
            }
            self.ring_affine.insert(l.load, (ao, ad));
        }
        Ok(fast)
    }

    fn ring_issue_all(
        &mut self,
        ring: &Ring,
        body: RegionId,
        iv: &str,
        guard: &str,
        stage: &str,
        (dist, abs): (usize, &str),
    ) -> Result<()> {
        self.line("{");
        self.indent += 1;
        // The masks, and the pointers the body computes, for this induction variable: each
        // op once, in the body's order.
        let mut ops: Vec<OpId> = ring
            .loads
            .iter()
            .flat_map(|(l, _)| l.mask_ops.iter().chain(&l.ptr_ops).copied())
            .collect();
        let order = &self.k.region(body).ops;
        ops.sort_by_key(|o| order.iter().position(|x| x == o));
        ops.dedup();
        self.relower(body, &ops, iv)?;
        self.open(format!("if ({guard})"));
        let issue = |lw: &mut Self, fast: bool| -> Result<()> {
            for i in 0..ring.loads.len() {
                lw.line("{");
                lw.indent += 1;
                lw.ring_issue(ring, i, stage, (dist, abs), fast)?;
                lw.close();
            }
            Ok(())
        };
        match (self.ring_fast.clone(), self.ring_version) {
            // Inside one version of the loop ([`Lowering::for_loop`]): its copies only.
            (Some(_), Some(fast)) => issue(self, fast)?,
            (Some(f), None) => {
                self.open(format!("if ({f})"));
                issue(self, true)?;
                self.indent -= 1;
                self.line("} else {");
                self.indent += 1;
                issue(self, false)?;
                self.close();
            }
            (None, _) => issue(self, false)?,
        }
        self.close();
        self.close();
        self.line("asm volatile(\"cp.async.commit_group;\" ::: \"memory\");");
        Ok(())
    }

    /// Before the loop (carried values assigned): the loop-invariant pointer steps, then
    /// iterations `0 .. stages - 1`. `lo`, `step`, `trips` name the loop's bounds; `iv_t`
    /// and `u` its induction and counter types.
    pub(super) fn ring_prologue(
        &mut self,
        ring: &Ring,
        body: RegionId,
        (lo, step, trips): (&str, &str, &str),
        (iv_t, u): (&str, &str),
    ) -> Result<()> {
        if ring.wgmma {
            self.ring_bytes = self
                .ring_bytes
                .max(ring.stages * ring.stage_bytes + WGMMA_RING_ALIGN);
            self.line("extern __shared__ __align__(16) uchar tm_ring_base[];");
            self.line(format!(
                "uchar* const tm_ring = tm_ring_base + {};",
                super::mma::aligned_gap("tm_ring_base")
            ));
        } else {
            self.ring_bytes = self.ring_bytes.max(ring.stages * ring.stage_bytes);
            self.line("extern __shared__ __align__(16) uchar tm_ring[];");
        }
        let step_ops: Vec<OpId> = ring
            .loads
            .iter()
            .flat_map(|(l, _)| l.step_ops.iter().copied())
            .collect();
        let mark = self.layouts.len();
        for op in step_ops {
            self.op(op)?;
        }
        self.layouts.truncate(mark);
        let mut fast = self.ring_chunk_starts(ring)?;
        let affine = self.ring_affine_starts(ring, body, (lo, step), (iv_t, u))?;
        for (l, _) in &ring.loads {
            if l.carried.is_some() {
                continue;
            }
            match (affine.get(&l.load), &mut fast) {
                (Some(c), Some(f)) => f.extend(c.iter().cloned()),
                _ => fast = None,
            }
        }
        self.ring_fast = match fast {
            Some(f) if !f.is_empty() => {
                let first = ring.loads.first().map_or(0, |(l, _)| l.load.index());
                let name = format!("tm_fast{first}");
                // One value for the whole block, as it picks the version of the loop
                // ([`Lowering::for_loop`]) and every warp of a warpgroup must run the same
                // `wgmma` and barriers; reduced over the warp once more so the compiler
                // holds it in a uniform register and keeps the chosen version's addresses
                // on the uniform datapath.
                self.line(format!(
                    "const bool {name} = __reduce_and_sync(0xffffffffu, uint(__syncthreads_and({}))) != 0u;",
                    f.join(" && ")
                ));
                Some(name)
            }
            _ => None,
        };
        for p in 0..ring.stages - 1 {
            let iv = format!("{iv_t}({u}({lo}) + {p}u * {u}({step}))");
            self.ring_issue_all(
                ring,
                body,
                &iv,
                &format!("{p}u < {trips}"),
                &p.to_string(),
                (p, &format!("{p}u")),
            )?;
        }
        Ok(())
    }

    /// At the top of iteration `t` of the loop (`iv` its induction variable): waits for
    /// this iteration's buffer, issues iteration `t + stages - 1`, and points the loads'
    /// results at this iteration's buffer.
    pub(super) fn ring_iteration(
        &mut self,
        ring: &Ring,
        body: RegionId,
        (iv, step, trips, t): (&str, &str, &str, &str),
        (iv_t, u): (&str, &str),
    ) -> Result<()> {
        let s = ring.stages;
        self.line(format!(
            "asm volatile(\"cp.async.wait_group {};\" ::: \"memory\");",
            s - 2
        ));
        if ring.wgmma {
            // The copies (and any element-wise writes) go through the generic proxy;
            // `wgmma` reads through the async proxy.
            self.line("asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");");
        }
        self.line(self.d.barrier);
        self.hazard.reads_pending = false;
        let next = format!("{iv_t}({u}({iv}) + {}u * {u}({step}))", s - 1);
        self.ring_issue_all(
            ring,
            body,
            &next,
            &format!("{t} + {}u < {trips}", s - 1),
            &format!("uint(({t} + {}u) % {s}u)", s - 1),
            (s - 1, &format!("({t} + {}u)", s - 1)),
        )?;
        let cur = self.fresh("tm_stage");
        self.line(format!("const uint {cur} = uint({t} % {s}u);"));
        for (l, off) in &ring.loads {
            let Some(res) = self.k.op(l.load).result() else {
                continue;
            };
            let ct = self.cty(self.edt(res))?;
            self.set(
                res,
                Repr::Block(format!(
                    "reinterpret_cast<{ct}*>(tm_ring + {cur} * {}u + {off}u)",
                    ring.stage_bytes
                )),
            );
            self.ring_vals.insert(res);
        }
        Ok(())
    }

    /// After the loop: no copy is left in flight and the ring is free again.
    pub(super) fn ring_epilogue(&mut self, ring: &Ring) {
        self.ring_fast = None;
        self.ring_chunks.clear();
        self.ring_affine.clear();
        self.line("asm volatile(\"cp.async.wait_all;\" ::: \"memory\");");
        self.line(self.d.barrier);
        for (l, _) in &ring.loads {
            if let Some(res) = self.k.op(l.load).result() {
                self.ring_vals.remove(&res);
            }
        }
    }

    /// Whether `v` is a dot operand held in the ring (its load was issued ahead).
    pub(super) fn in_ring(&self, v: Value) -> bool {
        self.ring_vals.contains(&v)
    }
}
