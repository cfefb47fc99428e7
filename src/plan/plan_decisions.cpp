#include "plan/plan_decisions.h"

#include <algorithm>

#include "core/error.h"
#include "plan/plan_request.h"

namespace lt {

std::vector<std::pair<int, int>> recompute_blocks(const std::vector<BoundaryPlacement>& b) {
  std::vector<std::pair<int, int>> blocks;
  int last = 0;
  for (int i = 1; i < static_cast<int>(b.size()); ++i) {
    if (b[i].recompute && i + 1 < static_cast<int>(b.size())) continue;
    blocks.emplace_back(last, i);
    last = i;
  }
  return blocks;
}

double PlanRequest::cpu_budget(double host_state_bytes) const {
  if (cpu_act_budget_bytes >= 0) return cpu_act_budget_bytes;
  // What the host has left after its persistent state, keeping 10% for the OS, the data
  // pipeline and pinned staging the plan does not itemize.
  return std::max(0.0, 0.9 * hardware.host_memory_bytes - host_state_bytes);
}

}  // namespace lt
