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
};

// Recompute blocks implied by the materialized boundaries: consecutive materialized
// boundaries s < e with everything between recomputed.
std::vector<std::pair<int, int>> recompute_blocks(const std::vector<BoundaryPlacement>& b);

}  // namespace lt
