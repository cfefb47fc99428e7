#include "plan/cost_model.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/bf16_slot_layout.h"
#include "model/hybrid_layers.h"
#include "model/layer_specs.h"
#include "model/parameters.h"
#include "plan/plan_request.h"
#include "plan/stream_schedule.h"

namespace lt {
namespace {

// Optimizer state per parameter: 8-bit m and v, and an fp32 scale for each per block of
// 256 (the hybrid AdamW's default, optim/adamw.h).
constexpr double kStateBytesPerParam = 2 + 2 * 4.0 / 256;
// Host bytes per parameter that live across steps, besides the gradient (the profile's
// grad_bytes: bf16 on GPU profiles, fp32 in the cpu and emu executors' host block).
// Ours: fp32 master 4 + optimizer state + bf16 compute copy 2.
constexpr double kHostBytesPerParamBesidesGradient = 4 + kStateBytesPerParam + 2;
// MegaTrain's public code: bf16 params 2 + fp32 grads 4 + fp32 m and v 8 (no fp32 master).
constexpr double kHostBytesPerParamFp32Adam = 14;
// A separate clip pass reads every fp32 gradient once and writes it once.
constexpr double kClipBytesPerParam = 8;
// The head window: forward for the loss, recomputed logits in backward, and the two
// backward matmuls (input gradient and weight gradient).
constexpr double kHeadForwardsPerStep = 4;

}  // namespace

double layer_state_bytes(const ModelConfig& c, int j) {
  return kStateBytesPerParam * static_cast<double>(layer_params(c, j));
}

double layer_master_bytes(const ModelConfig& c, int j) {
  double n = 0;
  for (const BlockField& f : block_fields(c, j))
    if (f.matrix) n += static_cast<double>(f.numel);
  return sizeof(float) * n;
}

PagedLayerBytes paged_layer_bytes(const Plan& p, int j) {
  PagedLayerBytes b;
  b.write_back = layer_state_bytes(p.model, j) + (p.master_paged(j) ? layer_master_bytes(p.model, j) : 0.0);
  b.grads = p.grads_paged(j) ? p.hardware.grad_bytes * static_cast<double>(layer_params(p.model, j)) : 0.0;
  b.read = b.write_back + b.grads;
  if (p.copy_paged(j)) b.copy = layer_master_bytes(p.model, j) / 2;
  return b;
}

CostModel build_cost_model(const ModelConfig& c, const HardwareProfile& hw, int64_t batch, int64_t seq,
                           const MeasuredLayerTimes& measured, const ExecutorScratch& scratch) {
  if (batch <= 0 || seq <= 0) throw Error("batch and seq must be positive", "plan request", "");
  CostModel m;
  m.num_layers = static_cast<int>(c.num_layers);
  m.batch = batch;
  m.seq = seq;
  m.tokens = batch * seq;
  m.tied_embeddings = c.tie_word_embeddings;
  const int ab = hw.act_bytes;

  if (c.hybrid() && (measured.forward_s > 0 || measured.backward_s > 0))
    throw Error("measured layer times are one forward and one backward time for every layer, and the layers of "
                    "this " + c.model_type + " model differ",
                "plan request", "plan the hybrid model without measured layer times (from FLOPs)");
  m.embed_params = static_cast<double>(embedding_weight_spec(c).numel());
  double head_own = 0;
  for (const auto& w : head_weight_specs(c)) head_own += static_cast<double>(w.numel());
  m.head_params = head_own;

  // Weights and gradients on the compute tier and the links: the profile's element sizes
  // (bf16 on GPU profiles, fp32 for the cpu and emu executors).
  const double wb = hw.weight_bytes, gb = hw.grad_bytes;
  // The head streams the lm_head (the embedding matrix itself when tied) and the final norm.
  double head_stream_params = c.tie_word_embeddings ? head_own + m.embed_params : head_own;
  m.head_weight_bytes = wb * head_stream_params;
  m.head_grad_bytes = gb * head_stream_params;
  m.vocab_size = c.vocab_size;
  m.hidden_size = c.hidden_size;

  m.boundary_bytes = static_cast<double>(boundary_bytes(c, batch, seq, ab));
  m.boundary_grad_bytes = static_cast<double>(boundary_bytes(c, batch, seq, sizeof(float)));
  const double tok = static_cast<double>(m.tokens);
  const double rate = hw.effective_flops();
  // The kernels' scratch: the executor's (the request gives it), else estimates: a layer
  // pass's, one boundary-sized temporary and the two widest gradient temporaries (MLP gate
  // and up, [tokens, intermediate] each); the cross-entropy's, fp32 logits and their
  // gradient for one vocabulary chunk.
  const double chunk = static_cast<double>(std::min<int64_t>(kHeadVocabChunk, c.vocab_size));
  // A layer pass's is a multiple of kWorkspaceAlignment, as the executor lays it out.
  const double layer_scratch = scratch.layer_bytes >= 0
                                   ? scratch.layer_bytes
                                   : m.boundary_bytes + 2 * tok * static_cast<double>(c.intermediate_size) * ab;
  m.layer_scratch_bytes = std::ceil(layer_scratch / kWorkspaceAlignment) * kWorkspaceAlignment;
  m.head_scratch_bytes = scratch.head_bytes >= 0 ? scratch.head_bytes : 2 * tok * chunk * 4;
  double layers_params = 0;
  for (int j = 0; j < m.num_layers; ++j) {
    LayerCost l;
    l.kind = c.layer_kind(j);
    l.params = static_cast<double>(layer_params(c, j));
    layers_params += l.params;
    l.weight_bytes = wb * l.params;
    l.grad_bytes = gb * l.params;
    l.internals_bytes =
        static_cast<double>(layer_saved_bytes(c, j, RecomputeOption::KeepInternals, batch, seq, ab));
    // What the executor holds (exec/, plan/stream_schedule.h): a pass's internals (its
    // temporaries, kept or not) with its scratch; backward and recompute also hold the two
    // boundary gradients backward alternates between (dx.0, dx.1, fp32), live from HEAD to
    // B0.
    l.workspace_forward = l.internals_bytes + m.layer_scratch_bytes;
    l.workspace_recompute = l.workspace_forward + 2 * m.boundary_grad_bytes;
    l.workspace_backward = l.workspace_recompute;
    l.forward_flops = layer_forward_flops(c, j, batch, seq);
    l.forward_s = measured.forward_s > 0 ? measured.forward_s : l.forward_flops / rate;
    l.backward_s = measured.backward_s > 0 ? measured.backward_s : 2 * l.forward_flops / rate;
    l.optimizer_s = l.params / hw.host_optimizer_params_per_s;
    l.state_bytes = layer_state_bytes(c, j);
    m.layers.push_back(l);
  }
  m.total_params = layers_params + m.embed_params + m.head_params;
  // Head: the cross-entropy's scratch and what the executor holds besides: the final
  // norm's output and its gradient, its per-token rstd, and the two boundary gradients
  // backward starts from, fp32.
  m.workspace_head = m.head_scratch_bytes + 4 * m.boundary_grad_bytes + tok * sizeof(float);
  m.embed_grad_bytes = m.boundary_bytes;

  m.head_flops = kHeadForwardsPerStep * head_forward_flops(c, batch, seq);
  m.head_s = measured.head_s > 0 ? measured.head_s : m.head_flops / rate;

  m.optimizer_embed_s = m.embed_params / hw.host_optimizer_params_per_s;
  m.optimizer_head_s = m.head_params / hw.host_optimizer_params_per_s;
  m.clip_pass_s = kClipBytesPerParam * m.total_params / hw.host_memory_bw;

  if (hw.weight_bytes == 2) m.weight_slot_bytes = static_cast<double>(bf16_weight_slot_bytes(c));
  m.host_state_bytes = (kHostBytesPerParamBesidesGradient + hw.grad_bytes) * m.total_params;
  m.host_state_bytes_fp32 = kHostBytesPerParamFp32Adam * m.total_params;

  m.h2d_bw = hw.h2d_bw;
  m.d2h_bw = hw.d2h_bw;
  m.nvme_read_bw = hw.nvme_read_bw;
  m.nvme_write_bw = hw.nvme_write_bw;
  return m;
}

double CostModel::slot_weight_bytes() const {
  if (weight_slot_bytes >= 0) return weight_slot_bytes;
  double b = 0;
  for (const LayerCost& l : layers) b = std::max(b, l.weight_bytes);
  return b;
}
double CostModel::slot_grad_bytes() const {
  double b = 0;
  for (const LayerCost& l : layers) b = std::max(b, l.grad_bytes);
  return b;
}

double HeadFootprint::chunk_weight_bytes(int64_t c) const {
  return row_weight_bytes * static_cast<double>(std::min(chunk_rows, vocab - c * chunk_rows));
}
double HeadFootprint::chunk_grad_bytes(int64_t c) const {
  return row_grad_bytes * static_cast<double>(std::min(chunk_rows, vocab - c * chunk_rows));
}

HeadFootprint CostModel::head_footprint(int64_t chunk_rows) const {
  HeadFootprint f;
  f.vocab = vocab_size;
  const double C = static_cast<double>(hidden_size), V = static_cast<double>(vocab_size);
  // The head's parameters are the final norm (C) and the lm_head (V rows of C; the
  // embedding when tied), all at one element size.
  f.row_weight_bytes = head_weight_bytes / (V * C + C) * C;
  f.row_grad_bytes = head_grad_bytes / (V * C + C) * C;
  f.norm_weight_bytes = f.row_weight_bytes;
  f.norm_grad_bytes = f.row_grad_bytes;
  f.head_d2h_bytes = head_grad_bytes;
  // The compute tier holds the final norm's weights in fp32 (the kernels read norms in
  // fp32), whatever the weights' element size on the link.
  f.norm_buffer_bytes = std::max(f.norm_weight_bytes, C * sizeof(float));
  const double norm_buffer_bytes = f.norm_buffer_bytes;
  if (chunk_rows <= 0) {
    f.prefetch_h2d_bytes = head_weight_bytes;
    f.weight_buffer_bytes = head_weight_bytes - f.norm_weight_bytes + norm_buffer_bytes;
    f.grad_buffer_bytes = head_grad_bytes;
    return f;
  }
  if (chunk_rows >= vocab_size)
    throw Error("a head chunk of " + std::to_string(chunk_rows) + " rows is not smaller than the vocabulary (" +
                    std::to_string(vocab_size) + ")",
                "plan request", "stream the head in smaller chunks, or hold it whole (chunk rows 0)");
  f.chunk_rows = chunk_rows;
  f.chunks = (vocab_size + chunk_rows - 1) / chunk_rows;
  const double rows = static_cast<double>(chunk_rows);
  f.weight_buffer_bytes = 2 * rows * f.row_weight_bytes + norm_buffer_bytes;
  f.grad_buffer_bytes = 2 * rows * f.row_grad_bytes + f.norm_grad_bytes;
  f.prefetch_h2d_bytes = f.norm_weight_bytes + f.chunk_weight_bytes(0);
  f.head_h2d_bytes = 2 * V * f.row_weight_bytes - f.chunk_weight_bytes(0);
  return f;
}

int64_t CostModel::min_head_chunk_rows() const {
  return 2 * kHeadChunkQuantum < vocab_size ? kHeadChunkQuantum : 0;
}

CostModel build_cost_model(const PlanRequest& req) {
  CostModel cm = build_cost_model(req.model, req.hardware, req.batch, req.seq, req.measured, req.scratch);
  for (int j = 0; j < cm.num_layers; ++j) {
    LayerCost& l = cm.layers[static_cast<size_t>(j)];
    if (req.page_master) l.master_bytes = layer_master_bytes(req.model, j);
    if (req.page_grads) l.grad_page_bytes = l.grad_bytes;
    if (req.page_copy) l.copy_page_bytes = layer_master_bytes(req.model, j) / 2;  // bf16 of the fp32 masters
  }
  apply_data_parallel(cm, req);
  return cm;
}

}  // namespace lt
