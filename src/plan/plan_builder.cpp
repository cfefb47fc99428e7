#include "plan/plan_builder.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "model/layer_specs.h"
#include "plan/data_parallel.h"
#include "plan/plan_memory.h"
#include "plan/plan_stages.h"
#include "plan/state_paging.h"

namespace lt {
namespace {

std::string layer_tensor(const char* prefix, int j) { return std::string(prefix) + "." + std::to_string(j); }
std::string part(int b, const char* which) { return "a." + std::to_string(b) + "." + which; }

struct Builder {
  const PlanRequest& req;
  const CostModel& cm;
  const Decisions& d;
  Plan& p;
  const StatePaging& paging;
  int L;
  Stages st;
  HeadFootprint head;
  std::vector<int> stage_window;  // stage -> window index its traffic and host work join

  int add(Window w) {
    p.windows.push_back(std::move(w));
    return static_cast<int>(p.windows.size()) - 1;
  }
  Window& at(int i) { return p.windows[i]; }
  static void transfer(Window& w, const std::string& t, Link l, double bytes) {
    if (bytes > 0) w.transfers.push_back({t, l, bytes});
  }
  // Layer j's weights into a weight slot, which lives from this window to the end of the
  // compute that reads them (plan_memory.h lays the slots out).
  void load_weights(Window& w, int j) { transfer(w, layer_tensor("w", j), Link::H2D, cm.layer(j).weight_bytes); }
  bool materialized(int b) const { return b == L || !d.boundaries[b].recompute; }
  double A() const { return cm.boundary_bytes; }

  Window compute_window(const std::string& name, WindowKind kind, int layer, int stage, double flops,
                        double seconds) {
    Window w;
    w.name = name;
    w.kind = kind;
    w.layer = layer;
    w.stage = stage;
    w.compute_flops = flops;
    w.compute_s = seconds;
    return w;
  }

  // The head, whole or streamed in chunks (plan/plan.h): F{L-1} prefetches the whole head,
  // or the final norm and chunk 0 into the first of two chunk buffers.
  void prefetch_head(Window& w) {
    if (!head.chunk_rows) {
      transfer(w, "w.head", Link::H2D, head.prefetch_h2d_bytes);
    } else {
      transfer(w, "w.head.norm", Link::H2D, head.norm_weight_bytes);
      transfer(w, "w.head.0", Link::H2D, head.chunk_weight_bytes(0));
    }
  }
  // HEAD's own head traffic: a streamed head loads chunks 1.. for the forward pass, every
  // chunk again for the backward pass, and drains each chunk's gradient rows, then the
  // final norm's (computed from the input gradient the last chunk completes).
  void head_traffic(Window& w) {
    if (!head.chunk_rows) {
      transfer(w, "g.head", Link::D2H, head.head_d2h_bytes);
      return;
    }
    const auto chunk = [](int64_t c) { return "w.head." + std::to_string(c); };
    for (int64_t c = 1; c < head.chunks; ++c) transfer(w, chunk(c), Link::H2D, head.chunk_weight_bytes(c));
    for (int64_t c = 0; c < head.chunks; ++c) transfer(w, chunk(c), Link::H2D, head.chunk_weight_bytes(c));
    for (int64_t c = 0; c < head.chunks; ++c)
      transfer(w, "g.head." + std::to_string(c), Link::D2H, head.chunk_grad_bytes(c));
    transfer(w, "g.head.norm", Link::D2H, head.norm_grad_bytes);
  }

  void build() {
    stage_window.assign(st.count(), -1);
    // P0 and P1.
    stage_window[st.p0()] = add(compute_window("P0", WindowKind::Prologue0, -1, st.p0(), 0, 0));
    {
      Window w = compute_window("P1", WindowKind::Prologue1, -1, st.p1(), 0, 0);
      load_weights(w, 0);
      transfer(w, "in.0", Link::H2D, A());
      stage_window[st.p1()] = add(std::move(w));
    }
    // Forward.
    for (int j = 0; j < L; ++j) {
      Window w = compute_window("F" + std::to_string(j), WindowKind::Forward, j, st.forward(j),
                                cm.layer(j).forward_flops, cm.layer(j).forward_s);
      if (j + 1 < L) {
        load_weights(w, j + 1);
      } else {  // the last forward prefetches the head, as every forward prefetches its successor
        prefetch_head(w);
      }
      stage_window[st.forward(j)] = add(std::move(w));
    }
    // Head.
    {
      Window w = compute_window("HEAD", WindowKind::Head, -1, st.head(), cm.head_flops, cm.head_s);
      head_traffic(w);
      stage_window[st.head()] = add(std::move(w));
    }
    // Backward: blocks from the top down.
    auto blocks = recompute_blocks(d.boundaries);
    std::vector<int> backward_windows;
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
      auto [s, e] = *it;
      for (int k = s; k + 1 < e; ++k) {
        Window w = compute_window("RC" + std::to_string(k), WindowKind::Recompute, k, st.backward(e - 1),
                                  cm.layer(k).forward_flops, cm.layer(k).forward_s);
        backward_windows.push_back(add(std::move(w)));
      }
      for (int j = e - 1; j >= s; --j) {
        bool keep = d.keep_internals[j];
        const LayerCost& lc = cm.layer(j);
        // Kept internals are read where they are rather than rerun.
        Window w = compute_window("B" + std::to_string(j), WindowKind::Backward, j, st.backward(j),
                                  (keep ? 2 : 3) * lc.forward_flops, lc.backward_s + (keep ? 0 : lc.forward_s));
        // Layer j's gradient slot fills here; layer j+1's drains here (the rule).
        if (j + 1 < L) transfer(w, layer_tensor("g", j + 1), Link::D2H, cm.layer(j + 1).grad_bytes);
        int idx = add(std::move(w));
        stage_window[st.backward(j)] = idx;
        backward_windows.push_back(idx);
      }
    }
    // Weight prefetch: the window before each backward compute window loads its weights,
    // unless the layer stayed resident since its forward.
    int prev = stage_window[st.head()];
    for (int idx : backward_windows) {
      int layer = at(idx).layer;
      if (!d.resident[layer]) load_weights(at(prev), layer);
      prev = idx;
    }
    // Epilogue.
    {
      Window w = compute_window("E", WindowKind::Epilogue, -1, st.epilogue(), 0, 0);
      transfer(w, "g.0", Link::D2H, cm.layer(0).grad_bytes);
      transfer(w, "dx.0", Link::D2H, cm.embed_grad_bytes);
      stage_window[st.epilogue()] = add(std::move(w));
    }
    attach_traffic();
    attach_optimizer();
    attach_state_paging();
    apply_transfer_windows();
  }

  Window& stage(int s) {
    LT_ASSERT(s >= 0 && s < st.count() && stage_window[s] >= 0, "stage " + std::to_string(s));
    return at(stage_window[s]);
  }

  void attach_traffic() {
    for (int b = 0; b < L; ++b) {
      if (!materialized(b)) continue;
      const BoundaryTraffic& t = d.traffic[b];
      for (auto& x : t.d2h_cpu) transfer(stage(x.stage), part(b, "cpu"), Link::D2H, x.bytes);
      for (auto& x : t.d2h_nvme) transfer(stage(x.stage), part(b, "nvme"), Link::D2H, x.bytes);
      for (auto& x : t.nvme_write) transfer(stage(x.stage), part(b, "nvme"), Link::NvmeWrite, x.bytes);
      for (auto& x : t.nvme_read) transfer(stage(x.stage), part(b, "nvme"), Link::NvmeRead, x.bytes);
      for (auto& x : t.h2d_cpu) transfer(stage(x.stage), part(b, "cpu"), Link::H2D, x.bytes);
      for (auto& x : t.h2d_nvme) transfer(stage(x.stage), part(b, "nvme"), Link::H2D, x.bytes);
    }
  }

  // Paged optimizer states: read before the update, written back after it; paged bf16
  // copies written in their forward, read back for their backward.
  void attach_state_paging() {
    for (int j = 0; j < L; ++j) {
      if (!paging.on_nvme[j]) continue;
      const std::string os = layer_tensor("os", j);
      transfer(stage(paging.read_stage[j]), os, Link::NvmeRead, paging.state_bytes[j]);
      transfer(stage(paging.write_stage[j]), os, Link::NvmeWrite, paging.write_bytes[j]);
      if (paging.grad_bytes[j] > 0) {
        LT_ASSERT(d.grad_drain.empty() || d.grad_drain[j] < 0, "paged gradients drained off the rule");
        transfer(stage(StatePaging::grad_write_stage(st, j)), layer_tensor("gs", j), Link::NvmeWrite,
                 paging.grad_bytes[j]);
      }
      p.nvme_state_layers.push_back(j);
      if (paging.master_on_nvme[j]) p.nvme_master_layers.push_back(j);
      if (paging.grads_on_nvme[j]) p.nvme_grad_layers.push_back(j);
      if (j < static_cast<int>(paging.copy_on_nvme.size()) && paging.copy_on_nvme[j]) {
        const std::string cp = layer_tensor("cp", j);
        transfer(stage(StatePaging::copy_write_stage(st, j)), cp, Link::NvmeWrite, paging.copy_bytes[j]);
        transfer(stage(StatePaging::copy_read_stage(st, j)), cp, Link::NvmeRead, paging.copy_bytes[j]);
        p.nvme_copy_layers.push_back(j);
      }
    }
    p.state_bytes_per_layer = paging.layer_bytes;
    if (!p.nvme_copy_layers.empty()) p.copy_bytes_per_layer = paging.copy_layer_bytes;
  }

  // Moves one transfer of `tensor` on `link` from window `from` to window `to` (appended
  // there, or inserted before the first transfer whose name starts with `before`).
  void move_transfer(int from, int to, const std::string& tensor, Link link, const char* before = nullptr) {
    auto& src = at(from).transfers;
    auto it = std::find_if(src.begin(), src.end(), [&](const Transfer& x) { return x.tensor == tensor && x.link == link; });
    LT_ASSERT(it != src.end(), tensor + " is not moved by window " + at(from).name);
    Transfer moved = *it;
    src.erase(it);
    auto& dst = at(to).transfers;
    auto pos = dst.end();
    if (before)
      pos = std::find_if(dst.begin(), dst.end(), [&](const Transfer& x) { return x.tensor.rfind(before, 0) == 0 && x.link == link; });
    dst.insert(pos, std::move(moved));
  }

  // The decisions' load and drain stages (plan_decisions.h), applied to the rule's windows
  // built above: a weight loaded early holds its slot from its load, a gradient drained
  // late holds its slot to its drain (plan_memory.h).
  void apply_transfer_windows() {
    auto chosen = [&](const std::vector<int>& v, int j) { return j < static_cast<int>(v.size()) ? v[j] : -1; };
    for (int j = 1; j < L; ++j) {
      const int q = chosen(d.forward_load, j), rule = st.forward(j - 1);
      if (q < 0 || q == rule) continue;
      LT_ASSERT(q >= st.p1() && q < rule, "forward load of layer " + std::to_string(j) + " in stage " + std::to_string(q));
      const int to = stage_window[q], rule_w = stage_window[rule];
      move_transfer(rule_w, to, layer_tensor("w", j), Link::H2D);
    }
    for (int j = 0; j + 1 < L; ++j) {
      const int k = chosen(d.backward_load, j);
      if (k < 0) continue;
      const int use = stage_window[st.backward(j)], rule_w = use - 1;
      LT_ASSERT(!d.resident[j], "an early backward load of resident layer " + std::to_string(j));
      LT_ASSERT(at(rule_w).kind == WindowKind::Backward || at(rule_w).kind == WindowKind::Head,
                "an early backward load of layer " + std::to_string(j) + ", whose B window follows a recompute");
      const int to = stage_window[k];
      LT_ASSERT(to < rule_w && (k == st.head() || st.is_backward(k)),
                "backward load of layer " + std::to_string(j) + " in stage " + std::to_string(k));
      for (int w = to; w < rule_w; ++w)
        LT_ASSERT(at(w).kind != WindowKind::Recompute, "an early backward load across a recompute window");
      move_transfer(rule_w, to, layer_tensor("w", j), Link::H2D);
    }
    // Late drains, latest-produced (highest layer) first: a window lists the gradients it
    // drains in the order they were produced.
    for (int j = L - 1; j >= 1; --j) {
      const int k = chosen(d.grad_drain, j), rule = st.backward(j - 1);
      if (k < 0 || k == rule) continue;
      LT_ASSERT(k > rule && (k == st.epilogue() || st.is_backward(k)),
                "gradient drain of layer " + std::to_string(j) + " in stage " + std::to_string(k));
      const int rule_w = stage_window[rule], to = stage_window[k];
      move_transfer(rule_w, to, layer_tensor("g", j), Link::D2H, "g.");
    }
  }

  void add_optimizer(int window, const std::string& target, double params, double fraction) {
    if (fraction <= 0) return;
    double work = params * fraction;
    at(window).host.push_back(
        {"optimizer", target, work, work / req.hardware.host_optimizer_params_per_s});
    p.optimizer.push_back({target, window, fraction});
  }

  void attach_optimizer() {
    int p0 = stage_window[st.p0()];
    add_optimizer(p0, "embed", cm.embed_params, 1);
    if (!d.lazy_optimizer) {
      add_optimizer(p0, "head", cm.head_params, 1);
      for (int j = 0; j < L; ++j) add_optimizer(p0, layer_tensor("layer", j), cm.layer(j).params, 1);
      return;
    }
    for (auto& f : d.head_optimizer) add_optimizer(stage_window[f.stage], "head", cm.head_params, f.fraction);
    for (int j = 0; j < L; ++j) {
      if (paging.on_nvme[j] && !d.paging_decided) {  // the rule: its one slot between the state's read and write
        add_optimizer(stage_window[StatePaging::rule_update_stage(st, j)], layer_tensor("layer", j),
                      cm.layer(j).params, 1);
        continue;
      }
      for (auto& f : d.layer_optimizer[j])
        add_optimizer(stage_window[f.stage], layer_tensor("layer", j), cm.layer(j).params, f.fraction);
    }
  }
};

// The rule's paged copies: every paged layer whose copy may page, whose output boundary
// is stored (no recompute window reads its weights), whose weights load by the rule, and
// which is not resident (its backward loads them again).
std::vector<bool> copy_pages_by_rule(const StatePaging& paging, const Decisions& d) {
  const int L = static_cast<int>(paging.on_nvme.size());
  std::vector<bool> copy(L, false);
  for (int j = 0; j < L; ++j)
    copy[j] = paging.on_nvme[j] && StatePaging::copy_may_page(L, j) && !d.boundaries[j + 1].recompute &&
              !d.resident[j] && (d.forward_load.empty() || d.forward_load[j] < 0) &&
              (d.backward_load.empty() || d.backward_load[j] < 0);
  return copy;
}

}  // namespace

void fill_plan_header(Plan& p, const PlanRequest& req, const CostModel& cm, const std::string& policy,
                      double host_state_bytes, double nvme_state_bytes) {
  p.policy = policy;
  p.model_name = req.model_name;
  p.model = req.model;
  p.hardware = req.hardware;
  p.batch = req.batch;
  p.seq = req.seq;
  p.num_layers = cm.num_layers;
  p.num_params = cm.total_params;
  p.num_active_params = static_cast<double>(active_params(req.model));
  p.gpu_cap_bytes = req.gpu_cap();
  p.cpu_act_budget_bytes = req.cpu_budget(host_state_bytes);
  p.nvme_act_budget_bytes = req.nvme_budget(nvme_state_bytes);
  // Nothing is held for the whole step: weight slots are allocated from their load to
  // their use (w.<j>), gradient slots from their backward to their drain (g.<j>).
  p.fixed_gpu_bytes = 0;
  p.host_state_bytes = host_state_bytes;
  p.scratch = req.scratch;
  p.ranks = cm.dp.ranks;
  p.shard_optimizer = cm.dp.on() && cm.dp.sharded;
  p.slot_sums = cm.dp.on() && cm.dp.slot_sums;
}

Plan build_plan(const PlanRequest& req, const CostModel& cm, const Decisions& d) {
  const int L = cm.num_layers;
  LT_ASSERT(static_cast<int>(d.boundaries.size()) == L + 1, "boundaries");
  LT_ASSERT(static_cast<int>(d.resident.size()) == L && static_cast<int>(d.keep_internals.size()) == L, "flags");
  LT_ASSERT(static_cast<int>(d.traffic.size()) == L + 1, "traffic");
  LT_ASSERT(!d.boundaries[0].recompute && !d.boundaries[L].recompute, "boundaries 0 and L are materialized");
  Plan p;
  StatePaging paging = d.paging_decided ? paging_from_stages(cm, d.state_read, d.state_write)
                                        : plan_state_paging(req, cm, d.lazy_optimizer);
  if (!d.master_paged.empty()) page_parts(paging, cm, d.master_paged, d.grads_paged);
  if (req.page_copy && !d.copy_paged.empty())
    page_copies(paging, cm, d.copy_paged);
  else if (req.page_copy && !d.paging_decided)
    page_copies(paging, cm, copy_pages_by_rule(paging, d));
  fill_plan_header(p, req, cm, d.policy, paging.host_state_bytes, paging.nvme_bytes());
  p.boundaries = d.boundaries;
  p.boundaries[L] = BoundaryPlacement{};
  p.blocks = recompute_blocks(d.boundaries);
  for (int j = 0; j < L; ++j) {
    if (d.resident[j]) p.resident_layers.push_back(j);
    if (d.keep_internals[j]) p.keep_internals.push_back(j);
  }
  p.lazy_optimizer = d.lazy_optimizer;
  p.head_chunk_rows = d.head_chunk_rows;
  Builder b{req, cm, d, p, paging, L, Stages{L}, cm.head_footprint(d.head_chunk_rows), {}};
  b.build();
  add_rank_exchange(p, cm);
  lay_out_plan_memory(p, cm);
  return p;
}

}  // namespace lt
