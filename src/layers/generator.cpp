#include "layers/generator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "core/error.h"
#include "core/threads.h"
#include "layers/decoder_block.h"
#include "model/rope_frequencies.h"

namespace lt {

namespace {

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

// One query row per head at position `pos` against cached keys/values [0, pos]:
// out[h] = softmax(scale * q[h]·K^T) V, for query head h reading kv head h / group.
void decode_attention(float* out, float* scores, const float* q, const float* k_cache,
                      const float* v_cache, int64_t pos, int64_t Hq, int64_t Hkv, int64_t D,
                      float scale) {
  const int64_t group = Hq / Hkv, KD = Hkv * D;
  for (int64_t h = 0; h < Hq; ++h) {
    const float* qh = q + h * D;
    const int64_t hk = h / group;
    float mx = -INFINITY;
    for (int64_t j = 0; j <= pos; ++j) {
      const float* kj = k_cache + j * KD + hk * D;
      float s = 0;
      for (int64_t d = 0; d < D; ++d) s += qh[d] * kj[d];
      scores[j] = s * scale;
      mx = std::max(mx, scores[j]);
    }
    double sum = 0;
    for (int64_t j = 0; j <= pos; ++j) sum += (scores[j] = std::exp(scores[j] - mx));
    float* oh = out + h * D;
    std::fill(oh, oh + D, 0.0f);
    for (int64_t j = 0; j <= pos; ++j) {
      const float p = static_cast<float>(scores[j] / sum);
      const float* vj = v_cache + j * KD + hk * D;
      for (int64_t d = 0; d < D; ++d) oh[d] += p * vj[d];
    }
  }
}

}  // namespace

Generator::Generator(const ModelConfig& c, int64_t max_len, Precision precision)
    : config_(c), max_len_(max_len), precision_(precision), compute_copy_(precision) {
  if (max_len <= 0 || (c.max_position_embeddings > 0 && max_len > c.max_position_embeddings))
    throw Error("generation length " + std::to_string(max_len) + " is outside 1.." +
                    std::to_string(c.max_position_embeddings),
                "generation", "shorten the prompt or --max-new-tokens");
  const int64_t C = c.hidden_size, QD = c.q_dim(), KD = c.kv_dim(), I = c.intermediate_size;
  const int64_t n = max_len;
  // The global table, then the sliding layers' own when it differs (Gemma 3).
  BlockContext tables;
  set_rope_tables(tables, rope_cos_, rope_sin_, c, n);
  int64_t attention_layers = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (c.layer_kind(l) == LayerKind::LinearAttention) {
      state_slot_.push_back(static_cast<int64_t>(linear_.size()));
      linear_.emplace_back(c);
    } else {
      state_slot_.push_back(attention_layers++);
    }
  }
  k_cache_.resize(attention_layers * n * KD);
  v_cache_.resize(attention_layers * n * KD);
  for (auto* b : {&x_, &h_, &tmp_}) b->resize(n * C);
  for (auto* b : {&q_pre_, &q_, &att_}) b->resize(n * QD);
  for (auto* b : {&k_pre_, &k_, &v_}) b->resize(n * KD);
  for (auto* b : {&gate_, &up_, &act_}) b->resize(n * I);
  rstd_.resize(n);
  head_rstd_.resize(n * std::max(c.num_heads, c.num_kv_heads));
  lse_.resize(c.num_heads * n);
  scores_.resize(n);
  logits_.resize(c.vocab_size);
  if (c.attn_output_gate) {
    q_and_gate_.resize(2 * n * QD);
    attn_gate_.resize(n * QD);
  }
  if (c.has_moe()) {  // both sizes grow with the token count: enough for any call's n <= max_len
    moe_saved_.resize((moe_saved_bytes(moe_block_shape(c, n)) + sizeof(float) - 1) / sizeof(float));
    moe_ws_.resize(moe_workspace_floats(moe_block_shape(c, n)));
    if (c.moe.shared_expert_intermediate > 0) {
      shared_out_.resize(n * C);
      shared_logit_.resize(n);
    }
  }
}

namespace {

// Rows of [n, H, 2D] split into the query halves and the gate halves ([n, H, D] each).
void split_heads(float* query, float* gate, const float* qg, int64_t rows, int64_t D) {
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(qg + r * 2 * D, D, query + r * D);
    std::copy_n(qg + r * 2 * D + D, D, gate + r * D);
  }
}

}  // namespace

void Generator::refresh_compute_copy(const ModelParameters& params) { compute_copy_.refresh(params); }

// The MLP half of a layer on n rows of x_ (residual included).
void Generator::mlp(ModelParameters& params, const BlockTensors& w, int64_t n, int64_t layer) {
  const ModelConfig& c = config_;
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float off = static_cast<float>(c.norm_weight_offset);
  const Precision p = precision_;
  kernels_.rmsnorm_forward(h_.data(), rstd_.data(), x_.data(), w.mlp_norm, n, C, eps, off);
  if (c.layer_is_sparse(layer)) {  // the mixture of experts (no sandwich norms in these families)
    const MoeShape s = moe_block_shape(c, n);
    MoeSaved routing = moe_bind_saved(moe_saved_.data(), s);
    const MoeWeights mw{w.moe_router, w.moe_gate_up, w.moe_down};
    const MoeWeightsBf16 mb{compute_copy_.of(params, w.moe_router), compute_copy_.of(params, w.moe_gate_up),
                            compute_copy_.of(params, w.moe_down)};
    moe_forward(tmp_.data(), routing, h_.data(), mw, mb, s, p, moe_ws_.data());
    if (w.moe_shared_gate) {  // qwen3_5_moe: + sigmoid(h . gate) * the shared expert's output
      kernels_.linear_forward(gate_.data(), h_.data(), w.wg, compute_copy_.of(params, w.wg), nullptr, n, C, I, p);
      kernels_.linear_forward(up_.data(), h_.data(), w.wu, compute_copy_.of(params, w.wu), nullptr, n, C, I, p);
      kernels_.swiglu_forward(act_.data(), gate_.data(), up_.data(), n * I);
      kernels_.linear_forward(shared_out_.data(), act_.data(), w.wd, compute_copy_.of(params, w.wd), nullptr, n, I,
                              C, p);
      shared_gate_forward(shared_logit_.data(), h_.data(), w.moe_shared_gate, n, C, p);
      shared_gate_apply(tmp_.data(), shared_logit_.data(), shared_out_.data(), n, C);
    }
    add_inplace(x_.data(), tmp_.data(), n * C);
    return;
  }
  kernels_.linear_forward(gate_.data(), h_.data(), w.wg, compute_copy_.of(params, w.wg), w.bg, n, C, I, p);
  kernels_.linear_forward(up_.data(), h_.data(), w.wu, compute_copy_.of(params, w.wu), w.bu, n, C, I, p);
  if (c.mlp_activation == MlpActivation::GeluTanh) kernels_.geglu_forward(act_.data(), gate_.data(), up_.data(), n * I);
  else kernels_.swiglu_forward(act_.data(), gate_.data(), up_.data(), n * I);
  kernels_.linear_forward(tmp_.data(), act_.data(), w.wd, compute_copy_.of(params, w.wd), w.bd, n, I, C, p);
  if (c.sandwich_norms) {
    kernels_.rmsnorm_forward(h_.data(), rstd_.data(), tmp_.data(), w.post_mlp_norm, n, C, eps, off);
    add_inplace(x_.data(), h_.data(), n * C);
  } else {
    add_inplace(x_.data(), tmp_.data(), n * C);
  }
}

void Generator::run(const ModelParameters& cparams, const int32_t* tokens, int64_t n, int64_t pos) {
  ModelParameters& params = const_cast<ModelParameters&>(cparams);  // views only; nothing is written
  const ModelConfig& c = config_;
  const int64_t C = c.hidden_size, QD = c.q_dim(), KD = c.kv_dim(), I = c.intermediate_size;
  const int64_t D = c.head_dim, rotary = rotary_dim(c), half = rotary / 2;  // tables are [len, half]
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = c.attention_scale();
  const float off = static_cast<float>(c.norm_weight_offset);  // Gemma's (1 + w) norms
  LT_ASSERT(pos == 0 || n == 1, "the generator prefills at position 0, then decodes one token at a time");
  if (pos + n > max_len_)
    throw Error("sequence of " + std::to_string(pos + n) + " tokens exceeds the generator's " +
                    std::to_string(max_len_),
                "generation", "raise the generation length");
  const Precision p = precision_;
  // One token through a small model is too little work to split across threads.
  const bool tiny = n * (C * (QD + 2 * KD) + QD * C + 3 * C * I) < (int64_t{1} << 22);
  std::optional<ScopedNumThreads> single_thread;
  if (tiny) single_thread.emplace(1);
  embed_forward(kernels_, x_.data(), tokens, params.embedding(), n, c);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const BlockTensors w = params.block(l);
    if (c.layer_kind(l) == LayerKind::LinearAttention) {
      BlockTensorsBf16 wb;
      for (const BlockField& f : block_fields(c, l))
        if (f.matrix) wb.*bf16_member(f.member) = compute_copy_.of(params, w.*f.member);
      kernels_.rmsnorm_forward(h_.data(), rstd_.data(), x_.data(), w.attn_norm, n, C, eps, off);
      LinearAttentionDecoder& decoder = linear_[state_slot_[l]];
      if (pos == 0) decoder.reset();
      for (int64_t t = 0; t < n; ++t) decoder.step(tmp_.data() + t * C, h_.data() + t * C, w, wb, p);
      add_inplace(x_.data(), tmp_.data(), n * C);
      mlp(params, w, n, l);
      continue;
    }
    const int64_t window = c.layer_window(l);
    const int64_t table = c.local_rope && c.layer_is_sliding(l) ? max_len_ * half : 0;
    const float* cos = rope_cos_.data() + table + pos * half;
    const float* sin = rope_sin_.data() + table + pos * half;
    kernels_.rmsnorm_forward(h_.data(), rstd_.data(), x_.data(), w.attn_norm, n, C, eps, off);
    float* qp = c.qk_norm ? q_pre_.data() : q_.data();
    float* kp = c.qk_norm ? k_pre_.data() : k_.data();
    if (c.attn_output_gate) {  // q_proj yields each head's query and its output gate
      kernels_.linear_forward(q_and_gate_.data(), h_.data(), w.wq, compute_copy_.of(params, w.wq), w.bq, n, C,
                              2 * QD, p);
      split_heads(qp, attn_gate_.data(), q_and_gate_.data(), n * c.num_heads, D);
    } else {
      kernels_.linear_forward(qp, h_.data(), w.wq, compute_copy_.of(params, w.wq), w.bq, n, C, QD, p);
    }
    kernels_.linear_forward(kp, h_.data(), w.wk, compute_copy_.of(params, w.wk), w.bk, n, C, KD, p);
    kernels_.linear_forward(v_.data(), h_.data(), w.wv, compute_copy_.of(params, w.wv), w.bv, n, C, KD, p);
    if (c.qk_norm) {
      kernels_.rmsnorm_forward(q_.data(), head_rstd_.data(), q_pre_.data(), w.q_norm, n * c.num_heads, D, eps, off);
      kernels_.rmsnorm_forward(k_.data(), head_rstd_.data(), k_pre_.data(), w.k_norm, n * c.num_kv_heads, D, eps, off);
    }
    // Positions pos..pos+n-1: offset the tables so that row 0 is position pos.
    kernels_.rope_forward(q_.data(), cos, sin, 1, n, c.num_heads, D, nullptr, rotary);
    kernels_.rope_forward(k_.data(), cos, sin, 1, n, c.num_kv_heads, D, nullptr, rotary);
    float* kc = k_cache_.data() + state_slot_[l] * max_len_ * KD;
    float* vc = v_cache_.data() + state_slot_[l] * max_len_ * KD;
    std::memcpy(kc + pos * KD, k_.data(), n * KD * sizeof(float));
    std::memcpy(vc + pos * KD, v_.data(), n * KD * sizeof(float));
    if (pos == 0)
      kernels_.attention_forward(att_.data(), lse_.data(), q_.data(), kc, vc, 1, n, c.num_heads, c.num_kv_heads, D,
                                 scale, nullptr, window, precision_);
    else {  // a sliding layer sees the cached keys from pos - window + 1 only
      const int64_t from = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
      decode_attention(att_.data(), scores_.data(), q_.data(), kc + from * KD, vc + from * KD, pos - from,
                       c.num_heads, c.num_kv_heads, D, scale);
    }
    if (c.attn_output_gate)
      for (int64_t i = 0; i < n * QD; ++i) att_.data()[i] *= 1.0f / (1.0f + std::exp(-attn_gate_.data()[i]));
    kernels_.linear_forward(tmp_.data(), att_.data(), w.wo, compute_copy_.of(params, w.wo), w.bo, n, QD, C, p);
    if (c.sandwich_norms) {  // Gemma 3: the attention output is normed before the residual add
      kernels_.rmsnorm_forward(h_.data(), rstd_.data(), tmp_.data(), w.post_attn_norm, n, C, eps, off);
      add_inplace(x_.data(), h_.data(), n * C);
    } else {
      add_inplace(x_.data(), tmp_.data(), n * C);
    }
    mlp(params, w, n, l);
  }
  // Only the last position's logits are needed.
  const float* last = x_.data() + (n - 1) * C;
  kernels_.rmsnorm_forward(h_.data(), rstd_.data(), last, params.final_norm(), 1, C, eps, off);
  kernels_.linear_forward(logits_.data(), h_.data(), params.lm_head(), compute_copy_.of(params, params.lm_head()),
                 nullptr, 1, C, c.vocab_size, p);
}

std::vector<float> Generator::last_logits(const ModelParameters& params,
                                          const std::vector<int32_t>& tokens) {
  LT_ASSERT(!tokens.empty());
  run(params, tokens.data(), static_cast<int64_t>(tokens.size()), 0);
  return std::vector<float>(logits_.data(), logits_.data() + config_.vocab_size);
}

std::vector<int32_t> Generator::generate(const ModelParameters& params, const std::vector<int32_t>& prompt,
                                         int64_t max_new_tokens, const std::vector<int32_t>& stop_ids) {
  if (prompt.empty()) throw Error("empty prompt", "generation", "give at least one token");
  std::vector<int32_t> out;
  max_new_tokens = std::min<int64_t>(max_new_tokens, max_len_ - static_cast<int64_t>(prompt.size()));
  run(params, prompt.data(), static_cast<int64_t>(prompt.size()), 0);
  int64_t pos = static_cast<int64_t>(prompt.size());
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    const float* lg = logits_.data();
    const int32_t next = static_cast<int32_t>(std::max_element(lg, lg + config_.vocab_size) - lg);
    out.push_back(next);
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) break;
    if (i + 1 == max_new_tokens) break;
    run(params, &next, 1, pos++);
  }
  return out;
}

}  // namespace lt
