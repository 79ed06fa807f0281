//! Loads, stores and atomics through blocks of packed pointers.
//!
//! Pointer blocks are processed in runs of the last dim: a run whose lanes are all active
//! and whose pointers are consecutive in one buffer is bounds-checked once and copied in one
//! loop (a row of a 2-D tile, a whole 1-D block); anything else goes lane by lane. Masked-off
//! lanes are never checked or touched.

use super::data::{canon_i32, multiversion, ptr_add, ptr_off, ptr_param, round1, Data};
use super::memory::{Mem, Raw};
use crate::dtype::DType;
use crate::ir::AtomicOp;

/// Why a memory access failed (the interpreter adds kernel, op and program).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum MemErr {
    /// Element `off` is outside argument `param`'s `len` elements.
    OutOfBounds { param: usize, off: i64, len: usize },
    /// A store or atomic through a read-only argument.
    ReadOnly { param: usize },
    /// The pointer does not point into any buffer argument.
    NotABuffer { param: usize },
    /// Operand shapes or kinds do not fit (an executor invariant, reported not panicked).
    Internal(String),
}

type Res = std::result::Result<(), MemErr>;

/// Dispatches on the pointee dtype: `$m!(Raw, Variant, accessor, from_raw, to_raw, args..)`.
macro_rules! for_dtype {
    ($d:expr, $m:ident, $($args:tt)*) => {
        match $d {
            DType::Bool => $m!(u8, Bool, bools, |r: u8| r != 0, |s: bool| s as u8, $($args)*),
            DType::I8 => $m!(u8, I32, i32s, |r: u8| r as i8 as i32, |s: i32| s as u8, $($args)*),
            DType::U8 => $m!(u8, I32, i32s, |r: u8| r as i32, |s: i32| s as u8, $($args)*),
            DType::I16 => {
                $m!(u16, I32, i32s, |r: u16| r as i16 as i32, |s: i32| s as u16, $($args)*)
            }
            DType::U16 => $m!(u16, I32, i32s, |r: u16| r as i32, |s: i32| s as u16, $($args)*),
            DType::I32 | DType::U32 => {
                $m!(u32, I32, i32s, |r: u32| r as i32, |s: i32| s as u32, $($args)*)
            }
            DType::I64 | DType::U64 => {
                $m!(u64, I64, i64s, |r: u64| r as i64, |s: i64| s as u64, $($args)*)
            }
            DType::F16 => $m!(
                u16, F32, f32s,
                |r: u16| crate::dtype::f16_bits_to_f32(r),
                |s: f32| crate::dtype::f32_to_f16_bits(s),
                $($args)*
            ),
            DType::BF16 => $m!(
                u16, F32, f32s,
                |r: u16| crate::dtype::bf16_bits_to_f32(r),
                |s: f32| crate::dtype::f32_to_bf16_bits(s),
                $($args)*
            ),
            DType::F32 => $m!(u32, F32, f32s, f32::from_bits, f32::to_bits, $($args)*),
            DType::F64 => $m!(u64, F64, f64s, f64::from_bits, f64::to_bits, $($args)*),
        }
    };
}

fn mem<'m, 'a>(mems: &'m [Option<Mem<'a>>], p: u64) -> Result<&'m Mem<'a>, MemErr> {
    let param = ptr_param(p);
    match mems.get(param) {
        Some(Some(m)) => Ok(m),
        _ => Err(MemErr::NotABuffer { param }),
    }
}

/// The element index of `p` in its buffer, checked.
#[inline(always)]
fn index(m: &Mem<'_>, p: u64) -> Result<usize, MemErr> {
    let off = ptr_off(p);
    if off < 0 || off as usize >= m.len() {
        return Err(MemErr::OutOfBounds {
            param: ptr_param(p),
            off,
            len: m.len(),
        });
    }
    Ok(off as usize)
}

/// Whether a run of pointers is consecutive (and so lies in one buffer).
#[inline(always)]
fn contiguous(run: &[u64]) -> bool {
    let p0 = run[0];
    run.iter()
        .enumerate()
        .fold(true, |ok, (j, &p)| ok & (p == p0.wrapping_add(j as u64)))
}

/// The mask of a memory op as given by the interpreter.
#[derive(Clone, Copy)]
pub(crate) enum MaskArg<'a> {
    /// No mask: every lane is active.
    All,
    /// A `bool` block of the pointers' shape.
    Block(&'a Data),
    /// Lanes `0..k` are active (see `lazy.rs`).
    Prefix(usize),
}

/// Active lanes, checked against the pointer count.
#[derive(Clone, Copy)]
enum Lanes<'a> {
    All,
    Some(&'a [bool]),
    Prefix(usize),
}

impl Lanes<'_> {
    #[inline(always)]
    fn on(&self, i: usize) -> bool {
        match *self {
            Lanes::All => true,
            Lanes::Some(m) => m[i],
            Lanes::Prefix(k) => i < k,
        }
    }

    /// `Some(e)` when lanes `lo..e` are all active and `e..hi` all inactive.
    #[inline(always)]
    fn split(&self, lo: usize, hi: usize) -> Option<usize> {
        match *self {
            Lanes::All => Some(hi),
            Lanes::Prefix(k) => Some(k.clamp(lo, hi)),
            Lanes::Some(m) => m[lo..hi].iter().fold(true, |a, &b| a & b).then_some(hi),
        }
    }
}

/// A block of pointers: materialised, or a base pointer plus integer offsets (the executor
/// folds `splat(p) + offsets` into the memory op that uses it, see `interp.rs`).
#[derive(Clone, Copy)]
pub(crate) enum PtrArg<'a> {
    /// Packed pointers.
    Block(&'a [u64]),
    /// `base + off[i]` with `i32` (or, when `unsigned`, `u32`) offsets.
    Off32 {
        base: u64,
        off: &'a [i32],
        unsigned: bool,
    },
    /// `base + off[i]` with 64-bit offsets.
    Off64 { base: u64, off: &'a [i64] },
    /// `base + start + stride * i` for `i < len` (offsets in closed form, exact in i64).
    Affine {
        base: u64,
        start: i64,
        stride: i64,
        len: usize,
    },
}

impl PtrArg<'_> {
    /// Number of lanes.
    pub(crate) fn len(&self) -> usize {
        match self {
            PtrArg::Block(p) => p.len(),
            PtrArg::Off32 { off, .. } => off.len(),
            PtrArg::Off64 { off, .. } => off.len(),
            PtrArg::Affine { len, .. } => *len,
        }
    }

    /// The pointer of lane `i`.
    #[inline(always)]
    fn at(&self, i: usize) -> u64 {
        match *self {
            PtrArg::Block(p) => p[i],
            PtrArg::Off32 {
                base,
                off,
                unsigned: false,
            } => ptr_add(base, off[i] as i64),
            PtrArg::Off32 { base, off, .. } => ptr_add(base, off[i] as u32 as i64),
            PtrArg::Off64 { base, off } => ptr_add(base, off[i]),
            PtrArg::Affine {
                base,
                start,
                stride,
                ..
            } => ptr_add(base, start + stride * i as i64),
        }
    }

    /// Whether lanes `lo..hi` (non-empty) point at consecutive elements of one buffer.
    #[inline(always)]
    fn contiguous(&self, lo: usize, hi: usize) -> bool {
        match *self {
            PtrArg::Block(p) => contiguous(&p[lo..hi]),
            PtrArg::Off32 { off, unsigned, .. } => {
                let run = &off[lo..hi];
                let o0 = run[0];
                // Consecutive step by step, and no wrap-around across the whole run.
                let steps = run
                    .iter()
                    .enumerate()
                    .fold(true, |ok, (j, &o)| ok & (o == o0.wrapping_add(j as i32)));
                let span = if unsigned {
                    o0 as u32 as i64 + (run.len() - 1) as i64 == run[run.len() - 1] as u32 as i64
                } else {
                    o0 as i64 + (run.len() - 1) as i64 == run[run.len() - 1] as i64
                };
                steps && span
            }
            PtrArg::Off64 { off, .. } => {
                let run = &off[lo..hi];
                let o0 = run[0];
                run.iter()
                    .enumerate()
                    .fold(true, |ok, (j, &o)| ok & (o == o0.wrapping_add(j as i64)))
                    && o0.checked_add((run.len() - 1) as i64) == Some(run[run.len() - 1])
            }
            PtrArg::Affine { stride, .. } => stride == 1 || hi - lo == 1,
        }
    }
}

fn out_of_bounds(m: &Mem<'_>, p: u64) -> MemErr {
    MemErr::OutOfBounds {
        param: ptr_param(p),
        off: ptr_off(p),
        len: m.len(),
    }
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn load_impl<R: Raw, S: Copy + Default>(
    mems: &[Option<Mem<'_>>],
    run: usize,
    ptr: PtrArg<'_>,
    mask: Lanes<'_>,
    other: Option<&[S]>,
    out: &mut Vec<S>,
    from: impl Fn(R) -> S + Copy,
    copy: impl Fn(&Mem<'_>, usize, usize, &mut Vec<S>) -> bool,
) -> Res {
    out.clear();
    out.reserve(ptr.len());
    let fill = |i: usize| match other {
        Some(o) if o.len() == 1 => o[0],
        Some(o) => o.get(i).copied().unwrap_or_default(),
        None => S::default(),
    };
    let (run, n) = (run.max(1), ptr.len());
    for lo in (0..n).step_by(run) {
        let hi = (lo + run).min(n);
        // An active prefix of the run at consecutive addresses: one check, one copy.
        if let Some(e) = mask.split(lo, hi) {
            if e == lo || ptr.contiguous(lo, e) {
                if e > lo {
                    let p0 = ptr.at(lo);
                    let m = mem(mems, p0)?;
                    let start = index(m, p0)?;
                    if !copy(m, start, e - lo, out) {
                        return Err(out_of_bounds(m, ptr.at(e - 1)));
                    }
                }
                out.extend((e..hi).map(fill));
                continue;
            }
        }
        for i in lo..hi {
            let p = ptr.at(i);
            if !mask.on(i) {
                out.push(fill(i));
                continue;
            }
            let m = mem(mems, p)?;
            let k = index(m, p)?;
            out.push(from(m.get::<R>(k).ok_or_else(|| out_of_bounds(m, p))?));
        }
    }
    Ok(())
}

/// A run copy: bit for bit when the storage type has the memory's layout, else converted.
macro_rules! copy_run {
    (u32, $m:expr, $s:expr, $n:expr, $o:expr, $from:expr) => {
        $m.copy_run($s, $n, $o)
    };
    (u64, $m:expr, $s:expr, $n:expr, $o:expr, $from:expr) => {
        $m.copy_run($s, $n, $o)
    };
    ($r:ty, $m:expr, $s:expr, $n:expr, $o:expr, $from:expr) => {
        $m.extend_run::<$r, _>($s, $n, $o, $from)
    };
}

/// Body of [`load`].
#[inline(always)]
fn load_impl_all(
    mems: &[Option<Mem<'_>>],
    d: DType,
    run: usize,
    ptr: PtrArg<'_>,
    mask: MaskArg<'_>,
    other: Option<&Data>,
    out: &mut Data,
) -> Res {
    let mask = lanes(mask, ptr.len())?;
    macro_rules! go {
        ($r:tt, $v:ident, $acc:ident, $from:expr, $to:expr,) => {{
            let other = match other {
                Some(Data::$v(o)) => Some(o.as_slice()),
                Some(_) => return Err(MemErr::Internal("`other` has the wrong type".into())),
                None => None,
            };
            load_impl::<$r, _>(
                mems,
                run,
                ptr,
                mask,
                other,
                out.$acc(),
                $from,
                |m, s, n, o| copy_run!($r, m, s, n, o, $from),
            )
        }};
    }
    for_dtype!(d, go,)
}

fn lanes(mask: MaskArg<'_>, n: usize) -> Result<Lanes<'_>, MemErr> {
    match mask {
        MaskArg::All => Ok(Lanes::All),
        MaskArg::Prefix(k) => Ok(Lanes::Prefix(k.min(n))),
        MaskArg::Block(Data::Bool(m)) if m.len() == n => Ok(Lanes::Some(m)),
        MaskArg::Block(_) => Err(MemErr::Internal(
            "mask is not a bool block of the pointer shape".into(),
        )),
    }
}

#[inline(always)]
fn store_impl<R: Raw, S: Copy>(
    mems: &[Option<Mem<'_>>],
    run: usize,
    ptr: PtrArg<'_>,
    mask: Lanes<'_>,
    vals: &[S],
    to: impl Fn(S) -> R + Copy,
) -> Res {
    let val = |i: usize| if vals.len() == 1 { vals[0] } else { vals[i] };
    if vals.len() != ptr.len() && vals.len() != 1 {
        return Err(MemErr::Internal(
            "stored values do not match the pointers".into(),
        ));
    }
    let (run, n) = (run.max(1), ptr.len());
    for lo in (0..n).step_by(run) {
        let hi = (lo + run).min(n);
        let split = if vals.len() == n {
            mask.split(lo, hi)
        } else {
            None
        };
        if let Some(e) = split.filter(|&e| e == lo || ptr.contiguous(lo, e)) {
            if e > lo {
                let p0 = ptr.at(lo);
                let m = mem(mems, p0)?;
                let start = index(m, p0)?;
                if !m.is_writable() {
                    return Err(MemErr::ReadOnly {
                        param: ptr_param(p0),
                    });
                }
                if !m.set_run::<R, S>(start, &vals[lo..e], to) {
                    return Err(out_of_bounds(m, ptr.at(e - 1)));
                }
            }
            continue;
        }
        for i in lo..hi {
            let p = ptr.at(i);
            if !mask.on(i) {
                continue;
            }
            let m = mem(mems, p)?;
            let k = index(m, p)?;
            if !m.set::<R>(k, to(val(i))) {
                return Err(MemErr::ReadOnly {
                    param: ptr_param(p),
                });
            }
        }
    }
    Ok(())
}

/// Body of [`store`].
#[inline(always)]
fn store_impl_all(
    mems: &[Option<Mem<'_>>],
    d: DType,
    run: usize,
    ptr: PtrArg<'_>,
    value: &Data,
    mask: MaskArg<'_>,
) -> Res {
    let mask = lanes(mask, ptr.len())?;
    macro_rules! go {
        ($r:ty, $v:ident, $acc:ident, $from:expr, $to:expr,) => {{
            let Data::$v(vals) = value else {
                return Err(MemErr::Internal("stored value has the wrong type".into()));
            };
            store_impl::<$r, _>(mems, run, ptr, mask, vals, $to)
        }};
    }
    for_dtype!(d, go,)
}

/// The update an atomic applies, on values in storage form: `f(old, operand) -> new`.
fn combine_f32(kind: AtomicOp, d: DType) -> impl Fn(f32, f32) -> f32 + Copy {
    move |old: f32, v: f32| match kind {
        AtomicOp::Add => round1(old + v, d),
        // Triton's float max/min (the integer max/min of the bits): IEEE totalOrder.
        AtomicOp::Max if v.total_cmp(&old).is_gt() => v,
        AtomicOp::Min if v.total_cmp(&old).is_lt() => v,
        AtomicOp::Max | AtomicOp::Min => old,
        // And/or/xor on floats are rejected by the verifier; exchange for the rest.
        _ => v,
    }
}

fn combine_f64(kind: AtomicOp) -> impl Fn(f64, f64) -> f64 + Copy {
    move |old: f64, v: f64| match kind {
        AtomicOp::Add => old + v,
        AtomicOp::Max if v.total_cmp(&old).is_gt() => v,
        AtomicOp::Min if v.total_cmp(&old).is_lt() => v,
        AtomicOp::Max | AtomicOp::Min => old,
        _ => v,
    }
}

fn combine_i32(kind: AtomicOp, d: DType) -> impl Fn(i32, i32) -> i32 + Copy {
    let unsigned = d == DType::U32;
    move |old: i32, v: i32| {
        let r = match kind {
            AtomicOp::Add => old.wrapping_add(v),
            AtomicOp::Max if unsigned => (old as u32).max(v as u32) as i32,
            AtomicOp::Min if unsigned => (old as u32).min(v as u32) as i32,
            AtomicOp::Max => old.max(v),
            AtomicOp::Min => old.min(v),
            AtomicOp::And => old & v,
            AtomicOp::Or => old | v,
            AtomicOp::Xor => old ^ v,
            AtomicOp::Xchg => v,
        };
        canon_i32(r, d)
    }
}

fn combine_i64(kind: AtomicOp, d: DType) -> impl Fn(i64, i64) -> i64 + Copy {
    let unsigned = d == DType::U64;
    move |old: i64, v: i64| match kind {
        AtomicOp::Add => old.wrapping_add(v),
        AtomicOp::Max if unsigned => (old as u64).max(v as u64) as i64,
        AtomicOp::Min if unsigned => (old as u64).min(v as u64) as i64,
        AtomicOp::Max => old.max(v),
        AtomicOp::Min => old.min(v),
        AtomicOp::And => old & v,
        AtomicOp::Or => old | v,
        AtomicOp::Xor => old ^ v,
        AtomicOp::Xchg => v,
    }
}

fn combine_bool(kind: AtomicOp) -> impl Fn(bool, bool) -> bool + Copy {
    move |old: bool, v: bool| match kind {
        AtomicOp::Add | AtomicOp::Xor => old ^ v,
        AtomicOp::Max | AtomicOp::Or => old | v,
        AtomicOp::Min | AtomicOp::And => old & v,
        AtomicOp::Xchg => v,
    }
}

#[allow(clippy::too_many_arguments)]
fn rmw_impl<R: Raw, S: Copy + Default>(
    mems: &[Option<Mem<'_>>],
    ptr: PtrArg<'_>,
    mask: Lanes<'_>,
    vals: &[S],
    out: &mut Vec<S>,
    from: impl Fn(R) -> S + Copy,
    to: impl Fn(S) -> R + Copy,
    f: impl Fn(S, S) -> S + Copy,
) -> Res {
    out.clear();
    if vals.len() != ptr.len() {
        return Err(MemErr::Internal(
            "atomic operands do not match the pointers".into(),
        ));
    }
    for (i, &v) in vals.iter().enumerate() {
        let p = ptr.at(i);
        if !mask.on(i) {
            out.push(S::default());
            continue;
        }
        let m = mem(mems, p)?;
        let k = index(m, p)?;
        let old = m
            .update::<R>(k, |old| to(f(from(old), v)))
            .ok_or(MemErr::ReadOnly {
                param: ptr_param(p),
            })?;
        out.push(from(old));
    }
    Ok(())
}

/// Atomic read-modify-write; `out` gets the old values (0 in masked-off lanes).
pub(crate) fn atomic_rmw(
    mems: &[Option<Mem<'_>>],
    kind: AtomicOp,
    d: DType,
    ptr: PtrArg<'_>,
    value: &Data,
    mask: MaskArg<'_>,
    out: &mut Data,
) -> Res {
    let mask = lanes(mask, ptr.len())?;
    macro_rules! go {
        ($r:ty, $v:ident, $acc:ident, $from:expr, $to:expr, $f:expr) => {{
            let Data::$v(vals) = value else {
                return Err(MemErr::Internal("atomic operand has the wrong type".into()));
            };
            rmw_impl::<$r, _>(mems, ptr, mask, vals, out.$acc(), $from, $to, $f)
        }};
    }
    match d {
        DType::Bool => go!(
            u8,
            Bool,
            bools,
            |r: u8| r != 0,
            |s: bool| s as u8,
            combine_bool(kind)
        ),
        DType::F32 => go!(
            u32,
            F32,
            f32s,
            f32::from_bits,
            f32::to_bits,
            combine_f32(kind, d)
        ),
        DType::F64 => go!(
            u64,
            F64,
            f64s,
            f64::from_bits,
            f64::to_bits,
            combine_f64(kind)
        ),
        DType::F16 => go!(
            u16,
            F32,
            f32s,
            |r: u16| crate::dtype::f16_bits_to_f32(r),
            |s: f32| crate::dtype::f32_to_f16_bits(s),
            combine_f32(kind, d)
        ),
        DType::BF16 => go!(
            u16,
            F32,
            f32s,
            |r: u16| crate::dtype::bf16_bits_to_f32(r),
            |s: f32| crate::dtype::f32_to_bf16_bits(s),
            combine_f32(kind, d)
        ),
        DType::I8 => go!(
            u8,
            I32,
            i32s,
            |r: u8| r as i8 as i32,
            |s: i32| s as u8,
            combine_i32(kind, d)
        ),
        DType::U8 => go!(
            u8,
            I32,
            i32s,
            |r: u8| r as i32,
            |s: i32| s as u8,
            combine_i32(kind, d)
        ),
        DType::I16 => go!(
            u16,
            I32,
            i32s,
            |r: u16| r as i16 as i32,
            |s: i32| s as u16,
            combine_i32(kind, d)
        ),
        DType::U16 => go!(
            u16,
            I32,
            i32s,
            |r: u16| r as i32,
            |s: i32| s as u16,
            combine_i32(kind, d)
        ),
        DType::I32 | DType::U32 => go!(
            u32,
            I32,
            i32s,
            |r: u32| r as i32,
            |s: i32| s as u32,
            combine_i32(kind, d)
        ),
        DType::I64 | DType::U64 => go!(
            u64,
            I64,
            i64s,
            |r: u64| r as i64,
            |s: i64| s as u64,
            combine_i64(kind, d)
        ),
    }
}

#[allow(clippy::too_many_arguments)]
fn cas_impl<R: Raw, S: Copy>(
    mems: &[Option<Mem<'_>>],
    ptr: PtrArg<'_>,
    cmp: &[S],
    vals: &[S],
    out: &mut Vec<S>,
    from: impl Fn(R) -> S + Copy,
    to: impl Fn(S) -> R + Copy,
) -> Res {
    out.clear();
    if vals.len() != ptr.len() || cmp.len() != ptr.len() {
        return Err(MemErr::Internal(
            "atomic_cas operands do not match the pointers".into(),
        ));
    }
    for i in 0..ptr.len() {
        let p = ptr.at(i);
        let m = mem(mems, p)?;
        let k = index(m, p)?;
        let old = m
            .compare_swap::<R>(k, to(cmp[i]), to(vals[i]))
            .ok_or(MemErr::ReadOnly {
                param: ptr_param(p),
            })?;
        out.push(from(old));
    }
    Ok(())
}

/// Atomic compare-and-swap (bitwise compare, as on GPUs); `out` gets the old values.
pub(crate) fn atomic_cas(
    mems: &[Option<Mem<'_>>],
    d: DType,
    ptr: PtrArg<'_>,
    cmp: &Data,
    value: &Data,
    out: &mut Data,
) -> Res {
    macro_rules! go {
        ($r:ty, $v:ident, $acc:ident, $from:expr, $to:expr,) => {{
            let (Data::$v(c), Data::$v(v)) = (cmp, value) else {
                return Err(MemErr::Internal(
                    "atomic_cas operand has the wrong type".into(),
                ));
            };
            cas_impl::<$r, _>(mems, ptr, c, v, out.$acc(), $from, $to)
        }};
    }
    for_dtype!(d, go,)
}

multiversion! {
    /// Loads a block of `d` elements; `run` is the length of the last dim.
    fn load(
        mems: &[Option<Mem<'_>>],
        d: DType,
        run: usize,
        ptr: PtrArg<'_>,
        mask: MaskArg<'_>,
        other: Option<&Data>,
        out: &mut Data,
    ) -> Res = load_impl_all;
}

multiversion! {
    /// Stores a block of `d` elements where `mask` is true.
    fn store(
        mems: &[Option<Mem<'_>>],
        d: DType,
        run: usize,
        ptr: PtrArg<'_>,
        value: &Data,
        mask: MaskArg<'_>,
    ) -> Res = store_impl_all;
}
