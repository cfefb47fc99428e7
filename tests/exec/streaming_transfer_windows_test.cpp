// Plans whose weight loads, gradient drains and paged optimizer states run in windows other
// than the rule's (plan_decisions.h): random ones from the builder, and the MILP's where
// moving them pays. The executor reads those windows from the plan (plan/stream_schedule.h),
// and five training steps under each match the in-memory run bitwise, on the cpu and emu
// backends; on emu the compute tier never holds more in a window than the plan counts,
// the extra weight and gradient slots included.
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "exec/backend.h"
#include "layers/compute_copy.h"
#include "plan/default_schedule.h"
#include "plan/milp_planner.h"
#include "plan/plan_builder.h"
#include "plan/plan_evaluate.h"
#include "plan/plan_stages.h"
#include "plan/plan_validate.h"
#include "plan/state_paging.h"
#include "sim/simulator.h"
#include "streaming_test_util.h"
#include "streaming_trajectory.h"

namespace lt {
namespace {

using namespace streaming_test;

// The streaming tiny model with a vocabulary that makes the head about 3.5 forwards of a
// layer (HEAD has room on its links) and is too small to stream the head.
ModelConfig config() {
  ModelConfig c = test::streaming_tiny_config(6);
  c.vocab_size = 1024;
  return c;
}

struct Moved {
  int loads = 0, drains = 0;
};
// Loads issued before the window ahead of the compute that reads them, and drains of
// layer j's gradients after B{j-1} (the rule's windows, plan_decisions.h).
Moved moved(const Plan& p) {
  Moved m;
  const int n = static_cast<int>(p.windows.size());
  const auto layer_of = [](const std::string& t, const char* prefix) {
    return t.rfind(prefix, 0) == 0 && t.size() > 2 && std::isdigit(static_cast<unsigned char>(t[2])) ? std::stoi(t.substr(2))
                                                                                                  : -1;
  };
  const auto computes = [&](int v, int j) {
    const Window& w = p.windows[v];
    return w.layer == j && (w.kind == WindowKind::Forward || w.kind == WindowKind::Recompute ||
                            w.kind == WindowKind::Backward);
  };
  for (int w = 0; w < n; ++w)
    for (const Transfer& t : p.windows[w].transfers) {
      if (const int j = layer_of(t.tensor, "w."); j >= 0 && t.link == Link::H2D) {
        int reader = w + 1;
        while (reader < n && !computes(reader, j)) ++reader;
        if (reader > w + 1) ++m.loads;
      }
      if (const int j = layer_of(t.tensor, "g."); j >= 1 && t.link == Link::D2H)
        for (int v = 0; v < w; ++v)
          if (p.windows[v].kind == WindowKind::Backward && p.windows[v].layer == j - 1) ++m.drains;
    }
  return m;
}

// Random decisions (tiers, kept internals, resident layers) and random windows within the MILP's horizons
// (two stages): forward loads from P1 on, backward loads over stored boundaries, drains in
// production order, paged states read and written around an update placed between them.
// Returns an empty plan for a draw that does not make one.
Plan random_window_plan(const ModelConfig& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int L = static_cast<int>(c.num_layers);
  const Stages st{L};
  const PlanRequest req = request(c);
  const CostModel cm = build_cost_model(req);
  Decisions d = all_gpu_decisions(L, "windows-" + std::to_string(seed));
  for (int b = 1; b < L; ++b) {
    const double r = u(rng);
    if (r < 0.25) d.boundaries[b] = BoundaryPlacement{true, 0, 0, 0};
    else if (r > 0.7) d.boundaries[b] = BoundaryPlacement{false, 0.5, 0.25, 0.25};
  }
  for (int j = 0; j < L; ++j) d.keep_internals[j] = u(rng) < 0.4;
  d.forward_load.assign(L, -1);
  d.backward_load.assign(L, -1);
  d.grad_drain.assign(L, -1);
  for (int j = 1; j < L; ++j)
    if (u(rng) < 0.5) {
      const int rule = st.forward(j - 1);
      d.forward_load[j] = pick(std::max(st.p1(), rule - 2), rule - 1);
    }
  for (int j = 0; j + 2 <= L; ++j) {
    if (u(rng) < 0.5) continue;
    const int k = pick(j + 2, std::min(L, j + 3));
    bool stored = true;
    for (int b = j; b <= std::min(k, L - 1); ++b) stored = stored && !d.boundaries[b].recompute;
    if (stored) d.backward_load[j] = st.backward(k);
  }
  int after = -1;  // the drain stage of the layer above
  for (int j = L - 1; j >= 1; --j) {
    const int late = u(rng) < 0.5 ? pick(1, 2) : 0;
    int s = st.backward(std::max(-1, j - 1 - late));
    if (s < after) s = after;  // keep the production order
    if (s > st.epilogue() || (s != st.epilogue() && st.backward_layer(s) >= j)) return Plan{};
    d.grad_drain[j] = s == st.backward(j - 1) ? -1 : s;
    after = s;
  }
  // Paging: each layer 1..L-1 pages with probability 0.4, its read up to two stages before
  // its update range and its write up to two after; the update sits in between (and before
  // the forward load); the rest update in P0.
  d.paging_decided = true;
  d.state_read.assign(L, -1);
  d.state_write.assign(L, -1);
  for (int j = 0; j < L; ++j) {
    const int load = d.forward_load[j] >= 0 ? d.forward_load[j] : j == 0 ? st.p1() : st.forward(j - 1);
    d.layer_optimizer[j] = {{st.p0(), 1.0}};
    if (j == 0 || u(rng) >= 0.4) continue;
    const int lo = std::max(st.p1(), st.forward(j - 1 - MilpOptions{}.optimizer_horizon)), hi = st.forward(j - 2);
    const int r = pick(std::max(st.p0(), lo - 2), hi - 1);
    const int w = pick(lo + 1, std::min(st.head(), hi + 2));
    int at = -1;
    for (int s = lo; s <= hi && at < 0; ++s)
      if (r < s && s < w && s < load) at = s;
    if (at < 0) continue;
    d.state_read[j] = r;
    d.state_write[j] = w;
    d.layer_optimizer[j] = {{at, 1.0}};
  }
  // Resident layers (their forward's weights kept for the backward), among those that load
  // nothing early for their backward and run no recompute (as the MILP's: res_z rows).
  for (int j = 0; j < L; ++j)
    d.resident[j] = d.backward_load[j] < 0 && !d.boundaries[j].recompute && !d.boundaries[j + 1].recompute &&
                    u(rng) < 0.3;
  if (!assign_asap_traffic(d, cm)) return Plan{};
  Plan p = build_plan(req, cm, d);
  evaluate_plan(p);
  return p;
}

TEST(StreamingTransferWindows, RandomWindowsTrainBitwiseLikeInMemory) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("lt-streaming-windows-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const ModelConfig c = config();
  const RunOptions eight_bit{.eight_bit = true};
  const Trajectory ref = run_reference(c, eight_bit);
  int ran = 0, resident_on_emu = 0;
  Moved total;
  for (uint64_t seed = 1; ran < 6 && seed < 200; ++seed) {
    const Plan p = random_window_plan(c, seed);
    if (p.windows.empty()) continue;
    SCOPED_TRACE("seed " + std::to_string(seed));
    const auto problems = validate_plan(p);
    ASSERT_TRUE(problems.empty()) << problems.front();
    const SimResult sim = simulate_plan(p);
    EXPECT_TRUE(sim.violations.empty()) << sim.violations.front();
    const Moved m = moved(p);
    total.loads += m.loads;
    total.drains += m.drains;
    const bool emu = ran % 2 == 1;
    if (emu) resident_on_emu += static_cast<int>(p.resident_layers.size());
    std::printf("[windows plan %llu] %s: %d loads early, %d drains late, %zu paged states, %zu resident layers\n",
                static_cast<unsigned long long>(seed), emu ? "emu" : "cpu", m.loads, m.drains,
                p.nvme_state_layers.size(), p.resident_layers.size());
    expect_bitwise_equal(run_streaming(c, p, dir, emu ? make_emu_backend(5, 5) : make_cpu_backend(), eight_bit), ref,
                         std::string(emu ? "emu" : "cpu") + " windows plan " + std::to_string(seed));
    ++ran;
  }
  EXPECT_EQ(ran, 6) << "too few random decisions made a plan";
  EXPECT_GT(resident_on_emu, 0) << "no resident layer kept its forward's slot on emu";
  EXPECT_GT(total.loads, 0);
  EXPECT_GT(total.drains, 0);
  std::filesystem::remove_all(dir);
}

// Link rates as multiples of one layer's forward time F (plan test milp_transfer_windows's
// cases, on this model): a layer's weights cross h2d in h2d_f * F, its gradients d2h in
// d2h_f * F; NVMe moves a boundary in act_f * F (read; writes fast) or a layer's
// optimizer state in state_f * F.
PlanRequest rated_request(const ModelConfig& c, double h2d_f, double d2h_f, double act_f, double state_f) {
  PlanRequest req = request(c);
  req.hardware.act_bytes = 4;  // the executor's activations are fp32: the plan counts what it holds
  const CostModel cm = build_cost_model(req);
  const double F = cm.layer(0).forward_s;
  req.hardware.h2d_bw = cm.layer(0).weight_bytes / (h2d_f * F);
  req.hardware.d2h_bw = cm.layer(0).grad_bytes / (d2h_f * F);
  req.hardware.nvme_read_bw = act_f > 0 ? cm.boundary_bytes / (act_f * F) : cm.layer(0).state_bytes / (state_f * F);
  req.hardware.nvme_write_bw = act_f > 0 ? cm.boundary_bytes / (0.1 * F) : req.hardware.nvme_read_bw;
  req.hardware.host_optimizer_params_per_s = 1e30;  // updates cost no time: windows decide
  req.cpu_act_budget_bytes = 0;
  req.nvme_act_budget_bytes = 0;
  req.target_gap = 1e-6;
  return req;
}

// Per window: the plan's compute-tier bytes at its fullest (plan/plan_evaluate.cpp's rule).
std::vector<double> planned_live(const Plan& p) {
  std::vector<double> out;
  double live = p.fixed_gpu_bytes;
  for (const Window& w : p.windows) {
    for (const MemOp& a : w.alloc) live += a.bytes;
    out.push_back(live + w.workspace_bytes);
    for (const MemOp& f : w.free) live -= f.bytes;
  }
  return out;
}

// The MILP's plans where its windows differ from the rule: backward loads moved into HEAD
// (backward windows wait on h2d), a gradient drained late under an NVMe read, paged states
// in windows (and layers) of its choosing.
TEST(StreamingTransferWindows, MilpPlansWithMovedWindowsTrainBitwiseLikeInMemory) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("lt-streaming-milp-windows-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const ModelConfig c = config();
  const int L = static_cast<int>(c.num_layers);
  const RunOptions eight_bit{.eight_bit = true};
  const Trajectory ref = run_reference(c, eight_bit);

  struct Case {
    const char* name;
    PlanRequest req;
    Decisions structure;
  };
  std::vector<Case> cases;
  Decisions kept = all_gpu_decisions(L, "structure");
  kept.keep_internals.assign(L, true);
  cases.push_back({"backward loads", rated_request(c, 2.5, 0.5, 0, 0.5), kept});
  {
    Case k{"late drains", rated_request(c, 0.5, 2.5, 6, 0.5), kept};
    const CostModel cm = build_cost_model(k.req);
    k.req.nvme_act_budget_bytes = 1.01 * cm.boundary_bytes;
    k.structure.boundaries[0] = BoundaryPlacement{false, 0, 0, 1};
    ASSERT_TRUE(assign_asap_traffic(k.structure, cm));
    cases.push_back(k);
  }
  {
    Case k{"paging", rated_request(c, 0.5, 0.5, 0, 0.6), all_gpu_decisions(L, "structure")};
    const CostModel cm = build_cost_model(k.req);
    k.req.hardware.host_memory_bytes = (cm.host_state_bytes - 0.75 * cm.layer(0).state_bytes) / kHostStateShare;
    cases.push_back(k);
  }
  ModelParameters params(c), grads(c);
  test::init_parameters(params, 7);
  ComputeCopy copy(Precision::F32);
  copy.refresh(params);
  std::vector<int32_t> ids, labels;
  test::make_batch(ids, labels, kBatch * kSeq, c.vocab_size, 0);
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const CostModel cm = build_cost_model(k.req);
    MilpOptions opt;
    opt.fixed_structure = &k.structure;
    const Plan p = plan_milp(k.req, cm, opt);
    ASSERT_TRUE(p.feasible) << p.infeasible_reason;
    ASSERT_TRUE(validate_plan(p).empty()) << validate_plan(p).front();
    Plan rule = build_plan(k.req, cm, k.structure);
    evaluate_plan(rule);
    const Moved m = moved(p);
    const StatePaging rule_paging = plan_state_paging(k.req, cm, true);
    std::vector<int> rule_layers;
    for (int j = 0; j < L; ++j)
      if (rule_paging.on_nvme[j]) rule_layers.push_back(j);
    std::printf("[milp windows %s] %d loads early, %d drains late, paged %zu (rule %zu); step %.3f ms (rule %.3f ms)\n",
                k.name, m.loads, m.drains, p.nvme_state_layers.size(), rule_layers.size(), p.predicted_step_s * 1e3,
                rule.predicted_step_s * 1e3);
    EXPECT_TRUE(m.loads > 0 || m.drains > 0 || p.nvme_state_layers != rule_layers) << "the MILP kept the rule";
    EXPECT_LT(p.predicted_step_s, rule.predicted_step_s);
    EXPECT_TRUE(simulate_plan(p).violations.empty());
    for (bool emu : {false, true})
      expect_bitwise_equal(run_streaming(c, p, dir, emu ? make_emu_backend() : make_cpu_backend(), eight_bit), ref,
                           std::string(k.name) + (emu ? " emu" : " cpu"));
    // One step on emu: never more in a window than the plan counts.
    auto emu = make_emu_backend();
    StreamingOptions so;
    so.offload_dir = dir;
    so.direct_io = false;
    so.layer_state_bytes = Optimizer(params, true, p.nvme_state_layers).layer_state_bytes();
    StreamingExecutor ex(p, *emu, so);
    grads.zero();
    StepOptions o;
    o.compute_copy = copy.data(params);
    const StreamingStepResult r = ex.step(params, grads, ids.data(), labels.data(), o);
    const std::vector<double> bound = planned_live(p);
    ASSERT_EQ(r.compute_bytes.size(), p.windows.size());
    for (size_t w = 0; w < p.windows.size(); ++w)
      EXPECT_LE(r.compute_bytes[w].second, bound[w]) << "window " << p.windows[w].name << ": the executor holds more";
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace lt
