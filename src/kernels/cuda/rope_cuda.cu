#include "kernels/cuda/rope_cuda.h"

#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per (row, pair): rows are the B*S*H heads, pairs the rotary/2 channel pairs.
__global__ void rope_kernel(float* x, const float* cos, const float* sin, int64_t S, int64_t H, int64_t D,
                            int64_t half, const int32_t* positions, float sign, int64_t n) {
  LT_GRID_STRIDE(i, n) {
    const int64_t row = i / half, k = i - row * half;
    const int64_t token = row / H;
    const int64_t p = positions ? positions[token] : token % S;
    const float c = cos[p * half + k], s = sign * sin[p * half + k];
    float* v = x + row * D;
    const float a = v[k], b = v[k + half];
    v[k] = a * c - b * s;
    v[k + half] = b * c + a * s;
  }
}

void rope_apply(float* x, const float* cos, const float* sin, int64_t B, int64_t S, int64_t H, int64_t D,
                const int32_t* positions, int64_t rotary, float sign, void* stream) {
  const int64_t r = rotary > 0 ? rotary : D;
  if (r % 2 != 0 || r > D)
    throw std::runtime_error("rope (cuda): rotary channels " + std::to_string(r) + " must be even and at most D " +
                             std::to_string(D));
  const int64_t n = B * S * H * (r / 2);
  if (n == 0) return;
  rope_kernel<<<grid_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(x, cos, sin, S, H, D, r / 2, positions, sign,
                                                                          n);
  LT_CUDA_CHECK_LAUNCH(rope_kernel);
}

}  // namespace

void rope_forward(float* x, const float* cos, const float* sin, int64_t B, int64_t S, int64_t H, int64_t D,
                  const int32_t* positions, int64_t rotary, void* stream) {
  rope_apply(x, cos, sin, B, S, H, D, positions, rotary, 1.0f, stream);
}

void rope_backward(float* dx, const float* cos, const float* sin, int64_t B, int64_t S, int64_t H, int64_t D,
                   const int32_t* positions, int64_t rotary, void* stream) {
  rope_apply(dx, cos, sin, B, S, H, D, positions, rotary, -1.0f, stream);
}

}  // namespace lt::cuda
