// AdamW hyper-parameters and the per-step constants every kernel (scalar, AVX-512, CUDA)
// uses, so that all of them evaluate the same fp32 expression in the same order:
//
//   g  = grad * clip                               (clip = min(1, max_norm / (norm + 1e-6)))
//   m  = fma(beta1, m_old, (1 - beta1) * g)
//   v  = fma(beta2, v_old, ((1 - beta2) * g) * g)
//   p  = fma(-step_size, m / fma(sqrt(v), inv_sqrt_bc2, eps), p * decay)
//   out_bf16 = bf16(p)                             (round to nearest even)
//
// with decay = 1 - lr * weight_decay (decoupled decay), step_size = lr / (1 - beta1^t),
// inv_sqrt_bc2 = 1 / sqrt(1 - beta2^t): bias correction folded into two scalars computed
// once per step in float64. The parameter update uses the fresh fp32 m and v; the 8-bit
// path quantizes them afterwards (as bitsandbytes does).
#pragma once

#include <cstdint>

namespace lt {

struct AdamWHyper {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
};

struct AdamWStepConsts {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float eps, decay, step_size, inv_sqrt_bc2, clip;
};

// step is 1-based (the first update is step 1). Throws lt::Error on a bad lr/step/clip.
AdamWStepConsts make_step_consts(const AdamWHyper& h, float lr, float clip_factor, int64_t step);

}  // namespace lt
