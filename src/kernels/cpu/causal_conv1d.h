// Depthwise causal convolution over the sequence with SiLU, as Qwen3.5/3.6 Gated DeltaNet
// applies it to the concatenated q/k/v projections (transformers' causal_conv1d_fn with
// activation "silu"; the layer's nn.Conv1d has groups = channels and bias=False, so there
// is no bias here). Each channel c has its own K taps (K = linear_conv_kernel_dim, 4 by
// default); the K - 1 positions before token 0 are zero (the reference pads both sides
// and keeps the first S outputs, which is the same):
//   a[b,t,c] = sum_{j<K} w[c,j] x[b, t - (K-1) + j, c]     (x = 0 before t = 0)
//   y[b,t,c] = silu(a) = a / (1 + exp(-a))
// Layouts, row-major: x, y [B, S, C] (the projection's own layout; the reference's
// [B, C, S] is its transpose); w [C, K] (the HF weight [C, 1, K] without its middle axis).
// Backward: dx overwrites; dw accumulates (+=). Threads over tokens (forward) and over
// blocks of channels (backward), so results do not depend on the thread count.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/isa_dispatch.h"

namespace lt {

constexpr int64_t kMaxConvKernel = 16;  // the backward keeps a channel block's taps on the stack

struct CausalConvShape {
  int64_t batch = 1, seq = 0, channels = 0, kernel = 4;
};

// Throws lt::Error naming the bad field (kernel must be 1..kMaxConvKernel).
void check_causal_conv_shape(const CausalConvShape& s);

void causal_conv1d_silu_forward(float* y, const float* x, const float* w, const CausalConvShape& s);
// dy [B,S,C]; recomputes the pre-activation from x and w.
void causal_conv1d_silu_backward(float* dx, float* dw, const float* dy, const float* x,
                                 const float* w, const CausalConvShape& s);

struct CausalConv1dKernels {
  void (*forward)(float* y, const float* x, const float* w, const CausalConvShape& s);
  void (*backward)(float* dx, float* dw, const float* dy, const float* x, const float* w,
                   const CausalConvShape& s);
};
LT_ISA_TABLE(CausalConv1dKernels, kCausalConv1dKernels)

}  // namespace lt
