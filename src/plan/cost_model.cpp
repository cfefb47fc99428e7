#include "plan/cost_model.h"

#include <algorithm>

#include "core/error.h"
#include "model/layer_specs.h"

namespace lt {
namespace {

// Optimizer state per parameter: 8-bit m and v, and an fp32 scale for each per block of
// 256 (the hybrid AdamW's default, optim/adamw.h).
constexpr double kStateBytesPerParam = 2 + 2 * 4.0 / 256;
// Host bytes per parameter that live across steps.
// Ours: fp32 master 4 + optimizer state + bf16 compute copy 2 + bf16 gradient 2.
constexpr double kHostBytesPerParam = 4 + kStateBytesPerParam + 2 + 2;
// MegaTrain's public code: bf16 params 2 + fp32 grads 4 + fp32 m and v 8 (no fp32 master).
constexpr double kHostBytesPerParamFp32Adam = 14;
// A separate clip pass reads every fp32 gradient once and writes it once.
constexpr double kClipBytesPerParam = 8;
// The head window: forward for the loss, recomputed logits in backward, and the two
// backward matmuls (input gradient and weight gradient).
constexpr double kHeadForwardsPerStep = 4;

}  // namespace

CostModel build_cost_model(const ModelConfig& c, const HardwareProfile& hw, int64_t batch, int64_t seq,
                           const MeasuredLayerTimes& measured) {
  if (batch <= 0 || seq <= 0) throw Error("batch and seq must be positive", "plan request", "");
  CostModel m;
  m.num_layers = static_cast<int>(c.num_layers);
  m.batch = batch;
  m.seq = seq;
  m.tokens = batch * seq;
  m.tied_embeddings = c.tie_word_embeddings;
  const int ab = hw.act_bytes;

  for (const auto& w : block_weight_specs(c, 0)) m.layer_params += static_cast<double>(w.numel());
  m.embed_params = static_cast<double>(embedding_weight_spec(c).numel());
  double head_own = 0;
  for (const auto& w : head_weight_specs(c)) head_own += static_cast<double>(w.numel());
  m.head_params = head_own;
  m.total_params = m.layer_params * m.num_layers + m.embed_params + m.head_params;

  // Weights and gradients on the compute tier and the links: the profile's element sizes
  // (bf16 on GPU profiles, fp32 for the cpu and emu executors).
  const double wb = hw.weight_bytes, gb = hw.grad_bytes;
  m.weight_bytes = wb * m.layer_params;
  m.grad_bytes = gb * m.layer_params;
  // The head streams the lm_head (the embedding matrix itself when tied) and the final norm.
  double head_stream_params = c.tie_word_embeddings ? head_own + m.embed_params : head_own;
  m.head_weight_bytes = wb * head_stream_params;
  m.head_grad_bytes = gb * head_stream_params;

  m.boundary_bytes = static_cast<double>(boundary_bytes(c, batch, seq, ab));
  m.internals_bytes =
      static_cast<double>(block_saved_bytes(c, RecomputeOption::KeepInternals, batch, seq, ab));
  const double tok = static_cast<double>(m.tokens);
  // Forward: the internals exist while the layer runs (they are its temporaries).
  m.workspace_forward = m.internals_bytes;
  // Backward: the recomputed internals, the incoming and outgoing boundary gradients plus
  // one more boundary-sized temporary, and the two widest gradient temporaries (MLP gate
  // and up, [tokens, intermediate] each).
  m.workspace_backward = m.internals_bytes + 3 * m.boundary_bytes +
                         2 * tok * static_cast<double>(c.intermediate_size) * ab;
  // Head: fp32 logits and their gradient for one vocabulary chunk, and the fp32 gradient
  // of the head's input boundary.
  double chunk = static_cast<double>(std::min<int64_t>(kHeadVocabChunk, c.vocab_size));
  m.workspace_head = 2 * tok * chunk * 4 + tok * static_cast<double>(c.hidden_size) * 4;
  m.embed_grad_bytes = m.boundary_bytes;

  m.layer_forward_flops = block_forward_flops(c, batch, seq);
  m.head_flops = kHeadForwardsPerStep * head_forward_flops(c, batch, seq);
  const double rate = hw.effective_flops();
  m.forward_s = measured.forward_s > 0 ? measured.forward_s : m.layer_forward_flops / rate;
  m.backward_s = measured.backward_s > 0 ? measured.backward_s : 2 * m.layer_forward_flops / rate;
  m.head_s = measured.head_s > 0 ? measured.head_s : m.head_flops / rate;

  m.optimizer_layer_s = m.layer_params / hw.host_optimizer_params_per_s;
  m.optimizer_embed_s = m.embed_params / hw.host_optimizer_params_per_s;
  m.optimizer_head_s = m.head_params / hw.host_optimizer_params_per_s;
  m.clip_pass_s = kClipBytesPerParam * m.total_params / hw.host_memory_bw;

  m.host_state_bytes = kHostBytesPerParam * m.total_params;
  m.layer_state_bytes = kStateBytesPerParam * m.layer_params;
  m.host_state_bytes_fp32 = kHostBytesPerParamFp32Adam * m.total_params;

  m.h2d_bw = hw.h2d_bw;
  m.d2h_bw = hw.d2h_bw;
  m.nvme_read_bw = hw.nvme_read_bw;
  m.nvme_write_bw = hw.nvme_write_bw;
  return m;
}

}  // namespace lt
