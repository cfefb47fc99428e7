// A discrete-event replay of a plan, independent of the MILP's constraint builder: it reads
// only the plan's windows and a hardware profile, and rebuilds the step's timing from the
// data dependencies it knows itself (a boundary exists once the forward window before it
// has computed; an NVMe write needs the bytes in host staging; a weight load for the next
// forward needs the layer's host update finished; a compute needs its weights and input on
// the compute tier), per-link FIFO queues (h2d, d2h, one NVMe queue for reads and writes,
// the host optimizer pool) and the window barrier of plan/plan.h.
//
// It reports the step time, exposed communication, compute idle time, peak bytes per tier
// (compute tier from the plan's allocation and free operations placed at their simulated
// times; host from the activation bytes it has seen arrive and leave; NVMe from the bytes
// written), and violations (a dependency the plan does not satisfy within its windows).
#pragma once

#include <string>
#include <vector>

#include "plan/plan.h"

namespace lt {

enum class SimLane { Compute, H2D, D2H, Nvme, Host, Net };
const char* sim_lane_name(SimLane l);

struct SimEvent {
  std::string name;    // "F3", "w.4", "optimizer layer.5", ...
  std::string window;  // the window it belongs to
  SimLane lane = SimLane::Compute;
  double start = 0, end = 0;
  double bytes = 0;
};

struct SimResult {
  double step_s = 0;
  double compute_busy_s = 0;
  double compute_idle_s = 0;  // step_s - compute_busy_s
  double exposed_comm_s = 0;  // idle compute time spent waiting for a transfer
  double exposed_host_s = 0;  // idle compute time spent waiting for host work
  PeakBytes peak;
  std::vector<SimEvent> events;
  std::vector<std::pair<double, double>> gpu_memory;  // (time, bytes) after each change
  std::vector<std::string> violations;
};

// `hw`: the hardware to replay on. When it is the plan's own profile the window compute
// times are taken from the plan (they may come from measured layer times); otherwise they
// are recomputed from the windows' FLOPs at hw's effective rate.
SimResult simulate_plan(const Plan& plan, const HardwareProfile& hw);
SimResult simulate_plan(const Plan& plan);

}  // namespace lt
