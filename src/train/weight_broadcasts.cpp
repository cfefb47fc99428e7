#include "train/weight_broadcasts.h"

#include "core/dtype.h"
#include "exec/streaming_executor.h"

namespace lt {

WeightBroadcasts::WeightBroadcasts(Communicator& comm, BackgroundCollectives* background,
                                   const OptimizerShards& shards, ModelParameters& params, bf16* compute_copy)
    : comm_(comm),
      background_(background),
      shards_(shards),
      params_(params),
      compute_copy_(compute_copy),
      tickets_(shards.targets.size(), 0) {}

void WeightBroadcasts::send() {
  if (!background_) {
    comm_.all_gather_parts(params_.data(), shards_.bounds);
    for (size_t i = 0; i < shards_.targets.size(); ++i) refresh_copy(i);
    return;
  }
  for (size_t i = 0; i < shards_.targets.size(); ++i)
    tickets_[i] =
        background_->queue_broadcast(shards_.owner[i], params_.data(), target_ranges(params_, shards_.targets[i]));
}

void WeightBroadcasts::arrived(const UpdateTarget& t) {
  switch (t.kind) {  // shards.targets: embed, layer 0..L-1, head
    case UpdateTarget::Kind::Embed: return arrived(size_t{0});
    case UpdateTarget::Kind::Layer: return arrived(static_cast<size_t>(t.layer) + 1);
    case UpdateTarget::Kind::Head: break;
  }
  arrived(static_cast<size_t>(params_.config().num_layers) + 1);
}

void WeightBroadcasts::arrived(size_t i) {
  if (tickets_[i] == 0) return;
  background_->wait(tickets_[i]);
  tickets_[i] = 0;
  refresh_copy(i);
}

void WeightBroadcasts::all_arrived() {
  for (size_t i = 0; i < tickets_.size(); ++i) arrived(i);
}

void WeightBroadcasts::refresh_copy(size_t i) {
  if (!compute_copy_ || shards_.owner[i] == comm_.rank()) return;
  for (auto [o, n] : target_ranges(params_, shards_.targets[i]))
    convert_f32_to_bf16(compute_copy_ + o, params_.data() + o, n);
}

}  // namespace lt
