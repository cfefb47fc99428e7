#include "train/updater.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "dist/communicator.h"
#include "io/atomic_file.h"
#include "optim/grad_clip.h"
#include "train/checkpoints.h"

namespace lt {

namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
// Tensors without weight decay: norms and biases, and the Gated DeltaNet's per-head decay
// parameters (A_log, dt_bias), which decay would pull toward a fixed decay rate rather
// than toward zero weight (FLA's layers mark both no-weight-decay too).
bool is_norm_or_bias(const std::string& name) {
  return name.find("norm") != std::string::npos || ends_with(name, ".bias") || ends_with(name, ".dt_bias") ||
         ends_with(name, ".A_log");
}
}  // namespace

Updater::Updater(const TrainConfig& cfg, const ModelParameters& params, const std::vector<int>& paged_layers,
                 Communicator* comm)
    : cfg_(cfg), params_layers_(static_cast<int>(params.config().num_layers)) {
  const bool shard = comm && comm->size() > 1 && cfg.shard_optimizer == "on";
  LT_ASSERT(!shard || paged_layers.empty(), "a sharded optimizer with paged layers");
  if (shard) {
    comm_ = comm;
    rank_ = comm->rank();
  }
  schedule_.peak = cfg.lr;
  schedule_.min_ratio = cfg.min_lr_ratio;
  schedule_.warmup_steps = cfg.warmup_steps;
  schedule_.total_steps = cfg.steps;
  schedule_.validate();
  if (cfg.optimizer == "sgd") {  // no states: the ranks share the update's parameters
    shards_ = shard_optimizer(params, shard ? comm->size() : 1);
    return;
  }
  AdamWConfig ac;
  ac.hyper.beta1 = static_cast<float>(cfg.beta1);
  ac.hyper.beta2 = static_cast<float>(cfg.beta2);
  ac.hyper.eps = static_cast<float>(cfg.eps);
  ac.hyper.weight_decay = static_cast<float>(cfg.weight_decay);
  ac.eight_bit = cfg.optimizer == "adamw8";
  adamw_ = std::make_unique<AdamW>(ac);
  auto& p = const_cast<ModelParameters&>(params);
  const auto offset_of = [&](const WeightSpec& s) { return static_cast<int64_t>(p.tensor(s.hf_name) - p.data()); };
  // The ranks share the states' bytes (8-bit and fp32 states differ per parameter).
  std::vector<TensorCost> costs;
  for (const WeightSpec& s : params.specs())
    costs.push_back({offset_of(s), static_cast<double>(adamw_->state_bytes_for(s.numel()))});
  shards_ = shard_optimizer(params, shard ? comm->size() : 1, costs);
  for (const WeightSpec& s : params.specs()) {
    AdamWTensorOptions o;
    if (is_norm_or_bias(s.hf_name)) o.weight_decay = 0.0f;
    const int64_t offset = offset_of(s);
    int layer = -1;
    for (int j = 0; j < params.config().num_layers && layer < 0; ++j)
      if (offset >= p.block_base(j) - p.data() && offset < p.block_base(j) - p.data() + block_numel(params.config(), j))
        layer = j;
    o.paged = (layer >= 0 && std::find(paged_layers.begin(), paged_layers.end(), layer) != paged_layers.end()) ||
              shards_.owner_of(offset) != rank_;  // another rank's part: no state here
    adamw_->add_tensor(s.hf_name, s.numel(), o);
    names_.push_back(s.hf_name);
    offsets_.push_back(offset);
    numels_.push_back(s.numel());
    layer_of_.push_back(layer);
  }
}

std::vector<int> Updater::tensors_in(int64_t offset, int64_t numel) const {
  std::vector<int> ids;
  for (int id = 0; id < static_cast<int>(offsets_.size()); ++id)
    if (offsets_[id] >= offset && offsets_[id] < offset + numel) {
      LT_ASSERT(offsets_[id] + numels_[id] <= offset + numel, "update range splits tensor " + names_[id]);
      ids.push_back(id);
    }
  return ids;
}

std::vector<int> Updater::layer_tensors(int layer) const {
  std::vector<int> ids;
  for (int id = 0; id < static_cast<int>(layer_of_.size()); ++id)
    if (layer_of_[id] == layer) ids.push_back(id);
  return ids;
}

size_t Updater::layer_state_bytes() const {
  if (!adamw_ || layer_of_.empty()) return 0;
  size_t most = 0;  // a hybrid model's layers differ
  for (int j = 0; j < params_layers_; ++j) most = std::max(most, layer_state_bytes(j));
  return most;
}

size_t Updater::layer_state_bytes(int layer) const {
  size_t b = 0;
  for (int id : layer_tensors(layer)) b += adamw_ ? adamw_->state_bytes(id) : 0;
  return b;
}

void Updater::attach_layer_state(int layer, std::byte* storage) {
  for (int id : layer_tensors(layer)) {
    adamw_->attach_state(id, storage);
    storage += adamw_->state_bytes(id);
  }
}

void Updater::detach_layer_state(int layer) {
  for (int id : layer_tensors(layer)) adamw_->detach_state(id);
}

UpdateResult Updater::apply(ModelParameters& params, const ModelParameters& grads, double grad_sq_sum,
                            bf16* compute_copy, int64_t step) {
  const UpdateResult r = decide(grad_sq_sum, step);
  update_range(params, grads, owned_offset(), owned_numel(), r, compute_copy);
  return r;
}

UpdateResult Updater::decide(double grad_sq_sum, int64_t step) {
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
  r.optimizer_step = ++optimizer_steps_;
  return r;
}

void Updater::update_range(ModelParameters& params, const ModelParameters& grads, int64_t offset, int64_t numel,
                           const UpdateResult& d, bf16* compute_copy, std::span<std::byte> paged_state,
                           const TensorPlaces* places) {
  if (!d.applied) return;
  auto params_at = [&](int64_t off) {
    float* p = places && places->params ? places->params(off) : nullptr;
    return p ? p : params.data() + off;
  };
  auto grads_at = [&](int64_t off) {
    const float* g = places && places->grads ? places->grads(off) : nullptr;
    return g ? g : grads.data() + off;
  };
  auto copy_at = [&](int64_t off) -> bf16* {
    bf16* c = places && places->copy ? places->copy(off) : nullptr;
    return c ? c : compute_copy ? compute_copy + off : nullptr;
  };
  if (!adamw_) {  // plain SGD, over the whole range, or tensor by tensor where they lie
    const float scale = static_cast<float>(d.lr) * d.clip_factor;
    auto sgd = [&](int64_t off, int64_t n) {
      float* p = params_at(off);
      const float* g = grads_at(off);
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) p[i] -= scale * g[i];
      if (bf16* out = copy_at(off)) convert_f32_to_bf16(out, p, n);
    };
    if (!places) return sgd(offset, numel);
    for (const WeightSpec& s : params.specs())
      if (const int64_t off = params.tensor(s.hf_name) - params.data(); off >= offset && off < offset + numel)
        sgd(off, s.numel());
    return;
  }
  std::byte* state = paged_state.data();
  for (int id : tensors_in(offset, numel)) {
    if (adamw_->is_paged(id)) {
      LT_ASSERT(state && state + adamw_->state_bytes(id) <= paged_state.data() + paged_state.size(),
                "paged tensor " + names_[id] + " updated without its state");
      adamw_->attach_state(id, state);
      state += adamw_->state_bytes(id);
    }
    float* p = params_at(offsets_[id]);
    const float* g = grads_at(offsets_[id]);
    bf16* out = copy_at(offsets_[id]);
    adamw_->step_tensor(id, p, g, out, static_cast<float>(d.lr), d.clip_factor, d.optimizer_step);
    if (adamw_->is_paged(id)) adamw_->detach_state(id);
  }
}

AdamWStatePager Updater::layer_pager(const LayerPaging& paging, AlignedBuffer<std::byte>& staging, int& current,
                                     bool loading) const {
  AdamWStatePager pager;
  pager.page_in = [this, &paging, &staging, &current, loading](int id) {
    const int layer = layer_of_[id];
    LT_ASSERT(layer >= 0, "paged tensor " + names_[id] + " outside the decoder layers");
    if (layer == current) return;  // an earlier tensor of this layer attached it
    if (!loading) paging.read(layer, {staging.data(), staging.size()});  // load overwrites it whole
    const_cast<Updater*>(this)->attach_layer_state(layer, staging.data());
    current = layer;
  };
  pager.page_out = [this, &paging, &staging, &current](int id, bool modified) {
    const std::vector<int> ids = layer_tensors(layer_of_[id]);
    if (id != ids.back()) return;  // the layer's last tensor ends its turn
    if (modified) paging.write(current, {staging.data(), staging.size()});
    const_cast<Updater*>(this)->detach_layer_state(current);
    current = -1;
  };
  return pager;
}

void Updater::with_layer_pager(const LayerPaging& paging, bool loading,
                               const std::function<void(const AdamWStatePager&)>& call) const {
  AlignedBuffer<std::byte> staging(layer_state_bytes());
  int current = -1;
  try {
    call(layer_pager(paging, staging, current, loading));
  } catch (...) {
    // The layer in flight: a save's is intact on NVMe, a load's is half written and was
    // never persisted. Either way it must not stay attached to the dying buffer.
    if (current >= 0) const_cast<Updater*>(this)->detach_layer_state(current);
    throw;
  }
}

void Updater::send_owned_states() const {
  for (int id = 0; id < adamw_->num_tensors(); ++id)
    if (!adamw_->is_paged(id)) comm_->send(0, adamw_->state_data(id), static_cast<int64_t>(adamw_->state_bytes(id)));
}

AdamWStatePager Updater::shard_pager(AlignedBuffer<std::byte>& staging, bool loading) const {
  AdamWStatePager pager;
  // Another rank's tensor: save receives its state from the owner (which sends its
  // tensors in id order, the order AdamW pages them in); load gives it scratch to fill.
  pager.page_in = [this, &staging, loading](int id) {
    const size_t bytes = adamw_->state_bytes(id);
    if (staging.size() < bytes) staging = AlignedBuffer<std::byte>(bytes);
    if (!loading) comm_->recv(shards_.owner_of(offsets_[id]), staging.data(), static_cast<int64_t>(bytes));
    adamw_->attach_state(id, staging.data());
  };
  pager.page_out = [this](int id, bool) { adamw_->detach_state(id); };  // load: not ours to keep
  return pager;
}

void Updater::save(const std::string& dir, const LayerPaging* paging) const {
  if (sharded() && rank_ != 0) {  // rank 0 writes the files
    if (adamw_) send_owned_states();
    return;
  }
  if (adamw_ && sharded()) {
    LT_ASSERT(!paging, "a sharded optimizer with paged layers");
    AlignedBuffer<std::byte> staging;
    adamw_->save(dir + "/optimizer.bin", shard_pager(staging, false));
  } else if (adamw_) {
    if (!paging) {
      adamw_->save(dir + "/optimizer.bin");
    } else {
      with_layer_pager(*paging, false, [&](const AdamWStatePager& p) { adamw_->save(dir + "/optimizer.bin", p); });
    }
  }
  nlohmann::json j = {{"optimizer", cfg_.optimizer},
                      {"optimizer_steps", optimizer_steps_},
                      {"non_finite_in_a_row", non_finite_in_a_row_},
                      {"non_finite_total", non_finite_total_}};
  write_file_atomic(dir + "/optimizer_state.json", j.dump(2) + "\n");
}

void Updater::load(const std::string& dir, const LayerPaging* paging) {
  const std::string path = dir + "/optimizer_state.json";
  int64_t steps = 0, total = 0;
  int in_a_row = 0;
  try {
    const nlohmann::json j = nlohmann::json::parse(read_text_file(path));
    if (j.at("optimizer").get<std::string>() != cfg_.optimizer)
      throw Error("checkpoint was written by optimizer '" + j.at("optimizer").get<std::string>() +
                      "', this run uses '" + cfg_.optimizer + "'",
                  path, "resume with the same --optimizer");
    steps = checkpoint_count(j, "optimizer_steps", std::numeric_limits<int32_t>::max(), path);
    in_a_row = static_cast<int>(checkpoint_count(j, "non_finite_in_a_row", std::numeric_limits<int32_t>::max(), path));
    total = checkpoint_count(j, "non_finite_total", std::numeric_limits<int32_t>::max(), path);
  } catch (const nlohmann::json::exception& e) {
    throw Error("malformed optimizer state: " + std::string(e.what()), path, "use another checkpoint");
  }
  if (adamw_ && sharded()) {
    LT_ASSERT(!paging, "a sharded optimizer with paged layers");
    AlignedBuffer<std::byte> staging;
    adamw_->load(dir + "/optimizer.bin", shard_pager(staging, true));
  } else if (adamw_) {
    if (!paging) {
      adamw_->load(dir + "/optimizer.bin");
    } else {
      with_layer_pager(*paging, true, [&](const AdamWStatePager& p) { adamw_->load(dir + "/optimizer.bin", p); });
    }
  }
  // The counters change only once the states loaded.
  optimizer_steps_ = steps;
  non_finite_in_a_row_ = in_a_row;
  non_finite_total_ = total;
}

}  // namespace lt
