// RoPE: the fast path at every ISA level this machine runs (test::for_each_isa) against
// the double reference, backward as the inverse rotation, and the reference's backward
// (sign -1) against finite differences of its forward.
//
// Tolerance: y = a c - b s is two products and a difference: within 2u (|a c| + |b s|)
// of the exact value; the bound uses 3u for slack on the sum's own rounding. With FMA
// contraction (a c - round(b s), one rounding fewer) the same bound holds.
#include "kernels/cpu/rope.h"

#include <cstring>

#include "kernels/finite_difference.h"
#include "isa_test_util.h"
#include "kernels/kernel_test_util.h"

namespace lt {
namespace {

using test::kU32;

struct Tables {
  std::vector<float> cos, sin;
};
Tables make_tables(int64_t S, int64_t D) {
  Tables t;
  const int64_t half = D / 2;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t i = 0; i < half; ++i) {
      const double f = std::pow(10000.0, -2.0 * double(i) / double(D));
      t.cos.push_back(float(std::cos(double(s) * f)));
      t.sin.push_back(float(std::sin(double(s) * f)));
    }
  return t;
}

void check(int64_t B, int64_t S, int64_t H, int64_t D, bool backward) {
  const Tables tb = make_tables(S, D);
  const size_t n = size_t(B * S * H * D);
  auto x = test::random_floats(n, uint64_t(B * 1000 + S * 10 + D), -3, 3);
  auto want = test::to_double(x);
  auto cd = test::to_double(tb.cos), sd = test::to_double(tb.sin);
  ref::rope_apply<double>(want.data(), cd.data(), sd.data(), B, S, H, D, backward ? -1.0 : 1.0);
  std::vector<double> bound(n);
  const int64_t half = D / 2;
  for (size_t r = 0; r < n / size_t(D); ++r) {
    const int64_t s = int64_t(r / size_t(H)) % S;
    for (int64_t i = 0; i < half; ++i) {
      const double m = std::fabs(x[r * D + i] * cd[s * half + i]) +
                       std::fabs(x[r * D + i + half] * sd[s * half + i]);
      const double m2 = std::fabs(x[r * D + i + half] * cd[s * half + i]) +
                        std::fabs(x[r * D + i] * sd[s * half + i]);
      bound[r * D + i] = 3 * kU32 * m + 1e-30;
      bound[r * D + i + half] = 3 * kU32 * m2 + 1e-30;
    }
  }
  if (backward)
    rope_backward(x.data(), tb.cos.data(), tb.sin.data(), B, S, H, D);
  else
    rope_forward(x.data(), tb.cos.data(), tb.sin.data(), B, S, H, D);
  EXPECT_TRUE(test::within_bound(x, want, bound))
      << "B=" << B << " S=" << S << " H=" << H << " D=" << D << " backward=" << backward;
}

TEST(Rope, MatchesReference) {
  test::for_each_isa([](Isa) {
    for (bool bw : {false, true}) {
      check(2, 5, 3, 8, bw);
      check(1, 1, 1, 2, bw);     // T=1, smallest D
      check(3, 7, 2, 34, bw);    // D/2 odd, not a multiple of 16
      check(2, 64, 4, 128, bw);  // threaded
    }
  });
}

// Partial RoPE (Qwen3.5): the first R of each head's D channels rotate over [S, R/2]
// tables, the other D - R pass through bit for bit.
TEST(Rope, PartialRotaryRotatesOnlyTheLeadingChannels) {
  test::for_each_isa([](Isa) {
    for (bool bw : {false, true})
      for (int64_t R : {2, 8, 32}) {
        const int64_t B = 2, S = 9, H = 3, D = 48, half = R / 2;
        const Tables tb = make_tables(S, R);
        const size_t n = size_t(B * S * H * D);
        auto x = test::random_floats(n, uint64_t(77 + R), -3, 3);
        auto want = test::to_double(x);
        auto cd = test::to_double(tb.cos), sd = test::to_double(tb.sin);
        ref::rope_apply<double>(want.data(), cd.data(), sd.data(), B, S, H, D, bw ? -1.0 : 1.0, nullptr, R);
        std::vector<double> bound(n, 1e-300);  // untouched channels: exact (any change fails)
        for (size_t r = 0; r < n / size_t(D); ++r) {
          const int64_t s = int64_t(r / size_t(H)) % S;
          for (int64_t i = 0; i < half; ++i) {
            const double c = cd[s * half + i], sn = sd[s * half + i];
            const double a = x[r * D + i], b = x[r * D + i + half];
            bound[r * D + i] = 3 * kU32 * (std::fabs(a * c) + std::fabs(b * sn)) + 1e-30;
            bound[r * D + i + half] = 3 * kU32 * (std::fabs(b * c) + std::fabs(a * sn)) + 1e-30;
          }
        }
        (bw ? rope_backward : rope_forward)(x.data(), tb.cos.data(), tb.sin.data(), B, S, H, D, nullptr, R);
        EXPECT_TRUE(test::within_bound(x, want, bound)) << "R=" << R << " backward=" << bw;
      }
  });
}

TEST(Rope, BackwardInvertsForward) {
  // The rotation is orthogonal, so backward (its transpose) undoes forward.
  const int64_t B = 2, S = 9, H = 3, D = 16;
  const Tables tb = make_tables(S, D);
  auto x = test::random_floats(size_t(B * S * H * D), 4);
  test::for_each_isa([&](Isa) {
    auto y = x;
    rope_forward(y.data(), tb.cos.data(), tb.sin.data(), B, S, H, D);
    rope_backward(y.data(), tb.cos.data(), tb.sin.data(), B, S, H, D);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 8 * kU32) << i;  // |x| <= 1
  });
}

TEST(Rope, ReferenceBackwardMatchesFiniteDifferences) {
  const int64_t B = 2, S = 3, H = 2, D = 6;
  const Tables tb = make_tables(S, D);
  auto cd = test::to_double(tb.cos), sd = test::to_double(tb.sin);
  const size_t n = size_t(B * S * H * D);
  auto x = test::fd::random_vector(n, 7);
  auto dy = test::fd::random_vector(n, 8);
  auto dx = dy;
  ref::rope_apply<double>(dx.data(), cd.data(), sd.data(), B, S, H, D, -1.0);
  auto f = [&](const std::vector<double>& in, std::vector<double>& y) {
    y = in;
    ref::rope_apply<double>(y.data(), cd.data(), sd.data(), B, S, H, D, 1.0);
  };
  auto r = test::fd::check_gradient(f, x, dy, dx);
  EXPECT_TRUE(r.ok()) << r.str();
}

// Per-token positions (packed documents, each counted from 0) select the table row: the
// same bits as rotating each document alone as a sequence of its own, and the double
// reference with the same positions within the bound above.
TEST(Rope, PositionsRestartPerDocument) {
  const int64_t S = 40, H = 3, D = 18, half = D / 2;
  const std::vector<int64_t> lengths = {1, 12, 7, 20};  // one row of documents
  std::vector<int32_t> pos;
  for (int64_t len : lengths)
    for (int64_t i = 0; i < len; ++i) pos.push_back(int32_t(i));
  ASSERT_EQ(int64_t(pos.size()), S);
  const Tables tb = make_tables(S, D);
  const auto cd = test::to_double(tb.cos), sd = test::to_double(tb.sin);
  const auto x = test::random_floats(size_t(S * H * D), 21, -3, 3);
  test::for_each_isa([&](Isa) {
    for (bool bw : {false, true}) {
      auto got = x;
      (bw ? rope_backward : rope_forward)(got.data(), tb.cos.data(), tb.sin.data(), 1, S, H, D, pos.data(), 0);
      auto alone = x;
      int64_t at = 0;
      for (int64_t len : lengths) {  // tables of the document's own length: rows 0..len-1
        (bw ? rope_backward : rope_forward)(alone.data() + at * H * D, tb.cos.data(), tb.sin.data(), 1, len, H,
                                            D, nullptr, 0);
        at += len;
      }
      EXPECT_EQ(0, std::memcmp(got.data(), alone.data(), got.size() * sizeof(float))) << "backward=" << bw;
      auto want = test::to_double(x);
      ref::rope_apply<double>(want.data(), cd.data(), sd.data(), 1, S, H, D, bw ? -1.0 : 1.0, pos.data());
      std::vector<double> bound(want.size());
      for (int64_t r = 0; r < S * H; ++r) {
        const int64_t p = pos[r / H];
        for (int64_t i = 0; i < half; ++i) {
          const double a = std::fabs(x[r * D + i]), b = std::fabs(x[r * D + i + half]);
          const double c = std::fabs(cd[p * half + i]), sn = std::fabs(sd[p * half + i]);
          bound[r * D + i] = 3 * kU32 * (a * c + b * sn) + 1e-30;
          bound[r * D + i + half] = 3 * kU32 * (b * c + a * sn) + 1e-30;
        }
      }
      EXPECT_TRUE(test::within_bound(got, want, bound)) << "backward=" << bw;
    }
  });
}

}  // namespace
}  // namespace lt
