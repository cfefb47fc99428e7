// What the streaming executor needs from a backend: the memory of its two tiers (the
// executor's arena is one block of the compute tier's), fills and copies inside the
// compute tier, the copies between the host tier and it on two streams, and events to
// order the streams and the host. The executor owns the plan walk, the arena
// layout and the NVMe tier (shared/DESIGN.md, "Backends").
//
// Copies are issued in the executor's window order and complete by the next
// synchronize() or an event waited for; a backend may run them asynchronously (emu: copy
// threads), so the executor never touches a destination before it has waited.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kernels/kernel_table.h"
#include "memory/buffer_type.h"

namespace lt {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // True when compute kernels may read host-tier tensors in place (weights and gradients
  // are then views of the host buffers, not copies into weight / gradient slots).
  virtual bool host_is_compute() const = 0;
  // Streams, as a GPU has them: the compute stream runs the kernels (and the fills and
  // copies inside the compute tier), the h2d stream the copies to the compute tier, the
  // d2h stream those back. Each runs its work in issue order, and a copy either way starts
  // after the compute work issued before it: a copy out reads what that compute wrote,
  // and a copy in may overwrite what it read (a slot freed and filled again). The executor
  // issues the copies a window overlaps before the window's kernels, so they run under
  // them; the compute stream waits for copies only through events (wait below).
  enum class Stream { Compute, H2D, D2H };
  virtual void copy_to_compute(void* dst, const void* src, size_t bytes) = 0;  // on H2D
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;     // on D2H
  // Waits for every copy issued so far.
  virtual void synchronize() = 0;
  // Events: record(s) marks the work issued on stream s so far (a CUDA event recorded
  // there); wait(s, e) makes the work issued on s from now on start after e's (a GPU waits
  // on the device, the host goes on); wait_host(e) returns once e's work is done. They let
  // the executor wait for the copies a window needs and leave later ones running under
  // the next window's compute. On cpu and emu the compute stream is the host's own thread,
  // so waiting on it is waiting on the host. Defaults: everything is done when issued.
  struct Event {
    Stream stream = Stream::Compute;
    uint64_t count = 0;  // the work issued on `stream` before it, in issue order
  };
  virtual Event record(Stream s) const { return {s, 0}; }
  virtual void wait(Stream s, Event e) {
    (void)s;
    wait_host(e);
  }
  virtual void wait_host(Event e) { (void)e; }
  // The work issued on copy stream s from now on starts once ready() has returned, which
  // runs in that stream's order beside the caller (emu: on the stream's copy thread); the
  // caller goes on. For work of another thread that a copy must wait for (the ranks' sum of
  // a gradient slot on the background thread before the slot drains). ready must not
  // throw. Default: ready() now, on the calling thread.
  virtual void wait_for(Stream s, std::function<void()> ready) {
    (void)s;
    ready();
  }
  // Bytes moved each way since construction (for the trace and bench predict).
  size_t h2d_bytes = 0, d2h_bytes = 0;

  // Seconds each link spent copying since construction: every copy from its start to its
  // end (not the time it waited in the queue), so bytes over busy time is the rate the
  // link really moved them at (train/replanner.h measures it per step). All zero when the
  // backend does not time its copies (cpu: no copies at all).
  struct LinkBusy {
    double h2d_s = 0, d2h_s = 0;
  };
  virtual LinkBusy link_busy() const { return {}; }
  // A layer or head window's kernels, as the executor issues them: compute_begin() before
  // the first, compute_issued(seconds) after the last, with the time the host took to issue
  // them (less its waits for copies), and compute_done(), which returns once they are done,
  // saying how long after compute_issued that was. A backend that plays a slower compute
  // tier (emu) stretches them by its factor; one whose kernels run asynchronously (cuda)
  // times them on its compute stream. Between compute_issued and compute_done the executor
  // runs the window's host work that its kernels do not read (optimizer updates), beside
  // them, and the window's times (the trace, the probe's layer times, the re-planner's
  // measures) keep the kernels' own apart from it. Default: kernels that ran as the host
  // issued them (0).
  virtual void compute_begin() {}
  virtual void compute_issued(double seconds) { (void)seconds; }
  virtual double compute_done() { return 0; }

  // The two kinds of memory the executor takes (memory/buffer_type.h): the compute
  // tier's, where its arena lives, and the host tier's, where its host buffers (its
  // HostPool) live, taken once at setup, never per step. Defaults: plain host RAM for both
  // (cpu, and emu, whose separate tier is host RAM playing device memory); a GPU's backend
  // gives device memory and pinned host memory (so that its copies run asynchronously).
  virtual BufferType& compute_memory() { return host_memory(); }
  // The compute tier's memory on the machine, in bytes: all of it, and what is free now.
  // Zeros where the compute tier is host RAM (cpu, emu: its size is a budget the user
  // gives, not the machine's); a GPU's backend reports its device's.
  struct Capacity {
    size_t total = 0, free = 0;
  };
  virtual Capacity compute_capacity() const { return {}; }
  virtual BufferType& host_tier_memory() { return host_memory(); }
  // Host memory the links copy from or to that the host tier did not hand out (the
  // parameters, their bf16 copy, the gradients: exec/host_pins.h) made as fast to copy as
  // the tier's own, for as long as the returned handle lives: a GPU's backend page-locks
  // it (cudaHostRegister), so that its copies run on the copy engines under compute
  // instead of being staged by the host one buffer at a time. Default: null, nothing to
  // do (the copies are memcpy already). lt::Error when the memory cannot be locked.
  class HostPin {
   public:
    virtual ~HostPin() = default;
  };
  virtual std::unique_ptr<HostPin> pin_host(void* p, size_t bytes) {
    (void)p;
    (void)bytes;
    return nullptr;
  }
  // What runs on the compute tier besides the kernels: the executor fills and copies
  // inside it through these. Defaults: memset/memcpy on the calling thread (the compute
  // tier is host memory); a GPU's backend runs them on its compute stream.
  virtual void fill_compute(void* dst, int byte, size_t bytes);
  virtual void copy_within_compute(void* dst, const void* src, size_t bytes);
  // The most compute-tier memory the kernels held at once outside the executor's arena
  // (the CUDA table's stream-ordered pool: KernelTable::PoolScratch) since the backend was
  // made or the last reset_kernel_scratch_peak(); a step's device peak is at most the
  // arena's plus this. Default: 0, the kernels take nothing there.
  virtual size_t kernel_scratch_peak() const { return 0; }
  virtual void reset_kernel_scratch_peak() {}
  // The kernels that run on the compute tier (kernels/kernel_table.h). Default: the CPU's
  // (cpu, and emu, whose compute tier is host RAM); a GPU's backend gives its own.
  virtual const KernelTable& kernels() const { return cpu_kernel_table(); }
  // For work another library orders against this backend's streams (NCCL's sums of the
  // gradient slots, dist/device_collectives.h: after the compute stream's backward, before
  // the D2H stream's drain): a stream's native handle (a cudaStream_t) and the device.
  // Null and -1 where the streams are host threads (cpu, emu): there such work runs on the
  // calling thread, or waits by wait_for.
  virtual void* native_stream(Stream s) const {
    (void)s;
    return nullptr;
  }
  virtual int device_index() const { return -1; }
};

// "cpu": the compute tier is host RAM; copies are memcpy, done when issued.
std::unique_ptr<Backend> make_cpu_backend();
// "emu": a separate compute arena, one copy thread per direction, each copy lasting at
// least bytes / (GB/s * 1e9) when the rate is > 0 (0: as fast as memcpy).
std::unique_ptr<Backend> make_emu_backend(double h2d_gbps = 0, double d2h_gbps = 0);

// The emu backend with its throttles exposed, so a test or a bench can change the machine
// it plays partway through a run. The setters are thread-safe and may be called while a
// step runs: a copy takes the link rate in force when its lane starts it (a copy already
// running keeps its own), a window its compute slowdown when its kernels end.
class EmuBackend : public Backend {
 public:
  // GB/s per direction; 0: as fast as memcpy. lt::Error for a negative rate.
  virtual void set_link_rates(double h2d_gbps, double d2h_gbps) = 0;
  // >= 1: each layer and head window's compute lasts this many times its kernels' time
  // (the backend sleeps the difference), as a slower compute tier would. 1: no slowdown.
  virtual void set_compute_slowdown(double factor) = 0;
  virtual double compute_slowdown() const = 0;
};
std::unique_ptr<EmuBackend> make_emu(double h2d_gbps = 0, double d2h_gbps = 0, double compute_slowdown = 1);
// Throws lt::Error for an unknown name (the list: cpu, emu, cuda). device: the CUDA
// device of a cuda backend (a data-parallel rank's own, by its place on its host).
std::unique_ptr<Backend> make_backend(const std::string& name, int device = 0);
// The kernel table the backend of this name runs (cpu, emu: the CPU's; cuda: the CUDA
// table), without making the backend: a plan made before it exists sizes the kernels'
// scratch with the table that will run them. lt::Error for an unknown name, and for cuda
// in a build without CUDA.
const KernelTable& backend_kernel_table(const std::string& name);

}  // namespace lt
