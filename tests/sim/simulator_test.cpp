#include "sim/simulator.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../plan/plan_test_util.h"
#include "plan/cost_model.h"
#include "plan/plan_evaluate.h"
#include "plan/planner.h"
#include "sim/chrome_trace.h"
#include "sim/svg_timeline.h"

namespace lt {
namespace {

// A tiny MILP plan under tight budgets, so that it offloads to host and NVMe. The cap is
// keep-all's peak, head slots included, less three boundaries; the host holds one.
Plan tight_plan() {
  PlanRequest req = test::tiny_request(6, "h800", 8);
  CostModel cm = build_cost_model(req.model, req.hardware, req.batch, req.seq);
  Plan keep = make_plan(req, "keep-all");
  req.gpu_cap_bytes = keep.predicted_peak.gpu - 3 * cm.boundary_bytes;
  req.cpu_act_budget_bytes = 1.0 * cm.boundary_bytes;
  req.nvme_act_budget_bytes = 3 * cm.boundary_bytes;
  return make_plan(req, "milp");
}

TEST(Simulator, ReplaysAValidPlanExactly) {
  Plan p = tight_plan();
  ASSERT_TRUE(p.feasible) << p.infeasible_reason;
  auto tc = p.tier_counts();
  ASSERT_GT(tc.cpu, 0) << "the case should exercise offloading to host memory";
  ASSERT_GT(tc.nvme, 0) << "the case should exercise offloading to NVMe";
  SimResult r = simulate_plan(p);
  EXPECT_TRUE(r.violations.empty()) << r.violations.front();
  // Window semantics make the replay equal to the window-max prediction for a valid plan;
  // 1e-9 relative covers summation order.
  EXPECT_NEAR(r.step_s, p.predicted_step_s, 1e-9 * p.predicted_step_s);
  EXPECT_NEAR(r.compute_idle_s, r.step_s - r.compute_busy_s, 1e-12);
  EXPECT_LE(r.exposed_comm_s + r.exposed_host_s, r.compute_idle_s + 1e-12);
  EXPECT_LE(r.peak.gpu, p.gpu_cap_bytes);
}

TEST(Simulator, ChainInOneWindowSerializes) {
  Plan p = tight_plan();
  ASSERT_TRUE(p.feasible);
  // Move the first NVMe write into the window of its D2H: the write must wait for the copy,
  // so the window (and the step) gets longer than the plan's window-max prediction.
  bool moved = false;
  for (size_t i = 0; i < p.windows.size() && !moved; ++i)
    for (auto& t : p.windows[i].transfers)
      if (t.link == Link::D2H && t.tensor.find(".nvme") != std::string::npos) {
        for (size_t k = i + 1; k < p.windows.size() && !moved; ++k)
          for (size_t m = 0; m < p.windows[k].transfers.size(); ++m)
            if (p.windows[k].transfers[m].link == Link::NvmeWrite && p.windows[k].transfers[m].tensor == t.tensor) {
              Transfer w = p.windows[k].transfers[m];
              p.windows[k].transfers.erase(p.windows[k].transfers.begin() + static_cast<long>(m));
              p.windows[i].transfers.push_back(w);
              moved = true;
              break;
            }
        break;
      }
  ASSERT_TRUE(moved) << "the plan has no NVMe traffic";
  SimResult r = simulate_plan(p);
  EXPECT_GT(r.step_s, predicted_step_seconds(p) * (1 + 1e-9));
}

TEST(Simulator, MissingReloadIsAViolation) {
  Plan p = tight_plan();
  ASSERT_TRUE(p.feasible);
  bool removed = false;
  for (auto& w : p.windows) {
    for (size_t m = 0; m < w.transfers.size(); ++m)
      if (w.transfers[m].link == Link::H2D && w.transfers[m].tensor.rfind("a.", 0) == 0) {
        w.transfers.erase(w.transfers.begin() + static_cast<long>(m));
        removed = true;
        break;
      }
    if (removed) break;
  }
  ASSERT_TRUE(removed);
  EXPECT_FALSE(simulate_plan(p).violations.empty());
}

TEST(Simulator, OtherHardwareRetimesCompute) {
  PlanRequest req = test::preset_request("qwen2.5-7b", "h800", 16);
  Plan p = make_plan(req, "megatrain");
  HardwareProfile slow = p.hardware;
  slow.name = "h800-half";
  slow.efficiency /= 2;
  SimResult fast = simulate_plan(p), half = simulate_plan(p, slow);
  EXPECT_GT(half.step_s, 1.5 * fast.step_s);
}

TEST(Simulator, TraceAndSvg) {
  Plan p = tight_plan();
  SimResult r = simulate_plan(p);
  nlohmann::json t = chrome_trace_json(r, p);
  ASSERT_TRUE(t.contains("traceEvents"));
  int complete = 0, lanes = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "X") {
      ++complete;
      EXPECT_GE(e["dur"].get<double>(), 0);
    }
    if (e["ph"] == "M" && e["name"] == "thread_name") ++lanes;
  }
  EXPECT_EQ(complete, static_cast<int>(r.events.size()));
  EXPECT_EQ(lanes, 6);  // compute, h2d, d2h, nvme, host, net
  std::string svg = svg_timeline(r, p);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("boundary 0:"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

}  // namespace
}  // namespace lt
