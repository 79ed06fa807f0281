//! What differs between C-family GPU languages, as data (STYLE rule 10).
//!
//! The printer in `lower.rs` is shared; a dialect is this table of spellings plus the
//! per-op overrides in [`Dialect::overrides`], consulted before the shared printing, and the
//! helper header ([`Dialect::header`]). [`METAL`], [`CUDA`] and [`CPU`] (C++ for the compiled CPU executor) are the values. What is
//! still Metal's alone: the `simdgroup_matrix` tile path of `tl.dot` (a dialect without
//! `matrix_8x8` takes the FMA path). Generated code spells Metal's short scalar names
//! (`uint` for loop indices, `ulong`, `uchar`, `ushort`); the CUDA prelude defines them as
//! typedefs, so the shared printer needs no per-dialect index type.

use crate::dtype::DType;
use crate::ir::{MemScope, MemSem};

/// Spellings of one target language.
/// The rounds of Philox-4x32 as Triton computes them (`philox_impl`), on `uint` counters
/// `c0..c3` and keys `k0, k1`, with the dialect's spelling of the high half of a 32-bit
/// product (every dialect's helper differs only in that and in how it returns four `uint`s).
macro_rules! philox_rounds {
    ($mulhi:literal) => {
        concat!(
            "  for (uint r = 0; r < rounds; ++r) {
    const uint a0 = c0;
    const uint a2 = c2;
    c0 = ",
            $mulhi,
            "(0xCD9E8D57u, a2) ^ c1 ^ k0;
    c2 = ",
            $mulhi,
            "(0xD2511F53u, a0) ^ c3 ^ k1;
    c1 = 0xCD9E8D57u * a2;
    c3 = 0xD2511F53u * a0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
"
        )
    };
}
pub(super) use philox_rounds;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dialect {
    /// Short name (`metal`, `cuda`).
    pub name: &'static str,
    /// The language's name in error messages (`Metal`, `CUDA`).
    pub title: &'static str,
    /// Element type names, indexed like [`DType::ALL`]; `None` when the language lacks it.
    pub types: [Option<&'static str>; 13],
    /// Qualifier of a per-threadgroup array declaration.
    pub shared_array: &'static str,
    /// Qualifier of a read-write pointer into device memory.
    pub device_ptr: &'static str,
    /// Full threadgroup barrier with threadgroup-memory ordering.
    pub barrier: &'static str,
    /// Barrier that also orders device memory (`debug_barrier`).
    pub device_barrier: &'static str,
    /// Index of the thread within its program (threadgroup).
    pub thread_index: &'static str,
    /// Lane within the SIMD-group (warp).
    pub lane_index: &'static str,
    /// SIMD-group (warp) index within the threadgroup.
    pub simdgroup_index: &'static str,
    /// Program id per axis.
    pub program_id: [&'static str; 3],
    /// Number of programs per axis.
    pub num_programs: [&'static str; 3],
    /// Positive infinity and NaN of `float`.
    pub infinity: &'static str,
    /// Quiet NaN of `float`.
    pub nan: &'static str,
    /// Bit reinterpretation, `{ty}` and `{x}` substituted.
    pub bitcast: &'static str,
    /// Butterfly shuffle across lanes, `{x}` and `{m}` (lane mask) substituted.
    pub shuffle_xor: &'static str,
    /// SIMD-wide sum, max and min (`{x}`), when the language has them.
    pub simd_sum: Option<&'static str>,
    /// SIMD-wide max.
    pub simd_max: Option<&'static str>,
    /// SIMD-wide min.
    pub simd_min: Option<&'static str>,
    /// Shuffle from the lane `{d}` below, `{x}` and `{d}` substituted.
    pub shuffle_up: &'static str,
    /// Exclusive prefix sum over the SIMD-group (`{x}`), when the language has one.
    pub prefix_exclusive_sum: Option<&'static str>,
    /// Exclusive prefix product over the SIMD-group (`{x}`).
    pub prefix_exclusive_product: Option<&'static str>,
    /// Atomic read-modify-write returning the old value: `{op}` (`fetch_add`,
    /// `fetch_max`, `exchange`, ...), `{addr}`, `{val}` and `{ord}` (the
    /// [`Dialect::atomic_order`] spelling) substituted.
    pub atomic_rmw: &'static str,
    /// An atomic the header implements (`{op}`: `fmax`, `fmin`, `cas`; `{val}`: the operand,
    /// or `cmp, val` for `cas`), same substitutions as [`Dialect::atomic_rmw`].
    pub atomic_helper: &'static str,
    /// The `{ord}` text that gives an atomic Triton's `sem=` (`None`: Triton's default,
    /// `acq_rel`) and `scope=`, or why this language cannot honour them.
    pub atomic_order: AtomicOrdering,
    /// MLX declares every output of a kernel with atomics `device atomic<T>*` and the
    /// language's atomics are 32-bit: outputs of other widths are allocated as 32-bit words
    /// (`float`, rounded up) and their elements read and written inside the words.
    pub word_atomic_outputs: bool,
    /// Relaxed atomic load of `{addr}`.
    pub atomic_load: &'static str,
    /// Relaxed atomic store statement of `{val}` to `{addr}`.
    pub atomic_store: &'static str,
    /// High half of the full product (`{a}`, `{b}`).
    pub mulhi: &'static str,
    /// `8x8` matrix fragments (`simdgroup_matrix`) are available.
    pub matrix_8x8: bool,
    /// `mma.sync.m16n8k16` tensor-core instructions (inline PTX) take `tl.dot` with fp16/bf16
    /// operands and an fp32 accumulator (see `mma.rs`).
    pub mma_m16n8k16: bool,
    /// Per-op overrides, checked before the shared printing.
    pub overrides: &'static [(&'static str, &'static str)],
    /// Start of every header (includes, typedefs, always-needed helpers).
    pub prelude: &'static str,
    /// Helper definitions printed once each when the body uses them, by helper name
    /// (`erf`, `atomic`, `atomic_cas`, `atomic_fminmax`, `in_place`, `philox`, `packed`,
    /// `minmax`, `f2i`, `simd_fsum`).
    pub helpers: &'static [(&'static str, &'static str)],
    /// Type of one chunk of a vectorised access: `{ty}` (element type) and `{n}`.
    pub vector_type: &'static str,
    /// Chunk widths with a packed access, each with the expression loading one chunk from
    /// the element pointer `{p}`; the widest bounds the chunk of the blocked layout.
    pub vector_load: &'static [(usize, &'static str)],
    /// Statement storing the chunk `{v}` (of type `{vt}`) to the element pointer `{p}`.
    pub vector_store: &'static str,
    /// Where wide accesses need natural alignment: the chunk load (`{n}` elements) and store
    /// (`{v}`) through the base pointer `{b}` at an element offset `{o}` proven to be a
    /// multiple of the chunk, so only the base's alignment is tested: a loop-invariant test
    /// the compiler hoists, where [`Self::vector_load`] tests every chunk's address.
    pub aligned_offset_access: Option<(&'static str, &'static str)>,
    /// Type of four `uint`s indexable with `[k]` (Philox results).
    pub uint4: &'static str,
    /// Threads of a SIMD-group (warp): a program has `num_warps x simd_width` threads.
    pub simd_width: usize,
    /// Statement printed before every memory op (`{id}`: the op's index), so a failing
    /// access can name its op.
    pub op_marker: Option<&'static str>,
    /// Statement reporting a `for` loop whose step is zero at run time (`{id}`: the loop's
    /// op index); where `None`, such a loop runs no iteration.
    pub zero_step: Option<&'static str>,
}

impl Dialect {
    /// The expression loading a chunk of `n` elements from `{p}`, if the language has one.
    pub fn vector_load(&self, n: usize) -> Option<&'static str> {
        self.vector_load
            .iter()
            .find(|(w, _)| *w == n)
            .map(|(_, e)| *e)
    }

    /// The widest chunk with a packed access.
    pub fn widest_vector(&self) -> usize {
        self.vector_load.iter().map(|(w, _)| *w).max().unwrap_or(1)
    }

    /// The language's name for `dtype`, if it has one.
    pub fn type_name(&self, dtype: DType) -> Option<&'static str> {
        let i = DType::ALL.iter().position(|d| *d == dtype)?;
        self.types[i]
    }

    /// The override template for an op name, if the dialect has one.
    pub fn override_for(&self, op: &str) -> Option<&'static str> {
        self.overrides
            .iter()
            .find(|(name, _)| *name == op)
            .map(|(_, t)| *t)
    }

    /// The header for a body that uses `helpers`: the prelude, then each helper's
    /// definition (in name order, each once; names the dialect does not need print nothing).
    pub fn header(&self, helpers: &std::collections::BTreeSet<&'static str>) -> String {
        let mut s = String::from(self.prelude);
        for h in helpers {
            if let Some((_, def)) = self.helpers.iter().find(|(n, _)| n == h) {
                s.push_str(def);
            }
        }
        s
    }
}

/// Float max/min and float-to-integer conversions, the same text in every dialect: `$q`
/// qualifies a function (`inline`, `__device__ inline`), `$u` reinterprets a `float` as a
/// `uint`, `$i8` names the 8-bit signed type. Returns the `minmax` and `f2i` helpers.
///
/// Max/min follow Triton: a NaN operand is ignored (`maximum`, `max` reductions) or wins
/// (`propagate_nan=ALL`) as the canonical NaN (all payload bits set, `0x7fffffff`; `0x7fff`
/// once rounded to f16/bf16), which the PTX ISA specifies for `max.NaN`/`min.NaN`, and +0 is greater than
/// -0 whatever the order. They never call the
/// language's `fmax`/`fmin` (nor `simd_max`/`simd_min` on floats, see `reduce.rs`; CUDA
/// has its own max/min, [`CUDA_MINMAX`]): under
/// Metal's default `mathFloatingPointFunctions` (fast), which MLX leaves in place, those are
/// undefined for NaN. NaN is tested on the bits, which no floating-point mode relaxes, and
/// the comparisons that follow only ever see numbers, so the result is the same under fast
/// and precise math.
///
/// Float-to-integer conversions are Triton's on NVIDIA GPUs (PTX `cvt.rzi`): truncate
/// toward zero, saturate at the range of a 16-, 32- or 64-bit integer, NaN gives 0 (64-bit:
/// the bit pattern `0x8000000000000000`); an 8-bit result is the low byte of the saturated
/// 16-bit one. Every out-of-range case is selected before the C conversion, which is
/// undefined there.
macro_rules! value_helpers {
    ($q:literal, $u:literal, $f:literal, $i8:literal) => {
        (
            concat!(
                "\n", $q, " bool tm_isnan_f(float x) { return (", $u, "(x) & 0x7fffffffu) > 0x7f800000u; }\n",
                $q, " float tm_fmax(float a, float b) { return (tm_isnan_f(b) || a > b || (a == b && (", $u, "(a) >> 31) == 0u)) ? a : b; }\n",
                $q, " float tm_fmin(float a, float b) { return (tm_isnan_f(b) || a < b || (a == b && (", $u, "(a) >> 31) != 0u)) ? a : b; }\n",
                $q, " float tm_fmax_nan(float a, float b) { return (tm_isnan_f(a) || tm_isnan_f(b)) ? ", $f, "(0x7fffffffu) : tm_fmax(a, b); }\n",
                $q, " float tm_fmin_nan(float a, float b) { return (tm_isnan_f(a) || tm_isnan_f(b)) ? ", $f, "(0x7fffffffu) : tm_fmin(a, b); }\n",
            ),
            concat!(
                "\n", $q, " bool tm_f2i_nan(float x) { return (", $u, "(x) & 0x7fffffffu) > 0x7f800000u; }\n",
                $q, " short tm_f2i16(float x) { return tm_f2i_nan(x) ? short(0) : x >= 32767.0f ? short(32767) : x <= -32768.0f ? short(-32768) : short(x); }\n",
                $q, " ushort tm_f2u16(float x) { return tm_f2i_nan(x) ? ushort(0) : x >= 65535.0f ? ushort(65535) : x <= 0.0f ? ushort(0) : ushort(x); }\n",
                $q, " int tm_f2i32(float x) { return tm_f2i_nan(x) ? 0 : x >= 2147483648.0f ? 2147483647 : x <= -2147483648.0f ? int(-2147483647 - 1) : int(x); }\n",
                $q, " uint tm_f2u32(float x) { return tm_f2i_nan(x) ? 0u : x >= 4294967296.0f ? 4294967295u : x <= 0.0f ? 0u : uint(x); }\n",
                $q, " long tm_f2i64(float x) { return tm_f2i_nan(x) || x <= -9223372036854775808.0f ? long(-0x7fffffffffffffff - 1) : x >= 9223372036854775808.0f ? long(0x7fffffffffffffff) : long(x); }\n",
                $q, " ulong tm_f2u64(float x) { return tm_f2i_nan(x) ? ulong(0x8000000000000000) : x >= 18446744073709551616.0f ? ulong(0xffffffffffffffff) : x <= 0.0f ? ulong(0) : ulong(x); }\n",
                $q, " ", $i8, " tm_f2i8(float x) { return ", $i8, "(uchar(ushort(tm_f2i16(x)))); }\n",
                $q, " uchar tm_f2u8(float x) { return uchar(tm_f2u16(x)); }\n",
            ),
        )
    };
}

const METAL_VALUES: (&str, &str) =
    value_helpers!("inline", "as_type<uint>", "as_type<float>", "char");
const CUDA_VALUES: (&str, &str) = value_helpers!(
    "__device__ inline",
    "__float_as_uint",
    "__uint_as_float",
    "schar"
);
const CPU_VALUES: (&str, &str) =
    value_helpers!("inline", "as_type<uint>", "as_type<float>", "schar");

/// CUDA's max/min: `fmaxf`/`fminf` are PTX `max.f32`/`min.f32`, the instructions Triton's
/// own `maximum`/`minimum` become, with exactly its semantics (NaN ignored, -0 < +0;
/// measured on an H100, benches/README.md), in one instruction where the selects of
/// [`value_helpers`] take several (a measurable cost in softmax's row max; benches/README.md).
const CUDA_MINMAX: &str = concat!(
    "\n__device__ inline bool tm_isnan_f(float x) { return (__float_as_uint(x) & 0x7fffffffu) > 0x7f800000u; }\n",
    "__device__ inline float tm_fmax(float a, float b) { return fmaxf(a, b); }\n",
    "__device__ inline float tm_fmin(float a, float b) { return fminf(a, b); }\n",
    "__device__ inline float tm_fmax_nan(float a, float b) { return (tm_isnan_f(a) || tm_isnan_f(b)) ? __uint_as_float(0x7fffffffu) : fmaxf(a, b); }\n",
    "__device__ inline float tm_fmin_nan(float a, float b) { return (tm_isnan_f(a) || tm_isnan_f(b)) ? __uint_as_float(0x7fffffffu) : fminf(a, b); }\n",
);

/// Metal Shading Language (MLX `fast::metal_kernel` bodies).
pub const METAL: Dialect = Dialect {
    name: "metal",
    title: "Metal",
    types: [
        Some("bool"),
        Some("char"),
        Some("short"),
        Some("int"),
        Some("long"),
        Some("uchar"),
        Some("ushort"),
        Some("uint"),
        Some("ulong"),
        Some("half"),
        Some("bfloat"),
        Some("float"),
        None,
    ],
    shared_array: "threadgroup",
    device_ptr: "device",
    barrier: "threadgroup_barrier(mem_flags::mem_threadgroup);",
    device_barrier: "threadgroup_barrier(mem_flags::mem_device);",
    thread_index: "thread_index_in_threadgroup",
    lane_index: "thread_index_in_simdgroup",
    simdgroup_index: "simdgroup_index_in_threadgroup",
    program_id: [
        "int(threadgroup_position_in_grid.x)",
        "int(threadgroup_position_in_grid.y)",
        "int(threadgroup_position_in_grid.z)",
    ],
    num_programs: [
        "int(threadgroups_per_grid.x)",
        "int(threadgroups_per_grid.y)",
        "int(threadgroups_per_grid.z)",
    ],
    infinity: "INFINITY",
    nan: "NAN",
    bitcast: "as_type<{ty}>({x})",
    shuffle_xor: "simd_shuffle_xor({x}, {m})",
    simd_sum: Some("simd_sum({x})"),
    simd_max: Some("simd_max({x})"),
    simd_min: Some("simd_min({x})"),
    shuffle_up: "simd_shuffle_up({x}, {d})",
    prefix_exclusive_sum: Some("simd_prefix_exclusive_sum({x})"),
    prefix_exclusive_product: Some("simd_prefix_exclusive_product({x})"),
    atomic_rmw: "atomic_{op}_explicit({addr}, {val}, memory_order_relaxed)",
    atomic_helper: "tm_atomic_{op}({addr}, {val})",
    atomic_order: AtomicOrdering::Metal,
    word_atomic_outputs: true,
    atomic_load: "atomic_load_explicit({addr}, memory_order_relaxed)",
    atomic_store: "atomic_store_explicit({addr}, {val}, memory_order_relaxed);",
    mulhi: "mulhi({a}, {b})",
    matrix_8x8: true,
    mma_m16n8k16: false,
    // Metal has no `erf`; the header defines one. `libdevice` math: see `math.rs`.
    overrides: super::math::METAL_OVERRIDES,
    prelude: "#include <metal_stdlib>\nusing namespace metal;\n",
    helpers: &[
        ("erf", super::metal::ERF),
        ("math", super::math::METAL_MATH),
        ("atomic_cas", super::metal::ATOMIC_CAS),
        ("atomic_fminmax", super::metal::ATOMIC_FMINMAX),
        ("atomic_words", super::metal::ATOMIC_WORDS),
        ("in_place", super::metal::IN_PLACE),
        ("in_place_words", super::metal::IN_PLACE_WORDS),
        ("philox", super::metal::PHILOX),
        ("packed", super::metal::PACKED),
        ("minmax", METAL_VALUES.0),
        ("f2i", METAL_VALUES.1),
        ("simd_fsum", super::reduce::METAL_SIMD_FSUM),
    ],
    vector_type: "packed_{ty}{n}",
    vector_load: &[(2, "tm_vload2({p})"), (4, "tm_vload({p})")],
    vector_store: "*((device {vt}*)({p})) = {v};",
    aligned_offset_access: None,
    uint4: "uint4",
    simd_width: super::layout::SIMD_WIDTH,
    op_marker: None,
    zero_step: None,
};

/// CUDA C++ as NVRTC compiles it (MLX `fast::cuda_kernel` bodies and standalone kernels).
///
/// Threads of a program are `threadIdx.x` of one block; a warp is 32 lanes, like a Metal
/// SIMD-group. Warp collectives are butterflies of `__shfl_xor_sync` over all 32 lanes (the
/// printer calls them in uniform control flow only). Atomics are CUDA's relaxed functions
/// between fences that give Triton's `sem=` ([`AtomicOrdering::Cuda`]); float max/min are
/// CAS loops. 16-byte vector accesses check alignment at run
/// time and fall back to element accesses (CUDA's vector types, unlike Metal's packed ones,
/// must be naturally aligned).
pub const CUDA: Dialect = Dialect {
    name: "cuda",
    title: "CUDA",
    types: [
        Some("bool"),
        Some("schar"),
        Some("short"),
        Some("int"),
        Some("long"),
        Some("uchar"),
        Some("ushort"),
        Some("uint"),
        Some("ulong"),
        Some("__half"),
        Some("__nv_bfloat16"),
        Some("float"),
        None,
    ],
    shared_array: "__shared__",
    device_ptr: "",
    barrier: "__syncthreads();",
    device_barrier: "__threadfence();",
    thread_index: "threadIdx.x",
    lane_index: "(threadIdx.x & 31u)",
    simdgroup_index: "(threadIdx.x >> 5)",
    program_id: ["int(blockIdx.x)", "int(blockIdx.y)", "int(blockIdx.z)"],
    num_programs: ["int(gridDim.x)", "int(gridDim.y)", "int(gridDim.z)"],
    infinity: "__int_as_float(0x7f800000)",
    nan: "__int_as_float(0x7fffffff)",
    bitcast: "tm_bitcast<{ty}>({x})",
    shuffle_xor: "__shfl_xor_sync(0xffffffffu, {x}, {m})",
    simd_sum: None,
    simd_max: None,
    simd_min: None,
    shuffle_up: "__shfl_up_sync(0xffffffffu, {x}, {d})",
    prefix_exclusive_sum: None,
    prefix_exclusive_product: None,
    atomic_rmw: "tm_atomic_{op}<{ord}>({addr}, {val})",
    atomic_helper: "tm_atomic_{op}<{ord}>({addr}, {val})",
    atomic_order: AtomicOrdering::Cuda,
    word_atomic_outputs: false,
    atomic_load: "tm_atomic_load({addr})",
    atomic_store: "tm_atomic_store({addr}, {val});",
    mulhi: "tm_mulhi({a}, {b})",
    matrix_8x8: false,
    mma_m16n8k16: true,
    overrides: super::math::CUDA_OVERRIDES,
    prelude: super::cuda::PRELUDE,
    helpers: &[
        ("atomic", super::cuda::ATOMIC),
        ("atomic_cas", super::cuda::ATOMIC_CAS),
        ("atomic_fminmax", super::cuda::ATOMIC_FMINMAX),
        ("in_place", super::cuda::IN_PLACE),
        ("philox", super::cuda::PHILOX),
        ("packed", super::cuda::PACKED),
        ("wgmma", super::cuda::WGMMA),
        ("exp2", super::cuda::EX2),
        ("minmax", CUDA_MINMAX),
        ("f2i", CUDA_VALUES.1),
    ],
    vector_type: "tm_vec<{ty}, {n}>",
    vector_load: &[
        (2, "tm_vload<2>({p})"),
        (4, "tm_vload<4>({p})"),
        (8, "tm_vload<8>({p})"),
    ],
    vector_store: "tm_vstore({p}, {v});",
    aligned_offset_access: Some(("tm_vload_at<{n}>({b}, {o})", "tm_vstore_at({b}, {o}, {v});")),
    uint4: "tm_uint4",
    simd_width: super::layout::SIMD_WIDTH,
    op_marker: None,
    zero_step: None,
};

/// C++20 for the compiled CPU executor (`native`), built by clang against Metal's
/// types and math (`emu/metal_core.h`) and a small runtime (`cpu_runtime.h`).
///
/// A program is one call on one OS thread: one thread of one lane (`simd_width` 1), so
/// every block sits in that thread's local arrays, reductions and layout changes never
/// leave the thread and barriers print nothing. Every access goes through a bounds-checked
/// view of its argument (`tm_buf`); chunks of 8 consecutive elements (one AVX2 vector of
/// `float`) are loaded and stored whole.
pub const CPU: Dialect = Dialect {
    name: "cpu",
    title: "the compiled CPU executor",
    types: [
        Some("bool"),
        Some("schar"),
        Some("short"),
        Some("int"),
        Some("long"),
        Some("uchar"),
        Some("ushort"),
        Some("uint"),
        Some("ulong"),
        Some("half"),
        Some("bfloat"),
        Some("float"),
        Some("double"),
    ],
    shared_array: "",
    device_ptr: "",
    barrier: "",
    device_barrier: "",
    thread_index: "0u",
    lane_index: "0u",
    simdgroup_index: "0u",
    program_id: ["tm_pid0", "tm_pid1", "tm_pid2"],
    num_programs: ["tm_np0", "tm_np1", "tm_np2"],
    infinity: "INFINITY",
    nan: "NAN",
    bitcast: "as_type<{ty}>({x})",
    // One lane: a collective over the SIMD-group is the value itself.
    shuffle_xor: "{x}",
    simd_sum: None,
    simd_max: None,
    simd_min: None,
    shuffle_up: "{x}",
    prefix_exclusive_sum: None,
    prefix_exclusive_product: None,
    atomic_rmw: "tm_atomic_{op}<{ord}>({addr}, {val})",
    atomic_helper: "tm_atomic_{op}<{ord}>({addr}, {val})",
    atomic_order: AtomicOrdering::Cpu,
    word_atomic_outputs: false,
    atomic_load: "tm_atomic_load({addr})",
    atomic_store: "tm_atomic_store({addr}, {val});",
    mulhi: "mulhi({a}, {b})",
    matrix_8x8: false,
    mma_m16n8k16: false,
    overrides: super::math::CPU_OVERRIDES,
    prelude: concat!(
        include_str!("../clang/metal_core.h"),
        include_str!("cpu_runtime.h")
    ),
    helpers: &[
        ("erf", super::metal::ERF),
        ("math", super::math::CPU_MATH),
        ("philox", super::cpu::PHILOX),
        ("minmax", CPU_VALUES.0),
        ("f2i", CPU_VALUES.1),
    ],
    vector_type: "tm_vec<{ty}, {n}>",
    vector_load: &[
        (2, "tm_vload<2>({p})"),
        (4, "tm_vload<4>({p})"),
        (8, "tm_vload<8>({p})"),
    ],
    vector_store: "tm_vstore({p}, {v});",
    aligned_offset_access: None,
    uint4: "tm_uint4",
    simd_width: 1,
    op_marker: Some("tm_status->op = {id};"),
    zero_step: Some("tm_zero_step(tm_status, {id});"),
};

/// How a language gives an atomic Triton's `sem=` and `scope=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOrdering {
    /// Metal's device atomics are relaxed only: `sem="relaxed"` (and Triton's default,
    /// which Metal runs relaxed) at `cta` or `gpu` scope; a device-scope atomic serves
    /// `cta` too.
    Metal,
    /// `{ord}` is `O, S`: the order's bits (1 acquire, 2 release) and the scope (0 the
    /// block, 1 the device). The header's atomics are CUDA's relaxed device-scope functions
    /// between fences of that scope (`__threadfence_block`/`__threadfence`): a fence before
    /// gives release, one after gives acquire. System scope is not generated.
    Cuda,
    /// The `__atomic` builtin order itself; every scope is the process's memory, which the
    /// builtins order at every scope.
    Cpu,
}

impl AtomicOrdering {
    /// The `{ord}` text for `sem` (`None`: Triton's default, `acq_rel`) and `scope`, or
    /// why the language cannot honour them.
    pub fn spell(
        self,
        sem: Option<MemSem>,
        scope: MemScope,
    ) -> std::result::Result<&'static str, String> {
        match self {
            AtomicOrdering::Metal => metal_atomic_order(sem, scope),
            AtomicOrdering::Cuda => cuda_atomic_order(sem, scope),
            AtomicOrdering::Cpu => Ok(cpu_atomic_order(sem)),
        }
    }
}

fn metal_atomic_order(
    sem: Option<MemSem>,
    scope: MemScope,
) -> std::result::Result<&'static str, String> {
    if let Some(s @ (MemSem::Acquire | MemSem::Release | MemSem::AcqRel)) = sem {
        return Err(format!(
            "sem=\"{}\" (Metal's device atomics are relaxed only; pass sem=\"relaxed\" where \
             the kernel does not order other memory accesses through the atomic, or run on \
             Target::Cpu, Target::CpuCompiled or CUDA)",
            s.name()
        ));
    }
    if scope == MemScope::Sys {
        return Err(
            "scope=\"sys\" (Metal's atomics reach the GPU only; use scope=\"gpu\", or \
                    run on Target::Cpu or Target::CpuCompiled)"
                .into(),
        );
    }
    Ok("")
}

fn cuda_atomic_order(
    sem: Option<MemSem>,
    scope: MemScope,
) -> std::result::Result<&'static str, String> {
    let o = match sem.unwrap_or(MemSem::AcqRel) {
        MemSem::Relaxed => 0,
        MemSem::Acquire => 1,
        MemSem::Release => 2,
        MemSem::AcqRel => 3,
    };
    let s = match scope {
        MemScope::Cta => 0,
        MemScope::Gpu => 1,
        MemScope::Sys => {
            return Err(
                "scope=\"sys\" (not generated for CUDA; use scope=\"gpu\", or run on \
                        Target::Cpu or Target::CpuCompiled)"
                    .into(),
            )
        }
    };
    Ok([
        "0, 0", "0, 1", "1, 0", "1, 1", "2, 0", "2, 1", "3, 0", "3, 1",
    ][o * 2 + s])
}

fn cpu_atomic_order(sem: Option<MemSem>) -> &'static str {
    match sem.unwrap_or(MemSem::AcqRel) {
        MemSem::Relaxed => "__ATOMIC_RELAXED",
        MemSem::Acquire => "__ATOMIC_ACQUIRE",
        MemSem::Release => "__ATOMIC_RELEASE",
        MemSem::AcqRel => "__ATOMIC_ACQ_REL",
    }
}
