// A training-step plan: the contract between the planner (`lazytrain plan`), the
// executor (`lazytrain train`) and the simulator (`lazytrain simulate`). Plans are data.
//
// The step is a sequence of windows. A window is one compute op (or none) plus the
// transfers and host work issued with it. Window semantics, which the executor and the
// simulator both follow:
//  - everything listed in a window is issued when the window starts;
//  - transfers run FIFO per link (h2d, d2h) and on one NVMe queue (reads and writes);
//    host tasks run FIFO on the host's optimizer pool;
//  - the window ends when its compute and all its transfers and host tasks are done (a
//    barrier: buffers freed at window end are reusable by the next window);
//  - a transfer must not depend on another transfer of the same window (the planner puts
//    the device-to-host copy of an NVMe-bound activation and its NVMe write in different
//    windows), so a window lasts max(compute, h2d/bw, d2h/bw, nvme_read/bw + nvme_write/bw,
//    host work), and the step lasts the sum over windows.
//
// Window order: P0 (host: embedding update, the optimizer work the plan puts there, a clip
// pass for megatrain-code), P1 (layer 0 weights and the embedded input boundary to the
// compute tier), F0..F{L-1} (forward; F{j} prefetches layer j+1, F{L-1} the head), HEAD
// (final norm, head, loss, forward and backward in vocabulary chunks; returns the head
// gradients; megatrain-code loads the head weights here instead of prefetching; a streamed
// head, below, loads them here chunk by chunk), then
// backward per recompute block (s,e), blocks from the top down: RC{s}..RC{e-2} (recompute
// layers, producing boundaries s+1..e-1), then B{e-1}..B{s} (backward of each layer; B{j}
// returns layer j+1's gradients and prefetches the next window's weights), then E (layer 0
// gradients and the boundary-0 gradient to the host). Those are the rule's windows for
// weight loads and gradient drains; a plan may load a layer's weights earlier (any window
// after the layer's previous use) and drain its gradients later (in production order),
// holding the slot meanwhile.
// megatrain-code adds LD windows (a weight load with no compute) before backward windows.
//
// Boundary b (0..L) is the input of layer b (boundary L feeds the head). Materialized
// boundaries are split along tokens into a gpu part, a cpu part and an nvme part
// (fractions sum to 1): tokens [0, gpu*T) stay on the compute tier, cpu*T of the others
// go to host memory and the rest to NVMe through host staging (the part that comes back
// first lies next, plan/stream_schedule.h). Boundaries inside a recompute
// block are not stored; RC windows recompute them in backward.
//
// Tensor names in transfers:
//   w.<j> layer j's weights (bf16 on GPU profiles) to the compute tier, for its next use;
//   g.<j> layer j's gradients to the host after B{j}: by the rule in the next backward
//   window (B{j-1}, E for layer 0, or megatrain-code's next LD), later by choice;
//   w.head / g.head the head's weights / gradients (final norm and lm_head; the embedding
//   when tied) whole; a streamed head (head_chunk_rows > 0) moves the lm_head in vocabulary
//   chunks of head_chunk_rows rows (the last one shorter): w.head.norm and w.head.0 are
//   prefetched by F{L-1}; HEAD loads w.head.1 .. w.head.<n-1> for its forward pass (the
//   logsumexp needs every row before any gradient) and w.head.0 .. w.head.<n-1> again for
//   its backward pass, and drains g.head.0 .. g.head.<n-1> and g.head.norm;
//   a.<b>.cpu, a.<b>.nvme boundary b's parts for host memory and NVMe (through host
//   staging), out after it is produced and back for its backward use; in.0 the embedded
//   input; dx.0 the boundary-0 gradient (for the host's embedding gradient); os.<j> layer
//   j's optimizer state (NVMe <-> its host staging slot, for layers whose states page;
//   with the layer's masters and gradients too when those page); gs.<j> layer j's paged
//   gradients (host -> NVMe, after their drain).
//
// Memory ops (alloc at window start, free at window end) are the streaming executor's
// arena requests (plan/stream_schedule.h, laid out by plan/plan_memory.h at the cost
// model's sizes), so that a plan says what the executor holds in every window:
//   x.<b> boundary b as produced: whole until its last use (its backward, or its forward
//   use when recomputed, and HEAD for b = L), or an offloaded boundary's other rows until
//   its forward use; a.<b>.gpu an offloaded boundary's compute-tier tokens, to B{b};
//   r.<b>, r.<b>.<k> its other rows fetched back, a piece per window the plan copies them
//   in (the rows after those before), to B{b}; rc.<b> a boundary rebuilt by RC{b-1};
//   int.<j> layer j's saved tensors kept from F{j} to B{j};
//   w.<j>, wr.<j>, wb.<j> layer j's weight slot (the largest layer's size) for its forward,
//   recompute and backward, from its load to the compute (a resident layer's w.<j> to its
//   backward, which reads it, as its recompute does); g.<j> its gradient slot, from B{j}
//   to its drain;
//   w.norm, w.lm_head (whole) or w.lm_head.0, w.lm_head.1 (a streamed head's two chunk
//   slots; chunk c+2 reuses chunk c's), from the head's load to HEAD; g.norm, g.lm_head or
//   g.lm_head.0, g.lm_head.1 from HEAD to the window after it (they drain under it);
//   head.norm_out, head.rstd, head.d_hidden HEAD's fp32 tensors;
//   dx.0, dx.1 the two boundary gradients backward alternates between (fp32), from HEAD to
//   B0, the one holding boundary 0's gradient to E;
//   ws.<window> a computing window's workspace: the kernels' scratch, and a layer pass's
//   saved tensors when they are not kept.
// megatrain-code models MegaTrain's code, not this executor: two weight and two gradient
// slots for the whole step (fixed), its own memory ops (a.<b>.gpu, a.<b>.tmp, rc.<b>,
// int.<j>, g.<j>, w.head, g.head, dx.0) and each window's workspace_bytes. Plans written
// before version 3 name their memory ops so too, with wres.<j> (a resident copy), wx.<j> /
// gx.<j> (a slot held before the rule's load / after the rule's drain) and a.<b>.cpu /
// a.<b>.nvme (an offloaded part on the compute tier).
//
// JSON schema (version 3; version 2 files name their memory ops as above, version 1 files,
// without "head", read as a whole head too):
// { "format": "lazytrain-plan", "version": 3,
//   "policy": "milp"|"megatrain"|"megatrain-code"|"keep-all"|"recompute-all"|"greedy",
//   "feasible": bool, "infeasible_reason": str,
//   "model": { "name", "num_layers", "hidden_size", "num_params", "config": {HF config} },
//   "hardware": { hardware profile, see plan/hardware_profile.h },
//   "batch", "seq",
//   "budgets": { "gpu_cap_bytes", "cpu_act_bytes", "nvme_act_bytes" },
//   "fixed": { "gpu_bytes" (held for the whole step: 0; plans made before weight and
//              gradient slots were allocated per use held two of each here), "host_state_bytes",
//              "layer_scratch_bytes", "head_scratch_bytes" (the executor's, ExecutorScratch;
//              absent: estimated) },
//   "head": { "chunk_rows": 0 (whole) or rows per streamed chunk, "chunks" },
//   "boundaries": [ { "index", "tier": "gpu"|"cpu"|"nvme"|"split"|"recompute",
//                     "gpu", "cpu", "nvme" (token fractions) } ]  (L+1 entries),
//   "recompute_blocks": [[s, e], ...]  ascending, covering 0..L,
//   "resident_layers": [j, ...], "keep_internals": [j, ...],
//   "optimizer": { "lazy": bool, "placement": [ { "target": "layer.<j>"|"embed"|"head",
//                  "window": index, "fraction" } ],
//                  "nvme_state_layers": [j, ...], "state_bytes_per_layer",
//                  "nvme_master_layers": [j, ...], "nvme_grad_layers": [j, ...] (absent: none;
//                  older plans' "paged_master"/"paged_grads": true name every paged layer),
//                  "nvme_copy_layers": [j, ...], "copy_bytes_per_layer" },
//   "windows": [ { "name", "kind": "P0"|"P1"|"forward"|"head"|"recompute"|"backward"|
//                  "load"|"E", "layer", "stage",
//                  "compute_flops", "compute_s", "workspace_bytes" (megatrain-code's and
//                  version 2's; 0 where the workspace is the window's ws.<window>),
//                  "transfers": [ { "tensor", "link": "h2d"|"d2h"|"nvme_write"|"nvme_read",
//                                   "bytes" } ],
//                  "host": [ { "task": "optimizer"|"clip", "target", "work", "seconds" } ],
//                  "alloc": [ { "tensor", "bytes" } ]  (compute tier, at window start),
//                  "free":  [ { "tensor", "bytes" } ]  (compute tier, at window end) } ],
//   "predicted": { "step_s", "tokens_per_s", "tflops", "peak_bytes": {gpu, cpu, nvme} },
//   "solver": { "solve_s", "solve_cpu_s", "mip_gap", "objective_s", "bound_s", "status",
//               "columns", "rows" } }
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "plan/hardware_profile.h"

namespace lt {

enum class WindowKind { Prologue0, Prologue1, Forward, Head, Recompute, Backward, Load, Epilogue };
enum class Link { H2D, D2H, NvmeWrite, NvmeRead, Net };

const char* window_kind_name(WindowKind k);
const char* link_name(Link l);

// The scratch the executor's kernels work in on the compute tier, which it plans as a
// range of each window that computes (plan/stream_schedule.h: StepScratch): a layer pass's
// (forward, recompute or backward) and the head's cross-entropy's, at most, whole or
// streamed (exec/streaming_executor.h: executor_scratch). < 0: not given; the cost model
// estimates it.
struct ExecutorScratch {
  double layer_bytes = -1, head_bytes = -1;
};

struct Transfer {
  std::string tensor;
  Link link = Link::H2D;
  double bytes = 0;
};

struct HostTask {
  std::string task;    // "optimizer" or "clip"
  std::string target;  // "layer.<j>", "embed", "head", "all"
  double work = 0;     // parameters (optimizer) or bytes (clip)
  double seconds = 0;
};

struct MemOp {
  std::string tensor;
  double bytes = 0;
};

struct Window {
  std::string name;
  WindowKind kind = WindowKind::Forward;
  int layer = -1;  // decoder layer computed, -1 for none
  int stage = -1;  // the MILP's window index this window belongs to (see plan_stages.h)
  double compute_flops = 0;
  double compute_s = 0;
  double workspace_bytes = 0;  // live during the compute beyond alloc: megatrain-code's, version 2's
  std::vector<Transfer> transfers;
  std::vector<HostTask> host;
  std::vector<MemOp> alloc;
  std::vector<MemOp> free;
};

struct BoundaryPlacement {
  bool recompute = false;
  double gpu = 1, cpu = 0, nvme = 0;  // token fractions, sum 1 when materialized
};

struct OptimizerPlacement {
  std::string target;  // "layer.<j>", "embed", "head"
  int window = -1;     // index into Plan::windows
  double fraction = 1;
};

struct PeakBytes {
  double gpu = 0, cpu = 0, nvme = 0;
};

struct SolveInfo {
  double solve_s = 0;      // wall clock
  double solve_cpu_s = 0;  // CPU time of the solver (one thread)
  double mip_gap = 0;
  double objective_s = 0;
  double bound_s = 0;
  std::string status;  // "optimal", "gap", "time_limit", "heuristic"
  int columns = 0, rows = 0;
};

// Rows of a streamed head's chunks are a multiple of this (the cross-entropy's vocabulary
// sub-chunk, kernels/cpu/cross_entropy.h, divides it: the executor checks), so that a
// streamed head sums in the same order as a whole one.
constexpr int64_t kHeadChunkQuantum = 16384;

struct Plan {
  std::string policy;
  bool feasible = true;
  std::string infeasible_reason;
  std::string model_name;
  ModelConfig model;
  HardwareProfile hardware;
  int64_t batch = 0, seq = 0;
  int num_layers = 0;
  double num_params = 0;
  double num_active_params = 0;  // per token: a MoE model's routed share (model/layer_specs.h)

  double gpu_cap_bytes = 0, cpu_act_budget_bytes = 0, nvme_act_budget_bytes = 0;
  double fixed_gpu_bytes = 0;  // compute-tier bytes held for the whole step (plan.h's "fixed")
  double host_state_bytes = 0;  // one rank's, under data parallelism
  ExecutorScratch scratch;
  // Data-parallel ranks running this plan, each on `batch` rows of its own, and whether
  // they shard the optimizer (plan/data_parallel.h: the net transfers and P0's update).
  int ranks = 1;
  bool shard_optimizer = false;  // the request's (plan/plan_request.h), kept for re-planning
  bool slot_sums = false;        // the sums run in the compute-tier slots (plan/data_parallel.h)

  std::vector<BoundaryPlacement> boundaries;  // L+1
  std::vector<std::pair<int, int>> blocks;    // recompute blocks, ascending
  std::vector<int> resident_layers;
  std::vector<int> keep_internals;
  bool lazy_optimizer = true;
  std::vector<OptimizerPlacement> optimizer;
  // Layers whose optimizer states page from NVMe (plan/state_paging.h): os.<j> is read
  // before the layer's update and written back after it.
  std::vector<int> nvme_state_layers;
  double state_bytes_per_layer = 0;  // the largest paged layer's os.<j> (every part it may hold)
  // Of those, the layers whose os.<j> holds their projection matrices' fp32 masters too
  // (PlanRequest::page_master), read and written back with the state.
  std::vector<int> nvme_master_layers;
  // And the layers whose gradients page: written to os.<j> as gs.<j> in the window after
  // their drain, read with the state (os.<j>'s read is then larger than its write-back).
  // Where masters may page, only layers that page them (a slot's read is one prefix of
  // [state | masters | gradients]).
  std::vector<int> nvme_grad_layers;
  // Layers whose bf16 compute copies page (PlanRequest::page_copy), a subset of
  // nvme_master_layers: cp.<j> written to NVMe in F{j}, read back in backward slot j+2.
  std::vector<int> nvme_copy_layers;
  double copy_bytes_per_layer = 0;  // the largest paged layer's cp.<j>
  static bool listed(const std::vector<int>& layers, int j) {
    return std::find(layers.begin(), layers.end(), j) != layers.end();
  }
  bool state_paged(int j) const { return listed(nvme_state_layers, j); }
  bool master_paged(int j) const { return listed(nvme_master_layers, j); }
  bool grads_paged(int j) const { return listed(nvme_grad_layers, j); }
  bool copy_paged(int j) const { return listed(nvme_copy_layers, j); }
  // NVMe the paged optimizer states (with their parts) and bf16 copies take.
  double nvme_state_bytes() const {
    return static_cast<double>(nvme_state_layers.size()) * state_bytes_per_layer +
           static_cast<double>(nvme_copy_layers.size()) * copy_bytes_per_layer;
  }
  std::vector<Window> windows;
  // 0: the head is held whole on the compute tier; > 0: the lm_head streams through it in
  // chunks of this many vocabulary rows (a multiple of kHeadChunkQuantum, below V).
  int64_t head_chunk_rows = 0;
  bool head_streamed() const { return head_chunk_rows > 0; }
  int64_t head_chunks() const {
    return head_chunk_rows > 0 ? (model.vocab_size + head_chunk_rows - 1) / head_chunk_rows : 1;
  }

  double predicted_step_s = 0;
  PeakBytes predicted_peak;
  SolveInfo solve;

  double tokens() const { return static_cast<double>(batch * seq); }
  double tokens_per_s() const { return predicted_step_s > 0 ? tokens() / predicted_step_s : 0; }
  // The paper's convention: 6 * N_params * tokens / step time (ignores recompute); N counts
  // the parameters a token computes with (a MoE model's active ones).
  double tflops() const {
    return predicted_step_s > 0 ? 6 * num_active_params * tokens() / predicted_step_s / 1e12 : 0;
  }
  // How many boundaries (0..L) sit in each tier, counting a split boundary by fractions.
  struct TierCounts {
    double gpu = 0, cpu = 0, nvme = 0, recompute = 0;
  };
  TierCounts tier_counts() const;
};

}  // namespace lt
