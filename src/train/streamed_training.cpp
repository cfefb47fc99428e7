#include "train/streamed_training.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "core/threads.h"
#include "dist/device_collectives.h"
#include "exec/backend_cuda.h"
#include "memory/compute_arena.h"
#include "memory/nvme_store.h"
#include "model/config.h"
#include "plan/nvme_space.h"
#include "plan/plan_json.h"
#include "plan/planner.h"
#include "plan/state_paging.h"
#include "train/rank_exchange.h"

namespace lt {

namespace {

// The ranks' sums of the gradient slots on a GPU: NCCL, on a stream of its own after the
// layer's backward (the compute stream goes on to the next layer meanwhile), to the ranks
// that update the target (RankExchange::slot_sum_root); the slot's drain on the D2H stream
// waits for its sum (dist/device_collectives.h).
class NcclSlotSums final : public SlotSums {
 public:
  NcclSlotSums(Communicator& ranks, const RankExchange& exchange, const Backend& backend)
      : device_(ranks, backend.device_index()),
        exchange_(exchange),
        compute_(backend.native_stream(Backend::Stream::Compute)),
        d2h_(backend.native_stream(Backend::Stream::D2H)) {}
  int64_t start(const UpdateTarget& target, float* slot, int64_t n) override {
    return device_.sum_beside(slot, n, compute_, exchange_.slot_sum_root(target));
  }
  void before_drain(int64_t ticket) override { device_.order_after(ticket, d2h_); }
  std::string describe() const { return device_.describe(); }

 private:
  DeviceCollectives device_;
  const RankExchange& exchange_;
  void* compute_;
  void* d2h_;
};

// The ranks' sums of the gradient slots where the compute tier is host memory (emu):
// RankExchange's, in rank order on its background thread; a slot's drain waits for its sum
// on the copy stream (Backend::wait_for), so the compute goes on meanwhile.
class HostMemorySlotSums final : public SlotSums {
 public:
  HostMemorySlotSums(RankExchange& exchange, Backend& backend) : exchange_(exchange), backend_(backend) {}
  // A copy thread still waiting for a sum (only after a failed step) is done with the
  // exchange before the exchange goes (the trainer's members go in reverse order).
  ~HostMemorySlotSums() override { backend_.synchronize(); }
  int64_t start(const UpdateTarget& target, float* slot, int64_t n) override {
    return exchange_.start_slot_sum(target, slot, n);
  }
  void before_drain(int64_t ticket) override {
    if (ticket == 0) return;  // summed already
    RankExchange* exchange = &exchange_;
    backend_.wait_for(Backend::Stream::D2H, [exchange, ticket] { exchange->slot_sum_landed(ticket); });
  }

 private:
  RankExchange& exchange_;
  Backend& backend_;
};

// A data-parallel rank's GPU: its place among its host's ranks, over the host's devices
// (one rank per GPU is what NCCL sums between; two ranks on one GPU share it, and NCCL
// refuses to join them). One process: device 0.
int rank_device(const std::string& backend, const Communicator* comm) {
  if (backend != "cuda" || !comm) return 0;
  const int devices = cuda_device_count();
  return devices > 0 ? comm->local_rank() % devices : 0;  // none: make_backend says why
}

}  // namespace

std::string offload_dir_of(const TrainConfig& cfg) {
  return cfg.offload_dir.empty() ? std::filesystem::temp_directory_path().string() : cfg.offload_dir;
}

void check_plan_fits(const Plan& plan, const ModelConfig& model, const TrainConfig& cfg, const std::string& where) {
  const std::string make = "make one with `lazytrain plan --model <this model> --batch " + std::to_string(cfg.batch) +
                           " --seq " + std::to_string(cfg.seq_len) + " --out plan.json`";
  if (!plan.feasible) throw Error("the plan is infeasible: " + plan.infeasible_reason, where, make);
  if (model_config_to_json(plan.model) != model_config_to_json(model))
    throw Error("the plan is for another model (" + plan.model_name + ": " + std::to_string(plan.model.num_layers) +
                    " layers, hidden " + std::to_string(plan.model.hidden_size) + ", vocabulary " +
                    std::to_string(plan.model.vocab_size) + ")",
                where, make);
  if (plan.batch != cfg.batch || plan.seq != cfg.seq_len)
    throw Error("the plan is for batch " + std::to_string(plan.batch) + " x seq " + std::to_string(plan.seq) +
                    ", this run uses " + std::to_string(cfg.batch) + " x " + std::to_string(cfg.seq_len),
                where, make + ", or train with the plan's --batch and --seq-len");
  if (plan.predicted_peak.nvme + plan.nvme_state_bytes() > 0) {
    const std::string dir = offload_dir_of(cfg);
    check_plan_nvme_fits(plan, free_disk_bytes(dir, "train config (offload_dir)"), dir, where);
  }
}

PlanRequest run_plan_request(const TrainConfig& cfg, const ModelConfig& model, const RankPlanning& dp) {
  PlanRequest req;
  req.model_name = cfg.model.empty() ? "from-scratch llama" : cfg.model;
  req.model = model;
  try {
    req.hardware = load_hardware_profile(cfg.hardware);
  } catch (const Error& e) {
    throw Error(std::string("no hardware profile to plan with: ") + e.what(), "train config (hardware)",
                "run `lazytrain profile` (writes profiles/local.json) or pass --hardware");
  }
  // A GPU's plan needs the GPU's rates and memory: a CPU profile's compute tier is half the
  // host's RAM, which no device has.
  if (cfg.backend == "cuda" && req.hardware.backend != "cuda")
    throw Error("hardware profile '" + cfg.hardware + "' describes the " + req.hardware.backend +
                    " backend, and this run computes on cuda",
                "train config (hardware)",
                "run `lazytrain profile --backend cuda` on this machine (writes profiles/local.json), or pass "
                "--hardware with a GPU profile");
  // What the streaming executors hold on the compute tier: fp32 activations, weights and
  // gradients (bf16 matmuls read the host's bf16 copy).
  req.hardware.act_bytes = req.hardware.weight_bytes = req.hardware.grad_bytes = 4;
  // bf16 matmuls run at the profile's bf16 rate when it has one, and read the bf16 compute
  // copy, so the fp32 masters of the matrices can page with the optimizer states.
  if (cfg.precision == "bf16" && req.hardware.bf16_peak_flops > 0) req.hardware.peak_flops = req.hardware.bf16_peak_flops;
  req.page_master = cfg.precision == "bf16";
  // Gradients page too, but not where they accumulate over micro-batches on the host or
  // are summed there over the ranks.
  req.page_grads = cfg.grad_accum == 1 && dp.ranks == 1;
  // So do the bf16 copies, which the update writes from the paged masters in every step.
  req.page_copy = req.page_master && req.page_grads;
  // The profile's rates ran on its threads; a process on fewer (a data-parallel rank that
  // shares the host with others, or --threads) computes and updates at its share. Linear:
  // the GEMMs and the AdamW loop split their work over the threads (an estimate, since
  // memory-bound work gains less from more threads than compute does).
  // A GPU's matmul rates are the device's (profile_compute_share).
  const double compute_share = profile_compute_share(req.hardware);
  req.hardware.peak_flops *= compute_share;
  req.hardware.bf16_peak_flops *= compute_share;
  req.hardware.host_optimizer_params_per_s *= profile_thread_share(req.hardware);
  req.batch = cfg.batch;
  req.seq = cfg.seq_len;
  req.gpu_cap_bytes = cfg.compute_budget_gb * 1e9;
  if (cfg.host_budget_gb > 0) req.hardware.host_memory_bytes = cfg.host_budget_gb * 1e9;
  // The NVMe tier gets at most what the offload directory's disk has free.
  const std::string dir = offload_dir_of(cfg);
  limit_nvme_to_free_space(req, free_disk_bytes(dir, "train config (offload_dir)"), dir, "train config (offload_dir)");
  req.time_limit_s = cfg.plan_time_limit;
  // The kernels' scratch on the table the run's backend computes with (the executor checks
  // that the plan counts at least that much), at the run's precision.
  const Precision precision = cfg.precision == "bf16" ? Precision::BF16 : Precision::F32;
  const KernelTable& table = backend_kernel_table(cfg.backend);
  req.scratch = executor_scratch(model, cfg.batch, cfg.seq_len, table, precision);
  req.scratch_at = [model, seq = cfg.seq_len, &table, precision](int64_t batch) {
    return executor_scratch(model, batch, seq, table, precision);
  };
  req.ranks = dp.ranks;
  req.shard_optimizer = dp.sharded;
  req.slot_sums = slot_sums_planned(cfg, dp);
  if (dp.ranks > 1 && !(req.hardware.network_bw > 0)) req.hardware.network_bw = dp.network_bw;
  return req;
}

bool slot_sums_planned(const TrainConfig& cfg, const RankPlanning& dp) {
  if (dp.ranks < 2 || cfg.backend == "cpu" || cfg.grad_accum > 1) return false;
  return cfg.backend != "cuda" || (DeviceCollectives::unavailable_reason().empty() && dp.gpus_shared.empty());
}

std::string gpus_shared_reason(const std::vector<int>& hosts, const std::vector<uint64_t>& gpus) {
  LT_ASSERT(hosts.size() == gpus.size(), "gpus_shared_reason: one host and one GPU per rank");
  for (size_t a = 0; a < gpus.size(); ++a)
    for (size_t b = a + 1; b < gpus.size(); ++b)
      if (gpus[a] != 0 && gpus[a] == gpus[b] && hosts[a] == hosts[b])
        return "ranks " + std::to_string(a) + " and " + std::to_string(b) + " share the GPU at PCI " +
               pci_address(gpus[a]) + " of their host, and NCCL sums between one rank per GPU";
  return "";
}

std::string ranks_gpus_shared_reason(Communicator& comm, const std::string& backend) {
  const uint64_t gpu = backend == "cuda" ? cuda_device_pci_key(rank_device(backend, &comm)) : 0;
  const std::vector<uint64_t> gpus = comm.all_gather(gpu);
  const std::vector<uint64_t> host_ids = comm.all_gather(static_cast<uint64_t>(comm.host_id()));
  return gpus_shared_reason(std::vector<int>(host_ids.begin(), host_ids.end()), gpus);
}

double profile_thread_share(const HardwareProfile& hw) {
  return hw.threads > num_threads() ? static_cast<double>(num_threads()) / hw.threads : 1.0;
}

double profile_compute_share(const HardwareProfile& hw) {
  return hw.backend == "cuda" ? 1.0 : profile_thread_share(hw);
}

Plan plan_this_run(const TrainConfig& cfg, const ModelConfig& model, const RankPlanning& dp) {
  const PlanRequest req = run_plan_request(cfg, model, dp);
  const int ranks = dp.ranks;
  if (req.hardware.threads > num_threads())
    std::printf("plan: the %s profile's %s ran on %d threads; this process has %d, so the plan counts %d/%d of "
                "them\n",
                req.hardware.name.c_str(),
                req.hardware.backend == "cuda" ? "host optimizer rate" : "compute and optimizer rates",
                req.hardware.threads, num_threads(), num_threads(), req.hardware.threads);
  Plan p = make_plan(req, "milp");
  if (!p.feasible) {
    // The MILP keeps the host state within its share of the host budget; the keep-all plan
    // may use all of it. Where only that one fits, the run takes it rather than failing.
    Plan keep = make_plan(req, "keep-all");
    if (keep.feasible) {
      std::printf("plan: no MILP plan keeps the training state within %.0f%% of the %.3f GB host; the keep-all plan "
                  "fits (host peak %.3f GB, predicted %.4f s per micro-batch): training with it, without re-planning\n",
                  100 * kHostStateShare, req.hardware.host_memory_bytes / 1e9, keep.predicted_peak.cpu / 1e9,
                  keep.predicted_step_s);
      p = std::move(keep);
    }
  }
  if (!p.feasible) {
    const InfeasibleReport rep = diagnose_infeasible(req, "milp", p);
    // --batch is the global batch: each of the ranks runs cfg.batch rows of it.
    const std::string smaller =
        ranks > 1 ? std::to_string(rep.largest_batch * ranks) + " (" + std::to_string(rep.largest_batch) +
                        " rows on each of the " + std::to_string(ranks) + " ranks)"
                  : std::to_string(rep.largest_batch);
    // A host too small for the state is the host budget's to raise, not the compute tier's.
    const bool host_short = rep.shortage.rfind("host memory short", 0) == 0;
    const std::string raise = host_short ? "raise --host-budget-gb" : "raise --compute-budget-gb";
    throw Error(rep.message + (ranks > 1 ? " (for each rank's " + std::to_string(cfg.batch) + " rows)" : ""),
                host_short ? "train config (host_budget_gb)" : "train config (compute_budget_gb)",
                rep.largest_batch > 0 ? raise + ", or train with --batch " + smaller + " (and more --grad-accum)"
                                      : raise);
  }
  std::filesystem::create_directories(cfg.output_dir);
  save_plan(p, cfg.output_dir + "/plan.json");
  return p;
}

StreamedTraining::StreamedTraining(const TrainConfig& cfg, const Plan& plan, ModelParameters& params,
                                   ModelParameters& grads, Updater& updater, Options options)
    : cfg_(cfg),
      comm_(options.comm && options.comm->size() > 1 ? options.comm : nullptr),
      params_(params),
      grads_(grads),
      updater_(updater),
      backend_(options.backend ? std::move(options.backend)
                               : make_backend(cfg.backend, rank_device(cfg.backend, comm_))),
      copy_(cfg.precision == "bf16" ? Precision::BF16 : Precision::F32) {
  copy_.refresh(params_);
  StreamingOptions so;
  so.precision = cfg.precision == "bf16" ? Precision::BF16 : Precision::F32;
  so.offload_dir = offload_dir_of(cfg);
  so.layer_state_bytes = plan.nvme_state_layers.empty() ? 0 : updater.layer_state_bytes();
  if (!plan.nvme_state_layers.empty() && so.layer_state_bytes == 0)
    throw Error("the plan pages optimizer states from NVMe, but --optimizer " + cfg.optimizer + " keeps none",
                "train config (plan, optimizer)", "use adamw8 or adamw, or plan with --nvme-state-layers 0");
  const bool no_masters = plan.nvme_master_layers.empty();
  if (!plan.nvme_copy_layers.empty() && (no_masters || comm_ || cfg.grad_accum > 1)) {
    const std::string why = no_masters ? "the update writes from the paged masters, and this plan pages none"
                            : comm_    ? "a run of data-parallel ranks cannot do"
                                       : "a run with gradient accumulation cannot do (each micro-batch reads them)";
    throw Error("the plan pages " + std::to_string(plan.nvme_copy_layers.size()) +
                    " layers' bf16 copies to NVMe, which " + why,
                "train config (plan)",
                no_masters ? "plan this run again"
                : comm_    ? "plan with `lazytrain plan --ranks N`"
                           : "train with --grad-accum 1, or let train plan itself");
  }
  if (!plan.nvme_grad_layers.empty() && (comm_ || cfg.grad_accum > 1))
    throw Error("the plan pages the layers' gradients to NVMe, which a run " +
                    std::string(comm_ ? "of data-parallel ranks (they sum the host's gradients)"
                                      : "with gradient accumulation (micro-batches add to the host's gradients)") +
                    " cannot do",
                "train config (plan)",
                comm_ ? "plan with `lazytrain plan --ranks N`" : "train with --grad-accum 1, or let train plan itself");
  if (!plan.nvme_master_layers.empty()) {
    if (so.precision != Precision::BF16)
      throw Error("the plan pages the layers' fp32 masters to NVMe, which only bf16 runs can (an fp32 run's "
                  "matmuls read the masters)",
                  "train config (plan, precision)", "train with --precision bf16, or plan this fp32 run again");
    masters_.emplace(params_, plan.nvme_master_layers);
  }
  if (masters_ || !plan.nvme_grad_layers.empty()) {
    // The slot: [optimizer state | masters | gradients], each part at an aligned offset
    // (exec/state_pager.h's StateSlotLayout).
    state_part_ = NvmeStore::round_up(so.layer_state_bytes);
    so.layer_state_bytes = state_part_;
  }
  if (masters_) {
    so.master_offset = state_part_;
    so.layer_state_bytes += masters_->max_slot_bytes();
  }
  if (!plan.nvme_grad_layers.empty()) {
    so.grad_offset = so.layer_state_bytes;
    for (int j : plan.nvme_grad_layers) grad_pages_ = std::max(grad_pages_, layer_grad_cover(j).bytes);
    so.layer_state_bytes += grad_pages_;
  }
  executor_options_ = so;
  if (comm_) {
    exchange_ = std::make_unique<RankExchange>(*comm_, updater_, params_, grads_, copy_.data(params_));
    gradient_sums_note_ = set_up_gradient_sums();
    if (plan.ranks > 1 && plan.slot_sums != (slot_sums_ != nullptr))
      gradient_sums_note_ += std::string("; the plan counted them ") +
                             (plan.slot_sums ? "in the slots" : "on the host") + ", so its prediction is off";
  }
  executor_ = std::make_unique<StreamingExecutor>(plan, *backend_, so);
  if (masters_) {  // the slots get the masters (their states start as zeros, a new slot's bytes)
    AlignedBuffer<std::byte> slot(so.layer_state_bytes);
    slot.zero();
    for (int j : plan.nvme_master_layers) {
      masters_->copy_out(j, {slot.data() + state_part_, slot.size() - state_part_});
      executor_->write_paged_state(j, {slot.data(), slot.size()});
    }
    page_out_masters();
  }
  if (grad_pages_ > 0)  // no gradients yet: their pages go (they read as the zeros they hold)
    for (int j : plan.nvme_grad_layers)
      release_pages(layer_grad_pages(j), "layer " + std::to_string(j) + "'s paged gradients");
  for (int j : plan.nvme_copy_layers) {  // the executor's staging holds them from now on
    const PageSpan pages = layer_copy_pages(j);
    release_pages(pages, "layer " + std::to_string(j) + "'s paged bf16 copy");
    copy_pages_bytes_ += static_cast<int64_t>(pages.bytes);
  }
  // Page-locked pages cannot be given back to the kernel, which paging masters, gradients
  // or copies does for a layer's pages step by step.
  if (masters_ || grad_pages_ > 0 || !plan.nvme_copy_layers.empty()) {
    if (!backend_->host_is_compute())
      pins_.not_pinned = "the plan pages parts of them through NVMe, and page-locked memory cannot give pages back";
  } else {
    pins_ = pin_step_memory(*backend_, params_, grads_, copy_.data(params_));
  }
  wait_for_replans_ = options.wait_for_replans;
  if (cfg.adaptive_plan != "on") {
    adaptive_note_ = "off (adaptive_plan off)";
  } else if (comm_) {
    // Each rank measures its own machine; the ranks would have to agree on one switch.
    adaptive_note_ = "off (under data parallelism every rank keeps the plan it started with)";
  } else if (plan.policy != "milp") {
    adaptive_note_ = "off (re-planning re-solves MILP plans; this plan's policy is " + plan.policy + ")";
  } else {
    adaptive_ = true;
    request_ = options.request ? *options.request : request_of(plan, cfg.plan_time_limit);
    // Re-plans keep what pages, layer by layer (see the header).
    request_.nvme_state_layers = static_cast<int>(plan.nvme_state_layers.size());
    request_.keep_paged = paged_layers_of(plan);
    detector_.emplace(assumed_measures(plan), cfg.replan_threshold, static_cast<int>(cfg.replan_steps));
    char buf[160];
    std::snprintf(buf, sizeof buf, "on (a measure %.0f%% off the plan's profile for %lld steps re-plans; switch if %.0f%% faster)",
                  100 * cfg.replan_threshold, static_cast<long long>(cfg.replan_steps), 100 * cfg.replan_margin);
    adaptive_note_ = buf;
  }
}

void StreamedTraining::at_step_boundary(int64_t step, std::vector<ReplanEvent>& events) {
  if (!adaptive_) return;
  if (wait_for_replans_ && solve_.busy()) events.push_back(conclude(solve_.wait(), step));
  if (std::optional<ReplanResult> r = solve_.take()) events.push_back(conclude(std::move(*r), step));
}

ReplanEvent StreamedTraining::conclude(ReplanResult r, int64_t step) {
  ReplanEvent e;
  e.step = step;
  if (r.adopt) {
    try {
      switch_to(r.plan);
      e.switched = true;
      ++switches_;
    } catch (const Error& x) {
      r.note = std::string("switching failed: ") + x.what();
    }
  }
  // The measured machine is the reference from now on, whichever plan runs on it.
  StepMeasures ref = r.drift.measured;
  ref.step_s = e.switched ? r.new_predicted_s : r.old_on_measured_s;
  detector_->rebase(ref);
  // Kept re-plans in a row back off: the measures they were about wait K, 2K, 4K, ...
  // steps before they can start another solve (noise, not a new machine, most likely).
  kept_in_a_row_ = e.switched ? 0 : kept_in_a_row_ + 1;
  if (!e.switched)
    for (const DriftedMeasure& d : r.drift.measures)
      detector_->hold(d.measure, static_cast<int>(cfg_.replan_steps) << std::min(kept_in_a_row_ - 1, 6));
  e.result = std::move(r);
  return e;
}

void StreamedTraining::switch_to(const Plan& plan) {
  check_plan_fits(plan, params_.config(), cfg_, "re-plan");
  backend_->synchronize();  // between steps nothing is in flight; make sure
  auto next = std::make_unique<StreamingExecutor>(plan, *backend_, executor_options_);
  if (!plan.nvme_state_layers.empty()) {  // the same layers (judge_replan): move their bytes
    AlignedBuffer<std::byte> state(executor_options_.layer_state_bytes);
    for (int j : plan.nvme_state_layers) {
      executor_->read_paged_state(j, {state.data(), state.size()});
      next->write_paged_state(j, {state.data(), state.size()});
    }
  }
  executor_ = std::move(next);
  steps_on_executor_ = 0;
}

void StreamedTraining::watch(int64_t step, const StreamingStepResult& r, LinkUse h2d, LinkUse d2h,
                             std::vector<ReplanEvent>& events) {
  if (!adaptive_ || solve_.busy()) return;  // one re-plan at a time; its outcome rebases the detector
  // An executor's first step touches its memory for the first time and warms the caches:
  // not a measure of the machine.
  if (steps_on_executor_++ == 0) return;
  const Plan& plan = executor_->plan();
  std::optional<Drift> d = detector_->observe(measure_step(plan, r, h2d, d2h));
  if (!d) return;
  // A switch pays only if the run outlasts the solve (the current plan's own solve time
  // is the guess for the next one).
  const double left_s = static_cast<double>(cfg_.steps - step) * static_cast<double>(cfg_.grad_accum) * r.step_s;
  if (left_s < std::max(plan.solve.solve_s, 0.05)) return;
  PlanRequest req = request_;
  req.hardware = with_rates(req.hardware, d->measured);
  req.measured = layer_times(d->measured);
  ReplanEvent e;
  e.step = step;
  e.started = true;
  e.result.drift = *d;
  e.result.old_predicted_s = plan.predicted_step_s;
  e.result.old_on_measured_s = predict_on(plan, d->measured);
  events.push_back(e);
  solve_.start(std::move(req), plan.policy, plan, *d, cfg_.replan_margin);
}

std::vector<ReplanEvent> StreamedTraining::finish(int64_t step) {
  std::vector<ReplanEvent> events;
  if (!solve_.busy()) return events;
  ReplanResult r = solve_.wait();
  if (r.adopt) r.note = "the run ended before the switch";
  r.adopt = false;
  events.push_back(conclude(std::move(r), step + 1));  // "before" the step that never runs
  return events;
}

void StreamedTraining::update_target(const UpdateTarget& t, std::span<std::byte> paged) {
  if (sharded()) return exchange_->weights_needed(t);  // updated by its owner after the last step
  if (!has_pending_) {  // a step without an update runs the hook for the paged bf16 copies alone
    if (t.kind == UpdateTarget::Kind::Layer && executor_->copy_paged(t.layer))
      write_paged_copy(t.layer, paged.subspan(state_part_), executor_->paged_copy(t.layer));
    return;
  }
  if ((masters_ || grad_pages_ > 0) && !paged.empty())  // a paged layer during a step
    return update_paged_layer(t.layer, paged, /*in_step=*/true);  // (its gradients' pages stay released)
  for (auto [offset, n] : target_ranges(params_, t))
    updater_.update_range(params_, grads_, offset, n, pending_, copy_.data(params_), paged);
}

void StreamedTraining::update_paged_layer(int layer, std::span<std::byte> slot, bool in_step) {
  const UpdateTarget t{UpdateTarget::Kind::Layer, layer};
  const std::span<std::byte> masters = slot.subspan(state_part_);
  TensorPlaces places;
  bf16* copy = copy_.data(params_);  // where the update writes the layer's bf16 copy
  bf16* staged = nullptr;  // a paged copy's: the executor's staging in a step, none at flush() (the next step's hook)
  if (executor_->copy_paged(layer)) {
    copy = nullptr;
    staged = in_step ? executor_->paged_copy(layer) : nullptr;
  }
  if (staged) {
    const int64_t first = params_.block_base(layer) - params_.data();
    places.copy = [staged, first](int64_t offset) { return staged + (offset - first); };
  }
  if (masters_)
    places.params = [&](int64_t offset) { return masters_->in_slot(layer, masters, params_.data() + offset); };
  if (grads_on_nvme_ && executor_->grads_paged(layer)) {  // the gradients the last backward wrote to the slot
    // The slot holds the pages covering the layer's gradient block (StatePager's staging).
    const float* const in_slot = reinterpret_cast<const float*>(
        slot.data() + executor_options_.grad_offset +
        (reinterpret_cast<std::byte*>(grads_.block_base(layer)) - layer_grad_cover(layer).begin));
    const int64_t first = grads_.block_base(layer) - grads_.data();
    places.grads = [in_slot, first](int64_t offset) { return in_slot + (offset - first); };
  }
  for (auto [offset, n] : target_ranges(params_, t))
    updater_.update_range(params_, grads_, offset, n, pending_, copy, slot.first(state_part_), &places);
  if (staged && !pending_.applied)  // skipped: the masters as they are
    write_paged_copy(layer, masters, staged);
}

void StreamedTraining::write_paged_copy(int layer, std::span<std::byte> masters, bf16* to) {
  LT_ASSERT(masters_, "a paged bf16 copy without paged masters");
  float* at = params_.block_base(layer);
  for (const BlockField& f : block_fields(params_.config(), layer)) {
    if (f.matrix) {  // what the compute reads of the copy
      const float* master = masters_->in_slot(layer, masters, at);
      convert_f32_to_bf16(to + (at - params_.block_base(layer)), master ? master : at, f.numel);
    }
    at += f.numel;
  }
}

PageSpan StreamedTraining::layer_grad_pages(int layer) const {
  return page_interior(grads_.block_base(layer),
                       static_cast<size_t>(block_numel(grads_.config(), layer)) * sizeof(float));
}

PageSpan StreamedTraining::layer_copy_pages(int layer) {
  bf16* first = copy_.data(params_) + (params_.block_base(layer) - params_.data());
  return page_interior(first, static_cast<size_t>(block_numel(params_.config(), layer)) * sizeof(bf16));
}

PageSpan StreamedTraining::layer_grad_cover(int layer) const {
  return page_cover(grads_.block_base(layer), static_cast<size_t>(block_numel(grads_.config(), layer)) * sizeof(float));
}

void StreamedTraining::zero_grads() {
  if (grad_pages_ == 0) return grads_.zero();
  // Paged layers' whole gradient pages are zeroed by giving them back (no host memory).
  std::vector<PageSpan> paged;
  for (int j : plan().nvme_grad_layers) paged.push_back(layer_grad_pages(j));
  std::sort(paged.begin(), paged.end(), [](const PageSpan& a, const PageSpan& b) { return a.begin < b.begin; });
  auto* at = reinterpret_cast<std::byte*>(grads_.data());
  std::byte* const end = at + static_cast<size_t>(grads_.numel()) * sizeof(float);
  for (const PageSpan& s : paged) {
    std::memset(at, 0, static_cast<size_t>(s.begin - at));
    release_pages(s, "paged gradients");
    at = s.begin + s.bytes;
  }
  std::memset(at, 0, static_cast<size_t>(end - at));
}

void StreamedTraining::page_out_masters() {
  for (int j : plan().nvme_master_layers) masters_->release(j);
  masters_resident_ = false;
}

void StreamedTraining::page_in_masters() {
  AlignedBuffer<std::byte> slot(executor_options_.layer_state_bytes);
  for (int j : plan().nvme_master_layers) {
    executor_->read_paged_state(j, {slot.data(), slot.size()});
    masters_->copy_in(j, {slot.data() + state_part_, slot.size() - state_part_});
  }
  masters_resident_ = true;
}

StreamedTraining::Outcome StreamedTraining::step(const int32_t* ids, const int32_t* labels, int64_t predicted,
                                                 int64_t step, const int32_t* doc_start) {
  Outcome out;
  at_step_boundary(step, out.replans);  // a re-plan solved meanwhile switches here
  if (masters_ && masters_resident_) page_out_masters();  // after a flush: their NVMe copies are current
  if (predicted == 0) {  // nothing carries a loss: the in-memory trainer's zero-gradient step
    flush();
    zero_grads();
    grads_on_nvme_ = false;  // the update reads these zeros, not the slots' last gradients
    out.update = updater_.decide(0.0, step);
    start_update(out.update);
    return out;
  }
  const LazyUpdateHook hook = [&](const UpdateTarget& t, std::span<std::byte> paged) { update_target(t, paged); };
  // The last micro-batch completes each target's gradient: its sum over the ranks can start.
  const GradientFinal reduce = [&](const UpdateTarget& t) { exchange_->gradient_final(t); };
  const bool overlapped = exchange_ && exchange_->overlaps();
  const int64_t micro = cfg_.batch * cfg_.seq_len;
  double loss_sum = 0, sq = 0;
  StreamingStepResult last;  // the last micro-batch's timings, for the drift detector
  LinkUse h2d, d2h;
  for (int64_t a = 0; a < cfg_.grad_accum; ++a) {
    StepOptions o;
    // (Paged bf16 copies are written by the hook in every step.)
    o.update = a == 0 && (has_pending_ || sharded() || !plan().nvme_copy_layers.empty()) ? &hook : nullptr;
    o.zero_grads = a == 0;  // later micro-batches add to the first's gradients
    o.grad_scale = 1.0f / static_cast<float>(predicted);
    o.compute_copy = copy_.data(params_);
    o.doc_start = doc_start ? doc_start + a * micro : nullptr;
    if (overlapped && a + 1 == cfg_.grad_accum) o.gradient_final = &reduce;
    o.slot_sums = slot_sums_.get();  // set for one micro-batch a step only (set_up_gradient_sums)
    const size_t h2d_bytes = backend_->h2d_bytes, d2h_bytes = backend_->d2h_bytes;
    const Backend::LinkBusy busy = backend_->link_busy();
    StreamingStepResult r = executor_->step(params_, grads_, ids + a * micro, labels + a * micro, o);
    const Backend::LinkBusy busy_after = backend_->link_busy();
    h2d = {static_cast<double>(backend_->h2d_bytes - h2d_bytes), busy_after.h2d_s - busy.h2d_s};
    d2h = {static_cast<double>(backend_->d2h_bytes - d2h_bytes), busy_after.d2h_s - busy.d2h_s};
    loss_sum += r.loss * static_cast<double>(r.predicted_tokens);
    sq = r.grad_sq_sum;  // summed over the accumulated gradients as they arrive
    last = std::move(r);
  }
  if (exchange_) {  // this rank's gradients and loss were its rows' only
    const RankSums sums = exchange_->sum(loss_sum, overlapped);
    loss_sum = sums.loss_sum;
    sq = sums.grad_sq_sum;
  }
  watch(step, last, h2d, d2h, out.replans);
  has_pending_ = false;
  grads_on_nvme_ = grad_pages_ > 0;  // the paged layers' gradients went to their slots
  out.loss = loss_sum / static_cast<double>(predicted);
  out.update = updater_.decide(sq, step);
  start_update(out.update);
  return out;
}

std::string StreamedTraining::set_up_gradient_sums() {
  if (backend_->host_is_compute()) return "on the host, where backward writes them";
  if (cfg_.grad_accum > 1)
    return "on the host after the last of the " + std::to_string(cfg_.grad_accum) +
           " micro-batches drains (summed in the slots, each micro-batch's would cross the ranks)";
  // Sharded, a target's sum goes to its owner alone: no other rank reads it.
  const std::string to_whom = sharded() ? ", each to its owner" : "";
  if (backend_->native_stream(Backend::Stream::Compute)) {
    // DeviceCollectives joins every rank: all of them must be able to, or none tries.
    // (Both asked on every rank: the second is a collective.)
    const std::string shared = ranks_gpus_shared_reason(*comm_, cfg_.backend);
    std::string why = DeviceCollectives::unavailable_reason();
    if (why.empty()) why = shared;
    const double able = comm_->sum_in_rank_order(why.empty() ? 1.0 : 0.0);
    if (able < comm_->size())
      return "on the host after they drain (" +
             (why.empty() ? std::to_string(comm_->size() - static_cast<int>(able)) + " ranks cannot sum on the device"
                          : why) +
             ")";
    auto device = std::make_unique<NcclSlotSums>(*comm_, *exchange_, *backend_);
    const std::string what = device->describe();
    slot_sums_ = std::move(device);
    exchange_->set_compute_tier_sums(true);
    return "the layers' and the head's on the compute tier before they drain (" + what +
           ", on a stream beside the compute stream)" + to_whom + ", the embedding's on the host";
  }
  slot_sums_ = std::make_unique<HostMemorySlotSums>(*exchange_, *backend_);  // a compute tier in host memory (emu)
  exchange_->set_compute_tier_sums(true);
  return std::string("the layers' and the head's on the compute tier before they drain (the ") + backend_->name() +
         " backend's host memory, in rank order)" + to_whom + ", the embedding's on the host";
}

void StreamedTraining::start_update(const UpdateResult& d) {
  if (!sharded()) {  // lazy: the next step applies it target by target (or flush(), at once)
    pending_ = d;
    has_pending_ = true;
    return;
  }
  // Sharded: each rank updates its part now (its 1/N share of the update, not under the
  // next forward), and each target's weights go out from its owner on the background
  // thread; the next step's hook for a target waits for them there.
  if (!d.applied) return;
  updater_.update_range(params_, grads_, updater_.owned_offset(), updater_.owned_numel(), d, copy_.data(params_));
  exchange_->send_weights();
}

void StreamedTraining::flush() {
  if (sharded()) exchange_->all_weights_in();
  if (!has_pending_) {
    if (masters_ && !masters_resident_) page_in_masters();
    return;
  }
  const int L = static_cast<int>(params_.config().num_layers);
  update_target({UpdateTarget::Kind::Embed, -1}, {});
  AlignedBuffer<std::byte> slot;  // one paged layer's slot at a time
  for (int j = 0; j < L; ++j) {
    const UpdateTarget t{UpdateTarget::Kind::Layer, j};
    if (!executor_->state_paged(j)) {
      update_target(t, {});
      continue;
    }
    if (slot.size() == 0) slot.resize(executor_options_.layer_state_bytes);
    executor_->read_paged_state(j, {slot.data(), slot.size()});
    if (masters_ || grad_pages_ > 0)
      update_paged_layer(j, {slot.data(), slot.size()}, /*in_step=*/false);
    else
      update_target(t, {slot.data(), slot.size()});
    executor_->write_paged_state(j, {slot.data(), slot.size()});
    if (masters_) masters_->copy_in(j, {slot.data() + state_part_, slot.size() - state_part_});  // and on the host
  }
  update_target({UpdateTarget::Kind::Head, -1}, {});
  has_pending_ = false;
  masters_resident_ = true;
}

void StreamedTraining::save_optimizer(const std::string& dir) {
  const Updater::LayerPaging paging{
      [&](int layer, std::span<std::byte> out) { executor_->read_paged_state(layer, out); }, nullptr};
  updater_.save(dir, plan().nvme_state_layers.empty() ? nullptr : &paging);
}

void StreamedTraining::load_optimizer(const std::string& dir) {
  const Updater::LayerPaging paging{
      nullptr, [&](int layer, std::span<const std::byte> in) { executor_->write_paged_state(layer, in); }};
  updater_.load(dir, plan().nvme_state_layers.empty() ? nullptr : &paging);
  has_pending_ = false;
}

StepEngine::Memory StreamedTraining::memory() const {
  const int64_t n = params_.numel();
  Memory m;
  m.compute = static_cast<int64_t>(executor_->arena_bytes());
  m.host = 8 * n + static_cast<int64_t>(updater_.resident_state_bytes()) +
           static_cast<int64_t>(executor_->host_peak_bytes()) + (cfg_.precision == "bf16" ? 2 * n : 0) -
           paged_off_host_bytes();
  m.nvme = static_cast<int64_t>(executor_->nvme_bytes());
  return m;
}

int64_t StreamedTraining::paged_off_host_bytes() const {
  int64_t b = 0;
  if (masters_)
    for (int j : plan().nvme_master_layers) b += static_cast<int64_t>(masters_->bytes(j));
  for (int j : plan().nvme_grad_layers) b += static_cast<int64_t>(layer_grad_pages(j).bytes);
  return b + copy_pages_bytes_;
}

std::vector<std::string> StreamedTraining::describe() const {
  const Plan& p = plan();
  const Plan::TierCounts tc = p.tier_counts();
  const Memory m = memory();
  const int64_t n = params_.numel();
  const int64_t off_host = paged_off_host_bytes() - copy_pages_bytes_;  // of the fp32 weights and gradients
  std::string paged_note;  // what of the fp32 weights and gradients lives in the NVMe slots
  if (off_host > 0)
    paged_note = std::string(" (the paged layers' ") +
                 (masters_ && grad_pages_ > 0 ? "matrices' masters and gradients" : masters_ ? "matrices' masters"
                                                                                          : "gradients") +
                 ", " + format_bytes(off_host) + ", on NVMe)";
  const int device = backend_->device_index();
  // The device's PCI address too: under CUDA_VISIBLE_DEVICES every rank's may be device 0.
  const uint64_t pci = device >= 0 ? cuda_device_pci_key(device) : 0;
  const std::string backend_name =
      cfg_.backend + (device >= 0 ? " (device " + std::to_string(device) +
                                        (pci ? ", PCI " + pci_address(pci) : std::string()) + ")"
                                  : "");
  char plan_line[512], memory_line[512];
  std::snprintf(plan_line, sizeof plan_line,
                "plan: %s (%s policy, predicted %.4f s per micro-batch), %s backend, streaming; boundaries gpu %.1f "
                "cpu %.1f nvme %.1f recomputed %.0f; optimizer states of %zu layers on NVMe; lazy optimizer; "
                "batch %lld x seq %lld x accumulation %lld; %s matmuls",
                cfg_.plan.empty() ? (cfg_.output_dir + "/plan.json").c_str() : cfg_.plan.c_str(), p.policy.c_str(),
                p.predicted_step_s, backend_name.c_str(), tc.gpu, tc.cpu, tc.nvme, tc.recompute,
                p.nvme_state_layers.size(), static_cast<long long>(cfg_.batch), static_cast<long long>(cfg_.seq_len),
                static_cast<long long>(cfg_.grad_accum), cfg_.precision.c_str());
  std::snprintf(memory_line, sizeof memory_line,
                "memory: compute tier %s (fp32 activations; the plan's peak %s), host %s (fp32 weights and gradients "
                "%s%s,%s %s optimizer states %s held, offloaded activations %s), nvme %s",
                format_bytes(m.compute).c_str(), format_bytes(static_cast<int64_t>(p.predicted_peak.gpu)).c_str(),
                format_bytes(m.host).c_str(), format_bytes(8 * n - off_host).c_str(), paged_note.c_str(),
                cfg_.precision != "bf16" ? ""
                : copy_pages_bytes_ == 0
                    ? (" bf16 weight copy " + format_bytes(2 * n) + ",").c_str()
                    : (" bf16 weight copy " + format_bytes(2 * n - copy_pages_bytes_) + " (the paged layers', " +
                       format_bytes(copy_pages_bytes_) + ", on NVMe),").c_str(),
                cfg_.optimizer.c_str(), format_bytes(updater_.resident_state_bytes()).c_str(),
                format_bytes(executor_->host_peak_bytes()).c_str(), format_bytes(m.nvme).c_str());
  std::vector<std::string> lines = {plan_line, memory_line, "re-planning: " + adaptive_note_};
  if (comm_) lines.push_back("gradient sums over the ranks: " + gradient_sums_note_);
  const std::string what = cfg_.precision == "bf16" ? "the weights, their bf16 copy and the gradients"
                                                    : "the weights and gradients";
  if (pins_.bytes > 0)
    lines.push_back("host memory of the links: " + what + " page-locked once (" +
                    format_bytes(static_cast<int64_t>(pins_.bytes)) + "), so copies overlap compute as planned");
  else if (!pins_.not_pinned.empty())
    lines.push_back("host memory of the links: " + what + " pageable, copies slower (" + pins_.not_pinned + ")");
  return lines;
}

double StreamedTraining::overlapped_collective_seconds() const {
  return exchange_ ? exchange_->overlapped_seconds() : 0.0;
}

std::string StreamedTraining::step_time_note(double measured_s) const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "step time: measured %.4f s per micro-batch (mean over the run), the %s predicted %.4f s",
                measured_s,
                switches_ > 0 ? ("last plan (after " + std::to_string(switches_) +
                                 (switches_ == 1 ? " re-plan)" : " re-plans)")).c_str()
                              : "plan",
                plan().predicted_step_s);
  return buf;
}

}  // namespace lt
