// Collectives that run beside the compute (issue 29, item 2). Gradient sums under
// backward: as each part of the model's gradient becomes final, the trainer queues its sum
// to the rank that owns the part. Weights under forward: after the update, it queues each
// part's broadcast from its owner, and the next forward waits for a part only when it
// reaches it. A background thread runs the queue in order (Communicator's
// reduce_to_in_rank_order and broadcast); every rank queues the same jobs in the same
// order, so the ranks' threads meet job after job.
//
// The thread makes every MPI call while jobs are queued or running; the caller makes none
// then (MPI_THREAD_SERIALIZED): it calls wait_all() first. The memory of a queued job must
// not be touched by the caller until wait(its ticket) returns; other memory may be.
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

class BackgroundCollectives {
 public:
  // comm must outlive this and support serialized threads (Communicator::serialized_threads).
  explicit BackgroundCollectives(Communicator& comm);
  ~BackgroundCollectives();  // finishes the job in flight, drops the queue, stops the thread
  BackgroundCollectives(const BackgroundCollectives&) = delete;
  BackgroundCollectives& operator=(const BackgroundCollectives&) = delete;

  using Ranges = std::vector<std::pair<int64_t, int64_t>>;  // (offset, numel) in data
  // Queues the sum over ranks of data's ranges, to rank `owner` (reduce_to_in_rank_order);
  // or the broadcast of data's ranges from rank `owner` to all. Returns the job's ticket.
  int64_t queue_reduce(int owner, float* data, Ranges ranges);
  int64_t queue_broadcast(int owner, float* data, Ranges ranges);
  // Returns once the job of `ticket` (and every job before it) is done; wait_all: every job
  // queued. Rethrow the thread's error, if any.
  void wait(int64_t ticket);
  void wait_all() { wait(queued_); }
  // As wait(ticket), for another thread than the caller's, which it does not hold up (a
  // copy thread that a copy waits on): not counted in waited_seconds, and it throws
  // nothing (an error returns at once; the caller's next wait throws it).
  void wait_beside(int64_t ticket);

  // Since construction: the seconds the thread spent in jobs (waiting for other ranks
  // included), and the seconds wait() blocked. busy - waited of it ran under the caller's
  // compute.
  double busy_seconds() const { return busy_seconds_; }
  double waited_seconds() const { return waited_seconds_; }

 private:
  struct Job {
    bool reduce;  // else broadcast
    int owner;
    float* data;
    Ranges ranges;
  };
  int64_t queue(Job job);
  void run();

  Communicator& comm_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> jobs_;
  int64_t queued_ = 0, done_ = 0;  // tickets: job k is the k-th queued (1-based)
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<float> scratch_;
  double busy_seconds_ = 0, waited_seconds_ = 0;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace lt
