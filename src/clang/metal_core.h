// Metal Shading Language types and math as C++20: the part of the emulation harness's
// shim that needs no runtime. The emulator compiles it in front of `metal_shim.h` (fibers,
// barriers, simd collectives, atomics); the compiled CPU executor (`native`) in
// front of its own single-thread runtime. Correctness first; nothing here models Apple's
// precision.
//
// Deliberately avoids <math.h>/<cmath>/<stdlib.h>: they put `exp`, `abs`, `isnan` ... into
// the global namespace, where they would clash with the `metal::` overloads that kernels
// call unqualified.
#pragma once
#include <limits>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <type_traits>

// ----------------------------------------------------------------------------------------
// Scalar and vector types
// ----------------------------------------------------------------------------------------
namespace metal {
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef _Float16 half;

template <class T, int N> using vec = T __attribute__((ext_vector_type(N)));

// bfloat16 as a class: storage is the upper half of an fp32; conversions round to nearest
// even (NaN stays NaN), arithmetic happens in float and rounds back, as on Apple GPUs.
struct bfloat {
  uint16_t bits;
  bfloat() = default;
  static constexpr bfloat from_bits(uint16_t b) {
    bfloat r{};
    r.bits = b;
    return r;
  }
  constexpr bfloat(float f) : bits(round(f)) {}
  constexpr bfloat(double f) : bits(round((float)f)) {}
  constexpr bfloat(_Float16 f) : bits(round((float)f)) {}
  template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  constexpr bfloat(I i) : bits(round((float)i)) {}
  constexpr operator float() const { return __builtin_bit_cast(float, (uint32_t)bits << 16); }
  static constexpr uint16_t round(float f) {
    uint32_t u = __builtin_bit_cast(uint32_t, f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
  }
  bfloat& operator+=(float o) { return *this = bfloat(float(*this) + o); }
  bfloat& operator-=(float o) { return *this = bfloat(float(*this) - o); }
  bfloat& operator*=(float o) { return *this = bfloat(float(*this) * o); }
  bfloat& operator/=(float o) { return *this = bfloat(float(*this) / o); }
  bfloat operator-() const { return from_bits(bits ^ 0x8000); }
  bfloat operator+() const { return *this; }
};

template <class T> struct is_bf : std::false_type {};
template <> struct is_bf<bfloat> : std::true_type {};
template <class T>
concept arith = std::is_arithmetic_v<T> || std::is_same_v<T, _Float16>;

// bfloat op bfloat stays bfloat; bfloat op other scalar computes in float (integers) or in
// the wider float type.
#define TM_BF_BINOP(op)                                                                 \
  inline bfloat operator op(bfloat a, bfloat b) { return bfloat(float(a) op float(b)); } \
  template <arith U> inline auto operator op(bfloat a, U b) {                            \
    if constexpr (std::is_integral_v<U>) return bfloat(float(a) op float(b));            \
    else return float(a) op b;                                                           \
  }                                                                                      \
  template <arith U> inline auto operator op(U a, bfloat b) {                            \
    if constexpr (std::is_integral_v<U>) return bfloat(float(a) op float(b));            \
    else return a op float(b);                                                           \
  }
TM_BF_BINOP(+)
TM_BF_BINOP(-)
TM_BF_BINOP(*)
TM_BF_BINOP(/)
#undef TM_BF_BINOP
#define TM_BF_CMP(op)                                                                 \
  inline bool operator op(bfloat a, bfloat b) { return float(a) op float(b); }       \
  template <arith U> inline bool operator op(bfloat a, U b) { return float(a) op b; } \
  template <arith U> inline bool operator op(U a, bfloat b) { return a op float(b); }
TM_BF_CMP(<)
TM_BF_CMP(<=)
TM_BF_CMP(>)
TM_BF_CMP(>=)
TM_BF_CMP(==)
TM_BF_CMP(!=)
#undef TM_BF_CMP

#define TM_VEC_TYPES(T)                 \
  typedef vec<T, 2> T##2;               \
  typedef vec<T, 3> T##3;               \
  typedef vec<T, 4> T##4;
TM_VEC_TYPES(float)
TM_VEC_TYPES(half)
TM_VEC_TYPES(int)
TM_VEC_TYPES(uint)
TM_VEC_TYPES(short)
TM_VEC_TYPES(ushort)
TM_VEC_TYPES(char)
TM_VEC_TYPES(uchar)
TM_VEC_TYPES(long)
TM_VEC_TYPES(ulong)
TM_VEC_TYPES(bool)
#undef TM_VEC_TYPES

// Small aggregate stand-ins: bfloat cannot be an ext_vector element.
template <int N> struct bfloat_vec {
  bfloat v[N];
  bfloat& operator[](int i) { return v[i]; }
  bfloat operator[](int i) const { return v[i]; }
};
typedef bfloat_vec<2> bfloat2;
typedef bfloat_vec<3> bfloat3;
typedef bfloat_vec<4> bfloat4;

template <class V> struct vtraits {
  static constexpr bool is_vec = false;
  static constexpr int n = 1;
  using elem = V;
};
template <class T, int N> struct vtraits<vec<T, N>> {
  static constexpr bool is_vec = true;
  static constexpr int n = N;
  using elem = T;
};
template <class T>
concept vector = vtraits<std::remove_cvref_t<T>>::is_vec;

typedef half float16_t;
typedef bfloat bfloat16_t;
} // namespace metal


// ----------------------------------------------------------------------------------------
// The Metal standard library subset
// ----------------------------------------------------------------------------------------
namespace metal {

// Element-wise lifting of a scalar function over vectors.
#define TM_LIFT1(name)                                                   \
  template <class T, int N> inline vec<T, N> name(vec<T, N> v) {         \
    vec<T, N> r;                                                         \
    for (int i = 0; i < N; i++) r[i] = name((T)v[i]);                    \
    return r;                                                            \
  }

#define TM_FLOAT1(name, expr)                                            \
  inline float name(float x) { return expr; }                            \
  inline half name(half x) { return (half)name((float)x); }              \
  inline bfloat name(bfloat x) { return bfloat(name((float)x)); }        \
  TM_LIFT1(name)

// exp and exp2 as straight-line code the compiler vectorises (libm's `expf` vectorises
// only through glibc's libmvec, whose `exp`s took 0.80 ms of softmax 4096x1024's compute
// on two cores against 0.54 ms for these, at 512 bits, measured). x = n ln2 + g with
// |g| <= ln2/2 (Cody-Waite: the high part of ln2 has 16 significant bits, so n times it is
// exact for |n| <= 150), e^g from Cephes' expf polynomial, and 2^n applied in two halves so
// that a subnormal result is rounded once and overflow is decided by that rounding. Below
// -104 the result rounds to +0, above 89 to +inf; NaN stays NaN. Checked on all 2^32
// inputs against the correctly rounded result: at most 1 ulp for both (a sample of them,
// subnormal and overflowing results included, is a test in `native::tests`). Triton
// on NVIDIA computes exp as `ex2.approx` of a rounded x log2 e, which is less precise.
inline float tm_exp_reduced(float n, float g, float x) {
  float p = 1.9875691500e-4f;
  p = __builtin_fmaf(p, g, 1.3981999507e-3f);
  p = __builtin_fmaf(p, g, 8.3334519073e-3f);
  p = __builtin_fmaf(p, g, 4.1665795894e-2f);
  p = __builtin_fmaf(p, g, 1.6666665459e-1f);
  p = __builtin_fmaf(p, g, 5.0000001201e-1f);
  p = __builtin_fmaf(p, g * g, g) + 1.0f;
  const int k = (int)n, k1 = k >> 1, k2 = k - k1;
  const float y = p * __builtin_bit_cast(float, (k1 + 127) << 23) * __builtin_bit_cast(float, (k2 + 127) << 23);
  return x != x ? x : y;
}
inline float tm_exp(float x) {
  // `a > b ? a : b` (not fmax): one instruction, and NaN takes the bound (fixed at the end).
  float c = x > -104.0f ? x : -104.0f;
  c = c < 89.0f ? c : 89.0f;
  // rint rounds to nearest even in the default rounding mode, which nothing changes here
  // (`__builtin_roundevenf` would need clang 17; the oldest supported clang is 15).
  const float n = __builtin_rintf(c * 1.44269504088896341f);
  const float g = __builtin_fmaf(-n, 1.4286068203094173e-6f, __builtin_fmaf(-n, 0.693145751953125f, c));
  return tm_exp_reduced(n, g, x);
}
inline float tm_exp2(float x) {
  float c = x > -150.0f ? x : -150.0f;
  c = c < 129.0f ? c : 129.0f;
  const float n = __builtin_rintf(c);
  return tm_exp_reduced(n, (c - n) * 0.693147181f, x);
}
TM_FLOAT1(exp, tm_exp(x))
TM_FLOAT1(exp2, tm_exp2(x))
TM_FLOAT1(exp10, __builtin_powf(10.0f, x))
TM_FLOAT1(log, __builtin_logf(x))
TM_FLOAT1(log2, __builtin_log2f(x))
TM_FLOAT1(log10, __builtin_log10f(x))
TM_FLOAT1(sqrt, __builtin_sqrtf(x))
TM_FLOAT1(rsqrt, 1.0f / __builtin_sqrtf(x))
TM_FLOAT1(sin, __builtin_sinf(x))
TM_FLOAT1(cos, __builtin_cosf(x))
TM_FLOAT1(tan, __builtin_tanf(x))
TM_FLOAT1(asin, __builtin_asinf(x))
TM_FLOAT1(acos, __builtin_acosf(x))
TM_FLOAT1(atan, __builtin_atanf(x))
TM_FLOAT1(sinh, __builtin_sinhf(x))
TM_FLOAT1(cosh, __builtin_coshf(x))
TM_FLOAT1(tanh, __builtin_tanhf(x))
TM_FLOAT1(asinh, __builtin_asinhf(x))
TM_FLOAT1(acosh, __builtin_acoshf(x))
TM_FLOAT1(atanh, __builtin_atanhf(x))
TM_FLOAT1(sinpi, __builtin_sinf(x * 3.14159265358979323846f))
TM_FLOAT1(cospi, __builtin_cosf(x * 3.14159265358979323846f))
TM_FLOAT1(tanpi, __builtin_tanf(x * 3.14159265358979323846f))
TM_FLOAT1(floor, __builtin_floorf(x))
TM_FLOAT1(ceil, __builtin_ceilf(x))
TM_FLOAT1(round, __builtin_roundf(x))
TM_FLOAT1(rint, __builtin_rintf(x))
TM_FLOAT1(trunc, __builtin_truncf(x))
TM_FLOAT1(fabs, __builtin_fabsf(x))
TM_FLOAT1(fract, __builtin_fminf(x - __builtin_floorf(x), 0x1.fffffep-1f))
TM_FLOAT1(saturate, __builtin_fminf(__builtin_fmaxf(x, 0.0f), 1.0f))
TM_FLOAT1(sign, x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : (x == x ? 0.0f * x : 0.0f)))
#undef TM_FLOAT1

// abs covers floats and integers.
inline float abs(float x) { return __builtin_fabsf(x); }
inline half abs(half x) { return (half)__builtin_fabsf((float)x); }
inline bfloat abs(bfloat x) { return bfloat::from_bits(x.bits & 0x7fff); }
template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0> inline I abs(I x) {
  if constexpr (std::is_signed_v<I>) return x < 0 ? (I)-x : x;
  else return x;
}
TM_LIFT1(abs)

#define TM_PRED(name, expr)                                              \
  inline bool name(float x) { return expr; }                             \
  inline bool name(half x) { return name((float)x); }                    \
  inline bool name(bfloat x) { return name((float)x); }                  \
  template <class T, int N> inline vec<bool, N> name(vec<T, N> v) {      \
    vec<bool, N> r;                                                      \
    for (int i = 0; i < N; i++) r[i] = name((T)v[i]);                    \
    return r;                                                            \
  }
TM_PRED(isnan, x != x)
TM_PRED(isinf, __builtin_fabsf(x) == __builtin_inff())
TM_PRED(isfinite, __builtin_fabsf(x) < __builtin_inff())
TM_PRED(signbit, (__builtin_bit_cast(uint32_t, x) >> 31) != 0)
TM_PRED(isnormal, __builtin_isnormal(x))
#undef TM_PRED

// Scalar binary/ternary functions: mixed scalar types compute in their common type.
template <class A, class B> using common = std::common_type_t<A, B>;
template <class T> struct fwide { using type = T; };
template <> struct fwide<bfloat> { using type = float; };

#define TM_FLOAT2(name, expr)                                                     \
  inline float name(float x, float y) { return expr; }                            \
  inline half name(half x, half y) { return (half)name((float)x, (float)y); }     \
  inline bfloat name(bfloat x, bfloat y) { return bfloat(name((float)x, (float)y)); } \
  template <class T, int N> inline vec<T, N> name(vec<T, N> a, vec<T, N> b) {     \
    vec<T, N> r;                                                                  \
    for (int i = 0; i < N; i++) r[i] = name((T)a[i], (T)b[i]);                    \
    return r;                                                                     \
  }                                                                               \
  template <class T, int N> inline vec<T, N> name(vec<T, N> a, T b) {             \
    return name(a, (vec<T, N>)b);                                                 \
  }
// C99's pow(x, +-0) and pow(+1, y) are 1 for any x and y, NaN included, as Metal and CUDA
// give; the host's powf returns NaN for a signalling NaN there.
TM_FLOAT2(pow, (y == 0.0f || x == 1.0f) ? 1.0f : __builtin_powf(x, y))
TM_FLOAT2(powr, __builtin_powf(x, y))
TM_FLOAT2(fmod, __builtin_fmodf(x, y))
TM_FLOAT2(atan2, __builtin_atan2f(x, y))
TM_FLOAT2(copysign, __builtin_copysignf(x, y))
TM_FLOAT2(fdim, x > y ? x - y : 0.0f)
TM_FLOAT2(fmin, __builtin_fminf(x, y))
TM_FLOAT2(fmax, __builtin_fmaxf(x, y))
TM_FLOAT2(step, y < x ? 0.0f : 1.0f)
#undef TM_FLOAT2

// Metal declares min/max once per type, so operands of two types are ambiguous there
// (an unsuffixed float literal is a float in Metal, a double here). The emulator compiles
// with TM_METAL_MODEL and rejects them as Metal does; the compiled CPU executor mixes.
template <class A, class B>
constexpr bool tm_one_type = std::is_same_v<A, B> || (std::is_same_v<A, float> && std::is_same_v<B, double>) ||
                             (std::is_same_v<A, double> && std::is_same_v<B, float>);
#ifdef TM_METAL_MODEL
#define TM_ONE_TYPE(A, B) static_assert(tm_one_type<A, B>, "Metal's min/max/clamp take operands of one type: cast one")
#else
#define TM_ONE_TYPE(A, B)
#endif

// min/max follow fmin/fmax for floats (a NaN operand yields the other one), as Metal.
template <class A, class B>
  requires(arith<A> || is_bf<A>::value) && (arith<B> || is_bf<B>::value)
inline auto max(A a, B b) {
  TM_ONE_TYPE(A, B);
  if constexpr (is_bf<A>::value && is_bf<B>::value) return bfloat(__builtin_fmaxf(a, b));
  else {
    using C = common<typename fwide<A>::type, typename fwide<B>::type>;
    if constexpr (std::is_floating_point_v<C> || std::is_same_v<C, _Float16>)
      return (C)__builtin_fmaxf((float)a, (float)b);
    else return (C)a > (C)b ? (C)a : (C)b;
  }
}
template <class A, class B>
  requires(arith<A> || is_bf<A>::value) && (arith<B> || is_bf<B>::value)
inline auto min(A a, B b) {
  TM_ONE_TYPE(A, B);
  if constexpr (is_bf<A>::value && is_bf<B>::value) return bfloat(__builtin_fminf(a, b));
  else {
    using C = common<typename fwide<A>::type, typename fwide<B>::type>;
    if constexpr (std::is_floating_point_v<C> || std::is_same_v<C, _Float16>)
      return (C)__builtin_fminf((float)a, (float)b);
    else return (C)a < (C)b ? (C)a : (C)b;
  }
}
template <class T, int N> inline vec<T, N> max(vec<T, N> a, vec<T, N> b) {
  vec<T, N> r;
  for (int i = 0; i < N; i++) r[i] = (T)max((T)a[i], (T)b[i]);
  return r;
}
template <class T, int N> inline vec<T, N> min(vec<T, N> a, vec<T, N> b) {
  vec<T, N> r;
  for (int i = 0; i < N; i++) r[i] = (T)min((T)a[i], (T)b[i]);
  return r;
}
template <class T, int N, class S> inline vec<T, N> max(vec<T, N> a, S b) { return max(a, (vec<T, N>)(T)b); }
template <class T, int N, class S> inline vec<T, N> min(vec<T, N> a, S b) { return min(a, (vec<T, N>)(T)b); }

template <class T, class L, class H> inline auto clamp(T x, L lo, H hi) { return min(max(x, lo), hi); }

inline float fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
inline half fma(half a, half b, half c) { return (half)__builtin_fmaf(a, b, c); }
inline bfloat fma(bfloat a, bfloat b, bfloat c) { return bfloat(__builtin_fmaf(a, b, c)); }
template <class T, int N> inline vec<T, N> fma(vec<T, N> a, vec<T, N> b, vec<T, N> c) {
  vec<T, N> r;
  for (int i = 0; i < N; i++) r[i] = fma((T)a[i], (T)b[i], (T)c[i]);
  return r;
}
template <class A, class B, class C> inline auto mad(A a, B b, C c) { return a * b + c; }
template <class A, class B, class C> inline auto mix(A x, B y, C t) { return x + (y - x) * t; }
template <class A, class B, class C> inline auto smoothstep(A e0, B e1, C x) {
  auto t = clamp((x - e0) / (e1 - e0), 0.0f, 1.0f);
  return t * t * (3.0f - 2.0f * t);
}

// select(a, b, c) = c ? b : a, element-wise for vectors.
template <class T, class C> inline T select(T a, T b, C c) {
  if constexpr (vtraits<T>::is_vec) {
    T r;
    for (int i = 0; i < vtraits<T>::n; i++) {
      if constexpr (vtraits<C>::is_vec) r[i] = c[i] ? b[i] : a[i];
      else r[i] = c ? b[i] : a[i];
    }
    return r;
  } else {
    return c ? b : a;
  }
}
template <class V> inline bool all(V v) {
  if constexpr (vtraits<V>::is_vec) {
    for (int i = 0; i < vtraits<V>::n; i++)
      if (!v[i]) return false;
    return true;
  } else return (bool)v;
}
template <class V> inline bool any(V v) {
  if constexpr (vtraits<V>::is_vec) {
    for (int i = 0; i < vtraits<V>::n; i++)
      if (v[i]) return true;
    return false;
  } else return (bool)v;
}

template <class T, int N> inline T dot(vec<T, N> a, vec<T, N> b) {
  T s = 0;
  for (int i = 0; i < N; i++) s += a[i] * b[i];
  return s;
}
template <class T, int N> inline T length(vec<T, N> a) { return sqrt(dot(a, a)); }
template <class T, int N> inline T length_squared(vec<T, N> a) { return dot(a, a); }
template <class T, int N> inline T distance(vec<T, N> a, vec<T, N> b) { return length(a - b); }
template <class T, int N> inline vec<T, N> normalize(vec<T, N> a) { return a * rsqrt(dot(a, a)); }
template <class T> inline vec<T, 3> cross(vec<T, 3> a, vec<T, 3> b) {
  return vec<T, 3>{a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x};
}

// Integer functions.
template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0> inline I popcount(I x) {
  return (I)__builtin_popcountll((unsigned long long)(std::make_unsigned_t<I>)x);
}
template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0> inline I clz(I x) {
  using U = std::make_unsigned_t<I>;
  U u = (U)x;
  if (u == 0) return (I)(sizeof(I) * 8);
  return (I)(__builtin_clzll((unsigned long long)u) - (64 - sizeof(I) * 8));
}
template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0> inline I ctz(I x) {
  using U = std::make_unsigned_t<I>;
  U u = (U)x;
  if (u == 0) return (I)(sizeof(I) * 8);
  return (I)__builtin_ctzll((unsigned long long)u);
}
template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0> inline I mulhi(I a, I b) {
  if constexpr (sizeof(I) == 8) {
    using W = std::conditional_t<std::is_signed_v<I>, __int128, unsigned __int128>;
    return (I)(((W)a * (W)b) >> 64);
  } else {
    using W = std::conditional_t<std::is_signed_v<I>, int64_t, uint64_t>;
    return (I)(((W)a * (W)b) >> (sizeof(I) * 8));
  }
}
template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0> inline I absdiff(I a, I b) {
  return a > b ? a - b : b - a;
}
template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0> inline I reverse_bits(I x) {
  using U = std::make_unsigned_t<I>;
  U u = (U)x, r = 0;
  for (size_t i = 0; i < sizeof(I) * 8; i++) r = (U)((r << 1) | ((u >> i) & 1));
  return (I)r;
}
TM_LIFT1(popcount)
TM_LIFT1(clz)
TM_LIFT1(ctz)
#undef TM_LIFT1

// Bit reinterpretation between same-sized types.
template <class To, class From> inline To as_type(From x) {
  static_assert(sizeof(To) == sizeof(From), "as_type needs equal sizes");
  return __builtin_bit_cast(To, x);
}

// numeric_limits with half and bfloat.
template <class T> struct numeric_limits : std::numeric_limits<T> {};
template <> struct numeric_limits<half> {
  static constexpr bool is_specialized = true;
  static constexpr half max() { return (half)65504.0f; }
  static constexpr half min() { return (half)6.103515625e-05f; }
  static constexpr half lowest() { return (half)-65504.0f; }
  static constexpr half epsilon() { return (half)0.0009765625f; }
  static constexpr half infinity() { return (half)__builtin_inff(); }
  static constexpr half quiet_NaN() { return (half)__builtin_nanf(""); }
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
};
template <> struct numeric_limits<bfloat> {
  static constexpr bool is_specialized = true;
  static constexpr bfloat max() { return bfloat::from_bits(0x7f7f); }
  static constexpr bfloat min() { return bfloat::from_bits(0x0080); }
  static constexpr bfloat lowest() { return bfloat::from_bits(0xff7f); }
  static constexpr bfloat epsilon() { return bfloat::from_bits(0x3c00); }
  static constexpr bfloat infinity() { return bfloat::from_bits(0x7f80); }
  static constexpr bfloat quiet_NaN() { return bfloat::from_bits(0x7fc0); }
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
};
} // namespace metal
