//! What the CPU dialect computes where it is read instead of storing (`fusable_values`):
//! the printed C++ of small kernels. Results are covered on every target by tests/ops.rs.

use std::collections::BTreeMap;

use crate::dtype::DType::*;
use crate::ir::Kernel;
use crate::tl::{self, *};

fn source(name: &str, f: impl FnOnce(&mut KernelBuilder)) -> String {
    let k: Kernel = match tl::build(name, &BTreeMap::new(), f) {
        Ok(k) => k,
        Err(e) => panic!("build failed: {e}"),
    };
    match super::cpu::compile(&k, false) {
        Ok(p) => p.source,
        Err(e) => panic!("compile failed: {e}"),
    }
}

#[test]
fn a_load_read_by_two_ops_is_read_from_the_argument_by_both() {
    // The softmax shape: the row feeds the max and the subtraction.
    let src = source("two_readers", |k| {
        let (x, out) = (k.ptr(F32, "x_ptr"), k.ptr(F32, "out_ptr"));
        let offs = tl::arange(0, 256);
        let row = tl::load(x + offs);
        tl::store(out + offs, row - row.max(0));
    });
    assert!(
        src.contains("tm_lazy<float>([&](uint tm_k) { return float(x_src[tm_k]); })"),
        "not read lazily:\n{src}"
    );
    // Both readers go through the lazy read; no loop copies the row into its array first.
    assert!(src.contains("fmax(lane[tm_e], x_1[tm_i])"), "{src}");
    assert!(src.contains("(x_1[tm_k] - max_1)"), "{src}");
}

#[test]
fn a_value_read_twice_by_one_op_is_not_stored() {
    // layer_norm's variance: `d * d` with `d` a select.
    let src = source("square", |k| {
        let (x, out) = (k.ptr(F32, "x_ptr"), k.ptr(F32, "out_ptr"));
        let n = k.scalar(I32, "n");
        let offs = tl::arange(0, 256);
        let v = tl::load(x + offs).mask(offs.lt(n)).other(0.0f32);
        let d = tl::where_(offs.lt(n), v - 1.0f32, 0.0f32);
        tl::store(out, (d * d).sum(0));
    });
    assert!(!src.contains("float select["), "d was stored:\n{src}");
}

#[test]
fn a_stored_argument_is_not_read_twice() {
    // Re-reading is only for read-only arguments: `x` is written here, so the loaded block
    // is kept in its array.
    let src = source("in_place", |k| {
        let x = k.ptr(F32, "x_ptr");
        let offs = tl::arange(0, 256);
        let row = tl::load(x + offs);
        tl::store(x + offs, row - row.max(0));
    });
    assert!(!src.contains("x_src"), "{src}");
}
