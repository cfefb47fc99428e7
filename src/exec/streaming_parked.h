// The executor's record of one offloaded boundary (private to exec/streaming_*.cpp).
#pragma once

#include <string>

#include "exec/streaming_executor.h"
#include "memory/host_pool.h"
#include "memory/nvme_store.h"

namespace lt {

// One offloaded boundary: its host part, its NVMe staging buffer and the NVMe request
// in flight (0: none).
struct StreamingExecutor::Parked {
  HostBuffer host;     // cpu_tokens rows
  HostBuffer staging;  // nvme_tokens rows, 4096-aligned for O_DIRECT
  size_t slot = 0;
  NvmeStore::Ticket write = 0, read = 0;
  bool nvme_rows_read = false;  // this step's NVMe read has landed in staging
  Backend::Event stored{};  // its copies out of the compute tier (store_boundary), until they land
  double write_issued_s = 0, read_issued_s = 0, store_issued_s = 0;
  // Trace names: a.<b>.out, a.<b>.in, a.<b>.nvme write, a.<b>.nvme read.
  std::string out_event, in_event, nvme_write_event, nvme_read_event;
};

}  // namespace lt
