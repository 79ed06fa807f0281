// The C++ side of the cxx bridge to MLX. Every function that calls into MLX is declared
// `Result` on the Rust side, so a C++ exception becomes `Err` instead of an abort.
#pragma once

#include <cstdint>
#include <memory>

#include "mlx/mlx.h"
#include "rust/cxx.h"

namespace triton_metal {

struct CpuLaunch;  // Rust type: one CPU-executor launch (see src/ffi/cpu_primitive.rs).
enum class DtypeCode : uint8_t;  // shared with Rust, defined by the generated ffi.rs.h

// Owns one reference to an MLX array; cloning bumps MLX's refcount.
struct MlxArray {
  mlx::core::array a;
  explicit MlxArray(mlx::core::array arr) : a(std::move(arr)) {}
};

using ArrayPtr = std::unique_ptr<MlxArray>;

// Several arrays returned at once (cxx has no Vec of C++ objects).
struct MlxArrayList {
  std::vector<mlx::core::array> items;
};

size_t list_len(const MlxArrayList& l);
ArrayPtr list_get(const MlxArrayList& l, size_t i);

ArrayPtr array_from_bytes(rust::Slice<const uint8_t> data, rust::Slice<const int32_t> shape, DtypeCode dtype);
ArrayPtr array_clone(const MlxArray& a);
rust::Vec<int32_t> array_shape(const MlxArray& a);
rust::Vec<int64_t> array_strides(const MlxArray& a);
DtypeCode array_dtype(const MlxArray& a);
size_t array_size(const MlxArray& a);
uintptr_t array_id(const MlxArray& a);
void array_eval(const MlxArray& a);
void array_eval_many(rust::Slice<const MlxArray* const> arrays);
ArrayPtr array_contiguous_cpu(const MlxArray& a);
void array_copy_bytes(const MlxArray& a, uint8_t* dst, size_t len);
size_t array_nbytes(const MlxArray& a);
size_t array_pending_bytes(const MlxArray& a);
size_t memory_available();

ArrayPtr op_unary(rust::Str op, const MlxArray& a);
ArrayPtr op_binary(rust::Str op, const MlxArray& a, const MlxArray& b);
ArrayPtr op_reduce(rust::Str op, const MlxArray& a, rust::Slice<const int32_t> axes, bool all_axes, bool keepdims);
ArrayPtr op_where(const MlxArray& c, const MlxArray& x, const MlxArray& y);
ArrayPtr op_softmax(const MlxArray& a, rust::Slice<const int32_t> axes, bool precise);
ArrayPtr op_layer_norm(const MlxArray& x, const MlxArray* w, const MlxArray* b, float eps);
ArrayPtr op_rms_norm(const MlxArray& x, const MlxArray* w, float eps);
ArrayPtr op_sdpa(const MlxArray& q, const MlxArray& k, const MlxArray& v, float scale);
ArrayPtr op_astype(const MlxArray& a, DtypeCode dtype);
ArrayPtr op_view(const MlxArray& a, DtypeCode dtype);
ArrayPtr op_reshape(const MlxArray& a, rust::Slice<const int32_t> shape);
ArrayPtr op_transpose(const MlxArray& a, rust::Slice<const int32_t> axes, bool reverse);
ArrayPtr op_broadcast_to(const MlxArray& a, rust::Slice<const int32_t> shape);
ArrayPtr op_contiguous(const MlxArray& a);
ArrayPtr op_full(rust::Slice<const int32_t> shape, double value, DtypeCode dtype);
ArrayPtr op_arange(double start, double stop, double step, DtypeCode dtype);
ArrayPtr op_random_uniform(rust::Slice<const int32_t> shape, DtypeCode dtype, double lo, double hi, uint64_t seed);
ArrayPtr op_random_normal(rust::Slice<const int32_t> shape, DtypeCode dtype, uint64_t seed);
ArrayPtr op_slice(const MlxArray& a, rust::Slice<const int32_t> start, rust::Slice<const int32_t> stop);

// Devices.
int32_t default_device_type();  // 0 = cpu, 1 = gpu
void set_default_device_type(int32_t kind);
bool metal_is_available();
bool cuda_is_available();
rust::Vec<rust::String> device_info_pairs();
rust::String mlx_version();

// Bytes of freed CPU-executor outputs kept for reuse, and the cap on them (returns the old).
size_t cpu_output_cache_bytes();
size_t cpu_output_cache_set_limit(size_t bytes);

// Launch a Rust CPU-executor kernel as an MLX primitive: outputs are lazy arrays.
std::unique_ptr<MlxArrayList> cpu_kernel_launch(
    rust::Box<CpuLaunch> launch,
    rust::Str name,
    rust::Slice<const MlxArray* const> inputs,
    rust::Slice<const int32_t> out_shapes_flat,
    rust::Slice<const int32_t> out_ndims,
    rust::Slice<const DtypeCode> out_dtypes);

// One custom kernel of MLX (`fast::metal_kernel` or `fast::cuda_kernel`), made once and
// called for many launches. MLX's function is a lambda over copies of its arguments that
// it only reads when called, so calls from several threads at once are safe.
struct MlxKernel {
  mlx::core::fast::CustomKernelFunction f;
};

// `fast::metal_kernel` (row-contiguous inputs). MLX's CPU build makes it; calling it then
// throws "No Metal back-end" (except under `export_function` tracing).
std::unique_ptr<MlxKernel> metal_kernel_make(
    rust::Str name,
    rust::Slice<const rust::String> input_names,
    rust::Slice<const rust::String> output_names,
    rust::Str source,
    rust::Str header,
    bool atomic_outputs);

// `fast::cuda_kernel` (row-contiguous inputs, `shared_memory` bytes of dynamic shared
// memory). MLX's CPU build exports it too and throws "No CUDA back-end".
std::unique_ptr<MlxKernel> cuda_kernel_make(
    rust::Str name,
    rust::Slice<const rust::String> input_names,
    rust::Slice<const rust::String> output_names,
    rust::Str source,
    rust::Str header,
    int32_t shared_memory);

// One launch of a made kernel on MLX's default stream: lazy outputs.
std::unique_ptr<MlxArrayList> mlx_kernel_call(
    const MlxKernel& kernel,
    rust::Slice<const MlxArray* const> inputs,
    rust::Slice<const int32_t> out_shapes_flat,
    rust::Slice<const int32_t> out_ndims,
    rust::Slice<const DtypeCode> out_dtypes,
    std::array<int32_t, 3> grid,
    std::array<int32_t, 3> threadgroup,
    bool has_init,
    float init_value);

// MLX's own generated source for a call of a made Metal kernel, captured through
// `export_function` tracing with verbose=true (works without Metal).
rust::String mlx_kernel_traced_source(
    const MlxKernel& kernel,
    rust::Slice<const MlxArray* const> inputs,
    rust::Slice<const int32_t> out_shapes_flat,
    rust::Slice<const int32_t> out_ndims,
    rust::Slice<const DtypeCode> out_dtypes,
    std::array<int32_t, 3> grid,
    std::array<int32_t, 3> threadgroup,
    rust::Str scratch_path);

}  // namespace triton_metal
