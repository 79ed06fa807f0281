//! The cxx bridge to MLX (C++ side in `cpp/bridge.cpp`). Every function that reaches MLX
//! is declared `Result`, so a C++ exception becomes `Err` instead of aborting.

#[cxx::bridge(namespace = "triton_metal")]
pub(crate) mod bridge {
    /// An element type as it crosses the bridge: [`crate::DType`] on this side,
    /// `mlx::core::Dtype` on the C++ side (`to_dtype` / `from_dtype` in `cpp/bridge.cpp`).
    /// C++ answers a value outside these (MLX's `complex64`) for a dtype this crate lacks.
    #[repr(u8)]
    enum DtypeCode {
        Bool,
        I8,
        I16,
        I32,
        I64,
        U8,
        U16,
        U32,
        U64,
        F16,
        BF16,
        F32,
        F64,
    }

    extern "Rust" {
        type CpuLaunch;
        fn run_cpu_launch(
            launch: &CpuLaunch,
            in_ptrs: Vec<usize>,
            in_bytes: Vec<usize>,
            out_ptrs: Vec<usize>,
            out_bytes: Vec<usize>,
        );
    }

    unsafe extern "C++" {
        include!("bridge.h");

        type MlxArray;
        type MlxArrayList;

        fn list_len(l: &MlxArrayList) -> usize;
        fn list_get(l: &MlxArrayList, i: usize) -> Result<UniquePtr<MlxArray>>;

        fn array_from_bytes(
            data: &[u8],
            shape: &[i32],
            dtype: DtypeCode,
        ) -> Result<UniquePtr<MlxArray>>;
        fn array_clone(a: &MlxArray) -> UniquePtr<MlxArray>;
        fn array_shape(a: &MlxArray) -> Vec<i32>;
        fn array_strides(a: &MlxArray) -> Vec<i64>;
        fn array_dtype(a: &MlxArray) -> DtypeCode;
        fn array_size(a: &MlxArray) -> usize;
        fn array_id(a: &MlxArray) -> usize;
        fn array_eval(a: &MlxArray) -> Result<()>;
        unsafe fn array_eval_many(arrays: &[*const MlxArray]) -> Result<()>;
        fn array_contiguous_cpu(a: &MlxArray) -> Result<UniquePtr<MlxArray>>;
        unsafe fn array_copy_bytes(a: &MlxArray, dst: *mut u8, len: usize) -> Result<()>;
        fn array_nbytes(a: &MlxArray) -> usize;
        fn array_pending_bytes(a: &MlxArray) -> usize;
        fn memory_available() -> usize;

        fn op_unary(op: &str, a: &MlxArray) -> Result<UniquePtr<MlxArray>>;
        fn op_binary(op: &str, a: &MlxArray, b: &MlxArray) -> Result<UniquePtr<MlxArray>>;
        fn op_reduce(
            op: &str,
            a: &MlxArray,
            axes: &[i32],
            all_axes: bool,
            keepdims: bool,
        ) -> Result<UniquePtr<MlxArray>>;
        fn op_where(c: &MlxArray, x: &MlxArray, y: &MlxArray) -> Result<UniquePtr<MlxArray>>;
        fn op_softmax(a: &MlxArray, axes: &[i32], precise: bool) -> Result<UniquePtr<MlxArray>>;
        unsafe fn op_layer_norm(
            x: &MlxArray,
            w: *const MlxArray,
            b: *const MlxArray,
            eps: f32,
        ) -> Result<UniquePtr<MlxArray>>;
        unsafe fn op_rms_norm(
            x: &MlxArray,
            w: *const MlxArray,
            eps: f32,
        ) -> Result<UniquePtr<MlxArray>>;
        fn op_sdpa(
            q: &MlxArray,
            k: &MlxArray,
            v: &MlxArray,
            scale: f32,
        ) -> Result<UniquePtr<MlxArray>>;
        fn op_astype(a: &MlxArray, dtype: DtypeCode) -> Result<UniquePtr<MlxArray>>;
        fn op_view(a: &MlxArray, dtype: DtypeCode) -> Result<UniquePtr<MlxArray>>;
        fn op_reshape(a: &MlxArray, shape: &[i32]) -> Result<UniquePtr<MlxArray>>;
        fn op_transpose(a: &MlxArray, axes: &[i32], reverse: bool) -> Result<UniquePtr<MlxArray>>;
        fn op_broadcast_to(a: &MlxArray, shape: &[i32]) -> Result<UniquePtr<MlxArray>>;
        fn op_contiguous(a: &MlxArray) -> Result<UniquePtr<MlxArray>>;
        fn op_full(shape: &[i32], value: f64, dtype: DtypeCode) -> Result<UniquePtr<MlxArray>>;
        fn op_arange(
            start: f64,
            stop: f64,
            step: f64,
            dtype: DtypeCode,
        ) -> Result<UniquePtr<MlxArray>>;
        fn op_random_uniform(
            shape: &[i32],
            dtype: DtypeCode,
            lo: f64,
            hi: f64,
            seed: u64,
        ) -> Result<UniquePtr<MlxArray>>;
        fn op_random_normal(
            shape: &[i32],
            dtype: DtypeCode,
            seed: u64,
        ) -> Result<UniquePtr<MlxArray>>;
        fn op_slice(a: &MlxArray, start: &[i32], stop: &[i32]) -> Result<UniquePtr<MlxArray>>;

        fn default_device_type() -> Result<i32>;
        fn set_default_device_type(kind: i32) -> Result<()>;
        fn metal_is_available() -> Result<bool>;
        fn cuda_is_available() -> Result<bool>;
        fn device_info_pairs() -> Result<Vec<String>>;
        fn mlx_version() -> Result<String>;

        fn cpu_output_cache_bytes() -> usize;
        fn cpu_output_cache_set_limit(bytes: usize) -> usize;

        unsafe fn cpu_kernel_launch(
            launch: Box<CpuLaunch>,
            name: &str,
            inputs: &[*const MlxArray],
            out_shapes_flat: &[i32],
            out_ndims: &[i32],
            out_dtypes: &[DtypeCode],
        ) -> Result<UniquePtr<MlxArrayList>>;

        type MlxKernel;

        fn metal_kernel_make(
            name: &str,
            input_names: &[String],
            output_names: &[String],
            source: &str,
            header: &str,
            atomic_outputs: bool,
        ) -> Result<UniquePtr<MlxKernel>>;

        fn cuda_kernel_make(
            name: &str,
            input_names: &[String],
            output_names: &[String],
            source: &str,
            header: &str,
            shared_memory: i32,
        ) -> Result<UniquePtr<MlxKernel>>;

        #[allow(clippy::too_many_arguments)]
        unsafe fn mlx_kernel_call(
            kernel: &MlxKernel,
            inputs: &[*const MlxArray],
            out_shapes_flat: &[i32],
            out_ndims: &[i32],
            out_dtypes: &[DtypeCode],
            grid: [i32; 3],
            threadgroup: [i32; 3],
            has_init: bool,
            init_value: f32,
        ) -> Result<UniquePtr<MlxArrayList>>;

        #[allow(clippy::too_many_arguments)]
        unsafe fn mlx_kernel_traced_source(
            kernel: &MlxKernel,
            inputs: &[*const MlxArray],
            out_shapes_flat: &[i32],
            out_ndims: &[i32],
            out_dtypes: &[DtypeCode],
            grid: [i32; 3],
            threadgroup: [i32; 3],
            scratch_path: &str,
        ) -> Result<String>;
    }
}

// SAFETY: `MlxArray` holds an `mlx::core::array`, a shared_ptr to an immutable
// description plus data; MLX's refcounts are atomic and the arrays we hand out are never
// mutated through a shared reference, so moving or sharing them across threads is sound.
unsafe impl Send for bridge::MlxArray {}
unsafe impl Sync for bridge::MlxArray {}

// SAFETY: `MlxKernel` holds MLX's kernel function, a lambda over copies of the names and
// sources it was made from, which a call only reads (`std::function`'s call operator is
// const and MLX's lambda is not `mutable`); nothing else reaches it, so it may be called
// from several threads at once and dropped on any.
unsafe impl Send for bridge::MlxKernel {}
unsafe impl Sync for bridge::MlxKernel {}

pub mod cpu_primitive;
pub(crate) mod programs;

pub(crate) use cpu_primitive::{run_cpu_launch, CpuLaunch};

use crate::dtype::DType;
use bridge::DtypeCode;

impl From<DType> for DtypeCode {
    fn from(d: DType) -> DtypeCode {
        match d {
            DType::Bool => DtypeCode::Bool,
            DType::I8 => DtypeCode::I8,
            DType::I16 => DtypeCode::I16,
            DType::I32 => DtypeCode::I32,
            DType::I64 => DtypeCode::I64,
            DType::U8 => DtypeCode::U8,
            DType::U16 => DtypeCode::U16,
            DType::U32 => DtypeCode::U32,
            DType::U64 => DtypeCode::U64,
            DType::F16 => DtypeCode::F16,
            DType::BF16 => DtypeCode::BF16,
            DType::F32 => DtypeCode::F32,
            DType::F64 => DtypeCode::F64,
        }
    }
}

impl DtypeCode {
    /// The dtype, or `None` for an MLX dtype this crate has no [`DType`] for.
    pub(crate) fn dtype(self) -> Option<DType> {
        Some(match self {
            DtypeCode::Bool => DType::Bool,
            DtypeCode::I8 => DType::I8,
            DtypeCode::I16 => DType::I16,
            DtypeCode::I32 => DType::I32,
            DtypeCode::I64 => DType::I64,
            DtypeCode::U8 => DType::U8,
            DtypeCode::U16 => DType::U16,
            DtypeCode::U32 => DType::U32,
            DtypeCode::U64 => DType::U64,
            DtypeCode::F16 => DType::F16,
            DtypeCode::BF16 => DType::BF16,
            DtypeCode::F32 => DType::F32,
            DtypeCode::F64 => DType::F64,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_codes_round_trip() {
        for d in DType::ALL {
            assert_eq!(DtypeCode::from(d).dtype(), Some(d));
        }
        assert_eq!(DtypeCode { repr: 255 }.dtype(), None);
    }
}
