// The GeGLU gate on the GPU (Gemma), fp32, with the contract of kernels/cpu/geglu.h:
//   h = gelu(g) * u, gelu(g) = g sigmoid(2y), y = sqrt(2/pi) (g + 0.044715 g^3)
// (transformers' gelu_pytorch_tanh, in the form that does not cancel for negative y);
// backward: dg, du overwrite. Device pointers; stream is a cudaStream_t (null: default).
#pragma once

#include <cstdint>

namespace lt::cuda {

void geglu_forward(float* h, const float* g, const float* u, int64_t n, void* stream = nullptr);
void geglu_backward(float* dg, float* du, const float* dh, const float* g, const float* u, int64_t n,
                    void* stream = nullptr);

}  // namespace lt::cuda
