// The executor's side of paged bf16 copies (plan/state_paging.h, Plan::nvme_copy_layers).
// A paged layer's bf16 compute copy never lies in the compute copy: it lives in one of
// kCopyStaging host buffers (layer j's is j % 3), laid out as the pages covering the
// layer's part of the compute copy (memory/page_interior.h's page_cover), from its update,
// which writes it there (home()), through its forward, which reads it there; the plan's
// cp.<j> write puts it on NVMe meanwhile, and its cp.<j> read brings it back to the same
// buffer for its backward. Per step, in plan windows:
//   start_writes(w)  after w's updates: the copies the plan writes in w;
//   finish_writes(w) w's barrier: they are on NVMe;
//   start_reads(w)   w's start: the copies the plan reads in w;
//   finish_reads(w)  w's barrier: they are back, before any later window loads or reads them.
// The plan's windows keep a buffer's layers apart (checked at setup): layer j's forward is
// done before the update of the paged layer three above it, which reuses its buffer, and
// that layer's backward is done before j's copy comes back. Not thread-safe: the
// executor's thread drives it.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "memory/host_pool.h"
#include "memory/nvme_store.h"
#include "memory/page_interior.h"
#include "model/parameters.h"
#include "plan/state_paging.h"
#include "plan/stream_schedule.h"

namespace lt {

class CopyPager {
 public:
  using Done = std::function<void(const std::string& name, double issued_s, double bytes)>;
  static constexpr int kCopyStaging = StatePaging::kCopyStagingLayers;  // what the plan reserves

  CopyPager(const StreamSchedule& s, const ModelConfig& c, HostPool& host);
  bool active() const { return !layers_.empty(); }
  bool paged(int layer) const { return layer >= 0 && layer < static_cast<int>(on_nvme_.size()) && on_nvme_[layer]; }

  // Appends the cp.<j> slots to the NVMe store's list; attach() the store built from it.
  void add_nvme_slots(std::vector<NvmeSlot>& slots);
  void attach(NvmeStore* store) { store_ = store; }

  // The step's parameters and bf16 compute copy, whose page layout the buffers keep.
  void begin_step(ModelParameters& params, const bf16* compute_copy);
  // Where layer j's copy begins in its buffer; null for a layer that does not page.
  bf16* home(int layer);

  void start_writes(int w, double now_s) { start(true, w, now_s); }
  void finish_writes(int w, const Done& done);
  void start_reads(int w, double now_s) { start(false, w, now_s); }
  void finish_reads(int w, const Done& done);
  void abandon() noexcept;  // after a failed step, once the store is drained

 private:
  struct Request {
    NvmeStore::Ticket ticket = 0;
    double issued_s = 0;
    size_t bytes = 0;
  };
  PageSpan cover(int layer) const;  // the pages layer j's part of the compute copy covers
  void start(bool write, int w, double now_s);
  std::byte* buffer(int layer) { return staging_[static_cast<size_t>(layer % kCopyStaging)].data(); }
  void finish(std::vector<Request>& requests, const std::vector<std::string>& names, const std::vector<int>& window,
              int w, const Done& done);

  const StreamSchedule& s_;
  const ModelConfig& c_;
  std::vector<int64_t> first_;  // per layer: its first parameter's offset in the block
  const bf16* copy_ = nullptr;  // the step's compute copy
  std::vector<bool> on_nvme_;
  std::vector<int> layers_;     // paged, ascending
  std::vector<int> slot_;       // per layer: NVMe slot index (-1: none yet)
  size_t bytes_ = 0;            // a buffer and a slot: the most pages a layer's copy can cover
  std::vector<HostBuffer> staging_;
  std::vector<Request> write_, read_;  // per layer, in flight
  std::vector<std::string> write_name_, read_name_;
  NvmeStore* store_ = nullptr;
};

}  // namespace lt
