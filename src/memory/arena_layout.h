// Chooses arena offsets for a set of (name, bytes, lifetime) requests, so that two
// requests whose lifetimes overlap never share bytes. The planner or the executor runs it
// once at setup; ComputeArena then checks the result against the budget.
//
// Policy: greedy by size (largest first), each at the lowest aligned offset that does not
// collide with an already placed, lifetime-overlapping request; ties are broken by
// first_window and then name, so the layout is deterministic. A request that follows
// another (ArenaRequest::follows) is placed with it, right after its bytes: the group
// goes where none of its members collides, its size the largest end among them. This is
// the heuristic TFLite's and ggml's allocators use; it is not optimal, but it is close on
// the nested, stack-like lifetimes of a training step.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/arena_request.h"
#include "memory/compute_arena.h"

namespace lt {

// One allocation per request, in the requests' order.
std::vector<ArenaAllocation> lay_out_arena(const std::vector<ArenaRequest>& requests,
                                           size_t alignment = ComputeArena::kDefaultAlignment);

// The highest byte any allocation uses (the budget the layout needs).
size_t arena_extent(const std::vector<ArenaAllocation>& allocations);

}  // namespace lt
