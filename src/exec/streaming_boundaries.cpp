// The streaming executor's boundary traffic: a boundary's parts leave the compute tier
// when it is produced (host memory, NVMe through host staging) and come back, after the
// part that stayed, for its backward use (streaming_executor.h).
#include <string>
#include <utility>

#include "exec/streaming_executor.h"
#include "exec/streaming_parked.h"

namespace lt {

float* StreamingExecutor::whole_boundary(ArenaTensor rows, int b) {
  float* r = buf(rows, b);
  const BoundarySchedule& bs = sched_.boundaries[b];
  if (!bs.offloaded() || bs.gpu_tokens == 0) return r;
  float* gpu = buf(ArenaTensor::BoundaryGpuPart, b);
  LT_ASSERT(gpu + bs.gpu_tokens * C_ == r, "boundary " + std::to_string(b) + "'s rows lie apart in the arena");
  return gpu;
}

float* StreamingExecutor::boundary_input(int b) {
  const BoundarySchedule& bs = sched_.boundaries[b];
  if (!bs.stored) return buf(ArenaTensor::Recomputed, b);
  return whole_boundary(bs.offloaded() ? ArenaTensor::Refetched : ArenaTensor::Boundary, b);
}

// Right after boundary b is produced: copy its non-compute parts out (the compute part
// stays where it is). The copies run after the window's kernels on a GPU (a copy waits for
// the compute issued before it), so the host waits for them only once its own work of the
// window is done too (finish_boundary_stores).
void StreamingExecutor::store_boundary(int b) {
  const BoundarySchedule& bs = sched_.boundaries[b];
  if (!bs.offloaded()) return;
  Parked& p = *parked_[b];
  const size_t row = static_cast<size_t>(C_) * sizeof(float);
  const std::byte* x = reinterpret_cast<const std::byte*>(whole_boundary(ArenaTensor::Boundary, b));
  p.store_issued_s = now();
  backend_.copy_to_host(p.host.data(), x + bs.cpu_row * row, bs.cpu_tokens * row);
  backend_.copy_to_host(p.staging.data(), x + bs.nvme_row * row, bs.nvme_tokens * row);
  p.nvme_rows_read = false;
  p.stored = backend_.record(Backend::Stream::D2H);
  storing_.push_back(b);
}

// The window's boundary copies out have landed: the host parts go on to NVMe.
void StreamingExecutor::finish_boundary_stores() {
  for (const int b : storing_) {
    const BoundarySchedule& bs = sched_.boundaries[b];
    Parked& p = *parked_[b];
    const size_t row = static_cast<size_t>(C_) * sizeof(float);
    backend_.wait_host(p.stored);
    event(p.out_event, ExecLane::D2H, p.store_issued_s, static_cast<double>((bs.cpu_tokens + bs.nvme_tokens) * row));
    if (bs.nvme_tokens > 0) {
      // The write runs on the store's thread; its event spans issue to the wait that retires it.
      p.write = nvme_->write(p.slot, 0, p.staging.data(), bs.nvme_tokens * row);
      p.write_issued_s = now();
    }
  }
  storing_.clear();
}

void StreamingExecutor::start_nvme_read(int b) {
  const BoundarySchedule& bs = sched_.boundaries[b];
  if (!bs.offloaded() || bs.nvme_tokens == 0) return;
  Parked& p = *parked_[b];
  // The read lands in the buffer the write sends from: the write must be done first.
  if (p.write) {
    nvme_->wait(std::exchange(p.write, 0));
    event(p.nvme_write_event, ExecLane::Nvme, p.write_issued_s,
          static_cast<double>(bs.nvme_tokens * C_ * sizeof(float)));
  }
  p.read_issued_s = now();
  p.read = nvme_->read(p.slot, 0, p.staging.data(), bs.nvme_tokens * static_cast<size_t>(C_) * sizeof(float));
}

// Brings back the rows of boundary b's fetch k (plan/stream_schedule.h) after those
// already back, first waiting for the NVMe read when the fetch takes NVMe rows.
void StreamingExecutor::fetch_boundary(int b, size_t k) {
  const BoundarySchedule& bs = sched_.boundaries[b];
  const BoundarySchedule::Fetch& f = bs.fetches[k];
  Parked& p = *parked_[b];
  const size_t row = static_cast<size_t>(C_) * sizeof(float);
  std::byte* r = reinterpret_cast<std::byte*>(whole_boundary(ArenaTensor::Refetched, b));
  if (f.nvme_to > f.nvme_from && !p.nvme_rows_read) {
    if (!p.read) start_nvme_read(b);
    nvme_->wait(std::exchange(p.read, 0));
    event(p.nvme_read_event, ExecLane::Nvme, p.read_issued_s, static_cast<double>(bs.nvme_tokens * row));
    p.nvme_rows_read = true;
  }
  const double t = now();
  const size_t cpu_rows = static_cast<size_t>(f.cpu_to - f.cpu_from), nvme_rows = static_cast<size_t>(f.nvme_to - f.nvme_from);
  backend_.copy_to_compute(r + (bs.cpu_row + f.cpu_from) * row, p.host.data() + f.cpu_from * row, cpu_rows * row);
  backend_.copy_to_compute(r + (bs.nvme_row + f.nvme_from) * row, p.staging.data() + f.nvme_from * row, nvme_rows * row);
  backend_.wait(Backend::Stream::Compute, backend_.record(Backend::Stream::H2D));
  event(p.in_event, ExecLane::H2D, t, static_cast<double>((cpu_rows + nvme_rows) * row));
}

}  // namespace lt
