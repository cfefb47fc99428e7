// RMSNorm over the last dimension (Llama/Qwen; also Qwen3's per-head q/k norm with
// C = head_dim and T = tokens*heads).
//   forward:  rstd[t] = 1/sqrt(mean_c x[t,c]^2 + eps);  y[t,c] = x[t,c] * rstd[t] * (w_offset + w[c])
//   backward: dx overwrites; dw accumulates (+=) (the gradient of w_offset + w is that of w).
// w_offset is 1 for Gemma's norms, which scale by (1 + w) with 1 + w rounded to fp32 first,
// as transformers computes it; 0 elsewhere.
// The fast path's dw reduction runs over fixed-size token chunks summed in a fixed order,
// so results are bitwise identical for any thread count (within one ISA level).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/isa_dispatch.h"

namespace lt {

// Pick the kernels of the ISA level in force (core/isa_dispatch.h).
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t T, int64_t C,
                     float eps, float w_offset = 0.0f);
void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                      const float* rstd, int64_t T, int64_t C, float w_offset = 0.0f);

// One table per ISA level, compiled from rmsnorm_simd.cpp.
struct RmsnormKernels {
  void (*forward)(float* y, float* rstd, const float* x, const float* w, int64_t T, int64_t C,
                  float eps, float w_offset);
  // dx overwrites; partial [ceil(T / token_chunk), C], zeroed by the caller, gets chunk k's
  // sum over its tokens (in order) of dy x rstd; the caller adds the chunks to dw in order.
  void (*backward)(float* dx, float* partial, const float* dy, const float* x, const float* w,
                   const float* rstd, int64_t T, int64_t C, float w_offset, int64_t token_chunk);
};
LT_ISA_TABLE(RmsnormKernels, kRmsnormKernels)

namespace ref {
template <typename T>
void rmsnorm_forward(T* y, T* rstd, const T* x, const T* w, int64_t n_tok, int64_t C, T eps) {
  for (int64_t t = 0; t < n_tok; ++t) {
    T ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += x[t * C + c] * x[t * C + c];
    T r = T(1) / std::sqrt(ss / T(C) + eps);
    rstd[t] = r;
    for (int64_t c = 0; c < C; ++c) y[t * C + c] = x[t * C + c] * r * w[c];
  }
}
template <typename T>
void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd,
                      int64_t n_tok, int64_t C) {
  for (int64_t t = 0; t < n_tok; ++t) {
    const T r = rstd[t];
    T dot = 0;  // sum_c dy*w*x
    for (int64_t c = 0; c < C; ++c) dot += dy[t * C + c] * w[c] * x[t * C + c];
    for (int64_t c = 0; c < C; ++c) {
      dx[t * C + c] = r * dy[t * C + c] * w[c] - r * r * r * x[t * C + c] * dot / T(C);
      dw[c] += dy[t * C + c] * x[t * C + c] * r;
    }
  }
}
}  // namespace ref

}  // namespace lt
