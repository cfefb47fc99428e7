#include "plan/baselines.h"

#include <gtest/gtest.h>

#include "plan/plan_evaluate.h"
#include "plan/plan_validate.h"
#include "plan/planner.h"
#include "plan/state_paging.h"
#include "plan_test_util.h"

namespace lt {
namespace {

int count_transfers(const Plan& p, const std::string& tensor, Link link) {
  int n = 0;
  for (const auto& w : p.windows)
    for (const auto& t : w.transfers) n += t.tensor == tensor && t.link == link;
  return n;
}

TEST(Baselines, MegaTrainRule) {
  PlanRequest req = test::preset_request("qwen2.5-7b", "h800", 16);
  Plan p = make_plan(req, "megatrain");
  ASSERT_TRUE(p.feasible) << p.infeasible_reason;
  EXPECT_TRUE(validate_plan(p).empty());
  for (int b = 0; b <= p.num_layers; ++b)
    EXPECT_EQ(p.boundaries[b].recompute, b % kMegaTrainInterval != 0 && b != p.num_layers) << b;
  EXPECT_FALSE(p.lazy_optimizer);
  // Every update runs in P0, after backward.
  for (const auto& o : p.optimizer) EXPECT_EQ(o.window, 0);
}

TEST(Baselines, MegaTrainCodeStreamsEachLayerThreeTimes) {
  PlanRequest req = test::preset_request("qwen2.5-7b", "h800", 16);
  Plan p = make_plan(req, "megatrain-code");
  ASSERT_TRUE(p.feasible) << p.infeasible_reason;
  EXPECT_TRUE(validate_plan(p).empty());
  for (int j = 0; j < p.num_layers; ++j) EXPECT_EQ(count_transfers(p, "w." + std::to_string(j), Link::H2D), 3) << j;
  // No look-ahead in backward: each backward compute follows a load window.
  for (size_t i = 1; i < p.windows.size(); ++i) {
    if (p.windows[i].kind == WindowKind::Backward || p.windows[i].kind == WindowKind::Recompute) {
      EXPECT_EQ(p.windows[i - 1].kind, WindowKind::Load);
    }
  }
  bool clip = false;
  for (const auto& h : p.windows[0].host) clip |= h.task == "clip";
  EXPECT_TRUE(clip);
  EXPECT_GT(p.predicted_step_s, make_plan(req, "megatrain").predicted_step_s);
}

TEST(Baselines, KeepAllAndRecomputeAll) {
  PlanRequest req = test::preset_request("qwen2.5-3b", "h800", 8);
  Plan keep = make_plan(req, "keep-all");
  Plan rc = make_plan(req, "recompute-all");
  ASSERT_TRUE(keep.feasible && rc.feasible);
  EXPECT_TRUE(validate_plan(keep).empty());
  EXPECT_TRUE(validate_plan(rc).empty());
  EXPECT_EQ(keep.tier_counts().recompute, 0);
  EXPECT_EQ(rc.tier_counts().recompute, keep.num_layers - 1);
  ASSERT_EQ(rc.blocks.size(), 1u);
  // Recomputing every layer once costs (L - 1) forwards, or weight loads when those are slower.
  CostModel cm = build_cost_model(req.model, req.hardware, req.batch, req.seq);
  double rc_window = std::max(cm.layer(0).forward_s, cm.layer(0).weight_bytes / cm.h2d_bw);
  EXPECT_NEAR(rc.predicted_step_s - keep.predicted_step_s, (keep.num_layers - 1) * rc_window, 1e-9);
}

TEST(Baselines, GreedyOffloadsWhenMemoryIsShort) {
  PlanRequest req = test::preset_request("qwen2.5-7b", "h800", 64);
  Plan keep = make_plan(req, "keep-all");
  ASSERT_TRUE(keep.feasible);
  req.gpu_cap_bytes = keep.predicted_peak.gpu - 10e9;  // 10 GB less than keep-all needs
  EXPECT_FALSE(make_plan(req, "keep-all").feasible);
  Plan g = make_plan(req, "greedy");
  ASSERT_TRUE(g.feasible) << g.infeasible_reason;
  EXPECT_TRUE(validate_plan(g).empty());
  EXPECT_GT(g.tier_counts().cpu, 0);
}

TEST(Planner, InfeasibleNamesTheShortBudgetAndLargestBatch) {
  PlanRequest req = test::preset_request("qwen2.5-7b", "rtx3090", 4096);
  Plan p = make_plan(req, "megatrain");
  ASSERT_FALSE(p.feasible);
  InfeasibleReport rep = diagnose_infeasible(req, "megatrain", p);
  EXPECT_NE(rep.shortage.find("compute-tier memory short by"), std::string::npos) << rep.shortage;
  EXPECT_GT(rep.largest_batch, 0);
  EXPECT_LT(rep.largest_batch, 4096);
  req.batch = rep.largest_batch;
  EXPECT_TRUE(make_plan(req, "megatrain").feasible);
  req.batch = rep.largest_batch + 1;
  EXPECT_FALSE(make_plan(req, "megatrain").feasible);
  EXPECT_NE(rep.message.find("largest batch that fits: " + std::to_string(rep.largest_batch)), std::string::npos);
}

// A MILP that proves infeasibility where the simple plans fit (two layers: the megatrain
// rule's peak is below the MILP's least, measured at 1.05-1.2x) says so and what to plan
// with, not that its time ran out.
TEST(Planner, InfeasibleMilpWhereTheSimplePlansFitSaysSo) {
  PlanRequest req = test::tiny_request(2, "h200", 2, 32);
  const Plan rule = make_plan(req, "megatrain");
  ASSERT_TRUE(rule.feasible) << rule.infeasible_reason;
  req.gpu_cap_bytes = rule.predicted_peak.gpu * 1.001;
  ASSERT_TRUE(make_plan(req, "megatrain").feasible);
  const Plan p = make_plan(req, "milp");
  if (p.feasible) GTEST_SKIP() << "the MILP fits the rule's peak here now: the case this test covers is gone";
  const InfeasibleReport rep = diagnose_infeasible(req, "milp", p);
  EXPECT_NE(rep.shortage.find("no budget is short for the simple plans"), std::string::npos) << rep.shortage;
  EXPECT_NE(rep.shortage.find("--policy megatrain"), std::string::npos) << rep.shortage;
  EXPECT_EQ(rep.shortage.find("time limit"), std::string::npos) << rep.shortage;
}

// A host whose 90% share cannot hold the state even with every pageable optimizer state
// on NVMe, though a plan's peak would fit the whole host: the report says so, not that no
// budget is short.
TEST(Planner, InfeasibleNamesTheHostStateShare) {
  PlanRequest req = test::preset_request("qwen2.5-3b", "rtx3090", 1);
  const CostModel cm = build_cost_model(req);
  req.nvme_state_layers = -1;
  PlanRequest all_paged = req;
  all_paged.nvme_state_layers = cm.num_layers - 2;
  const double floor = plan_state_paging(all_paged, cm, true).host_state_bytes;
  req.hardware.host_memory_bytes = floor * 1.02;  // the state fits the host, not its 90% share
  const Plan p = make_plan(req, "milp");
  ASSERT_FALSE(p.feasible);
  const InfeasibleReport rep = diagnose_infeasible(req, "milp", p);
  EXPECT_NE(rep.shortage.find("host memory short: the training state takes"), std::string::npos) << rep.shortage;
  EXPECT_NE(rep.shortage.find("over 90%"), std::string::npos) << rep.shortage;
}

}  // namespace
}  // namespace lt
