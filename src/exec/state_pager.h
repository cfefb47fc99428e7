// The executor's side of optimizer-state paging (plan/state_paging.h): layers whose
// optimizer states live in NVMe slots (os.<j>) and come to a host staging slot only
// around their update. Per step, in plan windows:
//   start_reads(w)   window start: NVMe reads the plan issues in w, into their slots;
//   acquire(j)       just before layer j's update: waits for its read, gives its bytes;
//   start_writes(w)  after w's updates: write-backs the plan issues in w;
//   finish_writes(w) w's barrier: its write-backs are done, so their slots are free.
//
// The bytes are the optimizer's (AdamW paged tensors, optim/adamw.h); the pager only moves
// them. A new NVMe file reads as zeros, the optimizer's initial state, so nothing is
// written at setup. Not thread-safe: the executor's thread drives it.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "memory/host_pool.h"
#include "memory/nvme_store.h"
#include "model/parameters.h"
#include "plan/state_paging.h"
#include "plan/stream_schedule.h"

namespace lt {

// A paged layer's NVMe slot, the same for every paged layer: [optimizer state | fp32
// masters | gradients], each part from a multiple of 4096. A layer's read moves the prefix
// that holds its parts; its write-back, the state and (when they page) its masters.
struct StateSlotLayout {
  size_t bytes = 0;          // the whole slot (> 0 when the schedule pages any layer)
  size_t master_offset = 0;  // where the masters begin (0: no layer's page)
  size_t grad_offset = 0;    // where the gradients begin (0: no layer's page)
};

class StatePager {
 public:
  // Called when a request is waited for: (tensor name, seconds since the clock's origin
  // when it was issued, bytes), so the executor can trace it.
  using Done = std::function<void(const std::string& name, double issued_s, double bytes)>;

  StatePager(const StreamSchedule& s, const StateSlotLayout& layout, HostPool& host);
  bool active() const { return !layers_.empty(); }
  size_t layer_state_bytes() const { return bytes_; }

  // Appends the os.<j> slots to the NVMe store's list; attach() the store built from it.
  void add_nvme_slots(std::vector<NvmeSlot>& slots);
  void attach(NvmeStore* store) { store_ = store; }

  void start_reads(int w, double now_s);
  std::span<std::byte> acquire(int layer, const Done& done);
  void start_writes(int w, double now_s);
  void finish_writes(int w, const Done& done);
  // Paged gradients never reach the host gradient block: backward puts layer j's in one
  // of kGradStaging host buffers (grads_home(j): where its block's first gradient goes,
  // the buffer laid out as the pages covering the block, memory/page_interior.h's
  // page_cover), the plan's gs.<j> window (after its updates) writes those pages to its
  // slot from grad_offset on, and the read before the update brings them back to the
  // slot's staging, the block whole at the same offset from grad_offset as in the buffer.
  // Layer j uses buffer j % kGradStaging: the plan writes a paged layer's gradients before
  // the backward of the paged layer three below it (plan/state_paging.h), checked at setup.
  static constexpr int kGradStaging = StatePaging::kGradStagingLayers;  // what the plan reserves
  bool grads_paged(int layer) const { return paged(layer) && s_.grad_write_w[layer] >= 0; }
  float* grads_home(int layer, ModelParameters& grads);  // null: not paged
  void start_grad_writes(int w, ModelParameters& grads, double now_s);
  void finish_grad_writes(int w, const Done& done);
  void abandon() noexcept;  // after a failed step, once the store is drained

  bool paged(int layer) const { return layer >= 0 && layer < static_cast<int>(slot_.size()) && slot_[layer] >= 0; }
  // Between steps (checkpoints, re-plans): the first out.size() / in.size() bytes of a
  // paged layer's NVMe slot (at most layer_state_bytes(); a shorter write keeps the rest).
  void read_state(int layer, std::span<std::byte> out);
  void write_state(int layer, std::span<const std::byte> in);

 private:
  struct Request {
    NvmeStore::Ticket ticket = 0;
    double issued_s = 0;
  };
  const StreamSchedule& s_;
  size_t bytes_ = 0;
  std::vector<int> layers_;            // paged layers, ascending
  std::vector<int> slot_;              // per layer: NVMe slot index (-1: not paged)
  std::vector<HostBuffer> staging_;    // per staging slot
  std::vector<Request> read_, write_, grad_write_;  // per layer, in flight
  std::vector<HostBuffer> grad_staging_;             // kGradStaging buffers, once gradients page
  std::vector<size_t> grad_bytes_;                    // per layer: the bytes its gradients' write moves
  std::vector<std::string> read_name_, write_name_, grad_name_;  // per layer: its requests' trace names
  size_t master_offset_ = 0, grad_offset_ = 0;
  // What layer j's write-back after its update moves, and its read before it.
  size_t write_bytes(int layer) const;
  size_t read_bytes(int layer) const { return grads_paged(layer) ? bytes_ : write_bytes(layer); }
  NvmeStore* store_ = nullptr;
};

}  // namespace lt
