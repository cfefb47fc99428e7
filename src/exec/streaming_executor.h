// The streaming executor: one training step run window by window as a plan says
// (plan/plan.h), on a backend (exec/backend.h). It does ModelStep's math (the reference,
// matched bit for bit) with the activations placed by the plan:
//  - forward: each boundary kept whole on the compute tier, or split by tokens into a
//    compute part, a host part and an NVMe part (through host staging and NvmeStore),
//    or dropped and rebuilt by the RC windows of its recompute block;
//  - head: final norm, fused head + cross-entropy, its backward; when the plan streams the
//    head (plan/plan.h), the lm_head passes twice through two chunk slots, chunk by chunk
//    (the logsumexp over every row, then each chunk's gradient rows, drained to the host
//    as they are made), with ModelStep's bits (kernels/cpu/cross_entropy.h's streamed form);
//  - backward: the block's input fetched (or recomputed), internals recomputed unless the
//    plan keeps them, block_backward, gradients added into the host gradient block and
//    their squared norm summed as each layer's arrive (fixed order: head, layers L-1..0,
//    embedding — so the sum is the same for every plan);
//  - the lazy optimizer hook: each target (embed, layer j, head) is updated at its planned
//    window, at the latest just before the step first reads it (a layer's, where the window
//    neither computes with nor copies the layer, beside the window's kernels), then its
//    gradient is zeroed (unless this step's drain copies over it: a separate compute tier);
//    a layer whose optimizer state the plan pages from NVMe gets it in host staging
//    (exec/state_pager.h), read before and written back after its update.
//
// Every compute-tier byte lives in a ComputeArena laid out at construction from the
// plan (plan/stream_schedule.h); the host parts and NVMe slots are allocated there too.
// Where compute reads weights and where gradients go is chosen once, at construction,
// for the backend (exec/weight_source.h, exec/gradient_sink.h): host views and sums in
// place on the cpu backend (host_is_compute()); on the others (emu) each layer's weights
// are copied into planned arena slots (w.<j> for forward, wr.<j> for recompute, wb.<j> for
// backward) at the windows the plan loads them, and gradients are summed in slots (g.<j>)
// and drained to the host. The step itself never asks which (a test reads its source).
//
// Waits (the backend's events on its h2d and d2h streams): a window waits only for the
// weights its own compute reads (issued first on the link; prefetches queue behind them
// and run under the compute), and a layer's gradient slot is copied out at the start of
// the window the plan drains it in (the head's during HEAD, under the next window), whose
// barrier waits for it before summing its norm. Failure: a step that throws drains
// its copies and NVMe requests and resets the arena (abort_step), so nothing is left in
// flight and the next step starts clean. Precision: fp32, or bf16 matmuls (weights from the
// caller's bf16 compute copy: host views on the cpu backend, bf16 slots copied from it on
// the emu backend; activations and gradients fp32, as ModelStep). Not yet: one weight
// slot reused across the forward-backward turnaround for resident layers; a layer's
// scratch (BlockWorkspace) is an arena range of its window (ws.<window>), but the
// cross-entropy's logit chunks still hold their own scratch outside the arena, and so do
// the RoPE tables and a step's document starts and positions (2 int32 per
// token), which on a GPU would be copied to it with the step's inputs.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/aligned_buffer.h"
#include "exec/backend.h"
#include "exec/exec_event.h"
#include "exec/gradient_sink.h"
#include "exec/live_arena.h"
#include "exec/copy_pager.h"
#include "exec/state_pager.h"
#include "exec/step_inputs.h"
#include "exec/weight_source.h"
#include "layers/decoder_block.h"
#include "layers/router_loss.h"
#include "layers/step_batch.h"
#include "memory/compute_arena.h"
#include "memory/host_pool.h"
#include "memory/nvme_store.h"
#include "model/parameters.h"
#include "plan/plan.h"
#include "plan/stream_schedule.h"

namespace lt {

// Called once per target per step (when StepOptions::update is set), before the step
// reads the target's weights; the target's gradient still holds the previous step's sum
// (a layer with paged gradients: its whole pages are in paged_state, laid out from
// grad_offset on as StatePager::start_grad_writes says).
// paged_state: for a layer whose optimizer state the plan pages from NVMe, its slot's
// bytes in host staging (StreamingOptions::layer_state_bytes of them, 4096-aligned; the
// parts the layer pages are valid, exec/state_pager.h's StateSlotLayout) during the call,
// its state and masters written back after it; empty when the optimizer holds the state
// itself.
using LazyUpdateHook = std::function<void(const UpdateTarget&, std::span<std::byte> paged_state)>;

// (offset, numel) ranges of a target's tensors inside the parameter block (the same
// offsets index the gradient block). A tied lm_head belongs to "embed".
std::vector<std::pair<int64_t, int64_t>> target_ranges(const ModelParameters& params, const UpdateTarget& t);

// The squared gradient norm in the executor's arrival order (head, layers L-1..0,
// embedding), so an in-memory run can reproduce the executor's sum bit for bit.
double ordered_grad_sq_sum(const ModelParameters& grads);
// Its terms: 0 + (the sum of squares of each range, in this order). A rank that holds only
// some ranges (a sharded optimizer) sums its terms, and the terms' sums over ranks, added
// in this order, give the same bits.
struct GradSqTerm {
  UpdateTarget target;
  int64_t offset = 0, numel = 0;
};
std::vector<GradSqTerm> ordered_grad_sq_terms(const ModelParameters& grads);

// The scratch the executor plans as an arena range of each window that computes
// (ws.<window>), on the kernels of k: for the step's own precision and head
// (step_scratch), and at most over a whole or streamed head, what a plan for it takes as
// PlanRequest::scratch (executor_scratch, with the kernels' pool scratch below): for a step
// at precision p, or at either.
StepScratch step_scratch(const ModelConfig& c, int64_t batch, int64_t seq, const KernelTable& k, Precision p,
                         bool streamed_head);
ExecutorScratch executor_scratch(const ModelConfig& c, int64_t batch, int64_t seq, const KernelTable& k,
                                 Precision p);
ExecutorScratch executor_scratch(const ModelConfig& c, int64_t batch, int64_t seq, const KernelTable& k);
// The most compute-tier scratch one kernel call of a step takes outside the arena
// (KernelTable::PoolScratch; 0 on the CPU's table), which executor_scratch adds to both.
size_t kernel_pool_scratch_bytes(const ModelConfig& c, int64_t batch, int64_t seq, const KernelTable& k,
                                 Precision p);
// Everything the executor places on backend's compute tier for a step of the plan at
// precision p, in bytes (plan/stream_schedule.h).
ArenaSizes executor_arena_sizes(const Plan& plan, const Backend& backend, Precision p);

struct StreamingOptions {
  std::filesystem::path offload_dir;  // NVMe tier; required when the plan puts tokens or states there
  bool direct_io = true;
  // One decoder layer's optimizer state in bytes (the sum of AdamW::state_bytes over the
  // layer's tensors); required when the plan pages optimizer states from NVMe.
  size_t layer_state_bytes = 0;
  // With the plan's paged masters (Plan::nvme_master_layers): where a paged layer's slot
  // holds them (a multiple of 4096, after the state; layer_state_bytes then covers them).
  // A layer whose masters do not page reads and writes back its slot up to there. 0: no
  // layer's page.
  size_t master_offset = 0;
  // With the plan's paged gradients (Plan::nvme_grad_layers): where a paged layer's slot
  // holds them (a multiple of 4096, after the state and the masters), which the
  // write-back after the update stops at. 0: no layer's page. They never come to the
  // gradient block: backward puts them in the pager's host staging, whose pages go to the
  // slot (StatePager::grads_home, start_grad_writes), and the update hook reads them from
  // paged_state, where they lie as the pages covering the layer's gradient block (room
  // for memory/page_interior.h's page_cover of it).
  size_t grad_offset = 0;
  // BF16: matmuls read bf16 weights from StepOptions::compute_copy (fp32 accumulation,
  // ModelStep's BF16 math bit for bit); the cpu backend only, for now.
  Precision precision = Precision::F32;
};

struct StepOptions {
  const LazyUpdateHook* update = nullptr;
  // Precision::BF16: the bf16 compute copy of the parameter block (layers/compute_copy.h's
  // layout), which the update hook keeps current for each target it updates.
  const bf16* compute_copy = nullptr;
  bool zero_grads = true;   // zero each target's gradient before the step adds into it
  float grad_scale = 0.0f;  // > 0 replaces 1/predicted_tokens (as in ModelStep)
  // [batch*seq] or null: where each token's document starts in its row, for packed rows
  // (ModelStep::forward_backward's doc_start: block-diagonal attention, per-document
  // positions). Null: every row one sequence.
  const int32_t* doc_start = nullptr;
  // Called at the start of each plan window, before any of its work (tests inject faults
  // here; a trainer may use it for progress). Null: nothing.
  std::function<void(int window)> before_window;
  // Called with each target once its gradient in the host block is complete for this step
  // (exec/gradient_sink.h's GradientFinal: layers and the head as they land, the embedding
  // last); a data-parallel trainer sums it over the ranks from there, under the rest of
  // backward. Null: nothing.
  const GradientFinal* gradient_final = nullptr;
  // Sums each gradient slot over the data-parallel ranks on the compute tier before it
  // drains (exec/gradient_sink.h's SlotSums; a backend with a separate compute tier only).
  // Null: the slots drain this rank's own gradients.
  SlotSums* slot_sums = nullptr;
};

struct WindowTiming {
  std::string name;
  double start_s = 0, end_s = 0;  // since the step began
};

struct StreamingStepResult {
  double loss = 0;  // as ModelStep's: the cross-entropy plus router_loss
  double router_loss = 0;
  int64_t predicted_tokens = 0;
  double grad_sq_sum = 0;  // squared global gradient norm of this step's gradients
  double step_s = 0;
  std::vector<WindowTiming> windows;
  std::vector<ExecEvent> events;
  std::vector<std::pair<double, double>> compute_bytes;  // (time, live arena bytes) per window
};

class StreamingExecutor {
 public:
  StreamingExecutor(const Plan& plan, Backend& backend, const StreamingOptions& options = {});
  ~StreamingExecutor();
  StreamingExecutor(const StreamingExecutor&) = delete;
  StreamingExecutor& operator=(const StreamingExecutor&) = delete;

  // input_ids, labels: [batch*seq], labels unshifted with -100 for no loss (ModelStep's).
  // A step that throws (an NVMe I/O error, a bad label) first drains every copy and NVMe
  // request it started and resets the compute tier, so the executor can run the next step
  // or be destroyed. It never writes `params` itself (only the update hook does), so a
  // failed step leaves the parameters exactly as the hook left them; `grads` then holds a
  // partial sum (or, on a separate compute tier, some layers' previous gradients) and must
  // be zeroed again (zero_grads) before it is used.
  StreamingStepResult step(ModelParameters& params, ModelParameters& grads, const int32_t* input_ids,
                           const int32_t* labels, const StepOptions& options = {});

  const StreamSchedule& schedule() const { return sched_; }
  size_t planned_peak_bytes() const { return arena_->planned_peak_bytes(); }
  // The largest compute-tier bytes live at once, over all steps so far.
  size_t measured_peak_bytes() const { return std::max(peak_, arena_->peak_live_bytes()); }
  size_t arena_bytes() const { return arena_->budget_bytes(); }
  size_t host_peak_bytes() const { return host_.peak_bytes(); }
  size_t nvme_bytes() const { return nvme_ ? nvme_->file_bytes() : 0; }
  // The NVMe tier's scratch file ("" without one); removed by the destructor.
  std::string offload_file() const { return nvme_ ? nvme_->file_path() : std::string(); }
  const Plan& plan() const { return plan_; }
  // Optimizer states the plan pages from NVMe: whether layer j's is one, and its bytes
  // copied out of or into its NVMe slot between steps (to save or restore a checkpoint).
  bool state_paged(int layer) const { return pager_->paged(layer); }
  bool grads_paged(int layer) const { return pager_->grads_paged(layer); }
  void read_paged_state(int layer, std::span<std::byte> out) { pager_->read_state(layer, out); }
  void write_paged_state(int layer, std::span<const std::byte> in) { pager_->write_state(layer, in); }
  // Bf16 copies the plan pages (exec/copy_pager.h): whether layer j's is one, and during a
  // step (in the update hook) where its update writes it.
  bool copy_paged(int layer) const { return copies_->paged(layer); }
  bf16* paged_copy(int layer) { return copies_->home(layer); }

 private:
  struct Parked;  // one boundary's offloaded parts
  StreamingStepResult run_step(ModelParameters& params, ModelParameters& grads, const int32_t* input_ids,
                               const int32_t* labels, const StepOptions& options);
  void abort_step() noexcept;  // after a failed step: drain, forget tickets, reset the arena
  void drain_backend() noexcept;  // every copy and kernel issued so far is done
  // A compute-tier tensor by its typed id (StreamSchedule::arena_index, resolved once):
  // asserts it is live now.
  float* buf(ArenaTensor tensor, int index = 0) const { return live_(tensor, index); }
  // Where window w's layer pass writes the saved tensors it does not keep (ws.<w>, after
  // the pass's scratch).
  float* saved_in_workspace(int w);
  // Boundary b whole, [T, C], while `rows` (x.<b> in forward, r.<b> in backward) is live:
  // an offloaded boundary's compute-tier part, which those rows follow in the arena.
  float* whole_boundary(ArenaTensor rows, int b);
  float* boundary_input(int b);  // boundary b on the compute tier during backward
  void store_boundary(int b);
  void finish_boundary_stores();  // end_window: waits for store_boundary's copies, starts the NVMe writes
  void start_nvme_read(int b);
  void fetch_boundary(int b, size_t k);  // its k-th fetch (BoundarySchedule::fetches)
  double now() const;
  void event(const std::string& name, ExecLane lane, double start, double bytes = 0);
  // The step's phases, window by window (run_step walks the plan and calls them): before
  // a window's compute, its compute by kind, and after it.
  void begin_window(int w);
  void embed();
  void forward(int j);
  void head(int w);  // streaming_head.cpp
  void recompute(int j);
  void backward(int j);
  void epilogue();
  void end_window(int w, double start_s, double compute_start_s);
  // which: kOwnLoads (what window w's compute reads, waited for) and/or kPrefetches (for
  // later windows, left running). Queues the weight source's copies planned for window w.
  enum : int { kOwnLoads = 1, kPrefetches = 2 };
  void load_weights(int w, int which = kOwnLoads | kPrefetches);
  // The HEAD window's compute (streaming_head.cpp): the loss sum over the predicted
  // tokens; d_hidden gets the head's input gradient, dx.0 the final norm's; the head's
  // gradients go to the sink, their squares into `sq` in the norm order.
  double run_head(int w, const int32_t* targets, float grad_scale, double& sq);
  // Target t's update hook (with its paged state), then its gradient zeroed where the step
  // adds into it.
  void run_update(size_t t);
  // Whether target t's update, due in window w, runs beside w's kernels (issued first)
  // rather than before them: a layer's, in a forward window that neither computes with the
  // layer nor copies its weights (a copy issued after the kernels would wait for them: a
  // prefetch of the layer keeps its update first), when nothing of the layer pages to NVMe
  // (those writes queue before the kernels).
  bool update_beside_kernels(size_t t, int w) const;

  Plan plan_;
  Backend& backend_;
  ModelConfig config_;
  int64_t batch_, seq_, T_, C_;
  StreamSchedule sched_;
  BlockContext ctx_;
  StepDocuments documents_;  // the step's, when given (ctx_ points into them)
  // One step, from its batch to its result: what its phases share.
  struct StepState {
    ModelParameters* grads = nullptr;
    const int32_t* input_ids = nullptr;
    const StepOptions* options = nullptr;
    StepTargets batch;
    const int32_t* targets = nullptr;  // batch.targets' copy in inputs_, which the head reads
    StreamingStepResult result;
    // Backward's two gradient buffers (dx.0, dx.1): the gradient at the output of the
    // layer that runs next, and the spare its input gradient goes to.
    float* d_out = nullptr;
    float* d_in = nullptr;
    double sq = 0;                // the squared gradient norm so far, in the fixed order
    size_t earlier_landings = 0;  // gradient copies issued before this window's compute
  };
  StepState state_;
  // The compute tier's memory, held for the executor's life; each step walks a fresh
  // ComputeArena over it, because an arena's windows only go forward.
  Buffer memory_;
  std::vector<ArenaAllocation> layout_;
  std::unique_ptr<ComputeArena> arena_;
  size_t peak_ = 0;
  std::vector<std::vector<int>> acquire_at_, release_at_;  // per window: arena request indices
  LiveArena live_;
  std::vector<BlockSavedLayout> saved_layout_;  // per layer
  std::vector<std::string> update_event_;      // per update target: its trace name
  HostPool host_;
  std::unique_ptr<StepInputs> inputs_;  // the RoPE tables, targets and documents the kernels read (in host_)
  // Chosen once for the backend: where compute reads weights, where gradients go.
  std::unique_ptr<WeightSource> weights_;
  std::unique_ptr<GradientSink> grads_;
  std::vector<std::unique_ptr<Parked>> parked_;
  std::vector<int> storing_;  // boundaries whose copies out this window issued (store_boundary)
  Backend::Event loads_before_window_;  // the h2d stream before the window's weight loads
  // Declared before the store, so the store (which waits for requests in flight) goes
  // first and the pager's staging buffers outlive every request that uses them.
  std::unique_ptr<StatePager> pager_;
  std::unique_ptr<CopyPager> copies_;
  std::unique_ptr<NvmeStore> nvme_;
  // Its layout; bound to the window's ws.<window> range at each layer window's start.
  BlockWorkspace workspace_;
  // The routers' load-balancing loss (MoE models with output_router_logits): summed over
  // the forward windows, read by every sparse layer's backward.
  RouterLoss router_loss_;
  // Per step: the clock origin, the window running, and the events so far.
  std::chrono::steady_clock::time_point t0_;
  const std::string* window_name_ = nullptr;
  std::vector<ExecEvent>* events_ = nullptr;
};

}  // namespace lt
