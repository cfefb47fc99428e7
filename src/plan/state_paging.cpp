#include "plan/state_paging.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace lt {
namespace {

// The most read-to-write intervals of paged layers open in any one stage.
int overlap(const StatePaging& p, const Stages& st) {
  int most = 0;
  for (int s = 0; s < st.count(); ++s) {
    int open = 0;
    for (int j = 0; j < static_cast<int>(p.on_nvme.size()); ++j)
      if (p.on_nvme[j] && p.read_stage[j] <= s && s <= p.write_stage[j]) ++open;
    most = std::max(most, open);
  }
  return most;
}

void page_top_layers(StatePaging& p, const CostModel& cm, int count) {
  const int L = cm.num_layers;
  const Stages st{L};
  std::vector<int> read(L, -1), write(L, -1);
  for (int j = L - count; j < L; ++j) {
    read[j] = StatePaging::rule_read_stage(st, j);
    write[j] = StatePaging::rule_write_stage(st, j);
  }
  p = paging_from_stages(cm, read, write);
}

}  // namespace

StatePaging paging_from_stages(const CostModel& cm, const std::vector<int>& read, const std::vector<int>& write) {
  const int L = cm.num_layers;
  LT_ASSERT(static_cast<int>(read.size()) == L && static_cast<int>(write.size()) == L, "paging stages per layer");
  StatePaging p;
  p.on_nvme.assign(L, false);
  p.master_on_nvme.assign(L, false);
  p.grads_on_nvme.assign(L, false);
  double most_grads = 0;
  for (const LayerCost& l : cm.layers) {
    p.state_bytes.push_back(l.paged_bytes());
    p.write_bytes.push_back(l.paged_write_bytes());
    p.grad_bytes.push_back(0);
    p.layer_bytes = std::max(p.layer_bytes, l.paged_bytes());
    most_grads = std::max(most_grads, l.grad_page_bytes);
  }
  p.read_stage = read;
  p.write_stage = write;
  for (int j = 0; j < L; ++j) {
    if (read[j] < 0 && write[j] < 0) continue;
    LT_ASSERT(read[j] >= 0 && write[j] > read[j] + 1, "paged layer " + std::to_string(j) + ": read before write");
    p.on_nvme[j] = true;
    p.master_on_nvme[j] = cm.layer(j).master_bytes > 0;
    p.grads_on_nvme[j] = cm.layer(j).grad_page_bytes > 0;
    p.grad_bytes[j] = cm.layer(j).grad_page_bytes;
    ++p.count;
  }
  p.staging_slots = overlap(p, Stages{L});
  if (p.count > 0) p.grad_staging_bytes = StatePaging::kGradStagingLayers * most_grads;
  p.host_state_bytes = cm.host_state_bytes - p.nvme_bytes() + p.staging_slots * p.layer_bytes + p.grad_staging_bytes;
  return p;
}

void page_parts(StatePaging& p, const CostModel& cm, const std::vector<bool>& masters, const std::vector<bool>& grads) {
  const int L = cm.num_layers;
  LT_ASSERT(static_cast<int>(masters.size()) == L && static_cast<int>(grads.size()) == L, "paged parts per layer");
  for (int j = 0; j < L; ++j) {
    if (!p.on_nvme[j]) {
      LT_ASSERT(!masters[j] && !grads[j], "parts of layer " + std::to_string(j) + ", whose state does not page");
      continue;
    }
    const LayerCost& l = cm.layer(j);
    LT_ASSERT((!masters[j] || l.master_bytes > 0) && (!grads[j] || l.grad_page_bytes > 0) &&
                  (!grads[j] || masters[j] || l.master_bytes == 0),
              "layer " + std::to_string(j) + "'s parts cannot page so");
    const double kept = (masters[j] ? 0 : l.master_bytes) + (grads[j] ? 0 : l.grad_page_bytes);
    p.master_on_nvme[j] = masters[j];
    p.grads_on_nvme[j] = grads[j];
    p.state_bytes[j] -= kept;
    p.write_bytes[j] -= masters[j] ? 0 : l.master_bytes;
    p.grad_bytes[j] = grads[j] ? l.grad_page_bytes : 0;
    p.host_state_bytes += kept;
  }
  if (std::none_of(grads.begin(), grads.end(), [](bool g) { return g; })) {  // nothing to stage
    p.host_state_bytes -= p.grad_staging_bytes;
    p.grad_staging_bytes = 0;
  }
}

void page_copies(StatePaging& p, const CostModel& cm, const std::vector<bool>& copy) {
  const int L = cm.num_layers;
  LT_ASSERT(static_cast<int>(copy.size()) == L, "paged copies per layer");
  p.copy_on_nvme.assign(L, false);
  p.copy_bytes.assign(L, 0);
  bool any = false;
  for (int j = 0; j < L; ++j) {
    p.copy_bytes[j] = cm.layer(j).copy_page_bytes;
    p.copy_layer_bytes = std::max(p.copy_layer_bytes, p.copy_bytes[j]);
    if (!copy[j]) continue;
    LT_ASSERT(p.on_nvme[j] && p.master_on_nvme[j] && StatePaging::copy_may_page(L, j) && p.copy_bytes[j] > 0,
              "layer " + std::to_string(j) + "'s bf16 copy cannot page");
    p.copy_on_nvme[j] = any = true;
    p.host_state_bytes -= p.copy_bytes[j];
  }
  if (!any) return;
  p.copy_staging_bytes = StatePaging::kCopyStagingLayers * p.copy_layer_bytes;
  p.host_state_bytes += p.copy_staging_bytes;
}

StatePaging plan_state_paging(const PlanRequest& req, const CostModel& cm, bool lazy_optimizer) {
  const int L = cm.num_layers;
  const int most = std::max(0, L - 2);
  StatePaging p;
  if (req.nvme_state_layers > most)
    throw Error("asked for the optimizer states of " + std::to_string(req.nvme_state_layers) +
                    " layers on NVMe, but only layers 2.." + std::to_string(L - 1) + " can page (" +
                    std::to_string(most) + ")",
                "--nvme-state-layers", "ask for at most " + std::to_string(most));
  // The sharded optimizer keeps each rank's part in host memory (train/rank_exchange.h
  // has no paging): a plan for it pages nothing, and says so when the host is short.
  const bool sharded = cm.dp.on() && cm.dp.sharded;
  if (sharded && req.nvme_state_layers > 0)
    throw Error("optimizer states cannot page to NVMe with the sharded optimizer of " + std::to_string(cm.dp.ranks) +
                    " data-parallel ranks",
                "--nvme-state-layers", "use --nvme-state-layers 0, or --shard-optimizer off");
  int count = 0;
  if (!lazy_optimizer || sharded) {
    count = 0;
  } else if (req.nvme_state_layers >= 0) {
    count = req.nvme_state_layers;
  } else {
    const double room = kHostStateShare * req.hardware.host_memory_bytes;
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
