// Turns a policy's decisions into a Plan: the window list with compute, transfers, host
// work and compute-tier memory operations, following the window order and tensor names
// documented in plan/plan.h. Predictions are filled by evaluate_plan (plan_evaluate.h).
#pragma once

#include "plan/cost_model.h"
#include "plan/plan.h"
#include "plan/plan_decisions.h"
#include "plan/plan_request.h"

namespace lt {

// Our engine: lazy (or not) optimizer, weight prefetch one window ahead, block recompute
// producing boundaries only, each layer's backward recomputing its own internals unless
// they were kept, and the optimizer states of the layers plan_state_paging picks on NVMe
// (their updates pinned to its windows, whatever `d` says).
Plan build_plan(const PlanRequest& req, const CostModel& cm, const Decisions& d);

// Fills the metadata every plan carries (model, hardware, shape, budgets). The NVMe
// activation budget leaves room for the optimizer states paged there.
void fill_plan_header(Plan& p, const PlanRequest& req, const CostModel& cm, const std::string& policy,
                      double host_state_bytes, double nvme_state_bytes = 0);

}  // namespace lt
