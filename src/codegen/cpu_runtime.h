
// ----------------------------------------------------------------------------------------
// Compiled CPU executor runtime (after metal_core.h): one program is one call on one OS
// thread, so a program has a single "thread" (no lanes, no barriers to wait at) and every
// block lives in that thread's registers (local arrays the compiler vectorises).
//
// Memory goes through `tm_buf`, a bounds-checked view of one kernel argument: an access
// outside it records the first failure in the program's `tm_ctx` (the op being run, the
// argument, the offset) and touches a scratch sink instead, so nothing outside the buffer
// is ever read or written; the host turns the record into an error after the program.
// ----------------------------------------------------------------------------------------
typedef signed char schar;

#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")

// One program range's status, shared with the host (layout mirrored in src/native/mod.rs).
struct tm_ctx {
  int64_t failed;   // 1 once an access was out of bounds, 2 for a zero loop step
  int64_t op;       // the op being run (set before each memory op)
  int64_t bad_op;   // the op that made the bad access
  int64_t param;    // the argument the bad access went through
  int64_t offset;   // the element offset
  int64_t len;      // the argument's length in elements
  int64_t pid[3];   // the program that made it
  alignas(64) unsigned char sink[64];
};
static_assert(sizeof(tm_ctx) == 192 && offsetof(tm_ctx, sink) == 128, "tm_ctx layout");

__attribute__((noinline, cold)) inline void* tm_oob(tm_ctx* c, int64_t param, int64_t off, int64_t len) {
  if (!c->failed) {
    c->failed = 1;
    c->bad_op = c->op;
    c->param = param;
    c->offset = off;
    c->len = len;
  }
  return c->sink;
}

// A `for` loop whose step is zero at run time: recorded like a bad access (`failed` 2), the
// loop runs no iteration, and the host reports it after the program.
__attribute__((noinline, cold)) inline void tm_zero_step(tm_ctx* c, int64_t op) {
  if (!c->failed) {
    c->failed = 2;
    c->bad_op = op;
  }
}

// A pointer cast from an integer (int_to_ptr) or derived from one: a slot of `tm_args`
// above a 48-bit element offset, as the interpreter packs pointers. Slots from 0x8000 up
// mark pointers that reach no memory: 0xFFFF, cast from an integer that is no address of
// the launch; 0x8000 | s, cast from slot s's address to another pointee dtype.
struct tm_slot_table {
  void* const* args;
  const int64_t* lens;
  const int64_t* kinds;  // per slot: -1, or dtype code * 2 + writable (pointer-table entries)
  int64_t n;
  tm_ctx* ctx;
};

// A bad pointer (`failed` 3) or a store through a read-only slot (`failed` 4).
__attribute__((noinline, cold)) inline void* tm_bad_ptr(tm_ctx* c, int64_t failed, int64_t slot, int64_t off) {
  if (!c->failed) {
    c->failed = failed;
    c->bad_op = c->op;
    c->param = slot;
    c->offset = off;
    c->len = 0;
  }
  return c->sink;
}

inline int64_t tm_int_to_ptr(const tm_slot_table& t, int64_t x, int64_t kind) {
  const uint64_t u = (uint64_t)x;
  const int64_t slot = (int64_t)(u >> 48);
  if ((u & 0xffffffffffffull) != 0 || slot >= t.n || t.kinds[slot] < 0) return (int64_t)(0xffffull << 48);
  if ((t.kinds[slot] >> 1) != kind) return (int64_t)((uint64_t)(0x8000 | slot) << 48);
  return x;
}

// `p + d` elements, keeping the slot.
inline int64_t tm_padd(int64_t p, int64_t d) {
  const uint64_t m = 0xffffffffffffull;
  return (int64_t)(((uint64_t)p & ~m) | (((uint64_t)p + (uint64_t)d) & m));
}

// Elements of the slots through pointers of pointee code `kind` (`W`: for writing).
template <class T, bool W> struct tm_dyn {
  const tm_slot_table* t;
  int64_t kind;
  inline T& operator[](int64_t p) const {
    const uint64_t u = (uint64_t)p;
    const int64_t slot = (int64_t)(u >> 48);
    const int64_t off = (int64_t)(u << 16) >> 16;
    if (__builtin_expect(slot >= t->n || t->kinds[slot] < 0 || (t->kinds[slot] >> 1) != kind, 0))
      return *(T*)tm_bad_ptr(t->ctx, 3, slot, off);
    if (W && __builtin_expect(!(t->kinds[slot] & 1), 0)) return *(T*)tm_bad_ptr(t->ctx, 4, slot, off);
    if (__builtin_expect((uint64_t)off >= (uint64_t)t->lens[slot], 0))
      return *(T*)tm_oob(t->ctx, slot, off, t->lens[slot]);
    return ((T*)t->args[slot])[off];
  }
};

template <class T, int N> using tm_vec = T __attribute__((ext_vector_type(N)));

// A block computed where it is read: `b[i]` is `f(i)` (codegen's lazy recipes).
template <class T, class F> struct tm_lazy_t {
  F f;
  inline T operator[](unsigned i) const { return f(i); }
};
template <class T, class F> inline tm_lazy_t<T, F> tm_lazy(F f) { return tm_lazy_t<T, F>{f}; }

// Whether `run(r)` holds for every run r < n of a mask block (codegen::unswitch).
template <class F> inline bool tm_all_runs(unsigned n, F run) {
  for (unsigned r = 0; r < n; ++r)
    if (!run(r)) return false;
  return true;
}

template <class T> struct tm_ptr;

// A kernel argument: `p[i]` is element i (checked), `p + i` a chunk start for tm_vload.
template <class T> struct tm_buf {
  T* base;
  int64_t len;
  tm_ctx* ctx;
  int64_t param;
  inline T& operator[](int64_t i) const {
    if (__builtin_expect((uint64_t)i >= (uint64_t)len, 0)) return *(T*)tm_oob(ctx, param, i, len);
    return base[i];
  }
  inline tm_ptr<T> operator+(int64_t i) const { return tm_ptr<T>{this, i}; }
};

// Whether elements [off, off + n) all lie inside `b`.
template <class T> inline bool tm_in_bounds(const tm_buf<T>& b, int64_t off, int64_t n) {
  return off >= 0 && off <= b.len - n;
}

template <class T> struct tm_ptr {
  const tm_buf<T>* buf;
  int64_t off;
  // The chunk's first element, or the sink when [off, off + n) leaves the buffer.
  inline T* chunk(int64_t n) const {
    if (__builtin_expect(off < 0 || off > buf->len - n, 0)) {
      const int64_t bad = off < 0 ? off : (off >= buf->len ? off : buf->len);
      return (T*)tm_oob(buf->ctx, buf->param, bad, buf->len);
    }
    return buf->base + off;
  }
};

#ifndef TM_PREFETCH_BYTES
#define TM_PREFETCH_BYTES 2048
#endif
template <int N, class T> inline tm_vec<std::remove_const_t<T>, N> tm_vload(tm_ptr<T> p) {
  tm_vec<std::remove_const_t<T>, N> v;
  // Hardware prefetchers stop at 4 KiB pages and programs read several streams a block
  // at a time: fetch ahead (a prefetch never faults, even past the buffer). The address
  // is computed in unsigned integers: as a pointer it could leave the buffer.
  __builtin_prefetch(reinterpret_cast<const void*>(
      (uintptr_t)p.buf->base + (uintptr_t)p.off * sizeof(T) + TM_PREFETCH_BYTES));
  __builtin_memcpy(&v, p.chunk(N), sizeof(T) * N);
  return v;
}

#ifndef TM_STREAM_BYTES
#define TM_STREAM_BYTES (8l << 20)
#endif
template <class T, int N> inline void tm_vstore(tm_ptr<T> p, tm_vec<T, N> v) {
  T* d = p.chunk(N);
#if defined(__x86_64__)
  // Outputs larger than the caches are written around them (no read for ownership);
  // `tm_run` fences before it returns.
  // MLX's large buffers start 16 bytes into a page, so the chunk goes as two 16-byte
  // halves.
  if constexpr (sizeof(T) * N == 32) {
    if (p.buf->len * (int64_t)sizeof(T) >= TM_STREAM_BYTES && ((uintptr_t)d & 15) == 0) {
      typedef T half_vec __attribute__((ext_vector_type(N / 2)));
      half_vec lo, hi;
      __builtin_memcpy(&lo, &v, 16);
      __builtin_memcpy(&hi, (const char*)&v + 16, 16);
      __builtin_nontemporal_store(lo, (half_vec*)d);
      __builtin_nontemporal_store(hi, (half_vec*)d + 1);
      return;
    }
  }
#endif
  __builtin_memcpy(d, &v, sizeof(T) * N);
}

inline void tm_fence_streams() {
#if defined(__x86_64__)
  __builtin_ia32_sfence();
#endif
}

// Relaxed atomics on plain memory: used for every output access when programs may share
// elements (a plain racing access would be a data race), and for tl.atomic_*.
template <class T> struct tm_bits {
  using type = std::conditional_t<sizeof(T) == 8, uint64_t,
      std::conditional_t<sizeof(T) == 4, uint32_t, std::conditional_t<sizeof(T) == 2, uint16_t, uint8_t>>>;
};
template <class T> inline T tm_atomic_load(T* p) {
  using B = typename tm_bits<T>::type;
  return __builtin_bit_cast(T, __atomic_load_n((B*)p, __ATOMIC_RELAXED));
}
template <class T, class U> inline void tm_atomic_store(T* p, U v) {
  using B = typename tm_bits<T>::type;
  __atomic_store_n((B*)p, __builtin_bit_cast(B, (T)v), __ATOMIC_RELAXED);
}
// tl.atomic_*: MO is the `__ATOMIC_*` order of Triton's `sem=`. Updates the hardware has
// no instruction for are compare-and-swap loops on the element's bits (a real
// read-modify-write even when the value does not change, so the order holds either way).
template <int MO, class T, class F> inline T tm_atomic_update(T* p, F f) {
  using B = typename tm_bits<T>::type;
  B old = __atomic_load_n((B*)p, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n((B*)p, &old, __builtin_bit_cast(B, (T)f(__builtin_bit_cast(T, old))), true, MO,
                                      __ATOMIC_RELAXED)) {
  }
  return __builtin_bit_cast(T, old);
}
template <int MO, class T, class U> inline T tm_atomic_fetch_add(T* p, U v) {
  if constexpr (std::is_integral_v<T>) {
    return __atomic_fetch_add(p, (T)v, MO);
  } else {
    const T x = (T)v;
    return tm_atomic_update<MO>(p, [x](T o) { return (T)(o + x); });
  }
}
template <int MO, class T, class U> inline T tm_atomic_fetch_max(T* p, U v) {
  const T x = (T)v;
  return tm_atomic_update<MO>(p, [x](T o) { return o < x ? x : o; });
}
template <int MO, class T, class U> inline T tm_atomic_fetch_min(T* p, U v) {
  const T x = (T)v;
  return tm_atomic_update<MO>(p, [x](T o) { return o > x ? x : o; });
}
template <int MO, class T, class U> inline T tm_atomic_fetch_and(T* p, U v) { return __atomic_fetch_and(p, (T)v, MO); }
template <int MO, class T, class U> inline T tm_atomic_fetch_or(T* p, U v) { return __atomic_fetch_or(p, (T)v, MO); }
template <int MO, class T, class U> inline T tm_atomic_fetch_xor(T* p, U v) { return __atomic_fetch_xor(p, (T)v, MO); }
template <int MO, class T, class U> inline T tm_atomic_exchange(T* p, U v) {
  using B = typename tm_bits<T>::type;
  return __builtin_bit_cast(T, __atomic_exchange_n((B*)p, __builtin_bit_cast(B, (T)v), MO));
}
// Compare-and-swap of the bits (as GPUs compare), for any element type.
template <int MO, class T, class U, class V> inline T tm_atomic_cas(T* p, U cmp, V val) {
  using B = typename tm_bits<T>::type;
  B expected = __builtin_bit_cast(B, (T)cmp);
  constexpr int fail = MO == __ATOMIC_ACQ_REL || MO == __ATOMIC_ACQUIRE ? __ATOMIC_ACQUIRE : __ATOMIC_RELAXED;
  __atomic_compare_exchange_n((B*)p, &expected, __builtin_bit_cast(B, (T)val), false, MO, fail);
  return __builtin_bit_cast(T, expected);
}
// Float max/min as Triton orders them (it runs the integer max/min of the bits for a
// non-negative-signed operand and the unsigned min/max for a negative-signed one): IEEE
// totalOrder, -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN. `tm_total_key` maps the
// bits to an unsigned integer of that order.
template <class T> inline typename tm_bits<T>::type tm_total_key(T x) {
  using B = typename tm_bits<T>::type;
  const B u = __builtin_bit_cast(B, x);
  constexpr B top = (B)1 << (sizeof(B) * 8 - 1);
  return u ^ ((B)0 - (u >> (sizeof(B) * 8 - 1)) | top);
}
template <int MO, class T, class U> inline T tm_atomic_fmax(T* p, U v) {
  const T x = (T)v;
  return tm_atomic_update<MO>(p, [x](T o) { return tm_total_key(x) > tm_total_key(o) ? x : o; });
}
template <int MO, class T, class U> inline T tm_atomic_fmin(T* p, U v) {
  const T x = (T)v;
  return tm_atomic_update<MO>(p, [x](T o) { return tm_total_key(x) < tm_total_key(o) ? x : o; });
}

// ---- f64 (Metal has none; these follow the interpreter) ------------------------------

// The host libm's scalar functions. The asm labels name the C library's symbols without
// declaring them as library functions, so clang neither folds them nor swaps in libmvec's
// vector versions (less accurate): each gives the bits the interpreter's `f64::exp`, ...
// give, the same calls.
#define TM_LIBM1(name) extern "C" double tm_libm_##name(double) __asm__(#name);
#define TM_LIBM2(name) extern "C" double tm_libm_##name(double, double) __asm__(#name);
TM_LIBM1(exp) TM_LIBM1(exp2) TM_LIBM1(log) TM_LIBM1(log2) TM_LIBM1(sin) TM_LIBM1(cos)
TM_LIBM1(erf) TM_LIBM1(erfc) TM_LIBM1(tan) TM_LIBM1(asin) TM_LIBM1(acos) TM_LIBM1(atan)
TM_LIBM1(sinh) TM_LIBM1(cosh) TM_LIBM1(asinh) TM_LIBM1(acosh) TM_LIBM1(atanh)
TM_LIBM1(log1p) TM_LIBM1(expm1) TM_LIBM1(log10) TM_LIBM1(exp10) TM_LIBM1(cbrt)
TM_LIBM2(pow) TM_LIBM2(atan2) TM_LIBM2(hypot)
#undef TM_LIBM1
#undef TM_LIBM2

inline bool tm_isnan_d(double x) { return (__builtin_bit_cast(uint64_t, x) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull; }
// Triton's maximum/minimum (NaN ignored, -0 < +0) and the NaN-propagating forms, whose
// NaN is the canonical one (every payload bit set), as for float.
inline double tm_fmax(double a, double b) {
  return (tm_isnan_d(b) || a > b || (a == b && (__builtin_bit_cast(uint64_t, a) >> 63) == 0)) ? a : b;
}
inline double tm_fmin(double a, double b) {
  return (tm_isnan_d(b) || a < b || (a == b && (__builtin_bit_cast(uint64_t, a) >> 63) != 0)) ? a : b;
}
inline double tm_fmax_nan(double a, double b) {
  return (tm_isnan_d(a) || tm_isnan_d(b)) ? __builtin_bit_cast(double, 0x7fffffffffffffffull) : tm_fmax(a, b);
}
inline double tm_fmin_nan(double a, double b) {
  return (tm_isnan_d(a) || tm_isnan_d(b)) ? __builtin_bit_cast(double, 0x7fffffffffffffffull) : tm_fmin(a, b);
}

// Double to integers: truncated, saturated, NaN 0 (0x8000000000000000 for 64 bits); 8-bit
// results are the low byte of the 16-bit one (as the float versions in the `f2i` helpers).
inline short tm_f2i16(double x) { return tm_isnan_d(x) ? short(0) : x >= 32767.0 ? short(32767) : x <= -32768.0 ? short(-32768) : short(x); }
inline unsigned short tm_f2u16(double x) { return tm_isnan_d(x) ? (unsigned short)0 : x >= 65535.0 ? (unsigned short)65535 : x <= 0.0 ? (unsigned short)0 : (unsigned short)x; }
inline int tm_f2i32(double x) { return tm_isnan_d(x) ? 0 : x >= 2147483647.0 ? 2147483647 : x <= -2147483648.0 ? (-2147483647 - 1) : int(x); }
inline unsigned tm_f2u32(double x) { return tm_isnan_d(x) ? 0u : x >= 4294967295.0 ? 4294967295u : x <= 0.0 ? 0u : unsigned(x); }
inline long tm_f2i64(double x) { return tm_isnan_d(x) || x <= -9223372036854775808.0 ? long(-0x7fffffffffffffff - 1) : x >= 9223372036854775808.0 ? long(0x7fffffffffffffff) : long(x); }
inline unsigned long tm_f2u64(double x) { return tm_isnan_d(x) ? 0x8000000000000000ul : x >= 18446744073709551616.0 ? 0xfffffffffffffffful : x <= 0.0 ? 0ul : (unsigned long)x; }
inline schar tm_f2i8(double x) { return schar((unsigned char)(unsigned short)tm_f2i16(x)); }
inline unsigned char tm_f2u8(double x) { return (unsigned char)tm_f2u16(x); }

// A double rounded to float toward zero with the last bit set when inexact (round to odd):
// rounding that to half or bfloat rounds the double once (the interpreter's
// `dtype::f64_to_f32_odd`).
inline float tm_d2f_odd(double x) {
  const float r = (float)x;
  if (tm_isnan_d(x) || (double)r == x) return r;
  uint32_t b = __builtin_bit_cast(uint32_t, r);
  if (__builtin_fabs((double)r) > __builtin_fabs(x)) b -= 1;
  return __builtin_bit_cast(float, b | 1u);
}

// `fma` for tl.dot's f64 accumulation (Metal's overloads are float, half and bfloat).
inline double fma(double a, double b, double c) { return __builtin_fma(a, b, c); }

// The inverse error function as the interpreter computes it (`exec::libdevice::erfinv`):
// Giles' approximation, then Newton steps on erf (on ln erfc in the tails).
inline double tm_erfinv_d(double y) {
  const double a = __builtin_fabs(y);
  if (tm_isnan_d(y) || a > 1.0) return __builtin_nan("");
  if (a == 1.0) return __builtin_copysign(__builtin_inf(), y);
  if (y == 0.0) return y;
  double w = -tm_libm_log((1.0 - a) * (1.0 + a)), p = 0.0;
  if (w < 5.0) {
    w -= 2.5;
    const double c[9] = {2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                         -0.00125372503, -0.00417768164, 0.246640727, 1.50140941};
    for (int i = 0; i < 9; ++i) p = p * w + c[i];
  } else {
    w = __builtin_sqrt(w) - 3.0;
    const double c[9] = {-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                         -0.0076224613, 0.00943887047, 1.00167406, 2.83297682};
    for (int i = 0; i < 9; ++i) p = p * w + c[i];
  }
  double x = p * a;
  const double two_over_sqrt_pi = 1.1283791670955126;
  for (int i = 0; i < 20; ++i) {
    const double d = two_over_sqrt_pi * tm_libm_exp(-x * x);
    double step;
    if (a <= 0.5) {
      step = (tm_libm_erf(x) - a) / d;
    } else {
      const double e = tm_libm_erfc(x);
      step = -(tm_libm_log(e) - tm_libm_log(1.0 - a)) * e / d;
    }
    const double next = x - step;
    if (next == x || !(__builtin_fabs(next) < __builtin_inf())) break;
    x = next;
  }
  return __builtin_copysign(x, y);
}

using namespace metal;
