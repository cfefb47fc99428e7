// The tensor-core attention's backward kernels (attention_tc_cuda.h has the contract;
// attention_tc_common.cuh says why they are in a header). Flash-attention-2's backward
// without atomics, in two kernels that recompute the probabilities from the saved lse:
//  - dq: a block per 64 query rows of a head walks the key tiles its rows see, in order;
//  - dk, dv: a block per 64 keys of a kv head walks the group's query heads in order and,
//    for each, the query tiles that see its keys, in order.
// So every sum has one order and the bits repeat run to run. Each warp owns 16 rows of
// the output and accumulates them in registers; a block writes kChunk of the head's
// columns (two blocks per row tile for a 256-wide head, each recomputing the scores), so
// that a warp's accumulators stay within the register file.
//
// Precision, as under bf16 training: q, k, v and dO are rounded to bf16 (packed before these
// run: attention_tc_common.cuh), and so are the probabilities (for dv) and the score
// gradients (for dq and dk) before their products; the scores, the probabilities,
// dp = dO . v and delta = sum_d bf16(dO) o stay fp32, from the forward's fp32 o and lse
// (delta computed once per row where dO is packed, pack_kernel).
#pragma once

#include "kernels/cuda/attention_tc_common.cuh"

LT_TC_NAMESPACE_BEGIN

template <int DP>
inline constexpr int kChunk = DP < 128 ? DP : 128;  // output columns per block

// The last query that sees key j: causal rows past j while they stay within the window
// and in j's document (doc_start[i] <= j, true from j on and then false: a binary search).
__device__ inline int64_t last_seeing_query(const TcShape& s, int64_t b, int64_t j) {
  int64_t last = s.S - 1;
  if (s.window > 0 && j + s.window - 1 < last) last = j + s.window - 1;
  if (s.doc_start) {
    int64_t lo = j, hi = last;  // doc_start[b S + lo] <= j holds; find the last i that keeps it
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (s.doc_start[b * s.S + mid] <= j) lo = mid;
      else hi = mid - 1;
    }
    last = lo;
  }
  return last;
}

// The deltas of query rows row0 .. row0 + 63 of head h into shared memory (0 past S).
__device__ inline void stage_row_deltas(float* staged, const float* delta, int64_t b, int64_t row0, int64_t h,
                                        const TcShape& s) {
  for (int r = threadIdx.x; r < kBlockRows; r += kThreads)
    staged[r] = row0 + r < s.S ? delta[(b * s.Hq + h) * s.S + row0 + r] : 0.f;
}

// A backward kernel stages its tiles kStage columns wide: all of D (kStage = DP), or, where
// a block's shared memory cannot hold four [64][256] tiles (133 KB; consumer GPUs give 99),
// kChunk columns at a time (kStage = kChunk<DP> < DP): the score products then run in
// column passes, each staging its columns of all four tiles, in the order a whole-D
// product sums them, so the passes give the same bits as the one-pass kernel; the block's
// own columns are staged last (restaged where they are not the last pass's) for the
// products that write them. Each score product's operands are copied in while the block
// computes the other's (a pass's q and k during the previous pass's dO v^T, its dO and v
// during its q k^T; the same with k, q and v, dO in dk/dv), as the one-pass kernels copy
// the next tile in. The price: q and dO (dq) or k and v (dk/dv) are staged again for every
// tile instead of once.
template <int DP, int kStage>
inline constexpr int kPasses = DP / kStage;

template <int DP, int kStage = DP>
constexpr size_t dq_smem_bytes() {  // q, dO, k, v [64][kStage]; deltas
  return 4 * tile_bytes<kStage>(kKeyTile) + kKeyTile * sizeof(float);
}

// Grid: (query tiles, Hq x chunks, B). Warp w owns query rows q0 + 16w .. + 15. dout, q, k,
// v: packed (PackedOperands), as in dkv_tc_kernel.
template <int DP, int kStage = DP>
__global__ void __launch_bounds__(kThreads) dq_tc_kernel(float* dq, const uint16_t* dout, const uint16_t* q,
                                                         const uint16_t* k, const uint16_t* v, const float* lse,
                                                         const float* row_deltas, TcShape s) {
  static_assert(kStage == DP || kStage == kChunk<DP>, "stage all of D or the block's chunk");
  constexpr int kC = kChunk<DP>, kChunks = DP / kC, kCTiles = kC / 8, kRowWords = kTileWords<kStage>;
  constexpr int kN = kPasses<DP, kStage>;
  LT_DYNAMIC_SMEM(smem);
  uint32_t* qw = reinterpret_cast<uint32_t*>(smem);
  uint32_t* dow = qw + kKeyTile * kRowWords;
  uint32_t* kw = dow + kKeyTile * kRowWords;
  uint32_t* vw = kw + kKeyTile * kRowWords;
  float* delta = reinterpret_cast<float*>(vw + kKeyTile * kRowWords);

  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kBlockRows, h = blockIdx.y / kChunks, b = blockIdx.z;
  const int col0 = static_cast<int>(blockIdx.y % kChunks) * kC;
  const int64_t hk = h / (s.Hq / s.Hkv);
  const int warp = threadIdx.x >> 5;
  stage_row_deltas(delta, row_deltas, b, q0, h, s);
  const QueryRows rows = query_rows(s, b, q0);
  if constexpr (kN == 1) {
    // q and dO stay staged; a tile's v is copied in while the block computes the previous
    // tile's scores, ds and ds k, its k while it computes the tile's dp. Each thread's groups
    // of copies, oldest first, at the top of an iteration: [v], [k].
    stage_tile<DP, DP>(qw, q, b, q0, s.Hq, h, 0, s);
    stage_tile<DP, DP>(dow, dout, b, q0, s.Hq, h, 0, s);
    stage_tile<DP, DP>(vw, v, b, rows.tile_first * kKeyTile, s.Hkv, hk, 0, s);
    cp_async_commit();
    stage_tile<DP, DP>(kw, k, b, rows.tile_first * kKeyTile, s.Hkv, hk, 0, s);
    cp_async_commit();
  } else {
    // A pass's q and k are copied in while the block computes the previous pass's dp (or,
    // for a tile's first pass, the previous tile's ds k), its dO and v while it computes
    // the pass's scores. Each thread's groups of copies, oldest first, at the top of a
    // pass: [q, k], [dO, v].
    stage_tile<kStage, DP>(qw, q, b, q0, s.Hq, h, 0, s);
    stage_tile<kStage, DP>(kw, k, b, rows.tile_first * kKeyTile, s.Hkv, hk, 0, s);
    cp_async_commit();
    stage_tile<kStage, DP>(dow, dout, b, q0, s.Hq, h, 0, s);
    stage_tile<kStage, DP>(vw, v, b, rows.tile_first * kKeyTile, s.Hkv, hk, 0, s);
    cp_async_commit();
  }
  float row_lse[2];
  for (int x = 0; x < 2; ++x)
    row_lse[x] = rows.row[x] < s.S ? lse[(b * s.Hq + h) * s.S + rows.row[x]] : 0.f;

  float acc[kCTiles][4];  // dq's columns col0 + ct*8 + 2t, +1 of rows g ([0], [1]) and g + 8 ([2], [3])
#pragma unroll
  for (int ct = 0; ct < kCTiles; ++ct) acc[ct][0] = acc[ct][1] = acc[ct][2] = acc[ct][3] = 0.f;

  for (int64_t tile = rows.tile_first; tile <= rows.tile_last; ++tile) {
    const int64_t k0 = tile * kKeyTile;
    const bool more = tile < rows.tile_last;  // the same for the whole block
    // Scores q k^T and dp = dO v^T of the warp's 16 rows against the tile's 64 keys.
    float sc[8][4], dp[8][4];
    if constexpr (kN == 1) {
      wait_for_staged_tiles_but_the_newest();  // the tile's v (and q, dO and the deltas)
      tile_product<DP>(dp, dow, vw, warp * 16);
      stage_next_tile<DP, DP>(more, vw, v, b, k0 + kKeyTile, s.Hkv, hk, 0, s);
      wait_for_staged_tiles_but_the_newest();  // the tile's k
      tile_product<DP>(sc, qw, kw, warp * 16);
    } else {  // column passes, each staging its columns of all four tiles
      zero_tiles(sc);
      zero_tiles(dp);
#pragma unroll
      for (int pass = 0; pass < kN; ++pass) {
        const int c1 = (pass + 1) * kStage;  // the next pass's columns
        wait_for_staged_tiles_but_the_newest();  // the pass's q and k (and the deltas)
        add_tile_product<kStage>(sc, qw, kw, warp * 16);
        __syncthreads();  // q and k are read: the next pass's, or the next tile's q and the block's k
        if (c1 < DP) {
          stage_tile<kStage, DP>(qw, q, b, q0, s.Hq, h, c1, s);
          stage_tile<kStage, DP>(kw, k, b, k0, s.Hkv, hk, c1, s);
        } else {
          if (more) stage_tile<kStage, DP>(qw, q, b, q0, s.Hq, h, 0, s);
          if (col0 != pass * kStage) stage_tile<kStage, DP>(kw, k, b, k0, s.Hkv, hk, col0, s);
        }
        cp_async_commit();
        wait_for_staged_tiles_but_the_newest();  // the pass's dO and v
        add_tile_product<kStage>(dp, dow, vw, warp * 16);
        if (c1 < DP) {
          __syncthreads();
          stage_tile<kStage, DP>(dow, dout, b, q0, s.Hq, h, c1, s);
          stage_tile<kStage, DP>(vw, v, b, k0, s.Hkv, hk, c1, s);
          cp_async_commit();
        }
      }
      if (col0 != (kN - 1) * kStage) wait_for_staged_tiles();  // the block's columns of k, for ds k
    }
    // ds = p (dp - delta), p from the saved lse; 0 where the key is not seen.
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int x = e >> 1;
        const float p =
            rows.sees(x, k0 + accumulator_column(nt, e)) ? expf(sc[nt][e] * s.scale - row_lse[x]) : 0.f;
        sc[nt][e] = p * (dp[nt][e] - delta[rows.row[x] - q0]);
      }
    // acc += ds k (the block's columns), ds rounded to bf16.
    accumulate_product<kStage>(acc, sc, kw, col0 % kStage);
    if constexpr (kN == 1) {
      stage_next_tile<DP, DP>(more, kw, k, b, k0 + kKeyTile, s.Hkv, hk, 0, s);
    } else {  // the next tile's first pass: its k, then its dO and v (the next q is on its way)
      stage_next_tile<kStage, DP>(more, kw, k, b, k0 + kKeyTile, s.Hkv, hk, 0, s);
      if (more) {
        stage_tile<kStage, DP>(dow, dout, b, q0, s.Hq, h, 0, s);
        stage_tile<kStage, DP>(vw, v, b, k0 + kKeyTile, s.Hkv, hk, 0, s);
      }
      cp_async_commit();
    }
  }

#pragma unroll
  for (int x = 0; x < 2; ++x) {
    if (rows.row[x] >= s.S) continue;
    float* out = dq + ((b * s.S + rows.row[x]) * s.Hq + h) * s.D;
#pragma unroll
    for (int ct = 0; ct < kCTiles; ++ct)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t d = col0 + accumulator_column(ct, e);
        if (d < s.D) out[d] = acc[ct][2 * x + e] * s.scale;
      }
  }
}

// What dk/dv needs of query rows q0 .. q0 + 63 of head h besides their q and dO tiles: the
// first key each sees, its lse and its delta (past S: sees no key).
__device__ inline void stage_query_rows(int64_t* query_first, float* query_lse, float* delta, const float* lse,
                                        const float* row_deltas, int64_t b, int64_t q0, int64_t h, const TcShape& s) {
  stage_row_deltas(delta, row_deltas, b, q0, h, s);
  for (int r = threadIdx.x; r < kBlockRows; r += kThreads) {
    const int64_t i = q0 + r;
    query_first[r] = i < s.S ? first_visible_key(s, b, i) : i + 1;
    query_lse[r] = i < s.S ? lse[(b * s.Hq + h) * s.S + i] : 0.f;
  }
}

template <int DP, int kStage = DP>
constexpr size_t dkv_smem_bytes() {  // k, v, q, dO [64][kStage]; per query row
  return 4 * tile_bytes<kStage>(kKeyTile) + kKeyTile * (sizeof(int64_t) + 2 * sizeof(float));
}

// Grid: (key tiles, Hkv x chunks, B). Warp w owns keys k0 + 16w .. + 15.
template <int DP, int kStage = DP>
__global__ void __launch_bounds__(kThreads) dkv_tc_kernel(float* dk, float* dv, const uint16_t* dout,
                                                          const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                                          const float* lse, const float* row_deltas, TcShape s) {
  static_assert(kStage == DP || kStage == kChunk<DP>, "stage all of D or the block's chunk");
  constexpr int kC = kChunk<DP>, kChunks = DP / kC, kCTiles = kC / 8, kRowWords = kTileWords<kStage>;
  constexpr int kN = kPasses<DP, kStage>;
  LT_DYNAMIC_SMEM(smem);
  uint32_t* kw = reinterpret_cast<uint32_t*>(smem);
  uint32_t* vw = kw + kKeyTile * kRowWords;
  uint32_t* qw = vw + kKeyTile * kRowWords;
  uint32_t* dow = qw + kKeyTile * kRowWords;
  int64_t* query_first = reinterpret_cast<int64_t*>(dow + kKeyTile * kRowWords);  // 8-byte aligned: 64 rows a tile
  float* query_lse = reinterpret_cast<float*>(query_first + kKeyTile);
  float* delta = query_lse + kKeyTile;

  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kKeyTile, hk = blockIdx.y / kChunks, b = blockIdx.z;
  const int col0 = static_cast<int>(blockIdx.y % kChunks) * kC;
  const int64_t group = s.Hq / s.Hkv;
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
  const int64_t key[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
  // The query tiles that see some key of the block: from the block's first key (causal)
  // to the last query that sees its last key (last_seeing_query never decreases in j).
  const int64_t last_key = (k0 + kKeyTile < s.S ? k0 + kKeyTile : s.S) - 1;
  const int64_t qtile_first = k0 / kBlockRows, qtile_last = last_seeing_query(s, b, last_key) / kBlockRows;
  if constexpr (kN == 1) {
    // k and v stay staged; a query tile's q is copied in while the block computes the
    // previous tile's dv, its dO while it computes the tile's scores. Each thread's groups
    // of copies, oldest first, at the top of an iteration: [q], [dO].
    stage_tile<DP, DP>(kw, k, b, k0, s.Hkv, hk, 0, s);
    stage_tile<DP, DP>(vw, v, b, k0, s.Hkv, hk, 0, s);
    stage_tile<DP, DP>(qw, q, b, qtile_first * kBlockRows, s.Hq, hk * group, 0, s);
    cp_async_commit();
    stage_tile<DP, DP>(dow, dout, b, qtile_first * kBlockRows, s.Hq, hk * group, 0, s);
    cp_async_commit();
  } else {
    // A pass's k and q are copied in while the block computes the previous pass's dp^T (or,
    // for a query tile's first pass, the previous tile's dk), its v and dO while it computes
    // the pass's scores. Each thread's groups of copies, oldest first, at the top of a pass:
    // [k, q], [v, dO] (for a tile's first pass: [k, q restaged], [v, dO restaged], [q], [dO]).
    stage_tile<kStage, DP>(kw, k, b, k0, s.Hkv, hk, 0, s);
    stage_tile<kStage, DP>(qw, q, b, qtile_first * kBlockRows, s.Hq, hk * group, 0, s);
    cp_async_commit();
    stage_tile<kStage, DP>(vw, v, b, k0, s.Hkv, hk, 0, s);
    stage_tile<kStage, DP>(dow, dout, b, qtile_first * kBlockRows, s.Hq, hk * group, 0, s);
    cp_async_commit();
  }

  float dk_acc[kCTiles][4], dv_acc[kCTiles][4];  // columns col0 + ct*8 + 2t, +1 of keys g and g + 8
#pragma unroll
  for (int ct = 0; ct < kCTiles; ++ct)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[ct][e] = dv_acc[ct][e] = 0.f;

  for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
    for (int64_t qt = qtile_first; qt <= qtile_last; ++qt) {
      const int64_t q0 = qt * kBlockRows;
      // The next query tile (the same for the whole block): this head's next, or the next
      // head's first.
      const bool more = qt < qtile_last || h + 1 < (hk + 1) * group;
      const int64_t next_h = qt < qtile_last ? h : h + 1;
      const int64_t next_q0 = (qt < qtile_last ? qt + 1 : qtile_first) * kBlockRows;
      // s^T = k q^T and dp^T = v dO^T: the warp's 16 keys against the tile's 64 queries.
      float st[8][4], dpt[8][4];
      if constexpr (kN == 1) {
        stage_query_rows(query_first, query_lse, delta, lse, row_deltas, b, q0, h, s);
        wait_for_staged_tiles_but_the_newest();  // the tile's q (and k, v and the rows' values)
        tile_product<DP>(st, kw, qw, warp * 16);
        wait_for_staged_tiles();  // the tile's dO
        tile_product<DP>(dpt, vw, dow, warp * 16);
      } else {  // column passes, each staging its columns of all four tiles
        zero_tiles(st);
        zero_tiles(dpt);
        stage_query_rows(query_first, query_lse, delta, lse, row_deltas, b, q0, h, s);
#pragma unroll
        for (int pass = 0; pass < kN; ++pass) {
          const int c1 = (pass + 1) * kStage;  // the next pass's columns
          wait_for_staged_tiles_but_the_newest();  // the pass's k and q (and the rows' values)
          add_tile_product<kStage>(st, kw, qw, warp * 16);
          __syncthreads();  // k and q are read: the next pass's, or the block's q and the next tile's k
          if (c1 < DP) {
            stage_tile<kStage, DP>(kw, k, b, k0, s.Hkv, hk, c1, s);
            stage_tile<kStage, DP>(qw, q, b, q0, s.Hq, h, c1, s);
          } else {
            if (more) stage_tile<kStage, DP>(kw, k, b, k0, s.Hkv, hk, 0, s);
            if (col0 != pass * kStage) stage_tile<kStage, DP>(qw, q, b, q0, s.Hq, h, col0, s);
          }
          cp_async_commit();
          wait_for_staged_tiles_but_the_newest();  // the pass's v and dO
          add_tile_product<kStage>(dpt, vw, dow, warp * 16);
          __syncthreads();  // v and dO are read: the next pass's, or the next tile's v and the block's dO
          if (c1 < DP) {
            stage_tile<kStage, DP>(vw, v, b, k0, s.Hkv, hk, c1, s);
            stage_tile<kStage, DP>(dow, dout, b, q0, s.Hq, h, c1, s);
          } else {
            if (more) stage_tile<kStage, DP>(vw, v, b, k0, s.Hkv, hk, 0, s);
            if (col0 != pass * kStage) stage_tile<kStage, DP>(dow, dout, b, q0, s.Hq, h, col0, s);
          }
          cp_async_commit();
        }
        if (col0 != (kN - 1) * kStage) wait_for_staged_tiles_but_the_newest();  // the block's columns of q
      }
      // p^T and ds^T = p^T (dp^T - delta); 0 where the query does not see the key.
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = accumulator_column(nt, e);
          const int64_t i = q0 + r, j = key[e >> 1];
          const float p = j >= query_first[r] && j <= i ? expf(st[nt][e] * s.scale - query_lse[r]) : 0.f;
          st[nt][e] = p;
          dpt[nt][e] = p * (dpt[nt][e] - delta[r]);
        }
      // dk += ds^T q and dv += p^T dO (the block's columns), ds^T and p^T rounded to bf16.
      accumulate_product<kStage>(dk_acc, dpt, qw, col0 % kStage);
      stage_next_tile<kStage, DP>(more, qw, q, b, next_q0, s.Hq, next_h, 0, s);
      if constexpr (kN > 1) {
        if (col0 != (kN - 1) * kStage) wait_for_staged_tiles_but_the_newest();  // the block's columns of dO
      }
      accumulate_product<kStage>(dv_acc, st, dow, col0 % kStage);
      stage_next_tile<kStage, DP>(more, dow, dout, b, next_q0, s.Hq, next_h, 0, s);
    }

#pragma unroll
  for (int x = 0; x < 2; ++x) {
    if (key[x] >= s.S) continue;
    const int64_t off = ((b * s.S + key[x]) * s.Hkv + hk) * s.D;
#pragma unroll
    for (int ct = 0; ct < kCTiles; ++ct)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t d = col0 + accumulator_column(ct, e);
        if (d < s.D) {
          dk[off + d] = dk_acc[ct][2 * x + e] * s.scale;
          dv[off + d] = dv_acc[ct][2 * x + e];
        }
      }
  }
}

LT_TC_NAMESPACE_END
