#include "plan/plan_request.h"

#include <algorithm>

namespace lt {

double PlanRequest::cpu_budget(double host_state_bytes) const {
  if (cpu_act_budget_bytes >= 0) return cpu_act_budget_bytes;
  // What the host has left after its persistent state, keeping 10% for the OS, the data
  // pipeline and pinned staging the plan does not itemize.
  return std::max(0.0, 0.9 * hardware.host_memory_bytes - host_state_bytes);
}

}  // namespace lt
