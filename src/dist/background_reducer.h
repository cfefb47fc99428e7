// Gradient sums that run under backward (issue 29, item 2): as each part of the model's
// gradient becomes final, the trainer queues its sum to the rank that owns that part, and
// a background thread runs the queue (Communicator::reduce_to_in_rank_order) while the
// compute threads go on with the next layer's backward. Every rank queues the same parts
// in the same order, so the ranks' threads meet part after part.
//
// The thread makes every MPI call between the first queue() of a step and wait(); the
// caller makes none then (MPI_THREAD_SERIALIZED). The summed parts must not be written by
// the caller until wait() returns; the other gradients may be.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace lt {

class Communicator;

class BackgroundReducer {
 public:
  // comm must outlive this and support serialized threads (Communicator::serialized_threads).
  explicit BackgroundReducer(Communicator& comm);
  ~BackgroundReducer();  // finishes the sum in flight, drops the queue, stops the thread
  BackgroundReducer(const BackgroundReducer&) = delete;
  BackgroundReducer& operator=(const BackgroundReducer&) = delete;

  // Queues the sum over ranks of data[offset, offset + numel) for each range, to `owner`.
  void queue(int owner, float* data, std::vector<std::pair<int64_t, int64_t>> ranges);
  // Returns once everything queued is summed; rethrows the thread's error, if any.
  void wait();

  // Since construction: the seconds the thread spent summing (waiting for other ranks
  // included), and the seconds wait() blocked. busy - waited of it ran under the caller's
  // compute.
  double busy_seconds() const { return busy_seconds_; }
  double waited_seconds() const { return waited_seconds_; }

 private:
  struct Job {
    int owner;
    float* data;
    std::vector<std::pair<int64_t, int64_t>> ranges;
  };
  void run();

  Communicator& comm_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> jobs_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
  std::vector<float> scratch_;
  double busy_seconds_ = 0, waited_seconds_ = 0;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace lt
