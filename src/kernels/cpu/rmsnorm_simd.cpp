// RMSNorm kernels, compiled once per ISA level (core/isa_target.h): threaded over tokens
// (forward) or token chunks (backward), vectorized over C.
#include "kernels/cpu/rmsnorm.h"

#include "core/isa_target.h"

namespace lt::LT_ISA_NS {

namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements; below this one thread is faster

void forward(float* y, float* rstd, const float* x, const float* w, int64_t T, int64_t C, float eps,
             float w_offset) {
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
    for (int64_t c = 0; c < C; ++c) yt[c] = xt[c] * r * (w_offset + w[c]);
  }
}

void backward(float* dx, float* partial, const float* dy, const float* x, const float* w,
              const float* rstd, int64_t T, int64_t C, float w_offset, int64_t token_chunk) {
  const int64_t chunks = (T + token_chunk - 1) / token_chunk;
#pragma omp parallel for schedule(static) if (T * C >= kParallelMin)
  for (int64_t k = 0; k < chunks; ++k) {
    float* pk = partial + k * C;
    const int64_t t1 = T < (k + 1) * token_chunk ? T : (k + 1) * token_chunk;
    for (int64_t t = k * token_chunk; t < t1; ++t) {
      const float* xt = x + t * C;
      const float* gt = dy + t * C;
      const float r = rstd[t];
      float dot = 0;  // sum_c dy*w*x
#pragma omp simd reduction(+ : dot)
      for (int64_t c = 0; c < C; ++c) dot += gt[c] * (w_offset + w[c]) * xt[c];
      const float coef = r * r * r * dot / float(C);
      float* dxt = dx + t * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        dxt[c] = r * gt[c] * (w_offset + w[c]) - coef * xt[c];
        pk[c] += gt[c] * xt[c] * r;
      }
    }
  }
}
}  // namespace

extern const RmsnormKernels kRmsnormKernels{forward, backward};

}  // namespace lt::LT_ISA_NS

#include "core/isa_target_end.h"
