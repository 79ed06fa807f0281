//! Kernels and launches a careless or hostile user might write: deep nesting, huge grids,
//! many parameters, odd names, very large kernels. Each either runs correctly on every
//! target or is a clear error naming the kernel, the op and the line. Cases that once
//! crashed the process run in a child process of their own.

mod support;

use std::process::Command;

use triton_metal::emu::{Emulator, LaneOrder};
use triton_metal::ir::Kernel;
use triton_metal::runtime::{out, out_like, Target, MAX_GRID};
use triton_metal::tl::{self, JitKernel, Tensor, MAX_NESTING};
use triton_metal::{
    Array,
    DType::{F32, I32},
    Error,
};

/// Runs the ignored test `name` of this binary in a child process and returns its output;
/// the child must exit normally (no signal, no abort).
fn in_child(name: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "child `{name}` failed ({}):\n{text}",
        out.status
    );
    assert!(
        text.contains("1 passed"),
        "child `{name}` did not run:\n{text}"
    );
    text
}

fn vals(a: &Array) -> Vec<f32> {
    a.to_vec::<f32>().unwrap()
}

// ---- deep nesting -------------------------------------------------------------------

/// `depth` nested loops of one trip each, adding 1 at the innermost level.
fn nested_loops(depth: usize) -> triton_metal::Result<JitKernel> {
    fn nest(depth: usize, acc: Tensor) -> Tensor {
        if depth == 0 {
            return acc + 1.0;
        }
        tl::range(0, 1, 1).fold(acc, |_, a| nest(depth - 1, a))
    }
    tl::jit("deep_loops", move |k| {
        let y = k.ptr(F32, "y");
        let v = nest(depth, tl::zeros([16], F32));
        tl::store(y + tl::arange(0, 16), v);
    })
}

/// `depth` nested branches on a runtime flag, each adding 1 when the flag is set.
fn nested_ifs(depth: usize) -> triton_metal::Result<JitKernel> {
    fn nest(depth: usize, flag: Tensor, acc: Tensor) -> Tensor {
        if depth == 0 {
            return acc;
        }
        tl::if_(flag.gt(0), || nest(depth - 1, flag, acc + 1.0), || acc)
    }
    tl::jit("deep_ifs", move |k| {
        let y = k.ptr(F32, "y");
        let flag = k.scalar(I32, "flag");
        let v = nest(depth, flag, tl::zeros([16], F32));
        tl::store(y + tl::arange(0, 16), v);
    })
}

#[test]
fn nesting_up_to_the_limit_runs_on_every_target() {
    let loops = nested_loops(MAX_NESTING).unwrap();
    let ifs = nested_ifs(MAX_NESTING).unwrap();
    for t in support::targets("nesting_up_to_the_limit_runs_on_every_target") {
        let y = loops
            .launch()
            .grid([1])
            .args((out(&[16], F32),))
            .target(t)
            .run()
            .unwrap_or_else(|e| panic!("{t:?}: {e}"));
        assert_eq!(vals(&y[0]), vec![1.0; 16], "{t:?}");
        let y = ifs
            .launch()
            .grid([1])
            .args((out(&[16], F32), 1))
            .target(t)
            .run()
            .unwrap_or_else(|e| panic!("{t:?}: {e}"));
        assert_eq!(vals(&y[0]), vec![MAX_NESTING as f32; 16], "{t:?}");
    }
    support::nvrtc_compiles(&loops.launch().args((out(&[16], F32),)));
    support::nvrtc_compiles(&ifs.launch().args((out(&[16], F32), 1)));
}

fn check_too_deep(r: triton_metal::Result<JitKernel>, kernel: &str) {
    let e = r.expect_err("nesting beyond the limit must be an error");
    let msg = e.to_string();
    assert!(matches!(e, Error::Build { .. }), "{e:?}");
    assert!(
        msg.contains(&format!("kernel `{kernel}`"))
            && msg.contains("hostile.rs:")
            && msg.contains(&format!("more than {MAX_NESTING} levels")),
        "{msg}"
    );
}

#[test]
fn nesting_beyond_the_limit_is_a_build_error() {
    check_too_deep(nested_loops(MAX_NESTING + 1), "deep_loops");
    check_too_deep(nested_ifs(MAX_NESTING + 1), "deep_ifs");
}

/// Thousands of levels, as a generated kernel might nest: once a stack overflow on MLX's
/// worker thread (interpreter) and a bracket-depth error in clang (printers).
#[test]
#[ignore = "run in its own process by `deep_nesting_does_not_crash`"]
fn child_nested_3000_deep() {
    check_too_deep(nested_loops(3000), "deep_loops");
    check_too_deep(nested_ifs(3000), "deep_ifs");
}

/// IR text nested far beyond the limit is a parse error, not a stack overflow.
#[test]
#[ignore = "run in its own process by `deep_nesting_does_not_crash`"]
fn child_ir_text_nested_100000_deep() {
    let depth = 100_000;
    let mut text = String::from("kernel deep(%0: i32 n) {\n");
    for d in 0..depth {
        text.push_str(&format!(
            "  for %0, %0, %0 : body {{\n  ^r{}(%{}: i32):\n",
            d + 1,
            d + 1
        ));
    }
    for _ in 0..depth {
        text.push_str("  yield\n  }\n");
    }
    text.push_str("}\n");
    let e = Kernel::parse_ir(&text).expect_err("too deep").to_string();
    assert!(
        e.contains(&format!("more than {MAX_NESTING} levels")),
        "{e}"
    );
}

#[test]
fn deep_nesting_does_not_crash() {
    in_child("child_nested_3000_deep");
    in_child("child_ir_text_nested_100000_deep");
}

// ---- grids --------------------------------------------------------------------------

fn one_program() -> JitKernel {
    tl::jit("one", |k| {
        let y = k.ptr(I32, "y");
        tl::store(y + tl::program_id(0), tl::program_id(1));
    })
    .unwrap()
}

#[test]
fn grids_beyond_the_per_axis_limits_are_rejected() {
    let k = one_program();
    let huge = 1usize << 30;
    for (g, axis) in [
        ([huge, huge, 1], 1),
        ([1, 1, 65536], 2),
        ([1, 65536, 1], 1),
        ([1 << 31, 1, 1], 0),
        ([usize::MAX, 1, 1], 0),
    ] {
        for t in [
            Target::Cpu,
            Target::CpuCompiled,
            Target::Emulated(LaneOrder::Forward),
        ] {
            let e = k
                .launch()
                .grid(g)
                .args((out(&[1], I32),))
                .target(t)
                .run()
                .expect_err("grid beyond the limits");
            let msg = e.to_string();
            assert!(
                matches!(e, Error::Launch { .. })
                    && msg.contains("kernel `one`")
                    && msg.contains(&format!("axis {axis}"))
                    && msg.contains(&MAX_GRID[axis].to_string()),
                "{g:?} {t:?}: {msg}"
            );
        }
    }
    // On Metal, axis 0 also counts threads: 2^31 - 1 programs of 128 threads do not fit.
    let e = k
        .launch()
        .grid([MAX_GRID[0], 1, 1])
        .args((out(&[1], I32),))
        .target(Target::Emulated(LaneOrder::Forward))
        .run()
        .expect_err("threads beyond 2^31")
        .to_string();
    assert!(e.contains("threads per program"), "{e}");
    // The largest legal grid on axes 1 and 2 runs.
    for t in support::targets("grids_beyond_the_per_axis_limits_are_rejected") {
        let y = k
            .launch()
            .grid([1, MAX_GRID[1], 1])
            .args((out(&[1], I32),))
            .target(t)
            .run()
            .unwrap_or_else(|e| panic!("{t:?}: {e}"));
        // Programs race on y[0]; each stores its own axis-1 id.
        let v = y[0].to_vec::<i32>().unwrap()[0];
        assert!((0..MAX_GRID[1] as i32).contains(&v), "{t:?}: {v}");
    }
}

// ---- many parameters ----------------------------------------------------------------

/// 69 read-only inputs and one output: the output is the sum of all inputs.
#[test]
fn seventy_pointer_parameters_keep_their_own_access() {
    let n_in = 69;
    let k = tl::jit("many", move |k| {
        let ins: Vec<Tensor> = (0..n_in).map(|i| k.ptr(F32, &format!("in{i}"))).collect();
        let y = k.ptr(F32, "y");
        let offs = tl::arange(0, 16);
        let mut acc = tl::zeros([16], F32);
        for p in ins {
            acc += tl::load(p + offs);
        }
        tl::store(y + offs, acc);
    })
    .unwrap();
    let spec = k.specialize_with(&[]).unwrap();
    for (i, p) in spec.params.iter().enumerate() {
        assert_eq!(p.stored, i == n_in, "param {i} `{}`", p.name);
        assert_eq!(p.loaded, i < n_in, "param {i} `{}`", p.name);
    }
    let inputs: Vec<Array> = (0..n_in)
        .map(|i| Array::from_slice(&[i as f32; 16], &[16]).unwrap())
        .collect();
    let want = (0..n_in).sum::<usize>() as f32;
    for t in support::targets("seventy_pointer_parameters_keep_their_own_access") {
        let mut l = k.launch().grid([1]).target(t);
        for a in &inputs {
            l = l.arg(a);
        }
        let y = l.arg(out_like(&inputs[0])).run();
        if matches!(t, Target::Emulated(_)) {
            // Metal has 31 buffer slots.
            let e = y.expect_err("70 buffers on Metal").to_string();
            assert!(e.contains("70 buffers") && e.contains("31"), "{e}");
        } else {
            let y = y.unwrap_or_else(|e| panic!("{t:?}: {e}"));
            assert_eq!(vals(&y[0]), vec![want; 16], "{t:?}");
        }
    }
}

// ---- silent acceptance --------------------------------------------------------------

/// Builds a one-op kernel and returns its build error.
fn build_err(name: &str, body: impl Fn(Tensor) + Send + Sync + 'static) -> String {
    let e = tl::jit(name, move |k| {
        let p = k.ptr(I32, "p");
        body(p);
    })
    .err()
    .unwrap_or_else(|| panic!("`{name}` must not build"));
    assert!(matches!(e, Error::Build { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("kernel `{name}`")) && msg.contains("hostile.rs:"),
        "{msg}"
    );
    msg
}

#[test]
fn lossy_literals_and_conversions_are_build_errors() {
    use triton_metal::DType::{Bool, F16, I8};
    let e = build_err("full_f16_overflow", |_| {
        tl::full([16], 1e40, F16);
    });
    assert!(
        e.contains("`full`") && e.contains("out of range for type fp16"),
        "{e}"
    );
    let e = build_err("full_f32_overflow", |_| {
        tl::full([16], 1e300, F32);
    });
    assert!(e.contains("out of range for type fp32"), "{e}");
    let e = build_err("full_int_overflow_f16", |_| {
        tl::full([16], 1i64 << 20, F16);
    });
    assert!(e.contains("out of range for type fp16"), "{e}");
    for (name, v) in [
        ("full_nan_i32", f64::NAN),
        ("full_inf_i32", f64::INFINITY),
        ("full_frac_i32", 2.5),
    ] {
        let e = build_err(name, move |_| {
            tl::full([16], v, I32);
        });
        assert!(e.contains("is a float but dtype int32 is not"), "{e}");
    }
    let e = build_err("argmax_bool", |p| {
        let b = tl::load(p + tl::arange(0, 16)).gt(0);
        tl::store(p, tl::argmax(b, 0));
    });
    assert!(e.contains("`argmax`") && e.contains("bool"), "{e}");
    let e = build_err("argmin_bool", |p| {
        let b = tl::full([16], true, Bool);
        tl::store(p, tl::argmin(b, 0));
    });
    assert!(e.contains("`argmin`") && e.contains("bool"), "{e}");
    let e = build_err("cas_f32_value", |p| {
        let v = tl::full([0i64; 0], 1.5, F32);
        tl::atomic_cas(p, 0, v);
    });
    assert!(
        e.contains("`atomic_cas`") && e.contains("val is fp32") && e.contains("int32"),
        "{e}"
    );
    let e = build_err("cas_f32_literal", |p| {
        tl::atomic_cas(p, 0.5, 1);
    });
    assert!(e.contains("cmp:") && e.contains("is a float"), "{e}");
    let e = build_err("dot_i8_f16", |p| {
        let a = tl::zeros([16, 16], I8);
        let c = tl::dot_out(a, a, None, F16);
        tl::store(p + tl::arange(0, 16), tl::sum(c, 1).to(I32));
    });
    assert!(
        e.contains("`dot`") && e.contains("out_dtype=fp16") && e.contains("int32"),
        "{e}"
    );
    let e = build_err("dot_f32_f16", |p| {
        let a = tl::zeros([16, 16], F32);
        let c = tl::dot_out(a, a, None, F16);
        tl::store(p + tl::arange(0, 16), tl::sum(c, 1).to(I32));
    });
    assert!(
        e.contains("out_dtype=fp16") && e.contains("always fp32"),
        "{e}"
    );
    // What stays legal: infinities, NaN for floats, zero as a float for ints, matching CAS.
    tl::jit("legal", |k| {
        let p = k.ptr(I32, "p");
        let q = k.ptr(F32, "q");
        let offs = tl::arange(0, 16);
        let inf = tl::full([16], f64::INFINITY, F16).to(F32);
        let nan = tl::full([16], f64::NAN, F32);
        tl::store(q + offs, inf + nan);
        tl::store(p + offs, tl::full([16], 0.0, I32));
        tl::atomic_cas(p, 0, tl::program_id(0));
        tl::store(
            q,
            tl::dot_out(
                tl::zeros([16, 16], F32),
                tl::zeros([16, 16], F32),
                None,
                F32,
            )
            .sum(None),
        );
    })
    .unwrap();
}

#[test]
fn float_scalars_that_would_become_inf_are_launch_errors() {
    let k = tl::jit("scale", |k| {
        let y = k.ptr(F32, "y");
        let s = k.scalar(F32, "s");
        tl::store(y + tl::arange(0, 16), tl::zeros([16], F32) + s);
    })
    .unwrap();
    for bad in [1e300, -1e39] {
        let e = k
            .launch()
            .grid([1])
            .args((out(&[16], F32), bad))
            .run()
            .expect_err("1e300 does not fit f32");
        let msg = e.to_string();
        assert!(
            matches!(e, Error::Launch { .. })
                && msg.contains("`s`")
                && msg.contains("does not fit in f32"),
            "{msg}"
        );
    }
    let half = tl::jit("scale_f16", |k| {
        let y = k.ptr(triton_metal::DType::F16, "y");
        let s = k.scalar(triton_metal::DType::F16, "s");
        tl::store(
            y + tl::arange(0, 16),
            tl::zeros([16], triton_metal::DType::F16) + s,
        );
    })
    .unwrap();
    for bad in [70000.0, -1e5] {
        let e = half
            .launch()
            .grid([1])
            .args((out(&[16], triton_metal::DType::F16), bad))
            .run()
            .expect_err("beyond f16")
            .to_string();
        assert!(
            e.contains("`s`") && e.contains("does not fit in f16"),
            "{e}"
        );
    }
    let e = half
        .launch()
        .grid([1])
        .args((out(&[16], triton_metal::DType::F16), 1i64 << 20))
        .run()
        .expect_err("an integer beyond f16")
        .to_string();
    assert!(e.contains("does not fit in f16"), "{e}");
    for ok in [f64::INFINITY, 3.0e38, -1e-45] {
        let y = k
            .launch()
            .grid([1])
            .args((out(&[16], F32), ok))
            .target(Target::Cpu)
            .run()
            .unwrap();
        assert_eq!(vals(&y[0])[0], ok as f32);
    }
}

// ---- targets unavailable here -------------------------------------------------------

#[test]
fn unavailable_targets_name_the_kernel() {
    let k = one_program();
    for t in [Target::Metal, Target::Cuda] {
        let e = k
            .launch()
            .grid([1])
            .args((out(&[1], I32),))
            .target(t)
            .run()
            .expect_err("no Apple or NVIDIA GPU here")
            .to_string();
        assert!(e.contains("kernel `one"), "{t:?}: {e}");
    }
}

/// A bogus `TRITON_METAL_TARGET` (its own process: the variable is process-wide).
#[test]
#[ignore = "run in its own process by `bogus_target_variable_names_the_kernel`"]
fn child_bogus_target_variable() {
    std::env::set_var("TRITON_METAL_TARGET", "gpu-please");
    let e = one_program()
        .launch()
        .grid([1])
        .args((out(&[1], I32),))
        .run()
        .expect_err("bogus target")
        .to_string();
    assert!(
        e.contains("kernel `one`") && e.contains("TRITON_METAL_TARGET=gpu-please"),
        "{e}"
    );
}

#[test]
fn bogus_target_variable_names_the_kernel() {
    in_child("child_bogus_target_variable");
}

// ---- identifiers ---------------------------------------------------------------------

/// Parameter names that are keywords, macros, reserved or MLX's own names in C++, Metal or
/// CUDA work on every target (generated code mangles them).
#[test]
fn keyword_parameter_names_work_on_every_target() {
    let ins = [
        "constexpr",
        "nullptr",
        "thread",
        "device",
        "a__b",
        "_x",
        "thread_position_in_grid",
        "x",
        "x_shape",
        "tm_x",
        "threadIdx",
        "int64_t",
        "linux",
        "select",
    ];
    let k = tl::jit("keywords", move |k| {
        let ptrs: Vec<Tensor> = ins.iter().map(|n| k.ptr(F32, n)).collect();
        let scale = k.scalar(F32, "NULL");
        let n = k.scalar(I32, "static_assert");
        let y = k.ptr(F32, "__global__");
        let offs = tl::arange(0, 16);
        let mask = offs.lt(n);
        let mut acc = tl::zeros([16], F32);
        for (i, p) in ptrs.into_iter().enumerate() {
            acc += tl::load(p + offs).mask(mask).other(0.0) * (i + 1) as f64;
        }
        tl::store(y + offs, acc * scale).mask(mask);
    })
    .unwrap();
    let inputs: Vec<Array> = (0..ins.len())
        .map(|i| {
            let v: Vec<f32> = (0..16).map(|j| (i * 16 + j) as f32).collect();
            Array::from_slice(&v, &[16]).unwrap()
        })
        .collect();
    let want: Vec<f32> = (0..16)
        .map(|j| {
            if j < 13 {
                let s: usize = (0..ins.len()).map(|i| (i + 1) * (i * 16 + j)).sum();
                s as f32 * 0.5
            } else {
                -1.0
            }
        })
        .collect();
    let launch = |t: Target| {
        let mut l = k.launch().grid([1]).target(t);
        for a in &inputs {
            l = l.arg(a);
        }
        l.arg(0.5f32).arg(13).arg(out(&[16], F32).fill(-1.0))
    };
    for t in support::targets("keyword_parameter_names_work_on_every_target") {
        let y = launch(t).run().unwrap_or_else(|e| panic!("{t:?}: {e}"));
        assert_eq!(vals(&y[0]), want, "{t:?}");
    }
    support::nvrtc_compiles(&launch(Target::Cuda));
}

/// Kernel and parameter names in any script (valid Rust identifiers) work on every target:
/// generated code spells them in ASCII, errors keep the user's names.
#[test]
fn unicode_kernel_and_parameter_names_work_on_every_target() {
    let k = tl::jit("größe_π_数据", |k| {
        let x = k.ptr(F32, "größe");
        let s = k.scalar(F32, "π");
        let n = k.scalar(I32, "数据");
        let y = k.ptr(F32, "выход");
        let offs = tl::arange(0, 16);
        let m = offs.lt(n);
        tl::store(y + offs, tl::load(x + offs).mask(m).other(0.0) * s).mask(m);
    })
    .unwrap();
    let x: Vec<f32> = (0..16).map(|i| i as f32).collect();
    let xa = Array::from_slice(&x, &[16]).unwrap();
    let want: Vec<f32> = (0..16)
        .map(|i| if i < 12 { i as f32 * 2.0 } else { -1.0 })
        .collect();
    let launch = |t: Target| {
        k.launch()
            .grid([1])
            .args((&xa, 2.0f32, 12, out(&[16], F32).fill(-1.0)))
            .target(t)
    };
    for t in support::targets("unicode_kernel_and_parameter_names_work_on_every_target") {
        let y = launch(t).run().unwrap_or_else(|e| panic!("{t:?}: {e}"));
        assert_eq!(vals(&y[0]), want, "{t:?}");
    }
    let p = launch(Target::Cuda).msl().unwrap();
    assert!(p.name.is_ascii() && p.source.is_ascii(), "{}", p.name);
    let c = launch(Target::Cuda).cuda().unwrap();
    assert!(c.name.is_ascii() && c.standalone().is_ascii(), "{}", c.name);
    support::nvrtc_compiles(&launch(Target::Cuda));
    // Errors show the user's names.
    let e = k
        .launch()
        .grid([1])
        .args((&xa, 2.0f32, 12))
        .run()
        .expect_err("an argument is missing")
        .to_string();
    assert!(
        e.contains("kernel `größe_π_数据`") && e.contains("выход"),
        "{e}"
    );
    // A name that is no identifier at all is still refused.
    let e = tl::jit("größe-1", |_| {})
        .expect_err("`-` in a name")
        .to_string();
    assert!(e.contains("not a valid kernel name"), "{e}");
}

// ---- errors of generated programs ----------------------------------------------------

/// Errors from running a generated Metal program name the user's kernel (not the
/// generated program's hashed name) and the user's parameter names.
#[test]
fn errors_of_generated_programs_name_the_kernel() {
    let k = tl::jit("overrun", |k| {
        let y = k.ptr(F32, "ausgabe_ö");
        let offs = tl::arange(0, 16);
        tl::store(y + 16 + offs, tl::zeros([16], F32));
    })
    .unwrap();
    let launch = |t: Target| k.launch().grid([1]).args((out(&[16], F32),)).target(t);
    let program = launch(Target::Cpu).msl().unwrap().name.clone();
    assert!(program.starts_with("overrun_") && program != "overrun");
    let mut ts = vec![Target::Cpu, Target::Metal, Target::Cuda];
    if Emulator::should_run("errors_of_generated_programs_name_the_kernel").unwrap() {
        ts.extend([Target::CpuCompiled, Target::Emulated(LaneOrder::Forward)]);
    }
    for t in ts {
        let e = match launch(t).run() {
            Err(e) => e,
            Ok(y) => y[0].eval().expect_err("a store past the end"),
        }
        .to_string();
        assert!(
            e.contains("kernel `overrun`") && !e.contains(&format!("kernel `{program}`")),
            "{t:?}: {e}"
        );
        if matches!(t, Target::Emulated(_)) {
            // The emulator names the program's output by its generated identifier: the
            // error gives the user's name too.
            assert!(
                e.contains(&program) && e.contains("`ausgabe_ö`") && e.contains("out of bounds"),
                "{e}"
            );
        }
    }
}

// ---- very large kernels --------------------------------------------------------------

/// A chain of `steps` multiply-adds on one block.
fn chain(steps: usize) -> JitKernel {
    tl::jit("long_chain", move |k| {
        let x = k.ptr(F32, "x");
        let y = k.ptr(F32, "y");
        let offs = tl::arange(0, 16);
        let mut v = tl::load(x + offs);
        for _ in 0..steps {
            v = v * 0.5 + 1.0;
        }
        tl::store(y + offs, v);
    })
    .unwrap()
}

fn ops_of(k: &JitKernel) -> usize {
    let s = k.specialize_with(&[]).unwrap();
    s.regions.iter().map(|r| r.ops.len()).sum()
}

/// The most steps of [`chain`] within `limit` ops, that kernel's op count, and the ops
/// of one step.
fn chain_within(limit: usize) -> (usize, usize, usize) {
    let base = ops_of(&chain(0));
    let per_step = ops_of(&chain(1)) - base;
    let steps = (limit - base) / per_step;
    (steps, base + steps * per_step, per_step)
}

/// Kernels over the compile limits are refused at launch, before anything is compiled,
/// naming the kernel, its size, the limit and the way out; the interpreter runs them.
#[test]
fn kernels_over_the_size_limits_are_refused_before_compiling() {
    use triton_metal::runtime::{MAX_COMPILED_OPS, MAX_EMULATED_OPS};
    let x = Array::from_slice(&[1.0f32; 16], &[16]).unwrap();
    let big = chain(MAX_COMPILED_OPS);
    let n_big = ops_of(&big);
    let (steps, n_emu, _) = chain_within(MAX_EMULATED_OPS + 1);
    let over_emu = chain(steps + 1);
    let cases = [
        (&big, n_big, MAX_COMPILED_OPS, Target::CpuCompiled),
        (&big, n_big, MAX_COMPILED_OPS, Target::Metal),
        (&big, n_big, MAX_COMPILED_OPS, Target::Cuda),
        (
            &big,
            n_big,
            MAX_EMULATED_OPS,
            Target::Emulated(LaneOrder::Forward),
        ),
        (
            &over_emu,
            ops_of(&over_emu),
            MAX_EMULATED_OPS,
            Target::Emulated(LaneOrder::Reverse),
        ),
    ];
    assert!(n_emu <= MAX_EMULATED_OPS + 1);
    for (k, ops, limit, t) in cases {
        assert!(ops > limit);
        let start = std::time::Instant::now();
        let e = k
            .launch()
            .grid([1])
            .args((&x, out(&[16], F32)))
            .target(t)
            .run()
            .expect_err("too large to compile");
        let msg = e.to_string();
        assert!(
            matches!(e, Error::Launch { .. })
                && msg.contains("kernel `long_chain`")
                && msg.contains(&format!("{ops} ops"))
                && msg.contains(&format!("the {limit} that"))
                && msg.contains("Target::Cpu"),
            "{t:?}: {msg}"
        );
        assert!(
            start.elapsed().as_secs() < 10,
            "{t:?}: {:?}",
            start.elapsed()
        );
    }
    // The interpreter has no limit.
    let y = big
        .launch()
        .grid([1])
        .args((&x, out(&[16], F32)))
        .target(Target::Cpu)
        .run()
        .unwrap();
    assert_eq!(vals(&y[0]), vec![2.0; 16]);
}

/// A kernel at the limit is accepted: the compiled CPU executor runs one at the emulator's
/// limit, and one at the compile limit passes the launch's checks (its compile, tens of
/// seconds on two cores, is left out) and is printed for Metal and CUDA.
#[test]
fn kernels_at_the_size_limits_are_accepted() {
    use triton_metal::runtime::{MAX_COMPILED_OPS, MAX_EMULATED_OPS};
    let x = Array::from_slice(&[3.0f32; 16], &[16]).unwrap();
    let (steps, ops, step) = chain_within(MAX_EMULATED_OPS);
    assert!(
        ops + step > MAX_EMULATED_OPS && ops <= MAX_EMULATED_OPS,
        "{ops}"
    );
    let k = chain(steps);
    let mut ts = vec![Target::Cpu];
    if Emulator::should_run("kernels_at_the_size_limits_are_accepted").unwrap() {
        ts.push(Target::CpuCompiled);
    }
    for t in ts {
        let y = k
            .launch()
            .grid([1])
            .args((&x, out(&[16], F32)))
            .target(t)
            .run()
            .unwrap_or_else(|e| panic!("{t:?}: {e}"));
        // x -> x / 2 + 1 converges to 2 from 3.
        assert_eq!(vals(&y[0]), vec![2.0; 16], "{t:?}");
    }
    let (steps, ops, step) = chain_within(MAX_COMPILED_OPS);
    assert!(
        ops + step > MAX_COMPILED_OPS && ops <= MAX_COMPILED_OPS,
        "{ops}"
    );
    let k = chain(steps);
    let launch = |t: Target| k.launch().grid([1]).args((&x, out(&[16], F32))).target(t);
    // Lazy: the launch is checked and recorded; it would compile when evaluated.
    let y = launch(Target::CpuCompiled).run().unwrap();
    drop(y);
    assert!(launch(Target::Cuda).msl().is_ok() && launch(Target::Cuda).cuda().is_ok());
}
