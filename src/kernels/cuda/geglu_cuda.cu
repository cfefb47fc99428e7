#include "kernels/cuda/geglu_cuda.h"

#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kK = 0.79788456080286535588f;  // sqrt(2/pi)
constexpr float kA = 0.044715f;

// sigmoid(2y) = 0.5 (1 + tanh(y)), for either sign of y without cancellation.
__device__ inline float gate(float x) {
  const float y = kK * (x + kA * x * x * x);
  if (y >= 0.f) return 1.0f / (1.0f + expf(-2.0f * y));
  const float e = expf(2.0f * y);
  return e / (1.0f + e);
}

__global__ void geglu_forward_kernel(float* h, const float* g, const float* u, int64_t n) {
  LT_GRID_STRIDE(i, n) h[i] = g[i] * gate(g[i]) * u[i];
}

__global__ void geglu_backward_kernel(float* dg, float* du, const float* dh, const float* g, const float* u,
                                      int64_t n) {
  LT_GRID_STRIDE(i, n) {
    const float x = g[i], s = gate(x), d = dh[i];
    const float dy = kK * (1.0f + 3.0f * kA * x * x);  // dy/dx
    du[i] = d * x * s;
    dg[i] = d * u[i] * (s + 2.0f * x * s * (1.0f - s) * dy);
  }
}

}  // namespace

void geglu_forward(float* h, const float* g, const float* u, int64_t n, void* stream) {
  if (n == 0) return;
  geglu_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(h, g, u, n);
  LT_CUDA_CHECK_LAUNCH(geglu_forward_kernel);
}

void geglu_backward(float* dg, float* du, const float* dh, const float* g, const float* u, int64_t n, void* stream) {
  if (n == 0) return;
  geglu_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(dg, du, dh, g, u, n);
  LT_CUDA_CHECK_LAUNCH(geglu_backward_kernel);
}

}  // namespace lt::cuda
