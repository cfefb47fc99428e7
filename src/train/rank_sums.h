// What a data-parallel step sums over the ranks once backward is done, the same way in
// both step engines, so that an in-memory and a streamed run on N ranks apply the same
// update bit for bit: the gradients (in rank order, dist/communicator.h: to every rank, or
// when the optimizer is sharded to each part's owner only), the loss, and the squared
// norm of the summed gradient in ordered_grad_sq_terms' order (a sharded rank sums the
// terms of its own part; the terms' sums over the ranks, added in that order, are the
// bits of ordered_grad_sq_sum over the whole summed gradient). The gradient sums may run
// under backward instead, target by target (queue_target_sum).
#pragma once

#include "dist/background_collectives.h"
#include "dist/communicator.h"
#include "model/parameters.h"
#include "plan/stream_schedule.h"
#include "train/optimizer_shards.h"

namespace lt {

struct RankSums {
  double grad_sq_sum = 0;  // of the gradient summed over the ranks
  double loss_sum = 0;     // over the ranks' rows
};

// shards: the optimizer's parts (one part: not sharded). reduced: the gradients are summed
// already (queue_target_sum ran for every target under backward): at their owners when
// sharded, on every rank when not.
RankSums sum_over_ranks(Communicator& comm, const OptimizerShards& shards, ModelParameters& grads, double loss_sum,
                        bool reduced);

// Under backward, on the background thread, once target t's gradient is final on this
// rank: its sum over the ranks goes to its owner in `owners` (the optimizer's parts, or
// where it is not sharded a partition like theirs, which spreads the sums over the
// ranks), and with to_all (not sharded) on from the owner to every rank. In rank order:
// the bits sum_over_ranks would give.
void queue_target_sum(BackgroundCollectives& background, const OptimizerShards& owners, bool to_all,
                      ModelParameters& grads, const UpdateTarget& t);

}  // namespace lt
