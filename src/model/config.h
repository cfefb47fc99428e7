// Model shape and options, read from a Hugging Face config.json. Families: llama,
// mistral, qwen2, qwen3 (decoder-only, RMSNorm, RoPE, GQA attention, SwiGLU MLP) and
// gemma3_text (the same block with Gemma's (1 + w) norms, a norm after attention and
// after the MLP, GeGLU, scaled embeddings, and sliding-window and global layers);
// qwen3_5_text (hybrid, model/config_qwen3_5.h); qwen3_moe and mixtral (sparse MoE MLP,
// model/config_moe.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

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

// What a decoder layer's token mixer is. Uniform families (llama, mistral, qwen2, qwen3)
// have only softmax attention; Qwen3.5/3.6 (qwen3_5_text) interleaves Gated DeltaNet
// linear-attention layers with gated full-attention ones, per its config's layer_types.
enum class LayerKind { Attention, LinearAttention };

// Qwen3.5's Gated DeltaNet shape (transformers' linear_* config fields).
struct LinearAttentionShape {
  int64_t key_heads = 0, value_heads = 0;  // value heads share key heads in groups
  int64_t key_head_dim = 0, value_head_dim = 0;
  int64_t conv_kernel = 0;  // depthwise causal conv over q, k and v
  int64_t key_dim() const { return key_heads * key_head_dim; }
  int64_t value_dim() const { return value_heads * value_head_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};

// Which attention a decoder layer runs (transformers' layer_types).
enum class LayerAttention { Full, Sliding };
// The MLP's gate activation: silu (SwiGLU) or the tanh approximation of GELU (GeGLU,
// transformers' gelu_pytorch_tanh).
enum class MlpActivation { Silu, GeluTanh };

// The sparse mixture-of-experts MLP of qwen3_moe and mixtral (layers/moe_mlp.h): which
// layers have it and its shape (model/config_moe.cpp).
struct MoeConfig {
  int64_t num_experts = 0;            // 0: no sparse layers (every other family)
  int64_t experts_per_token = 0;      // num_experts_per_tok
  int64_t expert_intermediate = 0;    // moe_intermediate_size (qwen3_moe); intermediate_size (mixtral)
  bool norm_topk_prob = false;        // renormalize the chosen probabilities (always, for mixtral)
  // qwen3_moe: layer j is sparse when (j + 1) % decoder_sparse_step == 0 and j is not in
  // mlp_only_layers; the others run the dense MLP of intermediate_size. Mixtral: every layer.
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  // qwen3_5_moe: every sparse layer also runs a shared expert, a dense SwiGLU MLP of this
  // width (the layer's wg/wu/wd, intermediate_size wide) scaled per token by
  // sigmoid(h . shared_expert_gate); 0: none (qwen3_moe, mixtral).
  int64_t shared_expert_intermediate = 0;
  double router_aux_loss_coef = 0.001;  // the load-balancing loss's weight, when it is added
  bool output_router_logits = false;    // transformers adds that loss to the loss only then
};

struct ModelConfig {
  std::string model_type;  // "llama", "mistral", "qwen2", "qwen3", "gemma3_text"
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
  // Sliding-window attention: query i sees keys i - sliding_window + 1 .. i on the
  // layers that slide (layer_is_sliding); 0 means no window anywhere.
  int64_t sliding_window = 0;
  // Per layer; empty means every layer slides when there is a window (Mistral).
  std::vector<LayerAttention> layer_types;
  // Gemma 3 (defaults: the other families).
  MlpActivation mlp_activation = MlpActivation::Silu;
  // RMSNorm multiplies by (norm_weight_offset + w): Gemma stores its norm weights as
  // deviations from 1 (offset 1, computed in fp32 as transformers does).
  double norm_weight_offset = 0.0;
  // A norm on the attention output and on the MLP output before each residual add
  // (Gemma 3's post_attention_layernorm and post_feedforward_layernorm).
  bool sandwich_norms = false;
  // Embeddings multiplied by sqrt(hidden_size) (Gemma).
  bool scale_embeddings = false;
  // The embedding row whose lookups get no gradient (nn.Embedding's padding_idx, from
  // pad_token_id; read for gemma3_text, whose class default is 0); -1: none.
  int64_t padding_idx = -1;
  // Attention scores scaled by query_pre_attn_scalar^-1/2; 0 means head_dim (the others).
  double query_pre_attn_scalar = 0.0;
  // The sliding layers' own RoPE, when it differs from rope_theta/rope_scaling (Gemma 3's
  // rope_parameters["sliding_attention"], rope_local_base_freq in 4.x configs).
  bool local_rope = false;
  double local_rope_theta = 10000.0;
  RopeScaling local_rope_scaling;

  // Hybrid models (qwen3_5_text): one kind per layer, and the linear-attention shape.
  // Empty layer_kinds: every layer is softmax attention.
  std::vector<LayerKind> layer_kinds;
  LinearAttentionShape linear;
  bool attn_output_gate = false;        // q_proj also yields a sigmoid gate on attention's output
  double partial_rotary_factor = 1.0;   // RoPE rotates this share of each head's channels

  MoeConfig moe;
  bool has_moe() const { return moe.num_experts > 0; }
  // Layer `layer` runs the sparse MoE MLP.
  bool layer_is_sparse(int64_t layer) const {
    if (!has_moe() || (layer + 1) % moe.decoder_sparse_step != 0) return false;
    return std::find(moe.mlp_only_layers.begin(), moe.mlp_only_layers.end(), layer) == moe.mlp_only_layers.end();
  }

  LayerKind layer_kind(int64_t layer) const {
    return layer_kinds.empty() ? LayerKind::Attention : layer_kinds[static_cast<size_t>(layer)];
  }
  bool hybrid() const { return !layer_kinds.empty(); }
  bool layer_is_sliding(int64_t layer) const {
    return sliding_window > 0 && (layer_types.empty() || layer_types[layer] == LayerAttention::Sliding);
  }
  // The window layer `layer` attends over, 0 for full causal attention.
  int64_t layer_window(int64_t layer) const { return layer_is_sliding(layer) ? sliding_window : 0; }
  float attention_scale() const;
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

}  // namespace lt
