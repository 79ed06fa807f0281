// MLX calls behind the cxx bridge. Exceptions propagate to Rust as `Err` (every function
// is declared `Result` in src/ffi.rs); nothing here may abort the process.
#include "bridge.h"

#include <fcntl.h>
#include <unistd.h>

#include <unordered_set>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <list>
#include <vector>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>

#include "mlx/backend/cpu/encoder.h"
#include "mlx/memory.h"
#include "mlx/primitives.h"
#include "mlx/export.h"
#include "mlx/version.h"
#include "triton-metal/src/ffi.rs.h"

namespace mx = mlx::core;

namespace triton_metal {
namespace {

mx::Dtype to_dtype(DtypeCode code) {
  switch (code) {
    case DtypeCode::Bool: return mx::bool_;
    case DtypeCode::I8: return mx::int8;
    case DtypeCode::I16: return mx::int16;
    case DtypeCode::I32: return mx::int32;
    case DtypeCode::I64: return mx::int64;
    case DtypeCode::U8: return mx::uint8;
    case DtypeCode::U16: return mx::uint16;
    case DtypeCode::U32: return mx::uint32;
    case DtypeCode::U64: return mx::uint64;
    case DtypeCode::F16: return mx::float16;
    case DtypeCode::BF16: return mx::bfloat16;
    case DtypeCode::F32: return mx::float32;
    case DtypeCode::F64: return mx::float64;
  }
  throw std::invalid_argument("unknown dtype code " + std::to_string(static_cast<int>(code)));
}

// MLX's `complex64` has no `DType`: a value outside the enum, which Rust reads as none.
DtypeCode from_dtype(mx::Dtype d) {
  switch (d) {
    case mx::bool_: return DtypeCode::Bool;
    case mx::int8: return DtypeCode::I8;
    case mx::int16: return DtypeCode::I16;
    case mx::int32: return DtypeCode::I32;
    case mx::int64: return DtypeCode::I64;
    case mx::uint8: return DtypeCode::U8;
    case mx::uint16: return DtypeCode::U16;
    case mx::uint32: return DtypeCode::U32;
    case mx::uint64: return DtypeCode::U64;
    case mx::float16: return DtypeCode::F16;
    case mx::bfloat16: return DtypeCode::BF16;
    case mx::float32: return DtypeCode::F32;
    case mx::float64: return DtypeCode::F64;
    default: return static_cast<DtypeCode>(255);
  }
}

mx::Shape to_shape(rust::Slice<const int32_t> s) {
  return mx::Shape(s.begin(), s.end());
}

std::vector<int> to_ints(rust::Slice<const int32_t> s) {
  return std::vector<int>(s.begin(), s.end());
}

ArrayPtr wrap(mx::array a) {
  return std::make_unique<MlxArray>(std::move(a));
}

std::vector<mx::array> to_arrays(rust::Slice<const MlxArray* const> arrays) {
  std::vector<mx::array> out;
  out.reserve(arrays.size());
  for (auto* a : arrays) out.push_back(a->a);
  return out;
}

std::vector<mx::Shape> to_shapes(rust::Slice<const int32_t> flat, rust::Slice<const int32_t> ndims) {
  std::vector<mx::Shape> shapes;
  size_t pos = 0;
  for (int32_t nd : ndims) {
    if (nd < 0 || pos + nd > flat.size()) throw std::invalid_argument("bad output shape list");
    shapes.emplace_back(flat.begin() + pos, flat.begin() + pos + nd);
    pos += nd;
  }
  return shapes;
}

std::vector<mx::Dtype> to_dtypes(rust::Slice<const DtypeCode> codes) {
  std::vector<mx::Dtype> out;
  for (auto c : codes) out.push_back(to_dtype(c));
  return out;
}

std::unique_ptr<MlxArrayList> wrap_all(std::vector<mx::array> arrays) {
  return std::make_unique<MlxArrayList>(MlxArrayList{std::move(arrays)});
}

std::string to_string(rust::Str s) {
  return std::string(s.data(), s.size());
}

std::vector<std::string> to_strings(rust::Slice<const rust::String> names) {
  std::vector<std::string> out;
  for (auto& n : names) out.emplace_back(std::string(n));
  return out;
}

// MLX's allocator returns a null buffer when memory runs out, and MLX's kernels then write
// through it on a worker thread (a crash, not an exception). Every allocation made here is
// checked, and every evaluation first checks the sizes of the arrays it will allocate.
mx::allocator::Data checked_malloc(size_t n, const char* what) {
  auto d = mx::allocator::malloc(n);
  if (n > 0 && !d.buffer().ptr()) {
    throw std::runtime_error(std::string("[triton_metal] unable to allocate ") + std::to_string(n) +
                             " bytes for " + what);
  }
  return d;
}

// Physical memory in bytes: no single buffer larger than this can be allocated and filled.
size_t memory_capacity() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return SIZE_MAX;
  return static_cast<size_t>(pages) * static_cast<size_t>(page);
}

std::string shape_text(const mx::array& a) {
  std::string s = "[";
  for (size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + "]";
}

std::string dtype_text(mx::Dtype d) {
  std::ostringstream o;
  o << d;
  return o.str();
}

// Freed outputs of CPU-executor launches, kept for the next output of the same size.
// MLX's CPU allocator hands large outputs to glibc, which maps fresh pages for each: the
// kernel's first stores then pay a page fault (and the kernel's zeroing) per page, which
// cost vector add a third of its time. Recycling mapped buffers avoids that, as MLX's
// Metal allocator does with its buffer cache. Contents are whatever the last user left:
// outputs are uninitialised unless the launch asks for a fill value (done on the Rust side).
class OutputCache {
 public:
  // Leaked on purpose: arrays may be freed (and call `give`) during static destruction.
  static OutputCache& get() {
    static OutputCache* cache = new OutputCache();
    return *cache;
  }

  mx::allocator::Data take(size_t n) {
    if (n < kMinBytes) return checked_malloc(n, "a kernel output");
    mx::allocator::Buffer b(nullptr);
    {
      std::lock_guard<std::mutex> g(m_);
      // Most recently freed first: its pages are the likeliest to be in cache.
      for (auto it = free_.rbegin(); it != free_.rend(); ++it) {
        if (it->second == n) {
          b = it->first;
          bytes_ -= n;
          free_.erase(std::next(it).base());
          break;
        }
      }
    }
    if (!b.ptr()) {
      b = mx::allocator::allocator().malloc(n);
      if (!b.ptr()) throw std::runtime_error("[triton_metal] unable to allocate " + std::to_string(n) + " bytes for a kernel output");
    }
    return mx::allocator::Data(b, [n](mx::allocator::Buffer buf) { OutputCache::get().give(buf, n); });
  }

  void give(mx::allocator::Buffer b, size_t n) {
    std::vector<mx::allocator::Buffer> drop;
    {
      std::lock_guard<std::mutex> g(m_);
      if (n > limit_) {
        drop.push_back(b);
      } else {
        free_.emplace_back(b, n);
        bytes_ += n;
        // Over the cap: the longest-unused buffers go back to MLX's allocator.
        while (bytes_ > limit_) {
          drop.push_back(free_.front().first);
          bytes_ -= free_.front().second;
          free_.pop_front();
        }
      }
    }
    for (auto& d : drop) mx::allocator::allocator().free(d);
  }

  size_t bytes() {
    std::lock_guard<std::mutex> g(m_);
    return bytes_;
  }

  size_t set_limit(size_t limit) {
    std::vector<mx::allocator::Buffer> drop;
    size_t old;
    {
      std::lock_guard<std::mutex> g(m_);
      old = limit_;
      limit_ = limit;
      while (bytes_ > limit_) {
        drop.push_back(free_.front().first);
        bytes_ -= free_.front().second;
        free_.pop_front();
      }
    }
    for (auto& d : drop) mx::allocator::allocator().free(d);
    return old;
  }

 private:
  // Below this, glibc serves allocations from already-mapped heap memory.
  static constexpr size_t kMinBytes = 1 << 20;
  std::mutex m_;
  // Oldest first; at most `limit_ / kMinBytes` entries, so a linear search is cheap.
  std::list<std::pair<mx::allocator::Buffer, size_t>> free_;
  size_t bytes_ = 0;
  size_t limit_ = size_t(1) << 30;
};

// Runs a Rust CPU-executor launch as an MLX primitive, so kernel outputs are lazy
// arrays scheduled by MLX like any other op.
class RustCpuKernel : public mx::Primitive {
 public:
  RustCpuKernel(mx::Stream s, rust::Box<CpuLaunch> launch, std::string name)
      : mx::Primitive(s),
        launch_(std::make_shared<rust::Box<CpuLaunch>>(std::move(launch))),
        name_("triton_metal::" + std::move(name)) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    auto& encoder = mx::cpu::get_command_encoder(stream());
    std::vector<mx::array> ins;
    for (auto& in : inputs) {
      // The executor reads row-contiguous buffers; copy (lazily) the rare strided input.
      ins.push_back(in);
      encoder.set_input_array(in);
    }
    for (auto& out : outputs) {
      out.set_data(OutputCache::get().take(out.nbytes()));
      encoder.set_output_array(out);
    }
    // Captured by value: the task runs later on MLX's worker thread.
    encoder.dispatch([launch = launch_, ins = std::move(ins),
                      outs = std::vector<mx::array>(outputs.begin(), outputs.end())]() mutable {
      rust::Vec<uintptr_t> in_ptrs, out_ptrs;
      rust::Vec<size_t> in_bytes, out_bytes;
      for (auto& a : ins) {
        in_ptrs.push_back(reinterpret_cast<uintptr_t>(a.data<uint8_t>()));
        in_bytes.push_back(a.nbytes());
      }
      for (auto& a : outs) {
        out_ptrs.push_back(reinterpret_cast<uintptr_t>(a.data<uint8_t>()));
        out_bytes.push_back(a.nbytes());
      }
      // Never throws: errors are recorded on the Rust side and reported at eval.
      run_cpu_launch(**launch, in_ptrs, in_bytes, out_ptrs, out_bytes);
    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("[" + name_ + "] the CPU executor cannot run on a GPU stream");
  }

  const char* name() const override { return name_.c_str(); }

 private:
  std::shared_ptr<rust::Box<CpuLaunch>> launch_;
  std::string name_;
};

// Redirects fd 1 into a file while alive, so MLX's verbose `std::cout` output can be read.
class StdoutCapture {
 public:
  explicit StdoutCapture(const std::string& path) : path_(path) {
    std::fflush(stdout);
    std::cout.flush();
    // A new private file only: a file or link already at `path` is refused, not followed.
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) throw std::runtime_error("cannot capture stdout to " + path + ": " + std::strerror(errno));
    saved_ = dup(1);
    if (saved_ < 0) {
      close(fd);
      throw std::runtime_error("cannot capture stdout to " + path + ": " + std::strerror(errno));
    }
    dup2(fd, 1);
    close(fd);
  }
  std::string finish() {
    std::cout.flush();
    std::fflush(stdout);
    if (saved_ >= 0) {
      dup2(saved_, 1);
      close(saved_);
      saved_ = -1;
    }
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  ~StdoutCapture() {
    if (saved_ >= 0) finish();
  }

 private:
  std::string path_;
  int saved_ = -1;
};

// Bytes the machine can still give to new arrays: on Linux what the kernel reports as
// available (MemAvailable, which counts reclaimable page cache) plus free swap, elsewhere the
// physical memory; plus the freed buffers MLX's allocator and the output cache keep for reuse.
size_t available_memory() {
  size_t avail = 0;
  bool found = false;
#ifdef __linux__
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  size_t kb = 0;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == "MemAvailable:" || key == "SwapFree:") {
      avail += kb * 1024;
      found = true;
    }
  }
#endif
  if (!found) avail = memory_capacity();
  return avail + mx::get_cache_memory() + OutputCache::get().bytes();
}

std::string mib(size_t n) { return std::to_string((n + (1 << 20) - 1) >> 20) + " MiB"; }

// Whether `a` is computed by a primitive whose output shares its input's memory (a
// broadcast's shape may be far larger than anything allocated).
bool is_view(const mx::array& a) {
  static const std::unordered_set<std::string> views = {
      "AsStrided", "Broadcast", "BroadcastAxes", "Depends",   "ExpandDims", "Flatten", "Imag", "Real",
      "Reshape",   "Slice",     "Squeeze",       "StopGradient", "Transpose", "Unflatten", "View"};
  return a.has_primitive() && views.count(a.primitive().name()) > 0;
}

// Throws if evaluating `roots` would allocate an array larger than this machine's memory
// (or one whose byte count overflows), or if one step of the evaluation needs more memory at
// once than is available: the outputs of one primitive all exist together, and so do its
// inputs. Custom kernels (ours and MLX's `metal_kernel`/`cuda_kernel`) write fresh outputs
// while their inputs are alive, so for them the two add up; other primitives may reuse an
// input's buffer for an output, so only the larger of the two counts. Arrays computed
// already are not counted: their memory is taken and no longer available. Walks only arrays
// not computed yet.
void check_eval_sizes(const std::vector<const mx::array*>& roots) {
  static const size_t capacity = memory_capacity();
  std::vector<const mx::array*> stack(roots.begin(), roots.end());
  std::unordered_set<uintptr_t> seen;
  auto bytes = [&](const mx::array& a) {
    size_t n = a.itemsize();
    bool overflow = false;
    for (auto d : a.shape()) {
      if (d < 0 || __builtin_mul_overflow(n, static_cast<size_t>(d), &n)) overflow = true;
    }
    if (overflow || n > capacity) {
      std::string need = overflow ? "more bytes than a size_t holds" : std::to_string(n) + " bytes";
      throw std::runtime_error("[triton_metal] evaluating an array of shape " + shape_text(a) + " and dtype " +
                               dtype_text(a.dtype()) + " needs " + need + ", more than this machine's " +
                               std::to_string(capacity >> 20) + " MiB of memory");
    }
    return n;
  };
  size_t worst = 0;
  std::string worst_what;
  while (!stack.empty()) {
    const mx::array* a = stack.back();
    stack.pop_back();
    if (!seen.insert(a->id()).second || a->is_available() || !a->has_primitive()) continue;
    bool view = is_view(*a);
    size_t outs = view ? 0 : bytes(*a), ins = 0;
    size_t n_outs = 1, n_ins = 0;
    for (const auto& s : a->siblings()) {
      outs += view ? 0 : bytes(s);
      ++n_outs;
    }
    std::unordered_set<uintptr_t> distinct;
    for (const auto& in : a->inputs()) {
      if (!distinct.insert(in.id()).second) continue;
      if (!in.is_available() && !is_view(in)) {
        ins += bytes(in);
        ++n_ins;
      }
      if (!seen.count(in.id())) stack.push_back(&in);
    }
    const auto& p = a->primitive();
    bool fresh = dynamic_cast<const RustCpuKernel*>(&p) != nullptr || std::string(p.name()) == "CustomKernel";
    size_t need = fresh ? outs + ins : std::max(outs, ins);
#ifdef TRITON_METAL_HAS_METAL
    bool host_memory = true;  // unified memory
#else
    bool host_memory = const_cast<mx::Primitive&>(p).stream().device.type == mx::Device::cpu;  // a CUDA GPU has its own
#endif
    if (host_memory && need > worst) {
      worst = need;
      worst_what = std::string(p.name()) + " (" + std::to_string(n_outs) + " output" + (n_outs == 1 ? "" : "s") +
                   " of " + std::to_string(outs) + " bytes in all, first of shape " + shape_text(*a) + " and dtype " +
                   dtype_text(a->dtype()) + "; " + std::to_string(n_ins) + " input" + (n_ins == 1 ? "" : "s") +
                   " still to compute, " + std::to_string(ins) + " bytes)";
    }
  }
  // Small evaluations need no look at the system's memory (reading it costs more than they do).
  if (worst < (size_t(1) << 28)) return;
  size_t avail = available_memory();
  if (worst > avail) {
    throw std::runtime_error("[triton_metal] evaluating " + worst_what + " needs " + mib(worst) +
                             " at once, more than the " + mib(avail) +
                             " of memory available now (evaluate in smaller pieces, or free arrays first)");
  }
}

}  // namespace

ArrayPtr array_from_bytes(rust::Slice<const uint8_t> data, rust::Slice<const int32_t> shape, DtypeCode dtype) {
  auto dt = to_dtype(dtype);
  auto shp = to_shape(shape);
  size_t n = 1;
  for (auto d : shp) {
    if (d < 0) throw std::invalid_argument("negative dimension in shape");
    n *= static_cast<size_t>(d);
  }
  if (n * dt.size() != data.size()) {
    throw std::invalid_argument("data has " + std::to_string(data.size()) + " bytes but shape needs " +
                                std::to_string(n * dt.size()));
  }
  auto buf = checked_malloc(data.size(), "an array");
  if (data.size() > 0) std::memcpy(buf.buffer().raw_ptr(), data.data(), data.size());
  return wrap(mx::array(std::move(buf), std::move(shp), dt));
}

ArrayPtr array_clone(const MlxArray& a) { return wrap(a.a); }

size_t list_len(const MlxArrayList& l) { return l.items.size(); }

ArrayPtr list_get(const MlxArrayList& l, size_t i) {
  if (i >= l.items.size()) throw std::out_of_range("array list index out of range");
  return wrap(l.items[i]);
}

rust::Vec<int32_t> array_shape(const MlxArray& a) {
  rust::Vec<int32_t> out;
  for (auto d : a.a.shape()) out.push_back(d);
  return out;
}

rust::Vec<int64_t> array_strides(const MlxArray& a) {
  rust::Vec<int64_t> out;
  // Strides are known only once data exists; report row-major strides before eval.
  if (a.a.is_available()) {
    for (auto s : a.a.strides()) out.push_back(s);
  } else {
    int64_t acc = 1;
    std::vector<int64_t> tmp(a.a.ndim());
    for (int i = static_cast<int>(a.a.ndim()) - 1; i >= 0; --i) {
      tmp[i] = acc;
      acc *= a.a.shape(i);
    }
    for (auto s : tmp) out.push_back(s);
  }
  return out;
}

DtypeCode array_dtype(const MlxArray& a) { return from_dtype(a.a.dtype()); }
size_t array_size(const MlxArray& a) { return a.a.size(); }
uintptr_t array_id(const MlxArray& a) { return a.a.id(); }

void array_eval(const MlxArray& a) {
  check_eval_sizes({&a.a});
  auto copy = a.a;
  copy.eval();
}

void array_eval_many(rust::Slice<const MlxArray* const> arrays) {
  std::vector<const mx::array*> roots;
  for (auto* a : arrays) roots.push_back(&a->a);
  check_eval_sizes(roots);
  mx::eval(to_arrays(arrays));
}

ArrayPtr array_contiguous_cpu(const MlxArray& a) {
  auto c = mx::contiguous(a.a, false, mx::Device::cpu);
  check_eval_sizes({&c});
  c.eval();
  return wrap(std::move(c));
}

void array_copy_bytes(const MlxArray& a, uint8_t* dst, size_t len) {
  const auto& c = a.a;
  if (!c.is_available() || !c.flags().row_contiguous || c.nbytes() != len) {
    throw std::invalid_argument("array_copy_bytes: expected an evaluated row-contiguous array of " +
                                std::to_string(len) + " bytes");
  }
  if (len > 0) std::memcpy(dst, c.data<uint8_t>(), len);
}

size_t array_nbytes(const MlxArray& a) { return a.a.nbytes(); }

size_t array_pending_bytes(const MlxArray& a) {
  return a.a.is_available() || !a.a.has_primitive() || is_view(a.a) ? 0 : a.a.nbytes();
}

size_t memory_available() { return available_memory(); }

ArrayPtr op_unary(rust::Str op_, const MlxArray& a) {
  auto op = to_string(op_);
  const auto& x = a.a;
  if (op == "exp") return wrap(mx::exp(x));
  if (op == "log") return wrap(mx::log(x));
  if (op == "sqrt") return wrap(mx::sqrt(x));
  if (op == "rsqrt") return wrap(mx::rsqrt(x));
  if (op == "abs") return wrap(mx::abs(x));
  if (op == "negative") return wrap(mx::negative(x));
  if (op == "sin") return wrap(mx::sin(x));
  if (op == "cos") return wrap(mx::cos(x));
  if (op == "erf") return wrap(mx::erf(x));
  if (op == "floor") return wrap(mx::floor(x));
  if (op == "ceil") return wrap(mx::ceil(x));
  if (op == "sigmoid") return wrap(mx::sigmoid(x));
  if (op == "tanh") return wrap(mx::tanh(x));
  if (op == "square") return wrap(mx::square(x));
  if (op == "log2") return wrap(mx::log2(x));
  throw std::invalid_argument("unknown unary op `" + op + "`");
}

ArrayPtr op_binary(rust::Str op_, const MlxArray& a, const MlxArray& b) {
  auto op = to_string(op_);
  const auto &x = a.a, &y = b.a;
  if (op == "add") return wrap(mx::add(x, y));
  if (op == "subtract") return wrap(mx::subtract(x, y));
  if (op == "multiply") return wrap(mx::multiply(x, y));
  if (op == "divide") return wrap(mx::divide(x, y));
  if (op == "matmul") return wrap(mx::matmul(x, y));
  if (op == "maximum") return wrap(mx::maximum(x, y));
  if (op == "minimum") return wrap(mx::minimum(x, y));
  if (op == "power") return wrap(mx::power(x, y));
  if (op == "equal") return wrap(mx::equal(x, y));
  if (op == "less") return wrap(mx::less(x, y));
  if (op == "greater") return wrap(mx::greater(x, y));
  if (op == "conv2d") return wrap(mx::conv2d(x, y));
  throw std::invalid_argument("unknown binary op `" + op + "`");
}

ArrayPtr op_reduce(rust::Str op_, const MlxArray& a, rust::Slice<const int32_t> axes_, bool all_axes, bool keepdims) {
  auto op = to_string(op_);
  std::vector<int> axes = to_ints(axes_);
  if (all_axes) {
    axes.clear();
    for (int i = 0; i < static_cast<int>(a.a.ndim()); ++i) axes.push_back(i);
  }
  const auto& x = a.a;
  if (op == "sum") return wrap(mx::sum(x, axes, keepdims));
  if (op == "max") return wrap(mx::max(x, axes, keepdims));
  if (op == "min") return wrap(mx::min(x, axes, keepdims));
  if (op == "mean") return wrap(mx::mean(x, axes, keepdims));
  if (op == "prod") return wrap(mx::prod(x, axes, keepdims));
  if (op == "any") return wrap(mx::any(x, axes, keepdims));
  if (op == "all") return wrap(mx::all(x, axes, keepdims));
  if (op == "argmax" || op == "argmin") {
    if (all_axes) {
      auto flat = mx::reshape(x, {-1});
      auto r = op == "argmax" ? mx::argmax(flat, 0, false) : mx::argmin(flat, 0, false);
      if (keepdims) r = mx::reshape(r, mx::Shape(x.ndim(), 1));
      return wrap(r);
    }
    if (axes.size() != 1) throw std::invalid_argument(op + " takes exactly one axis");
    return wrap(op == "argmax" ? mx::argmax(x, axes[0], keepdims) : mx::argmin(x, axes[0], keepdims));
  }
  if (op == "cumsum" || op == "cumprod") {
    if (axes.size() != 1) throw std::invalid_argument(op + " takes exactly one axis");
    return wrap(op == "cumsum" ? mx::cumsum(x, axes[0]) : mx::cumprod(x, axes[0]));
  }
  throw std::invalid_argument("unknown reduction `" + op + "`");
}

ArrayPtr op_where(const MlxArray& c, const MlxArray& x, const MlxArray& y) { return wrap(mx::where(c.a, x.a, y.a)); }

ArrayPtr op_softmax(const MlxArray& a, rust::Slice<const int32_t> axes, bool precise) {
  return wrap(mx::softmax(a.a, to_ints(axes), precise));
}

ArrayPtr op_layer_norm(const MlxArray& x, const MlxArray* w, const MlxArray* b, float eps) {
  std::optional<mx::array> wo, bo;
  if (w) wo = w->a;
  if (b) bo = b->a;
  return wrap(mx::fast::layer_norm(x.a, wo, bo, eps));
}

ArrayPtr op_rms_norm(const MlxArray& x, const MlxArray* w, float eps) {
  std::optional<mx::array> wo;
  if (w) wo = w->a;
  return wrap(mx::fast::rms_norm(x.a, wo, eps));
}

ArrayPtr op_sdpa(const MlxArray& q, const MlxArray& k, const MlxArray& v, float scale) {
  return wrap(mx::fast::scaled_dot_product_attention(q.a, k.a, v.a, scale));
}

ArrayPtr op_astype(const MlxArray& a, DtypeCode dtype) { return wrap(mx::astype(a.a, to_dtype(dtype))); }
ArrayPtr op_view(const MlxArray& a, DtypeCode dtype) { return wrap(mx::view(a.a, to_dtype(dtype))); }
ArrayPtr op_reshape(const MlxArray& a, rust::Slice<const int32_t> shape) { return wrap(mx::reshape(a.a, to_shape(shape))); }

ArrayPtr op_transpose(const MlxArray& a, rust::Slice<const int32_t> axes, bool reverse) {
  if (reverse) return wrap(mx::transpose(a.a));
  return wrap(mx::transpose(a.a, to_ints(axes)));
}

ArrayPtr op_broadcast_to(const MlxArray& a, rust::Slice<const int32_t> shape) {
  return wrap(mx::broadcast_to(a.a, to_shape(shape)));
}

ArrayPtr op_contiguous(const MlxArray& a) { return wrap(mx::contiguous(a.a)); }

ArrayPtr op_full(rust::Slice<const int32_t> shape, double value, DtypeCode dtype) {
  return wrap(mx::full(to_shape(shape), mx::array(value, mx::float64), to_dtype(dtype), mx::Device::cpu));
}

ArrayPtr op_arange(double start, double stop, double step, DtypeCode dtype) {
  return wrap(mx::arange(start, stop, step, to_dtype(dtype)));
}

ArrayPtr op_random_uniform(rust::Slice<const int32_t> shape, DtypeCode dtype, double lo, double hi, uint64_t seed) {
  auto dt = to_dtype(dtype);
  return wrap(mx::random::uniform(mx::array(lo, dt), mx::array(hi, dt), to_shape(shape), dt, mx::random::key(seed)));
}

ArrayPtr op_random_normal(rust::Slice<const int32_t> shape, DtypeCode dtype, uint64_t seed) {
  return wrap(mx::random::normal(to_shape(shape), to_dtype(dtype), 0.0f, 1.0f, mx::random::key(seed)));
}

ArrayPtr op_slice(const MlxArray& a, rust::Slice<const int32_t> start, rust::Slice<const int32_t> stop) {
  return wrap(mx::slice(a.a, to_shape(start), to_shape(stop)));
}

int32_t default_device_type() { return mx::default_device().type == mx::Device::gpu ? 1 : 0; }

void set_default_device_type(int32_t kind) {
  mx::set_default_device(kind == 1 ? mx::Device(mx::Device::gpu) : mx::Device(mx::Device::cpu));
}

bool metal_is_available() {
#ifdef TRITON_METAL_HAS_METAL
  return mx::is_available(mx::Device::gpu);
#else
  return false;
#endif
}

bool cuda_is_available() {
#ifdef TRITON_METAL_HAS_CUDA
  return mx::is_available(mx::Device::gpu);
#else
  return false;
#endif
}

rust::Vec<rust::String> device_info_pairs() {
  rust::Vec<rust::String> out;
  const auto& info = mx::device_info(mx::default_device());
  for (const auto& [k, v] : info) {
    std::string val;
    if (std::holds_alternative<std::string>(v)) {
      val = std::get<std::string>(v);
    } else {
      val = std::to_string(std::get<size_t>(v));
    }
    out.push_back(rust::String(k + "=" + val));
  }
  return out;
}

rust::String mlx_version() { return rust::String(mx::version()); }

size_t cpu_output_cache_bytes() { return OutputCache::get().bytes(); }
size_t cpu_output_cache_set_limit(size_t bytes) { return OutputCache::get().set_limit(bytes); }

std::unique_ptr<MlxArrayList> cpu_kernel_launch(rust::Box<CpuLaunch> launch, rust::Str name,
                                      rust::Slice<const MlxArray* const> inputs,
                                      rust::Slice<const int32_t> out_shapes_flat,
                                      rust::Slice<const int32_t> out_ndims,
                                      rust::Slice<const DtypeCode> out_dtypes) {
  std::vector<mx::array> ins;
  for (auto* a : inputs) ins.push_back(mx::contiguous(a->a, false, mx::Device::cpu));
  std::shared_ptr<mx::Primitive> prim = std::make_shared<RustCpuKernel>(mx::default_stream(mx::Device::cpu), std::move(launch), to_string(name));
  return wrap_all(mx::array::make_arrays(to_shapes(out_shapes_flat, out_ndims), to_dtypes(out_dtypes), prim, ins));
}

namespace {
std::unique_ptr<MlxKernel> made(mx::fast::CustomKernelFunction f) {
  return std::make_unique<MlxKernel>(MlxKernel{std::move(f)});
}
}  // namespace

std::unique_ptr<MlxKernel> metal_kernel_make(rust::Str name, rust::Slice<const rust::String> input_names,
                                             rust::Slice<const rust::String> output_names, rust::Str source,
                                             rust::Str header, bool atomic_outputs) {
  return made(mx::fast::metal_kernel(to_string(name), to_strings(input_names), to_strings(output_names),
                                     to_string(source), to_string(header), true, atomic_outputs));
}

std::unique_ptr<MlxKernel> cuda_kernel_make(rust::Str name, rust::Slice<const rust::String> input_names,
                                            rust::Slice<const rust::String> output_names, rust::Str source,
                                            rust::Str header, int32_t shared_memory) {
  return made(mx::fast::cuda_kernel(to_string(name), to_strings(input_names), to_strings(output_names),
                                    to_string(source), to_string(header), true, shared_memory));
}

std::unique_ptr<MlxArrayList> mlx_kernel_call(const MlxKernel& kernel, rust::Slice<const MlxArray* const> inputs,
                                              rust::Slice<const int32_t> out_shapes_flat,
                                              rust::Slice<const int32_t> out_ndims,
                                              rust::Slice<const DtypeCode> out_dtypes, std::array<int32_t, 3> grid,
                                              std::array<int32_t, 3> threadgroup, bool has_init, float init_value) {
  std::optional<float> init;
  if (has_init) init = init_value;
  auto outs = kernel.f(to_arrays(inputs), to_shapes(out_shapes_flat, out_ndims), to_dtypes(out_dtypes),
                       {grid[0], grid[1], grid[2]}, {threadgroup[0], threadgroup[1], threadgroup[2]}, {}, init,
                       false, {});
  return wrap_all(std::move(outs));
}

rust::String mlx_kernel_traced_source(const MlxKernel& k, rust::Slice<const MlxArray* const> inputs,
                                     rust::Slice<const int32_t> out_shapes_flat, rust::Slice<const int32_t> out_ndims,
                                     rust::Slice<const DtypeCode> out_dtypes, std::array<int32_t, 3> grid,
                                     std::array<int32_t, 3> threadgroup, rust::Str scratch_path) {
  const auto& kernel = k.f;
  auto shapes = to_shapes(out_shapes_flat, out_ndims);
  auto dtypes = to_dtypes(out_dtypes);
  auto args = to_arrays(inputs);
  std::string scratch = to_string(scratch_path);
  std::string captured;
  {
    StdoutCapture capture(scratch + ".stdout");
    try {
      mx::export_function(
          scratch + ".mlxfn",
          [&](const mx::Args& a) {
            return kernel(a, shapes, dtypes, {grid[0], grid[1], grid[2]},
                          {threadgroup[0], threadgroup[1], threadgroup[2]}, {}, std::nullopt, true, {});
          },
          args);
    } catch (...) {
      captured = capture.finish();
      std::remove((scratch + ".stdout").c_str());
      std::remove((scratch + ".mlxfn").c_str());
      throw;
    }
    captured = capture.finish();
  }
  std::remove((scratch + ".stdout").c_str());
  std::remove((scratch + ".mlxfn").c_str());
  return rust::String(captured);
}

}  // namespace triton_metal
