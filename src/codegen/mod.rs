//! Code generation: kernel IR to C-family source (Metal Shading Language and CUDA for GPUs,
//! C++ for the compiled CPU executor).
//!
//! One printer (`lower.rs`, `reduce.rs`, `dot.rs`) writes per-thread code for any
//! [`dialect::Dialect`]; [`metal::compile`] wraps it for MLX's `fast::metal_kernel` (the
//! ABI rules are in [`abi`]), [`cuda::compile`] for `fast::cuda_kernel` or NVRTC, and
//! [`cpu::compile`] for `native::execute_native`. On a GPU each program is one threadgroup of
//! `num_warps x 32` threads (on the CPU, one thread); block tensors are spread over them by
//! [`layout::BlockedLayout`].
//!
//! ```
//! use triton_metal::{codegen, tl, DType::{F32, I32}};
//! let add = tl::jit("add_kernel", |k| {
//!     let (x, y, out) = (k.ptr(F32, "x_ptr"), k.ptr(F32, "y_ptr"), k.ptr(F32, "out_ptr"));
//!     let n = k.scalar(I32, "n_elements");
//!     let block = k.constexpr("BLOCK_SIZE");
//!     let offs = tl::program_id(0) * block + tl::arange(0, block);
//!     let mask = offs.lt(n);
//!     tl::store(out + offs, tl::load(x + offs).mask(mask) + tl::load(y + offs).mask(mask)).mask(mask);
//! })?;
//! let kernel = add.specialize_with(&[("BLOCK_SIZE", 1024)])?;
//! let prog = codegen::msl(&kernel, &codegen::LaunchOptions::default())?;
//! assert_eq!(prog.input_names, ["x_ptr", "y_ptr", "n_elements"]);
//! assert_eq!(prog.output_names, ["out_ptr"]);
//! assert_eq!(prog.launch_dims([4, 1, 1]), ([512, 1, 1], [128, 1, 1]));
//! # Ok::<(), triton_metal::Error>(())
//! ```
//!
//! The decisions the printer spells (dot lowering, reduction strategy, accumulators kept in
//! fragments across loops, and for the compiled CPU executor its one-thread specialisations,
//! [`crate::opt::cpu`]) come from the optimizer's layout plan ([`crate::opt::plan`]);
//! [`metal::compile_with`], [`cuda::compile_with`] and [`cpu::compile_with`] take a plan
//! with overrides.
//!
//! Conventions: scalar parameters are inputs passed as 0-d MLX arrays; pointers that are
//! stored to are outputs (see [`abi`]). `TRITON_METAL_DEBUG=1` prints the IR, the layout
//! plan, the layouts chosen, the MSL and the launch shape to stderr at compile time. Compiled programs are
//! cached in process ([`msl`]); with `TRITON_METAL_CACHE_DIR=<dir>` the generated sources
//! are also written there as `<name>.metal` (header + body) for inspection.

pub mod abi;
mod ahead;
pub mod cpu;
pub mod cuda;
mod dbuf;
pub mod dialect;
mod dot;
pub mod layout;
mod lower;
mod math;
pub mod metal;
mod mma;
pub mod nvrtc;
mod reduce;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

pub use cuda::CudaProgram;
pub use lower::int_to_ptr_kind;
pub use metal::MetalProgram;

use crate::error::Result;
use crate::ir::Kernel;
pub use crate::opt::options::{LaunchOptions, ReductionLayout};
use crate::opt::plan::KernelPlan;

pub use crate::cache::CACHE_DIR_ENV;
pub use crate::settings::DEBUG_ENV;

/// One decision of the code generator, for debugging and tools.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutChoice {
    /// The op and its value.
    pub op: String,
    /// What was chosen.
    pub layout: String,
}

fn cache() -> &'static Mutex<HashMap<Digest, Arc<MetalProgram>>> {
    static CACHE: OnceLock<Mutex<HashMap<Digest, Arc<MetalProgram>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// A SHA-256 digest.
type Digest = [u8; 32];

/// SHA-256 of `parts`, each preceded by its length (so that no two lists of parts share a
/// message).
fn digest(parts: &[&[u8]]) -> Digest {
    use sha2::{Digest as _, Sha256};
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    h.finalize().into()
}

/// The part of a program's cache key ([`cache_key`]) that comes from the kernel
/// specialisation: a SHA-256 digest of its IR text and its constexprs. Launches compute it
/// once per specialisation (printing a large kernel's IR takes longer than the rest of a
/// launch) and look programs up with it ([`msl_digested`], [`cuda_digested`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct KernelDigest(Digest);

impl KernelDigest {
    /// The digest of `kernel`.
    pub(crate) fn of(kernel: &Kernel) -> KernelDigest {
        let (ir, constexprs) = (kernel.ir(), format!("{:?}", kernel.constexprs));
        KernelDigest(digest(&[ir.as_bytes(), constexprs.as_bytes()]))
    }
}

/// The cache key: a SHA-256 digest (hex) of a SHA-256 digest of the kernel's IR text and
/// constexprs, the options (target profile included) and, for a plan given instead of
/// the optimizer's ([`msl_planned`], [`cuda_planned`]), that plan's text, which determines
/// every decision the printer spells.
pub fn cache_key(kernel: &Kernel, opts: &LaunchOptions, plan: Option<&KernelPlan>) -> String {
    in_place_key(&KernelDigest::of(kernel), opts, &[], plan)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The Metal program of a kernel specialisation under `opts`, compiled once per process
/// (keyed by [`cache_key`]).
pub fn msl(kernel: &Kernel, opts: &LaunchOptions) -> Result<Arc<MetalProgram>> {
    msl_in_place(kernel, opts, &[])
}

/// [`msl`] for a launch updating the pointer parameters `in_place` in place
/// ([`metal::compile_in_place`]); cached per set of such parameters too.
pub fn msl_in_place(
    kernel: &Kernel,
    opts: &LaunchOptions,
    in_place: &[usize],
) -> Result<Arc<MetalProgram>> {
    let dir = crate::cache::source_dir()?;
    msl_with(
        kernel,
        opts,
        in_place,
        crate::settings::debug_enabled(),
        dir.as_deref(),
    )
}

/// [`msl_in_place`] spelling `plan` ([`metal::plan`]'s, edited) instead of the optimizer's
/// plan; cached per plan text too. Errors as [`metal::compile_with`], which verifies it.
pub fn msl_planned(
    kernel: &Kernel,
    opts: &LaunchOptions,
    in_place: &[usize],
    plan: &KernelPlan,
) -> Result<Arc<MetalProgram>> {
    msl_digested(
        kernel,
        &KernelDigest::of(kernel),
        opts,
        in_place,
        Some(plan),
    )
}

/// [`msl_in_place`], or [`msl_planned`] with a `plan`, for a kernel whose digest is known:
/// `digest` must be `KernelDigest::of(kernel)`.
pub(crate) fn msl_digested(
    kernel: &Kernel,
    digest: &KernelDigest,
    opts: &LaunchOptions,
    in_place: &[usize],
    plan: Option<&KernelPlan>,
) -> Result<Arc<MetalProgram>> {
    let dir = crate::cache::source_dir()?;
    msl_cached(
        (kernel, digest),
        (opts, plan),
        in_place,
        crate::settings::debug_enabled(),
        dir.as_deref(),
    )
}

/// [`cache_key`] extended by the parameters updated in place.
fn in_place_key(
    kernel: &KernelDigest,
    opts: &LaunchOptions,
    in_place: &[usize],
    plan: Option<&KernelPlan>,
) -> Digest {
    let (options, in_place) = (format!("{opts:?}"), format!("{in_place:?}"));
    let plan = plan.map_or(String::new(), |p| p.to_string());
    digest(&[
        &kernel.0,
        options.as_bytes(),
        in_place.as_bytes(),
        plan.as_bytes(),
    ])
}

fn msl_with(
    kernel: &Kernel,
    opts: &LaunchOptions,
    in_place: &[usize],
    debug: bool,
    source_dir: Option<&std::path::Path>,
) -> Result<Arc<MetalProgram>> {
    let digest = KernelDigest::of(kernel);
    msl_cached((kernel, &digest), (opts, None), in_place, debug, source_dir)
}

fn msl_cached(
    (kernel, kernel_digest): (&Kernel, &KernelDigest),
    (opts, given): (&LaunchOptions, Option<&KernelPlan>),
    in_place: &[usize],
    debug: bool,
    source_dir: Option<&std::path::Path>,
) -> Result<Arc<MetalProgram>> {
    let key = in_place_key(kernel_digest, opts, in_place, given);
    if let Some(p) = cache().lock().map_err(|_| poisoned())?.get(&key) {
        return Ok(p.clone());
    }
    let plan = match given {
        Some(p) => p.clone(),
        None => metal::plan(kernel, opts),
    };
    if debug {
        eprintln!("[triton-metal] IR before lowering:\n{}", kernel.ir());
        eprintln!("[triton-metal] layout plan:\n{plan}");
        eprintln!(
            "[triton-metal] value layouts:\n{}",
            crate::opt::values::text(kernel, &plan, opts)
        );
    }
    let prog = Arc::new(metal::compile_in_place(kernel, opts, &plan, in_place)?);
    if debug {
        eprintln!(
            "[triton-metal] lowered for {} ({} warps):\n{}",
            opts.target.chip,
            opts.num_warps,
            prog.describe()
        );
        eprintln!(
            "[triton-metal] launch: threadgroup [{}, 1, 1], grid = programs x {} threads, {} bytes threadgroup memory",
            prog.threads_per_threadgroup, prog.threads_per_threadgroup, prog.threadgroup_mem_bytes
        );
    }
    if let Some(dir) = source_dir {
        crate::cache::ensure_private_dir(dir, &format!("${CACHE_DIR_ENV}"))?;
        crate::cache::write_atomic(
            dir,
            &format!("{}.metal", prog.name),
            format!("{}\n// ---- body ----\n{}", prog.header, prog.source).as_bytes(),
        )?;
    }
    cache()
        .lock()
        .map_err(|_| poisoned())?
        .insert(key, prog.clone());
    Ok(prog)
}

fn cuda_cache() -> &'static Mutex<HashMap<Digest, Arc<CudaProgram>>> {
    static CACHE: OnceLock<Mutex<HashMap<Digest, Arc<CudaProgram>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The CUDA program of a kernel specialisation under `opts` (whose target must be a CUDA
/// profile, e.g. `HardwareProfile::of(Chip::Sm90)`), compiled once per process (keyed by
/// [`cache_key`]). `TRITON_METAL_DEBUG` and `TRITON_METAL_CACHE_DIR` work as for [`msl`];
/// the folder gets `<name>.cu`, the [`CudaProgram::standalone`] translation unit.
pub fn cuda(kernel: &Kernel, opts: &LaunchOptions) -> Result<Arc<CudaProgram>> {
    cuda_in_place(kernel, opts, &[])
}

/// [`cuda`] for a launch updating the pointer parameters `in_place` in place
/// ([`cuda::compile_in_place`]); cached per set of such parameters too.
pub fn cuda_in_place(
    kernel: &Kernel,
    opts: &LaunchOptions,
    in_place: &[usize],
) -> Result<Arc<CudaProgram>> {
    cuda_digested(kernel, &KernelDigest::of(kernel), opts, in_place, None)
}

/// [`cuda_in_place`] spelling `plan` ([`cuda::plan`]'s, edited) instead of the optimizer's
/// plan; cached per plan text too. Errors as [`cuda::compile_with`], which verifies it.
pub fn cuda_planned(
    kernel: &Kernel,
    opts: &LaunchOptions,
    in_place: &[usize],
    plan: &KernelPlan,
) -> Result<Arc<CudaProgram>> {
    cuda_digested(
        kernel,
        &KernelDigest::of(kernel),
        opts,
        in_place,
        Some(plan),
    )
}

/// [`cuda_in_place`], or [`cuda_planned`] with a `plan`, for a kernel whose digest is
/// known: `digest` must be `KernelDigest::of(kernel)`.
pub(crate) fn cuda_digested(
    kernel: &Kernel,
    digest: &KernelDigest,
    opts: &LaunchOptions,
    in_place: &[usize],
    given: Option<&KernelPlan>,
) -> Result<Arc<CudaProgram>> {
    let key = in_place_key(digest, opts, in_place, given);
    if let Some(p) = cuda_cache().lock().map_err(|_| poisoned())?.get(&key) {
        return Ok(p.clone());
    }
    let debug = crate::settings::debug_enabled();
    let plan = match given {
        Some(p) => p.clone(),
        None => cuda::plan(kernel, opts),
    };
    if debug {
        eprintln!("[triton-metal] IR before lowering:\n{}", kernel.ir());
        eprintln!("[triton-metal] layout plan:\n{plan}");
        eprintln!(
            "[triton-metal] value layouts:\n{}",
            crate::opt::values::text(kernel, &plan, opts)
        );
    }
    let prog = Arc::new(cuda::compile_in_place(kernel, opts, &plan, in_place)?);
    if debug {
        eprintln!(
            "[triton-metal] lowered for {} ({} warps):\n{}",
            opts.target.chip,
            opts.num_warps,
            prog.describe()
        );
    }
    if let Some(dir) = crate::cache::source_dir()? {
        crate::cache::write_atomic(
            &dir,
            &format!("{}.cu", prog.name),
            prog.standalone().as_bytes(),
        )?;
    }
    cuda_cache()
        .lock()
        .map_err(|_| poisoned())?
        .insert(key, prog.clone());
    Ok(prog)
}

fn poisoned() -> crate::Error {
    crate::Error::Runtime {
        kernel: String::new(),
        msg: "codegen cache lock poisoned by a panic".into(),
    }
}

#[cfg(test)]
pub(crate) mod cpu_plan_tests;
#[cfg(test)]
mod cpu_tests;
#[cfg(test)]
mod cuda_tests;
#[cfg(test)]
mod diff_tests;
#[cfg(test)]
mod plan_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod unswitch_tests;
