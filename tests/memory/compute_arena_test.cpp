// ComputeArena: setup errors (budget, overlap, malformed), views at the planned offsets,
// measured vs planned peak, and death tests for allocations the plan did not foresee.
// arena_layout: layouts that pass the arena's own checks, on random lifetimes.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "memory/arena_layout.h"
#include "memory/compute_arena.h"

namespace lt {
namespace {

std::string setup_error(size_t budget, std::vector<ArenaAllocation> plan) {
  try {
    ComputeArena arena("gpu", budget, std::move(plan));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ComputeArenaTest, HandsOutPlannedOffsetsAndTracksPeak) {
  // Windows 0..2: a (0..1) and b (1..2) overlap in window 1; c reuses a's bytes in window 2.
  ComputeArena arena("gpu", 8192, {{"a", 0, 4096, 0, 1}, {"b", 4096, 2048, 1, 2}, {"c", 0, 1024, 2, 2}});
  EXPECT_EQ(arena.planned_peak_bytes(), 6144u);
  EXPECT_EQ(arena.planned_extent_bytes(), 6144u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(arena.base()) % 4096, 0u);

  arena.begin_window(0);
  auto a = arena.acquire("a");
  EXPECT_EQ(a.data(), arena.base());
  EXPECT_EQ(a.size(), 4096u);
  arena.begin_window(1);
  TensorView b = arena.acquire_view("b", DType::F32, {512});
  EXPECT_EQ(b.data, arena.base() + 4096);
  EXPECT_EQ(arena.live_bytes(), 6144u);
  arena.release("a");
  arena.begin_window(2);
  auto c = arena.acquire("c");
  EXPECT_EQ(c.data(), arena.base());
  EXPECT_TRUE(arena.is_live("c"));
  arena.release("b");
  arena.release("c");
  EXPECT_EQ(arena.live_bytes(), 0u);
  EXPECT_EQ(arena.peak_live_bytes(), 6144u);
  EXPECT_LE(arena.peak_live_bytes(), arena.planned_peak_bytes());
}

// By index (the executor's way): the same ranges and the same accounting as by name, and
// the two views agree on what is live.
TEST(ComputeArenaTest, AcquiresByIndexAsByName) {
  ComputeArena arena("gpu", 8192, {{"a", 0, 4096, 0, 1}, {"b", 4096, 2048, 1, 2}, {"a", 0, 1024, 2, 2}});
  arena.begin_window(0);
  EXPECT_EQ(arena.acquire(size_t{0}).data(), arena.base());
  EXPECT_TRUE(arena.is_live("a"));
  arena.begin_window(1);
  auto b = arena.acquire(size_t{1});
  EXPECT_EQ(b.data(), arena.base() + 4096);
  EXPECT_EQ(b.size(), 2048u);
  EXPECT_EQ(arena.live_bytes(), 6144u);
  arena.release("a");  // the name finds the live allocation 0
  arena.begin_window(2);
  auto a_again = arena.acquire(size_t{2});
  EXPECT_EQ(a_again.size(), 1024u);
  arena.release(size_t{1});
  arena.release(size_t{2});
  EXPECT_FALSE(arena.is_live("a"));
  EXPECT_EQ(arena.live_bytes(), 0u);
  EXPECT_EQ(arena.peak_live_bytes(), 6144u);
}

TEST(ComputeArenaTest, SameNamePlannedTwiceWithDisjointLifetimes) {
  // A weight slot refilled later at another offset: acquire picks the one for the window.
  ComputeArena arena("gpu", 4096, {{"w.1", 0, 256, 0, 0}, {"w.1", 1024, 256, 3, 4}});
  arena.begin_window(0);
  EXPECT_EQ(arena.acquire("w.1").data(), arena.base());
  arena.release("w.1");
  arena.begin_window(3);
  EXPECT_EQ(arena.acquire("w.1").data(), arena.base() + 1024);
  arena.release("w.1");
}

TEST(ComputeArenaTest, BudgetShortfallNamesBudgetShortfallAndTensor) {
  const std::string e = setup_error(4096, {{"a", 0, 2048, 0, 0}, {"a.7.gpu", 2048, 3072, 0, 0}});
  EXPECT_NE(e.find("'a.7.gpu'"), std::string::npos) << e;
  EXPECT_NE(e.find("budget of 4096 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("short by 1024 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("compute arena 'gpu'"), std::string::npos) << e;
}

TEST(ComputeArenaTest, OffsetPastBudgetDoesNotOverflow) {
  const std::string e = setup_error(4096, {{"x", SIZE_MAX - 255, 512, 0, 0}});
  EXPECT_NE(e.find("does not fit the budget"), std::string::npos) << e;
}

TEST(ComputeArenaTest, DetectsOverlapOnlyWhenLifetimesOverlap) {
  // Same bytes, disjoint lifetimes: fine.
  EXPECT_EQ(setup_error(4096, {{"a", 0, 1024, 0, 1}, {"b", 512, 1024, 2, 3}}), "");
  // Adjacent ranges, same lifetime: fine.
  EXPECT_EQ(setup_error(4096, {{"a", 0, 1024, 0, 1}, {"b", 1024, 1024, 0, 1}}), "");
  // Overlapping bytes in window 1.
  std::string e = setup_error(4096, {{"a", 0, 1024, 0, 1}, {"b", 768, 1024, 1, 3}});
  EXPECT_NE(e.find("overlap"), std::string::npos) << e;
  EXPECT_NE(e.find("'a'"), std::string::npos) << e;
  EXPECT_NE(e.find("'b'"), std::string::npos) << e;
  // One range nested deep inside another, found past a non-overlapping neighbour.
  e = setup_error(1 << 20, {{"big", 0, 1 << 19, 5, 9}, {"x", 256, 256, 0, 1}, {"y", 4096, 256, 9, 9}});
  EXPECT_NE(e.find("'big'"), std::string::npos) << e;
  EXPECT_NE(e.find("'y'"), std::string::npos) << e;
  // Zero-byte allocations collide with nothing.
  EXPECT_EQ(setup_error(4096, {{"a", 0, 1024, 0, 1}, {"z", 256, 0, 0, 1}}), "");
}

TEST(ComputeArenaTest, RejectsMalformedPlans) {
  EXPECT_NE(setup_error(4096, {{"a", 0, 16, 2, 1}}).find("lifetime"), std::string::npos);
  EXPECT_NE(setup_error(4096, {{"a", 100, 16, 0, 0}}).find("not a multiple of 256"), std::string::npos);
  EXPECT_NE(setup_error(4096, {{"a", 0, 16, 0, 2}, {"a", 256, 16, 2, 3}}).find("planned twice"),
            std::string::npos);
}

TEST(ComputeArenaTest, ExternalMemoryIsNotOwned) {
  alignas(4096) static std::byte block[8192];
  ComputeArena arena("gpu", block, sizeof block, {{"a", 4096, 4096, 0, 0}});
  arena.begin_window(0);
  EXPECT_EQ(arena.acquire("a").data(), block + 4096);
  arena.release("a");
}

// Death tests: an allocation the plan did not foresee is a bug and aborts (LT_ASSERT).
class ComputeArenaDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(ComputeArenaDeathTest, UnplannedNameAborts) {
  ComputeArena arena("gpu", 4096, {{"a", 0, 1024, 0, 1}});
  arena.begin_window(0);
  EXPECT_DEATH(arena.acquire("surprise"), "unplanned allocation: 'surprise' is not in the plan");
}

TEST_F(ComputeArenaDeathTest, PlannedNameOutsideItsLifetimeAborts) {
  ComputeArena arena("gpu", 4096, {{"a", 0, 1024, 2, 3}});
  arena.begin_window(1);
  EXPECT_DEATH(arena.acquire("a"), "unplanned allocation: 'a'.*window 1");
}

TEST_F(ComputeArenaDeathTest, DoubleAcquireAborts) {
  ComputeArena arena("gpu", 4096, {{"a", 0, 1024, 0, 1}});
  arena.begin_window(0);
  arena.acquire("a");
  EXPECT_DEATH(arena.acquire("a"), "acquired twice");
}

TEST_F(ComputeArenaDeathTest, KeepingPastTheLifetimeAborts) {
  ComputeArena arena("gpu", 4096, {{"a", 0, 1024, 0, 0}});
  arena.begin_window(0);
  arena.acquire("a");
  EXPECT_DEATH(arena.begin_window(1), "'a' is still live in window 1");
}

TEST_F(ComputeArenaDeathTest, ViewLargerThanPlannedAborts) {
  ComputeArena arena("gpu", 4096, {{"a", 0, 1024, 0, 0}});
  arena.begin_window(0);
  EXPECT_DEATH(arena.acquire_view("a", DType::F32, {257}), "needs 1028 bytes, planned 1024");
}

TEST_F(ComputeArenaDeathTest, IndexOutsideItsLifetimeOrTwiceAborts) {
  ComputeArena arena("gpu", 4096, {{"a", 0, 1024, 2, 3}});
  arena.begin_window(1);
  EXPECT_DEATH(arena.acquire(size_t{0}), "unplanned allocation: 'a'.*window 1");
  EXPECT_DEATH(arena.acquire(size_t{1}), "unplanned allocation: index 1 of 1");
  arena.begin_window(2);
  arena.acquire(size_t{0});
  EXPECT_DEATH(arena.acquire(size_t{0}), "acquired twice");
  arena.release(size_t{0});
  EXPECT_DEATH(arena.release(size_t{0}), "not live");
}

TEST_F(ComputeArenaDeathTest, ReleaseOfSomethingNotLiveAborts) {
  ComputeArena arena("gpu", 4096, {{"a", 0, 1024, 0, 0}});
  arena.begin_window(0);
  EXPECT_DEATH(arena.release("a"), "not live");
}

// Independent check, pair by pair, besides the arena's own sweep: nothing live at once
// shares bytes.
void expect_no_live_overlap(const std::vector<ArenaAllocation>& plan) {
  for (size_t i = 0; i < plan.size(); ++i)
    for (size_t j = i + 1; j < plan.size(); ++j) {
      const auto &a = plan[i], &b = plan[j];
      const bool live = a.first_window <= b.last_window && b.first_window <= a.last_window;
      const bool bytes = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      EXPECT_FALSE(live && bytes) << a.name << " and " << b.name;
    }
}

TEST(ArenaLayoutTest, RandomLifetimesGiveValidCompactLayouts) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<ArenaRequest> req;
    const int n = 1 + static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) {
      const int first = static_cast<int>(rng() % 20);
      req.push_back({std::string("t").append(std::to_string(i)), 1 + rng() % 100000, first, first + static_cast<int>(rng() % 6)});
    }
    const auto plan = lay_out_arena(req, 256);
    ASSERT_EQ(plan.size(), req.size());
    for (size_t i = 0; i < plan.size(); ++i) {
      EXPECT_EQ(plan[i].name, req[i].name);
      EXPECT_EQ(plan[i].offset % 256, 0u);
    }
    expect_no_live_overlap(plan);
    const size_t extent = arena_extent(plan);
    ComputeArena arena("gpu", extent, plan, 256);  // throws if the layout were invalid
    // Greedy-by-size never needs more than the sum of all sizes (aligned).
    size_t sum = 0;
    for (const auto& r : req) sum += (r.bytes + 255) / 256 * 256;
    EXPECT_LE(extent, sum);
    EXPECT_GE(extent, arena.planned_peak_bytes());
  }
}

// Requests that follow another (a boundary's compute-tier rows, then its other rows in
// forward and again in backward) lie right after it, whatever else is placed; nothing
// live at once shares bytes; the arena accepts their unaligned offsets.
TEST(ArenaLayoutTest, FollowersLieRightAfterWhatTheyFollow) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<ArenaRequest> req;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      const int first = static_cast<int>(rng() % 20);
      const int last = first + 4 + static_cast<int>(rng() % 6);
      req.push_back({"t" + std::to_string(i), 4 + 4 * (rng() % 25000), first, last});
      if (rng() % 2 == 0) continue;
      const int head = static_cast<int>(req.size()) - 1;  // two followers, apart in time
      req.push_back({"t" + std::to_string(i) + ".fwd", 4 + 4 * (rng() % 25000), first, first + 1, head});
      req.push_back({"t" + std::to_string(i) + ".bwd", 4 + 4 * (rng() % 25000), last - 1, last, head});
    }
    const auto plan = lay_out_arena(req, 256);
    ASSERT_EQ(plan.size(), req.size());
    for (size_t i = 0; i < plan.size(); ++i) {
      if (req[i].follows >= 0) {
        const ArenaAllocation& head = plan[static_cast<size_t>(req[i].follows)];
        EXPECT_EQ(plan[i].offset, head.offset + head.bytes) << plan[i].name;
        EXPECT_TRUE(plan[i].follows);
      } else {
        EXPECT_EQ(plan[i].offset % 256, 0u) << plan[i].name;
      }
    }
    expect_no_live_overlap(plan);
    ComputeArena arena("gpu", arena_extent(plan), plan, 256);  // throws if the layout were invalid
  }
}

// Two followers of one request, live at once, would share bytes: a bug in the schedule.
TEST_F(ComputeArenaDeathTest, FollowersLiveAtOnceAbort) {
  const std::vector<ArenaRequest> clash = {{"h", 64, 0, 3}, {"a", 64, 0, 2, 0}, {"b", 64, 1, 3, 0}};
  EXPECT_DEATH(lay_out_arena(clash), "follow the same one while both are live");
}

TEST(ArenaLayoutTest, ReusesBytesAcrossDisjointLifetimes) {
  // A chain of forward activations each live for two windows needs two buffers, not ten.
  std::vector<ArenaRequest> req;
  for (int i = 0; i < 10; ++i) req.push_back({"a." + std::to_string(i), 4096, i, i + 1});
  EXPECT_EQ(arena_extent(lay_out_arena(req)), 2 * 4096u);
}

}  // namespace
}  // namespace lt
