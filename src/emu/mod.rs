//! Runs Metal kernels on Linux: the emulation harness.
//!
//! No tool on Linux reads MSL, so the kernel MLX would compile on a Mac (its signature
//! written by [`signature::MlxKernel`], exactly as MLX writes it) is compiled as C++20 by
//! clang against `metal_shim.h`, and every threadgroup's threads run as cooperative fibers
//! on the CPU: `threadgroup_barrier` waits until every live thread of the group arrives,
//! simd collectives wait for every live lane of the simdgroup, `threadgroup` arrays are
//! shared by the group (and start as 0xff bytes, so reads before writes show), atomics are
//! real atomics and `simdgroup_matrix` products are computed as a collective. Threads run
//! until they block, in forward or in reverse lane order ([`LaneOrder`]); a missing barrier
//! changes the result in at least one of the two. This proves correctness, not speed.
//!
//! As with `dispatchThreads`, edge threadgroups are partial: only in-grid threads exist,
//! `threads_per_threadgroup` is the group's actual size and
//! `dispatch_threads_per_threadgroup` the requested one. Faults in kernel code (integer
//! division by zero, a wild pointer, a thread overflowing its 256 KiB stack) come back as
//! [`Error::Runtime`] naming the thread. Every buffer sits between canary zones (256 bytes
//! before, 4 KiB after): a write outside it is reported as an error, a read outside it
//! sees 0xfe bytes (about -1.7e38 as float).
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
pub(crate) mod compile;
mod rewrite;
pub mod signature;

use std::ffi::c_void;

pub use arrays::run_call;
pub use compile::cache_dir;
pub use signature::{MlxKernel, Param, SigInput, TemplateArg};

use crate::{DType, Element, Error, Result};

/// Metal's types and math as C++ (no runtime): the first half of the shim, shared with the
/// compiled CPU executor.
pub const METAL_CORE: &str = include_str!("metal_core.h");

/// The shim's runtime half (fibers, barriers, simd collectives, atomics), compiled after
/// [`METAL_CORE`] in front of every kernel (stands in for MLX's `metal::utils()`).
pub const METAL_SHIM: &str = include_str!("metal_shim.h");

/// Most threads a Metal threadgroup may have.
pub const MAX_THREADS_PER_THREADGROUP: usize = 1024;
/// Threadgroup memory of Apple GPUs, in bytes (checked as the kernel runs).
pub const MAX_THREADGROUP_MEMORY: usize = 32768;
/// Buffer slots a Metal kernel may bind.
pub const MAX_BUFFERS: usize = 31;

const MISSING_CLANG: &str = "the Metal emulator needs clang >= 15 (`_Float16` stands in for \
    Metal's `half`): install it, e.g. `apt-get install clang-19`, or point \
    TRITON_METAL_EMU_CXX at a clang++";

/// Whether the emulator can run here.
#[derive(Clone, Copy, Debug)]
pub struct Emulator;

impl Emulator {
    /// True when a suitable clang (>= 15) was found.
    pub fn available() -> bool {
        compile::clang().is_some()
    }

    /// The compiler's `--version` line, if one was found.
    pub fn compiler_version() -> Option<&'static str> {
        compile::clang().map(|c| c.version.as_str())
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

/// The order in which the runnable threads of a threadgroup are resumed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LaneOrder {
    /// Thread 0 first.
    #[default]
    Forward,
    /// Last thread first.
    Reverse,
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
        let threads: usize = self.threadgroup.iter().product();
        if threads > MAX_THREADS_PER_THREADGROUP {
            return Err(self.launch_err(format!(
                "threadgroup {:?} has {threads} threads; Metal allows at most {MAX_THREADS_PER_THREADGROUP}",
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
        let buffers = self
            .signature()
            .params()
            .iter()
            .filter(|p| !matches!(p, Param::Attribute { .. }))
            .count();
        if buffers > MAX_BUFFERS {
            return Err(self.launch_err(format!(
                "{buffers} buffers; Metal binds at most {MAX_BUFFERS} (pack scalars)"
            )));
        }
        Ok(())
    }
}

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Block([u8; 64]);

/// Bytes written around every buffer; a kernel that writes outside its buffers changes
/// them, which [`AlignedBox::overrun`] reports. Reads of them give huge negative floats.
const CANARY: u8 = 0xfe;
const FRONT: usize = 256;
const BACK: usize = 4096;

/// 64-byte-aligned heap bytes between canary zones: kernels load `float4`s and the
/// compiler may use aligned vector instructions, which a plain `Vec<u8>` would not satisfy.
struct AlignedBox {
    blocks: Vec<Block>,
    len: usize,
}

impl AlignedBox {
    fn new(bytes: &[u8]) -> AlignedBox {
        let total = FRONT + bytes.len().div_ceil(64) * 64 + BACK;
        let mut blocks = vec![Block([CANARY; 64]); total / 64];
        let flat = Self::flat(&mut blocks);
        flat[FRONT..FRONT + bytes.len()].copy_from_slice(bytes);
        AlignedBox {
            blocks,
            len: bytes.len(),
        }
    }
    fn flat(blocks: &mut [Block]) -> &mut [u8] {
        // SAFETY: `Block` is 64 plain bytes with no padding.
        unsafe {
            std::slice::from_raw_parts_mut(blocks.as_mut_ptr().cast::<u8>(), blocks.len() * 64)
        }
    }
    fn ptr(&mut self) -> *mut c_void {
        Self::flat(&mut self.blocks)[FRONT..].as_mut_ptr().cast()
    }
    fn bytes(&mut self) -> Vec<u8> {
        let len = self.len;
        Self::flat(&mut self.blocks)[FRONT..FRONT + len].to_vec()
    }
    /// Offset (relative to the buffer's start) of the first changed canary byte.
    fn overrun(&mut self) -> Option<isize> {
        let len = self.len;
        let flat = Self::flat(&mut self.blocks);
        if let Some(i) = flat[..FRONT].iter().position(|b| *b != CANARY) {
            return Some(i as isize - FRONT as isize);
        }
        let tail = FRONT + len;
        flat[tail..]
            .iter()
            .position(|b| *b != CANARY)
            .map(|i| (len + i) as isize)
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
fn cpp_source(k: &MlxKernel, msl: &str) -> Result<String> {
    let name = k.kernel_name()?;
    let body = rewrite::msl_to_cpp(msl, &k.name)?;
    let mut args = Vec::new();
    for p in k.params() {
        args.push(match p {
            Param::Input { input, buffer } => {
                let i = &k.inputs[input];
                let ty = signature::type_string(i.dtype);
                if i.is_scalar() {
                    format!("*(const {ty}*)b[{buffer}]")
                } else {
                    format!("(const {ty}*)b[{buffer}]")
                }
            }
            Param::Shape { buffer, .. } => format!("(const int*)b[{buffer}]"),
            Param::Strides { buffer, .. } => format!("(const int64_t*)b[{buffer}]"),
            Param::Ndim { buffer, .. } => format!("*(const int*)b[{buffer}]"),
            Param::Output { output, buffer } => {
                let ty = signature::type_string(k.outputs[output].1);
                if k.atomic_outputs {
                    format!("(::metal::atomic<{ty}>*)b[{buffer}]")
                } else {
                    format!("({ty}*)b[{buffer}]")
                }
            }
            Param::Attribute { name, .. } => format!("a.{name}"),
        });
    }
    Ok(format!(
        "#line 1 \"metal_core.h\"\n{METAL_CORE}\n#line 1 \"metal_shim.h\"\n{METAL_SHIM}\n#line 1 \"kernel.metal\"\n{body}\n#line 1 \"tm_entry.cpp\"\n\
static void tm_thunk(void** b, const ::tm_rt::Attrs& a) {{\n  (void)b; (void)a;\n  {name}{targs}({args});\n}}\n\
extern \"C\" __attribute__((visibility(\"default\"))) int tm_emu_launch(void** bufs, const uint32_t* grid, \
const uint32_t* tg, int reverse, int workers, char* err, size_t errlen) {{\n  \
return ::tm_rt::launch(&tm_thunk, bufs, grid, tg, reverse, workers, err, errlen);\n}}\n",
        targs = k.template_def(),
        args = args.join(", "),
    ))
}

/// Compiles (cached) and runs one launch; returns the outputs in order.
pub fn run(launch: &MetalLaunch) -> Result<Vec<EmuBuffer>> {
    launch.validate()?;
    let sig = launch.signature();
    let msl = sig.source()?;
    let cpp = cpp_source(&sig, &msl)?;
    let entry = compile::load(&cpp, &launch.name, &msl)?;

    let mut buffers: Vec<AlignedBox> = Vec::new();
    for p in sig.params() {
        match p {
            Param::Input { input, .. } => {
                buffers.push(AlignedBox::new(&launch.inputs[input].bytes))
            }
            Param::Shape { input, .. } => {
                let shape = &launch.inputs[input].shape;
                let b: Vec<u8> = shape
                    .iter()
                    .flat_map(|d| (*d as i32).to_le_bytes())
                    .collect();
                buffers.push(AlignedBox::new(&b));
            }
            Param::Strides { input, .. } => {
                // Inputs are row-contiguous (MLX's ensure_row_contiguous default).
                let shape = &launch.inputs[input].shape;
                let mut strides = vec![0i64; shape.len()];
                let mut acc = 1i64;
                for (s, d) in strides.iter_mut().zip(shape).rev() {
                    *s = acc;
                    acc *= *d as i64;
                }
                let b: Vec<u8> = strides.iter().flat_map(|s| s.to_le_bytes()).collect();
                buffers.push(AlignedBox::new(&b));
            }
            Param::Ndim { input, .. } => {
                let ndim = launch.inputs[input].shape.len() as i32;
                buffers.push(AlignedBox::new(&ndim.to_le_bytes()));
            }
            Param::Output { output, .. } => {
                let o = &launch.outputs[output];
                let n: usize = o.shape.iter().product();
                let bytes = match o.init {
                    Some(v) => fill_bytes(o.dtype, v).repeat(n),
                    None => vec![0xff; n * o.dtype.size_bytes()],
                };
                buffers.push(AlignedBox::new(&bytes));
            }
            Param::Attribute { .. } => {}
        }
    }
    let ptrs: Vec<*mut c_void> = buffers.iter_mut().map(AlignedBox::ptr).collect();
    let grid = launch.grid.map(|d| d as u32);
    let tg = launch.threadgroup.map(|d| d as u32);
    let workers = if launch.workers == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        launch.workers
    };
    let mut err = vec![0u8; 1024];
    // SAFETY: `ptrs` holds one live, aligned buffer per buffer parameter, each as large as
    // the kernel's view of it (out-of-bounds accesses by the kernel itself are its bug);
    // grid/tg point at 3 u32s; err has errlen bytes.
    let rc = unsafe {
        entry(
            ptrs.as_ptr(),
            grid.as_ptr(),
            tg.as_ptr(),
            (launch.lane_order == LaneOrder::Reverse) as i32,
            workers.min(64) as i32,
            err.as_mut_ptr().cast(),
            err.len(),
        )
    };
    if rc != 0 {
        let len = err.iter().position(|b| *b == 0).unwrap_or(err.len());
        return Err(Error::Runtime {
            kernel: launch.name.clone(),
            msg: String::from_utf8_lossy(&err[..len]).into_owned(),
        });
    }
    let names: Vec<String> = sig
        .params()
        .iter()
        .filter_map(|p| match p {
            Param::Input { input, .. } => Some(format!("input `{}`", launch.inputs[*input].name)),
            Param::Shape { input, .. } => Some(format!("`{}_shape`", launch.inputs[*input].name)),
            Param::Strides { input, .. } => {
                Some(format!("`{}_strides`", launch.inputs[*input].name))
            }
            Param::Ndim { input, .. } => Some(format!("`{}_ndim`", launch.inputs[*input].name)),
            Param::Output { output, .. } => {
                Some(format!("output `{}`", launch.outputs[*output].name))
            }
            Param::Attribute { .. } => None,
        })
        .collect();
    for (b, name) in buffers.iter_mut().zip(&names) {
        if let Some(offset) = b.overrun() {
            return Err(Error::Runtime {
                kernel: launch.name.clone(),
                msg: format!(
                    "the kernel wrote outside {name} ({} bytes): byte offset {offset} changed",
                    b.len
                ),
            });
        }
    }
    let first_output = buffers.len() - launch.outputs.len();
    Ok(launch
        .outputs
        .iter()
        .zip(&mut buffers[first_output..])
        .map(|(o, b)| EmuBuffer {
            name: o.name.clone(),
            dtype: o.dtype,
            shape: o.shape.clone(),
            bytes: b.bytes(),
        })
        .collect())
}

/// Runs in forward and in reverse lane order and returns the forward outputs, or an error
/// naming the first element that differs (usually a missing barrier). With
/// `atomic_outputs`, float outputs may differ by rounding (the order of atomic adds).
pub fn run_all_orders(launch: &MetalLaunch) -> Result<Vec<EmuBuffer>> {
    let fwd = run(&launch.clone().lane_order(LaneOrder::Forward))?;
    let rev = run(&launch.clone().lane_order(LaneOrder::Reverse))?;
    for (a, b) in fwd.iter().zip(&rev) {
        if let Some(i) = first_difference(a, b, launch.atomic_outputs) {
            return Err(Error::Runtime {
                kernel: launch.name.clone(),
                msg: format!(
                    "output `{}` differs between forward and reverse lane order at element {i} \
                     (a missing threadgroup_barrier?)",
                    a.name
                ),
            });
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
