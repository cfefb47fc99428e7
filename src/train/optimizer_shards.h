// Which rank keeps and updates which part of the model when data-parallel ranks share the
// optimizer (ZeRO-1, issue 29): each rank holds the optimizer states of its part only,
// updates it from the summed gradient, and hands the updated weights to the others.
//
// The parts are runs of the lazy optimizer's update targets (embedding, decoder layers,
// head), cut where each rank's share of the optimizer states (or of the parameters, for
// SGD) comes closest to 1/N. Whole targets, because the squared gradient norm sums per
// target range (ordered_grad_sq_terms): so a sharded step clips by the bits of an
// unsharded one, and every tensor's update runs on one rank. The targets lie in memory in
// that order, so each part is one contiguous range of the parameter block (padding
// between targets included).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/parameters.h"
#include "plan/stream_schedule.h"

namespace lt {

struct OptimizerShards {
  int ranks = 1;
  std::vector<int64_t> bounds;        // ranks + 1: rank r's part is [bounds[r], bounds[r + 1])
  std::vector<UpdateTarget> targets;  // embed, layer 0..L-1, head: the parameter block's order
  std::vector<int> owner;             // per target: the rank whose part holds it

  int64_t offset(int rank) const { return bounds[size_t(rank)]; }
  int64_t numel(int rank) const { return bounds[size_t(rank) + 1] - bounds[size_t(rank)]; }
  // The rank whose part holds parameter `offset` of the block.
  int owner_of(int64_t offset) const;
  // What rank's part holds, for the log: "embed, layers 0-3", "layers 4-7, head", "nothing".
  std::string describe(int rank) const;
};

// What balances the parts: a tensor at `offset` of the block weighs `cost`.
struct TensorCost {
  int64_t offset = 0;
  double cost = 0;
};

// The parts for `ranks` ranks (1: everything on rank 0), balanced by the tensors' costs
// (empty: by parameter count).
OptimizerShards shard_optimizer(const ModelParameters& params, int ranks, const std::vector<TensorCost>& costs = {});

}  // namespace lt
