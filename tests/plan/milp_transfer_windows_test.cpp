// Brute force for the MILP's transfer windows and optimizer-state paging (plan_decisions.h):
// for tiny models (3 to 6 layers) with the rest of the plan fixed (boundary tiers, kept
// internals, residency: MilpOptions::fixed_structure), every choice within the MILP's
// horizons of
//   (a) which layers' optimizer states page and the stages of their reads and writes,
//   (b) the stage of each weight load (forward and backward),
//   (c) the stage of each gradient drain,
// is built into a plan and evaluated with the window model (plan_evaluate.h); the invalid
// ones (plan_validate.h: memory, order) are dropped. The MILP's plan must equal the best
// within its gap, and in every case but one the best beats today's rule (so the choices
// matter, and a MILP that ignored them would fail).
//
// Host updates are made free (a host optimizer of 1e30 parameters/s), so where an update
// runs changes no window's time; the enumeration puts each one in the first stage its
// constraints allow, as the MILP may. Activations go nowhere but the compute tier, except
// in the drain case, whose NVMe boundary follows the ASAP rule (fixed in both).
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "plan/cost_model.h"
#include "plan/default_schedule.h"
#include "plan/milp_planner.h"
#include "plan/plan_builder.h"
#include "plan/plan_evaluate.h"
#include "plan/plan_json.h"
#include "plan/plan_stages.h"
#include "plan/plan_validate.h"
#include "plan/state_paging.h"
#include "sim/simulator.h"

namespace lt {
namespace {

// A small llama whose head outweighs a layer (H is about 5.8 F, so HEAD has room on its
// links) and whose vocabulary is too small to stream the head in chunks.
ModelConfig config(int layers) {
  ModelConfig c;
  c.model_type = "llama";
  c.hidden_size = 128;
  c.num_layers = layers;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.intermediate_size = 256;
  c.vocab_size = 2048;
  c.max_position_embeddings = 4096;
  c.torch_dtype = "bfloat16";
  return c;
}

// Link rates as multiples of one layer's forward time F: a layer's weights cross h2d in
// h2d_f * F, its gradients d2h in d2h_f * F, a boundary is read from NVMe in act_read_f * F
// and a layer's optimizer state in state_f * F either way.
struct Rates {
  double h2d_f = 0.5, d2h_f = 0.5, act_read_f = 0.5, state_f = 0.5;
};

PlanRequest request(int layers, const Rates& r) {
  PlanRequest req;
  req.model_name = "windows" + std::to_string(layers);
  req.model = config(layers);
  req.hardware = load_hardware_profile("h800");
  req.hardware.host_optimizer_params_per_s = 1e30;  // updates take no time (below a step's last bit)
  // A slow compute tier: a layer's forward takes ~12 ms, not ~1 us, so that the MILP's
  // seconds stay well above CBC's absolute tolerances.
  req.hardware.peak_flops *= 1e-4;
  req.batch = 4;
  req.seq = 256;
  const CostModel cm = build_cost_model(req.model, req.hardware, req.batch, req.seq);
  const double F = cm.layer(0).forward_s;
  req.hardware.h2d_bw = cm.layer(0).weight_bytes / (r.h2d_f * F);
  req.hardware.d2h_bw = cm.layer(0).grad_bytes / (r.d2h_f * F);
  req.hardware.nvme_read_bw = cm.layer(0).state_bytes / (r.state_f * F);
  req.hardware.nvme_write_bw = req.hardware.nvme_read_bw;
  if (r.act_read_f != Rates{}.act_read_f) {  // activations only: a slow read, a fast write
    req.hardware.nvme_read_bw = cm.boundary_bytes / (r.act_read_f * F);
    req.hardware.nvme_write_bw = cm.boundary_bytes / (0.1 * F);
  }
  req.gpu_cap_bytes = 1e9;
  req.cpu_act_budget_bytes = 0;
  req.nvme_act_budget_bytes = 0;
  req.target_gap = 1e-6;
  return req;
}

struct Horizons {
  int load = 0, drain = 0, state = 0;
};

// Every choice within the horizons on top of `base`, as the MILP's model has them
// (milp_planner.cpp): loads up to `load` stages before the rule's (forward: not before P1;
// backward: into HEAD or a backward slot, over stored boundaries only), drains up to
// `drain` stages after it (B0 is followed by E) in the order gradients are produced, paged
// states read up to `state` stages before the layer's update range and written up to
// `state` after it.
struct Search {
  const PlanRequest& req;
  const CostModel& cm;
  Decisions d;
  Horizons h;
  bool page = false;
  int L = 0;
  Stages st;
  double best = std::numeric_limits<double>::infinity();
  std::string best_desc;
  long tried = 0, valid = 0;

  Search(const PlanRequest& r, const CostModel& c, const Decisions& base, Horizons hz, bool paging)
      : req(r), cm(c), d(base), h(hz), page(paging), L(c.num_layers), st{c.num_layers} {
    d.forward_load.assign(L, -1);
    d.backward_load.assign(L, -1);
    d.grad_drain.assign(L, -1);
    d.paging_decided = page;
    d.state_read.assign(L, -1);
    d.state_write.assign(L, -1);
  }

  void run() { forward(1); }

  void forward(int j) {
    if (j == L) return backward(0);
    const int rule = st.forward(j - 1);
    for (int q = -1; q < rule; q = q < 0 ? std::max(st.p1(), rule - h.load) : q + 1) {
      d.forward_load[j] = q;
      forward(j + 1);
    }
    d.forward_load[j] = -1;
  }

  void backward(int j) {
    if (j + 2 > L) return drain(L - 1, -1);
    backward_option(j, -1);
    if (!d.resident[j])
      for (int k = j + 2; k <= std::min(L, j + 1 + h.load); ++k) {
        bool stored = true;
        for (int b = j; b <= std::min(k, L - 1); ++b) stored = stored && !d.boundaries[b].recompute;
        if (stored) backward_option(j, st.backward(k));
      }
    d.backward_load[j] = -1;
  }
  void backward_option(int j, int stage) {
    d.backward_load[j] = stage;
    backward(j + 1);
  }

  // Layers from the top down; `after`: the drain stage of the layer above (order).
  void drain(int j, int after) {
    if (j == 0) return paging(1);
    for (int dd = 0; dd <= h.drain && j - 1 - dd >= -1; ++dd) {
      const int s = st.backward(j - 1 - dd);
      if (s < after) continue;
      d.grad_drain[j] = dd == 0 ? -1 : s;
      drain(j - 1, s);
    }
    d.grad_drain[j] = -1;
  }

  struct Range {
    int lo, hi;
  };
  // A paged layer's update stages (the MILP's: its forward range, P1 for the lowest layers).
  Range update_range(int j) const {
    return {std::max(st.p1(), st.forward(j - 1 - MilpOptions{}.optimizer_horizon)), st.forward(j - 2)};
  }

  void paging(int j) {
    if (!page || j == L) return leaf();
    paging(j + 1);  // stays on the host
    const Range u = update_range(j);
    for (int r = std::max(st.p0(), u.lo - h.state); r < u.hi; ++r)
      for (int w = u.lo + 1; w <= std::min(st.head(), u.hi + h.state); ++w) {
        if (w < r + 2) continue;
        d.state_read[j] = r;
        d.state_write[j] = w;
        paging(j + 1);
      }
    d.state_read[j] = d.state_write[j] = -1;
  }

  void leaf() {
    // Updates: the first stage the constraints allow (P0 for a layer kept on the host).
    for (int j = 0; j < L; ++j) {
      const int load = d.forward_load[j] >= 0 ? d.forward_load[j] : j == 0 ? st.p1() : st.forward(j - 1);
      if (d.state_read[j] < 0) {
        d.layer_optimizer[j] = {{st.p0(), 1.0}};
        continue;
      }
      int at = -1;
      const Range u = update_range(j);
      for (int s = u.lo; s <= u.hi && at < 0; ++s)
        if (d.state_read[j] < s && s < d.state_write[j] && s < load) at = s;
      if (at < 0) return;
      d.layer_optimizer[j] = {{at, 1.0}};
    }
    if (page &&
        paging_from_stages(cm, d.state_read, d.state_write).host_state_bytes >
            kHostStateShare * req.hardware.host_memory_bytes)
      return;
    ++tried;
    Plan p = build_plan(req, cm, d);
    evaluate_plan(p);
    if (!validate_plan(p).empty()) return;
    ++valid;
    if (p.predicted_step_s < best) {
      best = p.predicted_step_s;
      best_desc = describe();
    }
  }

  std::string describe() const {
    std::string s;
    auto list = [&](const char* what, const std::vector<int>& v) {
      s += what;
      for (int j = 0; j < L; ++j) s += " " + (v[j] < 0 ? std::string("-") : std::to_string(v[j]));
      s += ";";
    };
    list(" forward loads", d.forward_load);
    list(" backward loads", d.backward_load);
    list(" drains", d.grad_drain);
    if (page) {
      list(" state reads", d.state_read);
      list(" state writes", d.state_write);
    }
    return s;
  }
};

struct Case {
  const char* name;
  int layers;
  Rates rates;
  Horizons horizons;
  bool rule_can_be_best = false;  // the memory-bound case: the best may be the rule itself
};

// Runs one case: the enumeration's best, the MILP's plan, today's rule.
void run_case(const Case& c, PlanRequest req, const Decisions& structure) {
  const CostModel cm = build_cost_model(req.model, req.hardware, req.batch, req.seq);
  MilpOptions opt;
  opt.load_horizon = c.horizons.load;
  opt.drain_horizon = c.horizons.drain;
  opt.state_horizon = c.horizons.state;
  opt.fixed_structure = &structure;
  const Plan milp = plan_milp(req, cm, opt);
  ASSERT_TRUE(milp.feasible) << c.name << ": " << milp.infeasible_reason;
  const auto problems = validate_plan(milp);
  ASSERT_TRUE(problems.empty()) << c.name << ": " << problems.front();
  const SimResult sim = simulate_plan(milp);
  EXPECT_TRUE(sim.violations.empty()) << c.name << ": " << sim.violations.front();
  // The plan file keeps the windows (and the extra slots' memory operations).
  const Plan back = plan_from_json(plan_to_json(milp), "test");
  EXPECT_TRUE(validate_plan(back).empty()) << c.name;
  EXPECT_DOUBLE_EQ(predicted_step_seconds(back), milp.predicted_step_s) << c.name;
  EXPECT_DOUBLE_EQ(predicted_peaks(back).gpu, milp.predicted_peak.gpu) << c.name;

  // The rule: every window as today (and the rule's paging).
  Plan rule = build_plan(req, cm, structure);
  evaluate_plan(rule);
  const bool rule_valid = validate_plan(rule).empty();

  Search s(req, cm, structure, c.horizons, c.horizons.state > 0);
  s.run();
  std::printf("[transfer windows %s L=%d] %ld plans, %ld valid; best %.6f ms (%s); MILP %.6f ms, gap %.1e, "
              "solve %.2f s; rule %s %.6f ms\n",
              c.name, c.layers, s.tried, s.valid, s.best * 1e3, s.best_desc.c_str(), milp.predicted_step_s * 1e3,
              milp.solve.mip_gap, milp.solve.solve_s, rule_valid ? "valid" : "INVALID", rule.predicted_step_s * 1e3);
  ASSERT_GT(s.valid, 0) << c.name;
  // The enumeration covers the MILP's choices, so the MILP cannot beat it (up to the plan's
  // byte round-off, 1e-9 relative); and the MILP is within its gap of it.
  EXPECT_GE(milp.predicted_step_s, s.best * (1 - 1e-9)) << c.name << ": the enumeration misses a MILP choice";
  EXPECT_LE(milp.predicted_step_s, s.best * (1 + milp.solve.mip_gap + 1e-9)) << c.name;
  if (!c.rule_can_be_best) {
    // 1e-3 of the step: far above round-off, far below the gains designed in (>= 2%).
    EXPECT_LT(s.best, (rule_valid ? rule.predicted_step_s : std::numeric_limits<double>::infinity()) * (1 - 1e-3))
        << c.name << ": the choices gain nothing here, so the case tests nothing";
  } else if (rule_valid) {
    EXPECT_LE(milp.predicted_step_s, rule.predicted_step_s * (1 + milp.solve.mip_gap + 1e-9)) << c.name;
  }
}

Decisions all_kept(int L) {
  Decisions d = all_gpu_decisions(L, "structure");
  d.keep_internals.assign(L, true);
  return d;
}

// (b) backward: layers' backward windows (2 F with their internals kept) wait on h2d
// (2.5 F per load); HEAD (5.8 F) has room for one more load, so one layer's backward
// weights load in HEAD.
TEST(MilpTransferWindows, BackwardLoadsIntoHead) {
  const Case c{"backward loads", 4, {.h2d_f = 2.5}, {.load = 2}};
  run_case(c, request(c.layers, c.rates), all_kept(c.layers));
}

// (b) forward: boundary 1 goes to host memory over a slow d2h (5.6 F), which makes F1 long
// with h2d to spare; elsewhere forward windows wait on their load (1.5 F against 1 F), so
// a later layer's weights load under the offload.
TEST(MilpTransferWindows, ForwardLoadsUnderAnOffload) {
  const Case c{"forward loads", 4, {.h2d_f = 1.5, .d2h_f = 5}, {.load = 2}};
  PlanRequest req = request(c.layers, c.rates);
  const CostModel cm = build_cost_model(req.model, req.hardware, req.batch, req.seq);
  req.cpu_act_budget_bytes = 1.01 * cm.boundary_bytes;
  Decisions d = all_kept(c.layers);
  d.boundaries[1] = BoundaryPlacement{false, 0, 1, 0};
  ASSERT_TRUE(assign_asap_traffic(d, cm));
  run_case(c, req, d);
}

// The same with a compute-tier cap that leaves no room for an extra slot at the peak: the
// MILP must count the slots it holds (the rule is then the best).
TEST(MilpTransferWindows, ExtraSlotsCountInMemory) {
  const Case c{"tight memory", 4, {.h2d_f = 2.5}, {.load = 2}, /*rule_can_be_best=*/true};
  PlanRequest req = request(c.layers, c.rates);
  const CostModel cm = build_cost_model(req.model, req.hardware, req.batch, req.seq);
  Plan rule = build_plan(req, cm, all_kept(c.layers));
  evaluate_plan(rule);
  req.gpu_cap_bytes = rule.predicted_peak.gpu + 0.5 * cm.layer(0).weight_bytes;
  run_case(c, req, all_kept(c.layers));
}

// (c) drains: boundary 0 lives on NVMe, and its slow read makes B2's window last 6 F; the
// backward windows above wait on d2h (2.5 F per gradient against 2 F of compute), so
// layer 4's gradients drain under that read instead of in B3.
TEST(MilpTransferWindows, LateDrainUnderAnNvmeRead) {
  const Case c{"late drains", 5, {.h2d_f = 0.5, .d2h_f = 2.5, .act_read_f = 6}, {.drain = 2}};
  PlanRequest req = request(c.layers, c.rates);
  const CostModel cm = build_cost_model(req.model, req.hardware, req.batch, req.seq);
  req.nvme_act_budget_bytes = 1.01 * cm.boundary_bytes;
  Decisions d = all_kept(c.layers);
  d.boundaries[0] = BoundaryPlacement{false, 0, 0, 1};
  ASSERT_TRUE(assign_asap_traffic(d, cm));
  run_case(c, req, d);
}

// (a) paging: the host holds the state less 0.75 of one layer's optimizer state. The rule
// pages layers 2..5 (three slots in flight: it saves one) and stacks a read and a write in
// F1 and F2 (0.6 F each against 1 F of compute); two layers whose reads and writes never
// overlap save as much with one slot and no stacking.
TEST(MilpTransferWindows, PagingChoosesLayersAndWindows) {
  const Case c{"paging", 6, {.state_f = 0.6}, {.state = 2}};
  PlanRequest req = request(c.layers, c.rates);
  const CostModel cm = build_cost_model(req.model, req.hardware, req.batch, req.seq);
  req.hardware.host_memory_bytes = (cm.host_state_bytes - 0.75 * cm.layer(0).state_bytes) / kHostStateShare;
  ASSERT_EQ(plan_state_paging(req, cm, true).count, 4);
  run_case(c, req, all_gpu_decisions(c.layers, "structure"));
}

// All three families together, over a recompute block (boundary 1 recomputed: no early
// backward load may cross it) and slow links both ways.
TEST(MilpTransferWindows, AllChoicesAroundARecomputeBlock) {
  const Case c{"all", 4, {.h2d_f = 2.5, .d2h_f = 2.5}, {.load = 2, .drain = 2}};
  Decisions d = all_gpu_decisions(c.layers, "structure");
  d.boundaries[1] = BoundaryPlacement{true, 0, 0, 0};
  d.keep_internals = {false, false, true, true};
  run_case(c, request(c.layers, c.rates), d);
}

}  // namespace
}  // namespace lt
