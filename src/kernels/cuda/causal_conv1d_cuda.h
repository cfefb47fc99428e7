// Depthwise causal conv1d with SiLU on the GPU, fp32, with the contract of
// kernels/cpu/causal_conv1d.h (Qwen3.5 Gated DeltaNet's short convolution over the q/k/v
// projections):
//   a[b,t,c] = sum_{j<K} w[c,j] x[b, t-(K-1)+j, c]  (x = 0 before t = 0),  y = silu(a)
// x, y, dy, dx [B, S, C] row-major; w, dw [C, K]. Backward: dx overwrites, dw accumulates
// (+=). The pre-activation is recomputed from x and w where the backward needs it (K is
// small), so there is no saved activation and no workspace but dw's partials.
// Sums run in a fixed order (the taps in order; dw over fixed token chunks added in chunk
// order), so the bits never depend on scheduling. All pointers are device pointers; stream
// is a cudaStream_t (null: the default stream).
#pragma once

#include <cstddef>
#include <cstdint>

namespace lt::cuda {

inline constexpr int64_t kMaxConvKernelCuda = 16;

// Throws std::invalid_argument naming the bad field (kernel must be 1..kMaxConvKernelCuda).
void causal_conv1d_silu_forward(float* y, const float* x, const float* w, int64_t B, int64_t S, int64_t C,
                                int64_t K, void* stream = nullptr);

size_t causal_conv1d_backward_workspace_bytes(int64_t B, int64_t S, int64_t C, int64_t K);
void causal_conv1d_silu_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, int64_t B,
                                 int64_t S, int64_t C, int64_t K, void* workspace, void* stream = nullptr);

}  // namespace lt::cuda
