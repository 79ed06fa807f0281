//! Runs Metal kernels on Linux: the emulation harness.
//!
//! No tool on Linux reads MSL, so the kernel MLX would compile on a Mac (its signature
//! written by [`signature::MlxKernel`], exactly as MLX writes it) is compiled as C++20 by
//! clang against `metal_shim.h`, and every threadgroup's threads run as cooperative fibers
//! on the CPU: `threadgroup_barrier` waits until every live thread of the group arrives,
//! simd collectives wait for every live lane of the simdgroup, `threadgroup` arrays are
//! shared by the group (and start as NaN, +3.4e38 and -1.7e38 words in turn, so reads
//! before writes show whatever the kernel computes with them), atomics are
//! real atomics and `simdgroup_matrix` products are computed as a collective. Threads run
//! until they block, under one of several schedules ([`LaneOrder`]: forward or reverse lane
//! order, one SIMD-group running ahead of the others, seeded random); a missing barrier
//! changes the result in at least one of them ([`run_all_orders`]). This proves
//! correctness, not speed.
//!
//! As with `dispatchThreads`, edge threadgroups are partial: only in-grid threads exist,
//! `threads_per_threadgroup` is the group's actual size and
//! `dispatch_threads_per_threadgroup` the requested one. Faults in kernel code (integer
//! division by zero, a wild pointer, a thread overflowing its 256 KiB stack) come back as
//! [`Error::Runtime`] naming the thread. Every buffer sits against a guard page: a load or
//! store outside it is an [`Error::Runtime`] naming the access, the buffer, the element,
//! the program and the kernel line (reverse schedules guard the start, the others the end;
//! a write on the unguarded side is found after the launch).
//!
//! The compile is strict, to fail where Metal fails: `device`, `constant` and
//! `threadgroup` are distinct address spaces, the kernel is held to C++17 (MSL 3's base),
//! the library rejects what Metal's does (`simd_*` on bool or 64-bit values, float atomics
//! other than load/store/exchange/add, 64-bit atomics, mixed-type `min`/`max`, integer
//! `simdgroup_matrix`, VLAs, `double`), and the kernel sees no host target macros, so the
//! `#else` branches only a Metal compiler takes are the ones compiled. Launches are
//! checked as Metal checks them: at most 31 buffers (MLX binds every scalar as one), 1024
//! threads and 32 KB of threadgroup memory per threadgroup.
//!
//! Not emulated: MLX's own `metal::utils()` helpers (`Limits`, `elem_to_loc`, ...), bool
//! vectors produced by vector comparisons (clang yields integer masks), `bfloat` vectors
//! beyond element access, textures, and simd collectives inside divergent control flow
//! (reported as a deadlock). Numerics are the host's (libm), not Apple's.
//!
//! ```no_run
//! use triton_metal::emu::{self, EmuBuffer, MetalLaunch, OutputSpec};
//! use triton_metal::DType;
//! # fn main() -> triton_metal::Result<()> {
//! let x: Vec<f32> = (0..100).map(|i| i as f32).collect();
//! let launch = MetalLaunch::new(
//!     "double",
//!     "uint i = thread_position_in_grid.x;\n  if (i < 100) out[i] = 2.0f * x[i];",
//! )
//! .input(EmuBuffer::new("x", &[100], &x))
//! .output(OutputSpec::new("out", DType::F32, &[100]))
//! .grid([128, 1, 1])
//! .threadgroup([64, 1, 1]);
//! let out = emu::run_all_orders(&launch)?;
//! assert_eq!(out[0].to_vec::<f32>()?[3], 6.0);
//! # Ok(()) }
//! ```

mod arrays;
mod guard;
mod rewrite;
pub mod signature;

use std::ffi::{c_char, c_void};

use guard::{Edge, Guarded};

pub use crate::clang::{cache_dir, METAL_CORE};
pub use signature::{MlxKernel, Param, SigInput, TemplateArg};

use crate::clang::{self, Build, MISSING_CLANG};
use crate::{DType, Element, Error, Result};

/// The shim's runtime half (fibers, barriers, simd collectives, atomics), compiled after
/// [`METAL_CORE`] in front of every kernel (stands in for MLX's `metal::utils()`).
pub const METAL_SHIM: &str = include_str!("metal_shim.h");

/// Most threads a Metal threadgroup may have.
pub const MAX_THREADS_PER_THREADGROUP: usize = 1024;
/// Threadgroup memory of Apple GPUs, in bytes (checked before a launch where the kernel's
/// declarations have known sizes, and as the kernel runs).
pub const MAX_THREADGROUP_MEMORY: usize = 32768;
/// Buffer slots a Metal kernel may bind.
pub const MAX_BUFFERS: usize = 31;

/// `tm_emu_launch(bufs, grid, threadgroup, schedule, seed, workers, err, errlen)` in the .so.
pub(crate) type LaunchFn = unsafe extern "C" fn(
    *const *mut c_void,
    *const u32,
    *const u32,
    i32,
    u64,
    i32,
    *mut c_char,
    usize,
) -> i32;

/// The emulator's build: `-O1` keeps compiles fast while inlining the shim.
/// Stack-clash protection probes big stack frames page by page, so a kernel whose locals
/// overflow its fiber stack hits the guard page instead of writing over other memory.
/// Warnings are off except the ones that hold the kernel to what Metal compiles: C++20
/// features (MSL 3 is C++17; the shim, a system header, may use them) and variable-length
/// arrays are errors (`-Wvla-extension` before clang 18, `-Wvla-cxx-extension` since).
/// Line tables let a fault name the kernel line that made it.
const FLAGS: [&str; 16] = [
    "-std=c++20",
    "-O1",
    "-gline-tables-only",
    "-shared",
    "-fPIC",
    "-fno-exceptions",
    "-fno-rtti",
    "-pthread",
    "-Wno-everything",
    "-Werror=pre-c++20-compat-pedantic",
    "-Werror=vla-extension",
    "-Werror=vla-cxx-extension",
    "-ferror-limit=20",
    "-fno-color-diagnostics",
    "-ffp-contract=off",
    "-fstack-clash-protection",
];

/// Compiles (or finds in the cache) `cpp` and returns its launch entry. `msl` is the
/// kernel as MLX wrote it, quoted in compile errors.
pub(crate) fn load(cpp: &str, kernel: &str, msl: &str) -> Result<LaunchFn> {
    let build = Build {
        flags: FLAGS.to_vec(),
        symbol: b"tm_emu_launch\0",
        backend: "emulator",
        source_tag: "kernel.metal",
        key: String::new(),
    };
    let f = clang::load_symbol(cpp, kernel, msl, &build)?;
    // SAFETY: the harness appends `tm_emu_launch` with exactly this signature.
    Ok(unsafe { std::mem::transmute::<*const c_void, LaunchFn>(f) })
}

/// Whether the emulator can run here.
#[derive(Clone, Copy, Debug)]
pub struct Emulator;

impl Emulator {
    /// True when a suitable clang (>= 15) was found.
    pub fn available() -> bool {
        clang::clang().is_some()
    }

    /// The compiler's `--version` line, if one was found.
    pub fn compiler_version() -> Option<&'static str> {
        clang::clang().map(|c| c.version.as_str())
    }

    /// For tests: `Ok(true)` when the emulator is available; otherwise prints a notice and
    /// returns `Ok(false)` (skip), unless `TRITON_METAL_REQUIRE_EMU` is set (CI), in which
    /// case the missing compiler is an error.
    pub fn should_run(test: &str) -> Result<bool> {
        if Self::available() {
            return Ok(true);
        }
        let required = std::env::var("TRITON_METAL_REQUIRE_EMU")
            .map(|v| !v.is_empty() && v != "0")
            .unwrap_or(false);
        if required {
            return Err(Error::Unsupported(format!(
                "{test}: TRITON_METAL_REQUIRE_EMU is set but {MISSING_CLANG}"
            )));
        }
        eprintln!("skipping {test}: {MISSING_CLANG}");
        Ok(false)
    }
}

/// A buffer going into or coming out of an emulated kernel: raw bytes in `dtype`'s layout
/// (bf16 and f16 as their 16-bit patterns, bool as one byte), row-major.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmuBuffer {
    /// Parameter name in the kernel.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape (empty for a 0-d scalar).
    pub shape: Vec<usize>,
    /// `size * dtype.size_bytes()` bytes.
    pub bytes: Vec<u8>,
}

impl EmuBuffer {
    /// A buffer holding `data` with the given shape (`data.len()` must match it; checked
    /// when the kernel is run).
    pub fn new<T: Element>(name: &str, shape: &[usize], data: &[T]) -> EmuBuffer {
        let n = std::mem::size_of_val(data);
        // SAFETY: `Element` types are plain data; reading their bytes is always valid.
        let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), n) };
        EmuBuffer {
            name: name.into(),
            dtype: T::DTYPE,
            shape: shape.to_vec(),
            bytes: bytes.to_vec(),
        }
    }

    /// A 0-d input (passed as `const constant T&`).
    pub fn scalar<T: Element>(name: &str, value: T) -> EmuBuffer {
        EmuBuffer::new(name, &[], &[value])
    }

    /// Number of elements.
    pub fn size(&self) -> usize {
        self.shape.iter().product()
    }

    /// The elements, if `T` matches the dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype {
            return Err(Error::InvalidArgument(format!(
                "buffer `{}` holds {}, not {}",
                self.name,
                self.dtype,
                T::DTYPE
            )));
        }
        let n = self.bytes.len() / std::mem::size_of::<T>();
        let mut v = Vec::<T>::with_capacity(n);
        // SAFETY: capacity is n elements; every byte pattern written by a kernel into a
        // non-bool buffer is a valid `T`. For bool, values other than 0/1 are mapped first.
        unsafe {
            if T::DTYPE == DType::Bool {
                let fixed: Vec<u8> = self.bytes.iter().map(|b| (*b != 0) as u8).collect();
                std::ptr::copy_nonoverlapping(fixed.as_ptr(), v.as_mut_ptr().cast::<u8>(), n);
            } else {
                std::ptr::copy_nonoverlapping(
                    self.bytes.as_ptr(),
                    v.as_mut_ptr().cast::<u8>(),
                    n * std::mem::size_of::<T>(),
                );
            }
            v.set_len(n);
        }
        Ok(v)
    }
}

/// An output: name, dtype, shape and MLX's `init_value` (filled before the launch; without
/// it the buffer is filled with 0xff bytes, NaN for floats, so unwritten elements show).
#[derive(Clone, Debug, PartialEq)]
pub struct OutputSpec {
    /// Parameter name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<usize>,
    /// Fill value, converted to `dtype` as MLX does.
    pub init: Option<f32>,
}

impl OutputSpec {
    /// An output without an init value.
    pub fn new(name: &str, dtype: DType, shape: &[usize]) -> OutputSpec {
        OutputSpec {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
            init: None,
        }
    }

    /// Sets the init value.
    pub fn init(mut self, value: f32) -> OutputSpec {
        self.init = Some(value);
        self
    }
}

/// The schedule of a threadgroup's threads: which runnable thread (one not waiting at a
/// barrier or a simd collective) resumes next. A thread runs until it blocks. Every
/// schedule is one a GPU could produce, so a correct kernel gives the same result in all
/// of them; a missing barrier changes it in at least one ([`run_all_orders`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LaneOrder {
    /// Passes over the runnable threads, thread 0 first: SIMD-groups advance together
    /// from one blocking point to the next.
    #[default]
    Forward,
    /// The same, last thread first.
    Reverse,
    /// One SIMD-group at a time, the first first: it runs past its collectives until all
    /// of its threads wait at a threadgroup barrier or have finished, before the next
    /// SIMD-group starts (one runs ahead, the others lag).
    SimdgroupsForward,
    /// One SIMD-group at a time, the last first, lanes in reverse order.
    SimdgroupsReverse,
    /// A runnable thread picked at random (the seed makes it repeatable) runs until it
    /// blocks.
    Shuffled(u64),
}

impl LaneOrder {
    /// Every deterministic schedule plus two seeded random ones: what
    /// [`run_all_orders`] runs.
    pub const ALL: [LaneOrder; 6] = [
        LaneOrder::Forward,
        LaneOrder::Reverse,
        LaneOrder::SimdgroupsForward,
        LaneOrder::SimdgroupsReverse,
        LaneOrder::Shuffled(1),
        LaneOrder::Shuffled(0x5eed),
    ];

    /// The schedule's code and seed, as the shim's `tm_rt::launch` takes them.
    fn code(self) -> (i32, u64) {
        match self {
            LaneOrder::Forward => (0, 0),
            LaneOrder::Reverse => (1, 0),
            LaneOrder::SimdgroupsForward => (2, 0),
            LaneOrder::SimdgroupsReverse => (3, 0),
            LaneOrder::Shuffled(seed) => (4, seed),
        }
    }
}

impl std::fmt::Display for LaneOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LaneOrder::Forward => write!(f, "forward lane order"),
            LaneOrder::Reverse => write!(f, "reverse lane order"),
            LaneOrder::SimdgroupsForward => write!(f, "first-SIMD-group-ahead order"),
            LaneOrder::SimdgroupsReverse => write!(f, "last-SIMD-group-ahead order"),
            LaneOrder::Shuffled(seed) => write!(f, "shuffled order (seed {seed})"),
        }
    }
}

/// One `metal_kernel` launch, as it would be made through MLX.
#[derive(Clone, Debug)]
pub struct MetalLaunch {
    /// Kernel name given to `metal_kernel`.
    pub name: String,
    /// Kernel body.
    pub source: String,
    /// Header (helpers placed before the kernel).
    pub header: String,
    /// Inputs, in order.
    pub inputs: Vec<EmuBuffer>,
    /// Outputs, in order.
    pub outputs: Vec<OutputSpec>,
    /// Grid in threads (MLX dispatches with `dispatchThreads`).
    pub grid: [usize; 3],
    /// Threadgroup size (clamped to the grid, as MLX does).
    pub threadgroup: [usize; 3],
    /// Template arguments.
    pub template_args: Vec<(String, TemplateArg)>,
    /// `atomic_outputs` of `metal_kernel`.
    pub atomic_outputs: bool,
    /// Thread resumption order within a threadgroup.
    pub lane_order: LaneOrder,
    /// OS threads running threadgroups in parallel; 0 = one per core.
    pub workers: usize,
}

impl MetalLaunch {
    /// A launch of `source` with no buffers, a grid of one thread and a threadgroup of one.
    pub fn new(name: &str, source: &str) -> MetalLaunch {
        MetalLaunch {
            name: name.into(),
            source: source.into(),
            header: String::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            grid: [1, 1, 1],
            threadgroup: [1, 1, 1],
            template_args: Vec::new(),
            atomic_outputs: false,
            lane_order: LaneOrder::Forward,
            workers: 0,
        }
    }

    /// Sets the header.
    pub fn header(mut self, header: &str) -> Self {
        self.header = header.into();
        self
    }

    /// Appends an input.
    pub fn input(mut self, buffer: EmuBuffer) -> Self {
        self.inputs.push(buffer);
        self
    }

    /// Appends an output.
    pub fn output(mut self, output: OutputSpec) -> Self {
        self.outputs.push(output);
        self
    }

    /// Sets the grid (in threads).
    pub fn grid(mut self, grid: [usize; 3]) -> Self {
        self.grid = grid;
        self
    }

    /// Sets the threadgroup size.
    pub fn threadgroup(mut self, threadgroup: [usize; 3]) -> Self {
        self.threadgroup = threadgroup;
        self
    }

    /// Appends a template argument.
    pub fn template_arg(mut self, name: &str, arg: TemplateArg) -> Self {
        self.template_args.push((name.into(), arg));
        self
    }

    /// Sets `atomic_outputs`.
    pub fn atomic_outputs(mut self, atomic: bool) -> Self {
        self.atomic_outputs = atomic;
        self
    }

    /// Sets the lane order.
    pub fn lane_order(mut self, order: LaneOrder) -> Self {
        self.lane_order = order;
        self
    }

    /// Sets the number of worker threads (0 = one per core).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// The buffers Metal binds for this launch: inputs, outputs, scalars (MLX passes each
    /// as one buffer) and any `_shape`/`_strides`/`_ndim` arrays; at most [`MAX_BUFFERS`].
    pub fn buffers(&self) -> usize {
        self.signature()
            .params()
            .iter()
            .filter(|p| !matches!(p, Param::Attribute { .. }))
            .count()
    }

    /// What MLX's signature writer sees for this launch.
    pub fn signature(&self) -> MlxKernel {
        MlxKernel {
            name: self.name.clone(),
            header: self.header.clone(),
            source: self.source.clone(),
            inputs: self
                .inputs
                .iter()
                .map(|b| SigInput {
                    name: b.name.clone(),
                    dtype: b.dtype,
                    shape: b.shape.clone(),
                })
                .collect(),
            outputs: self
                .outputs
                .iter()
                .map(|o| (o.name.clone(), o.dtype))
                .collect(),
            template_args: self.template_args.clone(),
            atomic_outputs: self.atomic_outputs,
        }
    }

    /// The Metal source MLX would compile (after its `metal::utils()` preamble).
    pub fn msl(&self) -> Result<String> {
        self.signature().source()
    }

    fn runtime_err(&self, msg: String) -> Error {
        Error::Runtime {
            kernel: self.name.clone(),
            msg,
        }
    }

    fn launch_err(&self, msg: String) -> Error {
        Error::Launch {
            kernel: self.name.clone(),
            msg,
        }
    }

    fn validate(&self) -> Result<()> {
        for (what, dims) in [("grid", self.grid), ("threadgroup", self.threadgroup)] {
            if dims.contains(&0) || dims.iter().any(|d| *d > u32::MAX as usize) {
                return Err(self.launch_err(format!(
                    "{what} {dims:?} must be 1..=2^32-1 in every dimension"
                )));
            }
        }
        // MLX clamps the threadgroup to the grid before dispatching.
        let threads: usize = (0..3)
            .map(|d| self.threadgroup[d].min(self.grid[d]))
            .product();
        if threads > MAX_THREADS_PER_THREADGROUP {
            return Err(self.launch_err(format!(
                "threadgroup {:?} has {threads} threads; Metal allows at most \
                 {MAX_THREADS_PER_THREADGROUP} threads per threadgroup",
                self.threadgroup
            )));
        }
        let dtypes = self
            .inputs
            .iter()
            .map(|b| b.dtype)
            .chain(self.outputs.iter().map(|o| o.dtype));
        for d in dtypes {
            if d == DType::F64 {
                return Err(Error::Unsupported(format!(
                    "kernel `{}`: Metal GPUs have no float64",
                    self.name
                )));
            }
        }
        for b in &self.inputs {
            if b.bytes.len() != b.size() * b.dtype.size_bytes() {
                return Err(Error::InvalidArgument(format!(
                    "input `{}`: {} bytes for shape {:?} of {}",
                    b.name,
                    b.bytes.len(),
                    b.shape,
                    b.dtype
                )));
            }
        }
        let buffers = self.buffers();
        if buffers > MAX_BUFFERS {
            return Err(self.launch_err(format!(
                "{buffers} buffers (inputs, outputs and scalars, which MLX passes as one \
                 buffer each, and any `_shape`/`_strides`/`_ndim`); Metal binds at most \
                 {MAX_BUFFERS} buffers per kernel (pack scalars into one array)"
            )));
        }
        Ok(())
    }
}

/// `value` in `dtype`'s byte layout, converted as MLX's `array(value, dtype)` would.
fn fill_bytes(dtype: DType, value: f32) -> Vec<u8> {
    match dtype {
        DType::Bool => vec![(value != 0.0) as u8],
        DType::I8 => (value as i8).to_le_bytes().to_vec(),
        DType::I16 => (value as i16).to_le_bytes().to_vec(),
        DType::I32 => (value as i32).to_le_bytes().to_vec(),
        DType::I64 => (value as i64).to_le_bytes().to_vec(),
        DType::U8 => (value as u8).to_le_bytes().to_vec(),
        DType::U16 => (value as u16).to_le_bytes().to_vec(),
        DType::U32 => (value as u32).to_le_bytes().to_vec(),
        DType::U64 => (value as u64).to_le_bytes().to_vec(),
        DType::F16 => half::f16::from_f32(value).to_le_bytes().to_vec(),
        DType::BF16 => half::bf16::from_f32(value).to_le_bytes().to_vec(),
        DType::F32 => value.to_le_bytes().to_vec(),
        DType::F64 => (value as f64).to_le_bytes().to_vec(),
    }
}

/// The C++ the harness compiles: shim, rewritten MLX source, and the launch entry.
///
/// The shim is marked as a system header (GNU line markers with flag 3), so the C++20 it
/// uses is allowed while the kernel's own lines are held to C++17, the language MSL 3 is
/// built on (clang's `pre-c++20-compat` diagnostics are errors, see `FLAGS`). The
/// kernel never sees the host's target macros, so it compiles the branches a Metal compiler
/// would take, and `double` (no such type in Metal) is not a type name in it.
/// Also returns the threadgroup memory the kernel declares, where known.
fn cpp_source(k: &MlxKernel, msl: &str) -> Result<(String, Option<usize>)> {
    let name = k.kernel_name()?;
    let rewritten = rewrite::rewrite(msl, &k.name)?;
    let body = rewritten.cpp;
    let mut args = Vec::new();
    for p in k.params() {
        args.push(match p {
            Param::Input { input, buffer } => {
                if k.inputs[input].is_scalar() {
                    format!("::tm_rt::AnyRef{{b[{buffer}]}}")
                } else {
                    format!("::tm_rt::AnyPtr{{b[{buffer}]}}")
                }
            }
            Param::Ndim { buffer, .. } => format!("::tm_rt::AnyRef{{b[{buffer}]}}"),
            Param::Shape { buffer, .. }
            | Param::Strides { buffer, .. }
            | Param::Output { buffer, .. } => format!("::tm_rt::AnyPtr{{b[{buffer}]}}"),
            Param::Attribute { name, .. } => format!("a.{name}"),
        });
    }
    // `bfloat` is a class here, and clang calls no member of a class on an object in a
    // non-default address space: kernels using it keep one address space and the host's
    // target macros (the branches written for CPU builds of such bodies).
    let spaces = !msl.contains("bfloat");
    let (no_spaces, hide, unhide) = if spaces {
        (
            "",
            "#pragma push_macro(\"__x86_64__\")\n#pragma push_macro(\"__aarch64__\")\n#undef __x86_64__\n#undef __aarch64__\n",
            "#pragma pop_macro(\"__aarch64__\")\n#pragma pop_macro(\"__x86_64__\")\n",
        )
    } else {
        ("#define TM_NO_ADDRESS_SPACES 1\n", "", "")
    };
    let cpp = format!(
        "# 1 \"metal_core.h\" 3\n#define TM_METAL_MODEL 1\n{no_spaces}{METAL_CORE}\n# 1 \"metal_shim.h\" 3\n{METAL_SHIM}\n\
{hide}#define double tm_metal_has_no_double\n\
# 1 \"kernel.metal\"\n{body}\n# 1 \"tm_entry.cpp\" 3\n#undef double\n{unhide}\
static void tm_thunk(void** b, const ::tm_rt::Attrs& a) {{\n  (void)b; (void)a;\n  {name}{targs}({args});\n}}\n\
extern \"C\" __attribute__((visibility(\"default\"))) int tm_emu_launch(void** bufs, const uint32_t* grid, \
const uint32_t* tg, int schedule, uint64_t seed, int workers, char* err, size_t errlen) {{\n  \
return ::tm_rt::launch(&tm_thunk, bufs, grid, tg, schedule, seed, workers, err, errlen);\n}}\n",
        targs = k.template_def(),
        args = args.join(", "),
    );
    Ok((cpp, rewritten.threadgroup_bytes))
}

/// Compiles (cached) and runs one launch; returns the outputs in order.
pub fn run(launch: &MetalLaunch) -> Result<Vec<EmuBuffer>> {
    launch.validate()?;
    let sig = launch.signature();
    let msl = sig.source()?;
    let (cpp, tg_bytes) = cpp_source(&sig, &msl)?;
    if let Some(bytes) = tg_bytes.filter(|b| *b > MAX_THREADGROUP_MEMORY) {
        return Err(launch.launch_err(format!(
            "the kernel declares {bytes} bytes of threadgroup memory; Metal allows at most \
             {MAX_THREADGROUP_MEMORY} (32 KB) per threadgroup"
        )));
    }
    let entry = load(&cpp, &launch.name, &msl)?;

    // Reads before a buffer's start fault in the reverse schedules, reads past its end in
    // the others; writes outside it are found in every schedule.
    let edge = match launch.lane_order {
        LaneOrder::Reverse | LaneOrder::SimdgroupsReverse => Edge::Start,
        _ => Edge::End,
    };
    let mut contents: Vec<(String, usize, Vec<u8>)> = Vec::new();
    for p in sig.params() {
        let i32s = |v: &mut dyn Iterator<Item = i32>| -> Vec<u8> {
            v.flat_map(|d| d.to_le_bytes()).collect()
        };
        match p {
            Param::Input { input, .. } => {
                let b = &launch.inputs[input];
                contents.push((
                    format!("input `{}`", b.name),
                    b.dtype.size_bytes(),
                    b.bytes.clone(),
                ));
            }
            Param::Shape { input, .. } => {
                let b = &launch.inputs[input];
                let bytes = i32s(&mut b.shape.iter().map(|d| *d as i32));
                contents.push((format!("`{}_shape`", b.name), 4, bytes));
            }
            Param::Strides { input, .. } => {
                // Inputs are row-contiguous (MLX's ensure_row_contiguous default).
                let b = &launch.inputs[input];
                let mut strides = vec![0i64; b.shape.len()];
                let mut acc = 1i64;
                for (s, d) in strides.iter_mut().zip(&b.shape).rev() {
                    *s = acc;
                    acc *= *d as i64;
                }
                let bytes = strides.iter().flat_map(|s| s.to_le_bytes()).collect();
                contents.push((format!("`{}_strides`", b.name), 8, bytes));
            }
            Param::Ndim { input, .. } => {
                let b = &launch.inputs[input];
                let bytes = (b.shape.len() as i32).to_le_bytes().to_vec();
                contents.push((format!("`{}_ndim`", b.name), 4, bytes));
            }
            Param::Output { output, .. } => {
                let o = &launch.outputs[output];
                let n: usize = o.shape.iter().product();
                let bytes = match o.init {
                    Some(v) => fill_bytes(o.dtype, v).repeat(n),
                    None => vec![0xff; n * o.dtype.size_bytes()],
                };
                contents.push((format!("output `{}`", o.name), o.dtype.size_bytes(), bytes));
            }
            Param::Attribute { .. } => {}
        }
    }
    let buffers = contents
        .iter()
        .map(|(_, _, bytes)| Guarded::new(bytes, edge))
        .collect::<std::result::Result<Vec<_>, String>>()
        .map_err(|msg| launch.runtime_err(msg))?;
    let ptrs: Vec<*mut c_void> = buffers.iter().map(Guarded::ptr).collect();
    let grid = launch.grid.map(|d| d as u32);
    let tg = launch.threadgroup.map(|d| d as u32);
    let workers = if launch.workers == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        launch.workers
    };
    let (schedule, seed) = launch.lane_order.code();
    let mut err = vec![0u8; 1024];
    // SAFETY: `ptrs` holds one live buffer per buffer parameter, each as large as the
    // kernel's view of it and between guard pages (an access outside it faults, which the
    // shim turns into an error); grid/tg point at 3 u32s; err has errlen bytes.
    let rc = unsafe {
        entry(
            ptrs.as_ptr(),
            grid.as_ptr(),
            tg.as_ptr(),
            schedule,
            seed,
            workers.min(64) as i32,
            err.as_mut_ptr().cast(),
            err.len(),
        )
    };
    if rc != 0 {
        let len = err.iter().position(|b| *b == 0).unwrap_or(err.len());
        let msg = String::from_utf8_lossy(&err[..len]).into_owned();
        return Err(launch.runtime_err(describe_fault(&msg, &contents, &buffers, &msl)));
    }
    for (b, (name, _, _)) in buffers.iter().zip(&contents) {
        if let Some(offset) = b.overrun() {
            return Err(launch.runtime_err(format!(
                "the kernel wrote outside {name} ({} bytes): byte offset {offset} changed",
                b.len
            )));
        }
    }
    let first_output = buffers.len() - launch.outputs.len();
    Ok(launch
        .outputs
        .iter()
        .zip(&buffers[first_output..])
        .map(|(o, b)| EmuBuffer {
            name: o.name.clone(),
            dtype: o.dtype,
            shape: o.shape.clone(),
            bytes: b.bytes(),
        })
        .collect())
}

/// The shim's failure message, with a memory fault inside a buffer's mapping turned into
/// an out-of-bounds report: the access (read or write), the buffer and element, the
/// thread and its program (threadgroup), and the kernel line that made it. Other
/// messages pass through without the machine-readable tail.
fn describe_fault(
    msg: &str,
    contents: &[(String, usize, Vec<u8>)],
    buffers: &[Guarded],
    msl: &str,
) -> String {
    let Some(at) = msg.find(" tm_fault{") else {
        return msg.to_string();
    };
    let (head, tail) = (&msg[..at], &msg[at + " tm_fault{".len()..]);
    let field = |name: &str| -> Option<&str> {
        let rest = &tail[tail.find(&format!("{name}="))? + name.len() + 1..];
        Some(&rest[..rest.find([',', '}'])?])
    };
    let hex = |v: &str| usize::from_str_radix(v.trim_start_matches("0x"), 16).ok();
    let Some(addr) = field("addr").and_then(hex) else {
        return head.to_string();
    };
    let Some((i, offset)) = buffers
        .iter()
        .enumerate()
        .find_map(|(i, b)| b.offset_of(addr).map(|o| (i, o)))
    else {
        return head.to_string();
    };
    let (name, elem, _) = &contents[i];
    let access = match field("write") {
        Some("1") => "a store",
        Some("0") => "a load",
        _ => "an access",
    };
    let (group, thread) = match (
        head.find("threadgroup ("),
        head.find("thread_position_in_grid ("),
    ) {
        (Some(g), Some(t)) => {
            let paren = |s: &str| s[..s.find(')').map_or(s.len(), |e| e + 1)].to_string();
            (
                paren(&head[g + "threadgroup ".len()..]),
                paren(&head[t + "thread_position_in_grid ".len()..]),
            )
        }
        _ => ("(?)".into(), "(?)".into()),
    };
    // The shared object's path comes last: it runs to the closing brace.
    let so = tail
        .find("so=")
        .and_then(|i| Some(&tail[i + 3..tail.rfind('}')?]));
    let line = field("pc")
        .and_then(hex)
        .zip(so)
        .and_then(|(pc, so)| kernel_line(std::path::Path::new(so), pc, msl))
        .map(|l| format!(" at {l}"))
        .unwrap_or_default();
    format!(
        "{access}{line} in program {group} (thread_position_in_grid {thread}): element offset \
         {} is out of bounds for {name} ({} elements)",
        offset.div_euclid(*elem as isize),
        buffers[i].len / elem
    )
}

/// The kernel line (and its text) of the instruction at `pc` bytes into the kernel's shared
/// object, found with llvm-symbolizer (beside clang) in the line tables; the outermost
/// kernel frame of an inlined helper.
fn kernel_line(so: &std::path::Path, pc: usize, msl: &str) -> Option<String> {
    let clang = clang::clang()?;
    let file = clang.path.file_name()?.to_str()?;
    let tool = clang
        .path
        .with_file_name(file.replacen("clang++", "llvm-symbolizer", 1));
    let out = std::process::Command::new(&tool)
        .arg(format!("--obj={}", so.display()))
        .arg(format!("0x{pc:x}"))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let n = text.lines().rev().find_map(|l| {
        let (file, rest) = l.rsplit_once("kernel.metal:")?;
        (file.is_empty() || file.ends_with('/')).then_some(())?;
        rest.split(':').next()?.parse::<usize>().ok()
    })?;
    let source = msl.lines().nth(n.checked_sub(1)?)?.trim();
    Some(format!("line {n} of the kernel (`{source}`)"))
}

/// Runs in every schedule of [`LaneOrder::ALL`] and returns the forward outputs, or an
/// error naming the first schedule and element that differ from forward order (usually a
/// missing barrier). With `atomic_outputs`, float outputs may differ by rounding (the order
/// of atomic adds).
pub fn run_all_orders(launch: &MetalLaunch) -> Result<Vec<EmuBuffer>> {
    let fwd = run(&launch.clone().lane_order(LaneOrder::Forward))?;
    for order in &LaneOrder::ALL[1..] {
        let other = run(&launch.clone().lane_order(*order))?;
        for (a, b) in fwd.iter().zip(&other) {
            if let Some(i) = first_difference(a, b, launch.atomic_outputs) {
                return Err(Error::Runtime {
                    kernel: launch.name.clone(),
                    msg: format!(
                        "output `{}` differs between forward lane order and {order} at element \
                         {i} (a missing threadgroup_barrier?)",
                        a.name
                    ),
                });
            }
        }
    }
    Ok(fwd)
}

fn first_difference(a: &EmuBuffer, b: &EmuBuffer, tolerant: bool) -> Option<usize> {
    let w = a.dtype.size_bytes();
    let value = |bytes: &[u8]| -> Option<f64> {
        match a.dtype {
            DType::F32 => Some(f32::from_le_bytes(bytes.try_into().ok()?) as f64),
            DType::F16 => Some(half::f16::from_le_bytes(bytes.try_into().ok()?).to_f64()),
            DType::BF16 => Some(half::bf16::from_le_bytes(bytes.try_into().ok()?).to_f64()),
            _ => None,
        }
    };
    a.bytes.chunks(w).zip(b.bytes.chunks(w)).position(|(x, y)| {
        if x == y {
            return false;
        }
        match (tolerant, value(x), value(y)) {
            (true, Some(p), Some(q)) => {
                !((p - q).abs() <= 1e-5 * p.abs().max(q.abs()) || (p.is_nan() && q.is_nan()))
            }
            _ => true,
        }
    })
}

#[cfg(test)]
mod tests;
