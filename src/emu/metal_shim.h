// Metal Shading Language as C++20 for the triton-metal emulation harness: its runtime half.
//
// MSL kernels (exactly as MLX writes them) are compiled by clang >= 15 against
// `metal_core.h` (types and math) followed by this header, and run on the CPU: every
// threadgroup's threads are cooperative fibers, so barriers and simd collectives really
// wait for the other threads. Correctness only; nothing here tries to be fast.
#pragma once
#include <sys/mman.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <dlfcn.h>
#include <ucontext.h>


// Metal's address spaces as clang address spaces: `device`, `constant` and `threadgroup`
// pointers and references are distinct types (`thread` is the default one), so converting
// one into another without a cast is an error, as in Metal. On x86-64 they all address the
// same memory.
// Kernels using `bfloat` (a class here, whose members clang cannot call on objects in
// another address space) are compiled with TM_NO_ADDRESS_SPACES: no address spaces.
#ifndef TM_NO_ADDRESS_SPACES
#define TM_AS_DEVICE __attribute__((address_space(1)))
#define TM_AS_CONSTANT __attribute__((address_space(2)))
#define TM_AS_THREADGROUP __attribute__((address_space(3)))
#else
#define TM_AS_DEVICE
#define TM_AS_CONSTANT
#define TM_AS_THREADGROUP
#endif

// ----------------------------------------------------------------------------------------
// Emulator runtime: fibers, threadgroups, barriers, simd exchange
// ----------------------------------------------------------------------------------------
namespace tm_rt {
using metal::uint;
typedef metal::vec<unsigned int, 3> u3;

constexpr int SIMD = 32;
constexpr size_t TG_LIMIT = 32768;
constexpr int MAX_TG_SLOTS = 256;
constexpr size_t STACK_SIZE = 256 * 1024;
constexpr size_t SLOT_BYTES = 64;

// Values of every Metal attribute for one thread; the generated thunk picks by name.
struct Attrs {
  uint dispatch_quadgroups_per_threadgroup, dispatch_simdgroups_per_threadgroup;
  u3 dispatch_threads_per_threadgroup, grid_origin, grid_size;
  uint quadgroup_index_in_threadgroup, quadgroups_per_threadgroup;
  uint simdgroup_index_in_threadgroup, simdgroups_per_threadgroup, thread_execution_width;
  uint thread_index_in_quadgroup, thread_index_in_simdgroup, thread_index_in_threadgroup;
  u3 thread_position_in_grid, thread_position_in_threadgroup, threadgroup_position_in_grid;
  u3 threadgroups_per_grid, threads_per_grid;
  uint threads_per_simdgroup;
  u3 threads_per_threadgroup;
};

typedef void (*Thunk)(void** bufs, const Attrs& a);

// A buffer handed to a kernel parameter: converts to the parameter's pointer (or, for a
// scalar, reference) type, address space included.
struct AnyPtr {
  void* p;
  template <class T> operator T*() const { return (T*)p; }
};
struct AnyRef {
  void* p;
  template <class T> operator T&() const { return *(T*)p; }
};

enum State { READY, WAIT_BARRIER, WAIT_SIMD, DONE };

struct Fiber {
#if defined(__x86_64__)
  void* sp;
#else
  ucontext_t ctx;
#endif
  char* stack;
  State state;
  int lane, simd;
  Attrs attrs;
};

struct Simd {
  int arrived, alive;
  unsigned gen;
  uint32_t present[2];
  alignas(16) unsigned char buf[2][SIMD][SLOT_BYTES];
};

struct Group {
  Fiber* fibers;
  int n, alive;
  int bar_arrived;
  Simd simd[1024 / SIMD];
  unsigned char* arena;
  size_t used;
  long offsets[MAX_TG_SLOTS];
  Thunk thunk;
  void** bufs;
  bool failed;
  char msg[512];
};

struct Worker {
  Group group;
  char* stacks;
  size_t stacks_len;
  int capacity;
#if defined(__x86_64__)
  void* sched_sp;
#else
  ucontext_t sched;
#endif
};

inline thread_local Worker* cur_worker;
inline thread_local Fiber* cur_fiber;

#if defined(__x86_64__)
// Saves the callee-saved registers on the current stack, stores the stack pointer in
// *from, and resumes the context whose stack pointer is `to`. No syscall (unlike
// swapcontext, which saves the signal mask). The fp control words are shared by all
// fibers and never changed by kernels, so they are not saved.
extern "C" void tm_switch_ctx(void** from, void* to);
asm(R"(
  .text
  .p2align 4
  .hidden tm_switch_ctx
  .globl tm_switch_ctx
  .type tm_switch_ctx,@function
tm_switch_ctx:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size tm_switch_ctx, .-tm_switch_ctx
)");
#endif

inline void yield_to_scheduler() {
#if defined(__x86_64__)
  tm_switch_ctx(&cur_fiber->sp, cur_worker->sched_sp);
#else
  swapcontext(&cur_fiber->ctx, &cur_worker->sched);
#endif
}

inline void copy_msg(char* dst, const char* a, const char* b = "") {
  size_t i = 0;
  for (; *a && i < 511; ++a) dst[i++] = *a;
  for (; *b && i < 511; ++b) dst[i++] = *b;
  dst[i] = 0;
}

inline void append_uint(char* out, size_t& k, size_t cap, unsigned long v) {
  char t[24];
  int m = 0;
  do t[m++] = (char)('0' + v % 10), v /= 10; while (v);
  while (m && k + 1 < cap) out[k++] = t[--m];
  out[k] = 0;
}

inline void append_str(char* out, size_t& k, size_t cap, const char* s) {
  while (*s && k + 1 < cap) out[k++] = *s++;
  out[k] = 0;
}

// Stops the whole launch: the failing fiber is parked forever and the scheduler reports.
[[noreturn]] inline void fail(const char* msg, const char* detail = "") {
  Group& g = cur_worker->group;
  if (!g.failed) {
    g.failed = true;
    copy_msg(g.msg, msg, detail);
  }
  cur_fiber->state = DONE;
  for (;;) yield_to_scheduler();
}

// Wakes the threads waiting on `what`: the whole group, or one simdgroup's 32 lanes.
inline void wake(Group& g, State what, int simd) {
  int lo = simd < 0 ? 0 : simd * SIMD;
  int hi = simd < 0 ? g.n : (lo + SIMD < g.n ? lo + SIMD : g.n);
  for (int i = lo; i < hi; i++)
    if (g.fibers[i].state == what) g.fibers[i].state = READY;
}

inline void threadgroup_barrier_wait() {
  Group& g = cur_worker->group;
  if (++g.bar_arrived == g.alive) {
    g.bar_arrived = 0;
    wake(g, WAIT_BARRIER, -1);
    return;
  }
  cur_fiber->state = WAIT_BARRIER;
  yield_to_scheduler();
}

// Every live lane of the caller's simdgroup deposits `n` bytes; returns once all have,
// with the slot table of that round (two rounds alternate, so a lane that runs ahead into
// the next collective cannot overwrite what slower lanes are still reading).
struct SimdView {
  const unsigned char (*slots)[SLOT_BYTES];
  uint32_t present;
  int lane, count;
  template <class T> T get(int l) const {
    T v;
    memcpy(&v, slots[l], sizeof(T));
    return v;
  }
  bool has(int l) const { return l >= 0 && l < SIMD && ((present >> l) & 1u); }
};

inline SimdView simd_exchange(const void* data, size_t n) {
  Group& g = cur_worker->group;
  Fiber* f = cur_fiber;
  Simd& s = g.simd[f->simd];
  int p = s.gen & 1;
  memcpy(s.buf[p][f->lane], data, n);
  s.present[p] |= 1u << f->lane;
  if (++s.arrived == s.alive) {
    s.arrived = 0;
    s.gen++;
    s.present[p ^ 1] = 0;
    wake(g, WAIT_SIMD, f->simd);
  } else {
    f->state = WAIT_SIMD;
    yield_to_scheduler();
  }
  return SimdView{s.buf[p], s.present[p], f->lane, __builtin_popcount(s.present[p])};
}

template <class T> SimdView simd_exchange_value(const T& v) {
  static_assert(sizeof(T) <= SLOT_BYTES, "simd collective operand too large");
  return simd_exchange(&v, sizeof(T));
}

// A `threadgroup` variable: every declaration site gets a slot; the first thread of the
// group to reach it carves the storage out of the group's arena, filled so that reads
// before writes show up (see below).
template <class T> TM_AS_THREADGROUP T& tg_var(int slot) {
  Group& g = cur_worker->group;
  if (slot < 0 || slot >= MAX_TG_SLOTS) fail("too many threadgroup declarations");
  if (g.offsets[slot] < 0) {
    size_t a = alignof(T) < 16 ? 16 : alignof(T);
    size_t off = (g.used + a - 1) & ~(a - 1);
    if (off + sizeof(T) > TG_LIMIT)
      fail("threadgroup memory exceeds the 32768-byte limit of Apple GPUs");
    g.offsets[slot] = (long)off;
    g.used = off + sizeof(T);
    // Reads before writes must show whatever the reduction: words cycle through NaN
    // (0xff bytes, -1 as an integer), +3.4e38 (0x7f bytes) and -1.7e38 (0xfe bytes), which
    // max, min, sums and products cannot all ignore.
    static const unsigned char fill[3] = {0xff, 0x7f, 0xfe};
    for (size_t i = 0; i < sizeof(T); i++) g.arena[off + i] = fill[((off + i) / 4 + slot) % 3];
  }
  return *(TM_AS_THREADGROUP T*)(g.arena + g.offsets[slot]);
}

inline void lane_finished(Group& g, Fiber& f) {
  f.state = DONE;
  g.alive--;
  if (g.bar_arrived > 0 && g.bar_arrived == g.alive) {
    g.bar_arrived = 0;
    wake(g, WAIT_BARRIER, -1);
  }
  Simd& s = g.simd[f.simd];
  s.alive--;
  if (s.arrived > 0 && s.arrived == s.alive) {
    int p = s.gen & 1;
    s.arrived = 0;
    s.gen++;
    s.present[p ^ 1] = 0;
    wake(g, WAIT_SIMD, f.simd);
  }
}

inline void fiber_main() {
  Worker* w = cur_worker;
  Fiber* f = cur_fiber;
  w->group.thunk(w->group.bufs, f->attrs);
  lane_finished(w->group, *f);
  for (;;) yield_to_scheduler();
}

#if defined(__x86_64__)
inline void fiber_init(Fiber& f) {
  // Stack top: [fake return address][fiber_main] then six zeroed callee-saved slots, so
  // the first switch "returns" into fiber_main with the ABI's entry alignment.
  uintptr_t top = ((uintptr_t)(f.stack + STACK_SIZE)) & ~(uintptr_t)15;
  void** sp = (void**)top;
  *--sp = nullptr;
  *--sp = (void*)&fiber_main;
  for (int i = 0; i < 6; i++) *--sp = nullptr;
  f.sp = sp;
}
#else
inline void fiber_init(Fiber& f) {
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack;
  f.ctx.uc_stack.ss_size = STACK_SIZE;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, (void (*)())fiber_main, 0);
}
#endif

inline void switch_to(Worker& w, Fiber& f) {
  cur_fiber = &f;
#if defined(__x86_64__)
  tm_switch_ctx(&w.sched_sp, f.sp);
#else
  swapcontext(&w.sched, &f.ctx);
#endif
}

// How the runnable threads of a threadgroup take turns (`emu::LaneOrder`).
enum Schedule { SCHED_FORWARD = 0, SCHED_REVERSE = 1, SCHED_SIMD_FORWARD = 2, SCHED_SIMD_REVERSE = 3, SCHED_RANDOM = 4 };

struct Launch {
  Thunk thunk;
  void** bufs;
  uint grid[3], tg[3], groups[3];
  int schedule;
  uint64_t seed;
  long total_groups;
  long next;  // atomically claimed group index
  int failed;
  char msg[768];
  pthread_mutex_t lock;
};

inline uint cdiv(uint a, uint b) { return (a + b - 1) / b; }

// Runs one threadgroup to completion. Returns false (with g.msg) on failure.
inline bool run_group(Launch& L, Worker& w, long gi) {
  Group& g = w.group;
  uint gid[3] = {(uint)(gi % L.groups[0]), (uint)((gi / L.groups[0]) % L.groups[1]),
                 (uint)(gi / ((long)L.groups[0] * L.groups[1]))};
  // dispatchThreads: edge threadgroups are partial and only in-grid threads exist.
  uint size[3];
  for (int d = 0; d < 3; d++) {
    uint start = gid[d] * L.tg[d];
    size[d] = L.grid[d] - start < L.tg[d] ? L.grid[d] - start : L.tg[d];
  }
  int n = (int)(size[0] * size[1] * size[2]);
  g.n = n;
  g.alive = n;
  g.bar_arrived = 0;
  g.used = 0;
  g.failed = false;
  g.msg[0] = 0;
  for (int i = 0; i < MAX_TG_SLOTS; i++) g.offsets[i] = -1;
  int nsimd = (n + SIMD - 1) / SIMD;
  for (int s = 0; s < nsimd; s++) {
    g.simd[s].arrived = 0;
    g.simd[s].gen = 0;
    g.simd[s].present[0] = g.simd[s].present[1] = 0;
    g.simd[s].alive = n - s * SIMD < SIMD ? n - s * SIMD : SIMD;
  }
  uint dispatch_tg = L.tg[0] * L.tg[1] * L.tg[2];
  for (int i = 0; i < n; i++) {
    Fiber& f = g.fibers[i];
    f.stack = w.stacks + (size_t)i * (STACK_SIZE + 4096) + 4096;
    f.state = READY;
    f.lane = i % SIMD;
    f.simd = i / SIMD;
    Attrs& a = f.attrs;
    uint lx = i % size[0], ly = (i / size[0]) % size[1], lz = i / (size[0] * size[1]);
    a.thread_position_in_threadgroup = u3{lx, ly, lz};
    a.threadgroup_position_in_grid = u3{gid[0], gid[1], gid[2]};
    a.thread_position_in_grid =
        u3{gid[0] * L.tg[0] + lx, gid[1] * L.tg[1] + ly, gid[2] * L.tg[2] + lz};
    a.thread_index_in_threadgroup = (uint)i;
    a.threads_per_threadgroup = u3{size[0], size[1], size[2]};
    a.dispatch_threads_per_threadgroup = u3{L.tg[0], L.tg[1], L.tg[2]};
    a.threadgroups_per_grid = u3{L.groups[0], L.groups[1], L.groups[2]};
    a.threads_per_grid = u3{L.grid[0], L.grid[1], L.grid[2]};
    a.grid_size = a.threads_per_grid;
    a.grid_origin = u3{0, 0, 0};
    a.thread_execution_width = SIMD;
    a.threads_per_simdgroup = SIMD;
    a.simdgroup_index_in_threadgroup = (uint)(i / SIMD);
    a.thread_index_in_simdgroup = (uint)(i % SIMD);
    a.simdgroups_per_threadgroup = cdiv((uint)n, SIMD);
    a.dispatch_simdgroups_per_threadgroup = cdiv(dispatch_tg, SIMD);
    a.quadgroup_index_in_threadgroup = (uint)(i / 4);
    a.thread_index_in_quadgroup = (uint)(i % 4);
    a.quadgroups_per_threadgroup = cdiv((uint)n, 4);
    a.dispatch_quadgroups_per_threadgroup = cdiv(dispatch_tg, 4);
    fiber_init(f);
  }
  uint64_t rng = (L.seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(gi + 1))) | 1;
  while (g.alive > 0) {
    bool progressed = false;
    if (L.schedule == SCHED_FORWARD || L.schedule == SCHED_REVERSE) {
      // Every runnable thread once per pass, in lane order.
      for (int k = 0; k < n; k++) {
        Fiber& f = g.fibers[L.schedule == SCHED_REVERSE ? n - 1 - k : k];
        if (f.state != READY) continue;
        progressed = true;
        switch_to(w, f);
        if (g.failed) return false;
      }
    } else if (L.schedule == SCHED_SIMD_FORWARD || L.schedule == SCHED_SIMD_REVERSE) {
      // One simdgroup at a time: the first (last) one with a runnable lane runs a pass;
      // its collectives wake only its own lanes, so it keeps running until every lane of
      // it waits at a threadgroup barrier or has finished, while the others lag behind.
      bool rev = L.schedule == SCHED_SIMD_REVERSE;
      for (int k = 0; k < nsimd && !progressed; k++) {
        int s = rev ? nsimd - 1 - k : k;
        int lo = s * SIMD, hi = lo + SIMD < n ? lo + SIMD : n;
        for (int j = 0; j < hi - lo; j++) {
          Fiber& f = g.fibers[rev ? hi - 1 - j : lo + j];
          if (f.state != READY) continue;
          progressed = true;
          switch_to(w, f);
          if (g.failed) return false;
        }
      }
    } else {
      // A runnable thread picked at random (seeded) runs until it blocks.
      int ready = 0;
      for (int i = 0; i < n; i++) ready += g.fibers[i].state == READY;
      if (ready > 0) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        int pick = (int)(rng % (uint64_t)ready);
        for (int i = 0; i < n; i++) {
          if (g.fibers[i].state != READY) continue;
          if (pick-- == 0) {
            progressed = true;
            switch_to(w, g.fibers[i]);
            if (g.failed) return false;
            break;
          }
        }
      }
    }
    if (!progressed) {
      int at_barrier = 0, at_simd = 0;
      for (int i = 0; i < n; i++) {
        at_barrier += g.fibers[i].state == WAIT_BARRIER;
        at_simd += g.fibers[i].state == WAIT_SIMD;
      }
      size_t k = 0;
      char* buf = g.msg;
      append_str(buf, k, sizeof g.msg, "deadlock: ");
      append_uint(buf, k, sizeof g.msg, at_barrier);
      append_str(buf, k, sizeof g.msg, " threads wait at threadgroup_barrier and ");
      append_uint(buf, k, sizeof g.msg, at_simd);
      append_str(buf, k, sizeof g.msg,
                 " at simd collectives whose other lanes never arrive (a barrier or collective inside "
                 "divergent control flow?)");
      g.failed = true;
      return false;
    }
  }
  return true;
}

// Faults in kernel code (an integer division by zero, an access outside every mapping, a
// fiber stack overflow) end the launch with an error instead of killing the process: the
// handler jumps back to the worker's scheduler. Outside a launch it defers to whatever
// handler was installed before (Rust's stack-overflow reporter, another kernel's shim).
inline thread_local sigjmp_buf* fault_jump;
inline struct sigaction prev_segv, prev_bus, prev_fpe, prev_ill;
// The faulting address, whether the access wrote (x86-64 page-fault error code), and the
// instruction's address: the host maps them to a buffer, an element and a kernel line.
inline thread_local uintptr_t fault_addr, fault_pc;
inline thread_local int fault_write;

inline void on_fault(int sig, siginfo_t* info, void* uctx) {
  if (fault_jump) {
    fault_addr = (uintptr_t)info->si_addr;
    fault_write = -1;
    fault_pc = 0;
#if defined(__x86_64__) && defined(REG_ERR)
    const ucontext_t* uc = (const ucontext_t*)uctx;
    fault_write = (int)((uc->uc_mcontext.gregs[REG_ERR] >> 1) & 1);
    fault_pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    const ucontext_t* uc = (const ucontext_t*)uctx;
    fault_pc = (uintptr_t)uc->uc_mcontext.pc;
#endif
    siglongjmp(*fault_jump, sig);
  }
  struct sigaction* prev = sig == SIGSEGV ? &prev_segv : sig == SIGBUS ? &prev_bus : sig == SIGFPE ? &prev_fpe : &prev_ill;
  if (prev->sa_flags & SA_SIGINFO) {
    prev->sa_sigaction(sig, info, uctx);
  } else if (prev->sa_handler == SIG_DFL || prev->sa_handler == SIG_IGN) {
    // Re-arm the default action; returning re-executes the faulting instruction.
    sigaction(sig, prev, nullptr);
  } else {
    prev->sa_handler(sig);
  }
}

inline void install_fault_handlers() {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &prev_segv);
  sigaction(SIGBUS, &sa, &prev_bus);
  sigaction(SIGFPE, &sa, &prev_fpe);
  sigaction(SIGILL, &sa, &prev_ill);
}

inline void append_hex(char* out, size_t& k, size_t cap, uintptr_t v) {
  char t[20];
  int m = 0;
  do t[m++] = "0123456789abcdef"[v & 15], v >>= 4; while (v);
  append_str(out, k, cap, "0x");
  while (m && k + 1 < cap) out[k++] = t[--m];
  out[k] = 0;
}

inline void describe_fault(Group& g, int sig) {
  size_t k = 0;
  const char* what = sig == SIGFPE   ? "SIGFPE (integer division by zero or overflow)"
                     : sig == SIGILL ? "SIGILL"
                                     : "SIGSEGV/SIGBUS (memory access outside every buffer, or a thread's 256 KiB stack overflowed)";
  append_str(g.msg, k, sizeof g.msg, what);
  if (cur_fiber) {
    u3 p = cur_fiber->attrs.thread_position_in_grid;
    append_str(g.msg, k, sizeof g.msg, " in thread_position_in_grid (");
    for (int d = 0; d < 3; d++) {
      if (d) append_str(g.msg, k, sizeof g.msg, ",");
      append_uint(g.msg, k, sizeof g.msg, p[d]);
    }
    append_str(g.msg, k, sizeof g.msg, ")");
  }
  if (sig == SIGSEGV || sig == SIGBUS) {
    // Machine-readable tail for the host (see emu::describe_fault).
    append_str(g.msg, k, sizeof g.msg, " tm_fault{addr=");
    append_hex(g.msg, k, sizeof g.msg, fault_addr);
    append_str(g.msg, k, sizeof g.msg, ",write=");
    append_str(g.msg, k, sizeof g.msg, fault_write < 0 ? "?" : fault_write ? "1" : "0");
    Dl_info info;
    if (fault_pc && dladdr((void*)fault_pc, &info) && info.dli_fbase) {
      append_str(g.msg, k, sizeof g.msg, ",pc=");
      append_hex(g.msg, k, sizeof g.msg, fault_pc - (uintptr_t)info.dli_fbase);
      if (info.dli_fname) {
        append_str(g.msg, k, sizeof g.msg, ",so=");
        append_str(g.msg, k, sizeof g.msg, info.dli_fname);
      }
    }
    append_str(g.msg, k, sizeof g.msg, "}");
  }
  g.failed = true;
}

inline void* worker_main(void* arg) {
  Launch& L = *(Launch*)arg;
  // The worker (with its per-simdgroup exchange tables) is too big for small thread stacks.
  void* wmem = mmap(nullptr, sizeof(Worker), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (wmem == MAP_FAILED) {
    pthread_mutex_lock(&L.lock);
    if (!L.failed) {
      L.failed = 1;
      copy_msg(L.msg, "could not allocate a worker");
    }
    pthread_mutex_unlock(&L.lock);
    return nullptr;
  }
  Worker& w = *(Worker*)wmem;
  int capacity = (int)(L.tg[0] * L.tg[1] * L.tg[2]);
  w.capacity = capacity;
  w.stacks_len = (size_t)capacity * (STACK_SIZE + 4096);
  void* mem = mmap(nullptr, w.stacks_len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  void* arena = mmap(nullptr, TG_LIMIT, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  Fiber* fibers = (Fiber*)mmap(nullptr, sizeof(Fiber) * capacity, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED || arena == MAP_FAILED || fibers == MAP_FAILED) {
    pthread_mutex_lock(&L.lock);
    if (!L.failed) {
      L.failed = 1;
      copy_msg(L.msg, "could not allocate fiber stacks");
    }
    pthread_mutex_unlock(&L.lock);
  } else {
    w.stacks = (char*)mem;
    // Guard page below every stack turns an overflow into a crash instead of corruption.
    for (int i = 0; i < capacity; i++)
      mprotect(w.stacks + (size_t)i * (STACK_SIZE + 4096), 4096, PROT_NONE);
    w.group.arena = (unsigned char*)arena;
    w.group.fibers = fibers;
    w.group.thunk = L.thunk;
    w.group.bufs = L.bufs;
    cur_worker = &w;
    // The fault handler must run on its own stack: the faulting fiber's may be exhausted.
    const size_t alt_len = 64 * 1024;
    void* alt = mmap(nullptr, alt_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    stack_t old_alt;
    bool have_alt = false;
    if (alt != MAP_FAILED) {
      stack_t ss;
      ss.ss_sp = alt;
      ss.ss_size = alt_len;
      ss.ss_flags = 0;
      have_alt = sigaltstack(&ss, &old_alt) == 0;
    }
    for (;;) {
      long gi = __atomic_fetch_add(&L.next, 1, __ATOMIC_RELAXED);
      if (gi >= L.total_groups || __atomic_load_n(&L.failed, __ATOMIC_RELAXED)) break;
      sigjmp_buf jump;
      bool ok;
      int sig = sigsetjmp(jump, 1);
      if (sig == 0) {
        fault_jump = &jump;
        ok = run_group(L, w, gi);
      } else {
        describe_fault(w.group, sig);
        ok = false;
      }
      fault_jump = nullptr;
      if (!ok) {
        pthread_mutex_lock(&L.lock);
        if (!L.failed) {
          L.failed = 1;
          char where[64];
          size_t k = 0;
          append_str(where, k, sizeof where, "threadgroup (");
          append_uint(where, k, sizeof where, gi % L.groups[0]);
          append_str(where, k, sizeof where, ",");
          append_uint(where, k, sizeof where, (gi / L.groups[0]) % L.groups[1]);
          append_str(where, k, sizeof where, ",");
          append_uint(where, k, sizeof where, gi / ((long)L.groups[0] * L.groups[1]));
          append_str(where, k, sizeof where, "): ");
          copy_msg(L.msg, where, w.group.msg);
        }
        pthread_mutex_unlock(&L.lock);
        break;
      }
    }
    if (have_alt) sigaltstack(&old_alt, nullptr);
    if (alt != MAP_FAILED) munmap(alt, alt_len);
    cur_worker = nullptr;
    cur_fiber = nullptr;
  }
  if (mem != MAP_FAILED) munmap(mem, w.stacks_len);
  if (arena != MAP_FAILED) munmap(arena, TG_LIMIT);
  if (fibers != MAP_FAILED) munmap(fibers, sizeof(Fiber) * capacity);
  munmap(wmem, sizeof(Worker));
  return nullptr;
}

// grid counts threads (MLX uses dispatchThreads); the threadgroup is clamped to the grid
// as MLX does. Returns 0 on success, else 1 with a message in err.
inline int launch(Thunk thunk, void** bufs, const uint32_t* grid, const uint32_t* tg,
                  int schedule, uint64_t seed, int workers, char* err, size_t errlen) {
  Launch L{};
  L.thunk = thunk;
  L.bufs = bufs;
  L.schedule = schedule;
  L.seed = seed;
  L.total_groups = 1;
  for (int d = 0; d < 3; d++) {
    L.grid[d] = grid[d];
    L.tg[d] = tg[d] < grid[d] ? tg[d] : grid[d];
    if (L.tg[d] == 0) L.tg[d] = 1;
    L.groups[d] = grid[d] == 0 ? 0 : cdiv(grid[d], L.tg[d]);
    L.total_groups *= L.groups[d];
  }
  pthread_mutex_init(&L.lock, nullptr);
  static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;
  pthread_once(&handlers_once, install_fault_handlers);
  if (L.total_groups > 0) {
    if (workers < 1) workers = 1;
    if (workers > L.total_groups) workers = (int)L.total_groups;
    pthread_t threads[64];
    if (workers > 64) workers = 64;
    int started = 0;
    for (int i = 1; i < workers; i++)
      if (pthread_create(&threads[started], nullptr, worker_main, &L) == 0) started++;
    worker_main(&L);
    for (int i = 0; i < started; i++) pthread_join(threads[i], nullptr);
  }
  pthread_mutex_destroy(&L.lock);
  if (L.failed) {
    size_t k = 0;
    for (; L.msg[k] && k + 1 < errlen; k++) err[k] = L.msg[k];
    if (errlen) err[k] = 0;
    return 1;
  }
  return 0;
}
} // namespace tm_rt


namespace metal {

// Memory flags, barriers.
enum class mem_flags : uint { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4, mem_threadgroup_imageblock = 8, mem_object_data = 16 };
inline constexpr mem_flags operator|(mem_flags a, mem_flags b) { return (mem_flags)((uint)a | (uint)b); }
inline void threadgroup_barrier(mem_flags = mem_flags::mem_none) {
  // Device writes of other threads become visible because every thread runs on this
  // worker's OS thread; the fence keeps the compiler from caching across the switch.
  tm_rt::threadgroup_barrier_wait();
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
}
inline void simdgroup_barrier(mem_flags = mem_flags::mem_none) {
  char nothing = 0;
  tm_rt::simd_exchange(&nothing, 1);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

// ----- simd collectives: each lane deposits its value, then computes its own result -----
// Metal's simd and quad functions take scalars and vectors of 8-, 16- and 32-bit types:
// bool and 64-bit values are a compile error there, so they are here.
template <class T> inline tm_rt::SimdView tm_simd_value(const T& v) {
  using E = typename vtraits<T>::elem;
  static_assert(!std::is_same_v<E, bool> && sizeof(E) <= 4,
                "Metal's simd_*/quad_* functions take no bool and no 64-bit values");
  return tm_rt::simd_exchange_value(v);
}
template <class T> inline T tm_add(T a, T b) { return a + b; }
template <class T> inline T tm_mul(T a, T b) { return a * b; }

template <class T> inline T simd_sum(T v) {
  tm_rt::SimdView s = tm_simd_value(v);
  T r = T(0);
  for (int l = 0; l < tm_rt::SIMD; l++)
    if (s.has(l)) r = T(r + s.get<T>(l));
  return r;
}
template <class T> inline T simd_product(T v) {
  tm_rt::SimdView s = tm_simd_value(v);
  T r = T(1);
  for (int l = 0; l < tm_rt::SIMD; l++)
    if (s.has(l)) r = T(r * s.get<T>(l));
  return r;
}
template <class T> inline T simd_max(T v) {
  tm_rt::SimdView s = tm_simd_value(v);
  T r = v;
  for (int l = 0; l < tm_rt::SIMD; l++)
    if (s.has(l)) r = T(max(r, s.get<T>(l)));
  return r;
}
template <class T> inline T simd_min(T v) {
  tm_rt::SimdView s = tm_simd_value(v);
  T r = v;
  for (int l = 0; l < tm_rt::SIMD; l++)
    if (s.has(l)) r = T(min(r, s.get<T>(l)));
  return r;
}
template <class T> inline T simd_and(T v) {
  tm_rt::SimdView s = tm_simd_value(v);
  T r = v;
  for (int l = 0; l < tm_rt::SIMD; l++)
    if (s.has(l)) r = r & s.get<T>(l);
  return r;
}
template <class T> inline T simd_or(T v) {
  tm_rt::SimdView s = tm_simd_value(v);
  T r = v;
  for (int l = 0; l < tm_rt::SIMD; l++)
    if (s.has(l)) r = r | s.get<T>(l);
  return r;
}
template <class T> inline T simd_xor(T v) {
  tm_rt::SimdView s = tm_simd_value(v);
  T r = T(0);
  for (int l = 0; l < tm_rt::SIMD; l++)
    if (s.has(l)) r = r ^ s.get<T>(l);
  return r;
}
template <class T> inline T simd_prefix_inclusive_sum(T v) {
  tm_rt::SimdView s = tm_simd_value(v);
  T r = T(0);
  for (int l = 0; l <= s.lane; l++)
    if (s.has(l)) r = T(r + s.get<T>(l));
  return r;
}
template <class T> inline T simd_prefix_exclusive_sum(T v) {
  tm_rt::SimdView s = tm_simd_value(v);
  T r = T(0);
  for (int l = 0; l < s.lane; l++)
    if (s.has(l)) r = T(r + s.get<T>(l));
  return r;
}
template <class T> inline T simd_prefix_inclusive_product(T v) {
  tm_rt::SimdView s = tm_simd_value(v);
  T r = T(1);
  for (int l = 0; l <= s.lane; l++)
    if (s.has(l)) r = T(r * s.get<T>(l));
  return r;
}
template <class T> inline T simd_prefix_exclusive_product(T v) {
  tm_rt::SimdView s = tm_simd_value(v);
  T r = T(1);
  for (int l = 0; l < s.lane; l++)
    if (s.has(l)) r = T(r * s.get<T>(l));
  return r;
}
// Reading an inactive lane is undefined on Metal; here it returns the caller's own value.
template <class T> inline T tm_read_lane(const tm_rt::SimdView& s, T own, long l) {
  return s.has((int)l) ? s.get<T>((int)l) : own;
}
template <class T, class I> inline T simd_shuffle(T v, I lane) {
  tm_rt::SimdView s = tm_simd_value(v);
  return tm_read_lane(s, v, (long)lane);
}
template <class T, class I> inline T simd_broadcast(T v, I lane) { return simd_shuffle(v, lane); }
template <class T> inline T simd_broadcast_first(T v) {
  tm_rt::SimdView s = tm_simd_value(v);
  for (int l = 0; l < tm_rt::SIMD; l++)
    if (s.has(l)) return s.get<T>(l);
  return v;
}
template <class T, class I> inline T simd_shuffle_xor(T v, I mask) {
  tm_rt::SimdView s = tm_simd_value(v);
  return tm_read_lane(s, v, (long)(s.lane ^ (int)mask));
}
template <class T, class I> inline T simd_shuffle_up(T v, I delta) {
  tm_rt::SimdView s = tm_simd_value(v);
  long src = (long)s.lane - (long)delta;
  return src < 0 ? v : tm_read_lane(s, v, src);
}
template <class T, class I> inline T simd_shuffle_down(T v, I delta) {
  tm_rt::SimdView s = tm_simd_value(v);
  long src = (long)s.lane + (long)delta;
  return src >= tm_rt::SIMD ? v : tm_read_lane(s, v, src);
}
template <class T, class I> inline T simd_shuffle_rotate_down(T v, I delta) {
  tm_rt::SimdView s = tm_simd_value(v);
  return tm_read_lane(s, v, ((long)s.lane + (long)delta) % tm_rt::SIMD);
}
template <class T, class I> inline T simd_shuffle_rotate_up(T v, I delta) {
  tm_rt::SimdView s = tm_simd_value(v);
  return tm_read_lane(s, v, (((long)s.lane - (long)delta) % tm_rt::SIMD + tm_rt::SIMD) % tm_rt::SIMD);
}
// simd_vote: the ballot mask, convertible to an integer.
struct simd_vote {
  uint64_t v;
  explicit constexpr simd_vote(uint64_t x = 0) : v(x) {}
  explicit constexpr operator uint64_t() const { return v; }
  bool all() const { return v == 0xffffffffull; }
  bool any() const { return v != 0; }
};
inline simd_vote simd_ballot(bool pred) {
  tm_rt::SimdView s = tm_rt::simd_exchange_value(pred);
  uint64_t m = 0;
  for (int l = 0; l < tm_rt::SIMD; l++)
    if (s.has(l) && s.get<bool>(l)) m |= 1ull << l;
  return simd_vote(m);
}
inline simd_vote simd_active_threads_mask() {
  bool t = true;
  tm_rt::SimdView s = tm_rt::simd_exchange_value(t);
  return simd_vote(s.present);
}
inline bool simd_all(bool pred) {
  tm_rt::SimdView s = tm_rt::simd_exchange_value(pred);
  for (int l = 0; l < tm_rt::SIMD; l++)
    if (s.has(l) && !s.get<bool>(l)) return false;
  return true;
}
inline bool simd_any(bool pred) {
  tm_rt::SimdView s = tm_rt::simd_exchange_value(pred);
  for (int l = 0; l < tm_rt::SIMD; l++)
    if (s.has(l) && s.get<bool>(l)) return true;
  return false;
}
inline bool simd_is_first() {
  bool t = true;
  tm_rt::SimdView s = tm_rt::simd_exchange_value(t);
  return __builtin_ctz(s.present) == s.lane;
}

// ----- quad collectives: groups of 4 consecutive lanes (all simd lanes rendezvous) -----
template <class T> inline T quad_sum(T v) {
  tm_rt::SimdView s = tm_simd_value(v);
  T r = T(0);
  for (int l = s.lane & ~3; l < (s.lane & ~3) + 4; l++)
    if (s.has(l)) r = T(r + s.template get<T>(l));
  return r;
}
template <class T> inline T quad_max(T v) {
  tm_rt::SimdView s = tm_simd_value(v);
  T r = v;
  for (int l = s.lane & ~3; l < (s.lane & ~3) + 4; l++)
    if (s.has(l)) r = T(max(r, s.template get<T>(l)));
  return r;
}
template <class T> inline T quad_min(T v) {
  tm_rt::SimdView s = tm_simd_value(v);
  T r = v;
  for (int l = s.lane & ~3; l < (s.lane & ~3) + 4; l++)
    if (s.has(l)) r = T(min(r, s.template get<T>(l)));
  return r;
}
template <class T, class I> inline T quad_shuffle(T v, I lane) {
  tm_rt::SimdView s = tm_simd_value(v);
  return tm_read_lane(s, v, (long)((s.lane & ~3) | ((int)lane & 3)));
}
template <class T, class I> inline T quad_broadcast(T v, I lane) { return quad_shuffle(v, lane); }
template <class T, class I> inline T quad_shuffle_xor(T v, I mask) {
  tm_rt::SimdView s = tm_simd_value(v);
  return tm_read_lane(s, v, (long)((s.lane & ~3) | ((s.lane ^ (int)mask) & 3)));
}
template <class T, class I> inline T quad_shuffle_down(T v, I delta) {
  tm_rt::SimdView s = tm_simd_value(v);
  int q = (s.lane & 3) + (int)delta;
  return q > 3 ? v : tm_read_lane(s, v, (long)((s.lane & ~3) | q));
}
template <class T, class I> inline T quad_shuffle_up(T v, I delta) {
  tm_rt::SimdView s = tm_simd_value(v);
  int q = (s.lane & 3) - (int)delta;
  return q < 0 ? v : tm_read_lane(s, v, (long)((s.lane & ~3) | q));
}

// ----- atomics -----
// Metal's model: atomics live in `device` or `threadgroup` memory (no overloads for any
// other address space), are 32-bit (M1 has no 64-bit atomics), and `atomic_float` only
// loads, stores, exchanges and adds; `atomic_bool` only loads, stores, exchanges and
// compares-and-exchanges. Anything else is a compile error, as on Metal.
enum memory_order { memory_order_relaxed, memory_order_acquire, memory_order_release, memory_order_acq_rel, memory_order_seq_cst };
// Metal 3.2's fence (macOS 15): orders the calling thread's device-memory accesses around
// it for the threads of `scope`; on the CPU a sequentially consistent fence does that.
enum thread_scope { thread_scope_thread, thread_scope_simdgroup, thread_scope_threadgroup, thread_scope_device };
inline void atomic_thread_fence(mem_flags, memory_order, thread_scope = thread_scope_device) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
template <class T> struct atomic {
  T value;
};
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<bool> atomic_bool;
typedef atomic<float> atomic_float;

enum tm_atomic_op { TM_AT_LOAD, TM_AT_STORE, TM_AT_XCHG, TM_AT_CAS, TM_AT_ADD, TM_AT_SUB, TM_AT_BITS, TM_AT_MINMAX };
template <class T, int OP> constexpr bool tm_atomic_check() {
  constexpr bool i32 = std::is_same_v<T, int> || std::is_same_v<T, uint>;
  static_assert(i32 || std::is_same_v<T, float> || std::is_same_v<T, bool>,
                "Metal atomics hold int, uint, bool or float (no 64-bit atomics on M1)");
  static_assert(!std::is_same_v<T, float> || OP == TM_AT_LOAD || OP == TM_AT_STORE || OP == TM_AT_XCHG || OP == TM_AT_ADD,
                "Metal's atomic_float only loads, stores, exchanges and adds (max/min/CAS go through atomic_uint)");
  static_assert(!std::is_same_v<T, bool> || OP == TM_AT_LOAD || OP == TM_AT_STORE || OP == TM_AT_XCHG || OP == TM_AT_CAS,
                "Metal's atomic_bool only loads, stores, exchanges and compares-and-exchanges");
  return true;
}

template <class T> struct atomic_bits {
  using type = std::conditional_t<sizeof(T) == 8, uint64_t, std::conditional_t<sizeof(T) == 4, uint32_t, std::conditional_t<sizeof(T) == 2, uint16_t, uint8_t>>>;
};
template <class T> inline T tm_atomic_load(volatile atomic<T>* o) {
  using B = typename atomic_bits<T>::type;
  return __builtin_bit_cast(T, __atomic_load_n((volatile B*)&o->value, __ATOMIC_SEQ_CST));
}
template <class T> inline bool tm_atomic_cas(volatile atomic<T>* o, T* expected, T desired) {
  using B = typename atomic_bits<T>::type;
  B e = __builtin_bit_cast(B, *expected);
  bool ok = __atomic_compare_exchange_n((volatile B*)&o->value, &e, __builtin_bit_cast(B, desired), false,
                                        __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  if (!ok) *expected = __builtin_bit_cast(T, e);
  return ok;
}
template <class T, class F> inline T tm_atomic_rmw(volatile atomic<T>* o, F f) {
  T old = tm_atomic_load(o);
  while (!tm_atomic_cas(o, &old, (T)f(old))) {
  }
  return old;
}
template <class T> inline void tm_atomic_store(volatile atomic<T>* o, T v) {
  using B = typename atomic_bits<T>::type;
  __atomic_store_n((volatile B*)&o->value, __builtin_bit_cast(B, v), __ATOMIC_SEQ_CST);
}
template <class T> inline T tm_atomic_xchg(volatile atomic<T>* o, T v) {
  using B = typename atomic_bits<T>::type;
  return __builtin_bit_cast(T, __atomic_exchange_n((volatile B*)&o->value, __builtin_bit_cast(B, v), __ATOMIC_SEQ_CST));
}

// a + sign * b, wrapping for integers (as the hardware's atomic add does).
template <class T> inline T tm_wrapping(T a, T b, int sign) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using W = std::make_unsigned_t<T>;
    return (T)(sign > 0 ? (W)((W)a + (W)b) : (W)((W)a - (W)b));
  } else {
    return sign > 0 ? T(a + b) : T(a - b);
  }
}

// The API, once per address space an atomic may live in (`expected` is a thread pointer).
#define TM_ATOMIC_RMW(AS, name, op, expr)                                                                   \
  template <class T, class U> inline T name(volatile AS atomic<T>* o, U v, memory_order = memory_order_relaxed) { \
    static_assert(tm_atomic_check<T, op>());                                                                \
    T arg = (T)v;                                                                                           \
    return tm_atomic_rmw((volatile atomic<T>*)o, [arg](T a) { return expr; });                              \
  }
#define TM_ATOMIC_API(AS)                                                                                   \
  template <class T, class U> inline void atomic_store_explicit(volatile AS atomic<T>* o, U v, memory_order = memory_order_relaxed) { \
    static_assert(tm_atomic_check<T, TM_AT_STORE>());                                                       \
    tm_atomic_store((volatile atomic<T>*)o, (T)v);                                                          \
  }                                                                                                         \
  template <class T> inline T atomic_load_explicit(const volatile AS atomic<T>* o, memory_order = memory_order_relaxed) { \
    static_assert(tm_atomic_check<T, TM_AT_LOAD>());                                                        \
    return tm_atomic_load((volatile atomic<T>*)o);                                                          \
  }                                                                                                         \
  template <class T, class U> inline T atomic_exchange_explicit(volatile AS atomic<T>* o, U v, memory_order = memory_order_relaxed) { \
    static_assert(tm_atomic_check<T, TM_AT_XCHG>());                                                        \
    return tm_atomic_xchg((volatile atomic<T>*)o, (T)v);                                                    \
  }                                                                                                         \
  template <class T, class U>                                                                               \
  inline bool atomic_compare_exchange_weak_explicit(volatile AS atomic<T>* o, T* expected, U desired, memory_order = memory_order_relaxed, \
                                                    memory_order = memory_order_relaxed) {                  \
    static_assert(tm_atomic_check<T, TM_AT_CAS>());                                                         \
    return tm_atomic_cas((volatile atomic<T>*)o, expected, (T)desired);                                     \
  }                                                                                                         \
  template <class T, class U>                                                                               \
  inline bool atomic_compare_exchange_strong_explicit(volatile AS atomic<T>* o, T* expected, U desired, memory_order = memory_order_relaxed, \
                                                      memory_order = memory_order_relaxed) {                \
    static_assert(tm_atomic_check<T, TM_AT_CAS>());                                                         \
    return tm_atomic_cas((volatile atomic<T>*)o, expected, (T)desired);                                     \
  }                                                                                                         \
  TM_ATOMIC_RMW(AS, atomic_fetch_add_explicit, TM_AT_ADD, tm_wrapping<T>(a, arg, 1))                        \
  TM_ATOMIC_RMW(AS, atomic_fetch_sub_explicit, TM_AT_SUB, tm_wrapping<T>(a, arg, -1))                       \
  TM_ATOMIC_RMW(AS, atomic_fetch_and_explicit, TM_AT_BITS, a & arg)                                         \
  TM_ATOMIC_RMW(AS, atomic_fetch_or_explicit, TM_AT_BITS, a | arg)                                          \
  TM_ATOMIC_RMW(AS, atomic_fetch_xor_explicit, TM_AT_BITS, a ^ arg)                                         \
  TM_ATOMIC_RMW(AS, atomic_fetch_min_explicit, TM_AT_MINMAX, a < arg ? a : arg)                             \
  TM_ATOMIC_RMW(AS, atomic_fetch_max_explicit, TM_AT_MINMAX, a > arg ? a : arg)
TM_ATOMIC_API(TM_AS_DEVICE)
#ifndef TM_NO_ADDRESS_SPACES
TM_ATOMIC_API(TM_AS_THREADGROUP)
#endif
#undef TM_ATOMIC_API
#undef TM_ATOMIC_RMW

// ----- simdgroup_matrix<T, 8, 8> -----
// Lane l holds row fm, columns fn and fn+1 (Apple's layout, as MLX's steel mma.h reads it).
inline void tm_frag_coord(int lane, int& row, int& col) {
  int qid = lane / 4;
  row = (qid & 4) + ((lane / 2) % 4);
  col = (qid & 2) * 2 + (lane % 2) * 2;
}
template <class T> struct tm_frag_storage { using type = vec<T, 2>; };
template <> struct tm_frag_storage<bfloat> { using type = bfloat2; };

template <class T, int Cols, int Rows> struct simdgroup_matrix {
  static_assert(Cols == 8 && Rows == 8, "only 8x8 simdgroup matrices exist on Apple GPUs");
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, half> || std::is_same_v<T, bfloat>,
                "simdgroup_matrix holds float, half or bfloat (no integer matrices on Apple GPUs)");
  typename tm_frag_storage<T>::type e;
  simdgroup_matrix() = default;
  // Metal: a diagonal matrix with `diag` on the diagonal.
  explicit simdgroup_matrix(T diag) {
    int r, c;
    tm_frag_coord(tm_rt::cur_fiber->lane, r, c);
    e[0] = r == c ? diag : T(0);
    e[1] = r == c + 1 ? diag : T(0);
  }
  typename tm_frag_storage<T>::type& thread_elements() { return e; }
  const typename tm_frag_storage<T>::type& thread_elements() const { return e; }
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int C, int R> inline simdgroup_matrix<T, C, R> make_filled_simdgroup_matrix(T v) {
  simdgroup_matrix<T, C, R> m;
  m.e[0] = v;
  m.e[1] = v;
  return m;
}

template <class T, class U>
inline void simdgroup_load(simdgroup_matrix<T, 8, 8>& d, const U* src, ulong elements_per_row = 8,
                           ulong2 matrix_origin = (ulong2)0, bool transpose_matrix = false) {
  int r, c;
  tm_frag_coord(tm_rt::cur_fiber->lane, r, c);
  for (int k = 0; k < 2; k++) {
    ulong row = transpose_matrix ? (ulong)(c + k) : (ulong)r;
    ulong col = transpose_matrix ? (ulong)r : (ulong)(c + k);
    d.e[k] = T(src[(matrix_origin.y + row) * elements_per_row + matrix_origin.x + col]);
  }
}
template <class T, class U>
inline void simdgroup_store(const simdgroup_matrix<T, 8, 8>& a, U* dst, ulong elements_per_row = 8,
                            ulong2 matrix_origin = (ulong2)0, bool transpose_matrix = false) {
  int r, c;
  tm_frag_coord(tm_rt::cur_fiber->lane, r, c);
  for (int k = 0; k < 2; k++) {
    ulong row = transpose_matrix ? (ulong)(c + k) : (ulong)r;
    ulong col = transpose_matrix ? (ulong)r : (ulong)(c + k);
    dst[(matrix_origin.y + row) * elements_per_row + matrix_origin.x + col] = U(a.e[k]);
  }
}

// A collective: every lane contributes its fragments of A, B and C; each lane rebuilds the
// full matrices, computes D = A * B + C in float and keeps its own fragment.
template <class TD, class TA, class TB, class TC>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                          const simdgroup_matrix<TB, 8, 8>& b, const simdgroup_matrix<TC, 8, 8>& c) {
  struct Frag {
    float v[6];
  } mine = {{float(a.e[0]), float(a.e[1]), float(b.e[0]), float(b.e[1]), float(c.e[0]), float(c.e[1])}};
  tm_rt::SimdView s = tm_rt::simd_exchange_value(mine);
  if (s.count != tm_rt::SIMD) tm_rt::fail("simdgroup_multiply_accumulate needs all 32 lanes of the simdgroup");
  float A[8][8], B[8][8], C[8][8];
  for (int l = 0; l < tm_rt::SIMD; l++) {
    Frag f = s.get<Frag>(l);
    int r, col;
    tm_frag_coord(l, r, col);
    for (int k = 0; k < 2; k++) {
      A[r][col + k] = f.v[k];
      B[r][col + k] = f.v[2 + k];
      C[r][col + k] = f.v[4 + k];
    }
  }
  int r, col;
  tm_frag_coord(s.lane, r, col);
  for (int k = 0; k < 2; k++) {
    float acc = C[r][col + k];
    for (int i = 0; i < 8; i++) acc += A[r][i] * B[i][col + k];
    d.e[k] = TD(acc);
  }
}
template <class TD, class TA, class TB>
inline void simdgroup_multiply(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                               const simdgroup_matrix<TB, 8, 8>& b) {
  simdgroup_matrix<TD, 8, 8> zero = make_filled_simdgroup_matrix<TD, 8, 8>(TD(0));
  simdgroup_multiply_accumulate(d, a, b, zero);
}

// Vector construction as MSL spells it: float4(x) splats, float4(a, b, c, d) and
// float4(float2, float2) concatenate, float4(int4) converts. C++ cannot call a
// constructor on a vector type, so the harness rewrites `float4(` into `vmake<float4>(`.
template <class T, int N, class A> inline void tm_push(T (&out)[N], int& k, A a) {
  if constexpr (vtraits<A>::is_vec) {
    for (int i = 0; i < vtraits<A>::n; i++) out[k++] = (T)a[i];
  } else {
    out[k++] = (T)a;
  }
}
template <class V, class A> inline V vmake1(A a) {
  using T = typename vtraits<V>::elem;
  if constexpr (vtraits<A>::is_vec) {
    static_assert(vtraits<A>::n == vtraits<V>::n, "vector conversion needs equal lengths");
    return __builtin_convertvector(a, V);
  } else {
    return (V)(T)a;
  }
}
template <class V, class... A> inline V vmake(A... a) {
  using T = typename vtraits<V>::elem;
  constexpr int N = vtraits<V>::n;
  if constexpr (sizeof...(A) == 0) {
    return (V)(T)0;
  } else if constexpr (sizeof...(A) == 1) {
    return vmake1<V>(a...);
  } else {
    T tmp[N + 4];
    int k = 0;
    (tm_push(tmp, k, a), ...);
    V v;
    for (int i = 0; i < N; i++) v[i] = tmp[i];
    return v;
  }
}

// Packed vectors: element alignment, so they may start at any element of a buffer. Kernels
// compiled without address spaces see the host's target macros and take the branches
// written for CPU builds, which declare their own.
#ifndef TM_NO_ADDRESS_SPACES
#define TM_PACKED_TYPES(T, N)                                                        \
  typedef T packed_##N##2 __attribute__((ext_vector_type(2), aligned(alignof(T)))); \
  typedef T packed_##N##3 __attribute__((ext_vector_type(3), aligned(alignof(T)))); \
  typedef T packed_##N##4 __attribute__((ext_vector_type(4), aligned(alignof(T))));
TM_PACKED_TYPES(float, float)
TM_PACKED_TYPES(half, half)
TM_PACKED_TYPES(int, int)
TM_PACKED_TYPES(uint, uint)
TM_PACKED_TYPES(short, short)
TM_PACKED_TYPES(ushort, ushort)
TM_PACKED_TYPES(char, char)
TM_PACKED_TYPES(uchar, uchar)
#undef TM_PACKED_TYPES
#endif

namespace precise {
using metal::acos, metal::acosh, metal::asin, metal::asinh, metal::atan, metal::atan2, metal::atanh, metal::ceil, metal::copysign,
    metal::cos, metal::cosh, metal::cospi, metal::exp, metal::exp10, metal::exp2, metal::fabs, metal::fdim, metal::floor,
    metal::fma, metal::fmax, metal::fmin, metal::fmod, metal::fract, metal::log, metal::log10, metal::log2, metal::pow,
    metal::powr, metal::rint, metal::round, metal::rsqrt, metal::sin, metal::sinh, metal::sinpi, metal::sqrt, metal::tan,
    metal::tanh, metal::tanpi, metal::trunc, metal::abs, metal::max, metal::min, metal::clamp, metal::saturate;
inline float divide(float a, float b) { return a / b; }
} // namespace precise
namespace fast {
using namespace metal::precise;
}
} // namespace metal

using namespace metal;

#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#define HUGE_VALF __builtin_huge_valf()
#define MAXFLOAT 0x1.fffffep+127f
#define FLT_MAX 0x1.fffffep+127f
#define FLT_MIN 0x1p-126f
#define M_PI_F 3.14159265358979323846f
#define M_PI_2_F 1.57079632679489661923f
#define M_PI_4_F 0.78539816339744830962f
#define M_1_PI_F 0.31830988618379067154f
#define M_2_PI_F 0.63661977236758134308f
#define M_E_F 2.71828182845904523536f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LOG10E_F 0.43429448190325182765f
#define M_LN2_F 0.69314718055994530942f
#define M_LN10_F 2.30258509299404568402f
#define M_SQRT2_F 1.41421356237309504880f
#define M_SQRT1_2_F 0.70710678118654752440f
#define METAL_FUNC inline
#define __METAL_VERSION__ 320

// Address spaces (see TM_AS_DEVICE); function qualifiers carry no meaning on the CPU.
#define device TM_AS_DEVICE
#define constant TM_AS_CONSTANT
#define threadgroup TM_AS_THREADGROUP
#define thread
#define kernel
#define ray_data
#define object_data
