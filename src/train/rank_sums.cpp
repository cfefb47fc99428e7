#include "train/rank_sums.h"

#include <vector>

#include "exec/streaming_executor.h"
#include "kernels/kernel_table.h"

namespace lt {

RankSums sum_over_ranks(Communicator& comm, const OptimizerShards& shards, ModelParameters& grads, double loss_sum,
                        bool reduced) {
  RankSums out;
  if (shards.ranks <= 1) {
    if (!reduced) comm.sum_in_rank_order(grads.data(), grads.numel());
    out.loss_sum = comm.sum_in_rank_order(loss_sum);
    out.grad_sq_sum = ordered_grad_sq_sum(grads);  // the streaming executor's order
    return out;
  }
  if (!reduced) comm.reduce_scatter_in_rank_order(grads.data(), shards.bounds);
  // One round for the norm's terms and the loss: each term is non-zero on its owner only,
  // so its sum over the ranks is the owner's term, exactly.
  std::vector<double> sums;
  for (const GradSqTerm& t : ordered_grad_sq_terms(grads))
    sums.push_back(shards.owner_of(t.offset) == comm.rank()
                       ? cpu_kernel_table().sum_of_squares(grads.data() + t.offset, t.numel)
                       : 0.0);
  sums.push_back(loss_sum);
  comm.sum_in_rank_order(sums.data(), static_cast<int64_t>(sums.size()));
  for (size_t i = 0; i + 1 < sums.size(); ++i) out.grad_sq_sum += sums[i];
  out.loss_sum = sums.back();
  return out;
}

void queue_target_sum(BackgroundCollectives& background, const OptimizerShards& owners, bool to_all,
                      ModelParameters& grads, const UpdateTarget& t) {
  const auto ranges = target_ranges(grads, t);
  const int owner = owners.owner_of(ranges.front().first);
  background.queue_reduce(owner, grads.data(), ranges);
  if (to_all) background.queue_broadcast(owner, grads.data(), ranges);
}

}  // namespace lt
