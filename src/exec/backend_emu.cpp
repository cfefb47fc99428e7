// The emu backend: the compute tier is an arena of its own (the executor's), and every
// byte crossing between it and the host goes through a copy thread, one per direction,
// FIFO, as cudaMemcpyAsync on an H2D and a D2H stream would. An optional throttle makes
// each copy last at least bytes / GB/s, so a small machine can play a GPU whose PCIe is
// slow next to its compute (an H800's ratio) and the simulator can be checked against it.
// A compute slowdown makes each layer window's kernels last longer (the executor reports
// their time through compute_issued; the host work the executor runs before compute_done
// goes on beside the stretch), for a compute tier slower than this CPU. Both can be
// changed while a run goes on (EmuBackend in exec/backend.h), and each lane times its
// copies (link_busy), so a run can measure the rates it really got.
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "exec/backend.h"

namespace lt {
namespace {

// One direction: a thread draining a FIFO of copies.
class CopyLane {
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
    std::function<void()> ready;  // set: not a copy, a wait (Backend::wait_for), untimed
  };

 public:
  explicit CopyLane(double bytes_per_s) : bw_(bytes_per_s), thread_([this] { run(); }) {}
  void set_rate(double bytes_per_s) { bw_.store(bytes_per_s); }
  double busy_s() const {
    std::lock_guard lock(mu_);
    return busy_s_;
  }
  ~CopyLane() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void push(void* dst, const void* src, size_t bytes) { push({dst, src, bytes, {}}); }
  void push_wait(std::function<void()> ready) { push({nullptr, nullptr, 0, std::move(ready)}); }
  void drain() {
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [this] { return pending_ == 0; });
  }
  uint64_t issued() const {
    std::lock_guard lock(mu_);
    return issued_;
  }
  // Until the first `fence` copies pushed are done (FIFO: they finish in order).
  void wait(uint64_t fence) {
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return issued_ - pending_ >= fence; });
  }

 private:
  void push(Copy c) {  // FIFO after what was pushed before
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(c));
      ++pending_;
      ++issued_;
    }
    cv_.notify_all();
  }
  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ with nothing left
      Copy c = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      if (c.ready) {
        c.ready();
        lock.lock();
        --pending_;
        done_cv_.notify_all();
        continue;
      }
      const auto t0 = std::chrono::steady_clock::now();
      const double bw = bw_.load();  // the rate when the copy starts
      std::memcpy(c.dst, c.src, c.bytes);
      if (bw > 0)  // the throttle: the copy ends no earlier than bytes / bandwidth
        std::this_thread::sleep_until(t0 + std::chrono::duration<double>(static_cast<double>(c.bytes) / bw));
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      lock.lock();
      busy_s_ += took;
      --pending_;
      done_cv_.notify_all();
    }
  }

  std::atomic<double> bw_;
  mutable std::mutex mu_;
  double busy_s_ = 0;  // the copies' own time, summed (under mu_)
  std::condition_variable cv_, done_cv_;
  std::deque<Copy> queue_;
  size_t pending_ = 0;
  uint64_t issued_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

double bytes_per_s(double gbps) {
  if (!(gbps >= 0))
    throw Error("a negative emu link bandwidth", "emu backend", "give GB/s > 0, or 0 for no throttle");
  return gbps * 1e9;
}

class Emu final : public EmuBackend {
 public:
  Emu(double h2d_bps, double d2h_bps, double slowdown) : h2d_(h2d_bps), d2h_(d2h_bps) { set_compute_slowdown(slowdown); }
  const char* name() const override { return "emu"; }
  bool host_is_compute() const override { return false; }
  void copy_to_compute(void* dst, const void* src, size_t bytes) override {
    if (bytes) h2d_.push(dst, src, bytes);
    h2d_bytes += bytes;
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes) d2h_.push(dst, src, bytes);
    d2h_bytes += bytes;
  }
  void synchronize() override {
    h2d_.drain();
    d2h_.drain();
  }
  // The compute stream is the caller's thread: what it issued is done when issued.
  Event record(Stream s) const override {
    return {s, s == Stream::H2D ? h2d_.issued() : s == Stream::D2H ? d2h_.issued() : 0};
  }
  void wait_host(Event e) override {
    if (e.stream == Stream::H2D) h2d_.wait(e.count);
    if (e.stream == Stream::D2H) d2h_.wait(e.count);
  }
  void wait_for(Stream s, std::function<void()> ready) override {
    if (s == Stream::Compute) return ready();  // the caller's thread
    (s == Stream::H2D ? h2d_ : d2h_).push_wait(std::move(ready));
  }
  LinkBusy link_busy() const override { return {h2d_.busy_s(), d2h_.busy_s()}; }
  // The kernels ran as the host issued them; a tier f times slower is busy (f - 1) times
  // longer, while the executor's host work goes on.
  void compute_issued(double seconds) override {
    const double f = slowdown_.load();
    stretch_s_ = f > 1 && seconds > 0 ? (f - 1) * seconds : 0;
    stretch_end_ = std::chrono::steady_clock::now() +
                   std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                       std::chrono::duration<double>(stretch_s_));
  }
  double compute_done() override {
    std::this_thread::sleep_until(stretch_end_);
    return stretch_s_;
  }

  void set_link_rates(double h2d_gbps, double d2h_gbps) override {
    const double h = bytes_per_s(h2d_gbps), d = bytes_per_s(d2h_gbps);
    h2d_.set_rate(h);
    d2h_.set_rate(d);
  }
  void set_compute_slowdown(double factor) override {
    if (!(factor >= 1) || !std::isfinite(factor))
      throw Error("emu compute slowdown " + std::to_string(factor) + " is below 1", "emu backend",
                  "give a factor >= 1 (1: compute at this CPU's speed)");
    slowdown_.store(factor);
  }
  double compute_slowdown() const override { return slowdown_.load(); }

 private:
  CopyLane h2d_, d2h_;
  std::atomic<double> slowdown_{1};
  // The window's stretch (compute_issued to compute_done, on the executor's thread).
  double stretch_s_ = 0;
  std::chrono::steady_clock::time_point stretch_end_{};
};

}  // namespace

std::unique_ptr<EmuBackend> make_emu(double h2d_gbps, double d2h_gbps, double compute_slowdown) {
  return std::make_unique<Emu>(bytes_per_s(h2d_gbps), bytes_per_s(d2h_gbps), compute_slowdown);
}

std::unique_ptr<Backend> make_emu_backend(double h2d_gbps, double d2h_gbps) { return make_emu(h2d_gbps, d2h_gbps); }

}  // namespace lt
