#include <metal_stdlib>
using namespace metal;

inline bool tm_isnan_f(float x) { return (as_type<uint>(x) & 0x7fffffffu) > 0x7f800000u; }
inline float tm_fmax(float a, float b) { return (tm_isnan_f(b) || a > b || (a == b && (as_type<uint>(a) >> 31) == 0u)) ? a : b; }
inline float tm_fmin(float a, float b) { return (tm_isnan_f(b) || a < b || (a == b && (as_type<uint>(a) >> 31) != 0u)) ? a : b; }
inline float tm_fmax_nan(float a, float b) { return (tm_isnan_f(a) || tm_isnan_f(b)) ? as_type<float>(0x7fffffffu) : tm_fmax(a, b); }
inline float tm_fmin_nan(float a, float b) { return (tm_isnan_f(a) || tm_isnan_f(b)) ? as_type<float>(0x7fffffffu) : tm_fmin(a, b); }

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

inline float tm_simd_fsum(float x) {
  return simd_all(as_type<uint>(x) == 0x80000000u) ? -0.0f : simd_sum(x);
}
inline half tm_simd_fsum(half x) {
  return simd_all(as_type<ushort>(x) == ushort(0x8000u)) ? half(-0.0f) : simd_sum(x);
}
// ---- body ----
  const uint tm_lid = thread_index_in_threadgroup;
  threadgroup float4 tm_arena[32];
  threadgroup float* const tm_s10_red_f32 = (threadgroup float*)((threadgroup uchar*)tm_arena + 0);
  threadgroup float* const tm_s14_red_f32 = (threadgroup float*)((threadgroup uchar*)tm_arena + 0);
  const int pid0_ = int(threadgroup_position_in_grid.x);
  int arange[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2) | ((tm_i >> 2) << 9);
    arange[tm_i] = int(tm_l);
  }
  bool lt[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    lt[tm_i] = (arange[tm_i] < n_cols);
  }
  const int mul = int(uint(pid0_) * uint(row_stride));
  const int in_off = int(mul);
  int in_off_1[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    in_off_1[tm_i] = int(uint(in_off) + uint(arange[tm_i]));
  }
  float in[8];
  for (uint tm_c = 0; tm_c < 2u; ++tm_c) {
    const uint tm_i = tm_c * 4u;
    if (lt[tm_i + 0u] && lt[tm_i + 1u] && lt[tm_i + 2u] && lt[tm_i + 3u]) {
      const packed_float4 tm_v = tm_vload(in_ptr + in_off_1[tm_i]);
      for (uint tm_e = 0; tm_e < 4u; ++tm_e) in[tm_i + tm_e] = tm_v[tm_e];
    } else {
      for (uint tm_e = 0; tm_e < 4u; ++tm_e) in[tm_i + tm_e] = (lt[tm_i + tm_e]) ? in_ptr[in_off_1[tm_i + tm_e]] : -INFINITY;
    }
  }
  float part[1];
  for (uint tm_j = 0; tm_j < 1u; ++tm_j) {
    const uint tm_i0 = 0u;
    part[tm_j] = in[tm_i0];
    for (uint tm_r = 1; tm_r < 8u; ++tm_r) {
      const uint tm_i = tm_i0 | (tm_r & 7u);
      part[tm_j] = tm_fmax(part[tm_j], in[tm_i]);
    }
  }
  for (uint tm_j = 0; tm_j < 1u; ++tm_j) {
    const float tm_o0 = simd_shuffle_xor(part[tm_j], 1u);
    part[tm_j] = tm_fmax(part[tm_j], tm_o0);
    const float tm_o1 = simd_shuffle_xor(part[tm_j], 2u);
    part[tm_j] = tm_fmax(part[tm_j], tm_o1);
    const float tm_o2 = simd_shuffle_xor(part[tm_j], 4u);
    part[tm_j] = tm_fmax(part[tm_j], tm_o2);
    const float tm_o3 = simd_shuffle_xor(part[tm_j], 8u);
    part[tm_j] = tm_fmax(part[tm_j], tm_o3);
    const float tm_o4 = simd_shuffle_xor(part[tm_j], 16u);
    part[tm_j] = tm_fmax(part[tm_j], tm_o4);
  }
  for (uint tm_j = 0; tm_j < 1u; ++tm_j) {
    tm_s10_red_f32[tm_j * 128u + tm_lid] = part[tm_j];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint tm_j = 0; tm_j < 1u; ++tm_j) {
    const uint tm_base = tm_j * 128u + (tm_lid & ~96u);
    part[tm_j] = tm_s10_red_f32[tm_base];
    for (uint tm_w = 1; tm_w < 4u; ++tm_w) {
      const uint tm_at = tm_base | ((tm_w & 3u) << 5);
      part[tm_j] = tm_fmax(part[tm_j], tm_s10_red_f32[tm_at]);
    }
  }
  const float max_1 = part[0];
  float sub[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    sub[tm_i] = (in[tm_i] - max_1);
  }
  float exp_1[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    exp_1[tm_i] = exp(sub[tm_i]);
  }
  float part_1[1];
  for (uint tm_j = 0; tm_j < 1u; ++tm_j) {
    const uint tm_i0 = 0u;
    part_1[tm_j] = exp_1[tm_i0];
    for (uint tm_r = 1; tm_r < 8u; ++tm_r) {
      const uint tm_i = tm_i0 | (tm_r & 7u);
      part_1[tm_j] = (part_1[tm_j] + exp_1[tm_i]);
    }
  }
  for (uint tm_j = 0; tm_j < 1u; ++tm_j) {
    part_1[tm_j] = tm_simd_fsum(part_1[tm_j]);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint tm_j = 0; tm_j < 1u; ++tm_j) {
    tm_s14_red_f32[tm_j * 128u + tm_lid] = part_1[tm_j];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint tm_j = 0; tm_j < 1u; ++tm_j) {
    const uint tm_base = tm_j * 128u + (tm_lid & ~96u);
    part_1[tm_j] = tm_s14_red_f32[tm_base];
    for (uint tm_w = 1; tm_w < 4u; ++tm_w) {
      const uint tm_at = tm_base | ((tm_w & 3u) << 5);
      part_1[tm_j] = (part_1[tm_j] + tm_s14_red_f32[tm_at]);
    }
  }
  const float sum = part_1[0];
  const int mul_1 = int(uint(pid0_) * uint(row_stride));
  const int out_off = int(mul_1);
  int out_off_1[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    out_off_1[tm_i] = int(uint(out_off) + uint(arange[tm_i]));
  }
  float div[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    div[tm_i] = (exp_1[tm_i] / sum);
  }
  for (uint tm_c = 0; tm_c < 2u; ++tm_c) {
    const uint tm_i = tm_c * 4u;
    if (lt[tm_i + 0u] && lt[tm_i + 1u] && lt[tm_i + 2u] && lt[tm_i + 3u]) {
      packed_float4 tm_v;
      for (uint tm_e = 0; tm_e < 4u; ++tm_e) tm_v[tm_e] = div[tm_i + tm_e];
      *((device packed_float4*)(out_ptr + out_off_1[tm_i])) = tm_v;
    } else {
      for (uint tm_e = 0; tm_e < 4u; ++tm_e) if (lt[tm_i + tm_e]) out_ptr[out_off_1[tm_i + tm_e]] = div[tm_i + tm_e];
    }
  }
