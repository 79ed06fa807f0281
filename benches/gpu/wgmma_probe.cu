// A hand-written wgmma matmul probe: see benches/gpu/wgmma_probe.py for what it measures.
#include <cuda_fp16.h>
typedef unsigned int uint;
typedef unsigned long long u64;

__device__ inline u64 tm_wg_desc(uint addr, uint lbo, uint sbo) {
  u64 d = 0;
  d |= (u64)((addr & 0x3FFFFu) >> 4);
  d |= (u64)((lbo & 0x3FFFFu) >> 4) << 16;
  d |= (u64)((sbo & 0x3FFFFu) >> 4) << 32;
  d |= (u64)1 << 62;
  return d;
}

#define WG_ARGS(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

__device__ inline void tm_wgmma_128(float* d, u64 da, u64 db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, 1, 1, 1, 0, 1;"
      : WG_ARGS(d)
      : "l"(da), "l"(db));
}

template <int S, int WAIT1, int SWAPB>
__device__ void mm_body(const __half* a, const __half* b, const int* Mp, const int* Np, const int* Kp,
                        const int* sam, const int* sak, const int* sbk, const int* sbn, const int* scm,
                        const int* scn, __half* c) {
  extern __shared__ __align__(16) unsigned char ring[];
  const int M = *Mp, N = *Np, K = *Kp;
  const int lda = *sam, ldb = *sbk, ldc = *scm;
  const uint tid = threadIdx.x;
  const int pid = blockIdx.x;
  const int npm = (M + 127) / 128, npn = (N + 127) / 128;
  const int gsz = 8 * npn;
  const int gid = pid / gsz;
  const int first = gid * 8;
  const int gm = min(npm - first, 8);
  const int pm = first + (pid % gsz) % gm;
  const int pn = (pid % gsz) / gm;
  const int m0 = pm * 128, n0 = pn * 128;
  const uint raw = (uint)__cvta_generic_to_shared(ring);
  const uint base = (raw + 1023u) & ~1023u;
  const int T = (K + 63) / 64;
  auto load = [&](int t, int slot) {
    const uint sA = base + slot * 32768u;
    const uint sB = sA + 16384u;
    const int k0 = t * 64;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint q = tid + 256u * i;
      const uint r = q >> 3, ch = q & 7u;
      const __half* src = a + (size_t)(m0 + r) * lda + k0 + ch * 8;
      const uint dst = sA + r * 128u + ((ch ^ (r & 7u)) << 4);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint q = tid + 256u * i;
      const uint k = q >> 4, cc = q & 15u;
      const uint nb = cc >> 3, ch = cc & 7u;
      const __half* src = b + (size_t)(k0 + k) * ldb + n0 + cc * 8;
      const uint dst = sB + nb * 8192u + k * 128u + ((ch ^ (k & 7u)) << 4);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
    }
  };
  float d[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) d[i] = 0.f;
  const uint wg = tid >> 7;
  const int AHEAD = WAIT1 ? S - 2 : S - 1;
  for (int s = 0; s < AHEAD; ++s) {
    if (s < T) load(s, s);
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  for (int t = 0; t < T; ++t) {
    asm volatile("cp.async.wait_group %0;" ::"n"(AHEAD - 1) : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (t + AHEAD < T) load(t + AHEAD, (t + AHEAD) % S);
    asm volatile("cp.async.commit_group;" ::: "memory");
    const uint sA = base + (t % S) * 32768u + wg * 8192u;
    const uint sB = base + (t % S) * 32768u + 16384u;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const u64 da = tm_wg_desc(sA + kk * 32u, 16u, 1024u);
      const u64 db = SWAPB ? tm_wg_desc(sB + kk * 2048u, 1024u, 8192u) : tm_wg_desc(sB + kk * 2048u, 8192u, 1024u);
      tm_wgmma_128(d, da, db);
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    if (WAIT1) asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
    else asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  const uint w = (tid >> 5) & 3u, l = tid & 31u;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + wg * 64 + w * 16 + (l >> 2) + 8 * h;
      const int col = n0 + 8 * j + 2 * (l & 3u);
      *reinterpret_cast<__half2*>(c + (size_t)row * ldc + col) = __floats2half2_rn(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
    }
  }
}

#define ENTRY(name, S, W, SW) \
  extern "C" __global__ void __launch_bounds__(256) name(const __half* a, const __half* b, const int* M, const int* N, const int* K, \
      const int* sam, const int* sak, const int* sbk, const int* sbn, const int* scm, const int* scn, __half* c) { \
    mm_body<S, W, SW>(a, b, M, N, K, sam, sak, sbk, sbn, scm, scn, c); }
ENTRY(mm_s4_w0_b0, 4, 0, 0)
ENTRY(mm_s4_w0_b1, 4, 0, 1)
ENTRY(mm_s4_w1_b0, 4, 1, 0)
ENTRY(mm_s4_w1_b1, 4, 1, 1)
ENTRY(mm_s3_w0_b0, 3, 0, 0)
ENTRY(mm_s3_w0_b1, 3, 0, 1)
ENTRY(mm_s5_w1_b0, 5, 1, 0)
ENTRY(mm_s5_w1_b1, 5, 1, 1)
