// RoPE inverse frequencies and cos/sin tables. Agreement with transformers' own rotary
// embeddings (default, linear, llama3) is checked in config_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "model/config.h"
#include "model/rope_frequencies.h"

namespace lt {
namespace {

ModelConfig rope_config(double theta, int64_t head_dim) {
  ModelConfig c;
  c.model_type = "llama";
  c.head_dim = head_dim;
  c.rope_theta = theta;
  return c;
}

TEST(RopeFrequencies, DefaultIsThetaPower) {
  const ModelConfig c = rope_config(10000.0, 8);
  const auto inv = rope_inv_freq(c);
  ASSERT_EQ(inv.size(), 4u);
  EXPECT_EQ(inv[0], 1.0);
  EXPECT_DOUBLE_EQ(inv[1], 0.1);   // 10000^(-2/8)
  EXPECT_DOUBLE_EQ(inv[2], 0.01);
  EXPECT_DOUBLE_EQ(inv[3], 0.001);
}

TEST(RopeFrequencies, LinearDividesByFactor) {
  ModelConfig c = rope_config(10000.0, 8);
  const auto base = rope_inv_freq(c);
  c.rope_scaling.type = RopeScalingType::Linear;
  c.rope_scaling.factor = 4.0;
  const auto scaled = rope_inv_freq(c);
  for (size_t j = 0; j < base.size(); ++j) EXPECT_DOUBLE_EQ(scaled[j], base[j] / 4.0);
}

TEST(RopeFrequencies, Llama3Bands) {
  // Llama 3.1's numbers: theta 5e5, factor 8, bands at wavelengths 8192/4 and 8192/1.
  ModelConfig c = rope_config(500000.0, 128);
  const auto base = rope_inv_freq(c);
  c.rope_scaling = {RopeScalingType::Llama3, 8.0, 1.0, 4.0, 8192};
  const auto scaled = rope_inv_freq(c);
  int high = 0, low = 0, mid = 0;
  for (size_t j = 0; j < base.size(); ++j) {
    const double wavelen = 2 * std::numbers::pi / base[j];
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(scaled[j], base[j]);
      ++high;
    } else if (wavelen > 8192.0) {
      EXPECT_DOUBLE_EQ(scaled[j], base[j] / 8);
      ++low;
    } else {
      // Smoothly between the two, and matching the blend formula.
      const double s = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      EXPECT_DOUBLE_EQ(scaled[j], (1 - s) * base[j] / 8 + s * base[j]);
      EXPECT_LT(scaled[j], base[j]);
      EXPECT_GT(scaled[j], base[j] / 8);
      ++mid;
    }
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(mid, 0);
}

TEST(RopeFrequencies, TablesAreCosSinOfPositionTimesFrequency) {
  const ModelConfig c = rope_config(10000.0, 16);
  const int64_t seq = 40000, half = 8;
  std::vector<float> cos(seq * half), sin(seq * half);
  rope_tables(cos.data(), sin.data(), c, seq);
  const auto inv = rope_inv_freq(c);
  for (int64_t j = 0; j < half; ++j) {
    EXPECT_EQ(cos[j], 1.0f);
    EXPECT_EQ(sin[j], 0.0f);
  }
  // Angles are formed in double and rounded once to float: the error is at most half an
  // fp32 ulp of a value <= 1, i.e. 2^-25 ~ 3e-8, even at position 39999 (angle ~4e4 rad,
  // where an fp32 angle would already be off by ~2e-3).
  for (int64_t p : {1, 7, 1000, 39999}) {
    for (int64_t j = 0; j < half; ++j) {
      const double a = static_cast<double>(p) * inv[j];
      EXPECT_NEAR(cos[p * half + j], std::cos(a), 3e-8) << p << "," << j;
      EXPECT_NEAR(sin[p * half + j], std::sin(a), 3e-8) << p << "," << j;
    }
  }
}

}  // namespace
}  // namespace lt
