//! The layout plan of one kernel: the decisions the printers spell, each with the fact or
//! profile field that drove it.
//!
//! [`plan`] reads the kernel IR, the [`LaunchOptions`] (warps, profile, overrides) and what
//! the printer's dialect offers ([`Printer`]), and decides, per op:
//! - `tl.dot`: its lowering ([`DotLowering`]: `simdgroup_matrix` 8x8 tiles with A and B
//!   staged in a chosen dtype, `mma.sync` m16n8k16 with a warp grid, rows of C on a
//!   one-thread program, or a scalar FMA per element);
//! - reductions: the strategy ([`ReductionLayout`], the seeds' DEFAULT / ROW_MAJOR /
//!   COLUMN_MAJOR / TILED / COALESCED);
//! - `cumsum`/`cumprod`/`associative_scan`: the strategy ([`ScanStrategy`]: registers and
//!   SIMD-group collectives, or staged whole and walked serially);
//! - `for` loops: which carried `tl.dot` accumulators stay in matrix fragments across
//!   the loop (on `mma.sync` also through a rescale by a broadcast vector,
//!   [`ResidentChain`]), and through how many buffers the dot's operand loads are staged
//!   ahead (CUDA's `cp.async` ring; on Metal two threadgroup buffers where they fit the
//!   budget);
//! - `mma.sync` dots whose result stays in its C fragments for the elementwise ops, row
//!   reductions and next dot that read it ([`KernelPlan::keeps_fragments`], see
//!   [`super::fragments`]), on a grid of whole rows per warp;
//! - the kernel: elements per chunk of the blocked layout ([`KernelPlan::vec`]), from the
//!   profile's vector width and the contiguity of its loads and stores;
//! - tiled `tl.dot`s: the K slice staged at once ([`KernelPlan::k_slice`]) and the rows of
//!   each accumulator band moved between fragments and the blocked layout
//!   ([`KernelPlan::band_rows`]);
//! - threadgroup memory: the byte budget and its one arena ([`KernelPlan::arena`], see
//!   [`super::smem`]): every buffer a conversion goes through, with its live range and
//!   offset, buffers that are never live together sharing bytes;
//! - one-thread programs (the compiled CPU executor): index recipes, lazy values, unswitched
//!   masks, peeled loops, reduction lanes, whole-block accesses, row copies and branch-free
//!   conditions ([`KernelPlan::cpu`], see [`super::cpu`]);
//! - barriers: before which op's threadgroup writes (or after which loop) threads wait
//!   for each other, and why ([`KernelPlan::barriers`], see [`super::barriers`]).
//!
//! A user override changes the plan, never the printer: [`LaunchOptions::reduction_layout`],
//! an edit of a launch's plan (`Launch::override_plan` in `runtime`, on every compiled
//! target), or [`KernelPlan::set`] on a plan given to `codegen::metal::compile_with` (or the
//! CUDA and C++ counterparts). [`KernelPlan::verify`] checks a plan against its kernel; its text
//! form (printed with `TRITON_METAL_DEBUG=1`) parses back with [`KernelPlan::parse`].
//!
//! ```
//! use triton_metal::opt::plan::{plan, Decision, Printer, MatrixUnit};
//! use triton_metal::opt::options::LaunchOptions;
//! use triton_metal::{tl, DType::F32};
//! let k = tl::jit("rowmax", |k| {
//!     let x = k.ptr(F32, "x");
//!     let o = k.ptr(F32, "o");
//!     let offs = tl::arange(0, 256);
//!     tl::store(o + tl::program_id(0), tl::load(x + offs).max(0));
//! })?.specialize_with(&[])?;
//! let printer = Printer {
//!     threads: 128,
//!     matrix: MatrixUnit::Simdgroup8x8,
//!     widest_vector: 4,
//!     static_shared: None,
//! };
//! let p = plan(&k, &LaunchOptions::default(), printer);
//! assert!(p.decisions().any(|(_, d, _)| matches!(d, Decision::Reduce(_))));
//! assert_eq!(triton_metal::opt::plan::KernelPlan::parse(&p.to_string())?, p);
//! # Ok::<(), triton_metal::Error>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;

use super::barriers::When;
use super::cpu::CpuPlan;
use super::options::{LaunchOptions, ReductionLayout};
use super::smem::{parse_arena, parse_buffer, parse_convert, Arena, Request, Role};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::{Kernel, Op, OpId, RegionId, Value};

/// The matrix unit the printer's dialect can spell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatrixUnit {
    /// None: `tl.dot` is scalar code.
    None,
    /// Metal `simdgroup_matrix<T, 8, 8>` (Apple7+).
    Simdgroup8x8,
    /// NVIDIA `mma.sync.m16n8k16` (sm80+).
    MmaM16N8K16,
    /// NVIDIA sm_90a: `mma.sync.m16n8k16`, and `wgmma.mma_async`, whose warpgroups of 4
    /// warps read both operands from shared memory through matrix descriptors.
    Wgmma,
}

impl MatrixUnit {
    fn name(self) -> &'static str {
        match self {
            MatrixUnit::None => "none",
            MatrixUnit::Simdgroup8x8 => "simdgroup8x8",
            MatrixUnit::MmaM16N8K16 => "mma16816",
            MatrixUnit::Wgmma => "wgmma",
        }
    }

    /// Whether the unit spells `mma.sync.m16n8k16` (every NVIDIA unit).
    pub fn mma_sync(self) -> bool {
        matches!(self, MatrixUnit::MmaM16N8K16 | MatrixUnit::Wgmma)
    }

    fn parse(s: &str) -> Option<MatrixUnit> {
        [
            MatrixUnit::None,
            MatrixUnit::Simdgroup8x8,
            MatrixUnit::MmaM16N8K16,
            MatrixUnit::Wgmma,
        ]
        .into_iter()
        .find(|m| m.name() == s)
    }
}

/// What the printer's dialect offers the planner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Printer {
    /// Threads of one program (1 on the CPU).
    pub threads: usize,
    /// Its matrix unit.
    pub matrix: MatrixUnit,
    /// Elements of its widest packed load or store.
    pub widest_vector: usize,
    /// The most static shared memory the dialect may declare per program, when it caps it
    /// below the profile (CUDA: 48 KB without dynamic shared memory).
    pub static_shared: Option<usize>,
}

/// How the warps of a program split an `[M, N]` accumulator on `mma.sync` m16n8k16.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WarpGrid {
    /// Warps along M.
    pub wm: usize,
    /// Warps along N.
    pub wn: usize,
    /// 16-row MMA tiles per warp.
    pub fm: usize,
    /// 8-column MMA tiles per warp.
    pub fn_: usize,
}

impl WarpGrid {
    /// The grid for `[m, n]` with at most `warps` warps: every active warp gets the same
    /// whole number of tiles; among the grids using the most warps, the squarest warp tile
    /// (fewest fragment loads per MMA). `None` when `m`/`n` are not multiples of 16/8.
    pub fn choose(m: usize, n: usize, warps: usize) -> Option<WarpGrid> {
        if m == 0 || n == 0 || m % 16 != 0 || n % 8 != 0 {
            return None;
        }
        WarpGrid::split(m / 16, n / 8, warps, (16, 8))
    }

    /// The grid of `simdgroup_matrix` 8x8 tiles for `[m, n]` with at most `warps`
    /// SIMD-groups, chosen as [`Self::choose`] does; here [`Self::fm`] and [`Self::fn_`]
    /// count 8x8 tiles. Each SIMD-group's tiles form one `8 fm x 8 fn` block, so a K step
    /// loads `fm` A and `fn` B fragments for its `fm * fn` MMAs. `None` when `m`/`n` are
    /// not multiples of 8.
    pub fn simdgroup(m: usize, n: usize, warps: usize) -> Option<WarpGrid> {
        if m == 0 || n == 0 || m % 8 != 0 || n % 8 != 0 {
            return None;
        }
        WarpGrid::split(m / 8, n / 8, warps, (8, 8))
    }

    /// `tm x tn` tiles of `h x w` elements over at most `warps` warps: the most warps that
    /// split both counts evenly, then the smallest warp-tile perimeter.
    fn split(tm: usize, tn: usize, warps: usize, (h, w): (usize, usize)) -> Option<WarpGrid> {
        let perimeter = |g: &WarpGrid| g.fm * h + g.fn_ * w;
        let mut active = warps.max(1);
        while active >= 1 {
            let mut best: Option<WarpGrid> = None;
            let mut wm = 1;
            while wm <= active {
                let wn = active / wm;
                if wm * wn == active && tm % wm == 0 && tn % wn == 0 {
                    let g = WarpGrid {
                        wm,
                        wn,
                        fm: tm / wm,
                        fn_: tn / wn,
                    };
                    if best.is_none_or(|b| perimeter(&g) < perimeter(&b)) {
                        best = Some(g);
                    }
                }
                wm *= 2;
            }
            if best.is_some() {
                return best;
            }
            active /= 2;
        }
        None
    }

    /// Warps that hold tiles.
    pub fn active(&self) -> usize {
        self.wm * self.wn
    }
}

/// How one `tl.dot` is lowered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DotLowering {
    /// `simdgroup_matrix` 8x8 fragments accumulating in float; A and B staged through
    /// threadgroup memory as `stage`.
    Simdgroup {
        /// The staging (and fragment) dtype of A and B: f16 or f32.
        stage: DType,
    },
    /// `mma.sync` m16n8k16 (f16/bf16 operands, f32 accumulator) on this warp grid.
    Mma(WarpGrid),
    /// One thread per program: rows of C accumulate along rows of B.
    Rows,
    /// Scalar FMAs, A and B staged: each thread's C elements in registers, the K loop outside.
    Fma,
}

/// How a scan (`cumsum`, `cumprod`, `associative_scan`) is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScanStrategy {
    /// In registers, then SIMD-group collectives: a running scan over each thread's chunk,
    /// an exclusive prefix of chunk totals across lanes (shuffles), then the totals of
    /// earlier SIMD-groups through threadgroup memory. Only forward `cumsum`/`cumprod` of
    /// f32, f16, i32 or u32 whose scanned axis lies within one round of the blocked layout
    /// (register, lane and SIMD-group bits: [`scan_fits_one_round`]).
    Collective,
    /// Staged whole in threadgroup memory (row-major), one thread per line walking it in
    /// order: any scan, reverse scans and combine functions included.
    Serial,
}

impl ScanStrategy {
    /// Every variant.
    pub const ALL: [ScanStrategy; 2] = [ScanStrategy::Collective, ScanStrategy::Serial];

    /// The name in the plan's text form.
    pub fn name(self) -> &'static str {
        match self {
            ScanStrategy::Collective => "collective",
            ScanStrategy::Serial => "serial",
        }
    }

    /// The strategy named `s` ([`Self::name`]).
    pub fn parse(s: &str) -> Option<ScanStrategy> {
        ScanStrategy::ALL.into_iter().find(|x| x.name() == s)
    }
}

/// Whether a scan over the axis ending at flat bit `axis_end` of an `n`-element block lies
/// within one round of the blocked layout a plan with chunks of `vec` gives it on `threads`
/// threads: every axis bit in a register of the chunk, a lane or a SIMD-group. A block of
/// at most one chunk per thread always does (its chunk shrinks to fit, never below
/// `n / threads`).
pub fn scan_fits_one_round(n: usize, axis_end: u32, vec: usize, threads: usize) -> bool {
    let lay = super::blocked::BlockedLayout::new(n, vec, threads);
    n <= vec.saturating_mul(threads) || axis_end <= lay.vec_bits() + lay.thread_bits()
}

/// Element types [`ScanStrategy::Collective`] takes.
fn scans_collectively(dt: DType) -> bool {
    matches!(dt, DType::F32 | DType::F16 | DType::I32 | DType::U32)
}

/// Why the scan at `op` cannot run as [`ScanStrategy::Collective`] in a program of
/// `threads` threads chunking by `vec`, if it cannot.
fn scan_not_collective(k: &Kernel, op: &Op, vec: usize, threads: usize) -> Option<String> {
    let Op::Scan {
        kind,
        srcs,
        axis,
        reverse,
        ..
    } = op
    else {
        return Some("not a scan".into());
    };
    let x = *srcs.first()?;
    let (dt, shape) = (k.ty(x).dtype, &k.ty(x).shape);
    if *kind == crate::ir::ScanKind::Custom {
        return Some("a combine function (folded serially, in index order)".into());
    }
    if *reverse {
        return Some("a reverse scan (the collectives run forward)".into());
    }
    if k.ty(x).ptr || !scans_collectively(dt) {
        return Some(format!(
            "{dt} elements (the collectives take f32, f16, i32, u32)"
        ));
    }
    let geo = super::blocked::AxisGeo::new(shape, *axis as usize);
    if !scan_fits_one_round(geo.n, geo.ib + geo.kb, vec, threads) {
        return Some(format!(
            "axis {axis} of {shape:?} spans more than one round of the blocked layout \
             ({} elements over {threads} threads in chunks of {vec})",
            geo.n
        ));
    }
    None
}

/// One decision of the plan.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Decision {
    /// A `tl.dot`'s lowering.
    Dot(DotLowering),
    /// A reduction's strategy.
    Reduce(ReductionLayout),
    /// A scan's strategy.
    Scan(ScanStrategy),
    /// A `for` loop's carried slots (indices into its init values) whose `tl.dot`
    /// accumulators stay in matrix fragments across the loop.
    Resident(Vec<usize>),
    /// A `tl.dot` operand load of such a loop, copied into a ring of `stages`
    /// shared-memory buffers, `stages - 1` iterations ahead of its dot (see
    /// [`super::pipeline`]): on CUDA asynchronously (`cp.async`); on Metal (`simdgroup_matrix`)
    /// through registers into one of two threadgroup buffers, or, with 1, staged in its own
    /// iteration (the plan's record of why two did not fit or were not asked for).
    Ahead {
        /// Buffers in the ring (at least 2 on CUDA; 1 or 2 on Metal).
        stages: usize,
    },
}

/// Largest static shared memory of a CUDA block: what the ring of [`Decision::Ahead`]
/// leaves for the printer's other buffers.
const STATIC_SHARED_BYTES: u64 = 48 * 1024;

/// The plan of one kernel: decisions per op, each with the reason it was taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelPlan {
    /// The kernel's name.
    pub kernel: String,
    /// What the printer offered.
    pub printer: Printer,
    /// Elements per chunk of every block's blocked layout (see `codegen::layout`): one
    /// width for the whole kernel, so layouts depend on element counts only.
    pub vec: usize,
    /// Why [`Self::vec`].
    pub vec_why: String,
    decisions: BTreeMap<OpId, (Decision, String)>,
    /// Per tiled `tl.dot`: the K slice A and B are staged in.
    k_slices: BTreeMap<OpId, (usize, String)>,
    /// `mma.sync` dots whose results stay in their C fragments ([`super::fragments`]).
    fragments: BTreeMap<OpId, String>,
    /// `mma.sync` dots of a `for` body whose operand A is loop-invariant, staged once
    /// before the loop.
    hoists: BTreeMap<OpId, String>,
    /// `mma.sync`-gridded dots spelled as `wgmma.mma_async` instead, both operands read
    /// from the loop's ring in the swizzled layout [`ring_operand_tile`] describes.
    wgmma: BTreeMap<OpId, String>,
    /// `mma.sync` dots whose operand B the loop's ring holds column by column (`[n][k]`,
    /// K contiguous): its load runs along K in memory (flash attention's `k` read
    /// transposed), so the copies go 16 bytes along K and `ldmatrix` reads B untransposed.
    kmajor: BTreeMap<OpId, String>,
    /// Row reductions of fragments whose results, and the row vectors computed from them,
    /// stay in the fragments' row slices ([`super::rows`]).
    rows: BTreeMap<OpId, String>,
    /// Per op converting an `[m, n]` accumulator between fragments and the blocked layout
    /// (the dot, or the `for` keeping it in fragments): rows per band.
    bands: BTreeMap<(OpId, usize, usize), (usize, String)>,
    /// Threadgroup memory: budget and buffers ([`Self::place_arena`]). The setters below
    /// drop the buffers, which follow from the decisions; the printers place them again
    /// from the changed plan before printing.
    pub arena: Arena,
    /// The one-thread specialisations of the compiled CPU executor's printer (programs of
    /// one thread only; see [`super::cpu`]).
    pub cpu: Option<CpuPlan>,
    /// Barriers between ops in threadgroup memory, each with its reason
    /// ([`super::barriers`]).
    barriers: BTreeMap<(OpId, When), String>,
}

/// Bytes a float accumulator band of a `simdgroup_matrix` dot may always take (more when
/// the kernel's operand staging already takes more, since the two are never live together).
pub const BAND_BYTES: usize = 16 * 1024;

/// Largest f32 accumulator (bytes) an `mma.sync` dot converts to the blocked layout in one
/// pass.
pub const MMA_WHOLE_C_BYTES: usize = 32 * 1024;

/// Bytes of one band when a larger `mma.sync` accumulator is converted in passes.
pub const MMA_BAND_BYTES: usize = 16 * 1024;

/// Padding (floats) of a banded `mma.sync` accumulator row: rows shift by 4 banks, so the 8
/// rows one fragment store touches collide at most 2-way.
pub const MMA_C_PAD: usize = 4;

/// Padding (elements) of a row of an `mma.sync` operand tile in shared memory: 16 bytes of
/// 16-bit elements, so the 8 row addresses of an `ldmatrix` fall in distinct banks.
pub const MMA_OPERAND_PAD: usize = 8;

/// How `mma.sync` stages operand `operand` (0: A `[m, k]`, 1: B `[k, n]`) of an `m x n x k`
/// dot in shared memory: `(rows, elements per row, pitch)`, rows padded by
/// [`MMA_OPERAND_PAD`].
pub fn mma_operand_tile((m, n, k): (usize, usize, usize), operand: usize) -> (usize, usize, usize) {
    if operand == 0 {
        (m, k, k + MMA_OPERAND_PAD)
    } else {
        (k, n, n + MMA_OPERAND_PAD)
    }
}

/// Elements per threadgroup-memory row of `row` elements of `dt` that `simdgroup_load`
/// reads 8x8 tiles from: padded by 16 bytes when the row is an even number of 16-byte
/// units. The rule, from the tile strides: assuming 32 banks of 4 bytes (Apple does not
/// document its banking; this is the common organisation and the one MLX's own padding
/// targets), the 8 row segments of one 8x8 load start at `r * pitch` for `r < 8`. When
/// `pitch` is an odd multiple of 16 bytes these starts are 8 distinct 16-byte slots modulo
/// 128 bytes, so a half tile (8 segments of 16 bytes) touches every bank once and a float
/// tile (32-byte segments) every bank exactly twice, the fewest passes 256 bytes can take;
/// an even multiple repeats slots (a 128-byte multiple puts all 8 rows on the same banks).
pub fn simdgroup_pitch(row: usize, dt: DType) -> usize {
    let unit = 16 / dt.size_bytes().clamp(1, 16);
    let bytes = row * dt.size_bytes();
    if bytes % 16 == 0 && (bytes / 16) % 2 == 0 {
        row + unit
    } else {
        row
    }
}

/// `(pa, pb)`: elements per staged row of A `[m, kc]` and of B `[kc, n]` of a
/// `simdgroup_matrix` dot staged as `stage`, rows padded by [`simdgroup_pitch`] when both
/// padded tiles take at most `room` bytes, else unpadded (`(kc, n)`).
pub fn simdgroup_pitches(
    (m, n, kc): (usize, usize, usize),
    stage: DType,
    room: usize,
) -> (usize, usize) {
    let (pa, pb) = (simdgroup_pitch(kc, stage), simdgroup_pitch(n, stage));
    if (m * pa + kc * pb) * stage.size_bytes() <= room {
        (pa, pb)
    } else {
        (kc, n)
    }
}

/// Elements of one staging of A and B as [`simdgroup_pitches`] lays them out (A first, B
/// at `m * pa`).
pub fn simdgroup_stage_elems(mnk: (usize, usize, usize), stage: DType, room: usize) -> usize {
    let (pa, pb) = simdgroup_pitches(mnk, stage, room);
    mnk.0 * pa + mnk.2 * pb
}

/// Columns of one swizzled block of a `wgmma` operand tile: 64 16-bit elements, one
/// 128-byte row of the 128-byte swizzle.
pub const WGMMA_SWIZZLE_COLS: usize = 64;

/// How a ring buffer holds operand `operand` (0: A `[m, k]`, 1: B `[k, n]`) of dot `dot`:
/// `(rows, elements per row, pitch)`. `mma.sync` reads rows padded by
/// [`MMA_OPERAND_PAD`] ([`mma_operand_tile`]). `wgmma` reads the tile unpadded, split
/// into blocks of [`WGMMA_SWIZZLE_COLS`] columns stored one after another (`rows` rows of
/// 128 bytes each), the 16-byte chunk `c` of row `r` at chunk `c ^ (r % 8)` of its row: the
/// 128-byte swizzle of the matrix descriptors, which needs each block 1024-byte aligned.
/// The pitch is then the row length, and the tile's bytes are the same as unpadded.
pub fn ring_operand_tile(
    plan: &KernelPlan,
    dot: OpId,
    mnk: (usize, usize, usize),
    operand: usize,
) -> (usize, usize, usize) {
    if operand == 1 && plan.kmajor(dot) {
        let (_, n, k) = mnk;
        let pitch = if plan.wgmma(dot) {
            k
        } else {
            k + MMA_OPERAND_PAD
        };
        return (n, k, pitch);
    }
    let (rows, row, pitch) = mma_operand_tile(mnk, operand);
    if plan.wgmma(dot) {
        (rows, row, row)
    } else {
        (rows, row, pitch)
    }
}

/// Elements of an operand tile staged as [`mma_operand_tile`] says.
fn mma_operand_elems(mnk: (usize, usize, usize), operand: usize) -> usize {
    let (rows, _, pitch) = mma_operand_tile(mnk, operand);
    rows * pitch
}

/// The threadgroup-memory budget of one program, and the profile field that set it.
fn budget(opts: &LaunchOptions, printer: Printer) -> (usize, String) {
    let p = opts.target.threadgroup_memory_bytes as usize;
    match printer.static_shared {
        Some(cap) if cap < p => (
            cap,
            format!(
                "static shared memory limit {cap} per block (profile threadgroup_memory_bytes \
                 {p} on {} needs dynamic shared memory)",
                opts.target.chip.name()
            ),
        ),
        _ if opts.target.apple_generation.is_some() => (
            p,
            format!(
                "profile threadgroup_memory_bytes {p} on {}: Apple's documented limit, the same \
                 32 KB on every Apple7+ GPU (M1..M4)",
                opts.target.chip.name()
            ),
        ),
        _ => (
            p,
            format!(
                "profile threadgroup_memory_bytes {p} on {}",
                opts.target.chip.name()
            ),
        ),
    }
}

/// The staging dtype and bytes of A and B of a tiled dot, K in slices of `kc`.
fn staging_bytes(m: usize, n: usize, kc: usize, l: DotLowering, din: DType) -> usize {
    match l {
        DotLowering::Simdgroup { stage } => (m + n) * kc * stage.size_bytes(),
        DotLowering::Mma(_) => {
            (mma_operand_elems((m, n, kc), 0) + mma_operand_elems((m, n, kc), 1)) * din.size_bytes()
        }
        _ => 0,
    }
}

/// Rows per band of an `[m, n]` accumulator leaving fragments under lowering `l`, and why;
/// `cap` is the kernel's largest operand staging in bytes.
fn band_rows(m: usize, n: usize, l: DotLowering, cap: usize, limit: usize) -> (usize, String) {
    match l {
        DotLowering::Mma(_) => {
            if m * n * 4 <= MMA_WHOLE_C_BYTES {
                return (
                    m,
                    format!("f32 {m}x{n} is at most {MMA_WHOLE_C_BYTES} bytes: one pass"),
                );
            }
            let mut rows = m;
            while rows > 1 && rows * (n + MMA_C_PAD) * 4 > MMA_BAND_BYTES {
                rows /= 2;
            }
            (
                rows,
                format!(
                    "f32 {m}x{n} is over {MMA_WHOLE_C_BYTES} bytes: bands of {rows} padded rows \
                     within {MMA_BAND_BYTES}"
                ),
            )
        }
        _ => {
            let room = BAND_BYTES.max(cap.min(limit));
            let mut rows = m;
            while rows > 8 && rows * n * 4 > room {
                rows /= 2;
            }
            let why = if rows == m {
                format!("f32 {m}x{n} fits {room} bytes (the larger of {BAND_BYTES} and the operand staging): one pass")
            } else {
                format!("f32 {m}x{n} over {room} bytes (the larger of {BAND_BYTES} and the operand staging it reuses): bands of {rows} rows")
            };
            (rows, why)
        }
    }
}

/// Elements per chunk of the kernel's blocked layout, and why. Where the dialect has packed
/// accesses wider than the profile's 32-bit-word chunk, a load or store proven contiguous
/// (the axis analysis) over one full vector of the target's width asks for that many
/// elements (8 halves or 4 floats in 16 bytes, as Triton's `sizePerThread`); the widest such
/// request wins. Accesses that cannot be packed (runtime strides) ask nothing: wider chunks
/// would only spread a warp's scalar accesses further apart.
fn chunk_elems(k: &Kernel, opts: &LaunchOptions, printer: Printer) -> (usize, String) {
    let base = opts.vector_elems();
    let why_base = format!(
        "profile vector_bytes {} / 4-byte words",
        opts.target.vector_bytes
    );
    let widest = printer.widest_vector;
    if widest <= base {
        return (base, why_base);
    }
    // Accesses whose runs are checked at run time (a remainder of an index of unknown
    // sign) count: the printers take their vector path wherever the check passes.
    let axis = super::axis::analyse_unchecked(k);
    let want = |bytes: usize| {
        (opts.target.vector_bytes as usize / bytes.max(1))
            .next_power_of_two()
            .clamp(base, widest)
    };
    k.ops
        .iter()
        .filter_map(|o| match o.op {
            Op::Load { ptr, .. } => Some((ptr, o.result()?)),
            Op::Store { ptr, value, .. } => Some((ptr, value)),
            _ => None,
        })
        .map(|(ptr, v)| (ptr, want(k.ty(v).dtype.size_bytes()), k.ty(v).dtype))
        .filter(|&(ptr, w, _)| axis[ptr.index()].contig >= w as u64)
        .max_by_key(|&(_, w, _)| w)
        .filter(|&(_, w, _)| w > base)
        .map(|(ptr, w, dt)| {
            (
                w,
                format!(
                    "{dt} access through {ptr} contiguous over {w} elements (profile vector_bytes {})",
                    opts.target.vector_bytes
                ),
            )
        })
        .unwrap_or((base, why_base))
}

/// `dot(a, b, acc)`'s operand dims `(m, n, k)` when 2-D.
fn dims(k: &Kernel, a: Value, b: Value) -> Option<(usize, usize, usize)> {
    let (sa, sb) = (&k.ty(a).shape, &k.ty(b).shape);
    (sa.len() == 2 && sb.len() == 2).then(|| (sa[0], sb[1], sa[1]))
}

/// The `(m, n, k)` of `tl.dot` op `dot` when its operands are 2-D.
pub fn dot_dims(k: &Kernel, dot: OpId) -> Option<(usize, usize, usize)> {
    match k.ops.get(dot.index())?.op {
        Op::Dot { a, b, .. } => dims(k, a, b),
        _ => None,
    }
}

/// Why `dot(a, b, acc)` cannot take `unit`'s tiles, or `Ok` with the lowering it takes.
fn tiles(
    k: &Kernel,
    unit: MatrixUnit,
    warps: usize,
    (a, b, acc): (Value, Value, Value),
) -> std::result::Result<(DotLowering, String), String> {
    let (din, dacc) = (k.ty(a).dtype, k.ty(acc).dtype);
    let Some((m, n, kk)) = dims(k, a, b) else {
        return Err("batched (3-D) operands".into());
    };
    match unit {
        MatrixUnit::None => Err("the printer has no matrix unit".into()),
        MatrixUnit::Simdgroup8x8 => {
            if m % 8 != 0 || n % 8 != 0 || kk % 8 != 0 {
                return Err(format!("{m}x{n}x{kk} is not a multiple of 8x8x8"));
            }
            let ok = |d: DType| matches!(d, DType::F32 | DType::F16);
            if !ok(din) || !ok(dacc) {
                return Err(format!("{din} operands into {dacc} (tiles take f32/f16)"));
            }
            let half = din == DType::F16 && k.ty(b).dtype == DType::F16;
            let stage = if half { DType::F16 } else { DType::F32 };
            Ok((
                DotLowering::Simdgroup { stage },
                format!(
                    "profile simdgroup_matrix; {m}x{n}x{kk} in 8x8 tiles; {din} operands staged as {}",
                    stage.short_name()
                ),
            ))
        }
        MatrixUnit::MmaM16N8K16 | MatrixUnit::Wgmma => {
            if !matches!(din, DType::F16 | DType::BF16) || k.ty(b).dtype != din {
                return Err(format!("{din} operands (tensor cores take f16/bf16)"));
            }
            if dacc != DType::F32 || kk % 16 != 0 {
                return Err(format!(
                    "{dacc} accumulator, K = {kk} (needs f32, K % 16 == 0)"
                ));
            }
            let g = WarpGrid::choose(m, n, warps)
                .ok_or(format!("{m}x{n} does not split into 16x8 tiles"))?;
            Ok((
                DotLowering::Mma(g),
                format!(
                    "sm80+ mma.sync; {}x{} warps of {}x{} (all {warps} warps or the most that split {m}x{n} evenly)",
                    g.wm,
                    g.wn,
                    g.fm * 16,
                    g.fn_ * 8
                ),
            ))
        }
    }
}

/// The plan the printers use for `kernel` under `opts` on `printer`'s dialect.
pub fn plan(kernel: &Kernel, opts: &LaunchOptions, printer: Printer) -> KernelPlan {
    let (vec, vec_why) = chunk_elems(kernel, opts, printer);
    let mut p = KernelPlan {
        kernel: kernel.name.clone(),
        printer,
        vec,
        vec_why,
        decisions: BTreeMap::new(),
        k_slices: BTreeMap::new(),
        fragments: BTreeMap::new(),
        hoists: BTreeMap::new(),
        wgmma: BTreeMap::new(),
        rows: BTreeMap::new(),
        kmajor: BTreeMap::new(),
        bands: BTreeMap::new(),
        arena: {
            let (limit, why) = budget(opts, printer);
            Arena::new(limit, why)
        },
        cpu: None,
        barriers: BTreeMap::new(),
    };
    let warps = (printer.threads / 32).max(1);
    for (i, o) in kernel.ops.iter().enumerate() {
        let id = OpId(i as u32);
        match &o.op {
            Op::Dot { a, b, acc } => {
                let (d, why) = match tiles(kernel, printer.matrix, warps, (*a, *b, *acc)) {
                    Ok(t) => t,
                    Err(_) if printer.threads == 1 => {
                        (DotLowering::Rows, "one thread per program".to_string())
                    }
                    Err(e) => (DotLowering::Fma, format!("no tiles: {e}")),
                };
                p.decisions.insert(id, (Decision::Dot(d), why));
            }
            Op::Reduce { kind, srcs, .. } if *kind != crate::ir::ReduceKind::Custom => {
                let dt = kernel.ty(srcs[0]).dtype;
                let (r, why) = match opts.reduction_layout {
                    Some(l) => (l, "LaunchOptions::reduction_layout".to_string()),
                    None => (
                        ReductionLayout::Coalesced,
                        "default: SIMD-group collectives".to_string(),
                    ),
                };
                let (r, why) = if r == ReductionLayout::Coalesced && !shuffles(dt) {
                    (
                        ReductionLayout::Default,
                        format!("{dt} has no SIMD shuffles (asked: {why})"),
                    )
                } else {
                    (r, why)
                };
                p.decisions.insert(id, (Decision::Reduce(r), why));
            }
            Op::Scan { .. } => {
                let threads = printer.threads.max(1);
                let (s, why) = match (
                    scan_not_collective(kernel, &o.op, vec, threads),
                    opts.reduction_layout,
                ) {
                    (Some(why), _) => (ScanStrategy::Serial, why),
                    (None, Some(l)) if l != ReductionLayout::Coalesced => (
                        ScanStrategy::Serial,
                        format!("LaunchOptions::reduction_layout {}", l.name()),
                    ),
                    (None, _) => (
                        ScanStrategy::Collective,
                        "default: forward scan within one round of the layout".to_string(),
                    ),
                };
                p.decisions.insert(id, (Decision::Scan(s), why));
            }
            _ => {}
        }
    }
    p.plan_fragments(kernel);
    for (i, o) in kernel.ops.iter().enumerate() {
        if let Op::For { body, .. } = &o.op {
            let slots = p.resident_candidates(kernel, *body);
            if !slots.is_empty() {
                let why = "the accumulator's only use is the loop's tiled tl.dot".to_string();
                p.plan_ahead(kernel, opts, OpId(i as u32), &slots);
                p.decisions
                    .insert(OpId(i as u32), (Decision::Resident(slots), why));
            }
        }
    }
    p.plan_loop_fragments(kernel);
    p.plan_rows(kernel);
    p.plan_hoists(kernel);
    p.plan_tiling(kernel);
    if printer.threads == 1 {
        let (vec, base) = (p.vec, opts.vector_elems());
        p.cpu = Some(super::cpu::plan(
            kernel,
            |op| !p.resident(op).is_empty(),
            |n| super::blocked::layout_of(n, vec, base, 1),
        ));
    }
    p.place_arena(kernel, opts);
    p
}

/// Bytes of one stage of the ring for the dots of `loads`: each operand as
/// [`ring_operand_tile`] stages it, 16-bit elements, each operand at a multiple of
/// [`ring_operand_align`].
fn stage_bytes(p: &KernelPlan, k: &Kernel, loads: &[super::pipeline::AheadLoad]) -> u64 {
    let align = ring_operand_align(loads.iter().any(|l| p.wgmma(l.dot)));
    loads
        .iter()
        .map(|l| {
            dot_dims(k, l.dot).map_or(0, |mnk| {
                let (rows, _, pitch) = ring_operand_tile(p, l.dot, mnk, l.operand);
                (rows * pitch * 2).next_multiple_of(align) as u64
            })
        })
        .sum()
}

/// Alignment in bytes of each operand tile inside a ring buffer: 16 for `cp.async`, or
/// [`WGMMA_RING_ALIGN`] when a dot reading the ring is spelled as `wgmma`, whose swizzled
/// blocks must start at that alignment.
pub fn ring_operand_align(wgmma: bool) -> usize {
    if wgmma {
        WGMMA_RING_ALIGN
    } else {
        16
    }
}

/// Bytes a ring whose operands feed `wgmma` takes beyond its buffers: its start is
/// rounded up to the 1024-byte alignment of the 128-byte swizzle.
pub const WGMMA_RING_ALIGN: usize = 1024;

/// Element types the SIMD-group shuffles and collectives take.
fn shuffles(dt: DType) -> bool {
    matches!(
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
}

/// How carried slot `slot` of loop body `body` reaches the dot that accumulates into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResidentChain {
    /// The loop's block argument for the slot.
    pub arg: Value,
    /// The dot whose `acc` is the argument or its rescale.
    pub dot: OpId,
    /// `acc * f` on the way, `f` a row or column vector broadcast over the accumulator
    /// (flash attention's `acc * alpha[:, None]`): applied to the fragments in place.
    pub scale: Option<Rescale>,
}

/// The elementwise rescale of a resident accumulator ([`ResidentChain::scale`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rescale {
    /// The `mul` op.
    pub mul: OpId,
    /// The broadcast op producing the factor `f`.
    pub bcast: OpId,
}

/// The chain from carried slot `slot` of `body` to its dot, when the slot's only use is
/// that dot's `acc`, or (on tensor cores, whose fragment elements the printer addresses
/// one by one) a `mul` by a broadcast `[m, 1]` or `[1, n]` block whose only use is that
/// `acc`. Shared by the plan, the value layouts, the buffer sizes and the printers.
pub fn resident_chain(
    k: &Kernel,
    body: RegionId,
    slot: usize,
    matrix: MatrixUnit,
) -> Option<ResidentChain> {
    let region = k.region(body);
    let arg = *region.args.get(slot + 1)?;
    let uses = use_counts(k);
    let only_use = |v: Value| -> Option<OpId> {
        if uses[v.index()] != 1 {
            return None;
        }
        region.ops.iter().copied().find(|&o| {
            let mut hit = false;
            k.op(o).op.for_each_operand(|x| hit |= x == v);
            hit
        })
    };
    let user = only_use(arg)?;
    match &k.op(user).op {
        Op::Dot { acc, .. } if *acc == arg => Some(ResidentChain {
            arg,
            dot: user,
            scale: None,
        }),
        Op::Binary {
            kind: crate::ir::BinaryOp::Mul,
            lhs,
            rhs,
        } if matrix.mma_sync() && lhs != rhs => {
            let f = if *lhs == arg { *rhs } else { *lhs };
            let bcast = k.def_op(f).filter(|&b| k.op(b).parent == body)?;
            let Op::Broadcast { src } = k.op(bcast).op else {
                return None;
            };
            let (ss, ds) = (&k.ty(src).shape, &k.ty(f).shape);
            let vector = ss.len() == 2 && ds.len() == 2 && (ss[0] == 1) != (ss[1] == 1);
            if !vector || only_use(f) != Some(user) {
                return None;
            }
            let res = k.op(user).result()?;
            let dot = only_use(res)?;
            matches!(k.op(dot).op, Op::Dot { acc, .. } if acc == res).then_some(ResidentChain {
                arg,
                dot,
                scale: Some(Rescale { mul: user, bcast }),
            })
        }
        _ => None,
    }
}

fn use_counts(k: &Kernel) -> Vec<u32> {
    let mut u = vec![0u32; k.values.len()];
    for o in &k.ops {
        o.op.for_each_operand(|v| u[v.index()] += 1);
    }
    u
}

impl KernelPlan {
    /// Every decision: the op, what was decided and why.
    pub fn decisions(&self) -> impl Iterator<Item = (OpId, &Decision, &str)> {
        self.decisions.iter().map(|(o, (d, w))| (*o, d, w.as_str()))
    }

    /// The decision for `op`, if it has one.
    pub fn get(&self, op: OpId) -> Option<&Decision> {
        self.decisions.get(&op).map(|(d, _)| d)
    }

    /// Replaces (or adds) the decision for `op`, recording `why`; [`Self::verify`] tells
    /// whether the kernel admits it. The arena's buffers follow from the decisions, so
    /// they are dropped, to be placed again ([`Self::place_arena`]). Setting a loop to keep
    /// no accumulator in fragments also drops its `fragments` line.
    pub fn set(&mut self, op: OpId, d: Decision, why: impl Into<String>) {
        // A loop keeping no accumulator in fragments has none to store from them.
        if matches!(&d, Decision::Resident(slots) if slots.is_empty()) {
            self.fragments.remove(&op);
        }
        self.decisions.insert(op, (d, why.into()));
        self.arena.buffers.clear();
        self.barriers.clear();
    }

    /// Drops the decision for `op`, returning it: the printers then take the op's fallback
    /// (a scalar FMA `tl.dot`, a DEFAULT reduction, a serial scan, a loop keeping nothing in
    /// fragments, and so storing nothing from them, a load issued in its own iteration). The
    /// arena's buffers are dropped, to be placed again ([`Self::place_arena`]).
    pub fn remove(&mut self, op: OpId) -> Option<Decision> {
        self.arena.buffers.clear();
        self.barriers.clear();
        let d = self.decisions.remove(&op).map(|(d, _)| d);
        // A loop keeping nothing in fragments has nothing to store from them.
        if matches!(d, Some(Decision::Resident(_))) {
            self.fragments.remove(&op);
        }
        d
    }

    /// Turns sharing of bytes between buffers never live together on or off; the buffers
    /// are dropped, to be placed again ([`Self::place_arena`]).
    pub fn set_reuse(&mut self, reuse: bool) {
        self.arena.reuse = reuse;
        self.arena.buffers.clear();
        self.barriers.clear();
    }

    /// The lowering of the `tl.dot` at `op` (scalar FMA when the plan has none).
    pub fn dot(&self, op: OpId) -> DotLowering {
        match self.get(op) {
            Some(Decision::Dot(d)) => *d,
            _ => DotLowering::Fma,
        }
    }

    /// The strategy of the reduction at `op`.
    pub fn reduction(&self, op: OpId) -> ReductionLayout {
        match self.get(op) {
            Some(Decision::Reduce(r)) => *r,
            _ => ReductionLayout::Default,
        }
    }

    /// The strategy of the scan at `op` ([`ScanStrategy::Serial`] when the plan has none,
    /// which takes every scan).
    pub fn scan(&self, op: OpId) -> ScanStrategy {
        match self.get(op) {
            Some(Decision::Scan(s)) => *s,
            _ => ScanStrategy::Serial,
        }
    }

    /// Sets the strategy of the scan at `op`, recording `why` ([`Self::verify`] tells
    /// whether the scan admits it); the arena's buffers are dropped, to be placed again
    /// ([`Self::place_arena`]).
    pub fn set_scan(&mut self, op: OpId, s: ScanStrategy, why: impl Into<String>) {
        self.set(op, Decision::Scan(s), why);
    }

    /// The ring size of load `op` when it is issued ahead ([`Decision::Ahead`]).
    pub fn ahead(&self, op: OpId) -> Option<usize> {
        match self.decisions.get(&op) {
            Some((Decision::Ahead { stages }, _)) => Some(*stages),
            _ => None,
        }
    }

    /// Decides [`Decision::Ahead`] for the dot operand loads of `for` loop `id` whose
    /// accumulators in `slots` stay in fragments: on tensor cores, when `num_stages >= 2`
    /// and the loop has the shape [`super::pipeline::ahead_loads`] needs, with as many
    /// stages as asked and the profile's shared memory holds.
    fn plan_ahead(&mut self, k: &Kernel, opts: &LaunchOptions, id: OpId, slots: &[usize]) {
        if self.printer.matrix == MatrixUnit::Simdgroup8x8 {
            return self.plan_double_buffer(k, opts, id, slots);
        }
        if !self.printer.matrix.mma_sync() || opts.num_stages < 2 {
            return;
        }
        let Some(loads) = super::pipeline::ring_loads(k, id, slots, self.vec) else {
            return;
        };
        if loads.is_empty()
            || !loads
                .iter()
                .all(|l| matches!(self.get(l.dot), Some(Decision::Dot(DotLowering::Mma(_)))))
        {
            return;
        }
        let mut dots: Vec<OpId> = loads.iter().map(|l| l.dot).collect();
        dots.sort();
        dots.dedup();
        for dot in dots {
            if let Ok((grid, why)) = self.wgmma_fit(k, dot, &loads) {
                self.set(dot, Decision::Dot(DotLowering::Mma(grid)), why);
                self.wgmma.insert(
                    dot,
                    "both operands copied ahead into the ring: warpgroup MMAs read them there"
                        .to_string(),
                );
            }
        }
        // B loads whose elements are not proven to run along N are copied along K.
        for l in &loads {
            if l.operand == 1 && !l.runs {
                self.kmajor.insert(
                    l.dot,
                    "B's load is not proven to run along N: the ring holds it column by column, copied along K".into(),
                );
            }
        }
        let align = if loads.iter().any(|l| self.wgmma(l.dot)) {
            WGMMA_RING_ALIGN as u64
        } else {
            0
        };
        let per = stage_bytes(self, k, &loads);
        let room = (opts.target.threadgroup_memory_bytes as u64)
            .saturating_sub(STATIC_SHARED_BYTES)
            .saturating_sub(align);
        let fit = room.checked_div(per).unwrap_or(0);
        let stages = (opts.num_stages as u64).min(fit);
        if stages < 2 {
            return;
        }
        let why = format!(
            "num_stages {}: {stages} buffers of {per} bytes (profile threadgroup_memory_bytes {} less {STATIC_SHARED_BYTES} static)",
            opts.num_stages, opts.target.threadgroup_memory_bytes
        );
        for l in loads {
            self.decisions.insert(
                l.load,
                (
                    Decision::Ahead {
                        stages: stages as usize,
                    },
                    why.clone(),
                ),
            );
        }
    }

    /// Decides [`Decision::Ahead`] for the operand loads of the one `simdgroup_matrix` dot
    /// of `for` loop `id` (accumulator in fragments, loads of the shape
    /// [`super::pipeline::ahead_loads`] needs): two threadgroup staging buffers when
    /// `num_stages >= 2` and two fit the arena's budget (rows padded by
    /// [`simdgroup_pitches`] when that still fits), else one, with the reason. With two,
    /// iteration `t` loads iteration `t + 1`'s tiles from device memory into registers
    /// before its MMAs and stores them into the other buffer after them: one barrier per K
    /// step instead of two.
    fn plan_double_buffer(&mut self, k: &Kernel, opts: &LaunchOptions, id: OpId, slots: &[usize]) {
        let Some(loads) = super::pipeline::ahead_loads(k, id, slots) else {
            return;
        };
        let dot = match loads.first() {
            Some(l) if loads.len() == 2 && loads.iter().all(|x| x.dot == l.dot) => l.dot,
            _ => return,
        };
        let Some(Decision::Dot(DotLowering::Simdgroup { stage })) = self.get(dot).cloned() else {
            return;
        };
        let Some(mnk) = dot_dims(k, dot) else { return };
        let (limit, size) = (self.arena.limit, stage.size_bytes());
        let per = simdgroup_stage_elems(mnk, stage, limit / 2) * size;
        let padded = simdgroup_pitches(mnk, stage, limit / 2) != (mnk.2, mnk.1);
        let rows = if padded {
            "rows padded"
        } else {
            "rows unpadded"
        };
        let (stages, why) = if opts.num_stages < 2 {
            (
                1,
                format!(
                    "num_stages {}: one staging buffer, filled and read in its own K step (two barriers per step)",
                    opts.num_stages
                ),
            )
        } else if 2 * per <= limit {
            (
                2,
                format!(
                    "num_stages {}: two staging buffers of {per} bytes (A and B as {}, {rows}) fit the {limit}-byte budget ({}): the next K step's tiles go to registers before this step's MMAs and to the other buffer after them, one barrier per step",
                    opts.num_stages,
                    stage.short_name(),
                    self.arena.limit_why
                ),
            )
        } else {
            (
                1,
                format!(
                    "two staging buffers of {per} bytes exceed the {limit}-byte budget ({}): one buffer, two barriers per K step",
                    self.arena.limit_why
                ),
            )
        };
        for l in loads {
            self.decisions
                .insert(l.load, (Decision::Ahead { stages }, why.clone()));
        }
    }

    /// The buffers of the ring the operand loads of the `tl.dot` at `dot` go through
    /// ([`Decision::Ahead`] on both), if they are issued ahead.
    pub fn dot_stages(&self, k: &Kernel, dot: OpId) -> Option<usize> {
        let Some(Op::Dot { a, b, .. }) = k.ops.get(dot.index()).map(|o| &o.op) else {
            return None;
        };
        let sa = self.ahead(k.def_op(*a)?)?;
        (self.ahead(k.def_op(*b)?)? == sa).then_some(sa)
    }

    /// The `for` loop holding load `op` and the loads it can issue ahead.
    fn ahead_loop_of(
        &self,
        k: &Kernel,
        op: OpId,
    ) -> Option<(OpId, Vec<super::pipeline::AheadLoad>)> {
        let region = k.ops.get(op.index())?.parent;
        let for_op = k.region(region).parent?;
        let loads = if self.printer.matrix.mma_sync() {
            super::pipeline::ring_loads(k, for_op, self.resident(for_op), self.vec)?
        } else {
            super::pipeline::ahead_loads(k, for_op, self.resident(for_op))?
        };
        Some((for_op, loads))
    }

    /// The loads of dot `dot`'s loop this plan issues ahead.
    fn ahead_loop_of_dot(&self, k: &Kernel, dot: OpId) -> Option<Vec<super::pipeline::AheadLoad>> {
        let (_, loads) = self.ahead_loop_of(k, dot)?;
        Some(
            loads
                .into_iter()
                .filter(|l| self.ahead(l.load).is_some())
                .collect(),
        )
    }

    /// The carried slots of the `for` at `op` held in matrix fragments.
    pub fn resident(&self, op: OpId) -> &[usize] {
        match self.get(op) {
            Some(Decision::Resident(s)) => s,
            _ => &[],
        }
    }

    /// Computes every threadgroup buffer the printed code of `k` goes through under this
    /// plan and `opts` ([`super::buffers::requests`]) and places them in the arena.
    /// The barriers between ops follow ([`super::barriers::required`]); barriers the plan
    /// already lists stay. `rows` decisions whose reductions no longer leave fragments
    /// ([`super::rows::candidates`]) are dropped first.
    pub fn place_arena(&mut self, k: &Kernel, opts: &LaunchOptions) {
        // Row vectors stay in fragment rows only while their fragments do: an override
        // that took a region or a resident accumulator away also ends its `rows` lines.
        if !self.rows.is_empty() {
            let candidates = super::rows::candidates(k, self);
            self.rows
                .retain(|r, _| candidates.iter().any(|c| c.reduces.contains(r)));
        }
        let reqs = super::buffers::requests(k, self, opts);
        self.place_buffers(k, &reqs);
        for (at, why) in super::barriers::required(k, &self.arena) {
            self.barriers.entry(at).or_insert(why);
        }
    }

    /// The reason for the barrier at `(op, when)`, if the plan has one there.
    pub fn barrier(&self, op: OpId, when: When) -> Option<&str> {
        self.barriers.get(&(op, when)).map(String::as_str)
    }

    /// Every barrier between ops: where it is and why.
    pub fn barriers(&self) -> impl Iterator<Item = (OpId, When, &str)> {
        self.barriers
            .iter()
            .map(|(&(o, w), why)| (o, w, why.as_str()))
    }

    /// Adds a barrier at `(op, when)` (one more than needed is allowed; [`Self::verify`]
    /// refuses a plan that lacks a needed one).
    pub fn set_barrier(&mut self, op: OpId, when: When, why: impl Into<String>) {
        self.barriers.insert((op, when), why.into());
    }

    /// The conservative override: a barrier before every op's first threadgroup write and
    /// after every loop whose accumulators leave fragments, needed or not (places the
    /// buffers first when the plan lists none).
    pub fn set_barrier_everywhere(&mut self, k: &Kernel, opts: &LaunchOptions) {
        if self.arena.buffers.is_empty() {
            self.place_arena(k, opts);
        }
        let at: Vec<(OpId, When)> = self
            .arena
            .buffers
            .iter()
            .map(|b| {
                let after = b.role == Role::AccOut && matches!(k.op(b.op).op, Op::For { .. });
                (b.op, if after { When::After } else { When::Before })
            })
            .collect();
        for a in at {
            self.barriers
                .entry(a)
                .or_insert_with(|| "override: every threadgroup use waits".to_string());
        }
    }

    /// Places the threadgroup buffers of `reqs` in the arena ([`Arena::place`]) and names the
    /// values each converts: for a `for` keeping accumulators in fragments, its resident
    /// carried values (in: their initial values; out: the loop's results) and the operand
    /// loads its ring stages.
    pub fn place_buffers(&mut self, k: &Kernel, reqs: &[Request]) {
        self.arena.place(k, reqs);
        let mut bufs = std::mem::take(&mut self.arena.buffers);
        for b in &mut bufs {
            let data = k.op(b.op);
            if let Op::For { init, .. } = &data.op {
                let slots = self.resident(b.op);
                b.values = match b.role {
                    Role::AccIn => slots.iter().filter_map(|&s| init.get(s).copied()).collect(),
                    Role::AccOut => slots.iter().filter_map(|&s| data.results.get(s)).collect(),
                    Role::Ring => super::pipeline::ahead_loads(k, b.op, slots)
                        .unwrap_or_default()
                        .iter()
                        .filter_map(|l| k.op(l.load).result())
                        .collect(),
                    Role::Hoisted => (0..k.ops.len() as u32)
                        .map(OpId)
                        .filter(|&d| self.hoists(d) && self.hoistable(k, d) == Some(b.op))
                        .filter_map(|d| match k.op(d).op {
                            Op::Dot { a, .. } => Some(a),
                            _ => None,
                        })
                        .collect(),
                    _ => Vec::new(),
                };
            }
        }
        self.arena.buffers = bufs;
    }

    /// The K slice the tiled dot at `op` stages A and B in (all of K when the plan has none).
    pub fn k_slice(&self, op: OpId) -> Option<usize> {
        self.k_slices.get(&op).map(|x| x.0)
    }

    /// Sets the K slice of the tiled dot at `op` ([`Self::verify`] tells whether it divides
    /// K); the arena's buffers are dropped, to be placed again
    /// ([`Self::place_arena`]).
    pub fn set_k_slice(&mut self, op: OpId, kc: usize, why: impl Into<String>) {
        self.k_slices.insert(op, (kc, why.into()));
        self.arena.buffers.clear();
        self.barriers.clear();
    }

    /// Rows per band of the `[m, n]` accumulator `op` moves between fragments and the
    /// blocked layout (all of them when the plan has none).
    pub fn band_rows(&self, op: OpId, m: usize, n: usize) -> Option<usize> {
        self.bands.get(&(op, m, n)).map(|x| x.0)
    }

    /// Sets the rows per band of the `[m, n]` accumulator `op` converts; the arena's
    /// buffers are dropped, to be placed again ([`Self::place_arena`]).
    pub fn set_band_rows(
        &mut self,
        op: OpId,
        (m, n): (usize, usize),
        rows: usize,
        why: impl Into<String>,
    ) {
        self.bands.insert((op, m, n), (rows, why.into()));
        self.arena.buffers.clear();
        self.barriers.clear();
    }

    /// The K slices and accumulator bands of the tiled dots, and of the loops keeping their
    /// accumulators in fragments. A and B take the budget whole when they fit, else K goes
    /// in the largest power-of-two slices (at least 8) that do; an accumulator band may use
    /// the bytes of the largest operand staging (never live at the same time) or
    /// [`BAND_BYTES`], whichever is more.
    fn plan_tiling(&mut self, k: &Kernel) {
        let limit = self.arena.limit;
        let mut tiled = Vec::new();
        let mut cap = 0;
        for (i, o) in k.ops.iter().enumerate() {
            let id = OpId(i as u32);
            let Op::Dot { a, b, .. } = o.op else { continue };
            let l = self.dot(id);
            let Some((m, n, kk)) = dims(k, a, b) else {
                continue;
            };
            let din = k.ty(a).dtype;
            match l {
                DotLowering::Simdgroup { stage } => {
                    let stages = self.dot_stages(k, id).unwrap_or(1).max(1);
                    let mut kc = kk;
                    while stages == 1 && kc > 8 && staging_bytes(m, n, kc, l, din) > limit {
                        kc /= 2;
                    }
                    let room = limit / stages;
                    let elems = simdgroup_stage_elems((m, n, kc), stage, room);
                    let bytes = stages * elems * stage.size_bytes();
                    let pad = if simdgroup_pitches((m, n, kc), stage, room) == (kc, n) {
                        "rows unpadded: padded ones would not fit"
                    } else {
                        "rows padded against bank conflicts"
                    };
                    let st = stage.short_name();
                    let why = if stages > 1 {
                        format!("A and B as {st} in {stages} buffers ({pad}) take {bytes} of {limit} bytes: all of K")
                    } else if kc == kk {
                        format!("A and B as {st} ({pad}) take {bytes} of {limit} bytes: all of K")
                    } else {
                        format!(
                            "A and B as {st} for all of K exceed {limit} bytes: slices of {kc} ({pad}) take {bytes}"
                        )
                    };
                    self.k_slices.insert(id, (kc, why));
                    cap = cap.max(bytes);
                }
                DotLowering::Mma(_) => cap = cap.max(staging_bytes(m, n, kk, l, din)),
                _ => continue,
            }
            tiled.push((id, m, n, l));
        }
        let (mut loops, mut in_loops) = (Vec::new(), Vec::new());
        for (i, o) in k.ops.iter().enumerate() {
            let Op::For { body, .. } = o.op else { continue };
            let id = OpId(i as u32);
            let region = k.region(body);
            let Some(Op::Yield { values }) = region.ops.last().map(|&l| &k.op(l).op) else {
                continue;
            };
            for &s in self.resident(id) {
                let def = values.get(s).and_then(|&y| k.def_op(y));
                if let Some(&(d, m, n, l)) = def.and_then(|d| tiled.iter().find(|t| t.0 == d)) {
                    loops.push((id, m, n, l));
                    in_loops.push(d);
                }
            }
        }
        for (id, m, n, l) in tiled.into_iter().chain(loops) {
            let (rows, mut why) = band_rows(m, n, l, cap, limit);
            if in_loops.contains(&id) {
                // Kept for plans that take the accumulator out of the loop's fragments.
                why = format!("if the loop does not keep it in fragments: {why}");
            }
            self.bands.insert((id, m, n), (rows, why));
        }
    }

    /// Keeps in their fragments the results of `mma.sync` dots that have a
    /// [`super::fragments::region`], giving each such dot and the dots taking its values as
    /// `a` one warp along N (whole rows per warp).
    fn plan_fragments(&mut self, k: &Kernel) {
        let warps = (self.printer.threads / 32).max(1);
        for i in 0..k.ops.len() {
            let id = OpId(i as u32);
            if !matches!(self.dot(id), DotLowering::Mma(_)) {
                continue;
            }
            let Some(r) = super::fragments::region(k, id) else {
                continue;
            };
            let rows = |n: usize| WarpGrid {
                wm: warps,
                wn: 1,
                fm: r.m / 16 / warps,
                fn_: n / 8,
            };
            let consumers: Option<Vec<(OpId, usize)>> = r
                .a_of
                .iter()
                .map(|&c| {
                    let n = k.op(c).result().map(|v| k.ty(v).shape[1])?;
                    (matches!(self.dot(c), DotLowering::Mma(_)) && n % 8 == 0).then_some((c, n))
                })
                .collect();
            let Some(consumers) = consumers else { continue };
            if r.m % (16 * warps) != 0 || r.n % 16 != 0 {
                continue;
            }
            for &(c, n) in &consumers {
                self.set(
                    c,
                    Decision::Dot(DotLowering::Mma(rows(n))),
                    format!("sm80+ mma.sync; whole rows per warp: `a` from the registers of {id}'s fragments"),
                );
            }
            self.set(
                id,
                Decision::Dot(DotLowering::Mma(rows(r.n))),
                "sm80+ mma.sync; whole rows per warp, so the result stays in its fragments",
            );
            for &red in &r.reduces {
                if let Some(Decision::Reduce(l)) = self.get(red).cloned() {
                    self.set(
                        red,
                        Decision::Reduce(l),
                        format!("rows of {id}'s fragments: shuffles within a warp ({} applies only if they leave)", l.name()),
                    );
                }
            }
            self.fragments.insert(
                id,
                format!(
                    "{} elementwise op(s), {} row reduction(s) and {} dot(s) read it there",
                    r.ops.len(),
                    r.reduces.len(),
                    r.a_of.len()
                ),
            );
        }
    }

    /// Keeps in their fragments the results of `for` loops whose accumulator stays in
    /// `mma.sync` fragments through the loop and is only computed on elementwise and
    /// stored after it ([`super::fragments::loop_region`]): each element is stored from its
    /// register, so the accumulator never goes through shared memory.
    fn plan_loop_fragments(&mut self, k: &Kernel) {
        for i in 0..k.ops.len() {
            let id = OpId(i as u32);
            let regions = self.loop_regions(k, id);
            if !regions.is_empty() {
                let stores: usize = regions.iter().map(|r| r.stores.len()).sum();
                self.fragments.insert(
                    id,
                    format!(
                        "the loop's accumulator is stored from its fragments ({stores} store(s))"
                    ),
                );
            }
        }
    }

    /// The regions of the resident slots of `for` loop `op` that have one
    /// ([`super::fragments::loop_region`]).
    fn loop_regions(&self, k: &Kernel, op: OpId) -> Vec<super::fragments::Region> {
        let Some(Op::For { body, .. }) = k.ops.get(op.index()).map(|o| &o.op) else {
            return Vec::new();
        };
        self.resident(op)
            .iter()
            .filter_map(|&slot| {
                let c = resident_chain(k, *body, slot, self.printer.matrix)?;
                if !matches!(self.dot(c.dot), DotLowering::Mma(_)) {
                    return None;
                }
                super::fragments::loop_region(k, op, slot, c.dot)
            })
            .collect()
    }

    /// The `for` loop whose body holds dot `op` when its operand A is defined outside that
    /// loop, is a staged block (not in fragments, not copied ahead) and the dot is the
    /// body's only such one: the operand can be staged once before the loop.
    pub fn hoistable(&self, k: &Kernel, op: OpId) -> Option<OpId> {
        let Op::Dot { a, .. } = k.op(op).op else {
            return None;
        };
        if !matches!(self.dot(op), DotLowering::Mma(_)) || !k.ty(a).is_block() {
            return None;
        }
        let body = k.op(op).parent;
        let f = k.region(body).parent?;
        if !matches!(k.op(f).op, Op::For { .. }) {
            return None;
        }
        // Defined before the loop in an enclosing region: its value is the same on every
        // iteration.
        let outside = match k.def_op(a) {
            Some(d) => super::pipeline::is_outside(k, k.op(d).parent, body),
            None => matches!(k.values[a.index()].def, crate::ir::ValueDef::Param(_)),
        };
        let from_regs = self
            .fragment_regions(k)
            .iter()
            .any(|r| r.a_of.contains(&op));
        let others = k
            .region(body)
            .ops
            .iter()
            .filter(|&&o| o != op && self.hoists.contains_key(&o));
        (outside && !from_regs && others.count() == 0).then_some(f)
    }

    /// Stages once, before their loop, the loop-invariant A operands of `mma.sync` dots in
    /// `for` bodies (one per loop).
    fn plan_hoists(&mut self, k: &Kernel) {
        for i in 0..k.ops.len() {
            let id = OpId(i as u32);
            if let Some(f) = self.hoistable(k, id) {
                self.hoists.insert(
                    id,
                    format!("`a` does not change in the loop of {f}: staged once before it"),
                );
            }
        }
    }

    /// Whether dot `op`'s operand A is staged once before its loop.
    pub fn hoists(&self, op: OpId) -> bool {
        self.hoists.contains_key(&op)
    }

    /// Stages (or not) dot `op`'s loop-invariant operand A once before its loop;
    /// [`Self::verify`] checks the kernel allows it.
    pub fn set_hoist(&mut self, op: OpId, on: bool, why: impl Into<String>) {
        if on {
            self.hoists.insert(op, why.into());
        } else {
            self.hoists.remove(&op);
        }
        self.arena.buffers.clear();
        self.barriers.clear();
    }

    /// Whether dot `op` is spelled as `wgmma.mma_async` (sm_90a warpgroup MMAs).
    pub fn wgmma(&self, op: OpId) -> bool {
        self.wgmma.contains_key(&op)
    }

    /// Spells (or not) dot `op` as `wgmma.mma_async`; [`Self::verify`] checks that the
    /// printer has the unit, the dot's shape and warp grid, and that both operands come
    /// from the loop's ring. Turning it on does not change the dot's warp grid: set it to
    /// the one [`Self::wgmma_fit`] names.
    pub fn set_wgmma(&mut self, op: OpId, on: bool, why: impl Into<String>) {
        if on {
            self.wgmma.insert(op, why.into());
        } else {
            self.wgmma.remove(&op);
        }
        self.arena.buffers.clear();
        self.barriers.clear();
    }

    /// Whether dot `dot`, with operand loads `loads` issued ahead, can be spelled as
    /// `wgmma.mma_async`: the warp grid it then takes and why, or why not. Each
    /// warpgroup of 4 warps issues `m64nNk16` on 64 rows of the accumulator at a time,
    /// warp `w` of the group holding 16 of them in the `mma.sync` C-fragment order, so the
    /// grid is whole rows per warp: `fm` 16-row tiles per warp, one `m64` MMA per tile.
    /// B must be copied ahead into the loop's ring (along N, or along K: [`Self::kmajor`]).
    /// A is copied ahead too (one tile per warp, as the ring holds its rows in order),
    /// staged once before the loop ([`Self::hoistable`]: its rows are then staged in the
    /// order the MMAs read them), or held in the fragments of an earlier dot on the same
    /// grid (`wgmma`'s register operand A).
    pub fn wgmma_fit(
        &self,
        k: &Kernel,
        dot: OpId,
        loads: &[super::pipeline::AheadLoad],
    ) -> std::result::Result<(WarpGrid, String), String> {
        if self.printer.matrix != MatrixUnit::Wgmma {
            return Err(format!(
                "the printer's matrix unit is {}, not wgmma (sm_90a)",
                self.printer.matrix.name()
            ));
        }
        if !matches!(self.dot(dot), DotLowering::Mma(_)) {
            return Err("not an mma.sync dot".into());
        }
        let (m, n, kk) = dot_dims(k, dot).ok_or("not a 2-D dot")?;
        let warps = (self.printer.threads / 32).max(1);
        if warps % 4 != 0 || m % (16 * warps) != 0 || m == 0 {
            return Err(format!(
                "M = {m} on {warps} warps (wgmma needs warps in fours and M a multiple of 16 x warps)"
            ));
        }
        if n % WGMMA_SWIZZLE_COLS != 0 || n > 256 || kk % WGMMA_SWIZZLE_COLS != 0 {
            return Err(format!(
                "N = {n}, K = {kk} (wgmma here needs N a multiple of {WGMMA_SWIZZLE_COLS} up to 256, \
                 K a multiple of {WGMMA_SWIZZLE_COLS})"
            ));
        }
        let fm = m / (16 * warps);
        let grid = WarpGrid {
            wm: warps,
            wn: 1,
            fm,
            fn_: n / 8,
        };
        if !loads.iter().any(|l| l.dot == dot && l.operand == 1) {
            return Err("operand B is not copied ahead into the ring".into());
        }
        let a_ring = loads.iter().any(|l| l.dot == dot && l.operand == 0);
        let a_from = if a_ring {
            if fm != 1 {
                return Err(format!(
                    "A copied ahead with {fm} 16-row tiles per warp (the ring holds A's rows in order: one tile per warp)"
                ));
            }
            "A and B copied ahead into the ring"
        } else if self.a_in_fragments(k, dot, grid) {
            "A from the registers of an earlier dot's fragments, B copied ahead into the ring"
        } else if self.hoistable(k, dot).is_some() {
            "A staged once before the loop, B copied ahead into the ring"
        } else {
            return Err(
                "operand A is neither copied ahead, staged before the loop, nor in fragments"
                    .into(),
            );
        };
        Ok((
            grid,
            format!(
                "sm_90a wgmma m64n{n}k16: {} warpgroup(s), each warp {fm} tile(s) of 16 whole rows; {a_from}",
                warps / 4
            ),
        ))
    }

    /// Whether dot `dot` takes operand A from the fragments of an earlier dot kept on
    /// grid `g` (whole rows per warp).
    fn a_in_fragments(&self, k: &Kernel, dot: OpId, g: WarpGrid) -> bool {
        self.fragment_regions(k).iter().any(|r| {
            r.a_of.contains(&dot)
                && matches!(self.dot(r.dot), DotLowering::Mma(h) if h.wn == 1 && h.wm == g.wm && h.fm == g.fm)
        })
    }

    /// Whether `mma.sync` dot `op` keeps its result in its C fragments.
    pub fn keeps_fragments(&self, op: OpId) -> bool {
        self.fragments.contains_key(&op)
    }

    /// Keeps (or not) dot `op`'s result in its fragments; [`Self::verify`] checks the
    /// kernel and the dots' warp grids allow it.
    pub fn set_fragments(&mut self, op: OpId, keep: bool, why: impl Into<String>) {
        if keep {
            self.fragments.insert(op, why.into());
        } else {
            self.fragments.remove(&op);
        }
        self.arena.buffers.clear();
        self.barriers.clear();
    }

    /// Keeps the row vectors of [`super::rows::candidates`] in the row slices of their
    /// fragments, recording the decision on each component's reductions.
    fn plan_rows(&mut self, k: &Kernel) {
        for c in super::rows::candidates(k, self) {
            let why = format!(
                "{} row vector(s) from {} reduction(s) of fragments stay in their rows ({} per thread)",
                c.values.len(),
                c.reduces.len(),
                c.slots()
            );
            for &r in &c.reduces {
                self.rows.insert(r, why.clone());
            }
        }
    }

    /// Whether the result of row reduction `op` stays in the row slices of its fragments
    /// ([`super::rows`]).
    pub fn rows(&self, op: OpId) -> bool {
        self.rows.contains_key(&op)
    }

    /// Whether the ring holds `mma.sync` dot `op`'s operand B column by column (K
    /// contiguous).
    pub fn kmajor(&self, op: OpId) -> bool {
        self.kmajor.contains_key(&op)
    }

    /// Holds (or not) dot `op`'s operand B in the ring column by column; [`Self::verify`]
    /// checks that B is a load of the ring the body recomputes.
    pub fn set_kmajor(&mut self, op: OpId, on: bool, why: impl Into<String>) {
        if on {
            self.kmajor.insert(op, why.into());
        } else {
            self.kmajor.remove(&op);
        }
        self.arena.buffers.clear();
        self.barriers.clear();
    }

    /// Keeps (or not) reduction `op`'s result in row slices; a component stays there only
    /// while every one of its reductions does ([`super::rows::kept`]).
    pub fn set_rows(&mut self, op: OpId, keep: bool, why: impl Into<String>) {
        if keep {
            self.rows.insert(op, why.into());
        } else {
            self.rows.remove(&op);
        }
        self.arena.buffers.clear();
        self.barriers.clear();
    }

    /// The region of every dot keeping its result in fragments.
    pub fn fragment_regions(&self, k: &Kernel) -> Vec<super::fragments::Region> {
        self.fragments
            .keys()
            .flat_map(|&d| match k.ops.get(d.index()).map(|o| &o.op) {
                Some(Op::For { .. }) => self.loop_regions(k, d),
                _ => super::fragments::region(k, d).into_iter().collect(),
            })
            .collect()
    }

    /// Carried slots of a `for` body that can stay in the fragments of a dot in the body
    /// this plan puts on tiles ([`resident_chain`]), whose result is only yielded back.
    fn resident_candidates(&self, k: &Kernel, body: RegionId) -> Vec<usize> {
        let uses = use_counts(k);
        let region = k.region(body);
        let yields = match region.ops.last().map(|&l| &k.op(l).op) {
            Some(Op::Yield { values }) => values.clone(),
            _ => return Vec::new(),
        };
        (0..region.args.len().saturating_sub(1))
            .filter(|&s| {
                let Some(c) = resident_chain(k, body, s, self.printer.matrix) else {
                    return false;
                };
                let Some(&y) = yields.get(s) else {
                    return false;
                };
                k.def_op(y) == Some(c.dot)
                    && uses[y.index()] == 1
                    && matches!(
                        self.dot(c.dot),
                        DotLowering::Simdgroup { .. } | DotLowering::Mma(_)
                    )
            })
            .collect()
    }

    /// Whether dot `op` accumulates into a value a loop keeps in fragments (a resident
    /// slot, or its rescale): its accumulator is not staged.
    pub fn accumulates_in_fragments(&self, k: &Kernel, op: OpId) -> bool {
        let body = k.op(op).parent;
        let Some(f) = k.region(body).parent else {
            return false;
        };
        matches!(k.op(f).op, Op::For { .. })
            && self.resident(f).iter().any(|&s| {
                resident_chain(k, body, s, self.printer.matrix).is_some_and(|c| c.dot == op)
            })
    }

    /// Checks every decision against `kernel`: the op exists and is of the decision's
    /// kind, and the kernel and printer admit the choice.
    pub fn verify(&self, kernel: &Kernel) -> Result<()> {
        let bad = |op: OpId, msg: String| {
            let at = kernel
                .ops
                .get(op.index())
                .map(|o| format!(" (`{}` at {})", o.op.name(), o.loc))
                .unwrap_or_default();
            Err(Error::InvalidArgument(format!(
                "layout plan of `{}`: {op}{at}: {msg}",
                self.kernel
            )))
        };
        if !self.vec.is_power_of_two() || self.vec > 8 {
            return Err(Error::InvalidArgument(format!(
                "layout plan of `{}`: chunks of {} elements (a power of two up to 8)",
                self.kernel, self.vec
            )));
        }
        let warps = (self.printer.threads / 32).max(1);
        // Dots first: whether an accumulator may stay in fragments depends on its dot.
        let mut order: Vec<_> = self.decisions.iter().collect();
        order.sort_by_key(|(_, (d, _))| match d {
            Decision::Resident(_) => 1,
            Decision::Ahead { .. } => 2,
            _ => 0,
        });
        for (&op, (d, _)) in order {
            let Some(o) = kernel.ops.get(op.index()) else {
                return bad(op, "no such op".into());
            };
            match (d, &o.op) {
                (Decision::Dot(l), Op::Dot { a, b, acc }) => {
                    let ok = match l {
                        DotLowering::Fma => Ok(()),
                        DotLowering::Rows if self.printer.threads == 1 => Ok(()),
                        DotLowering::Rows => Err("rows of C need a one-thread program".into()),
                        _ => tiles(kernel, self.printer.matrix, warps, (*a, *b, *acc)).and_then(
                            |(t, _)| match (t, *l) {
                                (
                                    DotLowering::Simdgroup { .. },
                                    DotLowering::Simdgroup { stage },
                                ) if matches!(stage, DType::F32)
                                    || kernel.ty(*a).dtype == stage
                                        && kernel.ty(*b).dtype == stage =>
                                {
                                    Ok(())
                                }
                                (t, l) if t == l => Ok(()),
                                // Any grid of whole tiles on the program's warps.
                                (DotLowering::Mma(t), DotLowering::Mma(g))
                                    if g.wm * g.fm == t.wm * t.fm
                                        && g.wn * g.fn_ == t.wn * t.fn_
                                        && g.wm * g.wn <= warps
                                        && g.fm * g.fn_ > 0 =>
                                {
                                    Ok(())
                                }
                                (t, l) => Err(format!("{l:?} where the tiles admit {t:?}")),
                            },
                        ),
                    };
                    if let Err(e) = ok {
                        return bad(op, format!("dot as {l:?}: {e}"));
                    }
                }
                (Decision::Reduce(r), Op::Reduce { srcs, .. }) => {
                    let dt = kernel.ty(srcs[0]).dtype;
                    if *r == ReductionLayout::Coalesced && !shuffles(dt) {
                        return bad(op, format!("COALESCED on {dt}, which has no SIMD shuffles"));
                    }
                }
                (Decision::Scan(s), Op::Scan { .. }) => {
                    if *s == ScanStrategy::Collective {
                        let threads = self.printer.threads.max(1);
                        if let Some(why) = scan_not_collective(kernel, &o.op, self.vec, threads) {
                            return bad(op, format!("scan collective on {why}; use serial"));
                        }
                    }
                }
                (Decision::Resident(slots), Op::For { body, .. }) => {
                    let ok = self.resident_candidates(kernel, *body);
                    if let Some(s) = slots.iter().find(|s| !ok.contains(s)) {
                        return bad(op, format!("carried slot {s} cannot stay in fragments"));
                    }
                }
                (Decision::Ahead { stages }, Op::Load { .. }) => {
                    let dot_ok = match self.printer.matrix {
                        MatrixUnit::MmaM16N8K16 | MatrixUnit::Wgmma if *stages < 2 => {
                            return bad(op, format!("a ring of {stages} buffer(s) (at least 2)"));
                        }
                        MatrixUnit::Simdgroup8x8 if !(1..=2).contains(stages) => {
                            return bad(
                                op,
                                format!("{stages} staging buffers (simdgroup_matrix takes 1 or 2)"),
                            );
                        }
                        MatrixUnit::MmaM16N8K16 | MatrixUnit::Wgmma => |d: Option<&Decision>| {
                            matches!(d, Some(Decision::Dot(DotLowering::Mma(_))))
                        },
                        MatrixUnit::Simdgroup8x8 => |d: Option<&Decision>| {
                            matches!(d, Some(Decision::Dot(DotLowering::Simdgroup { .. })))
                        },
                        MatrixUnit::None => {
                            return bad(op, "loads are issued ahead only for matrix units".into());
                        }
                    };
                    let ok = self
                        .ahead_loop_of(kernel, op)
                        .is_some_and(|(for_op, loads)| {
                            let slots = self.resident(for_op);
                            !slots.is_empty()
                                && loads.iter().all(|l| {
                                    self.ahead(l.load) == Some(*stages) && dot_ok(self.get(l.dot))
                                })
                                && loads.iter().any(|l| l.load == op)
                        });
                    if !ok {
                        return bad(
                            op,
                            "not a dot operand load that its loop can issue ahead (each operand load of the loop's dots, one ring size)".into(),
                        );
                    }
                }
                (d, op_) => return bad(op, format!("{d:?} on a `{}`", op_.name())),
            }
        }
        for (&op, &(kc, _)) in &self.k_slices {
            let kk = match kernel.ops.get(op.index()).map(|o| &o.op) {
                Some(Op::Dot { a, b, .. }) => dims(kernel, *a, *b).map(|d| d.2),
                _ => None,
            };
            if self.dot_stages(kernel, op).is_some_and(|s| s > 1) && kk != Some(kc) {
                return bad(
                    op,
                    format!("K slice {kc} of a dot whose operands are staged ahead (all of K)"),
                );
            }
            match kk {
                Some(kk) if kc >= 8 && kc.is_power_of_two() && kk % kc == 0 => {}
                Some(kk) => {
                    return bad(
                        op,
                        format!("K slice {kc} (a power of two from 8 dividing K = {kk})"),
                    )
                }
                None => return bad(op, "a K slice on an op that is not a 2-D dot".into()),
            }
        }
        for &op in self.hoists.keys() {
            if kernel.ops.get(op.index()).is_none() || self.hoistable(kernel, op).is_none() {
                return bad(
                    op,
                    "its operand A cannot be staged once before a loop (not a tiled dot of a \
                     for body with A defined before the loop, one per loop)"
                        .into(),
                );
            }
        }
        for &op in self.wgmma.keys() {
            let fit = kernel
                .ops
                .get(op.index())
                .ok_or_else(|| "no such op".to_string())
                .and_then(|_| {
                    let loads = self
                        .ahead_loop_of_dot(kernel, op)
                        .ok_or("its operands are not copied ahead into a ring")?;
                    self.wgmma_fit(kernel, op, &loads)
                });
            let a_ring = self
                .ahead_loop_of_dot(kernel, op)
                .is_some_and(|loads| loads.iter().any(|l| l.dot == op && l.operand == 0));
            match fit {
                Ok((g, _))
                    if !a_ring && !self.hoists(op) && !self.a_in_fragments(kernel, op, g) =>
                {
                    return bad(
                        op,
                        "wgmma whose operand A is neither copied ahead, staged before the loop (hoist), nor in fragments".into(),
                    )
                }
                Ok((g, _)) if self.dot(op) == DotLowering::Mma(g) => {}
                Ok((g, _)) => {
                    return bad(
                        op,
                        format!("wgmma with {:?} (it takes {g:?})", self.dot(op)),
                    )
                }
                Err(e) => return bad(op, format!("wgmma: {e}")),
            }
        }
        for &op in self.fragments.keys() {
            if matches!(
                kernel.ops.get(op.index()).map(|o| &o.op),
                Some(Op::For { .. })
            ) {
                if self.loop_regions(kernel, op).is_empty() {
                    return bad(
                        op,
                        "no resident accumulator of the loop is only stored after it".into(),
                    );
                }
                continue;
            }
            let Some(r) = kernel
                .ops
                .get(op.index())
                .and_then(|_| super::fragments::region(kernel, op))
            else {
                return bad(op, "its result cannot stay in fragments (no region)".into());
            };
            let DotLowering::Mma(g) = self.dot(op) else {
                return bad(op, "fragments kept by a dot not on mma.sync".into());
            };
            if g.wn != 1 {
                return bad(
                    op,
                    format!(
                        "fragments kept with {} warps along N (whole rows per warp needed)",
                        g.wn
                    ),
                );
            }
            for &c in &r.a_of {
                match self.dot(c) {
                    DotLowering::Mma(h) if h.wn == 1 && h.wm == g.wm && h.fm == g.fm => {}
                    _ => {
                        return bad(
                            c,
                            format!("takes `a` from {op}'s fragments on another warp grid"),
                        )
                    }
                }
            }
        }
        for &op in self.kmajor.keys() {
            let b_ring = self.ahead_loop_of_dot(kernel, op).is_some_and(|loads| {
                loads
                    .iter()
                    .any(|l| l.dot == op && l.operand == 1 && l.carried.is_none())
            });
            if !b_ring || !matches!(self.dot(op), DotLowering::Mma(_)) {
                return bad(
                    op,
                    "kmajor on a dot whose B is not a recomputed load of its loop's ring on mma.sync or wgmma".into(),
                );
            }
        }
        if !self.rows.is_empty() {
            let candidates = super::rows::candidates(kernel, self);
            for &op in self.rows.keys() {
                if !candidates.iter().any(|c| c.reduces.contains(&op)) {
                    return bad(
                        op,
                        "rows kept by a reduction that is not a row reduction of fragments whose row vectors can stay in their rows".into(),
                    );
                }
            }
        }
        for (&(op, m, _), &(rows, _)) in &self.bands {
            if op.index() >= kernel.ops.len() || rows == 0 || m % rows != 0 {
                return bad(op, format!("bands of {rows} rows of {m}"));
            }
        }
        if let Some(cpu) = &self.cpu {
            cpu.verify(kernel, self.printer.threads, &self.kernel)?;
            for (i, o) in kernel.ops.iter().enumerate() {
                let op = OpId(i as u32);
                if matches!(o.op, Op::For { .. })
                    && !cpu.peeled(op).is_empty()
                    && !self.resident(op).is_empty()
                {
                    return bad(op, "peeled while its accumulators stay in fragments".into());
                }
            }
        }
        self.arena.verify(kernel, &self.kernel)?;
        for &(op, when) in self.barriers.keys() {
            if op.index() >= kernel.ops.len() {
                return bad(op, format!("a barrier {when} an op the kernel lacks"));
            }
        }
        for ((op, when), why) in super::barriers::required(kernel, &self.arena) {
            if !self.barriers.contains_key(&(op, when)) {
                return bad(
                    op,
                    format!("no barrier {when} it, where one is needed: {why}"),
                );
            }
        }
        Ok(())
    }

    /// Parses the text form written by `Display`.
    pub fn parse(text: &str) -> Result<KernelPlan> {
        let err =
            |l: &str, what: &str| Error::InvalidArgument(format!("layout plan: {what} in `{l}`"));
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let head = lines.next().ok_or_else(|| err("", "empty text"))?;
        let h: Vec<&str> = head.split_whitespace().collect();
        let (kernel, threads, matrix, widest, shared) = match h.as_slice() {
            ["plan", name, t, m, w, ss] => (
                name.strip_prefix('@')
                    .ok_or_else(|| err(head, "kernel name"))?,
                t.strip_prefix("threads=")
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| err(head, "threads"))?,
                m.strip_prefix("matrix=")
                    .and_then(MatrixUnit::parse)
                    .ok_or_else(|| err(head, "matrix unit"))?,
                w.strip_prefix("widest_vector=")
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| err(head, "widest vector"))?,
                match ss.strip_prefix("static_shared=") {
                    Some("none") => None,
                    Some(v) => Some(v.parse().map_err(|_| err(head, "static shared"))?),
                    None => return Err(err(head, "static shared")),
                },
            ),
            _ => return Err(err(head, "header")),
        };
        let vline = lines
            .next()
            .ok_or_else(|| err(head, "no chunk width line"))?;
        let (vec, vec_why) = vline
            .trim()
            .strip_prefix("kernel vec=")
            .and_then(|r| r.split_once(" ; "))
            .and_then(|(v, w)| Some((v.parse().ok()?, w.to_string())))
            .ok_or_else(|| err(vline, "chunk width"))?;
        let mut p = KernelPlan {
            kernel: kernel.to_string(),
            printer: Printer {
                threads,
                matrix,
                widest_vector: widest,
                static_shared: shared,
            },
            vec,
            vec_why,
            decisions: BTreeMap::new(),
            k_slices: BTreeMap::new(),
            fragments: BTreeMap::new(),
            hoists: BTreeMap::new(),
            wgmma: BTreeMap::new(),
            rows: BTreeMap::new(),
            kmajor: BTreeMap::new(),
            bands: BTreeMap::new(),
            arena: Arena::new(0, String::new()),
            cpu: None,
            barriers: BTreeMap::new(),
        };
        for l in lines {
            match l.split_whitespace().next() {
                Some("arena") => {
                    p.arena = parse_arena(l).ok_or_else(|| err(l, "arena"))?;
                    continue;
                }
                Some("buf") => {
                    let b = parse_buffer(l).ok_or_else(|| err(l, "buffer"))?;
                    p.arena.buffers.push(b);
                    continue;
                }
                Some("convert") => {
                    parse_convert(l, &mut p.arena.buffers).ok_or_else(|| err(l, "conversion"))?;
                    continue;
                }
                Some("cpu") => {
                    p.cpu
                        .get_or_insert_with(CpuPlan::empty)
                        .parse_line(l)
                        .ok_or_else(|| err(l, "CPU decision"))?;
                    continue;
                }
                Some("barrier") => {
                    let (body, why) = l.split_once(" ; ").ok_or_else(|| err(l, "reason"))?;
                    let w: Vec<&str> = body.split_whitespace().collect();
                    let at = match w.as_slice() {
                        ["barrier", op, when] => op
                            .strip_prefix("op")
                            .and_then(|o| o.parse().ok())
                            .map(OpId)
                            .zip(When::parse(when)),
                        _ => None,
                    };
                    let at = at.ok_or_else(|| err(l, "barrier"))?;
                    p.barriers.insert(at, why.to_string());
                    continue;
                }
                _ => {}
            }
            let (body, why) = l.split_once(" ; ").ok_or_else(|| err(l, "reason"))?;
            let w: Vec<&str> = body.split_whitespace().collect();
            let op = w
                .first()
                .and_then(|o| o.strip_prefix("op"))
                .and_then(|o| o.parse().ok())
                .map(OpId)
                .ok_or_else(|| err(l, "op id"))?;
            let num = |s: &str, key: &str| -> Result<usize> {
                s.strip_prefix(key)
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| err(l, key))
            };
            let d = match &w[1..] {
                ["fragments"] => {
                    p.fragments.insert(op, why.to_string());
                    continue;
                }
                ["hoist"] => {
                    p.hoists.insert(op, why.to_string());
                    continue;
                }
                ["wgmma"] => {
                    p.wgmma.insert(op, why.to_string());
                    continue;
                }
                ["rows"] => {
                    p.rows.insert(op, why.to_string());
                    continue;
                }
                ["kmajor"] => {
                    p.kmajor.insert(op, why.to_string());
                    continue;
                }
                [kc] if kc.starts_with("kslice=") => {
                    p.k_slices
                        .insert(op, (num(kc, "kslice=")?, why.to_string()));
                    continue;
                }
                ["band", mn, rows] => {
                    let (m, n) = mn
                        .split_once('x')
                        .and_then(|(m, n)| Some((m.parse().ok()?, n.parse().ok()?)))
                        .ok_or_else(|| err(l, "band shape"))?;
                    p.bands
                        .insert((op, m, n), (num(rows, "rows=")?, why.to_string()));
                    continue;
                }
                ["dot", "simdgroup", s] => Decision::Dot(DotLowering::Simdgroup {
                    stage: s
                        .strip_prefix("stage=")
                        .and_then(DType::parse)
                        .ok_or_else(|| err(l, "stage dtype"))?,
                }),
                ["dot", "mma", wm, wn, fm, fnn] => Decision::Dot(DotLowering::Mma(WarpGrid {
                    wm: num(wm, "wm=")?,
                    wn: num(wn, "wn=")?,
                    fm: num(fm, "fm=")?,
                    fn_: num(fnn, "fn=")?,
                })),
                ["dot", "rows"] => Decision::Dot(DotLowering::Rows),
                ["dot", "fma"] => Decision::Dot(DotLowering::Fma),
                ["reduce", r] => Decision::Reduce(
                    ReductionLayout::ALL
                        .into_iter()
                        .find(|x| x.name() == *r)
                        .ok_or_else(|| err(l, "reduction layout"))?,
                ),
                ["scan", st] => {
                    Decision::Scan(ScanStrategy::parse(st).ok_or_else(|| err(l, "scan strategy"))?)
                }
                ["load", "ahead", st] => Decision::Ahead {
                    stages: num(st, "stages=")?,
                },
                ["for", slots] => Decision::Resident(
                    slots
                        .strip_prefix("resident=")
                        .ok_or_else(|| err(l, "resident slots"))?
                        .split(',')
                        .map(|s| s.parse().map_err(|_| err(l, "slot")))
                        .collect::<Result<_>>()?,
                ),
                _ => return Err(err(l, "decision")),
            };
            p.decisions.insert(op, (d, why.to_string()));
        }
        Ok(p)
    }
}

impl fmt::Display for Decision {
    /// The decision as the plan's text form spells it (`dot simdgroup stage=f16`,
    /// `reduce COALESCED`, `scan collective`, `for resident=0`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Dot(DotLowering::Simdgroup { stage }) => {
                write!(f, "dot simdgroup stage={}", stage.short_name())
            }
            Decision::Dot(DotLowering::Mma(g)) => {
                write!(
                    f,
                    "dot mma wm={} wn={} fm={} fn={}",
                    g.wm, g.wn, g.fm, g.fn_
                )
            }
            Decision::Dot(DotLowering::Rows) => write!(f, "dot rows"),
            Decision::Dot(DotLowering::Fma) => write!(f, "dot fma"),
            Decision::Reduce(r) => write!(f, "reduce {}", r.name()),
            Decision::Scan(s) => write!(f, "scan {}", s.name()),
            Decision::Ahead { stages } => write!(f, "load ahead stages={stages}"),
            Decision::Resident(s) => write!(
                f,
                "for resident={}",
                s.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        }
    }
}

impl fmt::Display for KernelPlan {
    /// `plan @name threads=T matrix=U widest_vector=W static_shared=S`, the kernel's chunk
    /// width (`kernel vec=V ; why`), one line per decision (`opN what ; why`), per K slice
    /// (`opN kslice=K ; why`) and per accumulator band (`opN band MxN rows=R ; why`), the
    /// CPU decisions (`cpu ...`, see [`CpuPlan`]), then the arena (`arena ...`), its buffers
    /// (`buf ...`) and the barriers between ops (`barrier opN before|after ; why`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "plan @{} threads={} matrix={} widest_vector={} static_shared={}",
            self.kernel,
            self.printer.threads,
            self.printer.matrix.name(),
            self.printer.widest_vector,
            self.printer
                .static_shared
                .map_or("none".to_string(), |b| b.to_string())
        )?;
        writeln!(f, "  kernel vec={} ; {}", self.vec, self.vec_why)?;
        for (op, (d, why)) in &self.decisions {
            let what = d.to_string();
            writeln!(f, "  {op} {what} ; {}", why.replace('\n', " "))?;
        }
        for (op, (kc, why)) in &self.k_slices {
            writeln!(f, "  {op} kslice={kc} ; {why}")?;
        }
        for (op, why) in &self.fragments {
            writeln!(f, "  {op} fragments ; {why}")?;
        }
        for (op, why) in &self.hoists {
            writeln!(f, "  {op} hoist ; {why}")?;
        }
        for (op, why) in &self.wgmma {
            writeln!(f, "  {op} wgmma ; {why}")?;
        }
        for (op, why) in &self.rows {
            writeln!(f, "  {op} rows ; {why}")?;
        }
        for (op, why) in &self.kmajor {
            writeln!(f, "  {op} kmajor ; {why}")?;
        }
        for ((op, m, n), (rows, why)) in &self.bands {
            writeln!(f, "  {op} band {m}x{n} rows={rows} ; {why}")?;
        }
        if let Some(cpu) = &self.cpu {
            write!(f, "{cpu}")?;
        }
        write!(f, "{}", self.arena)?;
        for ((op, when), why) in &self.barriers {
            writeln!(f, "  barrier {op} {when} ; {why}")?;
        }
        Ok(())
    }
}
