// What each layer holds and saves: weight specs (names, shapes, HF names) and the
// activation spec table the planner consumes. Pure shape arithmetic; no data.
//
// Residual-stream layout: a boundary activation is [tokens, hidden], tokens = batch*seq.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor_view.h"
#include "model/config.h"

namespace lt {

struct WeightSpec {
  std::string hf_name;  // e.g. "model.layers.3.self_attn.q_proj.weight"
  Shape shape;
  int64_t numel() const { return shape_numel(shape); }
};

// Weights of decoder layer `layer`, in a fixed order (the executor relies on it).
std::vector<WeightSpec> block_weight_specs(const ModelConfig& c, int64_t layer);
// model.embed_tokens.weight
WeightSpec embedding_weight_spec(const ModelConfig& c);
// model.norm.weight, then lm_head.weight unless the embedding is tied.
std::vector<WeightSpec> head_weight_specs(const ModelConfig& c);
// Every trainable weight in checkpoint order: embedding, layers, head.
std::vector<WeightSpec> all_weight_specs(const ModelConfig& c);
// The parameters one token computes with: every parameter, less the experts a sparse MoE
// layer does not route it to ((num_experts - experts_per_token) experts' three matrices per
// sparse layer). All of them for a dense model. The FLOP conventions (6 * N * tokens) use it.
int64_t active_params(const ModelConfig& c);

// What a block keeps for its backward pass.
enum class RecomputeOption {
  KeepInternals,       // every internal tensor backward needs is saved in forward
  RecomputeFromInput,  // only the block input is kept; backward reruns the forward first
};

struct ActivationSpec {
  std::string name;  // e.g. "q", "attn_lse", "mlp_gate"
  Shape shape;
  int64_t bytes = 0;
};

// Tensors a block saves beyond its input boundary, for `tokens` tokens of which
// `batch` sequences. `act_bytes` is the activation element size (4 fp32, 2 bf16);
// per-token statistics (norm rstd, attention logsumexp) are always fp32.
std::vector<ActivationSpec> block_saved_activations(const ModelConfig& c, RecomputeOption opt,
                                                    int64_t batch, int64_t seq, int act_bytes);
int64_t block_saved_bytes(const ModelConfig& c, RecomputeOption opt, int64_t batch, int64_t seq,
                          int act_bytes);
// One boundary activation (the residual stream between two blocks).
int64_t boundary_bytes(const ModelConfig& c, int64_t batch, int64_t seq, int act_bytes);

// Forward FLOPs of one block and of the head (matmuls and attention; 2 per MAC,
// causal attention counted at half of the full square). layer >= 0 counts that layer's
// attention as it runs (a sliding window computes fewer pairs); -1 counts full causal
// attention, the same figure for every layer. Elementwise work (norms, the gate's
// activation, RoPE) is not counted for any family.
double block_forward_flops(const ModelConfig& c, int64_t batch, int64_t seq, int64_t layer = -1);
double head_forward_flops(const ModelConfig& c, int64_t batch, int64_t seq);
// The matmul parameters of layer `layer`'s MLP that one token runs: the dense gate, up and
// down; on a sparse MoE layer the router, its top-k experts' three matrices and
// qwen3_5_moe's shared expert with its gate.
double mlp_matmul_params(const ModelConfig& c, int64_t layer);

}  // namespace lt
