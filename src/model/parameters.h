// The model's parameters (or their gradients) as one contiguous fp32 block, laid out in
// all_weight_specs() order, llm.c style: one allocation, one offset table, and typed
// views per layer. A tied lm_head shares the embedding's storage.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/aligned_buffer.h"
#include "model/config.h"
#include "model/layer_specs.h"

namespace lt {

// Views of one decoder layer's tensors (weights, or their gradients). Optional tensors
// (biases, q/k norms) are null when the config has none; a Qwen3.5 layer has either the
// attention's (wq..bo) or the Gated DeltaNet mixer's (la_*) tensors, per its LayerKind.
struct BlockTensors {
  float* attn_norm = nullptr;  // [C]
  float* wq = nullptr;         // [Hq*D, C]; [Hq*2D, C] with the output gate (each head's query, then its gate)
  float* bq = nullptr;         // [Hq*D]
  float* wk = nullptr;         // [Hkv*D, C]
  float* bk = nullptr;
  float* wv = nullptr;  // [Hkv*D, C]
  float* bv = nullptr;
  float* q_norm = nullptr;  // [D]
  float* k_norm = nullptr;  // [D]
  float* wo = nullptr;      // [C, Hq*D]
  float* bo = nullptr;      // [C]
  float* post_attn_norm = nullptr;  // [C] Gemma 3 (sandwich norms): on o_proj's output
  // Qwen3.5 Gated DeltaNet (transformers' linear_attn.*), Hk/Hv key/value heads of dk/dv:
  float* la_in_proj_qkv = nullptr;  // [2*Hk*dk + Hv*dv, C]: q, k, v before the convolution
  float* la_in_proj_z = nullptr;    // [Hv*dv, C]: the gated norm's gate
  float* la_in_proj_b = nullptr;    // [Hv, C]: beta = sigmoid(b)
  float* la_in_proj_a = nullptr;    // [Hv, C]: decay g = -exp(A_log) * softplus(a + dt_bias)
  float* la_conv1d = nullptr;       // [2*Hk*dk + Hv*dv, K] (HF [conv_dim, 1, K])
  float* la_dt_bias = nullptr;      // [Hv]
  float* la_A_log = nullptr;        // [Hv]
  float* la_norm = nullptr;         // [dv]: Qwen3_5RMSNormGated's weight (used as is, not 1 + w)
  float* la_out_proj = nullptr;     // [C, Hv*dv]
  float* mlp_norm = nullptr;  // [C]
  float* wg = nullptr;        // [I, C]
  float* bg = nullptr;
  float* wu = nullptr;  // [I, C]
  float* bu = nullptr;
  float* wd = nullptr;  // [C, I]
  float* bd = nullptr;
  float* post_mlp_norm = nullptr;  // [C] Gemma 3: on down_proj's output
  // A sparse MoE layer's MLP (qwen3_moe, mixtral; layers/moe_mlp.h), in place of wg/wu/wd:
  float* moe_router = nullptr;   // [E, C]
  float* moe_gate_up = nullptr;  // [E, 2I, C]: expert e's gate rows, then its up rows
  float* moe_down = nullptr;     // [E, C, I]
  // qwen3_5_moe: the shared expert is wg/wu/wd (shared_expert_intermediate wide), scaled per
  // token by sigmoid(h . moe_shared_gate).
  float* moe_shared_gate = nullptr;  // [1, C]
};

// The same views for a bf16 copy (only matmul weights are read in bf16).
struct BlockTensorsBf16 {
  const bf16 *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
  const bf16 *wg = nullptr, *wu = nullptr, *wd = nullptr;
  const bf16 *la_in_proj_qkv = nullptr, *la_in_proj_z = nullptr, *la_in_proj_b = nullptr,
             *la_in_proj_a = nullptr, *la_out_proj = nullptr;
  const bf16 *moe_router = nullptr, *moe_gate_up = nullptr, *moe_down = nullptr;
};

// One view of a decoder layer in block_weight_specs() order: which member, how many
// elements, and whether it is a projection matrix (the tensors matmuls read, in bf16
// under Precision::BF16; the rest are norms, biases, and the DeltaNet's convolution and
// gate parameters, read in fp32).
struct BlockField {
  float* BlockTensors::*member;
  int64_t numel;
  bool matrix;
};
std::vector<BlockField> block_fields(const ModelConfig& c, int64_t layer);
// The BlockTensorsBf16 member of a projection matrix's BlockTensors member.
const bf16* BlockTensorsBf16::*bf16_member(float* BlockTensors::*matrix);

// Binds the views of decoder layer `layer` onto a buffer laid out in block_weight_specs()
// order starting at `base`. The executor uses this to bind a layer template to a slot.
BlockTensors bind_block_tensors(const ModelConfig& c, int64_t layer, float* base);
int64_t block_numel(const ModelConfig& c, int64_t layer);
// The largest layer (a weight slot holds any layer; hybrid layers differ in size).
int64_t max_block_numel(const ModelConfig& c);

class ModelParameters {
 public:
  explicit ModelParameters(const ModelConfig& c);  // zero-filled

  const ModelConfig& config() const { return config_; }
  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  int64_t numel() const { return static_cast<int64_t>(data_.size()); }
  void zero() { data_.zero(); }

  const std::vector<WeightSpec>& specs() const { return specs_; }
  // A tensor by its Hugging Face name; throws lt::Error for an unknown name.
  float* tensor(const std::string& hf_name);
  const float* tensor(const std::string& hf_name) const;
  bool has_tensor(const std::string& hf_name) const { return index_.count(hf_name) > 0; }

  float* embedding() { return data_.data(); }
  float* block_base(int64_t layer) { return data_.data() + block_offset_[layer]; }
  BlockTensors block(int64_t layer) { return bind_block_tensors(config_, layer, block_base(layer)); }
  float* final_norm();
  float* lm_head();  // the embedding when tied

 private:
  ModelConfig config_;
  std::vector<WeightSpec> specs_;
  std::vector<int64_t> offsets_;
  std::unordered_map<std::string, size_t> index_;  // hf name -> position in specs_
  std::vector<int64_t> block_offset_;
  AlignedBuffer<float> data_;
};

}  // namespace lt
