//! Our copy of MLX's `metal_kernel` signature writer against MLX's own output, captured by
//! tracing the call under `export_function` with `verbose = true` (works without Metal).

use triton_metal::emu::{MlxKernel, SigInput};
use triton_metal::runtime::{KernelCall, MetalKernelCall, OutputSpec};
use triton_metal::{Array, DType, Result};

struct Case {
    name: &'static str,
    header: &'static str,
    source: &'static str,
    inputs: Vec<(&'static str, Array)>,
    outputs: Vec<(&'static str, DType, Vec<usize>)>,
    atomic: bool,
}

fn check(case: Case) -> Result<()> {
    let call = MetalKernelCall {
        kernel: KernelCall {
            name: case.name,
            input_names: case.inputs.iter().map(|(n, _)| n.to_string()).collect(),
            output_names: case.outputs.iter().map(|(n, _, _)| n.to_string()).collect(),
            source: case.source,
            header: case.header,
            inputs: case.inputs.iter().map(|(_, a)| a).collect(),
            outputs: case
                .outputs
                .iter()
                .map(|(_, dtype, shape)| OutputSpec {
                    shape: shape.clone(),
                    dtype: *dtype,
                })
                .collect(),
            grid: [32, 1, 1],
            threadgroup: [32, 1, 1],
            init_value: None,
        },
        atomic_outputs: case.atomic,
    };
    // MLX prints to the process's stdout, which the bridge redirects while tracing, so two
    // traces at once read each other's output: take turns.
    static TRACE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let mlx = {
        let _turn = TRACE.lock().unwrap_or_else(|e| e.into_inner());
        call.traced_source()?
    };
    let ours = MlxKernel {
        name: case.name.into(),
        header: case.header.into(),
        source: case.source.into(),
        inputs: case
            .inputs
            .iter()
            .map(|(n, a)| SigInput {
                name: n.to_string(),
                dtype: a.dtype(),
                shape: a.shape(),
            })
            .collect(),
        outputs: case
            .outputs
            .iter()
            .map(|(n, d, _)| (n.to_string(), *d))
            .collect(),
        template_args: vec![],
        atomic_outputs: case.atomic,
    }
    .source()?;
    assert_eq!(ours, mlx, "kernel `{}`", case.name);
    Ok(())
}

fn device_constant_and_scalar_inputs_with_attributes() -> Result<()> {
    check(Case {
        name: "mixed",
        header: "#define SCALE 2.0f\n",
        source: "uint i = thread_position_in_grid.x;\n  uint l = thread_index_in_simdgroup + simdgroup_index_in_threadgroup + threads_per_threadgroup.x;\n  out[i] = x[i] * SCALE + c[0] + n + float(l);",
        inputs: vec![
            ("x", Array::from_slice(&[1.0f32; 64], &[8, 8])?),
            ("c", Array::from_slice(&[1i32, 2, 3], &[3])?),
            ("n", Array::scalar(3u32)?),
        ],
        outputs: vec![("out", DType::F32, vec![64])],
        atomic: false,
    })
}

fn shape_strides_ndim_half_bfloat_and_bool() -> Result<()> {
    let h: Vec<half::f16> = (0..16).map(|i| half::f16::from_f32(i as f32)).collect();
    let b: Vec<half::bf16> = (0..16).map(|i| half::bf16::from_f32(i as f32)).collect();
    check(Case {
        name: "shapes",
        header: "",
        source: "uint i = threadgroup_position_in_grid.x;\n  o[i] = h[i] + float(b[b_ndim - 1]) + h_shape[0] + h_strides[0] + m[0];\n  p[0] = true;",
        inputs: vec![
            ("h", Array::from_slice(&h, &[4, 4])?),
            ("b", Array::from_slice(&b, &[16])?),
            ("m", Array::from_slice(&[true; 10], &[10])?),
        ],
        outputs: vec![("o", DType::F16, vec![16]), ("p", DType::Bool, vec![1])],
        atomic: false,
    })
}

fn atomic_outputs_and_integer_dtypes() -> Result<()> {
    check(Case {
        name: "atomics",
        header: "",
        source: "atomic_fetch_add_explicit(&hist[idx[thread_position_in_grid.x]], 1, memory_order_relaxed);",
        inputs: vec![
            ("idx", Array::from_slice(&[0u8; 32], &[32])?),
            ("w", Array::from_slice(&[0i64; 2], &[2])?),
        ],
        outputs: vec![("hist", DType::I32, vec![8])],
        atomic: true,
    })
}

fn mlx_closes_the_signature_early_with_shape_buffers_and_no_attributes() -> Result<()> {
    check(Case {
        name: "quirk",
        header: "",
        source: "o[0] = x_shape[0]; p[0] = 1.0f;",
        inputs: vec![("x", Array::from_slice(&[0.0f32; 8], &[8])?)],
        outputs: vec![("o", DType::F32, vec![1]), ("p", DType::F32, vec![1])],
        atomic: false,
    })
}

/// One test for every case: `traced_source` captures the process's stdout, and the test
/// harness prints each finished test's "ok" to stdout, so a capture running beside other
/// tests of this binary could pick one up.
#[test]
fn signatures_match_mlx() -> Result<()> {
    device_constant_and_scalar_inputs_with_attributes()?;
    shape_strides_ndim_half_bfloat_and_bool()?;
    atomic_outputs_and_integer_dtypes()?;
    mlx_closes_the_signature_early_with_shape_buffers_and_no_attributes()
}
