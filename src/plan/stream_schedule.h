// The executor's reading of a plan: for every boundary, where its tokens go and in which
// plan window it is produced, consumed, fetched back; for every layer, its forward,
// recompute and backward windows; and the compute-tier allocations (names, bytes,
// lifetimes in plan windows) that follow from it. Computed once at setup, so that every
// byte the step touches on the compute tier is planned before step 1 (DESIGN.md:
// "memory is planned, not discovered"). It lives with the plan, not the executor: the
// planner writes these allocations as the plan's memory ops at the cost model's sizes
// (plan/plan_memory.h), the simulators read them, and the executor places them at its
// own (exec/streaming_executor.h: executor_arena_sizes; it keeps activations in fp32,
// the kernels' type).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/arena_request.h"
#include "plan/plan.h"

namespace lt {

struct BoundarySchedule {
  // Kept from forward to backward (not recomputed, and not boundary L, which only the
  // head reads).
  bool stored = false;
  int64_t gpu_tokens = 0, cpu_tokens = 0, nvme_tokens = 0;  // tokens [0,gpu) [gpu,gpu+cpu) rest
  int produce_w = -1;         // forward producer: P1 (b = 0) or F{b-1}
  int forward_use_w = -1;     // F{b}, or HEAD for b = L
  int backward_first_w = -1;  // RC{b} or B{b}, whichever runs first; -1 for b = L
  int backward_last_w = -1;   // B{b}; -1 for b = L
  // An offloaded boundary's other rows come back in the windows the plan copies them in
  // (its h2d copies of a.<b>.cpu and a.<b>.nvme, in proportion; what it leaves, in the
  // first backward window): piece k copies cpu tokens [cpu_from, cpu_to) and nvme tokens
  // [nvme_from, nvme_to) of the parts in window `window`.
  struct Fetch {
    int window = -1;
    int64_t cpu_from = 0, cpu_to = 0, nvme_from = 0, nvme_to = 0;
  };
  std::vector<Fetch> fetches;
  // Where the parts lie in the boundary, in tokens: the compute part first, then the part
  // whose rows come back first (the cpu part on a tie), so that the rows fetched so far
  // lie together after the compute part.
  int64_t cpu_row = 0, nvme_row = 0;
  int nvme_read_w = -1;  // NVMe read issued (no later than the first piece with nvme rows)
  bool offloaded() const { return stored && gpu_tokens < gpu_tokens + cpu_tokens + nvme_tokens; }
};

// The compute-tier tensors the schedule places in the arena, each kind indexed by a
// boundary b, a layer j or a slot k (0 where there is one). The executor resolves them to
// arena indices once, at setup, so that its step does no name lookups; the names (in
// ArenaRequest, for reports and errors) say the same: x.<b>, a.<b>.gpu, r.<b>, r.<b>.<k>,
// rc.<b>, int.<j>, head.norm_out, head.rstd, head.d_hidden, w.<j>, wr.<j>, wb.<j>, g.<j>,
// w.norm, g.norm, w.lm_head (or w.lm_head.<k>), g.lm_head (or g.lm_head.<k>), dx.<k>,
// ws.<window name>.
enum class ArenaTensor : uint8_t {
  Boundary,         // x.<b>: boundary b as produced (kept here when stored whole); an
                    // offloaded one's other rows, until its forward use, after a.<b>.gpu
  BoundaryGpuPart,  // a.<b>.gpu: an offloaded boundary's compute-tier tokens
  Refetched,        // r.<b>: an offloaded boundary's other rows, fetched back for its
                    // backward, after a.<b>.gpu: those its first fetch brings (and any
                    // before them), then r.<b>.<k> after it for each later fetch's
  RefetchedMore,    // r.<b>.<k>, indexed in the order the schedule places them
  Recomputed,       // rc.<b>: a dropped boundary rebuilt by its RC window
  Internals,        // int.<j>: layer j's saved tensors, kept from forward to backward
  HeadNormOut,      // head.norm_out, head.rstd, head.d_hidden: the HEAD window's
  HeadRstd,
  HeadDHidden,
  Weights,          // w.<j>, wr.<j>, wb.<j>: layer j's weight slot for F, RC and B
  RecomputeWeights,
  BackwardWeights,
  Gradients,        // g.<j>: layer j's gradient slot
  NormWeights,      // w.norm, g.norm: the final norm's
  NormGradients,
  LmHead,           // w.lm_head: whole (k = 0) or chunk slot k of a streamed head
  LmHeadGradients,  // g.lm_head: likewise
  Dx,               // dx.<k>, k = 0, 1: the two gradient buffers backward alternates
  Workspace,        // ws.<window name>: the kernels' scratch in plan window w, for that window
                    // only, and a layer pass's saved tensors when they are not kept
};
inline constexpr int kArenaTensorKinds = static_cast<int>(ArenaTensor::Workspace) + 1;

struct ArenaKey {
  ArenaTensor tensor = ArenaTensor::Boundary;
  int index = 0;
};

// Lazy-optimizer targets, in the order update_w lists them: embed, layer 0..L-1, head.
struct UpdateTarget {
  enum class Kind { Embed, Layer, Head } kind = Kind::Layer;
  int layer = -1;
  std::string name() const;  // "embed", "layer.<j>", "head" (the plan's target names)
};

struct StreamSchedule {
  int L = 0;
  int64_t tokens = 0, hidden = 0;
  int p0 = -1, p1 = -1, head = -1, epilogue = -1;
  std::vector<BoundarySchedule> boundaries;  // L+1
  std::vector<bool> keep_internals;          // per layer
  // Per layer: its weights stay on the compute tier from its forward to its backward (the
  // plan's resident layers), in its forward's slot (w.<j>), which its recompute and
  // backward read too (no wr.<j>, wb.<j>, and no load for them).
  std::vector<bool> resident;
  std::vector<int> forward_w, backward_w, recompute_w;  // per layer (-1: none)
  std::vector<UpdateTarget> targets;
  std::vector<int> update_w;  // per target: the window whose start runs its update
  // Backends whose compute tier is separate memory: the windows that copy layer j's
  // weights in for its forward, its recompute (RC; -1 without one) and its backward, and
  // the head's (final norm and lm_head) for HEAD (-1: no load, for a resident layer's
  // recompute and backward). Each use has its own slot (w.<j>, wr.<j>, wb.<j>) that lives
  // from its load to its use, so a recompute block holds no more weights at once than the
  // plan's two slots.
  std::vector<int> fwd_load_w, rc_load_w, bwd_load_w;
  // The window whose start copies layer j's gradient slot (g.<j>) to the host: the plan's
  // g.<j> transfer after B{j} (the window after B{j} for a plan that moves none). Drains
  // follow the order the gradients are produced (the norm sums them in that order); the
  // slot lives from B{j} to the end of that window.
  std::vector<int> grad_drain_w;
  int head_load_w = -1;  // the window loading the head (whole), or its final norm and chunk 0 (streamed)
  // The head streamed in chunks of head_chunk_rows vocabulary rows (0: held whole), the
  // plan's (plan/plan.h): its lm_head passes twice through two chunk slots (w.lm_head.0,
  // w.lm_head.1, from head_load_w to HEAD) and its gradient rows through two more
  // (g.lm_head.0, g.lm_head.1, from HEAD to the window after).
  int64_t head_chunk_rows = 0, head_chunks = 1;
  // Optimizer-state paging (plan/state_paging.h), per layer (-1: its state stays on the
  // host): the windows whose start issues the NVMe read and, after that window's
  // updates, the write-back; and the host staging slot the state occupies from its read
  // to the end of its write window (slots reused, planned like the arena).
  std::vector<int> state_read_w, state_write_w, state_slot;
  int state_slots = 0;
  // Paged masters (Plan::nvme_master_layers), per layer: they page with its state.
  std::vector<bool> master_paged;
  // Paged gradients (Plan::nvme_grad_layers), per layer (-1: none): the window whose start
  // (after its updates) writes them to NVMe (gs.<j>), done at its barrier.
  std::vector<int> grad_write_w;
  // Paged bf16 copies (Plan::nvme_copy_layers), per layer (-1: none): the window whose
  // start (after its updates) writes the copy to NVMe, done at its barrier, and the one
  // whose start reads it back, done at its barrier.
  std::vector<int> copy_write_w, copy_read_w;
  // Where in a layer pass's workspace (ws.<window>) the saved tensors it writes begin,
  // when they are not kept: after the pass's scratch.
  size_t workspace_saved_offset = 0;
  std::vector<ArenaRequest> arena;
  std::vector<ArenaKey> arena_keys;  // what each arena request holds

  // The arena request that holds (tensor, index), or -1 when the plan places none.
  int arena_index(ArenaTensor tensor, int index = 0) const {
    const std::vector<int>& v = arena_by_tensor[static_cast<int>(tensor)];
    return index >= 0 && index < static_cast<int>(v.size()) ? v[index] : -1;
  }
  std::vector<int> arena_by_tensor[kArenaTensorKinds];  // per kind, per index: a request, or -1
};

// Backends whose compute tier is not the host's memory plan their weight and gradient
// slots in the arena too: a layer's weight slot (the fp32 block, or bf16_weight_slot.h's
// under bf16), its fp32 gradient slot, the final norm's weights and gradient (fp32), and
// an lm_head slot (fp32 or bf16): the whole lm_head, or one chunk of a streamed head (its
// fp32 gradient slot likewise).
struct ComputeTierWeights {
  bool on_compute = false;
  size_t layer_bytes = 0, layer_grad_bytes = 0, lm_head_bytes = 0, lm_head_grad_bytes = 0;
  size_t norm_bytes = 0, norm_grad_bytes = 0;
};

// A layer pass's scratch is a multiple of this, so that the saved tensors after it are as
// aligned as the workspace.
inline constexpr size_t kWorkspaceAlignment = 64;

// The scratch the kernels work in, planned as a range of each window that computes
// (ws.<window>, living for that window alone): a layer pass's (forward, recompute,
// backward: layers/decoder_block.h's BlockWorkspace) and the head's cross-entropy's
// (kernels/kernel_table.h: head_cross_entropy_workspace_bytes, whole or streamed as the
// plan holds the head). The layer pass's is a multiple of kWorkspaceAlignment.
struct StepScratch {
  size_t layer = 0, head = 0;
};

// The bytes of what the schedule places: the executor's (its fp32 activations, kernels'
// scratch and slots: exec/streaming_executor.h) or the cost model's at the profile's
// element sizes, so that both lay out the same requests. A boundary gradient, the head's
// normed input and its gradient are fp32 (hidden * 4 bytes a token) and the head's rstd
// 4 bytes a token at either.
struct ArenaSizes {
  size_t boundary_token = 0;  // one token's row of a boundary activation
  // Per layer, its saved tensors (KeepInternals): in int.<j> from F{j} to B{j} when the
  // plan keeps them, else in each pass's workspace.
  std::vector<size_t> saved;
  StepScratch scratch;
  ComputeTierWeights weights;
};

// Throws lt::Error for a plan the executor cannot run (infeasible, wrong model shape,
// a backward window whose input is neither stored nor recomputed, ...). A plan that
// counts less scratch (Plan::scratch) than `sizes.scratch` is an error.
StreamSchedule make_stream_schedule(const Plan& plan, const ArenaSizes& sizes);

}  // namespace lt
