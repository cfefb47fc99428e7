// The emu backend's copy streams (exec/backend_emu.cpp) as a GPU's behave: Backend::wait_for
// holds the copies issued after it on that stream until its function returns, runs that
// function on the stream's thread (the caller goes on), keeps the other stream moving, and
// counts in the stream's events like a copy.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "exec/backend.h"

namespace lt {
namespace {

TEST(EmuBackend, ACopyAfterWaitForStartsOnceItsFunctionReturns) {
  auto emu = make_emu_backend();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> ran{false};
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> on_caller{true};
  std::vector<float> src(1024, 1.0f), dst(1024, 0.0f), other_src(1024, 2.0f), other_dst(1024, 0.0f);

  emu->wait_for(Backend::Stream::D2H, [&] {
    on_caller = std::this_thread::get_id() == caller;
    released.wait_for(std::chrono::seconds(2));  // bounded: run on the caller, it fails the test, not hangs
    ran = true;
  });
  emu->copy_to_host(dst.data(), src.data(), src.size() * sizeof(float));  // held behind the wait
  const Backend::Event copied = emu->record(Backend::Stream::D2H);
  // The caller went on, and the other stream's copies are not held.
  emu->copy_to_compute(other_dst.data(), other_src.data(), other_src.size() * sizeof(float));
  emu->wait_host(emu->record(Backend::Stream::H2D));
  EXPECT_EQ(other_dst[0], 2.0f);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // time enough for an unheld copy of 4 KiB
  EXPECT_FALSE(ran.load());
  EXPECT_EQ(dst[0], 0.0f) << "the copy ran before the wait's function returned";

  release.set_value();
  emu->wait_host(copied);
  EXPECT_TRUE(ran.load());
  EXPECT_FALSE(on_caller.load()) << "the function ran on the caller's thread";
  EXPECT_EQ(dst[0], 1.0f);
  EXPECT_EQ(dst[1023], 1.0f);
  EXPECT_EQ(emu->d2h_bytes, src.size() * sizeof(float));  // the wait moves no bytes

  // On the compute stream (the caller's thread) it runs at once.
  bool now = false;
  emu->wait_for(Backend::Stream::Compute, [&] { now = true; });
  EXPECT_TRUE(now);
}

}  // namespace
}  // namespace lt
