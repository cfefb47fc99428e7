// Causal GQA attention on CPU: the tiles, buffers and constants every ISA level shares,
// and the contract of the micro-kernels each level writes (baseline code: include it
// before core/isa_target.h).
//
// Tiling: queries and keys both in tiles of kTile = 64, so the diagonal tile of a query
// tile is exactly the key tile with the same index and every row of it has at least one
// live key (the online softmax never sees a row whose running max is still -inf after
// the first key tile). Key tiles above the diagonal are never touched.
// Documents (doc_start, attention.h): query row i sees keys [doc_start[i], i]. A query
// tile starts at the key tile holding its first row's doc_start, and with each key tile
// works on the prefix of its rows that sees any of the tile's keys (doc_start is
// non-decreasing within a row of the batch, so those rows are a prefix): every row it
// hands a micro-kernel again has at least one live key, whose range is [lo, hi) of the
// tile (lo > 0 only where the row's document starts inside the tile). Without
// doc_start, lo = 0, every row, every key tile from 0: the calls the kernels made before.
// Sliding windows (attention.h's window): query i's first key becomes max(doc_start[i],
// i - window + 1), again non-decreasing along a row and <= i, so the driver folds the
// window into one array of first keys (KeyStarts) and Docs runs unchanged over it: key
// tiles wholly before a query tile's window are skipped like other documents' tiles, and
// the edge tile's lo masks the keys before the window.
// Scores are kept in the log2 domain (scale * log2(e) folded in) so exp is exp2.
//
// Micro-kernels: a level supplies a struct `Micro` of static functions (the driver,
// attention_driver.h, is a template over it). Each must be a pure function of the values
// it reads (no dependence on the thread, on timing or on where scratch lies), which is
// what makes the results bitwise identical for any thread count.
//   nt(c, a, lda, bt, M, D, lower)
//       C[M][kTile] = A[M][D] (row stride lda) * Bt[D][kTile]; c is 64-byte aligned with
//       row stride kTile. The scores and dP tiles; K or V transposed into Bt once per key
//       tile and reused by every head of the group. With lower (a diagonal tile), row r's
//       columns beyond r may be left unwritten: whatever is there, NaN included, is
//       masked by softmax_row and grad_row.
//   nn(c, ldc, a, am, ar, b, ldb, R, M, N, tri)
//       C[M][N] += sum_{r < R} A(m, r) * B[r][N], A(m, r) = a[m * am + r * ar], so P^T
//       needs no transpose. P*V, P^T*dO, dS^T*Q, dS*K. Terms that `tri` says are zero may
//       be skipped.
//   softmax_row(s, lo, hi, c2, m, l) -> alpha
//       One forward score row: keys [lo, hi) of s[0, kTile) are real, lo < hi. s_j <- p_j =
//       2^(c2 s_j - m_new) for lo <= j < hi and exactly 0 elsewhere (all kTile written; nn
//       reads them as zeros), m_new = max(m, max_j c2 s_j); l <- l * alpha + sum_j p_j;
//       m <- m_new; returns alpha = 2^(m_old - m_new) (0 on the first tile, m_old = -inf).
//   grad_row(s, dp, lo, hi, c2, lse2, delta, scale)
//       s_j <- p_j = 2^(c2 s_j - lse2), dp_j <- dS_j = p_j (dp_j - delta) scale for
//       lo <= j < hi, both exactly 0 elsewhere (all kTile written).
//   scale_row(x, n, f): x[0, n) *= f.
//   pack_transposed(bt, src, ld, cols, D): as the baseline pack_transposed below.
// Their exp2 is a polynomial (no libm call): 2^n times the degree-7 Taylor polynomial of
// 2^f, |f| <= 1/2 (kExp2Taylor; truncation under fp32's half ulp, within 3 ulp with the
// rounding of its evaluation, as tests/kernels/attention_test.cpp derives) for arguments
// in [-125, 0]; exactly 0 below -125 (masked lanes, and no denormals in the tile
// products, which cost a microcode assist per FMA); NaN kept NaN.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "kernels/cpu/attention.h"

namespace lt::attention_tiles {

constexpr int64_t kTile = 64;  // query rows and keys per tile
constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kLn2 = 0.69314718055994530942f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// 2^(-125) is the smallest power of two whose products with the polynomial (>= 1/sqrt 2)
// stay normal; exp2 flushes arguments below it to 0.
constexpr float kExp2Min = -125.0f;

// ln2^k / k!, k = 0..7: 2^f = e^(f ln2) by Taylor to degree 7 for f in [-1/2, 1/2]; the
// remainder is below (ln2/2)^8 / 8! * e^(ln2/2) < 1e-8, under fp32's half ulp.
constexpr double kLn2d = 0.69314718055994530942;
constexpr float kExp2Taylor[8] = {
    1.0f,
    float(kLn2d),
    float(kLn2d* kLn2d / 2.0),
    float(kLn2d* kLn2d* kLn2d / 6.0),
    float(kLn2d* kLn2d* kLn2d* kLn2d / 24.0),
    float(kLn2d* kLn2d* kLn2d* kLn2d* kLn2d / 120.0),
    float(kLn2d* kLn2d* kLn2d* kLn2d* kLn2d* kLn2d / 720.0),
    float(kLn2d* kLn2d* kLn2d* kLn2d* kLn2d* kLn2d* kLn2d / 5040.0),
};

struct Shape {
  int64_t B, S, Hq, Hkv, D, group;
  int64_t ldq, ldk;  // row strides of q/o/dout and of k/v (token-major)
  int64_t ntiles;
  const int32_t* doc_start;  // [B*S] or null (attention.h)
};

inline Shape make_shape(int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D,
                        const int32_t* doc_start) {
  LT_ASSERT(B >= 0 && S >= 0 && D > 0 && Hkv > 0 && Hq % Hkv == 0,
            "attention: need Hq a multiple of Hkv and D > 0");
  return Shape{B, S, Hq, Hkv, D, Hq / Hkv, Hq * D, Hkv * D, (S + kTile - 1) / kTile, doc_start};
}

// Each token's first visible key, max(doc_start[i], i - window + 1), when a window cuts
// anything (0 < window < S); otherwise it only forwards doc_start, so that attention
// without a window is the same calls as before windows existed.
class KeyStarts {
 public:
  KeyStarts(const int32_t* doc_start, int64_t B, int64_t S, int64_t window) : ptr_(doc_start) {
    if (window <= 0 || window >= S) return;
    starts_.resize(static_cast<size_t>(B * S));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t t = b * S + i;
        const int64_t from = std::max<int64_t>(doc_start ? doc_start[t] : 0, i - window + 1);
        starts_[static_cast<size_t>(t)] = static_cast<int32_t>(from);
      }
    ptr_ = starts_.data();
  }
  const int32_t* get() const { return ptr_; }

 private:
  const int32_t* ptr_;
  std::vector<int32_t> starts_;
};

// Where the documents of batch row b cut the tiles (all trivial without doc_start).
struct Docs {
  const int32_t* ds = nullptr;  // doc_start of row b, or null
  int64_t S = 0, ntiles = 0;
  Docs(const Shape& sh, int64_t b)
      : ds(sh.doc_start ? sh.doc_start + b * sh.S : nullptr), S(sh.S), ntiles(sh.ntiles) {}
  // The first key tile query tile qt sees: the one holding its first row's doc start.
  int64_t first_key_tile(int64_t qt) const { return ds ? ds[qt * kTile] / kTile : 0; }
  // The last query tile that sees key tile kt: the one holding the last query whose
  // document holds the tile's last key.
  int64_t last_query_tile(int64_t kt) const {
    if (!ds) return ntiles - 1;
    const int64_t j = std::min(S, (kt + 1) * kTile) - 1;
    return (std::upper_bound(ds + j, ds + S, int32_t(j)) - ds - 1) / kTile;
  }
  // Of the `rows` query rows from i0, how many see a key before `key_end`: a prefix.
  int64_t rows_seeing(int64_t i0, int64_t rows, int64_t key_end) const {
    if (!ds) return rows;
    return std::lower_bound(ds + i0, ds + i0 + rows, int32_t(key_end)) - (ds + i0);
  }
  // Query i's first live key in the key tile from j0, relative to it.
  int64_t lo(int64_t i, int64_t j0) const { return ds ? std::max<int64_t>(ds[i] - j0, 0) : 0; }
};

// Which part of a tile product can be skipped on a diagonal tile (key index c, query
// row r, both relative to the tile: live iff c <= r).
enum class Tri {
  kFull,   // off-diagonal: everything live
  kLower,  // A(m, r) is zero for r > m (P or dS with m = query row, r = key)
  kUpper,  // A(m, r) is zero for r < m (P^T or dS^T with m = key, r = query row)
};

// Per-thread scratch, sized once per parallel region.
struct Scratch {
  AlignedBuffer<float> kt, vt;  // [D][kTile] packed K^T, V^T of the current key tile
  // [kTile][D] rows of a V, K, Q or dO tile copied out of the token-major tensors, where
  // rows lie Hkv*D or Hq*D floats apart: at such power-of-two strides a tile's rows share
  // a few L1 sets and evict each other; packed, nn's B operand stays in L1.
  AlignedBuffer<float> vr, kr, qr, dor;
  AlignedBuffer<float> s, dp;   // [kTile][kTile] scores / P and dP / dS
  AlignedBuffer<float> acc;     // forward: [group][kTile][D] unnormalized O
  AlignedBuffer<float> dk, dv;  // backward: [kTile][D]
  AlignedBuffer<float> m, l;    // forward: [group][kTile] running max (log2) and sum
};

struct BwdArgs {
  float *dq, *dk, *dv;
  const float *dout, *q, *k, *v, *lse, *delta;
  float scale;
};

// Bt[d][c] = src[c][d] for c < cols, zero for cols <= c < kTile.
inline void pack_transposed(float* bt, const float* src, int64_t ld, int64_t cols, int64_t D) {
  for (int64_t c = 0; c < cols; ++c) {
    const float* row = src + c * ld;
    for (int64_t d = 0; d < D; ++d) bt[d * kTile + c] = row[d];
  }
  if (cols < kTile)
    for (int64_t d = 0; d < D; ++d) std::fill(bt + d * kTile + cols, bt + (d + 1) * kTile, 0.0f);
}

// dst[r][0:D] = src[r * ld][0:D] for r < rows.
inline void pack_rows(float* dst, const float* src, int64_t ld, int64_t rows, int64_t D) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * D, src + r * ld, D * sizeof(float));
}

// Asks for rows [0, rows) of a tile (D floats each, ld apart) to be brought into cache
// while the current tile computes: the driver's items jump between heads, so the next
// tile's rows are usually in L3 or DRAM, and the packing loads would wait for them.
inline void prefetch_rows(const float* src, int64_t ld, int64_t rows, int64_t D) {
  constexpr int64_t kLine = 64 / sizeof(float);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < D; d += kLine) __builtin_prefetch(src + r * ld + d, 0, 3);
}

// dq = 0 for query rows [i0, i0 + rows) of every head of kv head hk's group.
inline void zero_dq_rows(const Shape& sh, const BwdArgs& a, int64_t b, int64_t hk, int64_t i0,
                         int64_t rows) {
  for (int64_t i = i0; i < i0 + rows; ++i)
    std::fill_n(a.dq + (b * sh.S + i) * sh.ldq + hk * sh.group * sh.D, sh.group * sh.D, 0.0f);
}

}  // namespace lt::attention_tiles
