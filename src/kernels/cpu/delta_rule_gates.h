// The Gated DeltaNet's per-head gates, from its in_proj_b and in_proj_a outputs b, a
// ([T, H], H value heads) and the per-head parameters A_log and dt_bias [H], as
// transformers' Qwen3.5 computes them:
//   beta  = sigmoid(b)                                   (the delta rule's write strength)
//   decay = -exp(A_log) * softplus(a + dt_bias)          (the log-decay g, <= 0)
// softplus as torch's F.softplus with its defaults (beta 1, threshold 20): x itself above
// 20, else log1p(exp(x)); its derivative as torch's backward takes it: 1 above 20, else
// sigmoid(x). Backward, from dbeta and dg (the gradients of beta and decay):
//   db = dbeta * beta (1 - beta)                 (overwrites; db may be dbeta)
//   da = dg * -exp(A_log) * softplus'(a + dt_bias)   (overwrites; da may be a)
//   d_dt_bias += sum_t da,  d_A_log += sum_t dg * decay   (dg/dA_log = decay)
// The per-head sums run over t in order in float64, one head at a time, so nothing depends
// on the thread count. A kernel-table entry (kernels/kernel_table.h) with a device version
// (kernels/cuda/delta_rule_gates_cuda.h).
#pragma once

#include <cmath>
#include <cstdint>

namespace lt {

// beta may be b, decay may be a (in place).
void delta_rule_gates_forward(float* beta, float* decay, const float* b, const float* a, const float* A_log,
                              const float* dt_bias, int64_t T, int64_t H);
void delta_rule_gates_backward(float* db, float* da, float* d_dt_bias, float* d_A_log, const float* dbeta,
                               const float* dg, const float* a, const float* beta, const float* decay,
                               const float* A_log, const float* dt_bias, int64_t T, int64_t H);

inline constexpr float kSoftplusThreshold = 20.0f;

namespace ref {
template <typename F>
F softplus(F x) {
  return x > F(kSoftplusThreshold) ? x : std::log1p(std::exp(x));
}
template <typename F>
F softplus_grad(F x) {
  return x > F(kSoftplusThreshold) ? F(1) : F(1) / (F(1) + std::exp(-x));
}
template <typename F>
void delta_rule_gates_forward(F* beta, F* decay, const F* b, const F* a, const F* A_log, const F* dt_bias, int64_t T,
                              int64_t H) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < H; ++j) {
      const int64_t i = t * H + j;
      beta[i] = F(1) / (F(1) + std::exp(-b[i]));
      decay[i] = -std::exp(A_log[j]) * softplus(a[i] + dt_bias[j]);
    }
}
// d_dt_bias and d_A_log accumulate, as the kernel's do.
template <typename F>
void delta_rule_gates_backward(F* db, F* da, F* d_dt_bias, F* d_A_log, const F* dbeta, const F* dg, const F* a,
                               const F* beta, const F* decay, const F* A_log, const F* dt_bias, int64_t T,
                               int64_t H) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < H; ++j) {
      const int64_t i = t * H + j;
      db[i] = dbeta[i] * beta[i] * (F(1) - beta[i]);
      da[i] = dg[i] * -std::exp(A_log[j]) * softplus_grad(a[i] + dt_bias[j]);
      d_dt_bias[j] += da[i];
      d_A_log[j] += dg[i] * decay[i];
    }
}
}  // namespace ref

}  // namespace lt
