#include "memory/host_pool.h"

#include <cstring>
#include <utility>

#include "core/error.h"
#include "memory/compute_arena.h"  // format_bytes

namespace lt {

HostBuffer::HostBuffer(HostBuffer&& o) noexcept
    : pool_(std::exchange(o.pool_, nullptr)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      capacity_(std::exchange(o.capacity_, 0)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    pool_ = std::exchange(o.pool_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    capacity_ = std::exchange(o.capacity_, 0);
  }
  return *this;
}

HostBuffer::~HostBuffer() { reset(); }

void HostBuffer::reset() {
  if (data_) pool_->give_back(data_, capacity_);
  pool_ = nullptr;
  data_ = nullptr;
  size_ = capacity_ = 0;
}

HostPool::HostPool(std::string name, size_t capacity_bytes, BufferType& memory)
    : name_(std::move(name)), capacity_(capacity_bytes), memory_(memory) {
  LT_ASSERT(memory_.is_host() && memory_.alignment() % kAlignment == 0,
            "host pool '" + name_ + "' given " + memory_.name() + " memory, which is not host memory aligned to " +
                std::to_string(kAlignment));
}

HostPool::~HostPool() {
  LT_ASSERT(buffers_ == 0, "host pool '" + name_ + "' destroyed while " + std::to_string(buffers_) +
                               " of its buffers are alive");
}

HostBuffer HostPool::allocate(size_t bytes, const std::string& tag) {
  if (bytes == 0) return {};
  const size_t cap = memory_.round_up(bytes);
  {
    std::lock_guard lock(mu_);
    if (capacity_ > 0 && in_use_ + cap > capacity_)
      throw Error("host buffer '" + tag + "' of " + format_bytes(cap) + " does not fit: " +
                      format_bytes(in_use_) + " of the " + format_bytes(capacity_) +
                      " budget in use, short by " + format_bytes(in_use_ + cap - capacity_),
                  "host pool '" + name_ + "'", "raise the host memory budget or re-plan with less on the host tier");
    in_use_ += cap;  // reserved now so that two threads cannot both squeeze in
    ++buffers_;
    if (in_use_ > peak_) peak_ = in_use_;
  }
  auto unreserve = [&] {
    std::lock_guard lock(mu_);
    in_use_ -= cap;
    --buffers_;
  };
  std::byte* p = nullptr;
  try {
    p = memory_.allocate(cap);  // may throw lt::Error (a driver that refuses to pin)
  } catch (...) {
    unreserve();
    throw;
  }
  if (!p) {
    unreserve();
    throw Error("out of host memory allocating '" + tag + "' (" + format_bytes(cap) + ")",
                "host pool '" + name_ + "'", "lower the host budget or the batch size");
  }
  std::memset(p, 0, cap);
  return HostBuffer(this, p, bytes, cap);
}

void HostPool::give_back(std::byte* data, size_t capacity) noexcept {
  memory_.deallocate(data, capacity);
  std::lock_guard lock(mu_);
  in_use_ -= capacity;
  --buffers_;
}

size_t HostPool::bytes_in_use() const {
  std::lock_guard lock(mu_);
  return in_use_;
}

size_t HostPool::peak_bytes() const {
  std::lock_guard lock(mu_);
  return peak_;
}

size_t HostPool::buffers_in_use() const {
  std::lock_guard lock(mu_);
  return buffers_;
}

}  // namespace lt
