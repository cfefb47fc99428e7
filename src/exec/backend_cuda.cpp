// The cuda backend (exec/backend_cuda.h). Built with CUDA (LT_HAVE_CUDA: the CUDA block of
// the top CMakeLists.txt links the runtime in); without it only the two functions that
// say so are.
#include "exec/backend_cuda.h"

#include <cstdio>

#include "core/error.h"

#ifdef LT_HAVE_CUDA

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_kernel_table.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

namespace lt {
namespace {

constexpr const char* kWhere = "cuda backend";

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess)
    throw Error(std::string(call) + " failed: " + cudaGetErrorString(e), kWhere,
                "check that the GPU is visible (nvidia-smi) and not in use by another process; "
                "the message is the CUDA runtime's");
}
#define LT_CUDA(call) check((call), #call)

// Device memory: cudaMalloc's blocks (256-byte aligned), reached by copies and kernels only.
class DeviceMemory final : public BufferType {
 public:
  const char* name() const override { return "cuda_device"; }
  size_t alignment() const override { return 256; }
  bool is_host() const override { return false; }
  std::byte* allocate(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear it: the caller decides what "not there" means
      return nullptr;
    }
    check(e, "cudaMalloc");
    return static_cast<std::byte*>(p);
  }
  void deallocate(std::byte* block, size_t) noexcept override { cudaFree(block); }
};

// Pinned host memory: page-locked, so that cudaMemcpyAsync from and to it runs on the copy
// engines while the host goes on. Page-aligned (O_DIRECT reads land in it).
class PinnedHostMemory final : public BufferType {
 public:
  const char* name() const override { return "cuda_pinned"; }
  size_t alignment() const override { return 4096; }
  bool is_host() const override { return true; }
  std::byte* allocate(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw Error("could not pin " + std::to_string(bytes) + " bytes of host memory (" + cudaGetErrorString(e) + ")",
                  kWhere, "lower the host tier's size (--host-budget-gb) or free host memory");
    }
    return static_cast<std::byte*>(p);
  }
  void deallocate(std::byte* block, size_t) noexcept override { cudaFreeHost(block); }
};

// Host memory registered with the driver (cudaHostRegister) for as long as this lives.
class RegisteredHostMemory final : public Backend::HostPin {
 public:
  RegisteredHostMemory(void* p, size_t bytes) : p_(p) {
    const cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw Error("could not page-lock " + std::to_string(bytes) + " bytes of host memory (" +
                      cudaGetErrorString(e) + ")",
                  kWhere, "free host memory, or raise the locked-memory limit (ulimit -l)");
    }
  }
  ~RegisteredHostMemory() override { cudaHostUnregister(p_); }

 private:
  void* p_;
};

// Events to reuse: creating one costs a driver call, and the backend records several per
// copy.
class EventPool {
 public:
  explicit EventPool(unsigned flags) : flags_(flags) {}
  ~EventPool() {
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
  }
  cudaEvent_t take() {
    if (free_.empty()) {
      cudaEvent_t e;
      LT_CUDA(cudaEventCreateWithFlags(&e, flags_));
      return e;
    }
    cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }
  void give(cudaEvent_t e) { free_.push_back(e); }
  // An event recorded on s now (given back if the record fails).
  cudaEvent_t take_recorded(cudaStream_t s) {
    cudaEvent_t e = take();
    if (const cudaError_t err = cudaEventRecord(e, s); err != cudaSuccess) {
      give(e);
      check(err, "cudaEventRecord");
    }
    return e;
  }

 private:
  unsigned flags_;
  std::vector<cudaEvent_t> free_;
};

// The CUDA events that mark points of one stream, by the count of work issued on it
// before each (Backend::Event). Events whose work is done are recycled.
class StreamMarks {
 public:
  ~StreamMarks() {
    for (const Mark& m : marks_) cudaEventDestroy(m.event);
  }
  // The event at `count` on s (recorded now unless the newest mark is already there).
  void mark(cudaStream_t s, uint64_t count) {
    forget_done();
    if (count <= done_) return;  // find() answers "done" without an event
    if (!marks_.empty() && marks_.back().count == count) return;
    marks_.push_back({count, pool_.take_recorded(s)});
  }
  // The event at `count`, or null when its work is known to be done.
  cudaEvent_t find(uint64_t count) const {
    if (count <= done_) return nullptr;
    const auto it = std::lower_bound(marks_.begin(), marks_.end(), count,
                                     [](const Mark& m, uint64_t c) { return m.count < c; });
    LT_ASSERT(it != marks_.end() && it->count == count, "an event the cuda backend did not record");
    return it->event;
  }
  // Everything up to `count` is done (the host waited for it).
  void done_up_to(uint64_t count) {
    done_ = std::max(done_, count);
    while (!marks_.empty() && marks_.front().count <= done_) {
      pool_.give(marks_.front().event);
      marks_.pop_front();
    }
  }

 private:
  struct Mark {
    uint64_t count;
    cudaEvent_t event;
  };
  // The oldest marks whose work the device has finished, so the list stays as long as the
  // work in flight.
  void forget_done() {
    while (!marks_.empty() && cudaEventQuery(marks_.front().event) == cudaSuccess) done_up_to(marks_.front().count);
    (void)cudaGetLastError();  // cudaEventQuery's cudaErrorNotReady is not an error
  }
  std::deque<Mark> marks_;
  EventPool pool_{cudaEventDisableTiming};
  uint64_t done_ = 0;
};

// Each copy's own time on its stream, from a timing event recorded just before it to one
// just after (the first completes when the stream reaches the copy, not when it was
// issued), summed as the pairs complete.
class CopyTimer {
 public:
  ~CopyTimer() {
    for (const Pair& p : pending_) cudaEventDestroy(p.start), cudaEventDestroy(p.end);
  }
  cudaEvent_t start(cudaStream_t s) { return pool_.take_recorded(s); }
  void end(cudaStream_t s, cudaEvent_t started) {
    cudaEvent_t e;
    try {
      e = pool_.take_recorded(s);
    } catch (...) {
      abandon(started);
      throw;
    }
    pending_.push_back({started, e});
    collect(false);
  }
  // A start whose copy was never issued.
  void abandon(cudaEvent_t started) { pool_.give(started); }
  // Adds the finished pairs (all of them, waiting, when `wait`).
  double seconds(bool wait) {
    collect(wait);
    return busy_s_;
  }

 private:
  struct Pair {
    cudaEvent_t start, end;
  };
  void collect(bool wait) {
    while (!pending_.empty()) {
      const Pair p = pending_.front();
      if (wait)
        LT_CUDA(cudaEventSynchronize(p.end));
      else if (cudaEventQuery(p.end) != cudaSuccess)
        break;
      float ms = 0;
      LT_CUDA(cudaEventElapsedTime(&ms, p.start, p.end));
      busy_s_ += ms * 1e-3;
      pool_.give(p.start);
      pool_.give(p.end);
      pending_.pop_front();
    }
    (void)cudaGetLastError();
  }
  std::deque<Pair> pending_;
  EventPool pool_{cudaEventDefault};  // timing events
  double busy_s_ = 0;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    try {
      LT_CUDA(cudaSetDevice(device));
      for (cudaStream_t& s : streams_) LT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      LT_CUDA(cudaEventCreateWithFlags(&compute_issued_, cudaEventDisableTiming));
      for (cudaEvent_t* e : {&window_begin_, &window_end_}) LT_CUDA(cudaEventCreateWithFlags(e, cudaEventDefault));
      cuda::set_kernel_table_stream(stream(Stream::Compute));
      // The kernels' scratch pool keeps what it reserved: by default it gives memory back to
      // the driver at every synchronization, and every step (each wait for a layer's copies)
      // would map it again. The plan counts the most one call takes (KernelTable::PoolScratch).
      LT_CUDA(cudaDeviceGetDefaultMemPool(&pool_, device));
      uint64_t keep = UINT64_MAX;
      LT_CUDA(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));
      reset_kernel_scratch_peak();  // the pool is the device's: an earlier backend's calls are not this one's
    } catch (...) {
      release();  // no destructor runs after a constructor throws
      throw;
    }
  }
  ~CudaBackend() override { release(); }
  const char* name() const override { return "cuda"; }
  bool host_is_compute() const override { return false; }

  void copy_to_compute(void* dst, const void* src, size_t bytes) override {
    copy(Stream::H2D, dst, src, bytes, cudaMemcpyHostToDevice, h2d_timer_);
    h2d_bytes += bytes;
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    copy(Stream::D2H, dst, src, bytes, cudaMemcpyDeviceToHost, d2h_timer_);
    d2h_bytes += bytes;
  }
  void synchronize() override {
    std::lock_guard lock(mu_);
    for (Stream s : {Stream::H2D, Stream::D2H}) {
      LT_CUDA(cudaStreamSynchronize(stream(s)));
      marks(s).done_up_to(issued(s));
    }
  }

  Event record(Stream s) const override {
    std::lock_guard lock(mu_);
    // The compute stream also runs the kernels, which this backend does not count: each
    // record there is a point of its own.
    if (s == Stream::Compute) ++issued_[index(s)];
    if (issued(s) > 0) marks(s).mark(stream(s), issued(s));
    return {s, issued(s)};
  }
  void wait(Stream s, Event e) override {
    if (s == e.stream || e.count == 0) return;  // a stream runs its work in order
    std::lock_guard lock(mu_);
    if (cudaEvent_t ev = marks(e.stream).find(e.count)) LT_CUDA(cudaStreamWaitEvent(stream(s), ev, 0));
  }
  void wait_host(Event e) override {
    if (e.count == 0) return;
    std::lock_guard lock(mu_);
    if (cudaEvent_t ev = marks(e.stream).find(e.count)) LT_CUDA(cudaEventSynchronize(ev));
    marks(e.stream).done_up_to(e.count);
  }
  LinkBusy link_busy() const override {
    std::lock_guard lock(mu_);
    return {h2d_timer_.seconds(false), d2h_timer_.seconds(false)};
  }

  // Process-wide, like host_memory(): a block may outlive the backend that handed it out.
  BufferType& compute_memory() override {
    static DeviceMemory type;
    return type;
  }
  BufferType& host_tier_memory() override {
    static PinnedHostMemory type;
    return type;
  }
  std::unique_ptr<HostPin> pin_host(void* p, size_t bytes) override {
    if (!p || !bytes) return nullptr;
    return std::make_unique<RegisteredHostMemory>(p, bytes);
  }
  size_t kernel_scratch_peak() const override {
    // What the kernels' allocations held; the pool reserves it from the device in chunks of
    // its own, whose rounding up is in the cap's reserve (kDeviceReserveBytes).
    uint64_t high = 0;
    LT_CUDA(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &high));
    return static_cast<size_t>(high);
  }
  void reset_kernel_scratch_peak() override {
    uint64_t zero = 0;  // the driver resets a high-water mark to what is reserved now
    LT_CUDA(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero));
  }
  Capacity compute_capacity() const override {
    size_t free = 0, total = 0;
    LT_CUDA(cudaSetDevice(device_));
    LT_CUDA(cudaMemGetInfo(&free, &total));
    return {total, free};
  }
  // A window's kernels (backend.h), timed by events on the compute stream. The last
  // window's compute_done left it idle, but the window's own copies queued before
  // compute_begin (its weights, its boundary fetches) may hold it: the first event then
  // runs when they land, so the span is the kernels' own, without the wait for the copies
  // (as on emu, whose host waits for them before compute_begin). No lock: the stream is
  // fixed, and the other thread's copies must not wait behind these.
  void compute_begin() override {
    LT_CUDA(cudaEventRecord(window_begin_, stream(Stream::Compute)));
    window_issue_start_ = std::chrono::steady_clock::now();
    window_begun_ = true;
  }
  void compute_issued(double) override {
    LT_CUDA(cudaEventRecord(window_end_, stream(Stream::Compute)));
    window_issue_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - window_issue_start_).count();
    window_timed_ = std::exchange(window_begun_, false);  // both events recorded
  }
  double compute_done() override {
    LT_CUDA(cudaStreamSynchronize(stream(Stream::Compute)));
    if (!window_timed_) return 0;
    window_timed_ = false;
    float ms = 0;
    LT_CUDA(cudaEventElapsedTime(&ms, window_begin_, window_end_));
    return std::max(0.0, ms / 1e3 - window_issue_s_);  // the kernels' span past the host's issuing
  }
  void fill_compute(void* dst, int byte, size_t bytes) override {
    if (!bytes) return;
    std::lock_guard lock(mu_);
    LT_CUDA(cudaMemsetAsync(dst, byte, bytes, stream(Stream::Compute)));
    ++issued_[index(Stream::Compute)];
  }
  void copy_within_compute(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    std::lock_guard lock(mu_);
    LT_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream(Stream::Compute)));
    ++issued_[index(Stream::Compute)];
  }
  // The CUDA table (kernels/cuda/cuda_kernel_table.h), on the compute stream; the entries
  // it does not have yet are null.
  const KernelTable& kernels() const override { return cuda::kernel_table(); }
  void* native_stream(Stream s) const override { return stream(s); }
  int device_index() const override { return device_; }

 private:
  static int index(Stream s) { return static_cast<int>(s); }
  cudaStream_t stream(Stream s) const { return streams_[index(s)]; }
  // The streams and the event, once their work is done (those created: the constructor's
  // failure calls this too).
  void release() noexcept {
    if (stream(Stream::Compute)) cuda::release_kernel_table_stream(stream(Stream::Compute));
    cudaSetDevice(device_);
    for (cudaStream_t s : streams_)
      if (s) cudaStreamSynchronize(s);
    for (cudaEvent_t e : {compute_issued_, window_begin_, window_end_})
      if (e) cudaEventDestroy(e);
    for (cudaStream_t s : streams_)
      if (s) cudaStreamDestroy(s);
  }
  uint64_t issued(Stream s) const { return issued_[index(s)]; }
  StreamMarks& marks(Stream s) const { return marks_[index(s)]; }
  // After the compute work issued so far (backend.h; a CPU backend's compute is done when
  // issued, a GPU's may still run), then timed from its own start.
  void copy(Stream s, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, CopyTimer& timer) {
    if (!bytes) return;
    std::lock_guard lock(mu_);
    LT_CUDA(cudaEventRecord(compute_issued_, stream(Stream::Compute)));
    LT_CUDA(cudaStreamWaitEvent(stream(s), compute_issued_, 0));  // the record as of now
    cudaEvent_t started = timer.start(stream(s));
    if (const cudaError_t err = cudaMemcpyAsync(dst, src, bytes, kind, stream(s)); err != cudaSuccess) {
      timer.abandon(started);
      check(err, "cudaMemcpyAsync");
    }
    timer.end(stream(s), started);
    ++issued_[index(s)];
  }

  int device_;
  cudaMemPool_t pool_ = nullptr;  // the device's default pool, which cudaMallocAsync takes from
  cudaStream_t streams_[3] = {};
  mutable std::mutex mu_;  // the executor's thread and the gradient sink's may both issue
  mutable uint64_t issued_[3] = {};
  mutable StreamMarks marks_[3];
  mutable CopyTimer h2d_timer_, d2h_timer_;
  cudaEvent_t compute_issued_ = nullptr;  // re-recorded before each copy, which waits for it
  // A window's kernels: events around them, and the host's time issuing them.
  cudaEvent_t window_begin_ = nullptr, window_end_ = nullptr;
  std::chrono::steady_clock::time_point window_issue_start_{};
  double window_issue_s_ = 0;
  bool window_begun_ = false, window_timed_ = false;
};

std::string no_device_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("no CUDA device: ") + cudaGetErrorString(e);
  }
  if (n == 0) return "no CUDA device: the driver reports none";
  return "";
}

}  // namespace

std::string cuda_device_missing_reason() { return no_device_reason(); }

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

uint64_t cuda_device_pci_key(int device) {
  int domain = 0, bus = 0, slot = 0;
  if (device < 0 || device >= cuda_device_count() ||
      cudaDeviceGetAttribute(&domain, cudaDevAttrPciDomainId, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus, cudaDevAttrPciBusId, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&slot, cudaDevAttrPciDeviceId, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return 1 + (uint64_t(uint32_t(domain)) << 16 | uint64_t(bus & 0xff) << 8 | uint64_t(slot & 0xff));
}

std::string cuda_backend_unavailable_reason() {
  const std::string no_device = no_device_reason();
  if (!no_device.empty()) return no_device;
  const char* trial = std::getenv(kCudaTrialEnv);
  if (trial && std::string(trial) == "1") return "";
  return std::string("the cuda backend has not run a training step on a GPU yet: its pieces are built (memory, "
                     "streams, copies, events, every kernel the dense and hybrid layers call, the step's inputs in "
                     "pinned memory) but no step has been checked end to end; set ") +
         kCudaTrialEnv + "=1 to run it anyway, and compare its losses with --backend cpu";
}

const KernelTable& cuda_backend_kernel_table() { return cuda::kernel_table(); }

std::unique_ptr<Backend> make_cuda_backend(int device) {
  const std::string no_device = no_device_reason();
  if (!no_device.empty()) throw Error(no_device, kWhere, "run on a machine with an NVIDIA GPU and its driver");
  int n = 0;
  LT_CUDA(cudaGetDeviceCount(&n));
  if (device < 0 || device >= n)
    throw Error("no CUDA device " + std::to_string(device) + " (there are " + std::to_string(n) + ")", kWhere,
                "pick a device from 0 to " + std::to_string(n - 1));
  return std::make_unique<CudaBackend>(device);
}

}  // namespace lt

#else  // no CUDA in this build

namespace lt {

std::string cuda_backend_unavailable_reason() {
  return "this lazytrain was built without CUDA (CMake found no working nvcc, or LT_CUDA was OFF)";
}

std::string cuda_device_missing_reason() { return cuda_backend_unavailable_reason(); }

int cuda_device_count() { return 0; }

uint64_t cuda_device_pci_key(int) { return 0; }

std::unique_ptr<Backend> make_cuda_backend(int) {
  throw Error(cuda_backend_unavailable_reason(), "cuda backend",
              "install the CUDA toolkit (nvcc) and reconfigure; see the README's GPU section");
}

const KernelTable& cuda_backend_kernel_table() {
  throw Error(cuda_backend_unavailable_reason(), "cuda backend",
              "install the CUDA toolkit (nvcc) and reconfigure; see the README's GPU section");
}

}  // namespace lt

#endif

namespace lt {

std::string pci_address(uint64_t key) {
  const uint64_t place = key - 1;
  char text[32];
  std::snprintf(text, sizeof text, "%04x:%02x:%02x", unsigned(place >> 16), unsigned(place >> 8 & 0xff),
                unsigned(place & 0xff));
  return text;
}

}  // namespace lt
