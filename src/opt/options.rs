//! What one compiled variant of a kernel is asked for: warps, the target's profile and the
//! user's layout overrides. The planner ([`super::plan`]) turns these into decisions.

use super::hardware::{Chip, HardwareProfile};
use super::layout::MemoryLayout;

/// SIMD-group width on every target the printers write for.
const SIMD_WIDTH: usize = 32;

/// How a reduction is laid out (see `reduce.rs` for what each prints).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReductionLayout {
    /// Thread-local partials, then one pass over them in threadgroup memory.
    Default,
    /// Staged row-major; each output's owner walks its row.
    RowMajor,
    /// Staged with the reduced axis outermost; each owner walks its column.
    ColumnMajor,
    /// Staged row-major, then a pairwise tree in threadgroup memory.
    Tiled,
    /// Thread, then SIMD-group collectives, then threadgroup memory.
    Coalesced,
}

impl ReductionLayout {
    /// Every variant.
    pub const ALL: [ReductionLayout; 5] = [
        ReductionLayout::Default,
        ReductionLayout::RowMajor,
        ReductionLayout::ColumnMajor,
        ReductionLayout::Tiled,
        ReductionLayout::Coalesced,
    ];

    /// The optimizer's flag name.
    pub fn name(self) -> &'static str {
        match self {
            ReductionLayout::Default => "DEFAULT",
            ReductionLayout::RowMajor => "ROW_MAJOR",
            ReductionLayout::ColumnMajor => "COLUMN_MAJOR",
            ReductionLayout::Tiled => "TILED",
            ReductionLayout::Coalesced => "COALESCED",
        }
    }
}

impl From<MemoryLayout> for ReductionLayout {
    /// The strongest flag wins: COALESCED, then TILED, COLUMN_MAJOR, ROW_MAJOR.
    fn from(l: MemoryLayout) -> ReductionLayout {
        if l.contains(MemoryLayout::COALESCED) {
            ReductionLayout::Coalesced
        } else if l.contains(MemoryLayout::TILED) {
            ReductionLayout::Tiled
        } else if l.contains(MemoryLayout::COLUMN_MAJOR) {
            ReductionLayout::ColumnMajor
        } else if l.contains(MemoryLayout::ROW_MAJOR) {
            ReductionLayout::RowMajor
        } else {
            ReductionLayout::Default
        }
    }
}

/// Options of one compiled variant.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchOptions {
    /// SIMD-groups per program (power of two); threads = `num_warps x 32`.
    pub num_warps: u32,
    /// Forces every reduction of the kernel into one layout; `None` lets the code
    /// generator choose (COALESCED).
    pub reduction_layout: Option<ReductionLayout>,
    /// The device generated code is for (limits, `simdgroup_matrix`, vector width).
    pub target: HardwareProfile,
    /// Triton's `num_stages`: how many shared-memory buffers a `for` loop's `tl.dot`
    /// operand loads may rotate through, issuing each load `num_stages - 1` iterations
    /// ahead where the printer can copy asynchronously (CUDA's `cp.async`); on Metal, 2 or
    /// more gives two threadgroup staging buffers where they fit, the next K step's tiles
    /// loaded while this step's MMAs run. 1 issues every load in its own iteration.
    pub num_stages: u32,
}

impl Default for LaunchOptions {
    /// 4 warps, layouts chosen by the code generator, an M1-class Apple GPU (the most
    /// constrained Metal target: any program valid there is valid on later chips), and
    /// Triton's default of 3 stages.
    fn default() -> Self {
        LaunchOptions {
            num_warps: 4,
            reduction_layout: None,
            target: HardwareProfile::of(Chip::M1),
            num_stages: 3,
        }
    }
}

impl LaunchOptions {
    /// Threads per program.
    pub fn threads(&self) -> usize {
        self.num_warps as usize * SIMD_WIDTH
    }

    /// Elements per chunk of the blocked layout: one 16-byte vector of 32-bit words.
    pub fn vector_elems(&self) -> usize {
        (self.target.vector_bytes as usize / 4)
            .clamp(1, 8)
            .next_power_of_two()
    }

    /// Sets `num_warps`.
    pub fn num_warps(mut self, n: u32) -> Self {
        self.num_warps = n;
        self
    }

    /// Sets `num_stages` (at least 1).
    pub fn num_stages(mut self, n: u32) -> Self {
        self.num_stages = n.max(1);
        self
    }

    /// Sets the device the code is generated for.
    pub fn target(mut self, target: HardwareProfile) -> Self {
        self.target = target;
        self
    }

    /// Forces a reduction layout.
    pub fn reduction_layout(mut self, l: impl Into<ReductionLayout>) -> Self {
        self.reduction_layout = Some(l.into());
        self
    }
}
