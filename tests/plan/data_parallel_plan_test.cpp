// Plans for data-parallel ranks (plan/data_parallel.h): the MILP counts the ranks'
// collectives and the sharded optimizer's update as the plan evaluator and both
// simulators time them, and the bytes are those the exchange moves.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "plan/cost_model.h"
#include "plan/data_parallel.h"
#include "plan/plan_evaluate.h"
#include "plan/plan_json.h"
#include "plan/plan_validate.h"
#include "plan/planner.h"
#include "plan_test_util.h"
#include "sim/event_simulator.h"
#include "sim/simulator.h"

namespace lt {
namespace {

// A tiny model on the h800 profile whose link moves a layer's gradient in about the time
// its backward takes: collectives that neither vanish nor dominate.
PlanRequest dp_request(int ranks, bool sharded) {
  PlanRequest req = test::tiny_request(6, "h800", 8);
  const CostModel one = build_cost_model(req);
  const LayerCost& l = one.layer(0);
  req.hardware.network_bw = 4 * l.params / l.backward_s;
  req.ranks = ranks;
  req.shard_optimizer = sharded;
  req.target_gap = 1e-6;
  return req;
}

double net_bytes(const Plan& p, const char* prefix) {
  double b = 0;
  for (const Window& w : p.windows)
    for (const Transfer& x : w.transfers)
      if (x.link == Link::Net && x.tensor.rfind(prefix, 0) == 0) b += x.bytes;
  return b;
}

void expect_consistent(const Plan& p) {
  ASSERT_TRUE(p.feasible) << p.infeasible_reason;
  const auto bad = validate_plan(p);
  EXPECT_TRUE(bad.empty()) << bad.front();
  // The MILP's objective is the evaluator's step, within the gap (and round-off).
  EXPECT_GE(p.predicted_step_s, p.solve.objective_s * (1 - 1e-6));
  EXPECT_LE(p.predicted_step_s, p.solve.objective_s * (1 + p.solve.mip_gap + 1e-6));
  // The window replay follows the same window rules; the event simulator drops the
  // barriers, so it may only be faster, and must find every dependency met.
  const SimResult sim = simulate_plan(p);
  EXPECT_TRUE(sim.violations.empty()) << sim.violations.front();
  EXPECT_NEAR(sim.step_s, p.predicted_step_s, 1e-9 * p.predicted_step_s);
  const EventSimResult ev = simulate_events(p);
  EXPECT_TRUE(ev.violations.empty()) << ev.violations.front();
  EXPECT_LE(ev.step_s, p.predicted_step_s * (1 + 1e-9));
}

TEST(DataParallelPlan, TheMilpCountsTheUnshardedSums) {
  const PlanRequest req = dp_request(2, false);
  const CostModel cm = build_cost_model(req);
  const Plan p = make_plan(req, "milp");
  expect_consistent(p);
  EXPECT_EQ(p.ranks, 2);
  EXPECT_FALSE(p.shard_optimizer);
  // Every parameter's fp32 gradient to its owner and the sum back: 2 x 4 bytes x (N-1).
  EXPECT_NEAR(net_bytes(p, "sum."), 8 * cm.total_params, 1e-9 * cm.total_params);
  EXPECT_EQ(net_bytes(p, "bcast."), 0);
  // The same plan with a link that takes no time is the one-rank plan's step.
  PlanRequest fast = req;
  fast.hardware.network_bw = 1e30;
  PlanRequest one = req;
  one.ranks = 1;
  EXPECT_NEAR(make_plan(fast, "milp").predicted_step_s, make_plan(one, "milp").predicted_step_s,
              1e-6 * p.predicted_step_s);
  EXPECT_GT(p.predicted_step_s, make_plan(one, "milp").predicted_step_s);
}

TEST(DataParallelPlan, TheShardedPlanUpdatesOneRanksPartAndBroadcastsTheWeights) {
  const PlanRequest req = dp_request(2, true);
  const CostModel cm = build_cost_model(req);
  PlanRequest one_req = req;
  one_req.ranks = 1;
  const CostModel one = build_cost_model(one_req);
  const Plan p = make_plan(req, "milp");
  expect_consistent(p);
  EXPECT_TRUE(p.shard_optimizer);
  EXPECT_NEAR(net_bytes(p, "sum."), 4 * cm.total_params, 1e-9 * cm.total_params);
  EXPECT_NEAR(net_bytes(p, "bcast."), 4 * cm.total_params, 1e-9 * cm.total_params);
  // One host task updates the busiest rank's part, in P0; the others are gone.
  int updates = 0;
  for (const Window& w : p.windows)
    for (const HostTask& h : w.host)
      if (h.task == "optimizer") {
        ++updates;
        EXPECT_EQ(w.kind, WindowKind::Prologue0);
        EXPECT_EQ(h.target, "rank part");
        EXPECT_DOUBLE_EQ(h.work, cm.dp.owned_params);
      }
  EXPECT_EQ(updates, 1);
  // The part: whole targets, at least half the parameters, at most half plus the largest.
  double largest = std::max(cm.embed_params, cm.head_params);
  for (const LayerCost& l : cm.layers) largest = std::max(largest, l.params);
  EXPECT_GE(cm.dp.owned_params, cm.total_params / 2);
  EXPECT_LE(cm.dp.owned_params, cm.total_params / 2 + largest);
  // Each rank's host state lacks the other part's optimizer states.
  const double state_per_param = one.layer(0).state_bytes / one.layer(0).params;
  EXPECT_NEAR(one.host_state_bytes - cm.host_state_bytes,
              state_per_param * (cm.total_params - cm.dp.owned_params), 1e-9 * one.host_state_bytes);
  EXPECT_NEAR(p.host_state_bytes, cm.host_state_bytes, 1e-9 * cm.host_state_bytes);
}

// In the event simulation of a plan with slot sums, every slot sum starts after the
// compute that made its gradient (a streamed head's chunk: that chunk's backward), and
// every drain after its sum (g.<x> after sum.<x>); at least `min_drains` drains.
void expect_drains_after_their_sums(const Plan& p, int min_drains) {
  const EventSimResult ev = simulate_events(p);
  EXPECT_TRUE(ev.violations.empty()) << ev.violations.front();
  std::map<std::string, const SimEvent*> sum_of;  // sum.<x> -> its event
  std::map<std::string, double> computed;        // compute name -> when it ended
  for (const SimEvent& e : ev.events) {
    if (e.lane == SimLane::Net && e.name.rfind("sum.", 0) == 0) sum_of[e.name] = &e;
    if (e.lane == SimLane::Compute) computed[e.name] = std::max(computed[e.name], e.end);
  }
  int drains = 0;
  for (const SimEvent& e : ev.events) {
    const std::string t = drained_target(Transfer{e.name, Link::D2H, e.bytes});
    if (e.lane != SimLane::D2H || t.empty() || t == "embed") continue;
    const std::string sum = "sum." + e.name.substr(2);
    ASSERT_TRUE(sum_of.count(sum)) << e.name;
    EXPECT_GE(e.start, sum_of[sum]->end * (1 - 1e-12)) << e.name;
    ++drains;
  }
  EXPECT_GE(drains, min_drains);
  for (const auto& [name, sum] : sum_of) {
    const std::string t = exchange_target(name), rest = name.substr(4);
    if (t == "embed") continue;
    const bool chunk = rest.rfind("head.", 0) == 0 && rest != "head.norm";
    const std::string made = chunk ? "HEAD bwd " + rest.substr(5) : t == "head" ? "HEAD" : "B" + rest;
    if (t == "head" && !chunk && !computed.count(made)) {  // a streamed head's norm: after its last chunk
      double last = 0;
      for (const auto& [c, end] : computed)
        if (c.rfind("HEAD bwd ", 0) == 0) last = std::max(last, end);
      EXPECT_GE(sum->start, last * (1 - 1e-12)) << name;
      continue;
    }
    ASSERT_TRUE(computed.count(made)) << made;
    EXPECT_GE(sum->start, computed[made] * (1 - 1e-12)) << name;
  }
}

// Slot sums (PlanRequest::slot_sums): each layer's sum runs after its backward and before
// its drain, the head's after the head's compute, in both simulators as in the MILP.
TEST(DataParallelPlan, SlotSumsRunBetweenTheBackwardAndTheDrainTheyHoldBack) {
  for (bool sharded : {false, true}) {
    SCOPED_TRACE(sharded ? "sharded" : "unsharded");
    PlanRequest req = dp_request(2, sharded);
    const Plan host = make_plan(req, "milp");
    req.slot_sums = true;
    const CostModel cm = build_cost_model(req);
    const Plan p = make_plan(req, "milp");
    expect_consistent(p);
    EXPECT_TRUE(p.slot_sums);
    EXPECT_NEAR(net_bytes(p, "sum."), net_bytes(host, "sum."), 1e-9 * cm.total_params);  // the same collectives
    // Where each sum sits: after B{j}, in HEAD, and the embedding's in P0 (on the host).
    std::map<std::string, std::string> window_of;
    for (size_t w = 0; w < p.windows.size(); ++w)
      for (const Transfer& x : p.windows[w].transfers)
        if (x.link == Link::Net && x.tensor.rfind("sum.", 0) == 0) {
          const std::string t = exchange_target(x.tensor);
          if (t == "head") {
            EXPECT_EQ(p.windows[w].kind, WindowKind::Head);
          } else if (t == "embed") {
            EXPECT_EQ(p.windows[w].kind, WindowKind::Prologue0);
          } else {
            ASSERT_GE(w, 1u) << t;
            const Window& before = p.windows[w - 1];
            EXPECT_TRUE(before.kind == WindowKind::Backward && "layer." + std::to_string(before.layer) == t) << t;
          }
          window_of[t] = p.windows[w].name;
        }
    EXPECT_EQ(window_of.size(), size_t(cm.layers.size()) + 2);
    // In the event simulation every slot sum starts after the compute that made its
    // gradient, and every drain of the target after the sum.
    const EventSimResult ev = simulate_events(p);
    expect_drains_after_their_sums(p, static_cast<int>(cm.layers.size()) + 1);
    // The plan counts what the sums hold back: the link's time shows; and unsharded (the
    // lazy updates as in one process), a link that takes no time still leaves the head's
    // drain behind the head's compute, so no step is faster than one rank's.
    PlanRequest fast = req, one = req;
    fast.hardware.network_bw = 1e30;
    one.ranks = 1;
    const double free_link = make_plan(fast, "milp").predicted_step_s;
    EXPECT_GT(p.predicted_step_s, free_link);
    if (!sharded) {
      EXPECT_GE(free_link, make_plan(one, "milp").predicted_step_s * (1 - 1e-9));
    }
    // Written and read back, the plan keeps the rule and its prediction.
    const Plan q = plan_from_json(plan_to_json(p), "test");
    EXPECT_TRUE(q.slot_sums);
    EXPECT_NEAR(predicted_step_seconds(q), p.predicted_step_s, 1e-12 * p.predicted_step_s);
    // A layer's sum moved behind its drain (to the end of the step) is refused.
    Plan late = p;
    for (Window& w : late.windows) {
      auto& xs = w.transfers;
      const auto sum = std::find_if(xs.begin(), xs.end(), [](const Transfer& x) { return x.tensor == "sum.2"; });
      if (sum == xs.end()) continue;
      late.windows.back().transfers.push_back(*sum);
      xs.erase(sum);
      break;
    }
    const auto bad = validate_plan(late);
    ASSERT_EQ(bad.size(), 1u);
    EXPECT_NE(bad[0].find("g.2 drains before the ranks' sum in its slot (sum.2)"), std::string::npos) << bad[0];
  }
}

// A streamed head (Qwen2.5-7B on the h800, its head in chunks): each chunk's slot is summed
// after that chunk's backward and drains after its sum (one sum after the whole head
// would wait for chunks whose slots wait for their drains: a cycle).
TEST(DataParallelPlan, AStreamedHeadSumsEachChunkBeforeItDrains) {
  PlanRequest req = test::preset_request("qwen2.5-7b", "h800", 8);
  req.ranks = 2;
  req.hardware.network_bw = 12.5e9;
  req.slot_sums = true;
  const Plan p = make_plan(req, "milp");
  ASSERT_GT(p.head_chunks(), 1) << "the head is not streamed";
  expect_consistent(p);
  int head_sums = 0;
  for (const Window& w : p.windows)
    for (const Transfer& x : w.transfers) head_sums += x.link == Link::Net && x.tensor.rfind("sum.head.", 0) == 0;
  EXPECT_EQ(head_sums, p.head_chunks() + 1);  // the chunks and the final norm
  expect_drains_after_their_sums(p, static_cast<int>(p.head_chunks()) + 1 + p.num_layers);
}

TEST(DataParallelPlan, BaselinesCountTheExchangeToo) {
  for (bool slot_sums : {false, true})
  for (bool sharded : {false, true})
    for (const char* policy : {"megatrain", "greedy", "megatrain-code"}) {
      PlanRequest req = dp_request(2, sharded);
      req.slot_sums = slot_sums;
      const Plan p = make_plan(req, policy);
      SCOPED_TRACE(std::string(policy) + (sharded ? " sharded" : " unsharded") + (slot_sums ? " slot sums" : ""));
      EXPECT_GT(net_bytes(p, "sum."), 0);
      EXPECT_EQ(net_bytes(p, "bcast.") > 0, sharded);
      const SimResult sim = simulate_plan(p);
      EXPECT_TRUE(sim.violations.empty()) << sim.violations.front();
      EXPECT_NEAR(sim.step_s, p.predicted_step_s, 1e-9 * p.predicted_step_s);
      const EventSimResult ev = simulate_events(p);
      EXPECT_TRUE(ev.violations.empty()) << ev.violations.front();
    }
}

TEST(DataParallelPlan, ASlowerLinkIsNeverFaster) {
  PlanRequest req = dp_request(4, true);
  double last = 0;
  for (double scale : {100.0, 1.0, 0.1}) {
    PlanRequest r = req;
    r.hardware.network_bw = req.hardware.network_bw * scale;
    const Plan p = make_plan(r, "milp");
    expect_consistent(p);
    EXPECT_GE(p.predicted_step_s, last * (1 - 1e-6));
    last = p.predicted_step_s;
  }
}

TEST(DataParallelPlan, RoundTripsThroughJsonAndRejectsCollectivesOfOneRank) {
  const Plan p = make_plan(dp_request(2, true), "milp");
  const Plan q = plan_from_json(plan_to_json(p), "test");
  EXPECT_EQ(q.ranks, 2);
  EXPECT_TRUE(q.shard_optimizer);
  EXPECT_EQ(q.hardware.network_bw, p.hardware.network_bw);
  EXPECT_NEAR(predicted_step_seconds(q), p.predicted_step_s, 1e-12 * p.predicted_step_s);
  nlohmann::json j = plan_to_json(p);
  j.erase("data_parallel");
  try {
    plan_from_json(j, "test");
    FAIL() << "read a plan for one rank with collectives";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("in a plan for one rank"), std::string::npos) << e.what();
  }
}

TEST(DataParallelPlan, NoLinkRateIsAClearError) {
  PlanRequest req = dp_request(2, true);
  req.hardware.network_bw = 0;
  try {
    make_plan(req, "milp");
    FAIL() << "planned 2 ranks without a link rate";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("network_gbps"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lt
