// How data-parallel ranks split the optimizer's update targets (embedding, decoder layers,
// head), shared by the sharded optimizer (train/optimizer_shards.h), which keeps and
// updates each rank's part, and the planner (plan/data_parallel.h), which times the
// busiest rank's update and sizes each rank's host state.
#pragma once

#include <vector>

namespace lt {

// Cuts items of the given weights, in their order, into `parts` runs: cut r (1..parts-1)
// where the weight before it comes nearest to r/parts of the whole, never before cut
// r-1. Returns parts + 1 indices: run r is items [cuts[r], cuts[r + 1]) (possibly empty).
std::vector<int> balanced_cuts(const std::vector<double>& weights, int parts);

}  // namespace lt
