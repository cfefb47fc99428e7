#include "kernels/cuda/gated_rmsnorm_cuda.h"

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/chunk_partials.cuh"
#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;  // one warp per row
constexpr int64_t kTokenChunk = 64;           // rows per dw partial

__device__ inline float sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

__global__ void gated_rmsnorm_forward_kernel(float* y, float* rstd, const float* x, const float* z, const float* w,
                                             int64_t T, int64_t D, float eps) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (t >= T) return;  // whole warps leave together
  const float *xr = x + t * D, *zr = z + t * D;
  float ss = 0.f;
  for (int64_t d = lane; d < D; d += 32) ss = fmaf(xr[d], xr[d], ss);
  ss = warp_sum(ss);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
  if (lane == 0) rstd[t] = r;
  float* yr = y + t * D;
  for (int64_t d = lane; d < D; d += 32) yr[d] = w[d] * (xr[d] * r) * (zr[d] * sigmoid(zr[d]));
}

// dn = dy w silu(z);  dx = r dn - r^3 (sum_d dn x) / D x;  dz = dy w n silu'(z), n = x r.
__global__ void gated_rmsnorm_dx_dz_kernel(float* dx, float* dz, const float* dy, const float* x, const float* z,
                                           const float* w, const float* rstd, int64_t T, int64_t D) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (t >= T) return;
  const float *xr = x + t * D, *zr = z + t * D, *gr = dy + t * D;
  const float r = rstd[t];
  float* dxr = dx + t * D;
  float* dzr = dz + t * D;
  float dot = 0.f;
  for (int64_t d = lane; d < D; d += 32) {
    const float zd = zr[d], sig = sigmoid(zd), gw = gr[d] * w[d];
    const float dn = gw * zd * sig;
    dot = fmaf(dn, xr[d], dot);
    dzr[d] = gw * (xr[d] * r) * sig * (1.0f + zd * (1.0f - sig));
  }
  dot = warp_sum(dot);
  const float coef = r * r * r * dot / static_cast<float>(D);
  for (int64_t d = lane; d < D; d += 32) {
    const float zd = zr[d];
    const float dn = gr[d] * w[d] * zd * sigmoid(zd);  // recomputed: the same expression as above
    dxr[d] = r * dn - coef * xr[d];
  }
}

// partial[chunk, d] = sum over the chunk's rows, in order, of dy n silu(z).
// Grid: chunks on x (which takes 2^31 - 1 blocks; y takes 65535), blocks of columns on y.
__global__ void gated_rmsnorm_dw_partial_kernel(float* partial, const float* dy, const float* x, const float* z,
                                                const float* rstd, int64_t T, int64_t D) {
  const int64_t d = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (d >= D) return;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTokenChunk;
  const int64_t t1 = t0 + kTokenChunk < T ? t0 + kTokenChunk : T;
  float s = 0.f;
  for (int64_t t = t0; t < t1; ++t) {
    const float zd = z[t * D + d];
    s = fmaf(dy[t * D + d] * (x[t * D + d] * rstd[t]), zd * sigmoid(zd), s);
  }
  partial[blockIdx.x * D + d] = s;
}

unsigned row_blocks(int64_t T) { return static_cast<unsigned>((T + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

void gated_rmsnorm_forward(float* y, float* rstd, const float* x, const float* z, const float* w, int64_t T,
                           int64_t D, float eps, void* stream) {
  if (T == 0) return;
  gated_rmsnorm_forward_kernel<<<row_blocks(T), kThreads, 0, as_stream(stream)>>>(y, rstd, x, z, w, T, D, eps);
  LT_CUDA_CHECK_LAUNCH(gated_rmsnorm_forward_kernel);
}

size_t gated_rmsnorm_backward_workspace_bytes(int64_t T, int64_t D) {
  return static_cast<size_t>((T + kTokenChunk - 1) / kTokenChunk * D) * sizeof(float);
}

void gated_rmsnorm_backward(float* dx, float* dz, float* dw, const float* dy, const float* x, const float* z,
                            const float* w, const float* rstd, int64_t T, int64_t D, void* workspace,
                            void* stream) {
  if (T == 0) return;
  const cudaStream_t s = as_stream(stream);
  gated_rmsnorm_dx_dz_kernel<<<row_blocks(T), kThreads, 0, s>>>(dx, dz, dy, x, z, w, rstd, T, D);
  LT_CUDA_CHECK_LAUNCH(gated_rmsnorm_dx_dz_kernel);
  const int64_t chunks = (T + kTokenChunk - 1) / kTokenChunk;
  auto* partial = static_cast<float*>(workspace);
  const unsigned col_blocks = static_cast<unsigned>((D + kThreads - 1) / kThreads);
  gated_rmsnorm_dw_partial_kernel<<<dim3(static_cast<unsigned>(chunks), col_blocks), kThreads, 0, s>>>(
      partial, dy, x, z, rstd, T, D);
  LT_CUDA_CHECK_LAUNCH(gated_rmsnorm_dw_partial_kernel);
  add_chunk_partials(dw, partial, chunks, D, s);
}

}  // namespace lt::cuda
