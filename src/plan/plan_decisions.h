// What a policy decides, before it becomes windows (plan_builder.h turns decisions into a
// Plan). Stages index plan_stages.h.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "plan/plan.h"

namespace lt {

struct StageBytes {
  int stage = 0;
  double bytes = 0;
};

// Activation traffic of one boundary, per stage.
struct BoundaryTraffic {
  std::vector<StageBytes> d2h_cpu, d2h_nvme;  // compute tier -> host (cpu part, nvme part)
  std::vector<StageBytes> nvme_write;         // host staging -> NVMe
  std::vector<StageBytes> nvme_read;          // NVMe -> host staging
  std::vector<StageBytes> h2d_cpu, h2d_nvme;  // host -> compute tier
};

struct StageFraction {
  int stage = 0;
  double fraction = 0;
};

struct Decisions {
  std::string policy;
  std::vector<BoundaryPlacement> boundaries;  // L+1; boundary L is always gpu
  std::vector<bool> resident;                 // L
  std::vector<bool> keep_internals;           // L
  std::vector<BoundaryTraffic> traffic;       // L+1
  bool lazy_optimizer = true;
  // Per layer, where its host update runs (fractions sum to 1). Head: `head_optimizer`.
  // Ignored when !lazy_optimizer (everything runs in P0 after the clip factor is known).
  std::vector<std::vector<StageFraction>> layer_optimizer;  // L
  std::vector<StageFraction> head_optimizer;

  // Transfer windows, per layer; -1 (or empty vectors): the rule. A stage earlier than the
  // rule's for a load, or later for a drain, holds one more weight or gradient slot on the
  // compute tier in the windows between (plan_builder.h).
  //  forward_load[j]: the stage whose window loads layer j's weights for F{j} (rule: the
  //    window before, F{j-1}; P1 for layer 0), P1..F{j-1};
  //  backward_load[j]: the stage whose window loads them for B{j}, HEAD or a backward slot
  //    k > j+1 (rule: the window just before B{j}); only when boundaries j..k are stored
  //    (B{j} follows B{j+1} or HEAD, and no recompute window lies between);
  //  grad_drain[j]: the backward slot k < j (or E) whose window drains layer j's gradients
  //    to the host (rule: slot j-1; E for layer 0). Drains keep the order in which the
  //    gradients are produced (the global norm sums them in that order).
  std::vector<int> forward_load, backward_load, grad_drain;

  // Optimizer-state paging. paging_decided = false: plan/state_paging.h's rule for the
  // request, with each paged layer's update pinned to the rule's stage. true: the layers
  // with state_read[j] >= 0 page, read in stage state_read[j] and written back in
  // state_write[j], their updates where layer_optimizer puts them (strictly between).
  bool paging_decided = false;
  std::vector<int> state_read, state_write;  // L
  // Per paged layer, whether its masters and its gradients page (of what the request
  // lets page), as the MILP decides them; empty: every paged layer's do.
  std::vector<bool> master_paged, grads_paged;
  // Paged bf16 copies (PlanRequest::page_copy), per layer, as the MILP decides them;
  // empty: by the rule when the paging is the rule's (every paged layer whose copy may
  // page: copy_pages_by_rule), none when it is decided.
  std::vector<bool> copy_paged;

  // The head: 0 held whole on the compute tier; > 0 streamed in chunks of this many
  // vocabulary rows (plan/plan.h, CostModel::head_footprint).
  int64_t head_chunk_rows = 0;
};

// Recompute blocks implied by the materialized boundaries: consecutive materialized
// boundaries s < e with everything between recomputed.
std::vector<std::pair<int, int>> recompute_blocks(const std::vector<BoundaryPlacement>& b);

}  // namespace lt
