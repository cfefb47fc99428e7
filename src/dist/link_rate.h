// The rate of the data-parallel ranks' link as their gradient sums see it, measured at the
// start of a run that plans (plan/data_parallel.h times the exchange with it) when the
// hardware profile does not give links.network_gbps.
#pragma once

#include <cstdint>

#include "dist/communicator.h"

namespace lt {

// Bytes per second rank 0 receives while every other rank's `floats` floats are summed
// into it (Communicator::reduce_to_in_rank_order, what a gradient sum runs): the median
// of three timed sums after a warm-up, the same value on every rank. Every rank calls it.
double measure_rank_link_bw(Communicator& comm, int64_t floats = int64_t(8) << 20);

}  // namespace lt
