//! The layout plan as the printers consume it: its text round-trips, the verifier refuses
//! plans the kernel cannot take, and for each kind of decision an override changes the
//! printed code but not the results (emulated Metal in both lane orders against an f64
//! reference and the CPU targets: the interpreter and the compiled CPU executor; CUDA
//! printed and NVRTC-compiled). The compiled CPU executor's own decisions are in
//! `cpu_plan_tests.rs`.

use super::cuda_tests::nvrtc;
use super::tests::{
    assert_close, build, emu_ok, matmul, matmul_ref, rnd, run_prog, tile_reductions,
};
use super::*;
use crate::dtype::DType::{F16, F32, I32};
use crate::emu::{EmuBuffer, OutputSpec};
use crate::ir::{Kernel, Op, OpId};
use crate::opt::barriers::When;
use crate::opt::plan::{Decision, DotLowering, KernelPlan};
use crate::opt::{Chip, HardwareProfile};

/// Drops every load's [`Decision::Ahead`]: the loads are issued in their own iteration
/// (what a loop keeping no accumulator in fragments needs).
fn drop_ring(p: &mut KernelPlan) {
    let ahead: Vec<OpId> = p
        .decisions()
        .filter(|(_, d, _)| matches!(d, Decision::Ahead { .. }))
        .map(|(o, _, _)| o)
        .collect();
    for o in ahead {
        p.remove(o);
    }
}

fn op_where(k: &Kernel, f: impl Fn(&Op) -> bool) -> OpId {
    let i = k.ops.iter().position(|o| f(&o.op)).expect("op present");
    OpId(i as u32)
}

fn mm(dtype: crate::DType) -> Kernel {
    build("mm", &[("BM", 32), ("BN", 32), ("BK", 16)], matmul(dtype))
}

#[test]
fn plan_text_round_trips_on_every_printer() {
    let k = mm(F16);
    let r = build("tiles", &[("BM", 16), ("BN", 64)], tile_reductions);
    let sm90 = LaunchOptions::default().target(HardwareProfile::of(Chip::Sm90));
    for p in [
        metal::plan(&k, &LaunchOptions::default()),
        cuda::plan(&k, &sm90),
        metal::plan(
            &r,
            &LaunchOptions::default().reduction_layout(ReductionLayout::Tiled),
        ),
    ] {
        let text = p.to_string();
        assert_eq!(KernelPlan::parse(&text).unwrap(), p, "{text}");
    }
    let text = metal::plan(&k, &LaunchOptions::default()).to_string();
    assert!(
        text.contains("dot simdgroup stage=f16 ; profile simdgroup_matrix"),
        "{text}"
    );
    assert!(text.contains("for resident=0 ;"), "{text}");
    assert!(cuda::plan(&k, &sm90)
        .to_string()
        .contains("dot mma wm=2 wn=2 fm=1 fn=2"));
    assert!(KernelPlan::parse("plan @x threads=128 matrix=none\n  op1 dot wide ; no").is_err());
}

#[test]
fn verifier_refuses_plans_the_kernel_cannot_take() {
    let k = mm(F32);
    let opts = LaunchOptions::default();
    let dot = op_where(&k, |o| matches!(o, Op::Dot { .. }));
    let for_ = op_where(&k, |o| matches!(o, Op::For { .. }));
    let refuse = |p: &KernelPlan, what: &str| {
        let e = metal::compile_with(&k, &opts, p).unwrap_err().to_string();
        assert!(e.contains(what), "{e}");
    };
    // f32 operands cannot be staged as half.
    let mut p = metal::plan(&k, &opts);
    p.set(
        dot,
        Decision::Dot(DotLowering::Simdgroup { stage: F16 }),
        "test",
    );
    refuse(&p, "dot as Simdgroup");
    // Rows of C are for one-thread programs.
    let mut p = metal::plan(&k, &opts);
    p.set(dot, Decision::Dot(DotLowering::Rows), "test");
    refuse(&p, "one-thread program");
    // A scalar dot leaves nothing to keep in fragments.
    let mut p = metal::plan(&k, &opts);
    p.set(dot, Decision::Dot(DotLowering::Fma), "test");
    refuse(&p, "carried slot 0 cannot stay in fragments");
    // A decision on an op of another kind.
    let mut p = metal::plan(&k, &opts);
    p.set(for_, Decision::Reduce(ReductionLayout::Tiled), "test");
    refuse(&p, "on a `for`");
    // A plan made for other options.
    let p = metal::plan(&k, &opts.clone().num_warps(8));
    refuse(&p, "given for kernel");
}

/// Runs the 32x32x16 matmul on emulated Metal (both lane orders) with `plan`.
fn run_mm(k: &Kernel, plan: &KernelPlan, a: &[f32], b: &[f32], half: bool) -> Vec<f32> {
    let (m, n, kk) = (37usize, 45usize, 50usize);
    let p = metal::compile_with(k, &LaunchOptions::default(), plan).unwrap();
    let buf = |name: &str, shape: &[usize], v: &[f32]| {
        if half {
            let h: Vec<half::f16> = v.iter().map(|x| half::f16::from_f32(*x)).collect();
            EmuBuffer::new(name, shape, &h)
        } else {
            EmuBuffer::new(name, shape, v)
        }
    };
    let out = run_prog(
        &p,
        &[
            buf("a_ptr", &[m, kk], a),
            buf("b_ptr", &[kk, n], b),
            EmuBuffer::scalar("M", m as i32),
            EmuBuffer::scalar("N", n as i32),
            EmuBuffer::scalar("K", kk as i32),
        ],
        &[OutputSpec::new("c_ptr", F32, &[m, n])],
        [2, 2, 1],
    );
    out[0].to_vec::<f32>().unwrap()
}

/// Runs the 32x32x16 matmul on the interpreter and the compiled CPU executor (with their
/// own plans), outputs poisoned: each target's `c`. The compiled executor only where clang
/// is found (required in CI).
fn run_mm_cpu(k: &Kernel, a: &[f32], b: &[f32], half: bool) -> Vec<Vec<f32>> {
    let (m, n, kk) = (37usize, 45usize, 50usize);
    let bytes = |v: &[f32]| -> Vec<u8> {
        if half {
            v.iter()
                .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
                .collect()
        } else {
            v.iter().flat_map(|x| x.to_le_bytes()).collect()
        }
    };
    let (ab, bb) = (bytes(a), bytes(b));
    let args = [
        CpuArg::In(&ab),
        CpuArg::In(&bb),
        CpuArg::Out,
        CpuArg::I32(m as i32),
        CpuArg::I32(n as i32),
        CpuArg::I32(kk as i32),
    ];
    cpu_runs(k, [2, 2, 1], m * n, &args)
        .into_iter()
        .map(|(_, out)| out)
        .collect()
}

/// An argument of a kernel run by [`cpu_runs`], in parameter order.
enum CpuArg<'a> {
    /// An input buffer.
    In(&'a [u8]),
    /// The f32 output (poisoned with NaN before each run).
    Out,
    /// An `i32` scalar.
    I32(i32),
}

/// Runs `k` on the interpreter and the compiled CPU executor (where clang is found, as
/// in CI) with its f32 output of `n_out` elements poisoned: `(compiled, output)` per run.
fn cpu_runs(k: &Kernel, grid: [usize; 3], n_out: usize, args: &[CpuArg]) -> Vec<(bool, Vec<f32>)> {
    let compiled = crate::emu::Emulator::should_run("compiled CPU executor").expect("clang check");
    [false, true]
        .into_iter()
        .filter(|&c| !c || compiled)
        .map(|c| {
            let mut out = vec![f32::NAN.to_bits(); n_out];
            let mut out_arg = Some(crate::exec::test_support::bytes_mut(&mut out));
            let mut xs: Vec<crate::exec::ExecArg> = args
                .iter()
                .map(|a| match a {
                    CpuArg::In(b) => crate::exec::ExecArg::from(*b),
                    CpuArg::Out => crate::exec::ExecArg::from(out_arg.take().expect("one output")),
                    CpuArg::I32(v) => crate::exec::ExecArg::from(*v),
                })
                .collect();
            crate::exec::test_support::run_on(c, k, grid, &mut xs)
                .unwrap_or_else(|e| panic!("compiled={c}: {e}"));
            drop(xs);
            (c, out.into_iter().map(f32::from_bits).collect())
        })
        .collect()
}

/// The f16-rounded matmul inputs of the plan tests (seeds `sa`, `sb`), their f64 product,
/// and the product as the CPU targets compute it, checked against the f64 one.
fn mm_inputs(k: &Kernel, sa: u64, sb: u64) -> (Vec<f32>, Vec<f32>, Vec<f64>, Vec<Vec<f32>>) {
    let (m, n, kk) = (37usize, 45usize, 50usize);
    let round = |v: Vec<f32>| -> Vec<f32> {
        v.into_iter()
            .map(|x| half::f16::from_f32(x).to_f32())
            .collect()
    };
    let a = round(rnd(m * kk, sa, -1.0, 1.0));
    let b = round(rnd(kk * n, sb, -1.0, 1.0));
    let want = matmul_ref(&a, &b, m, n, kk);
    let cpu = run_mm_cpu(k, &a, &b, true);
    for (t, got) in cpu.iter().enumerate() {
        assert_close(got, &want, 1e-5, ["interpreter", "compiled CPU"][t]);
    }
    (a, b, want, cpu)
}

#[test]
fn dot_decisions_change_the_code_not_the_result() {
    let k = mm(F16);
    let opts = LaunchOptions::default();
    let dot = op_where(&k, |o| matches!(o, Op::Dot { .. }));
    let for_ = op_where(&k, |o| matches!(o, Op::For { .. }));
    let default = metal::plan(&k, &opts);
    let mut as_float = default.clone();
    as_float.set(
        dot,
        Decision::Dot(DotLowering::Simdgroup { stage: F32 }),
        "override",
    );
    let mut not_resident = default.clone();
    not_resident.set(for_, Decision::Resident(vec![]), "override");
    let mut scalar = not_resident.clone();
    scalar.set(dot, Decision::Dot(DotLowering::Fma), "override");
    let plans = [&default, &as_float, &not_resident, &scalar];
    let srcs: Vec<String> = plans
        .iter()
        .map(|p| metal::compile_with(&k, &opts, p).unwrap().source)
        .collect();
    assert!(srcs[0].contains("simdgroup_matrix<half, 8, 8> tm_fa"));
    assert!(srcs[1].contains("simdgroup_matrix<float, 8, 8> tm_fa"));
    assert!(!srcs[1].contains("_opnd_f16"));
    // Not resident: the accumulator goes through threadgroup memory on every iteration.
    assert!(srcs[2].matches("simdgroup_store(").count() == 1);
    assert!(!srcs[0].contains("simdgroup_load(frag_c"));
    assert!(srcs[2].contains("simdgroup_load(frag_c"));
    assert!(!srcs[3].contains("simdgroup_matrix"));
    for (i, s) in srcs.iter().enumerate() {
        assert!(
            !srcs[..i].contains(s),
            "plan {i} printed the same code as an earlier one"
        );
    }
    // CUDA: tensor cores by default, the scalar loop on override; both compile.
    let sm90 = LaunchOptions::default().target(HardwareProfile::of(Chip::Sm90));
    let mut cuda_scalar = cuda::plan(&k, &sm90);
    cuda_scalar.set(for_, Decision::Resident(vec![]), "override");
    cuda_scalar.set(dot, Decision::Dot(DotLowering::Fma), "override");
    drop_ring(&mut cuda_scalar);
    let progs =
        [cuda::plan(&k, &sm90), cuda_scalar].map(|p| cuda::compile_with(&k, &sm90, &p).unwrap());
    assert!(progs[0].source.contains("mma.sync"));
    assert!(!progs[1].source.contains("mma.sync"));
    if let Some(nv) = nvrtc() {
        for p in &progs {
            nv.compile(&p.name, &p.standalone(), &p.nvrtc_arch("sm_90"))
                .unwrap();
        }
    }
    // The interpreter and the compiled CPU executor against f64, then every plan on
    // emulated Metal against f64 and the interpreter.
    let (a, b, want, cpu) = mm_inputs(&k, 11, 12);
    if !emu_ok("dot_decisions_change_the_code_not_the_result") {
        return;
    }
    let interp: Vec<f64> = cpu[0].iter().map(|x| *x as f64).collect();
    for (i, p) in plans.iter().enumerate() {
        let got = run_mm(&k, p, &a, &b, true);
        assert_close(&got, &want, 1e-5, &format!("plan {i}"));
        assert_close(
            &got,
            &interp,
            1e-5,
            &format!("plan {i} against the interpreter"),
        );
    }
}

#[test]
fn reduction_decisions_change_the_code_not_the_result() {
    let k = build("tiles", &[("BM", 16), ("BN", 64)], tile_reductions);
    let opts = LaunchOptions::default();
    let default = metal::plan(&k, &opts);
    let reduces: Vec<OpId> = default
        .decisions()
        .filter(|(_, d, _)| matches!(d, Decision::Reduce(_)))
        .map(|(o, _, _)| o)
        .collect();
    assert_eq!(reduces.len(), 3);
    for (_, d, why) in default.decisions() {
        if let Decision::Reduce(r) = d {
            assert_eq!(
                (*r, why),
                (
                    ReductionLayout::Coalesced,
                    "default: SIMD-group collectives"
                )
            );
        }
    }
    // The option and a per-op override both reach the plan.
    let tiled = metal::plan(&k, &opts.clone().reduction_layout(ReductionLayout::Tiled));
    assert!(tiled
        .decisions()
        .all(|(_, d, w)| *d == Decision::Reduce(ReductionLayout::Tiled)
            && w == "LaunchOptions::reduction_layout"));
    let mut one = default.clone();
    one.set(
        reduces[1],
        Decision::Reduce(ReductionLayout::ColumnMajor),
        "override",
    );
    let plans = [&default, &tiled, &one];
    let progs: Vec<_> = plans
        .iter()
        .map(|p| metal::compile_with(&k, &opts, p).unwrap())
        .collect();
    assert_ne!(progs[0].source, progs[1].source);
    assert_ne!(progs[0].source, progs[2].source);
    assert_ne!(progs[1].source, progs[2].source);
    let sm90 = LaunchOptions::default().target(HardwareProfile::of(Chip::Sm90));
    let mut cuda_one = cuda::plan(&k, &sm90);
    cuda_one.set(
        reduces[1],
        Decision::Reduce(ReductionLayout::ColumnMajor),
        "override",
    );
    let cu = [cuda::plan(&k, &sm90), cuda_one].map(|p| cuda::compile_with(&k, &sm90, &p).unwrap());
    assert_ne!(cu[0].source, cu[1].source);
    if let Some(nv) = nvrtc() {
        for p in &cu {
            nv.compile(&p.name, &p.standalone(), &p.nvrtc_arch("sm_90"))
                .unwrap();
        }
    }
    // The CPU targets first: their row sums against f64, their maxima and argmaxes are what
    // every emulated plan must give.
    let (m, n) = (20usize, 50usize);
    let x = rnd(m * n, 21, -3.0, 3.0);
    let want: Vec<f64> = (0..m)
        .map(|i| x[i * n..(i + 1) * n].iter().map(|v| *v as f64).sum())
        .collect();
    let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    // The compiled CPU executor takes the same overrides on its own plan.
    let cdef = cpu::plan(&k);
    let mut c_tiled = cdef.clone();
    let mut c_one = cdef.clone();
    for &r in &reduces {
        c_tiled.set(r, Decision::Reduce(ReductionLayout::Tiled), "override");
    }
    c_one.set(
        reduces[1],
        Decision::Reduce(ReductionLayout::ColumnMajor),
        "override",
    );
    let cpu_plans = [cdef, c_tiled, c_one];
    let srcs: Vec<String> = cpu_plans
        .iter()
        .map(|p| cpu::compile_with(&k, false, p).unwrap().source)
        .collect();
    assert_ne!(srcs[0], srcs[1]);
    assert_ne!(srcs[0], srcs[2]);
    assert_ne!(srcs[1], srcs[2]);
    let compiled = crate::emu::Emulator::should_run("compiled CPU executor").expect("clang check");
    let targets: Vec<Option<&KernelPlan>> = std::iter::once(None)
        .chain(cpu_plans.iter().map(Some).filter(|_| compiled))
        .collect();
    let mut cpu = Vec::new();
    for plan in targets {
        let c = plan.is_some();
        let mut rows = vec![f32::NAN.to_bits(); 32];
        let mut cols = vec![f32::NAN.to_bits(); 128];
        let mut amax = vec![u32::MAX; 32];
        let mut args = [
            crate::exec::ExecArg::from(&xb[..]),
            crate::exec::ExecArg::from(crate::exec::test_support::bytes_mut(&mut rows)),
            crate::exec::ExecArg::from(crate::exec::test_support::bytes_mut(&mut cols)),
            crate::exec::ExecArg::from(crate::exec::test_support::bytes_mut(&mut amax)),
            crate::exec::ExecArg::from(m as i32),
            crate::exec::ExecArg::from(n as i32),
        ];
        match plan {
            None => crate::exec::execute(&k, [2, 1, 1], &mut args),
            Some(p) => crate::native::execute_native_with(&k, p, [2, 1, 1], &mut args),
        }
        .unwrap_or_else(|e| panic!("compiled={c}: {e}"));
        let rows: Vec<f32> = rows[..m].iter().map(|b| f32::from_bits(*b)).collect();
        assert_close(&rows, &want, 1e-5, &format!("row sums, compiled={c}"));
        let cols: Vec<u32> = (0..2)
            .flat_map(|p| cols[p * 64..p * 64 + n].to_vec())
            .collect();
        cpu.push((cols, amax[..m].to_vec()));
    }
    assert!(cpu.windows(2).all(|w| w[0] == w[1]));
    if !emu_ok("reduction_decisions_change_the_code_not_the_result") {
        return;
    }
    let mut results = Vec::new();
    for p in &progs {
        let out = run_prog(
            p,
            &[
                EmuBuffer::new("x_ptr", &[m, n], &x),
                EmuBuffer::scalar("M", m as i32),
                EmuBuffer::scalar("N", n as i32),
            ],
            &[
                OutputSpec::new("row_sum", F32, &[32]),
                OutputSpec::new("col_max", F32, &[128]),
                OutputSpec::new("row_argmax", I32, &[32]),
            ],
            [2, 1, 1],
        );
        let rows = out[0].to_vec::<f32>().unwrap();
        assert_close(&rows[..m], &want, 1e-5, "row sums");
        let cols = out[1].to_vec::<f32>().unwrap();
        let cols: Vec<u32> = (0..2)
            .flat_map(|p| cols[p * 64..p * 64 + n].iter().map(|v| v.to_bits()))
            .collect();
        let amax = out[2].to_vec::<i32>().unwrap()[..m].to_vec();
        results.push((cols, amax));
    }
    // Max and argmax are exact: every plan gives the same bits as the CPU targets.
    assert!(results.windows(2).all(|w| w[0] == w[1]));
    let amax: Vec<u32> = results[0].1.iter().map(|v| *v as u32).collect();
    assert_eq!((&results[0].0, &amax), (&cpu[0].0, &cpu[0].1));
}

#[test]
fn chunk_width_decision_changes_the_code_not_the_result() {
    let k = build(
        "add_kernel",
        &[("BLOCK_SIZE", 1024)],
        super::tests::vector_add,
    );
    let opts = LaunchOptions::default();
    let default = metal::plan(&k, &opts);
    assert_eq!(default.vec, 4);
    assert!(
        default.vec_why.contains("vector_bytes 16"),
        "{}",
        default.vec_why
    );
    let mut narrow = default.clone();
    narrow.vec = 1;
    narrow.vec_why = "override".into();
    let mut wide = default.clone();
    wide.vec = 16;
    let e = metal::compile_with(&k, &opts, &wide)
        .unwrap_err()
        .to_string();
    assert!(e.contains("chunks of 16 elements"), "{e}");
    let progs = [&default, &narrow].map(|p| metal::compile_with(&k, &opts, p).unwrap());
    assert!(progs[0].source.contains("packed_float4"));
    assert!(!progs[1].source.contains("packed_float4"));
    let sm90 = LaunchOptions::default().target(HardwareProfile::of(Chip::Sm90));
    let mut cuda_narrow = cuda::plan(&k, &sm90);
    cuda_narrow.vec = 1;
    let cu =
        [cuda::plan(&k, &sm90), cuda_narrow].map(|p| cuda::compile_with(&k, &sm90, &p).unwrap());
    assert_ne!(cu[0].source, cu[1].source);
    if let Some(nv) = nvrtc() {
        for p in &cu {
            nv.compile(&p.name, &p.standalone(), &p.nvrtc_arch("sm_90"))
                .unwrap();
        }
    }
    // The compiled CPU executor: 8 floats per chunk (profile vector_bytes 32), or 1.
    let cdef = cpu::plan(&k);
    assert_eq!(cdef.vec, 8, "{}", cdef.vec_why);
    let mut c_narrow = cdef.clone();
    c_narrow.vec = 1;
    c_narrow.vec_why = "override".into();
    let c_srcs = [&cdef, &c_narrow].map(|p| cpu::compile_with(&k, false, p).unwrap().source);
    assert!(c_srcs[0].contains("tm_vload<8>"));
    assert!(!c_srcs[1].contains("tm_vload<8>"));
    let n = 3000usize;
    let (x, y) = (rnd(n, 31, -5.0, 5.0), rnd(n, 32, -5.0, 5.0));
    let want: Vec<f64> = x.iter().zip(&y).map(|(a, b)| (a + b) as f64).collect();
    let (xb, yb): (Vec<u8>, Vec<u8>) = (
        x.iter().flat_map(|v| v.to_le_bytes()).collect(),
        y.iter().flat_map(|v| v.to_le_bytes()).collect(),
    );
    let compiled = crate::emu::Emulator::should_run("compiled CPU executor").expect("clang check");
    let targets: Vec<Option<&KernelPlan>> = std::iter::once(None)
        .chain(
            [&cdef, &c_narrow]
                .map(Some)
                .into_iter()
                .filter(|_| compiled),
        )
        .collect();
    for plan in targets {
        let mut out = vec![f32::NAN.to_bits(); n];
        let mut args = [
            crate::exec::ExecArg::from(&xb[..]),
            crate::exec::ExecArg::from(&yb[..]),
            crate::exec::ExecArg::from(crate::exec::test_support::bytes_mut(&mut out)),
            crate::exec::ExecArg::from(n as i32),
        ];
        let grid = [n.div_ceil(1024), 1, 1];
        match plan {
            None => crate::exec::execute(&k, grid, &mut args),
            Some(p) => crate::native::execute_native_with(&k, p, grid, &mut args),
        }
        .unwrap_or_else(|e| panic!("{e}"));
        let out: Vec<f32> = out.into_iter().map(f32::from_bits).collect();
        assert_close(
            &out,
            &want,
            0.0,
            &format!("add, CPU chunks {:?}", plan.map(|p| p.vec)),
        );
    }
    if !emu_ok("chunk_width_decision_changes_the_code_not_the_result") {
        return;
    }
    for p in &progs {
        let out = run_prog(
            p,
            &[
                EmuBuffer::new("x_ptr", &[n], &x),
                EmuBuffer::new("y_ptr", &[n], &y),
                EmuBuffer::scalar("n_elements", n as i32),
            ],
            &[OutputSpec::new("out_ptr", F32, &[n])],
            [n.div_ceil(1024), 1, 1],
        );
        assert_close(&out[0].to_vec::<f32>().unwrap(), &want, 0.0, "add");
    }
}

#[test]
fn threadgroup_memory_decisions_change_the_code_not_the_result() {
    let k = mm(F16);
    let opts = LaunchOptions::default();
    let dot = op_where(&k, |o| matches!(o, Op::Dot { .. }));
    let for_ = op_where(&k, |o| matches!(o, Op::For { .. }));
    let default = metal::plan(&k, &opts);
    assert_eq!(default.k_slice(dot), Some(16));
    assert_eq!(default.band_rows(for_, 32, 32), Some(32));
    let mut no_reuse = default.clone();
    no_reuse.set_reuse(false);
    let mut sliced = default.clone();
    sliced.set_k_slice(dot, 8, "override");
    let mut banded = default.clone();
    banded.set_band_rows(for_, (32, 32), 8, "override");
    let plans = [&default, &no_reuse, &sliced, &banded];
    let progs: Vec<_> = plans
        .iter()
        .map(|p| metal::compile_with(&k, &opts, p).unwrap())
        .collect();
    // The default plan is the one the printer spells, buffers placed.
    assert_eq!(progs[0].plan, default);
    // Reuse: the operands (A 32x(16+8) and B 16x(32+8) halves, rows padded against bank
    // conflicts: 2816 bytes) and the accumulator leaving the loop (4 KB) are never live
    // together, so they share bytes; without reuse each has its own.
    let sizes =
        |p: &KernelPlan| -> Vec<usize> { p.arena.buffers.iter().map(|b| b.bytes).collect() };
    assert!(sizes(&progs[0].plan).contains(&2816), "{}", progs[0].plan);
    assert!(sizes(&progs[0].plan).contains(&4096), "{}", progs[0].plan);
    let max = sizes(&progs[0].plan).into_iter().max().unwrap();
    let sum: usize = sizes(&progs[1].plan).into_iter().sum();
    assert_eq!(progs[0].threadgroup_mem_bytes, max);
    assert_eq!(progs[1].threadgroup_mem_bytes, sum);
    assert!(sum > max);
    // K in slices of 8: two stagings per dot; C in bands of 8 rows after the loop.
    assert!(
        progs[2].source.contains("tm_kc += 8u"),
        "{}",
        progs[2].source
    );
    assert!(!progs[0].source.contains("tm_kc"));
    assert!(
        progs[3].source.contains("tm_band += 8u"),
        "{}",
        progs[3].source
    );
    assert!(!progs[0].source.contains("tm_band"));
    // Slices of 8: A's 16-byte rows need no padding, B's take 8 halves more.
    assert!(sizes(&progs[2].plan).contains(&1152), "{}", progs[2].plan);
    assert!(sizes(&progs[3].plan).contains(&1024), "{}", progs[3].plan);
    for (i, p) in progs.iter().enumerate() {
        assert!(
            !progs[..i].iter().any(|q| q.source == p.source),
            "plan {i} printed the same code as an earlier one"
        );
        // Placed plans round-trip through their text and pass the verifier.
        let text = p.plan.to_string();
        assert_eq!(KernelPlan::parse(&text).unwrap(), p.plan, "{text}");
        p.plan.verify(&k).unwrap();
    }
    let text = progs[1].plan.to_string();
    assert!(text.contains("reuse=off"), "{text}");
    assert!(text.contains("acc.out f32 bytes=4096"), "{text}");
    // Each buffer carries one explicit conversion: the dot's operands into staged tiles, the
    // loop's accumulator (its result) out of fragments.
    let (a, b) = match &k.op(dot).op {
        Op::Dot { a, b, .. } => (*a, *b),
        _ => unreachable!(),
    };
    let res = k.op(for_).results.get(0).unwrap();
    for want in [
        format!(
            "convert {dot} %{},%{} blocked -> dot.staged via #",
            a.index(),
            b.index()
        ),
        format!("convert {for_} %{} fragments -> blocked via #", res.index()),
    ] {
        assert!(text.contains(&want), "{want}\n{text}");
    }
    // The dot's accumulator stays in the loop's fragments: the loop converts it.
    assert!(
        text.contains(&format!(
            "{dot} band 32x32 rows=32 ; if the loop does not keep"
        )),
        "{text}"
    );
    assert!(
        text.contains("kslice=16 ; A and B as f16 (rows padded against bank conflicts) take 2816"),
        "{text}"
    );
    // A placement whose buffers overlap while live together is refused, as is a plan
    // without a buffer the printer needs.
    let mut overlap = progs[0].plan.clone();
    overlap.arena.reuse = false;
    let e = metal::compile_with(&k, &opts, &overlap)
        .unwrap_err()
        .to_string();
    assert!(e.contains("live together and overlap"), "{e}");
    let mut missing = progs[0].plan.clone();
    missing.arena.buffers.retain(|b| b.bytes != 4096);
    let e = metal::compile_with(&k, &opts, &missing)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("{for_} (`for` at"))
            && e.contains("needs a threadgroup buffer of 4096 bytes of f32 for acc.out"),
        "{e}"
    );
    // CUDA: the same overrides reach the tensor-core path; all compile. One stage, so the
    // operands are staged by the dot in the arena (not copied ahead into a ring).
    let sm90 = LaunchOptions {
        num_stages: 1,
        ..LaunchOptions::default().target(HardwareProfile::of(Chip::Sm90))
    };
    let mut cdef = cuda::plan(&k, &sm90);
    // The accumulator leaves its fragments through shared memory (by default it is stored
    // from them).
    assert!(cdef.keeps_fragments(for_), "{cdef}");
    cdef.set_fragments(for_, false, "override");
    let mut c_no_reuse = cdef.clone();
    c_no_reuse.set_reuse(false);
    let mut c_banded = cdef.clone();
    c_banded.set_band_rows(for_, (32, 32), 8, "override");
    let cu = [cdef, c_no_reuse, c_banded].map(|p| cuda::compile_with(&k, &sm90, &p).unwrap());
    assert!(cu[1].shared_mem_bytes > cu[0].shared_mem_bytes);
    assert!(cu[2].source.contains("tm_band += 8u"), "{}", cu[2].source);
    assert!(!cu[0].source.contains("tm_band"));
    assert_ne!(cu[0].source, cu[1].source);
    if let Some(nv) = nvrtc() {
        for p in &cu {
            nv.compile(&p.name, &p.standalone(), &p.nvrtc_arch("sm_90"))
                .unwrap();
        }
    }
    let (a, b, want, cpu) = mm_inputs(&k, 41, 42);
    if !emu_ok("threadgroup_memory_decisions_change_the_code_not_the_result") {
        return;
    }
    let interp: Vec<f64> = cpu[0].iter().map(|x| *x as f64).collect();
    for (i, p) in plans.iter().enumerate() {
        let got = run_mm(&k, p, &a, &b, true);
        assert_close(&got, &want, 1e-5, &format!("plan {i}"));
        assert_close(
            &got,
            &interp,
            1e-5,
            &format!("plan {i} against the interpreter"),
        );
    }
}

#[test]
fn the_budget_names_the_profile_field_that_set_it() {
    let k = mm(F16);
    let apple: Vec<KernelPlan> = [Chip::M1, Chip::M2, Chip::M3Max, Chip::M4Pro]
        .into_iter()
        .map(|c| metal::plan(&k, &LaunchOptions::default().target(HardwareProfile::of(c))))
        .collect();
    for p in &apple {
        assert_eq!(p.arena.limit, 32768);
        assert!(
            p.arena
                .limit_why
                .contains("profile threadgroup_memory_bytes 32768")
                && p.arena
                    .limit_why
                    .contains("same 32 KB on every Apple7+ GPU"),
            "{}",
            p.arena.limit_why
        );
        assert_eq!(p.arena.buffers, apple[0].arena.buffers);
    }
    let sm90 = cuda::plan(
        &k,
        &LaunchOptions::default().target(HardwareProfile::of(Chip::Sm90)),
    );
    assert_eq!(sm90.arena.limit, cuda::STATIC_SHARED_LIMIT);
    assert!(
        sm90.arena
            .limit_why
            .contains("static shared memory limit 49152 per block"),
        "{}",
        sm90.arena.limit_why
    );
}

/// Every op kind that moves data between threads, on a `[16, 8]` tile loaded once: a
/// transpose and back, a join and split, a row max broadcast along the row, a scan along
/// rows, a scalar atomic whose old value every thread reads, a reduced and broadcast
/// constant and a transpose of `[4, 4, 8]` to its own shape. One program:
/// `y = 4 * x + rowmax(x) + cumsum(x, 1) + old + 4 + sq(x)`, `old` the counter's initial
/// value, `sq` the transpose.
fn movers(k: &mut crate::tl::KernelBuilder) {
    use crate::tl;
    let (x, y, cnt) = (
        k.ptr(F32, "x_ptr"),
        k.ptr(F32, "y_ptr"),
        k.ptr(I32, "cnt_ptr"),
    );
    let idx = tl::arange(0, 16).col() * 8 + tl::arange(0, 8).row();
    let t = tl::load(x + idx);
    let back = tl::trans(tl::trans(t));
    // A transpose to the same shape.
    let sq = tl::permute(t.reshape([4, 4, 8]), [1, 0, 2]).reshape([16, 8]);
    let (a, b) = tl::join(t, t * 2.0).split();
    let m = tl::broadcast_to(t.max(1).col(), [16, 8]);
    let c = tl::cumsum(t, 1);
    let old = tl::atomic_add(cnt, 1);
    // A uniform block the reduction turns into registers, broadcast after: recomputed.
    let z = tl::full([16], 0.5, F32);
    let zsum = z.sum(0);
    let zb = tl::broadcast_to(z.col(), [16, 8]);
    tl::store(
        y + idx,
        a + b + back + m + c + old.cast(F32) + zb * zsum + sq,
    );
}

fn movers_ref(x: &[f32], old: i32) -> Vec<f64> {
    let mut out = Vec::new();
    for r in 0..16 {
        let row: Vec<f64> = x[r * 8..r * 8 + 8].iter().map(|&v| v as f64).collect();
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let mut run = 0.0;
        let sq = (r % 4) * 4 + r / 4;
        for (c, v) in row.iter().enumerate() {
            run += v;
            out.push(4.0 * v + max + run + old as f64 + 4.0 + x[sq * 8 + c] as f64);
        }
    }
    out
}

/// [`movers`] on the interpreter and the compiled CPU executor (where clang is found,
/// required in CI), outputs poisoned and the counter at 5: each target's `y`.
fn run_movers_cpu(k: &Kernel, x: &[f32]) -> Vec<Vec<f32>> {
    let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let compiled = crate::emu::Emulator::should_run("compiled CPU executor").expect("clang check");
    [false, true]
        .into_iter()
        .filter(|&c| !c || compiled)
        .map(|c| {
            let mut y = vec![f32::NAN.to_bits(); 128];
            let mut cnt = vec![5u32];
            let mut args = [
                crate::exec::ExecArg::from(&xb[..]),
                crate::exec::ExecArg::from(crate::exec::test_support::bytes_mut(&mut y)),
                crate::exec::ExecArg::from(crate::exec::test_support::bytes_mut(&mut cnt)),
            ];
            crate::exec::test_support::run_on(c, k, [1, 1, 1], &mut args)
                .unwrap_or_else(|e| panic!("compiled={c}: {e}"));
            assert_eq!(cnt, vec![6], "compiled={c}");
            y.into_iter().map(f32::from_bits).collect()
        })
        .collect()
}

fn run_movers(p: &MetalProgram, x: &[f32]) -> Vec<f32> {
    let out = run_prog(
        p,
        &[EmuBuffer::new("x_ptr", &[128], x)],
        &[
            OutputSpec::new("y_ptr", F32, &[128]),
            OutputSpec::new("cnt_ptr", I32, &[1]).init(5.0),
        ],
        [1, 1, 1],
    );
    assert_eq!(out[1].to_vec::<i32>().unwrap(), vec![6]);
    out[0].to_vec::<f32>().unwrap()
}

#[test]
fn the_plan_lists_every_threadgroup_buffer_and_the_printers_use_each() {
    let sm90 = LaunchOptions::default().target(HardwareProfile::of(Chip::Sm90));
    let tiled = LaunchOptions::default().reduction_layout(ReductionLayout::Tiled);
    let kernels = [
        build("movers", &[], movers),
        mm(F16),
        mm(F32),
        build("tiles", &[("BM", 16), ("BN", 64)], tile_reductions),
        build("cumsum", &[("BLOCK", 256)], super::tests::cumsum_kernel),
        build("softmax", &[("BLOCK", 512)], super::tests::softmax),
        build("layer_norm", &[("BLOCK", 256)], super::tests::layer_norm),
    ];
    for k in &kernels {
        for layout in ReductionLayout::ALL {
            let opts = LaunchOptions::default().reduction_layout(layout);
            let sm90 = sm90.clone().reduction_layout(layout);
            for (plan, source) in [
                {
                    let p = metal::compile(k, &opts).unwrap();
                    (p.plan, p.source)
                },
                {
                    let p = cuda::compile(k, &sm90).unwrap();
                    (p.plan, p.source)
                },
            ] {
                // Computed before printing, and the printers use each (a declaration and
                // at least one access).
                for b in &plan.arena.buffers {
                    let id = crate::opt::smem::Buffer::ident(b.op, b.role, b.dtype);
                    assert!(
                        source.matches(&id).count() >= 2,
                        "{}: {id} planned but unused\n{plan}\n{source}",
                        k.name
                    );
                }
            }
        }
    }
    // The movers kernel: one buffer per moving op, each named in the plan's text.
    let k = &kernels[0];
    let p = metal::plan(k, &tiled);
    let text = p.to_string();
    for role in ["shape", "reduce", "scan", "atomic"] {
        assert!(text.contains(&format!(" {role} ")), "{role}\n{text}");
    }
    let shapes = p
        .arena
        .buffers
        .iter()
        .filter(|b| b.role == crate::opt::smem::Role::Shape)
        .count();
    // trans, trans, join, split, broadcast, permute; the index arithmetic and the uniform
    // block are recomputed instead.
    assert_eq!(shapes, 6, "{text}");
}

#[test]
fn barrier_decisions_change_the_code_not_the_result() {
    let k = build("movers", &[], movers);
    let opts = LaunchOptions::default();
    let default = metal::plan(&k, &opts);
    // Every barrier between ops is listed with the buffers that need it; the text parses.
    let listed: Vec<_> = default.barriers().collect();
    assert!(!listed.is_empty());
    assert!(
        listed
            .iter()
            .all(|(_, w, why)| *w == When::Before && why.contains("reads of buf #")),
        "{default}"
    );
    assert_eq!(KernelPlan::parse(&default.to_string()).unwrap(), default);
    // Without reuse no two buffers share bytes: no op waits for another's reads.
    let mut apart = default.clone();
    apart.set_reuse(false);
    apart.place_arena(&k, &opts);
    assert_eq!(apart.barriers().count(), 0, "{apart}");
    // The conservative override: a barrier before every op's first write.
    let mut every = default.clone();
    every.set_barrier_everywhere(&k, &opts);
    assert!(every.barriers().count() > default.barriers().count());
    // A plan missing a needed barrier is refused, naming the op and the buffers.
    let (op, when, _) = listed[0];
    let mut missing = KernelPlan::parse(
        &default
            .to_string()
            .lines()
            .filter(|l| !l.starts_with(&format!("  barrier {op} {when}")))
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .unwrap();
    let e = missing.verify(&k).unwrap_err().to_string();
    assert!(
        e.contains(&format!("{op} (`permute` at src/codegen/plan_tests.rs:"))
            && e.contains(&format!(
                ": no barrier before it, where one is needed: {op} writes buf #"
            )),
        "{e}"
    );
    missing.set_barrier(op, when, "restored");
    missing.verify(&k).unwrap();
    let progs: Vec<_> = [&default, &apart, &every]
        .iter()
        .map(|p| metal::compile_with(&k, &opts, p).unwrap())
        .collect();
    let count = |s: &str| s.matches("threadgroup_barrier(").count();
    let n: Vec<usize> = progs.iter().map(|p| count(&p.source)).collect();
    assert!(n[1] < n[0] && n[0] < n[2], "{n:?}");
    assert_eq!(n[0] - n[1], default.barriers().count());
    assert_eq!(
        n[2] - n[0],
        every.barriers().count() - default.barriers().count()
    );
    // CUDA: the same overrides, printed and compiled.
    let sm90 = LaunchOptions::default().target(HardwareProfile::of(Chip::Sm90));
    let cdef = cuda::plan(&k, &sm90);
    let mut capart = cdef.clone();
    capart.set_reuse(false);
    let mut cevery = cdef.clone();
    cevery.set_barrier_everywhere(&k, &sm90);
    let cu = [cdef, capart, cevery].map(|p| cuda::compile_with(&k, &sm90, &p).unwrap());
    let n: Vec<usize> = cu
        .iter()
        .map(|p| p.source.matches("__syncthreads();").count())
        .collect();
    assert!(n[1] < n[0] && n[0] < n[2], "{n:?}");
    if let Some(nv) = nvrtc() {
        for p in &cu {
            nv.compile(&p.name, &p.standalone(), &p.nvrtc_arch("sm_90"))
                .unwrap();
        }
    }
    // The CPU targets against f64, then every plan on emulated Metal against f64 and the
    // interpreter.
    let mut x = rnd(128, 51, -2.0, 2.0);
    x[3] = 0.0;
    x[17] = -0.0;
    let want = movers_ref(&x, 5);
    let cpu = run_movers_cpu(&k, &x);
    for (t, got) in cpu.iter().enumerate() {
        assert_close(got, &want, 1e-5, ["interpreter", "compiled CPU"][t]);
    }
    if !emu_ok("barrier_decisions_change_the_code_not_the_result") {
        return;
    }
    let interp: Vec<f64> = cpu[0].iter().map(|x| *x as f64).collect();
    for (i, p) in progs.iter().enumerate() {
        let got = run_movers(p, &x);
        assert_close(&got, &want, 1e-5, &format!("plan {i}"));
        assert_close(
            &got,
            &interp,
            1e-5,
            &format!("plan {i} against the interpreter"),
        );
    }
}

#[test]
fn scan_decisions_round_trip_and_refuse_what_the_scan_cannot_take() {
    use crate::opt::plan::ScanStrategy;
    let k = build("scan", &[("BLOCK", 256)], super::tests::cumsum_kernel);
    let opts = LaunchOptions::default();
    let scans: Vec<OpId> = (0..k.ops.len() as u32)
        .map(OpId)
        .filter(|o| matches!(k.op(*o).op, Op::Scan { .. }))
        .collect();
    let [fwd, rev] = scans[..] else {
        panic!("two scans: {scans:?}")
    };
    // Forward within one round of the layout: collectives (on the CPU, one thread's chunk
    // is shorter than the axis); reverse: staged.
    for (p, fwd_strategy) in [
        (metal::plan(&k, &opts), ScanStrategy::Collective),
        (
            cuda::plan(&k, &opts.clone().target(HardwareProfile::of(Chip::Sm90))),
            ScanStrategy::Collective,
        ),
        (cpu::plan(&k), ScanStrategy::Serial),
    ] {
        assert_eq!(p.scan(fwd), fwd_strategy, "{p}");
        assert_eq!(p.scan(rev), ScanStrategy::Serial, "{p}");
        assert!(
            p.to_string().contains("scan serial ; a reverse scan"),
            "{p}"
        );
        assert_eq!(KernelPlan::parse(&p.to_string()).unwrap(), p);
        let mut bad = p.clone();
        bad.set_scan(rev, ScanStrategy::Collective, "test");
        let e = bad.verify(&k).unwrap_err().to_string();
        assert!(e.contains("`scan` at") && e.contains("reverse"), "{e}");
        let mut serial = p.clone();
        serial.set_scan(fwd, ScanStrategy::Serial, "test");
        serial.verify(&k).unwrap();
    }
    // A forced reduction layout other than COALESCED stages scans too, as before.
    let p = metal::plan(&k, &opts.clone().reduction_layout(ReductionLayout::Tiled));
    assert_eq!(p.scan(fwd), ScanStrategy::Serial);
    // The printed code follows the decision.
    let mut serial = metal::plan(&k, &opts);
    serial.set_scan(fwd, ScanStrategy::Serial, "test");
    let (a, b) = (
        metal::compile_with(&k, &opts, &metal::plan(&k, &opts)).unwrap(),
        metal::compile_with(&k, &opts, &serial).unwrap(),
    );
    assert!(a.source.contains("simd_shuffle_up"), "{}", a.source);
    assert!(!b.source.contains("simd_shuffle_up"), "{}", b.source);
}

/// `acc = dot(a, b, acc * s)` over K steps, `s` the `[BM]` vector at `s_ptr` broadcast
/// along rows (`by_row`) or the `[BN]` vector broadcast along columns: the rescale flash
/// attention applies to its accumulator on every step.
fn rescaled_matmul(by_row: bool) -> impl FnOnce(&mut crate::tl::KernelBuilder) {
    use crate::tl::{self, Tensor};
    move |k| {
        let (a, b, c, s) = (
            k.ptr(F16, "a_ptr"),
            k.ptr(F16, "b_ptr"),
            k.ptr(F32, "c_ptr"),
            k.ptr(F32, "s_ptr"),
        );
        let (m, n, kk) = (k.scalar(I32, "M"), k.scalar(I32, "N"), k.scalar(I32, "K"));
        let (bm, bn, bk) = (k.constexpr("BM"), k.constexpr("BN"), k.constexpr("BK"));
        let offs_m = tl::program_id(0) * bm + tl::arange(0, bm);
        let offs_n = tl::program_id(1) * bn + tl::arange(0, bn);
        let offs_k = tl::arange(0, bk);
        let acc = tl::zeros([bm, bn], F32);
        let acc: Tensor = tl::range(0, kk, bk).fold(acc, |k0, acc| {
            let ks = offs_k + k0;
            let at = tl::load(a + offs_m.col() * kk + ks.row())
                .mask(offs_m.col().lt(m) & ks.row().lt(kk))
                .other(0.0);
            let bt = tl::load(b + ks.col() * n + offs_n.row())
                .mask(ks.col().lt(kk) & offs_n.row().lt(n))
                .other(0.0);
            let scaled = if by_row {
                let f = tl::load(s + offs_m).mask(offs_m.lt(m)).other(1.0);
                acc * f.col()
            } else {
                let f = tl::load(s + offs_n).mask(offs_n.lt(n)).other(1.0);
                acc * f.row()
            };
            tl::dot(at, bt, scaled)
        });
        let cm = offs_m.col().lt(m) & offs_n.row().lt(n);
        tl::store(c + offs_m.col() * n + offs_n.row(), acc).mask(cm);
    }
}

#[test]
fn a_rescaled_accumulator_stays_in_mma_fragments() {
    let (m, n, kk) = (37usize, 45usize, 50usize);
    let sm90 = LaunchOptions::default().target(HardwareProfile::of(Chip::Sm90));
    for by_row in [true, false] {
        let k = build(
            "rescaled",
            &[("BM", 32), ("BN", 32), ("BK", 16)],
            rescaled_matmul(by_row),
        );
        let for_ = op_where(&k, |o| matches!(o, Op::For { .. }));
        let default = cuda::plan(&k, &sm90);
        assert_eq!(default.resident(for_), &[0], "{default}");
        // The rescale and its factor live in the fragments too.
        let values = crate::opt::values::text(&k, &default, &sm90);
        assert!(
            values
                .lines()
                .filter(|l| l.contains("f32[32,32] fragments<"))
                .count()
                >= 4,
            "{values}"
        );
        let mut staged = default.clone();
        staged.set(for_, Decision::Resident(vec![]), "override");
        drop_ring(&mut staged);
        let progs = [&default, &staged].map(|p| cuda::compile_with(&k, &sm90, p).unwrap());
        // Resident: fragments are read back once, after the loop; staged: the accumulator
        // goes in and out of shared memory on every step.
        assert!(
            !progs[0].source.contains("_accin_f32["),
            "{}",
            progs[0].source
        );
        assert!(progs[0].source.contains("frag_f["));
        assert!(progs[1].source.contains("_accin_f32["));
        assert!(!progs[1].source.contains("frag_f["));
        if let Some(nv) = nvrtc() {
            for p in &progs {
                nv.compile(&p.name, &p.standalone(), &p.nvrtc_arch("sm_90"))
                    .unwrap();
            }
        }
        // Metal's simdgroup_matrix elements are not addressed one by one: the loop stages.
        let metal_plan = metal::plan(&k, &LaunchOptions::default());
        assert!(metal_plan.resident(for_).is_empty(), "{metal_plan}");
        // The kernel's results on the interpreter, the compiled CPU executor and emulated
        // Metal against f64 (CUDA is run by benches/gpu on the NVIDIA machine).
        let round = |v: Vec<f32>| -> Vec<f32> {
            v.into_iter()
                .map(|x| half::f16::from_f32(x).to_f32())
                .collect()
        };
        let a = round(rnd(m * kk, 31, -1.0, 1.0));
        let b = round(rnd(kk * n, 32, -1.0, 1.0));
        let len = if by_row { m } else { n };
        let mut s = rnd(len, 33, 0.25, 1.5);
        s[3] = 0.0;
        s[5] = -1.0;
        let steps = kk.div_ceil(16);
        let mut want = vec![0.0f64; m * n];
        for t in 0..steps {
            for i in 0..m {
                for j in 0..n {
                    let f = s[if by_row { i } else { j }] as f64;
                    let part: f64 = (t * 16..((t + 1) * 16).min(kk))
                        .map(|p| a[i * kk + p] as f64 * b[p * n + j] as f64)
                        .sum();
                    want[i * n + j] = want[i * n + j] * f + part;
                }
            }
        }
        let bufs = |s: &[f32]| {
            let h = |v: &[f32]| -> Vec<half::f16> {
                v.iter().map(|x| half::f16::from_f32(*x)).collect()
            };
            vec![
                EmuBuffer::new("a_ptr", &[m, kk], &h(&a)),
                EmuBuffer::new("b_ptr", &[kk, n], &h(&b)),
                EmuBuffer::new("s_ptr", &[s.len()], s),
                EmuBuffer::scalar("M", m as i32),
                EmuBuffer::scalar("N", n as i32),
                EmuBuffer::scalar("K", kk as i32),
            ]
        };
        let outs = [OutputSpec::new("c_ptr", F32, &[m, n])];
        let half_bytes = |v: &[f32]| -> Vec<u8> {
            v.iter()
                .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
                .collect()
        };
        let (ab, bb) = (half_bytes(&a), half_bytes(&b));
        let sb: Vec<u8> = s.iter().flat_map(|x| x.to_le_bytes()).collect();
        let args = [
            CpuArg::In(&ab),
            CpuArg::In(&bb),
            CpuArg::Out,
            CpuArg::In(&sb),
            CpuArg::I32(m as i32),
            CpuArg::I32(n as i32),
            CpuArg::I32(kk as i32),
        ];
        for (c, got) in cpu_runs(&k, [2, 2, 1], m * n, &args) {
            assert_close(&got, &want, 1e-4, &format!("compiled={c}, by_row {by_row}"));
        }
        if emu_ok("a_rescaled_accumulator_stays_in_mma_fragments") {
            let p = metal::compile_with(&k, &LaunchOptions::default(), &metal_plan).unwrap();
            let got = run_prog(&p, &bufs(&s), &outs, [2, 2, 1]);
            let got = got[0].to_vec::<f32>().unwrap();
            assert_close(
                &got,
                &want,
                1e-4,
                &format!("emulated Metal, by_row {by_row}"),
            );
        }
    }
}

/// One flash-attention step on a 64-row tile: scores `q @ k` (head dim 32, 64 keys of
/// which the first `N` are valid), their row maximum and sum, and `p @ v` normalised.
fn attention_tile(k: &mut crate::tl::KernelBuilder) {
    use crate::tl::{self, Tensor};
    let (q, kt, v, o) = (
        k.ptr(F16, "q"),
        k.ptr(F16, "k"),
        k.ptr(F16, "v"),
        k.ptr(F32, "o"),
    );
    let n_ctx = k.scalar(I32, "N");
    let (rows, keys, dims) = (tl::arange(0, 64), tl::arange(0, 64), tl::arange(0, 32));
    let load = |p: Tensor, r: Tensor, c: Tensor, w: i64| tl::load(p + r.col() * w + c.row());
    let (qt, ktt, vt) = (
        load(q, rows, dims, 32),
        load(kt, dims, keys, 64),
        load(v, keys, dims, 32),
    );
    let s = tl::dot(qt, ktt, tl::zeros([64, 64], F32)) * 0.25;
    let s = tl::where_(keys.row().lt(n_ctx), s, f32::NEG_INFINITY);
    let p = tl::exp2(s - s.max(1).col());
    let l = p.sum(1);
    let acc = tl::dot(p.to(F16), vt, tl::zeros([64, 32], F32));
    tl::store(o + rows.col() * 32 + dims.row(), acc / l.col());
}

#[test]
fn dot_results_kept_in_fragments_change_the_code_not_the_result() {
    let k = build("attn_tile", &[], attention_tile);
    let sm90 = LaunchOptions::default().target(HardwareProfile::of(Chip::Sm90));
    let dots: Vec<OpId> = (0..k.ops.len() as u32)
        .map(OpId)
        .filter(|&o| matches!(k.op(o).op, Op::Dot { .. }))
        .collect();
    let kept = cuda::plan(&k, &sm90);
    assert!(kept.keeps_fragments(dots[0]), "{kept}");
    let text = kept.to_string();
    assert!(text.contains(&format!("{} fragments ;", dots[0])), "{text}");
    assert_eq!(KernelPlan::parse(&text).unwrap(), kept);
    // Whole rows per warp for both dots: the scores' row reductions stay in a warp and
    // `p` is the second dot's `a` as it lies in the registers.
    for d in &dots {
        assert!(
            matches!(kept.dot(*d), DotLowering::Mma(g) if g.wn == 1 && g.wm == 4),
            "{kept}"
        );
    }
    let values = crate::opt::values::text(&k, &kept, &sm90);
    assert!(values.contains("f32[64,64] fragments<"), "{values}");
    // The override: the scores leave the fragments for the blocked layout.
    let mut left = kept.clone();
    left.set_fragments(dots[0], false, "override");
    left.place_arena(&k, &sm90);
    left.verify(&k).unwrap();
    // A grid with two warps along N cannot keep whole rows: refused.
    let mut split = kept.clone();
    split.set(
        dots[0],
        Decision::Dot(DotLowering::Mma(crate::opt::plan::WarpGrid {
            wm: 2,
            wn: 2,
            fm: 2,
            fn_: 4,
        })),
        "override",
    );
    let err = split.verify(&k).unwrap_err().to_string();
    assert!(err.contains("whole rows per warp"), "{err}");
    let progs = [&kept, &left].map(|p| cuda::compile_with(&k, &sm90, p).unwrap());
    assert!(progs[0].source.contains("__shfl_xor_sync"));
    assert!(
        progs[0].source.contains("__half_as_ushort"),
        "a from registers"
    );
    assert!(!progs[0].source.contains("_accout_f32[tm_row * 64u"));
    assert!(progs[1].source.contains("_accout_f32[tm_row * 64u"));
    assert!(!progs[1].source.contains("__half_as_ushort"));
    if let Some(nv) = nvrtc() {
        for p in &progs {
            nv.compile(&p.name, &p.standalone(), &p.nvrtc_arch("sm_90"))
                .unwrap();
        }
    }
    // The kernel's results on the CPU targets and emulated Metal against f64 (the CUDA
    // kernels run in benches/gpu on the NVIDIA machine).
    let n_ctx = 45usize;
    let h = |v: Vec<f32>| -> Vec<f32> {
        v.into_iter()
            .map(|x| half::f16::from_f32(x).to_f32())
            .collect()
    };
    let (q, kk, v) = (
        h(rnd(64 * 32, 41, -2.0, 2.0)),
        h(rnd(32 * 64, 42, -2.0, 2.0)),
        h(rnd(64 * 32, 43, -1.0, 1.0)),
    );
    let mut want = vec![0.0f64; 64 * 32];
    for i in 0..64 {
        let s: Vec<f64> = (0..64)
            .map(|j| {
                if j >= n_ctx {
                    return f64::NEG_INFINITY;
                }
                let d: f32 = (0..32).map(|t| q[i * 32 + t] * kk[t * 64 + j]).sum();
                d as f64 * 0.25
            })
            .collect();
        let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let p: Vec<f64> = s.iter().map(|x| (x - mx).exp2()).collect();
        let l: f64 = p.iter().sum();
        for d in 0..32 {
            let acc: f64 = (0..64)
                .map(|j| half::f16::from_f64(p[j]).to_f64() * v[j * 32 + d] as f64)
                .sum();
            want[i * 32 + d] = acc / l;
        }
    }
    let hb = |x: &[f32]| -> Vec<u8> {
        x.iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect()
    };
    let (qb, kb, vb) = (hb(&q), hb(&kk), hb(&v));
    let args = [
        CpuArg::In(&qb),
        CpuArg::In(&kb),
        CpuArg::In(&vb),
        CpuArg::Out,
        CpuArg::I32(n_ctx as i32),
    ];
    for (c, got) in cpu_runs(&k, [1, 1, 1], 64 * 32, &args) {
        assert_close(&got, &want, 2e-3, &format!("compiled={c}"));
    }
    if emu_ok("dot_results_kept_in_fragments_change_the_code_not_the_result") {
        let hv =
            |x: &[f32]| -> Vec<half::f16> { x.iter().map(|v| half::f16::from_f32(*v)).collect() };
        let p = metal::compile(&k, &LaunchOptions::default()).unwrap();
        let got = run_prog(
            &p,
            &[
                EmuBuffer::new("q", &[64, 32], &hv(&q)),
                EmuBuffer::new("k", &[32, 64], &hv(&kk)),
                EmuBuffer::new("v", &[64, 32], &hv(&v)),
                EmuBuffer::scalar("N", n_ctx as i32),
            ],
            &[OutputSpec::new("o", F32, &[64, 32])],
            [1, 1, 1],
        );
        assert_close(
            &got[0].to_vec::<f32>().unwrap(),
            &want,
            2e-3,
            "emulated Metal",
        );
    }
}

/// `acc += a @ b_t` for `T` tiles `b_t` of `b`, `a` loaded once before the loop.
fn invariant_a(k: &mut crate::tl::KernelBuilder) {
    use crate::tl::{self, Tensor};
    let (a, b, c) = (k.ptr(F16, "a"), k.ptr(F16, "b"), k.ptr(F32, "c"));
    let steps = k.scalar(I32, "T");
    let (r, kk, n) = (tl::arange(0, 32), tl::arange(0, 16), tl::arange(0, 32));
    let at = tl::load(a + r.col() * 16 + kk.row());
    let acc: Tensor = tl::range(0, steps, 1).fold(tl::zeros([32, 32], F32), |t, acc| {
        let bt = tl::load(b + t * 512 + kk.col() * 32 + n.row());
        tl::dot(at, bt, acc)
    });
    tl::store(c + r.col() * 32 + n.row(), acc);
}

#[test]
fn a_loop_invariant_operand_is_staged_once_before_the_loop() {
    let k = build("invariant_a", &[], invariant_a);
    let sm90 = LaunchOptions::default().target(HardwareProfile::of(Chip::Sm90));
    let dot = op_where(&k, |o| matches!(o, Op::Dot { .. }));
    let hoisted = cuda::plan(&k, &sm90);
    assert!(hoisted.hoists(dot), "{hoisted}");
    let text = hoisted.to_string();
    assert!(text.contains(&format!("{dot} hoist ;")), "{text}");
    assert_eq!(KernelPlan::parse(&text).unwrap(), hoisted);
    let mut each = hoisted.clone();
    each.set_hoist(dot, false, "override");
    each.place_arena(&k, &sm90);
    each.verify(&k).unwrap();
    // The tutorial matmul loads A inside its loop: nothing to stage before it.
    let mm = mm(F16);
    let mut wrong = cuda::plan(&mm, &sm90);
    let mm_dot = op_where(&mm, |o| matches!(o, Op::Dot { .. }));
    assert!(!wrong.hoists(mm_dot));
    wrong.set_hoist(mm_dot, true, "override");
    let err = wrong.verify(&mm).unwrap_err().to_string();
    assert!(err.contains("staged once before a loop"), "{err}");
    let progs = [&hoisted, &each].map(|p| cuda::compile_with(&k, &sm90, p).unwrap());
    assert!(progs[0].source.contains("_hoist_f16"));
    assert!(!progs[1].source.contains("_hoist_f16"));
    if let Some(nv) = nvrtc() {
        for p in &progs {
            nv.compile(&p.name, &p.standalone(), &p.nvrtc_arch("sm_90"))
                .unwrap();
        }
    }
    // Results on the CPU targets and emulated Metal (which stages `a` in its loop)
    // against f64; the CUDA kernel runs in benches/gpu (attention's `q`).
    let steps = 3usize;
    let h = |v: Vec<f32>| -> Vec<f32> {
        v.into_iter()
            .map(|x| half::f16::from_f32(x).to_f32())
            .collect()
    };
    let (a, b) = (
        h(rnd(32 * 16, 51, -1.0, 1.0)),
        h(rnd(steps * 512, 52, -1.0, 1.0)),
    );
    let mut want = vec![0.0f64; 32 * 32];
    for t in 0..steps {
        for i in 0..32 {
            for j in 0..32 {
                want[i * 32 + j] += (0..16)
                    .map(|p| a[i * 16 + p] as f64 * b[t * 512 + p * 32 + j] as f64)
                    .sum::<f64>();
            }
        }
    }
    let hb = |x: &[f32]| -> Vec<u8> {
        x.iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect()
    };
    let (ab, bb) = (hb(&a), hb(&b));
    let args = [
        CpuArg::In(&ab),
        CpuArg::In(&bb),
        CpuArg::Out,
        CpuArg::I32(steps as i32),
    ];
    for (c, got) in cpu_runs(&k, [1, 1, 1], 32 * 32, &args) {
        assert_close(&got, &want, 1e-4, &format!("compiled={c}"));
    }
    if emu_ok("a_loop_invariant_operand_is_staged_once_before_the_loop") {
        let hv =
            |x: &[f32]| -> Vec<half::f16> { x.iter().map(|v| half::f16::from_f32(*v)).collect() };
        let p = metal::compile(&k, &LaunchOptions::default()).unwrap();
        let got = run_prog(
            &p,
            &[
                EmuBuffer::new("a", &[32, 16], &hv(&a)),
                EmuBuffer::new("b", &[steps * 16, 32], &hv(&b)),
                EmuBuffer::scalar("T", steps as i32),
            ],
            &[OutputSpec::new("c", F32, &[32, 32])],
            [1, 1, 1],
        );
        assert_close(
            &got[0].to_vec::<f32>().unwrap(),
            &want,
            1e-4,
            "emulated Metal",
        );
    }
}

/// Flash attention's loop on one 64-row tile: keys in blocks of 32 (the first `N` valid),
/// head dim 32, running maximum `m_i` and denominator `l_i` carried with the rescaled
/// accumulator, normalised and stored after the loop.
fn attention_loop(k: &mut crate::tl::KernelBuilder) {
    attention_loop_sized(k, (64, 32, 32));
}

/// Flash attention's loop on `m` query rows, `n` keys per step and head dimension `d`.
fn attention_loop_sized(k: &mut crate::tl::KernelBuilder, (m, n, d): (i64, i64, i64)) {
    use crate::tl::{self, Tensor};
    let (q, kt, v, o) = (
        k.ptr(F16, "q"),
        k.ptr(F16, "k"),
        k.ptr(F16, "v"),
        k.ptr(F32, "o"),
    );
    let n_ctx = k.scalar(I32, "N");
    let (rows, keys, dims) = (tl::arange(0, m), tl::arange(0, n), tl::arange(0, d));
    let qt = tl::load(q + rows.col() * d + dims.row());
    let init = (
        tl::full([m as usize], f32::NEG_INFINITY, F32),
        tl::full([m as usize], 1.0, F32),
        tl::zeros([m as usize, d as usize], F32),
    );
    let (_, l_i, acc) = tl::range(0, n_ctx, n).fold(init, |start, (m_i, l_i, acc)| {
        let cols: Tensor = start + keys;
        let kb = tl::load(kt + dims.col() + cols.row() * d)
            .mask(cols.row().lt(n_ctx))
            .other(0.0);
        let s = tl::dot(qt, kb, tl::zeros([m as usize, n as usize], F32)) * 0.25;
        let s = tl::where_(cols.row().lt(n_ctx), s, f32::NEG_INFINITY);
        let m_ij = tl::maximum(m_i, s.max(1));
        let p = tl::exp2(s - m_ij.col());
        let alpha = tl::exp2(m_i - m_ij);
        let l_i = l_i * alpha + p.sum(1);
        let vb = tl::load(v + cols.col() * d + dims.row())
            .mask(cols.col().lt(n_ctx))
            .other(0.0);
        let acc = tl::dot(p.to(F16), vb, acc * alpha.col());
        (m_ij, l_i, acc)
    });
    tl::store(o + rows.col() * d + dims.row(), acc / l_i.col());
}

#[test]
fn attention_row_vectors_stay_in_fragment_rows() {
    let k = build("attn_loop", &[], attention_loop);
    let sm80 = LaunchOptions::default().target(HardwareProfile::of(Chip::Sm80));
    let reduces: Vec<OpId> = (0..k.ops.len() as u32)
        .map(OpId)
        .filter(|&o| matches!(k.op(o).op, Op::Reduce { .. }))
        .collect();
    assert_eq!(reduces.len(), 2);
    let kept = cuda::plan(&k, &sm80);
    let text = kept.to_string();
    for r in &reduces {
        assert!(kept.rows(*r), "{text}");
        assert!(text.contains(&format!("{r} rows ;")), "{text}");
    }
    assert_eq!(KernelPlan::parse(&text).unwrap(), kept);
    // m_i, l_i and alpha (and their loop slots) are row slices: 2 rows per 16-row tile of
    // each of the 4 warps.
    let values = crate::opt::values::text(&k, &kept, &sm80);
    assert!(
        values
            .lines()
            .filter(|l| l.contains("rows<warps=4 tiles=1 regs=2>"))
            .count()
            >= 8,
        "{values}"
    );
    // The override: one reduction leaves its rows, and with it the whole component.
    let mut left = kept.clone();
    left.set_rows(reduces[0], false, "override");
    left.place_arena(&k, &sm80);
    left.verify(&k).unwrap();
    assert!(crate::opt::rows::kept(&k, &left).is_empty());
    // Rows on an op that is no row reduction of fragments: refused.
    let mut bad = kept.clone();
    let for_ = op_where(&k, |o| matches!(o, Op::For { .. }));
    bad.set_rows(for_, true, "override");
    let err = bad.verify(&k).unwrap_err().to_string();
    assert!(err.contains("row reduction of fragments"), "{err}");
    let progs = [&kept, &left].map(|p| cuda::compile_with(&k, &sm80, p).unwrap());
    // Kept: no reduction result and no row broadcast goes through shared memory, and the
    // broadcasts read the thread's own slot.
    assert!(
        !progs[0].source.contains("_red_f32["),
        "{}",
        progs[0].source
    );
    assert!(
        !progs[0].source.contains("_shape_f32["),
        "{}",
        progs[0].source
    );
    assert!(progs[0]
        .source
        .contains("(2u * ((tm_r >> 2) / 4u) + ((tm_r >> 1) & 1u))"));
    assert!(progs[1].source.contains("_red_f32["), "{}", progs[1].source);
    assert!(
        progs[0].source.matches("__syncthreads").count()
            < progs[1].source.matches("__syncthreads").count()
    );
    if let Some(nv) = nvrtc() {
        for p in &progs {
            nv.compile(&p.name, &p.standalone(), &p.nvrtc_arch("sm_80"))
                .unwrap();
        }
    }
}

#[test]
fn attention_key_and_value_loads_are_copied_ahead() {
    let k = build("attn_loop", &[], attention_loop);
    let sm80 = LaunchOptions::default().target(HardwareProfile::of(Chip::Sm80));
    let dots: Vec<OpId> = (0..k.ops.len() as u32)
        .map(OpId)
        .filter(|&o| matches!(k.op(o).op, Op::Dot { .. }))
        .collect();
    let loads_in_loop: Vec<OpId> = (0..k.ops.len() as u32)
        .map(OpId)
        .filter(|&o| {
            matches!(k.op(o).op, Op::Load { .. }) && k.region(k.op(o).parent).parent.is_some()
        })
        .collect();
    let plan = cuda::plan(&k, &sm80);
    // Both loads compute their pointers from the induction variable; the ring recomputes
    // them for later iterations. `k` runs along K in memory: copied along K, held `[n][k]`.
    for l in &loads_in_loop {
        assert!(plan.ahead(*l).is_some(), "{plan}");
    }
    assert!(plan.kmajor(dots[0]) && !plan.kmajor(dots[1]), "{plan}");
    let text = plan.to_string();
    assert!(text.contains(&format!("{} kmajor ;", dots[0])), "{text}");
    assert_eq!(KernelPlan::parse(&text).unwrap(), plan);
    // Overrides: `k` copied along N (chunk by chunk, element-wise where they do not run),
    // and no ring at all.
    let mut along_n = plan.clone();
    along_n.set_kmajor(dots[0], false, "override");
    along_n.place_arena(&k, &sm80);
    along_n.verify(&k).unwrap();
    let mut no_ring = plan.clone();
    drop_ring(&mut no_ring);
    no_ring.set_kmajor(dots[0], false, "override");
    no_ring.place_arena(&k, &sm80);
    no_ring.verify(&k).unwrap();
    // Column by column is refused where B is not in the ring.
    let mut bad = no_ring.clone();
    bad.set_kmajor(dots[0], true, "override");
    let err = bad.verify(&k).unwrap_err().to_string();
    assert!(err.contains("kmajor on a dot"), "{err}");
    let progs = [&plan, &along_n, &no_ring].map(|p| cuda::compile_with(&k, &sm80, p).unwrap());
    // The scores' B read untransposed from `[n][k]` (lanes 8-15 and 24-31 at K + 8), V's
    // transposed from `[k][n]`.
    let kmajor_b = "((tm_ln >> 3) & 1u) * 8u";
    assert!(progs[0].source.contains(kmajor_b), "{}", progs[0].source);
    assert!(progs[0]
        .source
        .contains("ldmatrix.sync.aligned.m8n8.x4.trans"));
    assert!(!progs[1].source.contains(kmajor_b));
    for p in &progs[..2] {
        assert!(p.source.contains("cp.async.cg.shared.global"));
        assert!(p.dynamic_shared_mem_bytes > 0);
    }
    assert!(!progs[2].source.contains("cp.async"));
    if let Some(nv) = nvrtc() {
        for p in &progs {
            nv.compile(&p.name, &p.standalone(), &p.nvrtc_arch("sm_80"))
                .unwrap();
        }
    }
}

#[test]
fn attention_dots_take_wgmma_on_sm90() {
    // 128 query rows on 4 warps: two 16-row tiles per warp, two m64 MMAs per warpgroup.
    let k = build("attn_wgmma", &[], |k| {
        attention_loop_sized(k, (128, 64, 64))
    });
    let sm90 = LaunchOptions::default().target(HardwareProfile::of(Chip::Sm90));
    let dots: Vec<OpId> = (0..k.ops.len() as u32)
        .map(OpId)
        .filter(|&o| matches!(k.op(o).op, Op::Dot { .. }))
        .collect();
    let plan = cuda::plan(&k, &sm90);
    // q @ k: q staged once before the loop, k copied along K; p @ v: p from registers.
    for &d in &dots {
        assert!(plan.wgmma(d), "{plan}");
        assert!(
            matches!(plan.dot(d), DotLowering::Mma(g) if g.fm == 2 && g.wm == 4),
            "{plan}"
        );
    }
    assert!(plan.kmajor(dots[0]) && plan.hoists(dots[0]), "{plan}");
    let text = plan.to_string();
    assert!(text.contains("A staged once before the loop"), "{text}");
    assert!(
        text.contains("A from the registers of an earlier dot"),
        "{text}"
    );
    assert_eq!(KernelPlan::parse(&text).unwrap(), plan);
    // Overrides: either dot back on mma.sync (the ring then pads its tiles).
    let mut first_mma = plan.clone();
    first_mma.set_wgmma(dots[0], false, "override");
    first_mma.place_arena(&k, &sm90);
    first_mma.verify(&k).unwrap();
    let mut second_mma = plan.clone();
    second_mma.set_wgmma(dots[1], false, "override");
    second_mma.place_arena(&k, &sm90);
    second_mma.verify(&k).unwrap();
    // wgmma with A neither hoisted, in the ring, nor in registers is refused.
    let mut unstaged = plan.clone();
    unstaged.set_hoist(dots[0], false, "override");
    let err = unstaged.verify(&k).unwrap_err().to_string();
    assert!(err.contains("neither copied ahead"), "{err}");
    let progs = [&plan, &first_mma, &second_mma].map(|p| cuda::compile_with(&k, &sm90, p).unwrap());
    let wgmma = "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16";
    // Register A: `{a0, a1, a2, a3}` then B's descriptor, B untransposed for K-major k.
    let reg_a = "{%32, %33, %34, %35}, %36, 1, 1, 1, 1;";
    let smem_a = "%32, %33, 1, 1, 1, 0, 0;";
    // Two versions of the loop, four MMAs each: the block-uniform flag of aligned copies
    // picks the one whose copies are untested.
    assert_eq!(
        progs[0].source.matches(wgmma).count(),
        8,
        "{}",
        progs[0].source
    );
    let src = &progs[0].source;
    let flag = src
        .lines()
        .find(|l| l.contains("const bool tm_fast"))
        .unwrap_or_else(|| panic!("{src}"));
    assert!(flag.contains("__syncthreads_and("), "{flag}");
    // Both loads are affine in the induction variable: each chunk's first offset and the
    // change per iteration are tested once, before the loop.
    assert!(flag.contains("% 8u == 0"), "{flag}");
    let name = flag.split_whitespace().nth(2).unwrap();
    let fast = src.split(&format!("if ({name}) {{")).nth(1).unwrap();
    let (fast, slow) = fast.split_once("} else {").unwrap();
    assert!(
        fast.contains("for (uint t") && slow.contains("for (uint t"),
        "{src}"
    );
    // Element-wise copies only in the other version (the `else` of each chunk's test).
    assert!(!fast.contains("tm_d["), "{src}");
    assert!(slow.contains("tm_d[0] ="), "{src}");
    // `exp2` as Triton spells it on NVIDIA GPUs.
    assert!(
        progs[0].standalone().contains("ex2.approx.ftz.f32") && src.contains("tm_ex2("),
        "{src}"
    );
    assert!(progs[0].source.contains(reg_a) && progs[0].source.contains(smem_a));
    assert!(!progs[0].source.contains("mma.sync"));
    assert!(progs[1].source.contains(reg_a) && !progs[1].source.contains(smem_a));
    assert!(!progs[2].source.contains(reg_a) && progs[2].source.contains(smem_a));
    for p in &progs {
        assert!(p.sm90a);
    }
    if let Some(nv) = nvrtc() {
        for p in &progs {
            nv.compile(&p.name, &p.standalone(), &p.nvrtc_arch("sm_90"))
                .unwrap();
        }
    }
}

#[test]
fn dynamic_shared_memory_passes_mlx_threshold_when_the_total_needs_it() {
    use super::cuda::{dynamic_request, MLX_DYNAMIC_SHARED_OPT_IN, STATIC_SHARED_LIMIT};
    // Within the default limit together: as asked.
    assert_eq!(dynamic_request(10_000, 20_000), 20_000);
    assert_eq!(dynamic_request(0, 0), 0);
    // Above MLX's threshold alone: MLX raises the limit, as asked.
    assert_eq!(dynamic_request(20_000, 60_000), 60_000);
    // Together past the default limit, alone below the threshold: padded past it.
    let r = dynamic_request(27_648, 27_648);
    assert!(r > MLX_DYNAMIC_SHARED_OPT_IN && r % 16 == 0 && 27_648 + 27_648 > STATIC_SHARED_LIMIT);
}
