// Turns a policy's decisions into a Plan: the window list with compute, transfers, host
// work and compute-tier memory operations, following the window order and tensor names
// documented in plan/plan.h. Predictions are filled by evaluate_plan (plan_evaluate.h).
#pragma once

#include "plan/cost_model.h"
#include "plan/plan.h"
#include "plan/plan_decisions.h"
#include "plan/plan_request.h"

namespace lt {

// Our engine: lazy (or not) optimizer, weight prefetch one window ahead and gradient
// drain one window behind (or the stages `d` chooses), block recompute producing
// boundaries only, each layer's backward recomputing its own internals unless they were
// kept, and optimizer states paged from NVMe: those `d` chooses, or else those
// plan_state_paging picks (their updates then pinned to its stages, whatever `d` says).
Plan build_plan(const PlanRequest& req, const CostModel& cm, const Decisions& d);

// Fills the metadata every plan carries (model, hardware, shape, budgets). The NVMe
// activation budget leaves room for the optimizer states paged there.
void fill_plan_header(Plan& p, const PlanRequest& req, const CostModel& cm, const std::string& policy,
                      double host_state_bytes, double nvme_state_bytes = 0);

}  // namespace lt
