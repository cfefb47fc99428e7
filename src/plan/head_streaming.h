// How large a streamed head's chunks are. A policy decides whether the head streams (the
// MILP as a binary; greedy when the whole head does not fit) at the smallest chunk,
// CostModel::min_head_chunk_rows(), which leaves the most compute-tier memory to the
// rest of the plan. Once the rest is decided, the chunk grows: in the window model a
// chunk's size changes no window's time but F{L-1}'s prefetch of chunk 0, while fewer,
// larger chunks mean fewer copies, fences and matmul calls to pay for on a real device.
#pragma once

#include "plan/cost_model.h"
#include "plan/plan.h"
#include "plan/plan_decisions.h"
#include "plan/plan_request.h"

namespace lt {

// `plan` (built from `d`, evaluated, feasible, with a streamed head) rebuilt with the
// largest chunk of kHeadChunkQuantum * 2^k rows, two of them fewer than the vocabulary,
// whose double-buffered footprint still fits every budget and that predicts no longer a
// step; `plan`
// itself when no larger chunk does. The result is evaluated and marked feasible.
Plan widen_head_chunks(const PlanRequest& req, const CostModel& cm, Decisions d, Plan plan);

// For a policy that chose to stream the head (`plan` as above): the same decisions with
// the head held whole when that fits and predicts a step no longer than the request's
// target gap allows (a tie the solver may break either way: the whole head moves fewer
// bytes), else widen_head_chunks.
Plan settle_head(const PlanRequest& req, const CostModel& cm, Decisions d, Plan plan);

}  // namespace lt
