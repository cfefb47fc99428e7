// The gated delta rule (Qwen3.5/3.6 Gated DeltaNet's linear attention), in its chunked
// form, forward and backward, fp32. The reference is transformers'
// torch_chunk_gated_delta_rule with use_qk_l2norm_in_kernel=True (models/qwen3_5).
//
// Per batch b and value head h (key head h / (Hv / Hk): each key head serves Hv / Hk
// consecutive value heads), with a state S of [dk, dv]:
//   q_t = l2norm(q_raw_t) / sqrt(dk),  k_t = l2norm(k_raw_t),  l2norm(x) = x / sqrt(|x|^2 + 1e-6)
//   S   = exp(g_t) S;   S += k_t (beta_t (v_t - S^T k_t))^T;   o_t = S^T q_t
// computed chunk by chunk (chunk length a parameter, 64 by default): within a chunk the
// updates are the lower-triangular system (I + L) Delta = R, solved by substitution, with
// L[r,s] = beta_r (k_r . k_s) exp(G_r - G_s) (s < r, G the in-chunk cumulative g) and
// R_r = beta_r (v_r - exp(G_r) S0^T k_r); then o_r = exp(G_r) S0^T q_r +
// sum_{s<=r} (q_r . k_s) exp(G_r - G_s) Delta_s and S1 = exp(G_last) S0 +
// sum_r exp(G_last - G_r) k_r Delta_r^T. A partial last chunk is just shorter (the
// reference's zero padding changes nothing). g is the log decay (<= 0 in the model; not
// checked); every exponent the kernel takes is a difference G_r - G_s with s <= r.
//
// Layouts, row-major: q, k [B, S, Hk, dk]; v, out [B, S, Hv, dv]; g, beta [B, S, Hv];
// states [B, Hv, dk, dv]; chunk_states [B, Hv, n_chunks, dk, dv], n_chunks = ceil(S / chunk).
//
// What backward needs from forward: the inputs and chunk_states (the state at the start of
// each chunk, the first being the initial state or zero). Backward recomputes everything
// inside a chunk from those (the normalized q/k, the decays, L, Delta), so the saved
// memory is n_chunks * dk * dv per (b, h), 1/chunk of what saving per-token states would be.
//
// Threads: forward over (b, value head); backward over (b, key head), the value heads of
// a group in turn (they share dq, dk). Results do not depend on the thread count.
// Workspace: caller-provided, gated_delta_rule_*_workspace_floats() floats (independent of
// S); no allocation inside. All gradients overwrite.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/isa_dispatch.h"

namespace lt {

struct GatedDeltaShape {
  int64_t batch = 1, seq = 0;
  int64_t k_heads = 1, v_heads = 1;  // v_heads must be a multiple of k_heads
  int64_t k_dim = 0, v_dim = 0;
  int64_t chunk = 64;

  int64_t n_chunks() const { return (seq + chunk - 1) / chunk; }
  int64_t state_floats() const { return batch * v_heads * k_dim * v_dim; }
  int64_t chunk_state_floats() const { return state_floats() * n_chunks(); }
};

// Throws lt::Error naming the bad field when the shape cannot be run.
void check_gated_delta_shape(const GatedDeltaShape& s);

size_t gated_delta_rule_forward_workspace_floats(const GatedDeltaShape& s);
size_t gated_delta_rule_backward_workspace_floats(const GatedDeltaShape& s);

// out [B,S,Hv,dv]; final_state [B,Hv,dk,dv] or null; chunk_states (saved for backward) or
// null; initial_state [B,Hv,dk,dv] or null (zero).
void gated_delta_rule_forward(float* out, float* final_state, float* chunk_states, const float* q,
                              const float* k, const float* v, const float* g, const float* beta,
                              const float* initial_state, const GatedDeltaShape& s,
                              float* workspace);

// dq, dk [B,S,Hk,dk]; dv [B,S,Hv,dv]; dg, dbeta [B,S,Hv]; d_initial_state [B,Hv,dk,dv] or
// null (then not computed); d_out [B,S,Hv,dv]; d_final_state or null (zero);
// chunk_states from the forward with the same inputs.
void gated_delta_rule_backward(float* dq, float* dk, float* dv, float* dg, float* dbeta,
                               float* d_initial_state, const float* d_out,
                               const float* d_final_state, const float* q, const float* k,
                               const float* v, const float* g, const float* beta,
                               const float* chunk_states, const GatedDeltaShape& s,
                               float* workspace);

// One table per ISA level, compiled from gated_delta_rule_simd.cpp; the shape is checked
// and the workspace sized by the functions above.
struct GatedDeltaRuleKernels {
  void (*forward)(float* out, float* final_state, float* chunk_states, const float* q,
                  const float* k, const float* v, const float* g, const float* beta,
                  const float* initial_state, const GatedDeltaShape& s, float* workspace);
  void (*backward)(float* dq, float* dk, float* dv, float* dg, float* dbeta,
                   float* d_initial_state, const float* d_out, const float* d_final_state,
                   const float* q, const float* k, const float* v, const float* g,
                   const float* beta, const float* chunk_states, const GatedDeltaShape& s,
                   float* workspace);
};
LT_ISA_TABLE(GatedDeltaRuleKernels, kGatedDeltaRuleKernels)

// The per-task scratch layouts, shared by the sizing functions and the kernels.
namespace gdr {
inline int64_t forward_task_floats(const GatedDeltaShape& s) {
  const int64_t C = s.chunk, dk = s.k_dim, dv = s.v_dim;
  // q, k chunk (normalized), G (hi and lo), decays, L, P, Delta, state, k transposed, a
  // row of coefficients
  return 2 * C * dk + 2 * C + 3 * C * C + C * dv + dk * dv + dk * C + C;
}
inline int64_t backward_task_floats(const GatedDeltaShape& s) {
  const int64_t C = s.chunk, dk = s.k_dim, dv = s.v_dim, grp = s.v_heads / s.k_heads;
  // forward's, plus: dq/dk chunk accumulators; inverse norms, dG, e, w, dG's column sums; dDelta, dR;
  // S0 dO, S0 dR, dS1 Delta rows; the two pair matrices; S0 and dS1 transposed; the scaled
  // q and k, Delta and a pair matrix transposed; the group's carried dS
  return forward_task_floats(s) + 2 * C * dk + 6 * C + 2 * C * dv + 3 * C * dk + 2 * C * C +
         2 * dv * dk + 2 * dk * C + dv * C + C * C + grp * dk * dv;
}
}  // namespace gdr

}  // namespace lt
