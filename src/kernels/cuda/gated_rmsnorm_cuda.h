// The gated RMSNorm of Qwen3.5 Gated DeltaNet on the GPU, fp32, with the contract of
// kernels/cpu/gated_rmsnorm.h (norm before gate; the weight multiplies as is):
//   rstd[t] = 1/sqrt(mean_d x[t,d]^2 + eps);  y[t,d] = w[d] (x[t,d] rstd[t]) silu(z[t,d])
// x, z, y [T, D] row-major (T = tokens * value heads, D the value head dim), w [D].
// Backward: dx, dz overwrite; dw accumulates (+=). One warp per row (D is a head's width,
// 128 in the released models); dw over fixed token chunks added in chunk order, so the
// bits never depend on scheduling. All pointers are device pointers; stream is a
// cudaStream_t (null: the default stream).
#pragma once

#include <cstddef>
#include <cstdint>

namespace lt::cuda {

void gated_rmsnorm_forward(float* y, float* rstd, const float* x, const float* z, const float* w, int64_t T,
                           int64_t D, float eps, void* stream = nullptr);

size_t gated_rmsnorm_backward_workspace_bytes(int64_t T, int64_t D);
void gated_rmsnorm_backward(float* dx, float* dz, float* dw, const float* dy, const float* x, const float* z,
                            const float* w, const float* rstd, int64_t T, int64_t D, void* workspace,
                            void* stream = nullptr);

}  // namespace lt::cuda
