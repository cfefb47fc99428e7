// What every backend gives the executor of its compute tier (exec/backend.h): memory at
// the asked alignment that holds what is written to it, fills, and copies inside the tier;
// and copies across the link that arrive once waited for. And a backend's host pinner: the
// executor pins each of its host buffers once, at setup, and unpins them when it goes.
#include <cstdint>
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
    Backend::ComputeMemory a = b->alloc_compute(n, 4096), c = b->alloc_compute(n, 4096);
    ASSERT_NE(a, nullptr) << name;
    ASSERT_NE(c, nullptr) << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.get()) % 4096, 0u) << name;
    b->fill_compute(a.get(), 0x5a, n);
    b->copy_within_compute(c.get(), a.get(), n);
    std::vector<std::byte> host(n), want(n, std::byte{0x5a});
    b->copy_to_host(host.data(), c.get(), n);
    b->wait_host(b->record(Backend::Stream::D2H));
    EXPECT_EQ(std::memcmp(host.data(), want.data(), n), 0) << name;
    // Across the link and back: what arrives is what was sent.
    for (size_t i = 0; i < n; ++i) host[i] = std::byte(i * 7);
    b->copy_to_compute(a.get(), host.data(), n);
    b->wait(Backend::Stream::Compute, b->record(Backend::Stream::H2D));
    std::vector<std::byte> back(n);
    b->copy_to_host(back.data(), a.get(), n);
    b->synchronize();
    EXPECT_EQ(std::memcmp(back.data(), host.data(), n), 0) << name;
    EXPECT_EQ(b->alloc_compute(0, 4096), nullptr) << name << ": nothing asked, nothing given";
  }
}

// A separate compute tier in host memory, whose copies finish when issued, and which
// counts what it is asked to pin.
class PinCountingBackend final : public Backend, public HostPinner {
 public:
  const char* name() const override { return "pin-counting"; }
  bool host_is_compute() const override { return false; }
  void copy_to_compute(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);  // an empty part may come with a null pointer
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void synchronize() override {}
  HostPinner* host_pinner() override { return this; }
  void pin(void*, size_t bytes) override {
    ++pins;
    pinned_bytes += bytes;
  }
  void unpin(void*, size_t bytes) noexcept override {
    ++unpins;
    pinned_bytes -= bytes;
  }
  int pins = 0, unpins = 0;
  size_t pinned_bytes = 0;
};

TEST(BackendComputeMemory, HostBuffersArePinnedOnceAtSetup) {
  const ModelConfig c = test::streaming_tiny_config(4);
  const Plan plan = streaming_test::offloading_milp_plan(c);
  ASSERT_TRUE(plan.feasible) << plan.infeasible_reason;
  PinCountingBackend backend;
  ModelParameters params(c), grads(c);
  test::init_parameters(params, 5);
  std::vector<int32_t> ids, labels;
  test::make_batch(ids, labels, streaming_test::kBatch * streaming_test::kSeq, c.vocab_size, 0);
  {
    StreamingOptions so;
    so.offload_dir = std::filesystem::temp_directory_path();
    so.direct_io = false;
    StreamingExecutor ex(plan, backend, so);
    const int at_setup = backend.pins;
    EXPECT_GT(at_setup, 0);
    EXPECT_EQ(backend.pinned_bytes, ex.host_peak_bytes());  // every host buffer, and only those
    for (int step = 0; step < 2; ++step) ex.step(params, grads, ids.data(), labels.data());
    EXPECT_EQ(backend.pins, at_setup) << "a step pinned memory";
    EXPECT_EQ(backend.unpins, 0);
  }
  EXPECT_EQ(backend.unpins, backend.pins);
  EXPECT_EQ(backend.pinned_bytes, 0u);
}

}  // namespace
}  // namespace lt
