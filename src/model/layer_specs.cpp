#include "model/layer_specs.h"

#include "core/error.h"
#include "model/hybrid_layers.h"

namespace lt {

namespace {

// A sparse layer's MLP, one checkpoint tensor per expert (what the hub's files and
// transformers' save_pretrained hold), in the order that lays them out as the block's
// fused arrays (layers/moe_mlp.h): the router [E, C]; gate_up [E, 2I, C], expert by
// expert its gate projection then its up projection; down [E, C, I]; then qwen3_5_moe's
// shared expert (the layer's dense MLP) and its gate [1, C].
void append_moe_weights(std::vector<WeightSpec>& w, const ModelConfig& c, const std::string& p) {
  LT_ASSERT(!c.mlp_bias && !c.sandwich_norms, "a MoE layer with MLP biases or sandwich norms");
  const bool mixtral = c.model_type == "mixtral";
  const std::string block = p + (mixtral ? "block_sparse_moe." : "mlp.");
  const int64_t C = c.hidden_size, E = c.moe.num_experts, I = c.moe.expert_intermediate;
  w.push_back({block + "gate.weight", {E, C}});
  auto expert = [&](int64_t e, const char* qwen3_moe_name, const char* mixtral_name) {
    return block + "experts." + std::to_string(e) + "." + (mixtral ? mixtral_name : qwen3_moe_name) + ".weight";
  };
  for (int64_t e = 0; e < E; ++e) {
    w.push_back({expert(e, "gate_proj", "w1"), {I, C}});
    w.push_back({expert(e, "up_proj", "w3"), {I, C}});
  }
  for (int64_t e = 0; e < E; ++e) w.push_back({expert(e, "down_proj", "w2"), {C, I}});
  if (const int64_t S = c.moe.shared_expert_intermediate; S > 0) {  // qwen3_5_moe's shared expert and its gate
    w.push_back({block + "shared_expert.gate_proj.weight", {S, C}});
    w.push_back({block + "shared_expert.up_proj.weight", {S, C}});
    w.push_back({block + "shared_expert.down_proj.weight", {C, S}});
    w.push_back({block + "shared_expert_gate.weight", {1, C}});
  }
}

}  // namespace

std::vector<WeightSpec> block_weight_specs(const ModelConfig& c, int64_t layer) {
  LT_ASSERT(layer >= 0 && layer < c.num_layers, "layer index out of range");
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  const int64_t C = c.hidden_size, I = c.intermediate_size, Q = c.q_dim(), KV = c.kv_dim();
  std::vector<WeightSpec> w;
  // Linear layers store [out, in]; a bias, when present, follows its weight.
  auto linear = [&](const std::string& name, int64_t out, int64_t in, bool bias) {
    w.push_back({p + name + ".weight", {out, in}});
    if (bias) w.push_back({p + name + ".bias", {out}});
  };
  w.push_back({p + "input_layernorm.weight", {C}});
  if (c.layer_kind(layer) == LayerKind::LinearAttention) {
    append_linear_attention_weights(w, c, p);  // Qwen3.5's Gated DeltaNet
  } else {
    // With the output gate (Qwen3.5), q_proj yields each head's query and its gate.
    linear("self_attn.q_proj", c.attn_output_gate ? 2 * Q : Q, C, c.qkv_bias);
    linear("self_attn.k_proj", KV, C, c.qkv_bias);
    linear("self_attn.v_proj", KV, C, c.qkv_bias);
    if (c.qk_norm) {
      w.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
      w.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
    }
    linear("self_attn.o_proj", C, Q, c.o_bias);
  }
  // The MLP's input norm; under Gemma 3's sandwich norms, the attention output's norm,
  // and pre_feedforward_layernorm is the MLP's input norm.
  w.push_back({p + "post_attention_layernorm.weight", {C}});
  if (c.sandwich_norms) w.push_back({p + "pre_feedforward_layernorm.weight", {C}});
  if (c.layer_is_sparse(layer)) {
    append_moe_weights(w, c, p);
    return w;
  }
  linear("mlp.gate_proj", I, C, c.mlp_bias);
  linear("mlp.up_proj", I, C, c.mlp_bias);
  linear("mlp.down_proj", C, I, c.mlp_bias);
  if (c.sandwich_norms) w.push_back({p + "post_feedforward_layernorm.weight", {C}});
  return w;
}

WeightSpec embedding_weight_spec(const ModelConfig& c) {
  return {"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}};
}

std::vector<WeightSpec> head_weight_specs(const ModelConfig& c) {
  std::vector<WeightSpec> w = {{"model.norm.weight", {c.hidden_size}}};
  if (!c.tie_word_embeddings) w.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}});
  return w;
}

std::vector<WeightSpec> all_weight_specs(const ModelConfig& c) {
  std::vector<WeightSpec> w = {embedding_weight_spec(c)};
  for (int64_t l = 0; l < c.num_layers; ++l) {
    auto b = block_weight_specs(c, l);
    w.insert(w.end(), b.begin(), b.end());
  }
  auto h = head_weight_specs(c);
  w.insert(w.end(), h.begin(), h.end());
  return w;
}

int64_t active_params(const ModelConfig& c) {
  int64_t n = 0;
  for (const WeightSpec& w : all_weight_specs(c)) n += w.numel();
  for (int64_t l = 0; l < c.num_layers; ++l)
    if (c.layer_is_sparse(l))
      n -= (c.moe.num_experts - c.moe.experts_per_token) * 3 * c.hidden_size * c.moe.expert_intermediate;
  return n;
}

std::vector<ActivationSpec> block_saved_activations(const ModelConfig& c, RecomputeOption opt, int64_t batch,
                                                    int64_t seq, int act_bytes) {
  if (opt == RecomputeOption::RecomputeFromInput) return {};
  const int64_t T = batch * seq, C = c.hidden_size, I = c.intermediate_size, Q = c.q_dim(), KV = c.kv_dim();
  constexpr int64_t kStatBytes = 4;  // norm rstd and logsumexp stay fp32 for accuracy
  std::vector<ActivationSpec> a;
  auto act = [&](const std::string& name, Shape shape) {
    a.push_back({name, shape, shape_numel(shape) * act_bytes});
  };
  auto stat = [&](const std::string& name, Shape shape) {
    a.push_back({name, shape, shape_numel(shape) * kStatBytes});
  };
  stat("attn_norm_rstd", {T});
  act("attn_norm_out", {T, C});
  if (c.qk_norm) {
    act("q_pre_norm", {T, Q});
    act("k_pre_norm", {T, KV});
    stat("q_norm_rstd", {T * c.num_heads});
    stat("k_norm_rstd", {T * c.num_kv_heads});
  }
  act("q", {T, Q});
  act("k", {T, KV});
  act("v", {T, KV});
  act("attn_out", {T, Q});
  stat("attn_lse", {batch, c.num_heads, seq});
  if (c.sandwich_norms) {  // o_proj's output is normalized before the residual add
    act("attn_proj_out", {T, C});
    stat("post_attn_norm_rstd", {T});
  }
  act("resid_mid", {T, C});
  stat("mlp_norm_rstd", {T});
  act("mlp_norm_out", {T, C});
  // The gate's input and output, whether its activation is SiLU or GELU (tanh).
  act("mlp_gate", {T, I});
  act("mlp_up", {T, I});
  act("mlp_act", {T, I});
  if (c.sandwich_norms) {  // down_proj's output, normalized before the residual add
    act("mlp_down_out", {T, C});
    stat("post_mlp_norm_rstd", {T});
  }
  return a;
}

int64_t block_saved_bytes(const ModelConfig& c, RecomputeOption opt, int64_t batch, int64_t seq, int act_bytes) {
  int64_t n = 0;
  for (const auto& s : block_saved_activations(c, opt, batch, seq, act_bytes)) n += s.bytes;
  return n;
}

int64_t boundary_bytes(const ModelConfig& c, int64_t batch, int64_t seq, int act_bytes) {
  return batch * seq * c.hidden_size * act_bytes;
}

double mlp_matmul_params(const ModelConfig& c, int64_t layer) {
  const double C = c.hidden_size, I = c.intermediate_size;
  if (!c.layer_is_sparse(layer)) return 3 * C * I;
  const double E = c.moe.num_experts, k = c.moe.experts_per_token, EI = c.moe.expert_intermediate;
  const double shared = c.moe.shared_expert_intermediate > 0 ? 3 * C * I + C : 0;  // qwen3_5_moe
  return C * E + k * 3 * C * EI + shared;
}

double block_forward_flops(const ModelConfig& c, int64_t batch, int64_t seq, int64_t layer) {
  const double T = static_cast<double>(batch) * static_cast<double>(seq);
  const double C = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim();
  // Matmul parameters: q, k, v, o projections and the MLP's (mlp_matmul_params; layer -1:
  // layer 0's MLP).
  const double matmul_params = C * Q + 2 * C * KV + Q * C + mlp_matmul_params(c, layer >= 0 ? layer : 0);
  // QK^T and PV, each 2 FLOPs per MAC, over the (query, key) pairs attention computes:
  // the causal triangle of seq*(seq+1)/2 pairs, or under a window W < seq the first W
  // rows' triangle and W keys for each row after it.
  const double s = static_cast<double>(seq);
  const int64_t window = layer >= 0 ? c.layer_window(layer) : 0;
  double pairs = s * (s + 1) / 2.0;
  if (window > 0 && window < seq) {
    const double w = static_cast<double>(window);
    pairs = w * (w + 1) / 2.0 + (s - w) * w;
  }
  const double attention = 2.0 * 2.0 * batch * c.num_heads * c.head_dim * pairs;
  return 2.0 * T * matmul_params + attention;
}

double head_forward_flops(const ModelConfig& c, int64_t batch, int64_t seq) {
  return 2.0 * static_cast<double>(batch) * seq * c.hidden_size * c.vocab_size;
}

}  // namespace lt
