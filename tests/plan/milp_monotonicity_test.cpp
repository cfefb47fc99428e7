// Property: more memory or more bandwidth never yields a slower plan. Each variant relaxes
// one resource of a tight base case; the MILP solves to a tiny gap, and the variant's step
// may exceed the base's only by that gap.
#include <cstdio>
#include <functional>

#include <gtest/gtest.h>

#include "plan/cost_model.h"
#include "plan/planner.h"
#include "plan_test_util.h"

namespace lt {
namespace {

struct Variant {
  const char* name;
  std::function<void(PlanRequest&)> relax;
};

TEST(MilpMonotonicity, MoreMemoryOrBandwidthNeverSlower) {
  for (auto [layers, hardware, batch] : {std::tuple{8, "h800", 16}, std::tuple{10, "rtx3090", 8}}) {
    PlanRequest base = test::tiny_request(layers, hardware, batch);
    CostModel cm = build_cost_model(base.model, base.hardware, base.batch, base.seq);
    Plan keep = make_plan(base, "keep-all");
    // Tight: keep-all minus four boundaries, half a boundary of host, two of NVMe.
    base.gpu_cap_bytes = keep.predicted_peak.gpu - 4 * cm.boundary_bytes;
    base.cpu_act_budget_bytes = 0.5 * cm.boundary_bytes;
    base.nvme_act_budget_bytes = 2 * cm.boundary_bytes;
    base.target_gap = 1e-6;
    Plan p0 = make_plan(base, "milp");
    ASSERT_TRUE(p0.feasible) << p0.infeasible_reason;
    const double A = cm.boundary_bytes;
    std::vector<Variant> variants = {
        {"gpu cap +1 boundary", [&](PlanRequest& r) { r.gpu_cap_bytes += A; }},
        {"gpu cap +4 boundaries", [&](PlanRequest& r) { r.gpu_cap_bytes += 4 * A; }},
        {"cpu budget +2 boundaries", [&](PlanRequest& r) { r.cpu_act_budget_bytes += 2 * A; }},
        {"nvme budget +2 boundaries", [&](PlanRequest& r) { r.nvme_act_budget_bytes += 2 * A; }},
        {"h2d x2", [&](PlanRequest& r) { r.hardware.h2d_bw *= 2; }},
        {"d2h x2", [&](PlanRequest& r) { r.hardware.d2h_bw *= 2; }},
        {"nvme x2", [&](PlanRequest& r) {
           r.hardware.nvme_read_bw *= 2;
           r.hardware.nvme_write_bw *= 2;
         }},
        {"host optimizer x2", [&](PlanRequest& r) { r.hardware.host_optimizer_params_per_s *= 2; }},
    };
    for (const auto& v : variants) {
      PlanRequest r = base;
      v.relax(r);
      Plan p = make_plan(r, "milp");
      ASSERT_TRUE(p.feasible) << v.name;
      std::printf("[monotonicity L=%d %s] %-26s %.6f ms vs base %.6f ms\n", layers, hardware, v.name,
                  p.predicted_step_s * 1e3, p0.predicted_step_s * 1e3);
      // Tolerance: both solves' gaps plus 1e-9 relative round-off.
      EXPECT_LE(p.predicted_step_s, p0.predicted_step_s * (1 + p0.solve.mip_gap + p.solve.mip_gap + 1e-9)) << v.name;
    }
  }
}

}  // namespace
}  // namespace lt
