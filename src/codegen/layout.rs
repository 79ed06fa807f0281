//! How a block tensor is spread over the threads of a program (STYLE rule 13).
//!
//! Every block value of `n` elements (a power of two) uses one blocked layout, a function of
//! `n` alone: the row-major flat index `l` is cut into chunks of `vec` consecutive elements
//! and chunk `c` belongs to thread `c % threads`, in register slots `(c / threads) * vec ..`.
//! In bits of `l` (low to high): `log2(vec)` register bits, `log2(threads)` thread bits (5
//! lane bits, then SIMD-group bits), then the remaining register ("round") bits. This is
//! Triton's blocked layout with `sizePerThread = vec`, flattened; since it depends on the
//! element count only, `reshape` and `expand_dims` are free, and same-shape elementwise ops
//! never move data. Everything else that moves elements between threads goes through
//! threadgroup memory.

pub use crate::opt::blocked::{BitHome, BlockedLayout, SIMD_WIDTH};

impl BlockedLayout {
    /// C expression of the flat index held in register `i` of thread `lid`.
    pub fn flat_expr(&self, i: &str, lid: &str) -> String {
        let vb = self.vec_bits();
        let tb = self.thread_bits();
        let mut parts = Vec::new();
        if vb > 0 {
            parts.push(format!("({i} & {}u)", self.vec - 1));
        }
        parts.push(if vb > 0 {
            format!("({lid} << {vb})")
        } else {
            lid.to_string()
        });
        if self.regs() > self.vec {
            parts.push(format!("(({i} >> {vb}) << {})", vb + tb));
        }
        parts.join(" | ")
    }
}

/// C expression that spreads the bits of dense index `j` onto `positions` (ascending bit
/// positions), i.e. a software `pdep`; runs of consecutive positions are moved together.
pub fn deposit_expr(j: &str, positions: &[u32]) -> String {
    if positions.is_empty() {
        return "0u".into();
    }
    let mut parts = Vec::new();
    let mut k = 0usize;
    while k < positions.len() {
        let start = k;
        while k + 1 < positions.len() && positions[k + 1] == positions[k] + 1 {
            k += 1;
        }
        let len = (k - start + 1) as u32;
        let src = start as u32;
        let dst = positions[start];
        let mask = (1u64 << len) - 1;
        let field = if src == 0 {
            format!("({j} & {mask}u)")
        } else {
            format!("(({j} >> {src}) & {mask}u)")
        };
        parts.push(if dst == 0 {
            field
        } else {
            format!("({field} << {dst})")
        });
        k += 1;
    }
    parts.join(" | ")
}

/// `simdgroup_matrix` fragment edge: `tl.dot` tiles C, A and B into `8 x 8` blocks.
pub const MATRIX_TILE: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_layout_bits() {
        let l = BlockedLayout::new(1024, 4, 128);
        assert_eq!(l.regs(), 8);
        assert!(!l.has_idle_threads());
        assert_eq!(l.bit_home(0), BitHome::Reg(0));
        assert_eq!(l.bit_home(2), BitHome::Lane(0));
        assert_eq!(l.bit_home(7), BitHome::Warp(0));
        assert_eq!(l.bit_home(9), BitHome::Reg(2));
        assert_eq!(
            l.flat_expr("i", "t"),
            "(i & 3u) | (t << 2) | ((i >> 2) << 9)"
        );
        let small = BlockedLayout::new(16, 4, 128);
        assert_eq!(small.regs(), 4);
        assert!(small.has_idle_threads());
        assert_eq!(
            deposit_expr("j", &[0, 1, 5]),
            "(j & 3u) | (((j >> 2) & 1u) << 5)"
        );
    }
}
