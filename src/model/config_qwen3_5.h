// Qwen3.5/3.6 hybrid text configs (model/config_qwen3_5.cpp): parse_model_config and
// model_config_to_json hand these model types here.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace lt {

// "qwen3_5_text", or "qwen3_5" (a vision-language checkpoint whose text_config is read).
bool is_qwen3_5_type(const std::string& model_type);
ModelConfig parse_qwen3_5_config(const nlohmann::json& j, const std::string& where);
// The config.json of a qwen3_5_text model, from the fields its qwen3 twin would write.
nlohmann::json qwen3_5_config_to_json(const ModelConfig& c, nlohmann::json qwen3_fields);

}  // namespace lt
