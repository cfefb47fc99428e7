// For every policy and preset, the simulator's step time is within 2% of the plan's
// predicted_step_s (acceptance), and its peaks are within the plan's.
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>

#include "plan/planner.h"
#include "plan/plan_validate.h"
#include "../plan/plan_test_util.h"
#include "sim/simulator.h"

namespace lt {
namespace {

TEST(SimVsPredicted, EveryPolicyAndPreset) {
  const char* presets[] = {"qwen2.5-3b", "qwen2.5-7b", "qwen2.5-14b", "qwen3.6-27b", "llama-3.1-8b", "llama-3.1-70b"};
  for (const char* model : presets) {
    PlanRequest req = test::preset_request(model, "h800", 8);
    req.time_limit_s = 5;  // consistency, not optimality, is checked here
    req.target_gap = 0.01;
    for (const std::string& policy : plan_policies()) {
      Plan p = make_plan(req, policy);
      if (p.windows.empty()) continue;  // the MILP found no plan: nothing to replay
      SimResult r = simulate_plan(p);
      double rel = std::fabs(r.step_s - p.predicted_step_s) / p.predicted_step_s;
      std::printf("[sim vs predicted] %-14s %-15s predicted %9.4f s simulated %9.4f s (%.1e) peak gpu %.2f/%.2f GB %s\n",
                  model, policy.c_str(), p.predicted_step_s, r.step_s, rel, r.peak.gpu / 1e9,
                  p.predicted_peak.gpu / 1e9, p.feasible ? "" : "(infeasible)");
      EXPECT_LE(rel, 0.02) << model << " " << policy;
      // Tolerance 1e-6 relative: the simulator sums the same bytes in another order.
      EXPECT_LE(r.peak.gpu, p.predicted_peak.gpu * (1 + 1e-6)) << model << " " << policy;
      EXPECT_LE(r.peak.cpu, p.predicted_peak.cpu * (1 + 1e-6)) << model << " " << policy;
      if (p.feasible) {
        EXPECT_TRUE(validate_plan(p).empty()) << model << " " << policy;
        EXPECT_TRUE(r.violations.empty()) << model << " " << policy << ": " << r.violations.front();
      }
    }
  }
}

}  // namespace
}  // namespace lt
