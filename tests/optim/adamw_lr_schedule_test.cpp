#include <gtest/gtest.h>

#include "core/error.h"
#include "optim/lr_schedule.h"

namespace lt {
namespace {

TEST(AdamWLrSchedule, WarmupThenCosine) {
  LrSchedule s{.peak = 1e-3, .min_ratio = 0.1, .warmup_steps = 10, .total_steps = 110};
  s.validate();
  EXPECT_DOUBLE_EQ(s.at(1), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);
  EXPECT_NEAR(s.at(60), 1e-3 * (0.1 + 0.9 * 0.5), 1e-15);  // half way down the cosine
  EXPECT_DOUBLE_EQ(s.at(110), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(500), 1e-4);  // stays at the floor
  for (int64_t t = 11; t < 110; ++t) EXPECT_LE(s.at(t + 1), s.at(t));
  LrSchedule constant{.peak = 2e-5};
  EXPECT_DOUBLE_EQ(constant.at(12345), 2e-5);
  LrSchedule bad{.peak = 1e-3, .warmup_steps = -1};
  EXPECT_THROW(bad.validate(), Error);
  // Warmup longer than the run: it rises for the whole run.
  LrSchedule long_warmup{.peak = 1e-3, .warmup_steps = 20, .total_steps = 10};
  EXPECT_NO_THROW(long_warmup.validate());
  EXPECT_DOUBLE_EQ(long_warmup.at(10), 0.5e-3);
}

// Issue 14: without warmup the cosine used to start at t = 1/N, so `--steps 1 --lr 0.1`
// trained at the floor. Now the first step is the peak and the last the floor.
TEST(AdamWLrSchedule, WithoutWarmupTheFirstStepIsThePeak) {
  LrSchedule one{.peak = 0.1, .min_ratio = 0.1, .warmup_steps = 0, .total_steps = 1};
  one.validate();
  EXPECT_DOUBLE_EQ(one.at(1), 0.1);
  LrSchedule s{.peak = 1e-3, .min_ratio = 0.1, .warmup_steps = 0, .total_steps = 101};
  EXPECT_DOUBLE_EQ(s.at(1), 1e-3);
  EXPECT_NEAR(s.at(51), 1e-3 * (0.1 + 0.9 * 0.5), 1e-15);  // half way: (51 - 1) / (101 - 1)
  EXPECT_DOUBLE_EQ(s.at(101), 1e-4);
  for (int64_t t = 1; t < 101; ++t) EXPECT_LT(s.at(t + 1), s.at(t));
  // Warmup as long as the run: every step rises, the last is the peak.
  LrSchedule all_warmup{.peak = 1e-3, .min_ratio = 0.1, .warmup_steps = 4, .total_steps = 4};
  EXPECT_DOUBLE_EQ(all_warmup.at(4), 1e-3);
}

}  // namespace
}  // namespace lt
