#include "train/streamed_training.h"

#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"
#include "plan/nvme_space.h"
#include "plan/plan_json.h"
#include "plan/planner.h"

namespace lt {

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

Plan plan_this_run(const TrainConfig& cfg, const ModelConfig& model) {
  PlanRequest req;
  req.model_name = cfg.model.empty() ? "from-scratch llama" : cfg.model;
  req.model = model;
  try {
    req.hardware = load_hardware_profile(cfg.hardware);
  } catch (const Error& e) {
    throw Error(std::string("no hardware profile to plan with: ") + e.what(), "train config (hardware)",
                "run `lazytrain profile` (writes profiles/local.json) or pass --hardware");
  }
  // What the streaming executors hold on the compute tier: fp32 activations, weights and
  // gradients (bf16 matmuls read the host's bf16 copy).
  req.hardware.act_bytes = req.hardware.weight_bytes = req.hardware.grad_bytes = 4;
  // bf16 matmuls run at the profile's bf16 rate when it has one.
  if (cfg.precision == "bf16" && req.hardware.bf16_peak_flops > 0) req.hardware.peak_flops = req.hardware.bf16_peak_flops;
  req.batch = cfg.batch;
  req.seq = cfg.seq_len;
  req.gpu_cap_bytes = cfg.compute_budget_gb * 1e9;
  // The NVMe tier gets at most what the offload directory's disk has free.
  const std::string dir = offload_dir_of(cfg);
  limit_nvme_to_free_space(req, free_disk_bytes(dir, "train config (offload_dir)"), dir, "train config (offload_dir)");
  Plan p = make_plan(req, "milp");
  if (!p.feasible) {
    const InfeasibleReport rep = diagnose_infeasible(req, "milp", p);
    throw Error(rep.message, "train config (compute_budget_gb)",
                rep.largest_batch > 0 ? "raise --compute-budget-gb, or train with --batch " +
                                            std::to_string(rep.largest_batch) + " (and more --grad-accum)"
                                      : "raise --compute-budget-gb");
  }
  std::filesystem::create_directories(cfg.output_dir);
  save_plan(p, cfg.output_dir + "/plan.json");
  return p;
}

StreamedTraining::StreamedTraining(const TrainConfig& cfg, const Plan& plan, ModelParameters& params,
                                   ModelParameters& grads, Updater& updater)
    : cfg_(cfg),
      params_(params),
      grads_(grads),
      updater_(updater),
      backend_(make_backend(cfg.backend)),
      copy_(cfg.precision == "bf16" ? Precision::BF16 : Precision::F32) {
  copy_.refresh(params_);
  StreamingOptions so;
  so.precision = cfg.precision == "bf16" ? Precision::BF16 : Precision::F32;
  so.offload_dir = offload_dir_of(cfg);
  so.layer_state_bytes = plan.nvme_state_layers.empty() ? 0 : updater.layer_state_bytes();
  if (!plan.nvme_state_layers.empty() && so.layer_state_bytes == 0)
    throw Error("the plan pages optimizer states from NVMe, but --optimizer " + cfg.optimizer + " keeps none",
                "train config (plan, optimizer)", "use adamw8 or adamw, or plan with --nvme-state-layers 0");
  executor_ = std::make_unique<StreamingExecutor>(plan, *backend_, so);
}

void StreamedTraining::update_target(const UpdateTarget& t, std::span<std::byte> paged) {
  for (auto [offset, n] : target_ranges(params_, t))
    updater_.update_range(params_, grads_, offset, n, pending_, copy_.data(params_), paged);
}

StreamedTraining::Outcome StreamedTraining::step(const int32_t* ids, const int32_t* labels, int64_t predicted,
                                                 int64_t step, const int32_t* doc_start) {
  Outcome out;
  if (predicted == 0) {  // nothing carries a loss: the in-memory trainer's zero-gradient step
    flush();
    grads_.zero();
    out.update = updater_.decide(0.0, step);
    pending_ = out.update;
    has_pending_ = true;
    return out;
  }
  const LazyUpdateHook hook = [&](const UpdateTarget& t, std::span<std::byte> paged) { update_target(t, paged); };
  const int64_t micro = cfg_.batch * cfg_.seq_len;
  double loss_sum = 0, sq = 0;
  for (int64_t a = 0; a < cfg_.grad_accum; ++a) {
    StepOptions o;
    o.update = a == 0 && has_pending_ ? &hook : nullptr;
    o.zero_grads = a == 0;  // later micro-batches add to the first's gradients
    o.grad_scale = 1.0f / static_cast<float>(predicted);
    o.compute_copy = copy_.data(params_);
    o.doc_start = doc_start ? doc_start + a * micro : nullptr;
    const StreamingStepResult r = executor_->step(params_, grads_, ids + a * micro, labels + a * micro, o);
    loss_sum += r.loss * static_cast<double>(r.predicted_tokens);
    sq = r.grad_sq_sum;  // summed over the accumulated gradients as they arrive
  }
  has_pending_ = false;
  out.loss = loss_sum / static_cast<double>(predicted);
  out.update = updater_.decide(sq, step);
  pending_ = out.update;
  has_pending_ = true;
  return out;
}

void StreamedTraining::flush() {
  if (!has_pending_) return;
  const int L = static_cast<int>(params_.config().num_layers);
  update_target({UpdateTarget::Kind::Embed, -1}, {});
  AlignedBuffer<std::byte> state;  // one paged layer's state at a time
  for (int j = 0; j < L; ++j) {
    const UpdateTarget t{UpdateTarget::Kind::Layer, j};
    if (!executor_->state_paged(j)) {
      update_target(t, {});
      continue;
    }
    if (state.size() == 0) state.resize(updater_.layer_state_bytes());
    executor_->read_paged_state(j, {state.data(), state.size()});
    update_target(t, {state.data(), state.size()});
    executor_->write_paged_state(j, {state.data(), state.size()});
  }
  update_target({UpdateTarget::Kind::Head, -1}, {});
  has_pending_ = false;
}

void StreamedTraining::save_optimizer(const std::string& dir) {
  const Updater::LayerPaging paging{
      [&](int layer, std::span<std::byte> out) { executor_->read_paged_state(layer, out); }, nullptr};
  updater_.save(dir, &paging);
}

void StreamedTraining::load_optimizer(const std::string& dir) {
  const Updater::LayerPaging paging{
      nullptr, [&](int layer, std::span<const std::byte> in) { executor_->write_paged_state(layer, in); }};
  updater_.load(dir, &paging);
  has_pending_ = false;
}

}  // namespace lt
