// The LazyTrain paper's case: qwen3.6-27b on an H800, batch 72, seq 1024, 70 GB cap,
// activation budgets 15 GB host and 32 GB NVMe.
#include <cstdio>

#include <gtest/gtest.h>

#include "plan/plan_validate.h"
#include "plan/planner.h"
#include "plan_test_util.h"
#include "sim/simulator.h"

namespace lt {
namespace {

TEST(MilpPaperCase, Qwen27bOnH800) {
  PlanRequest req = test::preset_request("qwen3.6-27b", "h800", 72);
  req.gpu_cap_bytes = 70e9;
  req.cpu_act_budget_bytes = 15e9;
  req.nvme_act_budget_bytes = 32e9;
  req.time_limit_s = 10;
  req.target_gap = 0.005;
  Plan milp = make_plan(req, "milp");
  ASSERT_TRUE(milp.feasible) << milp.infeasible_reason;
  auto tc = milp.tier_counts();
  std::printf("[paper case] MILP: %.4f s/step, gap %.4f%%, solve %.2f s wall / %.2f s cpu, %d columns, %d rows; "
              "boundaries gpu %.2f cpu %.2f nvme %.2f recompute %.0f; %zu keep internals, %zu resident\n",
              milp.predicted_step_s, 100 * milp.solve.mip_gap, milp.solve.solve_s, milp.solve.solve_cpu_s,
              milp.solve.columns, milp.solve.rows, tc.gpu, tc.cpu, tc.nvme, tc.recompute, milp.keep_internals.size(),
              milp.resident_layers.size());
  // Acceptance: a proven gap <= 0.5% within 10 s on one core. CBC runs on one thread; on a
  // shared machine wall time can be 2-3x the CPU time, so the CPU time is what is bounded.
  EXPECT_LE(milp.solve.mip_gap, 0.005);
  EXPECT_LE(milp.solve.solve_cpu_s, 10.0);
  EXPECT_TRUE(validate_plan(milp).empty());
  // The MILP's objective is the evaluator's prediction for the plan it built (up to the
  // symmetry-breaking perturbation, 1e-7 of the step per term); where it streamed the
  // head, the plan returned may hold the head whole instead, predicting a step longer by
  // at most the target gap (plan/head_streaming.h: settle_head).
  EXPECT_GE(milp.predicted_step_s, milp.solve.objective_s * (1 - 1e-4));
  EXPECT_LE(milp.predicted_step_s, milp.solve.objective_s * (1 + req.target_gap + 1e-4));

  Plan mega = make_plan(req, "megatrain");
  ASSERT_TRUE(mega.feasible) << mega.infeasible_reason;
  SimResult sm = simulate_plan(milp), sg = simulate_plan(mega);
  EXPECT_TRUE(sm.violations.empty());
  EXPECT_TRUE(sg.violations.empty());
  double ratio = sg.step_s / sm.step_s;
  std::printf("[paper case] simulated step: megatrain %.3f s, MILP %.3f s, ratio %.3f (paper: 1.243)\n", sg.step_s,
              sm.step_s, ratio);
  // Acceptance: >= 1.24. Where it comes from: megatrain recomputes 48 of 64 boundaries
  // (0.75 extra forward per layer) and runs the host optimizer after backward (~4.9 s
  // exposed on this profile); the MILP recomputes nothing (NVMe and host hold what the
  // GPU cannot), keeps some layers' internals, and hides the optimizer under the forward.
  EXPECT_GE(ratio, 1.24);
}

}  // namespace
}  // namespace lt
