//! Triton's integer specialisation: arguments equal to 1 become constants and multiples of
//! 16 known facts, so unit-stride accesses are read as vectors. Results must not change, on
//! any target, whether the facts are applied or not, including remainders of negative
//! indices, whose vector accesses are checked at run time.

mod support;

use triton_metal::runtime::{out, Target};
use triton_metal::tl::{self, JitKernel};
use triton_metal::{mlx, Array, DType::F32, DType::I32};

/// Program `p` reads `x[p * 64 + base + ((i - shift) % n) * stride]` for `i` in 0..64 and
/// writes it to `out[p * 64 + i]`.
fn wrapped_gather() -> JitKernel {
    tl::jit("wrapped_gather", |k| {
        let x = k.ptr(F32, "x");
        let o = k.ptr(F32, "out");
        let n = k.scalar(I32, "n");
        let shift = k.scalar(I32, "shift");
        let base = k.scalar(I32, "base");
        let stride = k.scalar(I32, "stride");
        let offs = tl::arange(0, 64);
        let row = tl::program_id(0) * 64;
        let col = base + (offs - shift) % n;
        let v = tl::load(x + row + col * stride);
        tl::store(o + row + offs, v);
    })
    .unwrap()
}

fn expected(x: &[f32], programs: usize, n: i32, shift: i32, base: i32, stride: i32) -> Vec<f32> {
    let mut want = Vec::new();
    for p in 0..programs as i32 {
        for i in 0..64i32 {
            // C's remainder: the dividend's sign.
            let col = base + (i - shift) % n;
            want.push(x[(p * 64 + col * stride) as usize]);
        }
    }
    want
}

fn run(
    k: &JitKernel,
    x: &Array,
    programs: usize,
    args: [i32; 4],
    target: Target,
    spec: bool,
) -> Vec<f32> {
    let [n, shift, base, stride] = args;
    let r = k
        .launch()
        .grid([programs])
        .args((
            x,
            out(&[programs * 64], F32).fill(f64::NAN),
            n,
            shift,
            base,
            stride,
        ))
        .specialize_integers(spec)
        .target(target)
        .run()
        .unwrap();
    r[0].to_vec::<f32>().unwrap()
}

#[test]
fn remainders_of_negative_indices_read_the_same_elements_with_and_without_facts() {
    let k = wrapped_gather();
    let programs = 3;
    let len = programs * 64 + 64 * 3;
    let x = mlx::random::normal(&[len], F32, 7).unwrap();
    let xs = x.to_vec::<f32>().unwrap();
    // n = 16 (a multiple of 16) and stride = 1: both facts apply. `shift` 0 keeps every
    // dividend non-negative; 20 makes some negative, crossing -16 inside a run of 8, where
    // C's remainder jumps (-17 % 16 = -1, -16 % 16 = 0, -15 % 16 = -15): the vector path's
    // run-time check must send that run to the scalar path.
    for args in [
        [16, 0, 20, 1],
        [16, 20, 20, 1],
        [16, 5, 20, 1],
        [32, 40, 40, 1],
        [16, 20, 20, 2],
    ] {
        let want = expected(&xs, programs, args[0], args[1], args[2], args[3]);
        for t in support::targets("int_spec") {
            for spec in [false, true] {
                let got = run(&k, &x, programs, args, t, spec);
                assert_eq!(
                    got.iter().map(|f| f.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|f| f.to_bits()).collect::<Vec<_>>(),
                    "{t:?}, specialised: {spec}, (n, shift, base, stride) = {args:?}"
                );
            }
        }
        let l = k
            .launch()
            .grid([programs])
            .args((
                &x,
                out(&[programs * 64], F32),
                args[0],
                args[1],
                args[2],
                args[3],
            ))
            .specialize_integers(true);
        support::nvrtc_compiles(&l);
    }
}

#[test]
fn facts_change_the_kernel_that_runs_and_compile_once_per_combination() {
    let k = wrapped_gather();
    let x = mlx::zeros(&[1024], F32).unwrap();
    let launch = |stride: i32| {
        k.launch()
            .grid([1])
            .args((&x, out(&[64], F32), 16, 0, 0, stride))
    };
    let one = launch(1).specialize().unwrap();
    let again = launch(1).specialize().unwrap();
    let three = launch(3).specialize().unwrap();
    assert!(std::sync::Arc::ptr_eq(&one, &again));
    assert!(one.ir().contains("constant 1"), "{}", one.ir());
    assert!(!three.ir().contains("constant 1"), "{}", three.ir());
    let off = launch(1)
        .do_not_specialize(&["stride"])
        .specialize()
        .unwrap();
    assert!(!off.ir().contains("constant 1"), "{}", off.ir());
    let off = launch(1).specialize_integers(false).specialize().unwrap();
    assert!(std::sync::Arc::ptr_eq(&off, &three) || !off.ir().contains("constant 1"));
    // With the facts, the emulated Metal kernel reads the unit-stride row as vectors.
    let msl = launch(1).specialize_integers(true).msl().unwrap();
    assert!(msl.source.contains("packed_float"), "{}", msl.source);
}

#[test]
fn do_not_specialize_names_integer_parameters_only() {
    let k = wrapped_gather();
    let x = mlx::zeros(&[1024], F32).unwrap();
    for name in ["x", "nope"] {
        let e = k
            .launch()
            .grid([1])
            .args((&x, out(&[64], F32), 16, 0, 0, 1))
            .do_not_specialize(&[name])
            .target(Target::Cpu)
            .run()
            .expect_err("not an integer parameter");
        let m = e.to_string();
        assert!(m.contains(name) && m.contains("wrapped_gather"), "{m}");
    }
}
