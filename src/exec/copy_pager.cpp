#include "exec/copy_pager.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "memory/page_interior.h"

namespace lt {

namespace {

[[noreturn]] void bad_copy_plan(int j, const std::string& what) {
  throw Error("the plan pages layer " + std::to_string(j) + "'s bf16 copy, but " + what, "plan (cp." + std::to_string(j) + ")",
              "plan again: the planner keeps a paged copy's windows apart");
}

}  // namespace

CopyPager::CopyPager(const StreamSchedule& s, const ModelConfig& c, HostPool& host) : s_(s), c_(c) {
  on_nvme_.assign(s.L, false);
  slot_.assign(s.L, -1);
  write_.assign(s.L, {});
  read_.assign(s.L, {});
  write_name_.assign(s.L, {});
  read_name_.assign(s.L, {});
  for (int j = 0; j < s.L; ++j) {
    if (s.copy_write_w.empty() || s.copy_write_w[j] < 0) continue;
    on_nvme_[j] = true;
    layers_.push_back(j);
    write_name_[j] = "cp." + std::to_string(j) + " write";
    read_name_[j] = "cp." + std::to_string(j) + " read";
  }
  if (layers_.empty()) return;
  // The pages a layer's copy covers, wherever the compute copy puts it: one more than its bytes need.
  bytes_ = NvmeStore::round_up(static_cast<size_t>(max_block_numel(c)) * sizeof(bf16)) + NvmeStore::kAlignment;
  for (int k = 0; k < kCopyStaging; ++k) staging_.push_back(host.allocate(bytes_, "paged bf16 copy " + std::to_string(k)));
  for (int j : layers_) {
    // Its own windows: no recompute reads it, and it is back before its backward uses it.
    if (s.recompute_w[j] >= 0) bad_copy_plan(j, "a recompute window reads it");
    const int use = s.bwd_load_w[j] >= 0 ? std::min(s.bwd_load_w[j], s.backward_w[j]) : s.backward_w[j];
    if (s.copy_read_w[j] >= use) bad_copy_plan(j, "it is read back in window " + std::to_string(s.copy_read_w[j]) +
                                                      ", not before its backward uses it (window " + std::to_string(use) + ")");
    const int forward_done = std::max({s.forward_w[j], s.copy_write_w[j], s.fwd_load_w.empty() ? -1 : s.fwd_load_w[j]});
    // The paged layer above that shares its buffer.
    for (int above = j + kCopyStaging; above < s.L; above += kCopyStaging) {
      if (!on_nvme_[above]) continue;
      if (s.update_w[1 + above] <= forward_done)
        bad_copy_plan(j, "layer " + std::to_string(above) + "'s update (window " + std::to_string(s.update_w[1 + above]) +
                             ") reuses its host buffer before its forward is done (window " +
                             std::to_string(forward_done) + ")");
      if (s.copy_read_w[j] <= s.backward_w[above])
        bad_copy_plan(j, "it comes back (window " + std::to_string(s.copy_read_w[j]) + ") into the host buffer of layer " +
                             std::to_string(above) + " before that layer's backward is done (window " +
                             std::to_string(s.backward_w[above]) + ")");
      break;
    }
  }
}

void CopyPager::add_nvme_slots(std::vector<NvmeSlot>& slots) {
  for (int j : layers_) {
    slot_[j] = static_cast<int>(slots.size());
    slots.push_back({"cp." + std::to_string(j), bytes_});
  }
}

void CopyPager::begin_step(ModelParameters& params, const bf16* compute_copy) {
  if (!active()) return;
  if (!compute_copy)
    throw Error("the plan pages bf16 copies, but the step has no bf16 compute copy", "StepOptions::compute_copy",
                "train with --precision bf16, or plan this run again");
  if (first_.empty())
    for (int j = 0; j < s_.L; ++j) first_.push_back(params.block_base(j) - params.data());
  copy_ = compute_copy;
}

PageSpan CopyPager::cover(int layer) const {
  auto* first = const_cast<bf16*>(copy_ + first_[static_cast<size_t>(layer)]);
  const PageSpan c = page_cover(first, static_cast<size_t>(block_numel(c_, layer)) * sizeof(bf16));
  LT_ASSERT(c.bytes <= bytes_, "layer " + std::to_string(layer) + "'s bf16 copy outgrows its buffer");
  return c;
}

bf16* CopyPager::home(int layer) {
  if (!paged(layer)) return nullptr;
  LT_ASSERT(copy_, "paged bf16 copy of layer " + std::to_string(layer) + " outside a step");
  const auto* first = reinterpret_cast<const std::byte*>(copy_ + first_[static_cast<size_t>(layer)]);
  return reinterpret_cast<bf16*>(buffer(layer) + (first - cover(layer).begin));
}

void CopyPager::start(bool write, int w, double now_s) {
  std::vector<Request>& requests = write ? write_ : read_;
  for (int j : layers_)
    if ((write ? s_.copy_write_w : s_.copy_read_w)[j] == w) {
      LT_ASSERT(store_ && requests[j].ticket == 0, "bf16 copy transfer of layer " + std::to_string(j));
      const size_t bytes = cover(j).bytes;
      const NvmeStore::Ticket t = write ? store_->write(slot_[j], 0, buffer(j), bytes)
                                        : store_->read(slot_[j], 0, buffer(j), bytes);
      requests[j] = {t, now_s, bytes};
    }
}

void CopyPager::finish(std::vector<Request>& requests, const std::vector<std::string>& names,
                       const std::vector<int>& window, int w, const Done& done) {
  for (int j : layers_)
    if (window[j] == w && requests[j].ticket != 0) {
      store_->wait(std::exchange(requests[j].ticket, 0));
      if (done) done(names[j], requests[j].issued_s, static_cast<double>(requests[j].bytes));
    }
}

void CopyPager::finish_writes(int w, const Done& done) { finish(write_, write_name_, s_.copy_write_w, w, done); }
void CopyPager::finish_reads(int w, const Done& done) { finish(read_, read_name_, s_.copy_read_w, w, done); }

void CopyPager::abandon() noexcept {
  for (auto& r : write_) r.ticket = 0;
  for (auto& r : read_) r.ticket = 0;
}

}  // namespace lt
