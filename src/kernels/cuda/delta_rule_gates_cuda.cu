#include "kernels/cuda/delta_rule_gates_cuda.h"

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kSoftplusThreshold = 20.0f;  // torch's F.softplus default

// expf and log1pf, not the fast intrinsics: within 2 and 1 ulp for every input.
__device__ inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ inline float softplus(float x) { return x > kSoftplusThreshold ? x : log1pf(expf(x)); }
__device__ inline float softplus_grad(float x) { return x > kSoftplusThreshold ? 1.0f : sigmoid(x); }

__global__ void gates_forward_kernel(float* beta, float* decay, const float* b, const float* a, const float* A_log,
                                     const float* dt_bias, int64_t n, int64_t H) {
  LT_GRID_STRIDE(i, n) {
    const int64_t j = i % H;
    beta[i] = sigmoid(b[i]);
    decay[i] = -expf(A_log[j]) * softplus(a[i] + dt_bias[j]);
  }
}

__global__ void gates_backward_kernel(float* db, float* da, const float* dbeta, const float* dg, const float* a,
                                      const float* beta, const float* A_log, const float* dt_bias, int64_t n,
                                      int64_t H) {
  LT_GRID_STRIDE(i, n) {
    const int64_t j = i % H;
    const float bt = beta[i];
    db[i] = dbeta[i] * (bt * (1.0f - bt));
    da[i] = dg[i] * -expf(A_log[j]) * softplus_grad(a[i] + dt_bias[j]);
  }
}

// Block j sums head j's column of da and of dg * decay over the T tokens: each thread a
// strided part in float64, then block_sum's fixed order.
__global__ void head_sums_kernel(float* d_dt_bias, float* d_A_log, const float* da, const float* dg,
                                 const float* decay, int64_t T, int64_t H) {
  __shared__ double scratch[32];
  const int64_t j = blockIdx.x;
  double s_da = 0, s_dA = 0;
  for (int64_t t = threadIdx.x; t < T; t += blockDim.x) {
    s_da += da[t * H + j];
    s_dA += double(dg[t * H + j]) * decay[t * H + j];
  }
  s_da = block_sum(s_da, scratch);
  s_dA = block_sum(s_dA, scratch);
  if (threadIdx.x == 0) {
    d_dt_bias[j] += static_cast<float>(s_da);
    d_A_log[j] += static_cast<float>(s_dA);
  }
}

}  // namespace

void delta_rule_gates_forward(float* beta, float* decay, const float* b, const float* a, const float* A_log,
                              const float* dt_bias, int64_t T, int64_t H, void* stream) {
  const int64_t n = T * H;
  if (n == 0) return;
  gates_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(beta, decay, b, a, A_log, dt_bias,
                                                                                  n, H);
  LT_CUDA_CHECK_LAUNCH(gates_forward_kernel);
}

void delta_rule_gates_backward(float* db, float* da, float* d_dt_bias, float* d_A_log, const float* dbeta,
                               const float* dg, const float* a, const float* beta, const float* decay,
                               const float* A_log, const float* dt_bias, int64_t T, int64_t H, void* stream) {
  const int64_t n = T * H;
  if (n == 0) return;
  const cudaStream_t s = as_stream(stream);
  gates_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(db, da, dbeta, dg, a, beta, A_log, dt_bias, n, H);
  LT_CUDA_CHECK_LAUNCH(gates_backward_kernel);
  head_sums_kernel<<<static_cast<unsigned>(H), kThreads, 0, s>>>(d_dt_bias, d_A_log, da, dg, decay, T, H);
  LT_CUDA_CHECK_LAUNCH(head_sums_kernel);
}

}  // namespace lt::cuda
