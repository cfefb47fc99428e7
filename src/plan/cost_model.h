// The cost model: per-layer times and bytes for one training step of one model on one
// hardware profile at one (batch, seq). Every policy, the MILP, the plan evaluator and the
// simulator read these numbers; none of them invents its own.
//
// Per-layer numbers are per layer: the uniform families' layers are all alike, a hybrid
// model's (Qwen3.5: Gated DeltaNet and gated attention layers) are not. The weight and
// gradient slots of the compute tier are sized for the largest layer.
//
// Conventions (the executor's, see plan/plan.h):
//  - weights stream to the compute tier at the profile's weight_bytes per parameter (bf16,
//    2 B, on GPU profiles; fp32, 4 B, for the cpu and emu executors); gradients return at
//    grad_bytes per parameter;
//  - activations are act_bytes per element (bf16 on GPU profiles);
//  - a layer's backward reruns its own forward first unless its internals were kept
//    (RecomputeFromInput), so backward compute = 2 forward (+1 forward when recomputed);
//  - the head (final norm, lm_head, loss) runs forward and backward in one window over
//    vocabulary chunks, recomputing each chunk's logits in backward: 4 head-forwards;
//  - the head's weights are held whole on the compute tier, or streamed through it in
//    vocabulary chunks (head_footprint below): two chunk buffers for the weights, two for
//    the gradients draining to the host, and every lm_head row loaded twice (the loss's
//    logsumexp needs every row before any gradient row can be formed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "plan/data_parallel.h"
#include "plan/hardware_profile.h"
#include "plan/plan.h"

namespace lt {

// What the head costs the compute tier and the links, held whole or streamed in chunks
// (plan/plan.h's tensor names): compute-tier bytes of its weight buffers (w.norm and
// w.lm_head's slots, live from F{L-1} to the end of HEAD) and gradient buffers (g.norm
// and g.lm_head's, from HEAD to the end of the window after it), and the bytes F{L-1}
// prefetches and HEAD loads and drains.
struct HeadFootprint {
  int64_t chunk_rows = 0;  // 0: whole
  int64_t chunks = 1;
  double weight_buffer_bytes = 0, grad_buffer_bytes = 0;
  double prefetch_h2d_bytes = 0;  // in F{L-1}: the whole head, or the final norm and chunk 0
  double head_h2d_bytes = 0;      // in HEAD: nothing, or the rest of both passes
  double head_d2h_bytes = 0;      // in HEAD: every gradient row and the final norm's
  double row_weight_bytes = 0, row_grad_bytes = 0;    // one vocabulary row of the lm_head
  double norm_weight_bytes = 0, norm_grad_bytes = 0;  // the final norm, on the links
  double norm_buffer_bytes = 0;  // its weights on the compute tier: fp32, whatever the link's size
  int64_t vocab = 0;
  double chunk_weight_bytes(int64_t c) const;  // chunk c's lm_head rows (streamed only)
  double chunk_grad_bytes(int64_t c) const;
};

// Optional measured per-layer times; <= 0 means "derive from FLOPs".
struct MeasuredLayerTimes {
  double forward_s = 0;
  double backward_s = 0;  // gradient part only (without the internal recompute)
  double head_s = 0;      // head forward + backward
};

// One decoder layer's numbers.
struct LayerCost {
  LayerKind kind = LayerKind::Attention;
  double params = 0;
  double weight_bytes = 0;        // hw.weight_bytes per parameter
  double grad_bytes = 0;          // hw.grad_bytes per parameter
  double internals_bytes = 0;     // what it saves beyond its input (KeepInternals)
  double workspace_forward = 0;   // transient bytes of its forward
  double workspace_recompute = 0;  // of its recompute (RC), under the backward's gradients
  double workspace_backward = 0;  // transient bytes of its backward incl. its recompute
  double forward_flops = 0;
  double forward_s = 0;           // one forward (= one recompute)
  double backward_s = 0;          // its gradient computation, without recompute
  double optimizer_s = 0;         // host AdamW of its parameters
  double state_bytes = 0;         // its optimizer state (8-bit m/v and scales)
  // Its projection matrices' fp32 masters, when they page with the optimizer state
  // (PlanRequest::page_master; else 0).
  double master_bytes = 0;
  // Its host gradients (grad_bytes), when they page too (PlanRequest::page_grads; else 0):
  // written to NVMe after their drain, read back with the state for the update.
  double grad_page_bytes = 0;
  // Its projection matrices' bf16 compute copy, when it pages too (PlanRequest::page_copy;
  // else 0): written to NVMe in its forward, read back for its backward.
  double copy_page_bytes = 0;
  // What a paged layer reads from NVMe before its update (and holds there): the state,
  // with the masters and the gradients when they page; and what it writes back after.
  double paged_bytes() const { return state_bytes + master_bytes + grad_page_bytes; }
  double paged_write_bytes() const { return state_bytes + master_bytes; }
};

struct CostModel {
  int num_layers = 0;
  int64_t batch = 0, seq = 0, tokens = 0;
  bool tied_embeddings = false;

  // Parameters.
  double total_params = 0;  // trainable, embedding and head counted once when tied
  double embed_params = 0;
  double head_params = 0;   // final norm + lm_head (0 extra for lm_head when tied)

  // Bytes.
  double head_weight_bytes = 0;  // final norm + lm_head (the embedding when tied)
  double head_grad_bytes = 0;
  int64_t vocab_size = 0, hidden_size = 0;
  double boundary_bytes = 0;     // one boundary activation [tokens, hidden]
  double boundary_grad_bytes = 0;  // one boundary's gradient, fp32 as backward computes it
  double workspace_head = 0;     // the cross-entropy's scratch and the head's fp32 tensors
  // The kernels' scratch in a layer pass and in the head's cross-entropy: the executor's
  // (PlanRequest::scratch) or estimated (cost_model.cpp).
  double layer_scratch_bytes = 0, head_scratch_bytes = 0;
  double embed_grad_bytes = 0;   // the boundary-0 gradient sent to the host (= boundary)

  // FLOPs and times.
  double head_flops = 0;          // forward + backward of the head window
  double head_s = 0;
  double optimizer_embed_s = 0;
  double optimizer_head_s = 0;    // 0 when tied (the embedding's update covers it)
  double clip_pass_s = 0;         // a separate pass over all fp32 gradients (megatrain-code)

  // Host state that lives for the whole run.
  double host_state_bytes = 0;       // ours: fp32 master + 8-bit m/v + bf16 copy + grads (grad_bytes)
  double host_state_bytes_fp32 = 0;  // megatrain-code: bf16 params + fp32 grads + fp32 m/v

  // Data-parallel ranks (build_cost_model(req) fills it): their exchange's costs; the
  // host state above is then one rank's.
  DataParallelCosts dp;

  std::vector<LayerCost> layers;  // num_layers of them
  const LayerCost& layer(int j) const { return layers[static_cast<size_t>(j)]; }
  // The compute tier's weight and gradient slots hold any layer: the largest one's bytes
  // (a bf16 slot as the executor lays it out, model/bf16_slot_layout.h, when the model is
  // known: weight_slot_bytes; else the largest layer's weight_bytes).
  double weight_slot_bytes = -1;
  double slot_weight_bytes() const;
  double slot_grad_bytes() const;

  // Link rates (bytes/s) and the host tier's optimizer throughput, copied from the profile.
  double h2d_bw = 0, d2h_bw = 0, nvme_read_bw = 0, nvme_write_bw = 0;

  // The head whole (chunk_rows 0) or streamed in chunks of chunk_rows vocabulary rows
  // (0 < chunk_rows < vocab_size; a multiple of kHeadChunkQuantum in plans).
  HeadFootprint head_footprint(int64_t chunk_rows) const;
  // The smallest chunk a planner streams the head in (kHeadChunkQuantum rows), or 0 when
  // two such chunks are not fewer rows than the vocabulary (streaming would then hold as
  // many bytes as the whole head; planners only stream chunks whose two buffers are).
  int64_t min_head_chunk_rows() const;
};

// Layer j's optimizer state bytes (LayerCost::state_bytes). Layers differ in a hybrid model.
double layer_state_bytes(const ModelConfig& c, int j);
// Layer j's projection matrices' fp32 masters (LayerCost::master_bytes when they page):
// an upper bound of what the executor pages, the page-aligned interiors of those tensors.
double layer_master_bytes(const ModelConfig& c, int j);
// A plan's paged layer j (its nvme_state_layers): what os.<j>'s read moves and its
// write-back, its gradients' write gs.<j> (0 unless among Plan::nvme_grad_layers), and its bf16
// copy's write and read cp.<j> (0 unless among Plan::nvme_copy_layers).
struct PagedLayerBytes {
  double read = 0, write_back = 0, grads = 0, copy = 0;
};
PagedLayerBytes paged_layer_bytes(const Plan& p, int j);

// Vocabulary chunk of the head's logits (columns per chunk).
constexpr int64_t kHeadVocabChunk = 2048;

// scratch: PlanRequest's (not given: estimated here).
CostModel build_cost_model(const ModelConfig& c, const HardwareProfile& hw, int64_t batch, int64_t seq,
                           const MeasuredLayerTimes& measured = {}, const ExecutorScratch& scratch = {});
struct PlanRequest;  // plan/plan_request.h
// The cost model of a request: its model, hardware, shape, measured times and scratch.
CostModel build_cost_model(const PlanRequest& req);

}  // namespace lt
