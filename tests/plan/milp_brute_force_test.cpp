// Brute force for L <= 6: every whole-tensor tier assignment of every boundary (gpu, cpu,
// nvme, recompute; with the ASAP transfer schedule and, for L = 4, every suffix of layers
// keeping their internals), replayed in the simulator. None may beat the MILP's plan by
// more than its reported gap.
#include <cstdio>
#include <functional>

#include <gtest/gtest.h>

#include "plan/cost_model.h"
#include "plan/default_schedule.h"
#include "plan/plan_builder.h"
#include "plan/plan_evaluate.h"
#include "plan/plan_validate.h"
#include "plan/planner.h"
#include "plan_test_util.h"
#include "sim/simulator.h"

namespace lt {
namespace {

struct BruteForceCase {
  int layers;
  const char* hardware;
  int64_t batch;
  bool enumerate_keep_internals;
  bool hybrid = false;  // Qwen3.5-style: Gated DeltaNet layers with every 4th full attention
  // Data-parallel ranks (plan/data_parallel.h) on a link that moves a layer's gradient in
  // about its backward's time.
  int ranks = 1;
  bool sharded = false;
  bool slot_sums = false;  // the ranks sum in the compute-tier slots, before the drains
};

void run_case(const BruteForceCase& bc) {
  PlanRequest req = test::tiny_request(bc.layers, bc.hardware, bc.batch);
  if (bc.hybrid) req.model = test::tiny_hybrid_config(bc.layers);
  if (bc.ranks > 1) {
    const CostModel one = build_cost_model(req);
    req.hardware.network_bw = 4 * one.layer(0).params / one.layer(0).backward_s;
    req.ranks = bc.ranks;
    req.shard_optimizer = bc.sharded;
    req.slot_sums = bc.slot_sums;
  }
  CostModel cm = build_cost_model(req);
  // Budgets that force choices: the compute tier holds L - 3 boundaries less than keep-all
  // needs at its peak (a backward window, which also holds two gradient slots and the
  // inputs it reads, so that no plan sheds much more); host and NVMe hold one or two each.
  Plan keep = make_plan(req, "keep-all");
  req.gpu_cap_bytes = keep.predicted_peak.gpu - (bc.layers - 3) * cm.boundary_bytes;
  req.cpu_act_budget_bytes = 1.5 * cm.boundary_bytes;
  req.nvme_act_budget_bytes = 2.5 * cm.boundary_bytes;
  req.target_gap = 1e-6;
  Plan milp = make_plan(req, "milp");
  ASSERT_TRUE(milp.feasible) << milp.infeasible_reason;
  ASSERT_TRUE(validate_plan(milp).empty());
  const double milp_s = simulate_plan(milp).step_s;

  const int L = bc.layers;
  Decisions d = all_gpu_decisions(L, "brute-force");
  int tried = 0, feasible = 0;
  double best = 1e300;
  std::string best_desc;
  std::function<void(int)> rec = [&](int b) {
    if (b == L) {
      for (int b2 = 0; b2 < L; ++b2)
        if (d.boundaries[b2].nvme > 0 && !asap_nvme_possible(d.boundaries, b2)) return;
      int suffixes = bc.enumerate_keep_internals ? L : 0;
      for (int keep_from = L; keep_from >= L - suffixes; --keep_from) {
        for (int j = 0; j < L; ++j) d.keep_internals[j] = j >= keep_from;
        assign_asap_traffic(d, cm);
        Plan p = build_plan(req, cm, d);
        evaluate_plan(p);
        ++tried;
        if (!validate_plan(p).empty()) continue;
        ++feasible;
        double s = simulate_plan(p).step_s;
        if (s < best) {
          best = s;
          best_desc.clear();
          for (int i = 0; i < L; ++i) {
            const auto& bp = d.boundaries[i];
            best_desc += bp.recompute ? 'r' : bp.cpu > 0 ? 'c' : bp.nvme > 0 ? 'n' : 'g';
          }
          best_desc += " keep internals from " + std::to_string(keep_from);
        }
      }
      return;
    }
    for (int tier = 0; tier < 4; ++tier) {
      if (b == 0 && tier == 3) continue;  // boundary 0 is always stored
      BoundaryPlacement bp;
      bp.recompute = tier == 3;
      bp.gpu = tier == 0;
      bp.cpu = tier == 1;
      bp.nvme = tier == 2;
      if (bp.recompute) bp.gpu = 0;
      d.boundaries[b] = bp;
      rec(b + 1);
    }
    d.boundaries[b] = BoundaryPlacement{};
  };
  rec(0);
  std::printf("[brute force L=%d %s ranks=%d%s%s] %d assignments, %d feasible; best %.6f ms (%s); MILP %.6f ms, gap %.2e\n",
              L, bc.hardware, bc.ranks, bc.sharded ? " sharded" : "", bc.slot_sums ? " slot sums" : "", tried, feasible,
              best * 1e3, best_desc.c_str(),
              milp_s * 1e3, milp.solve.mip_gap);
  ASSERT_GT(feasible, 0);
  // Tolerance: the reported gap, plus 1e-9 relative for round-off in the plan's bytes.
  EXPECT_LE(milp_s, best * (1 + milp.solve.mip_gap + 1e-9));
}

TEST(MilpBruteForce, FourLayersWithKeptInternals) { run_case({4, "h800", 8, true}); }
TEST(MilpBruteForce, FiveLayersRtx3090) { run_case({5, "rtx3090", 16, false}); }
TEST(MilpBruteForce, SixLayers) { run_case({6, "h800", 32, false}); }
// Layers that differ (DeltaNet layers are larger and save more than attention ones): the
// MILP's per-layer costs, slots sized for the largest layer.
TEST(MilpBruteForce, FiveHybridLayersWithKeptInternals) { run_case({5, "h800", 16, true, true}); }
TEST(MilpBruteForce, SixHybridLayersRtx3090) { run_case({6, "rtx3090", 8, false, true}); }
// Two data-parallel ranks: the gradient sums (and, sharded, the weight broadcasts and the
// rank's update in P0) in every plan.
TEST(MilpBruteForce, FourLayersOnTwoRanks) { run_case({4, "h800", 8, true, false, 2, false}); }
TEST(MilpBruteForce, FiveLayersOnTwoRanksSharded) { run_case({5, "rtx3090", 16, false, false, 2, true}); }
// Summed in the compute-tier slots: each drain waits for its sum.
TEST(MilpBruteForce, FourLayersOnTwoRanksSlotSums) { run_case({4, "h800", 8, true, false, 2, false, true}); }
TEST(MilpBruteForce, FiveLayersOnTwoRanksShardedSlotSums) { run_case({5, "rtx3090", 16, false, false, 2, true, true}); }

}  // namespace
}  // namespace lt
