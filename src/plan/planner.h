// The planner's entry points: a plan for one policy, the largest feasible batch, the batch
// with the most tokens/s, and what to tell the user when nothing fits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "plan/plan_request.h"

namespace lt {

// "milp", "megatrain", "megatrain-code", "keep-all", "recompute-all", "greedy".
const std::vector<std::string>& plan_policies();
// Throws lt::Error for an unknown policy.
Plan make_plan(const PlanRequest& req, const std::string& policy);

struct BatchPoint {
  int64_t batch = 0;
  bool feasible = false;
  double step_s = 0, tokens_per_s = 0;
};

struct BatchSearchResult {
  int64_t largest_feasible = 0;  // 0: not even batch 1 fits
  int64_t best_batch = 0;        // the most tokens/s among the batches tried
  double best_tokens_per_s = 0;
  std::vector<BatchPoint> tried;
};

// Largest feasible batch by doubling then bisection (feasibility grows no easier with
// batch), then tokens/s at powers of two up to it and at it. `limit` caps the search.
BatchSearchResult search_batch(const PlanRequest& req, const std::string& policy, int64_t limit = 4096);
int64_t largest_feasible_batch(const PlanRequest& req, const std::string& policy, int64_t limit = 4096);

struct InfeasibleReport {
  std::string shortage;       // which budget is short and by how much
  int64_t largest_batch = 0;  // largest batch that fits (0: none)
  std::string message;        // one paragraph for the user
};
InfeasibleReport diagnose_infeasible(const PlanRequest& req, const std::string& policy, const Plan& failed);

}  // namespace lt
