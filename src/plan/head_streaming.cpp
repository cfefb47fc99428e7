#include "plan/head_streaming.h"

#include "core/error.h"
#include "plan/plan_builder.h"
#include "plan/plan_evaluate.h"
#include "plan/plan_validate.h"

namespace lt {

Plan widen_head_chunks(const PlanRequest& req, const CostModel& cm, Decisions d, Plan plan) {
  LT_ASSERT(plan.feasible && d.head_chunk_rows > 0 && plan.head_chunk_rows == d.head_chunk_rows,
            "widening the chunks of a head that does not stream");
  for (int64_t rows = 2 * d.head_chunk_rows; 2 * rows < cm.vocab_size; rows *= 2) {  // two buffers below the whole
    d.head_chunk_rows = rows;
    Plan wider = build_plan(req, cm, d);
    evaluate_plan(wider);
    // A step may grow by F{L-1}'s larger prefetch; round-off of the window sum aside, no.
    if (!capacity_problems(wider).empty() || wider.predicted_step_s > plan.predicted_step_s * (1 + 1e-12)) break;
    wider.feasible = true;
    plan = std::move(wider);
  }
  return plan;
}

Plan settle_head(const PlanRequest& req, const CostModel& cm, Decisions d, Plan plan) {
  Decisions whole_d = d;
  whole_d.head_chunk_rows = 0;
  Plan whole = build_plan(req, cm, whole_d);
  evaluate_plan(whole);
  // Within the solve's target gap the two are the same to the solver: its answer could as
  // well have been either.
  if (capacity_problems(whole).empty() && whole.predicted_step_s <= plan.predicted_step_s * (1 + req.target_gap)) {
    whole.feasible = true;
    return whole;
  }
  return widen_head_chunks(req, cm, std::move(d), std::move(plan));
}

}  // namespace lt
