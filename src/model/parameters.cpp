#include "model/parameters.h"

#include <algorithm>

#include "core/error.h"

namespace lt {

std::vector<BlockField> block_fields(const ModelConfig& c, int64_t layer) {
  // The order here is block_weight_specs()'s order; ModelParameters checks the total.
  const int64_t C = c.hidden_size, QD = c.q_dim(), KD = c.kv_dim(), I = c.intermediate_size;
  using T = BlockTensors;
  std::vector<BlockField> f;
  auto add = [&](float* T::*member, int64_t n, bool matrix = false) { f.push_back({member, n, matrix}); };
  add(&T::attn_norm, C);
  if (c.layer_kind(layer) == LayerKind::LinearAttention) {
    const LinearAttentionShape& s = c.linear;
    add(&T::la_in_proj_qkv, s.conv_dim() * C, true);
    add(&T::la_in_proj_z, s.value_dim() * C, true);
    add(&T::la_in_proj_b, s.value_heads * C, true);
    add(&T::la_in_proj_a, s.value_heads * C, true);
    add(&T::la_conv1d, s.conv_dim() * s.conv_kernel);
    add(&T::la_dt_bias, s.value_heads);
    add(&T::la_A_log, s.value_heads);
    add(&T::la_norm, s.value_head_dim);
    add(&T::la_out_proj, C * s.value_dim(), true);
  } else {
    add(&T::wq, (c.attn_output_gate ? 2 : 1) * QD * C, true);
    if (c.qkv_bias) add(&T::bq, (c.attn_output_gate ? 2 : 1) * QD);
    add(&T::wk, KD * C, true);
    if (c.qkv_bias) add(&T::bk, KD);
    add(&T::wv, KD * C, true);
    if (c.qkv_bias) add(&T::bv, KD);
    if (c.qk_norm) {
      add(&T::q_norm, c.head_dim);
      add(&T::k_norm, c.head_dim);
    }
    add(&T::wo, C * QD, true);
    if (c.o_bias) add(&T::bo, C);
  }
  if (c.sandwich_norms) add(&T::post_attn_norm, C);
  add(&T::mlp_norm, C);
  if (c.layer_is_sparse(layer)) {
    const int64_t E = c.moe.num_experts, EI = c.moe.expert_intermediate;
    add(&T::moe_router, E * C, true);
    add(&T::moe_gate_up, E * 2 * EI * C, true);
    add(&T::moe_down, E * C * EI, true);
    if (c.moe.shared_expert_intermediate > 0) {  // qwen3_5_moe: the shared expert, as a dense MLP
      add(&T::wg, I * C, true);
      add(&T::wu, I * C, true);
      add(&T::wd, C * I, true);
      add(&T::moe_shared_gate, C);  // a dot product per token, read in fp32 (layers/decoder_block.h)
    }
    return f;  // the MoE families have no MLP biases and no sandwich norms
  }
  add(&T::wg, I * C, true);
  if (c.mlp_bias) add(&T::bg, I);
  add(&T::wu, I * C, true);
  if (c.mlp_bias) add(&T::bu, I);
  add(&T::wd, C * I, true);
  if (c.mlp_bias) add(&T::bd, C);
  if (c.sandwich_norms) add(&T::post_mlp_norm, C);
  return f;
}

const bf16* BlockTensorsBf16::* bf16_member(float* BlockTensors::*matrix) {
  using T = BlockTensors;
  using B = BlockTensorsBf16;
  if (matrix == &T::wq) return &B::wq;
  if (matrix == &T::wk) return &B::wk;
  if (matrix == &T::wv) return &B::wv;
  if (matrix == &T::wo) return &B::wo;
  if (matrix == &T::wg) return &B::wg;
  if (matrix == &T::wu) return &B::wu;
  if (matrix == &T::wd) return &B::wd;
  if (matrix == &T::la_in_proj_qkv) return &B::la_in_proj_qkv;
  if (matrix == &T::la_in_proj_z) return &B::la_in_proj_z;
  if (matrix == &T::la_in_proj_b) return &B::la_in_proj_b;
  if (matrix == &T::la_in_proj_a) return &B::la_in_proj_a;
  if (matrix == &T::moe_router) return &B::moe_router;
  if (matrix == &T::moe_gate_up) return &B::moe_gate_up;
  if (matrix == &T::moe_down) return &B::moe_down;
  LT_ASSERT(matrix == &T::la_out_proj, "not a projection matrix");
  return &B::la_out_proj;
}

BlockTensors bind_block_tensors(const ModelConfig& c, int64_t layer, float* base) {
  BlockTensors t;
  for (const BlockField& f : block_fields(c, layer)) {
    t.*f.member = base;
    base += f.numel;
  }
  return t;
}

int64_t block_numel(const ModelConfig& c, int64_t layer) {
  int64_t n = 0;
  for (const auto& s : block_weight_specs(c, layer)) n += s.numel();
  return n;
}

int64_t max_block_numel(const ModelConfig& c) {
  int64_t n = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) n = std::max(n, block_numel(c, l));
  return n;
}

ModelParameters::ModelParameters(const ModelConfig& c) : config_(c), specs_(all_weight_specs(c)) {
  int64_t off = 0;
  for (size_t i = 0; i < specs_.size(); ++i) {
    offsets_.push_back(off);
    index_[specs_[i].hf_name] = i;
    off += specs_[i].numel();
  }
  int64_t block = embedding_weight_spec(c).numel();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    block_offset_.push_back(block);
    // bind_block_tensors() must cover exactly the specs of block_weight_specs().
    int64_t fields = 0;
    for (const BlockField& f : block_fields(c, l)) fields += f.numel;
    LT_ASSERT(fields == block_numel(c, l), "block views disagree with block_weight_specs");
    block += fields;
  }
  data_.resize(static_cast<size_t>(off));
  if (c.num_layers > 0) LT_ASSERT(specs_[1].hf_name == "model.layers.0.input_layernorm.weight");
}

float* ModelParameters::tensor(const std::string& hf_name) {
  auto it = index_.find(hf_name);
  if (it == index_.end())
    throw Error("unknown parameter '" + hf_name + "'", "model parameters",
                "check the name against the model's config");
  return data_.data() + offsets_[it->second];
}

const float* ModelParameters::tensor(const std::string& hf_name) const {
  return const_cast<ModelParameters*>(this)->tensor(hf_name);
}

float* ModelParameters::final_norm() { return tensor("model.norm.weight"); }

float* ModelParameters::lm_head() {
  return config_.tie_word_embeddings ? embedding() : tensor("lm_head.weight");
}

}  // namespace lt
