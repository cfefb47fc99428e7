#include "model/hybrid_layers.h"

#include <algorithm>
#include <string>


namespace lt {
namespace {

constexpr int64_t kStatBytes = 4;  // norm statistics, gates and recurrent states stay fp32

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

void append_linear_attention_weights(std::vector<WeightSpec>& w, const ModelConfig& c, const std::string& prefix) {
  const std::string p = prefix + "linear_attn.";
  const LinearAttentionShape& s = c.linear;
  const int64_t C = c.hidden_size;
  w.push_back({p + "in_proj_qkv.weight", {s.conv_dim(), C}});
  w.push_back({p + "in_proj_z.weight", {s.value_dim(), C}});
  w.push_back({p + "in_proj_b.weight", {s.value_heads, C}});
  w.push_back({p + "in_proj_a.weight", {s.value_heads, C}});
  w.push_back({p + "conv1d.weight", {s.conv_dim(), 1, s.conv_kernel}});
  w.push_back({p + "dt_bias", {s.value_heads}});
  w.push_back({p + "A_log", {s.value_heads}});
  w.push_back({p + "norm.weight", {s.value_head_dim}});
  w.push_back({p + "out_proj.weight", {C, s.value_dim()}});
}

int64_t layer_params(const ModelConfig& c, int64_t layer) {
  int64_t n = 0;
  for (const WeightSpec& w : block_weight_specs(c, layer)) n += w.numel();
  return n;
}

std::vector<ActivationSpec> layer_saved_activations(const ModelConfig& c, int64_t layer, RecomputeOption opt,
                                                    int64_t batch, int64_t seq, int act_bytes) {
  // The uniform block's list (its norms, attention and MLP); a sparse MoE layer swaps the
  // MLP's part for the experts' (below), a hybrid layer the token mixer's part, between the
  // input norm and the residual, for its own.
  std::vector<ActivationSpec> a = block_saved_activations(c, opt, batch, seq, act_bytes);
  if (a.empty()) return a;
  const int64_t T = batch * seq;
  auto named = [&](const char* name) {
    return std::find_if(a.begin(), a.end(), [&](const ActivationSpec& s) { return s.name == name; });
  };
  auto act = [&](const std::string& name, Shape shape) {
    return ActivationSpec{name, shape, shape_numel(shape) * act_bytes};
  };
  auto stat = [&](const std::string& name, Shape shape) {
    return ActivationSpec{name, shape, shape_numel(shape) * kStatBytes};
  };
  if (c.layer_is_sparse(layer)) {
    // The MoE MLP (layers/moe_mlp.h's MoeSaved) in place of the dense gate, up and act:
    // the router's probabilities and the routing, then each routed row's projections in
    // the experts' grouped order (T * k rows).
    const int64_t E = c.moe.num_experts, k = c.moe.experts_per_token, I = c.moe.expert_intermediate;
    const std::vector<ActivationSpec> moe = {
        stat("moe_probs", {T, E}),       stat("moe_weights", {T, k}),  stat("moe_experts", {T, k}),  // int32
        stat("moe_offsets", {E + 1}),    stat("moe_row_of", {T, k}),   // int32
        act("moe_gate", {T * k, I}),     act("moe_up", {T * k, I}),    act("moe_act", {T * k, I}),
    };
    if (c.moe.shared_expert_intermediate > 0) {
      // qwen3_5_moe: the shared expert keeps the dense MLP's saved tensors, and its output
      // before the gate and the gate's logit.
      const auto pos = named("mlp_act") + 1;
      std::vector<ActivationSpec> shared = moe;
      shared.push_back(act("mlp_down_out", {T, c.hidden_size}));
      shared.push_back(stat("moe_shared_logit", {T}));
      a.insert(pos, shared.begin(), shared.end());
    } else {
      const auto pos = a.erase(named("mlp_gate"), named("mlp_act") + 1);
      a.insert(pos, moe.begin(), moe.end());
    }
  }
  if (!c.hybrid()) return a;
  if (c.layer_kind(layer) == LayerKind::Attention) {
    // Pre-sigmoid; o_proj's input (gate * attention output) is recomputed in backward.
    if (c.attn_output_gate) a.insert(named("attn_out"), act("attn_gate", {T, c.q_dim()}));
    return a;
  }
  const LinearAttentionShape& s = c.linear;
  const std::vector<ActivationSpec> mixer = {
      act("conv_in", {T, s.conv_dim()}),  // in_proj_qkv's output: the convolution's backward reads it
      // q, k, v after the convolution and SiLU, each its own array (the delta rule's
      // inputs; it normalizes q and k itself, and its backward recomputes that)
      act("conv_q", {T, s.key_dim()}),
      act("conv_k", {T, s.key_dim()}),
      act("conv_v", {T, s.value_dim()}),
      act("z", {T, s.value_dim()}),                  // the output gate of the gated norm
      stat("beta", {T, s.value_heads}),
      stat("decay", {T, s.value_heads}),            // g = -exp(A_log) * softplus(a + dt_bias)
      // The recurrent state entering each chunk: backward reruns one chunk at a time from it.
      stat("chunk_states", {batch, s.value_heads, ceil_div(seq, kDeltaRuleChunk), s.key_head_dim, s.value_head_dim}),
      act("delta_out", {T, s.value_dim()}),          // the delta rule's output, before the gated norm
      stat("delta_norm_rstd", {T * s.value_heads}),
      act("delta_gated", {T, s.value_dim()}),        // out_proj's input
  };
  const auto from = named("attn_norm_out") + 1;
  const auto pos = a.erase(from, named("resid_mid"));
  a.insert(pos, mixer.begin(), mixer.end());
  return a;
}

int64_t layer_saved_bytes(const ModelConfig& c, int64_t layer, RecomputeOption opt, int64_t batch, int64_t seq,
                          int act_bytes) {
  int64_t n = 0;
  for (const auto& s : layer_saved_activations(c, layer, opt, batch, seq, act_bytes)) n += s.bytes;
  return n;
}

double layer_forward_flops(const ModelConfig& c, int64_t layer, int64_t batch, int64_t seq) {
  if (!c.hybrid()) return block_forward_flops(c, batch, seq, layer);  // a sliding layer counts its window
  const double T = static_cast<double>(batch) * static_cast<double>(seq);
  const double C = c.hidden_size;
  const double mlp = mlp_matmul_params(c, layer);
  if (c.layer_kind(layer) == LayerKind::Attention) {
    // block_forward_flops, with q_proj twice as wide when it also yields the gate.
    const double gate = c.attn_output_gate ? C * static_cast<double>(c.q_dim()) : 0;
    return block_forward_flops(c, batch, seq, layer) + 2.0 * T * gate;
  }
  const LinearAttentionShape& s = c.linear;
  const double Dk = s.key_head_dim, Dv = s.value_head_dim;
  const double projections = C * (s.conv_dim() + s.value_dim() + 2.0 * s.value_heads) + s.value_dim() * C;
  // The chunked delta rule, per token and value head, in MACs: within a chunk of c tokens
  // the k·k^T and q·k^T products (c·Dk each, full squares), the triangular solve (c²/2),
  // w and u (c·Dk, c·Dv), the intra-chunk output (c·Dv); against the state, q·S and w·S
  // and the state update k^T·v (Dk·Dv each).
  const double ch = static_cast<double>(std::min(kDeltaRuleChunk, seq));
  const double delta = s.value_heads * (3 * Dk * Dv + ch * (3 * Dk + 2 * Dv) + ch * ch / 2);
  const double conv = static_cast<double>(s.conv_kernel * s.conv_dim());
  return 2.0 * T * (projections + mlp + delta + conv);
}

}  // namespace lt
