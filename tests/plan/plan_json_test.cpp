#include "plan/plan_json.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "plan/plan_evaluate.h"
#include "plan/planner.h"
#include "plan_test_util.h"
#include "test_util.h"

namespace lt {
namespace {

TEST(PlanJson, RoundTrip) {
  PlanRequest req = test::tiny_request(6, "h800", 8);
  req.gpu_cap_bytes = 1.0e9;  // tight enough that tiers and transfers appear
  Plan p = make_plan(req, "milp");
  ASSERT_TRUE(p.feasible) << p.infeasible_reason;
  test::TempDir dir("plan_json");
  std::string path = dir.str() + "/plan.json";
  save_plan(p, path);
  Plan q = load_plan(path);
  EXPECT_EQ(q.policy, "milp");
  EXPECT_EQ(q.windows.size(), p.windows.size());
  EXPECT_EQ(q.blocks, p.blocks);
  EXPECT_EQ(q.resident_layers, p.resident_layers);
  EXPECT_EQ(q.model.hidden_size, p.model.hidden_size);
  EXPECT_NEAR(predicted_step_seconds(q), p.predicted_step_s, 1e-12 * p.predicted_step_s);
  EXPECT_EQ(plan_to_json(q).dump(), plan_to_json(p).dump());
  nlohmann::json s = plan_summary_json(p);
  for (const char* k : {"feasible", "policy", "batch", "seq", "predicted_step_s", "tokens_per_s", "tflops", "solve_s",
                        "mip_gap", "boundaries", "peak_bytes"})
    EXPECT_TRUE(s.contains(k)) << k;
  for (const char* k : {"gpu", "cpu", "nvme", "recompute"}) EXPECT_TRUE(s["boundaries"].contains(k)) << k;
  for (const char* k : {"gpu", "cpu", "nvme"}) EXPECT_TRUE(s["peak_bytes"].contains(k)) << k;
}

TEST(PlanJson, RejectsForeignJson) {
  EXPECT_THROW(plan_from_json(nlohmann::json{{"format", "other"}}, "test"), Error);
  EXPECT_THROW(plan_from_json(nlohmann::json{{"format", "lazytrain-plan"}, {"version", 1}}, "test"), Error);
}

}  // namespace
}  // namespace lt
