// Rotary position embedding on the GPU, in place, with the contract of kernels/cpu/rope.h
// (Hugging Face rotate_half layout; x is [B*S, H, D]; cos/sin are [S, rotary/2]; positions,
// when given, is [B*S] with each in [0, S); rotary 0 means D; backward rotates by -sin).
// Device pointers; stream is a cudaStream_t (null: the default stream).
#pragma once

#include <cstdint>

namespace lt::cuda {

void rope_forward(float* x, const float* cos, const float* sin, int64_t B, int64_t S, int64_t H, int64_t D,
                  const int32_t* positions = nullptr, int64_t rotary = 0, void* stream = nullptr);
void rope_backward(float* dx, const float* cos, const float* sin, int64_t B, int64_t S, int64_t H, int64_t D,
                   const int32_t* positions = nullptr, int64_t rotary = 0, void* stream = nullptr);

}  // namespace lt::cuda
