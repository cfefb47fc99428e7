// Causal GQA attention on CPU, flash-attention style (contract in attention.h).
//
// Tiling: queries and keys both in tiles of kTile = 64, so the diagonal tile of a query
// tile is exactly the key tile with the same index and every row of it has at least one
// live key (the online softmax never sees a row whose running max is still -inf after
// the first key tile). Key tiles above the diagonal are never touched.
//
// Tile products are two register-blocked micro-kernels (AVX-512, fp32):
//   nt: C[M][64]  = A[M][D] * Bt[D][64]   (scores; K or V transposed into Bt once per
//                                          key tile and reused by every head of the group)
//   nn: C[M][N]  += sum_r A(m, r) * B[r][N] (P*V, P^T*dO, dS^T*Q, dS*K; A read through
//                                          strides, so P^T needs no transpose)
// Scores are kept in the log2 domain (scale * log2(e) folded in) so exp is exp2.
//
// Threads (OpenMP, the count in force; never fixed here):
//   forward: items (batch, kv head, query tile), all heads of the group inside one item
//            so the packed K tile is shared; heaviest query tiles first, dynamic schedule.
//   backward: dk/dv of one key tile are owned by one item, so GQA heads never race.
//     fused: items (batch, kv head); key tiles in order, dq += dS*K accumulated in place.
//     split: items (batch, kv head, key tile) for dk/dv, then (batch, kv head, query tile)
//            for dq, recomputing P and dS (7 tile products instead of 5).
//   Fused is used when the (batch, kv head) items balance over the threads; otherwise
//   split. Both add the same products in the same order (dq of a query tile sums key
//   tiles 0, 1, ... in both), so results are bitwise identical for any thread count.
// Backward overwrites dq, dk, dv.
#include "kernels/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/aligned_buffer.h"
#include "core/error.h"

#if defined(__AVX512F__)
#include <immintrin.h>
// GCC 12's AVX-512 headers seed unmasked intrinsics with _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports at every inlined use: a known false positive.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace lt {
namespace {

constexpr int64_t kTile = 64;  // query rows and keys per tile; 4 zmm of keys per score row
constexpr int kMR = 6;         // rows per register block: 6 x 4 accumulators = 24 zmm
constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kLn2 = 0.69314718055994530942f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Shape {
  int64_t B, S, Hq, Hkv, D, group;
  int64_t ldq, ldk;  // row strides of q/o/dout and of k/v (token-major)
  int64_t ntiles;
};

// Bt[d][c] = src[c][d] for c < cols, zero for cols <= c < kTile.
void pack_transposed(float* bt, const float* src, int64_t ld, int64_t cols, int64_t D) {
  for (int64_t c = 0; c < cols; ++c) {
    const float* row = src + c * ld;
    for (int64_t d = 0; d < D; ++d) bt[d * kTile + c] = row[d];
  }
  if (cols < kTile)
    for (int64_t d = 0; d < D; ++d) std::fill(bt + d * kTile + cols, bt + (d + 1) * kTile, 0.0f);
}

#if defined(__AVX512F__)

// 2^x for x <= ~0. n = round(x), f = x - n in [-1/2, 1/2]; 2^f = e^(f ln2) by Taylor to
// degree 7: the remainder is below (ln2/2)^8 / 8! * e^(ln2/2) < 1e-8, under fp32's half ulp.
// Inputs below -125 give exactly 0: that covers masked (-inf) lanes and keeps denormals,
// which cost a microcode assist per FMA, out of the tile products. NaN stays NaN.
inline __m512 exp2_ps(__m512 x) {
  const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-125.0f), _CMP_NLT_UQ);
  x = _mm512_max_ps(_mm512_set1_ps(-125.0f), x);
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  constexpr double l = 0.69314718055994530942;
  __m512 p = _mm512_set1_ps(float(l * l * l * l * l * l * l / 5040.0));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(float(l * l * l * l * l * l / 720.0)));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(float(l * l * l * l * l / 120.0)));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(float(l * l * l * l / 24.0)));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(float(l * l * l / 6.0)));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(float(l * l / 2.0)));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(float(l)));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(live, p, n);
}

inline __mmask16 first_lanes(int64_t n) {  // lanes [0, n) of a 16-lane vector, n in [0, 16]
  return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u);
}

// C[m][0:16*NV] = sum_d A[m * lda + d] * Bt[d][0:16*NV] for m < MR.
// (GCC keeps these accumulator arrays in registers only if the loops over them are fully
// unrolled before scalar replacement: hence the unroll pragmas, worth 2x.)
template <int MR, int NV>
void nt_block(float* c, const float* a, int64_t lda, const float* bt, int64_t D) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    const float* b = bt + d * kTile;
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_ps(b + 16 * v);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const __m512 x = _mm512_set1_ps(a[m * lda + d]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_fmadd_ps(x, bv[v], acc[m][v]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_store_ps(c + m * kTile + 16 * v, acc[m][v]);
}

// C[m][0:16*NV] += sum_{r < R} A[m * am + r * ar] * B[r * ldb][0:16*NV]; the last vector
// is limited to the lanes in `tail` (loads and stores), so rows may end anywhere.
template <int MR, int NV>
void nn_block(float* c, int64_t ldc, const float* a, int64_t am, int64_t ar, const float* b,
              int64_t ldb, int64_t R, __mmask16 tail) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 4
    for (int v = 0; v < NV - 1; ++v) acc[m][v] = _mm512_loadu_ps(c + m * ldc + 16 * v);
    acc[m][NV - 1] = _mm512_maskz_loadu_ps(tail, c + m * ldc + 16 * (NV - 1));
  }
  for (int64_t r = 0; r < R; ++r) {
    const float* br = b + r * ldb;
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV - 1; ++v) bv[v] = _mm512_loadu_ps(br + 16 * v);
    bv[NV - 1] = _mm512_maskz_loadu_ps(tail, br + 16 * (NV - 1));
    const float* ar_ = a + r * ar;
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const __m512 x = _mm512_set1_ps(ar_[m * am]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_fmadd_ps(x, bv[v], acc[m][v]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 4
    for (int v = 0; v < NV - 1; ++v) _mm512_storeu_ps(c + m * ldc + 16 * v, acc[m][v]);
    _mm512_mask_storeu_ps(c + m * ldc + 16 * (NV - 1), tail, acc[m][NV - 1]);
  }
}

using NtFn = void (*)(float*, const float*, int64_t, const float*, int64_t);
using NnFn = void (*)(float*, int64_t, const float*, int64_t, int64_t, const float*, int64_t,
                      int64_t, __mmask16);
#define LT_NT_ROW(mr) \
  { nt_block<mr, 1>, nt_block<mr, 2>, nt_block<mr, 3>, nt_block<mr, 4> }
#define LT_NN_ROW(mr) \
  { nn_block<mr, 1>, nn_block<mr, 2>, nn_block<mr, 3>, nn_block<mr, 4> }
constexpr NtFn kNt[kMR][4] = {LT_NT_ROW(1), LT_NT_ROW(2), LT_NT_ROW(3),
                              LT_NT_ROW(4), LT_NT_ROW(5), LT_NT_ROW(6)};
constexpr NnFn kNn[kMR][4] = {LT_NN_ROW(1), LT_NN_ROW(2), LT_NN_ROW(3),
                              LT_NN_ROW(4), LT_NN_ROW(5), LT_NN_ROW(6)};
#undef LT_NT_ROW
#undef LT_NN_ROW

#endif  // __AVX512F__

// Which part of a tile product can be skipped on a diagonal tile (key index c, query
// row r, both relative to the tile: live iff c <= r).
enum class Tri {
  kFull,   // off-diagonal: everything live
  kLower,  // A(m, r) is zero for r > m (P or dS with m = query row, r = key)
  kUpper,  // A(m, r) is zero for r < m (P^T or dS^T with m = key, r = query row)
};

#if defined(__AVX512F__)

// C[M][kTile] = A[M][D] (row stride lda) * Bt[D][kTile]. C is 64-byte aligned. With
// lower, row block [m0, m0 + mr) gets only the key vectors its rows can see; the
// columns beyond are left unwritten (the softmax and gradient rows mask them).
void nt(float* c, const float* a, int64_t lda, const float* bt, int64_t M, int64_t D, bool lower) {
  for (int64_t m0 = 0; m0 < M; m0 += kMR) {
    const int64_t mr = std::min<int64_t>(kMR, M - m0);
    const int64_t nv = lower ? std::min<int64_t>(4, (m0 + mr + 15) / 16) : 4;
    kNt[mr - 1][nv - 1](c + m0 * kTile, a + m0 * lda, lda, bt, D);
  }
}

// C[M][N] += sum_{r < R} A(m, r) * B[r][N]; A(m, r) = a[m * am + r * ar]; terms known to
// be zero by `tri` are skipped.
void nn(float* c, int64_t ldc, const float* a, int64_t am, int64_t ar, const float* b, int64_t ldb,
        int64_t R, int64_t M, int64_t N, Tri tri) {
  for (int64_t n0 = 0; n0 < N; n0 += 64) {  // 4 zmm of columns; B's chunk stays in L1
    const int64_t nc = std::min<int64_t>(64, N - n0);
    const int64_t nv = (nc + 15) / 16;
    const __mmask16 tail = first_lanes(nc - 16 * (nv - 1));
    for (int64_t m0 = 0; m0 < M; m0 += kMR) {
      const int64_t mr = std::min<int64_t>(kMR, M - m0);
      const int64_t r0 = tri == Tri::kUpper ? std::min(m0, R) : 0;
      const int64_t r1 = tri == Tri::kLower ? std::min(m0 + mr, R) : R;
      if (r1 <= r0) continue;
      kNn[mr - 1][nv - 1](c + m0 * ldc + n0, ldc, a + m0 * am + r0 * ar, am, ar, b + r0 * ldb + n0,
                          ldb, r1 - r0, tail);
    }
  }
}

// One score row of the forward: s (log2 domain after *c2) over `live` keys, online
// softmax update of the running max m and sum l; s becomes p = 2^(s - m_new).
// Returns the factor the output accumulator must be rescaled by.
inline float softmax_row(float* s, int64_t live, float c2, float& m, float& l) {
  __m512 x[4];
  __m512 mx = _mm512_set1_ps(kNegInf);
  for (int v = 0; v < 4; ++v) {
    const __mmask16 k = first_lanes(std::clamp<int64_t>(live - 16 * v, 0, 16));
    x[v] = _mm512_mask_mul_ps(_mm512_set1_ps(kNegInf), k, _mm512_load_ps(s + 16 * v),
                              _mm512_set1_ps(c2));
    mx = _mm512_max_ps(mx, x[v]);
  }
  const float m_new = std::max(m, _mm512_reduce_max_ps(mx));
  // m = -inf on the first tile: alpha = 0. exp2_ps, not a libm call: once per row per tile.
  const float alpha = _mm512_cvtss_f32(exp2_ps(_mm512_set1_ps(m - m_new)));
  const __m512 mv = _mm512_set1_ps(m_new);
  __m512 sum = _mm512_setzero_ps();
  for (int v = 0; v < 4; ++v) {
    const __m512 p = exp2_ps(_mm512_sub_ps(x[v], mv));
    _mm512_store_ps(s + 16 * v, p);
    sum = _mm512_add_ps(sum, p);
  }
  l = l * alpha + _mm512_reduce_add_ps(sum);
  m = m_new;
  return alpha;
}

// Backward elementwise: s <- p = 2^(s * c2 - lse2), dp <- ds = p * (dp - delta) * scale,
// keys at or beyond `live` are zero in both.
inline void grad_row(float* s, float* dp, int64_t live, float c2, float lse2, float delta,
                     float scale) {
  for (int v = 0; v < 4; ++v) {
    const __mmask16 k = first_lanes(std::clamp<int64_t>(live - 16 * v, 0, 16));
    const __m512 x =
        _mm512_fmsub_ps(_mm512_load_ps(s + 16 * v), _mm512_set1_ps(c2), _mm512_set1_ps(lse2));
    const __m512 p = _mm512_maskz_mov_ps(k, exp2_ps(x));
    const __m512 d = _mm512_sub_ps(_mm512_load_ps(dp + 16 * v), _mm512_set1_ps(delta));
    _mm512_store_ps(s + 16 * v, p);
    _mm512_store_ps(dp + 16 * v,
                    _mm512_maskz_mul_ps(k, _mm512_mul_ps(p, d), _mm512_set1_ps(scale)));
  }
}

inline void scale_row(float* x, int64_t n, float f) {
  const __m512 fv = _mm512_set1_ps(f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), fv));
  const __mmask16 k = first_lanes(n - i);
  _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), fv));
}

#else  // portable fallback with the same tiling (builds without AVX-512)

void nt(float* c, const float* a, int64_t lda, const float* bt, int64_t M, int64_t D, bool) {
  for (int64_t m = 0; m < M; ++m) {
    float* cm = c + m * kTile;
    for (int64_t j = 0; j < kTile; ++j) cm[j] = 0;
    for (int64_t d = 0; d < D; ++d) {
      const float x = a[m * lda + d];
#pragma omp simd
      for (int64_t j = 0; j < kTile; ++j) cm[j] += x * bt[d * kTile + j];
    }
  }
}

void nn(float* c, int64_t ldc, const float* a, int64_t am, int64_t ar, const float* b, int64_t ldb,
        int64_t R, int64_t M, int64_t N, Tri) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t r = 0; r < R; ++r) {
      const float x = a[m * am + r * ar];
#pragma omp simd
      for (int64_t n = 0; n < N; ++n) c[m * ldc + n] += x * b[r * ldb + n];
    }
}

inline float softmax_row(float* s, int64_t live, float c2, float& m, float& l) {
  float mx = kNegInf;
  for (int64_t j = 0; j < kTile; ++j) {
    s[j] = j < live ? s[j] * c2 : kNegInf;
    mx = std::max(mx, s[j]);
  }
  const float m_new = std::max(m, mx);
  const float alpha = std::exp2(m - m_new);
  float sum = 0;
  for (int64_t j = 0; j < kTile; ++j) sum += (s[j] = std::exp2(s[j] - m_new));
  l = l * alpha + sum;
  m = m_new;
  return alpha;
}

inline void grad_row(float* s, float* dp, int64_t live, float c2, float lse2, float delta,
                     float scale) {
  for (int64_t j = 0; j < kTile; ++j) {
    const float p = j < live ? std::exp2(s[j] * c2 - lse2) : 0.0f;
    s[j] = p;
    dp[j] = p * (dp[j] - delta) * scale;
  }
}

inline void scale_row(float* x, int64_t n, float f) {
  for (int64_t i = 0; i < n; ++i) x[i] *= f;
}

#endif

// Per-thread scratch. Sized once per parallel region.
struct Scratch {
  AlignedBuffer<float> kt, vt;  // [D][kTile] packed K^T, V^T of the current key tile
  AlignedBuffer<float> s, dp;   // [kTile][kTile] scores / P and dP / dS
  AlignedBuffer<float> acc;     // forward: [group][kTile][D] unnormalized O
  AlignedBuffer<float> dk, dv;  // backward: [kTile][D]
  AlignedBuffer<float> m, l;    // forward: [group][kTile] running max (log2) and sum
};

// Forward for (b, kv head hk, query tile qt), all heads of the group.
void forward_item(const Shape& sh, Scratch& w, float* o, float* lse, const float* q, const float* k,
                  const float* v, int64_t b, int64_t hk, int64_t qt, float scale) {
  const int64_t D = sh.D, S = sh.S, G = sh.group;
  const int64_t i0 = qt * kTile, rows = std::min(kTile, S - i0);
  const float c2 = scale * kLog2e;
  std::fill(w.acc.data(), w.acc.data() + G * kTile * D, 0.0f);
  std::fill(w.m.data(), w.m.data() + G * kTile, kNegInf);
  std::fill(w.l.data(), w.l.data() + G * kTile, 0.0f);
  for (int64_t kt = 0; kt <= qt; ++kt) {
    const int64_t j0 = kt * kTile, cols = std::min(kTile, S - j0);
    const bool diag = kt == qt;
    pack_transposed(w.kt.data(), k + (b * S + j0) * sh.ldk + hk * D, sh.ldk, cols, D);
    const float* vt = v + (b * S + j0) * sh.ldk + hk * D;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t h = hk * G + g;
      float* acc = w.acc.data() + g * kTile * D;
      float* m = w.m.data() + g * kTile;
      float* l = w.l.data() + g * kTile;
      nt(w.s.data(), q + (b * S + i0) * sh.ldq + h * D, sh.ldq, w.kt.data(), rows, D, diag);
      for (int64_t r = 0; r < rows; ++r) {
        // On the diagonal tile (j0 == i0) row r sees keys 0..r of it.
        const int64_t live = diag ? r + 1 : cols;
        const float alpha = softmax_row(w.s.data() + r * kTile, live, c2, m[r], l[r]);
        if (alpha != 1.0f) scale_row(acc + r * D, D, alpha);
      }
      nn(acc, D, w.s.data(), kTile, 1, vt, sh.ldk, cols, rows, D, diag ? Tri::kLower : Tri::kFull);
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    const int64_t h = hk * G + g;
    for (int64_t r = 0; r < rows; ++r) {
      const float l = w.l[g * kTile + r];
      const float* acc = w.acc.data() + (g * kTile + r) * D;
      float* orow = o + (b * S + i0 + r) * sh.ldq + h * D;
      const float inv = 1.0f / l;
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) orow[d] = acc[d] * inv;
      lse[(b * sh.Hq + h) * S + i0 + r] = (w.m[g * kTile + r] + std::log2(l)) * kLn2;
    }
  }
}

struct BwdArgs {
  float *dq, *dk, *dv;
  const float *dout, *q, *k, *v, *lse, *delta;
  float scale;
};

// P and dS of tile (query tile qt of head h, key tile whose K^T, V^T are packed in w):
// w.s <- P, w.dp <- dS. Identical arithmetic whichever pass calls it.
void grad_tile(const Shape& sh, Scratch& w, const BwdArgs& a, int64_t b, int64_t h, int64_t qt,
               int64_t kt) {
  const int64_t D = sh.D, S = sh.S;
  const int64_t i0 = qt * kTile, rows = std::min(kTile, S - i0);
  const int64_t j0 = kt * kTile, cols = std::min(kTile, S - j0);
  const float c2 = a.scale * kLog2e;
  nt(w.s.data(), a.q + (b * S + i0) * sh.ldq + h * D, sh.ldq, w.kt.data(), rows, D, qt == kt);
  nt(w.dp.data(), a.dout + (b * S + i0) * sh.ldq + h * D, sh.ldq, w.vt.data(), rows, D, qt == kt);
  const float* lse = a.lse + (b * sh.Hq + h) * S + i0;
  const float* delta = a.delta + (b * sh.Hq + h) * S + i0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t live = kt == qt ? r + 1 : cols;
    grad_row(w.s.data() + r * kTile, w.dp.data() + r * kTile, live, c2, lse[r] * kLog2e, delta[r],
             a.scale);
  }
}

void pack_kv(const Shape& sh, Scratch& w, const BwdArgs& a, int64_t b, int64_t hk, int64_t kt) {
  const int64_t j0 = kt * kTile, cols = std::min(kTile, sh.S - j0);
  const int64_t off = (b * sh.S + j0) * sh.ldk + hk * sh.D;
  pack_transposed(w.kt.data(), a.k + off, sh.ldk, cols, sh.D);
  pack_transposed(w.vt.data(), a.v + off, sh.ldk, cols, sh.D);
}

// dq rows of tile (b, h, qt) += dS * K of key tile kt (dS in w.dp).
void add_dq(const Shape& sh, Scratch& w, const BwdArgs& a, int64_t b, int64_t h, int64_t hk,
            int64_t qt, int64_t kt) {
  const int64_t i0 = qt * kTile, rows = std::min(kTile, sh.S - i0);
  const int64_t j0 = kt * kTile, cols = std::min(kTile, sh.S - j0);
  nn(a.dq + (b * sh.S + i0) * sh.ldq + h * sh.D, sh.ldq, w.dp.data(), kTile, 1,
     a.k + (b * sh.S + j0) * sh.ldk + hk * sh.D, sh.ldk, cols, rows, sh.D,
     qt == kt ? Tri::kLower : Tri::kFull);
}

// dk, dv of key tile (b, hk, kt) over every head of the group and every query tile at or
// below the diagonal; with_dq also adds this key tile's share to dq.
void backward_kv_tile(const Shape& sh, Scratch& w, const BwdArgs& a, int64_t b, int64_t hk,
                      int64_t kt, bool with_dq) {
  const int64_t D = sh.D, S = sh.S;
  const int64_t j0 = kt * kTile, cols = std::min(kTile, S - j0);
  pack_kv(sh, w, a, b, hk, kt);
  std::fill(w.dk.data(), w.dk.data() + kTile * D, 0.0f);
  std::fill(w.dv.data(), w.dv.data() + kTile * D, 0.0f);
  for (int64_t g = 0; g < sh.group; ++g) {
    const int64_t h = hk * sh.group + g;
    for (int64_t qt = kt; qt < sh.ntiles; ++qt) {
      const int64_t i0 = qt * kTile, rows = std::min(kTile, S - i0);
      grad_tile(sh, w, a, b, h, qt, kt);
      const int64_t qoff = (b * S + i0) * sh.ldq + h * D;
      // dV[c] += sum_r P[r][c] dO[r];  dK[c] += sum_r dS[r][c] Q[r]
      const Tri tri = qt == kt ? Tri::kUpper : Tri::kFull;
      nn(w.dv.data(), D, w.s.data(), 1, kTile, a.dout + qoff, sh.ldq, rows, cols, D, tri);
      nn(w.dk.data(), D, w.dp.data(), 1, kTile, a.q + qoff, sh.ldq, rows, cols, D, tri);
      if (with_dq) add_dq(sh, w, a, b, h, hk, qt, kt);
    }
  }
  for (int64_t c = 0; c < cols; ++c) {
    const int64_t off = (b * S + j0 + c) * sh.ldk + hk * D;
    std::memcpy(a.dk + off, w.dk.data() + c * D, D * sizeof(float));
    std::memcpy(a.dv + off, w.dv.data() + c * D, D * sizeof(float));
  }
}

void zero_dq_rows(const Shape& sh, const BwdArgs& a, int64_t b, int64_t hk, int64_t i0,
                  int64_t rows) {
  for (int64_t i = i0; i < i0 + rows; ++i)
    std::fill_n(a.dq + (b * sh.S + i) * sh.ldq + hk * sh.group * sh.D, sh.group * sh.D, 0.0f);
}

Shape make_shape(int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D) {
  LT_ASSERT(B >= 0 && S >= 0 && D > 0 && Hkv > 0 && Hq % Hkv == 0,
            "attention: need Hq a multiple of Hkv and D > 0");
  return Shape{B, S, Hq, Hkv, D, Hq / Hkv, Hq * D, Hkv * D, (S + kTile - 1) / kTile};
}

}  // namespace

void attention_forward(float* o, float* lse, const float* q, const float* k, const float* v,
                       int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, float scale) {
  const Shape sh = make_shape(B, S, Hq, Hkv, D);
  const int64_t heads = B * Hkv, items = heads * sh.ntiles;
  if (items == 0) return;
#pragma omp parallel
  {
    Scratch w;
    w.kt.resize(D * kTile);
    w.s.resize(kTile * kTile);
    w.acc.resize(sh.group * kTile * D);
    w.m.resize(sh.group * kTile);
    w.l.resize(sh.group * kTile);
    // Causal rows are unequal: query tile qt costs qt + 1 key tiles. Hand out the
    // heaviest first so the dynamic schedule ends level.
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t qt = sh.ntiles - 1 - it / heads, bh = it % heads;
      forward_item(sh, w, o, lse, q, k, v, bh / Hkv, bh % Hkv, qt, scale);
    }
  }
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* o, const float* lse, int64_t B,
                        int64_t S, int64_t Hq, int64_t Hkv, int64_t D, float scale) {
  const Shape sh = make_shape(B, S, Hq, Hkv, D);
  const int64_t heads = B * Hkv;
  if (heads * S == 0) return;
  // delta[b, h, i] = sum_d dO * O, one fixed-order dot per row.
  AlignedBuffer<float> delta(B * Hq * S);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < B * S; ++t)
    for (int64_t h = 0; h < Hq; ++h) {
      const float* x = dout + (t * Hq + h) * D;
      const float* y = o + (t * Hq + h) * D;
      float s = 0;
      // Vectorized: a scalar chain here would cost a tenth of the backward. The order is
      // fixed at compile time, so the result does not depend on the thread count.
#pragma omp simd reduction(+ : s)
      for (int64_t d = 0; d < D; ++d) s += x[d] * y[d];
      delta[((t / S) * Hq + h) * S + t % S] = s;
    }
  const BwdArgs a{dq, dk, dv, dout, q, k, v, lse, delta.data(), scale};

  // Fused if the equal-cost (b, kv head) items keep the threads at least 75% busy: split
  // does 7/5 of the work, so below that it wins.
  const int64_t nt = std::max(1, omp_get_max_threads());
  const int64_t rounds = (heads + nt - 1) / nt;
  const bool fused = 4 * heads >= 3 * rounds * nt;

#pragma omp parallel
  {
    Scratch w;
    w.kt.resize(D * kTile);
    w.vt.resize(D * kTile);
    w.s.resize(kTile * kTile);
    w.dp.resize(kTile * kTile);
    w.dk.resize(kTile * D);
    w.dv.resize(kTile * D);
    if (fused) {
#pragma omp for schedule(dynamic, 1)
      for (int64_t bh = 0; bh < heads; ++bh) {
        const int64_t b = bh / Hkv, hk = bh % Hkv;
        zero_dq_rows(sh, a, b, hk, 0, S);
        for (int64_t kt = 0; kt < sh.ntiles; ++kt) backward_kv_tile(sh, w, a, b, hk, kt, true);
      }
    } else {
      // Key tile kt costs ntiles - kt query tiles: heaviest first.
#pragma omp for schedule(dynamic, 1)
      for (int64_t it = 0; it < heads * sh.ntiles; ++it) {
        const int64_t kt = it / heads, bh = it % heads;
        backward_kv_tile(sh, w, a, bh / Hkv, bh % Hkv, kt, false);
      }
#pragma omp for schedule(dynamic, 1)
      for (int64_t it = 0; it < heads * sh.ntiles; ++it) {
        const int64_t qt = sh.ntiles - 1 - it / heads, bh = it % heads;
        const int64_t b = bh / Hkv, hk = bh % Hkv;
        const int64_t i0 = qt * kTile;
        zero_dq_rows(sh, a, b, hk, i0, std::min(kTile, S - i0));
        for (int64_t kt = 0; kt <= qt; ++kt) {
          pack_kv(sh, w, a, b, hk, kt);
          for (int64_t g = 0; g < sh.group; ++g) {
            const int64_t h = hk * sh.group + g;
            grad_tile(sh, w, a, b, h, qt, kt);
            add_dq(sh, w, a, b, h, hk, qt, kt);
          }
        }
      }
    }
  }
}

}  // namespace lt
