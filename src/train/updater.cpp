#include "train/updater.h"

#include <cmath>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "optim/grad_clip.h"

namespace lt {

namespace {
bool is_norm_or_bias(const std::string& name) {
  return name.find("norm") != std::string::npos ||
         (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0);
}
}  // namespace

double sum_of_squares(const float* x, int64_t n) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    double s = 0;
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) s += static_cast<double>(x[i]) * x[i];
    partial[c] = s;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

Updater::Updater(const TrainConfig& cfg, const ModelParameters& params) : cfg_(cfg) {
  schedule_.peak = cfg.lr;
  schedule_.min_ratio = cfg.min_lr_ratio;
  schedule_.warmup_steps = cfg.warmup_steps;
  schedule_.total_steps = cfg.steps;
  schedule_.validate();
  if (cfg.optimizer == "sgd") return;
  AdamWConfig ac;
  ac.hyper.beta1 = static_cast<float>(cfg.beta1);
  ac.hyper.beta2 = static_cast<float>(cfg.beta2);
  ac.hyper.eps = static_cast<float>(cfg.eps);
  ac.hyper.weight_decay = static_cast<float>(cfg.weight_decay);
  ac.eight_bit = cfg.optimizer == "adamw8";
  adamw_ = std::make_unique<AdamW>(ac);
  for (const WeightSpec& s : params.specs()) {
    AdamWTensorOptions o;
    if (is_norm_or_bias(s.hf_name)) o.weight_decay = 0.0f;
    adamw_->add_tensor(s.hf_name, s.numel(), o);
    names_.push_back(s.hf_name);
  }
}

UpdateResult Updater::apply(ModelParameters& params, const ModelParameters& grads, double grad_sq_sum,
                            bf16* compute_copy, int64_t step) {
  UpdateResult r;
  const ClipDecision d = clip_decision(grad_sq_sum, cfg_.max_grad_norm);
  r.grad_norm = d.global_norm;
  r.lr = schedule_.at(step);
  if (!d.finite) {
    ++non_finite_total_;
    if (++non_finite_in_a_row_ >= kMaxNonFiniteInARow)
      throw Error("non-finite gradients in " + std::to_string(non_finite_in_a_row_) +
                      " steps in a row (last at step " + std::to_string(step) + ")",
                  "training", "lower the learning rate, check the data, or resume from an earlier checkpoint");
    return r;
  }
  non_finite_in_a_row_ = 0;
  r.clip_factor = d.clip_factor;
  r.applied = true;
  ++optimizer_steps_;
  if (!adamw_) {  // plain SGD
    const float scale = static_cast<float>(r.lr) * d.clip_factor;
    float* p = params.data();
    const float* g = grads.data();
    const int64_t n = params.numel();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i] -= scale * g[i];
    if (compute_copy) convert_f32_to_bf16(compute_copy, p, n);
    return r;
  }
  for (int id = 0; id < adamw_->num_tensors(); ++id) {
    float* p = params.tensor(names_[id]);
    const float* g = grads.tensor(names_[id]);
    bf16* out = compute_copy ? compute_copy + (p - params.data()) : nullptr;
    adamw_->step_tensor(id, p, g, out, static_cast<float>(r.lr), d.clip_factor, optimizer_steps_);
  }
  return r;
}

void Updater::save(const std::string& dir) const {
  if (adamw_) adamw_->save(dir + "/optimizer.bin");
  nlohmann::json j = {{"optimizer", cfg_.optimizer},
                      {"optimizer_steps", optimizer_steps_},
                      {"non_finite_in_a_row", non_finite_in_a_row_},
                      {"non_finite_total", non_finite_total_}};
  write_file_atomic(dir + "/optimizer_state.json", j.dump(2) + "\n");
}

void Updater::load(const std::string& dir) {
  const std::string path = dir + "/optimizer_state.json";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(path));
    if (j.at("optimizer").get<std::string>() != cfg_.optimizer)
      throw Error("checkpoint was written by optimizer '" + j.at("optimizer").get<std::string>() +
                      "', this run uses '" + cfg_.optimizer + "'",
                  path, "resume with the same --optimizer");
    optimizer_steps_ = j.at("optimizer_steps").get<int64_t>();
    non_finite_in_a_row_ = j.at("non_finite_in_a_row").get<int>();
    non_finite_total_ = j.at("non_finite_total").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error("malformed optimizer state: " + std::string(e.what()), path, "use another checkpoint");
  }
  if (adamw_) adamw_->load(dir + "/optimizer.bin");
}

}  // namespace lt
