//! How a block tensor is spread over the threads of a program (STYLE rule 13): the facts
//! the optimizer plans with; the printers add the C expressions (`codegen::layout`).
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

/// One tensor's distribution over a program's threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockedLayout {
    /// Elements (power of two).
    pub n: usize,
    /// Consecutive elements per chunk (power of two, at most `n`).
    pub vec: usize,
    /// Threads of the program (power of two, a multiple of the SIMD width).
    pub threads: usize,
}

/// SIMD-group width on every target this backend prints for.
pub const SIMD_WIDTH: usize = 32;

impl BlockedLayout {
    /// The layout of an `n`-element block for `threads` threads and preferred chunk `vec`.
    pub fn new(n: usize, vec: usize, threads: usize) -> BlockedLayout {
        BlockedLayout {
            n,
            vec: vec.min(n).max(1),
            threads,
        }
    }

    /// Register slots per thread.
    pub fn regs(&self) -> usize {
        self.vec * self.n.div_ceil(self.vec * self.threads)
    }

    /// `log2(vec)`.
    pub fn vec_bits(&self) -> u32 {
        self.vec.trailing_zeros()
    }

    /// `log2(threads)`.
    pub fn thread_bits(&self) -> u32 {
        self.threads.trailing_zeros()
    }

    /// True when some threads hold no elements (the block is smaller than one chunk per
    /// thread): their registers are padding and memory ops must skip them.
    pub fn has_idle_threads(&self) -> bool {
        self.n < self.vec * self.threads
    }

    /// Where flat bit `b` lives.
    pub fn bit_home(&self, b: u32) -> BitHome {
        let vb = self.vec_bits();
        let tb = self.thread_bits();
        if b < vb {
            BitHome::Reg(b)
        } else if b < vb + tb {
            let t = b - vb;
            if t < SIMD_WIDTH.trailing_zeros() {
                BitHome::Lane(t)
            } else {
                BitHome::Warp(t - SIMD_WIDTH.trailing_zeros())
            }
        } else {
            BitHome::Reg(b - tb)
        }
    }
}

/// The home of one bit of a flat element index under a [`BlockedLayout`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BitHome {
    /// Bit of the register slot index.
    Reg(u32),
    /// Bit of the lane index within the SIMD-group.
    Lane(u32),
    /// Bit of the SIMD-group index within the threadgroup.
    Warp(u32),
}

/// The layout of an `n`-element block in a kernel whose plan chunks by `vec` on `threads`
/// threads, `base` being the profile's word-sized chunk. A chunk wider than `base` only where
/// every thread still gets a whole chunk (Triton caps `sizePerThread` by `numel / threads`
/// the same way): a 32x16 tile on 128 threads keeps 4-wide chunks instead of idling half
/// the threads.
pub fn layout_of(n: usize, vec: usize, base: usize, threads: usize) -> BlockedLayout {
    let vec = if vec > base && n < vec * threads {
        (n / threads).clamp(base, vec)
    } else {
        vec
    };
    BlockedLayout::new(n, vec, threads)
}

/// Per dimension of `shape` (powers of two, row-major): `(first bit, bits)` of its index in
/// the flat element index.
pub fn bit_fields(shape: &[usize]) -> Vec<(u32, u32)> {
    let mut pos = 0u32;
    let mut out = vec![(0, 0); shape.len()];
    for (d, &s) in shape.iter().enumerate().rev() {
        let w = s.trailing_zeros();
        out[d] = (pos, w);
        pos += w;
    }
    out
}

/// Where the reduced (or scanned) axis sits in the flat index of a block of `shape`
/// (powers of two, row-major).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AxisGeo {
    /// Elements of the block.
    pub n: usize,
    /// Length of the axis.
    pub k: usize,
    /// Elements of the result (`n / k`).
    pub nout: usize,
    /// First bit of the axis in the flat index (log2 of the product of the dims after it).
    pub ib: u32,
    /// Bits of the axis (log2 of its length).
    pub kb: u32,
}

impl AxisGeo {
    /// The geometry of `axis` in a block of `shape`.
    pub fn new(shape: &[usize], axis: usize) -> AxisGeo {
        let f = bit_fields(shape);
        let n: usize = shape.iter().product();
        AxisGeo {
            n,
            k: shape[axis],
            nout: n / shape[axis],
            ib: f[axis].0,
            kb: f[axis].1,
        }
    }

    /// True when flat bit `b` is a bit of the axis.
    pub fn is_axis_bit(&self, b: u32) -> bool {
        b >= self.ib && b < self.ib + self.kb
    }

    /// Register bits of `lay` off the axis (the partials each thread keeps).
    pub fn kept_reg_bits(&self, lay: BlockedLayout) -> usize {
        let (vb, tb) = (lay.vec_bits(), lay.thread_bits());
        (0..lay.regs().trailing_zeros())
            .filter(|&r| !self.is_axis_bit(if r < vb { r } else { r + tb }))
            .count()
    }

    /// How many lane and SIMD-group bits of the thread index of `lay` are bits of the axis.
    pub fn axis_thread_bits(&self, lay: BlockedLayout) -> (usize, usize) {
        let (mut la, mut wa) = (0, 0);
        for t in 0..lay.thread_bits() {
            let flat = lay.vec_bits() + t;
            if self.is_axis_bit(flat) {
                match lay.bit_home(flat) {
                    BitHome::Lane(_) => la += 1,
                    BitHome::Warp(_) => wa += 1,
                    BitHome::Reg(_) => {}
                }
            }
        }
        (la, wa)
    }
}
