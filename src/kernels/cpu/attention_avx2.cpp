// Causal GQA attention, AVX2 level: 8-lane ymm micro-kernels (contract in
// attention_tiles.h) under the shared driver (attention_driver.h), sized for the 16 ymm
// registers AVX2 has (AVX-512 has 32):
//   nt: C[M][64] = A[M][D] * Bt[D][64] in blocks of 6 rows x 2 ymm (16 keys): 12
//       accumulators, 2 B vectors, 1 broadcast = 15 registers; per d, 12 FMAs for 8 loads.
//       Chunks of 16 keys outside, row blocks inside, so a chunk of Bt stays in L1.
//   nn: C[M][N] += A * B in the same 6 x 16 blocks over chunks of 16 columns; a row that
//       ends inside a vector uses maskload / maskstore, instantiated only where needed so
//       the D = 64 path runs plain loads.
// Lane masks come from an integer compare with the lane index, blends replace AVX-512's
// mask registers, and 2^n is built in the exponent bits instead of scalef.
#include <immintrin.h>

#include "kernels/cpu/attention_tiles.h"

#define LT_ISA_TARGET 1
#include "core/isa_target.h"

#include "kernels/cpu/attention_pack_avx.h"

namespace lt::LT_ISA_NS {
namespace {

using namespace ::lt::attention_tiles;

constexpr int kMR = 6;  // rows per register block (see the header comment)
constexpr int kNV = 2;  // ymm vectors (8 columns each) per register block

// 2^x (contract in attention_tiles.h): n = round(x), f = x - n in [-1/2, 1/2], 2^f by the
// Taylor polynomial (the same coefficients and FMA chain as the AVX-512 level), times 2^n
// put together in the exponent field. The clamp at 127 keeps 2^n finite; our arguments
// are <= ~0, so it never binds in use.
inline __m256 exp2_ps(__m256 x) {
  const __m256 live = _mm256_cmp_ps(x, _mm256_set1_ps(kExp2Min), _CMP_NLT_UQ);  // NaN: live
  // max / min return their second operand when either is NaN: NaN passes through.
  x = _mm256_max_ps(_mm256_set1_ps(kExp2Min), x);
  x = _mm256_min_ps(_mm256_set1_ps(127.0f), x);
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(x, n);
  __m256 p = _mm256_set1_ps(kExp2Taylor[7]);
  for (int i = 6; i >= 0; --i) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kExp2Taylor[i]));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(live, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

// All-ones in lanes [0, n) of an 8-lane vector (any n: none below 0, all from 8).
inline __m256i first_lanes(int64_t n) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::clamp<int64_t>(n, 0, 8))), lane);
}

// All-ones in lanes [lo - 8v, hi - 8v) of vector v of a score row: keys [lo, hi).
inline __m256 live_lanes(int64_t lo, int64_t hi, int v) {
  return _mm256_castsi256_ps(_mm256_andnot_si256(first_lanes(lo - 8 * v), first_lanes(hi - 8 * v)));
}

inline float reduce_max(__m256 x) {
  __m128 v = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  v = _mm_max_ps(v, _mm_movehl_ps(v, v));
  v = _mm_max_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}

inline float reduce_add(__m256 x) {
  __m128 v = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}

// C[m][0:8*NV] = sum_d A[m * lda + d] * Bt[d][0:8*NV] for m < MR (Bt row stride kTile).
// (GCC keeps these accumulator arrays in registers only if the loops over them are fully
// unrolled before scalar replacement: hence the unroll pragmas.)
template <int MR, int NV>
void nt_block(float* c, const float* a, int64_t lda, const float* bt, int64_t D) {
  __m256 acc[MR][NV];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[m][v] = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    const float* b = bt + d * kTile;
    __m256 bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_load_ps(b + 8 * v);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const __m256 x = _mm256_broadcast_ss(a + m * lda + d);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm256_fmadd_ps(x, bv[v], acc[m][v]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) _mm256_store_ps(c + m * kTile + 8 * v, acc[m][v]);
}

// Loads and stores of one 8-column vector; with Tail, only the lanes in `tail`.
template <bool Tail>
inline __m256 load_cols(const float* p, __m256i tail) {
  if constexpr (Tail) return _mm256_maskload_ps(p, tail);
  return _mm256_loadu_ps(p);
}
template <bool Tail>
inline void store_cols(float* p, __m256i tail, __m256 x) {
  if constexpr (Tail)
    _mm256_maskstore_ps(p, tail, x);
  else
    _mm256_storeu_ps(p, x);
}

// C[m][0:8*NV] += sum_{r < R} A[m * am + r * ar] * B[r * ldb][0:8*NV]; with Tail the last
// vector is limited to the lanes in `tail`.
template <int MR, int NV, bool Tail>
void nn_block(float* c, int64_t ldc, const float* a, int64_t am, int64_t ar, const float* b,
              int64_t ldb, int64_t R, __m256i tail) {
  __m256 acc[MR][NV];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    if constexpr (NV > 1) acc[m][0] = _mm256_loadu_ps(c + m * ldc);
    acc[m][NV - 1] = load_cols<Tail>(c + m * ldc + 8 * (NV - 1), tail);
  }
  for (int64_t r = 0; r < R; ++r) {
    const float* br = b + r * ldb;
    __m256 bv[NV];
    if constexpr (NV > 1) bv[0] = _mm256_loadu_ps(br);
    bv[NV - 1] = load_cols<Tail>(br + 8 * (NV - 1), tail);
    const float* ar_ = a + r * ar;
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const __m256 x = _mm256_broadcast_ss(ar_ + m * am);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm256_fmadd_ps(x, bv[v], acc[m][v]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    if constexpr (NV > 1) _mm256_storeu_ps(c + m * ldc, acc[m][0]);
    store_cols<Tail>(c + m * ldc + 8 * (NV - 1), tail, acc[m][NV - 1]);
  }
}
static_assert(kNV == 2, "nn_block has a plain first vector and a maybe-masked last one");

using NtFn = void (*)(float*, const float*, int64_t, const float*, int64_t);
using NnFn = void (*)(float*, int64_t, const float*, int64_t, int64_t, const float*, int64_t,
                      int64_t, __m256i);
#define LT_NT_ROW(mr) \
  { nt_block<mr, 1>, nt_block<mr, 2> }
// clang-format off
#define LT_NN_ROW(mr)                                 \
  { {nn_block<mr, 1, false>, nn_block<mr, 1, true>},  \
    {nn_block<mr, 2, false>, nn_block<mr, 2, true>} }
// clang-format on
constexpr NtFn kNt[kMR][kNV] = {LT_NT_ROW(1), LT_NT_ROW(2), LT_NT_ROW(3),
                                LT_NT_ROW(4), LT_NT_ROW(5), LT_NT_ROW(6)};
constexpr NnFn kNn[kMR][kNV][2] = {LT_NN_ROW(1), LT_NN_ROW(2), LT_NN_ROW(3),
                                   LT_NN_ROW(4), LT_NN_ROW(5), LT_NN_ROW(6)};
#undef LT_NT_ROW
#undef LT_NN_ROW

constexpr int kRowVecs = int(kTile / 8);  // ymm vectors per score row

struct Avx2Micro {
  // With lower, row block [m0, m0 + mr) gets only the key vectors its rows can see.
  static void nt(float* c, const float* a, int64_t lda, const float* bt, int64_t M, int64_t D,
                 bool lower) {
    for (int64_t v0 = 0; v0 < kRowVecs; v0 += kNV) {  // Bt's chunk, D x 16, stays in L1
      // With lower, rows below 8 * v0 see none of this chunk's keys.
      const int64_t m_first = lower ? std::min<int64_t>(M, 8 * v0) / kMR * kMR : 0;
      for (int64_t m0 = m_first; m0 < M; m0 += kMR) {
        const int64_t mr = std::min<int64_t>(kMR, M - m0);
        const int64_t vecs = lower ? std::min<int64_t>(kRowVecs, (m0 + mr + 7) / 8) : kRowVecs;
        if (vecs <= v0) continue;
        const int64_t nv = std::min<int64_t>(kNV, vecs - v0);
        kNt[mr - 1][nv - 1](c + m0 * kTile + 8 * v0, a + m0 * lda, lda, bt + 8 * v0, D);
      }
    }
  }

  static void nn(float* c, int64_t ldc, const float* a, int64_t am, int64_t ar, const float* b,
                 int64_t ldb, int64_t R, int64_t M, int64_t N, Tri tri) {
    for (int64_t n0 = 0; n0 < N; n0 += 8 * kNV) {  // B's chunk, R x 16, stays in L1
      const int64_t nc = std::min<int64_t>(8 * kNV, N - n0);
      const int64_t nv = (nc + 7) / 8, last = nc - 8 * (nv - 1);
      const __m256i tail = first_lanes(last);
      const int tailed = last < 8 ? 1 : 0;
      for (int64_t m0 = 0; m0 < M; m0 += kMR) {
        const int64_t mr = std::min<int64_t>(kMR, M - m0);
        const int64_t r0 = tri == Tri::kUpper ? std::min(m0, R) : 0;
        const int64_t r1 = tri == Tri::kLower ? std::min(m0 + mr, R) : R;
        if (r1 <= r0) continue;
        kNn[mr - 1][nv - 1][tailed](c + m0 * ldc + n0, ldc, a + m0 * am + r0 * ar, am, ar,
                                    b + r0 * ldb + n0, ldb, r1 - r0, tail);
      }
    }
  }

  static float softmax_row(float* s, int64_t lo, int64_t hi, float c2, float& m, float& l) {
    __m256 x[kRowVecs];
    __m256 mx = _mm256_set1_ps(kNegInf);
    for (int v = 0; v < kRowVecs; ++v) {
      const __m256 k = live_lanes(lo, hi, v);
      // Blend, not multiply-by-mask: unwritten lanes may hold NaN.
      x[v] = _mm256_blendv_ps(_mm256_set1_ps(kNegInf),
                              _mm256_mul_ps(_mm256_load_ps(s + 8 * v), _mm256_set1_ps(c2)), k);
      mx = _mm256_max_ps(mx, x[v]);
    }
    const float m_new = std::max(m, reduce_max(mx));
    // m = -inf on the first tile: alpha = 0. exp2_ps, not a libm call: once per row per tile.
    const float alpha = _mm256_cvtss_f32(exp2_ps(_mm256_set1_ps(m - m_new)));
    const __m256 mv = _mm256_set1_ps(m_new);
    __m256 sum = _mm256_setzero_ps();
    for (int v = 0; v < kRowVecs; ++v) {
      const __m256 p = exp2_ps(_mm256_sub_ps(x[v], mv));
      _mm256_store_ps(s + 8 * v, p);
      sum = _mm256_add_ps(sum, p);
    }
    l = l * alpha + reduce_add(sum);
    m = m_new;
    return alpha;
  }

  static void grad_row(float* s, float* dp, int64_t lo, int64_t hi, float c2, float lse2,
                       float delta, float scale) {
    for (int v = 0; v < kRowVecs; ++v) {
      const __m256 k = live_lanes(lo, hi, v);
      const __m256 x =
          _mm256_fmsub_ps(_mm256_load_ps(s + 8 * v), _mm256_set1_ps(c2), _mm256_set1_ps(lse2));
      const __m256 p = _mm256_and_ps(k, exp2_ps(x));
      const __m256 d = _mm256_sub_ps(_mm256_load_ps(dp + 8 * v), _mm256_set1_ps(delta));
      _mm256_store_ps(s + 8 * v, p);
      // Masked after the multiply: p = 0 times a NaN in an unwritten lane is NaN.
      _mm256_store_ps(dp + 8 * v,
                      _mm256_and_ps(k, _mm256_mul_ps(_mm256_mul_ps(p, d), _mm256_set1_ps(scale))));
    }
  }

  static void scale_row(float* x, int64_t n, float f) {
    const __m256 fv = _mm256_set1_ps(f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), fv));
    if (i < n) {
      const __m256i k = first_lanes(n - i);
      _mm256_maskstore_ps(x + i, k, _mm256_mul_ps(_mm256_maskload_ps(x + i, k), fv));
    }
  }

  static void pack_transposed(float* bt, const float* src, int64_t ld, int64_t cols, int64_t D) {
    attention_pack::pack_transposed(bt, src, ld, cols, D);
  }
};

}  // namespace
}  // namespace lt::LT_ISA_NS

#include "kernels/cpu/attention_driver.h"

namespace lt::LT_ISA_NS {

extern const AttentionKernels kAttentionKernels{attention_driver::forward<Avx2Micro>,
                                                attention_driver::backward<Avx2Micro>};

}  // namespace lt::LT_ISA_NS

#include "core/isa_target_end.h"
