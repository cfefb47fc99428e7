#include "train/optimizer_shards.h"

#include <algorithm>

#include "core/error.h"
#include "exec/streaming_executor.h"
#include "plan/rank_parts.h"

namespace lt {

int OptimizerShards::owner_of(int64_t offset) const {
  LT_ASSERT(offset >= 0 && offset < bounds.back(), "parameter offset outside the block");
  // The last part that starts at or before offset (empty parts start where the next does).
  const auto it = std::upper_bound(bounds.begin(), bounds.end() - 1, offset);
  return static_cast<int>(it - bounds.begin()) - 1;
}

std::string OptimizerShards::describe(int rank) const {
  std::vector<std::string> parts;
  int first_layer = -1, last_layer = -1;
  auto flush_layers = [&] {
    if (first_layer < 0) return;
    parts.push_back(first_layer == last_layer ? "layer " + std::to_string(first_layer)
                                              : "layers " + std::to_string(first_layer) + "-" + std::to_string(last_layer));
    first_layer = -1;
  };
  for (size_t i = 0; i < targets.size(); ++i) {
    if (owner[i] != rank) continue;
    if (targets[i].kind == UpdateTarget::Kind::Layer) {
      if (first_layer < 0) first_layer = targets[i].layer;
      last_layer = targets[i].layer;
      continue;
    }
    flush_layers();
    parts.push_back(targets[i].name());
  }
  flush_layers();
  if (parts.empty()) return "nothing";
  std::string out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) out += ", " + parts[i];
  return out;
}

OptimizerShards shard_optimizer(const ModelParameters& params, int ranks, const std::vector<TensorCost>& costs) {
  LT_ASSERT(ranks >= 1, "shard_optimizer: no ranks");
  const int L = params.config().num_layers;
  OptimizerShards s;
  s.ranks = ranks;
  s.targets.push_back({UpdateTarget::Kind::Embed, -1});
  for (int j = 0; j < L; ++j) s.targets.push_back({UpdateTarget::Kind::Layer, j});
  s.targets.push_back({UpdateTarget::Kind::Head, -1});
  const int K = static_cast<int>(s.targets.size());
  // Where each target starts in the block (its first range), then the block's end; and
  // what each weighs.
  std::vector<int64_t> start;
  std::vector<double> weight(size_t(K), 0.0);
  for (int i = 0; i < K; ++i) {
    const auto ranges = target_ranges(params, s.targets[size_t(i)]);
    LT_ASSERT(!ranges.empty(), "update target " + s.targets[size_t(i)].name() + " has no parameters");
    int64_t lo = ranges[0].first;
    for (auto [o, n] : ranges) {
      lo = std::min(lo, o);
      if (costs.empty()) weight[size_t(i)] += static_cast<double>(n);
      for (const TensorCost& c : costs)
        if (c.offset >= o && c.offset < o + n) weight[size_t(i)] += c.cost;
    }
    LT_ASSERT(start.empty() || lo > start.back(), "update targets out of memory order at " + s.targets[size_t(i)].name());
    start.push_back(lo);
  }
  LT_ASSERT(start[0] == 0, "the embedding does not start the parameter block");
  start.push_back(params.numel());
  const std::vector<int> cut = balanced_cuts(weight, ranks);  // cut[r]: the first target of rank r
  s.bounds.resize(size_t(ranks) + 1);
  for (int r = 0; r <= ranks; ++r) s.bounds[size_t(r)] = start[size_t(cut[size_t(r)])];
  s.owner.resize(size_t(K));
  for (int r = 0; r < ranks; ++r)
    for (int i = cut[size_t(r)]; i < cut[size_t(r) + 1]; ++i) s.owner[size_t(i)] = r;
  return s;
}

}  // namespace lt
