// A CUDA device emulated on the CPU, enough to run Wick's own kernels (src/kernels/cuda/*.cu)
// from their source without a GPU: every thread of a block is a fiber, blocks run on the
// host's cores, and the warp and block collectives the kernels use (__shfl_xor_sync,
// __syncthreads) are barriers between the fibers. It checks what a GPU would not forgive or
// would hide: a shuffle with lanes missing or a mask short of the whole warp, a barrier some
// threads never reach (a deadlock here, a hang there), reads past a buffer (guard pages),
// reads of memory the kernel never wrote (buffers start as NaN bytes), misaligned loads (built
// with -fsanitize=undefined). Arithmetic is the host's: IEEE f32 as the GPU's with fma
// contraction off, so a kernel's bits may be compared with a host twin's.
#pragma once

#include <stdint.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

// The kernels' device-side code paths (qmatvec.cuh: __dp4a, 16-bit loads).
#define __CUDACC__ 1
#define __CUDA_ARCH__ 900
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
// Static shared memory: one block runs at a time on a host thread, its fibers share it.
#define __shared__ static thread_local
// Dynamic shared memory: the block's buffer of the launch's size (see the kernels' default).
#define WICK_DYNAMIC_SHARED(T, name) T* name = (T*)wick_emu::dynamic_shared()

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x = 1, unsigned y = 1, unsigned z = 1) : x(x), y(y), z(z) {}
};

static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

namespace wick_emu {

[[noreturn]] inline void fail(const char* what) {
  fprintf(stderr, "emulated GPU: %s\n", what);
  fflush(stderr);
  abort();
}

struct Fiber {
  ucontext_t ctx;
  uint3 idx;
  int warp = 0, lane = 0;
  bool done = false, waiting = false;
};

// One block in flight on one host thread.
struct Block {
  uint3 idx;
  dim3 dim, grid;
  std::vector<Fiber> fibers;
  std::vector<char> stacks;
  std::vector<uint64_t> slots;                // a warp's shuffle values, a lane each
  std::vector<void*> lane_ptrs;               // a warp's collective operands, a lane each
  std::vector<int> warp_arrived, warp_live;   // per warp
  int block_arrived = 0, block_live = 0;
  std::vector<unsigned char> shared;
  const std::function<void()>* body = nullptr;
  ucontext_t scheduler;
  Fiber* current = nullptr;
  std::minstd_rand rng{1};
};

inline thread_local Block* block = nullptr;

inline Fiber& me() { return *block->current; }
inline void* dynamic_shared() { return block->shared.data(); }

// Back to the scheduler; it resumes this fiber once it no longer waits.
inline void yield() { swapcontext(&me().ctx, &block->scheduler); }

inline void release_warp(int w) {
  Block& b = *block;
  for (Fiber& f : b.fibers)
    if (f.warp == w && !f.done) f.waiting = false;
  b.warp_arrived[w] = 0;
}

inline void release_block() {
  for (Fiber& f : block->fibers)
    if (!f.done) f.waiting = false;
  block->block_arrived = 0;
}

// Every lane of the warp here: a full-mask collective needs all 32 (none exited). The last
// lane to arrive runs `at_last` before any lane goes on: the moment the warp, in lockstep on a
// GPU, would execute the instruction (so a collective that reads memory reads it then, not
// after the other warps have run on).
template <class F>
inline void warp_collective(F&& at_last) {
  Block& b = *block;
  Fiber& f = me();
  if (b.warp_live[f.warp] != 32) fail("a full-mask warp collective with lanes exited or missing");
  f.waiting = true;
  if (++b.warp_arrived[f.warp] == b.warp_live[f.warp]) {
    at_last();
    release_warp(f.warp);
  }
  yield();
}

inline void warp_barrier() {
  warp_collective([] {});
}

// Lane `lane` of the calling warp's slot for a collective's per-lane pointer.
inline void*& lane_slot(int lane) {
  return block->lane_ptrs[(size_t)me().warp * 32 + lane];
}

inline void block_barrier() {
  Block& b = *block;
  me().waiting = true;
  if (++b.block_arrived == b.block_live) release_block();
  yield();
}

inline void fiber_main() {
  Block& b = *block;
  (*b.body)();
  Fiber& f = me();
  f.done = true;
  b.warp_live[f.warp]--;
  b.block_live--;
  // A barrier the others wait at can complete by this exit (never a warp's: see warp_barrier).
  if (b.block_arrived > 0 && b.block_arrived == b.block_live) release_block();
  swapcontext(&f.ctx, &b.scheduler);
}

constexpr size_t kStack = 64 * 1024;

inline void run_block(Block& b, uint3 idx) {
  const int n = (int)(b.dim.x * b.dim.y * b.dim.z);
  b.idx = idx;
  b.fibers.assign(n, Fiber{});
  b.stacks.resize((size_t)n * kStack);
  b.slots.assign((size_t)(n + 31) / 32 * 32, 0);
  b.lane_ptrs.assign((size_t)(n + 31) / 32 * 32, nullptr);
  b.warp_arrived.assign((n + 31) / 32, 0);
  b.warp_live.assign((n + 31) / 32, 0);
  b.block_arrived = 0;
  b.block_live = n;
  if (!b.shared.empty()) memset(b.shared.data(), 0xff, b.shared.size());
  for (int t = 0; t < n; t++) {
    Fiber& f = b.fibers[t];
    f.idx = {t % b.dim.x, t / b.dim.x % b.dim.y, t / (b.dim.x * b.dim.y)};
    f.warp = t / 32;
    f.lane = t % 32;
    b.warp_live[f.warp]++;
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = &b.stacks[(size_t)t * kStack];
    f.ctx.uc_stack.ss_size = kStack;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_main, 0);
  }
  // Each pass runs the warps in a fresh random order (a warp's lanes in order, each up to its
  // next barrier), so a block that leans on one warp running before another without a barrier
  // between them reads stale or poisoned memory here, as it would on some GPU some day.
  const int warps = (n + 31) / 32;
  std::vector<int> order(warps);
  for (int w = 0; w < warps; w++) order[w] = w;
  for (int left = n; left > 0;) {
    bool ran = false;
    for (int w = warps - 1; w > 0; w--) std::swap(order[w], order[b.rng() % (w + 1)]);
    for (int w : order) {
      for (int t = 32 * w; t < 32 * w + 32 && t < n; t++) {
        Fiber& f = b.fibers[t];
        if (f.done || f.waiting) continue;
        b.current = &f;
        swapcontext(&b.scheduler, &f.ctx);
        ran = true;
        if (f.done) left--;
      }
    }
    if (!ran && left > 0) fail("deadlock: threads wait at a barrier the others never reach");
  }
}

// Runs `body` (the kernel call) as every thread of every block of the grid.
inline void launch(dim3 grid, dim3 dim, size_t shared, const std::function<void()>& body) {
  if (dim.x * dim.y * dim.z % 32 != 0) fail("blocks here are whole warps");
  const long blocks = (long)grid.x * grid.y * grid.z;
  std::atomic<long> next{0};
  auto worker = [&] {
    Block b;
    b.rng.seed(next.load() + 1);
    b.dim = dim;
    b.grid = grid;
    b.body = &body;
    b.shared.resize(shared);
    block = &b;
    for (long i; (i = next.fetch_add(1)) < blocks;)
      run_block(b, {(unsigned)(i % grid.x), (unsigned)(i / grid.x % grid.y), (unsigned)(i / grid.x / grid.y)});
    block = nullptr;
  };
  std::vector<std::thread> pool;
  const unsigned n = std::thread::hardware_concurrency() ? std::thread::hardware_concurrency() : 1;
  for (unsigned t = 0; t < n; t++) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
}

// Device memory: `bytes` ending against an unmapped page (a read past the end faults), a
// page unmapped before it too, filled with 0xff (NaN as f32) so a read of anything the kernel
// was meant to write first shows.
template <class T>
struct Buffer {
  T* ptr = nullptr;
  size_t count = 0, map_bytes = 0;
  void* map = nullptr;
  explicit Buffer(size_t n) : count(n) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = n * sizeof(T);
    const size_t body = (bytes + page - 1) / page * page;
    map_bytes = body + 2 * page;
    map = mmap(nullptr, map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) fail("mmap");
    char* base = (char*)map + page;
    if (mprotect(base, body, PROT_READ | PROT_WRITE) != 0) fail("mprotect");
    // Flush against the guard, yet aligned for T (and the kernels' word loads).
    size_t offset = (body - bytes) / alignof(T) * alignof(T);
    offset = offset / 16 * 16;
    ptr = (T*)(base + offset);
    memset(base, 0xff, body);
  }
  Buffer(const std::vector<T>& v) : Buffer(v.size()) { memcpy(ptr, v.data(), v.size() * sizeof(T)); }
  Buffer(const Buffer&) = delete;
  ~Buffer() { munmap(map, map_bytes); }
  std::vector<T> read() const { return std::vector<T>(ptr, ptr + count); }
};

template <class T>
inline T shfl_xor(unsigned mask, T v, int off) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "shuffle of a wider type");
  if (mask != 0xffffffffu) fail("a shuffle mask short of the whole warp");
  if (off < 0 || off > 31) fail("a shuffle lane mask out of range");
  Block& b = *block;
  Fiber& f = me();
  uint64_t* slot = &b.slots[(size_t)f.warp * 32];
  memcpy(&slot[f.lane], &v, sizeof v);
  warp_barrier();
  T r;
  memcpy(&r, &slot[f.lane ^ off], sizeof r);
  warp_barrier();
  return r;
}

}  // namespace wick_emu

#define threadIdx (wick_emu::me().idx)
#define blockIdx (wick_emu::block->idx)
#define blockDim (wick_emu::block->dim)
#define gridDim (wick_emu::block->grid)

template <class T>
static inline T __shfl_xor_sync(unsigned mask, T v, int off, int width = 32) {
  if (width != 32) wick_emu::fail("shuffles here span the whole warp");
  return wick_emu::shfl_xor(mask, v, off);
}
static inline void __syncthreads() { wick_emu::block_barrier(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
  if (mask != 0xffffffffu) wick_emu::fail("a __syncwarp mask short of the whole warp");
  wick_emu::warp_barrier();
}
// Four signed byte products and c.
// The bit casts, as the device's intrinsics.
static inline float __uint_as_float(unsigned int u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static inline unsigned int __float_as_uint(float f) {
  unsigned int u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; i++) c += (int8_t)(a >> (8 * i)) * (int8_t)(b >> (8 * i));
  return c;
}
