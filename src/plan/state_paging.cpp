#include "plan/state_paging.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace lt {
namespace {

// Host share PlanRequest::cpu_budget leaves to the persistent state and activations.
constexpr double kHostShare = 0.9;

// The most read-to-write intervals of paged layers open in any one stage.
int overlap(const StatePaging& p, const Stages& st) {
  int most = 0;
  for (int s = 0; s < st.count(); ++s) {
    int open = 0;
    for (int j = 0; j < static_cast<int>(p.on_nvme.size()); ++j)
      if (p.on_nvme[j] && StatePaging::read_stage(st, j) <= s && s <= StatePaging::write_stage(st, j)) ++open;
    most = std::max(most, open);
  }
  return most;
}

void page_top_layers(StatePaging& p, const CostModel& cm, int count) {
  const int L = cm.num_layers;
  p.on_nvme.assign(L, false);
  p.count = count;
  for (int j = L - count; j < L; ++j) p.on_nvme[j] = true;
  p.staging_slots = overlap(p, Stages{L});
  p.host_state_bytes = cm.host_state_bytes - (count - p.staging_slots) * p.layer_bytes;
}

}  // namespace

StatePaging plan_state_paging(const PlanRequest& req, const CostModel& cm, bool lazy_optimizer) {
  const int L = cm.num_layers;
  const int most = std::max(0, L - 2);
  StatePaging p;
  p.layer_bytes = cm.layer_state_bytes;
  if (req.nvme_state_layers > most)
    throw Error("asked for the optimizer states of " + std::to_string(req.nvme_state_layers) +
                    " layers on NVMe, but only layers 2.." + std::to_string(L - 1) + " can page (" +
                    std::to_string(most) + ")",
                "--nvme-state-layers", "ask for at most " + std::to_string(most));
  int count = 0;
  if (!lazy_optimizer) {
    count = 0;
  } else if (req.nvme_state_layers >= 0) {
    count = req.nvme_state_layers;
  } else {
    const double room = kHostShare * req.hardware.host_memory_bytes;
    while (count < most) {
      page_top_layers(p, cm, count);
      if (p.host_state_bytes <= room) break;
      ++count;
    }
  }
  page_top_layers(p, cm, count);
  return p;
}

}  // namespace lt
