//! Triton's typing rules: promotion, broadcasting, checks, and op emission.
//!
//! The only code that appends ops (STYLE rule 4); it mirrors Triton 3.x
//! `python/triton/language/semantic.py` function by function (`computation_type_impl`,
//! `binary_op_type_checking_impl`, `cast`, `load`, `dot`, ...). Surface functions in
//! `tl` only normalise their arguments and call into here.

use super::builder::{Builder, Res};
use super::tensor::Scalar;
use crate::dtype::DType;
use crate::ir::{
    AtomicOp, BinaryOp, CmpPred, Const, Hint, MemScope, MemSem, Op, OpId, ReduceKind, RegionId,
    ScanKind, Type, UnaryOp, Value,
};

/// A resolved operand: an IR value or a weakly typed Rust scalar.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Opnd {
    Val(Value),
    Weak(Scalar),
}

/// The error for `.mask()`/`.other()` on an access through a block pointer or descriptor.
const BLOCK_MASK: &str = "`mask` and `other` cannot be given for accesses through block pointers \
    or tensor descriptors (Triton's rule): use `boundary_check` and `padding_option`";

/// Triton's type kinds, ordered `bool < int < float`.
fn kind(d: DType) -> u8 {
    if d.is_bool() {
        0
    } else if d.is_int() {
        1
    } else {
        2
    }
}

/// Triton's `int1` counts as a signed integer in promotion.
fn is_int(d: DType) -> bool {
    d.is_int() || d.is_bool()
}

fn is_signed(d: DType) -> bool {
    d.is_signed_int() || d.is_bool()
}

fn int_range(d: DType) -> (i128, i128) {
    match d {
        DType::Bool => (0, 1),
        DType::I8 => (i8::MIN as i128, i8::MAX as i128),
        DType::I16 => (i16::MIN as i128, i16::MAX as i128),
        DType::I32 => (i32::MIN as i128, i32::MAX as i128),
        DType::I64 => (i64::MIN as i128, i64::MAX as i128),
        DType::U8 => (0, u8::MAX as i128),
        DType::U16 => (0, u16::MAX as i128),
        DType::U32 => (0, u32::MAX as i128),
        DType::U64 => (0, u64::MAX as i128),
        _ => (i128::MIN, i128::MAX),
    }
}

/// Triton's `integer_promote_impl` (C's usual arithmetic conversions).
pub fn integer_promote(a: DType, b: DType) -> DType {
    let (ra, rb) = (a.bits(), b.bits());
    match (is_signed(a), is_signed(b)) {
        (sa, sb) if sa == sb => {
            if ra > rb {
                a
            } else {
                b
            }
        }
        (false, _) => {
            if ra >= rb {
                a
            } else {
                b
            }
        }
        _ => {
            if rb >= ra {
                b
            } else {
                a
            }
        }
    }
}

/// Triton's `computation_type_impl`: the dtype both operands of an arithmetic op are cast to.
/// `a_weak`/`b_weak` mark Rust scalars (Triton's Python scalars).
pub fn computation_type(
    a: DType,
    a_weak: bool,
    b: DType,
    b_weak: bool,
    div_or_mod: bool,
) -> Result<DType, String> {
    // 0) A scalar of the same or a lower kind does not take part in promotion.
    if a_weak != b_weak {
        let (s, t) = if a_weak { (a, b) } else { (b, a) };
        if kind(s) <= kind(t) {
            if div_or_mod && matches!(t, DType::F16 | DType::BF16) {
                return Ok(DType::F32);
            }
            return Ok(t);
        }
    }
    // 1) - 2) fp64, fp32 win.
    if a == DType::F64 || b == DType::F64 {
        return Ok(DType::F64);
    }
    if a == DType::F32 || b == DType::F32 {
        return Ok(DType::F32);
    }
    // 3) fp16 wins unless dividing.
    if a == DType::F16 || b == DType::F16 {
        return Ok(if div_or_mod { DType::F32 } else { DType::F16 });
    }
    // 4) bf16 only if both are.
    if a == DType::BF16 && b == DType::BF16 {
        return Ok(if div_or_mod { DType::F32 } else { DType::BF16 });
    }
    if a == DType::BF16 || b == DType::BF16 {
        return Ok(DType::F32);
    }
    // 6) integers.
    if div_or_mod && is_signed(a) != is_signed(b) {
        return Err(format!(
            "cannot use /, // or % with {} and {} because they have different signedness; \
             cast them to the same signedness",
            a.triton_name(),
            b.triton_name()
        ));
    }
    Ok(integer_promote(a, b))
}

/// Triton's `to_tensor_type`: the dtype a Rust scalar gets on its own.
pub fn scalar_dtype(s: Scalar) -> Result<DType, String> {
    match s {
        Scalar::Bool(_) => Ok(DType::Bool),
        Scalar::Int(x) => {
            if (-(1i128 << 31)..(1i128 << 31)).contains(&x) {
                Ok(DType::I32)
            } else if ((1i128 << 31)..(1i128 << 32)).contains(&x) {
                Ok(DType::U32)
            } else if (-(1i128 << 63)..(1i128 << 63)).contains(&x) {
                Ok(DType::I64)
            } else if ((1i128 << 63)..(1i128 << 64)).contains(&x) {
                Ok(DType::U64)
            } else {
                Err(format!(
                    "integer literal {x} is not representable in 64 bits"
                ))
            }
        }
        Scalar::Float(x) => {
            let a = x.abs();
            let min = 2f64.powi(-126);
            let max = (2.0 - 2f64.powi(-23)) * 2f64.powi(127);
            if a.is_infinite() || a == 0.0 || x.is_nan() || (min..=max).contains(&a) {
                Ok(DType::F32)
            } else {
                Ok(DType::F64)
            }
        }
    }
}

/// `x` rounded to the float dtype `d` (to nearest even), as `f64`.
fn round_to(x: f64, d: DType) -> f64 {
    match d {
        DType::F16 => half::f16::from_f64(x).to_f64(),
        DType::BF16 => half::bf16::from_f64(x).to_f64(),
        DType::F32 => x as f32 as f64,
        _ => x,
    }
}

fn dts(d: DType) -> &'static str {
    d.triton_name()
}

/// A literal given together with its dtype (`full`) must be a value of that dtype: a float
/// for an integer or bool dtype is an error as in Triton (whose builder takes no float
/// there; zero is the exception, as Triton's null value), and a finite number beyond the
/// largest finite value of a float dtype is an error instead of becoming inf.
fn check_literal(s: Scalar, d: DType) -> Res<()> {
    let x = match s {
        Scalar::Float(x) if !d.is_float() && x != 0.0 => {
            return Err(format!(
                "value {x} is a float but dtype {} is not (pass an integer literal)",
                dts(d)
            ))
        }
        Scalar::Float(x) => x,
        Scalar::Int(x) => x as f64,
        Scalar::Bool(_) => return Ok(()),
    };
    if d.is_float() && x.is_finite() && round_to(x, d).is_infinite() {
        return Err(format!(
            "value {x} is out of range for type {} (it would become inf; pass inf explicitly \
             if that is meant)",
            dts(d)
        ));
    }
    Ok(())
}

impl Builder {
    // ---------------------------------------------------------------------------------
    // values and constants
    // ---------------------------------------------------------------------------------

    fn emit1(&mut self, op: Op, ty: Type) -> Value {
        Value(self.emit(op, vec![ty]).start)
    }

    fn tyc(&self, v: Value) -> Type {
        self.ty(v).clone()
    }

    /// A constant of `ty` (scalar or splat block).
    pub(crate) fn constant(&mut self, value: Const, ty: Type) -> Value {
        let value = match value {
            Const::Int(v) if ty.dtype.is_float() => Const::Float(v as f64),
            Const::Float(v) if !ty.dtype.is_float() => Const::Int(v as i64),
            other => other,
        };
        self.emit1(Op::Constant { value }, ty)
    }

    /// `scalar_constant(x, dtype)`: checks an integer fits.
    pub(crate) fn scalar_const(&mut self, s: Scalar, d: DType) -> Res<Value> {
        let c = match s {
            Scalar::Bool(v) => Const::Int(v as i64),
            Scalar::Int(x) => {
                if is_int(d) {
                    let (lo, hi) = int_range(d);
                    if x < lo || x > hi {
                        return Err(format!("scalar {x} is out of range for type {}", dts(d)));
                    }
                }
                Const::Int(x as i64)
            }
            Scalar::Float(x) => {
                if is_int(d) {
                    Const::Int(x as i64)
                } else {
                    Const::Float(x)
                }
            }
        };
        Ok(self.constant(c, Type::scalar(d)))
    }

    /// `to_tensor`: a weak scalar becomes a constant of its default dtype.
    pub(crate) fn value_of(&mut self, o: Opnd) -> Res<Value> {
        match o {
            Opnd::Val(v) => Ok(v),
            Opnd::Weak(s) => {
                let d = scalar_dtype(s)?;
                self.scalar_const(s, d)
            }
        }
    }

    fn opnd_dtype(&self, o: Opnd) -> Res<(DType, bool, bool)> {
        match o {
            Opnd::Val(v) => {
                let t = self.ty(v);
                Ok((t.dtype, t.ptr, false))
            }
            Opnd::Weak(s) => Ok((scalar_dtype(s)?, false, true)),
        }
    }

    // ---------------------------------------------------------------------------------
    // casts
    // ---------------------------------------------------------------------------------

    /// Triton's `cast` (value conversion) to `d`, keeping the shape.
    pub(crate) fn cast(&mut self, v: Value, d: DType) -> Res<Value> {
        let src = self.tyc(v);
        if src.ptr {
            return Err(format!("cannot cast pointer type {src} to {}", dts(d)));
        }
        if src.dtype == d {
            return Ok(v);
        }
        let s = src.dtype;
        if d.is_bool() {
            // `x != 0`, as Triton.
            let zero = self.constant(Const::Int(0), src.clone());
            return self.cmp_values(CmpPred::Ne, v, zero);
        }
        // fp16/bf16 to anything but fp32 go through fp32.
        if matches!(s, DType::F16 | DType::BF16) && d.is_float() && d != DType::F32 {
            let mid = self.cast(v, DType::F32)?;
            return self.cast(mid, d);
        }
        if let Some(c) = self.fold_cast(v, s, d) {
            return Ok(self.constant(c, src.with_dtype(d)));
        }
        Ok(self.emit1(Op::Cast { src: v }, src.with_dtype(d)))
    }

    /// Folds the cast of a constant where the result is exact and obvious: float to float
    /// (the value rounded to the source dtype first), int to float (up to 2^53), and int to
    /// int when the value fits the destination.
    fn fold_cast(&self, v: Value, s: DType, d: DType) -> Option<Const> {
        let Op::Constant { value } = self.k.op(self.k.def_op(v)?).op else {
            return None;
        };
        match value {
            Const::Float(x) if s.is_float() && d.is_float() => Some(Const::Float(round_to(x, s))),
            Const::Int(x) if is_int(s) && d.is_float() => {
                // Unsigned 64-bit constants hold their bits.
                let x = if s == DType::U64 {
                    x as u64 as i128
                } else {
                    x as i128
                };
                // Exact in f64, so the executor's one rounding to `d` is the only one.
                (x.abs() <= 1 << 53).then_some(Const::Float(x as f64))
            }
            Const::Int(x) if is_int(s) && d.is_int() => {
                let (lo, hi) = int_range(d);
                let x = if s == DType::U64 {
                    x as u64 as i128
                } else {
                    x as i128
                };
                (lo..=hi).contains(&x).then_some(Const::Int(x as i64))
            }
            _ => None,
        }
    }

    /// Triton's `bitcast`.
    /// Triton's `x.to(tl.pointer_type(d))` of an integer: `int_to_ptr` (64-bit integers only,
    /// as in Triton).
    pub(crate) fn int_to_ptr(&mut self, v: Value, d: DType) -> Res<Value> {
        let src = self.tyc(v);
        if src.ptr {
            return Err(format!(
                "cannot cast pointer type {src} to pointer_type({}): casts between pointer \
                 types are not supported",
                dts(d)
            ));
        }
        if !matches!(src.dtype, DType::I64 | DType::U64) {
            return Err(format!(
                "only 64-bit integers cast to pointers, got {src} (an address read from a \
                 pointer table is int64)"
            ));
        }
        let ty = Type {
            dtype: d,
            ptr: true,
            shape: src.shape.clone(),
        };
        Ok(self.emit1(Op::IntToPtr { src: v }, ty))
    }

    pub(crate) fn bitcast(&mut self, v: Value, d: DType) -> Res<Value> {
        let src = self.tyc(v);
        if src.ptr {
            return Err(format!("cannot bitcast pointer type {src}"));
        }
        if src.dtype == d {
            return Ok(v);
        }
        if src.dtype.bits() != d.bits() {
            return Err(format!(
                "cannot bitcast data-type of size {} ({}) to data-type of size {} ({})",
                src.dtype.bits(),
                dts(src.dtype),
                d.bits(),
                dts(d)
            ));
        }
        Ok(self.emit1(Op::Bitcast { src: v }, src.with_dtype(d)))
    }

    // ---------------------------------------------------------------------------------
    // broadcasting
    // ---------------------------------------------------------------------------------

    pub(crate) fn splat(&mut self, v: Value, shape: &[usize]) -> Res<Value> {
        let t = self.tyc(v);
        if t.is_block() {
            return Err(format!("cannot splat a block {t}"));
        }
        if shape.is_empty() {
            return Ok(v);
        }
        // Splat of a constant is a block constant.
        if let Some(id) = self.k.def_op(v) {
            if let Op::Constant { value } = self.k.op(id).op {
                return Ok(self.constant(value, t.with_shape(shape)));
            }
        }
        Ok(self.emit1(Op::Splat { src: v }, t.with_shape(shape)))
    }

    /// `broadcast_impl_shape`: `v` to exactly `shape` (scalars splat; ranks must match).
    pub(crate) fn broadcast_to(&mut self, v: Value, shape: &[usize]) -> Res<Value> {
        let t = self.tyc(v);
        if !t.is_block() {
            return self.splat(v, shape);
        }
        if t.rank() != shape.len() {
            return Err(format!(
                "cannot broadcast, rank mismatch: {:?}, {:?}",
                t.shape, shape
            ));
        }
        if t.shape == shape {
            return Ok(v);
        }
        for (i, (&s, &d)) in t.shape.iter().zip(shape).enumerate() {
            if s != d && s != 1 {
                return Err(format!(
                    "cannot broadcast, the expanded size of the tensor ({d}) must match the existing \
                     size ({s}) at non-singleton dimension {i}: {:?}, {:?}",
                    t.shape, shape
                ));
            }
        }
        Ok(self.emit1(Op::Broadcast { src: v }, t.with_shape(shape)))
    }

    /// `broadcast_impl_value`: NumPy broadcasting of two values.
    pub(crate) fn broadcast_pair(&mut self, a: Value, b: Value) -> Res<(Value, Value)> {
        let (ta, tb) = (self.tyc(a), self.tyc(b));
        match (ta.is_block(), tb.is_block()) {
            (true, false) => Ok((a, self.splat(b, &ta.shape)?)),
            (false, true) => Ok((self.splat(a, &tb.shape)?, b)),
            (false, false) => Ok((a, b)),
            (true, true) => {
                let shape = broadcast_shapes(&ta.shape, &tb.shape)?;
                let a = self.left_pad_broadcast(a, &shape)?;
                let b = self.left_pad_broadcast(b, &shape)?;
                Ok((a, b))
            }
        }
    }

    /// Broadcasts three values to their common shape.
    fn broadcast3(&mut self, vs: [Value; 3]) -> Res<[Value; 3]> {
        let (a, b) = self.broadcast_pair(vs[0], vs[1])?;
        let (a, c) = self.broadcast_pair(a, vs[2])?;
        let (b, _) = self.broadcast_pair(b, c)?;
        Ok([a, b, c])
    }

    fn left_pad_broadcast(&mut self, mut v: Value, shape: &[usize]) -> Res<Value> {
        while self.ty(v).rank() < shape.len() {
            v = self.expand_dims(v, 0)?;
        }
        self.broadcast_to(v, shape)
    }

    // ---------------------------------------------------------------------------------
    // binary ops
    // ---------------------------------------------------------------------------------

    /// `binary_op_type_checking_impl`: casts (with the scalar rules) and broadcasts.
    pub(crate) fn binary_prep(
        &mut self,
        a: Opnd,
        b: Opnd,
        allow_lhs_ptr: bool,
        allow_rhs_ptr: bool,
        arithmetic: bool,
        div_or_mod: bool,
    ) -> Res<(Value, Value)> {
        let (da, pa, wa) = self.opnd_dtype(a)?;
        let (db, pb, wb) = self.opnd_dtype(b)?;
        let show = |d: DType, p: bool| {
            if p {
                format!("pointer<{}>", dts(d))
            } else {
                dts(d).to_string()
            }
        };
        let incompatible = || {
            format!(
                "invalid operands of type {} and {}",
                show(da, pa),
                show(db, pb)
            )
        };
        // Triton's `check_ptr_type_impl`, both ways round.
        let ptr_ok = |p: bool, d: DType, allow: bool, other_p: bool, od: DType| {
            !p || (allow && !(other_p && od != d) && (other_p || !od.is_float()))
        };
        if !ptr_ok(pa, da, allow_lhs_ptr, pb, db) || !ptr_ok(pb, db, allow_rhs_ptr, pa, da) {
            return Err(incompatible());
        }
        let (a, b) = if arithmetic && !pa && !pb {
            let ret = computation_type(da, wa, db, wb, div_or_mod)?;
            for o in [a, b] {
                if let Opnd::Weak(Scalar::Int(x)) = o {
                    if x < 0 && ret.is_unsigned_int() {
                        return Err(
                            "cannot perform a binary operation between an unsigned tensor and a negative \
                             scalar; cast one of them explicitly"
                                .into(),
                        );
                    }
                }
            }
            let conv = |o: Opnd, this: &mut Self| -> Res<Value> {
                match o {
                    Opnd::Weak(s) => this.scalar_const(s, ret),
                    Opnd::Val(v) => this.cast(v, ret),
                }
            };
            let a = conv(a, self)?;
            let b = conv(b, self)?;
            (a, b)
        } else {
            (self.value_of(a)?, self.value_of(b)?)
        };
        self.broadcast_pair(a, b)
    }

    fn bin(&mut self, kind: BinaryOp, a: Value, b: Value) -> Value {
        let t = self.tyc(a);
        self.emit1(
            Op::Binary {
                kind,
                lhs: a,
                rhs: b,
            },
            t,
        )
    }

    /// Dispatch for the Rust operators.
    pub(crate) fn binary_dispatch(&mut self, kind: BinaryOp, a: Opnd, b: Opnd) -> Res<Value> {
        match kind {
            BinaryOp::Add => self.add(a, b),
            BinaryOp::Sub => self.sub(a, b),
            BinaryOp::Mul => self.mul(a, b),
            BinaryOp::Div => self.truediv(a, b),
            BinaryOp::Rem => self.rem(a, b),
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor | BinaryOp::Shl | BinaryOp::Shr => {
                self.bitwise(kind, a, b)
            }
            BinaryOp::Max | BinaryOp::MaxNan => self.max_min(a, b, true, kind == BinaryOp::MaxNan),
            BinaryOp::Min | BinaryOp::MinNan => self.max_min(a, b, false, kind == BinaryOp::MinNan),
            BinaryOp::MulHi => self.umulhi(a, b),
            BinaryOp::Pow | BinaryOp::Atan2 | BinaryOp::Hypot => self.libdevice2(kind, a, b),
        }
    }

    /// A binary `libdevice` function: the operands promoted to one type (Triton's
    /// arithmetic promotion), which must be fp32 or fp64.
    pub(crate) fn libdevice2(&mut self, kind: BinaryOp, a: Opnd, b: Opnd) -> Res<Value> {
        let (a, b) = self.binary_prep(a, b, false, false, true, false)?;
        let d = self.ty(a).dtype;
        if !matches!(d, DType::F32 | DType::F64) {
            return Err(format!(
                "{}: expected dtype fp32 or fp64 but got {} (cast with .to(F32) first)",
                kind.name(),
                dts(d)
            ));
        }
        Ok(self.bin(kind, a, b))
    }

    pub(crate) fn add(&mut self, a: Opnd, b: Opnd) -> Res<Value> {
        let (mut a, mut b) = self.binary_prep(a, b, true, true, true, false)?;
        let (ta, tb) = (self.tyc(a), self.tyc(b));
        if ta.ptr && tb.ptr {
            return Err("cannot add pointers together".into());
        }
        if tb.ptr {
            std::mem::swap(&mut a, &mut b);
        }
        if self.ty(a).ptr {
            return self.addptr(a, b);
        }
        Ok(self.bin(BinaryOp::Add, a, b))
    }

    fn addptr(&mut self, p: Value, off: Value) -> Res<Value> {
        let to = self.tyc(off);
        if !to.dtype.is_int() {
            return Err(format!(
                "pointer offsets must be integers, got {}",
                dts(to.dtype)
            ));
        }
        // Unsigned offsets narrower than 64 bits are zero-extended (addptr treats offsets as signed).
        let off = if to.dtype.is_unsigned_int() && to.dtype.bits() < 64 {
            self.cast(off, DType::I64)?
        } else {
            off
        };
        let t = self.tyc(p);
        Ok(self.emit1(
            Op::AddPtr {
                ptr: p,
                offset: off,
            },
            t,
        ))
    }

    pub(crate) fn sub(&mut self, a: Opnd, b: Opnd) -> Res<Value> {
        let (a, b) = self.binary_prep(a, b, true, false, true, false)?;
        if self.ty(a).ptr {
            let nb = self.minus(b)?;
            return self.addptr(a, nb);
        }
        Ok(self.bin(BinaryOp::Sub, a, b))
    }

    pub(crate) fn mul(&mut self, a: Opnd, b: Opnd) -> Res<Value> {
        let (a, b) = self.binary_prep(a, b, false, false, true, false)?;
        Ok(self.bin(BinaryOp::Mul, a, b))
    }

    /// `/`: int / int gives fp32.
    pub(crate) fn truediv(&mut self, a: Opnd, b: Opnd) -> Res<Value> {
        let (mut a, mut b) = self.binary_prep(a, b, false, false, true, true)?;
        let (da, db) = (self.ty(a).dtype, self.ty(b).dtype);
        match (da.is_float(), db.is_float()) {
            (true, false) => b = self.cast(b, da)?,
            (false, true) => a = self.cast(a, db)?,
            (false, false) => {
                a = self.cast(a, DType::F32)?;
                b = self.cast(b, DType::F32)?;
            }
            (true, true) => {
                if da != db {
                    let mant = |d: DType| match d {
                        DType::F16 => 10,
                        DType::BF16 => 7,
                        DType::F32 => 23,
                        _ => 52,
                    };
                    if mant(da) > mant(db) {
                        b = self.cast(b, da)?
                    } else {
                        a = self.cast(a, db)?
                    }
                }
            }
        }
        Ok(self.bin(BinaryOp::Div, a, b))
    }

    /// `fdiv(x, y)` / `div_rn(x, y)`: float division (both operands must be floats).
    pub(crate) fn fdiv(&mut self, a: Opnd, b: Opnd) -> Res<Value> {
        for o in [a, b] {
            let (d, p, _) = self.opnd_dtype(o)?;
            if p || !d.is_float() {
                return Err(format!(
                    "both operands of fdiv must have floating scalar type, got {}",
                    dts(d)
                ));
            }
        }
        let (a, b) = self.binary_prep(a, b, false, false, false, true)?;
        let (da, db) = (self.ty(a).dtype, self.ty(b).dtype);
        let d = computation_type(da, false, db, false, false)?;
        let (a, b) = (self.cast(a, d)?, self.cast(b, d)?);
        Ok(self.bin(BinaryOp::Div, a, b))
    }

    /// Triton's `_check_dtype(dtypes=["fp32"])` for `div_rn`/`sqrt_rn`.
    pub(crate) fn require_f32(&self, o: Opnd, what: &str) -> Res<()> {
        let (d, p, weak) = self.opnd_dtype(o)?;
        if p || (d != DType::F32 && !(weak && d.is_float())) {
            return Err(format!("{what} expects dtype fp32 but got {}", dts(d)));
        }
        Ok(())
    }

    /// Two Rust scalars are Triton constexprs, computed at build time with Python's `//`
    /// and `%` (rounding toward -inf, the remainder taking the divisor's sign: `-7 // 2` is
    /// -4, `-7 % 2` is 1); `None` when either operand is a tensor.
    fn constexpr_div_mod(&mut self, a: Opnd, b: Opnd, floor_div: bool) -> Option<Res<Value>> {
        let (Opnd::Weak(x), Opnd::Weak(y)) = (a, b) else {
            return None;
        };
        let r = match (x, y) {
            (Scalar::Int(x), Scalar::Int(y)) => {
                if y == 0 {
                    return Some(Err(
                        "integer division or modulo by zero in a constexpr".into()
                    ));
                }
                let (q, r) = (x / y, x % y);
                let adjust = r != 0 && ((r < 0) != (y < 0));
                Scalar::Int(match (floor_div, adjust) {
                    (true, true) => q - 1,
                    (true, false) => q,
                    (false, true) => r + y,
                    (false, false) => r,
                })
            }
            (Scalar::Float(_), _) | (_, Scalar::Float(_)) if !floor_div => {
                let f = |s: Scalar| match s {
                    Scalar::Int(v) => v as f64,
                    Scalar::Float(v) => v,
                    Scalar::Bool(v) => v as u8 as f64,
                };
                let (x, y) = (f(x), f(y));
                if y == 0.0 {
                    return Some(Err("float modulo by zero in a constexpr".into()));
                }
                let m = x % y;
                Scalar::Float(if m != 0.0 && ((m < 0.0) != (y < 0.0)) {
                    m + y
                } else {
                    m
                })
            }
            _ => return None,
        };
        Some(scalar_dtype(r).and_then(|d| self.scalar_const(r, d)))
    }

    /// Triton's `//` on ints: C division truncating toward zero (Python's floor division
    /// when both operands are Rust scalars, see [`Self::constexpr_div_mod`]).
    pub(crate) fn floordiv(&mut self, a: Opnd, b: Opnd) -> Res<Value> {
        if let Some(r) = self.constexpr_div_mod(a, b, true) {
            return r;
        }
        let (a, b) = self.binary_prep(a, b, false, false, true, true)?;
        let (da, db) = (self.ty(a).dtype, self.ty(b).dtype);
        if !(is_int(da) && is_int(db)) {
            return Err(format!(
                "floordiv (//) needs integers, got {} and {}",
                dts(da),
                dts(db)
            ));
        }
        Ok(self.bin(BinaryOp::Div, a, b))
    }

    /// `%`: fmod for floats, C remainder for ints (Python's modulo when both operands are
    /// Rust scalars, see [`Self::constexpr_div_mod`]).
    pub(crate) fn rem(&mut self, a: Opnd, b: Opnd) -> Res<Value> {
        if let Some(r) = self.constexpr_div_mod(a, b, false) {
            return r;
        }
        let (a, b) = self.binary_prep(a, b, false, false, true, true)?;
        Ok(self.bin(BinaryOp::Rem, a, b))
    }

    /// `& | ^ << >>` (ints and bool).
    pub(crate) fn bitwise(&mut self, kind: BinaryOp, a: Opnd, b: Opnd) -> Res<Value> {
        let (a, b) = self.binary_prep(a, b, false, false, true, false)?;
        let (da, db) = (self.ty(a).dtype, self.ty(b).dtype);
        if !is_int(da) || !is_int(db) {
            return Err(format!(
                "invalid operands of type {} and {}: `{}` needs integers",
                dts(da),
                dts(db),
                kind.name()
            ));
        }
        Ok(self.bin(kind, a, b))
    }

    /// `-x` as `0 - x`.
    pub(crate) fn minus(&mut self, x: Value) -> Res<Value> {
        let t = self.tyc(x);
        if t.ptr {
            return Err(format!("wrong type argument to unary minus ({t})"));
        }
        let zero = self.constant(Const::Int(0), t.element());
        self.sub(Opnd::Val(zero), Opnd::Val(x))
    }

    /// `~x` as `x ^ all_ones`.
    pub(crate) fn invert(&mut self, x: Value) -> Res<Value> {
        let t = self.tyc(x);
        if t.ptr || t.dtype.is_float() {
            return Err(format!("wrong type argument to unary invert ({t})"));
        }
        let ones = if t.dtype.is_bool() { 1 } else { -1 };
        let ones = self.constant(Const::Int(ones), t.element());
        self.bitwise(BinaryOp::Xor, Opnd::Val(x), Opnd::Val(ones))
    }

    pub(crate) fn cmp_values(&mut self, pred: CmpPred, a: Value, b: Value) -> Res<Value> {
        let t = self.tyc(a);
        Ok(self.emit1(
            Op::Cmp {
                pred,
                lhs: a,
                rhs: b,
            },
            t.with_dtype(DType::Bool),
        ))
    }

    pub(crate) fn compare(&mut self, pred: CmpPred, a: Opnd, b: Opnd) -> Res<Value> {
        let (a, b) = self.binary_prep(a, b, false, false, true, false)?;
        self.cmp_values(pred, a, b)
    }

    pub(crate) fn max_min(
        &mut self,
        a: Opnd,
        b: Opnd,
        max: bool,
        propagate_nan: bool,
    ) -> Res<Value> {
        let (a, b) = self.binary_prep(a, b, false, false, true, false)?;
        let d = self.ty(a).dtype;
        let kind = match (max, propagate_nan && d.is_float()) {
            (true, false) => BinaryOp::Max,
            (true, true) => BinaryOp::MaxNan,
            (false, false) => BinaryOp::Min,
            (false, true) => BinaryOp::MinNan,
        };
        Ok(self.bin(kind, a, b))
    }

    pub(crate) fn umulhi(&mut self, a: Opnd, b: Opnd) -> Res<Value> {
        let (a, b) = self.binary_prep(a, b, false, false, true, false)?;
        let d = self.ty(a).dtype;
        if !matches!(d, DType::I32 | DType::U32 | DType::I64 | DType::U64) {
            return Err(format!(
                "umulhi expects int32, int64, uint32 or uint64, got {}",
                dts(d)
            ));
        }
        Ok(self.bin(BinaryOp::MulHi, a, b))
    }

    pub(crate) fn clamp(&mut self, x: Opnd, lo: Opnd, hi: Opnd, propagate_nan: bool) -> Res<Value> {
        let (lo, hi) = self.binary_prep(lo, hi, false, false, true, false)?;
        let (x, lo) = self.binary_prep(x, Opnd::Val(lo), false, false, true, false)?;
        let (x, hi) = self.binary_prep(Opnd::Val(x), Opnd::Val(hi), false, false, true, false)?;
        let d = self.ty(x).dtype;
        let (lo, hi) = (self.cast(lo, d)?, self.cast(hi, d)?);
        let [x, lo, hi] = self.broadcast3([x, lo, hi])?;
        let t = self.tyc(x);
        if !t.dtype.is_float() {
            return Err(format!("clamp only supports floats, got {}", dts(t.dtype)));
        }
        Ok(self.emit1(
            Op::Clamp {
                src: x,
                lo,
                hi,
                propagate_nan,
            },
            t,
        ))
    }

    pub(crate) fn fma(&mut self, x: Opnd, y: Opnd, z: Opnd) -> Res<Value> {
        let (x, y) = self.binary_prep(x, y, false, false, true, false)?;
        let (z, x) = self.binary_prep(z, Opnd::Val(x), false, false, true, false)?;
        let (z, y) = self.binary_prep(Opnd::Val(z), Opnd::Val(y), false, false, true, false)?;
        let d = self.ty(z).dtype;
        let (x, y) = (self.cast(x, d)?, self.cast(y, d)?);
        let [x, y, z] = self.broadcast3([x, y, z])?;
        let t = self.tyc(x);
        if !t.dtype.is_float() {
            return Err(format!("fma needs floats, got {}", dts(t.dtype)));
        }
        Ok(self.emit1(Op::Fma { a: x, b: y, c: z }, t))
    }

    /// Math functions; Triton accepts fp32 and fp64 only (`abs` takes any number).
    pub(crate) fn unary(&mut self, kind: UnaryOp, x: Opnd) -> Res<Value> {
        let x = self.value_of(x)?;
        let t = self.tyc(x);
        if t.ptr {
            return Err(format!("{} of a pointer ({t})", kind.name()));
        }
        if kind.float_only() && !matches!(t.dtype, DType::F32 | DType::F64) {
            return Err(format!(
                "expected dtype fp32 or fp64 but got {} (cast with .to(F32) first)",
                dts(t.dtype)
            ));
        }
        if kind == UnaryOp::Abs && (t.dtype.is_unsigned_int() || t.dtype.is_bool()) {
            return Ok(x);
        }
        Ok(self.emit1(Op::Unary { kind, src: x }, t))
    }

    /// `sigmoid(x) = 1 / (1 + exp(-x))`, as Triton's standard library.
    pub(crate) fn sigmoid(&mut self, x: Opnd) -> Res<Value> {
        let x = self.value_of(x)?;
        let nx = self.minus(x)?;
        let e = self.unary(UnaryOp::Exp, Opnd::Val(nx))?;
        let d = self.add(Opnd::Weak(Scalar::Int(1)), Opnd::Val(e))?;
        self.truediv(Opnd::Weak(Scalar::Int(1)), Opnd::Val(d))
    }

    /// `cdiv(x, d) = (x + d - 1) // d`.
    pub(crate) fn cdiv(&mut self, x: Opnd, d: Opnd) -> Res<Value> {
        let s = self.add(x, d)?;
        let s = self.sub(Opnd::Val(s), Opnd::Weak(Scalar::Int(1)))?;
        self.floordiv(Opnd::Val(s), d)
    }

    /// `where(cond, x, y)`.
    pub(crate) fn where_(&mut self, c: Opnd, x: Opnd, y: Opnd) -> Res<Value> {
        let c = self.value_of(c)?;
        let c = self.cast(c, DType::Bool)?;
        let (x, y) = self.binary_prep(x, y, true, true, true, false)?;
        let (c, x) = self.broadcast_pair(c, x)?;
        let (x, y) = self.broadcast_pair(x, y)?;
        let (c, _) = self.broadcast_pair(c, y)?;
        let t = self.tyc(x);
        Ok(self.emit1(
            Op::Select {
                cond: c,
                on_true: x,
                on_false: y,
            },
            t,
        ))
    }

    // ---------------------------------------------------------------------------------
    // creation
    // ---------------------------------------------------------------------------------

    pub(crate) fn program_id(&mut self, axis: i64, num: bool) -> Res<Value> {
        if !(0..3).contains(&axis) {
            let f = if num { "num_programs" } else { "program_id" };
            return Err(format!("{f} axis must be 0, 1, or 2 but got {axis}"));
        }
        let axis = axis as u8;
        let op = if num {
            Op::NumPrograms { axis }
        } else {
            Op::ProgramId { axis }
        };
        Ok(self.emit1(op, Type::scalar(DType::I32)))
    }

    pub(crate) fn arange(&mut self, start: i64, end: i64) -> Res<Value> {
        let fits = |x: i64| i32::try_from(x).is_ok();
        if !fits(start) || !fits(end) {
            return Err(format!("arange must fit in int32, got ({start}, {end})"));
        }
        if end <= start {
            return Err(format!(
                "arange's end argument ({end}) must be greater than the start argument ({start})"
            ));
        }
        let n = end - start;
        if n & (n - 1) != 0 {
            return Err(format!(
                "arange's range must be a power of 2, got {end} - {start} = {n}"
            ));
        }
        if n > 1 << 20 {
            return Err(format!(
                "arange's range {n} is larger than the maximum block size 2^20"
            ));
        }
        Ok(self.emit1(
            Op::Arange { start, end },
            Type::block(DType::I32, &[n as usize]),
        ))
    }

    /// Checks a block shape: dims are powers of two and the block has at most 2^20 elements.
    pub(crate) fn check_shape(&self, shape: &[i64]) -> Res<Vec<usize>> {
        let mut numel: i64 = 1;
        let mut out = Vec::with_capacity(shape.len());
        for &d in shape {
            if d <= 0 || d & (d - 1) != 0 {
                return Err(format!(
                    "shape {shape:?}: block dimensions must be powers of 2, got {d}"
                ));
            }
            numel = numel.saturating_mul(d);
            out.push(d as usize);
        }
        if numel > 1 << 20 {
            return Err(format!(
                "shape {shape:?} has {numel} elements; the maximum block size is 2^20"
            ));
        }
        Ok(out)
    }

    /// `full(shape, value, dtype)`.
    pub(crate) fn full(&mut self, shape: &[i64], value: Opnd, d: DType) -> Res<Value> {
        let shape = self.check_shape(shape)?;
        let v = match value {
            Opnd::Weak(s) => {
                check_literal(s, d)?;
                self.scalar_const(s, d)?
            }
            Opnd::Val(v) => {
                if self.ty(v).numel() != 1 || self.ty(v).ptr {
                    return Err(format!("full() needs a scalar value, got {}", self.ty(v)));
                }
                let v = self.reshape(v, &[])?;
                self.cast(v, d)?
            }
        };
        self.splat(v, &shape)
    }

    // ---------------------------------------------------------------------------------
    // shape manipulation
    // ---------------------------------------------------------------------------------

    pub(crate) fn expand_dims(&mut self, v: Value, axis: i64) -> Res<Value> {
        let t = self.tyc(v);
        let r = t.rank() as i64;
        let ax = if axis < 0 { axis + r + 1 } else { axis };
        if !(0..=r).contains(&ax) {
            return Err(format!("expand_dims axis {axis} is out of range for {t}"));
        }
        let mut shape = t.shape.clone();
        shape.insert(ax as usize, 1);
        Ok(self.emit1(
            Op::ExpandDims {
                src: v,
                axis: ax as u32,
            },
            t.with_shape(&shape),
        ))
    }

    pub(crate) fn reshape(&mut self, v: Value, shape: &[usize]) -> Res<Value> {
        let t = self.tyc(v);
        let n: usize = shape.iter().product();
        if n != t.numel() {
            return Err(format!(
                "reshape() cannot change the number of elements: {t} to {shape:?}"
            ));
        }
        if t.shape == shape {
            return Ok(v);
        }
        Ok(self.emit1(Op::Reshape { src: v }, t.with_shape(shape)))
    }

    pub(crate) fn permute(&mut self, v: Value, dims: &[i64]) -> Res<Value> {
        let t = self.tyc(v);
        let mut sorted: Vec<i64> = dims.to_vec();
        sorted.sort_unstable();
        if dims.len() != t.rank() || sorted.iter().enumerate().any(|(i, d)| *d != i as i64) {
            return Err(format!(
                "permute dims must be a permutation of 0..{}, got {dims:?} for {t}",
                t.rank()
            ));
        }
        if dims.iter().enumerate().all(|(i, d)| *d == i as i64) {
            return Ok(v);
        }
        let order: Vec<u32> = dims.iter().map(|d| *d as u32).collect();
        let shape: Vec<usize> = dims.iter().map(|d| t.shape[*d as usize]).collect();
        Ok(self.emit1(Op::Permute { src: v, order }, t.with_shape(&shape)))
    }

    pub(crate) fn join(&mut self, a: Value, b: Value) -> Res<Value> {
        let (a, b) = self.broadcast_pair(a, b)?;
        let (ta, tb) = (self.tyc(a), self.tyc(b));
        if ta != tb {
            return Err(format!(
                "join needs operands of one type, got {ta} and {tb}"
            ));
        }
        let mut shape = ta.shape.clone();
        shape.push(2);
        Ok(self.emit1(Op::Join { lhs: a, rhs: b }, ta.with_shape(&shape)))
    }

    pub(crate) fn split(&mut self, a: Value) -> Res<(Value, Value)> {
        let t = self.tyc(a);
        if t.shape.last() != Some(&2) {
            return Err(format!("split needs a last dimension of size 2, got {t}"));
        }
        let rt = t.with_shape(&t.shape[..t.rank() - 1]);
        let r = self.emit(Op::Split { src: a }, vec![rt.clone(), rt]);
        Ok((Value(r.start), Value(r.start + 1)))
    }

    // ---------------------------------------------------------------------------------
    // memory
    // ---------------------------------------------------------------------------------

    fn mask_for(&mut self, ptr_ty: &Type, mask: Option<Opnd>, what: &str) -> Res<Option<Value>> {
        let Some(m) = mask else { return Ok(None) };
        let m = self.value_of(m)?;
        let mt = self.tyc(m);
        if mt.dtype != DType::Bool || mt.ptr {
            return Err(format!("mask must have boolean scalar type, got {mt}"));
        }
        if !ptr_ty.is_block() && mt.is_block() {
            return Err(format!("mask argument cannot be a block ({mt}) when the pointer argument of {what} is not a block"));
        }
        Ok(Some(self.broadcast_to(m, &ptr_ty.shape)?))
    }

    fn ptr_ty(&self, p: Value, what: &str) -> Res<Type> {
        let t = self.tyc(p);
        if !t.ptr {
            return Err(format!("{what} needs a pointer argument, got {t}"));
        }
        Ok(t)
    }

    pub(crate) fn load(
        &mut self,
        ptr: Value,
        mask: Option<Opnd>,
        other: Option<Opnd>,
    ) -> Res<Value> {
        let pt = self.ptr_ty(ptr, "load")?;
        if mask.is_none() && other.is_some() {
            return Err("`other` cannot be provided without `mask`".into());
        }
        let mask = self.mask_for(&pt, mask, "load")?;
        let other = match other {
            None => None,
            Some(o) => {
                let o = self.value_of(o)?;
                if !pt.is_block() && self.ty(o).is_block() {
                    return Err(
                        "other argument cannot be a block when the pointer argument is not a block"
                            .into(),
                    );
                }
                let o = self.broadcast_to(o, &pt.shape)?;
                Some(self.cast(o, pt.dtype)?)
            }
        };
        Ok(self.emit1(Op::Load { ptr, mask, other }, pt.with_dtype(pt.dtype)))
    }

    /// Re-emits an unused `load` at the end of the current region with a new mask/other.
    pub(crate) fn patch_load(
        &mut self,
        v: Value,
        mask: Option<Opnd>,
        other: Option<Opnd>,
    ) -> Res<Value> {
        let id = self
            .k
            .def_op(v)
            .ok_or("`.mask()`/`.other()` apply to the result of tl::load or an atomic")?;
        if self.block_ops.contains(&id) {
            return Err(BLOCK_MASK.into());
        }
        let region = self.current_region();
        let data = &self.k.ops[id.index()];
        if data.parent != region || self.uses[v.index()] != 0 {
            return Err("`.mask()`/`.other()` must be applied directly to the result of tl::load or an atomic, \
                        before it is used (or pass them to tl::load_with)"
                .into());
        }
        let op = data.op.clone();
        let pos = self.k.regions[region.index()]
            .ops
            .iter()
            .rposition(|o| *o == id);
        match (&op, mask, other) {
            (Op::Load { mask: Some(_), .. }, Some(_), _) | (Op::AtomicRmw { mask: Some(_), .. }, Some(_), _) => {
                Err("mask given twice".into())
            }
            (Op::Load { ptr, mask: old_mask, other: None }, m, o) => {
                let pt = self.tyc(*ptr);
                let (ptr, old_mask) = (*ptr, *old_mask);
                let new_mask = match m {
                    Some(m) => self.mask_for(&pt, Some(m), "load")?,
                    None => old_mask,
                };
                let new_other = match o {
                    None => None,
                    Some(o) => {
                        if new_mask.is_none() {
                            return Err("`other` cannot be provided without `mask` (call .mask() first)".into());
                        }
                        let o = self.value_of(o)?;
                        let o = self.broadcast_to(o, &pt.shape)?;
                        Some(self.cast(o, pt.dtype)?)
                    }
                };
                self.move_to_end(id, pos, Op::Load { ptr, mask: new_mask, other: new_other })?;
                Ok(v)
            }
            (Op::Load { other: Some(_), .. }, _, _) => Err("other given twice".into()),
            (Op::AtomicRmw { kind, ptr, value, mask: None, sem, scope }, Some(m), None) => {
                let pt = self.tyc(*ptr);
                let (kind, ptr, value, sem, scope) = (*kind, *ptr, *value, *sem, *scope);
                let mask = self.mask_for(&pt, Some(m), "atomic")?;
                self.move_to_end(id, pos, Op::AtomicRmw { kind, ptr, value, mask, sem, scope })?;
                Ok(v)
            }
            _ => Err("`.mask()`/`.other()` apply to the result of tl::load (`.other()` to loads only) or an atomic".into()),
        }
    }

    /// Sets Triton's `sem=` (`"relaxed"`, `"acquire"`, `"release"`, `"acq_rel"`) or `scope=`
    /// (`"cta"`, `"gpu"`, `"sys"`) of the atomic that produced `v`, before `v` is used.
    pub(crate) fn patch_atomic_ordering(
        &mut self,
        v: Value,
        sem: Option<&str>,
        scope: Option<&str>,
    ) -> Res<Value> {
        let what = if sem.is_some() { "sem" } else { "scope" };
        let id = self
            .k
            .def_op(v)
            .ok_or_else(|| format!("`.{what}()` applies to the result of an atomic"))?;
        let data = &self.k.ops[id.index()];
        if data.parent != self.current_region() || self.uses[v.index()] != 0 {
            return Err(format!(
                "`.{what}()` must be applied directly to the result of an atomic, before it is used"
            ));
        }
        let new_sem = match sem {
            None => None,
            Some(s) => Some(MemSem::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
                format!("memory semantic `{s}` not supported (relaxed, acquire, release or acq_rel)")
            })?),
        };
        let new_scope = match scope {
            None => None,
            Some(s) => Some(
                MemScope::ALL
                    .into_iter()
                    .find(|m| m.name() == s)
                    .ok_or_else(|| format!("memory scope `{s}` not supported (cta, gpu or sys)"))?,
            ),
        };
        match &mut self.k.ops[id.index()].op {
            Op::AtomicRmw { sem, scope, .. } | Op::AtomicCas { sem, scope, .. } => {
                if new_sem.is_some() {
                    *sem = new_sem;
                }
                if let Some(c) = new_scope {
                    *scope = c;
                }
                Ok(v)
            }
            _ => Err(format!("`.{what}()` applies to the result of an atomic")),
        }
    }

    /// Moving an op from `pos` to the end of the current region must not move it past memory
    /// accesses or control flow.
    fn check_movable(&self, pos: Option<usize>) -> Res<()> {
        let region = self.current_region();
        let ops = &self.k.regions[region.index()].ops;
        let after = pos.map(|p| &ops[p + 1..]).unwrap_or(&[]);
        if after.iter().any(|o| !self.k.ops[o.index()].op.props().pure) {
            return Err(
                "apply `.mask()`/`.other()` right after tl::load/tl::store/atomics, before other \
                        memory operations or control flow"
                    .into(),
            );
        }
        Ok(())
    }

    /// Replaces op `id` (at `pos` in the current region) and moves it to the end.
    pub(crate) fn move_to_end(&mut self, id: OpId, pos: Option<usize>, op: Op) -> Res<()> {
        self.check_movable(pos)?;
        self.reordered = true;
        let region = self.current_region();
        op.for_each_operand(|v| {
            if let Some(u) = self.uses.get_mut(v.index()) {
                *u += 1;
            }
        });
        self.k.ops[id.index()].op = op;
        self.k.ops[id.index()].loc = self.loc;
        let ops = &mut self.k.regions[region.index()].ops;
        if let Some(p) = pos {
            ops.remove(p);
        }
        ops.push(id);
        Ok(())
    }

    pub(crate) fn store(&mut self, ptr: Value, val: Opnd, mask: Option<Opnd>) -> Res<OpId> {
        let pt = self.ptr_ty(ptr, "store")?;
        let val = self.value_of(val)?;
        if !pt.is_block() && self.ty(val).is_block() {
            return Err(format!(
                "value argument cannot be a block ({}) when the pointer argument is not a block",
                self.ty(val)
            ));
        }
        if self.ty(val).ptr {
            return Err("cannot store pointers".into());
        }
        let val = self.broadcast_to(val, &pt.shape)?;
        let val = self.cast(val, pt.dtype)?;
        let mask = self.mask_for(&pt, mask, "store")?;
        self.emit(
            Op::Store {
                ptr,
                value: val,
                mask,
            },
            vec![],
        );
        Ok(OpId(self.k.ops.len() as u32 - 1))
    }

    /// Adds (or replaces) the mask of a store op.
    pub(crate) fn patch_store(&mut self, id: OpId, mask: Opnd) -> Res<()> {
        let region = self.current_region();
        if self.block_ops.contains(&id) {
            return Err(BLOCK_MASK.into());
        }
        let Some(data) = self.k.ops.get(id.index()) else {
            return Err("unknown store".into());
        };
        if data.parent != region {
            return Err(
                "`.mask()` must be applied to the store directly (in the same region)".into(),
            );
        }
        let Op::Store {
            ptr,
            value,
            mask: None,
        } = data.op
        else {
            return Err("mask given twice".into());
        };
        let pos = self.k.regions[region.index()]
            .ops
            .iter()
            .rposition(|o| *o == id);
        let pt = self.tyc(ptr);
        let mask = self.mask_for(&pt, Some(mask), "store")?;
        self.move_to_end(id, pos, Op::Store { ptr, value, mask })?;
        Ok(())
    }

    pub(crate) fn atomic_rmw(
        &mut self,
        kind: AtomicOp,
        ptr: Value,
        val: Opnd,
        mask: Option<Opnd>,
    ) -> Res<Value> {
        let pt = self.ptr_ty(ptr, "atomic")?;
        let d = pt.dtype;
        let name = kind.name();
        // Triton's `atom_red_typechecking_impl`: no int1/int8/int16 elements, fp16 and bf16
        // only for `atomic_add`, bitwise ops on integers only.
        let bad = match kind {
            AtomicOp::And | AtomicOp::Or | AtomicOp::Xor => !d.is_int(),
            _ => false,
        } || d.bits() < 16
            || (d.bits() == 16 && d.is_int())
            || (matches!(d, DType::F16 | DType::BF16) && kind != AtomicOp::Add);
        if bad {
            return Err(format!("atomic_{name} does not support {}", dts(d)));
        }
        let val = self.value_of(val)?;
        if !pt.is_block() && self.ty(val).is_block() {
            return Err(
                "value argument cannot be a block when the pointer argument is not a block".into(),
            );
        }
        let val = self.broadcast_to(val, &pt.shape)?;
        let val = self.cast(val, d)?;
        let mask = self.mask_for(&pt, mask, "atomic")?;
        Ok(self.emit1(
            Op::AtomicRmw {
                kind,
                ptr,
                value: val,
                mask,
                sem: None,
                scope: MemScope::default(),
            },
            pt.with_dtype(d),
        ))
    }

    pub(crate) fn atomic_cas(&mut self, ptr: Value, cmp: Opnd, val: Opnd) -> Res<Value> {
        let pt = self.ptr_ty(ptr, "atomic_cas")?;
        let d = pt.dtype;
        if !matches!(d.bits(), 16 | 32 | 64) {
            return Err(format!(
                "atomic_cas only supports elements of width 16, 32 or 64, got {}",
                dts(d)
            ));
        }
        // No implicit conversion (Triton's atomic_cas has none either): a tensor must have
        // the pointee dtype, a literal must be a value of it.
        let conv = |o: Opnd, what: &str, this: &mut Self| -> Res<Value> {
            let v = match o {
                Opnd::Val(v) => {
                    let vd = this.ty(v).dtype;
                    if vd != d || this.ty(v).ptr {
                        return Err(format!(
                            "{what} is {} but the pointer's element type is {}; cast it \
                             explicitly with .to(..)",
                            if this.ty(v).ptr { "a pointer" } else { dts(vd) },
                            dts(d)
                        ));
                    }
                    v
                }
                Opnd::Weak(s) => {
                    check_literal(s, d).map_err(|m| format!("{what}: {m}"))?;
                    this.scalar_const(s, d)?
                }
            };
            this.broadcast_to(v, &pt.shape)
        };
        let cmp = conv(cmp, "cmp", self)?;
        let value = conv(val, "val", self)?;
        Ok(self.emit1(
            Op::AtomicCas {
                ptr,
                cmp,
                value,
                sem: None,
                scope: MemScope::default(),
            },
            pt.with_dtype(d),
        ))
    }

    // ---------------------------------------------------------------------------------
    // linear algebra
    // ---------------------------------------------------------------------------------

    pub(crate) fn dot(
        &mut self,
        a: Value,
        b: Value,
        acc: Option<Value>,
        out: Option<DType>,
    ) -> Res<Value> {
        let (ta, tb) = (self.tyc(a), self.tyc(b));
        if ta.ptr || tb.ptr || !ta.is_block() || !tb.is_block() {
            return Err(format!("dot needs two number blocks, got {ta} and {tb}"));
        }
        if ta.dtype != tb.dtype {
            return Err(format!(
                "first input ({}) and second input ({}) must have the same dtype",
                dts(ta.dtype),
                dts(tb.dtype)
            ));
        }
        let r = ta.rank();
        if !((r == 2 || r == 3) && tb.rank() == r) {
            return Err(format!("both inputs must be either 2D or 3D: {ta} vs {tb}"));
        }
        let (m, k, k2, n) = (
            ta.shape[r - 2],
            ta.shape[r - 1],
            tb.shape[r - 2],
            tb.shape[r - 1],
        );
        if k != k2 {
            return Err(format!(
                "first input shape {:?} and second input shape {:?} are not compatible for matmul (K: {k} vs {k2})",
                ta.shape, tb.shape
            ));
        }
        if r == 3 && ta.shape[0] != tb.shape[0] {
            return Err(format!(
                "batch dimensions differ: {:?} vs {:?}",
                ta.shape, tb.shape
            ));
        }
        if k < 16 {
            return Err(format!(
                "input shapes should have K >= 16, got K = {k} ({ta} x {tb})"
            ));
        }
        let d = ta.dtype;
        let out_d = out.unwrap_or(DType::F32);
        // Triton ignores out_dtype where the inputs fix the result type; an explicit
        // out_dtype that would be ignored is an error here.
        let fixed = match d {
            DType::I8 => Some(DType::I32),
            DType::F32 | DType::BF16 => Some(DType::F32),
            DType::F64 => Some(DType::F64),
            _ => None,
        };
        if let (Some(f), Some(o)) = (fixed, out) {
            if o != f {
                return Err(format!(
                    "out_dtype={} with {} inputs: the result of this dot is always {} (drop \
                     out_dtype and cast the result)",
                    dts(o),
                    dts(d),
                    dts(f)
                ));
            }
        }
        let ret = if is_int(d) {
            if d != DType::I8 {
                return Err(format!(
                    "only int8 is supported for integer dot, got {}",
                    dts(d)
                ));
            }
            DType::I32
        } else if out_d == DType::BF16 {
            return Err(
                "out_dtype=bfloat16 is unsupported; use float32/float16 and cast with .to(BF16)"
                    .into(),
            );
        } else if matches!(d, DType::F32 | DType::BF16) {
            DType::F32
        } else if d == DType::F64 {
            DType::F64
        } else {
            out_d
        };
        let mut shape = ta.shape[..r - 2].to_vec();
        shape.extend([m, n]);
        let rt = Type::block(ret, &shape);
        let acc = match acc {
            None => self.constant(Const::Int(0), rt.clone()),
            Some(c) => {
                let tc = self.tyc(c);
                if tc.shape != rt.shape || tc.ptr {
                    return Err(format!("accumulator {tc} must have shape {:?}", rt.shape));
                }
                if tc.dtype != ret {
                    return Err(format!(
                        "accumulator dtype {} does not match the dot result dtype {} (out_dtype)",
                        dts(tc.dtype),
                        dts(ret)
                    ));
                }
                c
            }
        };
        Ok(self.emit1(Op::Dot { a, b, acc }, rt))
    }

    // ---------------------------------------------------------------------------------
    // reductions and scans
    // ---------------------------------------------------------------------------------

    fn norm_axis(&self, t: &Type, axis: i64) -> Res<u32> {
        let r = t.rank() as i64;
        let a = if axis < 0 { axis + r } else { axis };
        if !(0..r).contains(&a) {
            return Err(format!("axis {axis} is out of range for {t}"));
        }
        Ok(a as u32)
    }

    /// Flattens for `axis=None`; returns (inputs, axis, original shape).
    pub(crate) fn reduce_prep(
        &mut self,
        xs: &[Value],
        axis: Option<i64>,
    ) -> Res<(Vec<Value>, u32, Vec<usize>)> {
        let t = self.tyc(xs[0]);
        if !t.is_block() || t.ptr {
            return Err(format!("reductions need a block of numbers, got {t}"));
        }
        for &x in &xs[1..] {
            if self.ty(x).shape != t.shape {
                return Err(format!(
                    "reduction inputs must have one shape: {t} vs {}",
                    self.ty(x)
                ));
            }
        }
        match axis {
            None => {
                let n = t.numel();
                let flat = xs
                    .iter()
                    .map(|&x| self.reshape(x, &[n]))
                    .collect::<Res<Vec<_>>>()?;
                Ok((flat, 0, t.shape.clone()))
            }
            Some(a) => Ok((xs.to_vec(), self.norm_axis(&t, a)?, t.shape.clone())),
        }
    }

    /// Re-inserts reduced dims for `keep_dims`.
    pub(crate) fn keep_dims(
        &mut self,
        v: Value,
        axis: Option<i64>,
        orig: &[usize],
        reduced_axis: u32,
    ) -> Res<Value> {
        match axis {
            Some(_) => self.expand_dims(v, reduced_axis as i64),
            None => self.reshape(v, &vec![1; orig.len()]),
        }
    }

    /// The dtype Triton's `sum`/`cumsum` widen to.
    fn sum_dtype(d: DType) -> DType {
        match d {
            DType::Bool | DType::I8 | DType::I16 => DType::I32,
            DType::U8 | DType::U16 => DType::U32,
            other => other,
        }
    }

    pub(crate) fn reduce_builtin(
        &mut self,
        kind: ReduceKind,
        x: Value,
        axis: Option<i64>,
        keep: bool,
    ) -> Res<Value> {
        let d = self.ty(x).dtype;
        // Input promotion as Triton's standard library.
        let x = match kind {
            ReduceKind::Sum => self.cast(x, Self::sum_dtype(d))?,
            ReduceKind::Max | ReduceKind::Min => {
                if d.bits() < 32 {
                    self.cast(x, if d.is_float() { DType::F32 } else { DType::I32 })?
                } else {
                    x
                }
            }
            ReduceKind::ArgMax | ReduceKind::ArgMin => {
                if d.is_bool() {
                    return Err(format!(
                        "{} of a bool tensor is not supported (cast it with .to(I32) first)",
                        if kind == ReduceKind::ArgMax {
                            "argmax"
                        } else {
                            "argmin"
                        }
                    ));
                }
                if d == DType::BF16 {
                    self.cast(x, DType::F32)?
                } else {
                    x
                }
            }
            ReduceKind::Xor => {
                if !is_int(d) && !d.is_bool() {
                    return Err(format!(
                        "xor_sum only supported for integers, got {}",
                        dts(d)
                    ));
                }
                x
            }
            ReduceKind::Custom => {
                return Err("internal: custom reduce without a combine function".into())
            }
        };
        let (xs, ax, orig) = self.reduce_prep(&[x], axis)?;
        let t = self.tyc(xs[0]);
        let mut shape = t.shape.clone();
        shape.remove(ax as usize);
        let rd = if matches!(kind, ReduceKind::ArgMax | ReduceKind::ArgMin) {
            DType::I32
        } else {
            t.dtype
        };
        let r = self.emit1(
            Op::Reduce {
                kind,
                axis: ax,
                srcs: xs,
                combine: None,
            },
            Type::block(rd, &shape),
        );
        if keep {
            self.keep_dims(r, axis, &orig, ax)
        } else {
            Ok(r)
        }
    }

    /// Emits a custom reduce whose combine region `combine` was already built.
    pub(crate) fn reduce_custom(
        &mut self,
        xs: Vec<Value>,
        ax: u32,
        combine: RegionId,
    ) -> Res<Vec<Value>> {
        let tys: Vec<Type> = xs
            .iter()
            .map(|&x| {
                let t = self.ty(x);
                let mut s = t.shape.clone();
                s.remove(ax as usize);
                t.with_shape(&s)
            })
            .collect();
        let r = self.emit(
            Op::Reduce {
                kind: ReduceKind::Custom,
                axis: ax,
                srcs: xs,
                combine: Some(combine),
            },
            tys,
        );
        Ok(r.iter().collect())
    }

    pub(crate) fn scan_builtin(
        &mut self,
        kind: ScanKind,
        x: Value,
        axis: i64,
        reverse: bool,
    ) -> Res<Value> {
        let t = self.tyc(x);
        if !t.is_block() || t.ptr {
            return Err(format!("scans need a block of numbers, got {t}"));
        }
        let d = if t.dtype == DType::BF16 {
            DType::F32
        } else {
            Self::sum_dtype(t.dtype)
        };
        let x = self.cast(x, d)?;
        let ax = self.norm_axis(&t, axis)?;
        let rt = self.tyc(x);
        Ok(self.emit1(
            Op::Scan {
                kind,
                axis: ax,
                reverse,
                srcs: vec![x],
                combine: None,
            },
            rt,
        ))
    }

    pub(crate) fn scan_custom(
        &mut self,
        xs: Vec<Value>,
        ax: u32,
        reverse: bool,
        combine: RegionId,
    ) -> Res<Vec<Value>> {
        let tys: Vec<Type> = xs.iter().map(|&x| self.tyc(x)).collect();
        let r = self.emit(
            Op::Scan {
                kind: ScanKind::Custom,
                axis: ax,
                reverse,
                srcs: xs,
                combine: Some(combine),
            },
            tys,
        );
        Ok(r.iter().collect())
    }

    pub(crate) fn scan_prep(&self, xs: &[Value], axis: i64) -> Res<u32> {
        let t = self.tyc(xs[0]);
        if !t.is_block() || t.ptr {
            return Err(format!("scans need a block of numbers, got {t}"));
        }
        for &x in &xs[1..] {
            if self.ty(x).shape != t.shape {
                return Err(format!(
                    "scan inputs must have one shape: {t} vs {}",
                    self.ty(x)
                ));
            }
        }
        self.norm_axis(&t, axis)
    }

    // ---------------------------------------------------------------------------------
    // random (Triton's `random.py`, Philox-4x32)
    // ---------------------------------------------------------------------------------

    /// `randint4x(seed, offset, n_rounds)`: four `u32` blocks.
    pub(crate) fn randint4x(&mut self, seed: Opnd, offset: Value, rounds: u32) -> Res<[Value; 4]> {
        let ot = self.tyc(offset);
        if ot.ptr || !matches!(ot.dtype, DType::I32 | DType::U32 | DType::I64 | DType::U64) {
            return Err(format!(
                "random offsets must be int32, uint32, int64 or uint64, got {ot}"
            ));
        }
        let seed = self.value_of(seed)?;
        let st = self.tyc(seed);
        if st.is_block() || !is_int(st.dtype) {
            return Err(format!(
                "the random seed must be an integer scalar, got {st}"
            ));
        }
        // seed.to(uint64); lo = seed & 0xffffffff; hi = seed >> 32 (as uint32).
        let s64 = self.cast(seed, DType::U64)?;
        let lo = self.cast(s64, DType::U32)?;
        let sh = self.constant(Const::Int(32), Type::scalar(DType::U64));
        let hi64 = self.bin(BinaryOp::Shr, s64, sh);
        let hi = self.cast(hi64, DType::U32)?;
        // Triton's `randint4x`: the offset's low 32 bits are the first counter; a 64-bit
        // offset's high 32 bits (`offset >> 32`, arithmetic for int64) the second.
        let c0 = self.cast(offset, DType::U32)?;
        let ct = self.tyc(c0);
        let zero = self.constant(Const::Int(0), ct.clone());
        let c1 = if ot.dtype.size_bytes() == 8 {
            let sh = self.constant(Const::Int(32), ot.clone());
            let hi = self.bin(BinaryOp::Shr, offset, sh);
            self.cast(hi, DType::U32)?
        } else {
            zero
        };
        let k0 = self.splat(lo, &ct.shape)?;
        let k1 = self.splat(hi, &ct.shape)?;
        let r = self.emit(
            Op::Philox {
                counters: [c0, c1, zero, zero],
                key: [k0, k1],
                rounds,
            },
            vec![ct; 4],
        );
        Ok([
            Value(r.start),
            Value(r.start + 1),
            Value(r.start + 2),
            Value(r.start + 3),
        ])
    }

    /// `uint32_to_uniform_float`: Triton's exact scale, the largest f32 with
    /// `i32::MAX * scale < 1.0` (a rounded literal would break bit-compatibility and can give 1.0).
    fn uint_to_uniform(&mut self, x: Value) -> Res<Value> {
        let x = self.bitcast(x, DType::I32)?;
        let neg = self.compare(CmpPred::Lt, Opnd::Val(x), Opnd::Weak(Scalar::Int(0)))?;
        let nx = self.minus(x)?;
        let nx1 = self.sub(Opnd::Val(nx), Opnd::Weak(Scalar::Int(1)))?;
        let x = self.where_(Opnd::Val(neg), Opnd::Val(nx1), Opnd::Val(x))?;
        self.mul(Opnd::Val(x), Opnd::Weak(Scalar::Float(4.656_612_734_2e-10)))
    }

    pub(crate) fn rand(&mut self, seed: Opnd, offset: Value, rounds: u32) -> Res<Value> {
        let [r, ..] = self.randint4x(seed, offset, rounds)?;
        self.uint_to_uniform(r)
    }

    pub(crate) fn randn(&mut self, seed: Opnd, offset: Value, rounds: u32) -> Res<Value> {
        let [i1, i2, ..] = self.randint4x(seed, offset, rounds)?;
        let u1 = self.uint_to_uniform(i1)?;
        let u2 = self.uint_to_uniform(i2)?;
        // pair_uniform_to_normal (Box-Muller), first output.
        let u1 = self.max_min(
            Opnd::Weak(Scalar::Float(1.0e-7)),
            Opnd::Val(u1),
            true,
            false,
        )?;
        let th = self.mul(
            Opnd::Weak(Scalar::Float(std::f64::consts::TAU)),
            Opnd::Val(u2),
        )?;
        let l = self.unary(UnaryOp::Log, Opnd::Val(u1))?;
        let m = self.mul(Opnd::Weak(Scalar::Float(-2.0)), Opnd::Val(l))?;
        let r = self.unary(UnaryOp::Sqrt, Opnd::Val(m))?;
        let c = self.unary(UnaryOp::Cos, Opnd::Val(th))?;
        self.mul(Opnd::Val(r), Opnd::Val(c))
    }

    // ---------------------------------------------------------------------------------
    // control flow
    // ---------------------------------------------------------------------------------

    /// Loop bounds: promoted to one integer dtype (int32 unless one needs int64).
    pub(crate) fn loop_bounds(&mut self, lo: Opnd, hi: Opnd, step: Opnd) -> Res<[Value; 3]> {
        let mut d = DType::I32;
        for o in [lo, hi, step] {
            let (od, p, _) = self.opnd_dtype(o)?;
            if p || !is_int(od) {
                return Err(format!("range bounds must be integers, got {}", dts(od)));
            }
            if let Opnd::Val(v) = o {
                if self.ty(v).is_block() {
                    return Err(format!("range bounds must be scalars, got {}", self.ty(v)));
                }
            }
            d = integer_promote(d, if od.is_bool() { DType::I32 } else { od });
        }
        // Python's `range`: a negative step counts down; zero is an error.
        if let Opnd::Weak(Scalar::Int(0)) = step {
            return Err("range step must not be zero".into());
        }
        let mut out = [Value(0); 3];
        for (i, o) in [lo, hi, step].into_iter().enumerate() {
            out[i] = match o {
                Opnd::Weak(s) => self.scalar_const(s, d)?,
                Opnd::Val(v) => self.cast(v, d)?,
            };
        }
        Ok(out)
    }

    /// Ends region `r` with a `yield` of `vals`, checking their types against `want`.
    pub(crate) fn finish_region(
        &mut self,
        r: RegionId,
        vals: &[Value],
        want: Option<&[Type]>,
        what: &str,
    ) -> Res<()> {
        if let Some(want) = want {
            if vals.len() != want.len() {
                return Err(format!(
                    "{what}: expected {} values, got {}",
                    want.len(),
                    vals.len()
                ));
            }
            for (i, (v, w)) in vals.iter().zip(want).enumerate() {
                let t = self.ty(*v);
                if t != w {
                    return Err(format!("{what}: value {i} has type {w} before and {t} after (loop-carried and branch values keep their type; cast explicitly)"));
                }
            }
        }
        self.emit(
            Op::Yield {
                values: vals.to_vec(),
            },
            vec![],
        );
        self.pop_region(r)
    }

    pub(crate) fn emit_for(
        &mut self,
        b: [Value; 3],
        init: Vec<Value>,
        body: RegionId,
    ) -> Vec<Value> {
        let tys: Vec<Type> = init.iter().map(|&v| self.tyc(v)).collect();
        let r = self.emit(
            Op::For {
                lo: b[0],
                hi: b[1],
                step: b[2],
                init,
                body,
            },
            tys,
        );
        r.iter().collect()
    }

    pub(crate) fn emit_while(
        &mut self,
        init: Vec<Value>,
        cond: RegionId,
        body: RegionId,
    ) -> Vec<Value> {
        let tys: Vec<Type> = init.iter().map(|&v| self.tyc(v)).collect();
        let r = self.emit(Op::While { init, cond, body }, tys);
        r.iter().collect()
    }

    pub(crate) fn emit_if(
        &mut self,
        cond: Value,
        then_r: RegionId,
        else_r: RegionId,
        tys: Vec<Type>,
    ) -> Vec<Value> {
        let r = self.emit(
            Op::If {
                cond,
                then_region: then_r,
                else_region: else_r,
            },
            tys,
        );
        r.iter().collect()
    }

    /// The `bool` scalar condition of `if`/`while`.
    pub(crate) fn scalar_cond(&mut self, c: Opnd) -> Res<Value> {
        let c = self.value_of(c)?;
        let t = self.tyc(c);
        if t.is_block() && t.numel() != 1 {
            return Err(format!("the condition must be a scalar, got {t}"));
        }
        let c = self.reshape(c, &[])?;
        self.cast(c, DType::Bool)
    }

    /// `multiple_of` / `max_contiguous`: records a hint on `v` (no op).
    pub(crate) fn hint(
        &mut self,
        name: &str,
        v: Value,
        values: Vec<i64>,
        multiple: bool,
    ) -> Res<Value> {
        let t = self.ty(v);
        if values.len() != t.rank().max(1) || values.iter().any(|&d| d <= 0) {
            return Err(format!(
                "{name} needs one positive value per dim of {t}, got {values:?}"
            ));
        }
        let h = if multiple {
            Hint::MultipleOf(values)
        } else {
            Hint::MaxContiguous(values)
        };
        self.k.hints.push((v, h));
        Ok(v)
    }

    pub(crate) fn debug_barrier(&mut self) {
        self.emit(Op::DebugBarrier, vec![]);
    }
}

/// NumPy broadcast of two shapes (left-padding with 1s).
pub(crate) fn broadcast_shapes(a: &[usize], b: &[usize]) -> Res<Vec<usize>> {
    let n = a.len().max(b.len());
    let pad = |s: &[usize]| -> Vec<usize> {
        let mut v = vec![1; n - s.len()];
        v.extend_from_slice(s);
        v
    };
    let (pa, pb) = (pad(a), pad(b));
    pa.iter()
        .zip(&pb)
        .enumerate()
        .map(|(i, (&x, &y))| {
            if x == 1 {
                Ok(y)
            } else if y == 1 || x == y {
                Ok(x)
            } else {
                Err(format!("cannot make shapes compatible: incompatible dimensions at index {i}: {x} and {y} ({a:?} vs {b:?})"))
            }
        })
        .collect()
}
