// Causal GQA attention, AVX-512 level: 16-lane zmm micro-kernels (contract in
// attention_tiles.h) under the shared driver (attention_driver.h).
//   nt: C[M][64] = A[M][D] * Bt[D][64]: blocks of 6 rows x 4 zmm (64 keys), 24
//       accumulators of the 32 zmm registers.
//   nn: C[M][N] += A * B over chunks of 64 columns (4 zmm, B's chunk stays in L1), the
//       same 6 x 4 blocks; a masked last vector, so rows may end anywhere.
// K^T and V^T are packed with the avx2 level's 8 x 8 ymm transposes (attention_pack_avx.h).
#include <immintrin.h>

#include "kernels/cpu/attention_tiles.h"

#define LT_ISA_TARGET 2
#include "core/isa_target.h"

// GCC 12's AVX-512 headers seed unmasked intrinsics with _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports at every inlined use: a known false positive.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "kernels/cpu/attention_pack_avx.h"

namespace lt::LT_ISA_NS {
namespace {

using namespace ::lt::attention_tiles;

constexpr int kMR = 6;  // rows per register block: 6 x 4 accumulators = 24 zmm

// 2^x (contract in attention_tiles.h): n = round(x), f = x - n in [-1/2, 1/2], 2^f by the
// Taylor polynomial, times 2^n by scalef.
inline __m512 exp2_ps(__m512 x) {
  const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExp2Min), _CMP_NLT_UQ);
  x = _mm512_max_ps(_mm512_set1_ps(kExp2Min), x);
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(kExp2Taylor[7]);
  for (int i = 6; i >= 0; --i) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExp2Taylor[i]));
  return _mm512_maskz_scalef_ps(live, p, n);
}

inline __mmask16 first_lanes(int64_t n) {  // lanes [0, n) of a 16-lane vector, n in [0, 16]
  return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u);
}

// Lanes [lo - 16v, hi - 16v) of vector v of a score row: keys [lo, hi).
inline __mmask16 live_lanes(int64_t lo, int64_t hi, int v) {
  return __mmask16(first_lanes(std::clamp<int64_t>(hi - 16 * v, 0, 16)) &
                   ~first_lanes(std::clamp<int64_t>(lo - 16 * v, 0, 16)));
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

struct Avx512Micro {
  // With lower, row block [m0, m0 + mr) gets only the key vectors its rows can see.
  static void nt(float* c, const float* a, int64_t lda, const float* bt, int64_t M, int64_t D,
                 bool lower) {
    for (int64_t m0 = 0; m0 < M; m0 += kMR) {
      const int64_t mr = std::min<int64_t>(kMR, M - m0);
      const int64_t nv = lower ? std::min<int64_t>(4, (m0 + mr + 15) / 16) : 4;
      kNt[mr - 1][nv - 1](c + m0 * kTile, a + m0 * lda, lda, bt, D);
    }
  }

  static void nn(float* c, int64_t ldc, const float* a, int64_t am, int64_t ar, const float* b,
                 int64_t ldb, int64_t R, int64_t M, int64_t N, Tri tri) {
    for (int64_t n0 = 0; n0 < N; n0 += 64) {
      const int64_t nc = std::min<int64_t>(64, N - n0);
      const int64_t nv = (nc + 15) / 16;
      const __mmask16 tail = first_lanes(nc - 16 * (nv - 1));
      for (int64_t m0 = 0; m0 < M; m0 += kMR) {
        const int64_t mr = std::min<int64_t>(kMR, M - m0);
        const int64_t r0 = tri == Tri::kUpper ? std::min(m0, R) : 0;
        const int64_t r1 = tri == Tri::kLower ? std::min(m0 + mr, R) : R;
        if (r1 <= r0) continue;
        kNn[mr - 1][nv - 1](c + m0 * ldc + n0, ldc, a + m0 * am + r0 * ar, am, ar,
                            b + r0 * ldb + n0, ldb, r1 - r0, tail);
      }
    }
  }

  static float softmax_row(float* s, int64_t lo, int64_t hi, float c2, float& m, float& l) {
    __m512 x[4];
    __m512 mx = _mm512_set1_ps(kNegInf);
    for (int v = 0; v < 4; ++v) {
      const __mmask16 k = live_lanes(lo, hi, v);
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

  static void grad_row(float* s, float* dp, int64_t lo, int64_t hi, float c2, float lse2,
                       float delta, float scale) {
    for (int v = 0; v < 4; ++v) {
      const __mmask16 k = live_lanes(lo, hi, v);
      const __m512 x =
          _mm512_fmsub_ps(_mm512_load_ps(s + 16 * v), _mm512_set1_ps(c2), _mm512_set1_ps(lse2));
      const __m512 p = _mm512_maskz_mov_ps(k, exp2_ps(x));
      const __m512 d = _mm512_sub_ps(_mm512_load_ps(dp + 16 * v), _mm512_set1_ps(delta));
      _mm512_store_ps(s + 16 * v, p);
      _mm512_store_ps(dp + 16 * v,
                      _mm512_maskz_mul_ps(k, _mm512_mul_ps(p, d), _mm512_set1_ps(scale)));
    }
  }

  static void scale_row(float* x, int64_t n, float f) {
    const __m512 fv = _mm512_set1_ps(f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), fv));
    const __mmask16 k = first_lanes(n - i);
    _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), fv));
  }

  static void pack_transposed(float* bt, const float* src, int64_t ld, int64_t cols, int64_t D) {
    attention_pack::pack_transposed(bt, src, ld, cols, D);
  }
};

}  // namespace
}  // namespace lt::LT_ISA_NS

#include "kernels/cpu/attention_driver.h"

namespace lt::LT_ISA_NS {

extern const AttentionKernels kAttentionKernels{attention_driver::forward<Avx512Micro>,
                                                attention_driver::backward<Avx512Micro>};

}  // namespace lt::LT_ISA_NS

#include "core/isa_target_end.h"
