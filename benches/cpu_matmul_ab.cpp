// Alternating A/B of compiled CPU matmul kernels (the shared objects the compiled CPU
// executor caches for examples/matmul.rs's kernel at 1024³ f32, 64×64×64 tiles, group 8,
// or other tiles: `PATH:PROGRAMS` gives an object's program count, 256 by default):
// each round runs every object once over all its programs on this one thread, timed with
// the process's CPU time, and checks every output element bit for bit against a reference
// that sums `fma` in k order, as the kernel does. Prints each object's minimum and median.
//
//   TRITON_METAL_EMU_KEEP=1 TRITON_METAL_EMU_CACHE=/tmp/mm <launch the kernel once>
//   clang++ -O2 -march=native benches/cpu_matmul_ab.cpp -o /tmp/ab -ldl
//   ROUNDS=15 /tmp/ab /tmp/mm_before/*.so /tmp/mm/*.so
//
// The `.cpp` kept beside each object can be edited and rebuilt with the executor's flags
// (src/native/mod.rs) to time a variant; NOCHECK=1 skips the check for variants that
// compute something else on purpose.
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

typedef void (*RunFn)(void* const*, const int64_t*, const int64_t*, int64_t, int64_t, void*);
// The executor's `tm_ctx` (src/native/mod.rs): `failed` first, 192 bytes.
struct alignas(64) Ctx {
  int64_t f[16];
  unsigned char sink[64];
};
static_assert(sizeof(Ctx) == 192, "tm_ctx layout");

static double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  const int n = 1024;
  const int rounds = getenv("ROUNDS") ? atoi(getenv("ROUNDS")) : 11;
  const bool check = getenv("NOCHECK") == nullptr;
  std::vector<RunFn> fns;
  std::vector<int64_t> programs;
  for (int i = 1; i < argc; ++i) {
    char* colon = strrchr(argv[i], ':');
    programs.push_back(colon ? atoll(colon + 1) : (n / 64) * (n / 64));
    if (colon) *colon = 0;
    void* h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    RunFn f = h ? (RunFn)dlsym(h, "tm_run") : nullptr;
    if (!f) {
      fprintf(stderr, "%s: %s\n", argv[i], dlerror());
      return 1;
    }
    fns.push_back(f);
  }
  float* a = (float*)aligned_alloc(64, n * n * 4);
  float* b = (float*)aligned_alloc(64, n * n * 4);
  float* c = (float*)aligned_alloc(64, n * n * 4);
  srand(1);
  for (int i = 0; i < n * n; ++i) {
    a[i] = rand() / (float)RAND_MAX * 2 - 1;
    b[i] = rand() / (float)RAND_MAX * 2 - 1;
  }
  std::vector<float> ref(n * n, 0.f);
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < n; ++k)
      for (int j = 0; j < n; ++j) ref[i * n + j] = fmaf(a[i * n + k], b[k * n + j], ref[i * n + j]);
  int d = n, one = 1;
  // a, b, c, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn
  void* args[12] = {a, b, c, &d, &d, &d, &d, &one, &d, &one, &d, &one};
  int64_t lens[12] = {n * n, n * n, n * n, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  std::vector<std::vector<double>> t(fns.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t v = 0; v < fns.size(); ++v) {
      memset(c, 0xff, n * n * 4);  // NaN
      Ctx ctx;
      memset(&ctx, 0, sizeof ctx);
      const int64_t grid[3] = {programs[v], 1, 1};
      const double t0 = cpu_seconds();
      fns[v](args, lens, grid, 0, grid[0], &ctx);
      t[v].push_back(cpu_seconds() - t0);
      if (ctx.f[0]) {
        printf("%s: a program failed (%ld)\n", argv[v + 1], (long)ctx.f[0]);
        return 1;
      }
      if (check && memcmp(c, ref.data(), n * n * 4)) {
        size_t bad = 0;
        while (!memcmp(&c[bad], &ref[bad], 4)) ++bad;
        printf("%s: element %zu is %g, expected %g\n", argv[v + 1], bad, c[bad], ref[bad]);
        return 1;
      }
    }
  for (size_t v = 0; v < fns.size(); ++v) {
    std::sort(t[v].begin(), t[v].end());
    printf("%-48s min %.2f ms  median %.2f ms\n", argv[v + 1], t[v][0] * 1e3, t[v][t[v].size() / 2] * 1e3);
  }
}
