// The optimizer step of the trainer: global-norm clipping from the summed squared
// gradient norm, the non-finite guard, and the update itself (hybrid 8-bit AdamW, fp32
// AdamW, or plain SGD), writing the bf16 compute copy in the same pass.
//
// Non-finite policy (shared/REFERENCE.md 1): a step whose gradients hold a NaN or Inf is
// skipped whole (no parameter or state changes), reported, and the run aborts with an
// lt::Error after kMaxNonFiniteInARow such steps in a row.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/parameters.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "train/optimizer_shards.h"
#include "train/train_config.h"

namespace lt {

class Communicator;

inline constexpr int kMaxNonFiniteInARow = 3;

struct UpdateResult {
  bool applied = false;     // false: skipped for non-finite gradients
  double grad_norm = 0;     // before clipping
  double lr = 0;
  float clip_factor = 1.0f;
  int64_t optimizer_step = 0;  // AdamW's 1-based step count for this update
};

// Where Updater::update_range finds tensors that lie outside the blocks it is given (a
// paged layer's, in its NVMe slot's host staging): by a tensor's offset in the block, its
// fp32 parameters (null, or no function: in the parameter block), its gradients
// (likewise, in the gradient block) and where its bf16 copy goes (likewise, in the
// compute copy given).
struct TensorPlaces {
  std::function<float*(int64_t offset)> params;
  std::function<const float*(int64_t offset)> grads;
  std::function<bf16*(int64_t offset)> copy;
};

class Updater {
 public:
  // paged_layers: decoder layers whose optimizer states the caller keeps (the streaming
  // executor pages them from NVMe); their tensors are AdamW paged tensors.
  // comm: the data-parallel ranks, or null. With more than one rank and cfg.shard_optimizer
  // "on", this rank keeps the optimizer states of its part of the model only
  // (optimizer_shards.h; the other tensors are AdamW paged tensors that are never stepped),
  // and save/load exchange states with the other ranks.
  Updater(const TrainConfig& cfg, const ModelParameters& params, const std::vector<int>& paged_layers = {},
          Communicator* comm = nullptr);

  // grad_sq_sum: the sum of squares of all gradients (float64). compute_copy: the bf16
  // mirror of the parameter block to refresh (null for fp32 compute). step is 1-based.
  // The same as decide() then update_range() over this rank's part (the whole block unless
  // sharded).
  UpdateResult apply(ModelParameters& params, const ModelParameters& grads, double grad_sq_sum,
                     bf16* compute_copy, int64_t step);

  // The ranks' parts (one part, the whole block, unless sharded) and this rank's.
  bool sharded() const { return shards_.ranks > 1; }
  const OptimizerShards& shards() const { return shards_; }
  int64_t owned_offset() const { return shards_.offset(rank_); }
  int64_t owned_numel() const { return shards_.numel(rank_); }

  // The lazy optimizer's two halves. decide(): the clip factor, learning rate and
  // non-finite verdict of a step (counted, and the abort after three, as apply() does).
  // update_range(): the update that decision makes to the tensors whose parameters lie in
  // [offset, offset + numel) of the block (whole tensors; nothing when !d.applied), in any
  // order and in pieces, bitwise as apply() would. paged_state: the bytes of those
  // tensors' states, in tensor order (layer_state_bytes() of them), when they are paged.
  // places: where tensors outside `params` and `grads` lie (null: none do).
  UpdateResult decide(double grad_sq_sum, int64_t step);
  void update_range(ModelParameters& params, const ModelParameters& grads, int64_t offset, int64_t numel,
                    const UpdateResult& d, bf16* compute_copy, std::span<std::byte> paged_state = {},
                    const TensorPlaces* places = nullptr);
  // A paged layer's state bytes: the largest layer's (0 without AdamW; a hybrid model's
  // layers differ), and layer j's own; attach/detach them for save and load.
  size_t layer_state_bytes() const;
  size_t layer_state_bytes(int layer) const;
  void attach_layer_state(int layer, std::byte* storage);
  void detach_layer_state(int layer);

  int64_t optimizer_steps() const { return optimizer_steps_; }
  int non_finite_in_a_row() const { return non_finite_in_a_row_; }
  int64_t non_finite_total() const { return non_finite_total_; }
  size_t state_bytes() const { return adamw_ ? adamw_->state_bytes() : 0; }
  size_t resident_state_bytes() const { return adamw_ ? adamw_->resident_state_bytes() : 0; }

  // Optimizer state and counters, bit-exact (optimizer.bin + the counters in JSON).
  // With paging, the paged layers' states pass through one staging buffer a layer at a
  // time: read() fills it before save writes the layer, write() persists it after load
  // filled it (so host memory holds one layer's state, not all of them).
  // Sharded, every rank calls save at once: rank 0 writes the one optimizer.bin of the
  // whole model, receiving each tensor's state from its owner in turn (one tensor's state
  // staged at a time), and the others send theirs (dir is not used there). load reads that
  // file on every rank and keeps the rank's own states, so a checkpoint resumes with any
  // number of ranks (and from one process).
  struct LayerPaging {
    std::function<void(int layer, std::span<std::byte> out)> read;
    std::function<void(int layer, std::span<const std::byte> in)> write;
  };
  void save(const std::string& dir, const LayerPaging* paging = nullptr) const;
  void load(const std::string& dir, const LayerPaging* paging = nullptr);

 private:
  TrainConfig cfg_;
  int params_layers_ = 0;  // decoder layers
  LrSchedule schedule_;
  std::vector<int> tensors_in(int64_t offset, int64_t numel) const;  // AdamW ids, ascending
  // An AdamW pager that stages whole layers through `staging` (see save/load); `current`
  // is the layer attached now (-1: none), for cleanup when the call throws.
  AdamWStatePager layer_pager(const LayerPaging& paging, AlignedBuffer<std::byte>& staging, int& current,
                              bool loading) const;
  // Calls `call` with such a pager over one staging buffer; detaches on an exception.
  void with_layer_pager(const LayerPaging& paging, bool loading,
                        const std::function<void(const AdamWStatePager&)>& call) const;
  std::vector<int> layer_tensors(int layer) const;

  // Sharded save and load: the states of the tensors of other ranks' parts.
  void send_owned_states() const;
  AdamWStatePager shard_pager(AlignedBuffer<std::byte>& staging, bool loading) const;

  Communicator* comm_ = nullptr;  // set when sharded
  int rank_ = 0;
  OptimizerShards shards_;
  std::unique_ptr<AdamW> adamw_;  // null for sgd
  std::vector<std::string> names_;
  std::vector<int64_t> offsets_, numels_;  // per tensor id: where its parameters lie in the block
  std::vector<int> layer_of_;              // per tensor id: its decoder layer, -1 for others
  int64_t optimizer_steps_ = 0;
  int non_finite_in_a_row_ = 0;
  int64_t non_finite_total_ = 0;
};


}  // namespace lt
