#include "plan/data_parallel.h"

#include <algorithm>
#include <map>
#include <vector>

#include "core/error.h"
#include "plan/cost_model.h"
#include "plan/plan.h"
#include "plan/plan_request.h"
#include "plan/rank_parts.h"

namespace lt {
namespace {

// The ranks exchange fp32: the host gradients they sum and the master weights an owner
// sends out (train/rank_exchange.h).
constexpr double kExchangeBytesPerParam = 4;

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// A slot sum (the rule in the header): in the window after B{j}, or in HEAD, before the
// first drain of its target there (at the end when the drain moved to a later window).
// A streamed head sums each part's slot before it drains (sum.head.<c>, sum.head.norm, a
// share of the head's bytes as its drain's), all listed before the first drain.
void add_slot_sum(Plan& p, const std::string& target, const Transfer& sum) {
  const bool head = target == "head";
  const int layer = head ? -1 : std::stoi(target.substr(6));
  const int W = static_cast<int>(p.windows.size());
  int at = -1;
  for (int w = 0; w < W && at < 0; ++w) {
    const Window& win = p.windows[size_t(w)];
    if (head ? win.kind == WindowKind::Head : win.kind == WindowKind::Backward && win.layer == layer) at = head ? w : w + 1;
  }
  LT_ASSERT(at >= 0 && at < W, "no window for the slot sum of " + target);
  auto& xs = p.windows[size_t(at)].transfers;
  std::vector<Transfer> sums;
  double drained = 0;
  for (const Transfer& x : xs)
    if (head && drained_target(x) == target) {
      sums.push_back({"sum." + x.tensor.substr(2), Link::Net, x.bytes});  // g.head.<c> -> sum.head.<c>
      drained += x.bytes;
    }
  for (Transfer& s : sums) s.bytes = drained > 0 ? sum.bytes * s.bytes / drained : 0;
  if (sums.empty()) sums.push_back(sum);  // a layer's, or a head with no drain here
  const auto drain = std::find_if(xs.begin(), xs.end(), [&](const Transfer& x) { return drained_target(x) == target; });
  xs.insert(drain, sums.begin(), sums.end());
}

}  // namespace

std::string drained_target(const Transfer& x) {
  if (x.link != Link::D2H) return "";
  if (x.tensor == "dx.0") return "embed";
  if (x.tensor == "g.head" || starts_with(x.tensor, "g.head.")) return "head";
  if (starts_with(x.tensor, "g.")) return "layer." + x.tensor.substr(2);
  return "";
}

double DataParallelCosts::sum_bytes(double params) const {
  if (!on()) return 0;
  return (ranks - 1) * kExchangeBytesPerParam * params * (sharded ? 1 : 2);
}

double DataParallelCosts::weight_bytes(double params) const {
  return on() && sharded ? (ranks - 1) * kExchangeBytesPerParam * params : 0;
}

std::string exchange_tensor(const char* kind, const std::string& target) {
  const std::string t = starts_with(target, "layer.") ? target.substr(6) : target;
  return std::string(kind) + "." + t;
}

std::string exchange_target(const std::string& tensor) {
  for (const char* prefix : {"sum.", "bcast."}) {
    if (!starts_with(tensor, prefix)) continue;
    const std::string t = tensor.substr(std::string(prefix).size());
    if (t == "embed" || t == "head") return t;
    if (std::string(prefix) == "sum." && starts_with(t, "head.")) return "head";  // a streamed head's part
    const bool index = !t.empty() && t.size() <= 9 && t.find_first_not_of("0123456789") == std::string::npos;
    return index ? "layer." + t : "";
  }
  return "";
}

void apply_data_parallel(CostModel& cm, const PlanRequest& req) {
  DataParallelCosts& dp = cm.dp;
  if (req.ranks < 1) throw Error("ranks must be at least 1, got " + std::to_string(req.ranks), "plan request", "");
  dp = DataParallelCosts{};
  dp.ranks = req.ranks;
  if (!dp.on()) return;
  dp.sharded = req.shard_optimizer;
  dp.slot_sums = req.slot_sums;
  dp.network_bw = req.hardware.network_bw;
  if (!(dp.network_bw > 0))
    throw Error("a plan for " + std::to_string(req.ranks) + " data-parallel ranks needs the rate of their link",
                "hardware profile '" + req.hardware.name + "' has no links.network_gbps",
                "give --network-gbps G, or add links.network_gbps to the profile");
  if (!dp.sharded) return;
  // The parts as the sharded optimizer cuts them (train/optimizer_shards.h), by parameters:
  // the 8-bit states are the same bytes per parameter in every target.
  std::vector<double> params{cm.embed_params};
  for (const LayerCost& l : cm.layers) params.push_back(l.params);
  params.push_back(cm.head_params);
  const std::vector<int> cut = balanced_cuts(params, dp.ranks);
  double state_total = 0, busiest = 0;
  for (double x : params) state_total += x;
  for (int r = 0; r < dp.ranks; ++r) {
    double part = 0;
    for (int i = cut[size_t(r)]; i < cut[size_t(r) + 1]; ++i) part += params[size_t(i)];
    busiest = std::max(busiest, part);
  }
  dp.owned_params = busiest;
  dp.owned_update_s = busiest / req.hardware.host_optimizer_params_per_s;
  // One rank holds its part's optimizer states only.
  const double state_per_param =
      cm.layers.empty() || cm.layer(0).params <= 0 ? 0 : cm.layer(0).state_bytes / cm.layer(0).params;
  cm.host_state_bytes -= state_per_param * (state_total - busiest);
}

void add_rank_exchange(Plan& p, const CostModel& cm) {
  const DataParallelCosts& dp = cm.dp;
  if (!dp.on()) return;
  const int W = static_cast<int>(p.windows.size());
  // The window the sums of the gradients drained in window w start in: the next one that
  // is a layer's backward, E or P0 (the next step's, after E). A recompute or load window
  // belongs to the backward it precedes (plan_stages.h), as the MILP counts it.
  auto after = [&](int w) {
    for (int v = w + 1; v < W; ++v)
      if (p.windows[size_t(v)].kind != WindowKind::Recompute && p.windows[size_t(v)].kind != WindowKind::Load) return v;
    return 0;
  };
  std::map<std::string, int> last_drain;  // target -> the last window draining its gradient
  for (int w = 0; w < W; ++w)
    for (const Transfer& x : p.windows[size_t(w)].transfers) {
      const std::string t = drained_target(x);
      if (!t.empty()) last_drain[t] = w;
    }
  auto params_of = [&](const std::string& target) {
    if (target == "embed") return cm.embed_params;
    if (target == "head") return cm.head_params;
    LT_ASSERT(starts_with(target, "layer."), "update target " + target);
    return cm.layer(std::stoi(target.substr(6))).params;
  };
  // In the order the gradients are final: what a window lists runs first.
  std::vector<std::pair<int, std::string>> order;
  for (const auto& [t, w] : last_drain) order.emplace_back(w, t);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second < b.second;
  });
  for (const auto& [w, t] : order) {
    const Transfer sum{exchange_tensor("sum", t), Link::Net, dp.sum_bytes(params_of(t))};
    if (dp.slot_sums && t != "embed") {
      add_slot_sum(p, t, sum);
    } else {
      p.windows[size_t(after(w))].transfers.push_back(sum);
    }
  }
  if (!dp.sharded) return;
  // Each rank updates its part in P0; where the plan updated a target, its weights come in.
  for (Window& w : p.windows) {
    for (const HostTask& h : w.host)
      if (h.task == "optimizer")
        w.transfers.push_back({exchange_tensor("bcast", h.target), Link::Net, dp.weight_bytes(h.work)});
    w.host.erase(std::remove_if(w.host.begin(), w.host.end(), [](const HostTask& h) { return h.task == "optimizer"; }),
                 w.host.end());
  }
  LT_ASSERT(!p.windows.empty() && p.windows[0].kind == WindowKind::Prologue0, "a plan starts with P0");
  p.windows[0].host.push_back({"optimizer", "rank part", dp.owned_params, dp.owned_update_s});
}

}  // namespace lt
