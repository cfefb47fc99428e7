#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "plan/cost_model.h"
#include "plan/data_parallel.h"

namespace lt {

const char* sim_lane_name(SimLane l) {
  switch (l) {
    case SimLane::Compute: return "compute";
    case SimLane::H2D: return "h2d";
    case SimLane::D2H: return "d2h";
    case SimLane::Nvme: return "nvme";
    case SimLane::Host: return "host";
    case SimLane::Net: return "net";
  }
  return "?";
}

namespace {

// Bytes of a tensor that have arrived somewhere, in arrival order.
struct Arrivals {
  std::vector<std::pair<double, double>> steps;  // (time, bytes) cumulative
  double total() const { return steps.empty() ? 0 : steps.back().second; }
  void add(double time, double bytes) { steps.emplace_back(time, total() + bytes); }
  // Earliest time at which at least `bytes` have arrived; -1 if never (so far).
  double time_for(double bytes) const {
    // Tolerance: plans split tensors into GB-scaled pieces with ~1e-9 relative round-off.
    double need = bytes - 1e-6 * std::max(1.0, bytes) - 16;
    if (need <= 0) return 0;
    for (auto [t, b] : steps)
      if (b >= need) return t;
    return -1;
  }
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

struct Replay {
  Replay(const Plan& plan, const HardwareProfile& profile, bool retime_compute)
      : p(plan), hw(profile), retime(retime_compute) {}
  const Plan& p;
  const HardwareProfile& hw;
  bool retime;
  SimResult out;

  double lane_free[6] = {0, 0, 0, 0, 0, 0};
  // Where data is: on the compute tier (gpu), in host memory, on NVMe, and what has been
  // read back from NVMe into host staging.
  std::map<std::string, Arrivals> gpu, host, nvme, host_from_nvme;
  std::map<std::string, double> consumed_from_host, written, read_back, h2d_from_read;
  std::map<std::string, double> produced;  // compute outputs: tensor -> time
  std::map<std::string, double> update_done;  // optimizer target -> time its last part ended
  std::map<std::string, double> update_parts_left;
  std::map<std::string, double> drained;  // update target -> when its gradient reached the host
  // Slot sums (plan/data_parallel.h): target -> when its sum over the ranks ended, which
  // its drains wait for; and when the head's compute ended, which the head's sum waits for.
  std::map<std::string, double> slot_summed;
  double head_computed = -1;
  std::vector<bool> loaded_once;
  // Host activation bytes over time (+ on arrival, - on departure) for the host peak.
  std::vector<std::pair<double, double>> host_delta;
  double cpu_reserved = 0;

  void violation(const std::string& s) {
    if (out.violations.size() < 200) out.violations.push_back(s);
  }

  double bw(Link l) const {
    switch (l) {
      case Link::H2D: return hw.h2d_bw;
      case Link::D2H: return hw.d2h_bw;
      case Link::NvmeWrite: return hw.nvme_write_bw;
      case Link::NvmeRead: return hw.nvme_read_bw;
      case Link::Net: return hw.network_bw;
    }
    return 1;
  }
  static SimLane lane_of(Link l) {
    switch (l) {
      case Link::H2D: return SimLane::H2D;
      case Link::D2H: return SimLane::D2H;
      case Link::Net: return SimLane::Net;
      default: return SimLane::Nvme;
    }
  }

  // When does this window's compute have its inputs? Knowledge of the engine, not of the
  // plan's constraint builder: which boundary and which weights each compute reads.
  double input_ready(const Window& w, double start) {
    double ready = start;
    auto need = [&](double t, const std::string& what) {
      if (t < 0) {
        violation(w.name + ": " + what + " never reaches the compute tier");
        return;
      }
      if (t > start + 1e-12) violation(w.name + ": waits " + std::to_string(t - start) + " s for " + what);
      ready = std::max(ready, t);
    };
    const int L = p.num_layers;
    auto boundary_ready = [&](int b, bool backward) -> double {
      if (b == 0 && !backward) return arrival(gpu, "in.0", p.tokens() > 0 ? bytes_of_boundary() : 0);
      std::string pre = "a." + std::to_string(b);
      if (backward) {
        if (p.boundaries[b].recompute) {
          auto it = produced.find("rc." + std::to_string(b));
          return it == produced.end() ? -1 : it->second;
        }
        double t = produced_time(b);
        const auto& bp = p.boundaries[b];
        double A = bytes_of_boundary();
        if (bp.cpu > 0) t = std::max(t, arrival_or_never(gpu, pre + ".cpu@back", A * bp.cpu));
        if (bp.nvme > 0) t = std::max(t, arrival_or_never(gpu, pre + ".nvme@back", A * bp.nvme));
        return t;
      }
      return produced_time(b);
    };
    switch (w.kind) {
      case WindowKind::Forward:
        need(weights_ready(w.layer, w.name), "weights of layer " + std::to_string(w.layer));
        need(boundary_ready(w.layer, false), "boundary " + std::to_string(w.layer));
        break;
      case WindowKind::Head:
        need(produced_time(L), "boundary " + std::to_string(L));
        break;
      case WindowKind::Recompute:
      case WindowKind::Backward: {
        if (!(w.kind == WindowKind::Backward && is_resident(w.layer)))
          need(weights_ready(w.layer, w.name), "weights of layer " + std::to_string(w.layer));
        need(boundary_ready(w.layer, true), "boundary " + std::to_string(w.layer));
        break;
      }
      default:
        break;
    }
    return ready;
  }

  double bytes_of_boundary() const {
    for (const auto& w : p.windows)
      for (const auto& t : w.transfers)
        if (t.tensor == "in.0") return t.bytes;
    return 0;
  }
  bool is_resident(int j) const {
    return std::find(p.resident_layers.begin(), p.resident_layers.end(), j) != p.resident_layers.end();
  }
  double produced_time(int b) const {
    auto it = produced.find("a." + std::to_string(b));
    return it == produced.end() ? -1 : it->second;
  }
  static double arrival(const std::map<std::string, Arrivals>& m, const std::string& t, double bytes) {
    auto it = m.find(t);
    if (it == m.end()) return bytes <= 0 ? 0 : -1;
    return it->second.time_for(bytes);
  }
  static double arrival_or_never(const std::map<std::string, Arrivals>& m, const std::string& t, double bytes) {
    double r = arrival(m, t, bytes);
    return r < 0 ? 1e300 : r;
  }
  // The last H2D of w.<j> before now.
  std::map<int, double> weight_arrival;
  double weights_ready(int j, const std::string& who) {
    auto it = weight_arrival.find(j);
    if (it == weight_arrival.end()) return -1;
    double t = it->second;
    weight_arrival.erase(it);  // a slot holds one load; the next use needs a new one
    return t;
  }

  // When may this transfer start, given where its bytes are?
  double source_ready(const Transfer& t, const Window& w, double start) {
    const std::string& x = t.tensor;
    if (t.link == Link::H2D) {
      if (x == "in.0") return update_time("embed", w, start);
      if (x == "w.head" || starts_with(x, "w.head.")) return update_time("head", w, start);  // whole or a chunk
      if (starts_with(x, "w.")) {
        int j = std::stoi(x.substr(2));
        if (!loaded_once[j]) return update_time("layer." + std::to_string(j), w, start);
        return start;
      }
      if (starts_with(x, "a.")) {  // a reload: from host memory (cpu part) or NVMe reads
        bool nv = ends_with(x, ".nvme");
        auto& src = nv ? host_from_nvme : host;
        auto& used = nv ? h2d_from_read : consumed_from_host;
        double r = arrival(src, x, used[x] + t.bytes);
        used[x] += t.bytes;
        if (r < 0) violation(w.name + ": reload of " + x + " before its bytes reached host memory");
        return r < 0 ? start : r;
      }
      return start;
    }
    if (t.link == Link::D2H) {
      if (starts_with(x, "a.")) {
        int b = std::stoi(x.substr(2, x.find('.', 2) - 2));
        double r = produced_time(b);
        if (r < 0) violation(w.name + ": offload of " + x + " before it is produced");
        return r < 0 ? start : r;
      }
      double ready = start;  // g.head streams out in chunks while the head runs
      if (auto it = produced.find(x); it != produced.end()) ready = it->second;  // gradients, dx.0
      if (auto sum = slot_summed.find(drained_target(t)); sum != slot_summed.end())  // its slot's sum first
        ready = std::max(ready, sum->second);
      return ready;
    }
    if (t.link == Link::Net) {  // plan/data_parallel.h
      if (starts_with(x, "bcast.")) {  // the owner's weights, once the ranks' parts are updated
        auto done = update_done.find("rank part");
        return done == update_done.end() ? start : done->second;
      }
      const std::string target = exchange_target(x);
      if (p.slot_sums && target != "embed") {  // a slot sum, once backward made the gradient
        const auto it = target == "head" ? produced.end() : produced.find("g." + target.substr(6));
        const double made = target == "head" ? head_computed : it == produced.end() ? -1 : it->second;
        if (made < 0) violation(w.name + ": " + x + " before backward made the gradient");
        return made < 0 ? start : made;
      }
      // A sum, once the rank's host holds the gradient (P0's: the previous step's).
      auto it = drained.find(target);
      return it == drained.end() ? start : it->second;
    }
    // A paged optimizer state: read any time, written once updated; a paged bf16 copy:
    // written once its update made it, read back once written (below).
    if (starts_with(x, "os.") || (starts_with(x, "cp.") && t.link == Link::NvmeWrite)) {
      if (t.link == Link::NvmeRead) return start;
      const std::string target = "layer." + x.substr(3);
      auto done = update_done.find(target);
      if (done == update_done.end() || update_parts_left[target] > 1e-9) {
        violation(w.name + ": NVMe write of " + x + " before " + target + "'s update");
        return start;
      }
      return done->second;
    }
    if (starts_with(x, "gs.")) {  // paged gradients: written once drained to the host
      auto it = drained.find("layer." + x.substr(3));
      if (it == drained.end()) {
        violation(w.name + ": NVMe write of " + x + " before the gradients are drained");
        return start;
      }
      return it->second;
    }
    if (t.link == Link::NvmeWrite) {
      double r = arrival(host, x, written[x] + t.bytes);
      written[x] += t.bytes;
      if (r < 0) violation(w.name + ": NVMe write of " + x + " before its bytes reached host memory");
      return r < 0 ? start : r;
    }
    // NVMe read.
    double r = arrival(nvme, x, read_back[x] + t.bytes);
    read_back[x] += t.bytes;
    if (r < 0) violation(w.name + ": NVMe read of " + x + " before it was written");
    return r < 0 ? start : r;
  }

  // A paged layer's update needs its optimizer state in host memory; others need nothing.
  double paged_state_ready(const HostTask& h, const Window& w) {
    const std::string os = "os." + h.target.substr(6);
    const bool paged = std::find(p.nvme_state_layers.begin(), p.nvme_state_layers.end(),
                                 std::stoi(h.target.substr(6))) != p.nvme_state_layers.end();
    if (!paged) return 0;
    double r = arrival(host_from_nvme, os, paged_layer_bytes(p, std::stoi(h.target.substr(6))).read);
    if (r < 0) violation(w.name + ": update of " + h.target + " before its optimizer state was read from NVMe");
    return std::max(r, 0.0);
  }

  double update_time(const std::string& target, const Window& w, double start) {
    auto left = update_parts_left.find(target);
    if (left != update_parts_left.end() && left->second > 1e-9)
      violation(w.name + ": weights of " + target + " load before their host update finished");
    auto it = update_done.find(target);
    return it == update_done.end() ? start : it->second;
  }

  // The part of `target`'s update that window w runs ended at e: counts down its fractions.
  void update_part_done(const std::string& target, const Window& w, double e) {
    update_done[target] = std::max(update_done[target], e);
    double frac = 0;
    for (const auto& o : p.optimizer)
      if (o.target == target && &p.windows[o.window] == &w) frac += o.fraction;
    update_parts_left[target] -= frac;
  }

  void record(const std::string& name, const Window& w, SimLane lane, double s, double e, double bytes = 0) {
    out.events.push_back({name, w.name, lane, s, e, bytes});
  }

  void run() {
    const int L = p.num_layers;
    loaded_once.assign(L, false);
    for (const auto& o : p.optimizer) update_parts_left[o.target] += o.fraction;
    std::vector<std::pair<double, double>> gpu_delta;  // (time, +-bytes)
    gpu_delta.emplace_back(0, p.fixed_gpu_bytes);
    double now = 0;
    for (const Window& w : p.windows) {
      const double start = now;
      double end = start;
      // P0's collectives first: its host work (the updates) waits for the sums.
      double host_from = start;
      const bool net_first = w.kind == WindowKind::Prologue0;
      if (net_first)
        for (const Transfer& t : w.transfers)
          if (t.link == Link::Net && starts_with(t.tensor, "sum."))
            host_from = std::max(host_from, transfer(t, w, start, end));
      // Host work in issue order (FIFO on the pool).
      for (const HostTask& h : w.host) {
        double secs = h.seconds;
        if (retime) {
          secs = h.task == "optimizer" ? h.work / hw.host_optimizer_params_per_s : h.work / hw.host_memory_bw;
        }
        double s = std::max(host_from, lane_free[4]);
        if (h.task == "optimizer" && starts_with(h.target, "layer.")) s = std::max(s, paged_state_ready(h, w));
        double e = s + secs;
        lane_free[4] = e;
        record(h.task + " " + h.target, w, SimLane::Host, s, e);
        end = std::max(end, e);
        if (h.task == "optimizer") update_part_done(h.target, w, e);
      }
      // Compute.
      double compute_s = retime ? w.compute_flops / hw.effective_flops() : w.compute_s;
      double c_start = start, c_end = start;
      if (w.kind == WindowKind::Forward || w.kind == WindowKind::Head || w.kind == WindowKind::Recompute ||
          w.kind == WindowKind::Backward) {
        c_start = std::max(input_ready(w, start), lane_free[0]);
        c_end = c_start + compute_s;
        lane_free[0] = c_end;
        record(w.name, w, SimLane::Compute, c_start, c_end);
        out.compute_busy_s += compute_s;
        end = std::max(end, c_end);
        // Outputs.
        if (w.kind == WindowKind::Forward) produced["a." + std::to_string(w.layer + 1)] = c_end;
        if (w.kind == WindowKind::Head) head_computed = c_end;
        if (w.kind == WindowKind::Recompute) produced["rc." + std::to_string(w.layer + 1)] = c_end;
        if (w.kind == WindowKind::Backward) {
          produced["g." + std::to_string(w.layer)] = c_end;
          if (w.layer == 0) produced["dx.0"] = c_end;
        }
        if (w.workspace_bytes > 0) {
          gpu_delta.emplace_back(c_start, w.workspace_bytes);
          gpu_delta.emplace_back(c_end, -w.workspace_bytes);
        }
      }
      // Transfers, FIFO per lane in plan order.
      double last_transfer_end = start;
      for (const Transfer& t : w.transfers) {
        if (net_first && t.link == Link::Net && starts_with(t.tensor, "sum.")) continue;  // above
        last_transfer_end = std::max(last_transfer_end, transfer(t, w, start, end));
      }
      // Memory: the plan's allocations at window start, frees at window end.
      for (const MemOp& a : w.alloc) gpu_delta.emplace_back(start, a.bytes);
      for (const MemOp& f : w.free) gpu_delta.emplace_back(end, -f.bytes);
      // Idle compute in this window, attributed to what finished last.
      double idle = (end - start) - (c_end - c_start);
      if (idle > 0) {
        double host_end = lane_free[4];
        if (last_transfer_end >= host_end || w.host.empty()) out.exposed_comm_s += idle;
        else out.exposed_host_s += idle;
      }
      now = end;
    }
    out.step_s = now;
    out.compute_idle_s = out.step_s - out.compute_busy_s;
    out.peak.gpu = sweep(gpu_delta, &out.gpu_memory);
    host_delta.emplace_back(0, p.host_state_bytes);
    out.peak.cpu = sweep(host_delta, nullptr) + cpu_reserved;
    for (auto& [k, a] : nvme) out.peak.nvme += a.total();
  }

  // Runs transfer t of window w (started at `start`) FIFO on its lane; returns its end.
  double transfer(const Transfer& t, const Window& w, double start, double& window_end) {
    SimLane lane = lane_of(t.link);
    double ready = source_ready(t, w, start);
    double s = std::max({start, lane_free[static_cast<int>(lane)], ready});
    double e = s + t.bytes / bw(t.link);
    lane_free[static_cast<int>(lane)] = e;
    record(t.tensor, w, lane, s, e, t.bytes);
    window_end = std::max(window_end, e);
    arrive(t, e, w);
    return e;
  }

  void arrive(const Transfer& t, double e, const Window& w) {
    const std::string& x = t.tensor;
    switch (t.link) {
      case Link::H2D:
        if (starts_with(x, "w.") && x != "w.head" && !starts_with(x, "w.head.")) {
          int j = std::stoi(x.substr(2));
          weight_arrival[j] = e;
          loaded_once[j] = true;
        } else if (starts_with(x, "a.")) {
          gpu[x + "@back"].add(e, t.bytes);
          // The bytes leave host memory once on the compute tier.
          host_delta.emplace_back(e, ends_with(x, ".nvme") ? -t.bytes : 0);
        } else {
          gpu[x].add(e, t.bytes);
          if (x == "in.0") produced["a.0"] = e;
        }
        break;
      case Link::D2H:
        if (starts_with(x, "a.")) {
          host[x].add(e, t.bytes);
          if (ends_with(x, ".cpu")) cpu_reserved += t.bytes;  // held for the whole step
          else host_delta.emplace_back(e, t.bytes);           // NVMe staging
        } else if (const std::string target = drained_target(t); !target.empty()) {
          drained[target] = e;
        }
        break;
      case Link::Net:  // a target's weights in: its update is done here
        if (starts_with(x, "bcast.")) update_part_done(exchange_target(x), w, e);
        if (p.slot_sums && starts_with(x, "sum.") && exchange_target(x) != "embed") slot_summed[exchange_target(x)] = e;
        break;
      // Paged optimizer states, gradients and bf16 copies move between NVMe and fixed host
      // staging (counted in the plan's host state), so they add no staging.
      case Link::NvmeWrite:
        nvme[x].add(e, t.bytes);
        if (!starts_with(x, "os.") && !starts_with(x, "gs.") && !starts_with(x, "cp."))
          host_delta.emplace_back(e, -t.bytes);
        break;
      case Link::NvmeRead:
        host_from_nvme[x].add(e, t.bytes);
        if (!starts_with(x, "os.") && !starts_with(x, "cp.")) host_delta.emplace_back(e, t.bytes);
        break;
    }
  }

  // Peak of a running sum of (time, delta); at equal times frees apply before allocations
  // (a barrier releases buffers the next window reuses).
  static double sweep(std::vector<std::pair<double, double>> d, std::vector<std::pair<double, double>>* curve) {
    std::stable_sort(d.begin(), d.end(), [](const auto& a, const auto& b) {
      if (a.first != b.first) return a.first < b.first;
      return a.second < b.second;
    });
    double cur = 0, peak = 0;
    for (auto [t, v] : d) {
      cur += v;
      peak = std::max(peak, cur);
      if (curve) curve->emplace_back(t, cur);
    }
    return peak;
  }
};

}  // namespace

SimResult simulate_plan(const Plan& plan, const HardwareProfile& hw) {
  bool retime = hw.name != plan.hardware.name || hw.effective_flops() != plan.hardware.effective_flops() ||
                hw.host_optimizer_params_per_s != plan.hardware.host_optimizer_params_per_s;
  Replay r(plan, hw, retime);
  r.run();
  return std::move(r.out);
}

SimResult simulate_plan(const Plan& plan) { return simulate_plan(plan, plan.hardware); }

}  // namespace lt
