// RMSNorm on the GPU, fp32, with the contract of kernels/cpu/rmsnorm.h:
//   forward:  rstd[t] = 1/sqrt(mean_c x[t,c]^2 + eps);  y[t,c] = x[t,c] * rstd[t] * (w_offset + w[c])
//   backward: dx overwrites; dw accumulates (+=).
// All pointers are device pointers; stream is a cudaStream_t (null: the default stream).
// Sums run in a fixed order (one block per row; dw over fixed token chunks added in chunk
// order), so the bits never depend on scheduling.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lt::cuda {

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t T, int64_t C, float eps,
                     float w_offset, void* stream = nullptr);

// Device scratch backward needs for dw's per-chunk partial sums.
size_t rmsnorm_backward_workspace_bytes(int64_t T, int64_t C);
void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd,
                      int64_t T, int64_t C, float w_offset, void* workspace, void* stream = nullptr);

}  // namespace lt::cuda
