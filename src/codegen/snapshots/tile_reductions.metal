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
// ---- body ----
  const uint tm_lid = thread_index_in_threadgroup;
  threadgroup float4 tm_arena[128];
  threadgroup float* const tm_s29_red_f32 = (threadgroup float*)((threadgroup uchar*)tm_arena + 0);
  threadgroup float* const tm_s40_red_f32 = (threadgroup float*)((threadgroup uchar*)tm_arena + 0);
  threadgroup int* const tm_s46_red_i32 = (threadgroup int*)((threadgroup uchar*)tm_arena + 0);
  const int pid0_ = int(threadgroup_position_in_grid.x);
  const int mul = int(uint(pid0_) * uint(16));
  int arange[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
    arange[tm_i] = int(tm_l);
  }
  int add[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    add[tm_i] = int(uint(mul) + uint(arange[tm_i]));
  }
  int arange_1[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
    arange_1[tm_i] = int(tm_l);
  }
  bool lt[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    lt[tm_i] = (add[tm_i] < M);
  }
  bool lt_1[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    lt_1[tm_i] = (arange_1[tm_i] < N);
  }
  bool bcast[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2) | ((tm_i >> 2) << 9);
    bcast[tm_i] = (int(uint(mul) + uint((int((((tm_l >> 6) & 15u)))))) < M);
  }
  bool bcast_1[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2) | ((tm_i >> 2) << 9);
    bcast_1[tm_i] = ((int(((tm_l & 63u)))) < N);
  }
  bool and_1[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    and_1[tm_i] = bool((bcast[tm_i] & bcast_1[tm_i]));
  }
  int mul_1[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    mul_1[tm_i] = int(uint(add[tm_i]) * uint(N));
  }
  int x_off[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    x_off[tm_i] = int(mul_1[tm_i]);
  }
  int bcast_2[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2) | ((tm_i >> 2) << 9);
    bcast_2[tm_i] = int(int(uint(int(uint(mul) + uint((int((((tm_l >> 6) & 15u))))))) * uint(N)));
  }
  int bcast_3[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2) | ((tm_i >> 2) << 9);
    bcast_3[tm_i] = (int(((tm_l & 63u))));
  }
  int x_off_1[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    x_off_1[tm_i] = int(uint(bcast_2[tm_i]) + uint(bcast_3[tm_i]));
  }
  float x[8];
  for (uint tm_c = 0; tm_c < 2u; ++tm_c) {
    const uint tm_i = tm_c * 4u;
    if (and_1[tm_i + 0u] && and_1[tm_i + 1u] && and_1[tm_i + 2u] && and_1[tm_i + 3u]) {
      const packed_float4 tm_v = tm_vload(x_ptr + x_off_1[tm_i]);
      for (uint tm_e = 0; tm_e < 4u; ++tm_e) x[tm_i + tm_e] = tm_v[tm_e];
    } else {
      for (uint tm_e = 0; tm_e < 4u; ++tm_e) x[tm_i + tm_e] = (and_1[tm_i + tm_e]) ? x_ptr[x_off_1[tm_i + tm_e]] : 0.0f;
    }
  }
  int row_sum_off[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    row_sum_off[tm_i] = int(add[tm_i]);
  }
  float part[2];
  for (uint tm_j = 0; tm_j < 2u; ++tm_j) {
    const uint tm_i0 = ((tm_j & 1u) << 2);
    part[tm_j] = x[tm_i0];
    for (uint tm_r = 1; tm_r < 4u; ++tm_r) {
      const uint tm_i = tm_i0 | (tm_r & 3u);
      part[tm_j] = (part[tm_j] + x[tm_i]);
    }
  }
  for (uint tm_j = 0; tm_j < 2u; ++tm_j) {
    const float tm_o0 = simd_shuffle_xor(part[tm_j], 1u);
    part[tm_j] = (part[tm_j] + tm_o0);
    const float tm_o1 = simd_shuffle_xor(part[tm_j], 2u);
    part[tm_j] = (part[tm_j] + tm_o1);
    const float tm_o2 = simd_shuffle_xor(part[tm_j], 4u);
    part[tm_j] = (part[tm_j] + tm_o2);
    const float tm_o3 = simd_shuffle_xor(part[tm_j], 8u);
    part[tm_j] = (part[tm_j] + tm_o3);
  }
  for (uint tm_j = 0; tm_j < 2u; ++tm_j) {
    const uint tm_i0 = ((tm_j & 1u) << 2);
    const uint tm_l = (tm_i0 & 3u) | (tm_lid << 2) | ((tm_i0 >> 2) << 9);
    if ((tm_lid & 15u) == 0) tm_s29_red_f32[((tm_l >> 6) & 15u)] = part[tm_j];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float sum[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
    sum[tm_i] = tm_l < 16u ? tm_s29_red_f32[tm_l] : float(0);
  }
  bool lt_2[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    lt_2[tm_i] = (add[tm_i] < M);
  }
  for (uint tm_c = 0; tm_c < 1u; ++tm_c) {
    const uint tm_i = tm_c * 4u;
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
    if (tm_l < 16u && lt_2[tm_i + 0u] && lt_2[tm_i + 1u] && lt_2[tm_i + 2u] && lt_2[tm_i + 3u]) {
      packed_float4 tm_v;
      for (uint tm_e = 0; tm_e < 4u; ++tm_e) tm_v[tm_e] = sum[tm_i + tm_e];
      *((device packed_float4*)(row_sum + row_sum_off[tm_i])) = tm_v;
    } else {
      for (uint tm_e = 0; tm_e < 4u; ++tm_e) if (tm_l < 16u && lt_2[tm_i + tm_e]) row_sum[row_sum_off[tm_i + tm_e]] = sum[tm_i + tm_e];
    }
  }
  float select[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    select[tm_i] = (and_1[tm_i] ? x[tm_i] : -INFINITY);
  }
  const int mul_2 = int(uint(pid0_) * uint(64));
  const int col_max_off = int(mul_2);
  int col_max_off_1[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    col_max_off_1[tm_i] = int(uint(col_max_off) + uint(arange_1[tm_i]));
  }
  float part_1[4];
  for (uint tm_j = 0; tm_j < 4u; ++tm_j) {
    const uint tm_i0 = (tm_j & 3u);
    part_1[tm_j] = select[tm_i0];
    for (uint tm_r = 1; tm_r < 2u; ++tm_r) {
      const uint tm_i = tm_i0 | ((tm_r & 1u) << 2);
      part_1[tm_j] = tm_fmax(part_1[tm_j], select[tm_i]);
    }
  }
  for (uint tm_j = 0; tm_j < 4u; ++tm_j) {
    const float tm_o4 = simd_shuffle_xor(part_1[tm_j], 16u);
    part_1[tm_j] = tm_fmax(part_1[tm_j], tm_o4);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint tm_j = 0; tm_j < 4u; ++tm_j) {
    tm_s40_red_f32[tm_j * 128u + tm_lid] = part_1[tm_j];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint tm_j = 0; tm_j < 4u; ++tm_j) {
    const uint tm_base = tm_j * 128u + (tm_lid & ~96u);
    part_1[tm_j] = tm_s40_red_f32[tm_base];
    for (uint tm_w = 1; tm_w < 4u; ++tm_w) {
      const uint tm_at = tm_base | ((tm_w & 3u) << 5);
      part_1[tm_j] = tm_fmax(part_1[tm_j], tm_s40_red_f32[tm_at]);
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint tm_j = 0; tm_j < 4u; ++tm_j) {
    const uint tm_i0 = (tm_j & 3u);
    const uint tm_l = (tm_i0 & 3u) | (tm_lid << 2) | ((tm_i0 >> 2) << 9);
    if ((tm_lid & 112u) == 0) tm_s40_red_f32[(tm_l & 63u)] = part_1[tm_j];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float max_1[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
    max_1[tm_i] = tm_l < 64u ? tm_s40_red_f32[tm_l] : float(0);
  }
  bool lt_3[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    lt_3[tm_i] = (arange_1[tm_i] < N);
  }
  for (uint tm_c = 0; tm_c < 1u; ++tm_c) {
    const uint tm_i = tm_c * 4u;
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
    if (tm_l < 64u && lt_3[tm_i + 0u] && lt_3[tm_i + 1u] && lt_3[tm_i + 2u] && lt_3[tm_i + 3u]) {
      packed_float4 tm_v;
      for (uint tm_e = 0; tm_e < 4u; ++tm_e) tm_v[tm_e] = max_1[tm_i + tm_e];
      *((device packed_float4*)(col_max + col_max_off_1[tm_i])) = tm_v;
    } else {
      for (uint tm_e = 0; tm_e < 4u; ++tm_e) if (tm_l < 64u && lt_3[tm_i + tm_e]) col_max[col_max_off_1[tm_i + tm_e]] = max_1[tm_i + tm_e];
    }
  }
  int row_argmax_off[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    row_argmax_off[tm_i] = int(add[tm_i]);
  }
  float part_2[2];
  int part_idx_2[2];
  for (uint tm_j = 0; tm_j < 2u; ++tm_j) {
    const uint tm_i0 = ((tm_j & 1u) << 2);
    part_2[tm_j] = select[tm_i0];
    part_idx_2[tm_j] = int((((tm_i0 & 3u) | (tm_lid << 2) | ((tm_i0 >> 2) << 9)) >> 0) & 63u);
    for (uint tm_r = 1; tm_r < 4u; ++tm_r) {
      const uint tm_i = tm_i0 | (tm_r & 3u);
      if (tm_isnan_f(float(part_2[tm_j])) ? (!tm_isnan_f(float(select[tm_i])) || int((((tm_i & 3u) | (tm_lid << 2) | ((tm_i >> 2) << 9)) >> 0) & 63u) < part_idx_2[tm_j]) : (!tm_isnan_f(float(select[tm_i])) && (select[tm_i] > part_2[tm_j] || (select[tm_i] == part_2[tm_j] && int((((tm_i & 3u) | (tm_lid << 2) | ((tm_i >> 2) << 9)) >> 0) & 63u) < part_idx_2[tm_j])))) { part_2[tm_j] = select[tm_i]; part_idx_2[tm_j] = int((((tm_i & 3u) | (tm_lid << 2) | ((tm_i >> 2) << 9)) >> 0) & 63u); }
    }
  }
  for (uint tm_j = 0; tm_j < 2u; ++tm_j) {
    const float tm_o0 = simd_shuffle_xor(part_2[tm_j], 1u);
    const int tm_oi0 = simd_shuffle_xor(part_idx_2[tm_j], 1u);
    if (tm_isnan_f(float(part_2[tm_j])) ? (!tm_isnan_f(float(tm_o0)) || tm_oi0 < part_idx_2[tm_j]) : (!tm_isnan_f(float(tm_o0)) && (tm_o0 > part_2[tm_j] || (tm_o0 == part_2[tm_j] && tm_oi0 < part_idx_2[tm_j])))) { part_2[tm_j] = tm_o0; part_idx_2[tm_j] = tm_oi0; }
    const float tm_o1 = simd_shuffle_xor(part_2[tm_j], 2u);
    const int tm_oi1 = simd_shuffle_xor(part_idx_2[tm_j], 2u);
    if (tm_isnan_f(float(part_2[tm_j])) ? (!tm_isnan_f(float(tm_o1)) || tm_oi1 < part_idx_2[tm_j]) : (!tm_isnan_f(float(tm_o1)) && (tm_o1 > part_2[tm_j] || (tm_o1 == part_2[tm_j] && tm_oi1 < part_idx_2[tm_j])))) { part_2[tm_j] = tm_o1; part_idx_2[tm_j] = tm_oi1; }
    const float tm_o2 = simd_shuffle_xor(part_2[tm_j], 4u);
    const int tm_oi2 = simd_shuffle_xor(part_idx_2[tm_j], 4u);
    if (tm_isnan_f(float(part_2[tm_j])) ? (!tm_isnan_f(float(tm_o2)) || tm_oi2 < part_idx_2[tm_j]) : (!tm_isnan_f(float(tm_o2)) && (tm_o2 > part_2[tm_j] || (tm_o2 == part_2[tm_j] && tm_oi2 < part_idx_2[tm_j])))) { part_2[tm_j] = tm_o2; part_idx_2[tm_j] = tm_oi2; }
    const float tm_o3 = simd_shuffle_xor(part_2[tm_j], 8u);
    const int tm_oi3 = simd_shuffle_xor(part_idx_2[tm_j], 8u);
    if (tm_isnan_f(float(part_2[tm_j])) ? (!tm_isnan_f(float(tm_o3)) || tm_oi3 < part_idx_2[tm_j]) : (!tm_isnan_f(float(tm_o3)) && (tm_o3 > part_2[tm_j] || (tm_o3 == part_2[tm_j] && tm_oi3 < part_idx_2[tm_j])))) { part_2[tm_j] = tm_o3; part_idx_2[tm_j] = tm_oi3; }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint tm_j = 0; tm_j < 2u; ++tm_j) {
    const uint tm_i0 = ((tm_j & 1u) << 2);
    const uint tm_l = (tm_i0 & 3u) | (tm_lid << 2) | ((tm_i0 >> 2) << 9);
    if ((tm_lid & 15u) == 0) tm_s46_red_i32[((tm_l >> 6) & 15u)] = part_idx_2[tm_j];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  int argmax[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
    argmax[tm_i] = tm_l < 16u ? tm_s46_red_i32[tm_l] : int(0);
  }
  bool lt_4[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    lt_4[tm_i] = (add[tm_i] < M);
  }
  for (uint tm_c = 0; tm_c < 1u; ++tm_c) {
    const uint tm_i = tm_c * 4u;
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
    if (tm_l < 16u && lt_4[tm_i + 0u] && lt_4[tm_i + 1u] && lt_4[tm_i + 2u] && lt_4[tm_i + 3u]) {
      packed_int4 tm_v;
      for (uint tm_e = 0; tm_e < 4u; ++tm_e) tm_v[tm_e] = argmax[tm_i + tm_e];
      *((device packed_int4*)(row_argmax + row_argmax_off[tm_i])) = tm_v;
    } else {
      for (uint tm_e = 0; tm_e < 4u; ++tm_e) if (tm_l < 16u && lt_4[tm_i + tm_e]) row_argmax[row_argmax_off[tm_i + tm_e]] = argmax[tm_i + tm_e];
    }
  }
