// qwen3_moe and mixtral configs. The fields each shares with its dense twin (qwen3:
// q/k norms, attention_bias, head_dim; mistral: the sliding window) are read by the twin's
// parser on a copy of the config without the MoE fields, after the MoE class's own
// defaults where they differ from the twin's (transformers 5.24: Qwen3MoeConfig has no
// head_dim default (hidden_size / num_attention_heads) and defaults num_key_value_heads to
// 4, intermediate_size to 6144; MixtralConfig defaults
// rms_norm_eps 1e-5, rope_theta 1e6, num_key_value_heads 8 and no sliding window). This
// file reads the MoE fields, with the classes' defaults.
#include "model/config_moe.h"

#include <cmath>

#include "core/error.h"
#include "model/config_fields.h"

namespace lt {
namespace {

using nlohmann::json;
using namespace config_fields;

constexpr const char* kMoeKeys[] = {"num_experts",      "num_local_experts",   "num_experts_per_tok",
                                    "moe_intermediate_size", "norm_topk_prob", "decoder_sparse_step",
                                    "mlp_only_layers",  "router_aux_loss_coef", "output_router_logits",
                                    "router_jitter_noise"};

// head_dim when the config has none: Qwen3MoeAttention's getattr(config, "head_dim",
// hidden_size // num_attention_heads).
int64_t qwen3_moe_head_dim(const Fields& f) {
  const int64_t hidden = f.req_int("hidden_size"), heads = f.req_int("num_attention_heads");
  require_positive(hidden, f, "hidden_size");
  require_positive(heads, f, "num_attention_heads");
  if (hidden % heads != 0)
    throw Error("hidden_size is not a multiple of num_attention_heads and head_dim is not given", f.at("head_dim"),
                "state head_dim in config.json");
  return hidden / heads;
}

// qwen3_moe: every layer slides when use_sliding_window is set and sliding_window is not
// null (Qwen3MoeConfig.__post_init__; the attention reads config.sliding_window on every
// layer). Returns the window, 0 for none.
int64_t qwen3_moe_window(const Fields& f, const json& j) {
  if (!f.opt_bool("use_sliding_window", false)) return 0;
  const int64_t window = j.contains("sliding_window") ? f.opt_int("sliding_window", 0) : 4096;
  if (window < 0) throw Error("must be positive or null", f.at("sliding_window"), kFixConfig);
  return window;
}

std::vector<int64_t> mlp_only_layers(const Fields& f, int64_t layers) {
  std::vector<int64_t> out;
  if (!f.has("mlp_only_layers")) return out;
  const json& v = f.raw("mlp_only_layers");
  if (!v.is_array()) throw Error("must be a list of layer indices or null, got " + v.dump(), f.at("mlp_only_layers"), kFixConfig);
  for (const json& e : v) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= layers)
      throw Error("holds " + e.dump() + ", not a layer index in [0, " + std::to_string(layers) + ")",
                  f.at("mlp_only_layers"), kFixConfig);
    out.push_back(e.get<int64_t>());
  }
  return out;
}

}  // namespace

void read_moe_routing_fields(MoeConfig& m, const Fields& f, int64_t top_k_default, const std::string& experts_key) {
  m.experts_per_token = f.opt_int("num_experts_per_tok", top_k_default);
  if (m.experts_per_token < 1 || m.experts_per_token > m.num_experts)
    throw Error("is " + std::to_string(m.experts_per_token) + ", not in [1, " + experts_key + " = " +
                    std::to_string(m.num_experts) + "]",
                f.at("num_experts_per_tok"), "each token is routed to between 1 and all of the experts");
  m.router_aux_loss_coef = f.opt_num("router_aux_loss_coef", 0.001);
  if (!(m.router_aux_loss_coef >= 0) || !std::isfinite(m.router_aux_loss_coef))
    throw Error("must be a non-negative number, got " + std::to_string(m.router_aux_loss_coef),
                f.at("router_aux_loss_coef"), kFixConfig);
  m.output_router_logits = f.opt_bool("output_router_logits", false);
}

void write_moe_routing_fields(const MoeConfig& m, json& j) {
  j["num_experts_per_tok"] = m.experts_per_token;
  j["router_aux_loss_coef"] = m.router_aux_loss_coef;
  j["output_router_logits"] = m.output_router_logits;
}

bool is_moe_type(const std::string& model_type) { return model_type == "qwen3_moe" || model_type == "mixtral"; }

std::string moe_dense_twin(const std::string& model_type) { return model_type == "mixtral" ? "mistral" : "qwen3"; }

ModelConfig parse_moe_config(const json& j, const std::string& where) {
  const Fields f(j, where);
  const std::string type = f.opt_str("model_type", "");
  const bool mixtral = type == "mixtral";

  json shared = j;
  shared["model_type"] = moe_dense_twin(type);
  for (const char* key : kMoeKeys) shared.erase(key);
  int64_t window = 0;
  if (mixtral) {
    if (!j.contains("rms_norm_eps")) shared["rms_norm_eps"] = 1e-5;
    if (!j.contains("rope_theta")) shared["rope_theta"] = 1e6;  // a rope_parameters theta still wins
    if (!j.contains("num_key_value_heads")) shared["num_key_value_heads"] = 8;  // null: num_attention_heads
    if (!j.contains("sliding_window")) shared["sliding_window"] = nullptr;
  } else {
    if (!f.has("head_dim")) shared["head_dim"] = qwen3_moe_head_dim(f);
    if (!j.contains("intermediate_size")) shared["intermediate_size"] = 6144;  // the dense layers' width
    if (!j.contains("num_key_value_heads")) shared["num_key_value_heads"] = 4;
    window = qwen3_moe_window(f, j);
    for (const char* key : {"use_sliding_window", "sliding_window", "max_window_layers"}) shared.erase(key);
  }
  ModelConfig c = parse_model_config(shared, where);
  c.model_type = type;
  c.sliding_window = mixtral ? c.sliding_window : window;

  MoeConfig& m = c.moe;
  // qwen3_moe: the hub's configs say num_experts; transformers 5.x's Qwen3MoeConfig keeps it
  // as num_local_experts (num_experts is an alias) and save_pretrained writes that name.
  std::string experts_key = mixtral ? "num_local_experts" : "num_experts";
  if (!mixtral && !f.has("num_experts") && f.has("num_local_experts")) experts_key = "num_local_experts";
  m.num_experts = f.opt_int(experts_key, mixtral ? 8 : 128);
  if (!mixtral && f.has("num_experts") && f.has("num_local_experts") &&
      f.opt_int("num_local_experts", 0) != m.num_experts)
    throw Error("num_experts is " + std::to_string(m.num_experts) + " and num_local_experts " +
                    std::to_string(f.opt_int("num_local_experts", 0)) + ": two expert counts",
                f.at("num_local_experts"), "keep one of the two (transformers reads them as the same field)");
  if (m.num_experts <= 0)
    throw Error("is " + std::to_string(m.num_experts) + ": a model without experts", f.at(experts_key),
                mixtral ? "Mixtral models have experts; fix config.json"
                        : "a qwen3_moe config with no experts is a dense Qwen3 model; use model_type \"qwen3\"");
  require_at_most(m.num_experts, kMaxCount, f, experts_key);
  read_moe_routing_fields(m, f, mixtral ? 2 : 8, experts_key);
  if (mixtral) {
    m.expert_intermediate = c.intermediate_size;  // Mixtral's experts are intermediate_size wide
    m.norm_topk_prob = true;  // MixtralTopKRouter always renormalizes (layers/moe_mlp.h kMixtralNormTopkProb)
    const double jitter = f.opt_num("router_jitter_noise", 0.0);
    if (jitter != 0)
      throw Error("is " + std::to_string(jitter) + "; router jitter noise is not implemented", f.at("router_jitter_noise"),
                  "set router_jitter_noise to 0 (the released Mixtral models do)");
  } else {
    m.expert_intermediate = f.opt_int("moe_intermediate_size", 768);
    require_positive(m.expert_intermediate, f, "moe_intermediate_size");
    require_at_most(m.expert_intermediate, kMaxIntermediate, f, "moe_intermediate_size");
    m.norm_topk_prob = f.opt_bool("norm_topk_prob", false);
    m.decoder_sparse_step = f.opt_int("decoder_sparse_step", 1);
    require_positive(m.decoder_sparse_step, f, "decoder_sparse_step");
    m.mlp_only_layers = mlp_only_layers(f, c.num_layers);
  }
  {
    // As config.cpp bounds the dense families: every size product stays inside int64.
    const double C = double(c.hidden_size), E = double(m.num_experts), I = double(m.expert_intermediate);
    const double params = double(c.num_layers) * (E * (3 * C * I + C) + 3 * C * double(c.intermediate_size)) +
                          2 * double(c.vocab_size) * C;
    if (params > kMaxParams)
      throw Error("the model would have " + std::to_string(params) + " parameters, more than lazytrain supports (1e15)",
                  where, kFixConfig);
  }
  return c;
}

json moe_config_to_json(const ModelConfig& c, json j) {
  const bool mixtral = c.model_type == "mixtral";
  const MoeConfig& m = c.moe;
  const std::string where = "model config (" + c.model_type + ")";
  auto unrepresentable = [&](const std::string& what) {
    throw Error(what + " cannot be expressed in a " + c.model_type + " config.json", where,
                "use a model_type whose architecture has this layout");
  };
  if (!c.has_moe()) unrepresentable("a model without experts");
  j["architectures"] = {mixtral ? "MixtralForCausalLM" : "Qwen3MoeForCausalLM"};
  j["model_type"] = c.model_type;
  write_moe_routing_fields(m, j);
  if (mixtral) {
    if (m.expert_intermediate != c.intermediate_size) unrepresentable("experts narrower or wider than intermediate_size");
    if (!m.norm_topk_prob) unrepresentable("top-k probabilities without renormalization");
    if (m.decoder_sparse_step != 1 || !m.mlp_only_layers.empty()) unrepresentable("dense MLP layers");
    j["num_local_experts"] = m.num_experts;
    j["router_jitter_noise"] = 0.0;
  } else {
    j["num_experts"] = m.num_experts;
    j["moe_intermediate_size"] = m.expert_intermediate;
    j["norm_topk_prob"] = m.norm_topk_prob;
    j["decoder_sparse_step"] = m.decoder_sparse_step;
    j["mlp_only_layers"] = m.mlp_only_layers;
    j["use_sliding_window"] = c.sliding_window > 0;
    j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
  }
  return j;
}

}  // namespace lt
