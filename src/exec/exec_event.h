// The streaming executor's trace of a step: what ran, where and when (streaming_executor.h
// StreamingStepResult::events), read by the replanner, bench predict and the traces.
#pragma once

#include <string>

namespace lt {

// Where a traced piece of a step ran: the compute tier's kernels, the link to it, the
// link back, the NVMe tier, or the host's CPU (the optimizer).
enum class ExecLane { Compute, H2D, D2H, Nvme, Host };
inline const char* exec_lane_name(ExecLane lane) {
  switch (lane) {
    case ExecLane::Compute: return "compute";
    case ExecLane::H2D: return "h2d";
    case ExecLane::D2H: return "d2h";
    case ExecLane::Nvme: return "nvme";
    case ExecLane::Host: return "host";
  }
  return "?";
}

// What ran, when, on which lane: the simulator's event shape (sim/simulator.h SimEvent),
// so a real step and its replay can be laid side by side in one Chrome trace (the
// conversion lives above exec/).
struct ExecEvent {
  std::string name, window;
  ExecLane lane = ExecLane::Compute;
  double start_s = 0, end_s = 0, bytes = 0;
};

}  // namespace lt
