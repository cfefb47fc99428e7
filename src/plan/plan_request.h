// What the user asks the planner for: a model, a machine, a batch shape and budgets.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "plan/cost_model.h"
#include "plan/hardware_profile.h"

namespace lt {

struct PlanRequest {
  std::string model_name;
  ModelConfig model;
  HardwareProfile hardware;
  int64_t batch = 1, seq = 1024;
  double gpu_cap_bytes = 0;          // compute-tier cap; <= 0: the profile's default cap
  double cpu_act_budget_bytes = -1;  // activations in host memory; < 0: what the host has left
  double nvme_act_budget_bytes = -1; // activations on NVMe; < 0: the profile's NVMe capacity
                                     // less the paged optimizer states
  int nvme_state_layers = -1;        // layers whose optimizer states page from NVMe; < 0:
                                     // as few as host memory needs (plan/state_paging.h)
  // The compute reads bf16 copies of the projection matrices (bf16 runs; GPU profiles),
  // so a paged layer's fp32 masters of them may page to NVMe with its optimizer state (a
  // larger paged blob per layer: fewer layers page for the same host budget; the MILP
  // chooses the layers, the rule policies take every paged layer's).
  bool page_master = false;
  // A paged layer's host gradients may page too (likewise; where masters may page, only
  // with its masters): written to NVMe in the window after their drain (the rule's drain
  // window for a paged layer), read with the state before the update. Not with gradient
  // accumulation or data-parallel sums (they read the host's).
  bool page_grads = false;
  // A paged layer's bf16 compute copy pages too (with page_master): the update writes it
  // into host staging from the paged masters, the layer's forward reads it there, it goes
  // to NVMe during that forward (cp.<j>) and comes back for the layer's backward. Only for
  // layers 2..L-3 whose output boundary is stored (no recompute reads the copy) and whose
  // weights load by the rule (plan/state_paging.h).
  bool page_copy = false;
  // Re-plans (train/replanner.h): the layers whose states, masters, gradients and bf16
  // copies the running plan pages (its Plan::nvme_*_layers), kept as they are, since the
  // trainer's host blocks and NVMe slots are set up for them; the MILP then chooses the
  // rest, the states' windows among it. Not set: the planner chooses what pages.
  struct PagedLayers {
    std::vector<int> states, masters, grads, copies;
  };
  std::optional<PagedLayers> keep_paged;
  MeasuredLayerTimes measured;
  // The executor's kernels' scratch (plan/plan.h); not given: the cost model's estimate.
  ExecutorScratch scratch;
  // When set, the scratch at another batch: the batch searches (the largest batch that
  // fits, diagnose_infeasible's advice) plan each batch with its own, not with `scratch`,
  // which is this batch's and too large for a smaller one.
  std::function<ExecutorScratch(int64_t batch)> scratch_at;
  // Data-parallel ranks that each run this plan on batch rows of their own, and whether
  // they shard the optimizer (plan/data_parallel.h); the profile's network_bw times
  // their exchange.
  int ranks = 1;
  bool shard_optimizer = true;
  // The ranks sum the layers' and the head's gradients in their compute-tier slots before
  // the slots drain, not on the host after (the trainer's rule: a separate compute tier
  // and one micro-batch a step, train/streamed_training.h).
  bool slot_sums = false;
  double time_limit_s = 10;          // MILP limit, in CPU seconds as CBC counts them
  double target_gap = 0.002;         // MILP relative gap to stop at

  // Budgets with defaults filled in (host budget depends on the policy's host state).
  double gpu_cap() const { return gpu_cap_bytes > 0 ? gpu_cap_bytes : hardware.default_cap_bytes; }
  double nvme_budget(double nvme_state_bytes = 0) const {
    return nvme_act_budget_bytes >= 0 ? nvme_act_budget_bytes
                                      : std::max(0.0, hardware.nvme_capacity_bytes - nvme_state_bytes);
  }
  double cpu_budget(double host_state_bytes) const;
};

}  // namespace lt
