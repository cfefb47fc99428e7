// The gated delta rule (Qwen3.5 Gated DeltaNet's linear attention) on the GPU, fp32, in
// the chunked form of kernels/cpu/gated_delta_rule.h, with its contract, layouts and
// shape struct: q, k [B,S,Hk,dk]; v, out [B,S,Hv,dv]; g, beta [B,S,Hv]; states
// [B,Hv,dk,dv]; chunk_states [B,Hv,n_chunks,dk,dv] (the state at each chunk's start,
// saved for the backward). Queries and keys are l2-normalized inside (eps 1e-6), queries
// scaled by 1/sqrt(dk).
//
// Correctness-first kernels: one block per (batch, value head) forward and per (batch, key
// head) backward (the group's value heads in turn: they share dq, dk), the chunk matrices
// and states in a global workspace, every sum one thread's in-order chain (the CPU
// kernel's chains; the l2 norms' and one state dot's are block or warp reductions). They
// are the reference a tensor-core kernel will be checked against, not the fast path.
// All pointers are device pointers; stream is a cudaStream_t (null: the default stream).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/gated_delta_rule.h"

namespace lt::cuda {

size_t gated_delta_rule_forward_workspace_bytes(const GatedDeltaShape& s);

// final_state, chunk_states, initial_state may be null (initial: zero). Throws
// std::invalid_argument naming the bad field for a shape it cannot run.
void gated_delta_rule_forward(float* out, float* final_state, float* chunk_states, const float* q, const float* k,
                              const float* v, const float* g, const float* beta, const float* initial_state,
                              const GatedDeltaShape& s, void* workspace, void* stream = nullptr);

size_t gated_delta_rule_backward_workspace_bytes(const GatedDeltaShape& s);

// dq, dk [B,S,Hk,dk]; dv [B,S,Hv,dv]; dg, dbeta [B,S,Hv]; d_initial_state or null; d_out;
// d_final_state or null (zero); chunk_states from the forward with the same inputs. All
// gradients overwrite.
void gated_delta_rule_backward(float* dq, float* dk, float* dv, float* dg, float* dbeta, float* d_initial_state,
                               const float* d_out, const float* d_final_state, const float* q, const float* k,
                               const float* v, const float* g, const float* beta, const float* chunk_states,
                               const GatedDeltaShape& s, void* workspace, void* stream = nullptr);

}  // namespace lt::cuda
