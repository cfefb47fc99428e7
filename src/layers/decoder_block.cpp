#include "layers/decoder_block.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "layers/linear_attention_mixer.h"
#include "model/hybrid_layers.h"
#include "model/layer_specs.h"
#include "model/rope_frequencies.h"

namespace lt {

namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// A matmul operand as the step's precision rounds it.
float as_operand(float x, Precision p) { return p == Precision::BF16 ? bf16_to_f32(f32_to_bf16(x)) : x; }

// Gated attention's q_proj output is [T, H, 2D]: per head its query, then its gate
// (transformers' chunk of view(..., H, 2D) into two). These move the halves between that
// layout and two [T, H, D] arrays (the gradient goes back the same way).
void split_query_gate(const KernelTable& k, float* query, float* gate, const float* qg, int64_t T, int64_t H,
                      int64_t D) {
  k.copy_rows(query, D, qg, 2 * D, T * H, D);
  k.copy_rows(gate, D, qg + D, 2 * D, T * H, D);
}
// Writes [T, H, D] into the query (gate = false) or gate half of each head of qg.
void put_head_half(const KernelTable& k, float* qg, const float* src, int64_t T, int64_t H, int64_t D, bool gate) {
  k.copy_rows(qg + (gate ? D : 0), 2 * D, src, D, T * H, D);
}

// Gemma's embedding scale, sqrt(hidden) rounded once to fp32.
float embedding_scale(const ModelConfig& c) {
  return static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size)));
}

// The Gated DeltaNet carries its state (and its convolution) from one token to the next
// across the whole row; documents packed into a row would leak into each other.
void refuse_packed_documents(const int32_t* doc_start, int64_t T) {
  for (int64_t t = 0; t < T; ++t)
    if (doc_start[t] != 0)
      throw Error("a row holds packed documents (token " + std::to_string(t) + " starts a new one), which "
                  "the Gated DeltaNet layers cannot separate",
                  "training batch of a Qwen3.5 (linear-attention) model",
                  "train this model with one document per row (no packing)");
}


}  // namespace

void embed_forward(const KernelTable& k, float* x, const int32_t* ids, const float* table, int64_t T, const ModelConfig& c) {
  k.embedding_forward(x, ids, table, T, c.vocab_size, c.hidden_size);
  if (c.scale_embeddings) k.scale_inplace(x, embedding_scale(c), T * c.hidden_size);
}

void embed_backward(const KernelTable& k, float* dtable, const int32_t* ids, float* dx, int64_t T, const ModelConfig& c) {
  if (c.padding_idx >= 0)  // nn.Embedding(padding_idx): that row's lookups pass no gradient
    k.zero_rows_with_id(dx, ids, T, c.hidden_size, static_cast<int32_t>(c.padding_idx));
  if (c.scale_embeddings) k.scale_inplace(dx, embedding_scale(c), T * c.hidden_size);
  k.embedding_backward(dtable, ids, dx, T, c.vocab_size, c.hidden_size);
}

BlockContext layer_context(const BlockContext& step, const ModelConfig& c, int64_t layer) {
  BlockContext ctx = step;
  ctx.kind = c.layer_kind(layer);
  ctx.sparse = c.layer_is_sparse(layer);
  ctx.window = c.layer_window(layer);
  if (c.layer_is_sliding(layer) && step.local_rope_cos) {
    ctx.rope_cos = step.local_rope_cos;
    ctx.rope_sin = step.local_rope_sin;
  }
  return ctx;
}

void set_rope_tables(BlockContext& ctx, AlignedBuffer<float>& cos, AlignedBuffer<float>& sin, const ModelConfig& c,
                     int64_t seq) {
  const int64_t n = seq * (rotary_dim(c) / 2);
  const bool local = c.local_rope;
  cos.resize(local ? 2 * n : n);
  sin.resize(local ? 2 * n : n);
  rope_tables(cos.data(), sin.data(), c, seq);
  ctx.rope_cos = cos.data();
  ctx.rope_sin = sin.data();
  ctx.local_rope_cos = ctx.local_rope_sin = nullptr;
  if (local) {
    rope_tables(cos.data() + n, sin.data() + n, c, seq, /*local=*/true);
    ctx.local_rope_cos = cos.data() + n;
    ctx.local_rope_sin = sin.data() + n;
  }
}

void document_positions(int32_t* positions, const int32_t* doc_start, int64_t batch, int64_t seq) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s) {
      const int64_t t = b * seq + s;
      const int32_t d = doc_start[t];
      if (!(s == 0 ? d == 0 : d == doc_start[t - 1] || d == s))
        throw Error("doc_start[" + std::to_string(t) + "] = " + std::to_string(d) + " (row " + std::to_string(b) +
                        ", token " + std::to_string(s) + ") neither continues the previous token's document nor "
                        "starts one there",
                    "training batch (document starts)",
                    "give each token the row index where its document starts: 0 for a row's first token, then "
                    "the previous token's value or the token's own index");
      positions[t] = static_cast<int32_t>(s - d);
    }
}

BlockShape block_shape(const ModelConfig& c, int64_t batch, int64_t seq) {
  BlockShape s;
  s.batch = batch;
  s.seq = seq;
  s.hidden = c.hidden_size;
  s.heads = c.num_heads;
  s.kv_heads = c.num_kv_heads;
  s.head_dim = c.head_dim;
  s.inter = c.intermediate_size;
  s.eps = static_cast<float>(c.rms_norm_eps);
  s.qk_norm = c.qk_norm;
  s.attn_scale = c.attention_scale();
  s.norm_offset = static_cast<float>(c.norm_weight_offset);
  s.sandwich_norms = c.sandwich_norms;
  s.act = c.mlp_activation;
  s.output_gate = c.attn_output_gate;
  s.rotary = rotary_dim(c);
  s.linear = c.linear;
  s.moe = moe_block_shape(c, batch * seq);
  return s;
}

MoeShape moe_block_shape(const ModelConfig& c, int64_t tokens) {
  MoeShape s;
  if (!c.has_moe()) return s;
  s.tokens = tokens;
  s.hidden = c.hidden_size;
  s.experts = c.moe.num_experts;
  s.top_k = c.moe.experts_per_token;
  s.intermediate = c.moe.expert_intermediate;
  s.norm_topk_prob = c.moe.norm_topk_prob;
  return s;
}

int64_t block_saved_numel(const ModelConfig& c, int64_t layer, int64_t batch, int64_t seq) {
  return layer_saved_bytes(c, layer, RecomputeOption::KeepInternals, batch, seq, 4) / 4;
}

int64_t max_block_saved_numel(const ModelConfig& c, int64_t batch, int64_t seq) {
  int64_t n = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) n = std::max(n, block_saved_numel(c, l, batch, seq));
  return n;
}

BlockSavedLayout block_saved_layout(const ModelConfig& c, int64_t layer, int64_t batch, int64_t seq) {
  using F = float* BlockSaved::*;
  const std::unordered_map<std::string, F> members = {
      {"attn_norm_rstd", &BlockSaved::attn_norm_rstd}, {"attn_norm_out", &BlockSaved::attn_norm_out},
      {"q_pre_norm", &BlockSaved::q_pre_norm},         {"k_pre_norm", &BlockSaved::k_pre_norm},
      {"q_norm_rstd", &BlockSaved::q_norm_rstd},       {"k_norm_rstd", &BlockSaved::k_norm_rstd},
      {"q", &BlockSaved::q},                           {"k", &BlockSaved::k},
      {"v", &BlockSaved::v},                           {"attn_out", &BlockSaved::attn_out},
      {"attn_lse", &BlockSaved::attn_lse},             {"resid_mid", &BlockSaved::resid_mid},
      {"mlp_norm_rstd", &BlockSaved::mlp_norm_rstd},   {"mlp_norm_out", &BlockSaved::mlp_norm_out},
      {"mlp_gate", &BlockSaved::mlp_gate},             {"mlp_up", &BlockSaved::mlp_up},
      {"mlp_act", &BlockSaved::mlp_act},
      {"attn_proj_out", &BlockSaved::attn_proj_out},   {"post_attn_norm_rstd", &BlockSaved::post_attn_norm_rstd},
      {"mlp_down_out", &BlockSaved::mlp_down_out},     {"post_mlp_norm_rstd", &BlockSaved::post_mlp_norm_rstd},
      {"attn_gate", &BlockSaved::attn_gate},           {"conv_in", &BlockSaved::conv_in},
      {"conv_q", &BlockSaved::conv_q},                 {"conv_k", &BlockSaved::conv_k},
      {"conv_v", &BlockSaved::conv_v},                 {"z", &BlockSaved::z},
      {"beta", &BlockSaved::beta},                     {"decay", &BlockSaved::decay},
      {"chunk_states", &BlockSaved::chunk_states},     {"delta_out", &BlockSaved::delta_out},
      {"delta_norm_rstd", &BlockSaved::delta_norm_rstd}, {"delta_gated", &BlockSaved::delta_gated},
      {"moe_probs", &BlockSaved::moe_probs},           {"moe_weights", &BlockSaved::moe_weights},
      {"moe_experts", &BlockSaved::moe_experts},       {"moe_offsets", &BlockSaved::moe_offsets},
      {"moe_row_of", &BlockSaved::moe_row_of},         {"moe_gate", &BlockSaved::moe_gate},
      {"moe_up", &BlockSaved::moe_up},                 {"moe_act", &BlockSaved::moe_act},
      {"moe_shared_logit", &BlockSaved::moe_shared_logit},
  };
  BlockSavedLayout layout;
  for (const auto& spec : layer_saved_activations(c, layer, RecomputeOption::KeepInternals, batch, seq, 4)) {
    auto it = members.find(spec.name);
    LT_ASSERT(it != members.end(), "activation spec '" + spec.name + "' has no slot in BlockSaved");
    LT_ASSERT(spec.bytes % 4 == 0);
    layout.fields.emplace_back(it->second, layout.numel);
    layout.numel += static_cast<int64_t>(spec.bytes / 4);
  }
  const auto has = [&](F m) {
    return std::any_of(layout.fields.begin(), layout.fields.end(), [&](const auto& f) { return f.first == m; });
  };
  LT_ASSERT(has(c.layer_is_sparse(layer) ? &BlockSaved::moe_act : &BlockSaved::mlp_act) &&
            has(&BlockSaved::resid_mid));
  if (c.layer_kind(layer) == LayerKind::LinearAttention) {
    LT_ASSERT(has(&BlockSaved::conv_in) && has(&BlockSaved::chunk_states) && has(&BlockSaved::delta_gated));
    return layout;
  }
  LT_ASSERT(has(&BlockSaved::q) && has(&BlockSaved::k) && has(&BlockSaved::v) && has(&BlockSaved::attn_out) &&
            has(&BlockSaved::attn_lse));
  LT_ASSERT(!c.qk_norm || (has(&BlockSaved::q_pre_norm) && has(&BlockSaved::k_norm_rstd)));
  LT_ASSERT(!c.attn_output_gate || has(&BlockSaved::attn_gate));
  LT_ASSERT(!c.sandwich_norms || (has(&BlockSaved::attn_proj_out) && has(&BlockSaved::mlp_down_out)));
  return layout;
}

MoeSaved block_moe_saved(const BlockSaved& sv) {
  MoeSaved m;
  m.probs = sv.moe_probs;
  m.weights = sv.moe_weights;
  m.experts = reinterpret_cast<int32_t*>(sv.moe_experts);
  m.offsets = reinterpret_cast<int32_t*>(sv.moe_offsets);
  m.row_of = reinterpret_cast<int32_t*>(sv.moe_row_of);
  m.gate = sv.moe_gate;
  m.up = sv.moe_up;
  m.act = sv.moe_act;
  return m;
}

BlockSaved bind_block_saved(const BlockSavedLayout& layout, float* base) {
  BlockSaved s;
  for (const auto& [member, offset] : layout.fields) s.*member = base + offset;
  return s;
}

BlockSaved bind_block_saved(const ModelConfig& c, int64_t layer, int64_t batch, int64_t seq, float* base) {
  return bind_block_saved(block_saved_layout(c, layer, batch, seq), base);
}

BlockWorkspace::BlockWorkspace(const ModelConfig& c, int64_t batch, int64_t seq, const KernelTable& k) {
  const BlockShape s = block_shape(c, batch, seq);
  const int64_t T = s.tokens(), I = s.inter, C = s.hidden, QD = s.q_dim(), KD = s.kv_dim();
  bool attention = false, linear = false;
  for (int64_t l = 0; l < c.num_layers; ++l) (c.layer_kind(l) == LayerKind::Attention ? attention : linear) = true;
  size_t at = 0;
  auto take = [&](float* BlockWorkspace::*field, int64_t n) {
    fields_.emplace_back(field, at);
    at += static_cast<size_t>(n);
  };
  take(&BlockWorkspace::d_act, T * I);
  take(&BlockWorkspace::d_gate, T * I);
  take(&BlockWorkspace::d_up, T * I);
  take(&BlockWorkspace::d_norm_out, T * C);
  take(&BlockWorkspace::d_norm_in, T * C);
  if (c.has_moe() && c.moe.output_router_logits) take(&BlockWorkspace::moe_d_logits, T * c.moe.num_experts);
  if (c.has_moe() && c.moe.shared_expert_intermediate > 0) take(&BlockWorkspace::moe_d_shared_logit, T);
  // The attention scratch and the mixer's are never live together (a layer is one kind),
  // so they share one region.
  const size_t shared = at;
  if (attention) {
    take(&BlockWorkspace::d_attn_out, T * QD);
    take(&BlockWorkspace::dq, T * QD);
    take(&BlockWorkspace::dq_pre, T * QD);
    take(&BlockWorkspace::dk, T * KD);
    take(&BlockWorkspace::dv, T * KD);
    take(&BlockWorkspace::dk_pre, T * KD);
    if (s.output_gate) {
      take(&BlockWorkspace::q_and_gate, 2 * T * QD);
      take(&BlockWorkspace::gated, T * QD);
    }
  }
  floats_ = at;
  if (linear) {
    fields_.emplace_back(&BlockWorkspace::mixer, shared);
    floats_ = std::max(floats_, shared + linear_mixer_workspace_floats(k, linear_mixer_shape(s)));
  }
  // The MoE MLP's scratch is live only inside the MLP, never with the token mixer's.
  if (c.has_moe()) {
    fields_.emplace_back(&BlockWorkspace::moe, shared);
    floats_ = std::max(floats_, shared + moe_workspace_floats(s.moe));
  }
}

void BlockWorkspace::allocate() {
  own_.resize(floats_);
  bind(own_.data());
}

void BlockWorkspace::bind(float* base) {
  LT_ASSERT(base != nullptr || floats_ == 0, "a block workspace bound to no memory");
  for (const auto& [field, offset] : fields_) this->*field = base + offset;
}

namespace {

// Attention as a token mixer: out = o_proj(attention(rope(q), rope(k), v) [* sigmoid(gate)])
// from h1 = the input norm's output. out is [T, C], before any sandwich norm.
void attention_mixer_forward(float* out, BlockSaved& sv, BlockWorkspace& ws, LinearInput h1, const BlockTensors& w,
                             const BlockTensorsBf16& wb, const BlockContext& ctx) {
  const BlockShape& s = ctx.shape;
  const KernelTable& k = *ctx.kernels;
  const int64_t T = s.tokens(), C = s.hidden, QD = s.q_dim(), KD = s.kv_dim();
  const Precision p = ctx.precision;
  const float off = s.norm_offset;
  float* q_proj = s.qk_norm ? sv.q_pre_norm : sv.q;
  if (s.output_gate) {
    k.linear_forward(ws.q_and_gate, h1, w.wq, wb.wq, w.bq, T, C, 2 * QD, p);
    split_query_gate(k, q_proj, sv.attn_gate, ws.q_and_gate, T, s.heads, s.head_dim);
  } else {
    k.linear_forward(q_proj, h1, w.wq, wb.wq, w.bq, T, C, QD, p);
  }
  float* k_proj = s.qk_norm ? sv.k_pre_norm : sv.k;
  k.linear_forward(k_proj, h1, w.wk, wb.wk, w.bk, T, C, KD, p);
  k.linear_forward(sv.v, h1, w.wv, wb.wv, w.bv, T, C, KD, p);
  if (s.qk_norm) {
    k.rmsnorm_forward(sv.q, sv.q_norm_rstd, sv.q_pre_norm, w.q_norm, T * s.heads, s.head_dim, s.eps, off);
    k.rmsnorm_forward(sv.k, sv.k_norm_rstd, sv.k_pre_norm, w.k_norm, T * s.kv_heads, s.head_dim, s.eps, off);
  }
  k.rope_forward(sv.q, ctx.rope_cos, ctx.rope_sin, s.batch, s.seq, s.heads, s.head_dim, ctx.positions, s.rotary);
  k.rope_forward(sv.k, ctx.rope_cos, ctx.rope_sin, s.batch, s.seq, s.kv_heads, s.head_dim, ctx.positions, s.rotary);
  k.attention_forward(sv.attn_out, sv.attn_lse, sv.q, sv.k, sv.v, s.batch, s.seq, s.heads,
                      s.kv_heads, s.head_dim, s.attn_scale, ctx.doc_start, ctx.window, p);
  const float* o_in = sv.attn_out;
  if (s.output_gate) {
    k.sigmoid_gate_forward(ws.gated, sv.attn_out, sv.attn_gate, T * QD);
    o_in = ws.gated;
  }
  k.linear_forward(out, o_in, w.wo, wb.wo, w.bo, T, QD, C, p);
}

// Its backward: d_out is the gradient of out; leaves dh1 in ws.d_norm_out.
void attention_mixer_backward(BlockTensors& g, BlockWorkspace& ws, const float* d_out, LinearInput h1,
                              const BlockTensors& w, const BlockTensorsBf16& wb, const BlockSaved& sv,
                              const BlockContext& ctx) {
  const BlockShape& s = ctx.shape;
  const KernelTable& k = *ctx.kernels;
  const int64_t T = s.tokens(), C = s.hidden, QD = s.q_dim(), KD = s.kv_dim();
  const Precision p = ctx.precision;
  const float off = s.norm_offset;
  const float* o_in = sv.attn_out;
  if (s.output_gate) {  // o_proj's input again, for its weight gradient
    k.sigmoid_gate_forward(ws.gated, sv.attn_out, sv.attn_gate, T * QD);
    o_in = ws.gated;
  }
  k.linear_backward(ws.d_attn_out, g.wo, g.bo, d_out, o_in, w.wo, wb.wo, T, QD, C, false, p);
  float* d_gate = ws.dq_pre;  // free until the q norm's backward; joined into q_and_gate before it
  if (s.output_gate) k.sigmoid_gate_backward(ws.d_attn_out, d_gate, ws.d_attn_out, sv.attn_out, sv.attn_gate, T * QD);
  k.attention_backward(ws.dq, ws.dk, ws.dv, ws.d_attn_out, sv.q, sv.k, sv.v, sv.attn_out,
                       sv.attn_lse, s.batch, s.seq, s.heads, s.kv_heads, s.head_dim, s.attn_scale,
                       ctx.doc_start, ctx.window, p);
  k.rope_backward(ws.dq, ctx.rope_cos, ctx.rope_sin, s.batch, s.seq, s.heads, s.head_dim, ctx.positions, s.rotary);
  k.rope_backward(ws.dk, ctx.rope_cos, ctx.rope_sin, s.batch, s.seq, s.kv_heads, s.head_dim, ctx.positions, s.rotary);
  const float* dq_proj = ws.dq;
  const float* dk_proj = ws.dk;
  // The gate's gradient into q_proj's gradient now, before the q norm overwrites dq_pre.
  if (s.output_gate) put_head_half(k, ws.q_and_gate, d_gate, T, s.heads, s.head_dim, true);
  if (s.qk_norm) {
    k.rmsnorm_backward(ws.dq_pre, g.q_norm, ws.dq, sv.q_pre_norm, w.q_norm, sv.q_norm_rstd,
                  T * s.heads, s.head_dim, off);
    k.rmsnorm_backward(ws.dk_pre, g.k_norm, ws.dk, sv.k_pre_norm, w.k_norm, sv.k_norm_rstd,
                  T * s.kv_heads, s.head_dim, off);
    dq_proj = ws.dq_pre;
    dk_proj = ws.dk_pre;
  }
  if (s.output_gate) {
    put_head_half(k, ws.q_and_gate, dq_proj, T, s.heads, s.head_dim, false);
    k.linear_backward(ws.d_norm_out, g.wq, g.bq, ws.q_and_gate, h1, w.wq, wb.wq, T, C, 2 * QD, false, p);
  } else {
    k.linear_backward(ws.d_norm_out, g.wq, g.bq, dq_proj, h1, w.wq, wb.wq, T, C, QD, false, p);
  }
  k.linear_backward(ws.d_norm_out, g.wk, g.bk, dk_proj, h1, w.wk, wb.wk, T, C, KD, true, p);
  k.linear_backward(ws.d_norm_out, g.wv, g.bv, ws.dv, h1, w.wv, wb.wv, T, C, KD, true, p);
}

// The dense MLP's backward: d_out is the gradient of the block's output; leaves dh2 (the
// gradient of the MLP's input norm output) in ws.d_norm_out.
void dense_mlp_backward(BlockTensors& g, BlockWorkspace& ws, const float* d_out, const BlockTensors& w,
                        const BlockTensorsBf16& wb, const BlockSaved& sv, const BlockContext& ctx,
                        bool accumulate_dh = false) {
  const BlockShape& s = ctx.shape;
  const KernelTable& k = *ctx.kernels;
  const int64_t T = s.tokens(), C = s.hidden, I = s.inter;
  const Precision p = ctx.precision;
  const float* d_down = d_out;
  if (s.sandwich_norms) {  // d_norm_in is free until the MLP's input norm
    k.rmsnorm_backward(ws.d_norm_in, g.post_mlp_norm, d_out, sv.mlp_down_out, w.post_mlp_norm,
                       sv.post_mlp_norm_rstd, T, C, s.norm_offset);
    d_down = ws.d_norm_in;
  }
  // What forward rounded in place (round_gemm_input): the activation always, the MLP's
  // input only on a dense layer (a sparse one's router reads it as it is).
  const bool rounded = k.gemm_inputs_rounded(p);
  const LinearInput h2{sv.mlp_norm_out, rounded && !ctx.sparse};
  k.linear_backward(ws.d_act, g.wd, g.bd, d_down, LinearInput{sv.mlp_act, rounded}, w.wd, wb.wd, T, I, C, false, p);
  if (s.act == MlpActivation::GeluTanh)
    k.geglu_backward(ws.d_gate, ws.d_up, ws.d_act, sv.mlp_gate, sv.mlp_up, T * I);
  else
    k.swiglu_backward(ws.d_gate, ws.d_up, ws.d_act, sv.mlp_gate, sv.mlp_up, T * I);
  k.linear_backward(ws.d_norm_out, g.wg, g.bg, ws.d_gate, h2, w.wg, wb.wg, T, C, I, accumulate_dh, p);
  k.linear_backward(ws.d_norm_out, g.wu, g.bu, ws.d_up, h2, w.wu, wb.wu, T, C, I, true, p);
}

// qwen3_5_moe's shared expert in forward: the dense MLP on h2 into mlp_down_out, its gate's
// logit, and out += sigmoid(logit) * mlp_down_out, token by token.
void shared_expert_forward(float* out, BlockSaved& sv, const BlockTensors& w, const BlockTensorsBf16& wb,
                           const BlockContext& ctx) {
  const BlockShape& s = ctx.shape;
  const KernelTable& k = *ctx.kernels;
  const int64_t T = s.tokens(), C = s.hidden, I = s.inter;
  const Precision p = ctx.precision;
  k.linear_forward(sv.mlp_gate, sv.mlp_norm_out, w.wg, wb.wg, nullptr, T, C, I, p);
  k.linear_forward(sv.mlp_up, sv.mlp_norm_out, w.wu, wb.wu, nullptr, T, C, I, p);
  k.swiglu_forward(sv.mlp_act, sv.mlp_gate, sv.mlp_up, T * I);
  const LinearInput act{sv.mlp_act, k.round_gemm_input(sv.mlp_act, T * I, p)};  // the down projection's alone
  k.linear_forward(sv.mlp_down_out, act, w.wd, wb.wd, nullptr, T, I, C, p);
  shared_gate_forward(sv.moe_shared_logit, sv.mlp_norm_out, w.moe_shared_gate, T, C, p);
  shared_gate_apply(out, sv.moe_shared_logit, sv.mlp_down_out, T, C);
}

// Its backward: adds its part of dh2 into ws.d_norm_out (which the experts' backward wrote).
void shared_expert_backward(BlockTensors& g, BlockWorkspace& ws, const float* d_out, const BlockTensors& w,
                            const BlockTensorsBf16& wb, const BlockSaved& sv, const BlockContext& ctx) {
  const BlockShape& s = ctx.shape;
  const int64_t T = s.tokens(), C = s.hidden;
  float* d_down = ws.d_norm_in;  // free until the MLP's input norm
  float* d_logit = ws.moe_d_shared_logit;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const float gate = sigmoid(sv.moe_shared_logit[t]);
    float dot = 0.f;  // d loss / d gate
    for (int64_t c = 0; c < C; ++c) {
      dot += d_out[t * C + c] * sv.mlp_down_out[t * C + c];
      d_down[t * C + c] = gate * d_out[t * C + c];
    }
    d_logit[t] = dot * gate * (1.0f - gate);
  }
  shared_gate_backward(ws.d_norm_out, g.moe_shared_gate, d_logit, sv.mlp_norm_out, w.moe_shared_gate, T, C,
                       ctx.precision);
  dense_mlp_backward(g, ws, d_down, w, wb, sv, ctx, /*accumulate_dh=*/true);
}

// The MoE block's views of a sparse layer's weights.
MoeWeights moe_weights(const BlockTensors& w) { return {w.moe_router, w.moe_gate_up, w.moe_down}; }
MoeWeightsBf16 moe_weights_bf16(const BlockTensorsBf16& wb) { return {wb.moe_router, wb.moe_gate_up, wb.moe_down}; }

// The MoE block runs the CPU's kernels (its per-expert GEMMs are not kernel-table entries
// yet): refuse a device table rather than hand it device pointers.
const MoeShape& host_moe_shape(const BlockContext& ctx) {
  if (std::string(ctx.kernels->name) != cpu_kernel_table().name)
    throw Error(std::string("the mixture-of-experts MLP has no kernels on the '") + ctx.kernels->name + "' backend yet",
                "decoder layer (qwen3_moe / mixtral)", "train this model with --backend cpu or emu");
  return ctx.shape.moe;
}

}  // namespace

void shared_gate_forward(float* logit, const float* h, const float* w, int64_t T, int64_t C, Precision p) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    float s = 0.f;
    for (int64_t c = 0; c < C; ++c) s += as_operand(h[t * C + c], p) * as_operand(w[c], p);
    logit[t] = s;
  }
}

void shared_gate_apply(float* out, const float* logit, const float* shared_out, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const float gate = sigmoid(logit[t]);
    for (int64_t c = 0; c < C; ++c) out[t * C + c] += gate * shared_out[t * C + c];
  }
}

void shared_gate_backward(float* dh, float* dw, const float* d_logit, const float* h, const float* w, int64_t T,
                          int64_t C, Precision p) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) dh[t * C + c] += d_logit[t] * as_operand(w[c], p);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    float s = 0.f;
    for (int64_t t = 0; t < T; ++t) s += d_logit[t] * as_operand(h[t * C + c], p);
    dw[c] += s;
  }
}

void block_forward(float* x_out, BlockSaved& sv, BlockWorkspace& ws, const float* x_in, const BlockTensors& w,
                   const BlockTensorsBf16& wb, const BlockContext& ctx) {
  const BlockShape& s = ctx.shape;
  const KernelTable& k = *ctx.kernels;
  const int64_t T = s.tokens(), C = s.hidden, I = s.inter;
  const Precision p = ctx.precision;
  const float off = s.norm_offset;

  k.rmsnorm_forward(sv.attn_norm_out, sv.attn_norm_rstd, x_in, w.attn_norm, T, C, s.eps, off);
  // The norm's output is read by the mixer's input projections alone (the norm's backward
  // reads its input): rounded once here where their GEMMs would each round it.
  const LinearInput h1{sv.attn_norm_out, k.round_gemm_input(sv.attn_norm_out, T * C, p)};
  if (ctx.kind == LayerKind::LinearAttention) {
    if (ctx.doc_start) refuse_packed_documents(ctx.doc_start, T);
    linear_mixer_forward(k, sv.resid_mid, sv, h1, w, wb, linear_mixer_shape(s), p, ws.mixer);
  } else if (s.sandwich_norms) {  // x_mid = x_in + norm(o_proj(attn))
    attention_mixer_forward(sv.attn_proj_out, sv, ws, h1, w, wb, ctx);
    k.rmsnorm_forward(sv.resid_mid, sv.post_attn_norm_rstd, sv.attn_proj_out, w.post_attn_norm, T, C, s.eps, off);
  } else {
    attention_mixer_forward(sv.resid_mid, sv, ws, h1, w, wb, ctx);
  }
  k.add_inplace(sv.resid_mid, x_in, T * C);

  k.rmsnorm_forward(sv.mlp_norm_out, sv.mlp_norm_rstd, sv.resid_mid, w.mlp_norm, T, C, s.eps, off);
  if (ctx.sparse) {  // x_out = x_mid + moe(h2)
    MoeSaved moe = block_moe_saved(sv);
    moe_forward(x_out, moe, sv.mlp_norm_out, moe_weights(w), moe_weights_bf16(wb), host_moe_shape(ctx), p, ws.moe);
    if (w.moe_shared_gate) shared_expert_forward(x_out, sv, w, wb, ctx);
    k.add_inplace(x_out, sv.resid_mid, T * C);
    return;
  }
  // h2 and the activation are read by the MLP's projections alone: rounded once each.
  const LinearInput h2{sv.mlp_norm_out, k.round_gemm_input(sv.mlp_norm_out, T * C, p)};
  k.linear_forward(sv.mlp_gate, h2, w.wg, wb.wg, w.bg, T, C, I, p);
  k.linear_forward(sv.mlp_up, h2, w.wu, wb.wu, w.bu, T, C, I, p);
  if (s.act == MlpActivation::GeluTanh) k.geglu_forward(sv.mlp_act, sv.mlp_gate, sv.mlp_up, T * I);
  else k.swiglu_forward(sv.mlp_act, sv.mlp_gate, sv.mlp_up, T * I);
  const LinearInput act{sv.mlp_act, k.round_gemm_input(sv.mlp_act, T * I, p)};
  if (s.sandwich_norms) {  // x_out = x_mid + norm(down(m))
    k.linear_forward(sv.mlp_down_out, act, w.wd, wb.wd, w.bd, T, I, C, p);
    k.rmsnorm_forward(x_out, sv.post_mlp_norm_rstd, sv.mlp_down_out, w.post_mlp_norm, T, C, s.eps, off);
  } else {
    k.linear_forward(x_out, act, w.wd, wb.wd, w.bd, T, I, C, p);
  }
  k.add_inplace(x_out, sv.resid_mid, T * C);
}

void block_backward(float* dx_in, BlockTensors& g, BlockWorkspace& ws, const float* dx_out,
                    const float* x_in, const BlockTensors& w, const BlockTensorsBf16& wb,
                    const BlockSaved& sv, const BlockContext& ctx) {
  const BlockShape& s = ctx.shape;
  const KernelTable& k = *ctx.kernels;
  const int64_t T = s.tokens(), C = s.hidden;
  const Precision p = ctx.precision;
  const float off = s.norm_offset;

  // MLP: x_out = x_mid + down(act(gate(h2)) * up(h2)) [Gemma: norm(down(...))], or on a
  // sparse layer x_out = x_mid + moe(h2); either leaves dh2 in d_norm_out.
  if (ctx.sparse) {
    const MoeShape& ms = host_moe_shape(ctx);
    const MoeSaved moe = block_moe_saved(sv);
    float* d_logits = nullptr;  // the routers' loss gradient into this layer's router logits
    if (ctx.router_loss) {
      d_logits = ws.moe_d_logits;
      std::fill_n(d_logits, ms.tokens * ms.experts, 0.0f);
      moe_aux_backward(d_logits, moe, /*mask=*/nullptr, *ctx.router_loss->totals, ctx.router_loss->scale, ms);
    }
    MoeGrads mg{g.moe_router, g.moe_gate_up, g.moe_down};
    moe_backward(ws.d_norm_out, mg, dx_out, sv.mlp_norm_out, moe_weights(w), moe_weights_bf16(wb), moe, d_logits, ms,
                 p, ws.moe);
    if (w.moe_shared_gate) shared_expert_backward(g, ws, dx_out, w, wb, sv, ctx);
  } else {
    dense_mlp_backward(g, ws, dx_out, w, wb, sv, ctx);
  }
  k.rmsnorm_backward(ws.d_norm_in, g.mlp_norm, ws.d_norm_out, sv.resid_mid, w.mlp_norm, sv.mlp_norm_rstd, T, C, off);
  float* dx_mid = dx_in;  // dx_in accumulates the residual path from here on
  k.add_into(dx_mid, dx_out, ws.d_norm_in, T * C);

  // Token mixer: x_mid = x_in + mixer(h1) [Gemma: norm(o_proj(...))]; dh1 into d_norm_out.
  const LinearInput h1{sv.attn_norm_out, k.gemm_inputs_rounded(p)};  // as forward left it
  if (ctx.kind == LayerKind::LinearAttention) {
    linear_mixer_backward(k, ws.d_norm_out, g, dx_mid, h1, w, wb, sv, linear_mixer_shape(s), p, ws.mixer);
  } else {
    const float* d_proj = dx_mid;
    if (s.sandwich_norms) {  // d_norm_out is free until the q/k/v projections write it
      k.rmsnorm_backward(ws.d_norm_out, g.post_attn_norm, dx_mid, sv.attn_proj_out, w.post_attn_norm,
                    sv.post_attn_norm_rstd, T, C, off);
      d_proj = ws.d_norm_out;
    }
    attention_mixer_backward(g, ws, d_proj, h1, w, wb, sv, ctx);
  }
  k.rmsnorm_backward(ws.d_norm_in, g.attn_norm, ws.d_norm_out, x_in, w.attn_norm, sv.attn_norm_rstd, T, C, off);
  k.add_inplace(dx_in, ws.d_norm_in, T * C);
}

}  // namespace lt
