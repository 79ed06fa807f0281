//! Sample op files for the analysis tools (the seeds' `create_sample_ops.py`) and a sample
//! graph that exercises the fusion patterns.

use serde_json::{json, Value};

use super::spec::{GraphSpec, InputSpec, OpSpec};

fn op(ty: &str, id: &str, shapes: Vec<Vec<i64>>, args: Value) -> OpSpec {
    OpSpec::new(ty, id, shapes, args)
}

/// Standalone ops in the seed format: every reduction the COALESCED layout covers, plus
/// matmul, elementwise, transpose and row-wise ops for contrast. `large` adds a sweep of
/// reduction sizes and axes (including sizes above the two-stage threshold) and matmuls.
pub fn sample_ops(large: bool) -> GraphSpec {
    let mut ops = vec![
        op(
            "tt.reduce",
            "sum_reduce_1d",
            vec![vec![1024]],
            json!({"axis": 0}),
        ),
        op(
            "tt.sum",
            "sum_reduce_2d",
            vec![vec![512, 512]],
            json!({"axis": 1}),
        ),
        op(
            "tt.mean",
            "mean_rows",
            vec![vec![256, 1024]],
            json!({"axis": 1}),
        ),
        op(
            "tt.max",
            "max_cols",
            vec![vec![1024, 256]],
            json!({"axis": 0}),
        ),
        op(
            "tt.min",
            "min_rows",
            vec![vec![128, 4096]],
            json!({"axis": 1}),
        ),
        op(
            "tt.argmax",
            "argmax_rows",
            vec![vec![64, 1000]],
            json!({"axis": 1}),
        ),
        op(
            "tt.argmin",
            "argmin_rows",
            vec![vec![64, 1000]],
            json!({"axis": 1}),
        ),
        op(
            "tt.any",
            "any_rows",
            vec![vec![32, 2048]],
            json!({"axis": 1, "dtype": "bool"}),
        ),
        op(
            "tt.all",
            "all_rows",
            vec![vec![32, 2048]],
            json!({"axis": 1, "dtype": "bool"}),
        ),
        op(
            "tt.dot",
            "matmul_512",
            vec![vec![512, 512], vec![512, 512]],
            json!({}),
        ),
        op(
            "tt.add",
            "add_vectors",
            vec![vec![1_048_576], vec![1_048_576]],
            json!({}),
        ),
        op(
            "tt.mul",
            "scale_rows",
            vec![vec![256, 1024], vec![1024]],
            json!({}),
        ),
        op("tt.trans", "transpose_2d", vec![vec![1024, 512]], json!({})),
        op(
            "tt.softmax",
            "softmax_rows",
            vec![vec![128, 1024]],
            json!({"axis": -1}),
        ),
    ];
    if large {
        let kinds = ["tt.sum", "tt.mean", "tt.max", "tt.min", "tt.argmax"];
        let sizes: [[i64; 2]; 6] = [
            [128, 1024],
            [256, 1024],
            [512, 1024],
            [1024, 1024],
            [64, 16384],
            [16, 65536],
        ];
        for kind in kinds {
            for s in sizes {
                for axis in [0, 1] {
                    let id = format!(
                        "{}_{}x{}_axis{axis}",
                        kind.trim_start_matches("tt."),
                        s[0],
                        s[1]
                    );
                    ops.push(op(kind, &id, vec![s.to_vec()], json!({"axis": axis})));
                }
            }
        }
        for n in [64i64, 256, 1024, 4096] {
            ops.push(op(
                "tt.dot",
                &format!("matmul_{n}"),
                vec![vec![n, n], vec![n, n]],
                json!({"dtype": "float16"}),
            ));
        }
        ops.push(op(
            "tt.dot",
            "batched_matmul",
            vec![vec![8, 128, 64], vec![8, 64, 128]],
            json!({}),
        ));
        ops.push(op(
            "tt.conv2d",
            "conv3x3",
            vec![vec![1, 64, 64, 32], vec![64, 3, 3, 32]],
            json!({}),
        ));
        ops.push(op(
            "tt.layer_norm",
            "layer_norm_rows",
            vec![vec![512, 768]],
            json!({"eps": 1e-5}),
        ));
    }
    GraphSpec {
        inputs: vec![],
        ops,
        outputs: None,
    }
}

fn node(ty: &str, id: &str, inputs: &[&str], args: Value) -> OpSpec {
    OpSpec {
        op_type: ty.into(),
        id: Some(id.into()),
        input_shapes: None,
        inputs: Some(inputs.iter().map(|s| s.to_string()).collect()),
        args: match args {
            Value::Object(m) => m,
            _ => Default::default(),
        },
    }
}

fn input(id: &str, shape: &[i64]) -> InputSpec {
    InputSpec {
        id: id.into(),
        shape: shape.to_vec(),
        dtype: None,
    }
}

/// A small transformer block written op by op (decomposed layer norm, attention with a
/// decomposed softmax, a GELU MLP with bias, an RMS-normed SwiGLU branch, a residual FMA
/// and a sum of squares), so `fuse` has every common pattern to find.
pub fn sample_graph() -> GraphSpec {
    let (t, d, h) = (16i64, 32i64, 64i64);
    GraphSpec {
        inputs: vec![
            input("x", &[t, d]),
            input("gamma", &[d]),
            input("beta", &[d]),
            input("wq", &[d, d]),
            input("wk", &[d, d]),
            input("wv", &[d, d]),
            input("w1", &[d, h]),
            input("b1", &[h]),
            input("w2", &[h, d]),
            input("wg", &[d, h]),
            input("wu", &[d, h]),
            input("rms_w", &[d]),
            input("alpha", &[t, d]),
        ],
        ops: vec![
            node(
                "tt.mean",
                "ln_mu",
                &["x"],
                json!({"axis": -1, "keep_dims": true}),
            ),
            node("tt.sub", "ln_d", &["x", "ln_mu"], json!({})),
            node("tt.mul", "ln_sq", &["ln_d", "ln_d"], json!({})),
            node(
                "tt.mean",
                "ln_var",
                &["ln_sq"],
                json!({"axis": -1, "keep_dims": true}),
            ),
            node("tt.add", "ln_ve", &["ln_var"], json!({"scalar": 1e-5})),
            node("tt.rsqrt", "ln_r", &["ln_ve"], json!({})),
            node("tt.mul", "ln_n", &["ln_d", "ln_r"], json!({})),
            node("tt.mul", "ln_g", &["ln_n", "gamma"], json!({})),
            node("tt.add", "h0", &["ln_g", "beta"], json!({})),
            node("tt.dot", "q", &["h0", "wq"], json!({})),
            node("tt.dot", "k", &["h0", "wk"], json!({})),
            node("tt.dot", "v", &["h0", "wv"], json!({})),
            node("tt.trans", "kt", &["k"], json!({})),
            node("tt.dot", "scores", &["q", "kt"], json!({})),
            node(
                "tt.mul",
                "scaled",
                &["scores"],
                json!({"scalar": 0.17677669529663687}),
            ),
            node(
                "tt.max",
                "sm_max",
                &["scaled"],
                json!({"axis": -1, "keep_dims": true}),
            ),
            node("tt.sub", "sm_d", &["scaled", "sm_max"], json!({})),
            node("tt.exp", "sm_e", &["sm_d"], json!({})),
            node(
                "tt.sum",
                "sm_s",
                &["sm_e"],
                json!({"axis": -1, "keep_dims": true}),
            ),
            node("tt.div", "probs", &["sm_e", "sm_s"], json!({})),
            node("tt.dot", "attn", &["probs", "v"], json!({})),
            node("tt.mul", "res_scaled", &["attn", "alpha"], json!({})),
            node("tt.add", "res", &["res_scaled", "x"], json!({})),
            node("tt.dot", "mlp_h", &["res", "w1"], json!({})),
            node("tt.add", "mlp_hb", &["mlp_h", "b1"], json!({})),
            node("tt.gelu", "mlp_act", &["mlp_hb"], json!({})),
            node("tt.dot", "mlp_out", &["mlp_act", "w2"], json!({})),
            node("tt.square", "rms_sq", &["res"], json!({})),
            node(
                "tt.mean",
                "rms_ms",
                &["rms_sq"],
                json!({"axis": -1, "keep_dims": true}),
            ),
            node("tt.add", "rms_ve", &["rms_ms"], json!({"scalar": 1e-6})),
            node("tt.rsqrt", "rms_r", &["rms_ve"], json!({})),
            node("tt.mul", "rms_n", &["res", "rms_r"], json!({})),
            node("tt.mul", "rms_y", &["rms_n", "rms_w"], json!({})),
            node("tt.dot", "gate", &["rms_y", "wg"], json!({})),
            node("tt.dot", "up", &["rms_y", "wu"], json!({})),
            node("tt.silu", "gate_act", &["gate"], json!({})),
            node("tt.mul", "swiglu", &["gate_act", "up"], json!({})),
            node("tt.mul", "energy_sq", &["mlp_out", "mlp_out"], json!({})),
            node("tt.sum", "energy_rows", &["energy_sq"], json!({"axis": 1})),
            node("tt.sum", "energy", &["energy_rows"], json!({"axis": 0})),
        ],
        outputs: Some(vec!["mlp_out".into(), "swiglu".into(), "energy".into()]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{fuse, Graph, Pattern};

    #[test]
    fn samples_validate() {
        assert_eq!(Graph::from_spec(&sample_ops(false)).unwrap().ops.len(), 14);
        assert!(Graph::from_spec(&sample_ops(true)).unwrap().ops.len() > 60);
        let g = Graph::from_spec(&sample_graph()).unwrap();
        let (_, s) = fuse(&g);
        for p in [
            Pattern::LayerNorm,
            Pattern::Attention,
            Pattern::Fma,
            Pattern::MatmulBias,
            Pattern::RmsNorm,
            Pattern::SwiGlu,
            Pattern::HierarchicalReduction,
        ] {
            assert_eq!(s.count(p), 1, "{p}: {s:#?}");
        }
    }
}
