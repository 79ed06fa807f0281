//! The Metal emulation harness as a user of the crate sees it: write an MSL body the way
//! you would hand it to MLX's `metal_kernel`, run it on Linux, compare with Rust.
//!
//! Skips with a notice when no clang >= 15 is installed, unless `TRITON_METAL_REQUIRE_EMU`
//! is set (CI), where a missing compiler fails the test.

use triton_metal::emu::{self, EmuBuffer, Emulator, LaneOrder, MetalLaunch, OutputSpec};
use triton_metal::{DType, Error, Result};

/// Row-wise softmax, one threadgroup per row: simd reductions, threadgroup staging, two
/// barriers per phase.
const SOFTMAX: &str = r#"
  threadgroup float stage[32];
  uint row = threadgroup_position_in_grid.x;
  uint lid = thread_position_in_threadgroup.x;
  uint nthreads = threads_per_threadgroup.x;
  uint sg = simdgroup_index_in_threadgroup;
  uint lane = thread_index_in_simdgroup;
  const device float* xr = x + row * n_cols;

  float m = -INFINITY;
  for (uint c = lid; c < n_cols; c += nthreads) m = max(m, xr[c]);
  m = simd_max(m);
  if (lane == 0) stage[sg] = m;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  m = stage[0];
  for (uint s = 1; s < (nthreads + 31) / 32; s++) m = max(m, stage[s]);
  threadgroup_barrier(mem_flags::mem_threadgroup);

  float sum = 0.0f;
  for (uint c = lid; c < n_cols; c += nthreads) sum += exp(xr[c] - m);
  sum = simd_sum(sum);
  if (lane == 0) stage[sg] = sum;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  sum = 0.0f;
  for (uint s = 0; s < (nthreads + 31) / 32; s++) sum += stage[s];

  for (uint c = lid; c < n_cols; c += nthreads) out[row * n_cols + c] = exp(xr[c] - m) / sum;
"#;

fn softmax_launch(x: &[f32], rows: usize, cols: usize) -> MetalLaunch {
    MetalLaunch::new("softmax", SOFTMAX)
        .input(EmuBuffer::new("x", &[rows, cols], x))
        .input(EmuBuffer::scalar("n_cols", cols as u32))
        .output(OutputSpec::new("out", DType::F32, &[rows, cols]))
        .grid([rows * 128, 1, 1])
        .threadgroup([128, 1, 1])
}

#[test]
fn softmax_matches_rust_in_both_lane_orders() -> Result<()> {
    if !Emulator::should_run("softmax_matches_rust_in_both_lane_orders")? {
        return Ok(());
    }
    let (rows, cols) = (6, 300);
    let x: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 37) % 101) as f32 / 10.0 - 5.0)
        .collect();
    let out = emu::run_all_orders(&softmax_launch(&x, rows, cols))?[0].to_vec::<f32>()?;
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let s: f32 = row.iter().map(|v| (v - m).exp()).sum();
        for c in 0..cols {
            let want = (row[c] - m).exp() / s;
            let got = out[r * cols + c];
            assert!(
                (got - want).abs() <= 1e-6 + 1e-5 * want,
                "({r},{c}): {got} vs {want}"
            );
        }
    }
    Ok(())
}

#[test]
fn the_generated_metal_is_what_mlx_would_compile() -> Result<()> {
    // Needs no compiler: the signature writer alone.
    let launch = softmax_launch(&[0.0; 8], 1, 8);
    let msl = launch.msl()?;
    assert!(msl.starts_with(
        "[[kernel]] void custom_kernel_softmax_float_uint32_ts_float(\n  const device float* x [[buffer(0)]],\n  const constant uint32_t& n_cols [[buffer(1)]],\n  device float* out [[buffer(2)]],\n"
    ));
    assert!(
        msl.contains("  uint simdgroup_index_in_threadgroup [[simdgroup_index_in_threadgroup]],\n")
    );
    assert!(msl.contains("  uint3 threads_per_threadgroup [[threads_per_threadgroup]]) {\n"));
    let verbose = launch.signature().verbose_output()?;
    assert!(verbose.starts_with("Generated source code for `softmax`:\n```\n"));
    Ok(())
}

#[test]
fn a_forgotten_barrier_is_reported() -> Result<()> {
    if !Emulator::should_run("a_forgotten_barrier_is_reported")? {
        return Ok(());
    }
    // Reverse a block through threadgroup memory, without the barrier between the phases.
    let src = "threadgroup float t[128];\n  uint i = thread_position_in_threadgroup.x;\n  t[i] = x[i];\n  out[i] = t[127 - i];";
    let x: Vec<f32> = (0..128).map(|i| i as f32).collect();
    let launch = MetalLaunch::new("reverse", src)
        .input(EmuBuffer::new("x", &[128], &x))
        .output(OutputSpec::new("out", DType::F32, &[128]))
        .grid([128, 1, 1])
        .threadgroup([128, 1, 1]);
    match emu::run_all_orders(&launch) {
        Err(Error::Runtime { msg, .. }) => assert!(msg.contains("barrier"), "{msg}"),
        other => panic!("expected the missing barrier to be reported, got {other:?}"),
    }
    let fixed = MetalLaunch {
        source: src.replace(
            "out[i]",
            "threadgroup_barrier(mem_flags::mem_threadgroup);\n  out[i]",
        ),
        ..launch
    };
    for order in [LaneOrder::Forward, LaneOrder::Reverse] {
        let out = emu::run(&fixed.clone().lane_order(order))?[0].to_vec::<f32>()?;
        assert!(out.iter().enumerate().all(|(i, v)| *v == 127.0 - i as f32));
    }
    Ok(())
}

#[test]
fn metal_compile_errors_come_back_as_err() -> Result<()> {
    if !Emulator::should_run("metal_compile_errors_come_back_as_err")? {
        return Ok(());
    }
    let launch = MetalLaunch::new("typo", "out[0] = flaot(1);").output(OutputSpec::new(
        "out",
        DType::F32,
        &[1],
    ));
    match emu::run(&launch) {
        Err(Error::Compile { msg, .. }) => assert!(msg.contains("flaot"), "{msg}"),
        other => panic!("expected a compile error, got {other:?}"),
    }
    Ok(())
}
