// Model shape and options, read from a Hugging Face config.json. Families: llama,
// mistral, qwen2, qwen3 (decoder-only, RMSNorm, RoPE, GQA attention, SwiGLU MLP).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace lt {

enum class RopeScalingType { None, Linear, Llama3 };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::None;
  double factor = 1.0;
  // llama3 only:
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string model_type;  // "llama", "mistral", "qwen2", "qwen3"
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // config's head_dim, else hidden_size / num_heads
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // q/k/v projections have a bias (qwen2; llama's attention_bias)
  bool o_bias = false;    // o_proj has a bias (llama's attention_bias)
  bool mlp_bias = false;  // gate/up/down have a bias (llama's mlp_bias)
  bool qk_norm = false;   // per-head RMSNorm on q and k before RoPE (qwen3)
  std::string torch_dtype = "float32";
  // Mistral's sliding-window attention: 0 means full causal attention. lazytrain computes
  // full attention only, which equals the windowed one while seq <= sliding_window; call
  // check_sequence_length() before training on a config that has a window.
  int64_t sliding_window = 0;

  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
  // Trainable parameters (embedding and head counted once when tied).
  int64_t num_params() const;
};

// Reads config.json from a file path, or from a directory that holds one. Throws
// lt::Error naming the file and field for a missing/ill-typed field, an unknown
// model_type, or a feature lazytrain does not implement.
ModelConfig load_model_config(const std::string& path);
// `where` names the source in error messages.
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& where);
// Writes a Hugging Face config.json that transformers loads back to the same model.
nlohmann::json model_config_to_json(const ModelConfig& c);

// The model types parse_model_config accepts, e.g. "llama, mistral, qwen2, qwen3".
std::string supported_model_types();
// Throws lt::Error when lazytrain's attention would differ from the model's at this
// sequence length (a sliding window shorter than seq).
void check_sequence_length(const ModelConfig& c, int64_t seq);

}  // namespace lt
