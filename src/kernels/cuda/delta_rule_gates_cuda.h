// The Gated DeltaNet's gates on the GPU, fp32, with the contract of
// kernels/cpu/delta_rule_gates.h (beta = sigmoid(b), decay = -exp(A_log) softplus(a +
// dt_bias), torch's softplus threshold; backward db, da overwritten, the per-head dt_bias
// and A_log gradients accumulated). The per-head sums run in float64, one block per head
// in a fixed order, so they are the same bits run to run. Device pointers; stream is a
// cudaStream_t (null: the default stream).
#pragma once

#include <cstdint>

namespace lt::cuda {

void delta_rule_gates_forward(float* beta, float* decay, const float* b, const float* a, const float* A_log,
                              const float* dt_bias, int64_t T, int64_t H, void* stream = nullptr);
void delta_rule_gates_backward(float* db, float* da, float* d_dt_bias, float* d_A_log, const float* dbeta,
                               const float* dg, const float* a, const float* beta, const float* decay,
                               const float* A_log, const float* dt_bias, int64_t T, int64_t H,
                               void* stream = nullptr);

}  // namespace lt::cuda
