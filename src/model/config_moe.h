// Sparse mixture-of-experts configs (model/config_moe.cpp): transformers' Qwen3MoeConfig
// (model_type "qwen3_moe") and MixtralConfig ("mixtral"). parse_model_config and
// model_config_to_json hand these model types here. The MoE block itself is
// layers/moe_mlp.h; the layer specs lay out its weights and saved tensors per sparse layer.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/config_fields.h"

namespace lt {

bool is_moe_type(const std::string& model_type);
ModelConfig parse_moe_config(const nlohmann::json& j, const std::string& where);
// The config.json of a qwen3_moe / mixtral model, from the fields its dense twin (qwen3 /
// mistral) would write.
nlohmann::json moe_config_to_json(const ModelConfig& c, nlohmann::json twin_fields);
// The dense family whose fields a MoE family shares: "qwen3" or "mistral".
std::string moe_dense_twin(const std::string& model_type);

// The routing fields every MoE family (qwen3_moe, mixtral, qwen3_5_moe) has, read into m
// after m.num_experts: num_experts_per_tok in [1, num_experts] (default top_k_default;
// experts_key names the count in the error), router_aux_loss_coef (non-negative) and
// output_router_logits; and written back.
void read_moe_routing_fields(MoeConfig& m, const config_fields::Fields& f, int64_t top_k_default,
                             const std::string& experts_key);
void write_moe_routing_fields(const MoeConfig& m, nlohmann::json& j);

}  // namespace lt
