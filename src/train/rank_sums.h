// What a data-parallel step sums over the ranks once backward is done, the same way in
// both step engines, so that an in-memory and a streamed run on N ranks apply the same
// update bit for bit: the gradients (in rank order, dist/communicator.h: to every rank, or
// when the optimizer is sharded to each part's owner only), the loss, and the squared
// norm of the summed gradient in ordered_grad_sq_terms' order (a sharded rank sums the
// terms of its own part; the terms' sums over the ranks, added in that order, are the
// bits of ordered_grad_sq_sum over the whole summed gradient).
#pragma once

#include "dist/communicator.h"
#include "model/parameters.h"
#include "train/optimizer_shards.h"

namespace lt {

struct RankSums {
  double grad_sq_sum = 0;  // of the gradient summed over the ranks
  double loss_sum = 0;     // over the ranks' rows
};

// shards: the optimizer's parts (one part: not sharded). reduced: the sharded gradients
// already lie summed at their owners (a background reduce ran under backward).
RankSums sum_over_ranks(Communicator& comm, const OptimizerShards& shards, ModelParameters& grads, double loss_sum,
                        bool reduced);

}  // namespace lt
