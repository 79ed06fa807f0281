//! A batch as Rust source: a `#[test]` that builds the kernel with the DSL and runs it on
//! every target through [`Case`](super::Case).

use std::fmt::Write;

use super::ast::*;
use super::gen::sink_tol;
use super::shrink::node_types;
use super::values::{float_src, lit_src};
use super::{Config, Known};
use crate::codegen::ReductionLayout;
use crate::dtype::DType;

fn dt(d: DType) -> String {
    format!("{d:?}")
}

fn un(u: Un, a: &str) -> String {
    match u {
        Un::Neg => format!("-{a}"),
        Un::Not => format!("!{a}"),
        Un::Abs => format!("tl::abs({a})"),
        Un::Floor => format!("tl::floor({a})"),
        Un::Ceil => format!("tl::ceil({a})"),
        Un::Sqrt => format!("tl::sqrt({a})"),
        Un::Exp => format!("tl::exp({a})"),
        Un::Exp2 => format!("tl::exp2({a})"),
        Un::Log => format!("tl::log({a})"),
        Un::Log2 => format!("tl::log2({a})"),
        Un::Rsqrt => format!("tl::rsqrt({a})"),
        Un::Sin => format!("tl::sin({a})"),
        Un::Cos => format!("tl::cos({a})"),
        Un::Erf => format!("tl::erf({a})"),
        Un::Sigmoid => format!("tl::sigmoid({a})"),
        Un::Tan => format!("tl::libdevice::tan({a})"),
        Un::Asin => format!("tl::libdevice::asin({a})"),
        Un::Acos => format!("tl::libdevice::acos({a})"),
        Un::Atan => format!("tl::libdevice::atan({a})"),
        Un::Sinh => format!("tl::libdevice::sinh({a})"),
        Un::Cosh => format!("tl::libdevice::cosh({a})"),
        Un::Asinh => format!("tl::libdevice::asinh({a})"),
        Un::Acosh => format!("tl::libdevice::acosh({a})"),
        Un::Atanh => format!("tl::libdevice::atanh({a})"),
        Un::Log1p => format!("tl::libdevice::log1p({a})"),
        Un::Expm1 => format!("tl::libdevice::expm1({a})"),
        Un::Log10 => format!("tl::libdevice::log10({a})"),
        Un::Exp10 => format!("tl::libdevice::exp10({a})"),
        Un::Cbrt => format!("tl::libdevice::cbrt({a})"),
        Un::Erfinv => format!("tl::libdevice::erfinv({a})"),
    }
}

/// `op(a, b)` where `b` is a tensor named `b` of dtype `bd`, or a literal (`bd` = None).
fn bin(op: Bin, a: &str, ad: DType, b: &str, bd: Option<DType>) -> String {
    let divisor = |b: &str| match bd {
        Some(d) if d.is_signed_int() => format!("tl::where_({b}.eq(0) | {b}.eq(-1), 7, {b})"),
        Some(_) => format!("tl::where_({b}.eq(0), 7, {b})"),
        None => b.to_string(),
    };
    let count = |b: &str| match bd {
        Some(_) => format!("({b} & {})", ad.bits() - 1),
        None => b.to_string(),
    };
    match op {
        Bin::Add => format!("{a} + {b}"),
        Bin::Sub => format!("{a} - {b}"),
        Bin::Mul => format!("{a} * {b}"),
        Bin::Div => format!("{a} / {b}"),
        Bin::Rem if ad.is_float() => format!("{a} % {b}"),
        Bin::Rem => format!("{a} % {}", divisor(b)),
        Bin::FloorDiv => format!("tl::floordiv({a}, {})", divisor(b)),
        Bin::And => format!("{a} & {b}"),
        Bin::Or => format!("{a} | {b}"),
        Bin::Xor => format!("{a} ^ {b}"),
        Bin::Shl => format!("{a} << {}", count(b)),
        Bin::Shr => format!("{a} >> {}", count(b)),
        Bin::Max => format!("tl::maximum({a}, {b})"),
        Bin::Min => format!("tl::minimum({a}, {b})"),
        Bin::MaxNan => format!("tl::maximum_nan({a}, {b})"),
        Bin::MinNan => format!("tl::minimum_nan({a}, {b})"),
        Bin::Umulhi => format!("tl::umulhi({a}, {b})"),
        Bin::Pow => format!("tl::libdevice::pow({a}, {b})"),
        Bin::Atan2 => format!("tl::libdevice::atan2({a}, {b})"),
        Bin::Hypot => format!("tl::libdevice::hypot({a}, {b})"),
    }
}

fn axis_src(axis: Option<usize>, keep: bool) -> String {
    match (axis, keep) {
        (Some(a), true) => format!("tl::keep_dims({a})"),
        (Some(a), false) => format!("{a}i64"),
        (None, _) => "None::<i64>".into(),
    }
}

fn shape_src(s: &[usize]) -> String {
    let v: Vec<String> = s.iter().map(|x| x.to_string()).collect();
    format!("[{}]", v.join(", "))
}

fn layout_src(l: ReductionLayout) -> String {
    format!("ReductionLayout::{l:?}")
}

/// The batch as a `#[test]` function named `name`; `note` goes into its doc comment. It
/// expects `use triton_metal::fuzz::{Case, Tol}; use triton_metal::runtime::ReductionLayout;
/// use triton_metal::tl::{self, Tensor}; use triton_metal::DType::*;` (as in
/// tests/fuzz_regressions.rs).
pub fn rust_test(b: &Batch, cfg: &Config, name: &str, note: &str) -> String {
    let types = node_types(b).unwrap_or_default();
    let mut s = String::new();
    for l in note.lines() {
        let _ = writeln!(s, "/// {l}");
    }
    let _ = writeln!(s, "#[test]\nfn {name}() {{");
    let _ = writeln!(s, "    let kernel = tl::jit(\"{name}\", |k| {{");
    for (i, x) in b.inputs.iter().enumerate() {
        let _ = writeln!(s, "        let in{i} = k.ptr({}, \"in{i}\");", dt(x.dtype));
    }
    for (i, x) in b.outputs.iter().enumerate() {
        let _ = writeln!(
            s,
            "        let out{i} = k.ptr({}, \"out{i}\");",
            dt(x.dtype)
        );
    }
    for i in 0..b.scalars.len() {
        let _ = writeln!(s, "        let s{i} = k.scalar(I32, \"s{i}\");");
    }
    for (pi, p) in b.progs.iter().enumerate() {
        let ty = |i: usize| types.get(pi).and_then(|t| t.get(i)).map(|t| t.0);
        let _ = writeln!(s, "        {{");
        let ind = "            ";
        let uses_local = p
            .nodes
            .iter()
            .any(|n| matches!(n, Node::Atomic { shared: true, .. }));
        if p.rank == 1 {
            let _ = writeln!(
                s,
                "{ind}let offs = tl::program_id(0) * {} + tl::arange(0, {});",
                p.c, p.c
            );
            if uses_local {
                let _ = writeln!(s, "{ind}let local = tl::arange(0, {});", p.c);
            }
            let _ = writeln!(s, "{ind}let mask = offs.lt(s{});", p.mask_by[0]);
        } else {
            let _ = writeln!(
                s,
                "{ind}let rows = tl::program_id(0) * {} + tl::arange(0, {});",
                p.r, p.r
            );
            let _ = writeln!(s, "{ind}let cols = tl::arange(0, {});", p.c);
            let _ = writeln!(s, "{ind}let offs = rows.col() * {} + cols.row();", p.c);
            if uses_local {
                let _ = writeln!(
                    s,
                    "{ind}let local = tl::arange(0, {}).col() * {} + cols.row();",
                    p.r, p.c
                );
            }
            let _ = writeln!(
                s,
                "{ind}let mask = rows.col().lt(s{}) & cols.row().lt(s{});",
                p.mask_by[0], p.mask_by[1]
            );
        }
        let _ = writeln!(s, "{ind}let _ = (offs, mask);");
        let mut used = vec![false; p.nodes.len()];
        for n in &p.nodes {
            for o in n.operands() {
                used[o] = true;
            }
        }
        for sk in &p.sinks {
            used[sk.node] = true;
        }
        for (i, n) in p.nodes.iter().enumerate() {
            let v = |j: usize| format!("v{j}");
            let e = match *n {
                Node::Load { buf, masked, other } => {
                    if masked {
                        format!(
                            "tl::load(in{buf} + offs).mask(mask).other({})",
                            lit_src(other)
                        )
                    } else {
                        format!("tl::load(in{buf} + offs)")
                    }
                }
                Node::Full {
                    dtype,
                    value,
                    scalar,
                } => {
                    let shape = if scalar {
                        "[0i64; 0]".to_string()
                    } else {
                        shape_src(&p.shape())
                    };
                    format!("tl::full({shape}, {}, {})", lit_src(value), dt(dtype))
                }
                Node::Index { axis } => match (p.rank, axis) {
                    (1, _) => "offs".into(),
                    (_, 0) => "rows.col()".into(),
                    _ => "cols.row()".into(),
                },
                Node::Param { idx } => format!("s{idx}"),
                Node::Unary(u, a) => un(u, &v(a)),
                Node::Binary(op, a, b2) => bin(
                    op,
                    &v(a),
                    ty(a).unwrap_or(DType::F32),
                    &v(b2),
                    Some(ty(b2).unwrap_or(DType::F32)),
                ),
                Node::BinLit(op, a, l) => {
                    bin(op, &v(a), ty(a).unwrap_or(DType::F32), &lit_src(l), None)
                }
                Node::Cmp(c, a, b2) => {
                    let m = format!("{c:?}").to_lowercase();
                    format!("{}.{m}({})", v(a), v(b2))
                }
                Node::Where(c, a, b2) => format!("tl::where_({}, {}, {})", v(c), v(a), v(b2)),
                Node::Fma(a, b2, c) => format!("tl::fma({}, {}, {})", v(a), v(b2), v(c)),
                Node::Cast(a, d) => format!("{}.to({})", v(a), dt(d)),
                Node::Bitcast(a, d) => format!("{}.bitcast({})", v(a), dt(d)),
                Node::Reduce { op, a, axis, keep } => {
                    let ax = axis_src(axis, keep);
                    match op {
                        Red::Sum => format!("tl::sum({}, {ax})", v(a)),
                        Red::Max => format!("tl::max({}, {ax})", v(a)),
                        Red::Min => format!("tl::min({}, {ax})", v(a)),
                        Red::ArgMax => format!("tl::argmax({}, {ax})", v(a)),
                        Red::ArgMin => format!("tl::argmin({}, {ax})", v(a)),
                        Red::XorSum => format!("tl::xor_sum({}, {ax})", v(a)),
                        Red::CustomAdd => {
                            format!("tl::reduce({}, {ax}, |a: Tensor, b: Tensor| a + b)", v(a))
                        }
                        Red::CustomMax => format!(
                            "tl::reduce({}, {ax}, |a: Tensor, b: Tensor| tl::maximum(a, b))",
                            v(a)
                        ),
                        Red::CustomOr => {
                            format!("tl::reduce({}, {ax}, |a: Tensor, b: Tensor| a | b)", v(a))
                        }
                    }
                }
                Node::Scan {
                    op,
                    a,
                    axis,
                    reverse,
                } => {
                    let scan =
                        |f: &str| format!("tl::associative_scan({}, {axis}, {reverse}, {f})", v(a));
                    match (op, reverse) {
                        (Scan::Sum, false) => format!("tl::cumsum({}, {axis})", v(a)),
                        (Scan::Sum, true) => format!("tl::cumsum_reverse({}, {axis})", v(a)),
                        (Scan::Prod, _) => format!("tl::cumprod({}, {axis})", v(a)),
                        (Scan::CustomAdd, _) => scan("|a: Tensor, b: Tensor| a + b"),
                        (Scan::CustomMax, _) => scan("|a: Tensor, b: Tensor| tl::maximum(a, b)"),
                        (Scan::First, _) => scan("|a: Tensor, _b: Tensor| a"),
                        (Scan::Last, _) => scan("|_a: Tensor, b: Tensor| b"),
                    }
                }
                Node::Dot(a, b2, acc) => match acc {
                    Some(c) => format!("tl::dot({}, {}, {})", v(a), v(b2), v(c)),
                    None => format!("tl::dot({}, {}, None)", v(a), v(b2)),
                },
                Node::Loop {
                    init,
                    x,
                    op,
                    bounds: [lo, hi, st],
                } => {
                    let d = ty(init).unwrap_or(DType::F32);
                    let (arg, body) = match x {
                        Some(x) => ("_i", bin(op, "acc", d, &v(x), ty(x))),
                        None => ("i", bin(op, "acc", d, &format!("i.to({})", dt(d)), Some(d))),
                    };
                    format!(
                        "tl::range(s{lo}, s{hi}, s{st}).fold({}, |{arg}, acc: Tensor| {body})",
                        v(init)
                    )
                }
                Node::If {
                    idx,
                    k,
                    a,
                    then,
                    els,
                } => format!(
                    "tl::if_(s{idx}.gt({k}), || {}, || {})",
                    un(then, &v(a)),
                    un(els, &v(a))
                ),
                Node::Atomic {
                    op,
                    buf,
                    val,
                    masked,
                    shared,
                } => {
                    let f = format!("atomic_{op:?}").to_lowercase();
                    let at = if shared { "local" } else { "offs" };
                    let m = if masked { ".mask(mask)" } else { "" };
                    format!("tl::{f}(out{buf} + {at}, {}){m}", v(val))
                }
            };
            let name = if used[i] { "v" } else { "_v" };
            let _ = writeln!(s, "{ind}let {name}{i} = {e};");
        }
        for sk in &p.sinks {
            let mut val = format!("v{}", sk.node);
            if let Node::Reduce {
                axis: Some(ax),
                keep: false,
                ..
            } = p.nodes[sk.node]
            {
                if p.rank == 2 {
                    val = format!("{val}.expand_dims({ax})");
                }
            }
            let m = if sk.masked { ".mask(mask)" } else { "" };
            let at = if sk.base == 0 {
                "offs".to_string()
            } else {
                format!("(offs + {})", sk.base)
            };
            let _ = writeln!(
                s,
                "{ind}tl::store(out{} + {at}, tl::broadcast_to({val}, {})){m};",
                sk.out,
                shape_src(&p.shape())
            );
        }
        let _ = writeln!(s, "        }}");
    }
    let _ = writeln!(s, "    }})\n    .unwrap();");
    let _ = write!(
        s,
        "    Case::new(kernel, {})\n        .num_warps({})",
        b.grid, b.num_warps
    );
    if let Some(l) = b.layout {
        let _ = write!(s, "\n        .layout({})", layout_src(l));
    }
    for x in &b.inputs {
        let nz: Vec<String> = (x.bits.iter().enumerate())
            .filter(|(_, &v)| v != 0)
            .map(|(i, v)| format!("({i}, {v:#x})"))
            .collect();
        let _ = write!(
            s,
            "\n        .input({}, {}, &[{}])",
            dt(x.dtype),
            x.bits.len(),
            nz.join(", ")
        );
    }
    for o in &b.outputs {
        let _ = write!(
            s,
            "\n        .output({}, {}, {})",
            dt(o.dtype),
            o.len,
            float_src(o.fill)
        );
    }
    for v in &b.scalars {
        let _ = write!(s, "\n        .scalar({v})");
    }
    for p in &b.progs {
        for sk in &p.sinks {
            if let Tol::Ulps(u) = sink_tol(&p.nodes[sk.node]) {
                let len = b.outputs[sk.out].len;
                let _ = write!(
                    s,
                    "\n        .tolerance({}, {}..{}, Tol::Ulps({u}))",
                    sk.out,
                    sk.base,
                    sk.base + len
                );
            }
        }
    }
    if cfg.known_open.contains(&Known::SignedZero) {
        let _ = write!(s, "\n        .zero_sign_free()");
    }
    let _ = writeln!(s, "\n        .assert_agree();\n}}");
    s
}
