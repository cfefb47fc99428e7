// The tensor-core attention's kernels (attention_tc_cuda.h has the contract), in a header
// so that tests/kernels/warp_emulator.h can run them on the CPU as well: there every
// CUDA thread is a host thread, and mma_bf16, the warp shuffles and the block barrier are
// emulated with the PTX ISA's fragment layouts (LT_WARP_EMULATION). Nothing here may use
// CUDA beyond __device__ / __global__ functions, threadIdx / blockIdx, __syncthreads,
// __shfl_xor_sync, mma_bf16 and LT_DYNAMIC_SMEM.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/bf16.cuh"
#ifndef LT_WARP_EMULATION
#include "kernels/cuda/mma_bf16.cuh"
#define LT_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

namespace lt::cuda::tc {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockRows = 16 * kWarps;  // query rows per block, 16 per warp (one mma's M)
constexpr int kKeyTile = 64;             // keys per shared-memory tile: 8 mma N-tiles of 8

struct TcShape {
  int64_t B, S, Hq, Hkv, D;
  float scale;
  const int32_t* doc_start;
  int64_t window;
};

__device__ inline int64_t first_visible_key(const TcShape& s, int64_t b, int64_t i) {
  int64_t j0 = s.doc_start ? s.doc_start[b * s.S + i] : 0;
  if (s.window > 0 && i - s.window + 1 > j0) j0 = i - s.window + 1;
  return j0;
}

// Shared-memory tiles for a padded head dim DP, bf16 (as raw bits). Rows are 8 elements
// (4 words) longer than they hold, so the 32 words a warp's fragment load reads (8 rows x
// 4 consecutive words) fall in 32 different banks.
template <int DP>
struct Tiles {
  static constexpr int kRowStride = DP + 8;        // q and k: [row][d]
  static constexpr int kVtStride = kKeyTile + 8;   // v transposed: [d][key]
  static constexpr size_t kQBytes = size_t{kBlockRows} * kRowStride * 2;
  static constexpr size_t kKBytes = size_t{kKeyTile} * kRowStride * 2;
  static constexpr size_t kVtBytes = size_t{DP} * kVtStride * 2;
  static constexpr size_t kBytes = kQBytes + kKBytes + kVtBytes;
};

__device__ inline uint32_t pack_bf16(float lo, float hi) {
  return static_cast<uint32_t>(f32_to_bf16_bits(lo)) | (static_cast<uint32_t>(f32_to_bf16_bits(hi)) << 16);
}

// Rows row0 .. row0 + rows - 1 of head h of x ([B*S, H, D] fp32) as bf16 into shared
// memory: dst[r * stride + d], or transposed dst[d * stride + r]; zeros past S and D.
template <int DP, bool kTransposed>
__device__ void stage_rows(uint16_t* dst, int stride, const float* x, int64_t b, int64_t row0, int rows, int64_t H,
                           int64_t h, const TcShape& s) {
  for (int e = threadIdx.x; e < rows * DP; e += kThreads) {
    const int r = e / DP, d = e % DP;
    const int64_t i = row0 + r;
    const float val = i < s.S && d < s.D ? x[((b * s.S + i) * H + h) * s.D + d] : 0.f;
    dst[kTransposed ? d * stride + r : r * stride + d] = f32_to_bf16_bits(val);
  }
}

// One block: query rows q0 .. q0 + 63 of head h in batch row b. Warp w owns rows
// q0 + 16w .. q0 + 16w + 15; its thread holds rows g and g + 8 of those (x = 0, 1 below).
template <int DP>
__global__ void __launch_bounds__(kThreads) forward_tc_kernel(float* o, float* lse, const float* q, const float* k,
                                                              const float* v, TcShape s) {
  using T = Tiles<DP>;
  constexpr int kDTiles = DP / 8, kRowWords = T::kRowStride / 2, kVtWords = T::kVtStride / 2;
  LT_DYNAMIC_SMEM(smem);
  uint16_t* qs = reinterpret_cast<uint16_t*>(smem);
  uint16_t* ks = reinterpret_cast<uint16_t*>(smem + T::kQBytes);
  uint16_t* vts = reinterpret_cast<uint16_t*>(smem + T::kQBytes + T::kKBytes);
  const uint32_t* qw = reinterpret_cast<const uint32_t*>(qs);
  const uint32_t* kw = reinterpret_cast<const uint32_t*>(ks);
  const uint32_t* vw = reinterpret_cast<const uint32_t*>(vts);

  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kBlockRows, h = blockIdx.y, b = blockIdx.z;
  const int64_t hk = h / (s.Hq / s.Hkv);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  stage_rows<DP, false>(qs, T::kRowStride, q, b, q0, kBlockRows, s.Hq, h, s);

  int64_t row[2], first[2];
  for (int x = 0; x < 2; ++x) {
    row[x] = q0 + warp * 16 + g + 8 * x;
    first[x] = row[x] < s.S ? first_visible_key(s, b, row[x]) : row[x] + 1;  // past S: sees no key
  }
  // The key tiles some row of the block sees: first_visible_key never decreases along a
  // row (documents run in order, the window slides), so q0's is the block's smallest.
  const int64_t last_row = (q0 + kBlockRows < s.S ? q0 + kBlockRows : s.S) - 1;
  const int64_t tile_first = first_visible_key(s, b, q0) / kKeyTile, tile_last = last_row / kKeyTile;

  float acc[kDTiles][4];  // output columns dt*8 + 2t, +1 of rows g ([0], [1]) and g + 8 ([2], [3])
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.f;
  float mx[2] = {-INFINITY, -INFINITY};  // running max of the row's scaled scores
  float sum[2] = {0.f, 0.f};             // this thread's part of the row's sum of exp(score - max)
  const int qr = warp * 16 + g;

  for (int64_t tile = tile_first; tile <= tile_last; ++tile) {
    const int64_t k0 = tile * kKeyTile;
    __syncthreads();  // the previous tile's k and v have been read (and q is staged)
    stage_rows<DP, false>(ks, T::kRowStride, k, b, k0, kKeyTile, s.Hkv, hk, s);
    stage_rows<DP, true>(vts, T::kVtStride, v, b, k0, kKeyTile, s.Hkv, hk, s);
    __syncthreads();

    // Scores of the warp's 16 rows against the tile's 64 keys: 8 N-tiles of 8 keys.
    float sc[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < DP / 16; ++kk) {
      const int c = kk * 8 + t;  // word column of elements 16 kk + 2t, +1
      const uint32_t a[4] = {qw[qr * kRowWords + c], qw[(qr + 8) * kRowWords + c], qw[qr * kRowWords + c + 4],
                             qw[(qr + 8) * kRowWords + c + 4]};
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int kr = nt * 8 + g;
        mma_bf16(sc[nt], a, kw[kr * kRowWords + c], kw[kr * kRowWords + c + 4]);
      }
    }

    // Mask and scale; the tile's row maxima over the quad of threads sharing a row.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int x = e >> 1;
        const int64_t j = k0 + nt * 8 + 2 * t + (e & 1);
        sc[nt][e] = j >= first[x] && j <= row[x] ? sc[nt][e] * s.scale : -INFINITY;
        tile_max[x] = fmaxf(tile_max[x], sc[nt][e]);
      }
    float base[2];
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      tile_max[x] = fmaxf(tile_max[x], __shfl_xor_sync(0xffffffffu, tile_max[x], 1));
      tile_max[x] = fmaxf(tile_max[x], __shfl_xor_sync(0xffffffffu, tile_max[x], 2));
      const float new_mx = fmaxf(mx[x], tile_max[x]);
      // A row that has seen no key yet keeps base 0: exp(-inf - 0) = 0, never inf - inf.
      base[x] = new_mx == -INFINITY ? 0.f : new_mx;
      const float alpha = expf(mx[x] - base[x]);
      mx[x] = new_mx;
      sum[x] *= alpha;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) acc[dt][2 * x] *= alpha, acc[dt][2 * x + 1] *= alpha;
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sc[nt][e] = expf(sc[nt][e] - base[e >> 1]);
        sum[e >> 1] += sc[nt][e];
      }

    // acc += P V, 16 keys at a time: the score tiles 2kc and 2kc + 1 are the A fragment
    // (rows g and g + 8, keys 2t, 2t + 1 of each), rounded to bf16; v^T gives B.
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) {
      const uint32_t a[4] = {pack_bf16(sc[2 * kc][0], sc[2 * kc][1]), pack_bf16(sc[2 * kc][2], sc[2 * kc][3]),
                             pack_bf16(sc[2 * kc + 1][0], sc[2 * kc + 1][1]),
                             pack_bf16(sc[2 * kc + 1][2], sc[2 * kc + 1][3])};
      const int c = kc * 8 + t;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        const int vr = dt * 8 + g;
        mma_bf16(acc[dt], a, vw[vr * kVtWords + c], vw[vr * kVtWords + c + 4]);
      }
    }
  }

#pragma unroll
  for (int x = 0; x < 2; ++x) {
    sum[x] += __shfl_xor_sync(0xffffffffu, sum[x], 1);
    sum[x] += __shfl_xor_sync(0xffffffffu, sum[x], 2);
    if (row[x] >= s.S) continue;
    const float inv = 1.0f / sum[x];
    float* orow = o + ((b * s.S + row[x]) * s.Hq + h) * s.D;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t d = dt * 8 + 2 * t + e;
        if (d < s.D) orow[d] = acc[dt][2 * x + e] * inv;
      }
    if (t == 0) lse[(b * s.Hq + h) * s.S + row[x]] = mx[x] + logf(sum[x]);
  }
}

}  // namespace lt::cuda::tc
