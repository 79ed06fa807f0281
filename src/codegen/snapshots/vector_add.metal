#include <metal_stdlib>
using namespace metal;

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
  const int pid0_ = int(threadgroup_position_in_grid.x);
  const int mul = int(uint(pid0_) * uint(1024));
  int arange[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2) | ((tm_i >> 2) << 9);
    arange[tm_i] = int(tm_l);
  }
  int add[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    add[tm_i] = int(uint(mul) + uint(arange[tm_i]));
  }
  bool lt[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    lt[tm_i] = (add[tm_i] < n_elements);
  }
  int x_off[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    x_off[tm_i] = int(add[tm_i]);
  }
  float x[8];
  for (uint tm_c = 0; tm_c < 2u; ++tm_c) {
    const uint tm_i = tm_c * 4u;
    if (lt[tm_i + 0u] && lt[tm_i + 1u] && lt[tm_i + 2u] && lt[tm_i + 3u]) {
      const packed_float4 tm_v = tm_vload(x_ptr + x_off[tm_i]);
      for (uint tm_e = 0; tm_e < 4u; ++tm_e) x[tm_i + tm_e] = tm_v[tm_e];
    } else {
      for (uint tm_e = 0; tm_e < 4u; ++tm_e) x[tm_i + tm_e] = (lt[tm_i + tm_e]) ? x_ptr[x_off[tm_i + tm_e]] : float(0);
    }
  }
  int y_off[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    y_off[tm_i] = int(add[tm_i]);
  }
  float y[8];
  for (uint tm_c = 0; tm_c < 2u; ++tm_c) {
    const uint tm_i = tm_c * 4u;
    if (lt[tm_i + 0u] && lt[tm_i + 1u] && lt[tm_i + 2u] && lt[tm_i + 3u]) {
      const packed_float4 tm_v = tm_vload(y_ptr + y_off[tm_i]);
      for (uint tm_e = 0; tm_e < 4u; ++tm_e) y[tm_i + tm_e] = tm_v[tm_e];
    } else {
      for (uint tm_e = 0; tm_e < 4u; ++tm_e) y[tm_i + tm_e] = (lt[tm_i + tm_e]) ? y_ptr[y_off[tm_i + tm_e]] : float(0);
    }
  }
  int out_off[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    out_off[tm_i] = int(add[tm_i]);
  }
  float add_1[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    add_1[tm_i] = (x[tm_i] + y[tm_i]);
  }
  for (uint tm_c = 0; tm_c < 2u; ++tm_c) {
    const uint tm_i = tm_c * 4u;
    if (lt[tm_i + 0u] && lt[tm_i + 1u] && lt[tm_i + 2u] && lt[tm_i + 3u]) {
      packed_float4 tm_v;
      for (uint tm_e = 0; tm_e < 4u; ++tm_e) tm_v[tm_e] = add_1[tm_i + tm_e];
      *((device packed_float4*)(out_ptr + out_off[tm_i])) = tm_v;
    } else {
      for (uint tm_e = 0; tm_e < 4u; ++tm_e) if (lt[tm_i + tm_e]) out_ptr[out_off[tm_i + tm_e]] = add_1[tm_i + tm_e];
    }
  }
