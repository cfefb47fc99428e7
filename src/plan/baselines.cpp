#include "plan/baselines.h"

#include "core/error.h"
#include "plan/data_parallel.h"
#include "plan/default_schedule.h"
#include "plan/head_streaming.h"
#include "plan/plan_builder.h"
#include "plan/plan_evaluate.h"
#include "plan/plan_stages.h"
#include "plan/plan_validate.h"

namespace lt {
namespace {

Plan finish(Plan p) {
  evaluate_plan(p);
  auto problems = capacity_problems(p);
  p.feasible = problems.empty();
  if (!p.feasible) p.infeasible_reason = problems.front();
  p.solve.status = "heuristic";
  return p;
}

Decisions megatrain_decisions(int L) {
  Decisions d = all_gpu_decisions(L, "megatrain");
  for (int b = 1; b < L; ++b) d.boundaries[b].recompute = b % kMegaTrainInterval != 0;
  d.lazy_optimizer = false;
  return d;
}

}  // namespace

Plan plan_megatrain(const PlanRequest& req, const CostModel& cm) {
  return finish(build_plan(req, cm, megatrain_decisions(cm.num_layers)));
}

Plan plan_keep_all(const PlanRequest& req, const CostModel& cm) {
  return finish(build_plan(req, cm, all_gpu_decisions(cm.num_layers, "keep-all")));
}

Plan plan_recompute_all(const PlanRequest& req, const CostModel& cm) {
  Decisions d = all_gpu_decisions(cm.num_layers, "recompute-all");
  for (int b = 1; b < cm.num_layers; ++b) d.boundaries[b].recompute = true;
  return finish(build_plan(req, cm, d));
}

Plan plan_greedy(const PlanRequest& req, const CostModel& cm) {
  const int L = cm.num_layers;
  Decisions d = all_gpu_decisions(L, "greedy");
  // A candidate is usable when every NVMe part's chain fits its schedule (recomputing a
  // boundary moves the reload deadline of the stored one below it earlier).
  auto try_build = [&](Plan& out) {
    if (!assign_asap_traffic(d, cm)) return false;
    out = finish(build_plan(req, cm, d));
    return true;
  };
  Plan p;
  try_build(p);
  // A whole head that does not fit streams first: that costs one more pass of its weights
  // over the link, under HEAD's compute, where every boundary moved costs its own traffic
  // or its recompute.
  if (!p.feasible && cm.min_head_chunk_rows() > 0) {
    d.head_chunk_rows = cm.min_head_chunk_rows();
    try_build(p);
  }
  auto host_ok = [](const Plan& q) {
    return cpu_reserved_activation_bytes(q) <= q.cpu_act_budget_bytes * (1 + 1e-9) &&
           q.predicted_peak.cpu <= q.hardware.host_memory_bytes;
  };
  for (int b = 1; b < L && !p.feasible; ++b) {
    // Host memory first: it costs link time only. Then NVMe, then recompute; a boundary no
    // option suits stays on the compute tier.
    const BoundaryPlacement options[] = {{false, 0, 1, 0}, {false, 0, 0, 1}, {true, 0, 0, 0}};
    for (const BoundaryPlacement& o : options) {
      BoundaryPlacement old = d.boundaries[b];
      d.boundaries[b] = o;
      Plan q;
      bool ok = try_build(q) && host_ok(q) &&
                q.predicted_peak.nvme - q.nvme_state_bytes() <= q.nvme_act_budget_bytes * (1 + 1e-9);
      if (ok) {
        p = std::move(q);
        break;
      }
      d.boundaries[b] = old;
    }
  }
  if (p.windows.empty()) {  // nothing buildable: report the all-GPU plan
    d = all_gpu_decisions(L, "greedy");
    try_build(p);
  }
  if (p.feasible && d.head_chunk_rows > 0 && assign_asap_traffic(d, cm)) {  // the traffic of p's boundaries
    p = widen_head_chunks(req, cm, d, std::move(p));
    p.solve.status = "heuristic";
  }
  return p;
}

Plan plan_megatrain_code(const PlanRequest& req, const CostModel& cm) {
  const int L = cm.num_layers;
  const double A = cm.boundary_bytes;
  Plan p;
  fill_plan_header(p, req, cm, "megatrain-code", cm.host_state_bytes_fp32);
  // Two weight slots for the whole step: its load windows fill one while the compute
  // before reads the other (without the windows' barriers, the next load runs under that
  // compute).
  p.fixed_gpu_bytes = 2 * cm.slot_weight_bytes();
  p.boundaries.assign(L + 1, BoundaryPlacement{});
  for (int b = 1; b < L; ++b) p.boundaries[b].recompute = b % kMegaTrainInterval != 0;
  p.blocks = {};
  for (int s = 0; s < L; s += kMegaTrainInterval) p.blocks.emplace_back(s, std::min(L, s + kMegaTrainInterval));
  p.lazy_optimizer = false;
  Stages st{L};
  auto window = [](std::string name, WindowKind k, int layer, int stage) {
    Window w;
    w.name = std::move(name);
    w.kind = k;
    w.layer = layer;
    w.stage = stage;
    return w;
  };
  auto bname = [](const char* prefix, int i) { return std::string(prefix) + "." + std::to_string(i); };
  const double opt_rate = req.hardware.host_optimizer_params_per_s;
  {
    Window w = window("P0", WindowKind::Prologue0, -1, st.p0());
    w.host.push_back({"clip", "all", 8 * cm.total_params, cm.clip_pass_s});
    auto opt = [&](const std::string& target, double params) {
      w.host.push_back({"optimizer", target, params, params / opt_rate});
      p.optimizer.push_back({target, 0, 1.0});
    };
    opt("embed", cm.embed_params);
    opt("head", cm.head_params);
    for (int j = 0; j < L; ++j) opt(bname("layer", j), cm.layer(j).params);
    p.windows.push_back(std::move(w));
  }
  {
    Window w = window("P1", WindowKind::Prologue1, -1, st.p1());
    w.transfers = {{"w.0", Link::H2D, cm.layer(0).weight_bytes}, {"in.0", Link::H2D, A}};
    w.alloc.push_back({"a.0.gpu", A});
    p.windows.push_back(std::move(w));
  }
  for (int j = 0; j < L; ++j) {
    Window w = window("F" + std::to_string(j), WindowKind::Forward, j, st.forward(j));
    w.compute_flops = cm.layer(j).forward_flops;
    w.compute_s = cm.layer(j).forward_s;
    w.workspace_bytes = cm.layer(j).workspace_forward;
    if (j + 1 < L) w.transfers.push_back({bname("w", j + 1), Link::H2D, cm.layer(j + 1).weight_bytes});
    int b = j + 1;
    if (b == L || p.boundaries[b].recompute) {
      w.alloc.push_back({"a." + std::to_string(b) + ".tmp", A});
    } else {
      w.alloc.push_back({"a." + std::to_string(b) + ".gpu", A});
    }
    if (j > 0 && p.boundaries[j].recompute) w.free.push_back({"a." + std::to_string(j) + ".tmp", A});
    p.windows.push_back(std::move(w));
  }
  {
    Window w = window("HEAD", WindowKind::Head, -1, st.head());
    w.compute_flops = cm.head_flops;
    w.compute_s = cm.head_s;
    w.workspace_bytes = cm.workspace_head;
    w.transfers = {{"w.head", Link::H2D, cm.head_weight_bytes}, {"g.head", Link::D2H, cm.head_grad_bytes}};
    const double head_buffer = cm.head_footprint(0).weight_buffer_bytes;
    w.alloc = {{"w.head", head_buffer}, {"g.head", cm.head_grad_bytes}};
    w.free = {{"a." + std::to_string(L) + ".tmp", A}, {"w.head", head_buffer}};
    p.windows.push_back(std::move(w));
  }
  // The head's gradient slot drains under the next window (the first load).
  bool head_grad_live = true;
  // Backward: a load window (no compute) before every compute window; the gradients of
  // the last backward layer drain in the next window.
  // Two gradient slots: one drains (in the load window after its backward) while the next
  // compute fills the other, so a slot is free after that compute's window.
  int pending_grad = -1;   // the layer whose gradients drain next
  int draining_grad = -1;  // the layer whose gradients the last load window drained
  auto free_drained = [&](Window& w) {
    if (draining_grad >= 0) w.free.push_back({bname("g", draining_grad), cm.slot_grad_bytes()});
    draining_grad = -1;
  };
  auto load = [&](int layer, int stage) {
    Window w = window("LD" + std::to_string(layer), WindowKind::Load, -1, stage);
    w.transfers.push_back({bname("w", layer), Link::H2D, cm.layer(layer).weight_bytes});
    if (pending_grad >= 0)
      w.transfers.push_back({bname("g", pending_grad), Link::D2H, cm.layer(pending_grad).grad_bytes});
    draining_grad = pending_grad;
    pending_grad = -1;
    if (head_grad_live) w.free.push_back({"g.head", cm.head_grad_bytes});
    head_grad_live = false;
    p.windows.push_back(std::move(w));
  };
  for (auto it = p.blocks.rbegin(); it != p.blocks.rend(); ++it) {
    auto [s, e] = *it;
    for (int k = s; k < e; ++k) {
      load(k, st.backward(e - 1));
      Window w = window("RC" + std::to_string(k), WindowKind::Recompute, k, st.backward(e - 1));
      w.compute_flops = cm.layer(k).forward_flops;
      w.compute_s = cm.layer(k).forward_s;
      w.workspace_bytes = cm.layer(k).workspace_recompute - cm.layer(k).internals_bytes;  // its internals: below
      w.alloc.push_back({bname("int", k), cm.layer(k).internals_bytes});
      if (k + 1 < e) w.alloc.push_back({"rc." + std::to_string(k + 1), A});
      free_drained(w);
      p.windows.push_back(std::move(w));
    }
    for (int j = e - 1; j >= s; --j) {
      load(j, st.backward(j));
      Window w = window("B" + std::to_string(j), WindowKind::Backward, j, st.backward(j));
      const LayerCost& lc = cm.layer(j);
      w.compute_flops = 2 * lc.forward_flops;
      w.compute_s = lc.backward_s;
      w.workspace_bytes = lc.workspace_backward - lc.internals_bytes;
      w.alloc.push_back({bname("g", j), cm.slot_grad_bytes()});  // drained by the next window
      w.free.push_back({bname("int", j), lc.internals_bytes});
      w.free.push_back({j == s ? "a." + std::to_string(j) + ".gpu" : "rc." + std::to_string(j), A});
      free_drained(w);
      pending_grad = j;
      p.windows.push_back(std::move(w));
    }
  }
  {
    Window w = window("E", WindowKind::Epilogue, -1, st.epilogue());
    w.transfers = {{"g.0", Link::D2H, cm.layer(0).grad_bytes}, {"dx.0", Link::D2H, cm.embed_grad_bytes}};
    w.alloc.push_back({"dx.0", cm.embed_grad_bytes});
    w.free = {{"g.0", cm.slot_grad_bytes()}, {"dx.0", cm.embed_grad_bytes}};
    p.windows.push_back(std::move(w));
  }
  add_rank_exchange(p, cm);
  return finish(std::move(p));
}

}  // namespace lt
