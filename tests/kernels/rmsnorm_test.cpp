// RMSNorm: the fast path at every ISA level this machine runs (test::for_each_isa)
// against the double reference; within each level dw bitwise identical for 1, 2 and 3
// threads; the reference's backward against finite differences.
//
// Tolerances (u = fp32 unit roundoff; sums of n terms within n u sum|terms|):
//   rstd: the sum of squares is within C u relative (all terms positive), the divide, eps
//     add and sqrt add ~3u and halve the rest: (C/2 + 4) u relative.
//   y = x r w: two more products: (C/2 + 6) u |y|.
//   backward is given the same rstd as the reference, so only its own sums count:
//   dx = r dy w - r^3 x dot / C, dot within (C + 2) u sum|dy w x|, the rest ~6u:
//     (C + 8) u (|r dy w| + r^3 |x| sum|dy w x| / C).
//   dw += sum_t dy x r over T tokens (chunk partials then chunks): (T + 4) u (sum|dy x r|
//     + |dw_old|).
// The sum bounds hold in any summation order (vector lanes) and with FMA contraction
// (one rounding where there were two), so they hold at every ISA level.
#include "kernels/cpu/rmsnorm.h"

#include <cstring>

#include "kernels/finite_difference.h"
#include "isa_test_util.h"
#include "kernels/kernel_test_util.h"

namespace lt {
namespace {

using test::kU32;

void check(int64_t T, int64_t C) {
  const float eps = 1e-5f;
  auto x = test::random_floats(size_t(T * C), uint64_t(T + C), -2, 2);
  auto w = test::random_floats(size_t(C), 2, 0.5f, 1.5f);
  auto dy = test::random_floats(size_t(T * C), 3);
  auto dw = test::random_floats(size_t(C), 4);
  std::vector<float> y(size_t(T * C)), rstd(static_cast<size_t>(T)), dx(size_t(T * C));
  rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), T, C, eps);

  auto xd = test::to_double(x), wd = test::to_double(w), dyd = test::to_double(dy);
  std::vector<double> yw(size_t(T * C)), rw(static_cast<size_t>(T));
  ref::rmsnorm_forward<double>(yw.data(), rw.data(), xd.data(), wd.data(), T, C, double(eps));
  std::vector<double> by(size_t(T * C)), br(static_cast<size_t>(T));
  for (size_t i = 0; i < by.size(); ++i) by[i] = (C / 2.0 + 6) * kU32 * std::fabs(yw[i]) + 1e-30;
  for (size_t t = 0; t < br.size(); ++t) br[t] = (C / 2.0 + 4) * kU32 * rw[t];
  EXPECT_TRUE(test::within_bound(y, yw, by)) << "T=" << T << " C=" << C;
  EXPECT_TRUE(test::within_bound(rstd, rw, br)) << "T=" << T << " C=" << C;

  auto dww = test::to_double(dw);
  auto rd = test::to_double(rstd);  // the same rstd on both sides
  std::vector<double> dxw(size_t(T * C));
  ref::rmsnorm_backward<double>(dxw.data(), dww.data(), dyd.data(), xd.data(), wd.data(),
                                rd.data(), T, C);
  std::vector<double> bdx(size_t(T * C)), bdw(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) bdw[size_t(c)] = std::fabs(dw[size_t(c)]);
  for (int64_t t = 0; t < T; ++t) {
    const double r = rd[size_t(t)];
    double adot = 0;
    for (int64_t c = 0; c < C; ++c) adot += std::fabs(dyd[t * C + c] * wd[c] * xd[t * C + c]);
    for (int64_t c = 0; c < C; ++c) {
      const size_t i = size_t(t * C + c);
      bdx[i] = (C + 8) * kU32 *
                   (std::fabs(r * dyd[i] * wd[c]) + r * r * r * std::fabs(xd[i]) * adot / C) +
               1e-30;
      bdw[size_t(c)] += std::fabs(dyd[i] * xd[i] * r);
    }
  }
  for (auto& b : bdw) b = (T + 4) * kU32 * b + 1e-30;
  rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), T, C);
  EXPECT_TRUE(test::within_bound(dx, dxw, bdx)) << "T=" << T << " C=" << C;
  EXPECT_TRUE(test::within_bound(dw, dww, bdw)) << "T=" << T << " C=" << C;
}

TEST(RMSNorm, MatchesReference) {
  test::for_each_isa([](Isa) {
    check(1, 1);
    check(1, 7);
    check(5, 33);     // C not a multiple of 16
    check(130, 64);   // several token chunks
    check(300, 257);  // threaded, odd C
    check(70, 768);   // a transformer width: whole vectors and several column blocks
  });
}

TEST(RMSNorm, DwIsBitwiseIdenticalForAnyThreadCount) {
  const int64_t T = 523, C = 129;  // T*C above the threading threshold, ragged chunk
  auto x = test::random_floats(size_t(T * C), 1);
  auto w = test::random_floats(size_t(C), 2);
  auto dy = test::random_floats(size_t(T * C), 3);
  std::vector<float> y(size_t(T * C)), rstd(static_cast<size_t>(T)), dx(size_t(T * C));
  test::for_each_isa([&](Isa) {
    rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), T, C, 1e-6f);
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      test::ScopedThreads scope(threads);
      std::vector<float> dw(size_t(C), 0.25f);
      rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), T, C);
      if (first.empty())
        first = dw;
      else
        EXPECT_EQ(0, std::memcmp(first.data(), dw.data(), dw.size() * sizeof(float)))
            << threads << " threads";
    }
  });
}

// Gemma's (1 + w): the kernel's w_offset gives the bits of a plain norm over the fp32 sum
// 1 + w (rounded once, as transformers computes it), forward and backward, at every ISA
// level, on a shape that threads and has a ragged chunk.
TEST(RMSNorm, WeightOffsetIsBitwiseThePlainNormOverTheRoundedSum) {
  const int64_t T = 301, C = 67;
  const float offset = 1.0f;
  auto x = test::random_floats(size_t(T * C), 11, -2, 2);
  auto w = test::random_floats(size_t(C), 12, -0.5f, 0.5f);
  auto dy = test::random_floats(size_t(T * C), 13);
  std::vector<float> scale(static_cast<size_t>(C));
  for (size_t c = 0; c < scale.size(); ++c) scale[c] = offset + w[c];
  test::for_each_isa([&](Isa) {
    std::vector<float> y[2], rstd[2], dx[2], dw[2];
    for (int i = 0; i < 2; ++i) {
      y[i].resize(size_t(T * C));
      rstd[i].resize(size_t(T));
      dx[i].resize(size_t(T * C));
      dw[i].assign(size_t(C), 0.5f);
    }
    rmsnorm_forward(y[0].data(), rstd[0].data(), x.data(), w.data(), T, C, 1e-6f, offset);
    rmsnorm_forward(y[1].data(), rstd[1].data(), x.data(), scale.data(), T, C, 1e-6f);
    rmsnorm_backward(dx[0].data(), dw[0].data(), dy.data(), x.data(), w.data(), rstd[0].data(), T, C, offset);
    rmsnorm_backward(dx[1].data(), dw[1].data(), dy.data(), x.data(), scale.data(), rstd[1].data(), T, C);
    EXPECT_EQ(0, std::memcmp(y[0].data(), y[1].data(), y[0].size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(rstd[0].data(), rstd[1].data(), rstd[0].size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(dx[0].data(), dx[1].data(), dx[0].size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(dw[0].data(), dw[1].data(), dw[0].size() * sizeof(float)));
  });
}

TEST(RMSNorm, ReferenceBackwardMatchesFiniteDifferences) {
  const int64_t T = 3, C = 7;
  // f(x, w) = y; rstd is an internal of the forward, recomputed at each point.
  auto in = test::fd::random_vector(size_t(T * C + C), 9);
  auto dy = test::fd::random_vector(size_t(T * C), 10);
  const double eps = 1e-5;
  std::vector<double> y(size_t(T * C)), rstd(static_cast<size_t>(T)), dx(size_t(T * C + C), 0.0);
  ref::rmsnorm_forward<double>(y.data(), rstd.data(), in.data(), in.data() + T * C, T, C, eps);
  ref::rmsnorm_backward<double>(dx.data(), dx.data() + T * C, dy.data(), in.data(),
                                in.data() + T * C, rstd.data(), T, C);
  auto f = [&](const std::vector<double>& v, std::vector<double>& out) {
    std::vector<double> r(static_cast<size_t>(T));
    ref::rmsnorm_forward<double>(out.data(), r.data(), v.data(), v.data() + T * C, T, C, eps);
  };
  auto r = test::fd::check_gradient(f, in, dy, dx);
  EXPECT_TRUE(r.ok()) << r.str();
}

}  // namespace
}  // namespace lt
