// The event-driven simulator (sim/event_simulator.h): tiny hand-made plans whose answers
// are worked out by hand in the comments, a brute-force check of the memory peak, and
// (event_simulator_property_test.cpp) every preset, profile and policy against the plan's
// prediction.
#include "sim/event_simulator.h"

#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include "../plan/plan_test_util.h"
#include "plan/cost_model.h"
#include "plan/planner.h"
#include "sim/simulator.h"

namespace lt {
namespace {

// 1 GB at 1 GB/s: every byte count below is seconds times kGB, so times read as seconds.
constexpr double kGB = 1e9;
constexpr double kTol = 1e-12;  // times are sums of a few exact multiples of 0.5 s

Plan hand_plan(int layers) {
  Plan p;
  p.policy = "hand";
  p.model_name = "hand";
  p.num_layers = layers;
  p.batch = p.seq = 1;
  p.hardware.name = "unit";
  p.hardware.h2d_bw = p.hardware.d2h_bw = p.hardware.nvme_read_bw = p.hardware.nvme_write_bw = kGB;
  p.hardware.peak_flops = kGB;
  p.hardware.host_optimizer_params_per_s = kGB;
  p.hardware.host_memory_bw = kGB;
  p.boundaries.assign(layers + 1, BoundaryPlacement{});
  return p;
}

Window window(const std::string& name, WindowKind kind, int layer, double compute_s, double workspace_gb = 0) {
  Window w;
  w.name = name;
  w.kind = kind;
  w.layer = layer;
  w.compute_s = compute_s;
  w.compute_flops = compute_s * kGB;
  w.workspace_bytes = workspace_gb * kGB;
  return w;
}

void move(Window& w, const std::string& tensor, Link l, double seconds) { w.transfers.push_back({tensor, l, seconds * kGB}); }

const SimEvent& event(const SimResult& r, const std::string& name) {
  auto it = std::find_if(r.events.begin(), r.events.end(), [&](const SimEvent& e) { return e.name == name; });
  if (it == r.events.end()) throw std::runtime_error("no event " + name);
  return *it;
}

bool mentions(const std::vector<std::string>& violations, const std::string& what) {
  return std::any_of(violations.begin(), violations.end(),
                     [&](const std::string& v) { return v.find(what) != std::string::npos; });
}

// Two layers, boundary 0 sent to host memory in F0's window; its 3 s copy outlasts F0.
//   h2d: w.0 [0,1] in.0 [1,2] w.1 [2,3];  F0 [2,3] (needs in.0);  F1 [3,4] (w.1, F0);
//   d2h a.0.cpu [2,5] (needs in.0): it overlaps both computes, so the step is 5 s.
// Windows: P1 2 s, F0 max(1, h2d 1, d2h 3) = 3 s, F1 1 s: 6 s.
// Memory: a.0.cpu 1 GB [1,5) (in.0 starts filling it; freed when its copy and F0 end),
// a.1.tmp 2 GB [2,4) (F0 to its reader F1), a.2.tmp 2 GB [3,5) (no head reads it: to the
// end), workspaces 0.5 GB [2,3) and [3,4): the peak is 1 + 2 + 2 + 0.5 = 5.5 GB at t = 3.
Plan transfer_over_two_computes() {
  Plan p = hand_plan(2);
  p.hardware.d2h_bw = kGB / 3;  // the 1 GB part takes 3 s
  p.boundaries[0] = {false, 0, 1, 0};
  p.boundaries[1].recompute = true;
  Window p1 = window("P1", WindowKind::Prologue1, -1, 0);
  move(p1, "w.0", Link::H2D, 1);
  move(p1, "in.0", Link::H2D, 1);
  p1.alloc.push_back({"a.0.cpu", 1 * kGB});
  Window f0 = window("F0", WindowKind::Forward, 0, 1, 0.5);
  move(f0, "w.1", Link::H2D, 1);
  f0.transfers.push_back({"a.0.cpu", Link::D2H, 1 * kGB});
  f0.alloc.push_back({"a.1.tmp", 2 * kGB});
  f0.free.push_back({"a.0.cpu", 1 * kGB});
  Window f1 = window("F1", WindowKind::Forward, 1, 1, 0.5);
  f1.alloc.push_back({"a.2.tmp", 2 * kGB});
  f1.free.push_back({"a.1.tmp", 2 * kGB});
  p.windows = {p1, f0, f1};
  return p;
}

TEST(EventSimulator, TransferOverlapsTwoComputes) {
  const Plan p = transfer_over_two_computes();
  const EventSimResult ev = simulate_events(p);
  const SimResult win = simulate_plan(p);
  EXPECT_TRUE(ev.violations.empty()) << ev.violations.front();
  EXPECT_NEAR(ev.step_s, 5, kTol);
  EXPECT_NEAR(win.step_s, 6, kTol) << "the window barrier holds F1 until the copy ends";
  EXPECT_NEAR(event(ev, "a.0.cpu").start, 2, kTol);
  EXPECT_NEAR(event(ev, "a.0.cpu").end, 5, kTol);
  EXPECT_NEAR(event(ev, "F1").start, 3, kTol);
  EXPECT_NEAR(ev.compute_busy_s, 2, kTol);
  EXPECT_NEAR(ev.compute_idle_s, 3, kTol);
  // Idle: 2 s before F0 waiting for in.0, 1 s after F1 for the copy; no host work.
  EXPECT_NEAR(ev.exposed_comm_s, 3, kTol);
  EXPECT_NEAR(ev.exposed_host_s, 0, kTol);
  EXPECT_NEAR(ev.peak.gpu, 5.5 * kGB, 1);
  // Host: a.0.cpu arrives with its copy and stays (nothing reloads it here).
  EXPECT_NEAR(ev.peak.cpu, 1 * kGB, 1);
}

// Three layers: w.2 goes into the slot w.0 used, so it waits for F0, w.0's reader.
//   h2d: w.0 [0,1] in.0 [1,2] w.1 [2,3];  F0 [2,6];  F1 [6,6.5];
//   w.2 [6,7] (not [3,4]: its slot is free when F0 ends);  F2 [7,8]: 8 s.
// The same plan with layer 2 resident (w.2 into wres.2, not a slot): w.2 [3,4], F2
// [6.5,7.5]: 7.5 s.
Plan slot_reuse(bool resident) {
  Plan p = hand_plan(3);
  Window p1 = window("P1", WindowKind::Prologue1, -1, 0);
  move(p1, "w.0", Link::H2D, 1);
  move(p1, "in.0", Link::H2D, 1);
  Window f0 = window("F0", WindowKind::Forward, 0, 4);
  move(f0, "w.1", Link::H2D, 1);
  Window f1 = window("F1", WindowKind::Forward, 1, 0.5);
  move(f1, "w.2", Link::H2D, 1);
  if (resident) {
    f1.alloc.push_back({"wres.2", 1 * kGB});
    p.resident_layers = {2};
  }
  Window f2 = window("F2", WindowKind::Forward, 2, 1);
  p.windows = {p1, f0, f1, f2};
  return p;
}

TEST(EventSimulator, SlotReuseForcesAWait) {
  const EventSimResult ev = simulate_events(slot_reuse(false));
  EXPECT_TRUE(ev.violations.empty()) << ev.violations.front();
  EXPECT_NEAR(event(ev, "w.2").start, 6, kTol);
  EXPECT_NEAR(event(ev, "F2").start, 7, kTol);
  EXPECT_NEAR(ev.step_s, 8, kTol);
  // The window replay gives 8 s too: P1 2, F0 4, F1 max(0.5, 1) = 1, F2 1.
  EXPECT_NEAR(simulate_plan(slot_reuse(false)).step_s, 8, kTol);

  const EventSimResult res = simulate_events(slot_reuse(true));
  EXPECT_TRUE(res.violations.empty()) << res.violations.front();
  EXPECT_NEAR(event(res, "w.2").start, 3, kTol);
  EXPECT_NEAR(res.step_s, 7.5, kTol);
}

// Three layers, every layer 1 s of compute, weight loads free. B1's window drains g.2 for
// 3 s; B0 writes the gradient slot g.2 used, so it waits for that drain.
//   F0 [0,1] F1 [1,2] F2 [2,3] HEAD [3,4] B2 [4,5] B1 [5,6];  d2h g.2 [5,8];
//   B0 [8,9] (not [6,7]);  d2h g.1 [8,8.5], g.0 [9,9.5]: 9.5 s.
Plan gradient_slot_reuse() {
  Plan p = hand_plan(3);
  Window p1 = window("P1", WindowKind::Prologue1, -1, 0);
  move(p1, "w.0", Link::H2D, 0);
  move(p1, "in.0", Link::H2D, 0);
  std::vector<Window> w = {p1};
  for (int j = 0; j < 3; ++j) {
    w.push_back(window("F" + std::to_string(j), WindowKind::Forward, j, 1));
    move(w.back(), j < 2 ? "w." + std::to_string(j + 1) : "w.head", Link::H2D, 0);
  }
  w.push_back(window("HEAD", WindowKind::Head, -1, 1));
  move(w.back(), "w.2", Link::H2D, 0);
  for (int j = 2; j >= 0; --j) {
    w.push_back(window("B" + std::to_string(j), WindowKind::Backward, j, 1));
    if (j < 2) move(w.back(), "g." + std::to_string(j + 1), Link::D2H, j == 1 ? 3 : 0.5);
    if (j > 0) move(w.back(), "w." + std::to_string(j - 1), Link::H2D, 0);
  }
  w.push_back(window("E", WindowKind::Epilogue, -1, 0));
  move(w.back(), "g.0", Link::D2H, 0.5);
  p.windows = w;
  return p;
}

TEST(EventSimulator, GradientSlotReuseWaitsForTheDrain) {
  const EventSimResult ev = simulate_events(gradient_slot_reuse());
  EXPECT_TRUE(ev.violations.empty()) << ev.violations.front();
  EXPECT_NEAR(event(ev, "B1").end, 6, kTol);
  EXPECT_NEAR(event(ev, "g.2").end, 8, kTol);
  EXPECT_NEAR(event(ev, "B0").start, 8, kTol);
  EXPECT_NEAR(event(ev, "g.0").end, 9.5, kTol);
  EXPECT_NEAR(ev.step_s, 9.5, kTol);
  // B0's 2 s wait is the drain's (communication); the last 0.5 s too.
  EXPECT_NEAR(ev.exposed_comm_s, 2.5, kTol);
}

// A lazy update gates its layer's first load; a non-lazy optimizer gates every load.
//   host: layer.0 [0,2], layer.1 [2,3] (P0, FIFO); h2d: w.0 [2,3] in.0 [3,4] w.1 [4,5]
//   (lazy: w.1 after layer.1's update at 3, behind in.0 anyway); F0 [4,5]; F1 [5,6].
// Non-lazy: w.0 waits for the whole step (3): w.0 [3,4] in.0 [4,5] w.1 [5,6]; F0 [5,6],
// F1 [6,7].
Plan updates_gate_loads(bool lazy) {
  Plan p = hand_plan(2);
  p.lazy_optimizer = lazy;
  Window p0 = window("P0", WindowKind::Prologue0, -1, 0);
  p0.host.push_back({"optimizer", "layer.0", 2 * kGB, 2});
  p0.host.push_back({"optimizer", "layer.1", 1 * kGB, 1});
  p.optimizer = {{"layer.0", 0, 1}, {"layer.1", 0, 1}};
  Window p1 = window("P1", WindowKind::Prologue1, -1, 0);
  move(p1, "w.0", Link::H2D, 1);
  move(p1, "in.0", Link::H2D, 1);
  Window f0 = window("F0", WindowKind::Forward, 0, 1);
  move(f0, "w.1", Link::H2D, 1);
  Window f1 = window("F1", WindowKind::Forward, 1, 1);
  p.windows = {p0, p1, f0, f1};
  return p;
}

TEST(EventSimulator, HostUpdatesGateWeightLoads) {
  const EventSimResult lazy = simulate_events(updates_gate_loads(true));
  EXPECT_TRUE(lazy.violations.empty()) << lazy.violations.front();
  EXPECT_NEAR(event(lazy, "w.0").start, 2, kTol);
  EXPECT_NEAR(event(lazy, "F1").end, 6, kTol);
  // F0's 4 s wait: in.0 [3,4] and w.0 [2,3] on h2d, w.0 behind layer.0's update [0,2].
  EXPECT_NEAR(lazy.exposed_comm_s, 2, kTol);
  EXPECT_NEAR(lazy.exposed_host_s, 2, kTol);
  const EventSimResult whole = simulate_events(updates_gate_loads(false));
  EXPECT_NEAR(event(whole, "w.0").start, 3, kTol);
  EXPECT_NEAR(whole.step_s, 7, kTol);
}

// A reload issued before the copy out that feeds it, and a reload of bytes never sent.
TEST(EventSimulator, ConsumerBeforeProducerIsAViolation) {
  Plan p = transfer_over_two_computes();
  move(p.windows[0], "a.0.cpu", Link::H2D, 1);  // P1 reloads what F0 only sends out
  const EventSimResult ev = simulate_events(p);
  EXPECT_TRUE(mentions(ev.violations, "P1: a.0.cpu is issued before a.0.cpu in host memory (F0)"))
      << (ev.violations.empty() ? "none" : ev.violations.front());

  Plan q = transfer_over_two_computes();
  move(q.windows[2], "a.1.cpu", Link::H2D, 1);  // never sent out
  EXPECT_TRUE(mentions(simulate_events(q).violations, "F1: a.1.cpu needs a.1.cpu in host memory, which the plan never"));
}

// F0 waits for w.0, queued on h2d behind a reload that waits for the copy out of F0's own
// output: a cycle. It is broken at F0 (the earliest in issue order) and reported.
TEST(EventSimulator, CycleOfWaitsIsBrokenAndReported) {
  Plan p = hand_plan(1);
  Window p1 = window("P1", WindowKind::Prologue1, -1, 0);
  move(p1, "in.0", Link::H2D, 1);
  Window f0 = window("F0", WindowKind::Forward, 0, 1);
  move(f0, "a.1.cpu", Link::H2D, 1);
  move(f0, "w.0", Link::H2D, 1);
  move(f0, "a.1.cpu", Link::D2H, 1);
  p.windows = {p1, f0};
  const EventSimResult ev = simulate_events(p);
  EXPECT_TRUE(mentions(ev.violations, "wait for each other")) << (ev.violations.empty() ? "none" : ev.violations.front());
  // F0 then runs on in.0 alone [1,2]; d2h [2,3]; reload [3,4]; w.0 [4,5].
  EXPECT_NEAR(event(ev, "F0").start, 1, kTol);
  EXPECT_NEAR(ev.step_s, 5, kTol);
}

TEST(EventSimulator, OtherHardwareRetimesCompute) {
  Plan p = slot_reuse(false);
  HardwareProfile half = p.hardware;
  half.name = "unit-half";
  half.efficiency = 0.5;  // computes twice as long: F0 [2,10], F1 [10,11], w.2 [10,11], F2 [11,13]
  EXPECT_NEAR(simulate_events(p, half).step_s, 13, kTol);
}

// The peak by brute force: at every instant a span begins, the bytes of every span live
// then (from <= t < to), plus the fixed slots; the largest is the peak.
double brute_force_peak(const std::vector<LiveSpan>& spans, double base) {
  double peak = base;
  for (const LiveSpan& s : spans) {
    if (!(s.to > s.from)) continue;
    double live = base;
    for (const LiveSpan& o : spans)
      if (o.from <= s.from && s.from < o.to) live += o.bytes;
    peak = std::max(peak, live);
  }
  return peak;
}

// A tiny MILP plan under tight budgets (host, NVMe and recompute all in play), keep-all,
// and megatrain-code, whose windows differ the most.
TEST(EventSimulator, PeakMatchesBruteForce) {
  PlanRequest req = test::tiny_request(6, "h800", 8);
  const CostModel cm = build_cost_model(req.model, req.hardware, req.batch, req.seq);
  const Plan keep = make_plan(req, "keep-all");
  const Plan code = make_plan(req, "megatrain-code");
  PlanRequest tight = req;
  tight.gpu_cap_bytes = keep.predicted_peak.gpu - 3 * cm.boundary_bytes;
  tight.cpu_act_budget_bytes = 0.5 * cm.boundary_bytes;
  tight.nvme_act_budget_bytes = 3 * cm.boundary_bytes;
  tight.time_limit_s = 2;
  const Plan milp = make_plan(tight, "milp");
  ASSERT_TRUE(milp.feasible) << milp.infeasible_reason;
  ASSERT_GT(milp.tier_counts().nvme, 0) << "the case should exercise NVMe";
  for (const Plan* p : {&milp, &keep, &code}) {
    const EventSimResult r = simulate_events(*p);
    EXPECT_TRUE(r.violations.empty()) << p->policy << ": " << r.violations.front();
    EXPECT_DOUBLE_EQ(r.peak.gpu, brute_force_peak(r.gpu_spans, p->fixed_gpu_bytes)) << p->policy;
    EXPECT_DOUBLE_EQ(r.peak.cpu, brute_force_peak(r.host_spans, p->host_state_bytes)) << p->policy;
    double curve_max = 0;
    for (auto [t, b] : r.gpu_memory) curve_max = std::max(curve_max, b);
    EXPECT_DOUBLE_EQ(curve_max, r.peak.gpu) << p->policy;
    // Every compute-tier allocation of the plan has a span, and no span is reversed.
    size_t allocs = 0;
    for (const Window& w : p->windows)
      for (const MemOp& m : w.alloc) allocs += m.bytes > 0;
    EXPECT_GE(r.gpu_spans.size(), allocs) << p->policy;
    for (const LiveSpan& s : r.gpu_spans) EXPECT_LE(s.from, s.to) << p->policy << " " << s.tensor;
  }
}

}  // namespace
}  // namespace lt
