//! Launching a [`JitKernel`] on MLX arrays: `kernel.launch().grid(..).args(..).run()`.
//!
//! Pointer parameters take MLX [`Array`]s; pointers the kernel stores to are outputs: the
//! caller gives their shape and dtype ([`out`], [`out_like`]) and optionally a fill value,
//! or an array to update in place ([`inout`]), and `run` returns them as new lazy arrays,
//! in parameter order. Scalars are Rust values; constexprs are given by name and select
//! (and cache) a specialisation.
//!
//! # Updating arrays in place
//!
//! MLX arrays are immutable, and MLX's custom kernels (`fast::metal_kernel`,
//! `fast::cuda_kernel`) always write fresh outputs that never alias an input. An
//! [`inout`] argument therefore gives a new array: the argument's contents with the
//! kernel's stores applied, with Triton's semantics for a tensor updated in place. A
//! program reads back its own earlier stores, elements no program stores keep the
//! argument's values, and atomics act on the argument's values. How each target does it:
//!
//! - The CPU targets ([`Target::Cpu`], [`Target::CpuCompiled`]) copy the argument into the
//!   output buffer when the launch runs, before any program starts: the kernel then runs on
//!   it as on any output.
//! - Metal, CUDA and emulated Metal cannot do that in one launch: the kernel's programs run
//!   concurrently, and a program copying elements in could overwrite another program's
//!   stores. The generated kernel instead takes the argument as an extra input and writes
//!   a fresh output plus a per-element flag (starting at 0). A store writes the output and
//!   sets the flag; a load reads the output where the flag is set and the argument
//!   elsewhere; the launch returns `where(flag, output, argument)`, a plain lazy MLX op.
//!   An atomic first makes its element hold the argument's value: the first thread to
//!   claim the element's flag (a compare-and-swap 0 -> 1) copies it in and publishes 2,
//!   the others wait for 2. The copy sits in a branch that closes before the wait loop,
//!   so no SIMD-group waits on one of its own threads, and a thread waits only on a
//!   claimant that is running and never waits itself: the protocol cannot deadlock. Its
//!   cost is one flag byte (a `u32` in kernels with atomics) read or written per access
//!   and one `where` over the array after the kernel; Metal needs 3.2 (macOS 15) for the
//!   fences of the atomic protocol.
//!
//! The argument itself is not changed, and other arguments of the same launch that are
//! the same array still read its original contents: pass an array once, as [`inout`], when
//! the kernel must see its own stores through it. Views and non-contiguous arrays are read
//! through their logical (row-major) order, as every input is; the result is a new
//! row-major array of the same shape.
//!
//! `out(..)` is only for pointers the kernel writes: a pointer it only reads is an input
//! (pass the array), and one it reads (a load or an atomic) as well as writes needs initial
//! contents, [`inout`] or [`Arg::fill`]; both are errors otherwise. Fills are exact in the
//! output's dtype on every target (an `i64` output filled with `(1 << 62) + 1` holds that):
//! on Metal and CUDA a fill MLX's float32 init value cannot carry runs as an in-place
//! update of an array of the fill.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Index;
use std::sync::{Arc, Mutex, OnceLock};

use crate::array::Array;
use crate::codegen::{
    self, CudaProgram, KernelDigest, LaunchOptions, MetalProgram, ReductionLayout,
};
use crate::device::{self, Backend, Device, HardwareInfo};
use crate::dtype::DType;
use crate::emu::{self, EmuBuffer, LaneOrder};
use crate::error::{Error, Result, SourceLoc};
use crate::exec::{ExecArg, PtrTable, ReduceStrategy};
use crate::ir::{Kernel, Op, ParamKind};
use crate::opt::plan::KernelPlan;
use crate::opt::HardwareProfile;
use crate::passes::{specializable, IntFact, IntSpec, PassOptions};
use crate::runtime::memo::ByAddress;
use crate::runtime::mlx_kernel::{
    cpu_launch, register_program, MadeKernel, MadeKernels, OutputSpec,
};
use crate::tl::{ArgType, ConstexprValue, JitKernel, Signature};

/// `triton.cdiv`: `(x + d - 1) / d` for positive `d`.
pub fn cdiv(x: impl TryInto<i64>, d: impl TryInto<i64>) -> usize {
    let x: i64 = x.try_into().unwrap_or(0);
    let d: i64 = d.try_into().unwrap_or(1).max(1);
    ((x.max(0) + d - 1) / d) as usize
}

/// The constexprs of a launch, as a grid function sees them: `meta["BLOCK_SIZE"]` is an
/// integer constexpr (a bool reads as 0 or 1), [`Meta::value`] any kind.
#[derive(Clone, Debug, Default)]
pub struct Meta {
    ints: BTreeMap<String, i64>,
    values: BTreeMap<String, ConstexprValue>,
    /// Names read with `meta[..]` that the launch does not give as integers.
    missed: std::cell::RefCell<Vec<String>>,
}

impl Meta {
    fn new(values: &BTreeMap<String, ConstexprValue>) -> Meta {
        Meta {
            ints: values
                .iter()
                .filter_map(|(n, v)| v.as_int().map(|i| (n.clone(), i)))
                .collect(),
            values: values.clone(),
            missed: Default::default(),
        }
    }

    /// The value of an integer constexpr (a bool as 0 or 1), if given.
    pub fn get(&self, name: &str) -> Option<i64> {
        self.ints.get(name).copied()
    }

    /// The value of a constexpr of any kind, if given.
    pub fn value(&self, name: &str) -> Option<&ConstexprValue> {
        self.values.get(name)
    }
}

impl Index<&str> for Meta {
    type Output = i64;
    /// A name the launch does not give as an integer reads as 1 here, so a grid function
    /// never panics; the launch then fails with an error naming the kernel and the name.
    fn index(&self, name: &str) -> &i64 {
        self.ints.get(name).unwrap_or_else(|| {
            self.missed.borrow_mut().push(name.to_string());
            &1
        })
    }
}

/// The most programs a launch may have on each grid axis, on every target: CUDA's limits
/// (Triton's on NVIDIA GPUs), 2^31 - 1 on axis 0 and 65535 on axes 1 and 2. `program_id`
/// is an `i32` everywhere, and on Metal axis 0 additionally counts threads (programs times
/// `num_warps x 32`), which must stay below 2^31.
pub const MAX_GRID: [usize; 3] = [i32::MAX as usize, 65535, 65535];

/// The most ops (counted in the specialised kernel's IR, loop and branch bodies included) a
/// kernel may have to be compiled: by clang for [`Target::CpuCompiled`], by Apple's Metal
/// compiler for [`Target::Metal`] and by NVRTC for [`Target::Cuda`]. Generated code grows
/// linearly with the ops, but compile times grow faster than that (benches/README.md has
/// the measurements); larger kernels are refused before anything is compiled.
/// [`Target::Cpu`] interprets kernels of any size.
pub const MAX_COMPILED_OPS: usize = 8192;

/// The most ops a kernel may have for [`Target::Emulated`]: the emulator's C++ (every lane a
/// fiber) takes clang about a quadratic time in the kernel's size.
pub const MAX_EMULATED_OPS: usize = 2048;

/// Refuses a kernel too large to compile for `target` in reasonable time (see
/// [`MAX_COMPILED_OPS`]), naming its size, the limit and what to do.
fn check_size(kernel: &Kernel, target: Target) -> Result<()> {
    let (limit, what) = match target {
        Target::Auto | Target::Cpu => return Ok(()),
        Target::Emulated(_) => (MAX_EMULATED_OPS, "the Metal emulator"),
        Target::CpuCompiled => (MAX_COMPILED_OPS, "the compiled CPU executor"),
        Target::Metal => (MAX_COMPILED_OPS, "Metal"),
        Target::Cuda => (MAX_COMPILED_OPS, "CUDA"),
    };
    let ops: usize = kernel.regions.iter().map(|r| r.ops.len()).sum();
    if ops <= limit {
        return Ok(());
    }
    Err(Error::Launch {
        kernel: kernel.name.clone(),
        msg: format!(
            "the kernel has {ops} ops, more than the {limit} that {what} compiles in \
             reasonable time; split it into smaller kernels (or loops instead of unrolled \
             code), or run it on Target::Cpu, which interprets kernels of any size"
        ),
    })
}

/// Checks a grid against [`MAX_GRID`]; the message names the axis and the limit.
fn check_grid(grid: [usize; 3]) -> std::result::Result<(), String> {
    for (axis, (&g, &max)) in grid.iter().zip(&MAX_GRID).enumerate() {
        if g > max {
            return Err(format!(
                "grid {grid:?}: {g} programs on axis {axis} exceed the limit of {max} for \
                 that axis (at most {MAX_GRID:?}, as on CUDA GPUs)"
            ));
        }
    }
    Ok(())
}

/// A grid function: programs per axis from the constexprs.
pub type GridFn = dyn Fn(&Meta) -> [usize; 3] + Send + Sync;

/// A launch grid in programs per axis, fixed or computed from the constexprs like Triton's
/// `grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)`.
pub enum Grid {
    /// Fixed programs per axis.
    Fixed([usize; 3]),
    /// Computed from the launch's constexprs.
    Dynamic(Box<GridFn>),
}

impl fmt::Debug for Grid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Grid::Fixed(g) => write!(f, "Grid::Fixed({g:?})"),
            Grid::Dynamic(_) => f.write_str("Grid::Dynamic(..)"),
        }
    }
}

/// Grid lengths of 1, 2 or 3 axes (missing axes are 1).
pub trait IntoGridDims {
    /// As three axes.
    fn dims(self) -> [usize; 3];
}

impl IntoGridDims for usize {
    fn dims(self) -> [usize; 3] {
        [self, 1, 1]
    }
}
impl IntoGridDims for [usize; 1] {
    fn dims(self) -> [usize; 3] {
        [self[0], 1, 1]
    }
}
impl IntoGridDims for [usize; 2] {
    fn dims(self) -> [usize; 3] {
        [self[0], self[1], 1]
    }
}
impl IntoGridDims for [usize; 3] {
    fn dims(self) -> [usize; 3] {
        self
    }
}

/// A grid computed from the constexprs: `grid(|meta| [cdiv(n, meta["BLOCK_SIZE"])])`.
pub fn grid<D: IntoGridDims>(f: impl Fn(&Meta) -> D + Send + Sync + 'static) -> Grid {
    Grid::Dynamic(Box::new(move |m| f(m).dims()))
}

impl<D: IntoGridDims> From<D> for Grid {
    fn from(d: D) -> Grid {
        Grid::Fixed(d.dims())
    }
}

/// A scalar launch argument.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// `bool` / int1.
    Bool(bool),
    /// Any integer (range-checked against the parameter's dtype).
    Int(i64),
    /// Any float (converted to the parameter's dtype).
    Float(f64),
}

/// One launch argument, matched to the kernel's runtime parameters in order.
#[derive(Clone, Debug)]
pub enum Arg {
    /// An input array for a pointer parameter.
    Array(Array),
    /// An output for a pointer parameter the kernel stores to.
    Out {
        /// Shape of the returned array.
        shape: Vec<usize>,
        /// Element type (must match the pointer's).
        dtype: DType,
        /// Value every element holds before the kernel runs (converted exactly to `dtype`).
        fill: Option<Scalar>,
    },
    /// A pointer parameter updated in place: the result is a new array holding this
    /// array's contents with the kernel's stores applied ([`inout`]).
    InOut(Array),
    /// A scalar parameter.
    Scalar(Scalar),
    /// A table of arrays for an `i64` pointer parameter ([`ptr_table`]).
    PtrTable(Vec<Arg>),
}

/// An output of `shape` and `dtype`.
pub fn out(shape: &[usize], dtype: DType) -> Arg {
    Arg::Out {
        shape: shape.to_vec(),
        dtype,
        fill: None,
    }
}

/// An output with the shape and dtype of `like`.
pub fn out_like(like: &Array) -> Arg {
    Arg::Out {
        shape: like.shape(),
        dtype: like.dtype(),
        fill: None,
    }
}

/// A pointer parameter updated in place, Triton's way of passing a tensor the kernel reads
/// and writes (`x = load(p); store(p, x * s)`, accumulating into an array, optimizer
/// steps, atomics on existing data): the launch returns a new array holding `a`'s contents
/// with the kernel's stores applied, in parameter order among the outputs. A program reads
/// its own earlier stores, elements nobody stores keep `a`'s values, atomics act on `a`'s
/// values; `a` itself is unchanged (MLX arrays are immutable). Its dtype must be the
/// pointer's; any shape and layout (views included) is taken in row-major order. See the
/// [module documentation](self#updating-arrays-in-place) for how each target does it.
///
/// ```
/// use triton_metal::runtime::{inout, Target};
/// use triton_metal::{jit, tl, Array};
///
/// #[jit]
/// fn scale(x_ptr: Ptr<F32>, s: f32, n: i32, BLOCK: Constexpr) {
///     let offs = tl::program_id(axis = 0) * BLOCK + tl::arange(0, BLOCK);
///     let x = tl::load(x_ptr + offs, mask = offs < n);
///     tl::store(x_ptr + offs, x * s, mask = offs < n);
/// }
///
/// let x = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3])?;
/// let [y] = scale()?.launch().grid([1]).args((inout(&x), 2.0f32, 3i32))
///     .constexpr("BLOCK", 4).target(Target::Cpu).run()?.try_into().unwrap();
/// assert_eq!(y.to_vec::<f32>()?, [2.0, 4.0, 6.0]);
/// assert_eq!(x.to_vec::<f32>()?, [1.0, 2.0, 3.0]);
/// # Ok::<(), triton_metal::Error>(())
/// ```
pub fn inout(a: &Array) -> Arg {
    Arg::InOut(a.clone())
}

/// A table of arrays for a pointer-to-`i64` parameter, Triton's tensor of addresses (its
/// grouped GEMM tutorial passes `group_a_ptrs`, the `data_ptr()`s of the groups' matrices):
/// the kernel reads element `g` (`tl::load(table + g)`), an opaque address, and casts it to
/// a pointer (`.to(tl::pointer_type(F16))`, `tl::int_to_ptr`) that reaches array `g`.
///
/// Entries are arrays the kernel reads (`&a`), outputs (`out(..)`, `out_like(&a)`, with
/// `.fill(..)` as needed) and arrays updated in place (`inout(&a)`); the launch returns the
/// outputs among the others in parameter order, a table's in table order. MLX arrays have
/// no stable addresses, so the addresses are the launch's own: only they, cast back
/// unchanged, reach memory (offset the pointer after the cast), every access is
/// bounds-checked, and a store through an input, an address cast to another pointee dtype
/// than its array's, or any other integer cast to a pointer is an error naming the
/// kernel, op and table entry. Runs on [`Target::Cpu`] and [`Target::CpuCompiled`];
/// Metal and CUDA refuse it with [`Error::Unsupported`] (concatenate the groups into one
/// array and pass offsets instead, as `examples/grouped_gemm.rs` shows).
///
/// ```
/// use triton_metal::runtime::{out, ptr_table, Target};
/// use triton_metal::{jit, tl, Array, DType::{self, F32}};
///
/// // Doubles each array of a table into the matching output.
/// #[jit]
/// fn double(srcs: Ptr<I64>, dsts: Ptr<I64>, lens: Ptr<I32>, BLOCK: Constexpr) {
///     let g = tl::program_id(axis = 0);
///     let src = tl::load(srcs + g).to(tl::pointer_type(F32));
///     let dst = tl::load(dsts + g).to(tl::pointer_type(F32));
///     let offs = tl::arange(0, BLOCK);
///     let mask = offs < tl::load(lens + g);
///     tl::store(dst + offs, tl::load(src + offs, mask = mask) * 2.0, mask = mask);
/// }
///
/// let a = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3])?;
/// let b = Array::from_slice(&[4.0f32], &[1])?;
/// let lens = Array::from_slice(&[3i32, 1], &[2])?;
/// let outs = double()?.launch().grid([2])
///     .args((ptr_table([&a, &b]), ptr_table([out(&[3], DType::F32), out(&[1], DType::F32)]), &lens))
///     .constexpr("BLOCK", 4).target(Target::Cpu).run()?;
/// assert_eq!(outs[0].to_vec::<f32>()?, [2.0, 4.0, 6.0]);
/// assert_eq!(outs[1].to_vec::<f32>()?, [8.0]);
/// # Ok::<(), triton_metal::Error>(())
/// ```
pub fn ptr_table<A: Into<Arg>>(entries: impl IntoIterator<Item = A>) -> Arg {
    Arg::PtrTable(entries.into_iter().map(Into::into).collect())
}

impl Arg {
    /// Sets an output's initial value (e.g. `f64::NAN` to poison unwritten elements, or 0
    /// for atomic accumulation), held exactly in the output's dtype on every target: a float
    /// for float outputs, an integer (or an integral float) in range for integer ones, so
    /// `.fill(i64::MAX)` fills an `i64` output exactly. No effect on other arguments.
    pub fn fill(self, value: impl Into<Scalar>) -> Arg {
        match self {
            Arg::Out { shape, dtype, .. } => Arg::Out {
                shape,
                dtype,
                fill: Some(value.into()),
            },
            other => other,
        }
    }
}

macro_rules! scalar_value_from {
    ($($t:ty => $v:ident as $c:ty),*) => {$(
        impl From<$t> for Scalar {
            fn from(x: $t) -> Scalar { Scalar::$v(x as $c) }
        }
    )*};
}
scalar_value_from!(i8 => Int as i64, i16 => Int as i64, i32 => Int as i64, i64 => Int as i64,
    u8 => Int as i64, u16 => Int as i64, u32 => Int as i64, f32 => Float as f64,
    f64 => Float as f64);
impl From<bool> for Scalar {
    fn from(b: bool) -> Scalar {
        Scalar::Bool(b)
    }
}

/// As launch errors name it: `the float 10.5`, `the integer -3`, `the bool true`.
impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "the bool {b}"),
            Scalar::Int(v) => write!(f, "the integer {v}"),
            Scalar::Float(v) => write!(f, "the float {v}"),
        }
    }
}

impl From<&Array> for Arg {
    fn from(a: &Array) -> Arg {
        Arg::Array(a.clone())
    }
}
impl From<Array> for Arg {
    fn from(a: Array) -> Arg {
        Arg::Array(a)
    }
}
macro_rules! scalar_from {
    ($($t:ty => $v:ident as $c:ty),*) => {$(
        impl From<$t> for Arg {
            fn from(x: $t) -> Arg { Arg::Scalar(Scalar::$v(x as $c)) }
        }
    )*};
}
scalar_from!(i8 => Int as i64, i16 => Int as i64, i32 => Int as i64, i64 => Int as i64,
    u8 => Int as i64, u16 => Int as i64, u32 => Int as i64, usize => Int as i64,
    f32 => Float as f64, f64 => Float as f64);
impl From<bool> for Arg {
    fn from(b: bool) -> Arg {
        Arg::Scalar(Scalar::Bool(b))
    }
}

/// Tuples of arguments: `.args((&x, &y, out_like(&x), n))`, up to 32 of them (more: a
/// `Vec<Arg>` or repeated [`Launch::arg`]).
pub trait IntoArgs {
    /// The arguments in order.
    fn into_args(self) -> Vec<Arg>;
}

macro_rules! tuple_args {
    ($($name:ident),+) => {
        impl<$($name: Into<Arg>),+> IntoArgs for ($($name,)+) {
            #[allow(non_snake_case)]
            fn into_args(self) -> Vec<Arg> {
                let ($($name,)+) = self;
                vec![$($name.into()),+]
            }
        }
    };
}
tuple_args!(A);
tuple_args!(A, B);
tuple_args!(A, B, C);
tuple_args!(A, B, C, D);
tuple_args!(A, B, C, D, E);
tuple_args!(A, B, C, D, E, F);
tuple_args!(A, B, C, D, E, F, G);
tuple_args!(A, B, C, D, E, F, G, H);
tuple_args!(A, B, C, D, E, F, G, H, I);
tuple_args!(A, B, C, D, E, F, G, H, I, J);
tuple_args!(A, B, C, D, E, F, G, H, I, J, K);
tuple_args!(A, B, C, D, E, F, G, H, I, J, K, L);
tuple_args!(A, B, C, D, E, F, G, H, I, J, K, L, M);
tuple_args!(A, B, C, D, E, F, G, H, I, J, K, L, M, N);
tuple_args!(A, B, C, D, E, F, G, H, I, J, K, L, M, N, O);
tuple_args!(A, B, C, D, E, F, G, H, I, J, K, L, M, N, O, P);
tuple_args!(A, B, C, D, E, F, G, H, I, J, K, L, M, N, O, P, Q);
tuple_args!(A, B, C, D, E, F, G, H, I, J, K, L, M, N, O, P, Q, R);
tuple_args!(A, B, C, D, E, F, G, H, I, J, K, L, M, N, O, P, Q, R, S);
tuple_args!(A, B, C, D, E, F, G, H, I, J, K, L, M, N, O, P, Q, R, S, T);
tuple_args!(A, B, C, D, E, F, G, H, I, J, K, L, M, N, O, P, Q, R, S, T, U);
tuple_args!(A, B, C, D, E, F, G, H, I, J, K, L, M, N, O, P, Q, R, S, T, U, V);
tuple_args!(A, B, C, D, E, F, G, H, I, J, K, L, M, N, O, P, Q, R, S, T, U, V, W);
tuple_args!(A, B, C, D, E, F, G, H, I, J, K, L, M, N, O, P, Q, R, S, T, U, V, W, X);
tuple_args!(A, B, C, D, E, F, G, H, I, J, K, L, M, N, O, P, Q, R, S, T, U, V, W, X, Y);
tuple_args!(A, B, C, D, E, F, G, H, I, J, K, L, M, N, O, P, Q, R, S, T, U, V, W, X, Y, Z);
tuple_args!(A, B, C, D, E, F, G, H, I, J, K, L, M, N, O, P, Q, R, S, T, U, V, W, X, Y, Z, A1);
tuple_args!(A, B, C, D, E, F, G, H, I, J, K, L, M, N, O, P, Q, R, S, T, U, V, W, X, Y, Z, A1, B1);
tuple_args!(
    A, B, C, D, E, F, G, H, I, J, K, L, M, N, O, P, Q, R, S, T, U, V, W, X, Y, Z, A1, B1, C1
);
tuple_args!(
    A, B, C, D, E, F, G, H, I, J, K, L, M, N, O, P, Q, R, S, T, U, V, W, X, Y, Z, A1, B1, C1, D1
);
tuple_args!(
    A, B, C, D, E, F, G, H, I, J, K, L, M, N, O, P, Q, R, S, T, U, V, W, X, Y, Z, A1, B1, C1, D1,
    E1
);
tuple_args!(
    A, B, C, D, E, F, G, H, I, J, K, L, M, N, O, P, Q, R, S, T, U, V, W, X, Y, Z, A1, B1, C1, D1,
    E1, F1
);

impl IntoArgs for Vec<Arg> {
    fn into_args(self) -> Vec<Arg> {
        self
    }
}

/// Where a launch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Target {
    /// Metal when MLX's default device is an Apple GPU, CUDA when it is an NVIDIA GPU and
    /// the crate feature `cuda` is on, otherwise the CPU executor. The environment variable
    /// `TRITON_METAL_TARGET` (`cpu`, `cpu-compiled`, `metal`, `cuda`, `emulated`,
    /// `emulated-reverse`, `emulated-simd-ahead`, `emulated-simd-behind`,
    /// `emulated-shuffled`) overrides the choice, e.g. to run a whole program on emulated
    /// Metal, unless the program installed a [`crate::Config`] that sets
    /// [`crate::Config::target`] or turns the environment off.
    #[default]
    Auto,
    /// The CPU executor, as an MLX primitive (lazy outputs).
    Cpu,
    /// The CPU executor with the kernel compiled to native code by clang (>= 15) instead
    /// of interpreted: the same semantics and checks, 1.4–6.1× faster than `Cpu` on the
    /// benchmark kernels once built (each kernel compiled once, cached on disk; see
    /// `native::execute_native`). Without a clang the launch fails with `Unsupported`.
    CpuCompiled,
    /// The generated MSL through MLX's `fast::metal_kernel` (needs MLX with Metal: macOS).
    Metal,
    /// The generated CUDA through MLX's `fast::cuda_kernel` (needs MLX's CUDA build on an
    /// NVIDIA GPU; elsewhere MLX's error comes back as `Err`).
    Cuda,
    /// The generated MSL, wrapped exactly as MLX would, compiled with clang against a
    /// Metal shim and run on the CPU with threads as fibers (`crate::emu`). Synchronous;
    /// for testing the Metal path on machines without a Mac.
    Emulated(LaneOrder),
}

/// Environment variable that overrides [`Target::Auto`].
pub const TARGET_ENV: &str = "TRITON_METAL_TARGET";

impl Target {
    fn from_env() -> Result<Option<Target>> {
        let Some(v) = crate::settings::var(TARGET_ENV) else {
            return Ok(None);
        };
        Ok(Some(match v.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => return Ok(None),
            "cpu" => Target::Cpu,
            "cpu-compiled" | "compiled" => Target::CpuCompiled,
            "metal" => Target::Metal,
            "cuda" => Target::Cuda,
            "emulated" | "emu" => Target::Emulated(LaneOrder::Forward),
            "emulated-reverse" | "emu-reverse" => Target::Emulated(LaneOrder::Reverse),
            "emulated-simd-ahead" => Target::Emulated(LaneOrder::SimdgroupsForward),
            "emulated-simd-behind" => Target::Emulated(LaneOrder::SimdgroupsReverse),
            "emulated-shuffled" => Target::Emulated(LaneOrder::Shuffled(1)),
            other => {
                return Err(Error::InvalidArgument(format!(
                    "{TARGET_ENV}={other}: expected cpu, cpu-compiled, metal, cuda, emulated, \
                     emulated-reverse, emulated-simd-ahead, emulated-simd-behind or emulated-shuffled"
                )))
            }
        }))
    }
}

/// A launch being configured; see [`JitKernel::launch`].
pub struct Launch<'k> {
    kernel: &'k JitKernel,
    grid: Option<Grid>,
    args: Vec<Arg>,
    constexprs: BTreeMap<String, ConstexprValue>,
    /// Where each constexpr was given, for an error naming one the kernel does not declare.
    constexpr_locs: BTreeMap<String, SourceLoc>,
    num_warps: usize,
    num_stages: u32,
    target: Target,
    reduction_layout: Option<ReductionLayout>,
    passes: Option<PassOptions>,
    not_specialized: Vec<String>,
    int_spec: Option<bool>,
    plan_edits: Vec<Arc<PlanEdit>>,
}

/// An edit of a launch's layout plan ([`Launch::override_plan`]): it gets the plan the
/// optimizer made, the specialised kernel the plan is for (op ids index `kernel.ops`) and
/// the options it was planned under (`options.target` is the target's hardware profile).
pub type PlanEdit =
    dyn Fn(&mut KernelPlan, &Kernel, &LaunchOptions) -> Result<()> + Send + Sync + 'static;

impl JitKernel {
    /// Starts a launch: `kernel.launch().grid(..).args(..).constexpr(..).run()`.
    pub fn launch(&self) -> Launch<'_> {
        Launch {
            kernel: self,
            grid: None,
            args: Vec::new(),
            constexprs: BTreeMap::new(),
            constexpr_locs: BTreeMap::new(),
            num_warps: 4,
            num_stages: LaunchOptions::default().num_stages,
            target: Target::Auto,
            reduction_layout: None,
            passes: None,
            not_specialized: Vec::new(),
            int_spec: None,
            plan_edits: Vec::new(),
        }
    }
}

impl<'k> Launch<'k> {
    /// Programs per axis: `[n]`, `[x, y]`, `[x, y, z]`, or [`grid`]`(|meta| ..)`. At most
    /// [`MAX_GRID`]; an axis of 0 runs no program, as in Triton (the outputs hold their
    /// fills, or the arrays they update in place).
    pub fn grid(mut self, g: impl Into<Grid>) -> Self {
        self.grid = Some(g.into());
        self
    }

    /// All runtime arguments at once, in parameter order.
    pub fn args(mut self, args: impl IntoArgs) -> Self {
        self.args = args.into_args();
        self
    }

    /// Appends one runtime argument.
    pub fn arg(mut self, a: impl Into<Arg>) -> Self {
        self.args.push(a.into());
        self
    }

    /// Gives a constexpr (specialises the kernel): an integer, a bool, a float, a string
    /// or a dtype (`.constexpr("BLOCK", 1024)`, `.constexpr("ACTIVATION", "leaky_relu")`,
    /// `.constexpr("ACC_TYPE", DType::F32)`; see [`ConstexprValue`]).
    #[track_caller]
    pub fn constexpr(mut self, name: &str, value: impl Into<ConstexprValue>) -> Self {
        self.constexprs.insert(name.to_string(), value.into());
        self.constexpr_locs
            .insert(name.to_string(), SourceLoc::caller());
        self
    }

    /// The signature this launch specialises the kernel for: its constexprs, the dtypes of
    /// its array arguments, and its scalars' dtypes as Triton types them (an integer is
    /// `i32` when it fits, else `i64`; a float `f32`; a bool `bool`).
    pub fn signature(&self) -> Signature {
        let args = self
            .args
            .iter()
            .map(|a| match a {
                Arg::Array(x) | Arg::InOut(x) => ArgType::Array(x.dtype()),
                Arg::Out { dtype, .. } => ArgType::Array(*dtype),
                // A table is an array of addresses.
                Arg::PtrTable(_) => ArgType::Array(DType::I64),
                Arg::Scalar(Scalar::Int(v)) if i32::try_from(*v).is_ok() => {
                    ArgType::Scalar(DType::I32)
                }
                Arg::Scalar(Scalar::Int(_)) => ArgType::Scalar(DType::I64),
                Arg::Scalar(Scalar::Float(_)) => ArgType::Scalar(DType::F32),
                Arg::Scalar(Scalar::Bool(_)) => ArgType::Scalar(DType::Bool),
            })
            .collect();
        Signature::of(self.constexprs.clone(), args)
    }

    /// The grid, computed from the constexprs for a grid function; an error names a
    /// constexpr the function reads that the launch does not give (as an integer).
    fn eval_grid(&self) -> Result<[usize; 3]> {
        let meta = Meta::new(&self.constexprs);
        let grid = match &self.grid {
            None => return Err(self.err("no grid given: call .grid([programs, ...])")),
            Some(Grid::Fixed(g)) => *g,
            Some(Grid::Dynamic(f)) => f(&meta),
        };
        if let Some(name) = meta.missed.borrow().first() {
            let given: Vec<String> = self
                .constexprs
                .iter()
                .map(|(n, v)| format!("{n}={v}"))
                .collect();
            let why = match self.constexprs.get(name) {
                Some(v) => format!(
                    "which this launch gives as a {} ({v}), not an integer: read it with \
                     meta.value(\"{name}\")",
                    v.kind()
                ),
                None => "which this launch does not give".to_string(),
            };
            return Err(self.err(format!(
                "the grid function reads meta[\"{name}\"], {why} (constexprs given: [{}])",
                given.join(", ")
            )));
        }
        check_grid(grid).map_err(|m| self.err(m))?;
        Ok(grid)
    }

    /// Warps (32 threads each) per program on GPUs; a power of two (default 4).
    pub fn num_warps(mut self, n: usize) -> Self {
        self.num_warps = n;
        self
    }

    /// Triton's `num_stages` (default 3): on CUDA, the `tl.dot` operand loads of a `for`
    /// loop are copied into shared memory this many minus one iterations ahead, through
    /// `num_stages` buffers, where the loop has the shape that allows it (see
    /// [`crate::opt::pipeline`]); on Metal, such loops stage their operands in two
    /// threadgroup buffers, one K step ahead, where two fit. 1 turns that off. The other
    /// targets compute the same results without it.
    pub fn num_stages(mut self, n: u32) -> Self {
        self.num_stages = n.max(1);
        self
    }

    /// Forces every reduction of the kernel into one layout (default: the code generator's
    /// choice, COALESCED, on GPU targets; the fastest order on the CPU). On the CPU
    /// executor, builtin reductions then combine their elements in that layout's order over
    /// `num_warps x 32` simulated lanes ([`crate::exec::ReduceStrategy`]); the compiled CPU
    /// executor ([`Target::CpuCompiled`]) keeps its own order (8 interleaved partial folds).
    pub fn reduction_layout(mut self, layout: ReductionLayout) -> Self {
        self.reduction_layout = Some(layout);
        self
    }

    /// Runs the kernel-IR optimisation pipeline ([`crate::passes::pipeline`]) on the
    /// specialisation before it runs (off by default, so results match the kernel as
    /// written; `PassOptions { exact: true }` keeps bit-exact results).
    pub fn optimize(mut self, opts: PassOptions) -> Self {
        self.passes = Some(opts);
        self
    }

    /// Edits the layout plan the compiler prints this launch with, on every compiled
    /// target: Metal and emulated Metal, CUDA, and the compiled CPU executor. The plan
    /// ([`KernelPlan`]) holds every decision the printers spell (a `tl.dot`'s lowering, each
    /// reduction's and scan's strategy, accumulators kept in fragments, staging buffers, K
    /// slices, threadgroup memory, barriers, the compiled CPU executor's one-thread
    /// specialisations), each with its reason; `f` changes some of them with the plan's
    /// setters ([`KernelPlan::set`], [`KernelPlan::set_scan`], [`KernelPlan::set_reuse`],
    /// ...). It is called with the optimizer's plan for the target at hand, the specialised
    /// kernel, and the options planned under; an `Err` it returns fails the launch. Several
    /// calls edit in turn.
    ///
    /// The edited plan is checked against the kernel ([`KernelPlan::verify`]) before
    /// anything is compiled: a decision the kernel cannot take fails the launch with an
    /// error naming the kernel, the op, its source line and what is wrong, and so does an
    /// edit of what the plan is for (its kernel, [`KernelPlan::printer`], which the target
    /// and [`Launch::num_warps`] decide, or the presence of [`KernelPlan::cpu`]). Compiled
    /// programs are cached by the edited plan's text with the kernel and options, so a
    /// launch never runs a program printed from another plan. [`Target::Cpu`] interprets
    /// the IR and has no layout plan: it ignores the edit (results agree on every target;
    /// only the generated code differs).
    ///
    /// ```no_run
    /// use triton_metal::opt::plan::{Decision, ScanStrategy};
    /// use triton_metal::runtime::{out, Target};
    /// use triton_metal::{tl, Array, DType::F32};
    /// let cumsum = tl::jit("cumsum", |k| {
    ///     let (x, y) = (k.ptr(F32, "x"), k.ptr(F32, "y"));
    ///     let offs = tl::arange(0, 512);
    ///     tl::store(y + offs, tl::cumsum(tl::load(x + offs), 0));
    /// })?;
    /// let x = Array::from_slice(&[1.0f32; 512], &[512])?;
    /// let launch = cumsum.launch().grid([1]).args((&x, out(&[512], F32)))
    ///     .target(Target::Emulated(Default::default()))
    ///     // Every scan staged in threadgroup memory instead of the SIMD-group collectives.
    ///     .override_plan(|plan, _kernel, _options| {
    ///         let scans: Vec<_> = plan.decisions()
    ///             .filter(|(_, d, _)| matches!(d, Decision::Scan(_)))
    ///             .map(|(op, _, _)| op)
    ///             .collect();
    ///         for op in scans {
    ///             plan.set_scan(op, ScanStrategy::Serial, "staged, for comparison");
    ///         }
    ///         Ok(())
    ///     });
    /// println!("{}", launch.plan()?);          // the plan the printer spells
    /// let [y] = launch.run()?.try_into().unwrap();
    /// # Ok::<(), triton_metal::Error>(())
    /// ```
    pub fn override_plan(
        mut self,
        f: impl Fn(&mut KernelPlan, &Kernel, &LaunchOptions) -> Result<()> + Send + Sync + 'static,
    ) -> Self {
        self.plan_edits.push(Arc::new(f));
        self
    }

    /// The layout plan this launch compiles with on its target, after the edits of
    /// [`Launch::override_plan`], as the printer consumes it (threadgroup buffers placed):
    /// to read, print (`{plan}` is its text form, [`KernelPlan::parse`] reads it back) and
    /// edit. `Unsupported` for [`Target::Cpu`], which interprets the IR without a plan
    /// (choose a compiled target with [`Launch::target`]), and errors as
    /// [`Launch::run`] would give for a plan the kernel cannot take.
    #[track_caller]
    pub fn plan(&self) -> Result<KernelPlan> {
        let kernel = self.specialize_for(false)?;
        let name = kernel.name.clone();
        let plan = (|| match self.resolve_target(&kernel)? {
            Target::Auto | Target::Cpu => Err(Error::Unsupported(format!(
                "kernel `{name}`: Target::Cpu interprets the kernel's IR and has no layout \
                 plan; ask a compiled target (.target(Target::CpuCompiled), \
                 Target::Emulated(..), Target::Metal or Target::Cuda)"
            ))),
            Target::CpuCompiled => {
                let kernel = self.specialize_for(true)?;
                let plan = match self.cpu_plan(&kernel)? {
                    Some(p) => p,
                    None => codegen::cpu::plan(&kernel),
                };
                Ok(codegen::cpu::compile_with(&kernel, false, &plan)?.plan)
            }
            Target::Metal | Target::Emulated(_) => Ok(self.msl()?.plan.clone()),
            Target::Cuda => Ok(self.cuda()?.plan.clone()),
        })();
        plan.map_err(|e| with_kernel(e, &name))
    }

    /// `default`, edited by [`Launch::override_plan`]'s functions and verified, or `None`
    /// when the launch edits nothing. `what` names the printer in errors.
    fn edit_plan(
        &self,
        kernel: &Kernel,
        opts: &LaunchOptions,
        default: impl FnOnce() -> KernelPlan,
        what: &str,
    ) -> Result<Option<KernelPlan>> {
        if self.plan_edits.is_empty() {
            return Ok(None);
        }
        let mut plan = default();
        let (printer, name, cpu) = (plan.printer, plan.kernel.clone(), plan.cpu.is_some());
        for f in &self.plan_edits {
            f(&mut plan, kernel, opts).map_err(|e| {
                self.err(format!("the plan override failed on the {what} plan: {e}"))
            })?;
        }
        // What the plan is for is fixed by the kernel, the target and `num_warps`.
        let fixed = if plan.printer != printer {
            Some(format!(
                "changes what the printer offers ({printer:?} to {:?}); choose threads with \
                 .num_warps(..) and the printer with .target(..)",
                plan.printer
            ))
        } else if plan.kernel != name {
            Some(format!("renames the plan's kernel to `{}`", plan.kernel))
        } else if plan.cpu.is_some() != cpu {
            Some(format!(
                "{} the compiled CPU executor's decisions (edit them in `plan.cpu`)",
                if cpu { "drops" } else { "adds" }
            ))
        } else {
            None
        };
        if let Some(why) = fixed {
            return Err(self.err(format!("the plan override of the {what} plan {why}")));
        }
        plan.verify(kernel).map_err(|e| {
            self.err(format!(
                "the plan override gives a {what} plan the kernel cannot take: {}",
                match e {
                    Error::InvalidArgument(m) => m,
                    e => e.to_string(),
                }
            ))
        })?;
        Ok(Some(plan))
    }

    /// The edited plan of the compiled CPU executor for `kernel`, if the launch edits it.
    fn cpu_plan(&self, kernel: &Kernel) -> Result<Option<KernelPlan>> {
        self.edit_plan(
            kernel,
            &codegen::cpu::cpu_options(),
            || codegen::cpu::plan(kernel),
            "compiled CPU",
        )
    }

    /// Chooses where to run (default [`Target::Auto`]).
    pub fn target(mut self, t: Target) -> Self {
        self.target = t;
        self
    }

    fn err(&self, msg: impl Into<String>) -> Error {
        Error::Launch {
            kernel: self.kernel.name().to_string(),
            msg: msg.into(),
        }
    }

    /// Turns Triton's integer specialisation on or off for this launch: an integer argument
    /// equal to 1 becomes a constant of the kernel that runs and one divisible by 16 a
    /// known fact ([`crate::passes::specialize_integers`]), so unit-stride accesses are
    /// proven contiguous and read as vectors; each combination of facts compiles once.
    /// Results are the same either way. Default: on for [`Target::Cpu`],
    /// [`Target::CpuCompiled`] and [`Target::Cuda`] (as Triton does; on an H100 it makes
    /// the tutorial matmul faster once its operand loads are copied ahead, see
    /// [`Launch::num_stages`] and benches/README.md); off for [`Target::Metal`] and the
    /// emulator, where its effect on speed has not been measured.
    pub fn specialize_integers(mut self, on: bool) -> Self {
        self.int_spec = Some(on);
        self
    }

    /// Integer parameters whose arguments are never specialised on (Triton's
    /// `do_not_specialize`, see [`Launch::specialize_integers`]): one kernel for all their
    /// values.
    pub fn do_not_specialize(mut self, names: &[&str]) -> Self {
        self.not_specialized
            .extend(names.iter().map(|n| n.to_string()));
        self
    }

    /// The facts the integer arguments give (see [`Launch::do_not_specialize`]).
    fn int_facts(&self, general: &Kernel) -> Result<IntSpec> {
        for name in &self.not_specialized {
            match general.param(name) {
                Some((_, p)) if specializable(p.kind) => {}
                _ => {
                    return Err(self.err(format!(
                        "do_not_specialize names `{name}`, which is not an integer parameter \
                         of the kernel"
                    )))
                }
            }
        }
        Ok(general
            .params
            .iter()
            .zip(&self.args)
            .enumerate()
            .filter(|(_, (p, _))| specializable(p.kind) && !self.not_specialized.contains(&p.name))
            .filter_map(|(i, (_, a))| match a {
                Arg::Scalar(Scalar::Int(v)) => IntFact::of(*v).map(|f| (i, f)),
                _ => None,
            })
            .collect())
    }

    /// The specialisation this launch runs on the CPU targets: built once per constexpr
    /// set, after the optimisation pipeline when [`Launch::optimize`] asked for it (run once
    /// per constexpr set and options: [`JitKernel::specialize_optimized`]), with the facts
    /// of its integer arguments applied unless [`Launch::specialize_integers`] turned them
    /// off.
    #[track_caller]
    pub fn specialize(&self) -> Result<Arc<Kernel>> {
        self.specialize_for(true)
    }

    /// The specialisation for a target whose default is to apply the integer facts
    /// (`facts`: the CPU targets and CUDA) or not (Metal and the emulator).
    #[track_caller]
    fn specialize_for(&self, facts: bool) -> Result<Arc<Kernel>> {
        let sig = self.signature();
        let general = self
            .kernel
            .specialize(&sig)
            .map_err(|e| self.at_unknown_constexpr(e))?;
        // `do_not_specialize`'s names are checked whether or not facts apply.
        let found = self.int_facts(&general)?;
        let ints = if self.int_spec.unwrap_or(facts) {
            found
        } else {
            IntSpec::new()
        };
        self.kernel
            .specialize_for_ints(&sig, self.passes.as_ref(), &ints)
    }

    /// A build error naming constexprs the kernel does not declare, placed at the line
    /// that gave the first of them (`.constexpr(..)`).
    fn at_unknown_constexpr(&self, e: Error) -> Error {
        let Error::Build {
            kernel,
            op,
            loc,
            msg,
        } = e
        else {
            return e;
        };
        let unknown = (op == "constexpr")
            .then(|| msg.strip_prefix("unknown constexpr(s) "))
            .flatten()
            .and_then(|m| m.split_once(';'))
            .map(|(names, _)| names);
        let given = unknown.and_then(|names| {
            self.constexpr_locs
                .iter()
                .find(|(n, _)| names.contains(&format!("{n:?}")))
                .map(|(_, l)| *l)
        });
        Error::Build {
            kernel,
            op,
            loc: given.unwrap_or(loc),
            msg,
        }
    }

    /// Checks everything and runs; returns the outputs (the stored-to pointer arguments)
    /// in parameter order, as lazy MLX arrays.
    #[track_caller]
    pub fn run(self) -> Result<Vec<Array>> {
        if !self.num_warps.is_power_of_two() || self.num_warps > 32 {
            return Err(self.err(format!(
                "num_warps = {} must be a power of two between 1 and 32",
                self.num_warps
            )));
        }
        let kernel = self.specialize_for(false)?;
        let grid = self.eval_grid()?;
        let plan = self.bind(&kernel)?;
        check_memory(&kernel, &plan)?;
        let target = self.resolve_target(&kernel)?;
        let kernel = match target {
            Target::Auto | Target::Cpu | Target::CpuCompiled => self.specialize_for(true)?,
            Target::Metal | Target::Emulated(_) => {
                return_if_table(&kernel, &plan, "Metal")?;
                kernel
            }
            Target::Cuda => {
                return_if_table(&kernel, &plan, "CUDA")?;
                self.specialize_for(true)?
            }
        };
        check_size(&kernel, target)?;
        let name = kernel.name.clone();
        let run = (|| match target {
            Target::Auto | Target::Cpu => {
                let strategy = self
                    .reduction_layout
                    .map(|l| ReduceStrategy::new(l, self.num_warps));
                run_cpu(kernel, grid, plan, CpuRun::Interpret(strategy))
            }
            Target::CpuCompiled => {
                if !crate::native::available() {
                    return Err(Error::Unsupported(format!(
                        "kernel `{}`: Target::CpuCompiled needs clang >= 15 (install it, e.g. \
                         `apt-get install clang-19`, or point TRITON_METAL_EMU_CXX at a \
                         clang++); Target::Cpu interprets the kernel without one",
                        kernel.name
                    )));
                }
                let edited = self.cpu_plan(&kernel)?;
                run_cpu(kernel, grid, plan, CpuRun::Compiled(edited.map(Arc::new)))
            }
            Target::Metal => {
                let mut plan = plan;
                let init = gpu_fills(&kernel, &mut plan, true)?;
                let prog = self.metal_program(&kernel, &in_place_params(&kernel, &plan))?;
                self.check_metal_threads(&prog, grid)?;
                if grid.contains(&0) {
                    return no_programs(&plan);
                }
                run_metal(&kernel, &prog, grid, &plan, init)
            }
            Target::Cuda => {
                let mut plan = plan;
                let init = gpu_fills(&kernel, &mut plan, false)?;
                let prog = self.cuda_program(&kernel, &in_place_params(&kernel, &plan))?;
                if grid.contains(&0) {
                    return no_programs(&plan);
                }
                run_cuda(&kernel, &prog, grid, &plan, init)
            }
            Target::Emulated(order) => {
                let mut plan = plan;
                let init = gpu_fills(&kernel, &mut plan, true)?;
                let prog = self.metal_program(&kernel, &in_place_params(&kernel, &plan))?;
                self.check_metal_threads(&prog, grid)?;
                if grid.contains(&0) {
                    return no_programs(&plan);
                }
                run_emulated(&kernel, &prog, grid, &plan, (order, init))
            }
        })();
        run.map_err(|e| with_kernel(e, &name))
    }

    /// Where the launch runs: its target, or for [`Target::Auto`] the environment's or MLX's
    /// default device's.
    fn resolve_target(&self, kernel: &Kernel) -> Result<Target> {
        Ok(match self.target {
            Target::Auto => match Target::from_env().map_err(|e| with_kernel(e, &kernel.name))? {
                Some(t) => t,
                None if device::default_device()? == Device::Gpu => {
                    match detected()?.0 {
                        crate::device::Backend::Metal => Target::Metal,
                        // Only a `cuda` build asks MLX about CUDA; without the feature a
                        // GPU default device here would be a Metal-less, CUDA-less MLX.
                        crate::device::Backend::Cuda if cfg!(feature = "cuda") => Target::Cuda,
                        other => {
                            return Err(Error::Unsupported(format!(
                                "kernel `{}`: MLX's default device is a {other} GPU and this \
                                 build has no launcher for it (build with feature `cuda` for \
                                 NVIDIA GPUs, or use .target(Target::Cpu))",
                                kernel.name
                            )))
                        }
                    }
                }
                None => Target::Cpu,
            },
            t => t,
        })
    }

    /// MLX's `metal_kernel` counts its grid in threads, in an `int`: axis 0's programs times
    /// the threads of one program must fit.
    fn check_metal_threads(&self, prog: &MetalProgram, grid: [usize; 3]) -> Result<()> {
        let threads = grid[0].checked_mul(prog.threads_per_threadgroup);
        if threads.is_none_or(|t| t > i32::MAX as usize) {
            return Err(self.err(format!(
                "{} programs on grid axis 0 x {} threads per program exceed the 2^31 - 1 \
                 threads per axis Metal launches take (fewer programs on axis 0, or spread \
                 them over axes 1 and 2)",
                grid[0], prog.threads_per_threadgroup
            )));
        }
        Ok(())
    }

    /// The Metal program this launch would run (generated once per kernel, options and set
    /// of parameters updated in place: those of [`inout`] arguments, and outputs whose fill
    /// MLX's float32 init value cannot carry, once the arguments are given).
    #[track_caller]
    pub fn msl(&self) -> Result<Arc<MetalProgram>> {
        let kernel = self.specialize_for(false)?;
        let in_place = self.gpu_in_place(&kernel, true)?;
        self.metal_program(&kernel, &in_place)
    }

    /// The parameters a GPU launch (`metal` or CUDA) of these arguments updates in place
    /// (none when the arguments do not bind yet).
    fn gpu_in_place(&self, kernel: &Kernel, metal: bool) -> Result<Vec<usize>> {
        let Ok(mut plan) = self.bind(kernel) else {
            return Ok(Vec::new());
        };
        return_if_table(kernel, &plan, if metal { "Metal" } else { "CUDA" })?;
        gpu_fills(kernel, &mut plan, metal)?;
        Ok(in_place_params(kernel, &plan))
    }

    /// The launch [`Target::Emulated`] would make: the generated MSL with its inputs bound
    /// and outputs described, to run under chosen schedules ([`emu::run_all_orders`]) or
    /// to inspect or edit before running ([`emu::run`]).
    #[track_caller]
    pub fn emulated(&self) -> Result<emu::MetalLaunch> {
        let kernel = self.specialize_for(false)?;
        let grid = self.eval_grid()?;
        let mut plan = self.bind(&kernel)?;
        return_if_table(&kernel, &plan, "Metal")?;
        let init = gpu_fills(&kernel, &mut plan, true)?;
        let prog = self.metal_program(&kernel, &in_place_params(&kernel, &plan))?;
        let unstored = unstored_outputs(&prog.outputs, &plan)?;
        emulated_launch(&kernel, &prog, grid, &plan, (&unstored, init))
    }

    /// The CUDA program this launch would run on an NVIDIA GPU (see [`Launch::msl`] for
    /// parameters updated in place).
    #[track_caller]
    pub fn cuda(&self) -> Result<Arc<CudaProgram>> {
        let kernel = self.specialize_for(true)?;
        let in_place = self.gpu_in_place(&kernel, false)?;
        self.cuda_program(&kernel, &in_place)
    }

    fn cuda_program(&self, kernel: &Arc<Kernel>, in_place: &[usize]) -> Result<Arc<CudaProgram>> {
        // The NVIDIA GPU at hand (or TRITON_METAL_HW); otherwise sm_80, the oldest
        // architecture MLX's CUDA back end targets.
        let target = match detected_profile()? {
            p if p.backend == crate::device::Backend::Cuda => p,
            _ => HardwareProfile::of(crate::opt::Chip::Sm80),
        };
        let opts = LaunchOptions {
            num_warps: self.num_warps as u32,
            reduction_layout: self.reduction_layout,
            target,
            num_stages: self.num_stages,
        };
        let plan = || codegen::cuda::plan(kernel, &opts);
        let edited = self.edit_plan(kernel, &opts, plan, "CUDA")?;
        let digest = kernel_digest(kernel);
        codegen::cuda_digested(kernel, &digest, &opts, in_place, edited.as_ref())
    }

    fn metal_program(&self, kernel: &Arc<Kernel>, in_place: &[usize]) -> Result<Arc<MetalProgram>> {
        // Plan for the Apple GPU at hand, or the one TRITON_METAL_HW names; when neither
        // is Metal (emulating on Linux), for the most constrained one (M1).
        let target = match detected_profile()? {
            p if p.backend == crate::device::Backend::Metal => p,
            _ => LaunchOptions::default().target,
        };
        let opts = LaunchOptions {
            num_warps: self.num_warps as u32,
            reduction_layout: self.reduction_layout,
            target,
            num_stages: self.num_stages,
        };
        let plan = || codegen::metal::plan(kernel, &opts);
        let edited = self.edit_plan(kernel, &opts, plan, "Metal")?;
        let digest = kernel_digest(kernel);
        codegen::msl_digested(kernel, &digest, &opts, in_place, edited.as_ref())
    }

    /// Matches arguments to parameters, checking count, kinds, dtypes and ranges.
    fn bind(&self, kernel: &Kernel) -> Result<Bound> {
        let params = &kernel.params;
        if self.args.len() != params.len() {
            let names: Vec<String> = params
                .iter()
                .map(|p| match p.kind {
                    ParamKind::Ptr(d) => format!("{}: *{d}", p.name),
                    ParamKind::Scalar(d) => format!("{}: {d}", p.name),
                })
                .collect();
            return Err(self.err(format!(
                "expected {} arguments ({}), got {}",
                params.len(),
                names.join(", "),
                self.args.len()
            )));
        }
        let mut bound = Bound::default();
        for (i, (p, a)) in params.iter().zip(&self.args).enumerate() {
            let at = format!("argument {i} (`{}`)", p.name);
            match (p.kind, a) {
                (ParamKind::Ptr(d), Arg::Array(arr)) => {
                    if arr.dtype() != d {
                        return Err(self.err(format!(
                            "{at}: expected an array of {d}, got {}",
                            arr.dtype()
                        )));
                    }
                    if p.stored {
                        return Err(self.err(format!(
                            "{at}: the kernel stores through this pointer, so it is an output: \
                             pass inout(&array) to update this array (the result is a new \
                             array: MLX arrays are immutable), or out(shape, dtype) / \
                             out_like(&array) for a fresh one"
                        )));
                    }
                    bound.slots.push(Slot::Input);
                    bound.inputs.push(arr.clone());
                }
                (ParamKind::Ptr(d), Arg::Out { shape, dtype, fill }) => {
                    if *dtype != d {
                        return Err(self.err(format!(
                            "{at}: output dtype {dtype} does not match the pointer's {d}"
                        )));
                    }
                    if p.loaded && !p.stored {
                        return Err(self.err(format!(
                            "{at}: the kernel only reads through this pointer, so it is an \
                             input: pass the array itself, not out(..)"
                        )));
                    }
                    // Outputs start uninitialised, like MLX's own kernels, unless a fill is
                    // asked for; one the kernel reads must be given contents.
                    let init = match fill {
                        Some(v) => Init::Fill(
                            fill_value(*v, d).map_err(|m| self.err(format!("{at}: fill: {m}")))?,
                        ),
                        None if p.loaded => {
                            return Err(self.err(format!(
                                "{at}: the kernel reads this output (a load or an atomic) as \
                                 well as writing it, and out(..) gives it no contents: pass \
                                 inout(&array) to update an existing array, or \
                                 out(..).fill(value) (e.g. .fill(0) to accumulate with atomics)"
                            )))
                        }
                        None => Init::None,
                    };
                    bound.slots.push(Slot::Output);
                    bound.outputs.push((
                        OutputSpec {
                            shape: shape.clone(),
                            dtype: *dtype,
                        },
                        init,
                    ));
                }
                (ParamKind::Ptr(d), Arg::InOut(arr)) => {
                    if arr.dtype() != d {
                        return Err(self.err(format!(
                            "{at}: expected an array of {d} to update in place, got {}",
                            arr.dtype()
                        )));
                    }
                    bound.slots.push(Slot::Output);
                    bound.outputs.push((
                        OutputSpec {
                            shape: arr.shape(),
                            dtype: d,
                        },
                        Init::From(arr.clone()),
                    ));
                }
                (ParamKind::Ptr(d), Arg::Scalar(s)) => {
                    return Err(self.err(format!("{at}: expected an array of {d}, got {s}")))
                }
                (ParamKind::Ptr(d), Arg::PtrTable(entries)) => {
                    if d != DType::I64 || p.stored {
                        return Err(self.err(format!(
                            "{at}: a ptr_table argument needs a pointer-to-i64 parameter the \
                             kernel only reads (its addresses), not a pointer to {d}{}",
                            if p.stored { " it stores to" } else { "" }
                        )));
                    }
                    let mut slots = Vec::with_capacity(entries.len());
                    for (j, e) in entries.iter().enumerate() {
                        let at = format!("{at}, table entry {j}");
                        match e {
                            Arg::Array(arr) => {
                                slots.push((arr.dtype(), Slot::Input));
                                bound.inputs.push(arr.clone());
                            }
                            Arg::Out { shape, dtype, fill } => {
                                let init = match fill {
                                    Some(v) => Init::Fill(
                                        fill_value(*v, *dtype)
                                            .map_err(|m| self.err(format!("{at}: fill: {m}")))?,
                                    ),
                                    None => Init::None,
                                };
                                slots.push((*dtype, Slot::Output));
                                let spec = OutputSpec {
                                    shape: shape.clone(),
                                    dtype: *dtype,
                                };
                                bound.outputs.push((spec, init));
                            }
                            Arg::InOut(arr) => {
                                slots.push((arr.dtype(), Slot::Output));
                                let spec = OutputSpec {
                                    shape: arr.shape(),
                                    dtype: arr.dtype(),
                                };
                                bound.outputs.push((spec, Init::From(arr.clone())));
                            }
                            Arg::Scalar(_) | Arg::PtrTable(_) => {
                                return Err(self.err(format!(
                                    "{at}: a pointer table holds arrays (&a, out(..), \
                                     inout(&a)), not scalars or tables"
                                )))
                            }
                        }
                    }
                    bound.slots.push(Slot::Table(slots));
                }
                (ParamKind::Scalar(d), Arg::Scalar(s)) => {
                    bound.slots.push(Slot::Scalar(
                        check_scalar(*s, d).map_err(|m| self.err(format!("{at}: {m}")))?,
                    ));
                }
                (ParamKind::Scalar(d), Arg::PtrTable(_)) => {
                    return Err(self.err(format!("{at}: expected a scalar of {d}, got a ptr_table")))
                }
                (ParamKind::Scalar(d), _) => {
                    return Err(self.err(format!("{at}: expected a scalar of {d}, got an array")))
                }
            }
        }
        Ok(bound)
    }
}

/// [`Error::Unsupported`] when the launch passes a pointer table to `target`, which cannot
/// take one.
fn return_if_table(kernel: &Kernel, plan: &Bound, target: &str) -> Result<()> {
    if plan.slots.iter().any(|s| matches!(s, Slot::Table(_))) {
        return Err(Error::Unsupported(format!(
            "kernel `{}`: {}",
            kernel.name,
            crate::ir::int_to_ptr_unsupported(target)
        )));
    }
    Ok(())
}

/// A scalar converted to its parameter's dtype.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScalarValue {
    /// Integers and bools, sign- or zero-extended.
    Int(i64),
    /// Floats.
    Float(f64),
}

/// Names the kernel in an error that does not (MLX's own errors, a target unavailable here,
/// a bad `TRITON_METAL_TARGET`).
fn with_kernel(e: Error, kernel: &str) -> Error {
    let named = |m: &str| m.contains(&format!("kernel `{kernel}`"));
    match e {
        Error::Mlx(m) if !named(&m) => Error::Mlx(format!("kernel `{kernel}`: {m}")),
        Error::Unsupported(m) if !named(&m) => {
            Error::Unsupported(format!("kernel `{kernel}`: {m}"))
        }
        Error::InvalidArgument(m) if !named(&m) => Error::Launch {
            kernel: kernel.to_string(),
            msg: m,
        },
        Error::Io { context, source } if !named(&context) => Error::Io {
            context: if context.is_empty() {
                format!("kernel `{kernel}`")
            } else {
                format!("kernel `{kernel}`: {context}")
            },
            source,
        },
        e => e,
    }
}

/// An error from compiling or running a generated program (`program`: the kernel's
/// identifier and a source hash) names the user's kernel, with the program after it, and
/// the user's parameter names where the program spells them as mangled identifiers.
fn from_program(e: Error, kernel: &Kernel, program: &str) -> Error {
    let user = kernel.name.as_str();
    let names: Vec<&str> = kernel.params.iter().map(|p| p.name.as_str()).collect();
    let idents = codegen::abi::param_idents(user, &names).unwrap_or_default();
    let readable = |msg: String| -> String {
        let mut msg = msg;
        for (id, name) in idents.iter().zip(&names) {
            if id != name {
                msg = msg.replace(
                    &format!("`{id}`"),
                    &format!("`{name}` (`{id}` in generated code)"),
                );
            }
        }
        msg
    };
    let ours = |k: &str| k == program || k.is_empty();
    match e {
        Error::Compile {
            kernel: k,
            backend,
            msg,
        } if ours(&k) => Error::Compile {
            kernel: user.to_string(),
            backend,
            msg: readable(format!("generated program `{program}`: {msg}")),
        },
        Error::Runtime { kernel: k, msg } if ours(&k) => Error::Runtime {
            kernel: user.to_string(),
            msg: readable(format!("generated program `{program}`: {msg}")),
        },
        Error::Launch { kernel: k, msg } if ours(&k) => Error::Launch {
            kernel: user.to_string(),
            msg: readable(format!("generated program `{program}`: {msg}")),
        },
        Error::Mlx(m) => Error::Mlx(readable(format!(
            "kernel `{user}` (generated program `{program}`): {m}"
        ))),
        e => e,
    }
}

/// A finite value that `d` would round to inf is an error (inf and NaN pass as given).
fn float_fits(v: f64, d: DType) -> std::result::Result<ScalarValue, String> {
    let rounded = match d {
        DType::F16 => half::f16::from_f64(v).to_f64(),
        DType::BF16 => half::bf16::from_f64(v).to_f64(),
        DType::F32 => v as f32 as f64,
        _ => v,
    };
    if v.is_finite() && rounded.is_infinite() {
        return Err(format!(
            "{v} does not fit in {d} (it would become inf; pass inf explicitly if that is meant)"
        ));
    }
    Ok(ScalarValue::Float(v))
}

fn check_scalar(s: Scalar, d: DType) -> std::result::Result<ScalarValue, String> {
    let range = |lo: i64, hi: i64, v: i64| {
        if v < lo || v > hi {
            Err(format!("{v} does not fit in {d}"))
        } else {
            Ok(ScalarValue::Int(v))
        }
    };
    match (s, d) {
        (Scalar::Bool(b), DType::Bool) => Ok(ScalarValue::Int(b as i64)),
        (Scalar::Int(v), DType::Bool) if v == 0 || v == 1 => Ok(ScalarValue::Int(v)),
        (Scalar::Int(v), DType::I8) => range(i8::MIN as i64, i8::MAX as i64, v),
        (Scalar::Int(v), DType::I16) => range(i16::MIN as i64, i16::MAX as i64, v),
        (Scalar::Int(v), DType::I32) => range(i32::MIN as i64, i32::MAX as i64, v),
        (Scalar::Int(v), DType::I64) => Ok(ScalarValue::Int(v)),
        (Scalar::Int(v), DType::U8) => range(0, u8::MAX as i64, v),
        (Scalar::Int(v), DType::U16) => range(0, u16::MAX as i64, v),
        (Scalar::Int(v), DType::U32) => range(0, u32::MAX as i64, v),
        (Scalar::Int(v), DType::U64) => range(0, i64::MAX, v),
        (Scalar::Int(v), f) if f.is_float() => float_fits(v as f64, f),
        (Scalar::Float(v), f) if f.is_float() => float_fits(v, f),
        (s, d) => Err(format!("expected a scalar of {d}, got {s}")),
    }
}

/// A fill value converted exactly to the output's dtype: integers in range (an integral
/// float fills an integer output), floats as a float literal would be.
fn fill_value(s: Scalar, d: DType) -> std::result::Result<ScalarValue, String> {
    match s {
        Scalar::Float(v) if !d.is_float() => {
            // -2^63 and 2^63: i64's range.
            let limit = 2f64.powi(63);
            if v.fract() == 0.0 && (-limit..limit).contains(&v) {
                check_scalar(Scalar::Int(v as i64), d)
            } else {
                Err(format!("{v} is not a value of {d}"))
            }
        }
        s => check_scalar(s, d),
    }
}

#[derive(Debug)]
enum Slot {
    Input,
    /// An output: `out(..)` or `inout(..)` (the output's [`Init`] says which).
    Output,
    Scalar(ScalarValue),
    /// A pointer table: per entry its dtype and whether it is an input or an output (in
    /// the order of `Bound::inputs` and `Bound::outputs`).
    Table(Vec<(DType, Slot)>),
}

/// What an output holds before the kernel runs.
#[derive(Clone, Debug)]
enum Init {
    /// Nothing defined (the kernel writes every element it reads, or nothing reads it).
    None,
    /// Every element holds this value, exact in the output's dtype.
    Fill(ScalarValue),
    /// The contents of this array, of the output's shape and dtype (`inout`).
    From(Array),
}

#[derive(Default)]
struct Bound {
    slots: Vec<Slot>,
    inputs: Vec<Array>,
    outputs: Vec<(OutputSpec, Init)>,
}

/// Refuses a launch whose outputs and not yet computed inputs, which all exist at once while
/// it runs, need more memory than is available now (MLX's allocator would fail mid-way),
/// naming the largest arguments. Skipped for CUDA devices, whose memory is their own (MLX
/// reports running out of it).
fn check_memory(kernel: &Kernel, plan: &Bound) -> Result<()> {
    let (mut outs, mut ins) = (plan.outputs.iter(), plan.inputs.iter());
    let mut parts: Vec<(usize, String)> = Vec::new();
    let mut total = 0usize;
    let flat = plan
        .slots
        .iter()
        .zip(&kernel.params)
        .flat_map(|(s, p)| match s {
            Slot::Table(entries) => entries.iter().map(|(_, e)| (p, e)).collect::<Vec<_>>(),
            s => vec![(p, s)],
        });
    for (p, slot) in flat {
        let (bytes, what) = match slot {
            Slot::Output => {
                let Some((o, init)) = outs.next() else {
                    continue;
                };
                let b = o
                    .shape
                    .iter()
                    .try_fold(o.dtype.size_bytes(), |a, &d| a.checked_mul(d));
                // An array updated in place may itself still be to compute.
                let pending = match init {
                    Init::From(a) => crate::ffi::bridge::array_pending_bytes(a.raw()),
                    _ => 0,
                };
                (
                    b.and_then(|b| b.checked_add(pending)),
                    format!("output `{}` {:?} {}", p.name, o.shape, o.dtype),
                )
            }
            Slot::Input => {
                let Some(a) = ins.next() else { continue };
                let b = crate::ffi::bridge::array_pending_bytes(a.raw());
                if b == 0 {
                    continue;
                }
                (Some(b), format!("input `{}` (not computed yet)", p.name))
            }
            Slot::Scalar(_) | Slot::Table(_) => continue,
        };
        match bytes.and_then(|b| total.checked_add(b)) {
            Some(t) => total = t,
            None => {
                return Err(Error::Launch {
                    kernel: kernel.name.clone(),
                    msg: format!("{what}: its size in bytes overflows"),
                })
            }
        }
        parts.push((bytes.unwrap_or(0), what));
    }
    // Small launches need no look at the system's memory.
    if total < 1 << 28
        || (cfg!(feature = "cuda") && crate::ffi::bridge::cuda_is_available().unwrap_or(false))
    {
        return Ok(());
    }
    let avail = crate::ffi::bridge::memory_available();
    if total <= avail {
        return Ok(());
    }
    parts.sort_by_key(|p| std::cmp::Reverse(p.0));
    let mib = |b: usize| format!("{} MiB", b.div_ceil(1 << 20));
    let mut list: Vec<String> = parts
        .iter()
        .take(4)
        .map(|(b, w)| format!("{w}: {}", mib(*b)))
        .collect();
    if parts.len() > 4 {
        list.push(format!("{} more", parts.len() - 4));
    }
    Err(Error::Launch {
        kernel: kernel.name.clone(),
        msg: format!(
            "the outputs and inputs still to compute need {} at once ({}), more than the {} \
             of memory available now; launch on smaller pieces, or evaluate and free arrays first",
            mib(total),
            list.join(", "),
            mib(avail)
        ),
    })
}

/// The digest of each kernel specialisation launched on a GPU target, computed once.
static KERNEL_DIGESTS: ByAddress<Kernel, KernelDigest> = ByAddress::new();

/// `KernelDigest::of(kernel)`, computed once per specialisation (the JIT keeps them).
fn kernel_digest(kernel: &Arc<Kernel>) -> KernelDigest {
    // Computing a digest cannot fail.
    KERNEL_DIGESTS
        .get_or_try(kernel, |k| Ok(KernelDigest::of(k)))
        .unwrap_or_else(|_| KernelDigest::of(kernel))
}

/// The backend and hardware profile of MLX's default device, as `HardwareInfo::detect`
/// and `HardwareProfile::from_info` give them, asked once per kind of device (CPU, GPU):
/// what MLX reports about a device does not change while the process runs.
fn detected() -> Result<(Backend, HardwareProfile)> {
    static SEEN: [OnceLock<(Backend, HardwareProfile)>; 2] = [OnceLock::new(), OnceLock::new()];
    let device = device::default_device()?;
    let slot = &SEEN[usize::from(device == Device::Gpu)];
    if let Some(seen) = slot.get() {
        return Ok(seen.clone());
    }
    let info = HardwareInfo::detect()?;
    let seen = (info.backend, HardwareProfile::from_info(&info));
    // Kept only where it describes `device` (the default device may change meanwhile).
    if (info.backend == Backend::Cpu) == (device == Device::Cpu) {
        let _ = slot.set(seen.clone());
    }
    Ok(seen)
}

/// `HardwareProfile::detect()`: the profile `TRITON_METAL_HW` names, else [`detected`]'s.
fn detected_profile() -> Result<HardwareProfile> {
    match crate::settings::var(crate::opt::hardware::HW_ENV_VAR) {
        Some(v) if !v.trim().is_empty() => HardwareProfile::detect(),
        _ => Ok(detected()?.1),
    }
}

/// How a CPU launch runs its kernel.
#[derive(Clone)]
enum CpuRun {
    /// The interpreter, reductions in the given order (`None`: its fastest).
    Interpret(Option<ReduceStrategy>),
    /// Compiled to native code, spelling the given plan (`None`: the optimizer's).
    Compiled(Option<Arc<KernelPlan>>),
}

/// How a CPU output buffer is prepared before the kernel runs.
enum CpuInit {
    None,
    /// One element's bytes, repeated.
    Fill(Vec<u8>),
    /// A copy of the primitive's input of this index (an array updated in place).
    Copy(usize),
}

fn run_cpu(kernel: Arc<Kernel>, grid: [usize; 3], plan: Bound, how: CpuRun) -> Result<Vec<Array>> {
    let Bound {
        slots,
        mut inputs,
        outputs,
    } = plan;
    // Arrays updated in place go to the primitive as inputs after the others, and are
    // copied into their output buffers before any program runs.
    let mut specs = Vec::with_capacity(outputs.len());
    let mut inits = Vec::with_capacity(outputs.len());
    let regular_inputs = inputs.len();
    for (spec, init) in outputs {
        inits.push(match init {
            Init::None => CpuInit::None,
            Init::Fill(v) => CpuInit::Fill(scalar_bytes(v, spec.dtype)),
            Init::From(a) => {
                inputs.push(a);
                CpuInit::Copy(inputs.len() - 1)
            }
        });
        specs.push(spec);
    }
    let name = kernel.name.clone();
    let body = move |ins: &[&[u8]], outs: &mut [&mut [u8]]| -> Result<()> {
        for (buf, init) in outs.iter_mut().zip(&inits) {
            match init {
                CpuInit::None => {}
                CpuInit::Fill(one) => fill_pattern(buf, one),
                CpuInit::Copy(k) => match ins.get(*k) {
                    Some(src) if src.len() == buf.len() => buf.copy_from_slice(src),
                    _ => {
                        return Err(Error::Runtime {
                            kernel: kernel.name.clone(),
                            msg: "internal: an array updated in place does not match its \
                                  output buffer"
                                .into(),
                        })
                    }
                },
            }
        }
        // Slots list inputs and outputs in parameter order, each list in its own order.
        let mut ins = ins[..regular_inputs.min(ins.len())].iter();
        let mut outs = outs.iter_mut();
        let mut args = Vec::with_capacity(slots.len());
        for slot in &slots {
            let mut buffer = |s: &Slot| match s {
                Slot::Input => ExecArg::Buffer(ins.next().copied().unwrap_or(&[])),
                Slot::Output => match outs.next() {
                    Some(b) => ExecArg::BufferMut(b),
                    None => ExecArg::Buffer(&[]),
                },
                Slot::Scalar(ScalarValue::Int(v)) => ExecArg::Int(*v),
                Slot::Scalar(ScalarValue::Float(v)) => ExecArg::Float(*v),
                Slot::Table(_) => ExecArg::Buffer(&[]),
            };
            args.push(match slot {
                Slot::Table(entries) => ExecArg::Table(PtrTable::new(
                    entries.iter().map(|(d, s)| (*d, buffer(s))).collect(),
                )),
                s => buffer(s),
            });
        }
        match &how {
            CpuRun::Interpret(strategy) => {
                crate::exec::execute_with(&kernel, grid, &mut args, *strategy)
            }
            CpuRun::Compiled(None) => crate::native::execute_native(&kernel, grid, &mut args),
            CpuRun::Compiled(Some(p)) => {
                crate::native::execute_native_with(&kernel, p, grid, &mut args)
            }
        }
    };
    let refs: Vec<&Array> = inputs.iter().collect();
    cpu_launch(&name, Box::new(body), &refs, &specs)
}

/// Fills a buffer with `value` converted to `dtype` (bit patterns as MLX stores them).
pub(crate) fn fill_bytes(buf: &mut [u8], dtype: DType, value: f64) {
    let one: Vec<u8> = match dtype {
        DType::Bool => vec![(value != 0.0) as u8],
        DType::I8 => (value as i8).to_ne_bytes().to_vec(),
        DType::I16 => (value as i16).to_ne_bytes().to_vec(),
        DType::I32 => (value as i32).to_ne_bytes().to_vec(),
        DType::I64 => (value as i64).to_ne_bytes().to_vec(),
        DType::U8 => (value as u8).to_ne_bytes().to_vec(),
        DType::U16 => (value as u16).to_ne_bytes().to_vec(),
        DType::U32 => (value as u32).to_ne_bytes().to_vec(),
        DType::U64 => (value as u64).to_ne_bytes().to_vec(),
        DType::F16 => half::f16::from_f64(value).to_ne_bytes().to_vec(),
        DType::BF16 => half::bf16::from_f64(value).to_ne_bytes().to_vec(),
        DType::F32 => (value as f32).to_ne_bytes().to_vec(),
        DType::F64 => value.to_ne_bytes().to_vec(),
    };
    fill_pattern(buf, &one);
}

/// Fills a buffer with copies of one element's bytes.
fn fill_pattern(buf: &mut [u8], one: &[u8]) {
    if one.iter().all(|&b| b == one[0]) {
        buf.fill(one[0]);
    } else {
        for chunk in buf.chunks_exact_mut(one.len()) {
            chunk.copy_from_slice(one);
        }
    }
}

/// Raw bytes of a scalar (an argument or a fill) in `dtype`, exact for integers.
fn scalar_bytes(v: ScalarValue, dtype: DType) -> Vec<u8> {
    let mut buf = vec![0u8; dtype.size_bytes()];
    let value = match v {
        ScalarValue::Int(i) => {
            // Integers are stored exactly (fill_bytes goes through f64, fine below 2^53;
            // wider ones are written directly).
            match dtype {
                DType::I64 => return i.to_ne_bytes().to_vec(),
                DType::U64 => return (i as u64).to_ne_bytes().to_vec(),
                _ => i as f64,
            }
        }
        ScalarValue::Float(f) => f,
    };
    fill_bytes(&mut buf, dtype, value);
    buf
}

/// The parameter index of each output slot, in order (parallel to `plan.outputs`).
fn output_params(plan: &Bound) -> Vec<usize> {
    plan.slots
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s, Slot::Output))
        .map(|(i, _)| i)
        .collect()
}

/// The float MLX's custom kernels start every output from (`init_value`) where it gives
/// exactly the fill `v` in `dtype` (a NaN fill of a float output: any NaN).
fn init_carries(init: f32, v: ScalarValue, dtype: DType) -> bool {
    let want = scalar_bytes(v, dtype);
    let mut got = vec![0u8; dtype.size_bytes()];
    fill_bytes(&mut got, dtype, init as f64);
    let nan = matches!(v, ScalarValue::Float(f) if f.is_nan()) && init.is_nan();
    want == got || (nan && dtype.is_float())
}

/// The float a fill would be given to MLX as.
fn as_init(v: ScalarValue) -> f32 {
    match v {
        ScalarValue::Int(i) => i as f32,
        ScalarValue::Float(f) => f as f32,
    }
}

/// Prepares the outputs of a GPU launch (Metal, CUDA, emulated Metal): MLX's custom kernels
/// start every output from one float32 value, so fills it cannot carry exactly (another
/// fill, a value float32 rounds, or any nonzero fill where written-element flags must
/// start at 0) become in-place updates of an array holding the fill. On Metal (`metal`)
/// the outputs of a kernel with atomics that are not 32-bit live in 32-bit words
/// (`MetalProgram::word_outputs`), which the common value carries only as a repeated word
/// pattern. Returns the value to start the outputs from, if any.
fn gpu_fills(kernel: &Kernel, plan: &mut Bound, metal: bool) -> Result<Option<f32>> {
    let params = output_params(plan);
    let stored = |i: usize| kernel.params.get(i).is_some_and(|p| p.stored);
    let atomics = kernel
        .ops
        .iter()
        .any(|o| matches!(o.op, Op::AtomicRmw { .. } | Op::AtomicCas { .. }));
    let in_words = |d: DType| metal && atomics && d.size_bytes() != 4;
    // The float that starts an output of `d` holding `v`, if one does.
    let carrier = |v: ScalarValue, d: DType| {
        if in_words(d) {
            super::words::init_for(d, &scalar_bytes(v, d))
        } else {
            Some(as_init(v)).filter(|&f| init_carries(f, v, d))
        }
    };
    let carries = |f: f32, v: ScalarValue, d: DType| {
        if in_words(d) {
            carrier(v, d).map(f32::to_bits) == Some(f.to_bits())
        } else {
            init_carries(f, v, d)
        }
    };
    // Outputs never stored are made on the host (`unstored_outputs`), exactly.
    let in_place = params
        .iter()
        .zip(&plan.outputs)
        .any(|(&i, (_, init))| stored(i) && matches!(init, Init::From(_)));
    let mut init: Option<f32> = if in_place {
        Some(0.0)
    } else {
        params
            .iter()
            .zip(&plan.outputs)
            .find_map(|(&i, (o, init))| match init {
                Init::Fill(v) if stored(i) => carrier(*v, o.dtype),
                _ => None,
            })
    };
    loop {
        let mut lowered = false;
        for (&i, (spec, out_init)) in params.iter().zip(plan.outputs.iter_mut()) {
            let Init::Fill(v) = *out_init else { continue };
            if !stored(i) || init.is_some_and(|f| carries(f, v, spec.dtype)) {
                continue;
            }
            let one = Array::from_bytes(&scalar_bytes(v, spec.dtype), &[], spec.dtype)?;
            *out_init = Init::From(crate::mlx::broadcast_to(&one, &spec.shape)?);
            lowered = true;
        }
        // Flags now exist and start at 0: fills kept under another value must be rechecked.
        if lowered && init.map(f32::to_bits) != Some(0) {
            init = Some(0.0);
            continue;
        }
        return Ok(init);
    }
}

/// The specs MLX allocates for a program's outputs: those kept in 32-bit words as words.
fn in_words(specs: Vec<OutputSpec>, words: &[bool]) -> Vec<OutputSpec> {
    specs
        .into_iter()
        .enumerate()
        .map(|(i, o)| match words.get(i) {
            Some(true) => super::words::spec(&o),
            _ => o,
        })
        .collect()
}

/// The program's outputs with each one kept in words read back as its own spec.
fn from_words(outs: Vec<Array>, specs: &[OutputSpec], words: &[bool]) -> Result<Vec<Array>> {
    outs.into_iter()
        .enumerate()
        .map(|(i, a)| match (words.get(i), specs.get(i)) {
            (Some(true), Some(o)) => super::words::read(&a, o),
            _ => Ok(a),
        })
        .collect()
}

/// The parameters a GPU launch updates in place (the kernel stores to them and the
/// argument gives their contents), after [`gpu_fills`].
fn in_place_params(kernel: &Kernel, plan: &Bound) -> Vec<usize> {
    output_params(plan)
        .into_iter()
        .zip(&plan.outputs)
        .filter(|(i, (_, init))| {
            matches!(init, Init::From(_)) && kernel.params.get(*i).is_some_and(|p| p.stored)
        })
        .map(|(i, _)| i)
        .collect()
}

/// The outputs of a GPU launch whose grid has an axis of 0 programs, which launches
/// nothing (as Triton's launcher does, and as the CPU targets run no program): each holds
/// its fill (zeros without one) or the array it updates in place, in parameter order.
/// MLX's custom kernels refuse an empty grid, so none is made.
fn no_programs(plan: &Bound) -> Result<Vec<Array>> {
    Ok(unstored_outputs(&[], plan)?
        .into_iter()
        .map(|(_, a)| a)
        .collect())
}

/// Outputs this specialisation never stores to (not outputs of the GPU program): made here,
/// holding their fill (zeros without one) exactly or the array they update in place,
/// passed as inputs where the program reads them, and returned as they are. By parameter
/// index.
fn unstored_outputs(prog_outputs: &[usize], plan: &Bound) -> Result<Vec<(usize, Array)>> {
    let mut made = Vec::new();
    for (i, (spec, init)) in output_params(plan).into_iter().zip(&plan.outputs) {
        if prog_outputs.contains(&i) {
            continue;
        }
        let array = match init {
            Init::From(a) => a.clone(),
            Init::None | Init::Fill(_) => {
                let n: usize = spec.shape.iter().product();
                let mut bytes = vec![0u8; n * spec.dtype.size_bytes()];
                if let Init::Fill(v) = init {
                    fill_pattern(&mut bytes, &scalar_bytes(*v, spec.dtype));
                }
                Array::from_bytes(&bytes, &spec.shape, spec.dtype)?
            }
        };
        made.push((i, array));
    }
    Ok(made)
}

/// The launch's outputs in parameter order from the GPU program's (its outputs in parameter
/// order, then one written-element flag per parameter of `in_place`): each in-place
/// output becomes `where(flag, output, argument)`; the unstored ones are merged in.
fn gpu_results(
    kernel: &Kernel,
    plan: &Bound,
    (prog_outputs, in_place): (&[usize], &[usize]),
    mut from_gpu: Vec<Array>,
    unstored: Vec<(usize, Array)>,
) -> Result<Vec<Array>> {
    if from_gpu.len() != prog_outputs.len() + in_place.len() {
        return Err(Error::Launch {
            kernel: kernel.name.clone(),
            msg: format!(
                "internal: the GPU program returned {} arrays, expected {}",
                from_gpu.len(),
                prog_outputs.len() + in_place.len()
            ),
        });
    }
    let flags = from_gpu.split_off(prog_outputs.len());
    let params = output_params(plan);
    for (i, flag) in in_place.iter().zip(flags) {
        let source = params
            .iter()
            .zip(&plan.outputs)
            .find_map(|(j, (_, init))| match init {
                Init::From(a) if j == i => Some(a),
                _ => None,
            });
        let at = prog_outputs.iter().position(|j| j == i);
        let (Some(source), Some(at)) = (source, at) else {
            return Err(Error::Launch {
                kernel: kernel.name.clone(),
                msg: format!("internal: no argument for the in-place parameter {i}"),
            });
        };
        let written = crate::mlx::astype(&flag, DType::Bool)?;
        from_gpu[at] = crate::mlx::where_(&written, &from_gpu[at], source)?;
    }
    let mut gpu = from_gpu.into_iter();
    let mut made = unstored.into_iter().peekable();
    Ok(params
        .into_iter()
        .filter_map(|i| match made.peek() {
            Some((j, _)) if *j == i => made.next().map(|(_, a)| a),
            _ => gpu.next(),
        })
        .collect())
}

/// Input arrays in the program's input order: pointer arguments as given, scalars as 0-d
/// arrays of their parameter's dtype, arrays updated in place (the extra inputs of their
/// parameters), outputs the program only reads as made by [`unstored_outputs`].
fn gpu_inputs(
    kernel: &Kernel,
    prog_inputs: &[usize],
    plan: &Bound,
    unstored: &[(usize, Array)],
) -> Result<Vec<Array>> {
    let mut by_param: Vec<Option<&Array>> = vec![None; kernel.params.len()];
    let mut scalars: Vec<Option<Array>> = vec![None; kernel.params.len()];
    let mut ins = plan.inputs.iter();
    let mut outs = plan.outputs.iter();
    for (i, (slot, p)) in plan.slots.iter().zip(&kernel.params).enumerate() {
        match (slot, p.kind) {
            (Slot::Input, _) => by_param[i] = ins.next(),
            (Slot::Scalar(v), ParamKind::Scalar(d)) => scalars[i] = Some(scalar_array(*v, d)?),
            (Slot::Output, _) => {
                by_param[i] = match outs.next() {
                    Some((_, Init::From(a))) => Some(a),
                    _ => unstored.iter().find(|(j, _)| *j == i).map(|(_, a)| a),
                }
            }
            _ => {}
        }
    }
    prog_inputs
        .iter()
        .map(|&i| {
            let given = by_param.get(i).copied().flatten().cloned();
            given
                .or_else(|| scalars.get_mut(i).and_then(Option::take))
                .ok_or_else(|| Error::Launch {
                    kernel: kernel.name.clone(),
                    msg: format!("internal: no argument for GPU input {i}"),
                })
        })
        .collect()
}

/// A scalar argument as the 0-d array of `dtype` a GPU program takes. Launches passing the
/// same value share one array (an MLX array, once made, never changes; finding one costs
/// less than making one): up to 1024 values are kept, then all are dropped and kept anew.
fn scalar_array(v: ScalarValue, dtype: DType) -> Result<Array> {
    static MADE: Mutex<BTreeMap<(DType, [u8; 8]), Array>> = Mutex::new(BTreeMap::new());
    let bytes = scalar_bytes(v, dtype);
    let mut key = (dtype, [0u8; 8]);
    match key.1.get_mut(..bytes.len()) {
        Some(k) => k.copy_from_slice(&bytes),
        None => return Array::from_bytes(&bytes, &[], dtype),
    }
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(a) = made.get(&key) {
        return Ok(a.clone());
    }
    let a = Array::from_bytes(&bytes, &[], dtype)?;
    if made.len() >= 1024 {
        made.clear();
    }
    made.insert(key, a.clone());
    Ok(a)
}

/// The program's outputs (in parameter order, as the program lists them), then one
/// written-element flag of `flag_dtype` per parameter of `in_place`.
fn gpu_outputs(
    kernel: &Kernel,
    (prog_outputs, in_place): (&[usize], &[usize]),
    flag_dtype: DType,
    plan: &Bound,
) -> Result<Vec<OutputSpec>> {
    let params = output_params(plan);
    let spec = |i: &usize| {
        params
            .iter()
            .position(|j| j == i)
            .and_then(|k| plan.outputs.get(k))
            .map(|(o, _)| o.clone())
            .ok_or_else(|| Error::Launch {
                kernel: kernel.name.clone(),
                msg: format!("internal: no output bound for GPU output {i}"),
            })
    };
    let mut specs = prog_outputs.iter().map(spec).collect::<Result<Vec<_>>>()?;
    for i in in_place {
        let o = spec(i)?;
        specs.push(OutputSpec {
            shape: o.shape,
            dtype: flag_dtype,
        });
    }
    Ok(specs)
}

/// The launch's results from what a Metal program (on a GPU or the emulator) returned:
/// outputs kept in words read back in their dtype, in-place outputs merged with their
/// arguments, the unstored outputs added.
fn metal_results(
    kernel: &Kernel,
    prog: &MetalProgram,
    plan: &Bound,
    outs: Vec<Array>,
    unstored: Vec<(usize, Array)>,
) -> Result<Vec<Array>> {
    let prog_outputs = (prog.outputs.as_slice(), prog.in_place.as_slice());
    let specs = gpu_outputs(kernel, prog_outputs, prog.flag_dtype, plan)?;
    let outs = from_words(outs, &specs, &prog.word_outputs)?;
    gpu_results(kernel, plan, prog_outputs, outs, unstored)
}

/// MLX's kernels of the Metal programs launched so far, one per program.
static METAL_KERNELS: MadeKernels<MetalProgram> = MadeKernels::new();
/// MLX's kernels of the CUDA programs launched so far, one per program.
static CUDA_KERNELS: MadeKernels<CudaProgram> = MadeKernels::new();

/// MLX's `fast::metal_kernel` of `prog`, made on its first launch.
fn metal_kernel(kernel: &Kernel, prog: &Arc<MetalProgram>) -> Result<Arc<MadeKernel>> {
    METAL_KERNELS.get_or_try(prog, |p| {
        register_program(&p.name, &kernel.name);
        let made = MadeKernel::metal(
            &p.name,
            &p.input_names,
            &p.output_names,
            (&p.source, &p.header),
            p.atomic_outputs,
        )?;
        Ok(Arc::new(made))
    })
}

/// MLX's `fast::cuda_kernel` of `prog`, made on its first launch. Scratch arrays are static
/// `__shared__` declarations in the source; the rings of loads issued ahead are the block's
/// dynamic shared memory.
fn cuda_kernel(kernel: &Kernel, prog: &Arc<CudaProgram>) -> Result<Arc<MadeKernel>> {
    CUDA_KERNELS.get_or_try(prog, |p| {
        register_program(&p.name, &kernel.name);
        let made = MadeKernel::cuda(
            &p.name,
            &p.input_names,
            &p.output_names,
            (&p.source, &p.header),
            p.dynamic_shared_mem_bytes,
        )?;
        Ok(Arc::new(made))
    })
}

fn run_metal(
    kernel: &Kernel,
    prog: &Arc<MetalProgram>,
    grid: [usize; 3],
    plan: &Bound,
    init_value: Option<f32>,
) -> Result<Vec<Array>> {
    let unstored = unstored_outputs(&prog.outputs, plan)?;
    let inputs = gpu_inputs(kernel, &prog.inputs, plan, &unstored)?;
    let prog_outputs = (prog.outputs.as_slice(), prog.in_place.as_slice());
    let specs = gpu_outputs(kernel, prog_outputs, prog.flag_dtype, plan)?;
    let made = metal_kernel(kernel, prog).map_err(|e| from_program(e, kernel, &prog.name))?;
    let outs = made
        .launch(
            &inputs.iter().collect::<Vec<_>>(),
            &in_words(specs.clone(), &prog.word_outputs),
            prog.launch_dims(grid),
            init_value,
        )
        .map_err(|e| from_program(e, kernel, &prog.name))?;
    let outs = from_words(outs, &specs, &prog.word_outputs)?;
    gpu_results(kernel, plan, prog_outputs, outs, unstored)
}

fn run_cuda(
    kernel: &Kernel,
    prog: &Arc<CudaProgram>,
    grid: [usize; 3],
    plan: &Bound,
    init_value: Option<f32>,
) -> Result<Vec<Array>> {
    let unstored = unstored_outputs(&prog.outputs, plan)?;
    let inputs = gpu_inputs(kernel, &prog.inputs, plan, &unstored)?;
    let prog_outputs = (prog.outputs.as_slice(), prog.in_place.as_slice());
    let n = prog.outputs.len();
    let flag_dtype = prog.output_dtypes.get(n).copied().unwrap_or(DType::U8);
    let specs = gpu_outputs(kernel, prog_outputs, flag_dtype, plan)?;
    let dims = prog.launch_dims(grid)?;
    let made = cuda_kernel(kernel, prog).map_err(|e| from_program(e, kernel, &prog.name))?;
    let outs = made
        .launch(&inputs.iter().collect::<Vec<_>>(), &specs, dims, init_value)
        .map_err(|e| from_program(e, kernel, &prog.name))?;
    gpu_results(kernel, plan, prog_outputs, outs, unstored)
}

fn emulated_launch(
    kernel: &Kernel,
    prog: &MetalProgram,
    grid: [usize; 3],
    plan: &Bound,
    (unstored, init_value): (&[(usize, Array)], Option<f32>),
) -> Result<emu::MetalLaunch> {
    let inputs = gpu_inputs(kernel, &prog.inputs, plan, unstored)?;
    let outputs = in_words(
        gpu_outputs(
            kernel,
            (&prog.outputs, &prog.in_place),
            prog.flag_dtype,
            plan,
        )?,
        &prog.word_outputs,
    );
    let (g, t) = prog.launch_dims(grid);
    let mut launch = emu::MetalLaunch::new(&prog.name, &prog.source)
        .header(&prog.header)
        .grid(g)
        .threadgroup(t)
        .atomic_outputs(prog.atomic_outputs);
    for (name, arr) in prog.input_names.iter().zip(&inputs) {
        launch = launch.input(EmuBuffer {
            name: name.clone(),
            dtype: arr.dtype(),
            shape: arr.shape(),
            bytes: arr.to_bytes()?,
        });
    }
    // As MLX does: one init value for every output.
    for (name, spec) in prog.output_names.iter().zip(&outputs) {
        let mut o = emu::OutputSpec::new(name, spec.dtype, &spec.shape);
        if let Some(v) = init_value {
            o = o.init(v);
        }
        launch = launch.output(o);
    }
    Ok(launch)
}

fn run_emulated(
    kernel: &Kernel,
    prog: &MetalProgram,
    grid: [usize; 3],
    plan: &Bound,
    (order, init_value): (LaneOrder, Option<f32>),
) -> Result<Vec<Array>> {
    let unstored = unstored_outputs(&prog.outputs, plan)?;
    let launch =
        emulated_launch(kernel, prog, grid, plan, (&unstored, init_value))?.lane_order(order);
    let outs = emu::run(&launch)
        .map_err(|e| from_program(e, kernel, &prog.name))?
        .into_iter()
        .map(|b| Array::from_bytes(&b.bytes, &b.shape, b.dtype))
        .collect::<Result<Vec<Array>>>()?;
    metal_results(kernel, prog, plan, outs, unstored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType::F32;
    use crate::runtime::out;
    use crate::tl;

    /// `y = x + x` or `y = x * x` over 16 elements.
    fn elementwise(name: &str, square: bool) -> JitKernel {
        tl::jit(name, move |k| {
            let (x, y) = (k.ptr(F32, "x"), k.ptr(F32, "y"));
            let offs = tl::arange(0, 16);
            let v = tl::load(x + offs);
            let r = if square { v * v } else { v + v };
            tl::store(y + offs, r);
        })
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// One Metal launch: arrays where Metal runs, MLX's refusal on Linux.
    fn launch_metal(k: &JitKernel, x: &Array) {
        match k
            .launch()
            .grid([1])
            .args((x, out(&[16], F32)))
            .target(Target::Metal)
            .run()
        {
            Ok(outs) => assert_eq!(outs.len(), 1),
            Err(e) => assert!(e.to_string().contains("No Metal back-end"), "{e}"),
        }
    }

    #[test]
    fn each_program_keeps_the_one_mlx_kernel_made_from_it() {
        let (a, b) = (
            elementwise("made_once_twice", false),
            elementwise("made_once_square", true),
        );
        let x = Array::from_slice(&[1.5f32; 16], &[16]).unwrap_or_else(|e| panic!("{e}"));
        let msl = |k: &JitKernel| {
            k.launch()
                .grid([1])
                .args((&x, out(&[16], F32)))
                .target(Target::Metal)
                .msl()
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let (pa, pb) = (msl(&a), msl(&b));
        assert_ne!(pa.source, pb.source);
        launch_metal(&a, &x);
        launch_metal(&b, &x);
        let made = |p: &Arc<MetalProgram>| {
            METAL_KERNELS
                .peek(p)
                .unwrap_or_else(|| panic!("no kernel made for `{}`", p.name))
        };
        let (ma, mb) = (made(&pa), made(&pb));
        assert_eq!(
            (ma.name.as_str(), mb.name.as_str()),
            (pa.name.as_str(), pb.name.as_str())
        );
        assert_ne!(ma.serial, mb.serial);
        // Alternating launches, from several threads at once, make nothing again.
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..3 {
                        launch_metal(&a, &x);
                        launch_metal(&b, &x);
                    }
                });
            }
        });
        for (p, m) in [(&pa, &ma), (&pb, &mb)] {
            let now = made(p);
            assert!(Arc::ptr_eq(&now, m), "`{}` got a second kernel", p.name);
            assert_eq!(now.serial, m.serial);
        }
        // Each kernel is MLX's for its own program's source.
        let spec = OutputSpec {
            shape: vec![16],
            dtype: F32,
        };
        for (p, m, other) in [(&pa, &ma, &pb), (&pb, &mb, &pa)] {
            assert_eq!((p.input_names.len(), p.output_names.len()), (1, 1));
            let traced = m
                .traced_source(&[&x], std::slice::from_ref(&spec), p.launch_dims([1, 1, 1]))
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(traced.contains(&p.source), "{traced}");
            assert!(
                traced.contains(&format!("custom_kernel_{}", p.name)),
                "{traced}"
            );
            assert!(!traced.contains(&other.source), "{traced}");
            assert!(!traced.contains(&other.name), "{traced}");
        }
    }

    #[test]
    fn launches_share_the_array_of_a_scalar_value() {
        let get = |v: ScalarValue, d: DType| scalar_array(v, d).unwrap_or_else(|e| panic!("{e}"));
        let a = get(ScalarValue::Int(-77_003), DType::I32);
        assert_eq!(a.item::<i32>().ok(), Some(-77_003));
        assert_eq!(a.shape(), Vec::<usize>::new());
        assert_eq!(get(ScalarValue::Int(-77_003), DType::I32).id(), a.id());
        // Another value or dtype is another array.
        for (v, d) in [
            (ScalarValue::Int(-77_004), DType::I32),
            (ScalarValue::Int(-77_003), DType::I64),
        ] {
            let b = get(v, d);
            assert_ne!(b.id(), a.id());
            assert_eq!(b.dtype(), d);
        }
        let f = get(ScalarValue::Float(0.25), DType::F32);
        assert_eq!(f.item::<f32>().ok(), Some(0.25));
    }

    #[test]
    fn a_kernel_mlx_refuses_to_make_is_not_kept() {
        let k = elementwise("made_refused", false);
        let x = Array::from_slice(&[1.5f32; 16], &[16]).unwrap_or_else(|e| panic!("{e}"));
        let launch = || {
            k.launch()
                .grid([1])
                .args((&x, out(&[16], F32)))
                .target(Target::Cuda)
        };
        let prog = launch().cuda().unwrap_or_else(|e| panic!("{e}"));
        for _ in 0..2 {
            match launch().run() {
                // A CUDA machine: the kernel is made once and kept.
                Ok(_) => assert!(CUDA_KERNELS.peek(&prog).is_some()),
                Err(e) => {
                    let msg = e.to_string();
                    assert!(msg.contains("No CUDA back-end"), "{msg}");
                    assert!(msg.contains("made_refused"), "{msg}");
                    assert!(CUDA_KERNELS.peek(&prog).is_none());
                }
            }
        }
    }
}
