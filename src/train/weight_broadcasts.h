// The updated weights of a sharded optimizer (train/optimizer_shards.h) on their way to
// every rank, shared by both step engines. After each rank has updated its own part, each
// update target's owner sends the target's weights to all: on the background thread, one
// target after another in the order the next forward reads them (shards.targets: embed,
// layers 0..L-1, head), so that forward waits for a target only when it reaches it; or,
// where MPI allows no second thread, all at once and blocking (all_gather_parts). Once a
// target's weights are in, the bf16 compute copy of a target this rank did not update is
// refreshed from them (an owner's update writes its own).
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "dist/background_collectives.h"
#include "dist/communicator.h"
#include "model/parameters.h"
#include "plan/stream_schedule.h"
#include "train/optimizer_shards.h"

namespace lt {

class WeightBroadcasts {
 public:
  // background: null where MPI allows no second thread. compute_copy: the bf16 mirror of
  // params (null under fp32). All must outlive this.
  WeightBroadcasts(Communicator& comm, BackgroundCollectives* background, const OptimizerShards& shards,
                   ModelParameters& params, bf16* compute_copy);

  // After this rank updated its part: every target's weights go out from its owner.
  void send();
  // Target t's weights (shards.targets[i]) are in: waits for them when they are on the way.
  void arrived(const UpdateTarget& t);
  void arrived(size_t i);
  void all_arrived();

 private:
  void refresh_copy(size_t i);  // target i's bf16 copy, unless this rank updated it

  Communicator& comm_;
  BackgroundCollectives* background_;
  const OptimizerShards& shards_;
  ModelParameters& params_;
  bf16* compute_copy_;
  std::vector<int64_t> tickets_;  // per target: its broadcast's ticket, 0 when in
};

}  // namespace lt
