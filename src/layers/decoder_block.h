// One decoder layer (pre-norm Llama/Mistral/Qwen2/Qwen3/Gemma 3 block) as an explicit
// forward and backward pair, over views: weights, saved activations and scratch are bound
// from outside, so the same code serves the in-memory step and the streaming executor's
// layer templates.
//
//   h1 = rmsnorm(x_in) ; q,k,v = h1·W^T (+b) ; [qwen3, gemma3: per-head rmsnorm of q, k]
//   q,k = rope(q,k) ; o = causal_gqa_attention(q,k,v) ; x_mid = x_in + o·Wo^T (+bo)
//   (with documents: rope at each token's position in its document, and attention
//   block-diagonal over the documents, kernels/cpu/attention.h's doc_start; on a sliding
//   layer the attention is also windowed, BlockContext::window)
//   h2 = rmsnorm(x_mid) ; m = silu(h2·Wg^T) * (h2·Wu^T) ; x_out = x_mid + m·Wd^T
// Gemma 3: every rmsnorm scales by (1 + w); the residual adds take a normed output,
//   x_mid = x_in + rmsnorm(o·Wo^T), x_out = x_mid + rmsnorm(m·Wd^T); m uses gelu (tanh)
//   instead of silu; the attention scale is query_pre_attn_scalar^-1/2.
//
// qwen3_moe, mixtral: on a sparse layer the MLP is the mixture of experts of
//   layers/moe_mlp.h, x_out = x_mid + moe(h2); it runs the CPU's kernels (not yet in the
//   kernel table), so the model's compute tier must be host memory. qwen3_5_moe adds a
//   shared expert, the layer's dense MLP gated per token:
//   x_out = x_mid + moe(h2) + sigmoid(h2 . wsg) * down(silu(gate(h2)) * up(h2)).
//
// Qwen3.5 (hybrid): a linear-attention layer runs the Gated DeltaNet mixer
//   (layers/linear_attention_mixer.h) on h1 in place of attention, x_mid = x_in + mixer(h1);
//   a full-attention layer's q_proj yields each head's query and a gate, with 1 + w q/k
//   norms and partial RoPE, and o = attention(...) * sigmoid(gate) before o_proj.
//
// Backward overwrites dx_in and accumulates (+=) into the weight gradients.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/aligned_buffer.h"
#include "kernels/cpu/matmul.h"
#include "kernels/kernel_table.h"
#include "layers/moe_mlp.h"
#include "model/config.h"
#include "model/parameters.h"

namespace lt {

struct BlockShape {
  int64_t batch = 0, seq = 0;
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, inter = 0;
  float eps = 0;
  bool qk_norm = false;
  float attn_scale = 0;         // ModelConfig::attention_scale()
  float norm_offset = 0;        // RMSNorm scales by (norm_offset + w)
  bool sandwich_norms = false;  // norms on the attention and MLP outputs (Gemma 3)
  MlpActivation act = MlpActivation::Silu;
  bool output_gate = false;  // Qwen3.5: attention's output times sigmoid(gate from q_proj)
  int64_t rotary = 0;        // channels of each head that RoPE rotates (head_dim unless partial)
  LinearAttentionShape linear;  // the Gated DeltaNet layers' (hybrid models)
  MoeShape moe;                 // the sparse MoE layers' MLP (experts 0: none), for tokens()
  int64_t tokens() const { return batch * seq; }
  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
};
BlockShape block_shape(const ModelConfig& c, int64_t batch, int64_t seq);
// The MoE block's shape for `tokens` tokens of c's sparse layers (experts 0 without them).
MoeShape moe_block_shape(const ModelConfig& c, int64_t tokens);

// Views of the tensors a block saves for backward, bound onto one buffer laid out as
// layer_saved_activations(KeepInternals) says (the planner's spec table, fp32 here).
struct BlockSaved {
  float *attn_norm_rstd = nullptr, *attn_norm_out = nullptr;
  float *q_pre_norm = nullptr, *k_pre_norm = nullptr, *q_norm_rstd = nullptr,
        *k_norm_rstd = nullptr;
  float *q = nullptr, *k = nullptr, *v = nullptr, *attn_out = nullptr, *attn_lse = nullptr;
  float *resid_mid = nullptr, *mlp_norm_rstd = nullptr, *mlp_norm_out = nullptr;
  float *mlp_gate = nullptr, *mlp_up = nullptr, *mlp_act = nullptr;
  // Gemma 3's sandwich norms: the projections' outputs and their norms' rstd.
  float *attn_proj_out = nullptr, *post_attn_norm_rstd = nullptr;
  float *mlp_down_out = nullptr, *post_mlp_norm_rstd = nullptr;
  // Qwen3.5 gated attention: the gate half of q_proj's output, before its sigmoid.
  float* attn_gate = nullptr;
  // Qwen3.5 Gated DeltaNet (layers/linear_attention_mixer.h says what each holds).
  float *conv_in = nullptr, *conv_q = nullptr, *conv_k = nullptr, *conv_v = nullptr, *z = nullptr;
  float *beta = nullptr, *decay = nullptr, *chunk_states = nullptr;
  float *delta_out = nullptr, *delta_norm_rstd = nullptr, *delta_gated = nullptr;
  // A sparse MoE layer's MLP, in place of mlp_gate/up/act (layers/moe_mlp.h's MoeSaved;
  // experts, offsets and row_of hold int32).
  float *moe_probs = nullptr, *moe_weights = nullptr, *moe_experts = nullptr, *moe_offsets = nullptr,
        *moe_row_of = nullptr, *moe_gate = nullptr, *moe_up = nullptr, *moe_act = nullptr;
  // qwen3_5_moe's shared expert keeps mlp_gate/up/act and mlp_down_out (its output before
  // the gate), and the gate's logit [T].
  float* moe_shared_logit = nullptr;
};
int64_t block_saved_numel(const ModelConfig& c, int64_t layer, int64_t batch, int64_t seq);
// The largest layer's (one scratch buffer serves every recomputed layer).
int64_t max_block_saved_numel(const ModelConfig& c, int64_t batch, int64_t seq);
BlockSaved bind_block_saved(const ModelConfig& c, int64_t layer, int64_t batch, int64_t seq, float* base);
// Where each of one layer's saved tensors lies in its buffer (offsets in floats), worked
// out once per layer, so that binding a buffer to it in a step's loop looks nothing up.
struct BlockSavedLayout {
  std::vector<std::pair<float* BlockSaved::*, int64_t>> fields;
  int64_t numel = 0;
};
BlockSavedLayout block_saved_layout(const ModelConfig& c, int64_t layer, int64_t batch, int64_t seq);
BlockSaved bind_block_saved(const BlockSavedLayout& layout, float* base);
// A sparse layer's saved MoE tensors as the MoE block's views.
MoeSaved block_moe_saved(const BlockSaved& saved);

// Scratch for one layer's forward or backward, reused layer after layer; sized for every
// kind of layer the model has, as the kernels of k need it. Built with its layout and no
// memory: allocate() gives it a buffer of its own (the in-memory step), bind() points it
// at floats() floats the caller planned (the streaming executor's arena); either before
// the first pass.
class BlockWorkspace {
 public:
  BlockWorkspace(const ModelConfig& c, int64_t batch, int64_t seq, const KernelTable& k);
  size_t floats() const { return floats_; }
  size_t bytes() const { return floats_ * sizeof(float); }
  void allocate();
  void bind(float* base);

  float *d_act = nullptr, *d_gate = nullptr, *d_up = nullptr;  // [T, I]
  float *d_norm_out = nullptr, *d_norm_in = nullptr;           // [T, C]
  float *d_attn_out = nullptr, *dq = nullptr, *dq_pre = nullptr;  // [T, Hq*D]
  float *dk = nullptr, *dv = nullptr, *dk_pre = nullptr;          // [T, Hkv*D]
  // Gated attention (null without it): q_proj's output (forward) or its gradient
  // (backward) [T, Hq*2D], and o_proj's input, the gated attention output [T, Hq*D].
  float *q_and_gate = nullptr, *gated = nullptr;
  float* mixer = nullptr;  // the Gated DeltaNet mixer's workspace (null without one)
  float* moe = nullptr;    // the MoE MLP's workspace (null without sparse layers)
  float* moe_d_logits = nullptr;  // [T, E]: the routers' loss gradient (output_router_logits only)
  float* moe_d_shared_logit = nullptr;  // [T]: the shared expert gate's logit gradient (qwen3_5_moe)

 private:
  std::vector<std::pair<float* BlockWorkspace::*, size_t>> fields_;  // each pointer's offset, in floats
  size_t floats_ = 0;
  AlignedBuffer<float> own_;
};

// cos/sin: RoPE tables [seq, head_dim/2]. w_bf16 is read only with Precision::BF16
// (its pointers may be null, then weights are rounded on the fly).
// doc_start, positions: [batch*seq] each, both null (every row one causal sequence at
// positions 0..seq-1) or both set: a row of packed documents (document_positions).
// window: this layer's sliding attention window (0: full causal attention); the step's
// context has 0 and the sliding layers' RoPE tables in local_rope_* (null when they use
// the global ones); layer_context() makes one layer's context from it, and its kind.
// The routers' load-balancing loss in backward (layers/router_loss.h): the step's totals
// over every sparse layer and the gradient's weight (router_aux_loss_coef times the loss
// gradient's scale).
struct RouterLossGrad {
  const MoeAuxStats* totals = nullptr;
  float scale = 0;
};

struct BlockContext {
  BlockShape shape;
  const float* rope_cos = nullptr;
  const float* rope_sin = nullptr;
  Precision precision = Precision::F32;
  const int32_t* doc_start = nullptr;
  const int32_t* positions = nullptr;
  int64_t window = 0;
  const float* local_rope_cos = nullptr;
  const float* local_rope_sin = nullptr;
  LayerKind kind = LayerKind::Attention;
  bool sparse = false;  // this layer's MLP is the MoE block (shape.moe)
  const RouterLossGrad* router_loss = nullptr;  // backward: the routers' loss term, or null
  // The kernels the block runs on (kernels/kernel_table.h): the streaming executor gives
  // its backend's; the CPU's otherwise.
  const KernelTable* kernels = &cpu_kernel_table();
};

// The context of decoder layer `layer`: its window, and its RoPE table (the local one on
// a sliding layer when the model has one).
BlockContext layer_context(const BlockContext& step, const ModelConfig& c, int64_t layer);

// Sizes and fills a step's RoPE tables for positions 0..seq-1 and points ctx at them:
// [seq, head_dim/2] each, followed by the sliding layers' own [seq, head_dim/2] when their
// RoPE differs (Gemma 3).
void set_rope_tables(BlockContext& ctx, AlignedBuffer<float>& cos, AlignedBuffer<float>& sin,
                     const ModelConfig& c, int64_t seq);

// The model's ends, shared by the in-memory step and the streaming executor, on the
// kernels of k (the host's where the embedding lies on the host).
// Embedding lookup, times sqrt(hidden_size) in fp32 for Gemma (transformers scales in the
// embedding's dtype; lazytrain's embedding is fp32 in both precisions).
void embed_forward(const KernelTable& k, float* x, const int32_t* ids, const float* table, int64_t T,
                   const ModelConfig& c);
// The embedding's gradient (+=) from dx, which it changes in place first: rows of tokens
// equal to padding_idx zeroed, and the rest scaled for Gemma.
void embed_backward(const KernelTable& k, float* dtable, const int32_t* ids, float* dx, int64_t T,
                    const ModelConfig& c);

// A training step's documents: doc_start[b*seq + s] is the index in row b where token s's
// document starts (0 <= doc_start <= s; a row is a run of documents: its token 0 starts
// one, and each next token either continues the previous token's document or starts a
// new one at doc_start == s). Fills positions = s - doc_start (the token's position in its
// document, what RoPE reads). Throws lt::Error naming the first bad token otherwise.
void document_positions(int32_t* positions, const int32_t* doc_start, int64_t batch, int64_t seq);

// qwen3_5_moe's shared expert gate, a [1, C] projection: logit[t] = h[t] . w, one token per
// thread and the channels in order, from the fp32 weight (kept fp32 in every tier, as the
// norms are: it is not one of the block's matrices). Under Precision::BF16 both operands
// are rounded to bf16 first, as the matmuls round theirs. Backward: dh (+=)
// d_logit[t] w, dw (+=) sum over tokens in order of d_logit[t] h[t].
void shared_gate_forward(float* logit, const float* h, const float* w, int64_t T, int64_t C, Precision p);
// out[t] += sigmoid(logit[t]) * shared_out[t], token by token (the block and the generator).
void shared_gate_apply(float* out, const float* logit, const float* shared_out, int64_t T, int64_t C);
void shared_gate_backward(float* dh, float* dw, const float* d_logit, const float* h, const float* w, int64_t T,
                          int64_t C, Precision p);

void block_forward(float* x_out, BlockSaved& saved, BlockWorkspace& ws, const float* x_in, const BlockTensors& w,
                   const BlockTensorsBf16& w_bf16, const BlockContext& ctx);
void block_backward(float* dx_in, BlockTensors& grads, BlockWorkspace& ws, const float* dx_out,
                    const float* x_in, const BlockTensors& w, const BlockTensorsBf16& w_bf16,
                    const BlockSaved& saved, const BlockContext& ctx);

}  // namespace lt
