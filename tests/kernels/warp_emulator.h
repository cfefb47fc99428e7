// Runs a CUDA kernel written for warp-level tensor-core products (mma_bf16) on the CPU, so
// that its indexing - fragment layouts, shuffles, tiles, masks - is checked against float64
// on a machine without a GPU. Every CUDA thread of a block is a host thread; a block's
// threads meet at __syncthreads on a barrier, a warp's at every shuffle and product, where
// each lane posts its registers and reads the others' (the PTX ISA's fragment layouts for
// mma.m16n8k16, as kernels/cuda/mma_bf16.cuh documents them). Blocks run one after another.
//
// What this does not check: the hardware's own rounding inside a product (here each
// product is summed in double and rounded once to fp32, which the kernels' tests' bounds
// cover), timing, and anything about shared-memory banks or occupancy.
//
// Include this before the kernel's header; it defines LT_WARP_EMULATION.
#pragma once

#include <barrier>
#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#define LT_WARP_EMULATION 1
#define __device__
#define __global__
#define __launch_bounds__(threads)
#define LT_DYNAMIC_SMEM(name) unsigned char* name = ::lt::emu::t_smem

struct LtEmuDim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local LtEmuDim3 threadIdx, blockIdx;

namespace lt::emu {

// What one warp's lanes post for an exchange: up to 6 words each (a product's A and B fragments).
struct WarpExchange {
  std::barrier<> sync{32};
  uint32_t words[32][6] = {};
};

struct Block {
  explicit Block(int threads, size_t smem_bytes)
      : sync(threads), warps(static_cast<size_t>(threads / 32)), smem(smem_bytes) {}
  std::barrier<> sync;
  std::vector<WarpExchange> warps;
  std::vector<unsigned char> smem;
};

inline thread_local Block* t_block = nullptr;
inline thread_local unsigned char* t_smem = nullptr;

inline int lane() { return static_cast<int>(threadIdx.x & 31); }
inline WarpExchange& warp() { return t_block->warps[threadIdx.x >> 5]; }

inline uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
inline float value(uint32_t u) { return std::bit_cast<float>(u); }

// Runs kernel(args...) over grid (x, y, z) blocks of `threads` threads (a multiple of 32)
// with smem_bytes of dynamic shared memory. One host thread per CUDA thread of a block,
// started once: they run the blocks one after another, meeting at a barrier between two
// (the next block's threads may reuse the shared memory only when the last one is done).
template <class Kernel, class... Args>
void launch(unsigned gx, unsigned gy, unsigned gz, int threads, size_t smem_bytes, Kernel kernel, Args... args) {
  Block block(threads, smem_bytes);
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&block, gx, gy, gz, t, kernel, args...] {
      threadIdx = {static_cast<unsigned>(t), 0, 0};
      t_block = &block;
      t_smem = block.smem.data();
      for (unsigned z = 0; z < gz; ++z)
        for (unsigned y = 0; y < gy; ++y)
          for (unsigned x = 0; x < gx; ++x) {
            blockIdx = {x, y, z};
            kernel(args...);
            block.sync.arrive_and_wait();
          }
    });
  for (std::thread& th : pool) th.join();
}

}  // namespace lt::emu

inline unsigned __float_as_uint(float f) { return lt::emu::bits(f); }
inline float __uint_as_float(unsigned u) { return lt::emu::value(u); }

inline void __syncthreads() { lt::emu::t_block->sync.arrive_and_wait(); }

// Every lane of the warp must call it (the kernels' shuffles are all full-warp).
inline float __shfl_xor_sync(unsigned /*mask*/, float v, int lane_mask) {
  lt::emu::WarpExchange& w = lt::emu::warp();
  const int l = lt::emu::lane();
  w.words[l][0] = lt::emu::bits(v);
  w.sync.arrive_and_wait();
  const float got = lt::emu::value(w.words[l ^ lane_mask][0]);
  w.sync.arrive_and_wait();  // read before anyone posts again
  return got;
}

namespace lt::cuda {

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 across the warp: lane l = 4g + t
// holds A(g, 2t..2t+1) in a[0], A(g+8, ..) in a[1], columns + 8 in a[2], a[3]; B(2t..2t+1,
// g) in b0, rows + 8 in b1; D(g, 2t..2t+1) in d[0..1], D(g+8, ..) in d[2..3].
inline void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  emu::WarpExchange& w = emu::warp();
  const int l = emu::lane(), g = l >> 2, t = l & 3;
  for (int r = 0; r < 4; ++r) w.words[l][r] = a[r];
  w.words[l][4] = b0;
  w.words[l][5] = b1;
  w.sync.arrive_and_wait();
  auto half = [](uint32_t word, int k) { return emu::value((k & 1 ? word >> 16 : word & 0xffffu) << 16); };
  auto A = [&](int row, int k) {  // the lane and register holding A(row, k)
    const int owner = (row & 7) * 4 + (k & 7) / 2, reg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
    return half(w.words[owner][reg], k);
  };
  auto B = [&](int k, int col) {
    const int owner = col * 4 + (k & 7) / 2, reg = 4 + (k >= 8 ? 1 : 0);
    return half(w.words[owner][reg], k);
  };
  float out[4];
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
    double s = d[e];
    for (int k = 0; k < 16; ++k) s += static_cast<double>(A(row, k)) * B(k, col);
    out[e] = static_cast<float>(s);
  }
  w.sync.arrive_and_wait();  // every lane has read the posts
  for (int e = 0; e < 4; ++e) d[e] = out[e];
}

}  // namespace lt::cuda
