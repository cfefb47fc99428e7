// What data-parallel ranks add to one rank's step (issue 29; the trainer's side is
// train/rank_exchange.h), as the planner, the plan evaluator and the simulators count it.
// Every rank runs the same plan on its rows; between steps they exchange over their link
// (HardwareProfile::network_bw, "net" transfers in plans):
//  - each target's gradient (fp32, 4 bytes a parameter) goes to its owner (an N-way
//    partition of the targets, plan/rank_parts.h) as soon as the rank's host holds it
//    whole: sum.<target> in the window after the one that drains it (after HEAD for the
//    head, P0 for layer 0 and the embedding, whose gradients are complete after E); the
//    owner receives N-1 copies. Unsharded, the owner sends the sum back to every rank
//    (N-1 copies more), and every rank runs the planned lazy updates as in one process;
//  - sharded (ZeRO-1): each rank updates only its part, in P0 once the sums are in (one
//    host task, the busiest rank's part), and each target's updated fp32 weights go from
//    the owner to every rank (bcast.<target>, N-1 copies) where the plan would have
//    updated the target, which waits for them before its weights load.
// In P0 the host work starts when the window's sums end (net then host, not overlapped):
// the updates need the summed gradients. A collective's seconds are its busiest rank's
// bytes over network_bw: the owner's, with the point-to-point reduce and a broadcast
// counted as linear from the root (exact for 2 ranks; a tree broadcast is faster above).
// Slot sums (PlanRequest::slot_sums: a separate compute tier, one micro-batch a step): the
// ranks sum the layers' and the head's gradients in their compute-tier slots, and a slot
// drains once its sum is done (SlotSums in exec/gradient_sink.h). sum.<j> then sits in
// the window after B{j} (the stage backward(j-1), or E for layer 0), sum.head in HEAD
// after the head's compute (a streamed head: sum.head.<c> after chunk c's backward and
// sum.head.norm, one per drain), each listed before the first drain of its gradient,
// which waits for it; the embedding's gradient is formed on the host and summed there.
// A slot sum's bytes are the host sum's (the same collective, on the compute tier's memory).
#pragma once

#include <string>

namespace lt {

struct CostModel;
struct Plan;
struct PlanRequest;
struct Transfer;

struct DataParallelCosts {
  int ranks = 1;
  bool sharded = false;
  bool slot_sums = false;  // the rule above
  double network_bw = 0;   // bytes/s
  // Sharded: the busiest rank's part, in parameters, and its update's seconds.
  double owned_params = 0, owned_update_s = 0;

  bool on() const { return ranks > 1; }
  // A target's gradient sum and (sharded) weight broadcast, in bytes on the busiest
  // rank's link (0 for one rank).
  double sum_bytes(double params) const;
  double weight_bytes(double params) const;
};

// Fills cm.dp from the request (ranks, shard_optimizer, the profile's network_bw) and
// makes cm's host state one rank's. Throws when ranks > 1 and no network rate is known.
void apply_data_parallel(CostModel& cm, const PlanRequest& req);

// Adds the plan's collectives and (sharded) moves its updates, by the rules above; the
// plan was built for one rank's rows (plan_builder.h). Nothing for one rank.
void add_rank_exchange(Plan& p, const CostModel& cm);

// "sum.<target>" / "bcast.<target>" for an update target name ("embed", "layer.3" -> "3",
// "head"); exchange_target is its inverse ("" for a tensor that is no collective).
std::string exchange_tensor(const char* kind, const std::string& target);
std::string exchange_target(const std::string& tensor);
// The update target whose gradient a drain to the host completes, or "": g.<j> layer j's,
// the head's (whole, its chunks, its final norm), dx.0 the embedding's (the host forms
// the embedding's gradient from it).
std::string drained_target(const Transfer& x);

}  // namespace lt
