//! Spelling of [`crate::opt::plan::Decision::Ahead`] on CUDA: a `for` loop's `tl.dot`
//! operand loads become asynchronous copies (`cp.async`) into a ring of `stages`
//! shared-memory buffers, issued `stages - 1` iterations ahead of the dot that reads them.
//!
//! Before the loop, iterations `0 .. stages - 1` are issued (each its own commit group).
//! At the top of iteration `t` the program waits until iteration `t`'s group has landed
//! (`cp.async.wait_group stages - 2`), passes a barrier (which also tells every thread that
//! the buffer read in iteration `t - 1` is free), issues iteration `t + stages - 1` into
//! that buffer, and the dot reads buffer `t % stages` with `ldmatrix`, as it would read
//! its own staging buffer. Each buffer holds A as `[m][k + 8]` and B as `[k][n + 8]`, the
//! layout `mma.rs` stages into.
//!
//! A chunk of a thread's elements that lies in one row of the tile is copied with one
//! 4-, 8- or 16-byte `cp.async` when its elements are all unmasked, consecutive in memory
//! and aligned; any other chunk is written element by element (masked elements take 0,
//! as `other` is 0 or absent), so every load's meaning is kept.

use super::lower::{unsupported_on, Lowering, Repr};
use crate::error::Result;
use crate::ir::{Op, OpId, RegionId, Value};
use crate::opt::pipeline::{ahead_loads, AheadLoad};
use crate::opt::plan::{dot_dims, ring_operand_tile, WGMMA_RING_ALIGN, WGMMA_SWIZZLE_COLS};

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

impl Lowering<'_> {
    /// The ring of `for` loop `id`, when the plan issues its dot operand loads ahead.
    pub(super) fn ring_of(&self, id: OpId) -> Option<Ring> {
        let mut loads = ahead_loads(self.k, id, self.plan.resident(id))?;
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
            off += bytes.next_multiple_of(16);
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

    /// Copies load `l`'s elements of the iteration `dist` steps after the carried
    /// pointers' into buffer `stage` (C expressions).
    fn ring_issue(&mut self, ring: &Ring, i: usize, stage: &str, dist: usize) -> Result<()> {
        let (l, off) = &ring.loads[i];
        let load = self.k.op(l.load);
        let (Some(res), Op::Load { ptr, mask, .. }) = (load.result(), &load.op) else {
            return Ok(());
        };
        let (ptr, mask) = (*ptr, *mask);
        let dims = dot_dims(self.k, l.dot)
            .ok_or_else(|| unsupported_on(self.d, self.k, "a batched dot issued ahead"))?;
        let tile = ring_operand_tile(&self.plan, l.dot, dims, l.operand);
        let (_, row, _) = tile;
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
        let lay = self.layout(res);
        let addr = |lw: &Self, i: &str| {
            format!(
                "{ot}({offs}[{i}]) + {ot}({dist}) * {ot}({})",
                lw.el(l.step, i)
            )
        };
        let masked = |lw: &Self, i: &str| mask.map(|m| lw.el(m, i));
        self.line(format!(
            "{ct}* const tm_rb = reinterpret_cast<{ct}*>(tm_ring + ({stage}) * {}u + {off}u);",
            ring.stage_bytes
        ));
        let v = lay.vec;
        let bytes = v * dt.size_bytes();
        if matches!(bytes, 4 | 8 | 16) && row % v == 0 && !lay.has_idle_threads() {
            self.open_chunks(lay, true);
            // A chunk stays inside one 16-byte unit of the swizzle, so its elements stay
            // consecutive.
            self.line(format!(
                "{ct}* const tm_d = tm_rb + {};",
                tile_offset(swz, tile, "tm_l")
            ));
            self.line(format!(
                "const {ct}* const tm_s = {base} + ({});",
                addr(self, "tm_i")
            ));
            // Offsets that are multiples of the chunk leave only the base's alignment to
            // test: the same for every chunk, so the compiler hoists it.
            let whole = |v_: Value| self.axis[v_.index()].div >= v as u64;
            let aligned = if whole(ptr) && whole(l.step) {
                base.clone()
            } else {
                "tm_s".to_string()
            };
            let mut conds = vec![format!(
                "(reinterpret_cast<ulong>({aligned}) & {}ul) == 0",
                bytes - 1
            )];
            // A mask constant over each chunk is tested once per chunk.
            let lanes = match mask {
                Some(m) if self.axis[m.index()].cst >= v as u64 => 1,
                _ => v,
            };
            for e in 0..lanes {
                let ie = format!("tm_i + {e}u");
                if let Some(m) = masked(self, &ie) {
                    conds.push(m);
                }
            }
            if self.axis[ptr.index()].contig < v as u64 {
                for e in 1..v {
                    conds.push(format!("{offs}[tm_i + {e}u] == {offs}[tm_i] + {e}"));
                }
            }
            let kind = if bytes == 16 { "cg" } else { "ca" };
            self.open(format!("if ({})", conds.join(" && ")));
            self.line(format!(
                "asm volatile(\"cp.async.{kind}.shared.global [%0], [%1], {bytes};\" :: \"r\"((uint)__cvta_generic_to_shared(tm_d)), \"l\"(tm_s) : \"memory\");"
            ));
            self.indent -= 1;
            self.line("} else {");
            self.indent += 1;
            self.open(format!("for (uint tm_e = 0; tm_e < {v}u; ++tm_e)"));
            let a = format!("{base}[{}]", addr(self, "tm_i + tm_e"));
            match masked(self, "tm_i + tm_e") {
                Some(m) => self.line(format!("tm_d[tm_e] = ({m}) ? {a} : {ct}(0);")),
                None => self.line(format!("tm_d[tm_e] = {a};")),
            }
            self.close();
            self.close();
            self.close();
        } else {
            let guard = lay.has_idle_threads();
            self.open_regs(lay, guard);
            let a = format!("{base}[{}]", addr(self, "tm_i"));
            let mut conds = Vec::new();
            if guard {
                conds.push(format!("tm_l < {}u", lay.n));
            }
            let dst = format!("tm_rb[{}]", tile_offset(swz, tile, "tm_l"));
            match masked(self, "tm_i") {
                Some(m) => self.line(format!("{dst} = ({m}) ? {a} : {ct}(0);")),
                None => self.line(format!("{dst} = {a};")),
            }
            self.close();
        }
        Ok(())
    }

    fn ring_issue_all(
        &mut self,
        ring: &Ring,
        body: RegionId,
        iv: &str,
        guard: &str,
        stage: &str,
        dist: usize,
    ) -> Result<()> {
        self.line("{");
        self.indent += 1;
        let mask_ops: Vec<OpId> = ring
            .loads
            .iter()
            .flat_map(|(l, _)| l.mask_ops.iter().copied())
            .collect();
        self.relower(body, &mask_ops, iv)?;
        self.open(format!("if ({guard})"));
        for i in 0..ring.loads.len() {
            self.line("{");
            self.indent += 1;
            self.ring_issue(ring, i, stage, dist)?;
            self.close();
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
                "uchar* const tm_ring = tm_ring_base + (({a}u - ((uint)__cvta_generic_to_shared(tm_ring_base) & {m}u)) & {m}u);",
                a = WGMMA_RING_ALIGN,
                m = WGMMA_RING_ALIGN - 1
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
        for p in 0..ring.stages - 1 {
            let iv = format!("{iv_t}({u}({lo}) + {p}u * {u}({step}))");
            self.ring_issue_all(
                ring,
                body,
                &iv,
                &format!("{p}u < {trips}"),
                &p.to_string(),
                p,
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
            s - 1,
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
