// Portable kernels (the scalar level's table): the plain fp32 reference of the fused step.
// Every multiply-add that the vector kernels fuse is an explicit std::fma here, and nothing
// else is fusable, so the result does not depend on the compiler's -ffp-contract choice.
#include <algorithm>
#include <cmath>

#include "optim/adamw_kernels.h"
#include "optim/quant_map.h"

#define LT_ISA_TARGET 0
#include "core/isa_target.h"

namespace lt::LT_ISA_NS {

namespace {

inline float load_grad(const AdamWTensorArgs& a, int64_t i) {
  return a.grad_f32 ? a.grad_f32[i] : bf16_to_f32(a.grad_bf16[i]);
}

// Fresh m, v of one element; returns false when v is NaN or Inf.
inline bool moments(float g, float m_old, float v_old, const AdamWStepConsts& c, float* m, float* v) {
  g = g * c.clip;
  *m = std::fma(c.beta1, m_old, c.one_minus_beta1 * g);
  *v = std::fma(c.beta2, v_old, (c.one_minus_beta2 * g) * g);
  return *v < INFINITY;  // false for +Inf and NaN (v >= 0 otherwise)
}

inline float new_param(float p, float m, float v, const AdamWStepConsts& c) {
  const float denom = std::fma(std::sqrt(v), c.inv_sqrt_bc2, c.eps);
  return std::fma(-c.step_size, m / denom, p * c.decay);
}

int64_t adamw8_blocks(const AdamWTensorArgs& a, const AdamW8State& s, const AdamWStepConsts& c,
                      int64_t first_block, int64_t last_block) {
  const QuantMap& qm = signed_dynamic_map();
  const QuantMap& qv = unsigned_dynamic_map();
  float m[kMaxAdamWBlock], v[kMaxAdamWBlock];
  int64_t skipped = 0;
  for (int64_t b = first_block; b < last_block; ++b) {
    const int64_t i0 = b * a.block, len = std::min(a.block, a.n - i0);
    const float am_old = s.m_absmax[b], av_old = s.v_absmax[b];
    float am = 0.f, av = 0.f;
    bool finite = true;
    for (int64_t j = 0; j < len; ++j) {
      const int64_t i = i0 + j;
      finite &= moments(load_grad(a, i), qm.value[s.m_code[i]] * am_old, qv.value[s.v_code[i]] * av_old, c,
                        &m[j], &v[j]);
      am = std::max(am, std::fabs(m[j]));
      av = std::max(av, v[j]);
    }
    if (!finite) {
      ++skipped;
      continue;
    }
    // absmax 0 means the whole block is 0: normalize by 0 (not by 1/0 = inf) so 0 -> code of 0.
    const float im = am > 0 ? 1.0f / am : 0.f, iv = av > 0 ? 1.0f / av : 0.f;
    for (int64_t j = 0; j < len; ++j) {
      const int64_t i = i0 + j;
      const float p = new_param(a.param[i], m[j], v[j], c);
      a.param[i] = p;
      if (a.out_bf16) a.out_bf16[i] = f32_to_bf16(p);
      s.m_code[i] = quantize_nearest(qm, m[j] * im);
      s.v_code[i] = quantize_nearest(qv, v[j] * iv);
    }
    s.m_absmax[b] = am;
    s.v_absmax[b] = av;
  }
  return skipped;
}

int64_t adamw32_blocks(const AdamWTensorArgs& a, const AdamW32State& s, const AdamWStepConsts& c,
                       int64_t first_block, int64_t last_block) {
  float m[kMaxAdamWBlock], v[kMaxAdamWBlock];
  int64_t skipped = 0;
  for (int64_t b = first_block; b < last_block; ++b) {
    const int64_t i0 = b * a.block, len = std::min(a.block, a.n - i0);
    bool finite = true;
    for (int64_t j = 0; j < len; ++j)
      finite &= moments(load_grad(a, i0 + j), s.m[i0 + j], s.v[i0 + j], c, &m[j], &v[j]);
    if (!finite) {
      ++skipped;
      continue;
    }
    for (int64_t j = 0; j < len; ++j) {
      const int64_t i = i0 + j;
      const float p = new_param(a.param[i], m[j], v[j], c);
      a.param[i] = p;
      s.m[i] = m[j];
      s.v[i] = v[j];
      if (a.out_bf16) a.out_bf16[i] = f32_to_bf16(p);
    }
  }
  return skipped;
}

void quantize(const QuantMap& map, const float* x, uint8_t* code, int64_t n) {
  for (int64_t i = 0; i < n; ++i) code[i] = quantize_nearest(map, x[i]);
}

void dequantize(const QuantMap& map, const uint8_t* code, float absmax, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = map.value[code[i]] * absmax;
}

}  // namespace

extern const AdamWKernels kAdamWKernels{"scalar", adamw8_blocks, adamw32_blocks, quantize, dequantize};

}  // namespace lt::LT_ISA_NS

#include "core/isa_target_end.h"
