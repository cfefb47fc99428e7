// The CPU kernel table: the dispatched kernels of this folder, one entry each.
#include "kernels/kernel_table.h"

#include <memory>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/delta_rule_gates.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gated_rmsnorm.h"
#include "kernels/cpu/geglu.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/sum_of_squares.h"
#include "kernels/cpu/swiglu.h"

namespace lt {

namespace {

std::unique_ptr<HeadCrossEntropyStream> head_cross_entropy_stream(const float* x, const int32_t* targets, int64_t T,
                                                                  int64_t C, int64_t V, float grad_scale, Precision p,
                                                                  const CrossEntropyOptions& opt, void* workspace) {
  return std::make_unique<StreamedHeadCrossEntropy>(x, targets, T, C, V, grad_scale, p, opt, workspace);
}

int64_t head_cross_entropy_vocab_chunk(int64_t T, int64_t V, Precision p) {
  return cross_entropy_chunks(T, V, {}, p).vocab_chunk;
}

KernelTable make_cpu_kernel_table() {
  KernelTable k;
  k.name = "cpu";
  k.embedding_forward = &embedding_forward;
  k.embedding_backward = &embedding_backward;
  k.rmsnorm_forward = &rmsnorm_forward;
  k.rmsnorm_backward = &rmsnorm_backward;
  k.gated_rmsnorm_forward = &gated_rmsnorm_forward;
  k.gated_rmsnorm_backward_workspace_floats = &gated_rmsnorm_backward_workspace_floats;
  k.gated_rmsnorm_backward = &gated_rmsnorm_backward;
  k.rope_forward = &rope_forward;
  k.rope_backward = &rope_backward;
  // fp32 under both precisions (kernel_table.h).
  k.attention_forward = [](float* o, float* lse, const float* q, const float* kk, const float* v, int64_t B, int64_t S,
                           int64_t Hq, int64_t Hkv, int64_t D, float scale, const int32_t* doc_start, int64_t window,
                           Precision) {
    attention_forward(o, lse, q, kk, v, B, S, Hq, Hkv, D, scale, doc_start, window);
  };
  k.attention_backward = [](float* dq, float* dk, float* dv, const float* dout, const float* q, const float* kk,
                            const float* v, const float* o, const float* lse, int64_t B, int64_t S, int64_t Hq,
                            int64_t Hkv, int64_t D, float scale, const int32_t* doc_start, int64_t window, Precision) {
    attention_backward(dq, dk, dv, dout, q, kk, v, o, lse, B, S, Hq, Hkv, D, scale, doc_start, window);
  };
  k.swiglu_forward = &swiglu_forward;
  k.swiglu_backward = &swiglu_backward;
  k.geglu_forward = &geglu_forward;
  k.geglu_backward = &geglu_backward;
  k.linear_forward = &linear_forward;
  k.linear_backward = &linear_backward;
  k.round_gemm_input = &round_gemm_input;
  k.gemm_inputs_rounded = &gemm_inputs_rounded;
  k.matmul = &matmul;
  k.causal_conv1d_silu_forward = &causal_conv1d_silu_forward;
  k.causal_conv1d_silu_backward = &causal_conv1d_silu_backward;
  k.delta_rule_gates_forward = &delta_rule_gates_forward;
  k.delta_rule_gates_backward = &delta_rule_gates_backward;
  k.gated_delta_rule_forward_workspace_floats = &gated_delta_rule_forward_workspace_floats;
  k.gated_delta_rule_backward_workspace_floats = &gated_delta_rule_backward_workspace_floats;
  k.gated_delta_rule_forward = &gated_delta_rule_forward;
  k.gated_delta_rule_backward = &gated_delta_rule_backward;
  k.head_cross_entropy_workspace_bytes = &head_cross_entropy_workspace_bytes;
  k.head_cross_entropy = &head_cross_entropy;
  k.head_cross_entropy_vocab_chunk = &head_cross_entropy_vocab_chunk;
  k.head_cross_entropy_stream = &head_cross_entropy_stream;
  k.add_inplace = &add_inplace;
  k.add_into = &add_into;
  k.scale_inplace = &scale_inplace;
  k.zero_rows_with_id = &zero_rows_with_id;
  k.copy_rows = &copy_rows;
  k.sigmoid_gate_forward = &sigmoid_gate_forward;
  k.sigmoid_gate_backward = &sigmoid_gate_backward;
  k.sum_of_squares = &sum_of_squares_f64;
  k.convert_f32_to_bf16 = &convert_f32_to_bf16;
  return k;
}

}  // namespace

const KernelTable& cpu_kernel_table() {
  static const KernelTable table = make_cpu_kernel_table();
  return table;
}

}  // namespace lt
