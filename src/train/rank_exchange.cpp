#include "train/rank_exchange.h"

#include <algorithm>

#include "exec/streaming_executor.h"
#include "kernels/kernel_table.h"

namespace lt {

namespace {

// owners.targets: embed, layer 0..L-1, head.
size_t target_index(const UpdateTarget& t, const ModelParameters& params) {
  switch (t.kind) {
    case UpdateTarget::Kind::Embed: return 0;
    case UpdateTarget::Kind::Layer: return static_cast<size_t>(t.layer) + 1;
    case UpdateTarget::Kind::Head: break;
  }
  return static_cast<size_t>(params.config().num_layers) + 1;
}

}  // namespace

RankExchange::RankExchange(Communicator& comm, const Updater& updater, ModelParameters& params,
                           ModelParameters& grads, bf16* compute_copy)
    : comm_(comm),
      updater_(updater),
      params_(params),
      grads_(grads),
      compute_copy_(compute_copy),
      owners_(updater.sharded() ? updater.shards() : shard_optimizer(params, comm.size())),
      tickets_(owners_.targets.size(), 0) {
  LT_ASSERT(!updater.sharded() || updater.shards().ranks == comm.size(), "a sharded optimizer without its ranks");
  if (comm.serialized_threads()) background_ = std::make_unique<BackgroundCollectives>(comm);
}

void RankExchange::gradient_final(const UpdateTarget& t) {
  if (summed_on_compute_tier(t)) return;  // every rank drained the ranks' sum
  const auto ranges = target_ranges(grads_, t);
  const int owner = owners_.owner_of(ranges.front().first);
  background_->queue_reduce(owner, grads_.data(), ranges);
  if (!updater_.sharded()) background_->queue_broadcast(owner, grads_.data(), ranges);
}

int RankExchange::slot_sum_root(const UpdateTarget& t) const {
  return updater_.sharded() ? owners_.owner_of(target_ranges(grads_, t).front().first) : -1;
}

int64_t RankExchange::start_slot_sum(const UpdateTarget& t, float* slot, int64_t n) {
  const int root = slot_sum_root(t);
  if (!background_) {
    std::vector<float> scratch;
    if (root >= 0)
      comm_.reduce_to_in_rank_order(root, slot, n, scratch);
    else
      comm_.sum_in_rank_order(slot, n);
    return 0;
  }
  if (root >= 0) return background_->queue_reduce(root, slot, {{0, n}});
  const int owner = next_slot_owner_;
  next_slot_owner_ = (next_slot_owner_ + 1) % comm_.size();
  background_->queue_reduce(owner, slot, {{0, n}});
  return background_->queue_broadcast(owner, slot, {{0, n}});
}

void RankExchange::slot_sum_landed(int64_t ticket) {
  if (ticket != 0) background_->wait_beside(ticket);
}

RankSums RankExchange::sum(double loss_sum, bool gradients_queued) {
  RankSums out;
  bool summed = gradients_queued;  // every target's gradient summed where its update reads it
  if (gradients_queued) {
    background_->wait_all();  // each target's sum at its owner (or at every rank)
  } else if (compute_tier_sums_) {  // the embedding's only, to its owner (or to every rank)
    const UpdateTarget embed{UpdateTarget::Kind::Embed, -1};
    const int owner = owners_.owner_of(target_ranges(grads_, embed).front().first);
    std::vector<float> scratch;
    for (auto [o, n] : target_ranges(grads_, embed)) {
      if (updater_.sharded())
        comm_.reduce_to_in_rank_order(owner, grads_.data() + o, n, scratch);
      else
        comm_.sum_in_rank_order(grads_.data() + o, n);
    }
    summed = true;
  }
  if (!updater_.sharded()) {
    if (!summed) comm_.sum_in_rank_order(grads_.data(), grads_.numel());
    out.loss_sum = comm_.sum_in_rank_order(loss_sum);
    out.grad_sq_sum = ordered_grad_sq_sum(grads_);  // the streaming executor's order
    return out;
  }
  if (!summed) comm_.reduce_scatter_in_rank_order(grads_.data(), owners_.bounds);
  // One round for the norm's terms and the loss: each term is non-zero on its owner only,
  // so its sum over the ranks is the owner's term, exactly.
  std::vector<double> sums;
  for (const GradSqTerm& t : ordered_grad_sq_terms(grads_))
    sums.push_back(owners_.owner_of(t.offset) == comm_.rank()
                       ? cpu_kernel_table().sum_of_squares(grads_.data() + t.offset, t.numel)
                       : 0.0);
  sums.push_back(loss_sum);
  comm_.sum_in_rank_order(sums.data(), static_cast<int64_t>(sums.size()));
  for (size_t i = 0; i + 1 < sums.size(); ++i) out.grad_sq_sum += sums[i];
  out.loss_sum = sums.back();
  return out;
}

void RankExchange::send_weights() {
  if (!background_) {
    comm_.all_gather_parts(params_.data(), owners_.bounds);
    for (size_t i = 0; i < owners_.targets.size(); ++i) {
      tickets_[i] = 0;
      weights_in(i);
    }
    return;
  }
  for (size_t i = 0; i < owners_.targets.size(); ++i)
    tickets_[i] =
        background_->queue_broadcast(owners_.owner[i], params_.data(), target_ranges(params_, owners_.targets[i]));
}

void RankExchange::weights_needed(const UpdateTarget& t) {
  const size_t i = target_index(t, params_);
  if (tickets_[i] != 0) weights_in(i);
}

void RankExchange::all_weights_in() {
  for (size_t i = 0; i < tickets_.size(); ++i)
    if (tickets_[i] != 0) weights_in(i);
}

void RankExchange::weights_in(size_t i) {
  if (tickets_[i] != 0) background_->wait(tickets_[i]);
  tickets_[i] = 0;
  if (!compute_copy_ || owners_.owner[i] == comm_.rank()) return;
  for (auto [o, n] : target_ranges(params_, owners_.targets[i]))
    convert_f32_to_bf16(compute_copy_ + o, params_.data() + o, n);
}

double RankExchange::overlapped_seconds() const {
  return background_ ? std::max(0.0, background_->busy_seconds() - background_->waited_seconds()) : 0.0;
}

}  // namespace lt
