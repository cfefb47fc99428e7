#include "core/dtype.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace lt {
namespace {

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between two bf16 values (1 and 1 + 2^-7): ties go to even.
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-INFINITY)), -INFINITY);
}

TEST(DType, Bf16RelativeErrorWithinHalfUlp) {
  for (float x = -1000.f; x < 1000.f; x += 0.37f) {
    if (x == 0) continue;
    float r = bf16_to_f32(f32_to_bf16(x));
    EXPECT_LE(std::fabs(r - x), std::fabs(x) * 0x1p-8f) << x;
  }
}

TEST(DType, F16ToF32) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x7c00), INFINITY);
}

TEST(DType, Names) {
  DType t;
  ASSERT_TRUE(dtype_from_name("BF16", &t));
  EXPECT_EQ(t, DType::BF16);
  EXPECT_EQ(dtype_size(t), 2u);
  EXPECT_FALSE(dtype_from_name("Q4_K", &t));
}

}  // namespace
}  // namespace lt
