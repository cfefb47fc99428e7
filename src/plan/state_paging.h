// Optimizer-state paging: which decoder layers keep their optimizer states (8-bit m and v
// with their block scales) on NVMe instead of host memory, and when those states move.
//
// Only plans with the lazy optimizer page states: layer j's update runs in F{j-2}; its
// state is read from NVMe in the window before (P1 or F{j-3}) and written back in F{j-1},
// so both transfers run under forward compute and never wait on the update. Layers 0 and
// 1 (updated in P0/P1, with no earlier window to read in) stay on the host, as do the
// embedding and the head. The top layers page first: they leave the most forward windows
// to hide the reads in.
//
// The states in flight live in a fixed host reservation (as many layer states as the
// read-to-write intervals overlap, at most 3), counted in the plan's host state; the
// os.<j> transfers move bytes between NVMe and that reservation, so they are not
// activation staging.
#pragma once

#include <vector>

#include "plan/cost_model.h"
#include "plan/plan_request.h"
#include "plan/plan_stages.h"

namespace lt {

struct StatePaging {
  std::vector<bool> on_nvme;    // per layer
  int count = 0;
  double layer_bytes = 0;       // one layer's optimizer state
  int staging_slots = 0;        // host buffers the states in flight need at once
  double host_state_bytes = 0;  // the policy's host state, less the paged states, plus the slots
  double nvme_bytes() const { return count * layer_bytes; }

  static int update_stage(const Stages& st, int j) { return st.forward(j - 2); }
  static int read_stage(const Stages& st, int j) { return j == 2 ? st.p1() : st.forward(j - 3); }
  static int write_stage(const Stages& st, int j) { return st.forward(j - 1); }
};

// The paging a request gets. req.nvme_state_layers >= 0 asks for that many layers
// (lt::Error when more than L-2); < 0 pages as few as make the host state and its staging
// fit 90% of host memory (PlanRequest::cpu_budget's share), at most L-2. No paging when
// the optimizer is not lazy.
StatePaging plan_state_paging(const PlanRequest& req, const CostModel& cm, bool lazy_optimizer);

}  // namespace lt
