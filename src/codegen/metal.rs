//! The Metal back end: a kernel's IR to an MLX `metal_kernel` body, header and launch shape.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use super::dialect::METAL;
use super::lower::{check_block_shapes, in_place_names, printer_of, unsupported, Lowering};
use super::{abi, LaunchOptions, LayoutChoice};
use crate::error::{Error, Result};
use crate::ir::{Kernel, ParamKind};
use crate::opt::plan::KernelPlan;

/// A kernel ready for `fast::metal_kernel`.
#[derive(Clone, Debug, PartialEq)]
pub struct MetalProgram {
    /// Name for `metal_kernel`: the kernel's identifier ([`abi::kernel_ident`]) and a hash of
    /// header and source, so MLX's library cache can never confuse two variants.
    pub name: String,
    /// Kernel body (MLX writes the signature).
    pub source: String,
    /// Helpers placed before the kernel.
    pub header: String,
    /// Input names in MLX order: read-only pointers, then scalars, in parameter order
    /// interleaved as declared (see [`MetalProgram::inputs`]).
    pub input_names: Vec<String>,
    /// Output names: the pointer parameters the kernel stores to or updates atomically.
    pub output_names: Vec<String>,
    /// For each input, its index in [`Kernel::params`].
    pub inputs: Vec<usize>,
    /// For each output, its index in [`Kernel::params`].
    pub outputs: Vec<usize>,
    /// Parameters updated in place that the kernel stores to, by index in
    /// [`Kernel::params`] (see [`compile_in_place`]). Each one is also in
    /// [`MetalProgram::outputs`], and adds an input, named after the other inputs, holding
    /// the argument's contents (its index is repeated in [`MetalProgram::inputs`]), and an
    /// output of [`MetalProgram::flag_dtype`], named after the other outputs, that the kernel
    /// sets nonzero at every element it writes.
    pub in_place: Vec<usize>,
    /// Element type of the written-element flags: `u32` in kernels with atomics (every
    /// output is then atomic, and flags are claimed with a compare-and-swap), else `u8`.
    pub flag_dtype: crate::DType,
    /// Threads per threadgroup (`num_warps x 32`).
    pub threads_per_threadgroup: usize,
    /// Static threadgroup memory the body declares, in bytes.
    pub threadgroup_mem_bytes: usize,
    /// Pass `atomic_outputs = true` to `metal_kernel` (the kernel uses atomics; every
    /// output is then `device atomic<T>*`).
    pub atomic_outputs: bool,
    /// For each output, whether it lives in 32-bit words: in a kernel with atomics, an
    /// output whose elements are not 32-bit is allocated as `float` words (rounded up, so
    /// that no access to an element's word leaves the buffer) and read back as its dtype;
    /// [`MetalProgram::words`] gives the length.
    pub word_outputs: Vec<bool>,
    /// Layout and strategy decisions, in program order (for `TRITON_METAL_DEBUG` and tools).
    pub layouts: Vec<LayoutChoice>,
    /// The plan the printer spelled, its threadgroup buffers placed.
    pub plan: KernelPlan,
}

impl MetalProgram {
    /// `(grid, threadgroup)` in threads for MLX, from the number of programs per axis.
    pub fn launch_dims(&self, programs: [usize; 3]) -> ([usize; 3], [usize; 3]) {
        abi::grid(programs, self.threads_per_threadgroup)
    }

    /// The number of 32-bit words that hold `elems` elements of `dt` (an output in
    /// [`MetalProgram::word_outputs`]).
    pub fn words(dt: crate::DType, elems: usize) -> usize {
        (elems * dt.size_bytes()).div_ceil(4).max(1)
    }

    /// A readable dump: layouts, launch shape, header and source.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "metal program `{}`: {} threads/threadgroup, {} bytes threadgroup memory, atomic_outputs={}\n  inputs: {:?}\n  outputs: {:?}\n",
            self.name,
            self.threads_per_threadgroup,
            self.threadgroup_mem_bytes,
            self.atomic_outputs,
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

/// Compiles `kernel` for Metal under `opts`. Errors before anything is launched: more
/// threads than the target allows, threadgroup memory over its limit, unsupported ops
/// (named), parameter names that would change MLX's signature.
pub fn compile(kernel: &Kernel, opts: &LaunchOptions) -> Result<MetalProgram> {
    let p = crate::opt::plan::plan(kernel, opts, printer_of(&METAL, opts));
    compile_with(kernel, opts, &p)
}

/// The layout plan [`compile`] prints `kernel` with under `opts`, its threadgroup buffers
/// listed and placed.
pub fn plan(kernel: &Kernel, opts: &LaunchOptions) -> KernelPlan {
    crate::opt::plan::plan(kernel, opts, printer_of(&METAL, opts))
}

/// [`compile`] with the decisions of `plan` (e.g. [`plan`]'s, with overrides set), which
/// must be a plan for this kernel and options that [`KernelPlan::verify`] accepts.
pub fn compile_with(
    kernel: &Kernel,
    opts: &LaunchOptions,
    plan: &KernelPlan,
) -> Result<MetalProgram> {
    compile_in_place(kernel, opts, plan, &[])
}

/// [`compile_with`] for a launch that updates the pointer parameters `in_place` (indices
/// in [`Kernel::params`]) in place: MLX's custom kernels only write fresh outputs and
/// never alias an input, so each such parameter the kernel stores to becomes three
/// buffers. The argument comes in as an extra input; the kernel writes a fresh output and
/// sets a per-element flag (fill 0) where it writes; a load reads the output where the flag
/// is set and the input elsewhere, so a program sees its own earlier stores; the launcher
/// returns `where(flag, output, input)`. An atomic first makes its element hold the
/// input's value (`tm_in_place_init`: claim the flag 0 -> 1, copy, publish 2). Parameters
/// of `in_place` the kernel never stores to are plain inputs.
pub fn compile_in_place(
    kernel: &Kernel,
    opts: &LaunchOptions,
    plan: &KernelPlan,
    in_place: &[usize],
) -> Result<MetalProgram> {
    let launch_err = |msg: String| Error::Launch {
        kernel: kernel.name.clone(),
        msg,
    };
    let threads = opts.threads();
    if opts.num_warps == 0 || !opts.num_warps.is_power_of_two() {
        return Err(launch_err(format!(
            "num_warps must be a power of two, got {}",
            opts.num_warps
        )));
    }
    let max_threads = (opts.target.max_threads_per_threadgroup as usize).min(1024);
    if threads > max_threads {
        return Err(launch_err(format!(
            "{threads} threads per threadgroup (num_warps = {}) exceed the limit of {max_threads} on {}",
            opts.num_warps, opts.target.chip
        )));
    }
    for v in &kernel.values {
        if v.ty.dtype == crate::DType::BF16 && !opts.target.bfloat {
            return Err(unsupported(
                kernel,
                format!(
                    "bf16 on {} (Metal's bfloat needs MSL 3.1)",
                    opts.target.chip
                ),
            ));
        }
    }
    check_block_shapes(&METAL, kernel)?;
    let names: Vec<&str> = kernel.params.iter().map(|p| p.name.as_str()).collect();
    let idents = abi::param_idents(&kernel.name, &names)?;

    if plan.printer != printer_of(&METAL, opts) || plan.kernel != kernel.name {
        return Err(crate::Error::InvalidArgument(format!(
            "layout plan of `{}` for {:?} given for kernel `{}` on {:?}",
            plan.kernel,
            plan.printer,
            kernel.name,
            printer_of(&METAL, opts)
        )));
    }
    plan.verify(kernel)?;
    let mut lw = Lowering::with_plan(kernel, &METAL, opts, plan.clone());
    lw.set_in_place(in_place)?;
    lw.compute_provenance()?;
    lw.region(kernel.body)?;

    let mut body = Vec::new();
    body.push(format!("  const uint tm_lid = {};", METAL.thread_index));
    body.extend(lw.arena_decls(&format!("threadgroup memory on {}", opts.target.chip))?);
    let tg_bytes = lw.plan.arena.bytes;
    body.append(&mut lw.lines);
    let source = body.join("\n") + "\n";
    let header = METAL.header(&lw.helpers);

    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    let mut word_outputs = Vec::new();
    for (i, p) in kernel.params.iter().enumerate() {
        match p.kind {
            ParamKind::Ptr(dt) if p.stored => {
                outputs.push(i);
                word_outputs.push(lw.atomic_outputs && dt.size_bytes() != 4);
            }
            ParamKind::Ptr(dt) | ParamKind::Scalar(dt) => {
                METAL.type_name(dt).ok_or_else(|| {
                    unsupported(kernel, format!("parameter `{}` of {dt}", p.name))
                })?;
                inputs.push(i);
            }
        }
    }
    let in_place: Vec<usize> = (0..kernel.params.len())
        .filter(|&i| lw.in_place[i])
        .collect();
    let mut input_names: Vec<String> = inputs.iter().map(|&i| idents[i].clone()).collect();
    let mut output_names: Vec<String> = outputs.iter().map(|&i| idents[i].clone()).collect();
    for &i in &in_place {
        let (src, flag) = in_place_names(i);
        inputs.push(i);
        input_names.push(src);
        output_names.push(flag);
        word_outputs.push(false);
    }
    let io: Vec<String> = input_names.iter().chain(&output_names).cloned().collect();
    abi::check_source(&kernel.name, &source, &io)?;
    abi::check_source(&kernel.name, &header, &io)?;

    let mut h = DefaultHasher::new();
    header.hash(&mut h);
    source.hash(&mut h);
    let name = format!("{}_{:016x}", abi::kernel_ident(&kernel.name), h.finish());
    Ok(MetalProgram {
        name,
        source,
        header,
        input_names,
        output_names,
        inputs,
        outputs,
        in_place,
        flag_dtype: if lw.atomic_outputs {
            crate::DType::U32
        } else {
            crate::DType::U8
        },
        threads_per_threadgroup: threads,
        threadgroup_mem_bytes: tg_bytes,
        atomic_outputs: lw.atomic_outputs,
        word_outputs,
        layouts: lw.layouts,
        plan: lw.plan,
    })
}

/// `erf` for float (Metal has none): XLA's rational approximation on [-4, 4], about 1 ulp.
/// NaN is returned as is (a clamp would turn it into -4, so -1); `x * (p / q)` keeps tiny
/// `x` exact where `x * p` would be a subnormal with few bits left.
pub(super) const ERF: &str = r#"
inline float tm_erf(float x) {
  if (isnan(x)) return x;
  x = clamp(x, -4.0f, 4.0f);
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = fma(p, x2, 2.77068142495902e-08f);
  p = fma(p, x2, -2.10102402082508e-06f);
  p = fma(p, x2, -5.69250639462346e-05f);
  p = fma(p, x2, -7.34990630326855e-04f);
  p = fma(p, x2, -2.95459980854025e-03f);
  p = fma(p, x2, -1.60960333262415e-02f);
  float q = -1.45660718464996e-05f;
  q = fma(q, x2, -2.13374055278905e-04f);
  q = fma(q, x2, -1.68282697438203e-03f);
  q = fma(q, x2, -7.37332916720468e-03f);
  q = fma(q, x2, -1.42647390514189e-02f);
  return x * (p / q);
}
"#;

/// Makes element `dst` of a parameter updated in place hold the argument's value `src`
/// before an atomic (or, in a kernel with atomics, a store) acts on it; `flag` is the
/// element's written-flag: 0 untouched, 1 being copied, 2 ready.
///
/// The first thread to claim the flag (a strong 0 -> 1 compare-and-swap) copies `src` in
/// and publishes 2; every thread leaves only once the flag is 2. It cannot deadlock: a
/// thread waits only while the flag is 1, and a flag is 1 only after some thread won the
/// claim, which then copies and publishes without waiting on anything. The claim loop only
/// retries spurious failures, and the copy sits in a branch that closes before the wait
/// loop, so a claimant finishes its copy before any thread of its own SIMD-group spins
/// (threads of a SIMD-group that diverge reconverge at the end of the branch); a claimant
/// in another SIMD-group or threadgroup is resident (it is running) and finishes on its own.
/// Metal orders relaxed atomics on different addresses only through a device fence
/// (`atomic_thread_fence`, Metal 3.2: macOS 15, where MLX compiles with 3.2): the copy is
/// fenced before the flag is published, and a reader fences after seeing it.
pub(super) const IN_PLACE: &str = r#"
#if __METAL_VERSION__ < 320
#error "an atomic on a pointer updated in place (inout) needs Metal 3.2 (macOS 15) for atomic_thread_fence"
#endif
#define TM_IN_PLACE_INIT(COPY) \
  if (atomic_load_explicit(flag, memory_order_relaxed) != 2u) { \
    uint expected = 0u; \
    bool won = false; \
    while (!won && expected == 0u) { \
      won = atomic_compare_exchange_weak_explicit(flag, &expected, 1u, memory_order_relaxed, memory_order_relaxed); \
    } \
    if (won) { \
      COPY; \
      atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device); \
      atomic_store_explicit(flag, 2u, memory_order_relaxed); \
    } \
    while (atomic_load_explicit(flag, memory_order_relaxed) != 2u) { \
    } \
  } \
  atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device);
template <typename T>
inline void tm_in_place_init(device atomic<uint>* flag, device atomic<T>* dst, T src) {
  TM_IN_PLACE_INIT(atomic_store_explicit(dst, src, memory_order_relaxed))
}
"#;

/// [`IN_PLACE`] for outputs kept in 32-bit words ([`MetalProgram::word_outputs`]): the copy
/// is [`ATOMIC_WORDS`]'s store of element `i` (a compare-and-swap loop inside its word, which
/// waits on no other thread).
pub(super) const IN_PLACE_WORDS: &str = r#"
template <typename T>
inline void tm_in_place_init_pk(device atomic<uint>* flag, device atomic<float>* w, uint i, T src) {
  TM_IN_PLACE_INIT(tm_pk_store<T>(w, i, src))
}
template <typename T>
inline void tm_in_place_init_pk8(device atomic<uint>* flag, device atomic<float>* w, uint i, T src) {
  TM_IN_PLACE_INIT(tm_pk_store8<T>(w, i, src))
}
"#;

/// Strong compare-and-swap from Metal's weak one: retries spurious failures only. Floats
/// compare bits (as GPUs do), through `atomic_uint`: Metal's `atomic_float` has no CAS.
pub(super) const ATOMIC_CAS: &str = r#"
template <typename T>
inline T tm_atomic_cas(device atomic<T>* p, T cmp, T val) {
  T expected = cmp;
  while (!atomic_compare_exchange_weak_explicit(p, &expected, val, memory_order_relaxed, memory_order_relaxed)) {
    if (expected != cmp) break;
    expected = cmp;
  }
  return expected;
}
inline float tm_atomic_cas(device atomic<float>* p, float cmp, float val) {
  return as_type<float>(tm_atomic_cas((device atomic<uint>*)p, as_type<uint>(cmp), as_type<uint>(val)));
}
"#;

/// Outputs in 32-bit words ([`MetalProgram::word_outputs`]): element `i` of a 1- or 2-byte
/// type sits in bits `(i % n) * w` of word `i / n` (`n` elements of `w` bits per word,
/// little-endian as MLX reads the buffer back), an 8-byte element in words `2i` and
/// `2i + 1`. A read loads the word; a store or an atomic of a narrow element is a
/// compare-and-swap loop on its word, so the neighbours other threads write in the same
/// word are never lost. `fetch_add` of a half or bfloat adds in float and rounds once (the
/// float sum of two 16-bit floats rounds to the same 16-bit value as the exact sum).
pub(super) const ATOMIC_WORDS: &str = r#"
template <int N> struct tm_pk_raw;
template <> struct tm_pk_raw<1> { typedef uchar type; };
template <> struct tm_pk_raw<2> { typedef ushort type; };
template <typename T> inline T tm_pk_from(uint b) { return as_type<T>((typename tm_pk_raw<sizeof(T)>::type)b); }
template <> inline bool tm_pk_from<bool>(uint b) { return (b & 0xffu) != 0u; }
template <typename T> inline uint tm_pk_to(T v) { return (uint)as_type<typename tm_pk_raw<sizeof(T)>::type>(v); }
template <> inline uint tm_pk_to<bool>(bool v) { return v ? 1u : 0u; }
template <typename T> inline device atomic<uint>* tm_pk_word(device atomic<float>* p, uint i) {
  return (device atomic<uint>*)p + i / (4u / sizeof(T));
}
template <typename T> inline uint tm_pk_shift(uint i) { return (i % (4u / sizeof(T))) * (8u * sizeof(T)); }
template <typename T> inline uint tm_pk_mask(uint i) { return (sizeof(T) == 1 ? 0xffu : 0xffffu) << tm_pk_shift<T>(i); }
template <typename T> inline T tm_pk_load(device atomic<float>* p, uint i) {
  return tm_pk_from<T>(atomic_load_explicit(tm_pk_word<T>(p, i), memory_order_relaxed) >> tm_pk_shift<T>(i));
}
template <typename T> inline void tm_pk_store(device atomic<float>* p, uint i, T v) {
  device atomic<uint>* w = tm_pk_word<T>(p, i);
  const uint m = tm_pk_mask<T>(i), b = tm_pk_to<T>(v) << tm_pk_shift<T>(i);
  uint old = atomic_load_explicit(w, memory_order_relaxed);
  while (!atomic_compare_exchange_weak_explicit(w, &old, (old & ~m) | b, memory_order_relaxed, memory_order_relaxed)) {
  }
}
template <typename T> inline T tm_pk_add(device atomic<float>* p, uint i, T v) {
  device atomic<uint>* w = tm_pk_word<T>(p, i);
  const uint sh = tm_pk_shift<T>(i), m = tm_pk_mask<T>(i);
  uint old = atomic_load_explicit(w, memory_order_relaxed);
  while (true) {
    const T o = tm_pk_from<T>(old >> sh);
    const T n = T(float(o) + float(v));
    if (atomic_compare_exchange_weak_explicit(w, &old, (old & ~m) | (tm_pk_to<T>(n) << sh), memory_order_relaxed, memory_order_relaxed)) {
      return o;
    }
  }
}
template <typename T> inline T tm_pk_cas(device atomic<float>* p, uint i, T cmp, T val) {
  device atomic<uint>* w = tm_pk_word<T>(p, i);
  const uint sh = tm_pk_shift<T>(i), m = tm_pk_mask<T>(i);
  uint old = atomic_load_explicit(w, memory_order_relaxed);
  while (true) {
    if (((old & m) >> sh) != tm_pk_to<T>(cmp)) return tm_pk_from<T>(old >> sh);
    if (atomic_compare_exchange_weak_explicit(w, &old, (old & ~m) | (tm_pk_to<T>(val) << sh), memory_order_relaxed, memory_order_relaxed)) {
      return cmp;
    }
  }
}
template <typename T> inline T tm_pk_load8(device atomic<float>* p, uint i) {
  device atomic<uint>* w = (device atomic<uint>*)p + 2u * i;
  const uint lo = atomic_load_explicit(w, memory_order_relaxed), hi = atomic_load_explicit(w + 1, memory_order_relaxed);
  return as_type<T>(uint2(lo, hi));
}
template <typename T> inline void tm_pk_store8(device atomic<float>* p, uint i, T v) {
  device atomic<uint>* w = (device atomic<uint>*)p + 2u * i;
  const uint2 b = as_type<uint2>(v);
  atomic_store_explicit(w, b.x, memory_order_relaxed);
  atomic_store_explicit(w + 1, b.y, memory_order_relaxed);
}
"#;

/// Float max/min: Metal float atomics only add, so loop a CAS on the bits. The order is
/// IEEE totalOrder on the bits, as Triton's integer max/min of the bits gives it (see
/// `tm_atomic_fmax` in cpu_runtime.h); no float comparison, so no fast-math question.
pub(super) const ATOMIC_FMINMAX: &str = r#"
inline uint tm_total_key(uint u) { return u ^ ((0u - (u >> 31)) | 0x80000000u); }
inline float tm_atomic_fmax(device atomic<float>* p, float v) {
  device atomic<uint>* u = (device atomic<uint>*)p;
  const uint vb = as_type<uint>(v);
  uint old = atomic_load_explicit(u, memory_order_relaxed);
  while (true) {
    if (tm_total_key(vb) <= tm_total_key(old)) return as_type<float>(old);
    const uint seen = old;
    if (atomic_compare_exchange_weak_explicit(u, &old, vb, memory_order_relaxed, memory_order_relaxed)) return as_type<float>(seen);
  }
}
inline float tm_atomic_fmin(device atomic<float>* p, float v) {
  device atomic<uint>* u = (device atomic<uint>*)p;
  const uint vb = as_type<uint>(v);
  uint old = atomic_load_explicit(u, memory_order_relaxed);
  while (true) {
    if (tm_total_key(vb) >= tm_total_key(old)) return as_type<float>(old);
    const uint seen = old;
    if (atomic_compare_exchange_weak_explicit(u, &old, vb, memory_order_relaxed, memory_order_relaxed)) return as_type<float>(seen);
  }
}
"#;

/// Philox-4x32 as Triton computes it (`philox_impl`).
pub(super) const PHILOX: &str = concat!(
    "\ninline uint4 tm_philox(uint c0, uint c1, uint c2, uint c3, uint k0, uint k1, uint rounds) {\n",
    super::dialect::philox_rounds!("mulhi"),
    "  return uint4(c0, c1, c2, c3);\n}\n"
);

/// Metal's packed vectors (element alignment, so any element offset may start a chunk)
/// and a chunk load (`tm_vload`: 4 elements, `tm_vload2`: 2, for 2-element blocks) for
/// either address space MLX may bind an input in (`constant` below 8
/// elements). A CPU build of the body (the emulator: CPU target macros are defined there,
/// never in the Metal compiler) has no address spaces and no packed types, so it gets
/// element-aligned vector typedefs and one load per type (not a template: a template
/// argument would drop the typedef's alignment).
pub(super) const PACKED: &str = r#"
#if defined(__x86_64__) || defined(__aarch64__)
#define TM_PACKED(T, N, A) \
  typedef T packed_##N##2 __attribute__((ext_vector_type(2), aligned(A))); \
  typedef T packed_##N##4 __attribute__((ext_vector_type(4), aligned(A))); \
  inline packed_##N##2 tm_vload2(const T* p) { return *(const packed_##N##2*)p; } \
  inline packed_##N##4 tm_vload(const T* p) { return *(const packed_##N##4*)p; }
#else
#define TM_PACKED(T, N, A) \
  inline packed_##N##2 tm_vload2(const device T* p) { return *(const device packed_##N##2*)p; } \
  inline packed_##N##2 tm_vload2(const constant T* p) { return *(const constant packed_##N##2*)p; } \
  inline packed_##N##4 tm_vload(const device T* p) { return *(const device packed_##N##4*)p; } \
  inline packed_##N##4 tm_vload(const constant T* p) { return *(const constant packed_##N##4*)p; }
#endif
TM_PACKED(float, float, 4)
TM_PACKED(half, half, 2)
TM_PACKED(int32_t, int, 4)
TM_PACKED(uint32_t, uint, 4)
TM_PACKED(int16_t, short, 2)
TM_PACKED(uint16_t, ushort, 2)
TM_PACKED(int8_t, char, 1)
TM_PACKED(uint8_t, uchar, 1)
#undef TM_PACKED
"#;
