// Qwen3.5/3.6 text configs (transformers' Qwen3_5TextConfig, model_type "qwen3_5_text",
// or the "text_config" of a "qwen3_5" checkpoint). The fields the family shares with
// qwen3 (sizes, heads, RoPE theta, q/k norms, biases, dtype) are read by the qwen3 parser
// on a copy of the config without the hybrid fields, so both families validate them the
// same way; this file reads what is Qwen3.5's own: layer_types (or
// full_attention_interval), the Gated DeltaNet shape, the attention output gate, and
// partial RoPE.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"
#include "model/config_fields.h"
#include "model/config_moe.h"
#include "model/config_qwen3_5.h"

namespace lt {
namespace {

using nlohmann::json;
using namespace config_fields;

// A positive count bounded as config.cpp bounds heads and head dims.
int64_t positive_int(const Fields& f, const std::string& key, int64_t def) {
  const int64_t n = f.opt_int(key, def);
  require_positive(n, f, key);
  require_at_most(n, kMaxCount, f, key);
  return n;
}

// partial_rotary_factor: top level (4.x checkpoints) or inside rope_parameters (5.x);
// Qwen3_5TextConfig defaults it to 0.25.
double partial_rotary(const json& j, const std::string& where) {
  double f = Fields(j, where).opt_num("partial_rotary_factor", 0.25);
  std::string at = where + ", field \"partial_rotary_factor\"";
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (j.contains(key) && j.at(key).is_object() && j.at(key).contains("partial_rotary_factor")) {
      const std::string obj = where + ", field \"" + key + "\"";
      f = Fields(j.at(key), obj).opt_num("partial_rotary_factor", f);
      at = obj + ", entry \"partial_rotary_factor\"";
    }
  if (!(f > 0 && f <= 1)) throw Error("must be in (0, 1], got " + std::to_string(f), at, kFixConfig);
  return f;
}

std::vector<LayerKind> layer_kinds(const json& j, int64_t layers, const std::string& where) {
  std::vector<LayerKind> kinds;
  if (j.contains("layer_types") && !j.at("layer_types").is_null()) {
    const json& lt = j.at("layer_types");
    const std::string at = where + ", field \"layer_types\"";
    if (!lt.is_array() || static_cast<int64_t>(lt.size()) != layers)
      throw Error("must be a list of " + std::to_string(layers) + " layer types (num_hidden_layers)", at, kFixConfig);
    for (const json& t : lt) {
      if (t == "linear_attention") kinds.push_back(LayerKind::LinearAttention);
      else if (t == "full_attention") kinds.push_back(LayerKind::Attention);
      else throw Error("layer type " + t.dump() + " is not a Qwen3.5 layer", at, "use linear_attention or full_attention");
    }
    return kinds;
  }
  // transformers: every full_attention_interval-th layer (1-based) is full attention.
  const int64_t interval = positive_int(Fields(j, where), "full_attention_interval", 4);
  for (int64_t i = 0; i < layers; ++i)
    kinds.push_back((i + 1) % interval == 0 ? LayerKind::Attention : LayerKind::LinearAttention);
  return kinds;
}

}  // namespace

bool is_qwen3_5_type(const std::string& model_type) {
  return model_type == "qwen3_5_text" || model_type == "qwen3_5" || model_type == "qwen3_5_moe_text" ||
         model_type == "qwen3_5_moe";
}

namespace {

// Qwen3_5MoeTextConfig's MoE fields (transformers 5.24 defaults): every layer's MLP is the
// mixture of experts plus the shared expert, whose width becomes the layer's dense
// intermediate_size (it runs as the dense MLP does, model/config.h MoeConfig).
constexpr const char* kQwen35MoeKeys[] = {"num_experts", "num_experts_per_tok", "moe_intermediate_size",
                                          "shared_expert_intermediate_size", "router_aux_loss_coef",
                                          "output_router_logits", "norm_topk_prob", "decoder_sparse_step",
                                          "mlp_only_layers"};

void read_qwen3_5_moe_fields(ModelConfig& c, const Fields& f) {
  MoeConfig& m = c.moe;
  m.num_experts = positive_int(f, "num_experts", 256);
  read_moe_routing_fields(m, f, 8, "num_experts");
  m.expert_intermediate = f.opt_int("moe_intermediate_size", 512);
  require_positive(m.expert_intermediate, f, "moe_intermediate_size");
  require_at_most(m.expert_intermediate, kMaxIntermediate, f, "moe_intermediate_size");
  m.shared_expert_intermediate = c.intermediate_size;
  m.norm_topk_prob = true;  // Qwen3_5MoeTopKRouter always renormalizes the chosen probabilities
}

}  // namespace

ModelConfig parse_qwen3_5_config(const json& top, const std::string& top_where) {
  // A qwen3_5 / qwen3_5_moe (vision-language) checkpoint keeps the language model in text_config.
  const std::string top_type = top.value("model_type", "");
  const bool multimodal = top_type == "qwen3_5" || top_type == "qwen3_5_moe";
  const bool moe = top_type == "qwen3_5_moe" || top_type == "qwen3_5_moe_text";
  if (multimodal && !(top.contains("text_config") && top.at("text_config").is_object()))
    throw Error("a " + top_type + " config without a \"text_config\" object", top_where,
                "use the checkpoint's original config.json");
  const json& j = multimodal ? top.at("text_config") : top;
  const std::string where = multimodal ? top_where + ", field \"text_config\"" : top_where;

  json shared = j;
  shared["model_type"] = "qwen3";
  for (const char* key : {"layer_types", "full_attention_interval", "linear_num_key_heads", "linear_num_value_heads",
                          "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim",
                          "attn_output_gate", "partial_rotary_factor", "use_sliding_window"})
    shared.erase(key);
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (shared.contains(key) && shared[key].is_object())
      for (const char* k : {"partial_rotary_factor", "mrope_section", "mrope_interleaved"}) shared[key].erase(k);
  if (!shared.contains("head_dim") || shared["head_dim"].is_null()) shared["head_dim"] = 256;  // Qwen3_5TextConfig's
  if (!shared.contains("vocab_size")) shared["vocab_size"] = 248320;
  if (moe) {
    for (const char* key : kQwen35MoeKeys) shared.erase(key);
    // The shared expert is the layer's dense MLP (Qwen3_5MoeTextConfig has no intermediate_size).
    shared["intermediate_size"] = j.contains("shared_expert_intermediate_size") &&
                                          !j.at("shared_expert_intermediate_size").is_null()
                                      ? j.at("shared_expert_intermediate_size")
                                      : json(512);
  }
  ModelConfig c = parse_model_config(shared, where);
  c.model_type = moe ? "qwen3_5_moe_text" : "qwen3_5_text";
  c.qk_norm = true;
  // Qwen3_5RMSNorm (every norm but the DeltaNet's gated one) scales by 1 + w, in fp32.
  c.norm_weight_offset = 1.0;
  // Qwen3_5TextModel's nn.Embedding takes pad_token_id as padding_idx (the class default
  // is None: no padding row).
  {
    const Fields pf(j, where);
    c.padding_idx = pf.opt_int("pad_token_id", -1);
    if (c.padding_idx >= c.vocab_size || c.padding_idx < -1)
      throw Error("is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")", pf.at("pad_token_id"),
                  kFixConfig);
  }
  c.layer_kinds = layer_kinds(j, c.num_layers, where);
  const Fields f(j, where);
  c.linear.key_heads = positive_int(f, "linear_num_key_heads", 16);
  c.linear.value_heads = positive_int(f, "linear_num_value_heads", 32);
  c.linear.key_head_dim = positive_int(f, "linear_key_head_dim", 128);
  c.linear.value_head_dim = positive_int(f, "linear_value_head_dim", 128);
  c.linear.conv_kernel = positive_int(f, "linear_conv_kernel_dim", 4);
  if (c.linear.value_heads % c.linear.key_heads != 0)
    throw Error("linear_num_value_heads " + std::to_string(c.linear.value_heads) +
                    " is not a multiple of linear_num_key_heads " + std::to_string(c.linear.key_heads),
                where + ", field \"linear_num_value_heads\"", "each key head serves whole groups of value heads");
  // transformers gates every full-attention layer's output whatever the key says.
  if (j.contains("attn_output_gate") && j.at("attn_output_gate") == false)
    throw Error("attn_output_gate is false, but Qwen3.5's attention always gates its output (transformers "
                "ignores the key)",
                where + ", field \"attn_output_gate\"", "remove the key or set it to true");
  c.attn_output_gate = true;
  if (moe) read_qwen3_5_moe_fields(c, f);
  {
    // As config.cpp bounds the uniform families: every size product stays inside int64.
    const double C = static_cast<double>(c.hidden_size), L = static_cast<double>(c.num_layers);
    const double mixer = C * (static_cast<double>(c.linear.conv_dim()) + 2.0 * static_cast<double>(c.linear.value_dim()) +
                              2.0 * static_cast<double>(c.linear.value_heads)) +
                         static_cast<double>(c.linear.conv_dim() * c.linear.conv_kernel);
    const double experts = static_cast<double>(c.moe.num_experts) *
                           (3 * C * static_cast<double>(c.moe.expert_intermediate) + C);
    const double params = L * (mixer + 3 * C * static_cast<double>(c.intermediate_size) + experts) +
                          2 * static_cast<double>(c.vocab_size) * C;
    if (params > kMaxParams)
      throw Error("the model would have " + std::to_string(params) + " parameters, more than lazytrain supports (1e15)",
                  where, kFixConfig);
  }
  c.partial_rotary_factor = partial_rotary(j, where);
  const double rotary = c.partial_rotary_factor * static_cast<double>(c.head_dim);
  if (std::floor(rotary) != rotary || static_cast<int64_t>(rotary) % 2 != 0)
    throw Error("partial_rotary_factor " + std::to_string(c.partial_rotary_factor) + " of head_dim " +
                    std::to_string(c.head_dim) + " is not an even number of channels",
                where, "RoPE rotates channel pairs; use a factor that gives an even count");
  return c;
}

json qwen3_5_config_to_json(const ModelConfig& c, json qwen3_fields) {
  qwen3_fields["architectures"] = {"Qwen3_5ForCausalLM"};
  qwen3_fields["model_type"] = "qwen3_5_text";
  qwen3_fields.erase("use_sliding_window");
  json types = json::array();
  for (LayerKind k : c.layer_kinds) types.push_back(k == LayerKind::Attention ? "full_attention" : "linear_attention");
  qwen3_fields["layer_types"] = types;
  qwen3_fields["linear_num_key_heads"] = c.linear.key_heads;
  qwen3_fields["linear_num_value_heads"] = c.linear.value_heads;
  qwen3_fields["linear_key_head_dim"] = c.linear.key_head_dim;
  qwen3_fields["linear_value_head_dim"] = c.linear.value_head_dim;
  qwen3_fields["linear_conv_kernel_dim"] = c.linear.conv_kernel;
  qwen3_fields["attn_output_gate"] = true;
  qwen3_fields["rope_parameters"]["partial_rotary_factor"] = c.partial_rotary_factor;
  qwen3_fields["pad_token_id"] = c.padding_idx >= 0 ? json(c.padding_idx) : json(nullptr);
  if (c.has_moe()) {
    const MoeConfig& m = c.moe;
    qwen3_fields["architectures"] = {"Qwen3_5MoeForCausalLM"};
    qwen3_fields["model_type"] = "qwen3_5_moe_text";
    qwen3_fields.erase("intermediate_size");
    qwen3_fields["num_experts"] = m.num_experts;
    qwen3_fields["moe_intermediate_size"] = m.expert_intermediate;
    qwen3_fields["shared_expert_intermediate_size"] = m.shared_expert_intermediate;
    write_moe_routing_fields(m, qwen3_fields);
  }
  return qwen3_fields;
}

}  // namespace lt
