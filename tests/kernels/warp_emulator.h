// Runs a CUDA kernel written for warp-level tensor-core products (mma_bf16) on the CPU, so
// that its indexing - fragment layouts, shuffles, tiles, masks - is checked against float64
// on a machine without a GPU. Every CUDA thread of a block is a fiber (ucontext) on the
// calling thread; a block's fibers meet at __syncthreads on a barrier, a warp's at every
// shuffle and product, where each lane posts its registers and reads the others' (the PTX
// ISA's fragment layouts for mma.m16n8k16, as kernels/cuda/mma_bf16.cuh documents them).
// A fiber that waits at a barrier yields to the next of its warp; a warp runs until all of
// its threads wait at the block's barrier, then the next warp (run_block says why); blocks
// run one after another. A warp-wide exchange (a shuffle, a product, an ldmatrix) is one
// barrier of the warp's fibers (exchange()). Fibers rather than OS threads: 128 threads
// meeting twice per product spent most of their time in futex wake-ups on a small machine
// (the emulated attention tests: 86 s on 2 cores, then 30 s on one). Under
// AddressSanitizer every switch is announced to it (__sanitizer_{start,finish}_switch_fiber),
// so it knows which stack is live; it still warns once that it "doesn't fully support
// makecontext/swapcontext" (its interceptor always does).
//
// What this does not check: the hardware's own rounding inside a product (here each
// product is summed in double and rounded once to fp32, which the kernels' tests' bounds
// cover), timing, and anything about shared-memory banks or occupancy.
//
// Include this before the kernel's header; it defines LT_WARP_EMULATION.
#pragma once

#include <ucontext.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define LT_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LT_EMU_ASAN 1
#endif
#endif
#ifdef LT_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#define LT_WARP_EMULATION 1
#define __device__
#define __global__ inline  // kernels defined in headers: one definition for every file that includes them
#define __launch_bounds__(threads)
#define LT_DYNAMIC_SMEM(name) unsigned char* name = ::lt::emu::t_block->smem.data()

struct LtEmuDim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local LtEmuDim3 threadIdx, blockIdx;

namespace lt::emu {

// The stack a switch leaves for and the one it arrives on, for AddressSanitizer (no-ops
// without it). fake_stack: where the leaving fiber's fake frames are kept (null when it
// will not come back).
struct StackBounds {
  const void* bottom = nullptr;
  size_t size = 0;
};
inline void switch_starts(void** fake_stack, const StackBounds& to) {
#ifdef LT_EMU_ASAN
  __sanitizer_start_switch_fiber(fake_stack, to.bottom, to.size);
#else
  (void)fake_stack, (void)to;
#endif
}
inline void switch_finished(void* fake_stack, StackBounds* from) {
#ifdef LT_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, from ? &from->bottom : nullptr, from ? &from->size : nullptr);
#else
  (void)fake_stack, (void)from;
#endif
}

// A barrier among `expected` fibers: the last to arrive opens it and goes on; the others
// yield until it is open.
struct Barrier {
  explicit Barrier(int n) : expected(n) {}
  void arrive_and_wait();
  int expected, arrived = 0;
  uint64_t generation = 0;
};

// What one warp's lanes post for an exchange: up to 6 words each (a product's A and B
// fragments), in two slots that exchanges take in turn (exchange() says why).
struct WarpExchange {
  Barrier sync{32};
  uint32_t words[2][32][6] = {};
};

// A cp.async of 16 bytes that has not landed: its bytes, read at issue (the kernels copy
// from global memory that no block writes while they run), and where they go.
struct AsyncCopy {
  void* to;
  unsigned char bytes[16];
};

struct Fiber {
  ucontext_t context;
  std::unique_ptr<char[]> stack;
  bool done = false;
  void* fake_stack = nullptr;  // AddressSanitizer's, while it is switched away
  std::vector<AsyncCopy> open_copies;                     // issued since the last commit
  std::vector<std::vector<AsyncCopy>> committed_copies;  // oldest group first
};

// One block's state while its fibers run; the scheduler is the launching thread's context.
struct Block {
  static constexpr size_t kStackBytes = 256 << 10;
  Block(int threads, size_t smem_bytes)
      : sync(threads), warps(static_cast<size_t>(threads / 32)), smem(smem_bytes), fibers(static_cast<size_t>(threads)) {
    for (Fiber& f : fibers) f.stack = std::make_unique<char[]>(kStackBytes);
  }
  Barrier sync;
  std::vector<WarpExchange> warps;
  std::vector<unsigned char> smem;
  std::vector<Fiber> fibers;
  std::function<void()> body;  // the kernel with its arguments
  ucontext_t scheduler;
  StackBounds scheduler_stack;
  int current = 0;
  uint64_t progress = 0;  // barrier arrivals and finished fibers: what a round without any is a deadlock
};

inline thread_local Block* t_block = nullptr;

inline int lane() { return static_cast<int>(threadIdx.x & 31); }
inline WarpExchange& warp() { return t_block->warps[threadIdx.x >> 5]; }

// A warp-wide exchange (a shuffle, a product, an ldmatrix): this lane posts n words, waits
// for the other 31, and gets every lane's posts ([lane][word]). One barrier an exchange:
// exchanges alternate between two slots (by the barrier's generation, which every lane sees
// alike when it posts), and a lane can post into this exchange's slot again only after the
// next exchange's barrier, which every lane reaches only after reading this one's posts.
using Posts = const uint32_t (*)[6];
inline Posts exchange(const uint32_t* mine, int n) {
  WarpExchange& w = warp();
  const size_t slot = w.sync.generation & 1;
  for (int i = 0; i < n; ++i) w.words[slot][lane()][i] = mine[i];
  w.sync.arrive_and_wait();
  return w.words[slot];
}

inline uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
inline float value(uint32_t u) { return std::bit_cast<float>(u); }

// The running fiber passes the turn to the next live fiber of its warp, or after the warp's
// last one back to the scheduler (the end of the warp's round); a finished fiber passes it
// for good.
inline void pass_turn(bool finished) {
  Block& b = *t_block;
  Fiber& from = b.fibers[static_cast<size_t>(b.current)];
  const int n = (b.current / 32 + 1) * 32;  // the end of the warp
  int next = b.current + 1;
  while (next < n && b.fibers[static_cast<size_t>(next)].done) ++next;
  ucontext_t* to = &b.scheduler;
  StackBounds to_stack = b.scheduler_stack;
  if (next < n) {
    Fiber& f = b.fibers[static_cast<size_t>(next)];
    to = &f.context, to_stack = {f.stack.get(), Block::kStackBytes};
    b.current = next;
    threadIdx = {static_cast<unsigned>(next), 0, 0};
  }
  switch_starts(finished ? nullptr : &from.fake_stack, to_stack);
  if (finished) setcontext(to);
  swapcontext(&from.context, to);
  switch_finished(from.fake_stack, nullptr);
}

inline void Barrier::arrive_and_wait() {
  ++t_block->progress;
  const uint64_t my_generation = generation;
  if (++arrived == expected) {
    arrived = 0;
    ++generation;
    return;
  }
  while (generation == my_generation) pass_turn(false);
}

inline Fiber& this_fiber() { return t_block->fibers[static_cast<size_t>(t_block->current)]; }

inline void fiber_main() {
  Block& b = *t_block;
  StackBounds from;
  switch_finished(nullptr, &from);
  if (!b.scheduler_stack.bottom) b.scheduler_stack = from;  // the first fiber of all starts from the scheduler
  b.body();
  const Fiber& me = this_fiber();
  size_t pending = me.open_copies.size();
  for (const std::vector<AsyncCopy>& group : me.committed_copies) pending += group.size();
  if (pending > 0) {  // empty groups are fine: a kernel may commit one to keep its count of groups
    std::fprintf(stderr, "warp emulator: thread %u of block (%u, %u, %u) finished with asynchronous copies it never "
                         "waited for\n", threadIdx.x, blockIdx.x, blockIdx.y, blockIdx.z);
    std::abort();
  }
  b.fibers[static_cast<size_t>(b.current)].done = true;
  ++b.progress;
  pass_turn(true);
}

// Every fiber of the block at the start of fiber_main.
inline void start_fibers(Block& block) {
  for (Fiber& f : block.fibers) {
    f.done = false;
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.get();
    f.context.uc_stack.ss_size = Block::kStackBytes;
    f.context.uc_link = nullptr;
    makecontext(&f.context, fiber_main, 0);
  }
}

// One round of warp w: its live fibers in turn, each until it waits or finishes.
inline void run_warp_round(Block& block, size_t w) {
  size_t t = 32 * w;
  while (t < 32 * (w + 1) && block.fibers[t].done) ++t;
  if (t == 32 * (w + 1)) return;
  Fiber& f = block.fibers[t];
  block.current = static_cast<int>(t);
  threadIdx = {static_cast<unsigned>(t), 0, 0};
  void* fake_stack = nullptr;
  switch_starts(&fake_stack, {f.stack.get(), Block::kStackBytes});
  swapcontext(&block.scheduler, &f.context);
  switch_finished(fake_stack, nullptr);
}

// Runs one block, a warp at a time: each warp runs until none of its threads can go on (all
// wait at the block's barrier, or have finished), then the next. So between two barriers a
// warp runs as far ahead of the others as a GPU may let it, and a kernel that lacks a
// barrier (one warp overwrites shared memory that another has yet to read) fails its
// checks here. A pass over the warps in which no thread arrives anywhere or finishes is a
// deadlock.
inline void run_block(Block& block, const LtEmuDim3& id) {
  blockIdx = id;
  start_fibers(block);
  const size_t warps = block.fibers.size() / 32;
  for (size_t live = block.fibers.size(); live > 0;) {
    const uint64_t progress = block.progress;
    for (size_t w = 0; w < warps; ++w)
      for (uint64_t before = progress - 1; before != block.progress;) {
        before = block.progress;
        run_warp_round(block, w);
      }
    live = 0;
    for (const Fiber& g : block.fibers) live += g.done ? 0 : 1;
    if (live > 0 && block.progress == progress) {
      std::fprintf(stderr, "warp emulator: block (%u, %u, %u) is stuck: %zu threads wait at a barrier that the "
                           "others never reach\n", id.x, id.y, id.z, live);
      std::abort();
    }
  }
}

// Runs kernel(args...) over grid (x, y, z) blocks of `threads` threads (a multiple of 32)
// with smem_bytes of dynamic shared memory, on the calling thread.
template <class Kernel, class... Args>
void launch(unsigned gx, unsigned gy, unsigned gz, int threads, size_t smem_bytes, Kernel kernel, Args... args) {
  Block block(threads, smem_bytes);
  block.body = [&] { kernel(args...); };
  Block* const outer = t_block;
  t_block = &block;
  for (unsigned z = 0; z < gz; ++z)
    for (unsigned y = 0; y < gy; ++y)
      for (unsigned x = 0; x < gx; ++x) run_block(block, {x, y, z});
  t_block = outer;
}

}  // namespace lt::emu

// cp.async.cg.shared.global (16 bytes), cp.async.commit_group and cp.async.wait_group N.
// A copy may land on a GPU any time between its issue and its thread's wait; the emulator
// lands it at one end or the other (copy_landing): at the wait, as late as it may, so a
// kernel that reads a tile before waiting for it reads stale bytes; or at the issue, as
// early as it may, so a kernel that restages a tile before every warp has read it (a
// missing barrier) overwrites bytes a warp behind still reads (the fibers of a block run
// unevenly: a warp's last lane runs ahead of the rest between barriers). Either fails the
// kernel's checks; tests compare the two. The alignment the GPU would fault on aborts.
namespace lt::emu {
enum class CopyLanding { kAtWait, kAtIssue };
inline CopyLanding copy_landing = CopyLanding::kAtWait;
inline void require_aligned_16(const void* p, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % 16 == 0) return;
  std::fprintf(stderr, "warp emulator: the %s of a 16-byte cp.async at %p is not 16-byte aligned\n", what, p);
  std::abort();
}
}  // namespace lt::emu
inline void cp_async_16(void* to, const void* from) {
  lt::emu::require_aligned_16(to, "destination");
  lt::emu::require_aligned_16(from, "source");
  if (lt::emu::copy_landing == lt::emu::CopyLanding::kAtIssue) {
    std::memcpy(to, from, 16);
    return;
  }
  lt::emu::AsyncCopy c{to, {}};
  std::memcpy(c.bytes, from, 16);
  lt::emu::this_fiber().open_copies.push_back(c);
}
inline void cp_async_commit() {
  lt::emu::Fiber& f = lt::emu::this_fiber();
  f.committed_copies.push_back(std::move(f.open_copies));
  f.open_copies.clear();
}
template <int kPending>
void cp_async_wait() {
  auto& groups = lt::emu::this_fiber().committed_copies;
  while (groups.size() > static_cast<size_t>(kPending)) {
    for (const lt::emu::AsyncCopy& c : groups.front()) std::memcpy(c.to, c.bytes, 16);
    groups.erase(groups.begin());
  }
}

inline unsigned __float_as_uint(float f) { return lt::emu::bits(f); }
inline float __uint_as_float(unsigned u) { return lt::emu::value(u); }

inline void __syncthreads() { lt::emu::t_block->sync.arrive_and_wait(); }

// Every lane of the warp must call it (the kernels' shuffles are all full-warp).
inline float __shfl_xor_sync(unsigned /*mask*/, float v, int lane_mask) {
  const uint32_t mine = lt::emu::bits(v);
  return lt::emu::value(lt::emu::exchange(&mine, 1)[lt::emu::lane() ^ lane_mask][0]);
}

namespace lt::cuda {

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 across the warp: lane l = 4g + t
// holds A(g, 2t..2t+1) in a[0], A(g+8, ..) in a[1], columns + 8 in a[2], a[3]; B(2t..2t+1,
// g) in b0, rows + 8 in b1; D(g, 2t..2t+1) in d[0..1], D(g+8, ..) in d[2..3].
inline void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const int l = emu::lane(), g = l >> 2, t = l & 3;
  const uint32_t mine[6] = {a[0], a[1], a[2], a[3], b0, b1};
  const emu::Posts posts = emu::exchange(mine, 6);
  auto half = [](uint32_t word, int k) { return emu::value((k & 1 ? word >> 16 : word & 0xffffu) << 16); };
  auto A = [&](int row, int k) {  // the lane and register holding A(row, k)
    const int owner = (row & 7) * 4 + (k & 7) / 2, reg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
    return half(posts[owner][reg], k);
  };
  auto B = [&](int k, int col) {
    const int owner = col * 4 + (k & 7) / 2, reg = 4 + (k >= 8 ? 1 : 0);
    return half(posts[owner][reg], k);
  };
  float out[4];
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
    double s = d[e];
    for (int k = 0; k < 16; ++k) s += static_cast<double>(A(row, k)) * B(k, col);
    out[e] = static_cast<float>(s);
  }
  for (int e = 0; e < 4; ++e) d[e] = out[e];
}

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16 across the warp (kernels/cuda/
// mma_bf16.cuh says what each lane gives and gets): every lane posts its row's address, then
// reads its elements from the rows the others posted.
inline void ldmatrix_x4_emulated(uint32_t (&r)[4], const void* row, bool trans) {
  const int l = emu::lane();
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0) {
    std::fprintf(stderr, "warp emulator: lane %d's ldmatrix row at %p is not 16-byte aligned\n", l, row);
    std::abort();
  }
  const uint64_t address = reinterpret_cast<uintptr_t>(row);
  const uint32_t mine[2] = {static_cast<uint32_t>(address), static_cast<uint32_t>(address >> 32)};
  const emu::Posts posts = emu::exchange(mine, 2);
  const auto element = [&](int matrix, int i, int j) {  // row i, column j of the matrix
    const int from = 8 * matrix + i;
    const uintptr_t a = static_cast<uintptr_t>(posts[from][0]) | (static_cast<uintptr_t>(posts[from][1]) << 32);
    uint16_t e;
    std::memcpy(&e, reinterpret_cast<const unsigned char*>(a) + 2 * j, 2);
    return static_cast<uint32_t>(e);
  };
  for (int m = 0; m < 4; ++m) {
    const int g = l / 4, c = 2 * (l % 4);
    r[m] = trans ? element(m, c, g) | element(m, c + 1, g) << 16 : element(m, g, c) | element(m, g, c + 1) << 16;
  }
}
inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) { ldmatrix_x4_emulated(r, row, false); }
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) { ldmatrix_x4_emulated(r, row, true); }

}  // namespace lt::cuda
