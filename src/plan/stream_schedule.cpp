#include "plan/stream_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace lt {

std::string UpdateTarget::name() const {
  switch (kind) {
    case Kind::Embed: return "embed";
    case Kind::Head: return "head";
    case Kind::Layer: break;
  }
  return "layer." + std::to_string(layer);
}

namespace {

[[noreturn]] void bad_plan(const std::string& what) {
  throw Error(what, "plan for the streaming executor", "regenerate the plan with `lazytrain plan`");
}

bool moves(const Window& w, const std::string& tensor, Link link) {
  for (const Transfer& t : w.transfers)
    if (t.link == link && t.tensor == tensor && t.bytes > 0) return true;
  return false;
}

// Paged optimizer states: each read issued no later than its layer's update, each write
// no earlier; staging slots assigned greedily over [read, write] window intervals.
void schedule_state_paging(StreamSchedule& s, const Plan& plan) {
  const int L = s.L;
  s.state_read_w.assign(L, -1);
  s.state_write_w.assign(L, -1);
  s.state_slot.assign(L, -1);
  s.grad_write_w.assign(L, -1);
  std::vector<int> slot_free_after;  // per slot: the last window it is busy in
  for (int j : plan.nvme_state_layers) {
    if (j < 0 || j >= L || s.state_read_w[j] >= 0) bad_plan("bad or repeated paged layer " + std::to_string(j));
    const std::string os = "os." + std::to_string(j);
    for (int w = 0; w < static_cast<int>(plan.windows.size()); ++w) {
      if (s.state_read_w[j] < 0 && moves(plan.windows[w], os, Link::NvmeRead)) s.state_read_w[j] = w;
      if (moves(plan.windows[w], os, Link::NvmeWrite)) s.state_write_w[j] = w;
    }
    const int update = s.update_w[1 + j];
    if (s.state_read_w[j] < 0 || s.state_write_w[j] < 0 || s.state_read_w[j] > update || s.state_write_w[j] < update)
      bad_plan("layer " + std::to_string(j) + "'s optimizer state is paged, but the plan does not read it before " +
               "its update and write it back after");
    const std::string gs = "gs." + std::to_string(j);
    for (int w = 0; w < static_cast<int>(plan.windows.size()); ++w)
      if (moves(plan.windows[w], gs, Link::NvmeWrite)) s.grad_write_w[j] = w;
    // After the window that drains them (its barrier lands them on the host).
    if (plan.grads_paged(j) && (s.grad_write_w[j] < 0 || s.grad_write_w[j] <= s.grad_drain_w[j]))
      bad_plan("layer " + std::to_string(j) + "'s gradients page, but the plan does not write them after their drain");
    if (!plan.grads_paged(j) && s.grad_write_w[j] >= 0)
      bad_plan("the plan writes layer " + std::to_string(j) + "'s gradients to NVMe, but does not list them as paged");
  }
  for (const auto* parts : {&plan.nvme_master_layers, &plan.nvme_grad_layers})
    for (int j : *parts)
      if (j < 0 || j >= L || s.state_read_w[j] < 0)
        bad_plan("layer " + std::to_string(j) + "'s masters or gradients page, but its optimizer state does not");
  s.master_paged.assign(L, false);
  for (int j : plan.nvme_master_layers) s.master_paged[j] = true;
  s.copy_write_w.assign(L, -1);
  s.copy_read_w.assign(L, -1);
  for (int j : plan.nvme_copy_layers) {
    if (j < 0 || j >= L || !plan.master_paged(j) || s.copy_write_w[j] >= 0)
      bad_plan("bad or repeated layer " + std::to_string(j) + " with a paged bf16 copy (its masters must page too)");
    const std::string cp = "cp." + std::to_string(j);
    for (int w = 0; w < static_cast<int>(plan.windows.size()); ++w) {
      if (moves(plan.windows[w], cp, Link::NvmeWrite)) s.copy_write_w[j] = w;
      if (moves(plan.windows[w], cp, Link::NvmeRead)) s.copy_read_w[j] = w;
    }
    if (s.copy_write_w[j] < s.update_w[1 + j] || s.copy_read_w[j] <= s.copy_write_w[j])
      bad_plan("layer " + std::to_string(j) + "'s bf16 copy pages, but the plan does not write it after its update "
               "and read it back after that");
  }
  // Slots by read order (the plan lists layers in any order).
  std::vector<int> order;
  for (int j = 0; j < L; ++j)
    if (s.state_read_w[j] >= 0) order.push_back(j);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return s.state_read_w[a] < s.state_read_w[b]; });
  for (int j : order) {
    size_t k = 0;
    while (k < slot_free_after.size() && slot_free_after[k] >= s.state_read_w[j]) ++k;
    if (k == slot_free_after.size()) slot_free_after.push_back(-1);
    slot_free_after[k] = s.state_write_w[j];
    s.state_slot[j] = static_cast<int>(k);
  }
  s.state_slots = static_cast<int>(slot_free_after.size());
}

double bytes_moved(const Window& w, const std::string& tensor, Link link) {
  double bytes = 0;
  for (const Transfer& t : w.transfers)
    if (t.link == link && t.tensor == tensor) bytes += t.bytes;
  return bytes;
}

// Offloaded boundary b's fetches: each part's tokens come back in proportion to the
// plan's h2d copies of it after the forward use, and whatever those leave in the first
// backward window; then the parts' order in the boundary and the NVMe read's window.
void schedule_fetches(BoundarySchedule& bs, const Plan& plan, int b) {
  const std::string cpu = "a." + std::to_string(b) + ".cpu", nvme = "a." + std::to_string(b) + ".nvme";
  const int from = bs.forward_use_w + 1, last = bs.backward_first_w;
  double cpu_total = 0, nvme_total = 0;
  for (int w = from; w <= last; ++w) {
    cpu_total += bytes_moved(plan.windows[w], cpu, Link::H2D);
    nvme_total += bytes_moved(plan.windows[w], nvme, Link::H2D);
  }
  const auto tokens = [](double moved, double total, int64_t n) {
    return total > 0 ? std::min<int64_t>(n, std::llround(moved / total * static_cast<double>(n))) : 0;
  };
  double cpu_moved = 0, nvme_moved = 0;
  int64_t cpu_back = 0, nvme_back = 0;
  int first_cpu = last + 1, first_nvme = last + 1;
  for (int w = from; w <= last; ++w) {
    cpu_moved += bytes_moved(plan.windows[w], cpu, Link::H2D);
    nvme_moved += bytes_moved(plan.windows[w], nvme, Link::H2D);
    const int64_t c = w == last ? bs.cpu_tokens : tokens(cpu_moved, cpu_total, bs.cpu_tokens);
    const int64_t n = w == last ? bs.nvme_tokens : tokens(nvme_moved, nvme_total, bs.nvme_tokens);
    if (c == cpu_back && n == nvme_back) continue;
    bs.fetches.push_back({w, cpu_back, c, nvme_back, n});
    if (c > cpu_back) first_cpu = std::min(first_cpu, w);
    if (n > nvme_back) first_nvme = std::min(first_nvme, w);
    cpu_back = c;
    nvme_back = n;
  }
  const bool nvme_first = first_nvme < first_cpu;
  bs.cpu_row = bs.gpu_tokens + (nvme_first ? bs.nvme_tokens : 0);
  bs.nvme_row = bs.gpu_tokens + (nvme_first ? 0 : bs.cpu_tokens);
  bs.nvme_read_w = std::min(first_nvme, last);
  for (int w = from; w < bs.nvme_read_w; ++w)
    if (moves(plan.windows[w], nvme, Link::NvmeRead)) {
      bs.nvme_read_w = w;
      break;
    }
}

}  // namespace

StreamSchedule make_stream_schedule(const Plan& plan, const ArenaSizes& sizes) {
  const ComputeTierWeights& cw = sizes.weights;
  const StepScratch& scratch = sizes.scratch;
  const bool weights_on_compute = cw.on_compute;
  if (!plan.feasible) bad_plan("the plan is infeasible: " + plan.infeasible_reason);
  // A plan that counts the executor's scratch must count at least what this one's kernels
  // take, or its windows' workspace would exceed the plan's; one without the figure
  // (estimated) is run as it is.
  const auto check_scratch = [&](double planned, size_t needed, const char* what) {
    if (planned >= 0 && static_cast<double>(needed) > planned)
      throw Error("the plan counts " + std::to_string(static_cast<int64_t>(planned)) + " bytes of " + what +
                      " scratch, and this executor's kernels take " + std::to_string(needed),
                  "plan for the streaming executor",
                  "regenerate the plan for this executor (lazytrain train plans it itself when no --plan is given)");
  };
  check_scratch(plan.scratch.layer_bytes, scratch.layer, "layer-pass");
  check_scratch(plan.scratch.head_bytes, scratch.head, "cross-entropy");
  StreamSchedule s;
  const int L = plan.model.num_layers;
  s.L = L;
  s.tokens = plan.batch * plan.seq;
  s.hidden = plan.model.hidden_size;
  if (L <= 0 || static_cast<int>(plan.boundaries.size()) != L + 1)
    bad_plan("the plan has " + std::to_string(plan.boundaries.size()) + " boundaries for " +
             std::to_string(L) + " layers");
  s.forward_w.assign(L, -1);
  s.backward_w.assign(L, -1);
  s.recompute_w.assign(L, -1);
  for (int w = 0; w < static_cast<int>(plan.windows.size()); ++w) {
    const Window& win = plan.windows[w];
    const int j = win.layer;
    auto layer_slot = [&](std::vector<int>& v) {
      if (j < 0 || j >= L || v[j] >= 0) bad_plan("window " + win.name + " has a bad or repeated layer");
      v[j] = w;
    };
    switch (win.kind) {
      case WindowKind::Prologue0: s.p0 = w; break;
      case WindowKind::Prologue1: s.p1 = w; break;
      case WindowKind::Forward: layer_slot(s.forward_w); break;
      case WindowKind::Head: s.head = w; break;
      case WindowKind::Recompute: layer_slot(s.recompute_w); break;
      case WindowKind::Backward: layer_slot(s.backward_w); break;
      case WindowKind::Load: break;
      case WindowKind::Epilogue: s.epilogue = w; break;
    }
  }
  if (s.p1 < 0 || s.head < 0 || s.epilogue < 0) bad_plan("the plan lacks a P1, HEAD or E window");
  for (int j = 0; j < L; ++j)
    if (s.forward_w[j] < 0 || s.backward_w[j] < 0)
      bad_plan("layer " + std::to_string(j) + " has no forward or backward window");
  if (s.p0 < 0) s.p0 = s.p1;

  s.keep_internals.assign(L, false);
  for (int j : plan.keep_internals)
    if (j >= 0 && j < L) s.keep_internals[j] = true;
  s.resident.assign(L, false);
  for (int j : plan.resident_layers)
    if (j >= 0 && j < L) s.resident[j] = true;

  // Boundaries: token split and windows.
  const int64_t T = s.tokens;
  s.boundaries.resize(L + 1);
  for (int b = 0; b <= L; ++b) {
    BoundarySchedule& bs = s.boundaries[b];
    const BoundaryPlacement& bp = plan.boundaries[b];
    bs.produce_w = b == 0 ? s.p1 : s.forward_w[b - 1];
    bs.forward_use_w = b == L ? s.head : s.forward_w[b];
    if (b == L) continue;
    bs.backward_last_w = s.backward_w[b];
    bs.backward_first_w = s.recompute_w[b] >= 0 ? std::min(s.recompute_w[b], bs.backward_last_w)
                                                : bs.backward_last_w;
    if (bp.recompute) {
      if (b == 0) bad_plan("boundary 0 (the embedded input) cannot be recomputed");
      if (s.recompute_w[b - 1] < 0 || s.recompute_w[b - 1] > bs.backward_first_w)
        bad_plan("boundary " + std::to_string(b) + " is recomputed but no RC window before B" +
                 std::to_string(b) + " produces it");
      continue;
    }
    bs.stored = true;
    // Fractions to whole tokens; the parts tile [0, T) exactly.
    bs.gpu_tokens = std::clamp<int64_t>(std::llround(bp.gpu * T), 0, T);
    const int64_t cpu_end = std::clamp<int64_t>(std::llround((bp.gpu + bp.cpu) * T), bs.gpu_tokens, T);
    bs.cpu_tokens = cpu_end - bs.gpu_tokens;
    bs.nvme_tokens = T - cpu_end;
    if (bp.nvme <= 0 && bs.nvme_tokens > 0) {  // rounding residue: keep it off NVMe
      bs.cpu_tokens += bs.nvme_tokens;
      bs.nvme_tokens = 0;
    }
    schedule_fetches(bs, plan, b);
  }

  // Lazy optimizer: each target updates at its planned window, or at the latest just
  // before its first use in this step.
  s.targets.push_back({UpdateTarget::Kind::Embed, -1});
  s.update_w.push_back(s.p1);
  for (int j = 0; j < L; ++j) {
    s.targets.push_back({UpdateTarget::Kind::Layer, j});
    s.update_w.push_back(s.forward_w[j]);
  }
  s.targets.push_back({UpdateTarget::Kind::Head, -1});
  s.update_w.push_back(s.head);
  for (const OptimizerPlacement& o : plan.optimizer)
    for (size_t t = 0; t < s.targets.size(); ++t)
      if (s.targets[t].name() == o.target && o.window >= 0) s.update_w[t] = std::min(s.update_w[t], o.window);

  // Weight loads: the plan's last h2d of the weights before each use (F{j}'s is the
  // prefetch in F{j-1}, or P1); a use the plan loads nothing for (a resident layer) loads
  // in its own window.
  auto last_load = [&](const std::string& tensor, int after, int use) {
    int at = use;
    for (int w = std::max(after + 1, 0); w < use; ++w)
      if (moves(plan.windows[w], tensor, Link::H2D)) at = w;
    return at;
  };
  const int64_t V = plan.model.vocab_size;
  if (plan.head_chunk_rows < 0 || plan.head_chunk_rows >= V)
    bad_plan("the head's chunks of " + std::to_string(plan.head_chunk_rows) + " rows: 0 (whole) or below the " +
             "vocabulary of " + std::to_string(V));
  s.head_chunk_rows = plan.head_chunk_rows;
  s.head_chunks = plan.head_chunks();
  s.head_load_w = last_load(s.head_chunk_rows > 0 ? "w.head.0" : "w.head", -1, s.head);
  s.fwd_load_w.assign(L, -1);
  s.rc_load_w.assign(L, -1);
  s.bwd_load_w.assign(L, -1);
  for (int j = 0; j < L; ++j) {
    const std::string wj = "w." + std::to_string(j);
    s.fwd_load_w[j] = last_load(wj, -1, s.forward_w[j]);
    // The compute copy is taken after the update: the update moves up to the load.
    if (weights_on_compute) s.update_w[1 + j] = std::min(s.update_w[1 + j], s.fwd_load_w[j]);
    if (s.recompute_w[j] > s.backward_w[j]) bad_plan("RC" + std::to_string(j) + " runs after B" + std::to_string(j));
    if (s.resident[j]) {  // its forward's weights stay for its recompute and backward
      for (int w = s.forward_w[j]; w < s.backward_w[j]; ++w)
        if (moves(plan.windows[w], wj, Link::H2D))
          bad_plan("layer " + std::to_string(j) + " is resident, but window " + plan.windows[w].name +
                   " loads its weights again");
      continue;
    }
    if (s.recompute_w[j] >= 0) s.rc_load_w[j] = last_load(wj, s.forward_w[j], s.recompute_w[j]);
    s.bwd_load_w[j] = last_load(wj, s.recompute_w[j] >= 0 ? s.recompute_w[j] : s.forward_w[j], s.backward_w[j]);
  }

  // Gradient drains: the plan's copy of g.<j> to the host after B{j}.
  const int windows = static_cast<int>(plan.windows.size());
  s.grad_drain_w.assign(L, -1);
  for (int j = 0; j < L; ++j) {
    const std::string gj = "g." + std::to_string(j);
    for (int w = s.backward_w[j] + 1; w < windows && s.grad_drain_w[j] < 0; ++w)
      if (moves(plan.windows[w], gj, Link::D2H)) s.grad_drain_w[j] = w;
    if (s.grad_drain_w[j] < 0) s.grad_drain_w[j] = std::min(s.backward_w[j] + 1, windows - 1);
  }
  for (int j = 0; j + 1 < L; ++j)  // layer j+1's gradients are produced before layer j's
    if (s.grad_drain_w[j + 1] > s.grad_drain_w[j])
      bad_plan("layer " + std::to_string(j + 1) + "'s gradients drain after layer " + std::to_string(j) +
               "'s; the executor sums the gradient norm in the order the gradients are produced");

  schedule_state_paging(s, plan);

  // Compute-tier allocations: boundaries at the sizes' element size, their gradients and
  // the head's tensors in fp32.
  const size_t row = sizes.boundary_token;
  const size_t full = static_cast<size_t>(T) * row;
  const size_t full_fp32 = static_cast<size_t>(T * s.hidden) * sizeof(float);
  using A = ArenaTensor;
  auto req = [&](A tensor, int index, const std::string& name, size_t bytes, int first, int last, int follows = -1) {
    LT_ASSERT(first >= 0 && last >= first, "lifetime of " + name);
    if (bytes == 0) return;
    std::vector<int>& at = s.arena_by_tensor[static_cast<int>(tensor)];
    if (static_cast<int>(at.size()) <= index) at.resize(index + 1, -1);
    LT_ASSERT(at[index] < 0, name + " placed twice");
    at[index] = static_cast<int>(s.arena.size());
    s.arena.push_back({name, bytes, first, last, follows});
    s.arena_keys.push_back({tensor, index});
  };
  for (int b = 0; b <= L; ++b) {
    const BoundarySchedule& bs = s.boundaries[b];
    const std::string id = std::to_string(b);
    if (!bs.offloaded()) {
      req(A::Boundary, b, "x." + id, full, bs.produce_w, bs.stored ? bs.backward_last_w : bs.forward_use_w);
    } else {
      // Its compute-tier tokens (a.<b>.gpu) stay from production to backward; the other
      // rows follow them, in forward until the forward use (x.<b>, copied out) and again
      // from their fetch to backward (r.<b>): the boundary is whole, with no copy, while
      // either is live.
      const size_t gpu = static_cast<size_t>(bs.gpu_tokens) * row, rest = full - gpu;
      req(A::BoundaryGpuPart, b, "a." + id + ".gpu", gpu, bs.produce_w, bs.backward_last_w);
      const int head = gpu > 0 ? s.arena_index(A::BoundaryGpuPart, b) : -1;
      req(A::Boundary, b, "x." + id, rest, bs.produce_w, bs.forward_use_w, head);
      // The rows each fetch brings beyond those placed before it, in the parts' order.
      int64_t placed = 0;
      int prev = head, more = 0;
      for (size_t k = 0; k < bs.fetches.size(); ++k) {
        const BoundarySchedule::Fetch& f = bs.fetches[k];
        const int64_t reach = std::max(f.cpu_to > 0 ? bs.cpu_row - bs.gpu_tokens + f.cpu_to : 0,
                                       f.nvme_to > 0 ? bs.nvme_row - bs.gpu_tokens + f.nvme_to : 0);
        if (reach <= placed) continue;
        const size_t bytes = static_cast<size_t>(reach - placed) * row;
        if (placed == 0)
          req(A::Refetched, b, "r." + id, bytes, f.window, bs.backward_last_w, prev);
        else
          req(A::RefetchedMore, static_cast<int>(s.arena_by_tensor[static_cast<int>(A::RefetchedMore)].size()),
              "r." + id + "." + std::to_string(++more), bytes, f.window, bs.backward_last_w, prev);
        prev = static_cast<int>(s.arena.size()) - 1;
        placed = reach;
      }
    }
    if (b < L && !bs.stored && b > 0) req(A::Recomputed, b, "rc." + id, full, s.recompute_w[b - 1], bs.backward_last_w);
  }
  LT_ASSERT(static_cast<int>(sizes.saved.size()) == L, "one saved size per layer");
  const auto saved_bytes = [&](int j) { return sizes.saved[j]; };
  for (int j = 0; j < L; ++j)
    if (s.keep_internals[j])
      req(A::Internals, j, "int." + std::to_string(j), saved_bytes(j), s.forward_w[j], s.backward_w[j]);
  req(A::HeadNormOut, 0, "head.norm_out", full_fp32, s.head, s.head);
  req(A::HeadRstd, 0, "head.rstd", static_cast<size_t>(T) * sizeof(float), s.head, s.head);
  req(A::HeadDHidden, 0, "head.d_hidden", full_fp32, s.head, s.head);
  if (weights_on_compute) {
    const size_t wbytes = cw.layer_bytes, gbytes = cw.layer_grad_bytes;
    for (int j = 0; j < L; ++j) {
      const std::string id = std::to_string(j);
      if (s.resident[j]) {  // one slot from the forward's load to the backward, for every use
        req(A::Weights, j, "w." + id, wbytes, s.fwd_load_w[j], s.backward_w[j]);
        for (A use : {A::RecomputeWeights, A::BackwardWeights}) {
          std::vector<int>& at = s.arena_by_tensor[static_cast<int>(use)];
          if (static_cast<int>(at.size()) <= j) at.resize(j + 1, -1);
          at[j] = s.arena_index(A::Weights, j);
        }
      } else {
        req(A::Weights, j, "w." + id, wbytes, s.fwd_load_w[j], s.forward_w[j]);
        if (s.recompute_w[j] >= 0) req(A::RecomputeWeights, j, "wr." + id, wbytes, s.rc_load_w[j], s.recompute_w[j]);
        req(A::BackwardWeights, j, "wb." + id, wbytes, s.bwd_load_w[j], s.backward_w[j]);
      }
      // A gradient slot drains to the host under its drain window's compute.
      req(A::Gradients, j, "g." + id, gbytes, s.backward_w[j], s.grad_drain_w[j]);
    }
    req(A::NormWeights, 0, "w.norm", cw.norm_bytes, s.head_load_w, s.head);
    req(A::NormGradients, 0, "g.norm", cw.norm_grad_bytes, s.head, s.head + 1);
    if (s.head_chunk_rows == 0) {
      req(A::LmHead, 0, "w.lm_head", cw.lm_head_bytes, s.head_load_w, s.head);
      req(A::LmHeadGradients, 0, "g.lm_head", cw.lm_head_grad_bytes, s.head, s.head + 1);
    } else {  // chunk c+2 reuses chunk c's slots (streaming_head.cpp)
      for (int k : {0, 1}) {
        req(A::LmHead, k, "w.lm_head." + std::to_string(k), cw.lm_head_bytes, s.head_load_w, s.head);
        req(A::LmHeadGradients, k, "g.lm_head." + std::to_string(k), cw.lm_head_grad_bytes, s.head, s.head + 1);
      }
    }
  }
  // Backward alternates between the two, starting from dx.0 (HEAD's output): after the L
  // backwards, dx.<L % 2> holds boundary 0's gradient for E; the other is done with B0.
  for (int k : {0, 1})
    req(A::Dx, k, "dx." + std::to_string(k), full_fp32, s.head, k == L % 2 ? s.epilogue : s.backward_w[0]);
  // A layer pass's workspace: its scratch, then the saved tensors it writes when they are
  // not kept (a recompute's always), at workspace_saved_offset; they live for the window.
  LT_ASSERT(scratch.layer % kWorkspaceAlignment == 0, "the layer pass's scratch is aligned");
  s.workspace_saved_offset = scratch.layer;
  for (int j = 0; j < L; ++j)
    for (int w : {s.forward_w[j], s.recompute_w[j], s.backward_w[j]})
      if (w >= 0) {
        const bool saved_here = w == s.recompute_w[j] || !s.keep_internals[j];
        req(A::Workspace, w, "ws." + plan.windows[w].name, scratch.layer + (saved_here ? saved_bytes(j) : 0), w, w);
      }
  req(A::Workspace, s.head, "ws." + plan.windows[s.head].name, scratch.head, s.head, s.head);
  return s;
}

}  // namespace lt
