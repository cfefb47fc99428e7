#include "kernels/cuda/sum_of_squares_cuda.h"

#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {
namespace {

constexpr int kThreads = 256;

__device__ inline double value(const float* x, int64_t i) { return x[i]; }
__device__ inline double value(const uint16_t* x, int64_t i) { return bf16_bits_to_f32(x[i]); }

template <typename In>
__global__ void chunk_sums_kernel(double* partial, const In* x, int64_t n) {
  __shared__ double scratch[32];
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kSumOfSquaresChunkCuda;
  const int64_t end = begin + kSumOfSquaresChunkCuda < n ? begin + kSumOfSquaresChunkCuda : n;
  double s = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const double v = value(x, i);
    s += v * v;
  }
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void total_kernel(double* out, const double* partial, int64_t chunks) {
  __shared__ double scratch[32];
  double s = 0.0;
  for (int64_t k = threadIdx.x; k < chunks; k += kThreads) s += partial[k];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) *out += s;
}

template <typename In>
void launch(double* out, const In* x, int64_t n, void* workspace, void* stream) {
  if (n == 0) return;
  const int64_t chunks = (n + kSumOfSquaresChunkCuda - 1) / kSumOfSquaresChunkCuda;
  const cudaStream_t s = as_stream(stream);
  auto* partial = static_cast<double*>(workspace);
  chunk_sums_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, s>>>(partial, x, n);
  LT_CUDA_CHECK_LAUNCH(chunk_sums_kernel);
  total_kernel<<<1, kThreads, 0, s>>>(out, partial, chunks);
  LT_CUDA_CHECK_LAUNCH(total_kernel);
}

}  // namespace

size_t sum_of_squares_workspace_bytes(int64_t n) {
  return static_cast<size_t>((n + kSumOfSquaresChunkCuda - 1) / kSumOfSquaresChunkCuda) * sizeof(double);
}

void sum_of_squares_f64(double* out, const float* x, int64_t n, void* workspace, void* stream) {
  launch(out, x, n, workspace, stream);
}
void sum_of_squares_f64_bf16(double* out, const uint16_t* x, int64_t n, void* workspace, void* stream) {
  launch(out, x, n, workspace, stream);
}

}  // namespace lt::cuda
