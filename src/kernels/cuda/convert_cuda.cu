#include "kernels/cuda/convert_cuda.h"

#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void fill_kernel(float* x, float value, int64_t n) {
  LT_GRID_STRIDE(i, n) x[i] = value;
}

__global__ void f32_to_bf16_kernel(uint16_t* dst, const float* src, int64_t n) {
  LT_GRID_STRIDE(i, n) dst[i] = f32_to_bf16_bits(src[i]);
}

__global__ void bf16_to_f32_kernel(float* dst, const uint16_t* src, int64_t n) {
  LT_GRID_STRIDE(i, n) dst[i] = bf16_bits_to_f32(src[i]);
}

}  // namespace

void fill(float* x, float value, int64_t n, void* stream) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(x, value, n);
  LT_CUDA_CHECK_LAUNCH(fill_kernel);
}

void convert_f32_to_bf16(uint16_t* dst, const float* src, int64_t n, void* stream) {
  if (n == 0) return;
  f32_to_bf16_kernel<<<grid_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(dst, src, n);
  LT_CUDA_CHECK_LAUNCH(f32_to_bf16_kernel);
}

void convert_bf16_to_f32(float* dst, const uint16_t* src, int64_t n, void* stream) {
  if (n == 0) return;
  bf16_to_f32_kernel<<<grid_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(dst, src, n);
  LT_CUDA_CHECK_LAUNCH(bf16_to_f32_kernel);
}

}  // namespace lt::cuda
