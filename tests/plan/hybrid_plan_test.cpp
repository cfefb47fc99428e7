// Plans of a Qwen3.5 hybrid model: they survive plan.json, and the plan's windows carry
// each layer's own costs (a DeltaNet layer's weights and compute differ from an attention
// layer's). The MILP against brute force on hybrid layers is in milp_brute_force_test.cpp.
#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "plan/cost_model.h"
#include "plan/plan_json.h"
#include "plan/planner.h"
#include "plan_test_util.h"
#include "sim/event_simulator.h"

namespace lt {
namespace {

TEST(HybridPlan, WindowsCarryEachLayersOwnCosts) {
  PlanRequest req = test::tiny_request(8, "h800", 8);
  req.model = test::tiny_hybrid_config(8);
  const CostModel cm = build_cost_model(req.model, req.hardware, req.batch, req.seq);
  ASSERT_NE(cm.layer(0).weight_bytes, cm.layer(3).weight_bytes);
  ASSERT_NE(cm.layer(0).forward_s, cm.layer(3).forward_s);
  for (const char* policy : {"keep-all", "megatrain", "milp"}) {
    SCOPED_TRACE(policy);
    const Plan p = make_plan(req, policy);
    ASSERT_TRUE(p.feasible) << p.infeasible_reason;
    for (const Window& w : p.windows) {
      if (w.kind != WindowKind::Forward) continue;
      EXPECT_DOUBLE_EQ(w.compute_s, cm.layer(w.layer).forward_s) << w.name;
      for (const Transfer& t : w.transfers) {
        if (t.tensor == "w." + std::to_string(w.layer + 1)) {
          EXPECT_DOUBLE_EQ(t.bytes, cm.layer(w.layer + 1).weight_bytes) << w.name;
        }
      }
    }
    // Weight and gradient slots hold the largest layer, each allocated where the plan uses
    // it: a weight slot by the window that loads it (a forward prefetches its successor's),
    // a gradient slot by its backward. Nothing is held for the whole step.
    EXPECT_DOUBLE_EQ(p.fixed_gpu_bytes, 0);
    const auto allocation = [](const Window& w, const std::string& t) {
      const auto it = std::find_if(w.alloc.begin(), w.alloc.end(), [&](const MemOp& m) { return m.tensor == t; });
      return it == w.alloc.end() ? -1.0 : it->bytes;
    };
    for (const Window& w : p.windows) {
      if (w.kind == WindowKind::Forward && w.layer + 1 < p.num_layers) {
        EXPECT_DOUBLE_EQ(allocation(w, "w." + std::to_string(w.layer + 1)), cm.slot_weight_bytes()) << w.name;
      }
      if (w.kind == WindowKind::Backward) {
        EXPECT_DOUBLE_EQ(allocation(w, "g." + std::to_string(w.layer)), cm.slot_grad_bytes()) << w.name;
      }
    }
    // An independent check of the step: the event-driven simulation.
    const EventSimResult ev = simulate_events(p);
    EXPECT_TRUE(ev.violations.empty()) << ev.violations.front();
    EXPECT_NEAR(ev.step_s, p.predicted_step_s, 0.05 * p.predicted_step_s);
  }
}

TEST(HybridPlan, SurvivesPlanJson) {
  PlanRequest req = test::tiny_request(8, "rtx3090", 4);
  req.model = test::tiny_hybrid_config(8);
  const Plan p = make_plan(req, "milp");
  ASSERT_TRUE(p.feasible) << p.infeasible_reason;
  const Plan back = plan_from_json(plan_to_json(p), "round trip");
  EXPECT_EQ(back.model.layer_kinds, p.model.layer_kinds);
  EXPECT_EQ(back.model.linear.value_dim(), p.model.linear.value_dim());
  EXPECT_EQ(back.predicted_step_s, p.predicted_step_s);
  EXPECT_EQ(plan_to_json(back), plan_to_json(p));
}

}  // namespace
}  // namespace lt
