//! Fused groups launch the kernels the graph planner reports, with the planned shapes;
//! reductions over long rows run as two kernels (partials per program, then a final pass)
//! and agree with MLX on every target, edge values included.

mod support;

use std::collections::HashMap;

use serde_json::{json, Value};
use triton_metal::graph::dsl::DslKernels;
use triton_metal::graph::lower::{reduce_split, single_op_group, NodePlan};
use triton_metal::graph::{fuse, random_inputs, samples, Graph, GraphRunner, KernelProvider};
use triton_metal::opt::HardwareProfile;
use triton_metal::runtime::Target;
use triton_metal::{mlx, Array, DType};

fn graph(inputs: &[(&str, &[usize])], ops: Value) -> Graph {
    let inputs: Vec<Value> = inputs
        .iter()
        .map(|(id, shape)| json!({"id": id, "shape": shape}))
        .collect();
    Graph::from_json(&json!({"inputs": inputs, "ops": ops}).to_string()).unwrap()
}

fn m1() -> HardwareProfile {
    HardwareProfile::named("m1").unwrap()
}

fn runner(target: Target) -> GraphRunner {
    GraphRunner::new().with_provider(Box::new(DslKernels::new(m1(), target)))
}

/// Runs `g` fused with the DSL kernels and checks each group's recorded launches against
/// the plan made from the graph's types before anything ran.
fn planned_equals_launched(g: &Graph, seed: u64) -> Vec<NodePlan> {
    let (fused, _) = fuse(g);
    let r = runner(Target::Cpu);
    let plans = r.plan_fused(&fused).unwrap();
    let feeds = random_inputs(&g.inputs, seed).unwrap();
    let cmp = r.compare(g, &fused, &feeds, 1e-3, 1e-4).unwrap();
    assert!(cmp.all_close(), "{cmp:#?}");
    for k in &cmp.kernels {
        let p = plans.iter().find(|p| p.id == k.group).unwrap();
        assert_eq!(p.kernel, k.kernel);
        let planned: Vec<_> = p.launches.iter().map(|l| l.launch.clone()).collect();
        assert_eq!(planned, k.launches, "group `{}`", k.group);
    }
    plans
}

#[test]
fn the_sample_graph_launches_what_the_plan_reports() {
    let g = Graph::from_spec(&samples::sample_graph()).unwrap();
    let plans = planned_equals_launched(&g, 3);
    let dsl = plans.iter().filter(|p| p.is_dsl()).count();
    // layer norm, FMA, matmul + bias + GELU, RMS norm, SwiGLU and the sum of squares run
    // as DSL kernels; attention is MLX's fused attention.
    assert_eq!(dsl, 6, "{plans:#?}");
    let attn = plans.iter().find(|p| p.id == "attn").unwrap();
    assert!(
        !attn.is_dsl() && attn.kernel.starts_with("mlx:"),
        "{attn:?}"
    );
}

#[test]
fn long_reductions_launch_two_kernels_as_planned() {
    // A prologue makes the reduction a group; rows above the two-stage threshold.
    for (shape, axis, op) in [
        (&[3usize, 5000][..], -1i64, "tt.sum"),
        (&[2, 40000], 1, "tt.max"),
        (&[4100, 3], 0, "tt.mean"),
        (&[5, 3, 700], -1, "tt.min"),
    ] {
        let g = graph(
            &[("x", shape)],
            json!([
                {"type": "tt.abs", "id": "a", "inputs": ["x"]},
                {"type": op, "id": "r", "inputs": ["a"], "args": {"axis": axis}},
            ]),
        );
        let plans = planned_equals_launched(&g, 5);
        let p = &plans[0];
        let cols = if axis == -1 || axis == 1 && shape.len() == 2 {
            shape[shape.len() - 1]
        } else {
            shape[0]
        };
        let rows: usize = shape.iter().product::<usize>() / cols;
        let split = reduce_split(rows, cols, &m1());
        let stages: Vec<&str> = p.launches.iter().map(|l| l.launch.stage).collect();
        if cols > 1024 {
            assert_eq!(stages, ["partials", "final"], "{shape:?}");
            assert_eq!(p.launches[0].launch.grid, [rows, split.partials, 1]);
            assert!(split.partials >= 2);
            assert_eq!(p.launches[1].launch.grid, [rows, 1, 1]);
        } else {
            assert_eq!(stages, ["reduce"], "{shape:?}");
        }
    }
}

#[test]
fn lone_sample_ops_are_planned_as_they_run() {
    // The large sample sweep's reductions (above and below the two-stage threshold, both
    // axes) and row-wise ops, each lowered on its own.
    let g = Graph::from_spec(&samples::sample_ops(true)).unwrap();
    let types = g.types();
    let dsl = DslKernels::new(m1(), Target::Cpu);
    let r = runner(Target::Cpu);
    let feeds = random_inputs(&g.inputs, 1).unwrap();
    let mut checked = 0;
    for op in g.ops.iter().filter(|o| {
        [
            "sum_16x65536_axis1",
            "mean_64x16384_axis0",
            "max_128x1024_axis1",
        ]
        .contains(&o.id.as_str())
            || ["tt.softmax", "tt.layer_norm", "tt.add"].contains(&o.type_name.as_str())
    }) {
        let rank = types[op.inputs[0].as_str()].shape.len();
        let group = single_op_group(op, rank).unwrap();
        let plan = r.plan_op(op, &types).unwrap();
        let k = dsl.kernel_for(&group).unwrap();
        let ins: Vec<Array> = group.inputs.iter().map(|i| feeds[i].clone()).collect();
        k.run(&ins).unwrap().eval().unwrap();
        let planned: Vec<_> = plan.launches.iter().map(|l| l.launch.clone()).collect();
        assert_eq!(planned, k.launched(), "{}", op.id);
        assert!(!planned.is_empty(), "{}", op.id);
        if op.id == "sum_16x65536_axis1" {
            assert_eq!(planned.len(), 2);
            assert_eq!(planned[0].grid, [16, 4, 1]);
        }
        checked += 1;
    }
    assert!(checked >= 6, "{checked}");
    // Ops without a DSL kernel of their own stay MLX ops.
    let mm = g.ops.iter().find(|o| o.id == "matmul_512").unwrap();
    assert_eq!(r.plan_op(mm, &types).unwrap().kernel, "mlx:tt.dot");
}

/// Rows of `cols` normal values with NaN, +-inf and +-0 placed in some rows.
fn edgy(rows: usize, cols: usize) -> Vec<f32> {
    let base = mlx::random::normal(&[rows, cols], DType::F32, 9)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let mut v = base;
    let at = |r: usize, c: usize| r * cols + c % cols;
    if rows > 1 {
        v[at(1, 3)] = f32::NAN;
    }
    if rows > 2 {
        v[at(2, 7)] = f32::INFINITY;
        v[at(2, cols - 1)] = f32::NEG_INFINITY;
    }
    if rows > 3 {
        v[at(3, cols / 2)] = f32::INFINITY;
    }
    if rows > 4 {
        v[at(4, 0)] = f32::NEG_INFINITY;
        v[at(4, 1)] = -0.0;
    }
    if rows > 5 {
        for c in 0..cols {
            v[at(5, c)] = if c % 2 == 0 { 0.0 } else { -0.0 };
        }
    }
    v
}

#[test]
fn two_stage_reductions_match_mlx_on_every_target_with_edge_values() {
    let (rows, cols) = (7usize, 5003usize);
    let x = Array::from_slice(&edgy(rows, cols), &[rows, cols]).unwrap();
    let w = Array::from_slice(
        &(0..cols)
            .map(|c| if c % 3 == 0 { -1.0f32 } else { 1.0 })
            .collect::<Vec<_>>(),
        &[cols],
    )
    .unwrap();
    let feeds: HashMap<String, Array> = [("x".to_string(), x), ("w".to_string(), w)].into();
    for t in support::targets("two_stage_graph_reductions") {
        for op in ["tt.sum", "tt.mean", "tt.max", "tt.min"] {
            let g = graph(
                &[("x", &[rows, cols]), ("w", &[cols])],
                json!([
                    {"type": "tt.mul", "id": "p", "inputs": ["x", "w"]},
                    {"type": op, "id": "r", "inputs": ["p"], "args": {"axis": -1}},
                ]),
            );
            let (fused, _) = fuse(&g);
            let cmp = runner(t).compare(&g, &fused, &feeds, 1e-5, 1e-5).unwrap();
            assert!(cmp.all_close(), "{op} on {t:?}: {cmp:#?}");
            let stages: Vec<&str> = cmp.kernels[0].launches.iter().map(|l| l.stage).collect();
            assert_eq!(stages, ["partials", "final"], "{op} on {t:?}");
            if t != Target::Cpu {
                continue;
            }
            // Both kernels print as CUDA that NVRTC compiles.
            let plans = runner(t).plan_fused(&fused).unwrap();
            for l in &plans[0].launches {
                let mut launch = l.jit().launch();
                for (k, v) in l.constexpr_pairs() {
                    launch = launch.constexpr(k, v);
                }
                support::cuda_compiles(&launch).unwrap();
            }
        }
    }
}

#[test]
fn epilogues_of_mlx_products_launch_as_planned() {
    // conv2d + bias + activation and a batched matmul + bias: MLX's product, then the DSL
    // epilogue kernel over the result.
    let conv = graph(
        &[("x", &[2, 9, 7, 3]), ("w", &[5, 3, 2, 3]), ("b", &[5])],
        json!([
            {"type": "tt.conv2d", "id": "c", "inputs": ["x", "w"]},
            {"type": "tt.add", "id": "y", "inputs": ["c", "b"]},
            {"type": "tt.silu", "id": "r", "inputs": ["y"]},
        ]),
    );
    let plans = planned_equals_launched(&conv, 2);
    assert!(plans[0].kernel.starts_with("mlx:conv2d+dsl:epilogue"));
    let batched = graph(
        &[("a", &[3, 5, 7]), ("b", &[3, 7, 4]), ("bias", &[4])],
        json!([
            {"type": "tt.dot", "id": "m", "inputs": ["a", "b"]},
            {"type": "tt.add", "id": "y", "inputs": ["m", "bias"]},
            {"type": "tt.relu", "id": "r", "inputs": ["y"]},
        ]),
    );
    let plans = planned_equals_launched(&batched, 4);
    assert_eq!(plans[0].launches.len(), 1);
    assert_eq!(plans[0].launches[0].launch.stage, "elementwise");
}
