#include "plan/plan_evaluate.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "plan/data_parallel.h"

namespace lt {
namespace {

bool ends_with(const std::string& s, const char* suffix) {
  std::string t(suffix);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

}  // namespace

double WindowLinkTimes::total() const {
  return std::max({compute, h2d, d2h, nvme, net_then_host ? net + host : std::max(net, host)});
}

WindowLinkTimes window_timing(const Window& w, const HardwareProfile& hw) {
  WindowLinkTimes t;
  t.compute = w.compute_s;
  t.net_then_host = w.kind == WindowKind::Prologue0;
  // A sum listed before a drain of its target in one window is a slot sum: a host sum
  // comes after the target's last drain, in a later window.
  std::map<std::string, size_t> last_drain;  // target -> its last drain's place in the list
  for (size_t i = 0; i < w.transfers.size(); ++i)
    if (const std::string target = drained_target(w.transfers[i]); !target.empty()) last_drain[target] = i;
  std::map<std::string, double> summed;  // target -> its slot sum's end
  for (size_t i = 0; i < w.transfers.size(); ++i) {
    const Transfer& x = w.transfers[i];
    switch (x.link) {
      case Link::H2D: t.h2d += x.bytes / hw.h2d_bw; break;
      case Link::D2H: {
        const auto sum = summed.find(drained_target(x));
        t.d2h = std::max(t.d2h, sum == summed.end() ? 0.0 : sum->second) + x.bytes / hw.d2h_bw;
        break;
      }
      case Link::NvmeWrite: t.nvme += x.bytes / hw.nvme_write_bw; break;
      case Link::NvmeRead: t.nvme += x.bytes / hw.nvme_read_bw; break;
      case Link::Net: {
        const std::string target = exchange_target(x.tensor);
        const auto drain = last_drain.find(target);
        const bool slot_sum = x.tensor.rfind("sum.", 0) == 0 && drain != last_drain.end() && drain->second > i;
        const double ready = slot_sum && target == "head" ? t.compute : 0;
        t.net = std::max(t.net, ready) + x.bytes / hw.network_bw;
        if (slot_sum) summed[target] = t.net;
        break;
      }
    }
  }
  for (const auto& h : w.host) t.host += h.seconds;
  return t;
}

double predicted_step_seconds(const Plan& p) {
  double s = 0;
  for (const auto& w : p.windows) s += window_timing(w, p.hardware).total();
  return s;
}

double cpu_reserved_activation_bytes(const Plan& p) {
  double a = 0;
  for (const auto& w : p.windows)
    for (const auto& x : w.transfers)
      if (x.link == Link::D2H && ends_with(x.tensor, ".cpu")) a += x.bytes;
  return a;
}

double peak_nvme_staging_bytes(const Plan& p) {
  double staging = 0, peak = 0;
  for (const auto& w : p.windows) {
    double in = 0, out = 0;
    for (const auto& x : w.transfers) {
      // Paged optimizer states have fixed slots, paged gradients and bf16 copies their
      // staging (all in the host state).
      if (x.tensor.rfind("os.", 0) == 0 || x.tensor.rfind("gs.", 0) == 0 || x.tensor.rfind("cp.", 0) == 0) continue;
      bool nv = ends_with(x.tensor, ".nvme");
      if ((x.link == Link::D2H && nv) || x.link == Link::NvmeRead) in += x.bytes;
      if (x.link == Link::NvmeWrite || (x.link == Link::H2D && nv)) out += x.bytes;
    }
    staging += in;
    peak = std::max(peak, staging);
    staging -= out;
  }
  return peak;
}

PeakBytes predicted_peaks(const Plan& p) {
  PeakBytes pk;
  double live = p.fixed_gpu_bytes;
  for (const auto& w : p.windows) {
    for (const auto& a : w.alloc) live += a.bytes;
    pk.gpu = std::max(pk.gpu, live + w.workspace_bytes);
    for (const auto& f : w.free) live -= f.bytes;
  }
  pk.cpu = p.host_state_bytes + cpu_reserved_activation_bytes(p) + peak_nvme_staging_bytes(p);
  for (const auto& w : p.windows)
    for (const auto& x : w.transfers)
      if (x.link == Link::NvmeWrite) pk.nvme += x.bytes;
  return pk;
}

void evaluate_plan(Plan& p) {
  p.predicted_step_s = predicted_step_seconds(p);
  p.predicted_peak = predicted_peaks(p);
}

}  // namespace lt
