#include "memory/nvme_store.h"

#include <liburing.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/error.h"
#include "memory/compute_arena.h"  // format_bytes
#include "memory/offload_file.h"

namespace lt {

namespace {

struct Request {
  bool is_write = false;
  size_t slot = 0;
  uint64_t file_offset = 0;  // of the first byte
  std::byte* buf = nullptr;
  size_t length = 0;     // padded to kAlignment
  size_t next = 0;       // bytes handed to the ring so far
  unsigned in_flight = 0;
  bool done = false;
  std::string error;     // the failure at the lowest file offset, as an lt::Error message
  uint64_t error_at = 0;
};

struct Chunk {
  Request* request = nullptr;
  size_t offset = 0;  // within the request
  size_t length = 0;
};

}  // namespace

struct NvmeStore::Impl {
  NvmeStoreOptions options;
  std::vector<NvmeSlot> slots;
  std::vector<uint64_t> slot_offset;  // in the file, each slot padded to kAlignment
  std::unique_ptr<OffloadFile> file;
  io_uring ring{};
  bool ring_ready = false;

  mutable std::mutex mu;
  std::condition_variable work_cv, done_cv;
  std::unordered_map<Ticket, std::unique_ptr<Request>> requests;
  std::deque<Request*> pending;  // with chunks not yet submitted
  std::vector<Chunk> chunks;     // queue_depth records; user_data is the index
  std::vector<uint32_t> free_chunks;
  unsigned in_flight = 0;
  Ticket next_ticket = 1;
  bool stop = false;
  std::thread worker;

  void run();
  void fail(Request& r, const std::string& what, uint64_t file_offset, const std::string& fix);
  void complete(const io_uring_cqe& cqe);
  Ticket enqueue(bool is_write, size_t slot, size_t offset, std::byte* buf, size_t bytes);
  void retire_or_throw(Ticket t, std::unique_lock<std::mutex>& lock);
};

void NvmeStore::Impl::fail(Request& r, const std::string& what, uint64_t file_offset, const std::string& fix) {
  // Chunks complete in any order; report the lowest failing offset, the first bad byte.
  if (!r.error.empty() && file_offset >= r.error_at) return;
  r.error_at = file_offset;
  const uint64_t in_slot = file_offset - slot_offset[r.slot];
  r.error = Error(what, "offload file " + file->path() + " at offset " + std::to_string(file_offset) +
                            " (slot '" + slots[r.slot].name + "' + " + std::to_string(in_slot) + ")",
                  fix)
                .what();
}

void NvmeStore::Impl::complete(const io_uring_cqe& cqe) {
  Chunk& c = chunks[cqe.user_data];
  Request& r = *c.request;
  const uint64_t at = r.file_offset + c.offset;
  const char* op = r.is_write ? "write" : "read";
  const std::string fix = r.is_write
                              ? "check the disk behind --offload-dir (dmesg); the data is still in memory, "
                                "nothing saved was lost; rerun with another --offload-dir"
                              : "check the disk behind --offload-dir (dmesg) and that nothing else modified "
                                "the offload file; resume from the last checkpoint";
  if (cqe.res < 0)
    fail(r, std::string("NVMe ") + op + " of " + std::to_string(c.length) + " bytes failed: " + errno_text(-cqe.res),
         at, fix);
  else if (static_cast<size_t>(cqe.res) != c.length)
    fail(r, std::string("short NVMe ") + op + ": " + std::to_string(cqe.res) + " of " + std::to_string(c.length) +
                " bytes (the file was truncated or its filesystem changed behind lazytrain's back)",
         at, fix);
  --r.in_flight;
  --in_flight;
  free_chunks.push_back(static_cast<uint32_t>(cqe.user_data));
  if (r.in_flight == 0 && (r.next == r.length || !r.error.empty())) {
    r.done = true;
    done_cv.notify_all();
  }
}

void NvmeStore::Impl::run() {
  std::unique_lock lock(mu);
  unsigned unsubmitted = 0;  // prepared SQEs the kernel has not taken yet
  for (;;) {
    // Fill the ring up to the queue depth, FIFO over requests.
    while (!pending.empty() && !free_chunks.empty()) {
      Request* r = pending.front();
      if (stop || !r->error.empty() || r->next == r->length) {
        pending.pop_front();
        if (stop && r->error.empty() && r->next < r->length) r->error = "dropped: the NVMe store was destroyed";
        if (r->in_flight == 0 && !r->done) {  // nothing of it will complete: finish it here
          r->done = true;
          done_cv.notify_all();
        }
        continue;
      }
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      LT_ASSERT(sqe != nullptr, "io_uring submission queue full below the queue depth");
      const uint32_t ci = free_chunks.back();
      free_chunks.pop_back();
      const size_t n = std::min(options.chunk_bytes, r->length - r->next);
      chunks[ci] = {r, r->next, n};
      if (r->is_write)
        io_uring_prep_write(sqe, file->fd(), r->buf + r->next, static_cast<unsigned>(n), r->file_offset + r->next);
      else
        io_uring_prep_read(sqe, file->fd(), r->buf + r->next, static_cast<unsigned>(n), r->file_offset + r->next);
      sqe->user_data = ci;
      r->next += n;
      ++r->in_flight;
      ++in_flight;
      ++unsubmitted;
    }
    if (unsubmitted > 0) {
      lock.unlock();
      int s;
      do s = io_uring_submit(&ring); while (s == -EINTR);
      lock.lock();
      // EAGAIN/EBUSY: the kernel is short of resources for now; the SQEs stay queued and
      // are offered again after the next completion. I/O errors come in completions, not here.
      LT_ASSERT(s >= 0 || s == -EAGAIN || s == -EBUSY, "io_uring_submit failed: " + errno_text(-s));
      if (s > 0) unsubmitted -= std::min<unsigned>(static_cast<unsigned>(s), unsubmitted);
    }
    if (in_flight == 0) {
      if (stop) return;
      if (pending.empty()) work_cv.wait(lock, [&] { return stop || !pending.empty(); });
      continue;
    }
    if (in_flight == unsubmitted) {  // nothing in the kernel to wait for: back off, retry
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      lock.lock();
      continue;
    }
    // New requests arriving now wait for the next completion (at most one chunk's time).
    lock.unlock();
    io_uring_cqe* cqe = nullptr;
    int w;
    do w = io_uring_wait_cqe(&ring, &cqe); while (w == -EINTR);
    lock.lock();
    LT_ASSERT(w == 0, "io_uring_wait_cqe failed with chunks in flight: " + errno_text(-w));
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      complete(*cqe);
      ++seen;
    }
    io_uring_cq_advance(&ring, seen);
  }
}

NvmeStore::NvmeStore(std::vector<NvmeSlot> slots, NvmeStoreOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  LT_ASSERT(options.queue_depth >= 1, "queue depth must be at least 1");
  LT_ASSERT(options.chunk_bytes > 0 && options.chunk_bytes % kAlignment == 0 && options.chunk_bytes <= (1u << 30),
            "chunk size must be a positive multiple of 4096, at most 1 GiB");
  s.options = std::move(options);
  s.slots = std::move(slots);
  uint64_t total = 0;
  for (const NvmeSlot& sl : s.slots) {
    s.slot_offset.push_back(total);
    total += round_up(sl.bytes);
  }
  s.file = std::make_unique<OffloadFile>(s.options.dir, total, s.options.direct_io);

  const int err = io_uring_queue_init(s.options.queue_depth, &s.ring, 0);
  if (err < 0)
    throw Error("io_uring is not available: io_uring_queue_init failed with " + errno_text(-err),
                "NVMe store in " + s.options.dir.string(),
                "allow io_uring (Docker's default seccomp profile blocks io_uring_setup: run with a "
                "profile that allows it; check /proc/sys/kernel/io_uring_disabled is 0), or re-plan "
                "without the NVMe tier");
  s.ring_ready = true;
  s.chunks.resize(s.options.queue_depth);
  for (uint32_t i = 0; i < s.options.queue_depth; ++i) s.free_chunks.push_back(s.options.queue_depth - 1 - i);
  s.worker = std::thread([&s] { s.run(); });
}

NvmeStore::~NvmeStore() {
  Impl& s = *impl_;
  if (s.worker.joinable()) {
    {
      std::lock_guard lock(s.mu);
      s.stop = true;
    }
    s.work_cv.notify_all();
    s.worker.join();
  }
  if (s.ring_ready) io_uring_queue_exit(&s.ring);
  for (auto& [t, r] : s.requests)
    if (r->done && !r->error.empty() && r->error.rfind("dropped:", 0) != 0)
      std::fprintf(stderr, "lazytrain: NVMe store: an I/O error nobody waited for: %s\n", r->error.c_str());
  // impl_'s OffloadFile closes and removes the file.
}

NvmeStore::Ticket NvmeStore::Impl::enqueue(bool is_write, size_t slot, size_t offset, std::byte* buf, size_t bytes) {
  LT_ASSERT(slot < slots.size(), "NVMe slot " + std::to_string(slot) + " does not exist");
  const NvmeSlot& sl = slots[slot];
  LT_ASSERT(offset % kAlignment == 0, "NVMe offset " + std::to_string(offset) + " in slot '" + sl.name +
                                          "' is not a multiple of 4096");
  LT_ASSERT(offset <= sl.bytes && bytes <= sl.bytes - offset,
            "NVMe request [" + std::to_string(offset) + ", +" + std::to_string(bytes) + ") is outside slot '" +
                sl.name + "' of " + std::to_string(sl.bytes) + " bytes");
  LT_ASSERT(reinterpret_cast<uintptr_t>(buf) % kAlignment == 0 || bytes == 0,
            "NVMe buffer for slot '" + sl.name + "' is not 4096-aligned");
  auto r = std::make_unique<Request>();
  r->is_write = is_write;
  r->slot = slot;
  r->file_offset = slot_offset[slot] + offset;
  r->buf = buf;
  r->length = round_up(bytes);
  std::lock_guard lock(mu);
  LT_ASSERT(!stop, "NVMe request after the store began to shut down");
  const Ticket t = next_ticket++;
  if (r->length == 0) {
    r->done = true;
  } else {
    pending.push_back(r.get());
  }
  requests.emplace(t, std::move(r));
  work_cv.notify_one();
  return t;
}

NvmeStore::Ticket NvmeStore::write(size_t slot, size_t offset, const void* src, size_t bytes) {
  // The ring only reads from a write's buffer; const_cast keeps one request type.
  return impl_->enqueue(true, slot, offset, static_cast<std::byte*>(const_cast<void*>(src)), bytes);
}

NvmeStore::Ticket NvmeStore::read(size_t slot, size_t offset, void* dst, size_t bytes) {
  return impl_->enqueue(false, slot, offset, static_cast<std::byte*>(dst), bytes);
}

void NvmeStore::Impl::retire_or_throw(Ticket t, std::unique_lock<std::mutex>& lock) {
  auto it = requests.find(t);
  std::string error = std::move(it->second->error);
  requests.erase(it);
  if (!error.empty()) {
    lock.unlock();
    throw Error(error);
  }
}

bool NvmeStore::poll(Ticket ticket) {
  std::unique_lock lock(impl_->mu);
  auto it = impl_->requests.find(ticket);
  LT_ASSERT(it != impl_->requests.end(), "unknown or retired NVMe ticket " + std::to_string(ticket));
  if (!it->second->done) return false;
  impl_->retire_or_throw(ticket, lock);
  return true;
}

void NvmeStore::wait(Ticket ticket) {
  std::unique_lock lock(impl_->mu);
  auto it = impl_->requests.find(ticket);
  LT_ASSERT(it != impl_->requests.end(), "unknown or retired NVMe ticket " + std::to_string(ticket));
  Request* r = it->second.get();
  impl_->done_cv.wait(lock, [&] { return r->done; });
  impl_->retire_or_throw(ticket, lock);
}

void NvmeStore::wait_all() {
  std::unique_lock lock(impl_->mu);
  impl_->done_cv.wait(lock, [&] {
    for (auto& [t, r] : impl_->requests)
      if (!r->done) return false;
    return true;
  });
  std::string first;
  Ticket first_t = 0;
  for (auto& [t, r] : impl_->requests)
    if (!r->error.empty() && (first.empty() || t < first_t)) first = r->error, first_t = t;
  impl_->requests.clear();
  if (!first.empty()) {
    lock.unlock();
    throw Error(first);
  }
}

size_t NvmeStore::outstanding() const {
  std::lock_guard lock(impl_->mu);
  return impl_->requests.size();
}

std::string io_uring_unavailable_reason() {
  io_uring ring;
  const int err = io_uring_queue_init(1, &ring, 0);
  if (err < 0) return "io_uring_queue_init failed with " + errno_text(-err);
  io_uring_queue_exit(&ring);
  return "";
}

size_t NvmeStore::slot_count() const { return impl_->slots.size(); }

size_t NvmeStore::slot_index(const std::string& name) const {
  for (size_t i = 0; i < impl_->slots.size(); ++i)
    if (impl_->slots[i].name == name) return i;
  LT_ASSERT(false, "no NVMe slot named '" + name + "'");
  return 0;
}

const NvmeSlot& NvmeStore::slot(size_t i) const {
  LT_ASSERT(i < impl_->slots.size(), "NVMe slot " + std::to_string(i) + " does not exist");
  return impl_->slots[i];
}

const std::string& NvmeStore::file_path() const { return impl_->file->path(); }
size_t NvmeStore::file_bytes() const { return impl_->file->bytes(); }
bool NvmeStore::direct_io() const { return impl_->file->direct_io(); }
const NvmeStoreOptions& NvmeStore::options() const { return impl_->options; }

}  // namespace lt
