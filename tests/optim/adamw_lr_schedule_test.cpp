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
  LrSchedule bad{.peak = 1e-3, .warmup_steps = 20, .total_steps = 10};
  EXPECT_THROW(bad.validate(), Error);
}

}  // namespace
}  // namespace lt
