// The MILP planner: one mixed-integer program over the whole step, solved with CBC.
//
// Decisions (per boundary b = 0..L, layer j, stage w of plan_stages.h):
//   x[s,e]  recompute block (s,e): boundaries s and e stored, s+1..e-1 recomputed
//           (the paper's edge/path model; e - s <= max_block);
//   z[b]    boundary b stored; g[b], c[b], n[b] its token fractions on the compute tier,
//           in host memory, on NVMe (g + c + n = z): a checkpoint may be split;
//   y[j]    layer j's weights stay resident from forward to backward (a suffix of layers
//           whose boundaries j and j+1 are stored, so its backward needs no load);
//   k[j]    layer j keeps its internals from forward (its backward skips the recompute);
//   dc, dn, q, r, hc, hn [b,w]  GB of boundary b moved in stage w: offload of the cpu and
//           nvme parts, NVMe write, NVMe read, reload of the cpu and nvme parts;
//   o[j,w]  fraction of layer j's host update run in stage w (the lazy optimizer: before
//           the window that loads layer j for the next forward);
//   lf, lb, gd [j,w]  binary: layer j's weights loaded for its forward, or for its
//           backward, in a stage earlier than the rule's (the window before the use), or
//           its gradients drained in a stage later than the rule's (the next backward
//           slot); each held stage beyond the rule's holds one more slot on the compute
//           tier (plan_decisions.h);
//   pg[j], rd, wr [j,w]  binary: layer j's optimizer state pages from NVMe, read in stage
//           w before its update and written back in stage w after it; their bytes count
//           in the NVMe lane's time and, as host staging slots, in the host state (only
//           where paging can help or is asked for; plan/state_paging.h);
//   hs      binary: the head streams through the compute tier in chunks of
//           CostModel::min_head_chunk_rows() rows (its buffers, F{L-1}'s prefetch and
//           HEAD's loads per HeadFootprint) instead of being held whole; a column only
//           when two chunks are fewer rows than the vocabulary. A plan that streams is
//           then settled (plan/head_streaming.h): held whole after all when that is no
//           slower within the target gap and fits, else with the widest chunk that fits;
//   t[w]    duration of stage w.
// Objective: predicted step time = sum_w t[w] + recompute windows (each RC window lasts
// max(forward, weight load)), with t[w] >= compute, h2d/bw, d2h/bw, nvme read/bw + nvme
// write/bw and host work of w. It equals the plan evaluator's prediction for the plan
// built from the solution (a test checks this).
// Constraints: path flow over blocks; transfer totals; order D2H -> NVMe write -> NVMe
// read -> H2D in strictly earlier stages; reload complete before the block that needs
// it; compute-tier memory in every stage (weight and gradient slots, resident weights,
// kept internals, stored and in-flight boundaries, recomputed boundaries, workspace);
// host staging and activation budget in every stage; NVMe budget; host updates before
// the layer's forward load and between a paged state's read and write; gradients drained
// in the order they are produced. The solve starts from the rule's transfer windows and
// paging (fixed, then freed: MipModel::solve's restricted start), so the plan is never
// worse than the rule's.
// Units: GB and seconds (coefficients in bytes break CBC's probing).
#pragma once

#include "plan/cost_model.h"
#include "plan/plan.h"
#include "plan/plan_decisions.h"
#include "plan/plan_request.h"

namespace lt {

struct MilpOptions {
  int max_block = 16;          // longest recompute block (edges e - s)
  int offload_horizon = 4;     // stages after production in which a boundary may go out
  int nvme_horizon = 8;        // further stages in which its NVMe write may run
  int reload_slack = 4;        // stages before the earliest deadline a reload may start
  int optimizer_horizon = 4;   // forward windows before the last allowed one for a host update
  int load_horizon = 2;        // stages before the rule's in which a weight load may run
  int drain_horizon = 2;       // stages after the rule's in which a gradient drain may run
  int state_horizon = 2;       // stages beyond a paged layer's update range for its state's read and write (>= 1)
  // Tests and restricted solves: when set, these decisions' boundary tiers, activation
  // transfer stages, resident layers and kept internals are imposed; the MILP chooses the
  // rest (weight-load and gradient-drain windows, paging, optimizer placement, the head).
  const Decisions* fixed_structure = nullptr;
};

// Solves within req.time_limit_s to req.target_gap. An infeasible or unsolved model gives
// a plan with feasible = false.
Plan plan_milp(const PlanRequest& req, const CostModel& cm, const MilpOptions& opt = {});

}  // namespace lt
