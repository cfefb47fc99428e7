// What every backend gives the executor of its compute tier (exec/backend.h): memory at
// its type's alignment that holds what is written to it, fills, and copies inside the
// tier; and copies across the link that arrive once waited for. And the executor takes
// its memory from the backend's two buffer types only: its arena as one block of the
// compute tier's, its host buffers from the host tier's (a GPU's pinned memory), all at
// setup, never per step, and all given back when it goes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "exec/backend.h"
#include "exec/streaming_executor.h"
#include "plan/planner.h"
#include "streaming_test_util.h"
#include "streaming_trajectory.h"

namespace lt {
namespace {

TEST(BackendComputeMemory, AllocFillAndCopyOnEveryBackend) {
  for (const char* name : {"cpu", "emu"}) {
    std::unique_ptr<Backend> b = make_backend(name);
    const size_t n = 10000;  // not a multiple of the alignment
    BufferType& compute = b->compute_memory();
    Buffer a(compute, n), c(compute, n);
    ASSERT_TRUE(a) << name;
    ASSERT_TRUE(c) << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % compute.alignment(), 0u) << name;
    EXPECT_GE(a.bytes(), n) << name;
    EXPECT_EQ(a.bytes() % compute.alignment(), 0u) << name;
    b->fill_compute(a.data(), 0x5a, n);
    b->copy_within_compute(c.data(), a.data(), n);
    std::vector<std::byte> host(n), want(n, std::byte{0x5a});
    b->copy_to_host(host.data(), c.data(), n);
    b->wait_host(b->record(Backend::Stream::D2H));
    EXPECT_EQ(std::memcmp(host.data(), want.data(), n), 0) << name;
    // Across the link and back: what arrives is what was sent.
    for (size_t i = 0; i < n; ++i) host[i] = std::byte(i * 7);
    b->copy_to_compute(a.data(), host.data(), n);
    b->wait(Backend::Stream::Compute, b->record(Backend::Stream::H2D));
    std::vector<std::byte> back(n);
    b->copy_to_host(back.data(), a.data(), n);
    b->synchronize();
    EXPECT_EQ(std::memcmp(back.data(), host.data(), n), 0) << name;
    EXPECT_FALSE(Buffer(compute, 0)) << name << ": nothing asked, nothing given";
    // The host tier's memory is host memory fit for O_DIRECT I/O (HostPool's promise).
    EXPECT_TRUE(b->host_tier_memory().is_host()) << name;
    EXPECT_EQ(b->host_tier_memory().alignment() % HostPool::kAlignment, 0u) << name;
  }
}

// Host memory that counts the blocks it hands out and takes back, as a GPU's pinned
// memory would be the one to watch.
class CountingMemory final : public BufferType {
 public:
  explicit CountingMemory(size_t alignment) : alignment_(alignment) {}
  const char* name() const override { return "counting"; }
  size_t alignment() const override { return alignment_; }
  bool is_host() const override { return true; }
  std::byte* allocate(size_t bytes) override {  // bytes: a multiple of alignment_, as aligned_alloc needs
    ++allocations;
    bytes_held += bytes;
    return static_cast<std::byte*>(std::aligned_alloc(alignment_, bytes));
  }
  void deallocate(std::byte* block, size_t bytes) noexcept override {
    ++deallocations;
    bytes_held -= bytes;
    std::free(block);
  }
  int allocations = 0, deallocations = 0;
  size_t bytes_held = 0;

 private:
  size_t alignment_;
};

// A separate compute tier in host memory, whose copies finish when issued, and whose two
// kinds of memory count what is taken.
class CountingBackend final : public Backend {
 public:
  const char* name() const override { return "counting"; }
  bool host_is_compute() const override { return false; }
  void copy_to_compute(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);  // an empty part may come with a null pointer
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void synchronize() override {}
  BufferType& compute_memory() override { return compute; }
  BufferType& host_tier_memory() override { return host; }
  CountingMemory compute{256}, host{4096};  // 256: what cudaMalloc guarantees
};

TEST(BackendComputeMemory, ExecutorTakesItsMemoryFromTheBackendOnceAtSetup) {
  const ModelConfig c = test::streaming_tiny_config(4);
  const Plan plan = streaming_test::offloading_milp_plan(c);
  ASSERT_TRUE(plan.feasible) << plan.infeasible_reason;
  CountingBackend backend;
  ModelParameters params(c), grads(c);
  test::init_parameters(params, 5);
  std::vector<int32_t> ids, labels;
  test::make_batch(ids, labels, streaming_test::kBatch * streaming_test::kSeq, c.vocab_size, 0);
  {
    StreamingOptions so;
    so.offload_dir = std::filesystem::temp_directory_path();
    so.direct_io = false;
    StreamingExecutor ex(plan, backend, so);
    // The arena: one block of compute memory, its planned extent rounded to the type's alignment.
    EXPECT_EQ(backend.compute.allocations, 1);
    EXPECT_EQ(backend.compute.bytes_held, backend.compute.round_up(ex.arena_bytes()));
    const int host_at_setup = backend.host.allocations;
    EXPECT_GT(host_at_setup, 0);
    EXPECT_EQ(backend.host.bytes_held, ex.host_peak_bytes());  // every host buffer, and only those
    for (int step = 0; step < 2; ++step) ex.step(params, grads, ids.data(), labels.data());
    EXPECT_EQ(backend.compute.allocations, 1) << "a step took compute memory";
    EXPECT_EQ(backend.host.allocations, host_at_setup) << "a step took host memory";
    EXPECT_EQ(backend.host.deallocations, 0);
  }
  for (const CountingMemory* m : {&backend.compute, &backend.host}) {
    EXPECT_EQ(m->deallocations, m->allocations) << m->name();
    EXPECT_EQ(m->bytes_held, 0u);
  }
}

}  // namespace
}  // namespace lt
