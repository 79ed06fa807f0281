//! `tl.dot` on NVIDIA tensor cores: `mma.sync.m16n8k16` with fp16/bf16 operands and an
//! fp32 accumulator (the CUDA dialect's counterpart of `dot.rs`'s `simdgroup_matrix` path).
//!
//! The warps of a program tile the `[M, N]` accumulator as a `wm x wn` grid; each warp owns
//! `fm x fn` MMA tiles of 16x8 and keeps them in registers (4 floats per lane per tile, in
//! the MMA's C-fragment layout). Each `dot` stages A (`[M, K]`) and B (`[K, N]`) in shared
//! memory in their own dtype, rows padded by 8 elements so the 8 row addresses of an
//! `ldmatrix` fall in distinct banks, then per 16-wide K step loads A fragments with
//! `ldmatrix.x4` and B fragments with `ldmatrix.x4.trans` (two N tiles at a time) and issues
//! one `mma.sync` per tile. As on Metal, an accumulator carried by a `for` loop and used
//! only by the dot stays in fragments for the whole loop, and after it where the plan
//! stores it from there ([`crate::opt::fragments::loop_region`]). On sm_90 the plan may
//! spell the dot as `wgmma.mma_async` instead, on the same fragments.
//!
//! Fragment layouts follow PTX ISA "Matrix Fragments for mma.m16n8k16": lane `l` holds
//! C rows `l/4` and `l/4 + 8`, columns `2*(l%4) + {0, 1}`.

use super::lower::{unsupported_on, Lowering};
use super::LayoutChoice;
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::{Op, OpId, Value};
use crate::opt::plan::{
    DotLowering, WarpGrid, MMA_C_PAD, MMA_OPERAND_PAD, WGMMA_RING_ALIGN, WGMMA_SWIZZLE_COLS,
};
use crate::opt::smem::Role;

/// Elements of padding per shared-memory operand row (see [`MMA_OPERAND_PAD`]).
const PAD: usize = MMA_OPERAND_PAD;

/// Padding (floats) of a banded accumulator row (see [`MMA_C_PAD`]).
const C_PAD: usize = MMA_C_PAD;

/// Where a `wgmma` dot reads operand A.
enum WgmmaA {
    /// The loop's ring.
    Ring,
    /// The copy staged before the loop (this shared-memory array).
    Hoisted(String),
    /// The C fragments of an earlier dot (the array, and its N tiles per warp).
    Regs(String, usize),
}

/// Bytes from shared-memory array `s` to the first [`WGMMA_RING_ALIGN`]-byte boundary at
/// or after it (a C expression).
pub(super) fn aligned_gap(s: &str) -> String {
    let m = WGMMA_RING_ALIGN - 1;
    format!(
        "(({a}u - ((uint)__cvta_generic_to_shared({s}) & {m}u)) & {m}u)",
        a = WGMMA_RING_ALIGN
    )
}

/// Element offset, in `wgmma`'s copy of an operand A `[m, k]` staged before its loop, of
/// the element at flat index `l`: blocks of [`WGMMA_SWIZZLE_COLS`] columns one after
/// another, each `m` rows of 128 bytes in the 128-byte swizzle (as
/// [`crate::opt::plan::ring_operand_tile`] lays out the ring's), the rows in the order
/// the MMAs read them. On grid `g` warp `w` holds rows `16 fm w .. 16 fm (w + 1)`, and
/// the `m64` MMA of its warpgroup `w / 4` for tile `i` gives warp `w` rows `16 (w % 4) ..`
/// of 64 rows at one descriptor: so row `16 fm w + 16 i + r` is staged at row
/// `64 (fm (w / 4) + i) + 16 (w % 4) + r`.
fn wgmma_hoisted_offset((m, k): (usize, usize), g: WarpGrid, l: &str) -> String {
    let w = WGMMA_SWIZZLE_COLS;
    let r = format!("({l} / {k}u)");
    let fm = g.fm;
    let s = if fm == 1 {
        r.clone()
    } else {
        let t = 16 * fm;
        format!(
            "(((({r} / {t}u) / 4u * {fm}u + ({r} / 16u) % {fm}u) * 4u + ({r} / {t}u) % 4u) * 16u + {r} % 16u)"
        )
    };
    format!(
        "({l} % {k}u) / {w}u * {}u + {s} * {w}u + (((({l} % {w}u) >> 3) ^ ({r} & 7u)) << 3) + ({l} & 7u)",
        m * w
    )
}

/// How the printer holds a value the plan keeps in `mma.sync` C fragments (a resident
/// accumulator's rescale, or a dot result that stays in its fragments).
#[derive(Clone, Copy, Debug)]
pub(super) struct FragVal {
    /// The fragments' warp grid.
    pub grid: WarpGrid,
    /// The resident accumulator a rescale updates in place.
    pub in_place: Option<Value>,
}

impl WarpGrid {
    fn regs(&self) -> usize {
        self.fm * self.fn_ * 4
    }
}

impl Lowering<'_> {
    fn warp_grid(&self, m: usize, n: usize) -> Option<WarpGrid> {
        WarpGrid::choose(m, n, self.threads / 32)
    }

    /// The warp grid of an accumulator the plan put on tensor cores; an error (not a
    /// panic) should a caller ever reach the tensor-core path without that check.
    fn mma_grid(&self, m: usize, n: usize) -> Result<WarpGrid> {
        self.warp_grid(m, n).ok_or_else(|| {
            unsupported_on(
                self.d,
                self.k,
                format!(
                    "tensor-core dot with a {m}x{n} accumulator on {} warps",
                    self.threads / 32
                ),
            )
        })
    }

    /// Opens a scope with `tm_w` (this thread's warp) and `tm_ln` (its lane); the caller
    /// closes it.
    fn open_warp_ids(&mut self) {
        self.line("{");
        self.indent += 1;
        self.line("const uint tm_w = tm_lid >> 5;");
        self.line("const uint tm_ln = tm_lid & 31u;");
    }

    /// [`Self::open_warp_ids`], then a scope only the warps of grid `g` enter; the caller
    /// closes both.
    fn open_active_warps(&mut self, g: WarpGrid) {
        self.open_warp_ids();
        if g.active() < self.threads / 32 {
            self.open(format!("if (tm_w < {}u)", g.active()));
        } else {
            self.line("{");
            self.indent += 1;
        }
    }

    /// Opens the per-lane loops over this warp's accumulator registers: `tm_r` indexes the
    /// fragment array, `tm_row`/`tm_col` are the element's coordinates in `[m, n]`. Warps
    /// without tiles skip the block. The caller closes two scopes.
    fn open_frag_elems(&mut self, g: WarpGrid) {
        self.open_frag_elems_by(g, 1);
    }

    /// [`Self::open_frag_elems`] over every `step`-th register (1 or 2: a pair of
    /// registers `tm_r`, `tm_r + 1` holds neighbouring columns of one row).
    fn open_frag_elems_by(&mut self, g: WarpGrid, step: usize) {
        self.open_warp_ids();
        let guard = if g.active() < self.threads / 32 {
            format!("if (tm_w < {}u) ", g.active())
        } else {
            String::new()
        };
        let inc = if step == 1 {
            "++tm_r".to_string()
        } else {
            format!("tm_r += {step}u")
        };
        self.open(format!(
            "{guard}for (uint tm_r = 0; tm_r < {}u; {inc})",
            g.regs()
        ));
        self.line("const uint tm_t = tm_r >> 2;");
        self.line(format!(
            "const uint tm_row = (tm_w / {wn}u) * {}u + (tm_t / {fnn}u) * 16u + (tm_ln >> 2) + ((tm_r >> 1) & 1u) * 8u;",
            g.fm * 16,
            wn = g.wn,
            fnn = g.fn_
        ));
        self.line(format!(
            "const uint tm_col = (tm_w % {wn}u) * {}u + (tm_t % {fnn}u) * 8u + (tm_ln & 3u) * 2u + (tm_r & 1u);",
            g.fn_ * 8,
            wn = g.wn,
            fnn = g.fn_
        ));
    }

    /// The warp grid the plan gave dot `dot` with an `[m, n]` accumulator.
    pub(super) fn dot_grid(&self, dot: OpId, m: usize, n: usize) -> Result<WarpGrid> {
        match self.plan.dot(dot) {
            DotLowering::Mma(g) if g.wm * g.fm * 16 == m && g.wn * g.fn_ * 8 == n => Ok(g),
            _ => self.mma_grid(m, n),
        }
    }

    /// The warp grid of fragment array `c` (recorded when it was declared).
    pub(super) fn grid_of(&self, c: &str, m: usize, n: usize) -> Result<WarpGrid> {
        match self.frag_grid.get(c) {
            Some(&g) => Ok(g),
            None => self.mma_grid(m, n),
        }
    }

    /// Declares this warp's C fragments of dot `dot` and fills them from block `acc`
    /// `[m, n]`.
    pub(super) fn mma_frags_from(
        &mut self,
        acc: Value,
        m: usize,
        n: usize,
        dot: OpId,
    ) -> Result<String> {
        let g = self.dot_grid(dot, m, n)?;
        let c = self.fresh("frag_c");
        self.frag_grid.insert(c.clone(), g);
        self.line(format!("float {c}[{}];", g.regs()));
        if let super::lower::Repr::Scalar(v) | super::lower::Repr::Splat(v) = self.repr(acc).clone()
        {
            self.line("#pragma unroll");
            self.open(format!("for (uint tm_r = 0; tm_r < {}u; ++tm_r)", g.regs()));
            self.line(format!("{c}[tm_r] = float({v});"));
            self.close();
            return Ok(c);
        }
        let s = self.smem_buf(Role::AccIn, DType::F32, m * n)?;
        self.smem_write_begin();
        self.stage(acc, &s, 0, &|l| l.to_string())?;
        self.smem_write_end();
        self.line("#pragma unroll");
        self.open_frag_elems(g);
        self.line(format!("{c}[tm_r] = {s}[tm_row * {n}u + tm_col];"));
        self.close();
        self.close();
        self.smem_read_done();
        Ok(c)
    }

    /// Block `src` (`[m, 1]` or `[1, n]`, or uniform) broadcast straight into the C
    /// fragment layout `fv` of an `[m, n]` value (a factor of an op spelled in fragments):
    /// read by row or column through threadgroup memory, or recomputed from its index.
    pub(super) fn mma_broadcast_factor(
        &mut self,
        res: Value,
        src: Value,
        fv: FragVal,
    ) -> Result<()> {
        if self.is_uniform(src) {
            let s = self.el(src, "");
            self.set(res, super::lower::Repr::Splat(s));
            return Ok(());
        }
        let g = fv.grid;
        if let Some(&sg) = self.slices.get(&src) {
            if (sg.wm, sg.wn, sg.fm) != (g.wm, g.wn, g.fm) {
                return Err(unsupported_on(
                    self.d,
                    self.k,
                    "a row vector broadcast into fragments of another warp grid",
                ));
            }
            let dt = self.edt(res);
            let ct = self.cty(dt)?;
            let name = self.fresh("frag_f");
            let x = self.el(src, &crate::opt::rows::slot_of_register("tm_r", g));
            self.line(format!("{ct} {name}[{}];", g.regs()));
            self.line("#pragma unroll");
            self.open(format!("for (uint tm_r = 0; tm_r < {}u; ++tm_r)", g.regs()));
            self.line(format!("{name}[tm_r] = {x};"));
            self.close();
            self.bind_frags(res, name.clone(), g);
            self.layouts.push(super::LayoutChoice {
                op: format!("bcast {name}: {} -> {}", self.ty(src), self.ty(res)),
                layout: "into mma fragments: each register reads its row's slot of the row vector"
                    .into(),
            });
            return Ok(());
        }
        let idx = if self.ty(src).shape[0] == 1 {
            "tm_col"
        } else {
            "tm_row"
        };
        let dt = self.edt(res);
        let ct = self.cty(dt)?;
        let name = self.fresh("frag_f");
        self.line(format!("{ct} {name}[{}];", g.regs()));
        self.local_bytes += g.regs() * dt.size_bytes();
        let how = match self.recipe(src).filter(|_| !self.shape_through_memory()) {
            Some(r) => {
                self.line("#pragma unroll");
                self.open_frag_elems(g);
                let e = r.replace(super::lower::FLAT, &format!("({idx})"));
                self.line(format!("{name}[tm_r] = {e};"));
                self.close();
                self.close();
                "recomputed from the fragment's row or column"
            }
            None => {
                let s = self.scratch_array(dt, self.ty(src).numel())?;
                self.smem_write_begin();
                self.stage(src, &s, 0, &|l| l.to_string())?;
                self.smem_write_end();
                self.line("#pragma unroll");
                self.open_frag_elems(g);
                self.line(format!("{name}[tm_r] = {s}[{idx}];"));
                self.close();
                self.close();
                self.smem_read_done();
                "the vector through threadgroup memory, read by the fragment's row or column"
            }
        };
        self.bind_frags(res, name.clone(), g);
        self.layouts.push(super::LayoutChoice {
            op: format!("bcast {name}: {} -> {}", self.ty(src), self.ty(res)),
            layout: format!("into mma fragments: {how}"),
        });
        Ok(())
    }

    /// An elementwise op whose result the plan keeps in the C fragment layout `fv`: every
    /// block operand is in that layout too (or uniform). A resident accumulator's rescale
    /// (`fv.in_place`) updates the loop's fragments in place.
    pub(super) fn mma_elementwise(
        &mut self,
        res: Value,
        args: &[Value],
        base: &str,
        f: &dyn Fn(&[String]) -> String,
        fv: FragVal,
    ) -> Result<()> {
        let mut xs = Vec::new();
        for &a in args {
            let recipe = self.recipe(a);
            xs.push(match self.frags.get(&a) {
                Some(arr) => format!("{arr}[tm_r]"),
                None if self.is_uniform(a) => self.el(a, ""),
                // A block recomputed from its element index, at the fragment's element.
                None if recipe.is_some() && self.ty(a).shape.len() == 2 => {
                    let n = self.ty(a).shape[1];
                    recipe
                        .unwrap_or_default()
                        .replace(super::lower::FLAT, &format!("(tm_row * {n}u + tm_col)"))
                }
                None => {
                    return Err(unsupported_on(
                        self.d,
                        self.k,
                        format!("{base} of a block outside the mma fragments"),
                    ))
                }
            });
        }
        let g = fv.grid;
        let name = match fv.in_place {
            Some(acc) => self.frags.get(&acc).cloned().ok_or_else(|| {
                unsupported_on(
                    self.d,
                    self.k,
                    "a rescale of an accumulator not in fragments",
                )
            })?,
            None => {
                let dt = self.edt(res);
                let ct = self.cty(dt)?;
                let name = self.fresh(base);
                self.line(format!("{ct} {name}[{}];", g.regs()));
                self.local_bytes += g.regs() * dt.size_bytes();
                name
            }
        };
        self.line("#pragma unroll");
        self.open_frag_elems(g);
        self.line(format!("{name}[tm_r] = {};", f(&xs)));
        self.close();
        self.close();
        self.bind_frags(res, name, g);
        Ok(())
    }

    /// An elementwise op whose result is a row vector kept in the row slices of fragments on
    /// `grid` ([`crate::opt::rows`]): every block operand is such a row vector too.
    pub(super) fn slice_elementwise(
        &mut self,
        res: Value,
        args: &[Value],
        base: &str,
        f: &dyn Fn(&[String]) -> String,
        grid: WarpGrid,
    ) -> Result<()> {
        let mut xs = Vec::new();
        for &a in args {
            if !self.is_uniform(a) && !self.slices.contains_key(&a) {
                return Err(unsupported_on(
                    self.d,
                    self.k,
                    format!("{base} of a row vector outside the fragments' rows"),
                ));
            }
            xs.push(self.el(a, "tm_i"));
        }
        let dt = self.edt(res);
        let ct = self.cty(dt)?;
        let name = self.fresh(base);
        let regs = 2 * grid.fm;
        self.line(format!("{ct} {name}[{regs}];"));
        self.local_bytes += regs * dt.size_bytes();
        self.line("#pragma unroll");
        self.open_reg_loop(regs);
        self.line(format!("{name}[tm_i] = {};", f(&xs)));
        self.close();
        self.set(res, super::lower::Repr::Block(name));
        Ok(())
    }

    /// Dot `op`'s result `res` stays in its fragments `frag` (`[m, n]`): the values of its
    /// region ([`crate::opt::fragments::region`]) are spelled there as they come.
    pub(super) fn keep_in_fragments(
        &mut self,
        op: OpId,
        res: Value,
        frag: String,
        m: usize,
        n: usize,
    ) -> Result<()> {
        let region = crate::opt::fragments::region(self.k, op).ok_or_else(|| {
            unsupported_on(self.d, self.k, "fragments kept by a dot without a region")
        })?;
        self.keep_region_in_fragments(&region, res, frag, m, n)
    }

    /// Value `res` (a dot's result, or a loop's resident accumulator after the loop) stays
    /// in its fragments `frag` (`[m, n]`): the values of `region` are spelled there (and
    /// its stores store from there).
    pub(super) fn keep_region_in_fragments(
        &mut self,
        region: &crate::opt::fragments::Region,
        res: Value,
        frag: String,
        m: usize,
        n: usize,
    ) -> Result<()> {
        let grid = self.grid_of(&frag, m, n)?;
        for v in region.values(self.k) {
            self.frag_vals.insert(
                v,
                FragVal {
                    grid,
                    in_place: None,
                },
            );
        }
        self.frag_vals.remove(&res);
        self.bind_frags(res, frag, grid);
        Ok(())
    }

    /// `store(ptr, value, mask)` of a value held in fragments `arr`: each thread stores its
    /// registers' elements, the pointer offsets and the mask recomputed at each element's
    /// row and column.
    pub(super) fn mma_store(
        &mut self,
        ptr: Value,
        value: Value,
        mask: Option<Value>,
        arr: &str,
    ) -> Result<()> {
        let (m, n) = (self.ty(value).shape[0], self.ty(value).shape[1]);
        let g = self.grid_of(arr, m, n)?;
        let at = |lw: &Self, v: Value| -> Result<String> {
            if lw.is_uniform(v) {
                return Ok(lw.el(v, ""));
            }
            lw.recipe(v)
                .map(|r| r.replace(super::lower::FLAT, &format!("(tm_row * {n}u + tm_col)")))
                .ok_or_else(|| {
                    unsupported_on(
                        lw.d,
                        lw.k,
                        "a store from mma fragments through pointers or a mask that are not recomputed from their index",
                    )
                })
        };
        let off = at(self, ptr)?;
        let cond = mask.map(|mk| at(self, mk)).transpose()?;
        // The two registers of a pair hold neighbouring columns of a row: one 2-element
        // store where the offsets run +1 from an even one, the mask is the same for both,
        // and the store is a plain one (no packed words, atomics or in-place flags).
        let ax = |v: Value| self.axis[v.index()];
        let plain = self.in_words(ptr).is_none()
            && !self.atomic_outputs
            && !self.dynamic[ptr.index()]
            && self.in_place_param(ptr).is_none();
        let pair_store = self.d.aligned_offset_access.map(|(_, st)| st).filter(|_| {
            plain
                && ax(ptr).contig >= 2
                && ax(ptr).div >= 2
                && mask.is_none_or(|mk| ax(mk).cst >= 2)
        });
        let pairs = pair_store.is_some();
        self.line("#pragma unroll");
        if let Some(st) = pair_store {
            let vt = self
                .d
                .vector_type
                .replace("{ty}", self.cty(self.edt(value))?)
                .replace("{n}", "2");
            self.helpers.insert("packed");
            let base = self.base_name(ptr, true)?;
            self.open_frag_elems_by(g, 2);
            self.line(format!("{vt} tm_v;"));
            self.line(format!("tm_v[0] = {arr}[tm_r];"));
            self.line(format!("tm_v[1] = {arr}[tm_r + 1u];"));
            let s = st
                .replace("{b}", &base)
                .replace("{o}", &off)
                .replace("{v}", "tm_v");
            match cond {
                Some(c) => self.line(format!("if ({c}) {s}")),
                None => self.line(s),
            }
        } else {
            let s = self.store_stmt(ptr, &off, &format!("{arr}[tm_r]"))?;
            self.open_frag_elems(g);
            match cond {
                Some(c) => self.line(format!("if ({c}) {s}")),
                None => self.line(s),
            }
        }
        self.close();
        self.close();
        self.layouts.push(LayoutChoice {
            op: format!("store {}", self.ty(value)),
            layout: format!(
                "from mma fragments: {} from registers, offsets and mask recomputed at the row and column",
                if pairs { "pairs of columns" } else { "each element" }
            ),
        });
        Ok(())
    }

    /// `reduce` along axis 1 of a value held in `mma.sync` fragments `arr`: each thread
    /// combines its two rows per 16-row tile over its N tiles, the four lanes sharing a row
    /// combine by shuffles, and one lane per row writes the row's result to shared memory,
    /// read back in the blocked layout. A warp holds whole rows (the plan's grid), so no
    /// warp waits for another before the write.
    pub(super) fn mma_reduce_rows(
        &mut self,
        kind: crate::ir::ReduceKind,
        x: Value,
        res: Value,
        arr: &str,
    ) -> Result<()> {
        let (m, n) = (self.ty(x).shape[0], self.ty(x).shape[1]);
        let g = self.grid_of(arr, m, n)?;
        if g.wn != 1 {
            return Err(unsupported_on(
                self.d,
                self.k,
                "a row reduction of fragments split over warps along N",
            ));
        }
        let dt = self.edt(x);
        let ct = self.cty(dt)?;
        let rows = 2 * g.fm;
        let part = self.fresh("rows");
        self.line(format!("{ct} {part}[{rows}];"));
        self.open_active_warps(g);
        self.line("#pragma unroll");
        self.open(format!("for (uint tm_p = 0; tm_p < {rows}u; ++tm_p)"));
        // Row slot p: tile row p / 2, upper or lower half p % 2; register 2 * (p % 2) + e
        // of N tile j.
        self.line(format!(
            "{part}[tm_p] = {arr}[4u * ((tm_p >> 1) * {}u) + 2u * (tm_p & 1u)];",
            g.fn_
        ));
        let fold = |l: &mut Self, v: String| -> Result<()> {
            let c = l.combine(kind, dt, &format!("{part}[tm_p]"), "", &v, "")?;
            l.line(c);
            Ok(())
        };
        fold(
            self,
            format!(
                "{arr}[4u * ((tm_p >> 1) * {}u) + 2u * (tm_p & 1u) + 1u]",
                g.fn_
            ),
        )?;
        self.line("#pragma unroll");
        self.open(format!("for (uint tm_j = 1; tm_j < {}u; ++tm_j)", g.fn_));
        for e in 0..2 {
            fold(
                self,
                format!(
                    "{arr}[4u * ((tm_p >> 1) * {}u + tm_j) + 2u * (tm_p & 1u) + {e}u]",
                    g.fn_
                ),
            )?;
        }
        self.close();
        for mask in [1, 2] {
            let o = self.fresh("o");
            let sh = self
                .d
                .shuffle_xor
                .replace("{x}", &format!("{part}[tm_p]"))
                .replace("{m}", &format!("{mask}u"));
            self.line(format!("const {ct} {o} = {sh};"));
            fold(self, o)?;
        }
        self.close();
        self.close();
        self.close();
        if self.slices.contains_key(&res) {
            // Every lane of a row holds its result: the row slice is the value.
            self.set(res, super::lower::Repr::Block(part.clone()));
            self.layouts.push(super::LayoutChoice {
                op: format!("reduce {} axis 1 of {}", kind.name(), self.ty(x)),
                layout: format!("in mma fragments: per thread over its N tiles, shuffles over the 4 lanes of a row; the result stays in the fragments' rows ({rows} per thread)"),
            });
            return Ok(());
        }
        let s = self.scratch_array(dt, m)?;
        self.smem_write_begin();
        self.open_warp_ids();
        self.open(format!("if (tm_w < {}u && (tm_ln & 3u) == 0u)", g.active()));
        self.line("#pragma unroll");
        self.open(format!("for (uint tm_p = 0; tm_p < {rows}u; ++tm_p)"));
        self.line(format!(
            "{s}[tm_w * {}u + (tm_p >> 1) * 16u + (tm_ln >> 2) + (tm_p & 1u) * 8u] = {part}[tm_p];",
            g.fm * 16
        ));
        self.close();
        self.close();
        self.close();
        self.smem_write_end();
        let r = self.read_result(res, kind, &s)?;
        self.set(res, r);
        self.layouts.push(super::LayoutChoice {
            op: format!("reduce {} axis 1 of {}", kind.name(), self.ty(x)),
            layout: "in mma fragments: per thread over its N tiles, shuffles over the 4 lanes of a row, one row per lane through shared memory".into(),
        });
        Ok(())
    }

    /// Stages dot `dot`'s loop-invariant operand A once, before its loop (the plan's
    /// `hoist`), where [`Self::mma_accumulate`] reads it on every iteration.
    pub(super) fn mma_hoist_operand(&mut self, dot: OpId) -> Result<()> {
        let Op::Dot { a, .. } = self.k.op(dot).op else {
            return Err(unsupported_on(
                self.d,
                self.k,
                "a hoisted operand of no dot",
            ));
        };
        let (m, k) = (self.ty(a).shape[0], self.ty(a).shape[1]);
        let ka = k + PAD;
        self.materialize(a)?;
        let s = self.smem_buf(Role::Hoisted, self.edt(a), m * ka)?;
        self.smem_write_begin();
        if self.plan.wgmma(dot) {
            // Swizzled for `wgmma` at the first 1024-byte boundary inside the buffer (its
            // padding leaves 16 bytes a row, at least 1024 bytes from 64 rows on).
            let DotLowering::Mma(g) = self.plan.dot(dot) else {
                return Err(unsupported_on(
                    self.d,
                    self.k,
                    "wgmma on a dot without a warp grid",
                ));
            };
            if m * ka - m * k < WGMMA_RING_ALIGN / 2 {
                return Err(unsupported_on(
                    self.d,
                    self.k,
                    format!("wgmma with operand A of {m} rows staged before the loop"),
                ));
            }
            let ct = self.cty(self.edt(a))?;
            self.line("{");
            self.indent += 1;
            self.line(format!(
                "{ct}* const tm_ha = reinterpret_cast<{ct}*>(reinterpret_cast<uchar*>({s}) + {});",
                aligned_gap(&s)
            ));
            self.stage_rows(a, "tm_ha", &|l| wgmma_hoisted_offset((m, k), g, l))?;
            self.close();
        } else {
            self.stage_rows(a, &s, &|l| format!("({l} / {k}u) * {ka}u + {l} % {k}u"))?;
        }
        self.smem_write_end();
        self.hoisted.insert(dot, s);
        Ok(())
    }

    /// Records that `v` is held in fragment array `arr` of grid `g`.
    pub(super) fn bind_frags(&mut self, v: Value, arr: String, g: WarpGrid) {
        self.frag_grid.insert(arr.clone(), g);
        self.frags.insert(v, arr.clone());
        self.set(v, super::lower::Repr::Block(arr));
    }

    /// Writes block `src` (a `[rows, row]` tile) to `arr[pos(l)]` for each flat index `l`:
    /// a whole chunk per vector store where chunks stay inside rows and `pos` keeps them
    /// consecutive and aligned (16 bytes for 8 halves: one `st.shared.v4`, and a warp's 32
    /// stores cover 4 whole 128-byte rows of a 64-wide tile, so they do not conflict),
    /// element by element otherwise. Every `pos` here maps a run of 8 elements of a row
    /// starting at a multiple of 8 to 8 consecutive positions starting at a multiple of 8.
    fn stage_rows(&mut self, src: Value, arr: &str, pos: &dyn Fn(&str) -> String) -> Result<()> {
        let lay = self.layout(src);
        let v = lay.vec;
        let row = self.ty(src).shape.last().copied().unwrap_or(1);
        let packed = v > 1
            && 8 % v == 0
            && row % 8 == 0
            && !lay.has_idle_threads()
            && matches!(self.repr(src), super::lower::Repr::Block(_));
        if !packed {
            return self.stage(src, arr, 0, pos);
        }
        let vt = self
            .d
            .vector_type
            .replace("{ty}", self.cty(self.edt(src))?)
            .replace("{n}", &v.to_string());
        self.helpers.insert("packed");
        let x = self.el(src, "tm_i + tm_e");
        self.open_chunks(lay, true);
        self.line(format!("{vt} tm_v;"));
        self.line(format!(
            "for (uint tm_e = 0; tm_e < {v}u; ++tm_e) tm_v[tm_e] = {x};"
        ));
        self.line(format!(
            "*reinterpret_cast<{vt}*>(&{arr}[{}]) = tm_v;",
            pos("tm_l")
        ));
        self.close();
        Ok(())
    }

    /// `c += a @ b` on tensor cores (`c` from [`Lowering::mma_frags_from`]).
    pub(super) fn mma_accumulate(
        &mut self,
        c: &str,
        a: Value,
        b: Value,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        let g = self.grid_of(c, m, n)?;
        let din = self.edt(a);
        // `a` held in the fragments of an earlier dot on the same rows per warp: two
        // neighbouring N tiles of its C fragments are one A fragment here.
        let a_regs = match self.frags.get(&a).cloned() {
            Some(p) => {
                let pg = self.grid_of(&p, m, k)?;
                if pg.wn != 1 || g.wn != 1 || pg.wm != g.wm || pg.fm != g.fm {
                    return Err(unsupported_on(
                        self.d,
                        self.k,
                        "a dot operand in fragments of another warp grid",
                    ));
                }
                Some((p, pg.fn_))
            }
            None => None,
        };
        let hoisted = self.cur_op.and_then(|op| self.hoisted.get(&op).cloned());
        if let Some(op) = self.cur_op.filter(|&op| self.plan.wgmma(op)) {
            let a_src = match (&a_regs, &hoisted) {
                (Some((p, pfn)), _) => WgmmaA::Regs(p.clone(), *pfn),
                (None, _) if self.in_ring(a) && g.fm == 1 => WgmmaA::Ring,
                (None, Some(h)) => WgmmaA::Hoisted(h.clone()),
                _ => {
                    return Err(unsupported_on(
                        self.d,
                        self.k,
                        format!("wgmma for {op} with operand A neither in the ring (one tile per warp), staged before the loop nor in fragments"),
                    ))
                }
            };
            if !self.in_ring(b) {
                return Err(unsupported_on(
                    self.d,
                    self.k,
                    format!("wgmma for {op} with operand B not in the ring"),
                ));
            }
            return self.wgmma_accumulate(c, g, (a, b), (m, n, k), a_src);
        }
        let (ka, nb) = (k + PAD, n + PAD);
        // Operands copied ahead sit in the loop's ring (`ahead.rs`), each in the layout
        // staged here; B may be there while A comes from registers or from before the loop,
        // or is staged here.
        let (a_ring, b_ring) = (self.in_ring(a), self.in_ring(b));
        if a_ring && !b_ring {
            return Err(unsupported_on(
                self.d,
                self.k,
                "a dot whose operand A is copied ahead and B is not",
            ));
        }
        let ring_buf = |lw: &Self, v: Value| match lw.repr(v) {
            super::lower::Repr::Block(x) => Ok(x.clone()),
            _ => Err(unsupported_on(
                lw.d,
                lw.k,
                "a dot operand copied ahead that is not a ring buffer",
            )),
        };
        // A staged here, or (from registers, the ring, or staged before the loop) not.
        let a_here = a_regs.is_none() && hoisted.is_none() && !a_ring;
        let staged = if a_here || !b_ring {
            let elems = if a_here { m * ka } else { 0 } + if b_ring { 0 } else { k * nb };
            let s = self.smem_buf(Role::Operands, din, elems)?;
            self.smem_write_begin();
            if a_here {
                self.stage_rows(a, &s, &|l| format!("({l} / {k}u) * {ka}u + {l} % {k}u"))?;
            }
            if !b_ring {
                let base = if a_here { m * ka } else { 0 };
                self.stage_rows(b, &s, &|l| {
                    format!("{base}u + ({l} / {n}u) * {nb}u + {l} % {n}u")
                })?;
            }
            self.smem_write_end();
            Some(s)
        } else {
            None
        };
        let a_buf = match (&hoisted, a_ring, &staged) {
            (Some(h), _, _) => h.clone(),
            (None, true, _) => ring_buf(self, a)?,
            (None, false, Some(s)) => s.clone(),
            // A from registers: its buffer is never read.
            (None, false, None) => ring_buf(self, b)?,
        };
        let (s, boff) = match (&staged, b_ring) {
            (_, true) => (ring_buf(self, b)?, 0),
            (Some(s), false) => (s.clone(), if a_here { m * ka } else { 0 }),
            (None, false) => unreachable!("B is staged when it is not in the ring"),
        };
        let ty = if din == DType::BF16 { "bf16" } else { "f16" };
        let (fm, fnn) = (g.fm, g.fn_);
        self.open_active_warps(g);
        self.line(format!(
            "const uint tm_r0 = (tm_w / {}u) * {}u;",
            g.wn,
            fm * 16
        ));
        self.line(format!(
            "const uint tm_c0 = (tm_w % {}u) * {}u;",
            g.wn,
            fnn * 8
        ));
        self.line(format!(
            "const uint tm_sa = (uint)__cvta_generic_to_shared({a_buf}) + 2u * ((tm_r0 + (tm_ln & 15u)) * {ka}u + (tm_ln >> 4) * 8u);"
        ));
        // B held column by column in the ring (`[n][k]`, K contiguous): `ldmatrix` reads
        // it untransposed, lanes 0-7 / 8-15 / 16-23 / 24-31 giving the rows (N) of the
        // four 8x8 matrices at K offsets 0 / 8 / 0 / 8 and N offsets 0 / 0 / 8 / 8.
        let kmajor = b_ring && self.cur_op.is_some_and(|op| self.plan.kmajor(op));
        let kb = k + PAD;
        if kmajor {
            self.line(format!(
                "const uint tm_sb = (uint)__cvta_generic_to_shared({s}) + 2u * ((tm_c0 + (tm_ln & 7u) + ((tm_ln >> 4) << 3)) * {kb}u + ((tm_ln >> 3) & 1u) * 8u);"
            ));
        } else {
            self.line(format!(
                "const uint tm_sb = (uint)__cvta_generic_to_shared({s}) + 2u * ({boff}u + (tm_ln & 15u) * {nb}u + tm_c0 + (tm_ln >> 4) * 8u);"
            ));
        }
        self.line("#pragma unroll");
        self.open(format!("for (uint tm_kk = 0; tm_kk < {k}u; tm_kk += 16u)"));
        self.line(format!("uint tm_fa[{}];", fm * 4));
        self.line(format!("uint tm_fb[{}];", fnn.div_ceil(2) * 4));
        self.line("#pragma unroll");
        self.open(format!("for (uint tm_i = 0; tm_i < {fm}u; ++tm_i)"));
        if let Some((p, pfn)) = &a_regs {
            let bits = if din == DType::BF16 {
                "__bfloat16_as_ushort"
            } else {
                "__half_as_ushort"
            };
            self.line(format!(
                "const uint tm_t0 = 4u * (tm_i * {pfn}u + (tm_kk >> 3));"
            ));
            for q in 0..4 {
                self.line(format!(
                    "tm_fa[4 * tm_i + {q}] = (uint({bits}({p}[tm_t0 + {h}u])) << 16) | uint({bits}({p}[tm_t0 + {l}u]));",
                    l = 2 * q,
                    h = 2 * q + 1
                ));
            }
        } else {
            self.line(format!(
            "asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%0, %1, %2, %3}}, [%4];\" : \"=r\"(tm_fa[4 * tm_i]), \"=r\"(tm_fa[4 * tm_i + 1]), \"=r\"(tm_fa[4 * tm_i + 2]), \"=r\"(tm_fa[4 * tm_i + 3]) : \"r\"(tm_sa + 2u * (tm_i * {}u + tm_kk)));",
            16 * ka
        ));
        }
        self.close();
        // `x4.trans` loads the B fragments of two neighbouring N tiles; an odd last tile
        // takes `x2.trans` (only lanes 0-15 supply addresses, all within this tile).
        self.line("#pragma unroll");
        self.open(format!("for (uint tm_j = 0; tm_j < {}u; ++tm_j)", fnn / 2));
        let (trans, at) = if kmajor {
            ("", format!("tm_j * {}u + tm_kk", 16 * kb))
        } else {
            (".trans", format!("tm_kk * {nb}u + tm_j * 16u"))
        };
        self.line(format!(
            "asm volatile(\"ldmatrix.sync.aligned.m8n8.x4{trans}.shared.b16 {{%0, %1, %2, %3}}, [%4];\" : \"=r\"(tm_fb[4 * tm_j]), \"=r\"(tm_fb[4 * tm_j + 1]), \"=r\"(tm_fb[4 * tm_j + 2]), \"=r\"(tm_fb[4 * tm_j + 3]) : \"r\"(tm_sb + 2u * ({at})));"
        ));
        self.close();
        if fnn % 2 == 1 && kmajor {
            // Lanes 0-15 address the last N tile's two matrices (K offsets 0 and 8).
            self.line(format!(
                "asm volatile(\"ldmatrix.sync.aligned.m8n8.x2.shared.b16 {{%0, %1}}, [%2];\" : \"=r\"(tm_fb[{j4}]), \"=r\"(tm_fb[{j4} + 1]) : \"r\"(tm_sb + 2u * ({row}u * {kb}u + tm_kk)));",
                j4 = (fnn / 2) * 4,
                row = (fnn - 1) * 8
            ));
        } else if fnn % 2 == 1 {
            self.line(format!(
                "asm volatile(\"ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {{%0, %1}}, [%2];\" : \"=r\"(tm_fb[{j4}]), \"=r\"(tm_fb[{j4} + 1]) : \"r\"(tm_sb - 2u * (tm_ln >> 4) * 8u + 2u * (tm_kk * {nb}u + {col}u)));",
                j4 = (fnn / 2) * 4,
                col = (fnn - 1) * 8
            ));
        }
        self.line("#pragma unroll");
        self.open(format!("for (uint tm_i = 0; tm_i < {fm}u; ++tm_i)"));
        self.line("#pragma unroll");
        self.open(format!("for (uint tm_j = 0; tm_j < {fnn}u; ++tm_j)"));
        self.line(format!("float* tm_d = {c} + 4u * (tm_i * {fnn}u + tm_j);"));
        self.line("const uint tm_b = 4u * (tm_j >> 1) + 2u * (tm_j & 1u);");
        self.line(format!(
            "asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.{ty}.{ty}.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};\" : \"+f\"(tm_d[0]), \"+f\"(tm_d[1]), \"+f\"(tm_d[2]), \"+f\"(tm_d[3]) : \"r\"(tm_fa[4 * tm_i]), \"r\"(tm_fa[4 * tm_i + 1]), \"r\"(tm_fa[4 * tm_i + 2]), \"r\"(tm_fa[4 * tm_i + 3]), \"r\"(tm_fb[tm_b]), \"r\"(tm_fb[tm_b + 1]));"
        ));
        self.close();
        self.close();
        self.close();
        self.close();
        self.close();
        if staged.is_some() {
            self.smem_read_done();
        }
        let staged = match (a_ring, b_ring) {
            (true, _) => "A/B copied ahead (cp.async) into a ring of shared-memory buffers",
            (false, true) => "B copied ahead (cp.async) into a ring of shared-memory buffers",
            _ => "A/B staged in shared memory",
        };
        self.layouts.push(LayoutChoice {
            op: format!("dot {m}x{n}x{k}"),
            layout: format!(
                "mma.sync m16n8k16 {ty}->f32: {}x{} warps of {}x{} (fragments in registers), {staged} (rows padded by {PAD}), ldmatrix",
                g.wm,
                g.wn,
                g.fm * 16,
                g.fn_ * 8
            ),
        });
        Ok(())
    }

    /// `c += a @ b` as `wgmma.mma_async`. B sits in the loop's ring in the swizzled layout
    /// of [`crate::opt::plan::ring_operand_tile`] (rows along K, or along N when the plan
    /// copies it along K: [`crate::opt::plan::KernelPlan::kmajor`]); A in the ring too, in
    /// its copy staged before the loop ([`wgmma_hoisted_offset`]), or in registers (the C
    /// fragments of an earlier dot, two neighbouring N tiles per A fragment). Warpgroup
    /// `g` (warps `4g .. 4g + 4`) issues one `m64nNk16` per 16-wide K step for each of its
    /// warps' `fm` row tiles, and the accumulator registers of tile `i` are this warp's C
    /// fragments of tile `i` of grid `g` (`n / 8` N tiles in the order `mma.sync` keeps
    /// them).
    fn wgmma_accumulate(
        &mut self,
        c: &str,
        g: WarpGrid,
        (a, b): (Value, Value),
        (m, n, k): (usize, usize, usize),
        a_src: WgmmaA,
    ) -> Result<()> {
        let din = self.edt(a);
        let ty = if din == DType::BF16 { "bf16" } else { "f16" };
        let block = |v: Value, l: &Self| match l.repr(v) {
            super::lower::Repr::Block(x) => Ok(x.clone()),
            _ => Err(unsupported_on(
                l.d,
                l.k,
                "a wgmma operand that is not a ring buffer",
            )),
        };
        let sb = block(b, self)?;
        let kmajor = self.cur_op.is_some_and(|op| self.plan.kmajor(op));
        self.helpers.insert("wgmma");
        let w = WGMMA_SWIZZLE_COLS;
        let steps = w / 16;
        // Bytes of one swizzled block of 64 columns, and of its 64 rows one MMA reads.
        let (a_block, rows64) = (m * w * 2, 64 * w * 2);
        let per_tile = g.fn_ * 4;
        self.line("{");
        self.indent += 1;
        match &a_src {
            WgmmaA::Ring => {
                let sa = block(a, self)?;
                self.line(format!(
                    "const uint tm_sa = (uint)__cvta_generic_to_shared({sa});"
                ));
            }
            WgmmaA::Hoisted(h) => self.line(format!(
                "const uint tm_sa = (uint)__cvta_generic_to_shared({h}) + {};",
                aligned_gap(h)
            )),
            WgmmaA::Regs(..) => {}
        }
        self.line(format!(
            "const uint tm_sb = (uint)__cvta_generic_to_shared({sb});"
        ));
        let bits = if din == DType::BF16 {
            "__bfloat16_as_ushort"
        } else {
            "__half_as_ushort"
        };
        // A from registers: every A fragment packed before the first MMA, so no other
        // instruction writes a register the MMAs read while they are in flight (which
        // would make the compiler serialise them).
        if let WgmmaA::Regs(p, pfn) = &a_src {
            self.line(format!("uint tm_fa[{}];", (k / 16) * g.fm * 4));
            self.line("#pragma unroll");
            self.open(format!(
                "for (uint tm_kk = 0; tm_kk < {}u; ++tm_kk)",
                k / 16
            ));
            for i in 0..g.fm {
                self.line(format!(
                    "const uint tm_t{i} = 4u * ({}u + 2u * tm_kk);",
                    i * pfn
                ));
                for q in 0..4 {
                    self.line(format!(
                        "tm_fa[(tm_kk * {fm}u + {i}u) * 4u + {q}u] = (uint({bits}({p}[tm_t{i} + {h}u])) << 16) | uint({bits}({p}[tm_t{i} + {l}u]));",
                        fm = g.fm,
                        l = 2 * q,
                        h = 2 * q + 1
                    ));
                }
            }
            self.close();
        }
        self.line("asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");");
        self.line("#pragma unroll");
        self.open(format!(
            "for (uint tm_kk = 0; tm_kk < {}u; ++tm_kk)",
            k / 16
        ));
        // A K step is 32 bytes inside a 128-byte row of a K-major block (the hardware
        // applies the swizzle to the address), 16 rows of 128 bytes down an N-major one.
        let (db, trans_b) = if kmajor {
            (
                format!(
                    "tm_wgmma_desc(tm_sb + (tm_kk / {steps}u) * {}u + (tm_kk % {steps}u) * 32u, 16u, 1024u)",
                    n * w * 2
                ),
                0,
            )
        } else {
            (
                format!(
                    "tm_wgmma_desc(tm_sb + tm_kk * {}u, {}u, 1024u)",
                    16 * w * 2,
                    k * w * 2
                ),
                1,
            )
        };
        self.line(format!("const unsigned long long tm_db = {db};"));
        let outs: Vec<String> = (0..per_tile).map(|r| format!("%{r}")).collect();
        for i in 0..g.fm {
            let binds: Vec<String> = (0..per_tile)
                .map(|r| format!("\"+f\"({c}[{}])", i * per_tile + r))
                .collect();
            match &a_src {
                WgmmaA::Regs(..) => {
                    let fa: Vec<String> = (0..4)
                        .map(|q| format!("\"r\"(tm_fa[(tm_kk * {}u + {i}u) * 4u + {q}u])", g.fm))
                        .collect();
                    self.line(format!(
                        "asm volatile(\"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} {{{}}}, {{%{}, %{}, %{}, %{}}}, %{}, 1, 1, 1, {trans_b};\" : {} : {}, \"l\"(tm_db));",
                        outs.join(", "),
                        per_tile,
                        per_tile + 1,
                        per_tile + 2,
                        per_tile + 3,
                        per_tile + 4,
                        binds.join(", "),
                        fa.join(", ")
                    ));
                }
                _ => {
                    self.line(format!(
                        "const unsigned long long tm_da{i} = tm_wgmma_desc(tm_sa + (tm_kk / {steps}u) * {a_block}u + ((tm_lid >> 7) * {}u + {i}u) * {rows64}u + (tm_kk % {steps}u) * 32u, 16u, 1024u);",
                        g.fm
                    ));
                    // Scale D and the two operand scales are 1; A is K-major.
                    self.line(format!(
                        "asm volatile(\"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} {{{}}}, %{}, %{}, 1, 1, 1, 0, {trans_b};\" : {} : \"l\"(tm_da{i}), \"l\"(tm_db));",
                        outs.join(", "),
                        per_tile,
                        per_tile + 1,
                        binds.join(", ")
                    ));
                }
            }
        }
        self.close();
        self.line("asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\");");
        self.line("asm volatile(\"wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");");
        self.close();
        let a_from = match a_src {
            WgmmaA::Ring => "A/B copied ahead (cp.async) into a ring of shared-memory buffers",
            WgmmaA::Hoisted(_) => "A staged before the loop, B copied ahead (cp.async) into a ring of shared-memory buffers",
            WgmmaA::Regs(..) => "A from registers, B copied ahead (cp.async) into a ring of shared-memory buffers",
        };
        let b_major = if kmajor { ", B K-major" } else { "" };
        self.layouts.push(LayoutChoice {
            op: format!("dot {m}x{n}x{k}"),
            layout: format!(
                "wgmma m64n{n}k16 {ty}->f32: {} warpgroup(s), each warp {}x{n} (fragments in registers), {a_from} in the 128-byte swizzle{b_major}",
                g.wm / 4,
                16 * g.fm
            ),
        });
        Ok(())
    }

    /// Moves fragments `c` (`[m, n]`) into a block in the blocked layout as `res`, through
    /// shared memory whole or in the plan's row bands (padded by [`C_PAD`] floats).
    pub(super) fn mma_frags_to_block(
        &mut self,
        res: Value,
        c: &str,
        m: usize,
        n: usize,
    ) -> Result<()> {
        let g = self.grid_of(c, m, n)?;
        let dacc = self.edt(res);
        let ct = self.cty(dacc)?;
        let rows = self.c_band_rows(m, n);
        if rows >= m {
            let s = self.smem_buf(Role::AccOut, DType::F32, m * n)?;
            self.smem_write_begin();
            self.line("#pragma unroll");
            self.open_frag_elems(g);
            self.line(format!("{s}[tm_row * {n}u + tm_col] = {c}[tm_r];"));
            self.close();
            self.close();
            self.smem_write_end();
            let name = self.gather("dot", dacc, m * n, &|l| format!("{ct}({s}[{l}])"))?;
            self.smem_read_done();
            self.set(res, super::lower::Repr::Block(name));
            return Ok(());
        }
        let ld = n + C_PAD;
        let s = self.smem_buf(Role::AccOut, DType::F32, rows * ld)?;
        let lay = self.layout_of(m * n);
        let name = self.declare_block("dot", dacc, m * n)?;
        if lay.has_idle_threads() {
            self.open_regs(lay, false);
            self.line(format!("{name}[tm_i] = {ct}(0);"));
            self.close();
        }
        self.open(format!(
            "for (uint tm_band = 0; tm_band < {m}u; tm_band += {rows}u)"
        ));
        // The previous band's reads (or earlier ones) may be pending.
        self.hazard.reads_pending = true;
        self.smem_write_begin();
        self.open_frag_elems(g);
        self.line(format!(
            "if (tm_row - tm_band < {rows}u) {s}[(tm_row - tm_band) * {ld}u + tm_col] = {c}[tm_r];"
        ));
        self.close();
        self.close();
        self.smem_write_end();
        self.open_regs(lay, true);
        self.line(format!(
            "if (tm_l - tm_band * {n}u < {}u) {name}[tm_i] = {ct}({s}[(tm_l / {n}u - tm_band) * {ld}u + tm_l % {n}u]);",
            rows * n
        ));
        self.close();
        self.close();
        self.smem_read_done();
        self.set(res, super::lower::Repr::Block(name));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::cuda_tests::check_cuda;
    use super::super::tests::{build, matmul};
    use super::super::LaunchOptions;
    use crate::dtype::DType::{BF16, F16, F32, I32};
    use crate::opt::plan::{Decision, KernelPlan, WarpGrid, WGMMA_RING_ALIGN};
    use crate::opt::{Chip, HardwareProfile};
    use crate::passes::{specialize_integers, IntFact};
    use crate::tl::{self, KernelBuilder};

    fn dot_layout(dtype: crate::DType, blocks: [i64; 3], warps: u32) -> String {
        let k = build(
            "mm",
            &[("BM", blocks[0]), ("BN", blocks[1]), ("BK", blocks[2])],
            matmul(dtype),
        );
        // NVRTC-compiles the standalone unit too when NVRTC is installed.
        let p = check_cuda(&k, &LaunchOptions::default().num_warps(warps));
        p.layouts
            .iter()
            .find(|l| l.op.starts_with("dot"))
            .map(|l| l.layout.clone())
            .unwrap_or_default()
    }

    #[test]
    fn half_and_bfloat_dots_take_tensor_cores() {
        let l = dot_layout(F16, [64, 64, 32], 4);
        assert!(
            l.starts_with("mma.sync m16n8k16 f16->f32: 2x2 warps"),
            "{l}"
        );
        let l = dot_layout(BF16, [32, 16, 16], 4);
        assert!(l.starts_with("mma.sync m16n8k16 bf16->f32"), "{l}");
        // One 8-wide N tile per warp: B fragments come from the x2 `ldmatrix`.
        let l = dot_layout(F16, [16, 16, 16], 2);
        assert!(l.contains("1x2 warps of 16x8"), "{l}");
    }

    #[test]
    fn large_accumulators_leave_fragments_in_row_bands() {
        // Triton's H100 config, 128x128x64 on 8 warps: a whole f32 C (64 KB) would not fit
        // beside the A/B staging (35 KB) under the 48 KB static limit; bands do.
        // (By default the loop's result is stored from its fragments; the plan override
        // that takes it out of them converts it.)
        let converted = |k: &crate::ir::Kernel, warps: u32| {
            let o = LaunchOptions::default()
                .num_warps(warps)
                .target(HardwareProfile::of(Chip::Sm90));
            let mut plan = super::super::cuda::plan(k, &o);
            let f = k
                .walk()
                .into_iter()
                .find(|&id| matches!(k.op(id).op, crate::ir::Op::For { .. }))
                .unwrap();
            assert!(plan.keeps_fragments(f), "{plan}");
            plan.set_fragments(f, false, "test");
            super::super::cuda::compile_with(k, &o, &plan).unwrap()
        };
        let k = build("mm", &[("BM", 128), ("BN", 128), ("BK", 64)], matmul(F16));
        let p = converted(&k, 8);
        assert!(p.source.contains("tm_band += 16u"), "{}", p.source);
        assert!(p.shared_mem_bytes <= 48 * 1024, "{}", p.shared_mem_bytes);
        let k = build("mm", &[("BM", 64), ("BN", 64), ("BK", 32)], matmul(F16));
        let p = converted(&k, 4);
        assert!(!p.source.contains("tm_band"), "{}", p.source);
    }

    /// Triton's tutorial matmul: pointers carried by the loop and advanced by `BK` rows or
    /// columns, masks from the induction variable; `store_in_loop` adds a store to the
    /// body (which forbids issuing loads ahead).
    fn tutorial(dtype: crate::DType, store_in_loop: bool) -> impl FnOnce(&mut KernelBuilder) {
        move |k: &mut KernelBuilder| {
            let (a, b, c) = (
                k.ptr(dtype, "a_ptr"),
                k.ptr(dtype, "b_ptr"),
                k.ptr(F32, "c_ptr"),
            );
            let (m, n, kk) = (k.scalar(I32, "M"), k.scalar(I32, "N"), k.scalar(I32, "K"));
            let (sam, sak) = (k.scalar(I32, "stride_am"), k.scalar(I32, "stride_ak"));
            let (sbk, sbn) = (k.scalar(I32, "stride_bk"), k.scalar(I32, "stride_bn"));
            let (bm, bn, bk) = (k.constexpr("BM"), k.constexpr("BN"), k.constexpr("BK"));
            let offs_am = (tl::program_id(0) * bm + tl::arange(0, bm)) % m;
            let offs_bn = (tl::program_id(1) * bn + tl::arange(0, bn)) % n;
            let offs_k = tl::arange(0, bk);
            let pa = a + (offs_am.col() * sam + offs_k.row() * sak);
            let pb = b + (offs_k.col() * sbk + offs_bn.row() * sbn);
            let init = (tl::zeros([bm, bn], F32), pa, pb);
            let (acc, _, _) = tl::range(0, tl::cdiv(kk, bk), 1).fold(init, |i, (acc, pa, pb)| {
                let rest = kk - i * bk;
                let at = tl::load(pa).mask(offs_k.row().lt(rest)).other(0.0);
                let bt = tl::load(pb).mask(offs_k.col().lt(rest)).other(0.0);
                if store_in_loop {
                    tl::store(c + i, tl::full([1i64; 0], 1.0, F32));
                }
                (tl::dot(at, bt, acc), pa + bk * sak, pb + bk * sbk)
            });
            let offs_cm = tl::program_id(0) * bm + tl::arange(0, bm);
            let offs_cn = tl::program_id(1) * bn + tl::arange(0, bn);
            let cm = offs_cm.col().lt(m) & offs_cn.row().lt(n);
            tl::store(c + offs_cm.col() * n + offs_cn.row(), acc).mask(cm);
        }
    }

    #[test]
    fn dot_operand_loads_are_copied_ahead_through_num_stages_buffers() {
        let k = build(
            "mm",
            &[("BM", 128), ("BN", 128), ("BK", 64)],
            tutorial(F16, false),
        );
        // One buffer on sm_90, where wgmma reads it: A 128x64 and B 64x128 halves,
        // unpadded in the 128-byte swizzle; the ring starts 1024-byte aligned.
        let stage = (128 * 64 + 64 * 128) * 2;
        for (stages, wait) in [(3, "wait_group 1;"), (2, "wait_group 0;")] {
            let o = LaunchOptions::default().num_warps(8).num_stages(stages);
            let p = check_cuda(&k, &o);
            assert!(
                p.source.contains("cp.async.ca.shared.global"),
                "{}",
                p.source
            );
            assert!(p.source.contains(wait), "{}", p.source);
            assert_eq!(
                p.dynamic_shared_mem_bytes,
                stages as usize * stage + WGMMA_RING_ALIGN
            );
            let l = p.layouts.iter().find(|l| l.op.starts_with("dot")).unwrap();
            assert!(l.layout.contains("copied ahead"), "{}", l.layout);
            let plan =
                super::super::cuda::plan(&k, &o.clone().target(HardwareProfile::of(Chip::Sm90)));
            let ahead: Vec<_> = plan
                .decisions()
                .filter(|(_, d, _)| matches!(d, Decision::Ahead { .. }))
                .collect();
            assert_eq!(ahead.len(), 2, "{plan}");
            assert_eq!(KernelPlan::parse(&plan.to_string()).unwrap(), plan);
        }
        // On sm_80 mma.sync reads rows padded by 8: A 128x(64+8) and B 64x(128+8).
        let o80 = LaunchOptions::default()
            .num_warps(8)
            .target(HardwareProfile::of(Chip::Sm80));
        let p = super::super::cuda::compile(&k, &o80).unwrap();
        assert_eq!(p.dynamic_shared_mem_bytes, 3 * (128 * 72 + 64 * 136) * 2);
        assert!(!p.sm90a && !p.source.contains("wgmma"), "{}", p.source);
        // One stage: A and B staged from registers in their own iteration.
        let p = check_cuda(&k, &LaunchOptions::default().num_warps(8).num_stages(1));
        assert!(!p.source.contains("cp.async"), "{}", p.source);
        assert_eq!(p.dynamic_shared_mem_bytes, 0);
        // A store in the body could change what a later iteration loads.
        let k = build(
            "mm",
            &[("BM", 64), ("BN", 64), ("BK", 32)],
            tutorial(F16, true),
        );
        let p = check_cuda(&k, &LaunchOptions::default().num_warps(4));
        assert!(!p.source.contains("cp.async"), "{}", p.source);
    }

    #[test]
    fn sm90_dots_read_the_ring_with_wgmma() {
        for (dt, ty) in [(F16, "f16"), (BF16, "bf16")] {
            for (bm, bn, warps) in [(128, 128, 8), (64, 64, 4), (64, 256, 4)] {
                let k = build(
                    "mm",
                    &[("BM", bm), ("BN", bn), ("BK", 64)],
                    tutorial(dt, false),
                );
                // NVRTC compiles it for compute_90a.
                let p = check_cuda(&k, &LaunchOptions::default().num_warps(warps));
                assert!(p.sm90a);
                let l = p.layouts.iter().find(|l| l.op.starts_with("dot")).unwrap();
                let want = format!("wgmma m64n{bn}k16 {ty}->f32: {} warpgroup(s)", warps / 4);
                assert!(l.layout.starts_with(&want), "{}", l.layout);
                assert!(p.source.contains(&format!(
                    "wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.{ty}.{ty}"
                )));
                assert!(p.source.contains("fence.proxy.async.shared::cta"));
                let text = p.plan.to_string();
                assert!(text.contains(" wgmma ; "), "{text}");
                let back = KernelPlan::parse(&text).unwrap();
                assert_eq!(back.to_string(), text);
            }
        }
        // K = 32 is not a whole 128-byte swizzle row; 128 rows on 4 warps would need two
        // 64-row MMAs per warpgroup: both stay on mma.sync.
        for (bm, bk, warps) in [(64, 32, 4), (128, 64, 4)] {
            let k = build(
                "mm",
                &[("BM", bm), ("BN", 64), ("BK", bk)],
                tutorial(F16, false),
            );
            let p = check_cuda(&k, &LaunchOptions::default().num_warps(warps));
            assert!(!p.sm90a && !p.source.contains("wgmma"));
            let l = p.layouts.iter().find(|l| l.op.starts_with("dot")).unwrap();
            assert!(l.layout.starts_with("mma.sync"), "{}", l.layout);
        }
    }

    #[test]
    fn ring_copies_test_their_chunks_once_before_the_loop() {
        let k = build(
            "mm",
            &[("BM", 128), ("BN", 128), ("BK", 64)],
            tutorial(F16, false),
        );
        // Triton's specialisation of the integer arguments: unit inner strides, the rest
        // multiples of 16.
        let facts: Vec<_> = k
            .params
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p.name.as_str() {
                "stride_ak" | "stride_bn" => Some((i, IntFact::One)),
                "M" | "N" | "K" | "stride_am" | "stride_bk" => Some((i, IntFact::MultipleOf16)),
                _ => None,
            })
            .collect();
        let spec = specialize_integers(&k, &facts);
        for warps in [8, 4] {
            let p = check_cuda(&spec, &LaunchOptions::default().num_warps(warps));
            let src = &p.source;
            // Each chunk's first offset and B's runs (`% N` hides them from the analysis)
            // before the loop; one flag picks copies with no test per chunk, masked chunks
            // zero-filled by `cp.async`.
            assert!(src.contains("const bool tm_fast"), "{src}");
            assert!(src.contains(", 16, %2;"), "{src}");
            assert!(src.contains("? 16u : 0u"), "{src}");
            let fast = src.find("if (tm_fast").unwrap();
            let else_at = fast + src[fast..].find("} else {").unwrap();
            assert!(
                !src[fast..else_at].contains(" == "),
                "{}",
                &src[fast..else_at]
            );
        }
        // Runtime strides: no flag, each chunk tested where it is copied.
        let p = check_cuda(&k, &LaunchOptions::default().num_warps(8));
        assert!(!p.source.contains("tm_fast"), "{}", p.source);
        assert!(p.source.contains("tm_cr"), "{}", p.source);
    }

    #[test]
    fn a_loop_accumulator_is_stored_from_its_fragments() {
        let k = build(
            "mm",
            &[("BM", 64), ("BN", 64), ("BK", 32)],
            tutorial(F16, false),
        );
        let o = LaunchOptions::default()
            .num_warps(4)
            .target(HardwareProfile::of(Chip::Sm90));
        let plan = super::super::cuda::plan(&k, &o);
        let for_op = k
            .walk()
            .into_iter()
            .find(|&id| matches!(k.op(id).op, crate::ir::Op::For { .. }))
            .unwrap();
        assert!(plan.keeps_fragments(for_op), "{plan}");
        let text = plan.to_string();
        assert!(text.contains(&format!("{for_op} fragments ;")), "{text}");
        assert_eq!(KernelPlan::parse(&text).unwrap(), plan);
        // The override converts the accumulator to the blocked layout through shared
        // memory, as before.
        let mut left = plan.clone();
        left.set_fragments(for_op, false, "test");
        left.verify(&k).unwrap();
        let progs = [&plan, &left].map(|p| super::super::cuda::compile_with(&k, &o, p).unwrap());
        // f32 C: no packed pair store without a proven layout (runtime strides).
        assert!(!progs[0].source.contains("accout"), "{}", progs[0].source);
        assert!(progs[0].source.contains("c_ptr["), "{}", progs[0].source);
        assert!(progs[1].source.contains("accout"), "{}", progs[1].source);
        assert!(progs[0].shared_mem_bytes < progs[1].shared_mem_bytes);
        let l = progs[0]
            .layouts
            .iter()
            .find(|l| l.op.starts_with("store"))
            .unwrap();
        assert!(
            l.layout.starts_with("from mma fragments: each element"),
            "{}",
            l.layout
        );
        if let Some(n) = super::super::cuda_tests::nvrtc() {
            for p in &progs {
                n.compile(&p.name, &p.standalone(), &p.nvrtc_arch("compute_90"))
                    .unwrap();
            }
        }
        // With unit inner strides specialised, neighbouring columns go in pairs.
        let facts: Vec<_> = k
            .params
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p.name.as_str() {
                "stride_ak" | "stride_bn" => Some((i, IntFact::One)),
                "M" | "N" | "K" | "stride_am" | "stride_bk" => Some((i, IntFact::MultipleOf16)),
                _ => None,
            })
            .collect();
        let spec = specialize_integers(&k, &facts);
        let p = check_cuda(&spec, &o);
        assert!(p.source.contains("tm_vstore_at(c_ptr"), "{}", p.source);
        // A loop whose result is used otherwise (here also yielded by an outer loop's
        // body... or simply reduced) keeps the conversion; forcing it is refused.
        let reduced = build(
            "mm_sum",
            &[("BM", 64), ("BN", 64), ("BK", 32)],
            |kb: &mut KernelBuilder| {
                let (a, b, c) = (
                    kb.ptr(F16, "a_ptr"),
                    kb.ptr(F16, "b_ptr"),
                    kb.ptr(F32, "c_ptr"),
                );
                let (bm, bn, bk) = (kb.constexpr("BM"), kb.constexpr("BN"), kb.constexpr("BK"));
                let rm = tl::arange(0, bm);
                let rn = tl::arange(0, bn);
                let rk = tl::arange(0, bk);
                let pa = a + (rm.col() * bk + rk.row());
                let pb = b + (rk.col() * bn + rn.row());
                let init = (tl::zeros([bm, bn], F32), pa, pb);
                let (acc, _, _) = tl::range(0, 4, 1).fold(init, |_, (acc, pa, pb)| {
                    (
                        tl::dot(tl::load(pa), tl::load(pb), acc),
                        pa + bk,
                        pb + bk * bn,
                    )
                });
                tl::store(c + rm, acc.sum(1));
            },
        );
        let mut forced = super::super::cuda::plan(&reduced, &o);
        let f = reduced
            .walk()
            .into_iter()
            .find(|&id| matches!(reduced.op(id).op, crate::ir::Op::For { .. }))
            .unwrap();
        assert!(!forced.keeps_fragments(f), "{forced}");
        forced.set_fragments(f, true, "test");
        let e = forced.verify(&reduced).unwrap_err().to_string();
        assert!(e.contains("only stored after it"), "{e}");
    }

    #[test]
    fn wgmma_is_a_plan_decision() {
        let k = build(
            "mm",
            &[("BM", 128), ("BN", 128), ("BK", 64)],
            tutorial(F16, false),
        );
        let o = LaunchOptions::default()
            .num_warps(8)
            .target(HardwareProfile::of(Chip::Sm90));
        let plan = super::super::cuda::plan(&k, &o);
        let dot = k
            .walk()
            .into_iter()
            .find(|&id| matches!(k.op(id).op, crate::ir::Op::Dot { .. }))
            .unwrap();
        assert!(plan.wgmma(dot));
        // Off: the same warp grid on mma.sync, the ring padded again.
        let mut off = plan.clone();
        off.set_wgmma(dot, false, "test");
        off.verify(&k).unwrap();
        let p = super::super::cuda::compile_with(&k, &o, &off).unwrap();
        assert!(!p.sm90a && !p.source.contains("wgmma"), "{}", p.source);
        assert!(p.source.contains("mma.sync.aligned.m16n8k16"));
        assert_eq!(p.dynamic_shared_mem_bytes, 3 * (128 * 72 + 64 * 136) * 2);
        if let Some(n) = super::super::cuda_tests::nvrtc() {
            n.compile(&p.name, &p.standalone(), &p.nvrtc_arch("compute_90"))
                .unwrap();
        }
        // A grid other than one 16-row tile per warp is refused.
        let mut bad = plan.clone();
        bad.set(
            dot,
            Decision::Dot(crate::opt::plan::DotLowering::Mma(
                WarpGrid::choose(128, 128, 8).unwrap(),
            )),
            "test",
        );
        let e = bad.verify(&k).unwrap_err().to_string();
        assert!(e.contains("wgmma with"), "{e}");
        // Operands staged in their own iteration (no ring) are refused.
        let one = LaunchOptions {
            num_stages: 1,
            ..o.clone()
        };
        let mut staged = super::super::cuda::plan(&k, &one);
        assert!(!staged.wgmma(dot));
        staged.set_wgmma(dot, true, "test");
        let e = staged.verify(&k).unwrap_err().to_string();
        assert!(e.contains("wgmma:"), "{e}");
        // On sm_80 the printer has no wgmma.
        let o80 = LaunchOptions {
            target: HardwareProfile::of(Chip::Sm80),
            ..o
        };
        let mut p80 = super::super::cuda::plan(&k, &o80);
        p80.set_wgmma(dot, true, "test");
        let e = p80.verify(&k).unwrap_err().to_string();
        assert!(e.contains("not wgmma"), "{e}");
    }

    #[test]
    fn a_plan_cannot_issue_other_loads_ahead() {
        let k = build("mm", &[("BM", 64), ("BN", 64), ("BK", 32)], matmul(F16));
        let o = LaunchOptions::default().target(HardwareProfile::of(Chip::Sm90));
        // This kernel's loads compute their pointers from the induction variable: the ring
        // recomputes them for each later iteration.
        let ringed = super::super::cuda::plan(&k, &o);
        let ahead = ringed
            .decisions()
            .filter(|(_, d, _)| matches!(d, Decision::Ahead { .. }))
            .count();
        assert_eq!(ahead, 2, "{ringed}");
        // Without a ring (one stage), one load alone cannot be issued ahead: each operand
        // load of the loop's dots goes into one ring.
        let one = LaunchOptions {
            num_stages: 1,
            ..o.clone()
        };
        let mut plan = super::super::cuda::plan(&k, &one);
        assert!(!plan
            .decisions()
            .any(|(_, d, _)| matches!(d, Decision::Ahead { .. })));
        let load = k
            .walk()
            .into_iter()
            .find(|&id| matches!(k.op(id).op, crate::ir::Op::Load { .. }))
            .unwrap();
        plan.set(load, Decision::Ahead { stages: 2 }, "test");
        let e = plan.verify(&k).unwrap_err().to_string();
        assert!(e.contains("issue ahead"), "{e}");
    }

    #[test]
    fn other_dots_keep_the_fma_path() {
        assert!(dot_layout(F32, [32, 32, 16], 4).starts_with("scalar FMA"));
    }

    #[test]
    fn warp_grid_uses_all_warps_with_square_tiles() {
        let g = WarpGrid::choose(128, 128, 8).unwrap();
        assert_eq!(g.active(), 8);
        assert_eq!(g.fm * 16 * g.wm, 128);
        assert_eq!(g.fn_ * 8 * g.wn, 128);
        assert_eq!(g.fm * 16 + g.fn_ * 8, 96);
        let g = WarpGrid::choose(64, 64, 4).unwrap();
        assert_eq!((g.wm, g.wn, g.fm, g.fn_), (2, 2, 2, 4));
    }

    #[test]
    fn warp_grid_idles_warps_when_tiles_are_few() {
        // One 16x8 tile: a single warp works.
        let g = WarpGrid::choose(16, 8, 4).unwrap();
        assert_eq!((g.active(), g.fm, g.fn_), (1, 1, 1));
        let g = WarpGrid::choose(16, 16, 4).unwrap();
        assert_eq!(g.active(), 2);
    }

    #[test]
    fn warp_grid_needs_whole_tiles() {
        assert_eq!(WarpGrid::choose(8, 8, 4), None);
        assert_eq!(WarpGrid::choose(16, 4, 4), None);
    }
}
