// GeGLU gate, fast path: one fused, threaded, vectorized pass each way, compiled once per
// ISA level (core/isa_target.h), like swiglu_simd.cpp. gelu(g) = g * s with
// s = sigmoid(2y) = 0.5 (1 + tanh(y)), and d gelu / dg = s + g s (1 - s) 2 dy/dg.
#include "kernels/cpu/geglu.h"
#include "kernels/cpu/vec_math.h"

#include "core/isa_target.h"

namespace lt::LT_ISA_NS {

namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements; below this one thread is faster
constexpr float kTwoK = static_cast<float>(2 * kGeluTanhK);
constexpr float kA = static_cast<float>(kGeluTanhA);
constexpr float kThreeA = static_cast<float>(3 * kGeluTanhA);

void forward(float* h, const float* g, const float* u, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    h[i] = x * vec::sigmoid(kTwoK * (x + kA * x * x * x)) * u[i];
  }
}

void backward(float* dg, float* du, const float* dh, const float* g, const float* u, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i], d = dh[i];
    const float s = vec::sigmoid(kTwoK * (x + kA * x * x * x));
    du[i] = d * x * s;
    dg[i] = d * u[i] * s * (1.0f + x * (1.0f - s) * kTwoK * (1.0f + kThreeA * x * x));
  }
}
}  // namespace

extern const GegluKernels kGegluKernels{forward, backward};

}  // namespace lt::LT_ISA_NS

#include "core/isa_target_end.h"
