//! DSL tests: building kernels, the text form, promotion rules, and invalid kernels.

use std::collections::BTreeMap;

use super::*;
use crate::dtype::DType::{self, *};
use crate::error::Error;
use crate::ir::{Kernel, Op, ReduceKind};

fn cx(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
    pairs.iter().map(|(n, v)| (n.to_string(), *v)).collect()
}

fn build_ok(name: &str, pairs: &[(&str, i64)], f: impl FnOnce(&mut KernelBuilder)) -> Kernel {
    match build(name, &cx(pairs), f) {
        Ok(k) => {
            // Every kernel built in these tests round-trips through the text form.
            let text = k.ir();
            let parsed =
                Kernel::parse_ir(&text).unwrap_or_else(|e| panic!("reparse failed: {e}\n{text}"));
            assert_eq!(parsed.ir(), text);
            assert_eq!(parsed.outputs(), k.outputs());
            k
        }
        Err(e) => panic!("build failed: {e}"),
    }
}

fn build_err(f: impl FnOnce(&mut KernelBuilder)) -> (String, String, u32) {
    match build("bad", &BTreeMap::new(), f) {
        Ok(k) => panic!("expected an error, got kernel:\n{}", k.ir()),
        Err(Error::Build {
            kernel,
            op,
            loc,
            msg,
        }) => {
            assert_eq!(kernel, "bad");
            assert!(
                loc.file.ends_with("tests.rs"),
                "location should be the user's line: {loc}"
            );
            (op, msg, loc.line)
        }
        Err(e) => panic!("unexpected error kind: {e}"),
    }
}

fn vector_add(k: &mut KernelBuilder) {
    let (x_ptr, y_ptr, out_ptr) = (
        k.ptr(F32, "x_ptr"),
        k.ptr(F32, "y_ptr"),
        k.ptr(F32, "output_ptr"),
    );
    let n = k.scalar(I32, "n_elements");
    let block = k.constexpr("BLOCK_SIZE");
    let pid = program_id(0);
    let offsets = pid * block + arange(0, block);
    let mask = offsets.lt(n);
    let x = load(x_ptr + offsets).mask(mask);
    let y = load(y_ptr + offsets).mask(mask);
    store(out_ptr + offsets, x + y).mask(mask);
}

#[test]
fn vector_add_text_snapshot() {
    let k = build_ok("add_kernel", &[("BLOCK_SIZE", 4)], |k| {
        vector_add(k);
        assert_eq!(k.constexpr("BLOCK_SIZE"), 4); // asking again is fine
    });
    let want = "\
kernel add_kernel(%0: ptr<f32> x_ptr, %1: ptr<f32> y_ptr, %2: ptr<f32> output_ptr, %3: i32 n_elements) [BLOCK_SIZE=4] {
  %4 = program_id 0 : i32
  %5 = constant 4 : i32
  %6 = mul %4, %5 : i32
  %7 = arange 0, 4 : i32[4]
  %8 = splat %6 : i32[4]
  %9 = add %8, %7 : i32[4]
  %10 = splat %3 : i32[4]
  %11 = lt %9, %10 : bool[4]
  %12 = splat %0 : ptr<f32>[4]
  %13 = addptr %12, %9 : ptr<f32>[4]
  %14 = load %13, mask %11 : f32[4]
  %15 = splat %1 : ptr<f32>[4]
  %16 = addptr %15, %9 : ptr<f32>[4]
  %17 = load %16, mask %11 : f32[4]
  %18 = splat %2 : ptr<f32>[4]
  %19 = addptr %18, %9 : ptr<f32>[4]
  %20 = add %14, %17 : f32[4]
  store %19, %20, mask %11
}
";
    assert_eq!(k.ir(), want, "got:\n{}", k.ir());
    assert_eq!(k.outputs(), vec![2]);
    assert!(k.params[0].loaded && !k.params[0].stored);
    assert!(k.params[2].stored && !k.params[2].loaded);
    assert!(!k.params[3].stored);
    assert_eq!(k.constexpr("BLOCK_SIZE"), Some(4));
}

#[test]
fn jit_caches_specialisations_and_reports_missing_constexpr() {
    let add = jit("add_kernel", vector_add).unwrap();
    assert_eq!(add.cached(), 0);
    let a = add.specialize_with(&[("BLOCK_SIZE", 1024)]).unwrap();
    let b = add.specialize_with(&[("BLOCK_SIZE", 1024)]).unwrap();
    assert!(std::sync::Arc::ptr_eq(&a, &b));
    let c = add.specialize_with(&[("BLOCK_SIZE", 256)]).unwrap();
    assert_eq!(
        c.ty(c
            .ops
            .iter()
            .find_map(|o| matches!(o.op, Op::Arange { .. }).then(|| o.results.start))
            .map(crate::ir::Value)
            .unwrap())
            .shape,
        vec![256]
    );
    assert_eq!(add.cached(), 2);
    let e = add.specialize(&BTreeMap::new()).unwrap_err().to_string();
    assert!(e.contains("constexpr `BLOCK_SIZE` was not given"), "{e}");
    let e = add
        .specialize_with(&[("BLOCK_SIZE", 8), ("EXTRA", 1)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown constexpr"), "{e}");
    let e = add
        .specialize_with(&[("BLOCK_SIZE", 3)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("power of 2"), "{e}");
}

#[test]
fn jit_without_constexprs_reports_errors_early() {
    let e = jit("k", |k| {
        let p = k.ptr(F32, "p");
        store(p + arange(0, 6), 1.0);
    })
    .unwrap_err();
    assert!(e.to_string().contains("power of 2"), "{e}");
    assert!(jit("bad name", |_| {}).is_err());
}

/// Triton's promotion table (`computation_type_impl`), tensor op tensor.
#[test]
fn promotion_table() {
    let cases: &[(DType, DType, DType)] = &[
        (I32, I32, I32),
        (I8, I32, I32),
        (I32, I64, I64),
        (U32, I32, U32),
        (I64, U32, I64),
        (U8, I8, U8),
        (Bool, I8, I8),
        (Bool, U8, U8),
        (Bool, Bool, Bool),
        (I32, F16, F16),
        (I64, BF16, F32), // bf16 with anything but bf16 gives fp32
        (F16, BF16, F16), // fp16 beats bf16
        (BF16, BF16, BF16),
        (F16, F16, F16),
        (F16, F32, F32),
        (F32, F64, F64),
        (I64, F32, F32),
        (U64, F16, F16),
    ];
    for &(a, b, want) in cases {
        assert_eq!(
            computation_type(a, false, b, false, false),
            Ok(want),
            "{a} op {b}"
        );
        assert_eq!(
            computation_type(b, false, a, false, false),
            Ok(want),
            "{b} op {a}"
        );
    }
    // Division and modulo: fp16/bf16 compute in fp32; mixed signedness is an error.
    assert_eq!(computation_type(F16, false, F16, false, true), Ok(F32));
    assert_eq!(computation_type(BF16, false, BF16, false, true), Ok(F32));
    assert!(computation_type(I32, false, U32, false, true).is_err());
    // Scalars of the same or a lower kind do not change the tensor type.
    assert_eq!(computation_type(I8, false, I32, true, false), Ok(I8));
    assert_eq!(computation_type(U8, false, I32, true, false), Ok(U8));
    assert_eq!(computation_type(F16, false, F32, true, false), Ok(F16));
    assert_eq!(computation_type(F16, false, I32, true, false), Ok(F16));
    assert_eq!(computation_type(F16, false, F32, true, true), Ok(F32));
    // A scalar of a higher kind does.
    assert_eq!(computation_type(I32, false, F32, true, false), Ok(F32));
    assert_eq!(computation_type(I8, false, F32, true, false), Ok(F32));
    assert_eq!(computation_type(Bool, false, I32, true, false), Ok(I32));
    // Literal types.
    assert_eq!(scalar_dtype(Scalar::Int(1)), Ok(I32));
    assert_eq!(scalar_dtype(Scalar::Int(1 << 31)), Ok(U32));
    assert_eq!(scalar_dtype(Scalar::Int(1 << 32)), Ok(I64));
    assert_eq!(scalar_dtype(Scalar::Int(1 << 63)), Ok(U64));
    assert!(scalar_dtype(Scalar::Int(1 << 64)).is_err());
    assert_eq!(scalar_dtype(Scalar::Float(0.5)), Ok(F32));
    assert_eq!(scalar_dtype(Scalar::Float(1e300)), Ok(F64));
    assert_eq!(scalar_dtype(Scalar::Bool(true)), Ok(Bool));
}

/// Result dtypes of ops built through the DSL.
#[test]
fn op_result_types() {
    let k = build_ok("types", &[], |k| {
        let pi = k.ptr(I32, "pi");
        let ph = k.ptr(F16, "ph");
        let pu = k.ptr(U8, "pu");
        let offs = arange(0, 16);
        let xi = load(pi + offs);
        let xh = load(ph + offs);
        let xu = load(pu + offs);
        let check = |t: Tensor, d: DType| assert_eq!(t.dtype(), d);
        check(xi / xi, F32); // int / int -> fp32
        check(floordiv(xi, 2), I32);
        check(xi % 3, I32);
        check(xh + 1.5, F16); // scalar float does not widen fp16
        check(xh / 2.0, F32); // but fp16 division computes in fp32
        check(xi + 1.5, F32); // float scalar over int tensor
        check(xu + 1, U8); // int scalar keeps uint8
        check(xh + xi, F16);
        check(xi.lt(3), Bool);
        check(xh.to(F32).exp(), F32);
        check(sum(xu, 0), U32);
        check(sum(xi.lt(0), 0), I32);
        check(sum(xh, 0), F16);
        check(max(xh, 0), F32);
        check(argmax(xh.to(F32), 0), I32);
        check(cumsum(xu, 0), U32);
        check(sigmoid(xi.to(F32)), F32);
        check(fdiv(xh, xh.to(F32)), F32);
        check(div_rn(xh.to(F32), 2.0), F32);
        check(sqrt_rn(xh.to(F32)), F32);
        check(libdevice::tanh(xh.to(F32)), F32);
        check(
            xi.to(F32)
                .exp2()
                .log2()
                .rsqrt()
                .sin()
                .cos()
                .erf()
                .floor()
                .ceil(),
            F32,
        );
        check(xi.cumprod(0).xor_sum(0), I32);
        assert_eq!(join(xi, xi).split().0.shape(), vec![16]);
        check(libdevice::pow(xh.to(F32), 2.0), F32);
        check(where_(xi.lt(2), xh, 0.0), F16);
        check(-xu, U8);
        check(!xi, I32);
        check(xi >> 1, I32);
        check(umulhi(xi, 3), I32);
        check(rand(42, offs), F32);
        store(ph + offs, rand(42, offs)); // used, so the Philox op survives dead-op removal
        check(randn(7, offs), F32);
        check(randint(7, offs), U32);
        assert_eq!(sum(xi, None).shape(), Vec::<usize>::new());
        assert_eq!(sum(xi, keep_dims(0)).shape(), vec![1]);
        let x2 = xi.reshape([4, 4]);
        assert_eq!(sum(x2, keep_dims(None)).shape(), vec![1, 1]);
        assert_eq!(max(x2, -1).shape(), vec![4]);
        assert_eq!(offs.col().shape(), vec![16, 1]);
        assert!(format!("{offs:?}").ends_with(": i32[16])"), "{offs:?}");
        assert_eq!(x2.col().shape(), vec![4, 1, 4]); // x[:, None] on 2-D
        assert_eq!(offs.row().shape(), vec![1, 16]);
        assert_eq!((offs.col() + offs.row()).shape(), vec![16, 16]);
        assert_eq!(trans(x2.reshape([2, 8])).shape(), vec![8, 2]);
        let j = join(xi, xi);
        assert_eq!(j.shape(), vec![16, 2]);
        let (a, b) = split(j);
        assert_eq!((a.shape(), b.dtype()), (vec![16], I32));
        assert_eq!(
            permute(x2.reshape([2, 2, 4]), [2, 0, 1]).shape(),
            vec![4, 2, 2]
        );
        assert_eq!(broadcast_to(offs, [4, 16]).shape(), vec![4, 16]);
        assert_eq!(ravel(x2).shape(), vec![16]);
        assert_eq!(interleave(x2, x2).shape(), vec![4, 8]);
        let (bx, by) = broadcast(offs.col(), offs.row());
        assert_eq!((bx.shape(), by.shape()), (vec![16, 16], vec![16, 16]));
        assert_eq!(softmax(xh.to(F32)).dtype(), F32);
        let (si, sj) = swizzle2d(program_id(0), program_id(1), 16, 16, 4);
        assert_eq!((si.dtype(), sj.dtype()), (I32, I32));
        let (mx, ix) = max_with_indices(x2, 1);
        assert_eq!((mx.shape(), ix.dtype()), (vec![4], I32));
    });
    assert!(k
        .ops
        .iter()
        .any(|o| matches!(o.op, Op::Philox { rounds: 10, .. })));
}

#[test]
fn matmul_with_loop_and_dot() {
    let k = build_ok("matmul", &[("BM", 32), ("BN", 32), ("BK", 16)], |k| {
        let (a_ptr, b_ptr, c_ptr) = (k.ptr(F16, "a"), k.ptr(F16, "b"), k.ptr(F32, "c"));
        let (m, n, kk) = (k.scalar(I32, "M"), k.scalar(I32, "N"), k.scalar(I32, "K"));
        let (bm, bn, bk) = (k.constexpr("BM"), k.constexpr("BN"), k.constexpr("BK"));
        let pid_m = program_id(0);
        let pid_n = program_id(1);
        let rm = pid_m * bm + arange(0, bm);
        let rn = pid_n * bn + arange(0, bn);
        let rk = arange(0, bk);
        let a_ptrs = a_ptr + (rm.col() * kk + rk.row());
        let b_ptrs = b_ptr + (rk.col() * n + rn.row());
        let acc = zeros([bm, bn], F32);
        let (acc, _, _) =
            range(0, cdiv(kk, bk), 1).fold((acc, a_ptrs, b_ptrs), |i, (acc, ap, bp)| {
                let k_rem = kk - i * bk;
                let a = load(ap).mask(rk.row().lt(k_rem)).other(0.0);
                let b = load(bp).mask(rk.col().lt(k_rem)).other(0.0);
                (dot(a, b, acc), ap + bk, bp + bk * n)
            });
        let mask = rm.col().lt(m) & rn.row().lt(n);
        store(c_ptr + rm.col() * n + rn.row(), acc).mask(mask);
    });
    let text = k.ir();
    assert!(text.contains("= for "), "{text}");
    assert!(text.contains("dot"), "{text}");
    assert_eq!(k.outputs(), vec![2]);
    assert!(k.params[0].loaded && k.params[1].loaded);
}

#[test]
fn softmax_row_kernel() {
    let k = build_ok("softmax", &[("BLOCK", 1024)], |k| {
        let (out, inp) = (k.ptr(F32, "out"), k.ptr(F32, "inp"));
        let (stride, ncols) = (k.scalar(I32, "stride"), k.scalar(I32, "n_cols"));
        let block = k.constexpr("BLOCK");
        let row = program_id(0);
        let cols = arange(0, block);
        let mask = cols.lt(ncols);
        let x = load(inp + row * stride + cols)
            .mask(mask)
            .other(f32::NEG_INFINITY);
        let z = x - max(x, 0);
        let num = exp(z);
        let den = sum(num, 0);
        store(out + row * stride + cols, num / den).mask(mask);
    });
    assert!(k.ops.iter().any(|o| matches!(
        o.op,
        Op::Reduce {
            kind: ReduceKind::Max,
            ..
        }
    )));
    assert!(k.ir().contains("other"));
}

#[test]
fn control_flow_while_if_reduce_scan() {
    let k = build_ok("cf", &[], |k| {
        let p = k.ptr(I32, "p");
        let n = k.scalar(I32, "n");
        let offs = arange(0, 8);
        let x = load(p + offs);
        // while i < n: i = i * 2
        let i = while_loop(program_id(0) + 1, |i| i.lt(n), |i| i * 2);
        let y = if_(i.gt(100), || x + 1, || x - 1);
        if_then(n.eq(0), || debug_barrier());
        let s = reduce(y, 0, |a, b| maximum(a, b));
        let (mx, idx) = reduce((y, offs), 0, |(a, ia), (b, ib)| {
            let gt = a.gt(b);
            (where_(gt, a, b), where_(gt, ia, ib))
        });
        let c = associative_scan(y, 0, false, |a, b| a + b);
        let r = range(0, n, 1).fold(s, |j, acc| acc + j);
        static_assert(offs.numel() == 8, "block of 8");
        let mut unrolled = zeros([8], I32);
        for j in static_range(0, 4, 1) {
            unrolled += j;
        }
        store(p + offs, c + r + mx + idx + unrolled);
    });
    let text = k.ir();
    for needle in [
        "while iter(",
        "cond {",
        "} body {",
        "if ",
        "then {",
        "} else {",
        "reduce custom",
        "scan custom",
        "combine {",
    ] {
        assert!(text.contains(needle), "missing `{needle}` in\n{text}");
    }
}

#[test]
fn atomics_and_hints() {
    let k = build_ok("atomics", &[], |k| {
        let p = k.ptr(F32, "p");
        let q = k.ptr(I32, "q");
        let offs = multiple_of(arange(0, 16), [16]);
        let offs = max_contiguous(offs, [16]);
        let old = atomic_add(p + offs, 1.0).mask(offs.lt(10));
        atomic_max(q + offs, 3);
        atomic_cas(q, 0, 1);
        atomic_xchg(q + offs, offs);
        atomic_or(q + offs, 1);
        store(p + offs, old);
    });
    assert_eq!(k.hints.len(), 2);
    assert_eq!(k.outputs(), vec![0, 1]);
}

#[test]
fn scalar_params_and_literals() {
    build_ok("scalars", &[], |k| {
        let p = k.ptr(I64, "p");
        let s64 = k.scalar(I64, "s");
        let f = k.scalar(F32, "f");
        let flag = k.scalar(Bool, "flag");
        let v = s64 * 3_000_000_000i64; // int64 literal with an int64 tensor
        let w = where_(flag, v, 0);
        store(p, w + (f * 2.0).to(I64));
        // Pointer arithmetic both ways and pointer selects.
        let q = where_(flag, p + 1, (p + 2) - 1);
        store(q, 7);
    });
}

// ---- invalid kernels: each must be a clear Err naming kernel, op and the user's line ----

fn expect(f: impl FnOnce(&mut KernelBuilder), op: &str, needle: &str) {
    let (got_op, msg, line) = build_err(f);
    assert_eq!(got_op, op, "wrong op for error: {msg}");
    assert!(
        msg.contains(needle),
        "message `{msg}` should contain `{needle}`"
    );
    assert!(line > 0);
}

#[test]
fn invalid_kernels_give_clear_errors() {
    // 1. arange size not a power of two
    expect(|_| ignore(arange(0, 10)), "arange", "power of 2");
    // 2. arange too large
    expect(
        |_| ignore(arange(0, 1 << 21)),
        "arange",
        "maximum block size",
    );
    // 3. incompatible shapes
    expect(
        |_| ignore(arange(0, 8) + arange(0, 16)),
        "add",
        "incompatible dimensions",
    );
    // 4. pointer + float
    expect(|k| ignore(k.ptr(F32, "p") + 1.5), "add", "invalid operands");
    // 5. pointer + pointer
    expect(
        |k| ignore(k.ptr(F32, "p") + k.ptr(F32, "q")),
        "add",
        "cannot add pointers",
    );
    // 6. load from a non-pointer
    expect(|_| ignore(load(arange(0, 4))), "load", "needs a pointer");
    // 7. non-bool mask
    expect(
        |k| ignore(load(k.ptr(F32, "p") + arange(0, 4)).mask(arange(0, 4))),
        "load",
        "boolean",
    );
    // 8. other without mask
    expect(
        |k| ignore(load(k.ptr(F32, "p") + arange(0, 4)).other(0.0)),
        "load",
        "without `mask`",
    );
    // 9. dot with K < 16
    expect(
        |_| ignore(dot(zeros([16, 8], F16), zeros([8, 16], F16), None)),
        "dot",
        "K >= 16",
    );
    // 10. dot dtype mismatch
    expect(
        |_| ignore(dot(zeros([16, 16], F16), zeros([16, 16], F32), None)),
        "dot",
        "same dtype",
    );
    // 11. dot inner dims mismatch
    expect(
        |_| ignore(dot(zeros([16, 32], F32), zeros([16, 16], F32), None)),
        "dot",
        "not compatible",
    );
    // 12. out-of-range literal for the tensor type
    expect(|_| ignore(zeros([4], I8) + 1000), "add", "out of range");
    // 13. negative literal with an unsigned tensor
    expect(|_| ignore(zeros([4], U32) + (-1)), "add", "unsigned");
    // 14. math on ints
    expect(|_| ignore(exp(arange(0, 4))), "exp", "fp32");
    // 15. bitwise on floats
    expect(|_| ignore(zeros([4], F32) & 1), "and", "integers");
    // 16. reduction axis out of range
    expect(|_| ignore(sum(arange(0, 4), 1)), "sum", "out of range");
    // 17. program_id axis
    expect(|_| ignore(program_id(3)), "program_id", "0, 1, or 2");
    // 18. reshape changing the element count
    expect(
        |_| ignore(arange(0, 8).reshape([2, 2])),
        "reshape",
        "number of elements",
    );
    // 19. loop-carried type change
    expect(
        |_| ignore(range(0, 4, 1).fold(zeros([4], F32), |_, acc| acc.to(I32))),
        "for",
        "loop-carried",
    );
    // 20. if branches of different types
    expect(
        |_| ignore(if_(true, || zeros([4], F32), || zeros([4], I32))),
        "if",
        "else branch",
    );
    // 21. block condition for if
    expect(|_| if_(arange(0, 4).lt(2), || (), || ()), "if", "scalar");
    // 22. static_assert
    expect(
        |_| static_assert(1 + 1 == 3, "math is broken"),
        "static_assert",
        "math is broken",
    );
    // 23. duplicate parameter
    expect(
        |k| {
            k.ptr(F32, "x");
            k.scalar(I32, "x");
        },
        "param",
        "declared twice",
    );
    // 24. division with mixed signedness
    expect(
        |_| ignore(floordiv(zeros([4], I32), zeros([4], U32))),
        "floordiv",
        "signedness",
    );
    // 25. mask given twice
    expect(
        |k| {
            let p = k.ptr(F32, "p") + arange(0, 4);
            ignore(load(p).mask(true).mask(true));
        },
        "load",
        "twice",
    );
    // 26. mask after the loaded value was used
    expect(
        |k| {
            let x = load(k.ptr(F32, "p") + arange(0, 4));
            let _y = x + 1.0;
            ignore(x.mask(true));
        },
        "load",
        "before it is used",
    );
    // 27. storing a block through a scalar pointer
    expect(
        |k| ignore(store(k.ptr(F32, "p"), zeros([4], F32))),
        "store",
        "not a block",
    );
    // 28. bitcast width mismatch
    expect(|_| ignore(zeros([4], F32).bitcast(I16)), "bitcast", "size");
    // 29. zeros with a non-power-of-two shape
    expect(|_| ignore(zeros([3, 4], F32)), "zeros", "powers of 2");
    // 31. atomics on 8-bit elements
    expect(
        |k| ignore(atomic_add(k.ptr(I8, "p"), 1)),
        "atomic_add",
        "does not support",
    );
    // 32. `.mask()` that would move a load past a store
    expect(
        |k| {
            let p = k.ptr(F32, "p") + arange(0, 4);
            let x = load(p);
            store(p, 1.0);
            ignore(x.mask(true));
        },
        "load",
        "right after",
    );
    // 33. fdiv of integers
    expect(|_| ignore(fdiv(arange(0, 4), 2.0)), "fdiv", "floating");
    // 34. div_rn on fp16 (Triton: fp32 only)
    expect(|_| ignore(div_rn(zeros([4], F16), 2.0)), "div_rn", "fp32");
    // 35. a combine function using a value from outside
    expect(
        |k| {
            let p = k.ptr(F32, "p");
            let outer = program_id(0).to(F32);
            store(p, reduce(zeros([4], F32), 0, |a, b| a + b * outer));
        },
        "mul",
        "outside the combine function",
    );
    // 30. a combine function that changes the type
    expect(
        |_| ignore(reduce(zeros([4], F32), 0, |a, _b| a.to(I32))),
        "reduce",
        "combine",
    );
}

#[test]
fn tensor_from_another_build_is_an_error() {
    let leaked = std::cell::Cell::new(None);
    build_ok("first", &[], |_| leaked.set(Some(arange(0, 4))));
    let t = leaked.get().unwrap();
    let (op, msg, _) = build_err(|_| ignore(t + 1));
    assert_eq!(op, "add");
    assert!(msg.contains("another kernel build"), "{msg}");
    // Outside any build the DSL is inert (no panic).
    assert!(arange(0, 4).is_poisoned());
}

#[test]
fn first_error_wins_and_later_calls_are_inert() {
    let (op, _, line1) = build_err(|k| {
        let p = k.ptr(F32, "p");
        let bad = arange(0, 3);
        let _ = load(p + bad) + 1.0;
        store(p + arange(0, 5), 0.0);
    });
    assert_eq!(op, "arange");
    assert!(line1 > 0);
}

#[test]
fn verifier_rejects_hand_built_bad_ir() {
    use crate::error::SourceLoc;
    use crate::ir::{verify, Const, OpData, OpId, RegionId, Type, ValueData, ValueDef, ValueRange};
    let mut k = Kernel::new("hand");
    let loc = SourceLoc {
        file: "hand.rs",
        line: 1,
        column: 1,
    };
    // %0 = constant 1 : f32  ; %1 = add %0, %0 : i32  (type mismatch)
    k.values.push(ValueData {
        ty: Type::scalar(F32),
        def: ValueDef::OpResult(OpId(0), 0),
    });
    k.values.push(ValueData {
        ty: Type::scalar(I32),
        def: ValueDef::OpResult(OpId(1), 0),
    });
    k.ops.push(OpData {
        op: Op::Constant {
            value: Const::Float(1.0),
        },
        results: ValueRange { start: 0, len: 1 },
        loc,
        parent: RegionId(0),
    });
    k.ops.push(OpData {
        op: Op::Binary {
            kind: crate::ir::BinaryOp::Add,
            lhs: crate::ir::Value(0),
            rhs: crate::ir::Value(0),
        },
        results: ValueRange { start: 1, len: 1 },
        loc,
        parent: RegionId(0),
    });
    k.regions[0].ops = vec![OpId(0), OpId(1)];
    let e = verify(&k).unwrap_err().to_string();
    assert!(
        e.contains("hand.rs:1:1") && e.contains("add") && e.contains("types differ"),
        "{e}"
    );
    // Use before definition.
    k.regions[0].ops = vec![OpId(1), OpId(0)];
    let e = verify(&k).unwrap_err().to_string();
    assert!(e.contains("not defined before its use"), "{e}");
}

#[test]
fn build_time_is_small() {
    // Not a timing assertion (benches measure it); just exercise repeated builds.
    let add = jit("add_kernel", vector_add).unwrap();
    let map = cx(&[("BLOCK_SIZE", 1024)]);
    let t = std::time::Instant::now();
    for _ in 0..100 {
        add.build_uncached(&map).unwrap();
    }
    eprintln!(
        "vector_add build+verify: {:?} per kernel",
        t.elapsed() / 100
    );
}

fn ignore<T>(_: T) {}

#[test]
fn parse_errors_are_errors() {
    for bad in [
        "",
        "kernel k() {",
        "kernel k() {\n  %0 = frobnicate : i32\n}",
        "kernel k() {\n  %0 = constant 1 : i32\n  %0 = constant 2 : i32\n}",
        "kernel k() {\n  %1 = add %0, %0 : i32\n}",
        "kernel k(%0: i32 n) {\n  %1 = add %0, %0 : f32\n}",
        "kernel k(%4294967295: i32 n) {\n}",
        "kernel k() {\n  %0 = arange -9223372036854775808, 9223372036854775807 : i32[4]\n}",
        "kernel k() {\n  %0 = arange 0, 4 : i32[4294967296,4294967296,4294967296]\n}",
        "kernel k(%0: i32 n) {\n  %4294967295, %1 = split %0 : i32, i32\n}",
    ] {
        assert!(Kernel::parse_ir(bad).is_err(), "should fail: {bad}");
    }
    let k = Kernel::parse_ir("kernel k(%0: i32 n) {\n  %1 = add %0, %0 : i32\n}\n").unwrap();
    assert_eq!(k.params[0].name, "n");
}

/// The kernels of the examples (as drafted against this API) build, verify and round-trip.
#[test]
fn dead_constants_are_removed_and_values_renumbered() {
    let k = build_ok("k", &[], |k| {
        let p = k.ptr(F32, "p");
        let offs = arange(0, 4);
        let x = load(p + offs).mask(offs.lt(3)).other(f32::NEG_INFINITY);
        let unused = x * 3.0;
        let _ = unused;
        store(p + offs, x + 1.0);
    });
    let text = k.ir();
    assert!(!text.contains("mul"), "{text}");
    assert!(!text.contains("constant 1.0 : f32\n"), "{text}");
    // Values are numbered in program order.
    let defs: Vec<u32> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix('%')?.split(' ').next()?.parse().ok())
        .collect();
    assert!(defs.windows(2).all(|w| w[0] < w[1]), "{text}");
}

#[test]
fn static_range_is_pythons_range() {
    let v = |lo, hi, st| static_range(lo, hi, st).collect::<Vec<_>>();
    assert_eq!(v(0, 4, 1), vec![0, 1, 2, 3]);
    assert_eq!(v(1, 8, 3), vec![1, 4, 7]);
    assert_eq!(v(4, 0, -2), vec![4, 2]);
    assert!(v(0, 4, 0).is_empty());
    assert!(v(4, 0, 1).is_empty());
}

#[test]
fn compact_renumbers_parsed_ir() {
    let mut k = Kernel::parse_ir(include_str!("../../tests/filetests/loops.ir")).unwrap();
    let before = k.ir();
    assert_eq!(k.remove_dead_ops(), 0);
    k.compact();
    crate::ir::verify(&k).unwrap();
    let after = k.ir();
    assert_ne!(before, after);
    assert!(after.contains("%13 = addptr %12, %11"), "{after}");
    assert_eq!(Kernel::parse_ir(&after).unwrap().ir(), after);
}

/// Random DSL programs (valid and invalid) never panic: each build is Ok (and then verifies
/// and round-trips) or a Build error.
#[test]
fn random_programs_never_panic() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let dtypes = [Bool, I8, I32, I64, U8, U32, F16, BF16, F32, F64];
    let (mut ok, mut err) = (0, 0);
    for _ in 0..2000 {
        let len = 1 + next() % 5;
        let script: Vec<u64> = (0..len).map(|_| next()).collect();
        let r = std::panic::catch_unwind(|| {
            build("fuzz", &BTreeMap::new(), |k| {
                let p = k.ptr(F32, "p");
                let q = k.ptr(I32, "q");
                let mut pool = vec![
                    arange(0, 8),
                    program_id(0),
                    k.scalar(I32, "n"),
                    load(p + arange(0, 8)),
                ];
                for &w in &script {
                    let pick = |i: u64| pool[(i % pool.len() as u64) as usize];
                    let (a, b) = (pick(w >> 8), pick(w >> 16));
                    let d = dtypes[((w >> 24) % dtypes.len() as u64) as usize];
                    let t = match w % 32 {
                        0 => a + b,
                        1 => a * 3,
                        2 => a / b,
                        3 => floordiv(a, b),
                        4 => a % 2.5,
                        5 => a.lt(b),
                        6 => a.to(d),
                        7 => exp(a),
                        8 => where_(a.gt(0), a, b),
                        9 => sum(a, 0),
                        10 => a.col() + b.row(),
                        11 => a & b,
                        12 => -a,
                        13 => !a,
                        14 => maximum(a, b),
                        15 => reshape(a, [2, 4]),
                        16 => dot(a, b, None),
                        17 => cumsum(a, 0),
                        18 => argmax(a, 0),
                        19 => zeros([8], d),
                        20 => load(q + a).mask(a.lt(4)).other(1),
                        21 => {
                            store(q + a, b).mask(a.lt(b));
                            a
                        }
                        22 => range(0, b, 1).fold(a, |i, acc| acc + i),
                        23 => if_(a.eq(0), || b, || b * 2),
                        24 => join(a, b),
                        25 => split(a).1,
                        26 => trans(a),
                        27 => atomic_add(q + a, b).mask(a.gt(1)),
                        28 => rand(a, b),
                        29 => reduce(a, 0, |x, y| x * y),
                        30 => while_loop(a, |x| x.lt(b), |x| x + 1),
                        _ => {
                            associative_scan((a, b), 0, true, |(x, y), (u, v)| {
                                (x + u, maximum(y, v))
                            })
                            .0
                        }
                    };
                    pool.push(t);
                }
                store(p + arange(0, 8), pool[pool.len() - 1]);
            })
        });
        match r {
            Ok(Ok(k)) => {
                ok += 1;
                assert_eq!(Kernel::parse_ir(&k.ir()).unwrap().ir(), k.ir());
                // The editing helpers keep kernels valid.
                let mut c = k.clone();
                c.cse();
                c.remove_dead_ops();
                c.compact();
                if let Err(e) = crate::ir::verify(&c) {
                    panic!("cse broke the kernel: {e}\n{}\n{}", k.ir(), c.ir());
                }
            }
            Ok(Err(Error::Build { op, msg, .. })) => {
                if err < 8 {
                    eprintln!("rejected at {op}: {msg}");
                }
                err += 1
            }
            Ok(Err(e)) => panic!("unexpected error kind: {e}"),
            Err(_) => panic!("the DSL panicked on script {script:?}"),
        }
    }
    eprintln!("random programs: {ok} built, {err} rejected");
    assert!(err > 0 && ok > 0);
}

/// Mutated IR text (values, types, shapes, op names swapped) never makes the parser or the
/// verifier panic.
#[test]
fn mutated_ir_never_panics() {
    let texts = [
        build_ok("add_kernel", &[("BLOCK_SIZE", 4)], vector_add).ir(),
        include_str!("../../tests/filetests/loops.ir").to_string(),
    ];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let subs: &[(&str, &str)] = &[
        ("%1", "%7"),
        ("%9", "%2"),
        ("%13", "%99"),
        ("f32", "i32"),
        ("[4]", "[8]"),
        ("[8]", "[4,2]"),
        ("i32", "bool"),
        ("add", "select"),
        ("load", "store"),
        ("yield %13", "yield"),
        ("max", "dot"),
        ("mask", "other"),
        (", ", " "),
        ("^r1", "^r7"),
        ("ptr<f32>", "f32"),
        ("{", ""),
        ("}", ""),
        ("axis 0", "axis 3"),
    ];
    let (mut ok, mut err) = (0, 0);
    for i in 0..1500 {
        let mut t = texts[i % texts.len()].clone();
        for _ in 0..1 + next() % 3 {
            let (from, to) = subs[(next() % subs.len() as u64) as usize];
            let hits: Vec<usize> = t.match_indices(from).map(|(j, _)| j).collect();
            if let Some(&at) = hits.get((next() % (hits.len().max(1) as u64)) as usize) {
                t.replace_range(at..at + from.len(), to);
            }
        }
        match std::panic::catch_unwind(|| Kernel::parse_ir(&t).map(|k| k.ir())) {
            Ok(Ok(_)) => ok += 1,
            Ok(Err(_)) => err += 1,
            Err(_) => panic!("parse/verify panicked on:\n{t}"),
        }
    }
    eprintln!("mutated IR: {ok} accepted, {err} rejected");
    assert!(err > 0);
}

#[test]
fn libdevice_tanh_and_pow_on_the_executor() {
    use crate::exec::{execute, ExecArg};
    let k = build_ok("ld", &[], |k| {
        let (x, t, p) = (k.ptr(F32, "x"), k.ptr(F32, "t"), k.ptr(F32, "p"));
        let offs = arange(0, 8);
        let v = load(x + offs);
        store(t + offs, libdevice::tanh(v));
        store(p + offs, libdevice::pow(abs(v), 2.5));
    });
    let xs: [f32; 8] = [-20.0, -1.5, -0.3, -1e-5, 0.0, 2e-4, 0.7, 9.0];
    let xb: Vec<u8> = xs.iter().flat_map(|v| v.to_le_bytes()).collect();
    let (mut tb, mut pb) = (vec![0u8; 32], vec![0u8; 32]);
    execute(
        &k,
        [1, 1, 1],
        &mut [
            ExecArg::from(&xb[..]),
            ExecArg::from(&mut tb[..]),
            ExecArg::from(&mut pb[..]),
        ],
    )
    .unwrap();
    let f = |b: &[u8]| -> Vec<f32> {
        b.chunks(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    for ((x, t), p) in xs.iter().zip(f(&tb)).zip(f(&pb)) {
        let (wt, wp) = ((*x as f64).tanh(), (x.abs() as f64).powf(2.5));
        assert!(
            ((t as f64) - wt).abs() <= 2e-7 * wt.abs().max(1e-30) + 1e-12,
            "tanh({x}) = {t}, want {wt}"
        );
        assert!(
            ((p as f64) - wp).abs() <= 1e-5 * wp.abs() + 1e-30,
            "pow({x}, 2.5) = {p}, want {wp}"
        );
    }
}

#[test]
#[ignore = "prints IR for tests/filetests"]
fn print_matmul_ir() {
    let k = build_ok("matmul", &[("BM", 16), ("BN", 16), ("BK", 16)], |k| {
        let (a_ptr, b_ptr, c_ptr) = (k.ptr(F16, "a"), k.ptr(F16, "b"), k.ptr(F32, "c"));
        let (m, n, kk) = (k.scalar(I32, "M"), k.scalar(I32, "N"), k.scalar(I32, "K"));
        let (bm, bn, bk) = (k.constexpr("BM"), k.constexpr("BN"), k.constexpr("BK"));
        let rm = program_id(0) * bm + arange(0, bm);
        let rn = program_id(1) * bn + arange(0, bn);
        let rk = arange(0, bk);
        let a_ptrs = a_ptr + (rm.col() * kk + rk.row());
        let b_ptrs = b_ptr + (rk.col() * n + rn.row());
        let (acc, _, _) = range(0, cdiv(kk, bk), 1).fold(
            (zeros([bm, bn], F32), a_ptrs, b_ptrs),
            |i, (acc, ap, bp)| {
                let k_rem = kk - i * bk;
                let a = load(ap).mask(rk.row().lt(k_rem)).other(0.0);
                let b = load(bp).mask(rk.col().lt(k_rem)).other(0.0);
                (dot(a, b, acc), ap + bk, bp + bk * n)
            },
        );
        store(c_ptr + rm.col() * n + rn.row(), acc).mask(rm.col().lt(m) & rn.row().lt(n));
    });
    println!("{}", k.ir());
}

#[test]
fn cse_merges_repeated_pure_ops() {
    let mut k = build_ok("cse", &[], |k| {
        let p = k.ptr(F32, "p");
        let a = arange(0, 8);
        let b = arange(0, 8);
        let x = load(p + a) + load(p + b);
        let y = range(0, 4, 1).fold(x, |_, acc| acc + arange(0, 8).to(F32));
        let one = full([8], 2.0, F32);
        let z = reduce(y * one, 0, |u, v| u + v * 2.0);
        store(p + arange(0, 8), y + z);
    });
    let before = k.ops.len();
    assert!(k.cse() >= 3, "{}", k.ir());
    k.remove_dead_ops();
    k.compact();
    crate::ir::verify(&k).unwrap();
    assert!(k.ops.len() < before);
    assert_eq!(k.ir().matches("arange").count(), 1, "{}", k.ir());
    // Loads are not pure: both stay.
    assert_eq!(k.ir().matches("= load").count(), 2);
}
