//! Fusion patterns: each detected on its textbook spelling, not detected on a near miss,
//! and each fused graph numerically equal to its unfused MLX evaluation on random inputs.

use serde_json::{json, Value};
use triton_metal::graph::dsl::DslKernels;
use triton_metal::graph::{
    fuse, random_inputs, Activation, FusionSummary, Graph, GraphRunner, Pattern, PatternParams,
};

type OpDef<'a> = (&'a str, &'a str, &'a [&'a str], Value);

fn graph(inputs: &[(&str, &[usize])], ops: &[OpDef], outputs: Option<&[&str]>) -> Graph {
    let inputs: Vec<Value> = inputs
        .iter()
        .map(|(id, shape)| json!({"id": id, "shape": shape}))
        .collect();
    let ops: Vec<Value> = ops
        .iter()
        .map(|(ty, id, ins, args)| json!({"type": ty, "id": id, "inputs": ins, "args": args}))
        .collect();
    let mut doc = json!({"inputs": inputs, "ops": ops});
    if let Some(o) = outputs {
        doc["outputs"] = json!(o);
    }
    Graph::from_json(&doc.to_string()).unwrap_or_else(|e| panic!("{e}"))
}

fn patterns(s: &FusionSummary) -> Vec<Pattern> {
    s.groups.iter().map(|g| g.pattern).collect()
}

/// Fuses, checks the patterns found, and checks fused == unfused numerically.
fn check(g: &Graph, want: &[Pattern]) -> FusionSummary {
    let (fused, summary) = fuse(g);
    assert_eq!(patterns(&summary), want, "{summary:#?}");
    let feeds = random_inputs(&g.inputs, 7).unwrap();
    let cmp = GraphRunner::new()
        .compare(g, &fused, &feeds, 1e-4, 1e-5)
        .unwrap();
    assert!(cmp.all_close(), "{cmp:#?}");
    assert_eq!(cmp.kernels.len(), want.len());
    // The same groups as kernels written with our DSL (where one exists), run on the CPU
    // executor, must match the unfused MLX reference too.
    let dsl = GraphRunner::new()
        .with_provider(Box::new(DslKernels::default()))
        .compare(g, &fused, &feeds, 1e-4, 1e-5)
        .unwrap();
    assert!(dsl.all_close(), "{dsl:#?}");
    summary
}

#[test]
fn dsl_kernels_run_the_fusable_patterns() {
    let g = Graph::from_spec(&triton_metal::graph::samples::sample_graph()).unwrap();
    let (fused, _) = fuse(&g);
    let feeds = random_inputs(&g.inputs, 11).unwrap();
    // The fused attention (MLX's sdpa, as close to an f64 reference as the unfused ops: see
    // tests/mlx_ops.rs) rounds differently from matmul-softmax-matmul, and the two matmuls
    // and the sum of squares after it amplify those last-bit differences to ~1e-4
    // relative in a few elements: this deep graph is compared at 1e-3.
    let cmp = GraphRunner::new()
        .with_provider(Box::new(DslKernels::default()))
        .compare(&g, &fused, &feeds, 1e-3, 1e-5)
        .unwrap();
    assert!(cmp.all_close(), "{cmp:#?}");
    let dsl: Vec<&str> = cmp
        .kernels
        .iter()
        .map(|k| k.kernel.as_str())
        .filter(|k| k.starts_with("dsl:"))
        .collect();
    assert!(dsl.len() >= 3, "{:#?}", cmp.kernels);
}

#[test]
fn fma_detected_and_bytes_saved() {
    let g = graph(
        &[("a", &[4, 8]), ("b", &[4, 8]), ("c", &[4, 8])],
        &[
            ("tt.mul", "m", &["a", "b"], json!({})),
            ("tt.add", "y", &["c", "m"], json!({})),
        ],
        None,
    );
    let s = check(&g, &[Pattern::Fma]);
    let e = &s.groups[0];
    assert_eq!(e.ops, vec!["m", "y"]);
    assert_eq!(
        (e.bytes_unfused, e.bytes_fused, e.bytes_saved),
        (768, 512, 256)
    );
    let (fused, _) = fuse(&g);
    let grp = fused.groups().next().unwrap();
    assert!(matches!(grp.params, PatternParams::Fma { .. }));
}

#[test]
fn fma_near_miss_when_the_product_escapes() {
    let g = graph(
        &[("a", &[4, 8]), ("b", &[4, 8]), ("c", &[4, 8])],
        &[
            ("tt.mul", "m", &["a", "b"], json!({})),
            ("tt.add", "y", &["m", "c"], json!({})),
        ],
        Some(&["y", "m"]),
    );
    check(&g, &[]);
}

#[test]
fn elementwise_chain_with_scalars_and_broadcast() {
    let g = graph(
        &[("a", &[4, 8]), ("b", &[8])],
        &[
            ("tt.exp", "e", &["a"], json!({})),
            ("tt.mul", "m", &["e", "b"], json!({})),
            (
                "tt.sub",
                "s",
                &["m"],
                json!({"scalar": 1.0, "reverse": true}),
            ),
            ("tt.tanh", "t", &["s"], json!({})),
        ],
        None,
    );
    let s = check(&g, &[Pattern::ElementwiseChain]);
    assert_eq!(s.groups[0].ops.len(), 4);
}

#[test]
fn elementwise_near_miss_when_shared_with_a_reduction() {
    let g = graph(
        &[("a", &[4, 8])],
        &[
            ("tt.exp", "e", &["a"], json!({})),
            ("tt.sum", "s", &["e"], json!({"axis": 1})),
            ("tt.mul", "y", &["e"], json!({"scalar": 2.0})),
        ],
        None,
    );
    check(&g, &[]);
}

fn gelu_ops(inner_coeff: f64) -> Vec<OpDef<'static>> {
    vec![
        ("tt.mul", "x2", &["x", "x"], json!({})),
        ("tt.mul", "x3", &["x2", "x"], json!({})),
        ("tt.mul", "c", &["x3"], json!({"scalar": inner_coeff})),
        ("tt.add", "i", &["x", "c"], json!({})),
        ("tt.mul", "k", &["i"], json!({"scalar": 0.7978845608028654})),
        ("tt.tanh", "t", &["k"], json!({})),
        ("tt.add", "o", &["t"], json!({"scalar": 1.0})),
        ("tt.mul", "h", &["x"], json!({"scalar": 0.5})),
        ("tt.mul", "y", &["h", "o"], json!({})),
    ]
}

#[test]
fn gelu_erf_and_tanh_forms() {
    let g = graph(
        &[("x", &[4, 16])],
        &[
            ("tt.mul", "h", &["x"], json!({"scalar": 0.5})),
            (
                "tt.div",
                "t",
                &["x"],
                json!({"scalar": std::f64::consts::SQRT_2}),
            ),
            ("tt.erf", "e", &["t"], json!({})),
            ("tt.add", "a", &["e"], json!({"scalar": 1.0})),
            ("tt.mul", "y", &["a", "h"], json!({})),
        ],
        None,
    );
    check(&g, &[Pattern::Gelu]);
    let g = graph(&[("x", &[4, 16])], &gelu_ops(0.044715), None);
    let (fused, _) = fuse(&g);
    assert!(matches!(
        fused.groups().next().unwrap().params,
        PatternParams::Gelu { tanh: true, .. }
    ));
    check(&g, &[Pattern::Gelu]);
}

#[test]
fn gelu_near_miss_with_a_wrong_constant() {
    let g = graph(&[("x", &[4, 16])], &gelu_ops(0.05), None);
    check(&g, &[Pattern::ElementwiseChain]);
}

fn layer_norm_ops(mean_axis: i64) -> Vec<OpDef<'static>> {
    vec![
        (
            "tt.mean",
            "mu",
            &["x"],
            json!({"axis": mean_axis, "keep_dims": true}),
        ),
        ("tt.sub", "d", &["x", "mu"], json!({})),
        ("tt.mul", "sq", &["d", "d"], json!({})),
        (
            "tt.mean",
            "var",
            &["sq"],
            json!({"axis": -1, "keep_dims": true}),
        ),
        ("tt.add", "ve", &["var"], json!({"scalar": 1e-5})),
        ("tt.rsqrt", "r", &["ve"], json!({})),
        ("tt.mul", "n", &["d", "r"], json!({})),
        ("tt.mul", "g", &["n", "gamma"], json!({})),
        ("tt.add", "y", &["g", "beta"], json!({})),
    ]
}

#[test]
fn layer_norm_with_weight_and_bias() {
    let g = graph(
        &[("x", &[4, 32]), ("gamma", &[32]), ("beta", &[32])],
        &layer_norm_ops(-1),
        None,
    );
    let s = check(&g, &[Pattern::LayerNorm]);
    assert_eq!(s.groups[0].ops.len(), 9);
    let (fused, _) = fuse(&g);
    match &fused.groups().next().unwrap().params {
        PatternParams::LayerNorm {
            weight, bias, eps, ..
        } => {
            assert_eq!(weight.as_deref(), Some("gamma"));
            assert_eq!(bias.as_deref(), Some("beta"));
            assert_eq!(*eps, 1e-5);
        }
        p => panic!("{p:?}"),
    };
}

#[test]
fn layer_norm_near_miss_on_the_wrong_axis() {
    let g = graph(
        &[("x", &[32, 32]), ("gamma", &[32]), ("beta", &[32])],
        &layer_norm_ops(0),
        None,
    );
    let (_, s) = fuse(&g);
    assert!(!patterns(&s).contains(&Pattern::LayerNorm), "{s:#?}");
    check(&g, &patterns(&s));
}

fn rms_ops(scaled: &'static str) -> Vec<OpDef<'static>> {
    let n_in: &'static [&'static str] = if scaled == "x" {
        &["x", "r"]
    } else {
        &["z", "r"]
    };
    vec![
        ("tt.square", "sq", &["x"], json!({})),
        (
            "tt.mean",
            "ms",
            &["sq"],
            json!({"axis": -1, "keep_dims": true}),
        ),
        ("tt.add", "ve", &["ms"], json!({"scalar": 1e-6})),
        ("tt.rsqrt", "r", &["ve"], json!({})),
        ("tt.mul", "n", n_in, json!({})),
        ("tt.mul", "y", &["n", "w"], json!({})),
    ]
}

#[test]
fn rms_norm_with_weight() {
    let g = graph(
        &[("x", &[4, 32]), ("z", &[4, 32]), ("w", &[32])],
        &rms_ops("x"),
        Some(&["y"]),
    );
    check(&g, &[Pattern::RmsNorm]);
}

#[test]
fn rms_norm_near_miss_scaling_another_tensor() {
    let g = graph(
        &[("x", &[4, 32]), ("z", &[4, 32]), ("w", &[32])],
        &rms_ops("z"),
        Some(&["y"]),
    );
    let (_, s) = fuse(&g);
    assert!(!patterns(&s).contains(&Pattern::RmsNorm), "{s:#?}");
    check(&g, &patterns(&s));
}

fn swiglu_ops(sig_of: &'static str) -> Vec<OpDef<'static>> {
    let s_in: &'static [&'static str] = if sig_of == "g" { &["g"] } else { &["u"] };
    vec![
        ("tt.dot", "g", &["x", "w1"], json!({})),
        ("tt.dot", "u", &["x", "w2"], json!({})),
        ("tt.sigmoid", "s", s_in, json!({})),
        ("tt.mul", "sl", &["g", "s"], json!({})),
        ("tt.mul", "y", &["sl", "u"], json!({})),
    ]
}

#[test]
fn swiglu_detected_and_near_miss() {
    let ins: &[(&str, &[usize])] = &[("x", &[4, 16]), ("w1", &[16, 32]), ("w2", &[16, 32])];
    let s = check(&graph(ins, &swiglu_ops("g"), None), &[Pattern::SwiGlu]);
    assert_eq!(s.groups[0].ops, vec!["s", "sl", "y"]);
    let (_, s) = fuse(&graph(ins, &swiglu_ops("u"), None));
    assert!(!patterns(&s).contains(&Pattern::SwiGlu), "{s:#?}");
    check(&graph(ins, &swiglu_ops("u"), None), &patterns(&s));
}

fn softmax_ops(sum_axis: i64) -> Vec<OpDef<'static>> {
    vec![
        (
            "tt.max",
            "m",
            &["x"],
            json!({"axis": -1, "keep_dims": true}),
        ),
        ("tt.sub", "d", &["x", "m"], json!({})),
        ("tt.exp", "e", &["d"], json!({})),
        (
            "tt.sum",
            "s",
            &["e"],
            json!({"axis": sum_axis, "keep_dims": true}),
        ),
        ("tt.div", "y", &["e", "s"], json!({})),
    ]
}

#[test]
fn softmax_detected_and_near_miss() {
    let s = check(
        &graph(&[("x", &[16, 16])], &softmax_ops(1), None),
        &[Pattern::Softmax],
    );
    assert_eq!(s.groups[0].ops.len(), 5);
    let g = graph(&[("x", &[16, 16])], &softmax_ops(0), None);
    let (_, s) = fuse(&g);
    assert!(!patterns(&s).contains(&Pattern::Softmax), "{s:#?}");
    check(&g, &patterns(&s));
}

#[test]
fn matmul_bias_with_and_without_activation() {
    let ins: &[(&str, &[usize])] = &[("a", &[8, 16]), ("b", &[16, 4]), ("bias", &[4])];
    let mut ops: Vec<OpDef> = vec![
        ("tt.dot", "mm", &["a", "b"], json!({})),
        ("tt.add", "y", &["mm", "bias"], json!({})),
    ];
    check(&graph(ins, &ops, None), &[Pattern::MatmulBias]);
    ops.push(("tt.relu", "r", &["y"], json!({})));
    let g = graph(ins, &ops, None);
    check(&g, &[Pattern::MatmulBias]);
    let (fused, _) = fuse(&g);
    assert!(matches!(
        fused.groups().next().unwrap().params,
        PatternParams::MatmulBias {
            activation: Some(Activation::Relu),
            ..
        }
    ));
    // Near miss: the raw product is also a result.
    let g = graph(ins, &ops, Some(&["r", "mm"]));
    let (_, s) = fuse(&g);
    assert!(!patterns(&s).contains(&Pattern::MatmulBias), "{s:#?}");
    check(&g, &patterns(&s));
}

#[test]
fn matmul_bias_gelu_epilogue_absorbs_the_gelu_group() {
    let ins: &[(&str, &[usize])] = &[("a", &[8, 16]), ("b", &[16, 4]), ("bias", &[4])];
    let ops: Vec<OpDef> = vec![
        ("tt.dot", "mm", &["a", "b"], json!({})),
        ("tt.add", "x", &["mm", "bias"], json!({})),
        ("tt.mul", "h", &["x"], json!({"scalar": 0.5})),
        (
            "tt.mul",
            "t",
            &["x"],
            json!({"scalar": std::f64::consts::FRAC_1_SQRT_2}),
        ),
        ("tt.erf", "e", &["t"], json!({})),
        ("tt.add", "o", &["e"], json!({"scalar": 1.0})),
        ("tt.mul", "y", &["h", "o"], json!({})),
    ];
    let s = check(&graph(ins, &ops, None), &[Pattern::MatmulBias]);
    assert_eq!(s.groups[0].ops.len(), 7);
}

#[test]
fn conv_bias_activation_and_near_miss() {
    let ins: &[(&str, &[usize])] = &[("x", &[1, 8, 8, 3]), ("w", &[4, 3, 3, 3]), ("bias", &[4])];
    let mut ops: Vec<OpDef> = vec![
        ("tt.conv2d", "c", &["x", "w"], json!({})),
        ("tt.add", "y", &["c", "bias"], json!({})),
    ];
    // Without an activation it is not the pattern.
    check(&graph(ins, &ops, None), &[]);
    ops.push(("tt.silu", "r", &["y"], json!({})));
    check(&graph(ins, &ops, None), &[Pattern::ConvBiasActivation]);
}

fn attention_ops(softmax_axis: i64) -> Vec<OpDef<'static>> {
    vec![
        ("tt.trans", "kt", &["k"], json!({})),
        ("tt.dot", "s", &["q", "kt"], json!({})),
        ("tt.mul", "sc", &["s"], json!({"scalar": 0.25})),
        ("tt.softmax", "p", &["sc"], json!({"axis": softmax_axis})),
        ("tt.dot", "o", &["p", "v"], json!({})),
    ]
}

#[test]
fn attention_with_softmax_op_and_decomposed_softmax() {
    let ins: &[(&str, &[usize])] = &[("q", &[2, 8, 16]), ("k", &[2, 8, 16]), ("v", &[2, 8, 16])];
    let s = check(&graph(ins, &attention_ops(-1), None), &[Pattern::Attention]);
    assert_eq!(s.groups[0].ops.len(), 5);
    let ops: Vec<OpDef> = vec![
        ("tt.trans", "kt", &["k"], json!({"perm": [0, 2, 1]})),
        ("tt.dot", "s", &["q", "kt"], json!({})),
        ("tt.div", "sc", &["s"], json!({"scalar": 4.0})),
        (
            "tt.max",
            "m",
            &["sc"],
            json!({"axis": -1, "keep_dims": true}),
        ),
        ("tt.sub", "d", &["sc", "m"], json!({})),
        ("tt.exp", "e", &["d"], json!({})),
        (
            "tt.sum",
            "z",
            &["e"],
            json!({"axis": -1, "keep_dims": true}),
        ),
        ("tt.div", "p", &["e", "z"], json!({})),
        ("tt.dot", "o", &["p", "v"], json!({})),
    ];
    let g = graph(ins, &ops, None);
    let s = check(&g, &[Pattern::Attention]);
    assert_eq!(s.groups[0].ops.len(), 9);
    let (fused, _) = fuse(&g);
    match &fused.groups().next().unwrap().params {
        PatternParams::Attention {
            scale,
            k_transposed,
            ..
        } => {
            assert_eq!(*scale, 0.25);
            assert!(k_transposed);
        }
        p => panic!("{p:?}"),
    };
}

#[test]
fn attention_near_miss_softmax_over_queries() {
    let ins: &[(&str, &[usize])] = &[("q", &[2, 8, 16]), ("k", &[2, 8, 16]), ("v", &[2, 8, 16])];
    let g = graph(ins, &attention_ops(1), None);
    let (_, s) = fuse(&g);
    assert!(!patterns(&s).contains(&Pattern::Attention), "{s:#?}");
    check(&g, &patterns(&s));
}

#[test]
fn hierarchical_reductions() {
    let g = graph(
        &[("x", &[8, 16, 32])],
        &[
            ("tt.sum", "s1", &["x"], json!({"axis": 2})),
            ("tt.sum", "s2", &["s1"], json!({"axis": 1})),
        ],
        None,
    );
    check(&g, &[Pattern::HierarchicalReduction]);
    let (fused, _) = fuse(&g);
    match &fused.groups().next().unwrap().params {
        PatternParams::HierarchicalReduction {
            axes, reductions, ..
        } => {
            assert_eq!(axes, &vec![1, 2]);
            assert_eq!(*reductions, 2);
        }
        p => panic!("{p:?}"),
    }
    // Three levels, keep_dims mixed, max combine.
    let g = graph(
        &[("x", &[4, 6, 8, 10])],
        &[
            ("tt.max", "a", &["x"], json!({"axis": 3, "keep_dims": true})),
            ("tt.max", "b", &["a"], json!({"axis": 0})),
            ("tt.reduce", "c", &["b"], json!({"axis": 1, "op": "max"})),
        ],
        None,
    );
    check(&g, &[Pattern::HierarchicalReduction]);
    // An elementwise prologue: sum of squares.
    let g = graph(
        &[("x", &[8, 64])],
        &[
            ("tt.square", "sq", &["x"], json!({})),
            ("tt.sum", "s", &["sq"], json!({"axis": -1})),
        ],
        None,
    );
    check(&g, &[Pattern::HierarchicalReduction]);
    // Near miss: different combines.
    let g = graph(
        &[("x", &[8, 16, 32])],
        &[
            ("tt.sum", "s1", &["x"], json!({"axis": 2})),
            ("tt.max", "s2", &["s1"], json!({"axis": 1})),
        ],
        None,
    );
    check(&g, &[]);
}

#[test]
fn transformer_block_fuses_into_its_parts() {
    let g = graph(
        &[
            ("x", &[8, 32]),
            ("gamma", &[32]),
            ("beta", &[32]),
            ("w1", &[32, 64]),
            ("b1", &[64]),
            ("wq", &[32, 16]),
            ("wk", &[32, 16]),
            ("wv", &[32, 16]),
        ],
        &[
            (
                "tt.layer_norm",
                "ln0",
                &["x", "gamma", "beta"],
                json!({"eps": 1e-5}),
            ),
            ("tt.dot", "q", &["ln0", "wq"], json!({})),
            ("tt.dot", "k", &["ln0", "wk"], json!({})),
            ("tt.dot", "v", &["ln0", "wv"], json!({})),
            ("tt.trans", "kt", &["k"], json!({})),
            ("tt.dot", "s", &["q", "kt"], json!({})),
            ("tt.mul", "sc", &["s"], json!({"scalar": 0.25})),
            ("tt.softmax", "p", &["sc"], json!({})),
            ("tt.dot", "att", &["p", "v"], json!({})),
            ("tt.dot", "h", &["ln0", "w1"], json!({})),
            ("tt.add", "hb", &["h", "b1"], json!({})),
            ("tt.gelu", "act", &["hb"], json!({})),
            ("tt.sum", "r1", &["act"], json!({"axis": 1})),
        ],
        Some(&["att", "r1"]),
    );
    check(&g, &[Pattern::Attention, Pattern::MatmulBias]);
}

/// A provider placed in front wins, and a wrong kernel is caught by the comparison.
#[test]
fn providers_plug_in_and_wrong_kernels_are_caught() {
    use triton_metal::graph::{FusedGroup, FusedKernel, KernelProvider};
    use triton_metal::{mlx, Array, DType};

    struct OffByOne;
    struct OffByOneKernel;
    impl FusedKernel for OffByOneKernel {
        fn name(&self) -> String {
            "test:off-by-one".into()
        }
        fn run(&self, inputs: &[Array]) -> triton_metal::Result<Array> {
            let one = mlx::full(&[], 1.0, DType::F32)?;
            mlx::add(&mlx::softmax(&inputs[0], &[-1], true)?, &one)
        }
    }
    impl KernelProvider for OffByOne {
        fn kernel_for<'g>(&self, g: &'g FusedGroup) -> Option<Box<dyn FusedKernel + 'g>> {
            (g.pattern == Pattern::Softmax)
                .then(|| Box::new(OffByOneKernel) as Box<dyn FusedKernel>)
        }
    }
    let g = graph(&[("x", &[16, 16])], &softmax_ops(1), None);
    let (fused, _) = fuse(&g);
    let feeds = random_inputs(&g.inputs, 3).unwrap();
    let cmp = GraphRunner::new()
        .with_provider(Box::new(OffByOne))
        .compare(&g, &fused, &feeds, 1e-4, 1e-5)
        .unwrap();
    assert_eq!(cmp.kernels[0].kernel, "test:off-by-one");
    assert!(!cmp.all_close());
    assert_eq!(cmp.outputs[0].mismatches, 256);
}

/// A long graph of chains and reductions fuses into the expected groups and runs. (How
/// fast the optimizer is on it is a bench question, not a test assertion.)
#[test]
fn long_graphs_fuse() {
    let mut ops: Vec<Value> = Vec::new();
    let mut prev = "x".to_string();
    for i in 0..1200 {
        if i % 40 == 0 {
            ops.push(json!({"type": "tt.max", "id": format!("m{i}"), "inputs": [prev], "args": {"axis": -1, "keep_dims": true}}));
            ops.push(
                json!({"type": "tt.sub", "id": format!("s{i}"), "inputs": [prev, format!("m{i}")]}),
            );
            prev = format!("s{i}");
        }
        let ty = ["tt.exp", "tt.tanh", "tt.sigmoid"][i % 3];
        ops.push(json!({"type": ty, "id": format!("o{i}"), "inputs": [prev]}));
        prev = format!("o{i}");
    }
    let doc = json!({"inputs": [{"id": "x", "shape": [4, 8]}], "ops": ops});
    let g = Graph::from_json(&doc.to_string()).unwrap();
    let (fused, s) = fuse(&g);
    assert_eq!(s.ops_before, 1260);
    assert_eq!(s.count(Pattern::ElementwiseChain), 30);
    let feeds = random_inputs(&g.inputs, 5).unwrap();
    let cmp = GraphRunner::new()
        .compare(&g, &fused, &feeds, 1e-4, 1e-5)
        .unwrap();
    assert!(cmp.all_close(), "{cmp:#?}");
}

/// Runs the fused graph with `provider` in front of MLX's kernels; checks it against the
/// unfused MLX reference and returns the kernel chosen for each group.
fn run_with(
    g: &Graph,
    provider: Box<dyn triton_metal::graph::KernelProvider>,
    seed: u64,
) -> Vec<String> {
    let (fused, _) = fuse(g);
    let feeds = random_inputs(&g.inputs, seed).unwrap();
    let cmp = GraphRunner::new()
        .with_provider(provider)
        .compare(g, &fused, &feeds, 1e-4, 1e-5)
        .unwrap();
    assert!(cmp.all_close(), "{cmp:#?}");
    cmp.kernels.into_iter().map(|k| k.kernel).collect()
}

#[test]
fn elementwise_chains_run_as_dsl_kernels_built_from_their_ops() {
    // Ragged sizes, a suffix-broadcast operand, a scalar on either side, unary and binary
    // ops, and an operand broadcast along a leading axis (materialised).
    let g = graph(
        &[("a", &[7, 13]), ("b", &[13]), ("c", &[7, 1])],
        &[
            ("tt.exp", "e", &["a"], json!({})),
            ("tt.mul", "m", &["e", "b"], json!({})),
            (
                "tt.sub",
                "s",
                &["m"],
                json!({"scalar": 1.0, "reverse": true}),
            ),
            ("tt.tanh", "t", &["s"], json!({})),
            ("tt.maximum", "x", &["t", "c"], json!({})),
            ("tt.abs", "ab", &["x"], json!({})),
            ("tt.sqrt", "q", &["ab"], json!({})),
            ("tt.div", "d", &["q"], json!({"scalar": 3.0})),
            ("tt.sigmoid", "y", &["d"], json!({})),
        ],
        None,
    );
    check(&g, &[Pattern::ElementwiseChain]);
    let k = run_with(&g, Box::new(DslKernels::default()), 3);
    assert!(k[0].starts_with("dsl:fused_chain"), "{k:?}");
    // The same chain again reuses the traced kernel; other seeds, same answer.
    let k = run_with(&g, Box::new(DslKernels::default()), 4);
    assert!(k[0].starts_with("dsl:fused_chain"), "{k:?}");
}

#[test]
fn matmul_bias_activation_as_mlx_matmul_with_dsl_epilogue_and_as_one_dsl_kernel() {
    use triton_metal::graph::dsl_build::MlxMatmulEpilogueKernels;
    for act in ["tt.relu", "tt.gelu", "tt.silu", "tt.sigmoid", "tt.tanh"] {
        for bias_shape in [&[23usize][..], &[37, 23], &[1]] {
            let ins: &[(&str, &[usize])] =
                &[("a", &[37, 19]), ("b", &[19, 23]), ("bias", bias_shape)];
            let ops: Vec<OpDef> = vec![
                ("tt.dot", "mm", &["a", "b"], json!({})),
                ("tt.add", "y", &["mm", "bias"], json!({})),
                (act, "r", &["y"], json!({})),
            ];
            let g = graph(ins, &ops, None);
            check(&g, &[Pattern::MatmulBias]);
            let k = run_with(&g, Box::new(DslKernels::default()), 5);
            assert!(
                k[0].starts_with("dsl:fused_matmul_epilogue"),
                "{act}: {k:?}"
            );
            let k = run_with(&g, Box::new(MlxMatmulEpilogueKernels::default()), 6);
            assert!(k[0].starts_with("mlx:matmul+dsl:epilogue"), "{act}: {k:?}");
        }
    }
    // The tanh form of GELU, spelled out and absorbed into the epilogue.
    let ins: &[(&str, &[usize])] = &[("a", &[33, 40]), ("b", &[40, 17]), ("bias", &[17])];
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let ops: Vec<OpDef> = vec![
        ("tt.dot", "mm", &["a", "b"], json!({})),
        ("tt.add", "x", &["mm", "bias"], json!({})),
        ("tt.mul", "x2", &["x", "x"], json!({})),
        ("tt.mul", "x3", &["x2", "x"], json!({})),
        ("tt.mul", "k3", &["x3"], json!({"scalar": 0.044715})),
        ("tt.add", "in", &["x", "k3"], json!({})),
        ("tt.mul", "u", &["in"], json!({"scalar": c})),
        ("tt.tanh", "t", &["u"], json!({})),
        ("tt.add", "o", &["t"], json!({"scalar": 1.0})),
        ("tt.mul", "h", &["x"], json!({"scalar": 0.5})),
        ("tt.mul", "y", &["h", "o"], json!({})),
    ];
    let g = graph(ins, &ops, None);
    let (fused, _) = fuse(&g);
    let grp = fused.groups().next().unwrap();
    assert!(
        matches!(
            grp.params,
            PatternParams::MatmulBias {
                activation: Some(Activation::GeluTanh),
                ..
            }
        ),
        "{:?}",
        grp.params
    );
    let k = run_with(&g, Box::new(DslKernels::default()), 7);
    assert!(k[0].starts_with("dsl:fused_matmul_epilogue"), "{k:?}");
    let k = run_with(&g, Box::new(MlxMatmulEpilogueKernels::default()), 7);
    assert!(k[0].starts_with("mlx:matmul+dsl:epilogue"), "{k:?}");
}

#[test]
fn conv_bias_activation_as_mlx_conv_with_dsl_epilogue() {
    for act in ["tt.relu", "tt.silu", "tt.gelu"] {
        let ins: &[(&str, &[usize])] =
            &[("x", &[2, 9, 7, 3]), ("w", &[5, 3, 2, 3]), ("bias", &[5])];
        let ops: Vec<OpDef> = vec![
            ("tt.conv2d", "c", &["x", "w"], json!({})),
            ("tt.add", "y", &["c", "bias"], json!({})),
            (act, "r", &["y"], json!({})),
        ];
        let g = graph(ins, &ops, None);
        check(&g, &[Pattern::ConvBiasActivation]);
        let k = run_with(&g, Box::new(DslKernels::default()), 8);
        assert!(k[0].starts_with("mlx:conv2d+dsl:epilogue"), "{act}: {k:?}");
    }
}

#[test]
fn attention_runs_as_mlx_fused_attention() {
    // Ragged: Lq != Lk, D != Dv; k given transposed and not.
    let ins: &[(&str, &[usize])] = &[("q", &[3, 7, 12]), ("k", &[3, 9, 12]), ("v", &[3, 9, 5])];
    let g = graph(ins, &attention_ops(-1), None);
    check(&g, &[Pattern::Attention]);
    let k = run_with(&g, Box::new(DslKernels::default()), 9);
    assert!(
        k[0].starts_with("mlx:fast::scaled_dot_product_attention"),
        "{k:?}"
    );
    let ins: &[(&str, &[usize])] = &[("q", &[7, 12]), ("kt", &[12, 9]), ("v", &[9, 5])];
    let ops: Vec<OpDef> = vec![
        ("tt.dot", "s", &["q", "kt"], json!({})),
        ("tt.mul", "sc", &["s"], json!({"scalar": 0.3})),
        ("tt.softmax", "p", &["sc"], json!({"axis": -1})),
        ("tt.dot", "o", &["p", "v"], json!({})),
    ];
    let g = graph(ins, &ops, None);
    check(&g, &[Pattern::Attention]);
}

#[test]
fn hierarchical_reductions_run_as_dsl_reduce_kernels() {
    type Case<'a> = (Vec<(&'a str, &'a [usize])>, Vec<OpDef<'a>>);
    let cases: Vec<Case> = vec![
        // Two sums over trailing axes, ragged.
        (
            vec![("x", &[5, 7, 33])],
            vec![
                ("tt.sum", "s1", &["x"], json!({"axis": 2})),
                ("tt.sum", "s2", &["s1"], json!({"axis": 1})),
            ],
        ),
        // Max over a leading and a trailing axis (the transposed path), keep_dims mixed.
        (
            vec![("x", &[3, 6, 5, 11])],
            vec![
                ("tt.max", "a", &["x"], json!({"axis": 3, "keep_dims": true})),
                ("tt.max", "b", &["a"], json!({"axis": 0})),
            ],
        ),
        // Sum of squares over a row longer than one block.
        (
            vec![("x", &[9, 2500])],
            vec![
                ("tt.square", "sq", &["x"], json!({})),
                ("tt.sum", "s", &["sq"], json!({"axis": -1})),
            ],
        ),
        // Mean of a two-input prologue with a broadcast operand, over the leading axis.
        (
            vec![("x", &[17, 6]), ("w", &[6])],
            vec![
                ("tt.mul", "p", &["x", "w"], json!({})),
                ("tt.mean", "m", &["p"], json!({"axis": 0})),
            ],
        ),
        // Min, reduced to a scalar.
        (
            vec![("x", &[4, 9])],
            vec![
                ("tt.exp", "e", &["x"], json!({})),
                ("tt.min", "m", &["e"], json!({})),
            ],
        ),
    ];
    for (ins, ops) in &cases {
        let g = graph(ins, ops, None);
        check(&g, &[Pattern::HierarchicalReduction]);
        let k = run_with(&g, Box::new(DslKernels::default()), 10);
        assert!(k[0].starts_with("dsl:fused_reduce"), "{ops:?}: {k:?}");
    }
}

/// `n` ops: blocks of a decomposed softmax (max, sub, exp, sum, div) each followed by an
/// elementwise chain, so fusion finds thousands of groups of several patterns.
fn big_graph(blocks: usize) -> Graph {
    let mut ops = Vec::new();
    let mut prev = "x".to_string();
    let axis = json!({"axis": -1, "keep_dims": true});
    for b in 0..blocks {
        let id = |s: &str| format!("{s}{b}");
        ops.push(json!({"type": "tt.max", "id": id("m"), "inputs": [prev], "args": axis}));
        ops.push(json!({"type": "tt.sub", "id": id("d"), "inputs": [prev, id("m")]}));
        ops.push(json!({"type": "tt.exp", "id": id("e"), "inputs": [id("d")]}));
        ops.push(json!({"type": "tt.sum", "id": id("s"), "inputs": [id("e")], "args": axis}));
        ops.push(json!({"type": "tt.div", "id": id("p"), "inputs": [id("e"), id("s")]}));
        ops.push(json!({"type": "tt.mul", "id": id("q"), "inputs": [id("p"), "x"]}));
        ops.push(json!({"type": "tt.add", "id": id("r"), "inputs": [id("q"), "x"]}));
        ops.push(json!({"type": "tt.exp", "id": id("t"), "inputs": [id("r")]}));
        prev = id("t");
    }
    let doc = json!({"inputs": [{"id": "x", "shape": [4, 32]}], "ops": ops, "outputs": [prev]});
    Graph::from_json(&doc.to_string()).unwrap()
}

#[test]
fn a_hundred_thousand_ops_fuse_and_plan_in_linear_time() {
    use std::time::Instant;
    use triton_metal::graph::{plan_fused, plan_graph};
    use triton_metal::opt::HardwareProfile;
    let hw = HardwareProfile::named("m1").unwrap();
    // Quadratic work (a scan of the graph per op or per fused group) took minutes at this
    // size; linear work takes well under a second per pass.
    let g = big_graph(12_500);
    assert_eq!(g.ops.len(), 100_000);
    let t = Instant::now();
    let plans = plan_graph(&g, &hw);
    let (fused, summary) = fuse(&g);
    let fused_plans = plan_fused(&fused, &hw);
    let took = t.elapsed();
    assert_eq!(plans.len(), 100_000);
    assert!(
        summary.groups.len() >= 12_500,
        "{} groups",
        summary.groups.len()
    );
    assert_eq!(fused_plans.len(), summary.nodes_after);
    assert!(took.as_secs() < 60, "took {took:?}");
    // The same fusion as on a small graph, block for block.
    let (_, small) = fuse(&big_graph(3));
    assert_eq!(summary.groups.len(), small.groups.len() / 3 * 12_500);
    let per_block: Vec<Pattern> = small
        .groups
        .iter()
        .take(small.groups.len() / 3)
        .map(|g| g.pattern)
        .collect();
    assert!(summary.groups.iter().map(|g| g.pattern).eq(per_block
        .iter()
        .copied()
        .cycle()
        .take(summary.groups.len())));
}
