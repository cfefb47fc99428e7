#include "kernels/cuda/swiglu_cuda.h"

#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {
namespace {

constexpr int kThreads = 256;

// expf, not __expf: the fast intrinsic's error grows with |g| (CUDA's programming guide,
// intrinsic functions), the accurate one stays within 2 ulp.
__device__ inline float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

__global__ void swiglu_forward_kernel(float* h, const float* g, const float* u, int64_t n) {
  LT_GRID_STRIDE(i, n)
    h[i] = g[i] * sigmoid(g[i]) * u[i];
}

__global__ void swiglu_backward_kernel(float* dg, float* du, const float* dh, const float* g, const float* u,
                                       int64_t n) {
  LT_GRID_STRIDE(i, n) {
    const float gi = g[i], sig = sigmoid(gi), d = dh[i];
    du[i] = d * gi * sig;
    dg[i] = d * u[i] * sig * (1.0f + gi * (1.0f - sig));
  }
}

}  // namespace

void swiglu_forward(float* h, const float* g, const float* u, int64_t n, void* stream) {
  if (n == 0) return;
  swiglu_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(h, g, u, n);
  LT_CUDA_CHECK_LAUNCH(swiglu_forward_kernel);
}

void swiglu_backward(float* dg, float* du, const float* dh, const float* g, const float* u, int64_t n, void* stream) {
  if (n == 0) return;
  swiglu_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(dg, du, dh, g, u, n);
  LT_CUDA_CHECK_LAUNCH(swiglu_backward_kernel);
}

}  // namespace lt::cuda
