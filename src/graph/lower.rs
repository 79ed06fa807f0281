//! What a fused group (or a lone op) runs as: the DSL kernels it launches, with the grid,
//! constexprs and warps each launch uses.
//!
//! The providers of [`super::dsl`] and [`super::dsl_build`] derive a group's launches from
//! its input shapes alone ([`super::FusedKernel::launches`]) and run exactly those
//! launches, so the shapes a report prints ([`GraphRunner::plan_fused`]) are the shapes that
//! run ([`super::KernelChoice::launches`] records them as they are launched).
//!
//! Reductions over long rows run in two stages when [`reduce_split`] says so: the row is
//! cut into chunks, one program per chunk writes a partial result, and a second kernel
//! combines the partials of each row.
//!
//! ```
//! use triton_metal::graph::lower::reduce_split;
//! use triton_metal::opt::HardwareProfile;
//!
//! let m1 = HardwareProfile::named("m1")?;
//! let short = reduce_split(64, 1000, &m1);
//! assert_eq!((short.partials, short.block), (1, 1024));
//! let long = reduce_split(16, 65536, &m1);
//! assert!(long.partials >= 2 && long.chunk % long.block == 0);
//! assert!(long.chunk * long.partials >= 65536 && long.chunk * (long.partials - 1) < 65536);
//! # Ok::<(), triton_metal::Error>(())
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Serialize;

use super::fusion::{FusedGraph, FusedGroup, Node, Pattern, PatternParams};
use super::ops::{OpCategory, OpKind, ReduceOp};
use super::runner::GraphRunner;
use super::spec::{OpNode, TensorType};
use crate::error::Result;
use crate::opt::HardwareProfile;
use crate::tl::JitKernel;

/// Reductions over more elements than this per output run in two stages (see
/// [`reduce_split`]); the seeds' threshold, as [`super::layout`] models it.
pub const TWO_STAGE_THRESHOLD: usize = super::layout::TWO_STAGE_THRESHOLD as usize;

/// Largest column block of the reduction kernels.
pub const REDUCE_BLOCK: usize = 1024;

/// One kernel launch: the DSL kernel and the launch parameters it runs with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KernelLaunch {
    /// The DSL kernel's name.
    pub kernel: String,
    /// What the launch computes within its group (`elementwise`, `rows`, `matmul`,
    /// `epilogue`, `reduce`, `partials`, `final`).
    pub stage: &'static str,
    /// Programs per grid axis.
    pub grid: [usize; 3],
    /// The integer constexprs the kernel is specialised with.
    pub constexprs: BTreeMap<String, i64>,
    /// Warps per program.
    pub num_warps: usize,
}

impl KernelLaunch {
    /// Programs in the grid.
    pub fn programs(&self) -> usize {
        self.grid.iter().product()
    }

    /// `BLOCK=1024 BM=32 ..` for tables.
    pub fn constexprs_text(&self) -> String {
        self.constexprs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// `[4096x2x1]` for tables.
    pub fn grid_text(&self) -> String {
        format!("[{}x{}x{}]", self.grid[0], self.grid[1], self.grid[2])
    }
}

/// A planned launch and the kernel it launches (to specialise and plan, e.g. with
/// `codegen::metal::plan`).
#[derive(Clone)]
pub struct PlannedLaunch {
    /// The launch.
    pub launch: KernelLaunch,
    kernel: KernelRef,
}

#[derive(Clone)]
pub(crate) enum KernelRef {
    Static(&'static JitKernel),
    Shared(Arc<JitKernel>),
}

impl PlannedLaunch {
    pub(crate) fn new(kernel: KernelRef, launch: KernelLaunch) -> PlannedLaunch {
        PlannedLaunch { launch, kernel }
    }

    /// The DSL kernel launched.
    pub fn jit(&self) -> &JitKernel {
        match &self.kernel {
            KernelRef::Static(k) => k,
            KernelRef::Shared(k) => k,
        }
    }

    /// The constexprs as `JitKernel::specialize_with` takes them.
    pub fn constexpr_pairs(&self) -> Vec<(&str, i64)> {
        self.launch
            .constexprs
            .iter()
            .map(|(k, v)| (k.as_str(), *v))
            .collect()
    }
}

impl std::fmt::Debug for PlannedLaunch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.launch.fmt(f)
    }
}

/// How a reduction of `rows` rows of `cols` elements is launched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ReduceSplit {
    /// Output rows.
    pub rows: usize,
    /// Elements reduced into each output.
    pub cols: usize,
    /// Columns a program loads per step (`BLOCK`).
    pub block: usize,
    /// Programs per row in the first stage; 1 is a single-stage reduction.
    pub partials: usize,
    /// Columns each first-stage program reduces: a multiple of `block`.
    pub chunk: usize,
}

impl ReduceSplit {
    /// Two kernels: partials per program, then a final pass.
    pub fn two_stage(&self) -> bool {
        self.partials > 1
    }
}

/// The column block of a reduction over rows of `cols` elements: `cols` rounded up to a
/// power of two, from 16 to [`REDUCE_BLOCK`].
pub fn reduce_block(cols: usize) -> usize {
    cols.max(1).next_power_of_two().clamp(16, REDUCE_BLOCK)
}

/// Columns each of `partials` programs reduces of a row of `cols`: the smallest multiple of
/// `block` that covers the row in `partials` chunks.
pub fn split_chunk(cols: usize, partials: usize, block: usize) -> usize {
    let block = block.max(1);
    cols.max(1).div_ceil(partials.max(1)).div_ceil(block) * block
}

/// The split of a reduction of `rows` x `cols` for the chip `hw` (the seeds' rule): rows of
/// at most [`TWO_STAGE_THRESHOLD`] elements are one program's loop; longer rows are cut
/// into as many chunks as it takes for one program of the chip's largest threadgroup to
/// handle at most four f32 vector loads per thread (at least two chunks), each chunk a
/// whole number of `BLOCK`s.
pub fn reduce_split(rows: usize, cols: usize, hw: &HardwareProfile) -> ReduceSplit {
    let block = reduce_block(cols);
    if cols <= TWO_STAGE_THRESHOLD {
        return ReduceSplit {
            rows,
            cols,
            block,
            partials: 1,
            chunk: split_chunk(cols, 1, block),
        };
    }
    let per_program = hw.max_threads_per_threadgroup.max(1) as usize
        * hw.vector_width(crate::dtype::DType::F32) as usize
        * 4;
    let want = cols.div_ceil(per_program).max(2);
    let partials = cols.div_ceil(split_chunk(cols, want, block));
    ReduceSplit {
        rows,
        cols,
        block,
        partials,
        chunk: split_chunk(cols, partials, block),
    }
}

/// What runs one node of a fused graph.
#[derive(Clone, Debug)]
pub struct NodePlan {
    /// The node's id.
    pub id: String,
    /// The op type or the group's pattern.
    pub what: String,
    /// The kernel that runs it, as [`super::KernelChoice::kernel`] names it (`mlx:<op>` for
    /// an op that stays an MLX op).
    pub kernel: String,
    /// The DSL kernel launches, in order; empty when MLX computes the node.
    pub launches: Vec<PlannedLaunch>,
}

impl NodePlan {
    /// Whether DSL kernels compute (part of) the node.
    pub fn is_dsl(&self) -> bool {
        !self.launches.is_empty()
    }
}

/// The types of every value of a fused graph: inputs, node results and group internals.
pub fn fused_types(graph: &FusedGraph) -> HashMap<&str, &TensorType> {
    let mut types: HashMap<&str, &TensorType> = graph
        .inputs
        .iter()
        .map(|i| (i.id.as_str(), &i.ty))
        .collect();
    for n in &graph.nodes {
        types.insert(n.id(), n.ty());
        if let Node::Group(g) = n {
            for o in &g.ops {
                types.insert(o.id.as_str(), &o.ty);
            }
        }
    }
    types
}

impl GraphRunner {
    /// What each node of `graph` runs as with this runner's providers: the kernel of every
    /// group and its launches, planned from the graph's types (the launches
    /// [`GraphRunner::run_fused`] then makes); ops outside groups run as MLX ops.
    pub fn plan_fused(&self, graph: &FusedGraph) -> Result<Vec<NodePlan>> {
        let types = fused_types(graph);
        graph
            .nodes
            .iter()
            .map(|n| match n {
                Node::Op(op) => Ok(NodePlan {
                    id: op.id.clone(),
                    what: op.type_name.clone(),
                    kernel: format!("mlx:{}", op.kind),
                    launches: Vec::new(),
                }),
                Node::Group(g) => self.plan_group(g, &types),
            })
            .collect()
    }

    /// The plan of one group whose inputs have the types in `types`.
    pub fn plan_group(
        &self,
        g: &FusedGroup,
        types: &HashMap<&str, &TensorType>,
    ) -> Result<NodePlan> {
        let shapes: Vec<Vec<usize>> = g
            .inputs
            .iter()
            .map(|r| types.get(r.as_str()).map(|t| t.shape.clone()))
            .collect::<Option<_>>()
            .ok_or_else(|| {
                crate::error::Error::InvalidArgument(format!(
                    "fused group `{}`: an input has no type",
                    g.id
                ))
            })?;
        let k = self.kernel_for(g)?;
        Ok(NodePlan {
            id: g.id.clone(),
            what: g.pattern.to_string(),
            kernel: k.name(),
            launches: k.launches(&shapes)?,
        })
    }

    /// What a lone op of a graph runs as when it is lowered on its own (as `analyze` and
    /// `layouts` report it): the group of one op a DSL provider has a kernel for
    /// ([`single_op_group`]), or the MLX op.
    pub fn plan_op(&self, op: &OpNode, types: &HashMap<&str, &TensorType>) -> Result<NodePlan> {
        let rank = op
            .inputs
            .first()
            .and_then(|r| types.get(r.as_str()))
            .map_or(0, |t| t.shape.len());
        if let Some(g) = single_op_group(op, rank) {
            let p = self.plan_group(&g, types)?;
            if p.is_dsl() {
                return Ok(NodePlan {
                    what: op.type_name.clone(),
                    ..p
                });
            }
        }
        Ok(NodePlan {
            id: op.id.clone(),
            what: op.type_name.clone(),
            kernel: format!("mlx:{}", op.kind),
            launches: Vec::new(),
        })
    }
}

/// `op` as a group of one, for the ops a fused kernel covers alone: elementwise ops (a
/// chain of one), sum/mean/max/min reductions, softmax over the last axis, layer and RMS
/// norm. `None` for the rest (matmul, conv, transposes, shape ops, argmax, any/all, prod).
/// `input_rank` is the rank of the op's first input.
pub fn single_op_group(op: &OpNode, input_rank: usize) -> Option<FusedGroup> {
    let (pattern, params) = match op.kind.category() {
        OpCategory::Elementwise => (Pattern::ElementwiseChain, PatternParams::ElementwiseChain),
        OpCategory::Reduction => {
            let r = op.args.reduce_op.unwrap_or(ReduceOp::Sum);
            if !matches!(
                r,
                ReduceOp::Sum | ReduceOp::Mean | ReduceOp::Max | ReduceOp::Min
            ) {
                return None;
            }
            (
                Pattern::HierarchicalReduction,
                PatternParams::HierarchicalReduction {
                    op: r,
                    axes: op.args.reduce_axes(input_rank),
                    source: op.inputs.first()?.clone(),
                    prologue_ops: 0,
                    reductions: 1,
                },
            )
        }
        OpCategory::RowWise => match op.kind {
            OpKind::Softmax => (
                Pattern::Softmax,
                PatternParams::Softmax {
                    x: op.inputs.first()?.clone(),
                    axis: op.args.softmax_axis(input_rank),
                },
            ),
            OpKind::LayerNorm => (
                Pattern::LayerNorm,
                PatternParams::LayerNorm {
                    x: op.inputs.first()?.clone(),
                    weight: op.inputs.get(1).cloned(),
                    bias: op.inputs.get(2).cloned(),
                    eps: op.args.eps.unwrap_or(1e-5),
                },
            ),
            OpKind::RmsNorm => (
                Pattern::RmsNorm,
                PatternParams::RmsNorm {
                    x: op.inputs.first()?.clone(),
                    weight: op.inputs.get(1).cloned(),
                    eps: op.args.eps.unwrap_or(1e-5),
                },
            ),
            _ => return None,
        },
        _ => return None,
    };
    let mut inputs: Vec<String> = Vec::new();
    for i in &op.inputs {
        if !inputs.contains(i) {
            inputs.push(i.clone());
        }
    }
    Some(FusedGroup {
        id: op.id.clone(),
        pattern,
        ops: vec![op.clone()],
        inputs,
        ty: op.ty.clone(),
        params,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Graph;
    use crate::opt::Chip;

    #[test]
    fn splits_cover_every_column_once() {
        for chip in [Chip::M1, Chip::M4Max, Chip::Sm90, Chip::Cpu] {
            let hw = HardwareProfile::of(chip);
            for cols in [
                1,
                15,
                16,
                1000,
                1024,
                1025,
                4096,
                5003,
                65536,
                1 << 20,
                3_000_001,
            ] {
                let s = reduce_split(3, cols, &hw);
                assert_eq!(s.two_stage(), cols > TWO_STAGE_THRESHOLD, "{chip:?} {cols}");
                assert_eq!(s.chunk % s.block, 0);
                assert!(s.chunk * s.partials >= cols, "{s:?}");
                assert!(s.chunk * (s.partials - 1) < cols, "{s:?}");
                assert_eq!(s.chunk, split_chunk(cols, s.partials, s.block));
                if s.two_stage() {
                    assert!(s.partials >= 2 && s.block == REDUCE_BLOCK, "{s:?}");
                }
            }
        }
        // The split follows the profile: 16-byte vectors on M1, 32-byte on the CPU.
        let m1 = reduce_split(1, 65536, &HardwareProfile::of(Chip::M1));
        let cpu = reduce_split(1, 65536, &HardwareProfile::of(Chip::Cpu));
        assert_eq!((m1.partials, cpu.partials), (4, 2));
    }

    #[test]
    fn lone_ops_become_groups_of_one_where_a_kernel_covers_them() {
        let g = Graph::from_json(
            r#"{"inputs": [{"id": "x", "shape": [4, 8]}, {"id": "w", "shape": [8, 3]}],
            "ops": [{"type": "tt.sum", "id": "s", "inputs": ["x"], "args": {"axis": -1}},
                    {"type": "tt.mean", "id": "m", "inputs": ["x"]},
                    {"type": "tt.exp", "id": "e", "inputs": ["x"]},
                    {"type": "tt.softmax", "id": "p", "inputs": ["x"]},
                    {"type": "tt.argmax", "id": "a", "inputs": ["x"], "args": {"axis": 1}},
                    {"type": "tt.dot", "id": "d", "inputs": ["x", "w"]}]}"#,
        )
        .unwrap();
        let group = |id: &str| {
            let op = g.ops.iter().find(|o| o.id == id).unwrap();
            single_op_group(op, 2)
        };
        match group("s").unwrap().params {
            PatternParams::HierarchicalReduction { op, axes, .. } => {
                assert_eq!((op, axes), (ReduceOp::Sum, vec![1]))
            }
            p => panic!("{p:?}"),
        }
        match group("m").unwrap().params {
            PatternParams::HierarchicalReduction { axes, .. } => assert_eq!(axes, vec![0, 1]),
            p => panic!("{p:?}"),
        }
        assert_eq!(group("e").unwrap().pattern, Pattern::ElementwiseChain);
        assert!(matches!(
            group("p").unwrap().params,
            PatternParams::Softmax { axis: 1, .. }
        ));
        assert!(group("a").is_none() && group("d").is_none());
    }
}
