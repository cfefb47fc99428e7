// Optimizer-state paging in the planner (plan/state_paging.h): how many layers page and
// which, what the plan moves and when, and that the simulator and the validator agree.
#include "plan/state_paging.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "plan/baselines.h"
#include "plan/cost_model.h"
#include "plan/plan_json.h"
#include "plan/plan_validate.h"
#include "plan/planner.h"
#include "plan_test_util.h"
#include "sim/event_simulator.h"
#include "sim/simulator.h"

namespace lt {
namespace {

constexpr int kLayers = 8;

PlanRequest request() {
  PlanRequest req = test::tiny_request(kLayers, "h800", 4);
  req.time_limit_s = 5;
  return req;
}

CostModel costs(const PlanRequest& req) { return build_cost_model(req.model, req.hardware, req.batch, req.seq); }

// The host state with k layers paged, counted independently of the planner: k states
// leave, min(k, 3) staging slots stay (reads run one window before the update, writes one
// after, so three consecutive layers overlap).
double host_state_with(const CostModel& cm, int k) {
  return cm.host_state_bytes - (k - std::min(k, 3)) * cm.layer(0).state_bytes;
}

// Host memory whose 90% (what the planner gives state and activations) falls `short_by`
// layer states below the unpaged host state.
PlanRequest short_host(double short_by) {
  PlanRequest req = request();
  const CostModel cm = costs(req);
  req.hardware.host_memory_bytes = (cm.host_state_bytes - short_by * cm.layer(0).state_bytes) / 0.9;
  return req;
}

TEST(StatePaging, PagesNothingWhenTheHostHoldsEverything) {
  const PlanRequest req = request();
  const StatePaging p = plan_state_paging(req, costs(req), true);
  EXPECT_EQ(p.count, 0);
  EXPECT_DOUBLE_EQ(p.host_state_bytes, costs(req).host_state_bytes);
  EXPECT_TRUE(make_plan(req, "milp").nvme_state_layers.empty());
}

TEST(StatePaging, PagesTheFewestTopLayersThatFit) {
  for (double short_by : {0.2, 1.0, 2.5}) {
    const PlanRequest req = short_host(short_by);
    const CostModel cm = costs(req);
    const StatePaging p = plan_state_paging(req, cm, true);
    const double room = 0.9 * req.hardware.host_memory_bytes;
    // The smallest k that fits, found by brute force over 0..L-2.
    int want = -1;
    for (int k = 0; k <= kLayers - 2 && want < 0; ++k)
      if (host_state_with(cm, k) <= room) want = k;
    ASSERT_GE(want, 4) << "paging fewer than four layers frees nothing";
    EXPECT_EQ(p.count, want) << "short by " << short_by;
    EXPECT_NEAR(p.host_state_bytes, host_state_with(cm, want), 1e-6 * cm.host_state_bytes);
    for (int j = 0; j < kLayers; ++j) EXPECT_EQ(p.on_nvme[j], j >= kLayers - want) << "layer " << j;
  }
}

TEST(StatePaging, ForcedCountAndItsLimit) {
  PlanRequest req = request();
  req.nvme_state_layers = 5;
  const StatePaging p = plan_state_paging(req, costs(req), true);
  EXPECT_EQ(p.count, 5);
  EXPECT_EQ(p.staging_slots, 3);
  EXPECT_FALSE(plan_state_paging(req, costs(req), false).count) << "no paging without the lazy optimizer";
  req.nvme_state_layers = kLayers - 1;  // layers 0 and 1 have no window to read in before their update
  try {
    plan_state_paging(req, costs(req), true);
    FAIL() << "expected an lt::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 6"), std::string::npos) << e.what();
  }
}

// The MILP plan of a host that is short: the MILP chooses which layers page and when their
// states move (plan_decisions.h), so it pages no more layers than the rule, brings the host
// state within its share, reads each paged state in a window before every part of the
// layer's update and writes it back in a window after; the simulator replays it without a
// violation and as predicted, and the NVMe peak counts the states.
TEST(StatePaging, MilpPlanMovesStatesAroundTheirUpdates) {
  PlanRequest req = short_host(1.0);
  const CostModel cm = costs(req);
  const Plan p = make_plan(req, "milp");
  ASSERT_TRUE(p.feasible) << p.infeasible_reason;
  ASSERT_FALSE(p.nvme_state_layers.empty());
  EXPECT_LE(p.nvme_state_layers.size(), static_cast<size_t>(plan_state_paging(req, cm, true).count));
  EXPECT_TRUE(validate_plan(p).empty()) << validate_plan(p).front();
  EXPECT_DOUBLE_EQ(p.state_bytes_per_layer, cm.layer(0).state_bytes);
  EXPECT_LE(p.host_state_bytes, 0.9 * req.hardware.host_memory_bytes);
  for (int j : p.nvme_state_layers) {
    const std::string os = "os." + std::to_string(j), target = "layer." + std::to_string(j);
    int read = -1, write = -1, first_update = -1, last_update = -1;
    for (int w = 0; w < static_cast<int>(p.windows.size()); ++w) {
      for (const Transfer& t : p.windows[w].transfers) {
        if (t.tensor != os) continue;
        EXPECT_DOUBLE_EQ(t.bytes, cm.layer(0).state_bytes);
        (t.link == Link::NvmeRead ? read : write) = w;
      }
      for (const HostTask& h : p.windows[w].host)
        if (h.task == "optimizer" && h.target == target) {
          if (first_update < 0) first_update = w;
          last_update = w;
        }
    }
    ASSERT_GE(read, 0) << target;
    EXPECT_LT(read, first_update) << target;
    EXPECT_GT(write, last_update) << target;
  }
  const SimResult r = simulate_plan(p);
  EXPECT_TRUE(r.violations.empty()) << r.violations.front();
  EXPECT_NEAR(r.step_s, p.predicted_step_s, 1e-9 * p.predicted_step_s);
  EXPECT_GE(p.predicted_peak.nvme, p.nvme_state_bytes());
  EXPECT_GE(r.peak.nvme, p.nvme_state_bytes() * (1 - 1e-12));
  // The JSON keeps the paging.
  const Plan q = plan_from_json(plan_to_json(p), "test");
  EXPECT_EQ(q.nvme_state_layers, p.nvme_state_layers);
  EXPECT_DOUBLE_EQ(q.state_bytes_per_layer, p.state_bytes_per_layer);
}

// The request allows the masters (page_master) and the gradients (page_grads) to page
// with a layer's state; the plan pages the fewest parts with which the host fits.
PlanRequest allowing(PlanRequest req, bool master, bool grads) {
  req.page_master = master;
  req.page_grads = grads;
  return req;
}

// Whether the rule's paging with these parts brings the host state within its share.
bool fits_with(const PlanRequest& req, bool master, bool grads) {
  const PlanRequest r = allowing(req, master, grads);
  return plan_state_paging(r, build_cost_model(r), true).host_state_bytes <= 0.9 * r.hardware.host_memory_bytes;
}

// Both simulators replay the plan without a violation, the window simulator at its
// predicted step.
void expect_replayed(const Plan& p) {
  const SimResult r = simulate_plan(p);
  EXPECT_TRUE(r.violations.empty()) << r.violations.front();
  EXPECT_NEAR(r.step_s, p.predicted_step_s, 1e-9 * p.predicted_step_s);
  const EventSimResult ev = simulate_events(p);
  EXPECT_TRUE(ev.violations.empty()) << ev.violations.front();
}

// A plan's paged layers move what their parts say: os.<j> reads state + masters +
// gradients (those of the parts the layer pages) before the update and writes back state
// + masters after it, gs.<j> writes the gradients in a window after their drain (counted
// here from the shapes: a llama layer's matrices are all its parameters but its two
// norms' (hidden each)); the validator and both simulators agree with it, and the JSON
// keeps the parts. `master`, `grads`: whether any layer's masters, gradients page (the
// parts make_plan let page); the slot is as large as all of them.
void expect_paged_parts(const Plan& p, const PlanRequest& req, bool master, bool grads) {
  ASSERT_TRUE(p.feasible) << p.infeasible_reason;
  EXPECT_EQ(!p.nvme_master_layers.empty(), master);
  EXPECT_EQ(!p.nvme_grad_layers.empty(), grads);
  ASSERT_FALSE(p.nvme_state_layers.empty());
  const CostModel cm = costs(req);
  const double params = cm.layer(0).params, C = static_cast<double>(req.model.hidden_size);
  const double state = cm.layer(0).state_bytes, masters = 4 * (params - 2 * C);
  const double g = req.hardware.grad_bytes * params;
  EXPECT_DOUBLE_EQ(p.state_bytes_per_layer, state + (master ? masters : 0) + (grads ? g : 0));
  EXPECT_TRUE(validate_plan(p).empty()) << validate_plan(p).front();
  EXPECT_LE(p.host_state_bytes, 0.9 * req.hardware.host_memory_bytes);
  for (int j : p.nvme_state_layers) {
    const double back = state + (p.master_paged(j) ? masters : 0), gj = p.grads_paged(j) ? g : 0;
    int drained = -1, grad_write = -1;
    for (int w = 0; w < static_cast<int>(p.windows.size()); ++w)
      for (const Transfer& t : p.windows[w].transfers) {
        if (t.tensor == "os." + std::to_string(j)) {
          EXPECT_DOUBLE_EQ(t.bytes, t.link == Link::NvmeRead ? back + gj : back)
              << t.tensor << " in " << p.windows[w].name;
        }
        if (t.tensor == "g." + std::to_string(j) && t.link == Link::D2H) drained = w;
        if (t.tensor == "gs." + std::to_string(j)) {
          EXPECT_EQ(t.link, Link::NvmeWrite);
          EXPECT_DOUBLE_EQ(t.bytes, gj);
          grad_write = w;
        }
      }
    if (p.grads_paged(j)) EXPECT_GT(grad_write, drained) << "layer " << j << "'s gradients written before their drain";
    else EXPECT_LT(grad_write, 0) << "layer " << j << "'s gradients written without paging";
  }
  expect_replayed(p);
  const Plan q = plan_from_json(plan_to_json(p), "test");
  EXPECT_EQ(q.nvme_master_layers, p.nvme_master_layers);
  EXPECT_EQ(q.nvme_grad_layers, p.nvme_grad_layers);
}

// With the masters allowed, a host that the states alone fit pages states alone; one
// they cannot fit pages the masters with them (each layer then frees as much again and
// more).
TEST(StatePaging, PagesTheMastersOnlyWhereTheStatesDoNotFit) {
  const PlanRequest roomy = allowing(short_host(1.0), true, false);
  ASSERT_TRUE(fits_with(roomy, false, false));
  expect_paged_parts(make_plan(roomy, "milp"), roomy, false, false);
  const PlanRequest tight = allowing(short_host(4.0), true, false);
  ASSERT_FALSE(fits_with(tight, false, false)) << "the states alone fit";
  ASSERT_TRUE(fits_with(tight, true, false));
  EXPECT_FALSE(make_plan(allowing(tight, false, false), "milp").feasible);
  expect_paged_parts(make_plan(tight, "milp"), tight, true, false);
  for (const char* policy : {"keep-all", "greedy"})
    expect_paged_parts(make_plan(tight, policy), tight, true, false);
}

// A host that the states and masters cannot fit pages the gradients too: written to NVMe
// after their drain, read back with the state.
TEST(StatePaging, PagesTheGradientsWhereTheMastersDoNotFit) {
  PlanRequest req = test::tiny_request(16, "h800", 4);
  req.time_limit_s = 5;
  const CostModel cm = costs(req);
  req.hardware.host_memory_bytes = (cm.host_state_bytes - 36 * cm.layer(0).state_bytes) / 0.9;
  req = allowing(req, true, true);
  ASSERT_FALSE(fits_with(req, true, false)) << "the states and masters fit";
  ASSERT_TRUE(fits_with(req, true, true));
  expect_paged_parts(make_plan(req, "milp"), req, true, true);
  expect_paged_parts(make_plan(req, "keep-all"), req, true, true);
}

// The MILP chooses the parts per layer: with every layer that can page paging its state
// (asked), and a host that needs four and a half layers' masters more, the masters of
// five or more layers page, but not of all of them (each part paged moves bytes and
// costs time; the fewest do), given the time to leave the rule's start.
TEST(StatePaging, MilpPagesTheMastersOfSomeLayersOnly) {
  PlanRequest req = allowing(test::tiny_request(16, "h800", 4), true, false);
  req.time_limit_s = 5;
  req.nvme_state_layers = req.model.num_layers - 2;
  const CostModel cm = build_cost_model(req);  // with the masters' bytes
  StatePaging states_alone = plan_state_paging(req, cm, true);  // the slots as large as the masters need
  page_parts(states_alone, cm, std::vector<bool>(16, false), std::vector<bool>(16, false));
  const double masters = cm.layer(2).master_bytes;
  ASSERT_GT(masters, 0);
  req.hardware.host_memory_bytes = (states_alone.host_state_bytes - 4.5 * masters) / 0.9;
  Plan p = make_plan(req, "milp");
  std::printf("the solve: %s after %.2f CPU s, masters of %zu layers paged\n", p.solve.status.c_str(),
              p.solve.solve_cpu_s, p.nvme_master_layers.size());
  if (p.feasible && p.nvme_master_layers.size() == p.nvme_state_layers.size() && p.solve.status != "optimal") {
    // Its limit counts CPU seconds: a loaded or sanitized machine's solve can stop, not
    // proven, at the rule's start, which pages every layer's masters (seen in CI). Then
    // once more, longer.
    req.time_limit_s = 30;
    p = make_plan(req, "milp");
    std::printf("again within 30 CPU s: %s after %.2f, masters of %zu layers paged\n", p.solve.status.c_str(),
                p.solve.solve_cpu_s, p.nvme_master_layers.size());
  }
  expect_paged_parts(p, req, true, false);
  EXPECT_EQ(p.nvme_state_layers.size(), 14u);
  EXPECT_GE(p.nvme_master_layers.size(), 5u);
  EXPECT_LT(p.nvme_master_layers.size(), p.nvme_state_layers.size()) << "every paged layer's masters page";
}

// A plan written before the parts paged per layer says "paged_master"/"paged_grads":
// true pages that part of every paged layer, false (or absent) none.
TEST(StatePaging, PlansWithPartsForAllLayersStillLoad) {
  PlanRequest req = test::tiny_request(16, "h800", 4);
  req.nvme_state_layers = 5;
  req = allowing(req, true, true);
  const Plan p = make_plan(req, "keep-all");
  ASSERT_TRUE(p.feasible) << p.infeasible_reason;
  for (bool master : {false, true})
    for (bool grads : {false, true}) {
      nlohmann::json j = plan_to_json(p);
      j["optimizer"].erase("nvme_master_layers");
      j["optimizer"].erase("nvme_grad_layers");
      j["optimizer"]["paged_master"] = master;
      j["optimizer"]["paged_grads"] = grads;
      const Plan q = plan_from_json(j, "test");
      EXPECT_EQ(q.nvme_master_layers, master ? p.nvme_state_layers : std::vector<int>{});
      EXPECT_EQ(q.nvme_grad_layers, grads ? p.nvme_state_layers : std::vector<int>{});
    }
}

// Parts per layer: a layer that keeps its masters or gradients on the host reads and
// writes back less (valid, replayed); gradients paged without their layer's masters while
// other layers' page, or a bf16 copy without them, is caught.
TEST(StatePaging, PartsPerLayerAreValidatedLayerByLayer) {
  PlanRequest req = test::tiny_request(16, "h800", 4);
  req.nvme_state_layers = 6;
  req = allowing(req, true, true);
  req.page_copy = true;
  const Plan all = plan_keep_all(req, build_cost_model(req));  // every part as asked (make_plan takes the fewest)
  ASSERT_TRUE(all.feasible) << all.infeasible_reason;
  ASSERT_EQ(all.nvme_grad_layers, all.nvme_state_layers);
  ASSERT_FALSE(all.nvme_copy_layers.empty());
  const int j = all.nvme_copy_layers.front(), k = all.nvme_state_layers.back();
  Plan mixed = all;
  test::keep_on_host(mixed, j, /*masters=*/true);
  test::keep_on_host(mixed, k, /*masters=*/false);
  EXPECT_TRUE(validate_plan(mixed).empty()) << validate_plan(mixed).front();
  EXPECT_FALSE(mixed.copy_paged(j));
  EXPECT_TRUE(mixed.master_paged(k) && !mixed.grads_paged(k));
  EXPECT_LT(paged_layer_bytes(mixed, j).read, paged_layer_bytes(all, j).read);
  EXPECT_LT(paged_layer_bytes(mixed, k).read, paged_layer_bytes(all, k).read);
  EXPECT_TRUE(simulate_events(mixed).violations.empty());
  const auto has = [](const std::vector<std::string>& problems, const std::string& what) {
    const auto names = [&](const std::string& p) { return p.find(what) != std::string::npos; };
    return std::any_of(problems.begin(), problems.end(), names);
  };
  Plan grads_alone = all;
  grads_alone.nvme_master_layers.erase(std::find(grads_alone.nvme_master_layers.begin(),
                                                 grads_alone.nvme_master_layers.end(), k));
  EXPECT_TRUE(has(validate_plan(grads_alone), "gradients of layer " + std::to_string(k) + ": paged, but its masters"));
  Plan copy_alone = all;
  copy_alone.nvme_master_layers.erase(std::find(copy_alone.nvme_master_layers.begin(),
                                                copy_alone.nvme_master_layers.end(), j));
  EXPECT_TRUE(has(validate_plan(copy_alone), "bf16 copy of layer " + std::to_string(j) + ": paged, but its masters"));
}

void expect_paged_copies(const Plan& p, const PlanRequest& req, double copy);

// A host that the states, masters and gradients cannot fit pages the bf16 copies too,
// under a rule policy and the MILP alike (each copy its matrices' bf16 bytes).
TEST(StatePaging, PagesTheCopiesWhereTheGradientsDoNotFit) {
  PlanRequest req = test::tiny_request(16, "h800", 4);
  req = allowing(req, true, true);
  PlanRequest all = req;
  all.nvme_state_layers = req.model.num_layers - 2;
  const double least = plan_state_paging(all, build_cost_model(all), true).host_state_bytes;
  const CostModel cm = costs(req);
  const double copy = 2 * (cm.layer(0).params - 2 * static_cast<double>(req.model.hidden_size));
  req.hardware.host_memory_bytes = (least - 4.5 * copy) / 0.9;  // 12 copies page, 3 stage
  ASSERT_FALSE(fits_with(req, true, true)) << "the states, masters and gradients fit";
  req.page_copy = true;
  for (const char* policy : {"keep-all", "milp"}) {
    SCOPED_TRACE(policy);
    expect_paged_copies(make_plan(req, policy), req, copy);
  }
}

// Where the MILP cannot keep the state within its share of the host but the keep-all plan
// (every copy that may page paged) fits the host, the diagnosis says so and names the
// policy; below that, it gives keep-all's shortage, the smallest (the least compute-tier
// plans recompute, and a recomputed layer's copy cannot page). The 27B hybrid on an RTX
// 3090 with 50 and 40 GB of host memory.
TEST(StatePaging, DiagnosisPointsToKeepAllWhereOnlyItFits) {
  PlanRequest req = test::preset_request("qwen3.6-27b", "rtx3090", 2);
  req.page_master = req.page_grads = req.page_copy = true;
  req.hardware.host_memory_bytes = 50e9;
  ASSERT_TRUE(make_plan(req, "keep-all").feasible);
  const Plan milp = make_plan(req, "milp");
  ASSERT_FALSE(milp.feasible) << "the MILP fits 50 GB";
  const InfeasibleReport rep = diagnose_infeasible(req, "milp", milp);
  EXPECT_NE(rep.shortage.find("plan with --policy keep-all"), std::string::npos) << rep.shortage;
  req.hardware.host_memory_bytes = 40e9;
  const Plan keep = make_plan(req, "keep-all");
  ASSERT_FALSE(keep.feasible);
  const InfeasibleReport shorter = diagnose_infeasible(req, "milp", make_plan(req, "milp"));
  EXPECT_EQ(shorter.shortage.rfind("host memory short by", 0), 0u) << shorter.shortage;
  EXPECT_NE(shorter.shortage.find("needs " + fmt_gb(keep.predicted_peak.cpu)), std::string::npos) << shorter.shortage;
}

// A plan's paged bf16 copies: of layers that may page theirs, each written to NVMe in
// F{j} and read back in backward slot j+2, both `copy` bytes; the plan is valid, both
// simulators replay it, the JSON keeps the copies, the host state is within its share,
// and a copy read back after its backward is caught.
void expect_paged_copies(const Plan& p, const PlanRequest& req, double copy) {
  ASSERT_TRUE(p.feasible) << p.infeasible_reason;
  ASSERT_FALSE(p.nvme_copy_layers.empty());
  EXPECT_DOUBLE_EQ(p.copy_bytes_per_layer, copy);
  EXPECT_LE(p.host_state_bytes, 0.9 * req.hardware.host_memory_bytes);
  EXPECT_TRUE(validate_plan(p).empty()) << validate_plan(p).front();
  for (int j : p.nvme_copy_layers) {
    EXPECT_TRUE(StatePaging::copy_may_page(req.model.num_layers, j)) << j;
    int written = -1, read = -1;
    for (int w = 0; w < static_cast<int>(p.windows.size()); ++w)
      for (const Transfer& t : p.windows[w].transfers)
        if (t.tensor == "cp." + std::to_string(j)) {
          EXPECT_DOUBLE_EQ(t.bytes, copy) << t.tensor;
          (t.link == Link::NvmeWrite ? written : read) = w;
        }
    ASSERT_GE(written, 0);
    ASSERT_GE(read, 0);
    EXPECT_EQ(p.windows[written].name, "F" + std::to_string(j));
    EXPECT_EQ(p.windows[read].kind, WindowKind::Backward);
    EXPECT_EQ(p.windows[read].layer, j + 2);
  }
  expect_replayed(p);
  const Plan q = plan_from_json(plan_to_json(p), "test");
  EXPECT_EQ(q.nvme_copy_layers, p.nvme_copy_layers);
  EXPECT_DOUBLE_EQ(q.nvme_state_bytes(), p.nvme_state_bytes());
  // A copy read back after its backward is caught.
  Plan late = p;
  const std::string cp = "cp." + std::to_string(late.nvme_copy_layers.front());
  ASSERT_TRUE(test::move_to_last_window(late, cp, Link::NvmeRead));
  const std::vector<std::string> problems = validate_plan(late);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems.front().find("not read back before its backward"), std::string::npos) << problems.front();
}

// Paging costs NVMe time: with a disk slow enough that the states cannot hide under one
// forward window, the paged plan predicts a longer step than the same request unpaged.
TEST(StatePaging, SlowDiskMakesPagingCost) {
  PlanRequest req = request();
  req.hardware.nvme_read_bw = req.hardware.nvme_write_bw = 1e6;
  const Plan unpaged = make_plan(req, "milp");
  req.nvme_state_layers = 4;
  const Plan paged = make_plan(req, "milp");
  ASSERT_TRUE(unpaged.feasible && paged.feasible);
  const double read_s = costs(req).layer(0).state_bytes / 1e6;
  EXPECT_GT(paged.predicted_step_s, unpaged.predicted_step_s + read_s);
  EXPECT_TRUE(simulate_plan(paged).violations.empty());
}

// The validator and the simulator both catch an update that runs before its state is in:
// the state's read moved into the window of the layer's first update.
TEST(StatePaging, StateReadAfterItsUpdateIsCaught) {
  PlanRequest req = request();
  req.nvme_state_layers = 4;
  Plan p = make_plan(req, "milp");
  ASSERT_TRUE(p.feasible);
  ASSERT_FALSE(p.nvme_state_layers.empty());
  const int j = p.nvme_state_layers.front();
  const std::string os = "os." + std::to_string(j), target = "layer." + std::to_string(j);
  int update = -1;
  for (const OptimizerPlacement& o : p.optimizer)
    if (o.target == target && (update < 0 || o.window < update)) update = o.window;
  ASSERT_GE(update, 0);
  bool moved = false;
  for (size_t w = 0; w < p.windows.size() && !moved; ++w)
    for (size_t m = 0; m < p.windows[w].transfers.size(); ++m)
      if (p.windows[w].transfers[m].tensor == os && p.windows[w].transfers[m].link == Link::NvmeRead) {
        ASSERT_LT(static_cast<int>(w), update);
        p.windows[update].transfers.push_back(p.windows[w].transfers[m]);  // into the update's window
        p.windows[w].transfers.erase(p.windows[w].transfers.begin() + static_cast<long>(m));
        moved = true;
        break;
      }
  ASSERT_TRUE(moved);
  const auto problems = validate_plan(p);
  EXPECT_TRUE(std::any_of(problems.begin(), problems.end(),
                          [](const std::string& s) { return s.find("not read from NVMe before its update") != std::string::npos; }));
  const SimResult r = simulate_plan(p);
  EXPECT_FALSE(r.violations.empty());
}

}  // namespace
}  // namespace lt

namespace lt {
namespace {

// A hybrid model's layers hold different states (Gated DeltaNet layers more than the
// gated attention ones): each paged layer moves its own bytes, and the validator and both
// simulators expect those, not the largest layer's (a plan paging an attention layer was
// flagged as never reading it).
TEST(StatePaging, AHybridModelsLayersPageTheirOwnStates) {
  PlanRequest req = test::tiny_request(8, "h800", 4);
  req.model = test::tiny_hybrid_config(8);
  req.nvme_state_layers = 6;  // layers 2..7: DeltaNet and attention layers both
  const CostModel cm = build_cost_model(req);
  double smallest = cm.layer(2).state_bytes, largest = smallest;
  for (int j = 2; j < 8; ++j) {
    smallest = std::min(smallest, cm.layer(j).state_bytes);
    largest = std::max(largest, cm.layer(j).state_bytes);
  }
  ASSERT_LT(smallest, largest) << "the paged layers' states do not differ";
  for (const char* policy : {"keep-all", "milp"}) {
    const Plan p = make_plan(req, policy);
    ASSERT_EQ(p.nvme_state_layers.size(), 6u) << policy;
    const auto bad = validate_plan(p);
    EXPECT_TRUE(bad.empty()) << policy << ": " << bad.front();
    const SimResult sim = simulate_plan(p);
    EXPECT_TRUE(sim.violations.empty()) << policy << ": " << sim.violations.front();
    const EventSimResult ev = simulate_events(p);
    EXPECT_TRUE(ev.violations.empty()) << policy << ": " << ev.violations.front();
  }
}

}  // namespace
}  // namespace lt
