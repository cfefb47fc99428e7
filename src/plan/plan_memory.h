// A plan's compute-tier memory is the streaming executor's arena (plan/stream_schedule.h)
// at the cost model's sizes: the schedule's requests, each allocated at the start of its
// first window and freed at the end of its last, under the schedule's names (plan/plan.h
// lists them). So the planner, the simulators and the executor read one set of names, and
// what a plan says a window holds is what the executor places there (at the profile's
// element sizes: a plan for the executor's fp32 activations and scratch is its bytes).
#pragma once

#include <cstdint>

#include "plan/cost_model.h"
#include "plan/plan.h"
#include "plan/stream_schedule.h"

namespace lt {

// The requests' bytes by the cost model: boundaries at the profile's act_bytes, weight and
// gradient slots at its weight and gradient sizes, the kernels' scratch the request's or
// estimated (CostModel::layer_scratch_bytes), the head whole or streamed in chunks of
// head_chunk_rows rows.
ArenaSizes plan_arena_sizes(const CostModel& cm, int64_t head_chunk_rows);

// Writes the windows' alloc and free from the schedule of p (its windows, transfers,
// boundaries, kept internals and head as built), replacing any there.
void lay_out_plan_memory(Plan& p, const CostModel& cm);

}  // namespace lt
