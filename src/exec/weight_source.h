// Where the streaming executor's compute reads the weights from, chosen once when the
// executor is built (streaming_executor.h), so that its step never asks where the
// compute tier is:
//  - host views (the compute tier is host memory, the cpu backend): every tensor is read
//    in place, fp32 from the parameter block or, under bf16, the matrices from the step's
//    bf16 compute copy; nothing is ever copied;
//  - compute slots (a separate compute tier, emu and a GPU's): each use of a layer has
//    its planned arena slot (Weights, RecomputeWeights, BackwardWeights), filled by a copy
//    the executor issues at the window the plan loads it in; fp32 blocks, or under bf16
//    Bf16WeightSlot's layout from the compute copy; the final norm and the lm_head (whole,
//    or a streamed head's chunks through two slots) likewise.
// The embedding table stays on the host in both: its lookup runs there, and a separate
// compute tier receives boundary 0 over the link (the plan's in.0).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "core/dtype.h"
#include "exec/backend.h"
#include "exec/live_arena.h"
#include "kernels/kernel_table.h"
#include "layers/decoder_block.h"
#include "memory/host_pool.h"
#include "model/parameters.h"
#include "plan/plan.h"
#include "plan/stream_schedule.h"

namespace lt {

// An lm_head (or one chunk of its rows) as the cross-entropy reads it: fp32, or bf16
// matrices under bf16 compute (the other pointer null, or both set on host views).
struct HeadWeights {
  const float* f32 = nullptr;
  const bf16* b16 = nullptr;
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The step's parameters and its bf16 compute copy (null under fp32), before its first window.
  void begin_step(ModelParameters& params, const bf16* compute_copy) {
    params_ = &params;
    copy_ = compute_copy;
  }
  // Where a paged bf16 copy of layer j begins (exec/copy_pager.h), or null: in the compute
  // copy. Set once by the executor.
  using PagedCopy = std::function<const bf16*(int layer)>;
  void set_paged_copy(PagedCopy paged) { paged_copy_ = std::move(paged); }

  // Boundary 0: the embedding of `ids` where layer 0's forward reads it, `x0` on the
  // compute tier (the lookup runs on the host; a separate tier gets it over the link).
  virtual void embed(float* x0, const int32_t* ids) = 0;
  // Queue copies (nothing on host views): layer j into `slot`; the final norm and the
  // whole lm_head; a streamed head's load i (chunk i % n into chunk slot i % 2, load 0
  // with the final norm).
  virtual void load_layer(ArenaTensor slot, int j) = 0;
  virtual void load_head() = 0;
  virtual void load_head_chunk(int64_t i) = 0;

  // What a compute window reads: layer j from `slot`; the final norm (a streamed head's
  // waited for, it came with chunk 0); the whole lm_head; load i's chunk, waited for.
  virtual std::pair<BlockTensors, BlockTensorsBf16> layer(ArenaTensor slot, int j) = 0;
  virtual const float* final_norm() = 0;
  virtual HeadWeights lm_head() = 0;
  virtual HeadWeights head_chunk(int64_t i) = 0;

 protected:
  // Layer j's bf16 copy from its block's first parameter: in the compute copy, or paged.
  const bf16* layer_copy(int j) const {
    const bf16* paged = paged_copy_ ? paged_copy_(j) : nullptr;
    return paged ? paged : copy_ + (params_->block_base(j) - params_->data());
  }

  ModelParameters* params_ = nullptr;
  const bf16* copy_ = nullptr;
  PagedCopy paged_copy_;
  // The host's kernels: the embedding table lies in host memory, and its lookup runs there.
  const KernelTable& host_kernels_ = cpu_kernel_table();
};

// What the arena must hold of the weights and gradients for this backend: nothing on host
// views; on compute slots a layer's weight slot (fp32, or Bf16WeightSlot's under bf16),
// its fp32 gradient slot, and an lm_head slot (the whole, or one chunk of a streamed head)
// with its gradient slot.
ComputeTierWeights compute_tier_weights(const Plan& plan, const Backend& backend, Precision precision);

// Host views when the backend computes on host memory, else compute slots. `arena` and
// `host` must outlive the source; `host` provides the staging of boundary 0.
std::unique_ptr<WeightSource> make_weight_source(const ModelConfig& c, const StreamSchedule& s, Backend& backend,
                                                 const LiveArena& arena, HostPool& host, Precision precision);

}  // namespace lt
