// The plan's own prediction: per window the slowest of its compute, each link and the host
// pool (window semantics in plan/plan.h), summed over windows; and the peak bytes per tier
// from the plan's memory operations. The simulator (sim/) checks both independently.
#pragma once

#include "plan/plan.h"

namespace lt {

struct WindowLinkTimes {
  double compute = 0, h2d = 0, d2h = 0, nvme = 0, host = 0;
  // d2h and net: when each lane's last transfer ends, in plan order from the window's
  // start; where a slot sum runs (plan/data_parallel.h) its target's drains wait for it
  // and the head's sum for the head's compute, else a lane's transfers' seconds summed.
  double net = 0;               // data-parallel collectives (plan/data_parallel.h)
  bool net_then_host = false;   // P0: the updates wait for the sums
  double total() const;
};

WindowLinkTimes window_timing(const Window& w, const HardwareProfile& hw);
double predicted_step_seconds(const Plan& p);
PeakBytes predicted_peaks(const Plan& p);
// Fills p.predicted_step_s and p.predicted_peak.
void evaluate_plan(Plan& p);

// Activation bytes a plan keeps in host memory for the whole step (the cpu parts).
double cpu_reserved_activation_bytes(const Plan& p);
// Peak of host staging for NVMe-bound activations.
double peak_nvme_staging_bytes(const Plan& p);

}  // namespace lt
