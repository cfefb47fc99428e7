#include "dist/link_rate.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/error.h"

namespace lt {

double measure_rank_link_bw(Communicator& comm, int64_t floats) {
  LT_ASSERT(comm.size() > 1 && floats > 0, "measure_rank_link_bw: needs two ranks and some floats");
  std::vector<float> data(static_cast<size_t>(floats), 1.0f), scratch;
  std::vector<double> seconds;
  for (int round = 0; round < 4; ++round) {  // round 0 warms the buffers and connections up
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    comm.reduce_to_in_rank_order(0, data.data(), floats, scratch);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (round > 0) seconds.push_back(s);
  }
  std::sort(seconds.begin(), seconds.end());
  const double bytes = 4.0 * static_cast<double>(floats) * (comm.size() - 1);
  const double mine = comm.rank() == 0 ? bytes / std::max(seconds[1], 1e-9) : 0;
  return comm.sum_in_rank_order(mine);  // rank 0's, on every rank
}

}  // namespace lt
