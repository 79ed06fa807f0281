//! Launch entry points into MLX: the CPU-executor primitive, `fast::metal_kernel` and
//! `fast::cuda_kernel`.
//!
//! Everything about MLX's calling convention for custom kernels lives here and in
//! `cpp/bridge.cpp`; code generators only produce kernel bodies.

#[cfg(test)]
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::array::{dims_to_i32, Array};
use crate::dtype::DType;
use crate::emu::{self, LaneOrder};
use crate::error::{Error, Result};
use crate::ffi::bridge::{self, DtypeCode, MlxArray, MlxArrayList};
use crate::ffi::cpu_primitive::{CpuBody, CpuLaunch, ErrorSlot};
pub(crate) use crate::ffi::programs::register_program;
use crate::runtime::memo::ByAddress;

/// Shape and dtype of one kernel output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputSpec {
    /// Dimensions.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
}

fn flatten_outputs(
    outputs: &[OutputSpec],
    what: &str,
) -> Result<(Vec<i32>, Vec<i32>, Vec<DtypeCode>)> {
    let mut flat = Vec::new();
    let mut ndims = Vec::new();
    let mut dtypes: Vec<DtypeCode> = Vec::new();
    for o in outputs {
        flat.extend(dims_to_i32(&o.shape, what)?);
        ndims.push(o.shape.len() as i32);
        dtypes.push(o.dtype.into());
    }
    Ok((flat, ndims, dtypes))
}

fn unpack(
    list: cxx::UniquePtr<MlxArrayList>,
    pending: Arc<[Arc<ErrorSlot>]>,
) -> Result<Vec<Array>> {
    let list = list
        .as_ref()
        .ok_or_else(|| Error::Mlx("MLX returned no outputs".into()))?;
    (0..bridge::list_len(list))
        .map(|i| Array::wrap(bridge::list_get(list, i)?, pending.clone()))
        .collect()
}

/// Bytes of freed CPU-executor outputs currently kept for reuse.
///
/// Outputs of [`cpu_launch`] of 1 MiB or more are recycled: when MLX frees one, its buffer
/// is kept (up to [`set_cpu_output_cache_limit`], 1 GiB by default; over it, the
/// longest-unused buffers are released first) and handed to the next output of the same
/// size, whose pages are then already mapped. Fresh large allocations
/// cost a page fault per page on first write, which made up a third of a memory-bound
/// kernel's time. MLX's Metal allocator keeps a buffer cache for the same reason.
pub fn cpu_output_cache_bytes() -> usize {
    bridge::cpu_output_cache_bytes()
}

/// Caps the bytes [`cpu_output_cache_bytes`] may hold (0 disables the cache and frees what
/// it holds); returns the previous cap.
pub fn set_cpu_output_cache_limit(bytes: usize) -> usize {
    bridge::cpu_output_cache_set_limit(bytes)
}

/// Runs `body` as an MLX primitive on the CPU stream: returns lazy outputs at once; the
/// body runs when they are evaluated, on MLX's worker thread, with the inputs as
/// row-major contiguous bytes and uninitialised output buffers (fresh, or recycled from
/// freed outputs of earlier launches, see [`cpu_output_cache_bytes`]).
/// An error from `body` is returned by `eval` of any array that depends on the outputs.
pub fn cpu_launch(
    kernel: &str,
    body: Box<CpuBody>,
    inputs: &[&Array],
    outputs: &[OutputSpec],
) -> Result<Vec<Array>> {
    let slot = Arc::new(ErrorSlot::default());
    let launch = Box::new(CpuLaunch {
        kernel: kernel.to_string(),
        body,
        slot: slot.clone(),
    });
    let (flat, ndims, dtypes) = flatten_outputs(outputs, kernel)?;
    let ptrs: Vec<*const MlxArray> = inputs.iter().map(|a| a.raw() as *const _).collect();
    let mut pending: Vec<Arc<ErrorSlot>> = Array::merged_pending(inputs).to_vec();
    pending.push(slot);
    // SAFETY: the input pointers are borrowed from live arrays for the duration of the call.
    let list = unsafe { bridge::cpu_kernel_launch(launch, kernel, &ptrs, &flat, &ndims, &dtypes)? };
    unpack(list, pending.into())
}

/// What every custom-kernel call of MLX (`fast::metal_kernel`, `fast::cuda_kernel`) is made
/// of: names, sources, arrays and launch geometry. The backend calls below add their own
/// options. Each call makes MLX's kernel anew; launches of generated programs keep theirs.
#[derive(Clone, Debug)]
pub struct KernelCall<'a> {
    /// Kernel name (MLX prefixes `custom_kernel_`).
    pub name: &'a str,
    /// Input parameter names, in order.
    pub input_names: Vec<String>,
    /// Output parameter names, in order.
    pub output_names: Vec<String>,
    /// Kernel body (MLX writes the signature).
    pub source: &'a str,
    /// Code placed before the kernel (helpers, includes).
    pub header: &'a str,
    /// Inputs, matching `input_names`.
    pub inputs: Vec<&'a Array>,
    /// Outputs, matching `output_names`.
    pub outputs: Vec<OutputSpec>,
    /// Grid in threads per axis (Metal's dispatchThreads; CUDA rounds it up to whole blocks).
    pub grid: [usize; 3],
    /// Threads per threadgroup (block), per axis.
    pub threadgroup: [usize; 3],
    /// Fill value for the outputs before the kernel runs.
    pub init_value: Option<f32>,
}

/// A custom-kernel call as the bridge takes it.
struct Parts {
    ptrs: Vec<*const MlxArray>,
    flat: Vec<i32>,
    ndims: Vec<i32>,
    dtypes: Vec<DtypeCode>,
    grid: [i32; 3],
    threadgroup: [i32; 3],
}

impl Parts {
    fn of(
        kernel: &MadeKernel,
        inputs: &[&Array],
        outputs: &[OutputSpec],
        (grid, threadgroup): ([usize; 3], [usize; 3]),
    ) -> Result<Parts> {
        if inputs.len() != kernel.inputs || outputs.len() != kernel.outputs {
            return Err(Error::Launch {
                kernel: kernel.name.clone(),
                msg: format!(
                    "custom kernel: {} inputs and {} outputs given for {} input and {} output names",
                    inputs.len(),
                    outputs.len(),
                    kernel.inputs,
                    kernel.outputs
                ),
            });
        }
        let (flat, ndims, dtypes) = flatten_outputs(outputs, &kernel.name)?;
        let g = dims_to_i32(&grid, "grid")?;
        let t = dims_to_i32(&threadgroup, "threadgroup")?;
        Ok(Parts {
            ptrs: inputs.iter().map(|a| a.raw() as *const _).collect(),
            flat,
            ndims,
            dtypes,
            grid: [g[0], g[1], g[2]],
            threadgroup: [t[0], t[1], t[2]],
        })
    }
}

/// A custom kernel of MLX (`fast::metal_kernel` or `fast::cuda_kernel`), made once and
/// launched many times. Making one costs MLX a scan of the whole source per input name (a
/// large program's source takes longer to scan than the rest of a launch), so generated
/// programs keep theirs ([`MadeKernels`]).
pub(crate) struct MadeKernel {
    made: cxx::UniquePtr<bridge::MlxKernel>,
    /// The name MLX was given (the program's), for errors.
    pub(crate) name: String,
    inputs: usize,
    outputs: usize,
    /// Which kernel this is among those made in this process, counting from 0.
    #[cfg(test)]
    pub(crate) serial: usize,
}

impl MadeKernel {
    fn new(
        made: cxx::UniquePtr<bridge::MlxKernel>,
        name: &str,
        inputs: usize,
        outputs: usize,
    ) -> Result<MadeKernel> {
        #[cfg(test)]
        static SERIAL: AtomicUsize = AtomicUsize::new(0);
        if made.is_null() {
            return Err(Error::Mlx(format!(
                "MLX made no custom kernel for `{name}`"
            )));
        }
        Ok(MadeKernel {
            made,
            name: name.to_string(),
            inputs,
            outputs,
            #[cfg(test)]
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// `fast::metal_kernel` of these names and sources (inputs made row-contiguous; outputs
    /// as `device atomic<T>*` with `atomic_outputs`). MLX's Linux builds make it and refuse
    /// to launch it.
    pub(crate) fn metal(
        name: &str,
        input_names: &[String],
        output_names: &[String],
        (source, header): (&str, &str),
        atomic_outputs: bool,
    ) -> Result<MadeKernel> {
        let made = bridge::metal_kernel_make(
            name,
            input_names,
            output_names,
            source,
            header,
            atomic_outputs,
        )?;
        MadeKernel::new(made, name, input_names.len(), output_names.len())
    }

    /// `fast::cuda_kernel` of these names and sources (inputs made row-contiguous) with
    /// `shared_memory` bytes of dynamic shared memory. MLX's CPU build refuses to make it.
    pub(crate) fn cuda(
        name: &str,
        input_names: &[String],
        output_names: &[String],
        (source, header): (&str, &str),
        shared_memory: usize,
    ) -> Result<MadeKernel> {
        let smem = i32::try_from(shared_memory).map_err(|_| Error::Launch {
            kernel: name.into(),
            msg: format!("{shared_memory} bytes of shared memory"),
        })?;
        let made = bridge::cuda_kernel_make(name, input_names, output_names, source, header, smem)?;
        MadeKernel::new(made, name, input_names.len(), output_names.len())
    }

    /// One launch on MLX's default stream: lazy outputs of `outputs`' shapes and dtypes,
    /// each starting from `init_value` when one is given. `dims` are the grid in threads
    /// per axis and the threads per threadgroup (block).
    pub(crate) fn launch(
        &self,
        inputs: &[&Array],
        outputs: &[OutputSpec],
        dims: ([usize; 3], [usize; 3]),
        init_value: Option<f32>,
    ) -> Result<Vec<Array>> {
        let p = Parts::of(self, inputs, outputs, dims)?;
        // SAFETY: the input pointers are borrowed from live arrays for this call.
        let list = unsafe {
            bridge::mlx_kernel_call(
                &self.made,
                &p.ptrs,
                &p.flat,
                &p.ndims,
                &p.dtypes,
                p.grid,
                p.threadgroup,
                init_value.is_some(),
                init_value.unwrap_or(0.0),
            )?
        };
        unpack(list, Array::merged_pending(inputs))
    }

    /// The complete source MLX generates for a launch of this Metal kernel (signature
    /// included), captured from MLX itself by tracing the launch under `export_function`
    /// with `verbose = true`. Works on builds without Metal.
    pub(crate) fn traced_source(
        &self,
        inputs: &[&Array],
        outputs: &[OutputSpec],
        dims: ([usize; 3], [usize; 3]),
    ) -> Result<String> {
        // The scratch files (MLX's export and the captured stdout) go to the user's private
        // cache folder, never to a shared temp folder where another user could plant a link
        // under a predictable name.
        let dir = crate::cache::dir(crate::cache::Purpose::Root)?;
        let scratch = crate::cache::unique_path(&dir, "trace", "");
        self.traced_source_at(inputs, outputs, dims, &scratch)
    }

    /// [`Self::traced_source`] with its scratch files at `scratch` plus `.stdout` and
    /// `.mlxfn`; a file or link already at the `.stdout` path is an error, never followed.
    fn traced_source_at(
        &self,
        inputs: &[&Array],
        outputs: &[OutputSpec],
        dims: ([usize; 3], [usize; 3]),
        scratch: &std::path::Path,
    ) -> Result<String> {
        let p = Parts::of(self, inputs, outputs, dims)?;
        // The capture redirects the whole process's stdout: one trace at a time.
        static TRACE_LOCK: Mutex<()> = Mutex::new(());
        let _guard = TRACE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let scratch = scratch.to_string_lossy().to_string();
        // SAFETY: as in `launch`.
        let out = unsafe {
            bridge::mlx_kernel_traced_source(
                &self.made,
                &p.ptrs,
                &p.flat,
                &p.ndims,
                &p.dtypes,
                p.grid,
                p.threadgroup,
                &scratch,
            )?
        };
        // MLX prints "Generated source code for `name`:\n```\n<source>\n```".
        let body = out
            .split_once("```\n")
            .and_then(|(_, rest)| rest.rsplit_once("\n```"))
            .map(|(src, _)| src.to_string());
        body.ok_or_else(|| Error::Mlx(format!("could not read MLX's traced source from: {out}")))
    }
}

/// The kernels MLX made for generated programs (`P`: [`crate::codegen::MetalProgram`] or
/// [`crate::codegen::CudaProgram`]), one per program: a program is immutable once shared,
/// and its kernel is made from its names, sources and options alone.
pub(crate) type MadeKernels<P> = ByAddress<P, Arc<MadeKernel>>;

impl KernelCall<'_> {
    fn check_names(&self) -> Result<()> {
        if self.inputs.len() != self.input_names.len()
            || self.outputs.len() != self.output_names.len()
        {
            return Err(Error::Launch {
                kernel: self.name.into(),
                msg: "custom kernel: names and arrays differ in number".into(),
            });
        }
        Ok(())
    }

    fn run(&self, made: &MadeKernel) -> Result<Vec<Array>> {
        made.launch(
            &self.inputs,
            &self.outputs,
            (self.grid, self.threadgroup),
            self.init_value,
        )
    }
}

/// One call of MLX's `fast::metal_kernel`.
#[derive(Clone, Debug)]
pub struct MetalKernelCall<'a> {
    /// Names, sources, arrays and geometry.
    pub kernel: KernelCall<'a>,
    /// Outputs as `device atomic<T>*`.
    pub atomic_outputs: bool,
}

impl MetalKernelCall<'_> {
    fn made(&self) -> Result<MadeKernel> {
        let k = &self.kernel;
        k.check_names()?;
        MadeKernel::metal(
            k.name,
            &k.input_names,
            &k.output_names,
            (k.source, k.header),
            self.atomic_outputs,
        )
    }

    /// Launches through `fast::metal_kernel` on MLX's default stream. Without Metal (any
    /// Linux build) MLX answers `[metal_kernel] No Metal back-end.`, returned as `Err`.
    pub fn launch(&self) -> Result<Vec<Array>> {
        self.kernel.run(&self.made()?)
    }

    /// Runs this call in the Metal emulator with lanes in `order`, returning MLX arrays as
    /// [`MetalKernelCall::launch`] does on a Mac (MLX copies inputs to row-major order,
    /// which `emu::EmuBuffer::from_array` does too).
    pub fn emulate(&self, order: LaneOrder) -> Result<Vec<Array>> {
        let k = &self.kernel;
        let mut launch = emu::MetalLaunch::new(k.name, k.source)
            .header(k.header)
            .grid(k.grid)
            .threadgroup(k.threadgroup)
            .atomic_outputs(self.atomic_outputs)
            .lane_order(order);
        for (name, a) in k.input_names.iter().zip(&k.inputs) {
            launch = launch.input(emu::EmuBuffer::from_array(name, a)?);
        }
        for (name, o) in k.output_names.iter().zip(&k.outputs) {
            let mut spec = emu::OutputSpec::new(name, o.dtype, &o.shape);
            spec.init = k.init_value;
            launch = launch.output(spec);
        }
        emu::run(&launch)?
            .iter()
            .map(emu::EmuBuffer::to_array)
            .collect()
    }

    /// The complete Metal source MLX would compile for this call (signature included),
    /// captured from MLX itself by tracing the call under `export_function` with
    /// `verbose = true`. Works on builds without Metal.
    pub fn traced_source(&self) -> Result<String> {
        let k = &self.kernel;
        self.made()?
            .traced_source(&k.inputs, &k.outputs, (k.grid, k.threadgroup))
    }
}

/// One call of MLX's `fast::cuda_kernel` (inputs made row-contiguous by MLX; each input
/// becomes `const T*`, 0-d arrays too, and each output `T*`).
#[derive(Clone, Debug)]
pub struct CudaKernelCall<'a> {
    /// Names, sources, arrays and geometry.
    pub kernel: KernelCall<'a>,
    /// Bytes of dynamic shared memory.
    pub shared_memory: usize,
}

impl CudaKernelCall<'_> {
    /// Launches through `fast::cuda_kernel` on MLX's default stream. Without a CUDA GPU
    /// (any CPU build of MLX) MLX's error is returned as `Err`.
    pub fn launch(&self) -> Result<Vec<Array>> {
        let k = &self.kernel;
        k.check_names()?;
        let made = MadeKernel::cuda(
            k.name,
            &k.input_names,
            &k.output_names,
            (k.source, k.header),
            self.shared_memory,
        )?;
        k.run(&made)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_trace_never_writes_through_a_planted_link() {
        let dir = crate::cache::dir(crate::cache::Purpose::Root).unwrap();
        let victim = crate::cache::unique_path(&dir, "victim", ".txt");
        std::fs::write(&victim, "keep me").unwrap();
        let scratch = crate::cache::unique_path(&dir, "trace", "");
        let link = format!("{}.stdout", scratch.display());
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let made = MadeKernel::metal(
            "planted",
            &["x".into()],
            &["out".into()],
            ("out[0] = x[0];", ""),
            false,
        )
        .unwrap();
        let x = Array::from_slice(&[1.0f32], &[1]).unwrap();
        let spec = OutputSpec {
            shape: vec![1],
            dtype: DType::F32,
        };
        let got = made.traced_source_at(
            &[&x],
            std::slice::from_ref(&spec),
            ([1, 1, 1], [1, 1, 1]),
            &scratch,
        );
        let read = std::fs::read_to_string(&victim).unwrap();
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_file(&victim);
        let e = got.expect_err("a planted link must be refused").to_string();
        assert!(e.contains("cannot capture stdout"), "{e}");
        assert_eq!(read, "keep me");
        // The same call through a fresh private path works.
        let traced = made
            .traced_source(&[&x], std::slice::from_ref(&spec), ([1, 1, 1], [1, 1, 1]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(traced.contains("out[0] = x[0];"), "{traced}");
    }

    #[test]
    fn a_metal_kernel_call_runs_in_the_emulator() {
        if !emu::Emulator::should_run("a_metal_kernel_call_runs_in_the_emulator")
            .unwrap_or_else(|e| panic!("{e}"))
        {
            return;
        }
        let x = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[2, 4]).unwrap();
        let h = Array::from_slice(&[half::f16::from_f32(0.5); 8], &[8]).unwrap();
        let call = MetalKernelCall {
            kernel: KernelCall {
                name: "axpy",
                input_names: vec!["x".into(), "h".into()],
                output_names: vec!["out".into()],
                source:
                    "uint i = thread_position_in_grid.x;\n  if (i < 6) out[i] = x[i] * float(h[i]);",
                header: "",
                inputs: vec![&x, &h],
                outputs: vec![OutputSpec {
                    shape: vec![8],
                    dtype: DType::F32,
                }],
                grid: [8, 1, 1],
                threadgroup: [4, 1, 1],
                init_value: Some(-1.0),
            },
            atomic_outputs: false,
        };
        for order in [LaneOrder::Forward, LaneOrder::Reverse] {
            let out = call.emulate(order).unwrap();
            assert_eq!(
                out[0].to_vec::<f32>().unwrap(),
                vec![0.5, 1.0, 1.5, 2.0, 2.5, 3.0, -1.0, -1.0]
            );
        }
    }
}
