// Where the streaming executor's backward puts the weight gradients, chosen once when the
// executor is built (streaming_executor.h), so that its step never asks where the compute
// tier is:
//  - sum in place (the compute tier is host memory, the cpu backend): kernels add straight
//    into the host gradient block, and each target's squared norm is summed as soon as
//    its gradients are complete;
//  - slot and drain (a separate compute tier): kernels add into a zeroed arena slot, which
//    is copied to the host block at the window the plan drains it in (the head's during
//    HEAD, a streamed head's chunk by chunk through two slots), and its norm summed once
//    the copy has landed, at the barrier of the window that waits for it.
// Either way the squared norm is summed in one fixed order (head, layers L-1..0, then the
// executor adds the embedding's): the same bits for every plan and both sinks. A layer
// whose gradients page to NVMe (exec/state_pager.h) has them put in the pager's host
// staging instead of the host block (set_paged_home), in the same layout.
// The embedding's gradient is on the host in both: a separate tier sends it the input
// gradient of layer 0 over the link (the plan's dx.0).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "exec/backend.h"
#include "exec/exec_event.h"
#include "exec/live_arena.h"
#include "kernels/kernel_table.h"
#include "memory/host_pool.h"
#include "model/parameters.h"
#include "plan/stream_schedule.h"

namespace lt {

// Called with each update target once its gradient in the host block is complete for the
// step (no kernel or copy writes it again until the next step zeroes or overwrites it): each layer and the
// head (its final norm, and an untied lm_head) as their norms are summed, in that order;
// the executor calls it for the embedding (with a tied lm_head) last.
using GradientFinal = std::function<void(const UpdateTarget&)>;

// Sums of the gradient slots of a separate compute tier over the data-parallel ranks,
// where they lie (issue 29 part C): every layer's slot and the head's (the final norm's,
// and an untied lm_head's; a tied lm_head's gradient is part of the embedding's, which the
// ranks sum on the host). start() begins the sum of a slot of `target`'s gradient after
// the compute work issued so far (when the layer's backward is done) and returns its
// ticket; before_drain(ticket) comes before the slot's copy to the host is issued, at the
// plan's drain window, and makes the copy wait for the sum (the host waits, or the copy's
// stream). Until then the compute goes on and nothing touches the slot. The ranks that
// update the target (all, or with a sharded optimizer its owner) drain the ranks' sum, the
// same bits on each; another rank drains what its slot then holds, which nothing reads.
// train/rank_exchange.h says which targets it covers (RankExchange::summed_on_compute_tier).
class SlotSums {
 public:
  virtual ~SlotSums() = default;
  virtual int64_t start(const UpdateTarget& target, float* slot, int64_t n) = 0;
  virtual void before_drain(int64_t ticket) = 0;
};

class GradientSink {
 public:
  // The executor's clock (seconds since the step began) and its trace.
  using Now = std::function<double()>;
  using Trace = std::function<void(const std::string& name, ExecLane lane, double start_s, double bytes)>;

  virtual ~GradientSink() = default;
  // The step's gradient block; zero_grads: the step's sums start from zero (a slot's sum is
  // then copied over the host's, which need not have been zeroed: copies_whole_layers;
  // else it is added to what the host block holds).
  // final: null, or called as above. slot_sums: null, or as above (a separate compute
  // tier's sink only; lt::Error for the host's).
  void begin_step(ModelParameters& grads, bool zero_grads, const GradientFinal* final,
                  SlotSums* slot_sums = nullptr) {
    if (slot_sums && !sums_slots())
      throw Error("the gradients' sum over the ranks on the compute tier needs a separate compute tier", "train",
                  "sum them on the host (this backend computes in host memory)");
    grads_ = &grads;
    zero_grads_ = zero_grads;
    final_ = final;
    slot_sums_ = slot_sums;
  }

  // Where layer j's gradients go on the host instead of the gradient block, when they
  // page (a zeroed step's only: they are never accumulated); null for a layer that does
  // not page.
  using PagedHome = std::function<float*(int layer)>;
  void set_paged_home(PagedHome home) { paged_home_ = std::move(home); }

  // Layer j's backward adds its weight gradients here (a zeroed slot, or the host block).
  virtual float* layer(int j) = 0;
  // Layer j's gradients are complete: summed into sq now, or left for the plan's drain window.
  virtual void layer_done(int j, double& sq) = 0;
  // Start of window w: the layer gradients the plan drains in w go out.
  virtual void drain(int w) = 0;
  // Copies to the host in flight now, and: waits for the first n, then sums their norms
  // into sq in the order they were produced.
  virtual size_t in_flight() const = 0;
  virtual double finish(double sq, size_t n) = 0;

  // The head (HEAD window): the final norm's gradient and the whole lm_head's; a streamed
  // head's chunk (rows from v0), then that chunk done; then the head done, its norms
  // summed (or left to land) in the norm order: the final norm, then an untied lm_head.
  virtual float* final_norm() = 0;
  virtual float* lm_head() = 0;
  virtual float* head_chunk(int64_t chunk) = 0;
  virtual void head_chunk_done(int64_t chunk) = 0;
  virtual void head_done(double& sq) = 0;

  // The embedding's gradient from layer 0's input gradient d_x0 (changed in place first,
  // as embed_backward does), added on the host.
  virtual void embedding(float* d_x0, const int32_t* ids) = 0;

  // After a failed step, once the backend is drained: nothing in flight or pending.
  virtual void abandon() = 0;

  // Whether a zeroed step's layer gradients reach the host block as one copy of each
  // layer's whole block (from its slot), over whatever the block held: zeroing it before
  // the step would only cost the host a pass over it.
  bool copies_whole_layers() const { return sums_slots(); }

 protected:
  virtual bool sums_slots() const { return false; }  // gradients go through slots (slot_sums apply)
  void finished(const UpdateTarget& t) const {
    if (final_) (*final_)(t);
  }

  // Layer j's gradients on the host: the block's, or a paged layer's staging.
  float* host_layer(int j) const {
    float* home = paged_home_ ? paged_home_(j) : nullptr;
    LT_ASSERT(!home || zero_grads_, "paged gradients of layer " + std::to_string(j) + " accumulated");
    return home ? home : grads_->block_base(j);
  }

  ModelParameters* grads_ = nullptr;
  bool zero_grads_ = true;
  PagedHome paged_home_;
  const GradientFinal* final_ = nullptr;
  SlotSums* slot_sums_ = nullptr;
  // The host's kernels: the host gradients' squared norms and the embedding's gradient
  // are computed where they lie, in host memory, whatever the compute tier.
  const KernelTable& host_kernels_ = cpu_kernel_table();
};

// Sum in place when the backend computes on host memory, else slot and drain. `arena` and
// `host` must outlive the sink; `host` provides the host ends of the copies.
std::unique_ptr<GradientSink> make_gradient_sink(const ModelConfig& c, const StreamSchedule& s, Backend& backend,
                                                 const LiveArena& arena, HostPool& host, GradientSink::Now now,
                                                 GradientSink::Trace trace);

}  // namespace lt
