//! Pointer tables (Triton's tensors of addresses, `tl.load(table + g).to(tl.pointer_type(..))`)
//! written as a user writes them: run on the CPU targets against Rust references on ragged
//! groups with edge values, with poisoned outputs; every misuse is an error naming the kernel,
//! op and table entry; Metal (emulated) and CUDA refuse them with one wording.

mod support;

use triton_metal::runtime::{inout, out, ptr_table, Arg, Target};

#[allow(dead_code)]
#[path = "../examples/grouped_gemm.rs"]
mod grouped_gemm;
use triton_metal::{
    jit, tl, Array,
    DType::{self, *},
    Error,
};

/// The CPU targets this machine has (the ones pointer tables run on).
fn cpu_targets(test: &str) -> Vec<Target> {
    support::targets(test)
        .into_iter()
        .filter(|t| matches!(t, Target::Cpu | Target::CpuCompiled))
        .collect()
}

/// Floats with NaN, ±inf, ±0 and extremes among ordinary values, `seed` picking the mix.
fn edge_f32s(n: usize, seed: u64) -> Vec<f32> {
    const EDGES: [f32; 7] = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        f32::MAX,
        -1.0e-40,
    ];
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            if s % 5 == 0 {
                EDGES[(s >> 8) as usize % EDGES.len()]
            } else {
                ((s >> 11) % 20_000) as f32 / 1000.0 - 10.0
            }
        })
        .collect()
}

/// Each program copies group `g` (any length) through the table, scaled by -2, into the
/// `g`-th output, a block at a time (masked tail); a second loop adds the group's first
/// element read through a pointer tensor (every lane its own address).
#[jit]
fn scale_groups(srcs: Ptr<I64>, dsts: Ptr<I64>, lens: Ptr<I32>, BLOCK: Constexpr) {
    let g = tl::program_id(axis = 0);
    let src = tl::load(srcs + g).to(tl::pointer_type(F32));
    let dst = tl::load(dsts + g).to(tl::pointer_type(F32));
    let n = tl::load(lens + g);
    for start in tl::range(0, n, BLOCK) {
        let offs = start + tl::arange(0, BLOCK);
        let mask = offs < n;
        let x = tl::load(src + offs, mask = mask, other = 0.0);
        tl::store(dst + offs, x * -2.0, mask = mask);
    }
}

#[test]
fn ragged_groups_through_a_table() {
    let lens = [37usize, 1, 0, 64, 130];
    let srcs: Vec<Vec<f32>> = lens
        .iter()
        .enumerate()
        .map(|(g, &n)| edge_f32s(n, g as u64 + 1))
        .collect();
    let arrays: Vec<Array> = srcs
        .iter()
        .map(|v| Array::from_slice(v, &[v.len()]).unwrap())
        .collect();
    let lens_a = Array::from_slice(&lens.map(|n| n as i32), &[lens.len()]).unwrap();
    let k = scale_groups().unwrap();
    for t in cpu_targets("ragged_groups_through_a_table") {
        // Outputs one element longer than their group, poisoned: the extra stays untouched.
        let outs: Vec<Arg> = lens
            .iter()
            .map(|&n| out(&[n + 1], F32).fill(1234.5))
            .collect();
        let got = k
            .launch()
            .grid([lens.len()])
            .args((ptr_table(&arrays), ptr_table(outs), &lens_a))
            .constexpr("BLOCK", 32)
            .target(t)
            .run()
            .unwrap_or_else(|e| panic!("{t:?}: {e}"));
        assert_eq!(got.len(), lens.len());
        for (g, (o, src)) in got.iter().zip(&srcs).enumerate() {
            let o = o.to_vec::<f32>().unwrap();
            for (i, x) in src.iter().enumerate() {
                let want = x * -2.0;
                assert!(
                    o[i].to_bits() == want.to_bits() || (o[i].is_nan() && want.is_nan()),
                    "{t:?} group {g} element {i}: {} != {want}",
                    o[i]
                );
            }
            assert_eq!(o[src.len()], 1234.5, "{t:?} group {g}: poison overwritten");
        }
    }
}

/// A pointer tensor: lane `i` reads element `idx[i]` of table entry `sel[i]` (masked-off
/// lanes hold garbage addresses, which are never dereferenced) and stores it through a
/// second pointer tensor into an in-place i32 entry, f16 values widened on the way.
#[jit]
fn gather_lanes(
    table: Ptr<I64>,
    sel: Ptr<I32>,
    idx: Ptr<I32>,
    outs: Ptr<I64>,
    n: i32,
    BLOCK: Constexpr,
) {
    let lanes = tl::arange(0, BLOCK);
    let mask = lanes < n;
    let which = tl::load(sel + lanes, mask = mask, other = 12345);
    let addr = tl::load(table + which, mask = mask, other = 77);
    let p = tl::int_to_ptr(addr, F16) + tl::load(idx + lanes, mask = mask);
    let x = tl::load(p, mask = mask);
    let out_addr = tl::load(outs + lanes * 0, mask = mask, other = -1);
    let q = out_addr.to(tl::pointer_type(I32)) + lanes;
    tl::store(q, x.to(I32) * 3, mask = mask);
}

#[test]
fn pointer_tensors_gather_from_several_entries() {
    let a: Vec<f32> = (0..5).map(|i| i as f32 - 2.0).collect();
    let b: Vec<f32> = (0..3).map(|i| 10.0 * i as f32 + 0.5).collect();
    let to16 = |v: &[f32]| {
        let h: Vec<half::f16> = v.iter().map(|&x| half::f16::from_f32(x)).collect();
        Array::from_slice(&h, &[v.len()]).unwrap()
    };
    let (a16, b16) = (to16(&a), to16(&b));
    let sel = [1i32, 0, 0, 1, 0, 1];
    let idx = [2i32, 4, 0, 0, 3, 1];
    let n = 6;
    let sel_a = Array::from_slice(&sel, &[sel.len()]).unwrap();
    let idx_a = Array::from_slice(&idx, &[idx.len()]).unwrap();
    let base: Vec<i32> = (0..8).map(|i| 1000 + i).collect();
    let base_a = Array::from_slice(&base, &[8]).unwrap();
    let k = gather_lanes().unwrap();
    for t in cpu_targets("pointer_tensors_gather_from_several_entries") {
        let got = k
            .launch()
            .grid([1])
            .args((
                ptr_table([&a16, &b16]),
                &sel_a,
                &idx_a,
                ptr_table([inout(&base_a)]),
                n,
            ))
            .constexpr("BLOCK", 8)
            .target(t)
            .run()
            .unwrap_or_else(|e| panic!("{t:?}: {e}"));
        let o = got[0].to_vec::<i32>().unwrap();
        for i in 0..8 {
            let want = if i < n as usize {
                let v = if sel[i] == 0 {
                    a[idx[i] as usize]
                } else {
                    b[idx[i] as usize]
                };
                // f16 -> i32 truncates toward zero.
                (half::f16::from_f32(v).to_f32() as i32) * 3
            } else {
                base[i]
            };
            assert_eq!(o[i], want, "{t:?} lane {i}");
        }
    }
}

/// Runs `scale_groups` with these tables on `t`; the error's text.
fn scale_err(t: Target, srcs: Arg, dsts: Arg, lens_v: &[i32]) -> String {
    let lens = Array::from_slice(lens_v, &[lens_v.len()]).unwrap();
    let r = scale_groups()
        .unwrap()
        .launch()
        .grid([lens.shape()[0]])
        .args((srcs, dsts, &lens))
        .constexpr("BLOCK", 4)
        .target(t)
        .run()
        .and_then(|o| {
            o.iter().try_for_each(|a| a.eval())?;
            Ok(o)
        });
    match r {
        Ok(o) => panic!(
            "{t:?} lens {lens_v:?}: expected an error, got {:?}",
            o.iter().map(|a| a.to_vec::<f32>()).collect::<Vec<_>>()
        ),
        Err(e) => e.to_string(),
    }
}

#[test]
fn misuse_is_an_error_naming_op_and_entry() {
    let x = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
    let xi = Array::from_slice(&[1i32, 2, 3], &[3]).unwrap();
    for t in cpu_targets("misuse_is_an_error_naming_op_and_entry") {
        // An index past the table: the table's own bounds check.
        let e = scale_err(t, ptr_table([&x]), ptr_table([out(&[3], F32)]), &[3, 3]);
        assert!(
            e.contains("scale_groups") && e.contains("`srcs`") && e.contains("out of bounds"),
            "{t:?}: {e}"
        );
        // Past the end of an entry: named as the entry.
        let e = scale_err(t, ptr_table([&x]), ptr_table([out(&[3], F32)]), &[4]);
        assert!(
            e.contains("load") && e.contains("`srcs[0]`") && e.contains("offset 3"),
            "{t:?}: {e}"
        );
        // An entry of another dtype than the cast's.
        let e = scale_err(t, ptr_table([&xi]), ptr_table([out(&[3], F32)]), &[3]);
        assert!(
            e.contains("`srcs[0]`, an array of i32") && e.contains("pointer_type(i32)"),
            "{t:?}: {e}"
        );
        // A store through an input entry (another entry is an output, so the launch runs).
        let dsts = ptr_table([Arg::from(&x), out(&[3], F32)]);
        let e = scale_err(t, ptr_table([&x]), dsts, &[3]);
        assert!(
            e.contains("store") && e.contains("`dsts[0]`") && e.contains("read-only"),
            "{t:?}: {e}"
        );
        // An integer that is not one of the launch's addresses.
        let e = forged(t);
        assert!(
            e.contains("load") && e.contains("not an address of this launch"),
            "{t:?}: {e}"
        );
    }
}

/// Casts `addr + 1` (an address offset as an integer) to a pointer.
#[jit]
fn offset_address(table: Ptr<I64>, out_ptr: Ptr<F32>) {
    let addr = tl::load(table) + 1;
    let p = addr.to(tl::pointer_type(F32));
    tl::store(out_ptr, tl::load(p));
}

fn forged(t: Target) -> String {
    let x = Array::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
    let r = offset_address()
        .unwrap()
        .launch()
        .grid([1])
        .args((ptr_table([&x]), out(&[1], F32)))
        .target(t)
        .run()
        .and_then(|o| o[0].eval().map(|_| o));
    r.expect_err("forged address").to_string()
}

/// Reads a pointer from an `i64` scalar argument: no table at all.
#[jit]
fn from_scalar(addr: i64, out_ptr: Ptr<F32>) {
    tl::store(out_ptr, tl::load(addr.to(tl::pointer_type(F32))));
}

#[test]
fn gpu_targets_refuse_with_one_wording() {
    let x = Array::from_slice(&[1.0f32], &[1]).unwrap();
    let want = |target: &str| {
        format!(
            "pointers cast from integers (`int_to_ptr`, `.to(pointer_type(..))`) and `ptr_table` \
             arguments are not supported on {target}: its kernels take a fixed list of arrays, \
             not a table of addresses. Concatenate the groups into one array and pass each \
             group's offset (examples/grouped_gemm.rs does both), or run on Target::Cpu or \
             Target::CpuCompiled"
        )
    };
    let unsupported = |e: Error, target: &str, kernel: &str| match e {
        Error::Unsupported(m) => {
            assert!(m.contains(&want(target)), "{m}");
            assert!(m.contains(&format!("kernel `{kernel}`")), "{m}");
        }
        e => panic!("expected Unsupported, got {e}"),
    };
    let k = scale_groups().unwrap();
    let lens = Array::from_slice(&[1i32], &[1]).unwrap();
    let launch = || {
        k.launch()
            .grid([1])
            .args((ptr_table([&x]), ptr_table([out(&[1], F32)]), &lens))
            .constexpr("BLOCK", 4)
    };
    for t in [
        Target::Emulated(triton_metal::runtime::LaneOrder::Forward),
        Target::Metal,
        Target::Cuda,
    ] {
        let name = if t == Target::Cuda { "CUDA" } else { "Metal" };
        unsupported(launch().target(t).run().unwrap_err(), name, "scale_groups");
    }
    unsupported(launch().cuda().unwrap_err(), "CUDA", "scale_groups");
    unsupported(launch().msl().unwrap_err(), "Metal", "scale_groups");
    // Without a table argument, the printers refuse the cast itself, in the same words.
    let s = from_scalar().unwrap();
    let launch = || s.launch().grid([1]).args((7i64, out(&[1], F32)));
    unsupported(launch().msl().unwrap_err(), "Metal", "from_scalar");
    unsupported(launch().cuda().unwrap_err(), "CUDA", "from_scalar");
    // On the CPU targets that integer is no address: an error at the load.
    for t in cpu_targets("gpu_targets_refuse_with_one_wording") {
        let e = launch()
            .target(t)
            .run()
            .and_then(|o| o[0].eval().map(|_| o))
            .expect_err("not an address")
            .to_string();
        assert!(e.contains("not an address of this launch"), "{t:?}: {e}");
    }
    let _ = DType::F32;
}

#[test]
fn build_errors_name_the_cast() {
    #[jit]
    fn narrow(table: Ptr<I32>) {
        let _p = tl::load(table).to(tl::pointer_type(F32));
    }
    let e = narrow()
        .and_then(|k| k.specialize_with(&[]).map(|_| ()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("int_to_ptr") && e.contains("only 64-bit integers cast to pointers"),
        "{e}"
    );
    // A table bound to a pointer that is not to i64.
    #[jit]
    fn wrong_param(table: Ptr<F32>, o: Ptr<F32>) {
        tl::store(o, tl::load(table));
    }
    let x = Array::from_slice(&[1.0f32], &[1]).unwrap();
    let e = wrong_param()
        .unwrap()
        .launch()
        .grid([1])
        .args((ptr_table([&x]), out(&[1], F32)))
        .target(Target::Cpu)
        .run()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ptr_table argument needs a pointer-to-i64"),
        "{e}"
    );
}

/// The `grouped_gemm` example's portable kernel (flat arrays and offsets, which the example
/// runs itself on the CPU targets and emulated Metal in `tests/examples.rs`) compiles as
/// CUDA with NVRTC; its pointer-table kernel is refused for CUDA in the shared wording.
#[test]
fn grouped_gemm_kernels_on_cuda() {
    let a = Array::from_slice(&[half::f16::ZERO; 64], &[64]).unwrap();
    let ints = Array::from_slice(&[0i32; 6], &[6]).unwrap();
    let k = grouped_gemm::grouped_matmul_offsets_kernel().unwrap();
    let l = k
        .launch()
        .grid([4])
        .args((&a, &a, out(&[64], F16), &ints, &ints, &ints, 2))
        .constexpr("NUM_SM", 4)
        .constexpr("BLOCK_SIZE_M", 32)
        .constexpr("BLOCK_SIZE_N", 32)
        .constexpr("BLOCK_SIZE_K", 16);
    support::nvrtc_compiles(&l);
    let k = grouped_gemm::grouped_matmul_kernel().unwrap();
    let e = k
        .launch()
        .grid([4])
        .args((
            ptr_table([&a]),
            ptr_table([&a]),
            ptr_table([out(&[64], F16)]),
            &ints,
            &ints,
            2,
        ))
        .constexpr("NUM_SM", 4)
        .constexpr("BLOCK_SIZE_M", 32)
        .constexpr("BLOCK_SIZE_N", 32)
        .constexpr("BLOCK_SIZE_K", 16)
        .cuda()
        .unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported(m) if m.contains("not supported on CUDA")),
        "{e}"
    );
}

/// Atomics through pointers cast from a table's addresses: every program adds its id into
/// each group's histogram and keeps the old values it saw.
#[jit]
fn table_atomics(hists: Ptr<I64>, n_groups: i32, BLOCK: Constexpr) {
    let pid = tl::program_id(axis = 0);
    let lanes = tl::arange(0, BLOCK);
    for g in tl::range(0, n_groups) {
        let h = tl::load(hists + g).to(tl::pointer_type(I32));
        tl::atomic_add(h + lanes, pid + g, mask = lanes < g + 1);
    }
}

#[test]
fn atomics_through_table_pointers() {
    let (groups, programs) = (3usize, 9usize);
    let k = table_atomics().unwrap();
    for t in cpu_targets("atomics_through_table_pointers") {
        let hists: Vec<Arg> = (0..groups).map(|_| out(&[4], I32).fill(-5)).collect();
        let got = k
            .launch()
            .grid([programs])
            .args((ptr_table(hists), groups as i32))
            .constexpr("BLOCK", 4)
            .target(t)
            .run()
            .unwrap_or_else(|e| panic!("{t:?}: {e}"));
        for (g, h) in got.iter().enumerate() {
            let h = h.to_vec::<i32>().unwrap();
            let sum: i32 = (0..programs as i32).map(|p| p + g as i32).sum();
            for (i, &x) in h.iter().enumerate() {
                let want = if i <= g { -5 + sum } else { -5 };
                assert_eq!(x, want, "{t:?} group {g} lane {i}");
            }
        }
    }
}
