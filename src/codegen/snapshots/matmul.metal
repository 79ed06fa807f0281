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
  threadgroup float4 tm_arena[304];
  threadgroup float* const tm_s16_accout_f32 = (threadgroup float*)((threadgroup uchar*)tm_arena + 0);
  threadgroup float* const tm_s59_opnd_f32 = (threadgroup float*)((threadgroup uchar*)tm_arena + 0);
  const int pid0_ = int(threadgroup_position_in_grid.x);
  const int mul = int(uint(pid0_) * uint(32));
  int arange[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
    arange[tm_i] = int(tm_l);
  }
  int add[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    add[tm_i] = int(uint(mul) + uint(arange[tm_i]));
  }
  const int pid1_ = int(threadgroup_position_in_grid.y);
  const int mul_1 = int(uint(pid1_) * uint(32));
  int arange_1[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
    arange_1[tm_i] = int(tm_l);
  }
  int add_1[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    add_1[tm_i] = int(uint(mul_1) + uint(arange_1[tm_i]));
  }
  int arange_2[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
    arange_2[tm_i] = int(tm_l);
  }
  simdgroup_matrix<float, 8, 8> frag_c[4];
  for (uint tm_q = 0; tm_q < 4u; ++tm_q) {
    const uint tm_tm = ((tm_lid / 32u) / 2u * 2u + tm_q / 2u) * 8u;
    const uint tm_tn = ((tm_lid / 32u) % 2u * 2u + tm_q % 2u) * 8u;
    frag_c[tm_q] = make_filled_simdgroup_matrix<float, 8, 8>(float(0.0f));
  }
  const uint trips = (16) > 0 ? ((0) < (K) ? (uint(K) - uint(0) - 1u) / uint(16) + 1u : uint(0)) : (16) < 0 ? ((0) > (K) ? (uint(0) - uint(K) - 1u) / (uint(0) - uint(16)) + 1u : uint(0)) : uint(0);
  const int lo = 0;
  const int step = 16;
  for (uint t = 0u; t < trips; ++t) {
    const int iv = int(uint(lo) + t * uint(step));
    int add_2[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      add_2[tm_i] = int(uint(arange_2[tm_i]) + uint(iv));
    }
    bool lt[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      lt[tm_i] = (add[tm_i] < M);
    }
    bool lt_1[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      lt_1[tm_i] = (add_2[tm_i] < K);
    }
    bool bcast[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
      bcast[tm_i] = (int(uint(mul) + uint((int((((tm_l >> 4) & 31u)))))) < M);
    }
    bool bcast_1[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
      bcast_1[tm_i] = (int(uint((int(((tm_l & 15u))))) + uint(iv)) < K);
    }
    bool and_1[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      and_1[tm_i] = bool((bcast[tm_i] & bcast_1[tm_i]));
    }
    int mul_2[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      mul_2[tm_i] = int(uint(add[tm_i]) * uint(K));
    }
    int a_off[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      a_off[tm_i] = int(mul_2[tm_i]);
    }
    int bcast_2[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
      bcast_2[tm_i] = int(int(uint(int(uint(mul) + uint((int((((tm_l >> 4) & 31u))))))) * uint(K)));
    }
    int bcast_3[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
      bcast_3[tm_i] = int(uint((int(((tm_l & 15u))))) + uint(iv));
    }
    int a_off_1[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      a_off_1[tm_i] = int(uint(bcast_2[tm_i]) + uint(bcast_3[tm_i]));
    }
    float a[4];
    for (uint tm_c = 0; tm_c < 1u; ++tm_c) {
      const uint tm_i = tm_c * 4u;
      if (and_1[tm_i + 0u] && and_1[tm_i + 1u] && and_1[tm_i + 2u] && and_1[tm_i + 3u]) {
        const packed_float4 tm_v = tm_vload(a_ptr + a_off_1[tm_i]);
        for (uint tm_e = 0; tm_e < 4u; ++tm_e) a[tm_i + tm_e] = tm_v[tm_e];
      } else {
        for (uint tm_e = 0; tm_e < 4u; ++tm_e) a[tm_i + tm_e] = (and_1[tm_i + tm_e]) ? a_ptr[a_off_1[tm_i + tm_e]] : 0.0f;
      }
    }
    bool lt_2[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      lt_2[tm_i] = (add_2[tm_i] < K);
    }
    bool lt_3[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      lt_3[tm_i] = (add_1[tm_i] < N);
    }
    bool bcast_4[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
      bcast_4[tm_i] = (int(uint((int((((tm_l >> 5) & 15u))))) + uint(iv)) < K);
    }
    bool bcast_5[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
      bcast_5[tm_i] = (int(uint(mul_1) + uint((int(((tm_l & 31u)))))) < N);
    }
    bool and_2[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      and_2[tm_i] = bool((bcast_4[tm_i] & bcast_5[tm_i]));
    }
    int mul_3[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      mul_3[tm_i] = int(uint(add_2[tm_i]) * uint(N));
    }
    int b_off[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      b_off[tm_i] = int(mul_3[tm_i]);
    }
    int bcast_6[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
      bcast_6[tm_i] = int(int(uint(int(uint((int((((tm_l >> 5) & 15u))))) + uint(iv))) * uint(N)));
    }
    int bcast_7[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
      bcast_7[tm_i] = int(uint(mul_1) + uint((int(((tm_l & 31u))))));
    }
    int b_off_1[4];
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      b_off_1[tm_i] = int(uint(bcast_6[tm_i]) + uint(bcast_7[tm_i]));
    }
    float b[4];
    for (uint tm_c = 0; tm_c < 1u; ++tm_c) {
      const uint tm_i = tm_c * 4u;
      if (and_2[tm_i + 0u] && and_2[tm_i + 1u] && and_2[tm_i + 2u] && and_2[tm_i + 3u]) {
        const packed_float4 tm_v = tm_vload(b_ptr + b_off_1[tm_i]);
        for (uint tm_e = 0; tm_e < 4u; ++tm_e) b[tm_i + tm_e] = tm_v[tm_e];
      } else {
        for (uint tm_e = 0; tm_e < 4u; ++tm_e) b[tm_i + tm_e] = (and_2[tm_i + tm_e]) ? b_ptr[b_off_1[tm_i + tm_e]] : 0.0f;
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
      tm_s59_opnd_f32[(tm_l / 16u) * 20u + tm_l % 16u] = a[tm_i];
    }
    for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
      const uint tm_l = (tm_i & 3u) | (tm_lid << 2);
      tm_s59_opnd_f32[640u + (tm_l / 32u) * 36u + tm_l % 32u] = b[tm_i];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    {
      simdgroup_matrix<float, 8, 8> tm_fa[2];
      simdgroup_matrix<float, 8, 8> tm_fb[2];
      const uint tm_r0 = (tm_lid / 32u) / 2u * 16u;
      const uint tm_c0 = (tm_lid / 32u) % 2u * 16u;
      for (uint tm_kk = 0; tm_kk < 16u; tm_kk += 8u) {
        for (uint tm_x = 0; tm_x < 2u; ++tm_x) {
          simdgroup_load(tm_fa[tm_x], tm_s59_opnd_f32 + (tm_r0 + tm_x * 8u) * 20u + tm_kk, 20);
        }
        for (uint tm_y = 0; tm_y < 2u; ++tm_y) {
          simdgroup_load(tm_fb[tm_y], tm_s59_opnd_f32 + 640u + tm_kk * 36u + tm_c0 + tm_y * 8u, 36);
        }
        for (uint tm_x = 0; tm_x < 2u; ++tm_x) {
          for (uint tm_y = 0; tm_y < 2u; ++tm_y) {
            simdgroup_multiply_accumulate(frag_c[tm_x * 2u + tm_y], tm_fa[tm_x], tm_fb[tm_y], frag_c[tm_x * 2u + tm_y]);
          }
        }
      }
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint tm_q = 0; tm_q < 4u; ++tm_q) {
    const uint tm_tm = ((tm_lid / 32u) / 2u * 2u + tm_q / 2u) * 8u;
    const uint tm_tn = ((tm_lid / 32u) % 2u * 2u + tm_q % 2u) * 8u;
    simdgroup_store(frag_c[tm_q], tm_s16_accout_f32 + tm_tm * 32u + tm_tn, 32);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float dot[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2) | ((tm_i >> 2) << 9);
    dot[tm_i] = float(tm_s16_accout_f32[tm_l]);
  }
  bool lt_4[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    lt_4[tm_i] = (add[tm_i] < M);
  }
  bool lt_5[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    lt_5[tm_i] = (add_1[tm_i] < N);
  }
  bool bcast_8[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2) | ((tm_i >> 2) << 9);
    bcast_8[tm_i] = (int(uint(mul) + uint((int((((tm_l >> 5) & 31u)))))) < M);
  }
  bool bcast_9[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2) | ((tm_i >> 2) << 9);
    bcast_9[tm_i] = (int(uint(mul_1) + uint((int(((tm_l & 31u)))))) < N);
  }
  bool and_3[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    and_3[tm_i] = bool((bcast_8[tm_i] & bcast_9[tm_i]));
  }
  int mul_4[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    mul_4[tm_i] = int(uint(add[tm_i]) * uint(N));
  }
  int c_off[4];
  for (uint tm_i = 0; tm_i < 4u; ++tm_i) {
    c_off[tm_i] = int(mul_4[tm_i]);
  }
  int bcast_10[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2) | ((tm_i >> 2) << 9);
    bcast_10[tm_i] = int(int(uint(int(uint(mul) + uint((int((((tm_l >> 5) & 31u))))))) * uint(N)));
  }
  int bcast_11[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2) | ((tm_i >> 2) << 9);
    bcast_11[tm_i] = int(uint(mul_1) + uint((int(((tm_l & 31u))))));
  }
  int c_off_1[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    c_off_1[tm_i] = int(uint(bcast_10[tm_i]) + uint(bcast_11[tm_i]));
  }
  for (uint tm_c = 0; tm_c < 2u; ++tm_c) {
    const uint tm_i = tm_c * 4u;
    if (and_3[tm_i + 0u] && and_3[tm_i + 1u] && and_3[tm_i + 2u] && and_3[tm_i + 3u]) {
      packed_float4 tm_v;
      for (uint tm_e = 0; tm_e < 4u; ++tm_e) tm_v[tm_e] = dot[tm_i + tm_e];
      *((device packed_float4*)(c_ptr + c_off_1[tm_i])) = tm_v;
    } else {
      for (uint tm_e = 0; tm_e < 4u; ++tm_e) if (and_3[tm_i + tm_e]) c_ptr[c_off_1[tm_i + tm_e]] = dot[tm_i + tm_e];
    }
  }
