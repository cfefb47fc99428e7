#include "kernels/cpu/gated_delta_rule.h"

#include <string>

#include "core/error.h"

namespace lt {

void check_gated_delta_shape(const GatedDeltaShape& s) {
  const std::string where = "gated delta rule kernel";
  auto positive = [&](int64_t v, const char* name) {
    if (v <= 0)
      throw Error(std::string(name) + " is " + std::to_string(v), where,
                  "pass a positive " + std::string(name));
  };
  positive(s.batch, "batch");
  positive(s.seq, "seq");
  positive(s.k_heads, "k_heads");
  positive(s.v_heads, "v_heads");
  positive(s.k_dim, "k_dim");
  positive(s.v_dim, "v_dim");
  positive(s.chunk, "chunk");
  if (s.v_heads % s.k_heads != 0)
    throw Error("v_heads (" + std::to_string(s.v_heads) + ") is not a multiple of k_heads (" +
                    std::to_string(s.k_heads) + ")",
                where, "each key head serves v_heads / k_heads value heads; fix the config");
}

size_t gated_delta_rule_forward_workspace_floats(const GatedDeltaShape& s) {
  check_gated_delta_shape(s);
  return size_t(s.batch * s.v_heads * gdr::forward_task_floats(s));
}

size_t gated_delta_rule_backward_workspace_floats(const GatedDeltaShape& s) {
  check_gated_delta_shape(s);
  return size_t(s.batch * s.k_heads * gdr::backward_task_floats(s));
}

void gated_delta_rule_forward(float* out, float* final_state, float* chunk_states, const float* q,
                              const float* k, const float* v, const float* g, const float* beta,
                              const float* initial_state, const GatedDeltaShape& s,
                              float* workspace) {
  check_gated_delta_shape(s);
  LT_ASSERT(out && q && k && v && g && beta && workspace);
  LT_ISA_PICK(kGatedDeltaRuleKernels)
      .forward(out, final_state, chunk_states, q, k, v, g, beta, initial_state, s, workspace);
}

void gated_delta_rule_backward(float* dq, float* dk, float* dv, float* dg, float* dbeta,
                               float* d_initial_state, const float* d_out,
                               const float* d_final_state, const float* q, const float* k,
                               const float* v, const float* g, const float* beta,
                               const float* chunk_states, const GatedDeltaShape& s,
                               float* workspace) {
  check_gated_delta_shape(s);
  if (!chunk_states)
    throw Error("no chunk states given", "gated delta rule backward",
                "pass the chunk_states buffer that the forward with the same inputs filled");
  LT_ASSERT(dq && dk && dv && dg && dbeta && d_out && q && k && v && g && beta && workspace);
  LT_ISA_PICK(kGatedDeltaRuleKernels)
      .backward(dq, dk, dv, dg, dbeta, d_initial_state, d_out, d_final_state, q, k, v, g, beta,
                chunk_states, s, workspace);
}

}  // namespace lt
