//! `jit`: a kernel closure, specialised (and cached) per signature: the constexprs' values
//! and the dtypes of the arguments of its generic pointers.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use super::builder::{op, op_any, run_build, BuildSpec, Builder};
use super::tensor::Tensor;
use crate::dtype::DType;
use crate::error::{Error, Result, SourceLoc};
use crate::ir::{verify, Kernel, Param, ParamKind, Type, ValueDef};
use crate::passes::{pipeline, specialize_integers, IntSpec, PassOptions};

/// Declares a kernel's parameters inside the `jit` closure.
///
/// Runtime parameters ([`KernelBuilder::ptr`], [`KernelBuilder::ptr_any`],
/// [`KernelBuilder::scalar`]) are the launch arguments, in declaration order; constexprs
/// are given by name at launch and specialise the kernel.
#[derive(Debug)]
pub struct KernelBuilder {
    _private: (),
}

/// The value of a constexpr. Like Triton's `tl.constexpr`, one holds an integer, a bool, a
/// float, a string or a dtype; a launch gives it with
/// [`Launch::constexpr`](crate::runtime::Launch::constexpr) (anything with an `Into` here:
/// `64`, `true`, `0.5`, `"leaky_relu"`, `DType::F16`), and the kernel reads it while it is
/// built ([`KernelBuilder::constexpr`] for integers, [`KernelBuilder::constexpr_as`] for
/// every kind). Each value is its own specialisation; floats are compared by their bits.
#[derive(Clone, Debug)]
pub enum ConstexprValue {
    /// An integer (block sizes, counts).
    Int(i64),
    /// A bool (a flag choosing code at build time).
    Bool(bool),
    /// A float (a constant folded into the kernel).
    Float(f64),
    /// A string (`ACTIVATION = "leaky_relu"` choosing a branch at build time).
    Str(String),
    /// A dtype (`ACC_TYPE = tl.float32`).
    DType(DType),
}

impl ConstexprValue {
    /// The kind's name, as error messages give it: `int`, `bool`, `float`, `str`, `dtype`.
    pub fn kind(&self) -> &'static str {
        match self {
            ConstexprValue::Int(_) => "int",
            ConstexprValue::Bool(_) => "bool",
            ConstexprValue::Float(_) => "float",
            ConstexprValue::Str(_) => "str",
            ConstexprValue::DType(_) => "dtype",
        }
    }

    /// The value as an integer: an int, or a bool as 0 or 1 (Python's `int(True)`).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            ConstexprValue::Int(v) => Some(*v),
            ConstexprValue::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }
}

impl PartialEq for ConstexprValue {
    fn eq(&self, other: &Self) -> bool {
        use ConstexprValue::*;
        match (self, other) {
            (Int(a), Int(b)) => a == b,
            (Bool(a), Bool(b)) => a == b,
            (Float(a), Float(b)) => a.to_bits() == b.to_bits(),
            (Str(a), Str(b)) => a == b,
            (DType(a), DType(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for ConstexprValue {}

impl Hash for ConstexprValue {
    fn hash<H: Hasher>(&self, h: &mut H) {
        std::mem::discriminant(self).hash(h);
        match self {
            ConstexprValue::Int(v) => v.hash(h),
            ConstexprValue::Bool(v) => v.hash(h),
            ConstexprValue::Float(v) => v.to_bits().hash(h),
            ConstexprValue::Str(v) => v.hash(h),
            ConstexprValue::DType(v) => v.hash(h),
        }
    }
}

impl fmt::Display for ConstexprValue {
    /// `64`, `true`, `0.5`, `"leaky_relu"`, `f16`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConstexprValue::Int(v) => write!(f, "{v}"),
            ConstexprValue::Bool(v) => write!(f, "{v}"),
            ConstexprValue::Float(v) => write!(f, "{v:?}"),
            ConstexprValue::Str(v) => write!(f, "{v:?}"),
            ConstexprValue::DType(v) => write!(f, "{v}"),
        }
    }
}

macro_rules! constexpr_from {
    ($($t:ty => $v:ident as $c:ty),*) => {$(
        impl From<$t> for ConstexprValue {
            fn from(x: $t) -> ConstexprValue { ConstexprValue::$v(x as $c) }
        }
    )*};
}
constexpr_from!(i8 => Int as i64, i16 => Int as i64, i32 => Int as i64, i64 => Int as i64,
    u8 => Int as i64, u16 => Int as i64, u32 => Int as i64, f32 => Float as f64,
    f64 => Float as f64);

impl From<bool> for ConstexprValue {
    fn from(b: bool) -> ConstexprValue {
        ConstexprValue::Bool(b)
    }
}
impl From<&str> for ConstexprValue {
    fn from(s: &str) -> ConstexprValue {
        ConstexprValue::Str(s.to_string())
    }
}
impl From<String> for ConstexprValue {
    fn from(s: String) -> ConstexprValue {
        ConstexprValue::Str(s)
    }
}
impl From<DType> for ConstexprValue {
    fn from(d: DType) -> ConstexprValue {
        ConstexprValue::DType(d)
    }
}

/// A Rust type a constexpr can be read as ([`KernelBuilder::constexpr_as`]): `i64` (an
/// int, or a bool as 0/1), `bool` (a bool, or the int 0 or 1), `f64` (a float, or an int),
/// `String`, [`DType`].
pub trait ConstexprKind: Sized {
    /// The kind's name in error messages.
    const KIND: &'static str;
    /// The value as this type, if it is of a kind that converts exactly.
    fn from_value(v: &ConstexprValue) -> Option<Self>;
    /// This value as a constexpr value (a default).
    fn into_value(self) -> ConstexprValue;
    /// What a read gives after the build has failed (nothing more is recorded then).
    fn placeholder() -> Self;
}

impl ConstexprKind for i64 {
    const KIND: &'static str = "int";
    fn from_value(v: &ConstexprValue) -> Option<i64> {
        v.as_int()
    }
    fn into_value(self) -> ConstexprValue {
        ConstexprValue::Int(self)
    }
    fn placeholder() -> i64 {
        // 1 keeps shapes valid.
        1
    }
}

impl ConstexprKind for bool {
    const KIND: &'static str = "bool";
    fn from_value(v: &ConstexprValue) -> Option<bool> {
        match v {
            ConstexprValue::Bool(b) => Some(*b),
            ConstexprValue::Int(0) => Some(false),
            ConstexprValue::Int(1) => Some(true),
            _ => None,
        }
    }
    fn into_value(self) -> ConstexprValue {
        ConstexprValue::Bool(self)
    }
    fn placeholder() -> bool {
        false
    }
}

impl ConstexprKind for f64 {
    const KIND: &'static str = "float";
    fn from_value(v: &ConstexprValue) -> Option<f64> {
        match v {
            ConstexprValue::Float(f) => Some(*f),
            // Exactly: integers beyond 2^53 would round.
            ConstexprValue::Int(i) if i.unsigned_abs() <= 1 << 53 => Some(*i as f64),
            _ => None,
        }
    }
    fn into_value(self) -> ConstexprValue {
        ConstexprValue::Float(self)
    }
    fn placeholder() -> f64 {
        1.0
    }
}

impl ConstexprKind for String {
    const KIND: &'static str = "str";
    fn from_value(v: &ConstexprValue) -> Option<String> {
        match v {
            ConstexprValue::Str(s) => Some(s.clone()),
            _ => None,
        }
    }
    fn into_value(self) -> ConstexprValue {
        ConstexprValue::Str(self)
    }
    fn placeholder() -> String {
        String::new()
    }
}

impl ConstexprKind for DType {
    const KIND: &'static str = "dtype";
    fn from_value(v: &ConstexprValue) -> Option<DType> {
        match v {
            ConstexprValue::DType(d) => Some(*d),
            _ => None,
        }
    }
    fn into_value(self) -> ConstexprValue {
        ConstexprValue::DType(self)
    }
    fn placeholder() -> DType {
        DType::F32
    }
}

/// One launch argument as a signature sees it: an array of elements of a dtype, or a
/// scalar of a dtype (Triton's: an integer is `i32` when it fits, else `i64`; a float is
/// `f32`; a bool is `bool`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgType {
    /// An array (an input, output or in-place argument) of this dtype.
    Array(DType),
    /// A scalar of this dtype.
    Scalar(DType),
}

/// What a specialisation is built for, like Triton's signature: the constexprs (of any
/// kind) and each argument's kind and dtype, by position. A kernel is built once per
/// constexpr set and dtypes of its generic parameters' arguments
/// ([`KernelBuilder::ptr_any`], [`KernelBuilder::scalar_any`], `Ptr` and `Scalar` in
/// `#[jit]`); a launch makes its signature from its arguments.
///
/// ```
/// use triton_metal::tl::{self, Signature};
/// use triton_metal::DType::{F16, I32};
///
/// let copy = tl::jit("copy", |k| {
///     let (x, y) = (k.ptr_any("x"), k.ptr_any("y"));
///     let offs = tl::arange(0, k.constexpr("BLOCK"));
///     tl::store(y + offs, tl::load(x + offs));
/// })?;
/// let f16 = copy.specialize(&Signature::new().constexpr("BLOCK", 4).array(F16).array(F16))?;
/// let i32 = copy.specialize(&Signature::new().constexpr("BLOCK", 4).array(I32).array(I32))?;
/// assert!(f16.ir().contains("ptr<f16>") && i32.ir().contains("ptr<i32>"));
/// # Ok::<(), triton_metal::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Signature {
    constexprs: BTreeMap<String, ConstexprValue>,
    args: Option<Vec<ArgType>>,
}

impl Signature {
    /// No constexprs, no arguments.
    pub fn new() -> Signature {
        Signature::default()
    }

    /// Gives a constexpr.
    pub fn constexpr(mut self, name: &str, value: impl Into<ConstexprValue>) -> Signature {
        self.constexprs.insert(name.to_string(), value.into());
        self
    }

    /// Appends an array argument of elements of `dtype`.
    pub fn array(mut self, dtype: DType) -> Signature {
        self.args
            .get_or_insert_with(Vec::new)
            .push(ArgType::Array(dtype));
        self
    }

    /// Appends a scalar argument of `dtype`.
    pub fn scalar(mut self, dtype: DType) -> Signature {
        self.args
            .get_or_insert_with(Vec::new)
            .push(ArgType::Scalar(dtype));
        self
    }

    /// The constexprs, by name.
    pub fn constexprs(&self) -> &BTreeMap<String, ConstexprValue> {
        &self.constexprs
    }

    /// The arguments' kinds and dtypes; `None` when no arguments were given (a kernel with
    /// generic parameters cannot be built then).
    pub fn args(&self) -> Option<&[ArgType]> {
        self.args.as_deref()
    }

    /// The signature of these constexprs and arguments.
    pub fn of(constexprs: BTreeMap<String, ConstexprValue>, args: Vec<ArgType>) -> Signature {
        Signature {
            constexprs,
            args: Some(args),
        }
    }

    fn build_spec(&self) -> BuildSpec {
        BuildSpec {
            constexprs: self.constexprs.clone(),
            args: self.args.clone(),
        }
    }
}

impl From<&BTreeMap<String, i64>> for Signature {
    fn from(c: &BTreeMap<String, i64>) -> Signature {
        Signature {
            constexprs: c
                .iter()
                .map(|(n, v)| (n.clone(), ConstexprValue::Int(*v)))
                .collect(),
            args: None,
        }
    }
}

/// What selects a specialisation: a [`Signature`], or integer constexprs by name (a
/// `BTreeMap<String, i64>`, no arguments).
pub trait IntoSignature {
    /// As a signature.
    fn signature(&self) -> Signature;
}

impl IntoSignature for Signature {
    fn signature(&self) -> Signature {
        self.clone()
    }
}

impl IntoSignature for BTreeMap<String, i64> {
    fn signature(&self) -> Signature {
        Signature::from(self)
    }
}

fn declare(b: &mut Builder, name: &str) -> std::result::Result<(), String> {
    let ok = !name.is_empty()
        && name.chars().all(|c| c.is_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_numeric());
    if !ok {
        return Err(format!(
            "`{name}` is not a valid parameter name (letters of any script, digits, `_`)"
        ));
    }
    if b.declared.iter().any(|n| n == name) {
        return Err(format!("parameter `{name}` is declared twice"));
    }
    b.declared.push(name.to_string());
    Ok(())
}

fn declare_param(
    b: &mut Builder,
    name: &str,
    kind: ParamKind,
) -> std::result::Result<crate::ir::Value, String> {
    declare(b, name)?;
    let ty = match kind {
        ParamKind::Ptr(d) => Type::pointer(d),
        ParamKind::Scalar(d) => Type::scalar(d),
    };
    let idx = b.k.params.len() as u32;
    b.reordered |= !b.k.ops.is_empty();
    let v = b.new_value(ty, ValueDef::Param(idx));
    b.k.params.push(Param {
        name: name.to_string(),
        kind,
        value: v,
        stored: false,
        loaded: false,
    });
    Ok(v)
}

/// The dtype of the launch argument of a generic parameter declared next (`name`, a
/// pointer when `ptr`).
fn generic_dtype(b: &mut Builder, name: &str, ptr: bool) -> std::result::Result<DType, String> {
    let i = b.k.params.len();
    let what = if ptr { "pointer" } else { "scalar" };
    let Some(args) = &b.arg_types else {
        b.wants_dtypes = true;
        return Err(format!(
            "{what} `{name}` is generic (ptr_any / scalar_any, `Ptr` / `Scalar` in #[jit]): \
             its dtype comes from its launch argument, and this specialisation has no \
             arguments: launch the kernel, or give the arguments' dtypes (tl::Signature)"
        ));
    };
    match (args.get(i), ptr) {
        (Some(ArgType::Array(d)), true) | (Some(ArgType::Scalar(d)), false) => Ok(*d),
        (Some(ArgType::Scalar(_)), true) => Err(format!(
            "argument {i} (`{name}`) is a scalar, and `{name}` is a pointer: pass an array"
        )),
        (Some(ArgType::Array(_)), false) => Err(format!(
            "argument {i} (`{name}`) is an array, and `{name}` is a scalar: pass a number"
        )),
        (None, _) => Err(format!(
            "no argument {i} for {what} `{name}` (generic: its dtype comes from its \
             argument); {} arguments given",
            args.len()
        )),
    }
}

impl KernelBuilder {
    fn param(name: &str, kind: ParamKind, loc: SourceLoc) -> Tensor {
        op("param", loc, |b| declare_param(b, name, kind))
    }

    fn generic_param(name: &str, ptr: bool, loc: SourceLoc) -> Tensor {
        op("param", loc, |b| {
            let d = generic_dtype(b, name, ptr)?;
            let i = b.k.params.len();
            let kind = if ptr {
                ParamKind::Ptr(d)
            } else {
                ParamKind::Scalar(d)
            };
            let v = declare_param(b, name, kind)?;
            b.generic.push(i);
            Ok(v)
        })
    }

    /// A pointer parameter to elements of `dtype` (an array argument of that dtype).
    #[track_caller]
    pub fn ptr(&mut self, dtype: DType, name: &str) -> Tensor {
        Self::param(name, ParamKind::Ptr(dtype), SourceLoc::caller())
    }

    /// A generic pointer parameter, like an unannotated `x_ptr` of `@triton.jit`: its
    /// element dtype is the dtype of its launch argument, and the kernel is built once per
    /// dtype signature of its arguments ([`Signature`]). [`KernelBuilder::dtype_of`] (or
    /// [`Tensor::dtype`]) gives the element dtype to the body.
    ///
    /// ```
    /// use triton_metal::tl::{self, Signature};
    /// use triton_metal::DType::{BF16, F32};
    ///
    /// let scale = tl::jit("scale", |k| {
    ///     let (x, out) = (k.ptr_any("x_ptr"), k.ptr_any("out_ptr"));
    ///     let offs = tl::arange(0, 16);
    ///     let y = tl::load(x + offs).to(F32) * 2.0;
    ///     tl::store(out + offs, y.to(k.dtype_of("out_ptr")));
    /// })?;
    /// let bf16 = scale.specialize(&Signature::new().array(BF16).array(BF16))?;
    /// assert!(bf16.ir().contains("ptr<bf16>"), "{}", bf16.ir());
    /// # Ok::<(), triton_metal::Error>(())
    /// ```
    #[track_caller]
    pub fn ptr_any(&mut self, name: &str) -> Tensor {
        Self::generic_param(name, true, SourceLoc::caller())
    }

    /// A pointer parameter that the kernel only reads (Triton's `tl.const` annotation):
    /// a store or atomic through it is a build error naming the kernel, the argument and
    /// the line of the store.
    #[track_caller]
    pub fn const_ptr(&mut self, dtype: DType, name: &str) -> Tensor {
        let t = Self::param(name, ParamKind::Ptr(dtype), SourceLoc::caller());
        Self::mark_const(name);
        t
    }

    /// A generic pointer ([`KernelBuilder::ptr_any`]) that the kernel only reads
    /// ([`KernelBuilder::const_ptr`]).
    #[track_caller]
    pub fn const_ptr_any(&mut self, name: &str) -> Tensor {
        let t = Self::generic_param(name, true, SourceLoc::caller());
        Self::mark_const(name);
        t
    }

    fn mark_const(name: &str) {
        super::builder::with(|b| {
            if let Some(b) = b {
                if let Some(i) = b.k.params.iter().position(|p| p.name == name) {
                    b.const_params.push(i);
                }
            }
        });
    }

    /// A scalar parameter passed by value (`i32`, `i64`, `f32`, `bool`, ...).
    #[track_caller]
    pub fn scalar(&mut self, dtype: DType, name: &str) -> Tensor {
        Self::param(name, ParamKind::Scalar(dtype), SourceLoc::caller())
    }

    /// A generic scalar parameter, like an unannotated number argument of `@triton.jit`:
    /// its dtype is its launch argument's as Triton types it (an integer is `i32` when it
    /// fits, else `i64`; a float `f32`; a bool `bool`), one build per dtype signature.
    #[track_caller]
    pub fn scalar_any(&mut self, name: &str) -> Tensor {
        Self::generic_param(name, false, SourceLoc::caller())
    }

    /// The element dtype of the pointer parameter `name` (its argument's for a generic
    /// pointer), or the dtype of the scalar parameter `name`: Triton's
    /// `x_ptr.dtype.element_ty`. An undeclared name is a build error.
    #[track_caller]
    pub fn dtype_of(&mut self, name: &str) -> DType {
        op_any("dtype_of", SourceLoc::caller(), |b| {
            match b.k.params.iter().find(|p| p.name == name) {
                Some(Param {
                    kind: ParamKind::Ptr(d) | ParamKind::Scalar(d),
                    ..
                }) => Ok(*d),
                None => {
                    let names: Vec<&str> = b.k.params.iter().map(|p| p.name.as_str()).collect();
                    Err(format!(
                        "no parameter `{name}` declared before this (parameters: {names:?})"
                    ))
                }
            }
        })
        .unwrap_or(DType::F32)
    }

    /// An integer constexpr: its value for the specialisation being built (an error if not
    /// given, or given as another kind than an int or a bool). Asking again for the same
    /// name gives the same value.
    #[track_caller]
    pub fn constexpr(&mut self, name: &str) -> i64 {
        Self::constexpr_impl(name, None, SourceLoc::caller())
    }

    /// An integer constexpr with a default used when the launch does not give it.
    #[track_caller]
    pub fn constexpr_or(&mut self, name: &str, default: i64) -> i64 {
        Self::constexpr_impl(name, Some(default), SourceLoc::caller())
    }

    /// A constexpr of any kind, read as `T` ([`ConstexprKind`]: `i64`, `bool`, `f64`,
    /// `String`, [`DType`]); a value of another kind is a build error naming both.
    ///
    /// ```
    /// use triton_metal::{tl, DType::F32};
    ///
    /// let act = tl::jit("act", |k| {
    ///     let (x, y) = (k.ptr(F32, "x"), k.ptr(F32, "y"));
    ///     let offs = tl::arange(0, 8);
    ///     let v = tl::load(x + offs);
    ///     let v = match k.constexpr_as::<String>("ACTIVATION").as_str() {
    ///         "leaky_relu" => tl::where_(v.ge(0.0), v, v * 0.01),
    ///         _ => v,
    ///     };
    ///     tl::store(y + offs, v);
    /// })?;
    /// let leaky = act.specialize(&tl::Signature::new().constexpr("ACTIVATION", "leaky_relu"))?;
    /// assert!(leaky.ir().contains("select"), "{}", leaky.ir());
    /// # Ok::<(), triton_metal::Error>(())
    /// ```
    #[track_caller]
    pub fn constexpr_as<T: ConstexprKind>(&mut self, name: &str) -> T {
        Self::constexpr_impl(name, None, SourceLoc::caller())
    }

    /// [`KernelBuilder::constexpr_as`] with a default used when the launch does not give it.
    #[track_caller]
    pub fn constexpr_as_or<T: ConstexprKind>(&mut self, name: &str, default: T) -> T {
        Self::constexpr_impl(name, Some(default), SourceLoc::caller())
    }

    fn constexpr_impl<T: ConstexprKind>(name: &str, default: Option<T>, loc: SourceLoc) -> T {
        op_any("constexpr", loc, |b| {
            let convert = |v: &ConstexprValue| {
                T::from_value(v).ok_or_else(|| {
                    format!(
                        "constexpr `{name}` is {v} (a {}), and the kernel reads it as a {}",
                        v.kind(),
                        T::KIND
                    )
                })
            };
            // Asking again for the same constexpr gives the same value.
            if let Some((_, v)) = b.read.iter().find(|(n, _)| n == name) {
                return convert(v);
            }
            declare(b, name)?;
            let v = match (b.given.get(name), default) {
                (Some(v), _) => v.clone(),
                (None, Some(d)) => d.into_value(),
                (None, None) => {
                    b.wants_constexpr = true;
                    let given: Vec<&String> = b.given.keys().collect();
                    return Err(format!(
                        "constexpr `{name}` was not given (given: {given:?})"
                    ));
                }
            };
            let t = convert(&v)?;
            // The IR lists the integer constexprs (bools as 0 and 1); other kinds show in
            // the code they choose.
            if let Some(i) = v.as_int() {
                b.k.constexprs.push((name.to_string(), i));
            }
            b.read.push((name.to_string(), v));
            Ok(t)
        })
        // After an error any value works: nothing more is recorded.
        .unwrap_or_else(T::placeholder)
    }
}

type Body = dyn Fn(&mut KernelBuilder) + Send + Sync;

/// A specialisation's cache key: the constexprs and the generic parameters' arguments.
type Key = (BTreeMap<String, ConstexprValue>, Vec<ArgType>);

type OptimizedCache = HashMap<(Key, PassOptions), Arc<Kernel>>;

type IntCache = HashMap<(Key, Option<PassOptions>, IntSpec), Arc<Kernel>>;

/// A `@triton.jit` kernel: the closure plus caches of its specialisations (as built, and
/// after the optimisation pipeline).
pub struct JitKernel {
    name: String,
    body: Arc<Body>,
    cache: Mutex<HashMap<Key, Arc<Kernel>>>,
    /// Per constexpr set, the indices of the generic pointer parameters.
    generic: Mutex<HashMap<BTreeMap<String, ConstexprValue>, Vec<usize>>>,
    optimized: Mutex<OptimizedCache>,
    ints: Mutex<IntCache>,
}

impl std::fmt::Debug for JitKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JitKernel")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Builds (records and verifies) one specialisation of `body` without caching.
pub fn build(
    name: &str,
    constexprs: &BTreeMap<String, i64>,
    body: impl FnOnce(&mut KernelBuilder),
) -> Result<Kernel> {
    build_signature(name, &Signature::from(constexprs), body)
}

fn build_signature(
    name: &str,
    sig: &Signature,
    body: impl FnOnce(&mut KernelBuilder),
) -> Result<Kernel> {
    let b = run_build(name, &sig.build_spec(), || {
        body(&mut KernelBuilder { _private: () })
    });
    finish(b)
}

/// Where errors found while specialising, not at any op of the body, are placed until
/// [`at_caller`] gives them the line that asked for the specialisation.
const SPECIALIZE_LOC: SourceLoc = SourceLoc {
    file: "<specialize>",
    line: 0,
    column: 0,
};

/// `e` placed at `caller` if it was found while specialising rather than at an op.
fn at_caller(e: Error, caller: SourceLoc) -> Error {
    match e {
        Error::Build {
            kernel,
            op,
            loc,
            msg,
        } if loc == SPECIALIZE_LOC => Error::Build {
            kernel,
            op,
            loc: caller,
            msg,
        },
        e => e,
    }
}

fn finish(b: Builder) -> Result<Kernel> {
    if let Some(e) = b.error {
        return Err(e);
    }
    let reordered = b.reordered;
    let mut k = b.k;
    let unknown: Vec<&String> = b
        .given
        .keys()
        .filter(|n| !b.read.iter().any(|(r, _)| r == *n))
        .collect();
    if !unknown.is_empty() {
        let known: Vec<&String> = b.read.iter().map(|(n, _)| n).collect();
        return Err(Error::Build {
            kernel: k.name.clone(),
            op: "constexpr".into(),
            loc: SPECIALIZE_LOC,
            msg: format!("unknown constexpr(s) {unknown:?}; the kernel declares {known:?}"),
        });
    }
    // Drop constants left unused by splats and casts, and number values in program order.
    if k.remove_dead_ops() > 0 || reordered {
        k.compact();
    }
    verify(&k)?;
    k.compute_param_access();
    for &i in &b.const_params {
        if !k.params[i].stored {
            continue;
        }
        let name = k.params[i].name.clone();
        let at = k.store_through(i).map(|id| k.op(id));
        return Err(Error::Build {
            kernel: k.name.clone(),
            op: at.map_or("store", |o| o.op.name()).into(),
            loc: at.map_or(SourceLoc::caller(), |o| o.loc),
            msg: format!(
                "cannot store to constant pointer `{name}` (declared tl.const: ConstPtr / \
                 KernelBuilder::const_ptr); declare it Ptr to write through it"
            ),
        });
    }
    Ok(k)
}

/// `@triton.jit`: wraps a kernel closure. The closure runs once per signature (constexpr
/// values and dtypes of the generic pointers' arguments, at the first
/// [`JitKernel::specialize`] or launch with it); errors come back as [`Error::Build`]
/// naming the kernel, the op and the user's source line.
///
/// A kernel without constexprs and generic pointers is built right away, so its errors
/// surface here.
pub fn jit(
    name: &str,
    body: impl Fn(&mut KernelBuilder) + Send + Sync + 'static,
) -> Result<JitKernel> {
    let valid = !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_');
    if !valid {
        return Err(Error::InvalidArgument(format!(
            "`{name}` is not a valid kernel name (letters of any script, digits, `_`)"
        )));
    }
    let jk = JitKernel {
        name: name.to_string(),
        body: Arc::new(body),
        cache: Mutex::new(HashMap::new()),
        generic: Mutex::new(HashMap::new()),
        optimized: Mutex::new(HashMap::new()),
        ints: Mutex::new(HashMap::new()),
    };
    // Trial build with no constexprs and no arguments: catches errors early for kernels
    // that need neither.
    let b = run_build(name, &BuildSpec::default(), || {
        (jk.body)(&mut KernelBuilder { _private: () })
    });
    if !b.wants_constexpr && !b.wants_dtypes {
        let k = finish(b)?;
        jk.lock_generic().insert(BTreeMap::new(), Vec::new());
        jk.lock().insert((BTreeMap::new(), Vec::new()), Arc::new(k));
    }
    Ok(jk)
}

/// The specialisation's key, once the kernel's generic parameters for its constexprs are
/// known: their arguments.
fn generic_dtypes(sig: &Signature, generic: &[usize]) -> Option<Vec<ArgType>> {
    let args = sig.args()?;
    generic.iter().map(|&i| args.get(i).copied()).collect()
}

impl JitKernel {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Arc<Kernel>>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_generic(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<BTreeMap<String, ConstexprValue>, Vec<usize>>> {
        self.generic.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The kernel name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The verified kernel for a signature: integer constexprs by name
    /// (`&BTreeMap<String, i64>`), or a [`Signature`] (constexprs of any kind and the
    /// arguments' dtypes, which a kernel with generic pointers needs). Built once per
    /// signature, then cached; signatures that differ only in the dtypes of arguments of
    /// fixed-dtype pointers share one build.
    /// A mistake that no line of the kernel's body made (a constexpr the body does not
    /// declare) is reported at the caller's line.
    #[track_caller]
    pub fn specialize(&self, sig: &(impl IntoSignature + ?Sized)) -> Result<Arc<Kernel>> {
        let caller = SourceLoc::caller();
        self.resolve(&sig.signature())
            .map(|(_, k)| k)
            .map_err(|e| at_caller(e, caller))
    }

    /// The cache key and the kernel of `sig`, built if needed.
    fn resolve(&self, sig: &Signature) -> Result<(Key, Arc<Kernel>)> {
        let known = self.lock_generic().get(&sig.constexprs).cloned();
        if let Some(dtypes) = known.and_then(|g| generic_dtypes(sig, &g)) {
            let key = (sig.constexprs.clone(), dtypes);
            if let Some(k) = self.lock().get(&key) {
                return Ok((key, k.clone()));
            }
        }
        let b = run_build(&self.name, &sig.build_spec(), || {
            (self.body)(&mut KernelBuilder { _private: () })
        });
        let generic = b.generic.clone();
        let k = finish(b)?;
        let dtypes = generic
            .iter()
            .filter_map(|&i| k.params.get(i))
            .map(|p| match p.kind {
                ParamKind::Ptr(d) => ArgType::Array(d),
                ParamKind::Scalar(d) => ArgType::Scalar(d),
            })
            .collect();
        let first = self
            .lock_generic()
            .entry(sig.constexprs.clone())
            .or_insert_with(|| generic.clone())
            .clone();
        if first != generic {
            let names = |g: &[usize]| -> Vec<String> {
                g.iter()
                    .filter_map(|&i| k.params.get(i))
                    .map(|p| p.name.clone())
                    .collect()
            };
            return Err(Error::Build {
                kernel: self.name.clone(),
                op: "param".into(),
                loc: SPECIALIZE_LOC,
                msg: format!(
                    "the kernel declares different generic pointers ({:?}, before: {:?}) for \
                     arguments of other dtypes; which pointers are generic may depend on \
                     constexprs only",
                    names(&generic),
                    names(&first)
                ),
            });
        }
        let key = (sig.constexprs.clone(), dtypes);
        let k = self
            .lock()
            .entry(key.clone())
            .or_insert_with(|| Arc::new(k))
            .clone();
        Ok((key, k))
    }

    /// [`JitKernel::specialize`] from `(name, value)` pairs of integer constexprs.
    #[track_caller]
    pub fn specialize_with(&self, constexprs: &[(&str, i64)]) -> Result<Arc<Kernel>> {
        let map: BTreeMap<String, i64> = constexprs
            .iter()
            .map(|(n, v)| (n.to_string(), *v))
            .collect();
        self.specialize(&map)
    }

    /// Builds a specialisation without touching the cache (for build-time benchmarks).
    pub fn build_uncached(&self, sig: &(impl IntoSignature + ?Sized)) -> Result<Kernel> {
        build_signature(&self.name, &sig.signature(), |kb| (self.body)(kb))
    }

    /// Number of cached specialisations.
    pub fn cached(&self) -> usize {
        self.lock().len()
    }

    /// The specialisation for `sig` after the optimisation pipeline
    /// ([`crate::passes::pipeline`]) with `opts`: the passes run once per signature and
    /// options, later calls return the same `Arc`. With `TRITON_METAL_DEBUG` set, the first
    /// run prints the IR before and after and each pass's statistics.
    pub fn specialize_optimized(
        &self,
        sig: &(impl IntoSignature + ?Sized),
        opts: &PassOptions,
    ) -> Result<Arc<Kernel>> {
        let (key, kernel) = self.resolve(&sig.signature())?;
        self.optimized_for(key, kernel, opts)
    }

    fn optimized_for(
        &self,
        key: Key,
        kernel: Arc<Kernel>,
        opts: &PassOptions,
    ) -> Result<Arc<Kernel>> {
        let key = (key, *opts);
        if let Some(k) = self.lock_optimized().get(&key) {
            return Ok(k.clone());
        }
        let (optimized, stats) = pipeline(&kernel, opts)?;
        if crate::settings::debug_enabled() {
            eprintln!("[triton-metal] IR before optimisation:\n{}", kernel.ir());
            for s in &stats {
                eprintln!("[triton-metal]   {s}");
            }
            eprintln!("[triton-metal] IR after optimisation:\n{}", optimized.ir());
        }
        // Two threads optimising at once keep the first result, so every caller shares it.
        Ok(self
            .lock_optimized()
            .entry(key)
            .or_insert_with(|| Arc::new(optimized))
            .clone())
    }

    /// Number of cached optimised specialisations.
    pub fn cached_optimized(&self) -> usize {
        self.lock_optimized().len()
    }

    /// The specialisation for `sig` (after the optimisation pipeline with `opts` when
    /// given) with the integer facts of a launch's arguments applied
    /// ([`crate::passes::specialize_integers`]); built once per signature, options and
    /// facts. No facts: the specialisation itself.
    pub fn specialize_for_ints(
        &self,
        sig: &(impl IntoSignature + ?Sized),
        opts: Option<&PassOptions>,
        ints: &IntSpec,
    ) -> Result<Arc<Kernel>> {
        let (key, kernel) = self.resolve(&sig.signature())?;
        let base = match opts {
            None => kernel,
            Some(o) => self.optimized_for(key.clone(), kernel, o)?,
        };
        if ints.is_empty() {
            return Ok(base);
        }
        let key = (key, opts.copied(), ints.clone());
        let lock = || self.ints.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = lock().get(&key) {
            return Ok(k.clone());
        }
        let k = specialize_integers(&base, ints);
        verify(&k)?;
        Ok(lock().entry(key).or_insert_with(|| Arc::new(k)).clone())
    }

    fn lock_optimized(&self) -> std::sync::MutexGuard<'_, OptimizedCache> {
        self.optimized.lock().unwrap_or_else(|e| e.into_inner())
    }
}
