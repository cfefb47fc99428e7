// SwiGLU gate, fast path: one fused, threaded, vectorized pass each way, compiled once per
// ISA level (core/isa_target.h). Memory-bound (3 or 5 streams of n floats), so
// parallelize only above a size where the threads' start-up is repaid.
#include "kernels/cpu/swiglu.h"
#include "kernels/cpu/vec_math.h"

#include "core/isa_target.h"

namespace lt::LT_ISA_NS {

namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements; below this one thread is faster

void forward(float* h, const float* g, const float* u, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) h[i] = g[i] * vec::sigmoid(g[i]) * u[i];
}

void backward(float* dg, float* du, const float* dh, const float* g, const float* u, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float s = vec::sigmoid(g[i]);
    const float gi = g[i], d = dh[i];
    du[i] = d * gi * s;
    dg[i] = d * u[i] * s * (1.0f + gi * (1.0f - s));
  }
}
}  // namespace

extern const SwigluKernels kSwigluKernels{forward, backward};

}  // namespace lt::LT_ISA_NS

#include "core/isa_target_end.h"
