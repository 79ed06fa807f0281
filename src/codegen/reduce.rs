//! Reductions and scans.
//!
//! A reduction follows the layout the options ask for ([`ReductionLayout`]); each is a
//! different program shape, all exact up to float reassociation:
//! - COALESCED: each thread combines the elements it holds, then lanes combine with
//!   `simd_sum` (and `simd_max`/`simd_min` on integers; float max/min, undefined for NaN
//!   under Metal's fast math functions, take the butterfly), or a `simd_shuffle_xor`
//!   butterfly over the lane bits that belong to the reduced axis, then SIMD-groups through
//!   threadgroup memory.
//! - DEFAULT: thread-local partials, then one pass over the partials in threadgroup memory
//!   (no SIMD collectives).
//! - ROW_MAJOR: the block is staged row-major; each output's owner walks its row serially.
//! - COLUMN_MAJOR: the block is staged with the reduced axis outermost, so neighbouring
//!   threads read neighbouring words while each walks its column.
//! - TILED: staged row-major, then a pairwise tree in threadgroup memory (`log2(K)` barriers).
//!
//! argmax/argmin carry the axis index next to each value and break ties toward the smaller
//! index, so every strategy returns Triton's left-most answer; NaN is ignored like `max`.

use super::layout::{deposit_expr, BitHome, SIMD_WIDTH};
use super::lower::{remap_expr, unsupported_on, Lowering, Repr};
use super::{LayoutChoice, ReductionLayout};
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::{BinaryOp, OpId, ReduceKind, RegionId, ScanKind, Value};
use crate::opt::blocked::AxisGeo as Geo;
use crate::opt::plan::ScanStrategy;

/// The C spellings of indices under an axis geometry ([`Geo`]).
trait GeoExpr {
    /// Axis index of flat element `l`.
    fn kidx(&self, l: &str) -> String;
    /// Output index of flat element `l`.
    fn out_index(&self, l: &str) -> String;
    /// Row-major flat index of output `o`, axis index `k`.
    fn in_index(&self, o: &str, k: &str) -> String;
}

impl GeoExpr for Geo {
    /// Axis index of flat element `l`.
    fn kidx(&self, l: &str) -> String {
        format!("int(({l} >> {}) & {}u)", self.ib, self.k - 1)
    }

    /// Output index of flat element `l`.
    fn out_index(&self, l: &str) -> String {
        let mut f = Vec::new();
        if self.ib > 0 {
            f.push((0, self.ib, 0));
        }
        let hi = (self.n.trailing_zeros()) - self.ib - self.kb;
        if hi > 0 {
            f.push((self.ib + self.kb, hi, self.ib));
        }
        remap_expr(l, &f)
    }

    /// Row-major flat index of output `o`, axis index `k`.
    fn in_index(&self, o: &str, k: &str) -> String {
        let inner = (1u64 << self.ib) - 1;
        let mut parts = vec![format!("(({k}) << {})", self.ib)];
        if self.ib > 0 {
            parts.push(format!("(({o}) & {inner}u)"));
        }
        if self.nout > (1 << self.ib) {
            parts.push(format!("((({o}) >> {}) << {})", self.ib, self.ib + self.kb));
        }
        parts.join(" | ")
    }
}

/// Metal's `simd_sum` of floats with -0.0 as the identity (the dialect helper `simd_fsum`).
/// Metal leaves the sign of a zero sum open, and an implementation that adds into +0.0
/// returns +0.0 for lanes that all hold -0.0. IEEE addition gives -0.0 exactly when every
/// operand is -0.0, whatever the order, so that case is selected and the rest is `simd_sum`.
pub(super) const METAL_SIMD_FSUM: &str = r#"
inline float tm_simd_fsum(float x) {
  return simd_all(as_type<uint>(x) == 0x80000000u) ? -0.0f : simd_sum(x);
}
inline half tm_simd_fsum(half x) {
  return simd_all(as_type<ushort>(x) == ushort(0x8000u)) ? half(-0.0f) : simd_sum(x);
}
"#;

fn is_arg(kind: ReduceKind) -> bool {
    matches!(kind, ReduceKind::ArgMax | ReduceKind::ArgMin)
}

impl Lowering<'_> {
    /// The `int` scratch for the indices of an arg-reduction whose values (`elems` of `dt`)
    /// are staged next to them. Scratch arrays are one per dtype, so when the values are
    /// `i32` themselves the indices go in the same array after the values, not over them.
    fn index_scratch(&mut self, dt: DType, elems: usize) -> Result<String> {
        if dt == DType::I32 {
            let s = self.scratch_array(DType::I32, 2 * elems)?;
            Ok(format!("({s} + {elems}u)"))
        } else {
            self.scratch_array(DType::I32, elems)
        }
    }

    /// `acc (, ai) <- combine(acc (, ai), v (, vi))` as one statement.
    pub(super) fn combine(
        &mut self,
        kind: ReduceKind,
        dt: DType,
        acc: &str,
        ai: &str,
        v: &str,
        vi: &str,
    ) -> Result<String> {
        let op = match kind {
            ReduceKind::Sum => BinaryOp::Add,
            ReduceKind::Max => BinaryOp::Max,
            ReduceKind::Min => BinaryOp::Min,
            ReduceKind::Xor => BinaryOp::Xor,
            ReduceKind::ArgMax | ReduceKind::ArgMin => {
                let up = |x: &str| {
                    if dt == DType::BF16 {
                        format!("float({x})")
                    } else {
                        x.to_string()
                    }
                };
                let (a, b) = (up(v), up(acc));
                let gt = if kind == ReduceKind::ArgMax { ">" } else { "<" };
                let plain = format!("({a} {gt} {b} || ({a} == {b} && {vi} < {ai}))");
                let better = if dt.is_float() {
                    // NaN tested on the bits, as everywhere (see `value_helpers` in dialect.rs).
                    self.helpers.insert("minmax");
                    let (na, nb) = (
                        format!("tm_isnan_f(float({a}))"),
                        format!("tm_isnan_f(float({b}))"),
                    );
                    format!("({nb} ? (!{na} || {vi} < {ai}) : (!{na} && {plain}))")
                } else {
                    plain
                };
                return Ok(format!("if {better} {{ {acc} = {v}; {ai} = {vi}; }}"));
            }
            ReduceKind::Custom => {
                return Err(unsupported_on(
                    self.d,
                    self.k,
                    "reduce with a custom combine function",
                ))
            }
        };
        let e = self.binary_expr(op, dt)?;
        Ok(format!(
            "{acc} = {};",
            e.replace("{a}", acc).replace("{b}", v)
        ))
    }

    pub(super) fn reduce(
        &mut self,
        id: OpId,
        kind: ReduceKind,
        axis: usize,
        srcs: &[Value],
        combine: Option<RegionId>,
    ) -> Result<()> {
        if kind == ReduceKind::Custom {
            let r = combine.ok_or_else(|| {
                unsupported_on(self.d, self.k, "custom reduce without a combine region")
            })?;
            return self.combine_custom(id, axis, srcs, r, None);
        }
        let x = srcs[0];
        let res = self
            .k
            .op(id)
            .results
            .iter()
            .next()
            .expect("reduce has a result");
        if let Some(arr) = self.frags.get(&x).cloned() {
            return self.mma_reduce_rows(kind, x, res, &arr);
        }
        let shape = self.ty(x).shape.clone();
        let geo = Geo::new(&shape, axis);
        self.materialize(x)?;
        let strategy = self.plan.reduction(id);
        let (r, how) = match strategy {
            ReductionLayout::Coalesced => self.reduce_coalesced(kind, x, res, geo)?,
            ReductionLayout::Default => self.reduce_partials(kind, x, res, geo)?,
            ReductionLayout::RowMajor | ReductionLayout::ColumnMajor | ReductionLayout::Tiled => {
                self.reduce_staged(kind, x, res, geo, strategy)?
            }
        };
        self.layouts.push(LayoutChoice {
            op: format!("reduce {} axis {axis} of {}", kind.name(), self.ty(x)),
            layout: format!("{}: {how}", strategy.name()),
        });
        self.set(res, r);
        Ok(())
    }

    /// Thread-local step: combines the registers that differ only in axis bits. Returns the
    /// partial arrays (values, indices) and the kept register-bit positions.
    fn reduce_local(
        &mut self,
        kind: ReduceKind,
        x: Value,
        geo: Geo,
    ) -> Result<(String, String, Vec<u32>)> {
        let lay = self.layout(x);
        let dt = self.edt(x);
        let ct = self.cty(dt)?;
        let rbits = lay.regs().trailing_zeros();
        let (mut ra, mut rk) = (Vec::new(), Vec::new());
        for r in 0..rbits {
            let flat = if r < lay.vec_bits() {
                r
            } else {
                r + lay.thread_bits()
            };
            if geo.is_axis_bit(flat) {
                ra.push(r);
            } else {
                rk.push(r);
            }
        }
        let arg = is_arg(kind);
        let acc = self.fresh("part");
        let acci = self.fresh("part_idx");
        self.line(format!("{ct} {acc}[{}];", 1usize << rk.len()));
        if arg {
            self.line(format!("int {acci}[{}];", 1usize << rk.len()));
        }
        let xs = match self.repr(x) {
            Repr::Block(a) => a.clone(),
            _ => unreachable!("materialized above"),
        };
        self.open(format!(
            "for (uint tm_j = 0; tm_j < {}u; ++tm_j)",
            1usize << rk.len()
        ));
        self.line(format!("const uint tm_i0 = {};", deposit_expr("tm_j", &rk)));
        self.line(format!("{acc}[tm_j] = {xs}[tm_i0];"));
        if arg {
            let l = lay.flat_expr("tm_i0", "tm_lid");
            self.line(format!("{acci}[tm_j] = {};", geo.kidx(&format!("({l})"))));
        }
        let lanes = match (self.cpu.as_ref(), self.cur_op) {
            (Some(c), Some(op)) => c.plan.lanes(op),
            _ => 1,
        };
        let lane_bits = lanes.trailing_zeros() as usize;
        if lane_bits > 0 && ra.len() > lane_bits {
            self.fold_in_lanes(kind, dt, &xs, &acc, &acci, &ra, lane_bits, geo)?;
        } else if !ra.is_empty() {
            self.open(format!(
                "for (uint tm_r = 1; tm_r < {}u; ++tm_r)",
                1usize << ra.len()
            ));
            self.line(format!(
                "const uint tm_i = tm_i0 | {};",
                deposit_expr("tm_r", &ra)
            ));
            let l = lay.flat_expr("tm_i", "tm_lid");
            let vi = geo.kidx(&format!("({l})"));
            let s = self.combine(
                kind,
                dt,
                &format!("{acc}[tm_j]"),
                &format!("{acci}[tm_j]"),
                &format!("{xs}[tm_i]"),
                &vi,
            )?;
            self.line(s);
            self.close();
        }
        self.close();
        Ok((acc, acci, rk))
    }

    /// The body of [`Self::reduce_local`]'s fold for one output (`tm_j`, first register
    /// `tm_i0`) as `2^lane_bits` independent folds over the lowest reduced register bits,
    /// combined pairwise at the end: the same result up to reassociation, with short
    /// dependency chains for the compiler to keep.
    #[allow(clippy::too_many_arguments)]
    fn fold_in_lanes(
        &mut self,
        kind: ReduceKind,
        dt: DType,
        xs: &str,
        acc: &str,
        acci: &str,
        ra: &[u32],
        lane_bits: usize,
        geo: Geo,
    ) -> Result<()> {
        let ct = self.cty(dt)?;
        let arg = is_arg(kind);
        let (lo, hi) = ra.split_at(lane_bits);
        let lanes = 1usize << lane_bits;
        let lay = self.layout_of(geo.n);
        let p = self.fresh("lane");
        let pi = self.fresh("lane_idx");
        self.line(format!("{ct} {p}[{lanes}];"));
        if arg {
            self.line(format!("int {pi}[{lanes}];"));
        }
        let at = |r: Option<&str>| {
            let mut e = format!("tm_i0 | {}", deposit_expr("tm_e", lo));
            if let Some(r) = r {
                e.push_str(&format!(" | {}", deposit_expr(r, hi)));
            }
            e
        };
        self.open(format!("for (uint tm_e = 0; tm_e < {lanes}u; ++tm_e)"));
        self.line(format!("const uint tm_i = {};", at(None)));
        self.line(format!("{p}[tm_e] = {xs}[tm_i];"));
        if arg {
            let l = lay.flat_expr("tm_i", "tm_lid");
            self.line(format!("{pi}[tm_e] = {};", geo.kidx(&format!("({l})"))));
        }
        self.close();
        self.open(format!(
            "for (uint tm_r = 1; tm_r < {}u; ++tm_r)",
            1usize << hi.len()
        ));
        self.open(format!("for (uint tm_e = 0; tm_e < {lanes}u; ++tm_e)"));
        self.line(format!("const uint tm_i = {};", at(Some("tm_r"))));
        let l = lay.flat_expr("tm_i", "tm_lid");
        let vi = geo.kidx(&format!("({l})"));
        let s = self.combine(
            kind,
            dt,
            &format!("{p}[tm_e]"),
            &format!("{pi}[tm_e]"),
            &format!("{xs}[tm_i]"),
            &vi,
        )?;
        self.line(s);
        self.close();
        self.close();
        // The lanes pairwise (log2(lanes) dependent steps, each a vector op).
        self.open(format!(
            "for (uint tm_w = {}u; tm_w > 0u; tm_w >>= 1)",
            lanes / 2
        ));
        self.open("for (uint tm_e = 0; tm_e < tm_w; ++tm_e)");
        let s = self.combine(
            kind,
            dt,
            &format!("{p}[tm_e]"),
            &format!("{pi}[tm_e]"),
            &format!("{p}[tm_e + tm_w]"),
            &format!("{pi}[tm_e + tm_w]"),
        )?;
        self.line(s);
        self.close();
        self.close();
        self.line(format!("{acc}[tm_j] = {p}[0];"));
        if arg {
            self.line(format!("{acci}[tm_j] = {pi}[0];"));
        }
        Ok(())
    }

    /// Lane and SIMD-group bits of the thread index that belong to the reduced axis.
    fn axis_thread_bits(&self, x: Value, geo: Geo) -> (Vec<u32>, Vec<u32>) {
        let lay = self.layout(x);
        let (mut la, mut wa) = (Vec::new(), Vec::new());
        for t in 0..lay.thread_bits() {
            let flat = lay.vec_bits() + t;
            if !geo.is_axis_bit(flat) {
                continue;
            }
            match lay.bit_home(flat) {
                BitHome::Lane(b) => la.push(b),
                BitHome::Warp(w) => wa.push(w),
                BitHome::Reg(_) => {}
            }
        }
        (la, wa)
    }

    fn reduce_coalesced(
        &mut self,
        kind: ReduceKind,
        x: Value,
        res: Value,
        geo: Geo,
    ) -> Result<(Repr, String)> {
        let lay = self.layout(x);
        let dt = self.edt(x);
        let ct = self.cty(dt)?;
        let arg = is_arg(kind);
        let (acc, acci, rk) = self.reduce_local(kind, x, geo)?;
        let nk = 1usize << rk.len();
        let (la, wa) = self.axis_thread_bits(x, geo);
        let lane_bits = SIMD_WIDTH.trailing_zeros() as usize;
        let simd = match kind {
            ReduceKind::Sum => self.d.simd_sum,
            ReduceKind::Max => self.d.simd_max,
            ReduceKind::Min => self.d.simd_min,
            _ => None,
        }
        .filter(|_| {
            // Float max/min never use `simd_max`/`simd_min`: undefined for NaN under Metal's
            // default fast math functions, and silent about -0 vs +0 (see `value_helpers`
            // in dialect.rs); the shuffle butterfly below combines with the NaN-safe helpers.
            let float_extreme = dt.is_float() && kind != ReduceKind::Sum;
            // Float sums take `simd_sum` through the dialect's `simd_fsum` helper only.
            let fsum_ok = !dt.is_float() || self.d.helpers.iter().any(|(n, _)| *n == "simd_fsum");
            la.len() == lane_bits
                && !float_extreme
                && fsum_ok
                && matches!(dt, DType::F32 | DType::F16 | DType::I32 | DType::U32)
        });
        let mut how = vec![format!("{} partial(s) per thread", nk)];
        if !la.is_empty() {
            self.uses_simd = true;
            self.open(format!("for (uint tm_j = 0; tm_j < {nk}u; ++tm_j)"));
            if let Some(t) = simd {
                let t = if dt.is_float() {
                    self.helpers.insert("simd_fsum");
                    "tm_simd_fsum({x})"
                } else {
                    t
                };
                self.line(format!(
                    "{acc}[tm_j] = {};",
                    t.replace("{x}", &format!("{acc}[tm_j]"))
                ));
                how.push("simd collective".into());
            } else {
                for b in &la {
                    let m = format!("{}u", 1u32 << b);
                    let sh = |v: &str| self.d.shuffle_xor.replace("{x}", v).replace("{m}", &m);
                    self.line(format!(
                        "const {ct} tm_o{b} = {};",
                        sh(&format!("{acc}[tm_j]"))
                    ));
                    if arg {
                        self.line(format!(
                            "const int tm_oi{b} = {};",
                            sh(&format!("{acci}[tm_j]"))
                        ));
                    }
                    let s = self.combine(
                        kind,
                        dt,
                        &format!("{acc}[tm_j]"),
                        &format!("{acci}[tm_j]"),
                        &format!("tm_o{b}"),
                        &format!("tm_oi{b}"),
                    )?;
                    self.line(s);
                }
                how.push(format!("shuffle butterfly over {} lane bit(s)", la.len()));
            }
            self.close();
        }
        if !wa.is_empty() {
            let t = self.threads;
            let s = self.scratch_array(dt, nk * t)?;
            let si = if arg {
                self.index_scratch(dt, nk * t)?
            } else {
                String::new()
            };
            self.smem_write_begin();
            self.open(format!("for (uint tm_j = 0; tm_j < {nk}u; ++tm_j)"));
            self.line(format!("{s}[tm_j * {t}u + tm_lid] = {acc}[tm_j];"));
            if arg {
                self.line(format!("{si}[tm_j * {t}u + tm_lid] = {acci}[tm_j];"));
            }
            self.close();
            self.smem_write_end();
            let pos: Vec<u32> = wa.iter().map(|w| w + lane_bits as u32).collect();
            let mask: u32 = pos.iter().map(|p| 1u32 << p).sum();
            self.open(format!("for (uint tm_j = 0; tm_j < {nk}u; ++tm_j)"));
            self.line(format!(
                "const uint tm_base = tm_j * {t}u + (tm_lid & ~{mask}u);"
            ));
            self.line(format!("{acc}[tm_j] = {s}[tm_base];"));
            if arg {
                self.line(format!("{acci}[tm_j] = {si}[tm_base];"));
            }
            self.open(format!(
                "for (uint tm_w = 1; tm_w < {}u; ++tm_w)",
                1usize << wa.len()
            ));
            self.line(format!(
                "const uint tm_at = tm_base | {};",
                deposit_expr("tm_w", &pos)
            ));
            let c = self.combine(
                kind,
                dt,
                &format!("{acc}[tm_j]"),
                &format!("{acci}[tm_j]"),
                &format!("{s}[tm_at]"),
                &if arg {
                    format!("{si}[tm_at]")
                } else {
                    String::new()
                },
            )?;
            self.line(c);
            self.close();
            self.close();
            self.smem_read_done();
            how.push(format!(
                "{} SIMD-group(s) combined in threadgroup memory",
                1usize << wa.len()
            ));
        }
        let out = if arg { &acci } else { &acc };
        let rdt = self.edt(res);
        if self.ty(res).is_scalar() && !lay.has_idle_threads() {
            // Every thread already holds the whole result.
            let name = self.fresh(kind.name());
            let rct = self.cty(rdt)?;
            self.line(format!("const {rct} {name} = {out}[0];"));
            return Ok((Repr::Scalar(name), how.join(", ")));
        }
        let lane_mask: u32 = la.iter().map(|b| 1u32 << b).sum::<u32>()
            + wa.iter()
                .map(|w| 1u32 << (w + lane_bits as u32))
                .sum::<u32>();
        let s2 = self.scratch_array(rdt, geo.nout)?;
        self.smem_write_begin();
        self.open(format!("for (uint tm_j = 0; tm_j < {nk}u; ++tm_j)"));
        self.line(format!("const uint tm_i0 = {};", deposit_expr("tm_j", &rk)));
        self.line(format!(
            "const uint tm_l = {};",
            lay.flat_expr("tm_i0", "tm_lid")
        ));
        let mut conds = vec![format!("(tm_lid & {lane_mask}u) == 0")];
        if lay.has_idle_threads() {
            conds.push(format!("tm_l < {}u", lay.n));
        }
        self.line(format!(
            "if ({}) {s2}[{}] = {out}[tm_j];",
            conds.join(" && "),
            geo.out_index("tm_l")
        ));
        self.close();
        self.smem_write_end();
        let r = self.read_result(res, kind, &s2)?;
        Ok((r, how.join(", ")))
    }

    /// Reads the result (scalar or canonical block) from scratch array `s` at output index.
    pub(super) fn read_result(&mut self, res: Value, kind: ReduceKind, s: &str) -> Result<Repr> {
        let rdt = self.edt(res);
        let r = if self.ty(res).is_scalar() {
            let name = self.fresh(kind.name());
            let rct = self.cty(rdt)?;
            self.line(format!("const {rct} {name} = {s}[0];"));
            Repr::Scalar(name)
        } else {
            let n = self.ty(res).numel();
            Repr::Block(self.gather(kind.name(), rdt, n, &|l| format!("{s}[{l}]"))?)
        };
        self.smem_read_done();
        Ok(r)
    }

    fn reduce_partials(
        &mut self,
        kind: ReduceKind,
        x: Value,
        res: Value,
        geo: Geo,
    ) -> Result<(Repr, String)> {
        let lay = self.layout(x);
        let dt = self.edt(x);
        let arg = is_arg(kind);
        let (acc, acci, rk) = self.reduce_local(kind, x, geo)?;
        let nk = 1usize << rk.len();
        let (la, wa) = self.axis_thread_bits(x, geo);
        let lane_bits = SIMD_WIDTH.trailing_zeros();
        let pos: Vec<u32> = la
            .iter()
            .copied()
            .chain(wa.iter().map(|w| w + lane_bits))
            .collect();
        let p = 1usize << pos.len();
        let fields: Vec<(u32, u32, u32)> = pos
            .iter()
            .enumerate()
            .map(|(d, &b)| (b, 1, d as u32))
            .collect();
        let s = self.scratch_array(dt, geo.nout * p)?;
        let si = if arg {
            self.index_scratch(dt, geo.nout * p)?
        } else {
            String::new()
        };
        self.smem_write_begin();
        let slot = self.fresh("slot");
        self.line(format!(
            "const uint {slot} = {};",
            remap_expr("tm_lid", &fields)
        ));
        self.open(format!("for (uint tm_j = 0; tm_j < {nk}u; ++tm_j)"));
        self.line(format!("const uint tm_i0 = {};", deposit_expr("tm_j", &rk)));
        self.line(format!(
            "const uint tm_l = {};",
            lay.flat_expr("tm_i0", "tm_lid")
        ));
        self.line(format!(
            "const uint tm_at = ({}) * {p}u + {slot};",
            geo.out_index("tm_l")
        ));
        let guard = if lay.has_idle_threads() {
            format!("if (tm_l < {}u) ", lay.n)
        } else {
            String::new()
        };
        self.line(format!("{guard}{s}[tm_at] = {acc}[tm_j];"));
        if arg {
            self.line(format!("{guard}{si}[tm_at] = {acci}[tm_j];"));
        }
        self.close();
        self.smem_write_end();
        let r = self.per_output(res, kind, dt, geo.nout, &mut |me, o| {
            let (a, ai) = (me.fresh("total"), me.fresh("total_idx"));
            let ct = me.cty(dt)?;
            me.line(format!("{ct} {a} = {s}[({o}) * {p}u];"));
            if arg {
                me.line(format!("int {ai} = {si}[({o}) * {p}u];"));
            }
            if p > 1 {
                me.open(format!("for (uint tm_p = 1; tm_p < {p}u; ++tm_p)"));
                let c = me.combine(
                    kind,
                    dt,
                    &a,
                    &ai,
                    &format!("{s}[({o}) * {p}u + tm_p]"),
                    &if arg {
                        format!("{si}[({o}) * {p}u + tm_p]")
                    } else {
                        String::new()
                    },
                )?;
                me.line(c);
                me.close();
            }
            Ok(if arg { ai } else { a })
        })?;
        Ok((
            r,
            format!("{nk} partial(s) per thread, {p} partial(s) per output in threadgroup memory"),
        ))
    }

    /// Prints one result per output owner: `body(o)` prints statements and returns the
    /// value expression for output index `o`.
    fn per_output(
        &mut self,
        res: Value,
        kind: ReduceKind,
        _dt: DType,
        nout: usize,
        body: &mut dyn FnMut(&mut Self, &str) -> Result<String>,
    ) -> Result<Repr> {
        let rdt = self.edt(res);
        let rct = self.cty(rdt)?;
        let r = if self.ty(res).is_scalar() {
            let e = body(self, "0u")?;
            let name = self.fresh(kind.name());
            self.line(format!("const {rct} {name} = {e};"));
            Repr::Scalar(name)
        } else {
            let lay = self.layout_of(nout);
            let name = self.declare_block(kind.name(), rdt, nout)?;
            self.open_regs(lay, true);
            if lay.has_idle_threads() {
                self.line(format!("{name}[tm_i] = {rct}(0);"));
                self.open(format!("if (tm_l < {nout}u)"));
            }
            let e = body(self, "tm_l")?;
            self.line(format!("{name}[tm_i] = {e};"));
            if lay.has_idle_threads() {
                self.close();
            }
            self.close();
            Repr::Block(name)
        };
        self.smem_read_done();
        Ok(r)
    }

    fn reduce_staged(
        &mut self,
        kind: ReduceKind,
        x: Value,
        res: Value,
        geo: Geo,
        strategy: ReductionLayout,
    ) -> Result<(Repr, String)> {
        let dt = self.edt(x);
        let arg = is_arg(kind);
        let tiled = strategy == ReductionLayout::Tiled;
        let col = strategy == ReductionLayout::ColumnMajor;
        let s = self.scratch_array(dt, geo.n)?;
        let si = if arg && tiled {
            self.index_scratch(dt, geo.n)?
        } else {
            String::new()
        };
        let at = |o: &str, k: &str| {
            if col {
                format!("({k}) * {}u + ({o})", geo.nout)
            } else {
                geo.in_index(o, k)
            }
        };
        self.smem_write_begin();
        if col {
            let o = geo.out_index("tm_l");
            let k = geo.kidx("tm_l");
            self.stage(x, &s, 0, &|_| format!("uint({k}) * {}u + ({o})", geo.nout))?;
        } else {
            self.stage(x, &s, 0, &|l| l.to_string())?;
        }
        if !si.is_empty() {
            let lay = self.layout(x);
            self.open_regs(lay, true);
            let g = if lay.has_idle_threads() {
                format!("if (tm_l < {}u) ", lay.n)
            } else {
                String::new()
            };
            self.line(format!("{g}{si}[tm_l] = {};", geo.kidx("tm_l")));
            self.close();
        }
        self.smem_write_end();
        let t = self.threads;
        if tiled {
            self.open(format!(
                "for (uint tm_s = {}u; tm_s > 0u; tm_s >>= 1)",
                geo.k / 2
            ));
            self.open(format!(
                "for (uint tm_p = tm_lid; tm_p < {}u * tm_s; tm_p += {t}u)",
                geo.nout
            ));
            self.line("const uint tm_o = tm_p / tm_s;");
            self.line("const uint tm_k = tm_p % tm_s;");
            self.line(format!(
                "const uint tm_a = {};",
                geo.in_index("tm_o", "tm_k")
            ));
            self.line(format!(
                "const uint tm_b = {};",
                geo.in_index("tm_o", "tm_k + tm_s")
            ));
            let c = self.combine(
                kind,
                dt,
                &format!("{s}[tm_a]"),
                &format!("{si}[tm_a]"),
                &format!("{s}[tm_b]"),
                &format!("{si}[tm_b]"),
            )?;
            self.line(c);
            self.close();
            self.line(self.d.barrier);
            self.close();
            let r = self.per_output(res, kind, dt, geo.nout, &mut |me, o| {
                let name = me.fresh("tree");
                let at0 = geo.in_index(o, "0u");
                let ct = if arg { "int" } else { me.cty(dt)? };
                let arr = if arg { &si } else { &s };
                me.line(format!("const {ct} {name} = {arr}[{at0}];"));
                Ok(name)
            })?;
            return Ok((
                r,
                format!("pairwise tree over {} in threadgroup memory", geo.k),
            ));
        }
        let k = geo.k;
        let r = self.per_output(res, kind, dt, geo.nout, &mut |me, o| {
            let (a, ai) = (me.fresh("run"), me.fresh("run_idx"));
            let ct = me.cty(dt)?;
            me.line(format!("{ct} {a} = {s}[{}];", at(o, "0u")));
            if arg {
                me.line(format!("int {ai} = 0;"));
            }
            me.open(format!("for (uint tm_k = 1; tm_k < {k}u; ++tm_k)"));
            let c = me.combine(
                kind,
                dt,
                &a,
                &ai,
                &format!("{s}[{}]", at(o, "tm_k")),
                "int(tm_k)",
            )?;
            me.line(c);
            me.close();
            Ok(if arg { ai } else { a })
        })?;
        Ok((
            r,
            format!(
                "staged {} in threadgroup memory, serial walk over {k}",
                if col { "axis-outermost" } else { "row-major" }
            ),
        ))
    }

    pub(super) fn scan(
        &mut self,
        id: OpId,
        kind: ScanKind,
        axis: usize,
        reverse: bool,
        srcs: &[Value],
        combine: Option<RegionId>,
    ) -> Result<()> {
        let op = match kind {
            ScanKind::Sum => BinaryOp::Add,
            ScanKind::Prod => BinaryOp::Mul,
            ScanKind::Custom => {
                let r = combine.ok_or_else(|| {
                    unsupported_on(self.d, self.k, "custom scan without a combine region")
                })?;
                return self.combine_custom(id, axis, srcs, r, Some(reverse));
            }
        };
        let x = srcs[0];
        let res = self
            .k
            .op(id)
            .results
            .iter()
            .next()
            .expect("scan has a result");
        let dt = self.edt(x);
        let ct = self.cty(dt)?;
        let shape = self.ty(x).shape.clone();
        let geo = Geo::new(&shape, axis);
        self.materialize(x)?;
        if self.plan.scan(id) == ScanStrategy::Collective {
            let name = self.scan_simd(op, x, geo)?;
            self.layouts.push(LayoutChoice {
                op: format!("scan {} axis {axis} of {}", kind.name(), self.ty(x)),
                layout: "registers, then simd_prefix / shuffles over lanes, then SIMD-groups through threadgroup memory".into(),
            });
            self.set(res, Repr::Block(name));
            return Ok(());
        }
        let s = self.scratch_array(dt, geo.n)?;
        self.smem_write_begin();
        self.stage(x, &s, 0, &|l| l.to_string())?;
        self.smem_write_end();
        let e = self.binary_expr(op, dt)?;
        let t = self.threads;
        let k = geo.k;
        let kk = |i: &str| {
            if reverse {
                format!("{}u - {i}", k - 1)
            } else {
                i.to_string()
            }
        };
        self.open(format!(
            "for (uint tm_o = tm_lid; tm_o < {}u; tm_o += {t}u)",
            geo.nout
        ));
        self.line(format!(
            "{ct} tm_run = {s}[{}];",
            geo.in_index("tm_o", &kk("0u"))
        ));
        self.open(format!("for (uint tm_k = 1; tm_k < {k}u; ++tm_k)"));
        self.line(format!(
            "const uint tm_a = {};",
            geo.in_index("tm_o", &kk("tm_k"))
        ));
        self.line(format!(
            "tm_run = {};",
            e.replace("{a}", "tm_run")
                .replace("{b}", &format!("{s}[tm_a]"))
        ));
        self.line(format!("{s}[tm_a] = tm_run;"));
        self.close();
        self.close();
        self.smem_write_end();
        let name = self.gather(kind.name(), dt, geo.n, &|l| format!("{s}[{l}]"))?;
        self.smem_read_done();
        self.layouts.push(LayoutChoice {
            op: format!("scan {} axis {axis} of {}", kind.name(), self.ty(x)),
            layout: "staged row-major in threadgroup memory, one thread per line".into(),
        });
        self.set(res, Repr::Block(name));
        Ok(())
    }
}

impl Lowering<'_> {
    /// Inlines combine region `r` with its arguments bound to `args`; returns the yielded
    /// values as expressions.
    fn inline_combine(&mut self, r: RegionId, args: &[String]) -> Result<Vec<String>> {
        let rargs = self.k.region(r).args.clone();
        for (a, s) in rargs.iter().zip(args) {
            self.set(*a, Repr::Scalar(s.clone()));
        }
        let ys = self.region(r)?;
        Ok(ys.iter().map(|y| self.el(*y, "")).collect())
    }

    /// `accs <- combine(left, right)` with the user's region, as a parallel assignment.
    fn apply_combine(
        &mut self,
        r: RegionId,
        accs: &[String],
        left: &[String],
        right: &[String],
        dts: &[DType],
    ) -> Result<()> {
        let args: Vec<String> = left.iter().chain(right).cloned().collect();
        let ys = self.inline_combine(r, &args)?;
        let tmps: Vec<String> = (0..accs.len()).map(|_| self.fresh("comb")).collect();
        for ((t, y), dt) in tmps.iter().zip(&ys).zip(dts) {
            let ct = self.cty(*dt)?;
            self.line(format!("const {ct} {t} = {y};"));
        }
        for (a, t) in accs.iter().zip(&tmps) {
            self.line(format!("{a} = {t};"));
        }
        Ok(())
    }

    /// Reductions (`reverse = None`) and scans with a user combine function: every source is
    /// staged row-major and each line is folded serially in index order, which is right for
    /// any associative combine, commutative or not. A reverse scan is Triton's: the forward
    /// scan of the flipped line, the running value from the end on the left, so each result
    /// is `x_last (+) ... (+) x_i`.
    fn combine_custom(
        &mut self,
        id: OpId,
        axis: usize,
        srcs: &[Value],
        r: RegionId,
        reverse: Option<bool>,
    ) -> Result<()> {
        let results: Vec<Value> = self.k.op(id).results.iter().collect();
        let shape = self.ty(srcs[0]).shape.clone();
        let geo = Geo::new(&shape, axis);
        let dts: Vec<DType> = srcs.iter().map(|v| self.edt(*v)).collect();
        let mut arrays = Vec::new();
        let mut used: std::collections::BTreeMap<DType, usize> = Default::default();
        for (v, dt) in srcs.iter().zip(&dts) {
            self.materialize(*v)?;
            let base = *used.get(dt).unwrap_or(&0);
            used.insert(*dt, base + geo.n);
            arrays.push((self.scratch_array(*dt, base + geo.n)?, base));
        }
        self.smem_write_begin();
        for (v, (s, base)) in srcs.iter().zip(&arrays) {
            self.stage(*v, s, *base, &|l| l.to_string())?;
        }
        self.smem_write_end();
        let at = |k: usize, o: &str, kk: &str| {
            let (s, base) = &arrays[k];
            format!("{s}[{base}u + {}]", geo.in_index(o, kk))
        };
        let n = srcs.len();
        let t = self.threads;
        match reverse {
            Some(rev) => {
                let kk = |i: &str| {
                    if rev {
                        format!("({}u - {i})", geo.k - 1)
                    } else {
                        i.to_string()
                    }
                };
                self.open(format!(
                    "for (uint tm_o = tm_lid; tm_o < {}u; tm_o += {t}u)",
                    geo.nout
                ));
                let accs: Vec<String> = (0..n).map(|_| self.fresh("run")).collect();
                for (k, a) in accs.iter().enumerate() {
                    let ct = self.cty(dts[k])?;
                    self.line(format!("{ct} {a} = {};", at(k, "tm_o", &kk("0u"))));
                }
                self.open(format!("for (uint tm_k = 1; tm_k < {}u; ++tm_k)", geo.k));
                let news: Vec<String> = (0..n).map(|k| at(k, "tm_o", &kk("tm_k"))).collect();
                self.apply_combine(r, &accs, &accs.clone(), &news, &dts)?;
                for (k, a) in accs.iter().enumerate() {
                    self.line(format!("{} = {a};", at(k, "tm_o", &kk("tm_k"))));
                }
                self.close();
                self.close();
                self.smem_write_end();
                for (k, res) in results.iter().enumerate() {
                    let (s, base) = arrays[k].clone();
                    let name =
                        self.gather("scan", dts[k], geo.n, &|l| format!("{s}[{base}u + {l}]"))?;
                    self.set(*res, Repr::Block(name));
                }
                self.smem_read_done();
            }
            None => {
                let scalar = self.ty(results[0]).is_scalar();
                let lay = self.layout_of(geo.nout);
                let outs: Vec<String> = (0..n).map(|_| self.fresh("reduced")).collect();
                for (k, o) in outs.iter().enumerate() {
                    let ct = self.cty(dts[k])?;
                    if scalar {
                        self.line(format!("{ct} {o};"));
                    } else {
                        self.line(format!("{ct} {o}[{}];", lay.regs()));
                    }
                }
                let oexpr = if scalar {
                    self.line("{");
                    self.indent += 1;
                    "0u"
                } else {
                    self.open_regs(lay, true);
                    if lay.has_idle_threads() {
                        // Idle registers hold a defined value too: later elementwise ops
                        // read every register.
                        for (k, o) in outs.iter().enumerate() {
                            let ct = self.cty(dts[k])?;
                            self.line(format!("{o}[tm_i] = {ct}(0);"));
                        }
                        self.line(format!("if (tm_l >= {}u) continue;", geo.nout));
                    }
                    "tm_l"
                };
                let dst = |o: &str| {
                    if scalar {
                        o.to_string()
                    } else {
                        format!("{o}[tm_i]")
                    }
                };
                let accs: Vec<String> = (0..n).map(|_| self.fresh("acc")).collect();
                for (k, a) in accs.iter().enumerate() {
                    let ct = self.cty(dts[k])?;
                    self.line(format!("{ct} {a} = {};", at(k, oexpr, "0u")));
                }
                self.open(format!("for (uint tm_k = 1; tm_k < {}u; ++tm_k)", geo.k));
                let news: Vec<String> = (0..n).map(|k| at(k, oexpr, "tm_k")).collect();
                self.apply_combine(r, &accs, &accs.clone(), &news, &dts)?;
                self.close();
                for (o, a) in outs.iter().zip(&accs) {
                    self.line(format!("{} = {a};", dst(o)));
                }
                self.close();
                self.smem_read_done();
                for (k, res) in results.iter().enumerate() {
                    let repr = if scalar {
                        Repr::Scalar(outs[k].clone())
                    } else {
                        Repr::Block(outs[k].clone())
                    };
                    self.set(*res, repr);
                }
            }
        }
        self.layouts.push(LayoutChoice {
            op: format!(
                "{} with a combine function, axis {axis} of {}",
                if reverse.is_some() { "scan" } else { "reduce" },
                self.ty(srcs[0])
            ),
            layout: "staged row-major in threadgroup memory, serial fold per line in index order"
                .into(),
        });
        Ok(())
    }
}

impl Lowering<'_> {
    /// Inclusive forward scan of a block whose scanned axis lies within one round of the
    /// layout (register, lane and SIMD-group bits only): a running scan over each chunk's
    /// registers, an exclusive prefix of chunk totals across lanes (`simd_prefix_exclusive_*`
    /// when the axis covers all lanes, else a shuffle-up ladder), then the totals of earlier
    /// SIMD-groups from threadgroup memory.
    fn scan_simd(&mut self, op: BinaryOp, x: Value, geo: Geo) -> Result<String> {
        let lay = self.layout(x);
        let dt = self.edt(x);
        let ct = self.cty(dt)?;
        let e = self.binary_expr(op, dt)?;
        let comb = |a: &str, b: &str| e.replace("{a}", a).replace("{b}", b);
        let ident = if op == BinaryOp::Add && dt.is_float() {
            // The identity of float addition: `-0.0 + x` is `x` for every `x`, +0.0 included.
            format!("{ct}(-0.0f)")
        } else if op == BinaryOp::Add {
            format!("{ct}(0)")
        } else {
            format!("{ct}(1)")
        };
        let (vb, r) = (lay.vec_bits(), lay.regs());
        let xs = match self.repr(x) {
            Repr::Block(a) => a.clone(),
            _ => unreachable!("materialized by the caller"),
        };
        let y = self.declare_block("scan", dt, lay.n)?;
        self.uses_simd = true;
        self.line("{");
        self.indent += 1;
        // 1. Registers: axis bits below the chunk width run serially.
        let (reg_lo, reg_hi) = (geo.ib.min(vb), (geo.ib + geo.kb).min(vb));
        self.open(format!("for (uint tm_i = 0; tm_i < {r}u; ++tm_i)"));
        self.line(format!("{y}[tm_i] = {xs}[tm_i];"));
        if reg_hi > reg_lo {
            let m = ((1u32 << reg_hi) - 1) & !((1u32 << reg_lo) - 1);
            self.line(format!(
                "if ((tm_i & {m}u) != 0) {y}[tm_i] = {};",
                comb(
                    &format!("{y}[tm_i - {}u]", 1u32 << reg_lo),
                    &format!("{y}[tm_i]")
                )
            ));
        }
        self.close();
        // The last register of this register's line within its chunk holds the chunk total.
        let last_mask = if reg_hi > reg_lo {
            ((1u32 << reg_hi) - 1) & !((1u32 << reg_lo) - 1)
        } else {
            0
        };
        let (la, wa) = self.axis_thread_bits(x, geo);
        let lane_mask: u32 = la.iter().map(|b| 1u32 << b).sum();
        if !la.is_empty() {
            let prefix = if op == BinaryOp::Add {
                self.d.prefix_exclusive_sum
            } else {
                self.d.prefix_exclusive_product
            };
            // Metal leaves the sign of a zero `simd_prefix_exclusive_sum` open (the first
            // lane's is +0.0, not the identity -0.0): float sums take the shuffle ladder.
            let prefix = prefix.filter(|_| {
                la.len() == SIMD_WIDTH.trailing_zeros() as usize
                    && !(op == BinaryOp::Add && dt.is_float())
            });
            let up = self.d.shuffle_up;
            self.line("const uint tm_lane = tm_lid & 31u;");
            self.open(format!("for (uint tm_i = 0; tm_i < {r}u; ++tm_i)"));
            self.line(format!("const {ct} tm_tot = {y}[tm_i | {last_mask}u];"));
            if let Some(f) = prefix {
                self.line(format!(
                    "const {ct} tm_ex = {};",
                    f.replace("{x}", "tm_tot")
                ));
            } else {
                self.line(format!("{ct} tm_in = tm_tot;"));
                for b in &la {
                    let d = 1u32 << b;
                    let sh = up.replace("{x}", "tm_in").replace("{d}", &format!("{d}u"));
                    self.line(format!("const {ct} tm_up{b} = {sh};"));
                    self.line(format!(
                        "if ((tm_lane & {lane_mask}u) >= {d}u) tm_in = {};",
                        comb(&format!("tm_up{b}"), "tm_in")
                    ));
                }
                let d0 = 1u32 << la[0];
                let sh = up.replace("{x}", "tm_in").replace("{d}", &format!("{d0}u"));
                self.line(format!("const {ct} tm_prev = {sh};"));
                self.line(format!(
                    "const {ct} tm_ex = (tm_lane & {lane_mask}u) == 0 ? {ident} : tm_prev;"
                ));
            }
            self.line(format!(
                "{y}[tm_i] = {};",
                comb("tm_ex", &format!("{y}[tm_i]"))
            ));
            self.close();
        }
        if !wa.is_empty() {
            let t = self.threads;
            let s = self.scratch_array(dt, r * t)?;
            let lane_bits = SIMD_WIDTH.trailing_zeros();
            let wmask: u32 = wa.iter().map(|w| 1u32 << (w + lane_bits)).sum();
            let w0 = wa[0] + lane_bits;
            self.smem_write_begin();
            self.open(format!("for (uint tm_i = 0; tm_i < {r}u; ++tm_i)"));
            self.line(format!(
                "{s}[tm_i * {t}u + tm_lid] = {y}[tm_i | {last_mask}u];"
            ));
            self.close();
            self.smem_write_end();
            self.line(format!("const uint tm_wk = (tm_lid & {wmask}u) >> {w0};"));
            self.line(format!(
                "const uint tm_wbase = (tm_lid & ~{}u) | {lane_mask}u;",
                wmask | lane_mask
            ));
            self.open(format!("for (uint tm_i = 0; tm_i < {r}u; ++tm_i)"));
            self.line(format!("{ct} tm_carry = {ident};"));
            self.open("for (uint tm_w = 0; tm_w < tm_wk; ++tm_w)");
            self.line(format!(
                "tm_carry = {};",
                comb(
                    "tm_carry",
                    &format!("{s}[tm_i * {t}u + (tm_wbase | (tm_w << {w0}))]")
                )
            ));
            self.close();
            self.line(format!(
                "{y}[tm_i] = {};",
                comb("tm_carry", &format!("{y}[tm_i]"))
            ));
            self.close();
            self.smem_read_done();
        }
        self.close();
        Ok(y)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{build, emu_ok};
    use super::super::{metal, LaunchOptions, ReductionLayout};
    use crate::dtype::DType::{self, *};
    use crate::emu::{self, EmuBuffer, MetalLaunch, OutputSpec};
    use crate::tl::{self, Tensor};

    /// Runs `prog` on the emulator (every lane order) with input `x` and outputs `outs`
    /// (name, dtype, elements) poisoned with 90; returns the outputs' bytes.
    fn emulate(
        prog: &metal::MetalProgram,
        x: Option<EmuBuffer>,
        outs: &[(&str, DType, usize)],
    ) -> Vec<Vec<u8>> {
        let (g, tg) = prog.launch_dims([1, 1, 1]);
        let mut l = MetalLaunch::new(&prog.name, &prog.source)
            .header(&prog.header)
            .grid(g)
            .threadgroup(tg);
        for &(name, dt, n) in outs {
            l = l.output(OutputSpec::new(name, dt, &[n]).init(90.0));
        }
        if let Some(x) = x {
            l = l.input(x);
        }
        match emu::run_all_orders(&l) {
            Ok(outs) => outs.into_iter().map(|b| b.bytes).collect(),
            Err(e) => panic!("{e}\n{}", prog.describe()),
        }
    }

    #[test]
    fn metal_float_sums_and_scans_of_negative_zeros_are_negative_zero() {
        if !emu_ok("metal_float_sums_and_scans_of_negative_zeros_are_negative_zero") {
            return;
        }
        // 256 elements over one SIMD-group: the sum takes `simd_sum`, the scan the lanes.
        for dt in [F32, F16] {
            let k = build("neg_zero_sums", &[], |k| {
                let x = k.ptr(dt, "x");
                let o = k.ptr(dt, "o");
                let offs = tl::arange(0, 256);
                let v = tl::load(x + offs);
                tl::store(o + tl::arange(0, 1), tl::broadcast_to(tl::sum(v, 0), [1]));
                tl::store(o + 1 + offs, tl::cumsum(v, 0));
            });
            let opts = LaunchOptions {
                num_warps: 1,
                reduction_layout: Some(ReductionLayout::Coalesced),
                ..LaunchOptions::default()
            };
            let prog = metal::compile(&k, &opts).unwrap();
            assert!(prog.source.contains("tm_simd_fsum("), "{}", prog.source);
            assert!(
                !prog.source.contains("simd_prefix_exclusive_sum"),
                "{}",
                prog.source
            );
            let bytes = if dt == F32 {
                EmuBuffer::new("x", &[256], &[-0.0f32; 256])
            } else {
                EmuBuffer::new("x", &[256], &[half::f16::NEG_ZERO; 256])
            };
            let got = emulate(&prog, Some(bytes), &[("o", dt, 257)]).remove(0);
            let neg: &[u8] = if dt == F32 {
                &[0, 0, 0, 0x80]
            } else {
                &[0, 0x80]
            };
            for (i, e) in got.chunks(dt.size_bytes()).enumerate() {
                assert_eq!(e, neg, "{dt} element {i}");
            }
        }
    }

    #[test]
    fn custom_reduce_results_are_defined_in_idle_threads() {
        if !emu_ok("custom_reduce_results_are_defined_in_idle_threads") {
            return;
        }
        // A one-element result leaves 31 of 32 threads idle; an op on it reads every
        // register, and the store after it needs two threads, which must still run it.
        let k = build("idle_custom_reduce", &[], |k| {
            let o = k.ptr(F32, "o");
            let p = k.ptr(I32, "p");
            let offs = tl::arange(0, 1).col() + tl::arange(0, 1).row();
            let v = tl::full([1, 1], 0.0, F32);
            let r = tl::reduce(v, tl::keep_dims(0), |a: Tensor, b: Tensor| {
                tl::maximum(a, b)
            });
            tl::store(o + offs, tl::rsqrt(r));
            let offs = tl::arange(0, 1).col() * 8 + tl::arange(0, 8).row();
            tl::store(p + offs, tl::full([1, 8], 5i64, I32));
        });
        let opts = LaunchOptions {
            num_warps: 1,
            ..LaunchOptions::default()
        };
        let prog = metal::compile(&k, &opts).unwrap();
        let got = emulate(&prog, None, &[("o", F32, 1), ("p", I32, 8)]);
        assert_eq!(got[0], f32::INFINITY.to_le_bytes());
        let got: Vec<i32> = got[1]
            .chunks(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let want = [5; 8];
        assert_eq!(got, want, "{}", prog.describe());
    }
}
