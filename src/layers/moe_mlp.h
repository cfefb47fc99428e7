// The sparse mixture-of-experts MLP of qwen3_moe and mixtral (transformers'
// Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock, without router jitter), forward and
// backward over views, and the Switch-Transformer load-balancing loss of its router.
// h is the post-attention norm's output [T, C], T = B*S:
//
//   logits = h·router^T                 [T, E]
//   p      = softmax(logits)            [T, E], fp32              -> saved probs
//   e_j    = the top_k experts of p, largest first (ties: the lower expert index; torch.topk
//            leaves ties unspecified, random data never has them)  -> saved experts [T, k]
//   w_j    = p[e_j], or with norm_topk_prob p[e_j] / sum_j p[e_j]  -> saved weights [T, k]
//            (mixtral always renormalizes: norm_topk_prob = true; that equals the softmax
//            over the k chosen logits)
//   out[t] = sum_j w_j * down_e (silu(gate_e h_t) * up_e h_t),  e = e_j, j = 0..k-1 in order
//
// Tokens are grouped per expert (a stable counting sort: within an expert, rows follow the
// token order), each expert runs three GEMMs over its rows only (the linear layer of
// kernels/cpu/linear.h with the step's precision), and the expert outputs are summed back
// per token in the fixed order j = 0..k-1. Every GEMM runs on one thread (oneDNN's split
// of a GEMM over threads changes its bits below AVX-512; moe_mlp.cpp), the experts and
// fixed token blocks of the router in parallel, so the result does not depend on the
// thread count.
//
// Weights, in the layout of transformers 5.x's in-memory Qwen3MoeExperts / MixtralExperts:
//   router  [E, C]        checkpoint  qwen3_moe  model.layers.L.mlp.gate.weight
//                                     mixtral    model.layers.L.block_sparse_moe.gate.weight
//   gate_up [E, 2I, C]    rows [0, I) of expert e: the gate projection,
//                                     qwen3_moe  mlp.experts.e.gate_proj.weight  [I, C]
//                                     mixtral    block_sparse_moe.experts.e.w1.weight
//                         rows [I, 2I): the up projection,
//                                     qwen3_moe  mlp.experts.e.up_proj.weight    [I, C]
//                                     mixtral    block_sparse_moe.experts.e.w3.weight
//   down    [E, C, I]                 qwen3_moe  mlp.experts.e.down_proj.weight  [C, I]
//                                     mixtral    block_sparse_moe.experts.e.w2.weight
// Checkpoints (hub files and what transformers 5.x's save_pretrained writes) hold one
// tensor per expert as above; transformers fuses them on load into mlp.experts.gate_up_proj
// [E, 2I, C] (torch.cat([gate, up], dim=1) of the stacked experts) and mlp.experts.down_proj
// [E, C, I], and splits them again on save. Each checkpoint tensor is one contiguous block
// of these arrays, so a loader places them without transposing.
//
// Saved tensors (MoeSaved; moe_saved_bytes / moe_bind_saved carve one buffer):
//   probs [T, E], weights [T, k] (fp32); experts [T, k], offsets [E + 1] (expert e's rows
//   are [offsets[e], offsets[e+1]) of the grouped order), row_of [T, k] (the grouped row of
//   token t's j-th choice) (int32); gate, up, act [T*k, I] (fp32, grouped order: the gate
//   and up projections and silu(gate) * up, the down projection's input).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/matmul.h"

namespace lt {

struct MoeShape {
  int64_t tokens = 0;        // T
  int64_t hidden = 0;        // C, hidden_size
  int64_t experts = 0;       // E, num_experts (qwen3_moe) / num_local_experts (mixtral)
  int64_t top_k = 0;         // k, num_experts_per_tok
  int64_t intermediate = 0;  // I, moe_intermediate_size (qwen3_moe) / intermediate_size (mixtral)
  // Renormalize the k chosen probabilities to sum to 1: qwen3_moe's norm_topk_prob
  // (default false); always true for mixtral (kMixtralNormTopkProb).
  bool norm_topk_prob = false;
};
// Mixtral's router has no switch: it always renormalizes the top-k probabilities.
constexpr bool kMixtralNormTopkProb = true;

// Throws lt::Error for a shape the block cannot run (top_k outside [1, E], a non-positive
// size, more than 2^31 routed rows).
void moe_check_shape(const MoeShape& s);

struct MoeWeights {
  const float* router = nullptr;   // [E, C]
  const float* gate_up = nullptr;  // [E, 2I, C]
  const float* down = nullptr;     // [E, C, I]
};
// Their bf16 copies, read under Precision::BF16; a null one is rounded on the fly.
struct MoeWeightsBf16 {
  const bf16* router = nullptr;
  const bf16* gate_up = nullptr;
  const bf16* down = nullptr;
};
// Gradients in the same layouts; backward accumulates (+=) into them.
struct MoeGrads {
  float* router = nullptr;
  float* gate_up = nullptr;
  float* down = nullptr;
};

struct MoeSaved {
  float* probs = nullptr;      // [T, E]
  float* weights = nullptr;    // [T, k]
  int32_t* experts = nullptr;  // [T, k]
  int32_t* offsets = nullptr;  // [E + 1]
  int32_t* row_of = nullptr;   // [T, k]
  float* gate = nullptr;       // [T*k, I]
  float* up = nullptr;         // [T*k, I]
  float* act = nullptr;        // [T*k, I]
};
size_t moe_saved_bytes(const MoeShape& s);
// Points the saved tensors into buf (moe_saved_bytes(s) bytes, 64-byte aligned), in the
// order listed above, each starting on a 64-byte boundary.
MoeSaved moe_bind_saved(void* buf, const MoeShape& s);

// Scratch for either pass, in floats.
size_t moe_workspace_floats(const MoeShape& s);

// out [T, C] is overwritten. Fills saved.
void moe_forward(float* out, MoeSaved& saved, const float* h, const MoeWeights& w,
                 const MoeWeightsBf16& wb, const MoeShape& s, Precision precision, float* workspace);

// dh [T, C] is overwritten with the gradient of the block's input; g accumulates (+=).
// d_logits_extra [T, E] (may be null) is a gradient into the router logits from outside
// the block, the load-balancing loss's (moe_aux_backward); it is added to the one from
// the routing weights. saved: what forward saved for the same h and weights.
void moe_backward(float* dh, MoeGrads& g, const float* d_out, const float* h, const MoeWeights& w,
                  const MoeWeightsBf16& wb, const MoeSaved& saved, const float* d_logits_extra,
                  const MoeShape& s, Precision precision, float* workspace);

// The auxiliary load-balancing loss, transformers' load_balancing_loss_func over a model's
// router logits (one [T, E] tensor per MoE layer, all with the same T):
//   f_e = (number of top-k choices of expert e, summed over layers and tokens) / R
//   P_e = (sum over layers and tokens of p[t, e]) / R,       R = layers * T
//   aux = E * sum_e f_e * P_e
// With an attention mask m [T] (1 real, 0 padding), each token counts m[t] times and
// R = layers * sum_t m[t]. The counts and sums run over all layers before the product, so
// the loss is not a sum of per-layer losses: forward accumulates each layer into one
// MoeAuxStats, and the gradient into a layer's logits needs the totals of all layers
// (f_e is piecewise constant: the top-k choice has no gradient):
//   d aux / d p[t, e] = E * m[t] * f_e / R,   then through the softmax.
// The model adds router_aux_loss_coef * aux to the loss; the caller applies the
// coefficient (transformers 5.x config defaults: 0.001 for both qwen3_moe and mixtral;
// Mixtral-8x7B's config.json sets 0.02). Sums are in double, in token order.
struct MoeAuxStats {
  explicit MoeAuxStats(int64_t experts)
      : choices(size_t(experts), 0.0), prob_sum(size_t(experts), 0.0) {}
  std::vector<double> choices;   // per expert: sum of m[t] over top-k choices
  std::vector<double> prob_sum;  // per expert: sum of m[t] * p[t, e]
  double rows = 0;               // R
};
// Adds one layer's forward (saved.probs, saved.experts); mask may be null (all ones).
void moe_aux_accumulate(MoeAuxStats& stats, const MoeSaved& saved, const float* mask,
                        const MoeShape& s);
// aux for the accumulated layers (0 when no rows were counted, as transformers' 0/0 is not
// wanted).
double moe_aux_loss(const MoeAuxStats& stats);
// d_logits [T, E] += scale * d aux / d logits for one layer, with totals the stats of all
// layers. scale: router_aux_loss_coef times the loss gradient (1 for a plain sum).
void moe_aux_backward(float* d_logits, const MoeSaved& saved, const float* mask,
                      const MoeAuxStats& totals, float scale, const MoeShape& s);

}  // namespace lt
