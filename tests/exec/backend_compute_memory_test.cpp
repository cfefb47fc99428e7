// What every backend gives the executor of its compute tier (exec/backend.h): memory at
// the asked alignment that holds what is written to it, fills, and copies inside the tier;
// and copies across the link that arrive once waited for.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "exec/backend.h"

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
    b->wait_to_host(b->to_host_fence());
    EXPECT_EQ(std::memcmp(host.data(), want.data(), n), 0) << name;
    // Across the link and back: what arrives is what was sent.
    for (size_t i = 0; i < n; ++i) host[i] = std::byte(i * 7);
    b->copy_to_compute(a.get(), host.data(), n);
    b->wait_to_compute(b->to_compute_fence());
    std::vector<std::byte> back(n);
    b->copy_to_host(back.data(), a.get(), n);
    b->synchronize();
    EXPECT_EQ(std::memcmp(back.data(), host.data(), n), 0) << name;
    EXPECT_EQ(b->alloc_compute(0, 4096), nullptr) << name << ": nothing asked, nothing given";
  }
}

}  // namespace
}  // namespace lt
