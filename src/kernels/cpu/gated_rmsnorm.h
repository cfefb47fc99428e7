// The gated RMSNorm of Qwen3.5/3.6 Gated DeltaNet (transformers' Qwen3_5RMSNormGated),
// fp32, over the last dimension D (the value head dim), norm before gate:
//   rstd[t] = 1 / sqrt(mean_d x[t,d]^2 + eps)
//   y[t,d]  = w[d] * (x[t,d] * rstd[t]) * silu(z[t,d]),   silu(z) = z / (1 + exp(-z))
// The weight multiplies as is (initialized to ones; not the 1 + w of some other norms).
// x, z, y [T, D] row-major (T = tokens * value heads), w [D], rstd [T] (saved by forward).
// Backward: dx, dz overwrite; dw accumulates (+=). dw is summed over fixed token chunks
// (partials in the caller's workspace) added in order, so results do not depend on the
// thread count.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/isa_dispatch.h"

namespace lt {

constexpr int64_t kGatedRmsnormTokenChunk = 256;  // tokens per dw partial

void gated_rmsnorm_forward(float* y, float* rstd, const float* x, const float* z, const float* w,
                           int64_t T, int64_t D, float eps);
size_t gated_rmsnorm_backward_workspace_floats(int64_t T, int64_t D);
void gated_rmsnorm_backward(float* dx, float* dz, float* dw, const float* dy, const float* x,
                            const float* z, const float* w, const float* rstd, int64_t T,
                            int64_t D, float* workspace);

struct GatedRmsnormKernels {
  void (*forward)(float* y, float* rstd, const float* x, const float* z, const float* w,
                  int64_t T, int64_t D, float eps);
  // partial [ceil(T / token_chunk), D], zeroed by the caller, gets each chunk's dw sum.
  void (*backward)(float* dx, float* dz, float* partial, const float* dy, const float* x,
                   const float* z, const float* w, const float* rstd, int64_t T, int64_t D,
                   int64_t token_chunk);
};
LT_ISA_TABLE(GatedRmsnormKernels, kGatedRmsnormKernels)

}  // namespace lt
