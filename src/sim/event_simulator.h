// An event-driven simulation of a plan: the check on the planner's step time that shares
// none of its timing rule.
//
// Why: the window replay (sim/simulator.h) follows plan/plan.h's window barrier, the rule
// the MILP itself optimizes, so its step time equals predicted_step_s by construction and
// cannot tell whether that rule describes a real step. This simulator drops the barriers.
// Every kernel, transfer and host task is an event that starts as soon as
//  - its inputs are ready (data dependencies derived from plan.h's tensor names and the
//    window kinds, listed below), and
//  - its lane is free: compute stream, h2d, d2h, one NVMe queue (reads and writes), the
//    host optimizer pool. Each lane runs its events in the plan's issue order (FIFO), as
//    the executor's streams and queues do.
// It never reads the plan's window lengths or the MILP's stages; durations come from the
// plan's compute_s (on the plan's own profile; FLOPs at the profile's rate on another, as
// simulate_plan does), bytes over the profile's link or NVMe bandwidth, and the host
// tasks' seconds (work over the profile's rates on another profile).
//
// Data dependencies (a consumer waits for the end of its producer):
//   F{j}        weights of layer j (its latest load, or wres.<j> for a resident layer) and
//               boundary j (F{j-1}, or the in.0 copy for boundary 0);
//   HEAD        boundary L and w.head. A streamed head (Plan::head_chunk_rows) computes
//               per chunk, the forward pass over every chunk then the backward pass, a
//               quarter and three quarters of the window's compute (the cost model's four
//               head-forwards) split by rows; each chunk compute reads its w.head.<c> load
//               (the first forward one w.head.norm too);
//   RC{k}, B{j} the layer's weights and the input boundary as backward sees it: rc.<b>
//               from RC{b-1} if recomputed, else its gpu part plus every reload of its cpu
//               and nvme parts;
//   a.<b>.cpu/.nvme d2h   boundary b produced; nvme_write a.<b>.nvme: those bytes' d2h;
//               nvme_read: those bytes' write; h2d reload: those bytes' d2h (cpu part) or
//               NVMe read (nvme part), matched by cumulative bytes of each piece;
//   g.<j> d2h   B{j}; dx.0 d2h: B0; a whole head's g.head streams out of HEAD in
//               vocabulary chunks (starts with HEAD's compute, ends no earlier: plan.h's
//               HEAD); a streamed head's g.head.<c>: chunk c's backward; g.head.norm: the
//               last chunk's;
//   in.0, w.head (or its chunks) and a layer's first weight load of the step   the host
//               update of that target (every part of it) under a lazy optimizer; any other
//               runs its whole step first (every host task: clip and updates). os.<j>
//               nvme_write: layer j's update; a paged layer's update: its os.<j> NVMe read.
// Reuse dependencies (the executor's fixed buffers):
//   two weight slots, taken in turn by the layer loads in the order they are read, so a
//   load waits for the compute that read the load two before it; a resident copy
//   (wres.<j>) takes none, and an early load (into wx.<j>, plan/plan_builder.cpp) waits
//   for none;
//   two gradient slots, taken in turn by the backward windows, so B{j} waits for the d2h
//   of the gradient two before it, unless that one drains late from its own gx.<j>;
//   a streamed head's two weight chunk buffers (load k waits for the compute that read
//   load k-2) and two gradient chunk buffers (chunk c's backward waits for g.head.<c-2>).
//
// Memory: each compute-tier tensor is live from its first write (the start of the copy or
// compute that fills it; kept internals and dx.0 from the end of the compute whose
// workspace held them; wx.<j> until its reader starts, and the weight slot w.<j> from
// then; a gradient slot g.<j> from B{j}'s start to its drain's end, late or not) to the
// end of its last use; workspaces while their compute runs; Plan::fixed_gpu_bytes for the
// whole step. The peak is the largest sum live at once (a tensor freed at t does not
// overlap one allocated at t). Host: Plan::host_state_bytes plus each offloaded
// piece from its arrival (d2h or NVMe read start) until it has gone on (its reload or
// NVMe write ends). NVMe: the bytes written.
//
// Violations: a dependency the plan's order cannot satisfy: a consumer issued in an
// earlier window than its producer, bytes never produced (a reload of bytes never
// offloaded, a compute whose weights were never loaded), a slot reused before its last
// reader was issued, a cycle of waits (broken at the earliest event in issue order), a
// tensor name with no rule.
//
// Not modeled: the executor's own barriers (it waits at each window's end for its copies
// to the compute tier; this simulator is the engine the plan describes without them, not
// a model of that code: for megatrain-code, whose LD windows stand for MegaTrain's loads
// with no look-ahead, it prefetches what that code does not); the executor copies a
// whole head's g.head after the head's compute rather than in chunks; memory as a
// dependency beyond the fixed buffers above (a compute never waits for room, nor an NVMe
// read for host room, so the compute-tier and host peaks may exceed the plan's); host
// staging slots of paged optimizer states
// (counted in host_state_bytes); launch latencies, contention between h2d and d2h, host
// work other than the plan's optimizer and clip tasks; the previous step (every event
// may start at 0).
#pragma once

#include <string>
#include <vector>

#include "plan/plan.h"
#include "sim/simulator.h"

namespace lt {

// A tensor's bytes live on a tier over [from, to).
struct LiveSpan {
  std::string tensor;
  double bytes = 0;
  double from = 0, to = 0;
};

struct EventSimResult : SimResult {
  // What peak.gpu and peak.cpu are swept from: compute-tier spans beyond
  // Plan::fixed_gpu_bytes, and host activation spans beyond Plan::host_state_bytes.
  std::vector<LiveSpan> gpu_spans, host_spans;
};

// `hw`: the hardware to simulate on (see simulate_plan for when compute is retimed).
EventSimResult simulate_events(const Plan& plan, const HardwareProfile& hw);
EventSimResult simulate_events(const Plan& plan);

}  // namespace lt
