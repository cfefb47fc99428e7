// Gated RMSNorm kernels (kernels/cpu/gated_rmsnorm.h), compiled once per ISA level
// (core/isa_target.h): threaded over tokens (forward) or token chunks (backward),
// vectorized over D.
#include "kernels/cpu/gated_rmsnorm.h"

#include <cmath>

#include "kernels/cpu/vec_math.h"

#include "core/isa_target.h"

namespace lt::LT_ISA_NS {

namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements; below this one thread is faster

void forward(float* y, float* rstd, const float* x, const float* z, const float* w, int64_t T,
             int64_t D, float eps) {
#pragma omp parallel for schedule(static) if (T * D >= kParallelMin)
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * D;
    const float* zt = z + t * D;
    float ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t d = 0; d < D; ++d) ss += xt[d] * xt[d];
    const float r = 1.0f / std::sqrt(ss / float(D) + eps);
    rstd[t] = r;
    float* yt = y + t * D;
#pragma omp simd
    for (int64_t d = 0; d < D; ++d)
      yt[d] = w[d] * (xt[d] * r) * (zt[d] / (1.0f + vec::exp_approx(-zt[d])));
  }
}

void backward(float* dx, float* dz, float* partial, const float* dy, const float* x,
              const float* z, const float* w, const float* rstd, int64_t T, int64_t D,
              int64_t token_chunk) {
  const int64_t chunks = (T + token_chunk - 1) / token_chunk;
#pragma omp parallel for schedule(static) if (T * D >= kParallelMin)
  for (int64_t k = 0; k < chunks; ++k) {
    float* pk = partial + k * D;
    const int64_t t1 = T < (k + 1) * token_chunk ? T : (k + 1) * token_chunk;
    for (int64_t t = k * token_chunk; t < t1; ++t) {
      const float* xt = x + t * D;
      const float* zt = z + t * D;
      const float* gt = dy + t * D;
      const float r = rstd[t];
      float* dxt = dx + t * D;
      float* dzt = dz + t * D;
      // dn = dy w silu(z) (stored in dx for now); dot = sum_d dn x
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t d = 0; d < D; ++d) {
        const float sig = 1.0f / (1.0f + vec::exp_approx(-zt[d]));
        const float n = xt[d] * r;
        const float dn = gt[d] * w[d] * zt[d] * sig;
        dxt[d] = dn;
        dot += dn * xt[d];
        dzt[d] = gt[d] * w[d] * n * sig * (1.0f + zt[d] * (1.0f - sig));
        pk[d] += gt[d] * n * zt[d] * sig;
      }
      const float coef = r * r * r * dot / float(D);
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) dxt[d] = r * dxt[d] - coef * xt[d];
    }
  }
}
}  // namespace

extern const GatedRmsnormKernels kGatedRmsnormKernels{forward, backward};

}  // namespace lt::LT_ISA_NS

#include "core/isa_target_end.h"
