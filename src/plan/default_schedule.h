// Simple schedules the heuristic policies use where the MILP would choose: activation
// transfers as soon as possible (offload in the window after production, NVMe write in the
// next one; reload in the window before the first use, NVMe read in the one before that),
// and each layer's host update in the forward window two before it is needed.
#pragma once

#include "plan/cost_model.h"
#include "plan/plan_decisions.h"

namespace lt {

// Decisions with every boundary on the compute tier, no residency or kept internals, the
// default lazy optimizer placement and no traffic.
Decisions all_gpu_decisions(int L, const std::string& policy);
// Fills d.traffic from d.boundaries (ASAP rule above). Returns false (and leaves the NVMe
// parts without traffic) when an NVMe part's chain does not fit before its reload deadline.
bool assign_asap_traffic(Decisions& d, const CostModel& cm);
// The stage whose window must have brought boundary b back (the window before its first
// backward use), given the materialized boundaries.
int reload_deadline_stage(const std::vector<BoundaryPlacement>& b, int boundary);
// True when the ASAP rule can move boundary b through NVMe (write strictly before read).
bool asap_nvme_possible(const std::vector<BoundaryPlacement>& b, int boundary);

}  // namespace lt
