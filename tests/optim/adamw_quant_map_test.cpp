// The dynamic maps and the nearest-code search.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "adamw_kernel_variants.h"
#include "adamw_reference.h"
#include "optim/adamw_kernels.h"
#include "optim/quant_map.h"

namespace lt {
namespace {

TEST(AdamWQuantMap, MatchesDecadeDefinition) {
  for (bool is_signed : {true, false}) {
    const QuantMap& q = is_signed ? signed_dynamic_map() : unsigned_dynamic_map();
    const auto ref = test::reference_dynamic_map(is_signed);
    ASSERT_EQ(ref.size(), 256u);
    for (int i = 0; i < 256; ++i) EXPECT_EQ(q.value[i], static_cast<float>(ref[i])) << i;
    for (int i = 0; i < 255; ++i) EXPECT_LT(q.value[i], q.value[i + 1]);
    EXPECT_EQ(q.value[255], 1.0f);
    // Smallest positive centre: 0.55e-6 (signed: one bin in the lowest decade) or 0.325e-6.
    const int first_pos = is_signed ? 128 : 1;
    EXPECT_EQ(q.value[first_pos - 1], 0.0f);
    EXPECT_NEAR(q.value[first_pos], is_signed ? 0.55e-6 : 0.325e-6, 1e-12);
  }
}

// Every x: the search's code is a nearest value (ties, which fp32 midpoints make possible
// only at the midpoint itself, may go either way).
void expect_nearest(const QuantMap& q, const std::vector<double>& ref, float x) {
  const int k = quantize_nearest(q, x);
  const int r = test::reference_nearest(ref, x);
  const double dk = std::fabs(double(x) - q.value[k]), dr = std::fabs(double(x) - q.value[r]);
  EXPECT_LE(dk, dr) << "x=" << x << " code " << k << " reference " << r;
}

TEST(AdamWQuantMap, NearestCodeIsExact) {
  std::mt19937 rng(1);
  for (bool is_signed : {true, false}) {
    const QuantMap& q = is_signed ? signed_dynamic_map() : unsigned_dynamic_map();
    const auto ref = test::reference_dynamic_map(is_signed);
    // Every midpoint and its fp32 neighbours: the boundaries are where a search errs.
    for (int j = 0; j < 255; ++j)
      for (float x : {std::nextafter(q.mid[j], -1.f), q.mid[j], std::nextafter(q.mid[j], 2.f)}) expect_nearest(q, ref, x);
    // Values across all decades, far below the smallest code (no lookup table floor), and
    // the ends (|x| slightly above 1 after rounding of the normalization).
    std::uniform_real_distribution<float> dec(-9.f, 0.f);
    for (int i = 0; i < 20000; ++i) {
      float x = std::pow(10.f, dec(rng));
      if (is_signed && (i & 1)) x = -x;
      expect_nearest(q, ref, x);
    }
    for (float x : {0.f, 1e-30f, 3e-7f, 1.f, 1.0000001f, is_signed ? -1.0000001f : 0.f}) expect_nearest(q, ref, x);
  }
  // 1e-7 is nearer 0 than the smallest code 0.325e-6; 2e-7 is nearer 0.325e-6.
  EXPECT_EQ(quantize_nearest(unsigned_dynamic_map(), 1e-7f), 0);
  EXPECT_EQ(quantize_nearest(unsigned_dynamic_map(), 2e-7f), 1);
}

// The bucket table (quantize_nearest) against the binary search it replaces, on every
// bucket's edges, every midpoint's neighbourhood, the specials, and ~3M other floats: a
// sparse sweep of all bit patterns and uniform random bits.
TEST(AdamWQuantMap, BucketTableEqualsSearch) {
  auto f = [](uint32_t b) {
    float x;
    std::memcpy(&x, &b, 4);
    return x;
  };
  for (bool is_signed : {true, false}) {
    const QuantMap& q = is_signed ? signed_dynamic_map() : unsigned_dynamic_map();
    int64_t checked = 0, bad = 0;
    auto check = [&](float x) {
      if (std::isnan(x)) return;
      ++checked;
      if (quantize_nearest(q, x) != quantize_nearest_search(q, x) && ++bad <= 10)
        ADD_FAILURE() << (is_signed ? "signed" : "unsigned") << " x=" << x << " table "
                      << int(quantize_nearest(q, x)) << " search " << int(quantize_nearest_search(q, x));
    };
    for (int j = 0; j < 255; ++j) {
      uint32_t b;
      std::memcpy(&b, &q.mid[j], 4);
      for (int d = -3; d <= 3; ++d) check(f(b + d));
    }
    // First and last three keys of every bucket (and of the clamped ranges), both signs.
    for (uint32_t hi = 0; hi <= 0x7f80; ++hi)
      for (uint32_t lo : {0u, 1u, 2u, 0xfffdu, 0xfffeu, 0xffffu}) {
        check(f(hi << 16 | lo));
        check(f(0x80000000u | hi << 16 | lo));
      }
    for (float x : {0.f, -0.f, 1.f, -1.f, INFINITY, -INFINITY, 1e-45f, -1e-45f, 2.f, -2.f}) check(x);
    for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) check(f(static_cast<uint32_t>(b)));
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> mag(-8.f, 0.1f);
    for (int i = 0; i < 1000000; ++i) {
      check(f(static_cast<uint32_t>(rng())));
      check(std::pow(10.f, mag(rng)) * ((i & 1) ? -1.f : 1.f));
    }
    EXPECT_EQ(bad, 0) << "of " << checked;
  }
}

// Every vector variant's nearest-code path (the arithmetic fast path with its table
// fallback) against the table, exhaustively over every fp32 whose magnitude lies in
// [2^-26, 8) (both signs: everything else clamps into the end binades, sampled sparsely),
// ~0.5 G values per map in chunks (the sparse last chunk ends at an arbitrary length).
void expect_fast_path_equals_table(const AdamWKernels& kernels) {
  constexpr int64_t kChunk = (1 << 16);
  std::vector<float> x(kChunk);
  std::vector<uint8_t> got(kChunk);
  for (bool is_signed : {true, false}) {
    const QuantMap& q = is_signed ? signed_dynamic_map() : unsigned_dynamic_map();
    int64_t bad = 0;
    auto run = [&](int64_t n) {
      kernels.quantize(q, x.data(), got.data(), n);
      for (int64_t i = 0; i < n; ++i)
        if (got[i] != quantize_nearest(q, x[i]) && ++bad <= 10)
          ADD_FAILURE() << (is_signed ? "signed" : "unsigned") << " x=" << x[i] << " fast " << int(got[i])
                        << " table " << int(quantize_nearest(q, x[i]));
    };
    for (uint32_t sign : {0u, 0x80000000u}) {
      for (uint32_t b0 = (127u - 26) << 23; b0 < (130u << 23); b0 += kChunk) {
        for (int64_t i = 0; i < kChunk; ++i) {
          const uint32_t b = sign | (b0 + static_cast<uint32_t>(i));
          std::memcpy(&x[i], &b, 4);
        }
        run(kChunk);
      }
    }
    int64_t n = 0;  // the rest, sparsely: tiny, huge, infinities (NaN is never quantized)
    for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 65537) {
      float f;
      const uint32_t bb = static_cast<uint32_t>(b);
      std::memcpy(&f, &bb, 4);
      if (std::isnan(f)) continue;
      x[n++] = f;
      if (n == kChunk) run(n), n = 0;
    }
    for (float f : {0.f, -0.f, INFINITY, -INFINITY, 1e-45f, -1e-45f, 3e38f, -3e38f}) x[n++] = f;
    run(n);
    EXPECT_EQ(bad, 0);
  }
}

TEST(AdamWQuantMap, VectorFastPathsEqualTableExhaustively) {
  test::for_each_kernel_variant([](AdamWKernel kernel) {
    if (kernel == AdamWKernel::Scalar) return;  // its quantize is quantize_nearest itself
    expect_fast_path_equals_table(adamw_kernels(kernel));
  });
}

// Every variant's dequantization (AVX2 gather, AVX-512 permute chain, VBMI byte planes)
// against the table: every code at every position of a 64-code group (VBMI transposes the
// codes inside the lookup), lengths with partial tails, and many absmax values (normal,
// tiny, denormal, huge, 0), bit for bit.
void expect_dequant_equals_table(const AdamWKernels& kernels) {
  std::mt19937 rng(11);
  std::vector<float> absmaxes = {1.f, 0.f, 0.5f, 3.0e-7f, 1e-38f, 1e-45f, 6.0e37f, 3.4e38f};
  std::uniform_real_distribution<float> e(-40.f, 38.f);
  for (int i = 0; i < 200; ++i) absmaxes.push_back(std::pow(10.f, e(rng)));
  for (bool is_signed : {true, false}) {
    const QuantMap& q = is_signed ? signed_dynamic_map() : unsigned_dynamic_map();
    for (int64_t n : {int64_t{256}, int64_t{1}, int64_t{7}, int64_t{17}, int64_t{63}, int64_t{64}, int64_t{65},
                      int64_t{300}}) {
      for (int rot = 0; rot < 64; rot += (n == 256 ? 1 : 37)) {
        std::vector<uint8_t> code(n);
        for (int64_t i = 0; i < n; ++i) code[i] = static_cast<uint8_t>((i * 7 + rot * 3 + (n == 256 ? 0 : rng())) & 255);
        if (n == 256)
          for (int64_t i = 0; i < n; ++i) code[i] = static_cast<uint8_t>((i + rot) & 255);
        for (float am : absmaxes) {
          std::vector<float> got(n + 1, 12345.f);
          kernels.dequantize(q, code.data(), am, n, got.data());
          for (int64_t i = 0; i < n; ++i) {
            const float want = q.value[code[i]] * am;
            ASSERT_EQ(std::memcmp(&got[i], &want, 4), 0)
                << (is_signed ? "signed" : "unsigned") << " n=" << n << " i=" << i << " code=" << int(code[i])
                << " absmax=" << am << " got " << got[i] << " want " << want;
          }
          ASSERT_EQ(got[n], 12345.f) << "wrote past n=" << n;
        }
      }
    }
  }
}


TEST(AdamWQuantMap, DequantEqualsTableEveryVariant) {
  test::for_each_kernel_variant([](AdamWKernel kernel) { expect_dequant_equals_table(adamw_kernels(kernel)); });
}

}  // namespace
}  // namespace lt
