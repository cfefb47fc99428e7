#include "kernels/cuda/chunk_partials.cuh"

#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void add_chunk_partials_kernel(float* dst, const float* partial, int64_t chunks, int64_t cols) {
  LT_GRID_STRIDE(c, cols) {
    float s = dst[c];
    for (int64_t k = 0; k < chunks; ++k) s += partial[k * cols + c];
    dst[c] = s;
  }
}

}  // namespace

void add_chunk_partials(float* dst, const float* partial, int64_t chunks, int64_t cols, cudaStream_t stream) {
  if (cols == 0) return;
  add_chunk_partials_kernel<<<grid_for(cols, kThreads), kThreads, 0, stream>>>(dst, partial, chunks, cols);
  LT_CUDA_CHECK_LAUNCH(add_chunk_partials_kernel);
}

}  // namespace lt::cuda
