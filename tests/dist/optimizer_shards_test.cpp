// The ranks' parts of a sharded optimizer (train/optimizer_shards.h): they cover the
// parameter block in whole targets, and each cut is the one the rule names, found here by
// trying every target boundary.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "../exec/streaming_test_util.h"
#include "exec/streaming_executor.h"
#include "train/optimizer_shards.h"

namespace lt {
namespace {

// Each target's parameter count, in the block's order (embed, layers, head).
std::vector<double> target_sizes(const ModelParameters& p, const OptimizerShards& s) {
  std::vector<double> w;
  for (const UpdateTarget& t : s.targets) {
    double n = 0;
    for (auto [o, len] : target_ranges(p, t)) n += static_cast<double>(len);
    w.push_back(n);
  }
  return w;
}

TEST(OptimizerShards, PartsCoverTheBlockInTargetRunsNearestToEvenShares) {
  for (bool tied : {true, false}) {
    ModelConfig c = test::streaming_tiny_config(5);
    c.tie_word_embeddings = tied;
    ModelParameters p(c);
    for (int ranks : {1, 2, 3, 4, 9}) {
      SCOPED_TRACE("ranks " + std::to_string(ranks) + (tied ? ", tied" : ", untied"));
      const OptimizerShards s = shard_optimizer(p, ranks);
      ASSERT_EQ(s.bounds.size(), size_t(ranks) + 1);
      EXPECT_EQ(s.bounds.front(), 0);
      EXPECT_EQ(s.bounds.back(), p.numel());
      // Every range of every target lies in its owner's part; owners never decrease.
      for (size_t i = 0; i < s.targets.size(); ++i) {
        if (i > 0) {
          EXPECT_GE(s.owner[i], s.owner[i - 1]);
        }
        for (auto [o, n] : target_ranges(p, s.targets[i])) {
          EXPECT_EQ(s.owner_of(o), s.owner[i]) << s.targets[i].name();
          EXPECT_GE(o, s.offset(s.owner[i]));
          EXPECT_LE(o + n, s.offset(s.owner[i]) + s.numel(s.owner[i]));
        }
      }
      // Each cut is the target boundary nearest its even share (ties: the earlier one),
      // among those not before the previous cut: found by trying every boundary.
      const std::vector<double> w = target_sizes(p, s);
      double total = 0;
      for (double x : w) total += x;
      size_t first = 0;  // the previous cut, as a target index
      for (int r = 1; r < ranks; ++r) {
        const double want = total * r / ranks;
        size_t best = first;
        double before = 0, best_err = INFINITY;
        for (size_t i = 0; i <= w.size(); ++i) {
          if (i >= first && std::fabs(before - want) < best_err) best = i, best_err = std::fabs(before - want);
          if (i < w.size()) before += w[i];
        }
        size_t got = 0;
        while (got < s.owner.size() && s.owner[got] < r) ++got;
        EXPECT_EQ(got, best) << "cut " << r;
        first = best;
      }
      if (ranks > 1) {
        EXPECT_NE(s.describe(0), "nothing");
      }
    }
  }
}

TEST(OptimizerShards, CostsDecideTheCuts) {
  ModelParameters p(test::streaming_tiny_config(4));
  // The cost on layers 2 and 3 alone: half of it lies before layer 3.
  const int64_t layer2 = p.block_base(2) - p.data(), layer3 = p.block_base(3) - p.data();
  const std::vector<TensorCost> costs = {{layer2, 1.0}, {layer3, 1.0}};
  const OptimizerShards s = shard_optimizer(p, 2, costs);
  EXPECT_EQ(s.describe(0), "embed, layers 0-2");
  EXPECT_EQ(s.describe(1), "layer 3, head");
  EXPECT_EQ(s.bounds[1], layer3);
}

}  // namespace
}  // namespace lt
