#include "plan/plan_validate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "core/error.h"
#include "plan/cost_model.h"
#include "plan/data_parallel.h"
#include "plan/plan_evaluate.h"

namespace lt {

std::string fmt_gb(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f GB", bytes / 1e9);
  return buf;
}

namespace {

// The decimal index that ends s from pos on ("w.12" -> 12 from 2), or -1: a plan built in
// memory is not checked like a loaded one (plan_json.cpp), so names are parsed here
// without std::stoi's exceptions.
int index_after(const std::string& s, size_t pos) {
  if (pos >= s.size() || s.size() - pos > 9) return -1;
  int v = 0;
  for (size_t i = pos; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

// Cumulative bytes of one (tensor, link) pair through each window.
struct Flow {
  std::vector<double> through;  // through[i] = bytes moved in windows 0..i
};

// A streamed head (plan.h): chunk rows a multiple of kHeadChunkQuantum below V; every
// chunk's rows loaded twice by the end of HEAD (the first time in F{L-1} or HEAD, never
// before), its gradient rows drained once in HEAD; the final norm loaded once and drained
// once; the slots (w.lm_head.<k>, g.lm_head.<k>) one chunk each, the norm's (w.norm,
// g.norm) its weights in fp32 and its gradient. A whole head moves none of these tensors.
template <typename Through>
std::vector<std::string> head_problems(const Plan& p, const Through& through, double tol) {
  std::vector<std::string> out;
  const int n = static_cast<int>(p.windows.size());
  int head = -1;
  for (int i = 0; i < n; ++i)
    if (p.windows[i].kind == WindowKind::Head) head = i;
  if (!p.head_streamed()) {
    for (const auto& w : p.windows)
      for (const auto& x : w.transfers)
        if (x.tensor.rfind("w.head.", 0) == 0 || x.tensor.rfind("g.head.", 0) == 0)
          out.push_back("window " + w.name + " moves " + x.tensor + " but the plan holds the head whole");
    return out;
  }
  const int64_t R = p.head_chunk_rows, V = p.model.vocab_size, C = p.model.hidden_size;
  if (R % kHeadChunkQuantum != 0 || R >= V) {
    out.push_back("head chunks of " + std::to_string(R) + " rows: must be a multiple of " +
                  std::to_string(kHeadChunkQuantum) + " below the vocabulary (" + std::to_string(V) + ")");
    return out;
  }
  if (head < 1) {
    out.push_back("a streamed head without a HEAD window");
    return out;
  }
  const double wrow = p.hardware.weight_bytes * C, grow = p.hardware.grad_bytes * C;
  auto near = [&](double a, double b) { return std::fabs(a - b) <= tol; };
  const int64_t chunks = p.head_chunks();
  for (int64_t c = 0; c < chunks; ++c) {
    const double rows = static_cast<double>(std::min(R, V - c * R));
    const std::string wc = "w.head." + std::to_string(c), gc = "g.head." + std::to_string(c);
    if (through(wc, Link::H2D, head - 2) > tol) out.push_back(wc + " loads before F" + std::to_string(p.num_layers - 1));
    if (!near(through(wc, Link::H2D, head), 2 * rows * wrow) || !near(through(wc, Link::H2D, n - 1), 2 * rows * wrow))
      out.push_back(wc + ": its " + std::to_string(static_cast<int64_t>(rows)) +
                    " rows must load twice by the end of HEAD (forward and backward pass), and only then");
    if (!near(through(gc, Link::D2H, head) - through(gc, Link::D2H, head - 1), rows * grow) ||
        !near(through(gc, Link::D2H, n - 1), rows * grow))
      out.push_back(gc + ": its gradient rows must drain once, in HEAD");
  }
  if (!near(through("w.head.norm", Link::H2D, head), wrow) || !near(through("w.head.norm", Link::H2D, n - 1), wrow))
    out.push_back("w.head.norm: the final norm must load once by HEAD");
  if (!near(through("g.head.norm", Link::D2H, n - 1), grow) ||
      !near(through("g.head.norm", Link::D2H, head) - through("g.head.norm", Link::D2H, head - 1), grow))
    out.push_back("g.head.norm: the final norm's gradient must drain once, in HEAD");
  // Each of the two chunk slots holds a chunk; the final norm's weights are held in fp32
  // whatever the weights' size on the link.
  const double wslot = static_cast<double>(R) * wrow, gslot = static_cast<double>(R) * grow;
  const auto expected = [&](const std::string& t) {
    if (t == "w.lm_head.0" || t == "w.lm_head.1") return wslot;
    if (t == "g.lm_head.0" || t == "g.lm_head.1") return gslot;
    if (t == "w.norm") return std::max(wrow, C * 4.0);
    if (t == "g.norm") return grow;
    return -1.0;
  };
  for (const auto& w : p.windows)
    for (const auto& a : w.alloc)
      if (const double want = expected(a.tensor); want >= 0 && !near(a.bytes, want))
        out.push_back("window " + w.name + " allocates " + a.tensor + " of " + fmt_gb(a.bytes) + ", not " +
                      fmt_gb(want) + (a.tensor.find("lm_head") != std::string::npos ? " (one chunk)" : " (the final norm)"));
  return out;
}

}  // namespace

std::vector<std::string> capacity_problems(const Plan& p) {
  std::vector<std::string> out;
  PeakBytes pk = predicted_peaks(p);
  // Budgets are compared with a relative slack of 1e-9: the solver's tolerances are ~1e-9
  // of the GB-scaled values.
  auto over = [](double need, double have) { return need > have * (1 + 1e-9) + 1; };
  if (over(pk.gpu, p.gpu_cap_bytes))
    out.push_back("compute-tier memory short by " + fmt_gb(pk.gpu - p.gpu_cap_bytes) + " (needs " +
                  fmt_gb(pk.gpu) + ", cap " + fmt_gb(p.gpu_cap_bytes) + ")");
  double cpu_act = cpu_reserved_activation_bytes(p);  // staging is bounded by host memory below
  if (over(cpu_act, p.cpu_act_budget_bytes))
    out.push_back("host activation budget short by " + fmt_gb(cpu_act - p.cpu_act_budget_bytes) + " (needs " +
                  fmt_gb(cpu_act) + ", budget " + fmt_gb(p.cpu_act_budget_bytes) + ")");
  const double nvme_act = pk.nvme - p.nvme_state_bytes();  // pk.nvme counts the paged states
  if (over(nvme_act, p.nvme_act_budget_bytes))
    out.push_back("NVMe activation budget short by " + fmt_gb(nvme_act - p.nvme_act_budget_bytes) + " (needs " +
                  fmt_gb(nvme_act) + ", budget " + fmt_gb(p.nvme_act_budget_bytes) + ")");
  if (over(pk.nvme, p.hardware.nvme_capacity_bytes))
    out.push_back("NVMe short by " + fmt_gb(pk.nvme - p.hardware.nvme_capacity_bytes) + " (needs " +
                  fmt_gb(pk.nvme) + " with " + fmt_gb(p.nvme_state_bytes()) + " of optimizer states, capacity " +
                  fmt_gb(p.hardware.nvme_capacity_bytes) + ")");
  if (over(pk.cpu, p.hardware.host_memory_bytes))
    out.push_back("host memory short by " + fmt_gb(pk.cpu - p.hardware.host_memory_bytes) + " (needs " +
                  fmt_gb(pk.cpu) + ", host " + fmt_gb(p.hardware.host_memory_bytes) + ")");
  return out;
}

namespace {

// Slot sums (plan/data_parallel.h): a layer's or the head's gradient drains only after
// its sum over the ranks, listed before it.
std::vector<std::string> slot_sum_problems(const Plan& p) {
  std::vector<std::string> out;
  if (!p.slot_sums) return out;
  std::set<std::string> summed;
  for (const Window& w : p.windows)
    for (const Transfer& x : w.transfers) {
      const std::string sum = x.link == Link::Net && x.tensor.rfind("sum.", 0) == 0 ? exchange_target(x.tensor) : "";
      if (!sum.empty()) summed.insert(sum);
      const std::string drained = drained_target(x);
      if (!drained.empty() && drained != "embed" && !summed.count(drained))
        out.push_back("window " + w.name + ": " + x.tensor + " drains before the ranks' sum in its slot (" +
                      exchange_tensor("sum", drained) + ")");
    }
  return out;
}

}  // namespace

std::vector<std::string> validate_plan(const Plan& p) {
  std::vector<std::string> out;
  const int L = p.num_layers;
  const int n = static_cast<int>(p.windows.size());
  if (static_cast<int>(p.boundaries.size()) != L + 1) {
    out.push_back("boundaries: expected " + std::to_string(L + 1));
    return out;
  }
  double A = 0;
  {
    // Boundary bytes from the forward windows' allocations of boundary 1 (any part).
    for (const auto& w : p.windows)
      for (const auto& a : w.alloc)
        if (a.tensor == "in.0") A = a.bytes;
    for (const auto& w : p.windows)
      for (const auto& x : w.transfers)
        if (x.tensor == "in.0") A = x.bytes;
  }
  for (int b = 0; b <= L; ++b) {
    const auto& bp = p.boundaries[b];
    if ((b == 0 || b == L) && bp.recompute) out.push_back("boundary " + std::to_string(b) + " must be materialized");
    if (bp.recompute) continue;
    if (bp.gpu < -1e-9 || bp.cpu < -1e-9 || bp.nvme < -1e-9 || std::fabs(bp.gpu + bp.cpu + bp.nvme - 1) > 1e-6)
      out.push_back("boundary " + std::to_string(b) + ": tier fractions must be >= 0 and sum to 1");
  }

  // Flows per (tensor, link).
  std::map<std::pair<std::string, Link>, Flow> flows;
  for (int i = 0; i < n; ++i)
    for (const auto& x : p.windows[i].transfers) {
      auto& f = flows[{x.tensor, x.link}];
      if (f.through.empty()) f.through.assign(n, 0);
      f.through[i] += x.bytes;
    }
  for (auto& [k, f] : flows)
    for (int i = 1; i < n; ++i) f.through[i] += f.through[i - 1];
  auto through = [&](const std::string& t, Link l, int i) {
    if (i < 0) return 0.0;
    auto it = flows.find({t, l});
    return it == flows.end() ? 0.0 : it->second.through[i];
  };
  // Absolute tolerance: solver round-off on GB-scaled values, ~1e-9 GB per term.
  const double tol = 1e-6 * std::max(A, 1.0) + 16;

  // Window index of each backward/recompute window's first use of boundary b, and the
  // producer window of boundary b.
  std::vector<int> first_use(L + 1, -1), producer(L + 1, -1);
  for (int i = 0; i < n; ++i) {
    const auto& w = p.windows[i];
    if (w.kind == WindowKind::Prologue1) producer[0] = i;
    if (w.kind == WindowKind::Forward && w.layer >= 0 && w.layer + 1 <= L) producer[w.layer + 1] = i;
    if ((w.kind == WindowKind::Recompute || w.kind == WindowKind::Backward) && w.layer >= 0 && w.layer <= L &&
        first_use[w.layer] < 0)
      first_use[w.layer] = i;
  }
  for (int b = 0; b < L; ++b) {
    const auto& bp = p.boundaries[b];
    if (bp.recompute) continue;
    std::string bs = "boundary " + std::to_string(b);
    for (const char* which : {"cpu", "nvme"}) {
      std::string t = "a." + std::to_string(b) + "." + which;
      double want = A * (std::string(which) == "cpu" ? bp.cpu : bp.nvme);
      if (std::fabs(through(t, Link::D2H, n - 1) - want) > tol)
        out.push_back(bs + ": " + which + " part offloaded " + std::to_string(through(t, Link::D2H, n - 1)) +
                      " bytes, expected " + std::to_string(want));
      if (std::fabs(through(t, Link::H2D, n - 1) - want) > tol)
        out.push_back(bs + ": " + which + " part reloaded " + std::to_string(through(t, Link::H2D, n - 1)) +
                      " bytes, expected " + std::to_string(want));
      if (through(t, Link::D2H, producer[b]) > tol)
        out.push_back(bs + ": offloaded before it is produced");
      bool nv = std::string(which) == "nvme";
      for (int i = 0; i < n; ++i) {
        if (nv) {
          if (through(t, Link::NvmeWrite, i) > through(t, Link::D2H, i - 1) + tol)
            out.push_back(bs + ": NVMe write in window " + p.windows[i].name + " before its D2H completed");
          if (through(t, Link::NvmeRead, i) > through(t, Link::NvmeWrite, i - 1) + tol)
            out.push_back(bs + ": NVMe read in window " + p.windows[i].name + " before its write completed");
          if (through(t, Link::H2D, i) > through(t, Link::NvmeRead, i - 1) + tol)
            out.push_back(bs + ": H2D in window " + p.windows[i].name + " before its NVMe read completed");
        } else if (through(t, Link::H2D, i) > through(t, Link::D2H, i - 1) + tol) {
          out.push_back(bs + ": H2D in window " + p.windows[i].name + " before its D2H completed");
        }
      }
      if (nv && std::fabs(through(t, Link::NvmeWrite, n - 1) - want) > tol)
        out.push_back(bs + ": NVMe part written " + std::to_string(through(t, Link::NvmeWrite, n - 1)) + " bytes");
      if (first_use[b] >= 0 && through(t, Link::H2D, first_use[b] - 1) < want - tol)
        out.push_back(bs + ": " + which + " part not back on the compute tier before " +
                      p.windows[first_use[b]].name);
    }
  }

  // Weights present before each compute window, and host updates before each weight load.
  std::vector<int> first_load(L, -1);
  int head_load = -1;
  for (int i = 0; i < n; ++i)
    for (const auto& x : p.windows[i].transfers) {
      if (x.link != Link::H2D) continue;
      if ((x.tensor == "w.head" || x.tensor.rfind("w.head.", 0) == 0) && head_load < 0) head_load = i;
      if (x.tensor.rfind("w.", 0) == 0 && x.tensor != "w.head") {
        int j = index_after(x.tensor, 2);
        if (j >= 0 && j < L && first_load[j] < 0) first_load[j] = i;
      }
    }
  std::vector<bool> resident(L, false);
  for (int j : p.resident_layers)
    if (j >= 0 && j < L) resident[j] = true;
  // A use's weights load in a window after the layer's previous use (a slot holds one
  // load) and before the use's own window (plan_decisions.h: the previous window by the
  // rule, earlier by choice).
  std::vector<int> previous_use(L, -1);
  for (int i = 1; i < n; ++i) {
    const auto& w = p.windows[i];
    if (w.layer < 0 || w.layer >= L) {
      if (w.layer >= L) out.push_back("window " + w.name + ": layer " + std::to_string(w.layer) + " out of range");
      continue;
    }
    const std::string wt = "w." + std::to_string(w.layer);
    const bool loaded = through(wt, Link::H2D, i - 1) - through(wt, Link::H2D, previous_use[w.layer]) > 0;
    previous_use[w.layer] = i;
    if (!loaded && !(resident[w.layer] && w.kind == WindowKind::Backward))
      out.push_back("window " + w.name + ": layer weights not loaded since the layer's previous use");
  }
  // Each layer's gradients drain once, after its backward window, and in the order they
  // are produced (the executor sums their norms in that order).
  {
    std::vector<int> backward_at(L, -1), drained_at(L, -1);
    for (int i = 0; i < n; ++i) {
      if (p.windows[i].kind == WindowKind::Backward && p.windows[i].layer >= 0 && p.windows[i].layer < L)
        backward_at[p.windows[i].layer] = i;
      for (const auto& x : p.windows[i].transfers) {
        if (x.link != Link::D2H || x.tensor.rfind("g.", 0) != 0) continue;
        const int j = index_after(x.tensor, 2);
        if (j < 0 || j >= L) continue;
        if (drained_at[j] >= 0) out.push_back("gradients of layer " + std::to_string(j) + " drain twice");
        drained_at[j] = i;
      }
    }
    int previous = -1;  // the drain window of the layer produced before
    for (int j = L - 1; j >= 0; --j) {
      if (drained_at[j] < 0) continue;
      if (drained_at[j] <= backward_at[j])
        out.push_back("gradients of layer " + std::to_string(j) + " drain in " + p.windows[drained_at[j]].name +
                      ", not after their backward window");
      if (drained_at[j] < previous)
        out.push_back("gradients of layer " + std::to_string(j) + " drain before those of layer " +
                      std::to_string(j + 1));
      previous = std::max(previous, drained_at[j]);
    }
  }
  std::map<std::string, double> opt_done;
  for (int i = 0; i < n; ++i)
    for (const auto& h : p.windows[i].host) {
      if (h.task != "optimizer") continue;
      int deadline = -1;  // the update must finish in a window before this one
      if (h.target == "embed") {
        deadline = 1;
      } else if (h.target == "head") {
        deadline = head_load;
      } else if (h.target.rfind("layer.", 0) == 0) {
        int j = index_after(h.target, 6);
        if (j >= 0 && j < L) deadline = first_load[j];
      }
      if (deadline >= 0 && i >= deadline)
        out.push_back("host update of " + h.target + " in window " + p.windows[i].name +
                      " does not finish before its weights load");
      if (p.windows[i].kind == WindowKind::Backward || p.windows[i].kind == WindowKind::Recompute ||
          p.windows[i].kind == WindowKind::Head || p.windows[i].kind == WindowKind::Epilogue)
        out.push_back("host update of " + h.target + " runs before the gradient norm is known");
    }

  // Paged optimizer states: read in full before the layer's first update window, written
  // back in full after its last; nothing else moves os.<j>.
  std::vector<int> first_update(L, -1), last_update(L, -1);
  for (const auto& o : p.optimizer)
    if (o.target.rfind("layer.", 0) == 0) {
      int j = index_after(o.target, 6);
      if (j < 0 || j >= L) continue;
      if (o.window < 0 || o.window >= n) {
        out.push_back("optimizer update of " + o.target + " placed in window " + std::to_string(o.window) + " of " +
                      std::to_string(n));
        continue;
      }
      if (first_update[j] < 0 || o.window < first_update[j]) first_update[j] = o.window;
      last_update[j] = std::max(last_update[j], o.window);
    }
  std::vector<bool> paged(L, false);
  for (int j : p.nvme_state_layers) {
    if (j < 0 || j >= L || paged[j]) {
      out.push_back("optimizer state paging: bad or repeated layer " + std::to_string(j));
      continue;
    }
    paged[j] = true;
    const std::string os = "os." + std::to_string(j), who = "optimizer state of layer " + std::to_string(j);
    const PagedLayerBytes S = paged_layer_bytes(p, j);  // its own (a hybrid's layers differ)
    if (!p.lazy_optimizer) out.push_back(who + ": paged in a plan without the lazy optimizer");
    if (first_update[j] < 0) {
      out.push_back(who + ": paged but never updated");
      continue;
    }
    if (std::fabs(through(os, Link::NvmeRead, first_update[j] - 1) - S.read) > tol)
      out.push_back(who + ": not read from NVMe before its update in " + p.windows[first_update[j]].name);
    if (std::fabs(through(os, Link::NvmeRead, n - 1) - S.read) > tol) out.push_back(who + ": read more than once");
    if (through(os, Link::NvmeWrite, last_update[j]) > tol)
      out.push_back(who + ": written back before its update finished");
    if (std::fabs(through(os, Link::NvmeWrite, n - 1) - S.write_back) > tol)
      out.push_back(who + ": not written back once");
    // Paged gradients: written once, whole, in a window after the one that drains them
    // (the next step's update reads them with the state).
    const std::string gs = "gs." + std::to_string(j), g = "g." + std::to_string(j);
    int drained = -1;
    for (int i = 0; i < n && drained < 0; ++i)
      for (const auto& x : p.windows[i].transfers)
        if (x.link == Link::D2H && x.tensor == g) drained = i;
    if (std::fabs(through(gs, Link::NvmeWrite, n - 1) - S.grads) > tol)
      out.push_back("gradients of paged layer " + std::to_string(j) + ": not written to NVMe once");
    else if (S.grads > 0 && (drained < 0 || through(gs, Link::NvmeWrite, drained) > tol))
      out.push_back("gradients of paged layer " + std::to_string(j) + ": written to NVMe before their drain");
  }
  // Paged parts: of layers whose optimizer state pages; gradients, where masters page at
  // all, of layers whose masters page (a slot's read is a prefix of [state | masters |
  // gradients]); bf16 copies of layers whose masters page (the update writes them from
  // there).
  for (int j : p.nvme_master_layers)
    if (j < 0 || j >= L || !paged[j])
      out.push_back("masters of layer " + std::to_string(j) + ": paged, but its optimizer state is not");
  for (int j : p.nvme_grad_layers)
    if (j < 0 || j >= L || !paged[j])
      out.push_back("gradients of layer " + std::to_string(j) + ": paged, but its optimizer state is not");
    else if (!p.nvme_master_layers.empty() && !p.master_paged(j))
      out.push_back("gradients of layer " + std::to_string(j) + ": paged, but its masters are not (other layers' are)");
  for (int j : p.nvme_copy_layers)
    if (!p.master_paged(j))
      out.push_back("bf16 copy of layer " + std::to_string(j) + ": paged, but its masters are not");
  // Paged bf16 copies: of paged layers whose output boundary is stored (no recompute reads
  // the copy); written once after the update, read back once after that and before B{j}.
  for (int j : p.nvme_copy_layers) {
    const std::string cp = "cp." + std::to_string(j), who = "bf16 copy of layer " + std::to_string(j);
    if (j < 0 || j >= L || !paged[j] || first_update[j] < 0) {
      out.push_back(who + ": paged, but the layer's optimizer state is not");
      continue;
    }
    if (j + 1 < static_cast<int>(p.boundaries.size()) && p.boundaries[j + 1].recompute)
      out.push_back(who + ": paged, but a recompute window reads it (boundary " + std::to_string(j + 1) +
                    " is recomputed)");
    const double bytes = paged_layer_bytes(p, j).copy;
    int written = -1, backward = -1;
    for (int i = 0; i < n; ++i) {
      if (written < 0 && through(cp, Link::NvmeWrite, i) > tol) written = i;
      if (p.windows[i].kind == WindowKind::Backward && p.windows[i].layer == j) backward = i;
    }
    if (std::fabs(through(cp, Link::NvmeWrite, n - 1) - bytes) > tol || written < 0)
      out.push_back(who + ": not written to NVMe once");
    else if (written <= last_update[j])
      out.push_back(who + ": written to NVMe before its update finished");
    else if (std::fabs(through(cp, Link::NvmeRead, n - 1) - bytes) > tol || through(cp, Link::NvmeRead, written) > tol)
      out.push_back(who + ": not read back once after its write");
    else if (backward < 0 || std::fabs(through(cp, Link::NvmeRead, backward - 1) - bytes) > tol)
      out.push_back(who + ": not read back before its backward");
  }
  for (const auto& [key, f] : flows)
    if (key.first.rfind("os.", 0) == 0 || key.first.rfind("gs.", 0) == 0) {
      int j = index_after(key.first, 3);
      if (j < 0 || j >= L || !paged[j]) out.push_back(key.first + " moves but layer " + std::to_string(j) + " is not paged");
    } else if (key.first.rfind("cp.", 0) == 0) {
      const int j = index_after(key.first, 3);
      if (std::find(p.nvme_copy_layers.begin(), p.nvme_copy_layers.end(), j) == p.nvme_copy_layers.end())
        out.push_back(key.first + " moves but layer " + std::to_string(j) + "'s bf16 copy is not paged");
    }

  auto head = head_problems(p, through, tol);
  out.insert(out.end(), head.begin(), head.end());

  // Memory: never negative, everything allocated is freed by the end of the step.
  double live = 0;
  for (const auto& w : p.windows) {
    for (const auto& a : w.alloc) live += a.bytes;
    for (const auto& f : w.free) live -= f.bytes;
    if (live < -tol) out.push_back("window " + w.name + ": frees more than was allocated");
  }
  if (std::fabs(live) > tol * (L + 1)) out.push_back("memory allocated in the step is not all freed by its end");

  auto caps = capacity_problems(p);
  out.insert(out.end(), caps.begin(), caps.end());
  auto sums = slot_sum_problems(p);
  out.insert(out.end(), sums.begin(), sums.end());
  return out;
}

void require_valid_plan(const Plan& p, const std::string& source) {
  const std::vector<std::string> problems = validate_plan(p);
  if (problems.empty()) return;
  // The first few are enough to see what is wrong; one damage often breaks many rules.
  constexpr size_t kShown = 5;
  std::string what = "the plan is not valid (" + std::to_string(problems.size()) + " problem" +
                     (problems.size() == 1 ? "" : "s") + "):";
  for (size_t i = 0; i < problems.size() && i < kShown; ++i) what += " " + problems[i] + ";";
  if (problems.size() > kShown) what += " and " + std::to_string(problems.size() - kShown) + " more;";
  what.pop_back();
  throw Error(what, "plan file " + source,
              "the file was edited or written by another version; re-run `lazytrain plan ... --out " + source +
                  "` to write a fresh plan");
}

}  // namespace lt
