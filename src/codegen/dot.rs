//! `tl.dot`: `simdgroup_matrix` 8x8 tiles staged through threadgroup memory, or a scalar
//! FMA loop for shapes and types the tiles cannot take.
//!
//! Tile path (2-D, M, N, K multiples of 8, f32/f16 operands and accumulator): each
//! SIMD-group holds one block of C tiles in float fragments (the grid of
//! [`WarpGrid::simdgroup`]). A and B are staged through threadgroup memory in their own
//! dtype when both are half (the fragments multiply half tiles and accumulate in float) and
//! as float otherwise, K in the slices the plan chose
//! ([`KernelPlan::k_slice`](crate::opt::plan::KernelPlan::k_slice)), rows padded against
//! bank conflicts where the budget allows ([`simdgroup_pitches`]); operands whose loads the
//! loop issues ahead are already staged in its two buffers ([`super::dbuf`]). Per 8 of K
//! each SIMD-group loads its block's A and B fragments once and runs
//! `simdgroup_multiply_accumulate` for every tile of the block. C moves between fragments and the blocked
//! layout through threadgroup memory in the plan's row bands
//! ([`KernelPlan::band_rows`](crate::opt::plan::KernelPlan::band_rows)). Every buffer is a
//! view of the plan's threadgroup arena: operands, C in and C out of one dot are never live
//! together, so they share bytes. When the
//! accumulator is carried by a `for` loop and used only by the dot (the usual matmul main
//! loop), the fragments live across the loop and C goes through threadgroup memory only
//! before (not at all for a constant start) and after it.

use super::layout::{deposit_expr, MATRIX_TILE, SIMD_WIDTH};
use super::lower::{unsupported_on, Lowering, Repr};
use super::LayoutChoice;

/// `stmt` under `if (c0 && c1 ...)`, or alone when there is no condition.
fn guarded(conds: &[String], stmt: &str) -> String {
    if conds.is_empty() {
        stmt.to_string()
    } else {
        format!("if ({}) {stmt}", conds.join(" && "))
    }
}
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::{Op, OpId, Value, ValueDef};
use crate::opt::pipeline::ahead_loads;
use crate::opt::plan::{simdgroup_pitches, DotLowering, WarpGrid};
use crate::opt::smem::Role;

/// The shape of one `tl.dot`: `batch` products of `[m, k] x [k, n]`.
struct Dims {
    din: DType,
    dacc: DType,
    m: usize,
    k: usize,
    n: usize,
    batch: usize,
}

impl Lowering<'_> {
    pub(super) fn dot(&mut self, res: Value, a: Value, b: Value, acc: Value) -> Result<()> {
        let (sa, sb, sc) = (
            self.ty(a).shape.clone(),
            self.ty(b).shape.clone(),
            self.ty(acc).shape.clone(),
        );
        if let Some(frag) = self.frags.get(&acc).cloned() {
            // The accumulator stays in this loop's fragments across iterations.
            self.materialize(a)?;
            self.materialize(b)?;
            self.frag_mma(&frag, a, b, sa[0], sb[1], sa[1])?;
            self.frags.insert(res, frag);
            return Ok(());
        }
        let lowering = match self.cur_op {
            Some(op) => self.plan.dot(op),
            None => DotLowering::Fma,
        };
        let fragments = matches!(
            lowering,
            DotLowering::Simdgroup { .. } | DotLowering::Mma(_)
        );
        for v in [a, b, acc] {
            // A uniform accumulator fills the fragments directly (`frags_from`).
            if !(fragments && v == acc && self.is_uniform(acc)) {
                self.materialize(v)?;
            }
        }
        match lowering {
            DotLowering::Simdgroup { .. } | DotLowering::Mma(_) => {
                let (m, n, k) = (sa[0], sb[1], sa[1]);
                let op = self
                    .cur_op
                    .ok_or_else(|| unsupported_on(self.d, self.k, "a tiled dot outside any op"))?;
                let frag = self.frags_from(acc, m, n, op)?;
                self.frag_mma(&frag, a, b, m, n, k)?;
                if self.plan.keeps_fragments(op) {
                    return self.keep_in_fragments(op, res, frag, m, n);
                }
                self.frags_to_block(res, &frag, m, n)
            }
            DotLowering::Rows => self.dot_rows(res, a, b, acc, &sa, &sb, &sc),
            DotLowering::Fma => self.dot_scalar(res, a, b, acc, &sa, &sb, &sc),
        }
    }

    /// Operand and result dtypes (numbers only) and the product's shape.
    fn dot_dims(
        &self,
        a: Value,
        res: Value,
        sa: &[usize],
        sb: &[usize],
        sc: &[usize],
    ) -> Result<Dims> {
        let din = self.edt(a);
        let dacc = self.edt(res);
        if !(din.is_float() || din.is_int()) || !(dacc.is_float() || dacc.is_int()) {
            return Err(unsupported_on(
                self.d,
                self.k,
                format!("dot of {din} into {dacc}"),
            ));
        }
        let r = sa.len();
        Ok(Dims {
            din,
            dacc,
            m: sa[r - 2],
            k: sa[r - 1],
            n: sb[r - 1],
            batch: sc[..r - 2].iter().product(),
        })
    }

    /// `tl.dot` for a one-thread program (the CPU), where blocks are row-major arrays:
    /// rows of C accumulate `A[m, k] * B[k, :]` for k in order, four rows at a time, so
    /// the innermost loop runs along contiguous rows of B and C (vectorised by the C
    /// compiler) and each row of B is read once per four rows of C. Every element still
    /// sums its products in k order, as [`Self::dot_scalar`] does. When A's rows are read
    /// in place ([`crate::opt::cpu::CpuPlan::rows_in_place`]), A's elements come through
    /// its table of row pointers and, for f32 with B held in an array, the four rows of C
    /// accumulate in vector registers across the whole K ([`Self::dot_vectors`]; with A
    /// read through pointers, clang would otherwise keep them in memory).
    #[allow(clippy::too_many_arguments)]
    fn dot_rows(
        &mut self,
        res: Value,
        a: Value,
        b: Value,
        acc: Value,
        sa: &[usize],
        sb: &[usize],
        sc: &[usize],
    ) -> Result<()> {
        let Dims {
            din: _,
            dacc,
            m,
            k,
            n,
            batch,
        } = self.dot_dims(a, res, sa, sb, sc)?;
        let lay = self.layout(res);
        // 16-bit float accumulators sum in `float` and round once at the end of the dot,
        // as every other path (and the interpreter) does.
        let narrow = matches!(dacc, DType::F16 | DType::BF16);
        let in_place = if narrow {
            None
        } else {
            self.in_place_accumulator(acc, res)
        };
        let out = match &in_place {
            Some(a) => a.clone(),
            None => self.declare_block("dot", dacc, lay.n)?,
        };
        let (name, ct) = if narrow {
            (self.declare_block("dot_acc", DType::F32, lay.n)?, "float")
        } else {
            (out.clone(), self.cty(dacc)?)
        };
        let rows = if m % 4 == 0 { 4 } else { 1 };
        let fma = |x: &str, y: &str, c: &str| {
            if dacc.is_float() {
                format!("fma({x}, {y}, {c})")
            } else {
                format!("{c} + {x} * {y}")
            }
        };
        self.open(format!("for (uint tm_b = 0; tm_b < {batch}u; ++tm_b)"));
        self.open(format!("for (uint tm_m = 0; tm_m < {m}u; tm_m += {rows}u)"));
        if in_place.is_none() {
            self.open(format!("for (uint tm_n = 0; tm_n < {}u; ++tm_n)", rows * n));
            self.line(format!(
                "const uint tm_c = (tm_b * {m}u + tm_m) * {n}u + tm_n;"
            ));
            let c0 = self.el(acc, "tm_c");
            self.line(format!("{name}[tm_c] = {ct}({c0});"));
            self.close();
        }
        let a_rows = self
            .cpu
            .as_ref()
            .and_then(|c| c.row_ptrs.get(&a).cloned())
            .filter(|_| batch == 1);
        let b_array = match self.repr(b) {
            Repr::Block(x) if self.lazy_reads_of(x).is_none() => Some(x.clone()),
            _ => None,
        };
        let vectors = match (&a_rows, &b_array) {
            (Some(t), Some(y))
                if !narrow
                    && rows == 4
                    && n % 16 == 0
                    && dacc == DType::F32
                    && self.edt(a) == DType::F32
                    && self.edt(b) == DType::F32 =>
            {
                Some((t.clone(), y.clone()))
            }
            _ => None,
        };
        let ahead = if let Some((t, y)) = &vectors {
            self.dot_vectors((&name, t, y), (a, b), (m, k, n))?
        } else {
            let ahead = if batch == 1 {
                self.prefetch_group((a, b), (m, k, n), rows, None)?
            } else {
                0
            };
            self.open(format!("for (uint tm_k = 0; tm_k < {k}u; ++tm_k)"));
            for q in 0..rows {
                let x = match &a_rows {
                    Some(t) => format!("{t}[tm_m + {q}u][tm_k]"),
                    None => self.el(a, &format!("(tm_b * {m}u + tm_m + {q}u) * {k}u + tm_k")),
                };
                self.line(format!("const {ct} tm_x{q} = {ct}({x});"));
            }
            self.line(format!("const uint tm_brow = (tm_b * {k}u + tm_k) * {n}u;"));
            self.open(format!("for (uint tm_n = 0; tm_n < {n}u; ++tm_n)"));
            self.line(format!(
                "const {ct} tm_y = {ct}({});",
                self.el(b, "tm_brow + tm_n")
            ));
            for q in 0..rows {
                let c = format!("{name}[(tm_b * {m}u + tm_m + {q}u) * {n}u + tm_n]");
                self.line(format!("{c} = {};", fma(&format!("tm_x{q}"), "tm_y", &c)));
            }
            self.close();
            self.close();
            ahead
        };
        self.close();
        self.close();
        if narrow {
            let oct = self.cty(dacc)?;
            self.open(format!("for (uint tm_c = 0; tm_c < {}u; ++tm_c)", lay.n));
            self.line(format!("{out}[tm_c] = {oct}({name}[tm_c]);"));
            self.close();
        }
        self.set(res, Repr::Block(out));
        self.layouts.push(LayoutChoice {
            op: format!("dot {batch}x{m}x{n}x{k}"),
            layout: format!(
                "rows of C along rows of B, {rows} row(s) at a time{}{}{}",
                if in_place.is_some() {
                    ", accumulating in the loop's variable"
                } else {
                    ""
                },
                match (&a_rows, &vectors) {
                    (_, Some(_)) =>
                        ", A's rows read in place, C's rows in vectors of 16 (AVX-512) or 8",
                    (Some(_), None) => ", A's rows read in place",
                    _ => "",
                },
                match ahead {
                    0 => "",
                    1 => ", prefetching one operand's next-iteration rows",
                    _ => ", prefetching both operands' next-iteration rows",
                }
            ),
        });
        Ok(())
    }

    /// The k loop of [`Self::dot_rows`] for four f32 rows of C (`acc`, from row `tm_m`) with
    /// A's rows through the row pointers `a_rows` and B (`k`×`n`) in array `b`: per chunk of
    /// columns, the 4 rows' chunks sit in vector registers for the whole K, each updated by
    /// `fma` in k order (the same roundings as the scalar loop). The chunk fits the host's
    /// registers, chosen when clang compiles the program: with AVX-512 (32 registers of 16
    /// floats) up to 64 columns in vectors of 16, 16 registers; elsewhere (16 registers of 8
    /// floats on AVX2) 16 columns in vectors of 8, 8 registers, where 64 columns would spill
    /// the accumulators to memory at every k. The next iteration's rows of the operands
    /// ([`Self::prefetch_group`]) are requested a share per chunk, spread over the chunks
    /// of the four rows. Returns how many operands are prefetched.
    fn dot_vectors(
        &mut self,
        names: (&str, &str, &str),
        (a, b): (Value, Value),
        (m, k, n): (usize, usize, usize),
    ) -> Result<usize> {
        self.line("#if defined(__AVX512F__)");
        let w = [64, 32, 16].into_iter().find(|w| n % w == 0).unwrap_or(16);
        let ahead = self.dot_vector_chunks(names, (a, b), (m, k, n), 16, w)?;
        self.line("#else");
        self.dot_vector_chunks(names, (a, b), (m, k, n), 8, 16)?;
        self.line("#endif");
        Ok(ahead)
    }

    /// [`Self::dot_vectors`] in chunks of `w` columns, vectors of `lanes` floats.
    fn dot_vector_chunks(
        &mut self,
        (acc, a_rows, b_name): (&str, &str, &str),
        (a, b): (Value, Value),
        (m, k, n): (usize, usize, usize),
        lanes: usize,
        w: usize,
    ) -> Result<usize> {
        let v = w / lanes;
        let bytes = 4 * lanes;
        self.open(format!("for (uint tm_c0 = 0; tm_c0 < {n}u; tm_c0 += {w}u)"));
        let ahead = self.prefetch_group((a, b), (m, k, n), 4, Some(w))?;
        self.line(format!("vec<float, {lanes}> tm_acc[4][{v}];"));
        for q in 0..4 {
            for j in 0..v {
                self.line(format!(
                    "__builtin_memcpy(&tm_acc[{q}][{j}], &{acc}[(tm_m + {q}u) * {n}u + tm_c0 + {}u], {bytes});",
                    lanes * j
                ));
            }
        }
        self.open(format!("for (uint tm_k = 0; tm_k < {k}u; ++tm_k)"));
        self.line(format!("vec<float, {lanes}> tm_y[{v}];"));
        for j in 0..v {
            self.line(format!(
                "__builtin_memcpy(&tm_y[{j}], &{b_name}[tm_k * {n}u + tm_c0 + {}u], {bytes});",
                lanes * j
            ));
        }
        for q in 0..4 {
            self.line(format!(
                "const vec<float, {lanes}> tm_x{q} = {a_rows}[tm_m + {q}u][tm_k];"
            ));
            for j in 0..v {
                self.line(format!(
                    "tm_acc[{q}][{j}] = fma(tm_x{q}, tm_y[{j}], tm_acc[{q}][{j}]);"
                ));
            }
        }
        self.close();
        for q in 0..4 {
            for j in 0..v {
                self.line(format!(
                    "__builtin_memcpy(&{acc}[(tm_m + {q}u) * {n}u + tm_c0 + {}u], &tm_acc[{q}][{j}], {bytes});",
                    lanes * j
                ));
            }
        }
        self.close();
        Ok(ahead)
    }

    /// Prefetch hints ([`Self::prefetch_next`]) for the next iteration's rows of operands
    /// `a` (`m`×`k`) and `b` (`k`×`n`) that go with the `rows` rows of C from `tm_m`: those
    /// rows of A and an equal share of B's rows. With `chunk` (a width of columns, inside
    /// the loop over `tm_c0`), the hints are split between the `n / chunk` chunks of the
    /// rows, each chunk requesting the next part of the rows, instead of all of them at the
    /// start of the rows (measured faster on a Zen 3 host). Returns how many operands are
    /// prefetched.
    fn prefetch_group(
        &mut self,
        (a, b): (Value, Value),
        (m, k, n): (usize, usize, usize),
        rows: usize,
        chunk: Option<usize>,
    ) -> Result<usize> {
        // The A rows and the B rows of this chunk (of all chunks of the rows without one).
        let (a_rows, b_rows) = match chunk {
            Some(w) if n / w > 1 => {
                // Positions in parts of a row of C: this chunk's part of rows `tm_m ..`.
                let parts = n / w;
                let lo = format!("(tm_m * {parts}u + tm_c0 / {w}u * {rows}u)");
                let hi = format!("(tm_m * {parts}u + tm_c0 / {w}u * {rows}u + {rows}u)");
                let share = |x: &str| format!("{x} * {k}u / {}u", m * parts);
                (
                    (format!("{lo} / {parts}u"), format!("{hi} / {parts}u")),
                    (share(&lo), share(&hi)),
                )
            }
            _ => {
                let share = |x: &str| format!("{x} * {k}u / {m}u");
                (
                    ("tm_m".to_string(), format!("tm_m + {rows}u")),
                    (share("tm_m"), share(&format!("(tm_m + {rows}u)"))),
                )
            }
        };
        let mut ahead = self.prefetch_next(a, (&a_rows.0, &a_rows.1), k)? as usize;
        ahead += self.prefetch_next(b, (&b_rows.0, &b_rows.1), n)? as usize;
        Ok(ahead)
    }

    /// Before `for` loop `id` of a one-thread program: the loop's `tl.dot` operand loads
    /// whose pointers the loop carries and advances by a loop-invariant step (the shape
    /// [`ahead_loads`] recognises) are recorded in [`Lowering::prefetch`], with the ops
    /// computing their steps lowered here, so that [`Self::dot_rows`] can prefetch the rows
    /// the next iteration loads while it multiplies this iteration's. Returns the recorded
    /// load results (the loop forgets them after its body).
    pub(super) fn cpu_prefetch_prologue(&mut self, id: OpId) -> Result<Vec<Value>> {
        let Op::For { body, init, .. } = &self.k.op(id).op else {
            return Ok(Vec::new());
        };
        if self.threads != 1 {
            return Ok(Vec::new());
        }
        let args = &self.k.region(*body).args;
        let slots: Vec<usize> = (0..init.len())
            .filter(|&s| {
                self.k.region(*body).ops.iter().any(|&d| {
                    matches!(self.k.op(d).op, Op::Dot { acc, .. } if acc == args[s + 1])
                        && self.plan.dot(d) == DotLowering::Rows
                })
            })
            .collect();
        let Some(loads) = ahead_loads(self.k, id, &slots) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        let mark = self.layouts.len();
        for l in loads {
            let (res, Op::Load { ptr, .. }) = (self.k.op(l.load).result(), &self.k.op(l.load).op)
            else {
                continue;
            };
            let Some(res) = res else { continue };
            let ptr = *ptr;
            if self.prov[ptr.index()].is_none()
                || self.dynamic[ptr.index()]
                || self.in_words(ptr).is_some()
            {
                continue;
            }
            for op in l.step_ops {
                self.op(op)?;
            }
            self.prefetch.insert(res, (ptr, l.step));
            out.push(res);
        }
        self.layouts.truncate(mark);
        Ok(out)
    }

    /// Prefetch hints for rows `lo .. hi` (C expressions) of the `cols`-wide 2-D operand
    /// `v` as the next iteration of its loop loads them ([`Lowering::prefetch`]), when it
    /// is such a load (returns whether it was): every
    /// cache line from each row's first element on, one row's width of them. A hint
    /// neither faults nor changes memory, so rows the next load masks, reads element by
    /// element or finds outside the argument cost a wasted fetch at most; the address is
    /// computed in unsigned integers, never as an out-of-range pointer.
    fn prefetch_next(&mut self, v: Value, (lo, hi): (&str, &str), cols: usize) -> Result<bool> {
        let Some(&(ptr, step)) = self.prefetch.get(&v) else {
            return Ok(false);
        };
        let p = self.param_name(ptr)?;
        let bytes = cols * self.edt(v).size_bytes();
        let at =
            |lw: &Self, x: Value| format!("ulong(long({}))", lw.el(x, &format!("tm_q * {cols}u")));
        // A packed tile that was found in its cache slot is likely found next time too.
        let guard = match self.cpu.as_ref().and_then(|c| c.packed_hits.get(&v)) {
            Some(hit) => format!("if (!{hit}) "),
            None => String::new(),
        };
        self.open(format!(
            "{guard}for (uint tm_q = {lo}; tm_q < {hi}; ++tm_q)"
        ));
        self.line(format!(
            "const ulong tm_pf = ulong({p}.base) + ({} + {}) * sizeof({p}.base[0]);",
            at(self, ptr),
            at(self, step)
        ));
        self.line(format!(
            "for (uint tm_c = 0; tm_c < {bytes}u; tm_c += 64u) __builtin_prefetch(reinterpret_cast<const void*>(tm_pf + tm_c), 0, 2);"
        ));
        // A row that starts inside a line ends in one more.
        self.line(format!(
            "__builtin_prefetch(reinterpret_cast<const void*>(tm_pf + {}u), 0, 2);",
            bytes - 1
        ));
        self.close();
        Ok(true)
    }

    /// The array of `acc` when [`Self::dot_rows`] may accumulate into it in place: `acc`
    /// is a value a `for` loop carries (its own local array), of the result's dtype, and
    /// the dot is its only use, so nothing reads the old contents afterwards. Saves the
    /// copy into a new block and that block's room in the cache.
    fn in_place_accumulator(&self, acc: Value, res: Value) -> Option<String> {
        let carried = match self.k.value(acc)?.def {
            ValueDef::RegionArg(r, i) => {
                i > 0
                    && self
                        .k
                        .region(r)
                        .parent
                        .is_some_and(|p| matches!(self.k.op(p).op, Op::For { .. }))
            }
            _ => false,
        };
        if !carried || self.edt(acc) != self.edt(res) || self.frags.contains_key(&acc) {
            return None;
        }
        if self.k.use_counts().get(acc.index()).copied() != Some(1) {
            return None;
        }
        match self.repr(acc) {
            Repr::Block(a) if self.lazy_reads_of(a).is_none() => Some(a.clone()),
            _ => None,
        }
    }

    /// How the SIMD-groups split an `[m, n]` accumulator into 8x8 tiles
    /// ([`WarpGrid::simdgroup`]): SIMD-group `w` holds the `fm x fn` block of tiles at grid
    /// position `(w / wn, w % wn)`, slot `q` the tile `(q / fn, q % fn)` of that block.
    fn simd_grid(&self, m: usize, n: usize) -> WarpGrid {
        let warps = self.threads / SIMD_WIDTH;
        WarpGrid::simdgroup(m, n, warps).unwrap_or(WarpGrid {
            wm: 1,
            wn: 1,
            fm: m / MATRIX_TILE,
            fn_: n / MATRIX_TILE,
        })
    }

    /// Opens the loop over this SIMD-group's C tiles (`tm_q` its slot, `tm_tm`/`tm_tn` the
    /// tile's first row and column); the caller closes it.
    fn open_tiles(&mut self, m: usize, n: usize) {
        let g = self.simd_grid(m, n);
        let per = g.fm * g.fn_;
        let bound = if g.active() < self.threads / SIMD_WIDTH {
            format!("(tm_lid / 32u < {}u ? {per}u : 0u)", g.active())
        } else {
            format!("{per}u")
        };
        self.open(format!("for (uint tm_q = 0; tm_q < {bound}; ++tm_q)"));
        self.line(format!(
            "const uint tm_tm = ((tm_lid / 32u) / {}u * {}u + tm_q / {}u) * 8u;",
            g.wn, g.fm, g.fn_
        ));
        self.line(format!(
            "const uint tm_tn = ((tm_lid / 32u) % {}u * {}u + tm_q % {}u) * 8u;",
            g.wn, g.fn_, g.fn_
        ));
    }

    /// Rows of an `[m, n]` accumulator the op being lowered moves between fragments and
    /// the blocked layout per pass, as the plan decided (all of them when it has no band).
    pub(super) fn c_band_rows(&self, m: usize, n: usize) -> usize {
        self.cur_op
            .and_then(|op| self.plan.band_rows(op, m, n))
            .unwrap_or(m)
            .clamp(1, m)
    }

    /// Declares this SIMD-group's C fragments and loads them from block `acc` `[m, n]`
    /// (through threadgroup memory in the plan's bands).
    pub(super) fn frags_from(
        &mut self,
        acc: Value,
        m: usize,
        n: usize,
        dot: OpId,
    ) -> Result<String> {
        if self.d.mma_m16n8k16 {
            return self.mma_frags_from(acc, m, n, dot);
        }
        let g = self.simd_grid(m, n);
        let per = g.fm * g.fn_;
        let c = self.fresh("frag_c");
        self.line(format!("simdgroup_matrix<float, 8, 8> {c}[{per}];"));
        if let Repr::Scalar(v) | Repr::Splat(v) = self.repr(acc).clone() {
            // A uniform accumulator (usually zeros) needs no staging.
            self.open_tiles(m, n);
            self.line(format!(
                "{c}[tm_q] = make_filled_simdgroup_matrix<float, 8, 8>(float({v}));"
            ));
            self.close();
            return Ok(c);
        }
        let rows = self.c_band_rows(m, n);
        let s = self.smem_buf(Role::AccIn, DType::F32, rows * n)?;
        let band = self.open_band(m, rows);
        self.smem_write_begin();
        let lay = self.layout(acc);
        let x = self.el(acc, "tm_i");
        self.open_regs(lay, true);
        let mut conds = Vec::new();
        if lay.has_idle_threads() {
            conds.push(format!("tm_l < {}u", lay.n));
        }
        if band {
            conds.push(format!("tm_l / {n}u - tm_band < {rows}u"));
        }
        let at = if band {
            format!("tm_l - tm_band * {n}u")
        } else {
            "tm_l".into()
        };
        self.line(guarded(&conds, &format!("{s}[{at}] = float({x});")));
        self.close();
        self.smem_write_end();
        self.open_tiles(m, n);
        let load = format!(
            "simdgroup_load({c}[tm_q], {s} + (tm_tm{}) * {n}u + tm_tn, {n});",
            if band { " - tm_band" } else { "" }
        );
        let cond = band.then(|| format!("tm_tm - tm_band < {rows}u"));
        self.line(guarded(&cond.into_iter().collect::<Vec<_>>(), &load));
        self.close();
        self.smem_read_done();
        if band {
            self.close();
        }
        Ok(c)
    }

    /// Opens `for (tm_band ...)` over row bands of `rows` rows when `rows < m` (the caller
    /// closes it when this returns true). Each pass starts with the previous one's reads
    /// pending.
    fn open_band(&mut self, m: usize, rows: usize) -> bool {
        if rows >= m {
            return false;
        }
        self.open(format!(
            "for (uint tm_band = 0; tm_band < {m}u; tm_band += {rows}u)"
        ));
        self.hazard.reads_pending = true;
        true
    }

    /// `frag += a @ b`: A and B staged through threadgroup memory in their own dtype when
    /// both are half (the tiles multiply in half and accumulate in float), else as float; K
    /// in the plan's slices, rows padded as [`simdgroup_pitches`] says. Operands whose loads
    /// the loop issued ahead are already staged in its ring ([`super::dbuf`]).
    fn frag_mma(
        &mut self,
        c: &str,
        a: Value,
        b: Value,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        if self.d.mma_m16n8k16 {
            return self.mma_accumulate(c, a, b, m, n, k);
        }
        let st = match self.cur_op.map(|op| self.plan.dot(op)) {
            Some(DotLowering::Simdgroup { stage }) => stage,
            _ => DType::F32,
        };
        let sct = self.cty(st)?;
        let ring = self.in_ring(a) && self.in_ring(b);
        let stages = if ring { self.ring_stages() } else { 1 };
        let kc = if ring {
            k
        } else {
            self.cur_op
                .and_then(|op| self.plan.k_slice(op))
                .unwrap_or(k)
                .clamp(1, k)
        };
        let (pa, pb) = simdgroup_pitches((m, n, kc), st, self.plan.arena.limit / stages);
        let sliced = kc < k;
        let s = if ring {
            match self.repr(a) {
                Repr::Block(x) => x.clone(),
                _ => {
                    return Err(unsupported_on(
                        self.d,
                        self.k,
                        "a dot operand staged ahead that is not a ring buffer",
                    ))
                }
            }
        } else {
            let s = self.smem_buf(Role::Operands, st, m * pa + kc * pb)?;
            if sliced {
                self.open(format!(
                    "for (uint tm_kc = 0; tm_kc < {k}u; tm_kc += {kc}u)"
                ));
                self.hazard.reads_pending = true;
            }
            self.smem_write_begin();
            for (v, operand) in [(a, 0), (b, 1)] {
                let lay = self.layout(v);
                let x = match self.el(v, "tm_i") {
                    x if self.edt(v) == st => x,
                    x => format!("{sct}({x})"),
                };
                let slice = sliced.then_some(("tm_kc", kc));
                self.stage_operand(&s, &x, lay, operand, (m, n, k), slice, (pa, pb));
            }
            self.smem_write_end();
            s
        };
        let g = self.simd_grid(m, n);
        let (fm, fnn) = (g.fm, g.fn_);
        let boff = m * pa;
        self.line("{");
        self.indent += 1;
        self.line(format!("simdgroup_matrix<{sct}, 8, 8> tm_fa[{fm}];"));
        self.line(format!("simdgroup_matrix<{sct}, 8, 8> tm_fb[{fnn}];"));
        self.line(format!(
            "const uint tm_r0 = (tm_lid / 32u) / {}u * {}u;",
            g.wn,
            fm * MATRIX_TILE
        ));
        self.line(format!(
            "const uint tm_c0 = (tm_lid / 32u) % {}u * {}u;",
            g.wn,
            fnn * MATRIX_TILE
        ));
        let idle = g.active() < self.threads / SIMD_WIDTH;
        if idle {
            self.open(format!("if (tm_lid / 32u < {}u)", g.active()));
        }
        // Each fragment of A and B is loaded once per 8 of K and used by all the MMAs of
        // its row (A) or column (B) of this SIMD-group's tiles.
        self.open(format!("for (uint tm_kk = 0; tm_kk < {kc}u; tm_kk += 8u)"));
        self.open(format!("for (uint tm_x = 0; tm_x < {fm}u; ++tm_x)"));
        self.line(format!(
            "simdgroup_load(tm_fa[tm_x], {s} + (tm_r0 + tm_x * 8u) * {pa}u + tm_kk, {pa});"
        ));
        self.close();
        self.open(format!("for (uint tm_y = 0; tm_y < {fnn}u; ++tm_y)"));
        self.line(format!(
            "simdgroup_load(tm_fb[tm_y], {s} + {boff}u + tm_kk * {pb}u + tm_c0 + tm_y * 8u, {pb});"
        ));
        self.close();
        self.open(format!("for (uint tm_x = 0; tm_x < {fm}u; ++tm_x)"));
        self.open(format!("for (uint tm_y = 0; tm_y < {fnn}u; ++tm_y)"));
        self.line(format!(
            "simdgroup_multiply_accumulate({c}[tm_x * {fnn}u + tm_y], tm_fa[tm_x], tm_fb[tm_y], {c}[tm_x * {fnn}u + tm_y]);"
        ));
        self.close();
        self.close();
        self.close();
        if idle {
            self.close();
        }
        self.close();
        if !ring {
            self.smem_read_done();
            if sliced {
                self.close();
            }
        }
        let slices = if sliced {
            format!(" in K slices of {kc}")
        } else if ring {
            format!(" in a ring of {stages} buffers filled a K step ahead")
        } else {
            String::new()
        };
        let pad = if (pa, pb) == (kc, n) {
            String::new()
        } else {
            format!(", rows padded to {pa} and {pb} elements")
        };
        self.layouts.push(LayoutChoice {
            op: format!("dot {m}x{n}x{k}"),
            layout: format!(
                "simdgroup_matrix<float, 8, 8>: {}x{} SIMD-groups of {}x{} C tiles, A and B staged as {sct} through threadgroup memory{slices}{pad}",
                g.wm, g.wn, fm, fnn
            ),
        });
        Ok(())
    }

    /// Writes element expression `x` (at register `tm_i`, layout `lay`) of operand
    /// `operand` (0: A `[m, k]`, 1: B `[k, n]`) into the staged tiles at `s`: A's rows at
    /// pitch `pa`, then B's rows at pitch `pb` from `m * pa`. With `slice = (var, kc)`,
    /// only the `kc` columns of A and rows of B from `var` on.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn stage_operand(
        &mut self,
        s: &str,
        x: &str,
        lay: super::layout::BlockedLayout,
        operand: usize,
        (m, n, k): (usize, usize, usize),
        slice: Option<(&str, usize)>,
        (pa, pb): (usize, usize),
    ) {
        self.open_regs(lay, true);
        let mut conds = Vec::new();
        if lay.has_idle_threads() {
            conds.push(format!("tm_l < {}u", lay.n));
        }
        let at = match (operand, slice) {
            (0, None) if pa == k => "tm_l".to_string(),
            (0, None) => format!("(tm_l / {k}u) * {pa}u + tm_l % {k}u"),
            (0, Some((v, kc))) => {
                conds.push(format!("tm_l % {k}u - {v} < {kc}u"));
                format!("(tm_l / {k}u) * {pa}u + tm_l % {k}u - {v}")
            }
            (_, None) if pb == n => format!("{}u + tm_l", m * pa),
            (_, None) => format!("{}u + (tm_l / {n}u) * {pb}u + tm_l % {n}u", m * pa),
            (_, Some((v, kc))) => {
                conds.push(format!("tm_l / {n}u - {v} < {kc}u"));
                format!("{}u + (tm_l / {n}u - {v}) * {pb}u + tm_l % {n}u", m * pa)
            }
        };
        self.line(guarded(&conds, &format!("{s}[{at}] = {x};")));
        self.close();
    }

    /// Stores fragments `c` (`[m, n]`) back into a block in the blocked layout as `res`,
    /// through threadgroup memory in the plan's bands.
    pub(super) fn frags_to_block(&mut self, res: Value, c: &str, m: usize, n: usize) -> Result<()> {
        if self.d.mma_m16n8k16 {
            return self.mma_frags_to_block(res, c, m, n);
        }
        let rows = self.c_band_rows(m, n);
        let s = self.smem_buf(Role::AccOut, DType::F32, rows * n)?;
        let dacc = self.edt(res);
        let ct = self.cty(dacc)?;
        let lay = self.layout_of(m * n);
        if rows >= m {
            self.smem_write_begin();
            self.open_tiles(m, n);
            self.line(format!(
                "simdgroup_store({c}[tm_q], {s} + tm_tm * {n}u + tm_tn, {n});"
            ));
            self.close();
            self.smem_write_end();
            let name = self.gather("dot", dacc, m * n, &|l| format!("{ct}({s}[{l}])"))?;
            self.smem_read_done();
            self.set(res, Repr::Block(name));
            return Ok(());
        }
        let name = self.declare_block("dot", dacc, m * n)?;
        if lay.has_idle_threads() {
            self.open_regs(lay, false);
            self.line(format!("{name}[tm_i] = {ct}(0);"));
            self.close();
        }
        self.open_band(m, rows);
        self.smem_write_begin();
        self.open_tiles(m, n);
        self.line(format!(
            "if (tm_tm - tm_band < {rows}u) simdgroup_store({c}[tm_q], {s} + (tm_tm - tm_band) * {n}u + tm_tn, {n});"
        ));
        self.close();
        self.smem_write_end();
        self.open_regs(lay, true);
        self.line(format!(
            "if (tm_l - tm_band * {n}u < {}u) {name}[tm_i] = {ct}({s}[tm_l - tm_band * {n}u]);",
            rows * n
        ));
        self.close();
        self.smem_read_done();
        self.close();
        self.set(res, Repr::Block(name));
        Ok(())
    }

    /// `tl.dot` by scalar FMAs, for the shapes and types the matrix tiles cannot take (and
    /// every dot where the target has none): A and B are staged row-major in threadgroup
    /// memory and each thread accumulates its C elements in registers. The elements of one
    /// thread form a product set, batches × rows × columns: the register bits of C's blocked
    /// layout each land in the batch, row or column field of the flat index, and the thread
    /// bits fix the rest ([`ScalarDotGeometry`]). The K loop is outer, in steps of up to four
    /// (consecutive elements of a row of A, read together); per step each of the thread's
    /// columns of B is read once per k and each of its rows of A once, and every element
    /// takes its products in k order, one `fma` per k (`c + x * y` for integers), so the
    /// sums are those of the plain per-element loop. 16-bit float accumulators sum in
    /// `float` and round once at the end.
    #[allow(clippy::too_many_arguments)]
    fn dot_scalar(
        &mut self,
        res: Value,
        a: Value,
        b: Value,
        acc: Value,
        sa: &[usize],
        sb: &[usize],
        sc: &[usize],
    ) -> Result<()> {
        let Dims {
            din,
            dacc,
            m,
            k,
            n,
            batch,
        } = self.dot_dims(a, res, sa, sb, sc)?;
        let na = batch * m * k;
        let s = self.smem_buf(Role::Operands, din, na + batch * k * n)?;
        self.smem_write_begin();
        match self.cpu.as_ref().and_then(|c| c.row_ptrs.get(&a).cloned()) {
            // A one-thread program whose A rows are read in place (2-D f32 tiles,
            // `CpuPlan::rows_in_place`): the block holds only the rows that were copied,
            // the table of row pointers every row.
            Some(t) => {
                self.open(format!("for (uint tm_l = 0; tm_l < {na}u; ++tm_l)"));
                self.line(format!("{s}[tm_l] = {t}[tm_l / {k}u][tm_l % {k}u];"));
                self.close();
            }
            None => self.stage(a, &s, 0, &|l| l.to_string())?,
        }
        self.stage(b, &s, na, &|l| l.to_string())?;
        self.smem_write_end();
        let ct = self.cty(dacc)?;
        let lay = self.layout(res);
        let g = ScalarDotGeometry::new(lay, m, n);
        let name = self.declare_block("dot", dacc, lay.n)?;
        let narrow = matches!(dacc, DType::F16 | DType::BF16);
        let at = if narrow { "float" } else { ct };
        let c = if narrow {
            self.declare_block("dot_acc", DType::F32, lay.n)?
        } else {
            name.clone()
        };
        let accs = self.el(acc, "tm_i");
        let idle = lay.has_idle_threads();
        self.open_regs(lay, true);
        if idle {
            self.line(format!(
                "{c}[tm_i] = tm_l < {}u ? {at}({accs}) : {at}(0);",
                lay.n
            ));
        } else {
            self.line(format!("{c}[tm_i] = {at}({accs});"));
        }
        self.close();
        // The flat index of the thread's register 0: its batch, row and column bits.
        let (lm, ln) = (m.trailing_zeros(), n.trailing_zeros());
        let f0 = match lay.vec_bits() {
            0 => "tm_lid".to_string(),
            vb => format!("tm_lid << {vb}"),
        };
        self.line("{");
        self.indent += 1;
        self.line(format!("const uint tm_f0 = {f0};"));
        if idle {
            self.open(format!("if (tm_f0 < {}u)", lay.n));
        }
        self.line(format!("const uint tm_b0 = tm_f0 >> {};", lm + ln));
        self.line(format!("const uint tm_m0 = (tm_f0 >> {ln}) & {}u;", m - 1));
        self.line(format!("const uint tm_n0 = tm_f0 & {}u;", n - 1));
        // Consecutive k per step: a row of A's run is read as one vector where it can be.
        let kv = [4, 2, 1].into_iter().find(|v| k % v == 0).unwrap_or(1);
        let (nb, nr, nc) = (g.batches(), g.rows(), g.cols());
        let fields = [("tm_q", &g.batch), ("tm_r", &g.row), ("tm_c", &g.col)];
        let reg = fields
            .map(|(var, f)| ScalarDotGeometry::deposit(var, f, true))
            .join(" | ");
        let [boff, roff, coff] = fields.map(|(var, f)| ScalarDotGeometry::deposit(var, f, false));
        // Unrolled, the loops over the thread's elements index C's registers by constants,
        // so they stay in registers; a one-thread program (the CPU's, whose "registers"
        // are the whole block) keeps plain loops.
        let unroll = lay.regs() <= 256;
        let unrolled = |me: &mut Self, var: &str, count: usize| {
            if unroll {
                me.line("#pragma unroll");
            }
            me.open(format!("for (uint {var} = 0; {var} < {count}u; ++{var})"));
        };
        self.open(format!("for (uint tm_k = 0; tm_k < {k}u; tm_k += {kv}u)"));
        unrolled(self, "tm_q", nb);
        self.line(format!("const uint tm_b = tm_b0 + ({boff});"));
        // This step's k of the thread's columns of B.
        self.line(format!("{at} tm_y[{kv}][{nc}];"));
        unrolled(self, "tm_j", kv);
        unrolled(self, "tm_c", nc);
        self.line(format!(
            "tm_y[tm_j][tm_c] = {at}({s}[{na}u + tm_b * {}u + (tm_k + tm_j) * {n}u + tm_n0 + ({coff})]);",
            k * n
        ));
        self.close();
        self.close();
        unrolled(self, "tm_r", nr);
        // This step's k of one of the thread's rows of A, used by all its columns.
        self.line(format!(
            "const uint tm_row = tm_b * {}u + (tm_m0 + ({roff})) * {k}u + tm_k;",
            m * k
        ));
        self.line(format!("{at} tm_x[{kv}];"));
        unrolled(self, "tm_j", kv);
        self.line(format!("tm_x[tm_j] = {at}({s}[tm_row + tm_j]);"));
        self.close();
        unrolled(self, "tm_j", kv);
        unrolled(self, "tm_c", nc);
        self.line(format!("const uint tm_i = {reg};"));
        let (x, y, ci) = ("tm_x[tm_j]", "tm_y[tm_j][tm_c]", format!("{c}[tm_i]"));
        if dacc.is_float() {
            self.line(format!("{ci} = fma({x}, {y}, {ci});"));
        } else {
            self.line(format!("{ci} = {ci} + {x} * {y};"));
        }
        self.close();
        self.close();
        self.close();
        self.close();
        self.close();
        if idle {
            self.close();
        }
        self.close();
        if narrow {
            self.open_regs(lay, false);
            self.line(format!("{name}[tm_i] = {ct}({c}[tm_i]);"));
            self.close();
        }
        self.smem_read_done();
        self.set(res, Repr::Block(name));
        self.layouts.push(LayoutChoice {
            op: format!("dot {}x{m}x{n}x{k}", batch),
            layout: format!(
                "scalar FMA: operands staged in threadgroup memory, C in registers, \
                 {nb}x{nr}x{nc} (batches x rows x columns) per thread, K in steps of {kv}"
            ),
        });
        Ok(())
    }
}

/// Which register bits of a thread's C elements (under C's blocked layout) are bits of
/// the batch, row and column indices of a `[batch, m, n]` block (`m`, `n` powers of two):
/// per field, `(register bit, bit of that index)` pairs. Every register bit is a flat-index
/// bit above, below or among the thread bits, so it lands in exactly one field, and the
/// thread's elements are the product of its batches, rows and columns.
#[derive(Debug, PartialEq, Eq)]
struct ScalarDotGeometry {
    batch: Vec<(u32, u32)>,
    row: Vec<(u32, u32)>,
    col: Vec<(u32, u32)>,
}

impl ScalarDotGeometry {
    fn new(lay: super::layout::BlockedLayout, m: usize, n: usize) -> ScalarDotGeometry {
        let (lm, ln) = (m.trailing_zeros(), n.trailing_zeros());
        let (vb, tb) = (lay.vec_bits(), lay.thread_bits());
        let mut g = ScalarDotGeometry {
            batch: Vec::new(),
            row: Vec::new(),
            col: Vec::new(),
        };
        for j in 0..lay.regs().trailing_zeros() {
            let p = if j < vb { j } else { j + tb };
            if p < ln {
                g.col.push((j, p));
            } else if p < ln + lm {
                g.row.push((j, p - ln));
            } else {
                g.batch.push((j, p - ln - lm));
            }
        }
        g
    }

    /// `var`'s bits deposited at the field's register bits (`reg`) or at its index bits.
    fn deposit(var: &str, field: &[(u32, u32)], reg: bool) -> String {
        let bits: Vec<u32> = field
            .iter()
            .map(|&(r, i)| if reg { r } else { i })
            .collect();
        deposit_expr(var, &bits)
    }

    fn batches(&self) -> usize {
        1 << self.batch.len()
    }

    fn rows(&self) -> usize {
        1 << self.row.len()
    }

    fn cols(&self) -> usize {
        1 << self.col.len()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{build, matmul};
    use super::super::{metal, LaunchOptions};
    use crate::dtype::DType::{F16, F32, I32};
    use crate::tl::{self, Tensor};

    fn metal_mm(
        dtype: crate::DType,
        blocks: [i64; 3],
        warps: u32,
    ) -> crate::Result<metal::MetalProgram> {
        let k = build(
            "mm",
            &[("BM", blocks[0]), ("BN", blocks[1]), ("BK", blocks[2])],
            matmul(dtype),
        );
        metal::compile(&k, &LaunchOptions::default().num_warps(warps))
    }

    #[test]
    fn half_operands_stage_as_half_and_large_accumulators_leave_in_bands() {
        let p = metal_mm(F16, [128, 128, 32], 4).unwrap();
        // A and B: 128x(32+8) and 32x(128+8) halves, rows padded against bank conflicts
        // (18944 bytes); C leaves in four bands of 32 rows (16 KB) over the same bytes (the
        // two are never live together).
        assert_eq!(p.threadgroup_mem_bytes, 18944);
        assert!(
            p.source.contains("threadgroup float4 tm_arena[1184];"),
            "{}",
            p.source
        );
        assert!(p.source.contains("simdgroup_matrix<half, 8, 8> tm_fa[8];"));
        assert!(p.source.contains("tm_band += 32u"), "{}", p.source);
        let bufs = &p.plan.arena.buffers;
        assert_eq!(bufs.len(), 2, "{}", p.plan);
        assert!(bufs.iter().all(|b| b.offset == 0));
        let mut bytes: Vec<usize> = bufs.iter().map(|b| b.bytes).collect();
        bytes.sort();
        assert_eq!(bytes, [16 * 1024, 18944], "{}", p.plan);
        // Float operands take the whole 32 KB for A and B (no room to pad), and C reuses it
        // in two bands.
        let p = metal_mm(F32, [128, 128, 32], 8).unwrap();
        assert_eq!(p.threadgroup_mem_bytes, 32 * 1024);
        assert!(p.source.contains("tm_band += 64u"), "{}", p.source);
        // Small accumulators move in one pass.
        let p = metal_mm(F32, [32, 32, 16], 4).unwrap();
        assert!(!p.source.contains("tm_band"), "{}", p.source);
    }

    #[test]
    fn operands_too_large_for_one_staging_go_in_k_slices() {
        let p = metal_mm(F32, [128, 128, 64], 4).unwrap();
        assert_eq!(p.threadgroup_mem_bytes, 32 * 1024);
        assert!(p.source.contains("tm_kc += 32u"), "{}", p.source);
        assert!(p
            .layouts
            .iter()
            .any(|l| l.layout.ends_with("in K slices of 32")));
    }

    /// The layout note of the CPU's dot in `k`.
    fn cpu_dot_layout(k: &crate::ir::Kernel) -> String {
        let p = super::super::cpu::compile(k, false).unwrap();
        p.layouts
            .iter()
            .find(|l| l.op.starts_with("dot "))
            .map(|l| l.layout.clone())
            .unwrap_or_default()
    }

    #[test]
    fn the_cpu_dot_accumulates_into_the_loop_variable_only_when_nothing_else_reads_it() {
        let k = build("mm", &[("BM", 32), ("BN", 32), ("BK", 16)], matmul(F32));
        let l = cpu_dot_layout(&k);
        assert!(l.contains("accumulating in the loop's variable"), "{l}");
        // The accumulator is read again after the dot: the dot writes a block of its own.
        let k = build("mm_reread", &[], |k| {
            let (a, c) = (k.ptr(F32, "a_ptr"), k.ptr(F32, "c_ptr"));
            let offs = tl::arange(0, 16);
            let tile = offs.col() * 16 + offs.row();
            let acc = tl::zeros([16, 16], F32);
            let acc: Tensor = tl::range(0, 4, 1).fold(acc, |_, acc| {
                let x = tl::load(a + tile);
                tl::dot(x, x, acc) - acc
            });
            tl::store(c + tile, acc);
        });
        let l = cpu_dot_layout(&k);
        assert!(
            l.starts_with("rows of C") && !l.contains("in the loop"),
            "{l}"
        );
    }

    /// The tutorial's main loop: pointer blocks the loop carries and advances by
    /// `BK * stride`, the K tail masked.
    fn tutorial_mm(k: &mut tl::KernelBuilder) {
        let (a, b, c) = (
            k.ptr(F32, "a_ptr"),
            k.ptr(F32, "b_ptr"),
            k.ptr(F32, "c_ptr"),
        );
        let (n, kk) = (k.scalar(I32, "N"), k.scalar(I32, "K"));
        let (sa, sb) = (k.scalar(I32, "stride_ak"), k.scalar(I32, "stride_bk"));
        let offs = tl::arange(0, 16);
        let offs_k = tl::arange(0, 16);
        let a_ptrs = a + (offs.col() * kk + offs_k.row() * sa);
        let b_ptrs = b + (offs_k.col() * sb + offs.row());
        let acc = tl::zeros([16, 16], F32);
        let (acc, _, _): (Tensor, Tensor, Tensor) =
            tl::range(0, tl::cdiv(kk, 16), 1).fold((acc, a_ptrs, b_ptrs), |i, (acc, pa, pb)| {
                let left = kk - i * 16;
                let x = tl::load(pa).mask(offs_k.row().lt(left)).other(0.0);
                let y = tl::load(pb).mask(offs_k.col().lt(left)).other(0.0);
                (tl::dot(x, y, acc), pa + sa * 16, pb + sb * 16)
            });
        tl::store(c + offs.col() * n + offs.row(), acc);
    }

    #[test]
    fn the_cpu_dot_prefetches_the_rows_a_loop_loads_next_through_advanced_pointers() {
        let k = build("mm_ptrs", &[], tutorial_mm);
        let l = cpu_dot_layout(&k);
        assert!(
            l.ends_with("prefetching both operands' next-iteration rows"),
            "{l}"
        );
        let src = super::super::cpu::compile(&k, false).unwrap().source;
        let body = src
            .split("#line 1 \"kernel.cpp\"")
            .nth(1)
            .unwrap_or_default();
        // Addresses in unsigned integers: hints past either end never form a pointer.
        assert_eq!(
            body.matches("__builtin_prefetch(reinterpret_cast").count(),
            4
        );
        assert!(src.contains("const ulong tm_pf = ulong(a_ptr.base) + ("));
        // Pointers recomputed from the induction variable: nothing to prefetch.
        let k = build("mm", &[("BM", 32), ("BN", 32), ("BK", 16)], matmul(F32));
        let l = cpu_dot_layout(&k);
        assert!(!l.contains("prefetching"), "{l}");
    }

    #[test]
    fn a_dot_that_cannot_fit_is_refused_with_its_size_and_line() {
        // Even 8-deep slices of a 256x1024 product need 40 KB.
        let e = metal_mm(F32, [256, 1024, 16], 4).unwrap_err().to_string();
        assert!(
            e.contains("needs 40960 bytes of threadgroup memory on m1"),
            "{e}"
        );
        assert!(
            e.contains("allows 32768 (profile threadgroup_memory_bytes"),
            "{e}"
        );
        assert!(
            e.contains("40960 bytes of f32 (dot.operands of `dot` at src/codegen/tests.rs:"),
            "{e}"
        );
        assert!(e.contains("smaller BLOCK_SIZE_M/N/K"), "{e}");
    }
}
