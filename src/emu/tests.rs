//! Hand-written MSL run through the emulator. Each test skips (with a notice) when clang is
//! missing, unless `TRITON_METAL_REQUIRE_EMU` is set.

use super::*;

fn go(test: &str) -> bool {
    match Emulator::should_run(test) {
        Ok(run) => run,
        Err(e) => panic!("{e}"),
    }
}

fn f32s(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7) % 13) as f32 - 6.0).collect()
}

#[test]
fn vector_add_with_bounds_check() {
    if !go("vector_add_with_bounds_check") {
        return;
    }
    let n = 1000;
    let (x, y) = (f32s(n), (0..n).map(|i| i as f32).collect::<Vec<_>>());
    let src = "uint i = thread_position_in_grid.x;\n  if (i < n) out[i] = x[i] + y[i];";
    let l = MetalLaunch::new("vadd", src)
        .input(EmuBuffer::new("x", &[n], &x))
        .input(EmuBuffer::new("y", &[n], &y))
        .input(EmuBuffer::scalar("n", n as u32))
        .output(OutputSpec::new("out", DType::F32, &[n]))
        .grid([1024, 1, 1])
        .threadgroup([256, 1, 1]);
    let out = run_all_orders(&l).unwrap()[0].to_vec::<f32>().unwrap();
    for i in 0..n {
        assert_eq!(out[i], x[i] + y[i]);
    }
}

const REDUCE: &str = r#"
  threadgroup float partial[32];
  uint lid = thread_index_in_threadgroup;
  float v = 0.0f;
  for (uint i = lid; i < n; i += threads_per_threadgroup.x) v += x[i];
  v = simd_sum(v);
  if (thread_index_in_simdgroup == 0) partial[simdgroup_index_in_threadgroup] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (simdgroup_index_in_threadgroup == 0) {
    float p = lid < simdgroups_per_threadgroup ? partial[lid] : 0.0f;
    p = simd_sum(p);
    if (lid == 0) out[0] = p;
  }
"#;

#[test]
fn threadgroup_reduction_with_simd_sum() {
    if !go("threadgroup_reduction_with_simd_sum") {
        return;
    }
    let n = 5000;
    let x: Vec<f32> = (0..n).map(|i| (i % 10) as f32).collect();
    let l = MetalLaunch::new("reduce", REDUCE)
        .input(EmuBuffer::new("x", &[n], &x))
        .input(EmuBuffer::scalar("n", n as u32))
        .output(OutputSpec::new("out", DType::F32, &[1]))
        .grid([512, 1, 1])
        .threadgroup([512, 1, 1]);
    let out = run_all_orders(&l).unwrap()[0].to_vec::<f32>().unwrap();
    assert_eq!(out[0], x.iter().sum::<f32>());
}

fn shift(barrier: bool, order: LaneOrder) -> Result<Vec<f32>> {
    let src = format!(
        "threadgroup float tmp[64];\n  uint i = thread_position_in_threadgroup.x;\n  tmp[i] = x[i];\n  {}\n  out[i] = i > 0 ? tmp[i - 1] : 0.0f;",
        if barrier { "threadgroup_barrier(mem_flags::mem_threadgroup);" } else { "" }
    );
    let x: Vec<f32> = (1..=64).map(|i| i as f32).collect();
    let l = MetalLaunch::new("shift", &src)
        .input(EmuBuffer::new("x", &[64], &x))
        .output(OutputSpec::new("out", DType::F32, &[64]))
        .grid([64, 1, 1])
        .threadgroup([64, 1, 1])
        .lane_order(order);
    run(&l)?[0].to_vec::<f32>()
}

#[test]
fn missing_barrier_is_caught_in_reverse_order() {
    if !go("missing_barrier_is_caught_in_reverse_order") {
        return;
    }
    let want: Vec<f32> = (0..64).map(|i| i as f32).collect();
    assert_eq!(shift(true, LaneOrder::Forward).unwrap(), want);
    assert_eq!(shift(true, LaneOrder::Reverse).unwrap(), want);
    // Forward order happens to work: each writer runs before its reader.
    assert_eq!(shift(false, LaneOrder::Forward).unwrap(), want);
    // Reverse order reads threadgroup memory before it is written: the fill pattern shows.
    let bad = shift(false, LaneOrder::Reverse).unwrap();
    assert!(
        bad[1..].iter().all(|v| !(1.0..=64.0).contains(v)),
        "{bad:?}"
    );
}

/// Two phases through one staging array: the mean from the simdgroups' partial sums, then
/// the sum of deviations. `barrier` is the one between reading the partial sums and
/// overwriting them with the deviations.
///
/// Lane 7 of each simdgroup stages its sum. In lane order the lane that completes a
/// collective (the last to arrive: lane 31 forward, lane 0 reverse) runs on at once, so a
/// writer at either end would overwrite its partial sum while lower (higher) simdgroups
/// have yet to read it, and the race would show in plain lane order too.
fn two_phase_launch(barrier: bool) -> MetalLaunch {
    let src = format!(
        r#"
  threadgroup float stage[4];
  uint lid = thread_index_in_threadgroup;
  uint sg = simdgroup_index_in_threadgroup;
  float v = x[lid];
  float m = simd_sum(v);
  if (thread_index_in_simdgroup == 7) stage[sg] = m;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  m = (stage[0] + stage[1] + stage[2] + stage[3]) / 128.0f;
  {}
  float s = simd_sum(v - m);
  if (thread_index_in_simdgroup == 7) stage[sg] = s;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[lid] = stage[0] + stage[1] + stage[2] + stage[3];"#,
        if barrier {
            "threadgroup_barrier(mem_flags::mem_threadgroup);"
        } else {
            ""
        }
    );
    let x: Vec<f32> = (0..128).map(|i| ((i * 37) % 128) as f32).collect();
    MetalLaunch::new("two_phase", &src)
        .input(EmuBuffer::new("x", &[128], &x))
        .output(OutputSpec::new("out", DType::F32, &[128]))
        .grid([128, 1, 1])
        .threadgroup([128, 1, 1])
}

fn two_phase(barrier: bool, order: LaneOrder) -> Result<Vec<f32>> {
    run(&two_phase_launch(barrier).lane_order(order))?[0].to_vec::<f32>()
}

#[test]
fn a_missing_barrier_after_a_collective_needs_a_simdgroup_to_run_ahead() {
    if !go("a_missing_barrier_after_a_collective_needs_a_simdgroup_to_run_ahead") {
        return;
    }
    let want = two_phase(true, LaneOrder::Forward).unwrap();
    for order in LaneOrder::ALL {
        assert_eq!(two_phase(true, order).unwrap(), want, "{order}");
    }
    // In lane order every thread reads the partial sums before any writer resumes from its
    // second simd_sum (a pass over all threads lies between), so the race stays hidden ...
    assert_eq!(two_phase(false, LaneOrder::Forward).unwrap(), want);
    assert_eq!(two_phase(false, LaneOrder::Reverse).unwrap(), want);
    // ... until one simdgroup runs ahead and overwrites a partial sum another still reads.
    for order in [LaneOrder::SimdgroupsForward, LaneOrder::SimdgroupsReverse] {
        assert_ne!(two_phase(false, order).unwrap(), want, "{order}");
    }
    match run_all_orders(&two_phase_launch(false)) {
        Err(Error::Runtime { msg, .. }) => assert!(msg.contains("SIMD-group-ahead"), "{msg}"),
        other => panic!("expected the missing barrier to be reported, got {other:?}"),
    }
    run_all_orders(&two_phase_launch(true)).unwrap();
}

#[test]
fn simd_prefix_sums_shuffles_and_ballot() {
    if !go("simd_prefix_sums_shuffles_and_ballot") {
        return;
    }
    let src = r#"
  uint i = thread_position_in_grid.x;
  uint lane = thread_index_in_simdgroup;
  float v = x[i];
  inc[i] = simd_prefix_inclusive_sum(v);
  exc[i] = simd_prefix_exclusive_sum(v);
  float s = simd_shuffle_xor(v, 1u) + simd_shuffle(v, 0u) * 0.0f + simd_max(v) * 0.0f;
  uint64_t b = uint64_t(simd_ballot(v > 2.0f));
  misc[i] = lane == 0 ? float(b & 0xffffffffu) : s;
"#;
    let x: Vec<f32> = (0..64).map(|i| (i % 5) as f32).collect();
    let l = MetalLaunch::new("scan", src)
        .input(EmuBuffer::new("x", &[64], &x))
        .output(OutputSpec::new("inc", DType::F32, &[64]))
        .output(OutputSpec::new("exc", DType::F32, &[64]))
        .output(OutputSpec::new("misc", DType::F32, &[64]))
        .grid([64, 1, 1])
        .threadgroup([64, 1, 1]);
    let out = run_all_orders(&l).unwrap();
    let (inc, exc, misc) = (
        out[0].to_vec::<f32>().unwrap(),
        out[1].to_vec::<f32>().unwrap(),
        out[2].to_vec::<f32>().unwrap(),
    );
    for g in 0..2 {
        let mut acc = 0.0;
        let mut ballot = 0u64;
        for l in 0..32 {
            let i = g * 32 + l;
            assert_eq!(exc[i], acc);
            acc += x[i];
            assert_eq!(inc[i], acc);
            if x[i] > 2.0 {
                ballot |= 1 << l;
            }
            if l > 0 {
                assert_eq!(misc[i], x[i ^ 1]);
            }
        }
        assert_eq!(misc[g * 32], (ballot & 0xffff_ffff) as f32);
    }
}

#[test]
fn atomic_histogram() {
    if !go("atomic_histogram") {
        return;
    }
    let n = 3000;
    let x: Vec<u32> = (0..n).map(|i| (i * 31 % 17) as u32 % 8).collect();
    let src = "uint i = thread_position_in_grid.x;\n  if (i < n) atomic_fetch_add_explicit(&hist[x[i]], 1, memory_order_relaxed);";
    let l = MetalLaunch::new("hist", src)
        .input(EmuBuffer::new("x", &[n], &x))
        .input(EmuBuffer::scalar("n", n as u32))
        .output(OutputSpec::new("hist", DType::I32, &[8]).init(0.0))
        .atomic_outputs(true)
        .grid([3072, 1, 1])
        .threadgroup([256, 1, 1])
        .workers(2);
    let hist = run_all_orders(&l).unwrap()[0].to_vec::<i32>().unwrap();
    let mut want = [0i32; 8];
    for v in &x {
        want[*v as usize] += 1;
    }
    assert_eq!(hist, want);
}

#[test]
fn simdgroup_matrix_matmul_8x8() {
    if !go("simdgroup_matrix_matmul_8x8") {
        return;
    }
    // C = A * B + I via threadgroup staging, loads with an origin and a transposed B.
    let src = r#"
  threadgroup float ta[64];
  uint lane = thread_index_in_simdgroup;
  for (uint k = lane; k < 64; k += 32) ta[k] = a[k];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_float8x8 ma, mb, mc;
  simdgroup_load(ma, ta, 8);
  simdgroup_load(mb, bt, 16, ulong2(8, 0), true);
  mc = simdgroup_float8x8(1.0f);
  simdgroup_multiply_accumulate(mc, ma, mb, mc);
  simdgroup_store(mc, c, 8);
  simdgroup_half8x8 h = make_filled_simdgroup_matrix<half, 8, 8>(half(2));
  simdgroup_half8x8 hh;
  simdgroup_multiply(hh, h, h);
  simdgroup_store(hh, d, 8);
"#;
    let a: Vec<f32> = (0..64).map(|i| ((i * 5) % 7) as f32 - 3.0).collect();
    // bt is 8 rows x 16 columns; B^T sits in columns 8..16.
    let b: Vec<f32> = (0..64).map(|i| ((i * 3) % 11) as f32 - 5.0).collect();
    let mut bt = vec![0f32; 128];
    for r in 0..8 {
        for c in 0..8 {
            bt[c * 16 + 8 + r] = b[r * 8 + c];
        }
    }
    let l = MetalLaunch::new("mma", src)
        .input(EmuBuffer::new("a", &[64], &a))
        .input(EmuBuffer::new("bt", &[128], &bt))
        .output(OutputSpec::new("c", DType::F32, &[64]))
        .output(OutputSpec::new("d", DType::F16, &[64]))
        .grid([32, 1, 1])
        .threadgroup([32, 1, 1]);
    let out = run_all_orders(&l).unwrap();
    let c = out[0].to_vec::<f32>().unwrap();
    for r in 0..8 {
        for col in 0..8 {
            let mut want = if r == col { 1.0 } else { 0.0 };
            for k in 0..8 {
                want += a[r * 8 + k] * b[k * 8 + col];
            }
            assert_eq!(c[r * 8 + col], want, "({r},{col})");
        }
    }
    let d = out[1].to_vec::<half::f16>().unwrap();
    assert!(d.iter().all(|v| v.to_f32() == 32.0));
}

#[test]
fn half_and_bfloat_arithmetic() {
    if !go("half_and_bfloat_arithmetic") {
        return;
    }
    let src = r#"
  uint i = thread_position_in_grid.x;
  half h = xh[i];
  bfloat16_t b = xb[i];
  oh[i] = h * h + 1.0h;
  ob[i] = b * b + bfloat(1.0f);
  half4 v = half4(h);
  of[i] = float(v.x + v.w) + float(b) * 0.5f + exp(0.0f) + max(float(h), -100.0f) * 0.0f;
"#;
    let xs = [0.5f32, 1.25, -3.0, 100.0, 0.1];
    let xh: Vec<half::f16> = xs.iter().map(|v| half::f16::from_f32(*v)).collect();
    let xb: Vec<half::bf16> = xs.iter().map(|v| half::bf16::from_f32(*v)).collect();
    let l = MetalLaunch::new("halfs", src)
        .input(EmuBuffer::new("xh", &[5], &xh))
        .input(EmuBuffer::new("xb", &[5], &xb))
        .output(OutputSpec::new("oh", DType::F16, &[5]))
        .output(OutputSpec::new("ob", DType::BF16, &[5]))
        .output(OutputSpec::new("of", DType::F32, &[5]))
        .grid([5, 1, 1])
        .threadgroup([32, 1, 1]);
    let out = run_all_orders(&l).unwrap();
    let (oh, ob, of) = (
        out[0].to_vec::<half::f16>().unwrap(),
        out[1].to_vec::<half::bf16>().unwrap(),
        out[2].to_vec::<f32>().unwrap(),
    );
    for i in 0..5 {
        assert_eq!(oh[i], xh[i] * xh[i] + half::f16::ONE, "half {i}");
        let bb = half::bf16::from_f32(xb[i].to_f32() * xb[i].to_f32());
        assert_eq!(ob[i], half::bf16::from_f32(bb.to_f32() + 1.0), "bfloat {i}");
        let want = (xh[i] + xh[i]).to_f32() + xb[i].to_f32() * 0.5 + 1.0;
        assert_eq!(of[i], want, "float {i}");
    }
}

#[test]
fn compile_errors_and_limits_are_errors() {
    if !go("compile_errors_and_limits_are_errors") {
        return;
    }
    let bad = MetalLaunch::new(
        "broken",
        "uint i = thread_position_in_grid.x;\n  out[i] = undefined_thing;",
    )
    .output(OutputSpec::new("out", DType::F32, &[4]))
    .grid([4, 1, 1]);
    match run(&bad) {
        Err(Error::Compile { backend, msg, .. }) => {
            assert_eq!(backend, "emulator");
            assert!(msg.contains("undefined_thing"), "{msg}");
            assert!(msg.contains("|   out[i] = undefined_thing;"), "{msg}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    let big = MetalLaunch::new("big", "out[0] = 1.0f;")
        .output(OutputSpec::new("out", DType::F32, &[1]))
        .grid([2048, 64, 1])
        .threadgroup([32, 64, 1]);
    match run(&big) {
        Err(Error::Launch { kernel, msg }) => {
            assert!(
                kernel == "big" && msg.contains("at most 1024 threads"),
                "{msg}"
            )
        }
        other => panic!("expected a launch error, got {other:?}"),
    }
    // MLX clamps the threadgroup to the grid: 32 x 1 threads are fine.
    run(&big.clone().grid([2048, 1, 1])).unwrap();
    let tg_mem = MetalLaunch::new(
        "tgmem",
        "threadgroup float a[8192];\n  threadgroup float b[16];\n  a[0] = 1.0f; b[0] = 2.0f;\n  out[0] = a[0] + b[0];",
    )
    .output(OutputSpec::new("out", DType::F32, &[1]));
    match run(&tg_mem) {
        Err(Error::Launch { kernel, msg }) => {
            assert!(
                kernel == "tgmem" && msg.contains("32832 bytes") && msg.contains("32768"),
                "{msg}"
            )
        }
        other => panic!("expected a launch error, got {other:?}"),
    }
    // A size the launch check cannot know is still checked where the kernel declares it.
    let tg_generic = MetalLaunch::new(
        "tggeneric",
        "threadgroup T a[8200];\n  a[0] = 1.0f;\n  out[0] = a[0];",
    )
    .output(OutputSpec::new("out", DType::F32, &[1]))
    .template_arg("T", TemplateArg::DType(DType::F32));
    match run(&tg_generic) {
        Err(Error::Runtime { msg, .. }) => assert!(msg.contains("32768"), "{msg}"),
        other => panic!("expected a runtime error, got {other:?}"),
    }
    let mut many =
        MetalLaunch::new("many", "out[0] = s0;").output(OutputSpec::new("out", DType::F32, &[1]));
    for i in 0..31 {
        many = many.input(EmuBuffer::scalar(&format!("s{i}"), i as f32));
    }
    match run(&many) {
        Err(Error::Launch { kernel, msg }) => {
            assert!(
                kernel == "many" && msg.contains("32 buffers") && msg.contains("at most 31"),
                "{msg}"
            )
        }
        other => panic!("expected a launch error, got {other:?}"),
    }
    let deadlock = MetalLaunch::new(
        "divergent",
        "if (thread_index_in_threadgroup < 3) threadgroup_barrier(mem_flags::mem_threadgroup);\n  else { float s = simd_sum(1.0f); out[0] = s; }",
    )
    .output(OutputSpec::new("out", DType::F32, &[1]))
    .grid([8, 1, 1])
    .threadgroup([8, 1, 1]);
    match run(&deadlock) {
        Err(Error::Runtime { msg, .. }) => assert!(msg.contains("deadlock"), "{msg}"),
        other => panic!("expected a deadlock error, got {other:?}"),
    }
}

#[test]
fn templates_shapes_partial_groups_and_attributes() {
    if !go("templates_shapes_partial_groups_and_attributes") {
        return;
    }
    // 2-D grid 10x3 with 4x2 groups: edge groups are partial (dispatchThreads).
    let src = r#"
  uint2 g = thread_position_in_grid.xy;
  if (g.x >= uint(x_shape[1])) return;
  uint idx = g.y * x_strides[0] + g.x;
  out[idx] = T(x[idx] * SCALE) + T(threads_per_threadgroup.x * 100 + threadgroups_per_grid.y * 0);
"#;
    let x: Vec<f32> = (0..30).map(|i| i as f32).collect();
    let l = MetalLaunch::new("tmpl", src)
        .input(EmuBuffer::new("x", &[3, 10], &x))
        .output(OutputSpec::new("out", DType::F32, &[30]))
        .template_arg("T", TemplateArg::DType(DType::F32))
        .template_arg("SCALE", TemplateArg::Int(3))
        .grid([10, 3, 1])
        .threadgroup([4, 2, 1]);
    let out = run_all_orders(&l).unwrap()[0].to_vec::<f32>().unwrap();
    for (i, v) in out.iter().enumerate() {
        let col = i % 10;
        let group_width = if col >= 8 { 2.0 } else { 4.0 };
        assert_eq!(*v, x[i] * 3.0 + group_width * 100.0, "element {i}");
    }
}

#[test]
fn faults_in_kernel_code_are_errors_not_crashes() {
    if !go("faults_in_kernel_code_are_errors_not_crashes") {
        return;
    }
    let div = MetalLaunch::new(
        "divzero",
        "int i = int(thread_position_in_grid.x);\n  out[i] = x[i] / (i - 5);",
    )
    .input(EmuBuffer::new("x", &[8], &[7i32; 8]))
    .output(OutputSpec::new("out", DType::I32, &[8]))
    .grid([8, 1, 1])
    .threadgroup([8, 1, 1]);
    match run(&div) {
        Err(Error::Runtime { msg, .. }) => {
            assert!(msg.contains("SIGFPE") && msg.contains("(5,0,0)"), "{msg}")
        }
        other => panic!("expected a runtime error, got {other:?}"),
    }
    let wild = MetalLaunch::new(
        "wild",
        "device float* p = (device float*)(uintptr_t)16;\n  out[0] = p[thread_position_in_grid.x];",
    )
    .output(OutputSpec::new("out", DType::F32, &[1]));
    match run(&wild) {
        Err(Error::Runtime { msg, .. }) => assert!(msg.contains("SIGSEGV"), "{msg}"),
        other => panic!("expected a runtime error, got {other:?}"),
    }
    let deep = MetalLaunch::new(
        "overflow",
        "float big[200000];\n  for (int i = 0; i < 200000; i++) big[i] = x[i % 8];\n  out[0] = big[int(x[0]) + 199990];",
    )
    .input(EmuBuffer::new("x", &[8], &[1.0f32; 8]))
    .output(OutputSpec::new("out", DType::F32, &[1]));
    match run(&deep) {
        Err(Error::Runtime { msg, .. }) => assert!(msg.contains("stack"), "{msg}"),
        other => panic!("expected a runtime error, got {other:?}"),
    }
    // The harness still works afterwards.
    vector_add_with_bounds_check();
}

#[test]
fn quad_collectives() {
    if !go("quad_collectives") {
        return;
    }
    let src = "uint i = thread_position_in_grid.x;\n  float v = x[i];\n  qs[i] = quad_sum(v);\n  qx[i] = quad_shuffle_xor(v, 2u) + quad_max(v) * 0.0f + quad_broadcast(v, 0u) * 0.0f;";
    let x: Vec<f32> = (0..48).map(|i| (i * i % 7) as f32).collect();
    let l = MetalLaunch::new("quads", src)
        .input(EmuBuffer::new("x", &[48], &x))
        .output(OutputSpec::new("qs", DType::F32, &[48]))
        .output(OutputSpec::new("qx", DType::F32, &[48]))
        .grid([48, 1, 1])
        .threadgroup([48, 1, 1]);
    let out = run_all_orders(&l).unwrap();
    let (qs, qx) = (
        out[0].to_vec::<f32>().unwrap(),
        out[1].to_vec::<f32>().unwrap(),
    );
    for i in 0..48 {
        let base = i & !3;
        assert_eq!(qs[i], x[base..base + 4].iter().sum::<f32>());
        assert_eq!(qx[i], x[i ^ 2]);
    }
}

/// Instantiates a broad slice of the shim the way generated code uses it; every value is
/// checked against Rust.
#[test]
fn metal_library_kitchen_sink() {
    if !go("metal_library_kitchen_sink") {
        return;
    }
    let header = r#"
#include <metal_stdlib>
using namespace metal;
METAL_FUNC float sq(float x) { return x * x; }
template <typename T> inline T twice(T x) { return x + x; }
"#;
    let src = r#"
  uint i = thread_position_in_grid.x;
  threadgroup atomic<float> fsum;
  threadgroup atomic_uint count;
  threadgroup float4 tile[2][4];
  if (thread_index_in_threadgroup == 0) {
    atomic_store_explicit(&fsum, 0.0f, memory_order_relaxed);
    atomic_store_explicit(&count, 0u, memory_order_relaxed);
  }
  tile[i / 4][i % 4] = float4(float(i));
  threadgroup_barrier(mem_flags::mem_threadgroup | mem_flags::mem_device);
  atomic_fetch_add_explicit(&fsum, 0.5f, memory_order_relaxed);
  atomic_fetch_add_explicit(&count, 1u, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float x = float(i) - 3.5f;
  float4 v = float4(x, 2.0f * x, float2(1.0f, -1.0f));
  int2 iv = int2(v.xy);
  ushort us = ushort(i); ulong ul = ulong(i); uchar uc = uchar(i);
  float r[16];
  r[0] = metal::precise::exp(0.0f) + fast::exp2(1.0f);            // 3
  r[1] = clamp(x, -1.0f, 1.0f);
  r[2] = select(1.0f, 2.0f, x > 0.0f);
  r[3] = as_type<float>(as_type<uint>(x));
  r[4] = dot(v.xy, float2(1.0f, 1.0f));                            // 3x
  r[5] = max(v, 0.0f).y + min(v, 0.0f).x;
  r[6] = float(iv.x + iv.y);
  r[7] = sq(rsqrt(4.0f)) + twice(1.5f);                            // 0.25 + 3
  r[8] = numeric_limits<float>::infinity() > 1e30f ? 1.0f : 0.0f;
  r[9] = isnan(NAN) && isinf(INFINITY) ? 1.0f : 0.0f;
  r[10] = float(popcount(uint(i)) + clz(1u) + ctz(8u));            // popcount + 31 + 3
  r[11] = abs(-x) + fabs(x) * 0.0f + float(abs(-3));
  r[12] = atomic_load_explicit(&fsum, memory_order_relaxed) + float(atomic_load_explicit(&count, memory_order_relaxed));
  r[13] = tile[(7 - i) / 4][(7 - i) % 4].w;
  r[14] = float(us + ul + uc) + fma(2.0f, 3.0f, 1.0f) + float(all(v.zw != float2(0.0f)));
  uint old = 5u;
  threadgroup atomic_int flag;
  if (i == 0) atomic_store_explicit(&flag, 5, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  int expected = 5;
  bool won = atomic_compare_exchange_weak_explicit(&flag, &expected, 6, memory_order_relaxed, memory_order_relaxed);
  r[15] = float(simd_sum(won ? 1u : 0u)) + float(old) * 0.0f + simd_shuffle_down(x, 1u) * 0.0f;
  for (int k = 0; k < 16; k++) out[i * 16 + k] = r[k];
"#;
    let l = MetalLaunch::new("sink", src)
        .header(header)
        .output(OutputSpec::new("out", DType::F32, &[8, 16]))
        .grid([8, 1, 1])
        .threadgroup([8, 1, 1]);
    let out = run_all_orders(&l).unwrap()[0].to_vec::<f32>().unwrap();
    for i in 0..8usize {
        let x = i as f32 - 3.5;
        let v = [x, 2.0 * x, 1.0, -1.0];
        let want = [
            3.0,
            x.clamp(-1.0, 1.0),
            if x > 0.0 { 2.0 } else { 1.0 },
            x,
            3.0 * x,
            v[1].max(0.0) + v[0].min(0.0),
            ((v[0] as i32) + (v[1] as i32)) as f32,
            3.25,
            1.0,
            1.0,
            (i.count_ones() + 31 + 3) as f32,
            x.abs() + 3.0,
            4.0 + 8.0,
            (7 - i) as f32,
            (3 * i) as f32 + 7.0 + 1.0,
            1.0,
        ];
        for k in 0..16 {
            assert_eq!(out[i * 16 + k], want[k], "thread {i}, r[{k}]");
        }
    }
}

#[test]
fn simdgroup_matrix_bfloat_half_and_transposed_loads() {
    if !go("simdgroup_matrix_bfloat_half_and_transposed_loads") {
        return;
    }
    // acc = A (bfloat) * A^T (half, loaded transposed), mixed precision into float.
    let src = r#"
  threadgroup bfloat ta[64];
  threadgroup half th[64];
  uint lane = thread_index_in_simdgroup;
  for (uint k = lane; k < 64; k += 32) { ta[k] = a[k]; th[k] = half(float(a[k])); }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_bfloat8x8 ma;
  simdgroup_half8x8 mh;
  simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  simdgroup_load(ma, ta, 8);
  simdgroup_load(mh, th, 8, ulong2(0, 0), true);
  simdgroup_multiply_accumulate(acc, ma, mh, acc);
  auto e = acc.thread_elements();
  acc.thread_elements()[0] = e[0] + 0.0f;
  simdgroup_store(acc, c, 8);
  simdgroup_store(ma, cb, 8);
"#;
    let a: Vec<half::bf16> = (0..64)
        .map(|i| half::bf16::from_f32((i % 5) as f32))
        .collect();
    let l = MetalLaunch::new("bfmma", src)
        .input(EmuBuffer::new("a", &[64], &a))
        .output(OutputSpec::new("c", DType::F32, &[64]))
        .output(OutputSpec::new("cb", DType::BF16, &[64]))
        .grid([32, 1, 1])
        .threadgroup([32, 1, 1]);
    let out = run_all_orders(&l).unwrap();
    let c = out[0].to_vec::<f32>().unwrap();
    let af: Vec<f32> = a.iter().map(|v| v.to_f32()).collect();
    for r in 0..8 {
        for col in 0..8 {
            let mut w = 0.0;
            for k in 0..8 {
                w += af[r * 8 + k] * af[col * 8 + k];
            }
            assert_eq!(c[r * 8 + col], w);
        }
    }
    assert_eq!(out[1].to_vec::<half::bf16>().unwrap(), a);
}

fn oob(name: &str, body: &str, order: LaneOrder) -> String {
    let l = MetalLaunch::new(name, body)
        .input(EmuBuffer::new("x", &[100], &f32s(100)))
        .output(OutputSpec::new("out", DType::F32, &[100]))
        .grid([128, 1, 1])
        .threadgroup([64, 1, 1])
        .lane_order(order);
    match run(&l) {
        Err(Error::Runtime { kernel, msg }) => {
            assert_eq!(kernel, name);
            msg
        }
        other => panic!("expected an out-of-bounds error, got {other:?}"),
    }
}

#[test]
fn out_of_bounds_accesses_name_the_access_buffer_element_program_and_line() {
    if !go("out_of_bounds_accesses_name_the_access_buffer_element_program_and_line") {
        return;
    }
    // The classic missing mask: the grid is rounded up and nobody checks `i < n`. The load
    // past the end faults before it could return a neighbour's bytes.
    let msg = oob(
        "nomask",
        "uint i = thread_position_in_grid.x;\n  out[i] = x[i] * 2.0f;",
        LaneOrder::Forward,
    );
    for want in [
        "a load at line ",
        "(`out[i] = x[i] * 2.0f;`)",
        "in program (1,0,0) (thread_position_in_grid (100,0,0))",
        "element offset 100 is out of bounds for input `x` (100 elements)",
    ] {
        assert!(msg.contains(want), "{want:?} not in {msg}");
    }
    let msg = oob(
        "nomask_store",
        "uint i = thread_position_in_grid.x;\n  out[i] = i < 100 ? x[i] : 0.0f;",
        LaneOrder::Forward,
    );
    assert!(
        msg.contains("a store")
            && msg.contains("element offset 100 is out of bounds for output `out`"),
        "{msg}"
    );
    // Before the start: the reverse schedules put the guard there.
    let msg = oob(
        "before",
        "int i = int(thread_position_in_grid.x);\n  if (i < 100) out[i] = x[i - 3];",
        LaneOrder::Reverse,
    );
    assert!(
        msg.contains("a load") && msg.contains("element offset -1 is out of bounds for input `x`"),
        "{msg}"
    );
    // Every schedule catches a write outside a buffer, on the far side after the launch.
    let msg = oob(
        "before_store",
        "int i = int(thread_position_in_grid.x);\n  if (i < 100) out[i - 1] = x[i];",
        LaneOrder::Forward,
    );
    assert!(
        msg.contains("wrote outside output `out` (400 bytes): byte offset -4 changed"),
        "{msg}"
    );
    assert!(run_all_orders(
        &MetalLaunch::new(
            "fine",
            "uint i = thread_position_in_grid.x;\n  if (i < 100) out[i] = x[i];"
        )
        .input(EmuBuffer::new("x", &[100], &f32s(100)))
        .output(OutputSpec::new("out", DType::F32, &[100]))
        .grid([128, 1, 1])
        .threadgroup([64, 1, 1])
    )
    .is_ok());
}
