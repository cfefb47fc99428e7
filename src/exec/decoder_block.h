// One decoder layer (pre-norm Llama/Mistral/Qwen2/Qwen3 block) as an explicit forward
// and backward pair, over views: weights, saved activations and scratch are bound from
// outside, so the same code serves the in-memory step and the streaming executor's
// layer templates.
//
//   h1 = rmsnorm(x_in) ; q,k,v = h1·W^T (+b) ; [qwen3: per-head rmsnorm of q, k]
//   q,k = rope(q,k) ; o = causal_gqa_attention(q,k,v) ; x_mid = x_in + o·Wo^T (+bo)
//   (with documents: rope at each token's position in its document, and attention
//   block-diagonal over the documents, kernels/cpu/attention.h's doc_start)
//   h2 = rmsnorm(x_mid) ; m = silu(h2·Wg^T) * (h2·Wu^T) ; x_out = x_mid + m·Wd^T
//
// Backward overwrites dx_in and accumulates (+=) into the weight gradients.
#pragma once

#include <cstdint>

#include "core/aligned_buffer.h"
#include "kernels/cpu/matmul.h"
#include "model/config.h"
#include "model/parameters.h"

namespace lt {

struct BlockShape {
  int64_t batch = 0, seq = 0;
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, inter = 0;
  float eps = 0;
  bool qk_norm = false;
  int64_t tokens() const { return batch * seq; }
  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
};
BlockShape block_shape(const ModelConfig& c, int64_t batch, int64_t seq);

// Views of the tensors a block saves for backward, bound onto one buffer laid out as
// block_saved_activations(KeepInternals) says (the planner's spec table, fp32 here).
struct BlockSaved {
  float *attn_norm_rstd = nullptr, *attn_norm_out = nullptr;
  float *q_pre_norm = nullptr, *k_pre_norm = nullptr, *q_norm_rstd = nullptr,
        *k_norm_rstd = nullptr;
  float *q = nullptr, *k = nullptr, *v = nullptr, *attn_out = nullptr, *attn_lse = nullptr;
  float *resid_mid = nullptr, *mlp_norm_rstd = nullptr, *mlp_norm_out = nullptr;
  float *mlp_gate = nullptr, *mlp_up = nullptr, *mlp_act = nullptr;
};
int64_t block_saved_numel(const ModelConfig& c, int64_t batch, int64_t seq);
BlockSaved bind_block_saved(const ModelConfig& c, int64_t batch, int64_t seq, float* base);

// Scratch for one backward pass, reused layer after layer.
class BlockWorkspace {
 public:
  explicit BlockWorkspace(const BlockShape& s);
  size_t bytes() const { return buf_.size() * sizeof(float); }
  float *d_act, *d_gate, *d_up;   // [T, I]
  float *d_norm_out, *d_norm_in;  // [T, C]
  float *d_attn_out, *dq, *dq_pre;  // [T, Hq*D]
  float *dk, *dv, *dk_pre;          // [T, Hkv*D]

 private:
  AlignedBuffer<float> buf_;
};

// cos/sin: RoPE tables [seq, head_dim/2]. w_bf16 is read only with Precision::BF16
// (its pointers may be null, then weights are rounded on the fly).
// doc_start, positions: [batch*seq] each, both null (every row one causal sequence at
// positions 0..seq-1) or both set: a row of packed documents (document_positions).
struct BlockContext {
  BlockShape shape;
  const float* rope_cos = nullptr;
  const float* rope_sin = nullptr;
  Precision precision = Precision::F32;
  const int32_t* doc_start = nullptr;
  const int32_t* positions = nullptr;
};

// A training step's documents: doc_start[b*seq + s] is the index in row b where token s's
// document starts (0 <= doc_start <= s; a row is a run of documents: its token 0 starts
// one, and each next token either continues the previous token's document or starts a
// new one at doc_start == s). Fills positions = s - doc_start (the token's position in its
// document, what RoPE reads). Throws lt::Error naming the first bad token otherwise.
void document_positions(int32_t* positions, const int32_t* doc_start, int64_t batch, int64_t seq);

void block_forward(float* x_out, BlockSaved& saved, const float* x_in, const BlockTensors& w,
                   const BlockTensorsBf16& w_bf16, const BlockContext& ctx);
void block_backward(float* dx_in, BlockTensors& grads, BlockWorkspace& ws, const float* dx_out,
                    const float* x_in, const BlockTensors& w, const BlockTensorsBf16& w_bf16,
                    const BlockSaved& saved, const BlockContext& ctx);

}  // namespace lt
