#include "dist/background_collectives.h"

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

BackgroundCollectives::BackgroundCollectives(Communicator& comm) : comm_(comm), thread_([this] { run(); }) {
  LT_ASSERT(comm.serialized_threads() || comm.size() == 1, "background collectives without MPI_THREAD_SERIALIZED");
}

BackgroundCollectives::~BackgroundCollectives() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Only after an error can jobs remain (the caller waits for all before it makes other
    // calls): it is unwinding and will end the ranks. The job in flight finishes (the other
    // ranks' threads still meet it); the rest is dropped.
    jobs_.clear();
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

int64_t BackgroundCollectives::queue_reduce(int owner, float* data, Ranges ranges) {
  return queue({true, owner, data, std::move(ranges)});
}

int64_t BackgroundCollectives::queue_broadcast(int owner, float* data, Ranges ranges) {
  return queue({false, owner, data, std::move(ranges)});
}

int64_t BackgroundCollectives::queue(Job job) {
  int64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
    ticket = ++queued_;
  }
  changed_.notify_all();
  return ticket;
}

void BackgroundCollectives::wait(int64_t ticket) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return done_ >= ticket || error_; });
  waited_seconds_ += seconds_since(t0);
  if (error_) std::rethrow_exception(error_);  // every later wait fails too: the ranks no longer meet
}

void BackgroundCollectives::wait_beside(int64_t ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return done_ >= ticket || error_; });
}

void BackgroundCollectives::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, nothing left
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    std::exception_ptr error;
    try {
      for (auto [offset, numel] : job.ranges) {
        if (job.reduce)
          comm_.reduce_to_in_rank_order(job.owner, job.data + offset, numel, scratch_);
        else
          comm_.broadcast(job.owner, job.data + offset, numel);
      }
    } catch (...) {
      error = std::current_exception();
    }
    const double spent = seconds_since(t0);
    lock.lock();
    busy_seconds_ += spent;
    if (error) {
      error_ = error;
      jobs_.clear();
    } else {
      ++done_;
    }
    changed_.notify_all();
  }
}

}  // namespace lt
