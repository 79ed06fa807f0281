//! The CUDA back end: a kernel's IR to an MLX `fast::cuda_kernel` body, header and launch
//! shape, and to a self-contained NVRTC translation unit with the same parameter list.
//!
//! MLX 0.32's `cuda_kernel` writes the kernel itself (`mlx/backend/cuda/custom_kernel.cpp`):
//! its default header (`mlx/backend/cuda/device/utils.cuh`, `<cooperative_groups.h>`), then
//! our header, then inside `namespace mlx::core::cu` a
//! `__global__ void custom_kernel_<name>(...)` taking every input as `const T*` (a 0-d
//! scalar too, so scalars are read as `x[0]`), `const __grid_constant__ Shape/Strides/int
//! <in>_shape/_strides/_ndim` after an input whose name appears so in the body, then the
//! outputs as `T*`; template arguments would become `constexpr`/`using` lines before the
//! body (we pass none). The grid it is given counts threads and is rounded up to whole
//! blocks, `(g + t - 1) / t`; the block is `min(threadgroup, grid)` per axis. With
//! `ensure_row_contiguous` (which the launcher passes, as for Metal) strided inputs are
//! copied to row-major first. [`CudaProgram::mlx_source`] reproduces that text and
//! [`CudaProgram::standalone`] prints the same kernel as an `extern "C"` entry that NVRTC
//! compiles on its own.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use super::dialect::CUDA;
use super::lower::{check_block_shapes, in_place_names, printer_of, unsupported_on, Lowering};
use super::{abi, LaunchOptions, LayoutChoice};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::{Kernel, ParamKind};
use crate::opt::plan::KernelPlan;

/// Static shared memory a CUDA block may declare (more needs dynamic shared memory).
pub const STATIC_SHARED_LIMIT: usize = 48 * 1024;

/// Dynamic shared memory above which MLX's `cuda_kernel` raises the kernel's limit
/// (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`); at or below it the kernel keeps the
/// default limit, `STATIC_SHARED_LIMIT` less its static shared memory.
pub const MLX_DYNAMIC_SHARED_OPT_IN: usize = 48_000;

/// The dynamic shared memory to request for a kernel of `smem` static and `ring` dynamic
/// bytes: `ring`, unless together they pass the default limit while `ring` alone would not
/// make MLX raise it; then just above MLX's threshold (16-byte multiple).
pub fn dynamic_request(smem: usize, ring: usize) -> usize {
    if ring > 0 && smem + ring > STATIC_SHARED_LIMIT && ring <= MLX_DYNAMIC_SHARED_OPT_IN {
        (MLX_DYNAMIC_SHARED_OPT_IN + 1).next_multiple_of(16)
    } else {
        ring
    }
}

/// Largest block CUDA launches.
pub const MAX_THREADS_PER_BLOCK: usize = 1024;

/// A kernel ready for `fast::cuda_kernel` (or NVRTC through [`CudaProgram::standalone`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CudaProgram {
    /// The kernel's identifier ([`abi::kernel_ident`](super::abi::kernel_ident)) and a hash
    /// of header and source (MLX names the function `custom_kernel_<name>`).
    pub name: String,
    /// Kernel body (MLX writes the signature).
    pub source: String,
    /// Includes, typedefs and helpers placed before the kernel.
    pub header: String,
    /// Input names in parameter order (read-only pointers and scalars).
    pub input_names: Vec<String>,
    /// Output names: the pointer parameters the kernel stores to or updates atomically.
    pub output_names: Vec<String>,
    /// For each input, its index in [`Kernel::params`].
    pub inputs: Vec<usize>,
    /// For each output, its index in [`Kernel::params`].
    pub outputs: Vec<usize>,
    /// Element type of each input (a scalar's own type).
    pub input_dtypes: Vec<DType>,
    /// Element type of each output.
    pub output_dtypes: Vec<DType>,
    /// Which inputs are scalars (0-d arrays, read as `name[0]`).
    pub scalar_inputs: Vec<bool>,
    /// Parameters updated in place that the kernel stores to (see
    /// [`compile_in_place`]), by index in [`Kernel::params`]: each adds an input after the
    /// others holding the argument's contents (its index repeated in
    /// [`CudaProgram::inputs`]) and an output after the others, the written-element flags
    /// (`u32` in kernels with atomics, else `u8`, as [`CudaProgram::output_dtypes`] says).
    pub in_place: Vec<usize>,
    /// Threads per block (`num_warps x 32`).
    pub threads_per_block: usize,
    /// Static shared memory the body declares, in bytes.
    pub shared_mem_bytes: usize,
    /// Dynamic shared memory the launch must give the block, in bytes (the rings of loads
    /// issued ahead, `extern __shared__ tm_ring[]`); 0 when there is none.
    pub dynamic_shared_mem_bytes: usize,
    /// The kernel uses atomics (relaxed, on plain `T*` outputs).
    pub uses_atomics: bool,
    /// The source uses instructions only `sm_90a` has (`wgmma`): it compiles for
    /// `compute_90a`/`sm_90a` only, which is what MLX's `cuda_kernel` gives an H100.
    pub sm90a: bool,
    /// Layout and strategy decisions, in program order.
    pub layouts: Vec<LayoutChoice>,
    /// The plan the printer spelled, its shared-memory buffers placed.
    pub plan: KernelPlan,
}

impl CudaProgram {
    /// `(grid, block)` in threads for MLX's `cuda_kernel`, from the number of programs per
    /// axis. MLX rounds the grid up to whole blocks, so it is given exact multiples; errors
    /// when the thread count overflows MLX's `int` or a grid axis exceeds CUDA's limits
    /// (2^31 - 1 blocks on x, 65535 on y and z).
    pub fn launch_dims(&self, programs: [usize; 3]) -> Result<([usize; 3], [usize; 3])> {
        let blocks = self.grid_blocks(programs)?;
        let (grid, block) = abi::grid(blocks, self.threads_per_block);
        if grid[0] > i32::MAX as usize {
            return Err(self.launch_err(format!(
                "{} programs x {} threads overflow the grid MLX takes (int)",
                blocks[0], self.threads_per_block
            )));
        }
        Ok((grid, block))
    }

    /// The NVRTC `-arch` for this program where the caller would give `arch`
    /// (`compute_90`, `sm_90`, ...): its architecture-specific `a` form when the source
    /// needs `sm_90a` ([`CudaProgram::sm90a`]).
    pub fn nvrtc_arch(&self, arch: &str) -> String {
        if self.sm90a && arch.ends_with("_90") {
            format!("{arch}a")
        } else {
            arch.to_string()
        }
    }

    /// The grid in blocks (what a direct CUDA launch takes), checked against CUDA's limits.
    pub fn grid_blocks(&self, programs: [usize; 3]) -> Result<[usize; 3]> {
        let limits = [i32::MAX as usize, 65535, 65535];
        let mut g = [1usize; 3];
        for a in 0..3 {
            g[a] = programs[a].max(1);
            if programs[a] > limits[a] {
                return Err(self.launch_err(format!(
                    "{} programs on axis {a} exceed CUDA's grid limit of {}",
                    programs[a], limits[a]
                )));
            }
        }
        Ok(g)
    }

    fn launch_err(&self, msg: String) -> Error {
        Error::Launch {
            kernel: self.name.clone(),
            msg,
        }
    }

    /// The translation unit MLX 0.32 builds from this program for arrays of the
    /// parameters' dtypes (it needs MLX's device headers to compile).
    pub fn mlx_source(&self) -> String {
        let mut s = String::from(
            "\n#include \"mlx/backend/cuda/device/utils.cuh\"\n\n#include <cooperative_groups.h>\n\n",
        );
        s.push_str(&self.header);
        s.push_str("namespace mlx::core::cu {\n\nnamespace cg = cooperative_groups;\n\n");
        s.push_str(&format!("__global__ void custom_kernel_{}(\n", self.name));
        let mut params: Vec<String> = Vec::new();
        for (n, dt) in self.input_names.iter().zip(&self.input_dtypes) {
            params.push(format!("    const {}* {n}", mlx_cuda_type(*dt)));
        }
        for (n, dt) in self.output_names.iter().zip(&self.output_dtypes) {
            params.push(format!("    {}* {n}", mlx_cuda_type(*dt)));
        }
        s.push_str(&params.join(",\n"));
        s.push_str(") {\n");
        s.push_str(&self.source);
        s.push_str("\n}\n\n} // namespace mlx::core::cu\n");
        s
    }

    /// A self-contained CUDA translation unit: the header, then
    /// `extern "C" __global__ void <name>(...)` with MLX's parameter list (inputs
    /// `const T*`, scalars included, then outputs `T*`; types spelled with the header's
    /// typedefs, which have MLX's sizes) and the same body. Launch it with
    /// [`CudaProgram::grid_blocks`] blocks of [`CudaProgram::threads_per_block`] threads.
    pub fn standalone(&self) -> String {
        let mut s = format!(
            "// Generated by triton-metal: kernel `{}` ({} threads per block, {} bytes static and {} bytes dynamic shared memory).\n",
            self.name, self.threads_per_block, self.shared_mem_bytes, self.dynamic_shared_mem_bytes
        );
        s.push_str(&self.header);
        s.push_str(&format!(
            "\nextern \"C\" __global__ void __launch_bounds__({}) {}(\n",
            self.threads_per_block, self.name
        ));
        let ty = |dt: DType| CUDA.type_name(dt).unwrap_or("void");
        let mut params: Vec<String> = Vec::new();
        for (n, dt) in self.input_names.iter().zip(&self.input_dtypes) {
            params.push(format!("    const {}* {n}", ty(*dt)));
        }
        for (n, dt) in self.output_names.iter().zip(&self.output_dtypes) {
            params.push(format!("    {}* {n}", ty(*dt)));
        }
        s.push_str(&params.join(",\n"));
        s.push_str(") {\n");
        s.push_str(&self.source);
        s.push_str("}\n");
        s
    }

    /// A readable dump: layouts, launch shape, header and source.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "cuda program `{}`: {} threads/block, {} bytes shared memory (+{} dynamic), atomics={}\n  inputs: {:?}\n  outputs: {:?}\n",
            self.name,
            self.threads_per_block,
            self.shared_mem_bytes,
            self.dynamic_shared_mem_bytes,
            self.uses_atomics,
            self.input_names,
            self.output_names
        );
        for l in &self.layouts {
            s.push_str(&format!("  layout: {} -> {}\n", l.op, l.layout));
        }
        s.push_str("---- header ----\n");
        s.push_str(&self.header);
        s.push_str("---- source ----\n");
        s.push_str(&self.source);
        s
    }
}

/// MLX's `dtype_to_cuda_type`.
fn mlx_cuda_type(dt: DType) -> &'static str {
    match dt {
        DType::Bool => "bool",
        DType::I8 => "int8_t",
        DType::I16 => "int16_t",
        DType::I32 => "int32_t",
        DType::I64 => "int64_t",
        DType::U8 => "uint8_t",
        DType::U16 => "uint16_t",
        DType::U32 => "uint32_t",
        DType::U64 => "uint64_t",
        DType::F16 => "__half",
        DType::BF16 => "__nv_bfloat16",
        DType::F32 => "float",
        DType::F64 => "double",
    }
}

/// Compiles `kernel` for CUDA under `opts` (whose target must be a CUDA profile). Errors
/// before anything is launched: blocks over 1024 threads, static shared memory over 48 KB,
/// unsupported ops (named with the kernel), parameter names that would break the signature.
pub fn compile(kernel: &Kernel, opts: &LaunchOptions) -> Result<CudaProgram> {
    let p = crate::opt::plan::plan(kernel, opts, printer_of(&CUDA, opts));
    compile_with(kernel, opts, &p)
}

/// The layout plan [`compile`] prints `kernel` with under `opts`, its shared-memory buffers
/// listed and placed.
pub fn plan(kernel: &Kernel, opts: &LaunchOptions) -> KernelPlan {
    crate::opt::plan::plan(kernel, opts, printer_of(&CUDA, opts))
}

/// [`compile`] with the decisions of `plan` (e.g. [`plan`]'s, with overrides set), which
/// must be a plan for this kernel and options that [`KernelPlan::verify`] accepts.
pub fn compile_with(
    kernel: &Kernel,
    opts: &LaunchOptions,
    plan: &KernelPlan,
) -> Result<CudaProgram> {
    compile_in_place(kernel, opts, plan, &[])
}

/// [`compile_with`] for a launch that updates the pointer parameters `in_place` in place,
/// as [`super::metal::compile_in_place`] describes (MLX's `cuda_kernel` outputs are fresh
/// buffers too; the fences are `__threadfence()`).
pub fn compile_in_place(
    kernel: &Kernel,
    opts: &LaunchOptions,
    plan: &KernelPlan,
    in_place: &[usize],
) -> Result<CudaProgram> {
    let launch_err = |msg: String| Error::Launch {
        kernel: kernel.name.clone(),
        msg,
    };
    if !opts.target.is_cuda() {
        return Err(launch_err(format!(
            "target {} is not a CUDA device (use LaunchOptions::target with an sm_80/sm_90 profile)",
            opts.target.chip
        )));
    }
    if opts.num_warps == 0 || !opts.num_warps.is_power_of_two() {
        return Err(launch_err(format!(
            "num_warps must be a power of two, got {}",
            opts.num_warps
        )));
    }
    let threads = opts.threads();
    let max_threads = (opts.target.max_threads_per_threadgroup as usize).min(MAX_THREADS_PER_BLOCK);
    if threads > max_threads {
        return Err(launch_err(format!(
            "{threads} threads per block (num_warps = {}) exceed the limit of {max_threads} on {}",
            opts.num_warps, opts.target.chip
        )));
    }
    check_block_shapes(&CUDA, kernel)?;
    let names: Vec<&str> = kernel.params.iter().map(|p| p.name.as_str()).collect();
    let idents = abi::param_idents(&kernel.name, &names)?;

    if plan.printer != printer_of(&CUDA, opts) || plan.kernel != kernel.name {
        return Err(crate::Error::InvalidArgument(format!(
            "layout plan of `{}` for {:?} given for kernel `{}` on {:?}",
            plan.kernel,
            plan.printer,
            kernel.name,
            printer_of(&CUDA, opts)
        )));
    }
    plan.verify(kernel)?;
    let mut lw = Lowering::with_plan(kernel, &CUDA, opts, plan.clone());
    lw.set_in_place(in_place)?;
    lw.compute_provenance()?;
    // Scalars arrive as 0-d arrays, i.e. pointers: read once, under a local name.
    for (p, id) in kernel.params.iter().zip(&idents) {
        if let ParamKind::Scalar(dt) = p.kind {
            let ct = lw.cty(dt)?;
            let local = lw.fresh(&format!("{}_val", p.name));
            lw.line(format!("const {ct} {local} = {id}[0];"));
            lw.set(p.value, super::lower::Repr::Scalar(local));
        }
    }
    let mut body = Vec::new();
    body.push(format!("  const uint tm_lid = {};", CUDA.thread_index));
    lw.region(kernel.body)?;

    body.extend(lw.arena_decls(&format!("shared memory on {}", opts.target.chip))?);
    let smem = lw.plan.arena.bytes;
    let dynamic = dynamic_request(smem, lw.ring_bytes);
    let total_limit = opts.target.threadgroup_memory_bytes as usize;
    if smem + dynamic > total_limit {
        return Err(launch_err(format!(
            "needs {smem} bytes of static and {dynamic} bytes of dynamic shared memory; {} \
             allows {total_limit} per block (fewer num_stages or smaller blocks)",
            opts.target.chip
        )));
    }

    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    let mut input_dtypes = Vec::new();
    let mut output_dtypes = Vec::new();
    let mut scalar_inputs = Vec::new();
    for (i, p) in kernel.params.iter().enumerate() {
        match p.kind {
            ParamKind::Ptr(dt) if p.stored => {
                lw.cty(dt)?;
                outputs.push(i);
                output_dtypes.push(dt);
            }
            ParamKind::Ptr(dt) | ParamKind::Scalar(dt) => {
                CUDA.type_name(dt).ok_or_else(|| {
                    unsupported_on(&CUDA, kernel, format!("parameter `{}` of {dt}", p.name))
                })?;
                inputs.push(i);
                input_dtypes.push(dt);
                scalar_inputs.push(matches!(p.kind, ParamKind::Scalar(_)));
            }
        }
    }
    if outputs.is_empty() {
        return Err(launch_err(
            "stores to no pointer: MLX's cuda_kernel needs at least one output".into(),
        ));
    }
    body.append(&mut lw.lines);
    let source = body.join("\n") + "\n";
    let header = CUDA.header(&lw.helpers);
    let mut input_names: Vec<String> = inputs.iter().map(|&i| idents[i].clone()).collect();
    let mut output_names: Vec<String> = outputs.iter().map(|&i| idents[i].clone()).collect();
    let in_place: Vec<usize> = (0..kernel.params.len())
        .filter(|&i| lw.in_place[i])
        .collect();
    for &i in &in_place {
        let (src, flag) = in_place_names(i);
        if let ParamKind::Ptr(dt) = kernel.params[i].kind {
            inputs.push(i);
            input_names.push(src);
            input_dtypes.push(dt);
            scalar_inputs.push(false);
            output_names.push(flag);
            output_dtypes.push(if lw.atomic_outputs {
                DType::U32
            } else {
                DType::U8
            });
        }
    }
    let io: Vec<String> = input_names.iter().chain(&output_names).cloned().collect();
    abi::check_source(&kernel.name, &source, &io)?;
    abi::check_source(&kernel.name, &header, &io)?;

    let mut h = DefaultHasher::new();
    header.hash(&mut h);
    source.hash(&mut h);
    let name = format!("{}_{:016x}", abi::kernel_ident(&kernel.name), h.finish());
    Ok(CudaProgram {
        name,
        source,
        header,
        input_names,
        output_names,
        inputs,
        outputs,
        input_dtypes,
        output_dtypes,
        scalar_inputs,
        in_place,
        threads_per_block: threads,
        shared_mem_bytes: smem,
        dynamic_shared_mem_bytes: dynamic,
        uses_atomics: lw.atomic_outputs,
        sm90a: lw.helpers.contains("wgmma"),
        layouts: lw.layouts,
        plan: lw.plan,
    })
}

/// Always in the header: the fp16/bf16 headers, Metal's short scalar names as typedefs (the
/// shared printer spells `uint`, `ulong`, ...; the sizes are MLX's on LP64 Linux), bit
/// casts, `mulhi`, and the `__half` overloads of the float functions the printer calls
/// (CUDA spells them `__hfma`, `__hmax`, ...; `__hmax` returns the other operand for a NaN,
/// as `fmax` does).
pub(super) const PRELUDE: &str = r#"#include <cuda_fp16.h>
#include <cuda_bf16.h>
typedef signed char schar;
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
template <typename T> struct tm_id { typedef T type; };
template <typename T, typename S>
__device__ inline T tm_bitcast(S s) {
  static_assert(sizeof(T) == sizeof(S), "bitcast between types of different sizes");
  T t;
  memcpy(&t, &s, sizeof(T));
  return t;
}
__device__ inline uint tm_mulhi(uint a, uint b) { return __umulhi(a, b); }
__device__ inline ulong tm_mulhi(ulong a, ulong b) { return __umul64hi(a, b); }
__device__ inline __half fma(__half a, __half b, __half c) { return __hfma(a, b, c); }
__device__ inline __half fmax(__half a, __half b) { return __hmax(a, b); }
__device__ inline __half fmin(__half a, __half b) { return __hmin(a, b); }
__device__ inline __half fabs(__half a) { return __habs(a); }
__device__ inline __half fmod(__half a, __half b) { return __float2half(fmodf(__half2float(a), __half2float(b))); }
__device__ inline bool isnan(__half a) { return __hisnan(a); }
__device__ inline bool isnan(__nv_bfloat16 a) { return __hisnan(a); }
"#;

/// Atomics on plain pointers. CUDA's atomic functions are relaxed and device-scoped;
/// `tm_atomic_*<O, S>` puts fences of scope `S` (0: the block, 1: the device) around one:
/// before it when `O` releases (bit 2), after it when `O` acquires (bit 1). 64-bit elements
/// go through CUDA's `unsigned long long` / `long long` functions (same bits); half and
/// bfloat add natively (sm_70 / sm_80). The value parameter is not deduced, so a literal of
/// another type converts to the element type.
pub(super) const ATOMIC: &str = r#"
template <int S> __device__ inline void tm_fence() {
  if (S == 0) __threadfence_block(); else __threadfence();
}
typedef unsigned long long tm_ull;
template <typename T> __device__ inline T tm_at_add(T* p, T v) { return atomicAdd(p, v); }
__device__ inline long tm_at_add(long* p, long v) { return (long)atomicAdd((tm_ull*)p, (tm_ull)v); }
__device__ inline ulong tm_at_add(ulong* p, ulong v) { return (ulong)atomicAdd((tm_ull*)p, (tm_ull)v); }
template <typename T> __device__ inline T tm_at_max(T* p, T v) { return atomicMax(p, v); }
__device__ inline long tm_at_max(long* p, long v) { return (long)atomicMax((long long*)p, (long long)v); }
__device__ inline ulong tm_at_max(ulong* p, ulong v) { return (ulong)atomicMax((tm_ull*)p, (tm_ull)v); }
template <typename T> __device__ inline T tm_at_min(T* p, T v) { return atomicMin(p, v); }
__device__ inline long tm_at_min(long* p, long v) { return (long)atomicMin((long long*)p, (long long)v); }
__device__ inline ulong tm_at_min(ulong* p, ulong v) { return (ulong)atomicMin((tm_ull*)p, (tm_ull)v); }
template <typename T> __device__ inline T tm_at_and(T* p, T v) { return (T)atomicAnd((tm_ull*)p, (tm_ull)v); }
__device__ inline int tm_at_and(int* p, int v) { return atomicAnd(p, v); }
__device__ inline uint tm_at_and(uint* p, uint v) { return atomicAnd(p, v); }
template <typename T> __device__ inline T tm_at_or(T* p, T v) { return (T)atomicOr((tm_ull*)p, (tm_ull)v); }
__device__ inline int tm_at_or(int* p, int v) { return atomicOr(p, v); }
__device__ inline uint tm_at_or(uint* p, uint v) { return atomicOr(p, v); }
template <typename T> __device__ inline T tm_at_xor(T* p, T v) { return (T)atomicXor((tm_ull*)p, (tm_ull)v); }
__device__ inline int tm_at_xor(int* p, int v) { return atomicXor(p, v); }
__device__ inline uint tm_at_xor(uint* p, uint v) { return atomicXor(p, v); }
template <typename T> __device__ inline T tm_at_exch(T* p, T v) { return (T)atomicExch((tm_ull*)p, (tm_ull)v); }
__device__ inline int tm_at_exch(int* p, int v) { return atomicExch(p, v); }
__device__ inline uint tm_at_exch(uint* p, uint v) { return atomicExch(p, v); }
__device__ inline float tm_at_exch(float* p, float v) { return atomicExch(p, v); }
#define TM_ORDERED(name, raw)                                                                  \
  template <int O, int S, typename T>                                                          \
  __device__ inline T tm_atomic_##name(T* p, typename tm_id<T>::type v) {                      \
    if (O & 2) tm_fence<S>();                                                                  \
    const T r = raw(p, (T)v);                                                                  \
    if (O & 1) tm_fence<S>();                                                                  \
    return r;                                                                                  \
  }
TM_ORDERED(fetch_add, tm_at_add)
TM_ORDERED(fetch_max, tm_at_max)
TM_ORDERED(fetch_min, tm_at_min)
TM_ORDERED(fetch_and, tm_at_and)
TM_ORDERED(fetch_or, tm_at_or)
TM_ORDERED(fetch_xor, tm_at_xor)
TM_ORDERED(exchange, tm_at_exch)
template <typename T> __device__ inline T tm_atomic_load(const T* p) { return *(const volatile T*)p; }
template <typename T> __device__ inline void tm_atomic_store(T* p, typename tm_id<T>::type v) { *(volatile T*)p = v; }
"#;

/// Makes element `dst` of a parameter updated in place hold the argument's value `src`
/// before an atomic (or, in a kernel with atomics, a store) acts on it, as Metal's
/// `tm_in_place_init` does (`metal.rs` says why it cannot deadlock); `__threadfence()`
/// orders the copy before the published flag and the caller's atomic after it.
pub(super) const IN_PLACE: &str = r#"
template <typename T>
__device__ inline void tm_in_place_init(uint* flag, T* dst, typename tm_id<T>::type src) {
  if (*(volatile uint*)flag != 2u) {
    if (atomicCAS(flag, 0u, 1u) == 0u) {
      *(volatile T*)dst = src;
      __threadfence();
      atomicExch(flag, 2u);
    }
    while (*(volatile uint*)flag != 2u) {
    }
  }
  __threadfence();
}
"#;

/// Compare-and-swap (`atomicCAS` is strong) on the bits of the element: 16-, 32- and 64-bit
/// elements of any type, compared bitwise as on every GPU; ordered as [`ATOMIC`].
pub(super) const ATOMIC_CAS: &str = r#"
template <int N> struct tm_cas_bits;
template <> struct tm_cas_bits<2> { typedef unsigned short type; };
template <> struct tm_cas_bits<4> { typedef unsigned int type; };
template <> struct tm_cas_bits<8> { typedef unsigned long long type; };
template <int O, int S, typename T>
__device__ inline T tm_atomic_cas(T* p, typename tm_id<T>::type cmp, typename tm_id<T>::type val) {
  typedef typename tm_cas_bits<sizeof(T)>::type B;
  if (O & 2) tm_fence<S>();
  const B r = atomicCAS((B*)p, tm_bitcast<B>((T)cmp), tm_bitcast<B>((T)val));
  if (O & 1) tm_fence<S>();
  return tm_bitcast<T>(r);
}
"#;

/// Float max/min: CUDA float atomics only add and exchange, so loop a CAS on the bits;
/// ordered as [`ATOMIC`]. The order is IEEE totalOrder, as Triton's integer max/min of the
/// bits gives it (see `tm_atomic_fmax` in cpu_runtime.h).
pub(super) const ATOMIC_FMINMAX: &str = r#"
__device__ inline uint tm_total_key(uint u) { return u ^ ((0u - (u >> 31)) | 0x80000000u); }
template <bool MAX> __device__ inline float tm_at_fminmax(float* p, float v) {
  uint* u = (uint*)p;
  uint old = *(volatile uint*)u;
  const uint vb = __float_as_uint(v);
  while (true) {
    const float o = __uint_as_float(old);
    const bool take = MAX ? tm_total_key(vb) > tm_total_key(old) : tm_total_key(vb) < tm_total_key(old);
    const uint next = take ? vb : old;
    if (next == old) return o;
    const uint seen = atomicCAS(u, old, next);
    if (seen == old) return o;
    old = seen;
  }
}
template <int O, int S> __device__ inline float tm_atomic_fmax(float* p, float v) {
  if (O & 2) tm_fence<S>();
  const float r = tm_at_fminmax<true>(p, v);
  if (O & 1) tm_fence<S>();
  return r;
}
template <int O, int S> __device__ inline float tm_atomic_fmin(float* p, float v) {
  if (O & 2) tm_fence<S>();
  const float r = tm_at_fminmax<false>(p, v);
  if (O & 1) tm_fence<S>();
  return r;
}
"#;

/// Philox-4x32 as Triton computes it (`philox_impl`).
pub(super) const PHILOX: &str = concat!(
    "
struct tm_uint4 {
  uint v[4];
  __device__ uint operator[](int i) const { return v[i]; }
};
__device__ inline tm_uint4 tm_philox(uint c0, uint c1, uint c2, uint c3, uint k0, uint k1, uint rounds) {
",
    super::dialect::philox_rounds!("tm_mulhi"),
    "  tm_uint4 out = {{c0, c1, c2, c3}};\n  return out;\n}\n"
);

/// `exp2` of an fp32 as Triton's `tl.exp2` computes it on NVIDIA GPUs, bit for bit:
/// `ex2.approx.ftz.f32` (an approximation of a few ulp; subnormal inputs read as zero,
/// subnormal results flushed to zero).
pub(super) const EX2: &str = r#"
__device__ __forceinline__ float tm_ex2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
"#;

/// The 64-bit shared-memory matrix descriptor of `wgmma.mma_async` for an operand in the
/// 128-byte swizzle (`opt::plan::ring_operand_tile`): start address, leading and stride
/// byte offsets, each in 16-byte units in 14 bits, and the swizzle mode in bits 62-63.
pub(super) const WGMMA: &str = r#"
__device__ inline unsigned long long tm_wgmma_desc(uint addr, uint lead, uint stride) {
  return (unsigned long long)((addr & 0x3FFFFu) >> 4) | ((unsigned long long)((lead & 0x3FFFFu) >> 4) << 16) |
         ((unsigned long long)((stride & 0x3FFFFu) >> 4) << 32) | (1ull << 62);
}
"#;

/// Chunk loads and stores. CUDA's wide accesses need natural alignment, which contiguity
/// alone does not give (a row may start at any element), so each access checks the address
/// and falls back to element accesses. The `_at` forms take an offset known to be a
/// multiple of the chunk, so only the base pointer is checked.
pub(super) const PACKED: &str = r#"
template <typename T, int N>
struct __align__(sizeof(T) * N) tm_vec {
  T v[N];
  __device__ T& operator[](uint i) { return v[i]; }
  __device__ T operator[](uint i) const { return v[i]; }
};
template <int N, typename T>
__device__ inline tm_vec<T, N> tm_vload(const T* p) {
  if ((reinterpret_cast<ulong>(p) & (sizeof(T) * N - 1)) == 0) return *reinterpret_cast<const tm_vec<T, N>*>(p);
  tm_vec<T, N> r;
#pragma unroll
  for (int e = 0; e < N; ++e) r.v[e] = p[e];
  return r;
}
template <typename T, int N>
__device__ inline void tm_vstore(T* p, const tm_vec<T, N>& x) {
  if ((reinterpret_cast<ulong>(p) & (sizeof(T) * N - 1)) == 0) {
    *reinterpret_cast<tm_vec<T, N>*>(p) = x;
    return;
  }
#pragma unroll
  for (int e = 0; e < N; ++e) p[e] = x.v[e];
}
template <int N, typename T, typename I>
__device__ inline tm_vec<T, N> tm_vload_at(const T* b, I o) {
  if ((reinterpret_cast<ulong>(b) & (sizeof(T) * N - 1)) == 0) return *reinterpret_cast<const tm_vec<T, N>*>(b + o);
  tm_vec<T, N> r;
#pragma unroll
  for (int e = 0; e < N; ++e) r.v[e] = b[o + e];
  return r;
}
template <typename T, int N, typename I>
__device__ inline void tm_vstore_at(T* b, I o, const tm_vec<T, N>& x) {
  if ((reinterpret_cast<ulong>(b) & (sizeof(T) * N - 1)) == 0) {
    *reinterpret_cast<tm_vec<T, N>*>(b + o) = x;
    return;
  }
#pragma unroll
  for (int e = 0; e < N; ++e) b[o + e] = x.v[e];
}
"#;
