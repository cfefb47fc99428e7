// The kernel table: every op family the models run, forward and backward, as one table of
// function pointers that a backend hands out (exec/backend.h: Backend::kernels()), after
// ggml-backend's split of "what the graph needs" from "who computes it". The CPU table
// (kernels/cpu/cpu_kernel_table.cpp) holds the dispatched kernels of kernels/cpu/; the CUDA
// table (kernels/cuda/cuda_kernel_table.h) holds kernels/cuda/'s, with the same signatures
// over device pointers.
//
// Each entry has exactly its CPU kernel's signature and contract (outputs first, then
// inputs, then sizes; whether backward overwrites or accumulates is said in the kernel's
// header, kernels/cpu/<family>.h). The shape structs are those headers' too.
//
// Not in the table yet: the MoE layer (its router's top-k and load-balancing loss, and its
// per-expert GEMMs on per-thread oneDNN contexts, layers/moe_mlp.cpp: issue 28 decides its
// entries); and the fills and copies of the compute tier, which the backend already runs
// (Backend::fill_compute, copy_within_compute).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "kernels/cpu/causal_conv1d.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/gated_delta_rule.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/matmul.h"
#include "kernels/head_cross_entropy_stream.h"

namespace lt {

struct KernelTable {
  const char* name = nullptr;

  // Embedding: kernels/cpu/embedding.h.
  void (*embedding_forward)(float* out, const int32_t* tokens, const float* table, int64_t T, int64_t V,
                            int64_t C) = nullptr;
  void (*embedding_backward)(float* dtable, const int32_t* tokens, const float* dout, int64_t T, int64_t V,
                             int64_t C) = nullptr;

  // RMSNorm, scaling by (w_offset + w) (kernels/cpu/rmsnorm.h), and its gated form
  // (kernels/cpu/gated_rmsnorm.h).
  void (*rmsnorm_forward)(float* y, float* rstd, const float* x, const float* w, int64_t T, int64_t C, float eps,
                          float w_offset) = nullptr;
  void (*rmsnorm_backward)(float* dx, float* dw, const float* dy, const float* x, const float* w,
                           const float* rstd, int64_t T, int64_t C, float w_offset) = nullptr;
  void (*gated_rmsnorm_forward)(float* y, float* rstd, const float* x, const float* z, const float* w, int64_t T,
                                int64_t D, float eps) = nullptr;
  size_t (*gated_rmsnorm_backward_workspace_floats)(int64_t T, int64_t D) = nullptr;
  void (*gated_rmsnorm_backward)(float* dx, float* dz, float* dw, const float* dy, const float* x, const float* z,
                                 const float* w, const float* rstd, int64_t T, int64_t D,
                                 float* workspace) = nullptr;

  // RoPE, whole or partial (rotary channels of each head; 0: all), at given positions or
  // 0..S-1 (positions null): kernels/cpu/rope.h.
  void (*rope_forward)(float* x, const float* cos, const float* sin, int64_t B, int64_t S, int64_t H, int64_t D,
                       const int32_t* positions, int64_t rotary) = nullptr;
  void (*rope_backward)(float* dx, const float* cos, const float* sin, int64_t B, int64_t S, int64_t H,
                        int64_t D, const int32_t* positions, int64_t rotary) = nullptr;

  // Causal grouped-query attention with document masks and sliding windows:
  // kernels/cpu/attention.h. p is the step's precision: under Precision::BF16 a table may
  // take bf16 operands (the CUDA table's tensor-core kernels, kernels/cuda/attention_tc_cuda.h);
  // the CPU's computes in fp32 under both, bit for bit alike.
  void (*attention_forward)(float* o, float* lse, const float* q, const float* k, const float* v, int64_t B,
                            int64_t S, int64_t Hq, int64_t Hkv, int64_t D, float scale, const int32_t* doc_start,
                            int64_t window, Precision p) = nullptr;
  void (*attention_backward)(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                             const float* v, const float* o, const float* lse, int64_t B, int64_t S, int64_t Hq,
                             int64_t Hkv, int64_t D, float scale, const int32_t* doc_start, int64_t window,
                             Precision p) = nullptr;

  // Gated MLP activations: kernels/cpu/swiglu.h, kernels/cpu/geglu.h.
  void (*swiglu_forward)(float* h, const float* g, const float* u, int64_t n) = nullptr;
  void (*swiglu_backward)(float* dg, float* du, const float* dh, const float* g, const float* u,
                          int64_t n) = nullptr;
  void (*geglu_forward)(float* h, const float* g, const float* u, int64_t n) = nullptr;
  void (*geglu_backward)(float* dg, float* du, const float* dh, const float* g, const float* u,
                         int64_t n) = nullptr;

  // Linear layers and plain GEMMs: kernels/cpu/linear.h, kernels/cpu/matmul.h.
  void (*linear_forward)(float* y, LinearInput x, const float* w, const bf16* w_bf16, const float* bias,
                         int64_t M, int64_t K, int64_t N, Precision p) = nullptr;
  void (*linear_backward)(float* dx, float* dw, float* dbias, const float* dy, LinearInput x, const float* w,
                          const bf16* w_bf16, int64_t M, int64_t K, int64_t N, bool accumulate_dx,
                          Precision p) = nullptr;
  // An activation that only linear layers read, rounded once in place where this
  // backend's GEMMs would each round it again under p; true: pass it as LinearInput{x, true}.
  // gemm_inputs_rounded(p) is the same answer without the rounding (for backward, which
  // relies on it: the bf16 path must not change between a layer's forward and its backward,
  // or an unrounded activation would be read as exact).
  bool (*round_gemm_input)(float* x, int64_t n, Precision p) = nullptr;
  bool (*gemm_inputs_rounded)(Precision p) = nullptr;
  void (*matmul)(float* c, const float* a, bool trans_a, const float* b, bool trans_b, int64_t M, int64_t N,
                 int64_t K, bool accumulate, Precision p) = nullptr;

  // The Gated DeltaNet's causal conv1d with SiLU and its chunked gated delta rule:
  // kernels/cpu/causal_conv1d.h, kernels/cpu/gated_delta_rule.h.
  void (*causal_conv1d_silu_forward)(float* y, const float* x, const float* w, const CausalConvShape& s) = nullptr;
  void (*causal_conv1d_silu_backward)(float* dx, float* dw, const float* dy, const float* x, const float* w,
                                      const CausalConvShape& s) = nullptr;
  // Its gates, beta and the log-decay, from in_proj_b and in_proj_a's outputs:
  // kernels/cpu/delta_rule_gates.h.
  void (*delta_rule_gates_forward)(float* beta, float* decay, const float* b, const float* a, const float* A_log,
                                   const float* dt_bias, int64_t T, int64_t H) = nullptr;
  void (*delta_rule_gates_backward)(float* db, float* da, float* d_dt_bias, float* d_A_log, const float* dbeta,
                                    const float* dg, const float* a, const float* beta, const float* decay,
                                    const float* A_log, const float* dt_bias, int64_t T, int64_t H) = nullptr;
  size_t (*gated_delta_rule_forward_workspace_floats)(const GatedDeltaShape& s) = nullptr;
  size_t (*gated_delta_rule_backward_workspace_floats)(const GatedDeltaShape& s) = nullptr;
  void (*gated_delta_rule_forward)(float* out, float* final_state, float* chunk_states, const float* q,
                                   const float* k, const float* v, const float* g, const float* beta,
                                   const float* initial_state, const GatedDeltaShape& s,
                                   float* workspace) = nullptr;
  void (*gated_delta_rule_backward)(float* dq, float* dk, float* dv, float* dg, float* dbeta,
                                    float* d_initial_state, const float* d_out, const float* d_final_state,
                                    const float* q, const float* k, const float* v, const float* g,
                                    const float* beta, const float* chunk_states, const GatedDeltaShape& s,
                                    float* workspace) = nullptr;

  // The head and cross-entropy in vocabulary chunks, forward and backward in one call, in
  // a workspace of head_cross_entropy_workspace_bytes (streamed false): kernels/cpu/cross_entropy.h.
  // head_options: the logit budget and sub-chunk the table's callers pass it (the
  // executor, its scratch sizes, ModelStep). The CPU's default keeps a sub-chunk's logits
  // near the caches; a GPU's takes wide sub-chunks, since its products need many
  // vocabulary rows each to run near their peak.
  CrossEntropyOptions head_options;
  size_t (*head_cross_entropy_workspace_bytes)(int64_t T, int64_t C, int64_t V, Precision p, bool streamed,
                                               const CrossEntropyOptions& opt) = nullptr;
  double (*head_cross_entropy)(float* dx, float* dw, const float* x, const float* w, const bf16* w_bf16,
                               const int32_t* targets, int64_t T, int64_t C, int64_t V, float grad_scale,
                               Precision p, const CrossEntropyOptions& opt, void* workspace) = nullptr;
  // The rows of the vocabulary sub-chunk it works in for T tokens under head_options: a
  // head streamed in row chunks that are multiples of it gives the whole head's bits.
  int64_t (*head_cross_entropy_vocab_chunk)(int64_t T, int64_t V, Precision p) = nullptr;
  // The same over an lm_head streamed in row chunks (kernels/head_cross_entropy_stream.h):
  // the same chunks in the same order, so the same bits, in a workspace of
  // head_cross_entropy_workspace_bytes (streamed true). x, targets and the workspace are
  // read until the stream is destroyed.
  std::unique_ptr<HeadCrossEntropyStream> (*head_cross_entropy_stream)(const float* x, const int32_t* targets,
                                                                       int64_t T, int64_t C, int64_t V,
                                                                       float grad_scale, Precision p,
                                                                       const CrossEntropyOptions& opt,
                                                                       void* workspace) = nullptr;

  // The block's small elementwise steps (residual adds, the embedding scale and padding
  // row, the output gate, row copies between layouts): kernels/cpu/elementwise.h.
  void (*add_inplace)(float* y, const float* x, int64_t n) = nullptr;
  void (*add_into)(float* y, const float* a, const float* b, int64_t n) = nullptr;
  void (*scale_inplace)(float* x, float s, int64_t n) = nullptr;
  void (*zero_rows_with_id)(float* x, const int32_t* ids, int64_t T, int64_t C, int32_t id) = nullptr;
  void (*copy_rows)(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
                    int64_t cols) = nullptr;
  void (*sigmoid_gate_forward)(float* y, const float* x, const float* gate, int64_t n) = nullptr;
  void (*sigmoid_gate_backward)(float* dx, float* dgate, const float* dy, const float* x, const float* gate,
                                int64_t n) = nullptr;

  // Sum of squares in float64 (gradient clipping): kernels/cpu/sum_of_squares.h.
  double (*sum_of_squares)(const float* x, int64_t n) = nullptr;

  // fp32 to bf16, round to nearest even (the compute copy of the weights): core/dtype.h.
  void (*convert_f32_to_bf16)(bf16* dst, const float* src, size_t n) = nullptr;

  // The compute-tier scratch each of these entries takes per call beyond its arguments,
  // which their CPU signatures give no workspace for: the CUDA table takes it from its
  // stream-ordered pool (cudaMallocAsync), outside the executor's arena, and gives it back
  // when the call's kernels are done, so a plan counts the most that any one call of a step
  // takes (exec/streaming_executor.h: kernel_pool_scratch_bytes). Null: the entry takes
  // none on the compute tier (the CPU's, whose scratch is the host's stack and heap). Not
  // here: the embedding's backward, which takes the pool's scratch too (its sort) but which
  // the streaming executor runs on the host (exec/gradient_sink.cpp).
  struct PoolScratch {
    size_t (*linear_forward)(int64_t M, int64_t K, int64_t N, Precision p, bool has_w_bf16) = nullptr;
    size_t (*linear_backward)(int64_t M, int64_t K, int64_t N, Precision p, bool has_w_bf16,
                              bool has_dbias) = nullptr;
    size_t (*attention_forward)(int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, Precision p) = nullptr;
    size_t (*attention_backward)(int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, Precision p) = nullptr;
    size_t (*rmsnorm_backward)(int64_t T, int64_t C) = nullptr;
    size_t (*causal_conv1d_silu_backward)(const CausalConvShape& s) = nullptr;
  };
  PoolScratch pool_scratch;
};

// The CPU kernels, each dispatched at run time to the ISA level the machine allows.
const KernelTable& cpu_kernel_table();

}  // namespace lt
