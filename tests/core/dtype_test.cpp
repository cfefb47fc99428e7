// bf16 rounding and the fp16 decoder, element by element; the bulk conversions
// (vectorized per ISA level, threaded for large n) against the element functions, which
// are their definition: the conversions are exact functions of each input, so every level
// must give exactly their bits, NaNs, infinities and subnormals included.
#include "core/dtype.h"

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "isa_test_util.h"

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

// Floats that exercise every branch of the rounding: ties, carries into the exponent,
// the largest finite values (which round to infinity), subnormals, infinities, NaNs with
// payloads that rounding would turn into infinity, then random bit patterns.
std::vector<float> conversion_inputs(size_t n) {
  const uint32_t special[] = {
      0x00000000u, 0x80000000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3fffffffu,
      0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u, 0x00000001u, 0x807fffffu, 0x00008000u,
      0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fffffffu,
      0x7f808000u, 0xff80ffffu};
  std::vector<float> v;
  for (uint32_t b : special) v.push_back(std::bit_cast<float>(b));
  std::mt19937 rng(17);
  while (v.size() < n) v.push_back(std::bit_cast<float>(uint32_t(rng())));
  v.resize(n);
  return v;
}

TEST(DType, BulkConversionsMatchTheElementFunctions) {
  // Sizes around the vector widths, and one above the threading threshold (2^16).
  for (size_t n : {size_t(1), size_t(7), size_t(16), size_t(33), size_t(100003)}) {
    const std::vector<float> x = conversion_inputs(n);
    std::vector<uint16_t> want16(n);
    for (size_t i = 0; i < n; ++i) want16[i] = f32_to_bf16(x[i]).bits;
    std::vector<bf16> h(n);
    for (size_t i = 0; i < n; ++i) h[i].bits = uint16_t(std::bit_cast<uint32_t>(x[i]) >> 16);
    test::for_each_isa([&](Isa) {
      std::vector<bf16> got16(n);
      convert_f32_to_bf16(got16.data(), x.data(), n);
      std::vector<float> got32(n, 1.0f);
      convert_to_f32(got32.data(), h.data(), DType::BF16, n);
      std::vector<float> rounded(n), in_place = x;
      round_to_bf16_values(rounded.data(), x.data(), n);
      round_to_bf16_values(in_place.data(), in_place.data(), n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(got16[i].bits, want16[i]) << "f32 bits " << std::bit_cast<uint32_t>(x[i]);
        ASSERT_EQ(std::bit_cast<uint32_t>(got32[i]), std::bit_cast<uint32_t>(bf16_to_f32(h[i])))
            << "bf16 bits " << h[i].bits;
        const uint32_t want_rounded = uint32_t(want16[i]) << 16;
        ASSERT_EQ(std::bit_cast<uint32_t>(rounded[i]), want_rounded) << "f32 bits " << std::bit_cast<uint32_t>(x[i]);
        ASSERT_EQ(std::bit_cast<uint32_t>(in_place[i]), want_rounded) << "in place";
      }
    });
  }
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
