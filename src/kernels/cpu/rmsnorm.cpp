// RMSNorm, fast path: threaded over tokens, vectorized over C.
// Backward computes dx and the dw partial sums in one pass over fixed chunks of
// kTokenChunk tokens (each chunk's partial in token order), then adds the partials to dw
// in chunk order. Chunk boundaries do not depend on the thread count, so dw is bitwise
// identical for any number of threads.
#include "kernels/cpu/rmsnorm.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/reduce.h"

namespace lt {

namespace {
constexpr int64_t kTokenChunk = 64;
constexpr int64_t kParallelMin = 1 << 14;  // elements
}  // namespace

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t T, int64_t C,
                     float eps) {
#pragma omp parallel for schedule(static) if (T * C >= kParallelMin)
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * C;
    float ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += xt[c] * xt[c];
    const float r = 1.0f / std::sqrt(ss / float(C) + eps);
    rstd[t] = r;
    float* yt = y + t * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) yt[c] = xt[c] * r * w[c];
  }
}

void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                      const float* rstd, int64_t T, int64_t C) {
  const int64_t chunks = (T + kTokenChunk - 1) / kTokenChunk;
  std::vector<float> partial(size_t(chunks * C));  // [chunks, C]
#pragma omp parallel for schedule(static) if (T * C >= kParallelMin)
  for (int64_t k = 0; k < chunks; ++k) {
    float* pk = partial.data() + k * C;
    const int64_t t1 = std::min(T, (k + 1) * kTokenChunk);
    for (int64_t t = k * kTokenChunk; t < t1; ++t) {
      const float* xt = x + t * C;
      const float* gt = dy + t * C;
      const float r = rstd[t];
      float dot = 0;  // sum_c dy*w*x
#pragma omp simd reduction(+ : dot)
      for (int64_t c = 0; c < C; ++c) dot += gt[c] * w[c] * xt[c];
      const float coef = r * r * r * dot / float(C);
      float* dxt = dx + t * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        dxt[c] = r * gt[c] * w[c] - coef * xt[c];
        pk[c] += gt[c] * xt[c] * r;
      }
    }
  }
  detail::column_sum_add(dw, partial.data(), chunks, C);  // chunk order: deterministic
}

}  // namespace lt
