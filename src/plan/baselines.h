// Baseline policies, in the same plan format as the MILP's plans:
//  - megatrain: boundaries 0, 4, 8, ... and L kept on the compute tier, the rest
//    recomputed; the optimizer runs after backward (all in P0), as the MegaTrain paper's
//    rule, on our engine;
//  - megatrain-code: the same rule plus what MegaTrain's public code does: each layer is
//    streamed three times per step (forward, block recompute keeping internals, backward),
//    no look-ahead prefetch in backward (a load window before each backward compute), a
//    separate clip pass over all gradients, fp32 Adam states, the optimizer not overlapped;
//  - keep-all: every boundary on the compute tier, lazy optimizer;
//  - recompute-all: only boundaries 0 and L stored, one recompute block, lazy optimizer;
//  - greedy: keep-all, then demote boundaries from the bottom (longest-lived first) to
//    host memory, then NVMe, then recompute, until the plan fits; ASAP transfers.
#pragma once

#include "plan/cost_model.h"
#include "plan/plan.h"
#include "plan/plan_request.h"

namespace lt {

// MegaTrain's checkpoint interval.
constexpr int kMegaTrainInterval = 4;

Plan plan_megatrain(const PlanRequest& req, const CostModel& cm);
Plan plan_megatrain_code(const PlanRequest& req, const CostModel& cm);
Plan plan_keep_all(const PlanRequest& req, const CostModel& cm);
Plan plan_recompute_all(const PlanRequest& req, const CostModel& cm);
Plan plan_greedy(const PlanRequest& req, const CostModel& cm);

}  // namespace lt
