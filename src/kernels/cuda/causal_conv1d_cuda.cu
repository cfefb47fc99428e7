#include "kernels/cuda/causal_conv1d_cuda.h"

#include <stdexcept>
#include <string>

#include "kernels/cuda/chunk_partials.cuh"
#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {
namespace {

constexpr int kThreads = 256;
// Tokens (over the batch's rows, in order) per dw partial.
constexpr int64_t kTokenChunk = 64;

struct ConvShape {
  int64_t S, C, K;
};

__device__ inline float sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }

// a at token t of batch row xb ([S, C]), channel c: the taps in order, one FMA each.
__device__ inline float preactivation(const float* xb, const float* wc, int64_t t, int64_t c, const ConvShape& s) {
  float a = 0.f;
  for (int64_t j = s.K - 1 - t > 0 ? s.K - 1 - t : 0; j < s.K; ++j) a = fmaf(wc[j], xb[(t - (s.K - 1) + j) * s.C + c], a);
  return a;
}

// dL/da at (b, t, c): dy silu'(a), silu'(a) = sig (1 + a (1 - sig)).
__device__ inline float dpreactivation(const float* dy, const float* xb, const float* wc, int64_t b, int64_t t,
                                       int64_t c, const ConvShape& s) {
  const float a = preactivation(xb, wc, t, c, s), sig = sigmoid(a);
  return dy[(b * s.S + t) * s.C + c] * sig * (1.0f + a * (1.0f - sig));
}

__global__ void conv_forward_kernel(float* y, const float* x, const float* w, int64_t n, ConvShape s) {
  LT_GRID_STRIDE(i, n) {
    const int64_t c = i % s.C, row = i / s.C, t = row % s.S, b = row / s.S;
    const float a = preactivation(x + b * s.S * s.C, w + c * s.K, t, c, s);
    y[i] = a * sigmoid(a);
  }
}

// dx[b,u,c] = sum_j w[c,j] da[b, u+(K-1)-j, c] over the taps whose output token is < S.
__global__ void conv_dx_kernel(float* dx, const float* dy, const float* x, const float* w, int64_t n, ConvShape s) {
  LT_GRID_STRIDE(i, n) {
    const int64_t c = i % s.C, row = i / s.C, u = row % s.S, b = row / s.S;
    const float* xb = x + b * s.S * s.C;
    const float* wc = w + c * s.K;
    float acc = 0.f;
    for (int64_t j = 0; j < s.K; ++j) {
      const int64_t t = u + (s.K - 1) - j;
      if (t < s.S) acc = fmaf(wc[j], dpreactivation(dy, xb, wc, b, t, c, s), acc);
    }
    dx[i] = acc;
  }
}

// partial[chunk, c, j] = sum over the chunk's rows (b * S + t), in order, of da * x[t-(K-1)+j].
// Grid: chunks on x (which takes 2^31 - 1 blocks; y takes 65535), blocks of channels on y.
__global__ void conv_dw_partial_kernel(float* partial, const float* dy, const float* x, const float* w, int64_t rows,
                                       ConvShape s) {
  const int64_t c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= s.C) return;
  const float* wc = w + c * s.K;
  float acc[kMaxConvKernelCuda];
  for (int64_t j = 0; j < s.K; ++j) acc[j] = 0.f;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTokenChunk;
  const int64_t r1 = r0 + kTokenChunk < rows ? r0 + kTokenChunk : rows;
  for (int64_t row = r0; row < r1; ++row) {
    const int64_t b = row / s.S, t = row % s.S;
    const float* xb = x + b * s.S * s.C;
    const float da = dpreactivation(dy, xb, wc, b, t, c, s);
    for (int64_t j = s.K - 1 - t > 0 ? s.K - 1 - t : 0; j < s.K; ++j)
      acc[j] = fmaf(da, xb[(t - (s.K - 1) + j) * s.C + c], acc[j]);
  }
  float* p = partial + (static_cast<int64_t>(blockIdx.x) * s.C + c) * s.K;
  for (int64_t j = 0; j < s.K; ++j) p[j] = acc[j];
}

void check_shape(int64_t B, int64_t S, int64_t C, int64_t K) {
  auto bad = [](const std::string& what) {
    throw std::invalid_argument("causal conv1d (CUDA): " + what);
  };
  if (B < 0 || S < 0 || C < 0) bad("negative batch, sequence or channel count");
  if (K < 1 || K > kMaxConvKernelCuda)
    bad("kernel size " + std::to_string(K) + " is outside 1.." + std::to_string(kMaxConvKernelCuda) +
        " (linear_conv_kernel_dim in the model's config)");
}

int64_t token_chunks(int64_t B, int64_t S) { return (B * S + kTokenChunk - 1) / kTokenChunk; }

}  // namespace

void causal_conv1d_silu_forward(float* y, const float* x, const float* w, int64_t B, int64_t S, int64_t C,
                                int64_t K, void* stream) {
  check_shape(B, S, C, K);
  const int64_t n = B * S * C;
  if (n == 0) return;
  conv_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(y, x, w, n, ConvShape{S, C, K});
  LT_CUDA_CHECK_LAUNCH(conv_forward_kernel);
}

size_t causal_conv1d_backward_workspace_bytes(int64_t B, int64_t S, int64_t C, int64_t K) {
  return static_cast<size_t>(token_chunks(B, S) * C * K) * sizeof(float);
}

void causal_conv1d_silu_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, int64_t B,
                                 int64_t S, int64_t C, int64_t K, void* workspace, void* stream) {
  check_shape(B, S, C, K);
  const int64_t n = B * S * C;
  if (n == 0) return;
  const cudaStream_t st = as_stream(stream);
  const ConvShape s{S, C, K};
  conv_dx_kernel<<<grid_for(n, kThreads), kThreads, 0, st>>>(dx, dy, x, w, n, s);
  LT_CUDA_CHECK_LAUNCH(conv_dx_kernel);
  const int64_t chunks = token_chunks(B, S);
  auto* partial = static_cast<float*>(workspace);
  const unsigned col_blocks = static_cast<unsigned>((C + kThreads - 1) / kThreads);
  conv_dw_partial_kernel<<<dim3(static_cast<unsigned>(chunks), col_blocks), kThreads, 0, st>>>(partial, dy, x, w,
                                                                                              B * S, s);
  LT_CUDA_CHECK_LAUNCH(conv_dw_partial_kernel);
  add_chunk_partials(dw, partial, chunks, C * K, st);
}

}  // namespace lt::cuda
