#include "kernels/cuda/rmsnorm_cuda.h"

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/chunk_partials.cuh"
#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {
namespace {

constexpr int kThreads = 256;
// Tokens per dw partial: each partial is one thread's in-order sum over this many rows.
constexpr int64_t kTokenChunk = 64;

__global__ void rmsnorm_forward_kernel(float* y, float* rstd, const float* x, const float* w, int64_t C, float eps,
                                       float w_offset) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  const float* xr = x + t * C;
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) ss = fmaf(xr[c], xr[c], ss);
  ss = block_sum(ss, scratch);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(C) + eps);
  if (threadIdx.x == 0) rstd[t] = r;
  float* yr = y + t * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = xr[c] * r * (w_offset + w[c]);
}

__global__ void rmsnorm_dx_kernel(float* dx, const float* dy, const float* x, const float* w, const float* rstd,
                                  int64_t C, float w_offset) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  const float *dyr = dy + t * C, *xr = x + t * C;
  float dot = 0.f;  // sum_c dy * (w_offset + w) * x
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dot = fmaf(dyr[c] * (w_offset + w[c]), xr[c], dot);
  dot = block_sum(dot, scratch);
  const float r = rstd[t];
  const float k = r * r * r * dot / static_cast<float>(C);
  float* dxr = dx + t * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dxr[c] = r * dyr[c] * (w_offset + w[c]) - k * xr[c];
}

// partial[chunk, c] = sum over the chunk's tokens, in order, of dy * x * rstd.
// Grid: chunks on x (which takes 2^31 - 1 blocks; y takes 65535), blocks of columns on y.
__global__ void rmsnorm_dw_partial_kernel(float* partial, const float* dy, const float* x, const float* rstd,
                                          int64_t T, int64_t C) {
  const int64_t c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTokenChunk;
  const int64_t t1 = t0 + kTokenChunk < T ? t0 + kTokenChunk : T;
  float s = 0.f;
  for (int64_t t = t0; t < t1; ++t) s = fmaf(dy[t * C + c] * x[t * C + c], rstd[t], s);
  partial[blockIdx.x * C + c] = s;
}

}  // namespace

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t T, int64_t C, float eps,
                     float w_offset, void* stream) {
  if (T == 0) return;
  rmsnorm_forward_kernel<<<static_cast<unsigned>(T), kThreads, 0, as_stream(stream)>>>(y, rstd, x, w, C, eps, w_offset);
  LT_CUDA_CHECK_LAUNCH(rmsnorm_forward_kernel);
}

size_t rmsnorm_backward_workspace_bytes(int64_t T, int64_t C) {
  return static_cast<size_t>((T + kTokenChunk - 1) / kTokenChunk * C) * sizeof(float);
}

void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd,
                      int64_t T, int64_t C, float w_offset, void* workspace, void* stream) {
  if (T == 0) return;
  const cudaStream_t s = as_stream(stream);
  rmsnorm_dx_kernel<<<static_cast<unsigned>(T), kThreads, 0, s>>>(dx, dy, x, w, rstd, C, w_offset);
  LT_CUDA_CHECK_LAUNCH(rmsnorm_dx_kernel);
  const int64_t chunks = (T + kTokenChunk - 1) / kTokenChunk;
  auto* partial = static_cast<float*>(workspace);
  const unsigned col_blocks = static_cast<unsigned>((C + kThreads - 1) / kThreads);
  rmsnorm_dw_partial_kernel<<<dim3(static_cast<unsigned>(chunks), col_blocks), kThreads, 0, s>>>(partial, dy, x, rstd,
                                                                                                 T, C);
  LT_CUDA_CHECK_LAUNCH(rmsnorm_dw_partial_kernel);
  add_chunk_partials(dw, partial, chunks, C, s);
}

}  // namespace lt::cuda
