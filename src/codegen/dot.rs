//! `tl.dot`: `simdgroup_matrix` 8x8 tiles staged through threadgroup memory, or a scalar
//! FMA loop for shapes and types the tiles cannot take.
//!
//! Tile path (2-D, M, N, K multiples of 8, f32/f16 operands and accumulator): the
//! accumulator is staged as float and each SIMD-group loads its C tiles into registers;
//! A and B then reuse the same scratch (converted to float, so half operands still
//! accumulate in fp32), each SIMD-group runs `simdgroup_multiply_accumulate` over K, stores
//! its tiles back, and every thread reads its own elements of C. Scratch is
//! `max(M*N, M*K + K*N)` floats.

use super::layout::{MATRIX_TILE, SIMD_WIDTH};
use super::lower::{unsupported, Lowering, Repr};
use super::LayoutChoice;
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::Value;

impl Lowering<'_> {
    pub(super) fn dot(&mut self, res: Value, a: Value, b: Value, acc: Value) -> Result<()> {
        let (sa, sb, sc) = (
            self.ty(a).shape.clone(),
            self.ty(b).shape.clone(),
            self.ty(acc).shape.clone(),
        );
        let (din, dacc) = (self.edt(a), self.edt(acc));
        let t8 = MATRIX_TILE;
        let tiles_ok = sa.len() == 2
            && self.d.matrix_8x8
            && self.opts.target.simdgroup_matrix
            && sa[0] % t8 == 0
            && sa[1] % t8 == 0
            && sb[1] % t8 == 0
            && matches!(din, DType::F32 | DType::F16)
            && matches!(dacc, DType::F32 | DType::F16);
        for v in [a, b, acc] {
            self.materialize(v)?;
        }
        if tiles_ok {
            self.dot_tiles(res, a, b, acc, sa[0], sb[1], sa[1])
        } else {
            self.dot_scalar(res, a, b, acc, &sa, &sb, &sc)
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn dot_tiles(
        &mut self,
        res: Value,
        a: Value,
        b: Value,
        acc: Value,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<()> {
        let t8 = MATRIX_TILE;
        let warps = self.threads / SIMD_WIDTH;
        let tiles = (m / t8) * (n / t8);
        let per = tiles.div_ceil(warps);
        let tn = n / t8;
        let s = self.scratch_array(DType::F32, (m * n).max(m * k + k * n))?;
        let c = self.fresh("frag_c");
        self.line(format!("simdgroup_matrix<float, 8, 8> {c}[{per}];"));
        // C tiles into registers.
        self.smem_write_begin();
        self.stage(acc, &s, 0, &|l| l.to_string())?;
        self.smem_write_end();
        let guard = tiles % warps != 0;
        let open_tiles = |me: &mut Self| {
            me.open(format!("for (uint tm_q = 0; tm_q < {per}u; ++tm_q)"));
            me.line(format!("const uint tm_t = tm_lid / 32u + {warps}u * tm_q;"));
            if guard {
                me.line(format!("if (tm_t >= {tiles}u) break;"));
            }
            me.line(format!("const uint tm_tm = (tm_t / {tn}u) * 8u;"));
            me.line(format!("const uint tm_tn = (tm_t % {tn}u) * 8u;"));
        };
        open_tiles(self);
        self.line(format!(
            "simdgroup_load({c}[tm_q], {s} + tm_tm * {n}u + tm_tn, {n});"
        ));
        self.close();
        self.smem_read_done();
        // A and B (as float) over the same scratch.
        self.smem_write_begin();
        self.stage(a, &s, 0, &|l| l.to_string())?;
        self.stage(b, &s, m * k, &|l| l.to_string())?;
        self.smem_write_end();
        let (fa, fb) = (self.fresh("frag_a"), self.fresh("frag_b"));
        self.line(format!("simdgroup_matrix<float, 8, 8> {fa};"));
        self.line(format!("simdgroup_matrix<float, 8, 8> {fb};"));
        self.open(format!("for (uint tm_kk = 0; tm_kk < {k}u; tm_kk += 8u)"));
        open_tiles(self);
        self.line(format!(
            "simdgroup_load({fa}, {s} + tm_tm * {k}u + tm_kk, {k});"
        ));
        self.line(format!(
            "simdgroup_load({fb}, {s} + {}u + tm_kk * {n}u + tm_tn, {n});",
            m * k
        ));
        self.line(format!(
            "simdgroup_multiply_accumulate({c}[tm_q], {fa}, {fb}, {c}[tm_q]);"
        ));
        self.close();
        self.close();
        self.smem_read_done();
        // C back through scratch into the blocked layout.
        self.smem_write_begin();
        open_tiles(self);
        self.line(format!(
            "simdgroup_store({c}[tm_q], {s} + tm_tm * {n}u + tm_tn, {n});"
        ));
        self.close();
        self.smem_write_end();
        let dacc = self.edt(res);
        let ct = self.cty(dacc)?;
        let name = self.gather("dot", dacc, m * n, &|l| format!("{ct}({s}[{l}])"))?;
        self.smem_read_done();
        self.set(res, Repr::Block(name));
        self.layouts.push(LayoutChoice {
            op: format!("dot {m}x{n}x{k}"),
            layout: format!(
                "simdgroup_matrix<float, 8, 8>: {tiles} C tile(s), {per} per SIMD-group, staged through threadgroup memory"
            ),
        });
        Ok(())
    }

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
        let din = self.edt(a);
        let dacc = self.edt(res);
        if !(din.is_float() || din.is_int()) || !(dacc.is_float() || dacc.is_int()) {
            return Err(unsupported(self.k, format!("dot of {din} into {dacc}")));
        }
        let r = sa.len();
        let (m, k, n) = (sa[r - 2], sa[r - 1], sb[r - 1]);
        let batch: usize = sc[..r - 2].iter().product();
        let na = batch * m * k;
        let s = self.scratch_array(din, na + batch * k * n)?;
        self.smem_write_begin();
        self.stage(a, &s, 0, &|l| l.to_string())?;
        self.stage(b, &s, na, &|l| l.to_string())?;
        self.smem_write_end();
        let ct = self.cty(dacc)?;
        let lay = self.layout(res);
        let name = self.declare_block("dot", dacc, lay.n)?;
        let accs = self.el(acc, "tm_i");
        self.open_regs(lay, true);
        if lay.has_idle_threads() {
            self.line(format!(
                "if (tm_l >= {}u) {{ {name}[tm_i] = {ct}(0); continue; }}",
                lay.n
            ));
        }
        self.line(format!("const uint tm_b = tm_l / {}u;", m * n));
        self.line(format!("const uint tm_m = (tm_l / {n}u) % {m}u;"));
        self.line(format!("const uint tm_n = tm_l % {n}u;"));
        self.line(format!("{ct} tm_c = {accs};"));
        self.open(format!("for (uint tm_k = 0; tm_k < {k}u; ++tm_k)"));
        let x = format!("{ct}({s}[tm_b * {}u + tm_m * {k}u + tm_k])", m * k);
        let y = format!("{ct}({s}[{na}u + tm_b * {}u + tm_k * {n}u + tm_n])", k * n);
        if dacc.is_float() && dacc != DType::BF16 {
            self.line(format!("tm_c = fma({x}, {y}, tm_c);"));
        } else if dacc == DType::BF16 {
            self.line(format!(
                "tm_c = {ct}(fma(float({x}), float({y}), float(tm_c)));"
            ));
        } else {
            self.line(format!("tm_c = tm_c + {x} * {y};"));
        }
        self.close();
        self.line(format!("{name}[tm_i] = tm_c;"));
        self.close();
        self.smem_read_done();
        self.set(res, Repr::Block(name));
        self.layouts.push(LayoutChoice {
            op: format!("dot {}x{m}x{n}x{k}", batch),
            layout: "scalar FMA: operands staged in threadgroup memory, one C element per register"
                .into(),
        });
        Ok(())
    }
}
