// The NVMe tier: slots of a fixed size in one preallocated file (OffloadFile), read and
// written asynchronously through io_uring with O_DIRECT.
//
// Contract for callers (the executor):
//  - offsets inside a slot are multiples of kAlignment (4096), and so are buffer
//    addresses (HostPool and ComputeArena-at-4096-offsets buffers qualify);
//  - `bytes` may be anything: O_DIRECT needs whole blocks, so the store moves
//    round_up(bytes, 4096) and the buffer must have that capacity (HostBuffer::capacity()).
//    A write sends the buffer's padding too; a read overwrites the padding. The logical
//    size is the caller's to keep;
//  - a buffer must stay alive and untouched until its request is waited for (or polled
//    done); a failed write leaves its source buffer as it was, so nothing is lost;
//  - misuse (misaligned, out of the slot, unknown ticket) is an LT_ASSERT.
//
// Requests are cut into chunks of options.chunk_bytes (1 MiB), and up to
// options.queue_depth chunks (8) are in flight at once, over all requests, FIFO. One
// worker thread per store owns the ring: it submits and reaps, so transfers progress while
// the caller computes.
//
// Errors: a failed chunk (negative cqe res) or a short transfer fails its request with an
// lt::Error naming the file, the file offset, the slot and the errno text; it is thrown
// by wait()/poll() on that ticket, or by wait_all(). The rest of a failed request is not
// submitted. A failure nobody waited for is printed on stderr by the destructor, never
// dropped. If io_uring is unavailable (seccomp in containers, kernel.io_uring_disabled)
// the constructor throws an lt::Error that says so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace lt {

struct NvmeSlot {
  std::string name;
  size_t bytes = 0;
};

struct NvmeStoreOptions {
  std::filesystem::path dir;         // --offload-dir
  unsigned queue_depth = 8;          // chunks in flight
  size_t chunk_bytes = size_t{1} << 20;  // a multiple of kAlignment
  bool direct_io = true;             // false: buffered I/O (tests; filesystems without O_DIRECT)
};

// Why io_uring cannot be used here (a ring is set up and torn down), or "" where it can:
// for callers that would rather plan without the NVMe tier than fail (bench gpu).
std::string io_uring_unavailable_reason();

class NvmeStore {
 public:
  static constexpr size_t kAlignment = 4096;
  using Ticket = uint64_t;

  // Checks the directory and its free space for the whole plan, then preallocates.
  NvmeStore(std::vector<NvmeSlot> slots, NvmeStoreOptions options);
  // Waits for requests in flight (their buffers may still be written), drops queued ones,
  // then removes the file. Never throws.
  ~NvmeStore();
  NvmeStore(const NvmeStore&) = delete;
  NvmeStore& operator=(const NvmeStore&) = delete;

  Ticket write(size_t slot, size_t offset, const void* src, size_t bytes);
  Ticket read(size_t slot, size_t offset, void* dst, size_t bytes);
  // True when the request is finished (the ticket is then retired); throws its lt::Error
  // if it failed.
  bool poll(Ticket ticket);
  // Blocks until the request is finished, then retires it; throws its lt::Error if it failed.
  void wait(Ticket ticket);
  // Waits for every outstanding request; throws the first failure (all are retired).
  void wait_all();
  size_t outstanding() const;  // requests not yet retired

  size_t slot_count() const;
  size_t slot_index(const std::string& name) const;  // asserts it exists
  const NvmeSlot& slot(size_t i) const;
  const std::string& file_path() const;
  size_t file_bytes() const;
  bool direct_io() const;  // false if the filesystem refused O_DIRECT
  const NvmeStoreOptions& options() const;

  static size_t round_up(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace lt
