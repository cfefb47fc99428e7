// The tensor-core attention's forward kernel (attention_tc_cuda.h has the contract;
// attention_tc_common.cuh says why it is a header).
#pragma once

#include "kernels/cuda/attention_tc_common.cuh"

LT_TC_NAMESPACE_BEGIN

template <int DP>
constexpr size_t forward_smem_bytes() {  // q, k and v tiles [64][DP]
  return 3 * tile_bytes<DP>(kKeyTile);
}

// One block: query rows q0 .. q0 + 63 of head h in batch row b. Warp w owns rows
// q0 + 16w .. q0 + 16w + 15; its thread holds rows g and g + 8 of those (x = 0, 1 below).
// q, k, v: packed (PackedOperands).
template <int DP>
__global__ void __launch_bounds__(kThreads) forward_tc_kernel(float* o, float* lse, const uint16_t* q,
                                                              const uint16_t* k, const uint16_t* v, TcShape s) {
  constexpr int kDTiles = DP / 8, kRowWords = kTileWords<DP>;
  LT_DYNAMIC_SMEM(smem);
  uint32_t* qw = reinterpret_cast<uint32_t*>(smem);
  uint32_t* kw = qw + kKeyTile * kRowWords;
  uint32_t* vw = kw + kKeyTile * kRowWords;

  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kBlockRows, h = blockIdx.y, b = blockIdx.z;
  const int64_t hk = h / (s.Hq / s.Hkv);
  const int warp = threadIdx.x >> 5, t = threadIdx.x & 3;
  const QueryRows rows = query_rows(s, b, q0);

  // Staging runs ahead of the products: a tile's k is copied in while the block computes
  // the previous tile's softmax and P v, its v while it computes the tile's scores. Each
  // thread's groups of copies, oldest first, at the top of an iteration: [k], [v].
  stage_tile<DP, DP>(qw, q, b, q0, s.Hq, h, 0, s);
  stage_tile<DP, DP>(kw, k, b, rows.tile_first * kKeyTile, s.Hkv, hk, 0, s);
  cp_async_commit();
  stage_tile<DP, DP>(vw, v, b, rows.tile_first * kKeyTile, s.Hkv, hk, 0, s);
  cp_async_commit();

  float acc[kDTiles][4];  // output columns dt*8 + 2t, +1 of rows g ([0], [1]) and g + 8 ([2], [3])
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.f;
  float mx[2] = {-INFINITY, -INFINITY};  // running max of the row's scaled scores
  float sum[2] = {0.f, 0.f};             // this thread's part of the row's sum of exp(score - max)

  for (int64_t tile = rows.tile_first; tile <= rows.tile_last; ++tile) {
    const int64_t k0 = tile * kKeyTile;
    const bool more = tile < rows.tile_last;  // the same for the whole block
    wait_for_staged_tiles_but_the_newest();    // q and the tile's k

    // Scores of the warp's 16 rows against the tile's 64 keys: 8 N-tiles of 8 keys.
    float sc[8][4];
    tile_product<DP>(sc, qw, kw, warp * 16);
    stage_next_tile<DP, DP>(more, kw, k, b, k0 + kKeyTile, s.Hkv, hk, 0, s);

    // Mask and scale; the tile's row maxima over the quad of threads sharing a row.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int x = e >> 1;
        sc[nt][e] = rows.sees(x, k0 + accumulator_column(nt, e)) ? sc[nt][e] * s.scale : -INFINITY;
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

    // acc += P V, P rounded to bf16.
    wait_for_staged_tiles_but_the_newest();  // the tile's v
    accumulate_product<DP>(acc, sc, vw, 0);
    stage_next_tile<DP, DP>(more, vw, v, b, k0 + kKeyTile, s.Hkv, hk, 0, s);
  }

#pragma unroll
  for (int x = 0; x < 2; ++x) {
    sum[x] += __shfl_xor_sync(0xffffffffu, sum[x], 1);
    sum[x] += __shfl_xor_sync(0xffffffffu, sum[x], 2);
    if (rows.row[x] >= s.S) continue;
    const float inv = 1.0f / sum[x];
    float* orow = o + ((b * s.S + rows.row[x]) * s.Hq + h) * s.D;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t d = accumulator_column(dt, e);
        if (d < s.D) orow[d] = acc[dt][2 * x + e] * inv;
      }
    if (t == 0) lse[(b * s.Hq + h) * s.S + rows.row[x]] = mx[x] + logf(sum[x]);
  }
}

LT_TC_NAMESPACE_END
