//! No panics on user input: every op kind with many operand shapes and arguments goes
//! through validation, layout planning for every profile, fusion and (when valid) the
//! MLX runner; each either works or returns an error.

use serde_json::{json, Value};
use triton_metal::graph::{
    fuse, memory_layout_for_op, random_inputs, Graph, GraphRunner, GraphSpec, OpKind, OpSpec,
};
use triton_metal::opt::HardwareProfile;

fn shapes_for(n: usize) -> Vec<Vec<Vec<i64>>> {
    let one: Vec<Vec<i64>> = vec![
        vec![],
        vec![1],
        vec![7],
        vec![4, 8],
        vec![2, 3, 4],
        vec![1, 5, 5, 3],
    ];
    let pair_pool: Vec<Vec<i64>> = vec![
        vec![4, 8],
        vec![8],
        vec![8, 4],
        vec![1, 5, 5, 3],
        vec![2, 3, 3, 3],
    ];
    match n {
        1 => one.into_iter().map(|s| vec![s]).collect(),
        2 => pair_pool
            .iter()
            .flat_map(|a| pair_pool.iter().map(move |b| vec![a.clone(), b.clone()]))
            .collect(),
        _ => vec![
            vec![vec![4, 8], vec![4, 8], vec![4, 8]],
            vec![vec![4, 8], vec![8], vec![8]],
            vec![vec![4, 8], vec![3], vec![8]],
        ],
    }
}

fn arg_sets() -> Vec<Value> {
    vec![
        json!({}),
        json!({"axis": 0}),
        json!({"axis": -1, "keep_dims": true}),
        json!({"axis": [0, 1]}),
        json!({"axis": 5}),
        json!({"scalar": 2.0}),
        json!({"scalar": 3.0, "reverse": true}),
        json!({"perm": [1, 0]}),
        json!({"shape": [-1]}),
        json!({"shape": [1099511627776i64, 1099511627776i64]}),
        json!({"dtype": "float16"}),
        json!({"dtype": "int32"}),
        json!({"eps": 1e-5}),
        json!({"op": "max", "axis": 0}),
    ]
}

#[test]
fn every_op_kind_with_odd_inputs_errors_or_runs() {
    let profiles = HardwareProfile::all();
    let runner = GraphRunner::new();
    let (mut valid, mut rejected) = (0, 0);
    for kind in OpKind::ALL {
        let (lo, hi) = kind.arity();
        for n in lo..=hi.min(3) {
            for shapes in shapes_for(n) {
                for args in arg_sets() {
                    let op = OpSpec::new(kind.name(), "op", shapes.clone(), args.clone());
                    let spec = GraphSpec {
                        inputs: vec![],
                        ops: vec![op.clone()],
                        outputs: None,
                    };
                    let graph = match Graph::from_spec(&spec) {
                        Ok(g) => g,
                        Err(e) => {
                            assert!(e.to_string().contains("op `op`"), "{e}");
                            rejected += 1;
                            continue;
                        }
                    };
                    valid += 1;
                    for hw in &profiles {
                        memory_layout_for_op(&op, hw).unwrap();
                    }
                    let (fused, _) = fuse(&graph);
                    let feeds = random_inputs(&graph.inputs, 1).unwrap();
                    // MLX may still refuse (e.g. an integer power); it must say so, not crash.
                    let _ = runner.compare(&graph, &fused, &feeds, 1e-4, 1e-5);
                }
            }
        }
    }
    assert!(
        valid > 300 && rejected > 1000,
        "valid {valid}, rejected {rejected}"
    );
}

#[test]
fn huge_shapes_are_rejected_not_overflowed() {
    let e = Graph::from_json(
        r#"{"ops":[{"type":"tt.add","id":"a","input_shapes":[[2147483647,2147483647,2147483647],[1]]}]}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("more than 2^40 elements"), "{e}");
    let e = Graph::from_json(
        r#"{"ops":[{"type":"tt.add","id":"a","input_shapes":[[2097152,1],[1,2097152]]}]}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("result"), "{e}");
}
