#include "kernels/cuda/convert_cuda.h"

#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void fill_kernel(float* x, float value, int64_t n) {
  LT_GRID_STRIDE(i, n) x[i] = value;
}

// The integer recipe of core/dtype.h, so NaN payloads and ties round as on the CPU.
__device__ inline uint16_t to_bf16(float f) {
  const unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__global__ void f32_to_bf16_kernel(uint16_t* dst, const float* src, int64_t n) {
  LT_GRID_STRIDE(i, n) dst[i] = to_bf16(src[i]);
}

__global__ void bf16_to_f32_kernel(float* dst, const uint16_t* src, int64_t n) {
  LT_GRID_STRIDE(i, n) dst[i] = __uint_as_float(static_cast<unsigned>(src[i]) << 16);
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
