#include "kernels/cpu/delta_rule_gates.h"

namespace lt {

namespace {
float softplus(float x) { return x > kSoftplusThreshold ? x : std::log1p(std::exp(x)); }
float softplus_grad(float x) { return x > kSoftplusThreshold ? 1.0f : 1.0f / (1.0f + std::exp(-x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void delta_rule_gates_forward(float* beta, float* decay, const float* b, const float* a, const float* A_log,
                              const float* dt_bias, int64_t T, int64_t H) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < H; ++j) {
      const int64_t i = t * H + j;
      beta[i] = sigmoid(b[i]);
      decay[i] = -std::exp(A_log[j]) * softplus(a[i] + dt_bias[j]);
    }
}

void delta_rule_gates_backward(float* db, float* da, float* d_dt_bias, float* d_A_log, const float* dbeta,
                               const float* dg, const float* a, const float* beta, const float* decay,
                               const float* A_log, const float* dt_bias, int64_t T, int64_t H) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < H; ++j) {
      const int64_t i = t * H + j;
      const float bt = beta[i];
      db[i] = dbeta[i] * (bt * (1.0f - bt));
      da[i] = dg[i] * -std::exp(A_log[j]) * softplus_grad(a[i] + dt_bias[j]);
    }
  // One thread per head, tokens in order, float64 accumulators: a fixed summation.
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < H; ++j) {
    double sum_da = 0, sum_dA = 0;
    for (int64_t t = 0; t < T; ++t) {
      sum_da += da[t * H + j];
      sum_dA += double(dg[t * H + j]) * decay[t * H + j];
    }
    d_dt_bias[j] += static_cast<float>(sum_da);
    d_A_log[j] += static_cast<float>(sum_dA);
  }
}

}  // namespace lt
