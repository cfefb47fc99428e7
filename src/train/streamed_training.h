// The trainer's optimizer steps through the streaming executor (exec/streaming_executor.h)
// under a plan from `lazytrain plan`: the compute tier holds only what the plan keeps,
// checkpoints go to host memory or NVMe or are recomputed, and the optimizer is lazy.
//
// Lazy optimizer: step N's update is decided when step N's gradients (and their norm)
// are known, and applied target by target inside step N+1, just before the executor
// reads each target's weights; flush() applies a pending update at once, before an
// evaluation or a checkpoint, so both see updated weights and a resumed run has nothing
// pending. The result is bitwise that of the in-memory trainer, in fp32 and in bf16 (the
// cpu backend reads the bf16 compute copy, which the update keeps current).
//
// Paged optimizer states (the plan's nvme_state_layers) live in the executor's NVMe
// slots; saving or loading the optimizer pages them through one layer's staging buffer.
// With Plan::nvme_master_layers (bf16 runs) the slots hold the layers' matrices' fp32 masters
// too, and host memory holds those only around each update (master_pages.h); flush()
// pages them all in for the checkpoint or evaluation that follows it, and the next step
// gives them back. With Plan::nvme_grad_layers (one rank, no accumulation) the slots hold the
// layers' gradients from their backward to their update, which host memory then holds
// only from backward to their NVMe write and around the update.
//
// Re-planning (cfg.adaptive_plan, train/replanner.h): after every step (but an executor's
// first, which warms it up) the measured compute and link rates go to a drift detector; on
// drift the MILP is solved again with the measured profile on a background thread while
// training goes on (not when fewer steps are left than a solve takes), and at the first
// step boundary after it is done the run switches to the new plan if it is predicted
// faster by cfg.replan_margin. Either way the measured profile becomes the reference; a
// re-plan that kept the plan holds its measures for K, 2K, 4K, ... steps (K =
// cfg.replan_steps), so noise does not keep a solver busy. Switching builds a new executor
// for the new plan over the same parameters, gradients, optimizer and backend; a pending
// lazy update stays pending and the new executor applies it (each target once, whatever
// the order: bitwise the same). What pages is kept: the re-plan keeps the layers whose
// states, masters, gradients and copies page (PlanRequest::keep_paged) and chooses their
// windows, a plan that pages other layers or parts is not switched to, and the paged
// layers' bytes move from the old executor's NVMe slots to the new one's, one layer at a
// time, before the old one goes (so for that moment both executors' compute tiers and
// NVMe files exist). A resumed run
// starts again from the plan it was given (re-plans are not checkpointed) and re-plans on
// its own measurements.
//
// Data parallelism (Options::comm): every rank runs the plan on its rows of each
// micro-batch (the plan is for the rank's batch), the gradients, the loss and the norm are
// summed over the ranks as the in-memory engine sums them (rank_exchange.h), so a streamed
// run on N ranks is bitwise the in-memory run on N ranks. Each target's gradient sum
// starts as soon as the last micro-batch's backward has landed it on the host
// (StepOptions::gradient_final), on a background thread, under the backward of the layers
// below (to its owner, and unsharded on to every rank). With a sharded optimizer each rank
// then updates its own part at once (not lazily: the other ranks need those weights) and
// each target's weights go out from its owner on that thread (rank_exchange.h),
// the next step's update hook for the target waiting for them. Not yet: paged optimizer
// states with a sharded optimizer, and re-planning (the ranks would have to agree on a
// switch; it is off under data parallelism).
// On a separate compute tier with one micro-batch a step, the layers' and the head's
// gradients are summed over the ranks there instead, in their slots before they drain
// (StepOptions::slot_sums): through NCCL beside the cuda backend's compute stream, in rank order
// through the ranks' communicator on emu (its compute tier is host memory; on the
// background thread, the slot's drain copy waiting for it), where the bits stay the
// in-memory run's. The embedding's is summed on the host either way. With
// more micro-batches the host sums after the last, as above: the slots hold one
// micro-batch's gradients, and summing each would send the bytes once per micro-batch.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "exec/backend.h"
#include "exec/host_pins.h"
#include "exec/streaming_executor.h"
#include "layers/compute_copy.h"
#include "model/parameters.h"
#include "plan/plan.h"
#include "plan/plan_request.h"
#include "train/replanner.h"
#include "train/master_pages.h"
#include "train/step_engine.h"
#include "train/train_config.h"
#include "train/rank_exchange.h"
#include "train/updater.h"

namespace lt {

// The directory of the NVMe tier: cfg.offload_dir, or the system temporary directory.
std::string offload_dir_of(const TrainConfig& cfg);

// lt::Error unless the plan is feasible, made for this model, batch and seq_len, and its
// NVMe bytes fit in the offload directory's free space.
void check_plan_fits(const Plan& plan, const ModelConfig& model, const TrainConfig& cfg, const std::string& where);

// The MILP plan of this run for cfg.compute_budget_gb on the cfg.hardware profile, counted
// in the cpu and emu executors' fp32 element sizes and timed at the profile's bf16 rate
// for bf16 runs (when it has one); written to output_dir/plan.json.
// lt::Error when no plan fits, with the short budget and the largest batch that fits.
// ranks: the data-parallel ranks cfg.batch is one share of (for the error's advice); the
// plan counts their exchange (plan/data_parallel.h) over the profile's links.network_gbps,
// else over network_bw (measured, dist/link_rate.h).
struct RankPlanning {
  int ranks = 1;
  bool sharded = false;
  double network_bw = 0;  // bytes/s
  // Why the ranks cannot each sum on a GPU of their own (ranks_gpus_shared_reason), or "".
  std::string gpus_shared;
};
Plan plan_this_run(const TrainConfig& cfg, const ModelConfig& model, const RankPlanning& ranks = {});
// The share of a profile's measured rates this process reaches: its threads over the
// profile's (1 when it has as many or more, or the profile does not say).
double profile_thread_share(const HardwareProfile& hw);
// The share of its matmul rates: the thread share of a CPU's; 1 for a GPU's, whose rates are
// the device's whatever threads the host gives this process.
double profile_compute_share(const HardwareProfile& hw);
// Whether a run of cfg on these ranks sums the gradients in the compute-tier slots
// (StreamedTraining's rule, which the plan counts: PlanRequest::slot_sums), decided before
// the backend exists. On cuda it needs DeviceCollectives, on every rank, and a GPU of its
// own for each rank of a host.
bool slot_sums_planned(const TrainConfig& cfg, const RankPlanning& ranks);
// Why the ranks cannot each sum on a GPU of their own, or "": rank r runs on host hosts[r]
// (Communicator::host_id) and GPU gpus[r] (cuda_device_pci_key; 0 for none, which
// DeviceCollectives::unavailable_reason explains). Two ranks of one host on one GPU share
// it, and NCCL joins one rank per GPU. GPUs are told apart by their PCI place, not their
// numbers: a launcher that gives each rank one GPU through CUDA_VISIBLE_DEVICES shows every
// rank its own as device 0.
std::string gpus_shared_reason(const std::vector<int>& hosts, const std::vector<uint64_t>& gpus);
// The same for this run's ranks, each on the GPU it takes for `backend` ("" for any other
// backend). A collective: every rank calls it.
std::string ranks_gpus_shared_reason(Communicator& comm, const std::string& backend);
// The request plan_this_run solves (also what a re-plan of its plan solves again).
PlanRequest run_plan_request(const TrainConfig& cfg, const ModelConfig& model, const RankPlanning& ranks = {});

struct StreamedTrainingOptions {
  std::unique_ptr<Backend> backend;    // null: make_backend(cfg.backend)
  std::optional<PlanRequest> request;  // what made the plan (re-plans solve it again); none: request_of(plan)
  // Wait for a re-plan's solve at the next step boundary instead of training on (tests:
  // what a re-plan does then does not race the solver's speed).
  bool wait_for_replans = false;
  // The data-parallel ranks, or null. Every rank runs the same plan on its rows of each
  // micro-batch; the gradients are summed over the ranks after backward (rank_exchange.h).
  // With a sharded optimizer each target's lazy update runs on its owner, which sends the
  // updated weights to the other ranks before any of them reads the target.
  Communicator* comm = nullptr;
};

class StreamedTraining final : public StepEngine {
 public:
  using Options = StreamedTrainingOptions;
  // `updater` must have been built with the plan's nvme_state_layers as its paged layers.
  StreamedTraining(const TrainConfig& cfg, const Plan& plan, ModelParameters& params, ModelParameters& grads,
                   Updater& updater, Options options = {});

  // StepEngine: the update a step decides is applied in the next step, or by flush().
  Outcome step(const int32_t* ids, const int32_t* labels, int64_t predicted, int64_t step,
               const int32_t* doc_start = nullptr) override;
  void flush() override;
  void save_optimizer(const std::string& dir) override;
  void load_optimizer(const std::string& dir) override;
  Memory memory() const override;
  std::vector<std::string> describe() const override;
  std::string step_time_note(double measured_s) const override;
  double overlapped_collective_seconds() const override;

  size_t compute_bytes() const { return executor_->arena_bytes(); }
  size_t host_activation_bytes() const { return executor_->host_peak_bytes(); }
  size_t nvme_bytes() const { return executor_->nvme_bytes(); }
  const Plan& plan() const { return executor_->plan(); }
  // Whether this run re-plans (cfg.adaptive_plan on and a MILP plan), and why not if not.
  bool adaptive() const { return adaptive_; }
  const std::string& adaptive_note() const { return adaptive_note_; }
  int replans() const { return switches_; }  // plans switched to so far
  Backend& backend() { return *backend_; }
  // After the last step (`last_step`): waits for a re-plan in flight and reports it, not
  // switched (the run is over).
  std::vector<ReplanEvent> finish(int64_t last_step) override;

 private:
  void update_target(const UpdateTarget& t, std::span<std::byte> paged);
  void start_update(const UpdateResult& d);  // the update a step decided
  void at_step_boundary(int64_t step, std::vector<ReplanEvent>& events);
  void watch(int64_t step, const StreamingStepResult& r, LinkUse h2d, LinkUse d2h, std::vector<ReplanEvent>& events);
  ReplanEvent conclude(ReplanResult r, int64_t step);
  void switch_to(const Plan& plan);

  const TrainConfig& cfg_;
  Communicator* comm_ = nullptr;  // more than one rank, else null
  ModelParameters& params_;
  ModelParameters& grads_;
  Updater& updater_;
  std::unique_ptr<Backend> backend_;
  StreamingOptions executor_options_;
  std::unique_ptr<StreamingExecutor> executor_;
  // Re-planning.
  bool adaptive_ = false;
  std::string adaptive_note_;
  PlanRequest request_;
  std::optional<DriftDetector> detector_;
  BackgroundSolve solve_;
  int switches_ = 0;
  int64_t steps_on_executor_ = 0;  // steps watched since the executor was built
  int kept_in_a_row_ = 0;          // re-plans that kept the plan, since the last switch
  bool wait_for_replans_ = false;
  ComputeCopy copy_;  // bf16 mirror of the parameters (empty under fp32)
  // The parameters, their copy and the gradients, page-locked for the backend's links for
  // the whole run, unless the plan pages parts of them (exec/host_pins.h). After copy_:
  // unpinned before its buffer goes.
  HostPins pins_;
  std::unique_ptr<RankExchange> exchange_;  // data parallelism: the sums and weights of the ranks
  // Where the ranks sum the gradients (set_up_gradient_sums): slot_sums_ set where the
  // compute tier sums its slots (through NCCL on a GPU, through exchange_ on emu); the
  // startup line's note.
  std::string set_up_gradient_sums();
  std::unique_ptr<SlotSums> slot_sums_;
  std::string gradient_sums_note_;
  // Sharded data parallelism: each rank updates its part after the step (not lazily).
  bool sharded() const { return exchange_ && updater_.sharded(); }
  UpdateResult pending_;
  bool has_pending_ = false;
  // Paged masters (Plan::nvme_master_layers): a paged layer's NVMe slot holds its optimizer
  // state, then from state_part_ on its matrices' fp32 masters (master_pages.h), which the
  // update reads and writes there. The NVMe copy is always current; the host's is too
  // while masters_resident_ (from flush() to the next step, for checkpoints and
  // evaluations), else released.
  std::optional<MasterPages> masters_;
  size_t state_part_ = 0;
  bool masters_resident_ = true;
  // Paged gradients (Plan::nvme_grad_layers): a paged layer's gradients go from backward to the
  // executor's host staging and on to its slot from StreamingOptions::grad_offset on
  // (exec/state_pager.h), never to the gradient block, whose whole pages for that layer
  // stay released; the update reads them in the slot when grads_on_nvme_ (not after a step
  // that zeroed the gradients without a backward). grad_pages_: the most slot bytes a
  // layer's take (the pages covering its block).
  size_t grad_pages_ = 0;
  bool grads_on_nvme_ = false;
  PageSpan layer_grad_pages(int layer) const;  // the whole pages of layer j's gradients
  PageSpan layer_grad_cover(int layer) const;  // the pages covering them, their layout in the slot
  void zero_grads();  // the whole block, giving the paged layers' pages back
  void page_out_masters();  // all paged layers' (their NVMe copies are current)
  // The host bytes the paged masters and gradients free (their pages, in the NVMe slots).
  int64_t paged_off_host_bytes() const;
  void page_in_masters();
  // The lazy update of paged layer j in its slot's bytes (its state, its masters when they
  // page, read from its gradients there when they page), which it updates in place; in a
  // step, a paged bf16 copy goes to the executor's staging (written from the masters when
  // the update is skipped), at flush() nowhere (the next step writes it).
  void update_paged_layer(int layer, std::span<std::byte> slot, bool in_step);
  // Paged bf16 copies (Plan::nvme_copy_layers, exec/copy_pager.h): the executor's staging
  // holds them; their pages in copy_ stay released (copy_pages_bytes_ of them). The hook
  // writes layer j's from its masters in the slot's masters part when no update does.
  void write_paged_copy(int layer, std::span<std::byte> masters, bf16* to);
  PageSpan layer_copy_pages(int layer);  // the whole pages of layer j's part of copy_
  int64_t copy_pages_bytes_ = 0;
};

}  // namespace lt
