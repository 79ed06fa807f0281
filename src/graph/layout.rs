//! Layouts and launch parameters per op of an op graph, derived from a [`HardwareProfile`]:
//! [`plan_layout`] decides the [`MemoryLayout`] of an op and the parameters a code generator
//! needs (threads, SIMD-groups, vector width, elements per thread, two-stage split, tiles);
//! [`plan_graph`] and [`plan_fused`] plan whole graphs, fused or not.
//!
//! This is the seeds' parallel model of an op (threadgroups x threads, tiles), an estimate
//! for reasoning about layouts and rooflines. The kernels that actually run a graph are
//! planned by [`super::lower`] (launch shapes, the one- or two-stage split of long
//! reductions) and by `opt::plan` (each kernel's layout decisions); the `triton-metal`
//! tools report those.
//!
//! ```
//! use triton_metal::graph::{memory_layout_for_op, OpSpec};
//! use triton_metal::opt::{HardwareProfile, MemoryLayout};
//!
//! // Plan a row reduction for an M3 Max, whatever machine this runs on.
//! let hw = HardwareProfile::named("m3-max")?;
//! let op = OpSpec::from_operation_str("tt.sum:[256,8192]:1")?;
//! let plan = memory_layout_for_op(&op, &hw)?;
//! assert!(plan.layout.contains(MemoryLayout::COALESCED));
//! let r = plan.reduction.as_ref().unwrap();
//! assert!(r.two_stage && r.partials_per_output >= 2); // 8192 > 1024 elements per row
//! assert_eq!(plan.threads_per_threadgroup % hw.simd_width, 0);
//! # Ok::<(), triton_metal::Error>(())
//! ```

use std::collections::HashMap;

use serde::Serialize;

use crate::dtype::DType;
use crate::error::Result;
use crate::graph::fusion::{FusedGraph, FusedGroup, Node, PatternParams};
use crate::graph::ops::OpArgs;
use crate::graph::ops::{OpCategory, OpKind, ReduceOp};
use crate::graph::spec::{Graph, GraphSpec, OpNode, OpSpec, TensorType};
use crate::opt::{Chip, HardwareProfile, MemoryLayout, Roofline, TileShape};

/// Reductions over more elements than this per output use two stages (partial results per
/// threadgroup, then a second pass): one threadgroup of at most 1024 threads would
/// otherwise loop serially over the whole row while the rest of the GPU idles.
pub const TWO_STAGE_THRESHOLD: u64 = 1024;

/// How a reduction is laid out.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReductionPlan {
    /// Combine.
    pub op: ReduceOp,
    /// Elements reduced into each output.
    pub reduce_elements: u64,
    /// Outputs.
    pub outputs: u64,
    /// The reduced axes include the innermost (contiguous) one: threads read along the
    /// row. Otherwise threads read across outputs and loop over the reduced axis.
    pub contiguous: bool,
    /// More than [`TWO_STAGE_THRESHOLD`] elements per output.
    pub two_stage: bool,
    /// Threadgroups sharing one output in the first stage (1 when single stage).
    pub partials_per_output: u64,
}

/// Arithmetic of one op: 2 per multiply-add, 1 per other elementwise or combine step;
/// transcendental-heavy row-wise ops count their few passes over the row.
pub fn op_flops(op: &OpNode, inputs: &[&TensorType]) -> u64 {
    let out = op.ty.numel();
    let first = inputs.first().map_or(out, |t| t.numel());
    match op.kind.category() {
        OpCategory::Elementwise => match op.kind {
            OpKind::Fma => 2 * out,
            OpKind::Gelu | OpKind::Silu => 4 * out,
            _ => out,
        },
        OpCategory::Reduction => first,
        OpCategory::Matmul => {
            let k = inputs
                .first()
                .and_then(|t| t.shape.last().copied())
                .unwrap_or(1) as u64;
            2 * out * k
        }
        OpCategory::Conv => {
            let k: u64 = inputs
                .get(1)
                .map_or(1, |w| w.shape.iter().skip(1).map(|&d| d as u64).product());
            2 * out * k
        }
        // max, subtract, exp, sum, divide
        OpCategory::RowWise if op.kind == OpKind::Softmax => 5 * out,
        // mean, subtract, square, mean, rsqrt, multiply (+ affine)
        OpCategory::RowWise => 8 * out,
        OpCategory::Transpose | OpCategory::Shape => 0,
    }
}

/// The layout decision for one op, with every parameter a code generator needs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LayoutPlan {
    /// Op kind.
    #[serde(serialize_with = "ser_kind")]
    pub op: OpKind,
    /// Chip planned for.
    pub hardware: Chip,
    /// Dtype the kernel reads.
    #[serde(serialize_with = "ser_dtype")]
    pub dtype: DType,
    /// Chosen layout.
    pub layout: MemoryLayout,
    /// Threads per threadgroup.
    pub threads_per_threadgroup: u32,
    /// SIMD-groups (warps) per threadgroup.
    pub simdgroups: u32,
    /// Elements per vector load.
    pub vector_width: u32,
    /// Elements each thread handles per pass.
    pub elements_per_thread: u32,
    /// Threadgroups to launch (first stage for two-stage reductions).
    pub threadgroups: u64,
    /// Threadgroup memory the kernel uses, in bytes.
    pub threadgroup_memory_bytes: u32,
    /// Matmul / conv / transpose tile.
    pub tile: Option<TileShape>,
    /// Reduction details.
    pub reduction: Option<ReductionPlan>,
    /// Compulsory traffic and arithmetic against the profile's peaks.
    pub roofline: Roofline,
    /// Why, in a few words.
    pub reason: String,
}

fn ser_kind<S: serde::Serializer>(k: &OpKind, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(k.name())
}

fn ser_dtype<S: serde::Serializer>(d: &DType, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(d.mlx_name())
}

impl LayoutPlan {
    /// True when the COALESCED flag is set.
    pub fn is_coalesced(&self) -> bool {
        self.layout.contains(MemoryLayout::COALESCED)
    }

    /// Launch dimensions as MLX's `metal_kernel` takes them (1-D): the grid counts
    /// *threads* (threadgroups x threads per threadgroup), then the threadgroup size.
    pub fn launch_dims(&self) -> ([u64; 3], [u32; 3]) {
        let t = self.threads_per_threadgroup;
        ([self.threadgroups * t as u64, 1, 1], [t, 1, 1])
    }
}

fn pow2_at_least(x: u64) -> u64 {
    x.max(1).next_power_of_two()
}

/// Plans the layout of a standalone op as written in JSON (the seeds'
/// `get_memory_layout_for_op`). The op is validated first; errors name its id and field.
pub fn memory_layout_for_op(op: &OpSpec, hw: &HardwareProfile) -> Result<LayoutPlan> {
    let graph = Graph::from_spec(&GraphSpec {
        inputs: vec![],
        ops: vec![op.clone()],
        outputs: None,
    })?;
    let node = &graph.ops[0];
    let ins: Vec<&TensorType> = graph.inputs.iter().map(|i| &i.ty).collect();
    Ok(plan_layout(node, &ins, hw))
}

/// Plans every op of a validated graph, in order: `(op id, plan)`.
pub fn plan_graph(graph: &Graph, hw: &HardwareProfile) -> Vec<(String, LayoutPlan)> {
    let types = graph.types();
    graph
        .ops
        .iter()
        .map(|op| {
            let ins: Vec<&TensorType> = op
                .inputs
                .iter()
                .filter_map(|r| types.get(r.as_str()).copied())
                .collect();
            (op.id.clone(), plan_layout(op, &ins, hw))
        })
        .collect()
}

/// Plans every node of a fused graph: ops as in [`plan_graph`], each fused group as the
/// op that dominates its memory traffic (the row-wise op of a norm or softmax, the
/// matmul of an epilogue or of attention's scores, the collapsed reduction, the
/// elementwise result of a chain).
pub fn plan_fused(graph: &FusedGraph, hw: &HardwareProfile) -> Vec<(String, LayoutPlan)> {
    let types = super::lower::fused_types(graph);
    graph
        .nodes
        .iter()
        .map(|n| {
            let plan = match n {
                Node::Op(op) => {
                    let ins: Vec<&TensorType> = op
                        .inputs
                        .iter()
                        .filter_map(|r| types.get(r.as_str()).copied())
                        .collect();
                    plan_layout(op, &ins, hw)
                }
                Node::Group(g) => plan_group(g, &types, hw),
            };
            (n.id().to_string(), plan)
        })
        .collect()
}

fn plan_group(
    g: &FusedGroup,
    types: &HashMap<&str, &TensorType>,
    hw: &HardwareProfile,
) -> LayoutPlan {
    let ty = |id: &str| types.get(id).copied().cloned();
    let synth = |kind: OpKind, args: OpArgs, inputs: Vec<TensorType>, out: TensorType| {
        let node = OpNode {
            id: g.id.clone(),
            kind,
            type_name: g.pattern.to_string(),
            args,
            inputs: vec![],
            ty: out,
        };
        let refs: Vec<&TensorType> = inputs.iter().collect();
        let mut p = plan_layout(&node, &refs, hw);
        p.reason = format!("fused {}: {}", g.pattern, p.reason);
        // The group moves its external inputs and result once and does all its ops' work.
        let bytes = g
            .inputs
            .iter()
            .filter_map(|r| types.get(r.as_str()))
            .map(|t| t.bytes())
            .sum::<u64>()
            + g.ty.bytes();
        let flops = g
            .ops
            .iter()
            .map(|o| {
                let ins: Vec<&TensorType> = o
                    .inputs
                    .iter()
                    .filter_map(|r| types.get(r.as_str()).copied())
                    .collect();
                op_flops(o, &ins)
            })
            .sum();
        p.roofline = Roofline::new(bytes, flops, hw);
        p
    };
    let all_inputs: Vec<TensorType> = g.inputs.iter().filter_map(|r| ty(r)).collect();
    let elementwise = || {
        synth(
            OpKind::Add,
            OpArgs::default(),
            all_inputs.clone(),
            g.ty.clone(),
        )
    };
    let or_elementwise = |ids: &[&str], kind: OpKind, args: OpArgs, out: TensorType| match ids
        .iter()
        .map(|r| ty(r))
        .collect::<Option<Vec<_>>>()
    {
        Some(ins) => synth(kind, args, ins, out),
        None => elementwise(),
    };
    match &g.params {
        PatternParams::Softmax { x, axis } => or_elementwise(
            &[x],
            OpKind::Softmax,
            OpArgs {
                axes: Some(vec![*axis]),
                ..Default::default()
            },
            g.ty.clone(),
        ),
        PatternParams::LayerNorm { x, .. } => {
            or_elementwise(&[x], OpKind::LayerNorm, OpArgs::default(), g.ty.clone())
        }
        PatternParams::RmsNorm { x, .. } => {
            or_elementwise(&[x], OpKind::RmsNorm, OpArgs::default(), g.ty.clone())
        }
        PatternParams::MatmulBias { a, b, .. } => {
            or_elementwise(&[a, b], OpKind::Dot, OpArgs::default(), g.ty.clone())
        }
        PatternParams::ConvBiasActivation { x, w, .. } => {
            or_elementwise(&[x, w], OpKind::Conv2d, OpArgs::default(), g.ty.clone())
        }
        PatternParams::Attention {
            q, k, k_transposed, ..
        } => {
            // The scores product q @ k^T dominates: plan its tiles.
            match (ty(q), ty(k)) {
                (Some(qt), Some(mut kt)) => {
                    let n = kt.shape.len();
                    if *k_transposed && n >= 2 {
                        kt.shape.swap(n - 2, n - 1);
                    }
                    let mut out = qt.clone();
                    let m = out.shape.len();
                    if m >= 2 && kt.shape.len() >= 2 {
                        out.shape[m - 1] = kt.shape[kt.shape.len() - 1];
                    }
                    synth(OpKind::Dot, OpArgs::default(), vec![qt, kt], out)
                }
                _ => elementwise(),
            }
        }
        PatternParams::HierarchicalReduction {
            op, axes, source, ..
        } => or_elementwise(
            &[source],
            OpKind::Reduce,
            OpArgs {
                axes: Some(axes.clone()),
                keep_dims: true,
                reduce_op: Some(*op),
                ..Default::default()
            },
            g.ty.clone(),
        ),
        PatternParams::Fma { .. }
        | PatternParams::ElementwiseChain
        | PatternParams::Gelu { .. }
        | PatternParams::SwiGlu { .. } => elementwise(),
    }
}

/// Plans one validated op whose operands have types `inputs`.
pub fn plan_layout(op: &OpNode, inputs: &[&TensorType], hw: &HardwareProfile) -> LayoutPlan {
    let dtype = inputs.first().map_or(op.ty.dtype, |t| t.dtype);
    let vec = hw.vector_width(dtype);
    let base = LayoutPlan {
        op: op.kind,
        hardware: hw.chip,
        dtype,
        layout: MemoryLayout::DEFAULT,
        threads_per_threadgroup: hw.default_threads,
        simdgroups: hw.simdgroups(hw.default_threads),
        vector_width: vec,
        elements_per_thread: vec,
        threadgroups: 1,
        threadgroup_memory_bytes: 0,
        tile: None,
        reduction: None,
        roofline: Roofline::new(
            inputs.iter().map(|t| t.bytes()).sum::<u64>() + op.ty.bytes(),
            op_flops(op, inputs),
            hw,
        ),
        reason: String::new(),
    };
    let in_shape = inputs.first().map(|t| t.shape.clone()).unwrap_or_default();
    match op.kind.category() {
        OpCategory::Reduction => plan_reduction(op, &in_shape, base, hw),
        OpCategory::Matmul => {
            let a = &in_shape;
            let b = inputs.get(1).map(|t| t.shape.clone()).unwrap_or_default();
            let m = a.get(a.len().wrapping_sub(2)).copied().unwrap_or(1) as u64;
            let k = a.last().copied().unwrap_or(1) as u64;
            let n = b.last().copied().unwrap_or(1) as u64;
            let batch: u64 = op.ty.shape[..op.ty.shape.len() - 2]
                .iter()
                .map(|&d| d as u64)
                .product();
            plan_tiled(
                base,
                hw,
                dtype,
                m,
                n,
                k,
                batch,
                "matmul: blocked tiles staged in threadgroup memory",
            )
        }
        OpCategory::Conv => {
            // Implicit GEMM: M = N*OH*OW output pixels, N = output channels, K = KH*KW*C.
            let w = inputs.get(1).map(|t| t.shape.clone()).unwrap_or_default();
            let o = &op.ty.shape;
            let m = (o[0] * o[1] * o[2]) as u64;
            let n = o[3] as u64;
            let k = w.iter().skip(1).map(|&d| d as u64).product();
            plan_tiled(
                base,
                hw,
                dtype,
                m,
                n,
                k,
                1,
                "conv2d as implicit GEMM: tiles of output pixels x channels",
            )
        }
        OpCategory::Transpose => {
            // A square tile is read along rows and written along columns through
            // threadgroup memory, so both global accesses stay contiguous.
            let side = hw.simd_width.min(32);
            let tile = TileShape {
                m: side,
                n: side,
                k: 1,
            };
            let rows = op.ty.numel().div_ceil((side * side) as u64);
            let threads = side * (side / 4).max(1);
            LayoutPlan {
                layout: MemoryLayout::COLUMN_MAJOR,
                threads_per_threadgroup: threads,
                simdgroups: hw.simdgroups(threads),
                vector_width: 1,
                elements_per_thread: (side * side) / threads,
                threadgroups: rows.max(1),
                // +1 column of padding avoids bank conflicts on the column-wise read.
                threadgroup_memory_bytes: side * (side + 1) * dtype.size_bytes() as u32,
                tile: Some(tile),
                reason: "transpose: tile through threadgroup memory, column-major writes".into(),
                ..base
            }
        }
        OpCategory::RowWise => {
            let row = in_shape.last().copied().unwrap_or(1) as u64;
            let rows = op.ty.numel() / row.max(1);
            let threads = pow2_at_least(row.div_ceil(vec as u64))
                .clamp(hw.simd_width as u64, hw.max_threads_per_threadgroup as u64)
                as u32;
            let ept = (row.div_ceil(threads as u64) as u32).max(1);
            LayoutPlan {
                layout: MemoryLayout::ROW_MAJOR | MemoryLayout::COALESCED,
                threads_per_threadgroup: threads,
                simdgroups: hw.simdgroups(threads),
                elements_per_thread: ept,
                threadgroups: rows.max(1),
                // One partial per SIMD-group for the cross-group step.
                threadgroup_memory_bytes: hw.simdgroups(threads) * 4,
                reason: format!(
                    "{}: one threadgroup per row of {row}, coalesced row reduction",
                    op.kind
                ),
                ..base
            }
        }
        OpCategory::Elementwise | OpCategory::Shape => {
            let n = op.ty.numel();
            let broadcasts = inputs.iter().any(|t| t.shape != op.ty.shape);
            let per_group = (base.threads_per_threadgroup * vec) as u64;
            LayoutPlan {
                layout: if broadcasts {
                    MemoryLayout::ROW_MAJOR
                } else {
                    MemoryLayout::DEFAULT
                },
                threadgroups: n.div_ceil(per_group).max(1),
                reason: if broadcasts {
                    "elementwise with broadcasting: row-major index math".into()
                } else {
                    "elementwise on equal shapes: flat vectorised loop".into()
                },
                ..base
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn plan_tiled(
    base: LayoutPlan,
    hw: &HardwareProfile,
    dtype: DType,
    m: u64,
    n: u64,
    k: u64,
    batch: u64,
    why: &str,
) -> LayoutPlan {
    let full = hw.matmul_tile_for(dtype);
    // Small problems get smaller tiles so every tile does useful work; 8 is the
    // simdgroup_matrix fragment edge and the smallest tile that keeps it.
    let shrink = |t: u32, d: u64| (t as u64).min(pow2_at_least(d).max(8)) as u32;
    let tile = TileShape {
        m: shrink(full.m, m),
        n: shrink(full.n, n),
        k: shrink(full.k, k),
    };
    // One SIMD-group per 32x32 block of C, at most 8 (Triton's num_warps ceiling for
    // matmul) and at least 1.
    let groups = ((tile.m / 32).max(1) * (tile.n / 32).max(1)).clamp(1, 8);
    let threads = (groups * hw.simd_width).min(hw.max_threads_per_threadgroup);
    let c_per_thread = (tile.m * tile.n) / threads.max(1);
    LayoutPlan {
        layout: MemoryLayout::TILED,
        threads_per_threadgroup: threads,
        simdgroups: hw.simdgroups(threads),
        elements_per_thread: c_per_thread.max(1),
        threadgroups: m.div_ceil(tile.m as u64) * n.div_ceil(tile.n as u64) * batch.max(1),
        threadgroup_memory_bytes: (tile.stage_bytes(dtype) * hw.pipeline_stages as u64) as u32,
        tile: Some(tile),
        reason: format!(
            "{why}; {} stage(s){}",
            hw.pipeline_stages,
            if hw.simdgroup_matrix {
                ", simdgroup_matrix/tensor-core fragments"
            } else {
                ""
            }
        ),
        ..base
    }
}

fn plan_reduction(
    op: &OpNode,
    in_shape: &[usize],
    base: LayoutPlan,
    hw: &HardwareProfile,
) -> LayoutPlan {
    let axes = op.args.reduce_axes(in_shape.len());
    let reduce: u64 = axes
        .iter()
        .map(|&a| in_shape[a] as u64)
        .product::<u64>()
        .max(1);
    let total: u64 = in_shape.iter().map(|&d| d as u64).product::<u64>().max(1);
    let outputs = (total / reduce).max(1);
    let contiguous = in_shape.is_empty() || axes.contains(&(in_shape.len() - 1));
    let vec = base.vector_width as u64;
    let two_stage = reduce > TWO_STAGE_THRESHOLD;
    let max_t = hw.max_threads_per_threadgroup as u64;
    let simd = hw.simd_width as u64;
    let (threads, ept, partials) = if contiguous {
        // Each thread first reduces `ept` consecutive elements in registers (vector loads);
        // a two-stage reduction splits the row over at least two threadgroups, more when
        // one full threadgroup would need more than four vector loads per thread.
        if two_stage {
            let partials = reduce.div_ceil(max_t * vec * 4).max(2);
            let per_group = reduce.div_ceil(partials);
            let threads = pow2_at_least(per_group.div_ceil(vec)).clamp(simd, max_t);
            (threads, per_group.div_ceil(threads), partials)
        } else {
            let threads = pow2_at_least(reduce.div_ceil(vec)).clamp(simd, max_t);
            (threads, reduce.div_ceil(threads), 1)
        }
    } else {
        // Reduced axis is strided: adjacent threads take adjacent outputs (coalesced
        // reads along the contiguous kept axis); a two-stage split cuts the reduced axis.
        let threads = pow2_at_least(outputs).clamp(simd, hw.default_threads as u64);
        let partials = if two_stage {
            reduce.div_ceil(TWO_STAGE_THRESHOLD)
        } else {
            1
        };
        (threads, reduce.div_ceil(partials), partials)
    };
    let threads = threads as u32;
    let groups_per_output = if contiguous { partials } else { 1 };
    let threadgroups = if contiguous {
        outputs * groups_per_output
    } else {
        outputs.div_ceil(threads as u64) * partials
    };
    let red_op = op.args.reduce_op.unwrap_or(ReduceOp::Sum);
    // argmax/argmin carry an index next to each value.
    let slot = if matches!(red_op, ReduceOp::Argmax | ReduceOp::Argmin) {
        8
    } else {
        4
    };
    LayoutPlan {
        layout: MemoryLayout::COALESCED,
        threads_per_threadgroup: threads,
        simdgroups: hw.simdgroups(threads),
        vector_width: if contiguous { base.vector_width } else { 1 },
        elements_per_thread: ept.min(u32::MAX as u64) as u32,
        threadgroups,
        threadgroup_memory_bytes: hw.simdgroups(threads) * slot,
        reduction: Some(ReductionPlan {
            op: red_op,
            reduce_elements: reduce,
            outputs,
            contiguous,
            two_stage,
            partials_per_output: partials,
        }),
        reason: format!(
            "reduction of {reduce} elements per output: thread -> simdgroup -> threadgroup{}",
            if two_stage {
                " -> second stage across threadgroups"
            } else {
                ""
            }
        ),
        ..base
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plan(ty: &str, shapes: Vec<Vec<i64>>, args: serde_json::Value, chip: Chip) -> LayoutPlan {
        memory_layout_for_op(
            &OpSpec::new(ty, "x", shapes, args),
            &HardwareProfile::of(chip),
        )
        .unwrap()
    }

    #[test]
    fn every_seed_reduction_is_coalesced() {
        for ty in [
            "tt.reduce",
            "tt.sum",
            "tt.mean",
            "tt.max",
            "tt.min",
            "tt.argmax",
            "tt.argmin",
            "tt.any",
            "tt.all",
        ] {
            let p = plan(ty, vec![vec![1024, 512]], json!({"axis": 1}), Chip::M3);
            assert_eq!(p.layout, MemoryLayout::COALESCED, "{ty}");
            assert!(p.is_coalesced());
        }
    }

    #[test]
    fn two_stage_above_1024_elements() {
        let small = plan("tt.sum", vec![vec![64, 1024]], json!({"axis": 1}), Chip::M1);
        let r = small.reduction.unwrap();
        assert!(!r.two_stage);
        assert_eq!(r.partials_per_output, 1);
        assert_eq!(small.threads_per_threadgroup, 256);
        let big = plan(
            "tt.sum",
            vec![vec![64, 65536]],
            json!({"axis": 1}),
            Chip::M1,
        );
        let r = big.reduction.clone().unwrap();
        assert!(r.two_stage);
        assert_eq!(big.threads_per_threadgroup, 1024);
        assert_eq!(r.partials_per_output, 4);
        assert_eq!(big.threadgroups, 64 * 4);
        assert_eq!(big.launch_dims(), ([64 * 4 * 1024, 1, 1], [1024, 1, 1]));
        // Just above the threshold: still split in two.
        let mid = plan(
            "tt.sum",
            vec![vec![128, 4096]],
            json!({"axis": 1}),
            Chip::M1,
        );
        assert_eq!(mid.reduction.as_ref().unwrap().partials_per_output, 2);
        assert_eq!(
            (mid.threads_per_threadgroup, mid.elements_per_thread),
            (512, 4)
        );
        // Column reduction: threads over the kept axis.
        let col = plan(
            "tt.sum",
            vec![vec![4096, 512]],
            json!({"axis": 0}),
            Chip::M1,
        );
        assert!(!col.reduction.as_ref().unwrap().contiguous);
        assert_eq!(col.vector_width, 1);
    }

    #[test]
    fn matmul_is_tiled_from_the_profile() {
        let p = plan(
            "tt.dot",
            vec![vec![1024, 1024], vec![1024, 1024]],
            json!({}),
            Chip::M3Max,
        );
        assert_eq!(p.layout, MemoryLayout::TILED);
        assert_eq!(
            p.tile,
            Some(HardwareProfile::of(Chip::M3Max).matmul_tile_for(DType::F32))
        );
        assert_eq!(p.simdgroups, 4);
        let h = plan(
            "tt.matmul",
            vec![vec![4096, 4096], vec![4096, 4096]],
            json!({"dtype": "float16"}),
            Chip::Sm90,
        );
        assert_eq!(h.tile.unwrap().n, 256);
        assert_eq!(h.threads_per_threadgroup, 256);
        let small = plan(
            "tt.dot",
            vec![vec![16, 32], vec![32, 8]],
            json!({}),
            Chip::M1,
        );
        assert_eq!(small.tile.unwrap(), TileShape { m: 16, n: 8, k: 16 });
    }

    #[test]
    fn elementwise_and_transpose_layouts() {
        let p = plan("tt.add", vec![vec![1024], vec![1024]], json!({}), Chip::M2);
        assert_eq!(p.layout, MemoryLayout::DEFAULT);
        assert_eq!(p.vector_width, 4);
        assert_eq!(p.threadgroups, 1);
        let p = plan(
            "tt.add",
            vec![vec![64, 1024], vec![1024]],
            json!({}),
            Chip::M2,
        );
        assert_eq!(p.layout, MemoryLayout::ROW_MAJOR);
        let p = plan("tt.trans", vec![vec![64, 128]], json!({}), Chip::M2);
        assert_eq!(p.layout, MemoryLayout::COLUMN_MAJOR);
        let p = plan("tt.softmax", vec![vec![8, 4096]], json!({}), Chip::M2);
        assert_eq!(p.layout, MemoryLayout::ROW_MAJOR | MemoryLayout::COALESCED);
        assert_eq!(p.threads_per_threadgroup, 1024);
    }

    #[test]
    fn fused_groups_are_planned_by_their_dominant_op() {
        let g = Graph::from_spec(&crate::graph::samples::sample_graph()).unwrap();
        let (fused, _) = crate::graph::fuse(&g);
        let hw = HardwareProfile::of(Chip::M2Pro);
        let plans: HashMap<String, LayoutPlan> = plan_fused(&fused, &hw).into_iter().collect();
        assert_eq!(plans.len(), fused.nodes.len());
        assert_eq!(
            plans["h0"].layout,
            MemoryLayout::ROW_MAJOR | MemoryLayout::COALESCED
        );
        assert_eq!(plans["attn"].layout, MemoryLayout::TILED);
        assert_eq!(plans["mlp_act"].layout, MemoryLayout::TILED);
        assert_eq!(plans["energy"].layout, MemoryLayout::COALESCED);
        assert_eq!(
            plans["energy"].reduction.as_ref().unwrap().reduce_elements,
            16 * 32
        );
        assert_eq!(plans["res"].layout, MemoryLayout::DEFAULT);
        assert!(plans["attn"].reason.starts_with("fused attention"));
    }

    #[test]
    fn rooflines_from_profile_peaks() {
        let mm = plan(
            "tt.dot",
            vec![vec![4096, 4096], vec![4096, 4096]],
            json!({}),
            Chip::M4Max,
        );
        assert_eq!(mm.roofline.flops, 2 * 4096u64.pow(3));
        assert_eq!(mm.roofline.limit, Some("compute"));
        let add = plan(
            "tt.add",
            vec![vec![1 << 24], vec![1 << 24]],
            json!({}),
            Chip::M4Max,
        );
        assert_eq!(add.roofline.bytes, 3 * 4 * (1 << 24));
        assert_eq!(add.roofline.limit, Some("memory"));
        // 201 MB at 546 GB/s.
        let t = add.roofline.min_time_us.unwrap();
        assert!(
            (t - 3.0 * 4.0 * 16_777_216.0 / 546e9 * 1e6).abs() < 1e-6,
            "{t}"
        );
        let cpu = plan("tt.add", vec![vec![1024], vec![1024]], json!({}), Chip::Cpu);
        assert_eq!(cpu.roofline.limit, None);
    }

    #[test]
    fn bad_ops_are_errors_not_panics() {
        let hw = HardwareProfile::of(Chip::M1);
        let e = memory_layout_for_op(
            &OpSpec::new("tt.sum", "s", vec![vec![4, 4]], json!({"axis": 5})),
            &hw,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("op `s` (tt.sum): args.axis"), "{e}");
    }
}
