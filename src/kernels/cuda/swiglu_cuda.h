// The SwiGLU gate on the GPU, fp32, with the contract of kernels/cpu/swiglu.h:
//   h = silu(g) * u, silu(g) = g * sigmoid(g); backward: dg, du overwrite.
// Device pointers; stream is a cudaStream_t (null: the default stream).
#pragma once

#include <cstdint>

namespace lt::cuda {

void swiglu_forward(float* h, const float* g, const float* u, int64_t n, void* stream = nullptr);
void swiglu_backward(float* dg, float* du, const float* dh, const float* g, const float* u, int64_t n,
                     void* stream = nullptr);

}  // namespace lt::cuda
