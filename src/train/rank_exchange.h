// What a data-parallel step engine exchanges with the other ranks, the same in both
// engines, so that an in-memory and a streamed run on N ranks apply the same update bit
// for bit.
//
// Sums. The gradients (in rank order, dist/communicator.h), the loss, and the squared norm
// of the summed gradient in ordered_grad_sq_terms' order: a sharded rank sums the terms of
// its own part, and the terms' sums over the ranks, added in that order, are the bits of
// ordered_grad_sq_sum over the whole summed gradient. Where MPI allows a background thread
// (overlaps()), each target's gradient sum starts as soon as the last micro-batch's
// backward has finished the target (gradient_final), under the backward of the layers
// below: to the target's owner (the optimizer's parts, or unsharded a partition like
// theirs, which spreads the sums over the ranks), and unsharded on from the owner to every
// rank. Otherwise the sums run after backward (reduce-scatter to the owners, or to all).
//
// Sums on the compute tier (issue 29 part C; set_compute_tier_sums): where the gradient
// slots of a separate compute tier are summed over the ranks before they drain
// (exec/gradient_sink.h's SlotSums), the layers' and the head's gradients reach the hosts
// that update them already summed (every rank's; with a sharded optimizer the owner's
// alone, slot_sum_root), and only the embedding's is summed here. Where the compute tier
// is host memory (emu) this exchange makes the slots' sums (start_slot_sum): in rank
// order, so the bits are those of the host sums, on the background thread where it runs
// (to the target's owner; unsharded to each rank in turn, then from it to all). NCCL's on
// a GPU are its own order's.
//
// Weights (sharded optimizer, train/optimizer_shards.h). After each rank has updated its
// own part, each target's owner sends the target's weights to all: on the background
// thread, one target after another in the order the next forward reads them (embed,
// layers 0..L-1, head), so that forward waits for a target only when it reaches it
// (weights_needed); or, without the thread, all at once and blocking (all_gather_parts).
// Once a target's weights are in, the bf16 compute copy of a target this rank did not
// update is refreshed from them (an owner's update writes its own).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "dist/background_collectives.h"
#include "dist/communicator.h"
#include "model/parameters.h"
#include "plan/stream_schedule.h"
#include "train/optimizer_shards.h"
#include "train/updater.h"

namespace lt {

struct RankSums {
  double grad_sq_sum = 0;  // of the gradient summed over the ranks
  double loss_sum = 0;     // over the ranks' rows
};

class RankExchange {
 public:
  // comm: more than one rank. compute_copy: the bf16 mirror of params (null under fp32).
  // All must outlive this.
  RankExchange(Communicator& comm, const Updater& updater, ModelParameters& params, ModelParameters& grads,
               bf16* compute_copy);

  // Whether the gradient sums can run under backward (gradient_final).
  bool overlaps() const { return background_ != nullptr; }
  // From now on the layers' and the head's gradients arrive summed over the ranks (or not).
  void set_compute_tier_sums(bool on) { compute_tier_sums_ = on; }
  bool summed_on_compute_tier(const UpdateTarget& t) const {
    return compute_tier_sums_ && t.kind != UpdateTarget::Kind::Embed;
  }
  // The rank whose host alone needs the sum of target t's gradient slots: its owner under
  // the sharded optimizer (no other rank updates it or counts its norm); -1 unsharded,
  // where every rank updates every target.
  int slot_sum_root(const UpdateTarget& t) const;
  // For a compute tier in host memory: slot[0, n) of target t's gradient := its sum over
  // the ranks, in rank order, at slot_sum_root(t) (every rank for -1; a collective);
  // started on the background thread where it runs, so that the ranks' collectives keep
  // one order (its ticket), else summed now (0).
  int64_t start_slot_sum(const UpdateTarget& t, float* slot, int64_t n);
  // Returns once the sum of `ticket` is in (or has failed: sum() throws it), from any
  // thread, without holding up the caller's (BackgroundCollectives::wait_beside).
  void slot_sum_landed(int64_t ticket);
  // Target t's gradient is final on this rank: its sum starts (only where overlaps()).
  void gradient_final(const UpdateTarget& t);
  // After backward: the sums. gradient_final ran for every target of this step (those sums
  // are waited for), else the gradients are summed now.
  RankSums sum(double loss_sum, bool gradients_queued);

  // Sharded: after this rank updated its part, every target's weights go out from its
  // owner; weights_needed waits for target t's (nothing when none are on the way),
  // all_weights_in for all of them.
  void send_weights();
  void weights_needed(const UpdateTarget& t);
  void all_weights_in();

  // The collective seconds the background thread spent while the caller computed.
  double overlapped_seconds() const;

 private:
  void weights_in(size_t target);  // waits for its broadcast, then refreshes its bf16 copy

  Communicator& comm_;
  const Updater& updater_;
  ModelParameters& params_;
  ModelParameters& grads_;
  bf16* compute_copy_;
  std::unique_ptr<BackgroundCollectives> background_;  // where MPI allows a second thread
  OptimizerShards owners_;  // the optimizer's parts, or unsharded a partition like theirs
  std::vector<int64_t> tickets_;  // per target: its weights' broadcast ticket, 0 when in
  bool compute_tier_sums_ = false;
  int next_slot_owner_ = 0;  // the rank the next slot's sum goes to first (they take turns)
};

}  // namespace lt
