#include "exec/state_pager.h"

#include <cstring>

#include "core/error.h"
#include "memory/page_interior.h"

namespace lt {

StatePager::StatePager(const StreamSchedule& s, const StateSlotLayout& layout, HostPool& host)
    : s_(s), bytes_(layout.bytes), master_offset_(layout.master_offset), grad_offset_(layout.grad_offset) {
  slot_.assign(s.L, -1);
  read_.assign(s.L, {});
  write_.assign(s.L, {});
  grad_write_.assign(s.L, {});
  grad_bytes_.assign(s.L, 0);
  read_name_.assign(s.L, {});
  write_name_.assign(s.L, {});
  grad_name_.assign(s.L, {});
  for (int j = 0; j < s.L; ++j)
    if (!s.state_read_w.empty() && s.state_read_w[j] >= 0) {
      layers_.push_back(j);
      read_name_[j] = "os." + std::to_string(j) + " read";
      write_name_[j] = "os." + std::to_string(j) + " write";
      grad_name_[j] = "gs." + std::to_string(j) + " write";
      const bool masters = s.master_paged[j], grads = s.grad_write_w[j] >= 0;
      if ((masters && master_offset_ == 0) || (grads && grad_offset_ == 0))
        throw Error("the plan pages layer " + std::to_string(j) + "'s " + (masters ? "masters" : "gradients") +
                        ", and the executor was given no room for them in its slot",
                    "StreamingOptions::" + std::string(masters ? "master_offset" : "grad_offset"),
                    "set it where the plan pages them");
    }
  if (layers_.empty()) return;
  for (size_t offset : {master_offset_, grad_offset_})
    LT_ASSERT(offset % NvmeStore::kAlignment == 0 && offset < bytes_ + (offset == 0),
              "a part's offset in a paged slot");
  LT_ASSERT(master_offset_ == 0 || grad_offset_ == 0 || master_offset_ < grad_offset_, "the slot's parts in order");
  if (bytes_ == 0)
    throw Error("the plan pages " + std::to_string(layers_.size()) +
                    " layers' optimizer states from NVMe, but the executor was not given their size",
                "StreamingOptions::layer_state_bytes", "set it from the optimizer (AdamW::state_bytes)");
  for (int k = 0; k < s.state_slots; ++k)
    staging_.push_back(host.allocate(bytes_, "optimizer state staging " + std::to_string(k)));
  if (grad_offset_ == 0) return;
  for (int k = 0; k < kGradStaging; ++k)
    grad_staging_.push_back(host.allocate(bytes_ - grad_offset_, "paged gradient staging " + std::to_string(k)));
  // Layer j's buffer is free again once the nearest layer above it whose gradients page
  // and share it (j + 3 in the plan's rule) has been written, before j's backward adds
  // into it (or, on a separate compute tier, its drain lands there, later still).
  for (int j : layers_)
    for (int above = j + kGradStaging; above < s.L && s.grad_write_w[j] >= 0; above += kGradStaging)
      if (s.grad_write_w[above] >= 0) {  // its gradients page
        if (s.grad_write_w[above] >= s.backward_w[j])
          throw Error("the plan writes layer " + std::to_string(above) + "'s paged gradients in window " +
                          std::to_string(s.grad_write_w[above]) + ", not before layer " + std::to_string(j) +
                          "'s backward (window " + std::to_string(s.backward_w[j]) +
                          "), which reuses their host staging",
                      "plan (gs." + std::to_string(above) + ")", "plan again: the planner writes them in time");
        break;
      }
}

float* StatePager::grads_home(int layer, ModelParameters& grads) {
  if (!grads_paged(layer)) return nullptr;
  float* first = grads.block_base(layer);
  const PageSpan cover = page_cover(first, block_numel(grads.config(), layer) * sizeof(float));
  LT_ASSERT(cover.bytes <= bytes_ - grad_offset_, "layer " + std::to_string(layer) + "'s gradients outgrow its slot");
  return reinterpret_cast<float*>(grad_staging_[static_cast<size_t>(layer % kGradStaging)].data() +
                                  (reinterpret_cast<std::byte*>(first) - cover.begin));
}

size_t StatePager::write_bytes(int layer) const {
  const size_t end = grad_offset_ > 0 ? grad_offset_ : bytes_;  // the state and the masters
  return s_.master_paged[layer] || master_offset_ == 0 ? end : master_offset_;
}

void StatePager::add_nvme_slots(std::vector<NvmeSlot>& slots) {
  for (int j : layers_) {
    slot_[j] = static_cast<int>(slots.size());
    slots.push_back({"os." + std::to_string(j), bytes_});
  }
}

void StatePager::start_reads(int w, double now_s) {
  for (int j : layers_)
    if (s_.state_read_w[j] == w) {
      LT_ASSERT(store_ && read_[j].ticket == 0, "state read of layer " + std::to_string(j));
      read_[j] = {store_->read(slot_[j], 0, staging_[s_.state_slot[j]].data(), read_bytes(j)), now_s};
    }
}

std::span<std::byte> StatePager::acquire(int layer, const Done& done) {
  LT_ASSERT(paged(layer), "layer " + std::to_string(layer) + " is not paged");
  Request& r = read_[layer];
  LT_ASSERT(r.ticket != 0, "layer " + std::to_string(layer) + "'s state update before its read was issued");
  store_->wait(std::exchange(r.ticket, 0));
  if (done) done(read_name_[layer], r.issued_s, static_cast<double>(read_bytes(layer)));
  return staging_[s_.state_slot[layer]].span().first(bytes_);
}

void StatePager::start_writes(int w, double now_s) {
  for (int j : layers_)
    if (s_.state_write_w[j] == w) {
      LT_ASSERT(read_[j].ticket == 0, "layer " + std::to_string(j) + "'s state written back before its read ended");
      write_[j] = {store_->write(slot_[j], 0, staging_[s_.state_slot[j]].data(), write_bytes(j)), now_s};
    }
}

void StatePager::finish_writes(int w, const Done& done) {
  for (int j : layers_)
    if (s_.state_write_w[j] == w && write_[j].ticket != 0) {
      store_->wait(std::exchange(write_[j].ticket, 0));
      if (done) done(write_name_[j], write_[j].issued_s, static_cast<double>(write_bytes(j)));
    }
}

void StatePager::start_grad_writes(int w, ModelParameters& grads, double now_s) {
  if (grad_offset_ == 0) return;
  for (int j : layers_)
    if (s_.grad_write_w[j] == w) {
      LT_ASSERT(grad_write_[j].ticket == 0, "gradients of layer " + std::to_string(j) + " written twice");
      grad_bytes_[j] = page_cover(grads.block_base(j), block_numel(grads.config(), j) * sizeof(float)).bytes;
      std::byte* const from = grad_staging_[static_cast<size_t>(j % kGradStaging)].data();
      grad_write_[j] = {store_->write(slot_[j], grad_offset_, from, grad_bytes_[j]), now_s};
    }
}

void StatePager::finish_grad_writes(int w, const Done& done) {
  if (grad_offset_ == 0) return;
  for (int j : layers_)
    if (s_.grad_write_w[j] == w && grad_write_[j].ticket != 0) {
      store_->wait(std::exchange(grad_write_[j].ticket, 0));
      if (done) done(grad_name_[j], grad_write_[j].issued_s, static_cast<double>(grad_bytes_[j]));
    }
}

void StatePager::abandon() noexcept {
  for (auto& r : read_) r.ticket = 0;
  for (auto& r : write_) r.ticket = 0;
  for (auto& r : grad_write_) r.ticket = 0;
}

void StatePager::read_state(int layer, std::span<std::byte> out) {
  LT_ASSERT(paged(layer) && out.size() <= bytes_, "read_state of layer " + std::to_string(layer));
  HostBuffer& b = staging_[0];
  store_->wait(store_->read(slot_[layer], 0, b.data(), bytes_));
  std::memcpy(out.data(), b.data(), out.size());
}

void StatePager::write_state(int layer, std::span<const std::byte> in) {
  LT_ASSERT(paged(layer) && in.size() <= bytes_, "write_state of layer " + std::to_string(layer));
  HostBuffer& b = staging_[0];
  if (in.size() < bytes_) store_->wait(store_->read(slot_[layer], 0, b.data(), bytes_));  // keeps the rest
  std::memcpy(b.data(), in.data(), in.size());
  store_->wait(store_->write(slot_[layer], 0, b.data(), bytes_));
}

}  // namespace lt
