#include "dist/background_reducer.h"

#include <chrono>
#include <utility>

#include "core/error.h"
#include "dist/communicator.h"

namespace lt {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

BackgroundReducer::BackgroundReducer(Communicator& comm) : comm_(comm), thread_([this] { run(); }) {
  LT_ASSERT(comm.serialized_threads() || comm.size() == 1, "a background reducer without MPI_THREAD_SERIALIZED");
}

BackgroundReducer::~BackgroundReducer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Only after an error can jobs remain (wait() empties the queue): the caller is
    // unwinding and will end the ranks. The sum in flight finishes (the other ranks' threads
    // still meet it); the rest is dropped.
    jobs_.clear();
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void BackgroundReducer::queue(int owner, float* data, std::vector<std::pair<int64_t, int64_t>> ranges) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back({owner, data, std::move(ranges)});
  }
  changed_.notify_all();
}

void BackgroundReducer::wait() {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return (jobs_.empty() && !busy_) || error_; });
  waited_seconds_ += seconds_since(t0);
  if (error_) {
    jobs_.clear();
    std::rethrow_exception(std::exchange(error_, nullptr));
  }
}

void BackgroundReducer::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, nothing left
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    busy_ = true;
    lock.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    std::exception_ptr error;
    try {
      for (auto [offset, numel] : job.ranges) comm_.reduce_to_in_rank_order(job.owner, job.data + offset, numel, scratch_);
    } catch (...) {
      error = std::current_exception();
    }
    const double spent = seconds_since(t0);
    lock.lock();
    busy_seconds_ += spent;
    busy_ = false;
    if (error) {
      error_ = error;
      jobs_.clear();  // the ranks no longer meet: the rest cannot run
    }
    changed_.notify_all();
  }
}

}  // namespace lt
