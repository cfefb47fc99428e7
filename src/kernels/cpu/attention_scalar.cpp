// Causal GQA attention, scalar level: the micro-kernels (contract in attention_tiles.h) as
// plain loops that the compiler vectorizes for the baseline (x86-64-v2: 4-lane SSE), under
// the shared driver (attention_driver.h). For CPUs without AVX2; simple, not tuned.
#include <bit>
#include <cstdint>

#include "kernels/cpu/attention_tiles.h"

#define LT_ISA_TARGET 0
#include "core/isa_target.h"

namespace lt::LT_ISA_NS {
namespace {

using namespace ::lt::attention_tiles;

// 2^x (contract in attention_tiles.h), branch-free so that `omp simd` loops vectorize it
// (std::exp2 is a libm call per element). Adding 1.5 * 2^23 rounds x to the nearest
// integer n, which then sits in the sum's low mantissa bits; 2^n is built from them, so
// no float-to-int conversion (undefined for NaN) is needed.
inline float exp2_poly(float x) {
  const bool live = !(x < kExp2Min);  // NaN is live, and stays NaN through p
  x = x < kExp2Min ? kExp2Min : x;    // not fmaxf / fminf: they may stay calls
  x = x > 127.0f ? 127.0f : x;        // keeps 2^n a normal float (our arguments are <= ~0)
  constexpr float kShift = 0x1.8p23f;
  const float t = x + kShift;
  const float n = t - kShift;
  const float f = x - n;  // in [-1/2, 1/2]
  float p = kExp2Taylor[7];
  for (int i = 6; i >= 0; --i) p = p * f + kExp2Taylor[i];
  const uint32_t n_bits = std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kShift);
  const float two_n = std::bit_cast<float>((n_bits + 127u) << 23);
  return live ? p * two_n : 0.0f;
}

struct ScalarMicro {
  // Computes every column, diagonal tile or not.
  static void nt(float* c, const float* a, int64_t lda, const float* bt, int64_t M, int64_t D,
                 bool) {
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

  // Adds every term, the zeros of a diagonal tile included.
  static void nn(float* c, int64_t ldc, const float* a, int64_t am, int64_t ar, const float* b,
                 int64_t ldb, int64_t R, int64_t M, int64_t N, Tri) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t r = 0; r < R; ++r) {
        const float x = a[m * am + r * ar];
#pragma omp simd
        for (int64_t n = 0; n < N; ++n) c[m * ldc + n] += x * b[r * ldb + n];
      }
  }

  static float softmax_row(float* s, int64_t lo, int64_t hi, float c2, float& m, float& l) {
    float mx = kNegInf;
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < kTile; ++j) {
      const float x = j >= lo && j < hi ? s[j] * c2 : kNegInf;
      s[j] = x;
      mx = mx < x ? x : mx;
    }
    const float m_new = m < mx ? mx : m;
    const float alpha = exp2_poly(m - m_new);  // m = -inf on the first tile: alpha = 0
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < kTile; ++j) {
      const float p = exp2_poly(s[j] - m_new);
      s[j] = p;
      sum += p;
    }
    l = l * alpha + sum;
    m = m_new;
    return alpha;
  }

  static void grad_row(float* s, float* dp, int64_t lo, int64_t hi, float c2, float lse2,
                       float delta, float scale) {
#pragma omp simd
    for (int64_t j = 0; j < kTile; ++j) {
      const bool live = j >= lo && j < hi;
      const float p = live ? exp2_poly(s[j] * c2 - lse2) : 0.0f;
      const float ds = p * (dp[j] - delta) * scale;
      s[j] = p;
      dp[j] = live ? ds : 0.0f;
    }
  }

  static void scale_row(float* x, int64_t n, float f) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) x[i] *= f;
  }

  static void pack_transposed(float* bt, const float* src, int64_t ld, int64_t cols, int64_t D) {
    attention_tiles::pack_transposed(bt, src, ld, cols, D);
  }
};

}  // namespace
}  // namespace lt::LT_ISA_NS

#include "kernels/cpu/attention_driver.h"

namespace lt::LT_ISA_NS {

extern const AttentionKernels kAttentionKernels{attention_driver::forward<ScalarMicro>,
                                                attention_driver::backward<ScalarMicro>};

}  // namespace lt::LT_ISA_NS

#include "core/isa_target_end.h"
