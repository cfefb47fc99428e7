// The causal depthwise conv1d + SiLU kernel and the gated RMSNorm kernel of the Gated
// DeltaNet layer at every ISA level this machine runs, against float64 references within
// derived bounds (tests/kernels/conv_norm_reference.h), the references against float64
// finite differences, bitwise invariance over thread counts, and bad shapes.
#include "kernels/cpu/causal_conv1d.h"

#include <cstring>

#include "isa_test_util.h"
#include "kernels/conv_norm_reference.h"
#include "kernels/cpu/gated_rmsnorm.h"
#include "kernels/finite_difference.h"
#include "kernels/kernel_test_util.h"
#include "test_util.h"

namespace lt {
namespace {

namespace cn = test::convnorm;
using cn::conv_data;
using cn::ConvData;
using cn::norm_data;
using cn::NormData;

void check_conv(const CausalConvShape& s) {
  const ConvData d = conv_data(s, uint64_t(s.seq + s.channels));
  const auto ref = cn::conv_reference(test::to_double(d.x), test::to_double(d.w), test::to_double(d.dy),
                                      test::to_double(d.dw0), s.batch, s.seq, s.channels, s.kernel);
  test::for_each_isa([&](Isa) {
    std::vector<float> y(d.x.size(), NAN), dx(d.x.size(), NAN), dw = d.dw0;
    causal_conv1d_silu_forward(y.data(), d.x.data(), d.w.data(), s);
    causal_conv1d_silu_backward(dx.data(), dw.data(), d.dy.data(), d.x.data(), d.w.data(), s);
    const std::string what = "B=" + std::to_string(s.batch) + " S=" + std::to_string(s.seq) +
                             " C=" + std::to_string(s.channels) + " K=" + std::to_string(s.kernel);
    EXPECT_TRUE(test::within_bound(y, ref.y, ref.by)) << "y " << what;
    EXPECT_TRUE(test::within_bound(dx, ref.dx, ref.bdx)) << "dx " << what;
    EXPECT_TRUE(test::within_bound(dw, ref.dw, ref.bdw)) << "dw " << what;
  });
}

TEST(CausalConv1dSilu, MatchesReference) {
  check_conv({1, 1, 1, 4});    // one token: only the last tap sees data
  check_conv({1, 3, 5, 4});    // seq < kernel - 1 + 1
  check_conv({2, 50, 70, 4});  // channels over one block, odd
  check_conv({1, 40, 130, 2});
  check_conv({3, 33, 64, 7});
}

TEST(CausalConv1dSilu, ReferenceMatchesFiniteDifferences) {
  const CausalConvShape s{2, 6, 3, 4};
  const ConvData d = conv_data(s, 3);
  const size_t nx = d.x.size();
  std::vector<double> xw = test::to_double(d.x);
  for (float f : d.w) xw.push_back(f);
  const std::vector<double> zero(d.w.size(), 0.0);
  auto f = [&](const std::vector<double>& v, std::vector<double>& y) {
    const std::vector<double> x(v.begin(), v.begin() + long(nx)), w(v.begin() + long(nx), v.end());
    y = cn::conv_reference(x, w, std::vector<double>(nx, 0.0), zero, s.batch, s.seq, s.channels, s.kernel).y;
  };
  const auto ref = cn::conv_reference(test::to_double(d.x), test::to_double(d.w), test::to_double(d.dy), zero,
                                      s.batch, s.seq, s.channels, s.kernel);
  std::vector<double> g = ref.dx;
  g.insert(g.end(), ref.dw.begin(), ref.dw.end());
  const auto r = test::fd::check_gradient(f, xw, test::to_double(d.dy), g);
  EXPECT_TRUE(r.ok()) << r.str();
}

void check_norm(int64_t T, int64_t D) {
  const float eps = 1e-6f;
  const NormData d = norm_data(T, D, uint64_t(T * 31 + D));
  test::for_each_isa([&](Isa) {
    std::vector<float> y(d.x.size(), NAN), rstd(size_t(T), NAN), dx(d.x.size(), NAN), dz(d.x.size(), NAN),
        dw = d.dw0, ws(gated_rmsnorm_backward_workspace_floats(T, D), NAN);
    gated_rmsnorm_forward(y.data(), rstd.data(), d.x.data(), d.z.data(), d.w.data(), T, D, eps);
    gated_rmsnorm_backward(dx.data(), dz.data(), dw.data(), d.dy.data(), d.x.data(), d.z.data(), d.w.data(),
                           rstd.data(), T, D, ws.data());
    const auto ref = cn::norm_reference(test::to_double(d.x), test::to_double(d.z), test::to_double(d.w),
                                        test::to_double(d.dy), test::to_double(d.dw0), test::to_double(rstd),
                                        T, D, double(eps));
    const std::string what = "T=" + std::to_string(T) + " D=" + std::to_string(D);
    EXPECT_TRUE(test::within_bound(y, ref.y, ref.by)) << "y " << what;
    EXPECT_TRUE(test::within_bound(rstd, ref.rstd, ref.brstd)) << "rstd " << what;
    EXPECT_TRUE(test::within_bound(dx, ref.dx, ref.bdx)) << "dx " << what;
    EXPECT_TRUE(test::within_bound(dz, ref.dz, ref.bdz)) << "dz " << what;
    EXPECT_TRUE(test::within_bound(dw, ref.dw, ref.bdw)) << "dw " << what;
  });
}

TEST(GatedRmsnorm, MatchesReference) {
  check_norm(1, 1);
  check_norm(3, 7);
  check_norm(300, 128);  // two dw token chunks, the Qwen3.5 value head dim
  check_norm(600, 33);
}

TEST(GatedRmsnorm, ReferenceMatchesFiniteDifferences) {
  const int64_t T = 3, D = 5;
  const NormData d = norm_data(T, D, 7);
  const size_t n = d.x.size();
  std::vector<double> v = test::to_double(d.x);
  for (float f : d.z) v.push_back(f);
  for (float f : d.w) v.push_back(f);
  const std::vector<double> zero(size_t(D), 0.0);
  auto run = [&](const std::vector<double>& p, const std::vector<double>& dy, const std::vector<double>* rstd) {
    const std::vector<double> x(p.begin(), p.begin() + long(n)), z(p.begin() + long(n), p.begin() + long(2 * n)),
        w(p.begin() + long(2 * n), p.end());
    // rstd for the backward: its own exact one
    const auto fwd = cn::norm_reference(x, z, w, dy, zero, std::vector<double>(size_t(T), 1.0), T, D, 1e-6);
    return cn::norm_reference(x, z, w, dy, zero, rstd ? *rstd : fwd.rstd, T, D, 1e-6);
  };
  auto f = [&](const std::vector<double>& p, std::vector<double>& y) {
    y = run(p, std::vector<double>(n, 0.0), nullptr).y;
  };
  const auto ref = run(v, test::to_double(d.dy), nullptr);
  std::vector<double> g = ref.dx;
  g.insert(g.end(), ref.dz.begin(), ref.dz.end());
  g.insert(g.end(), ref.dw.begin(), ref.dw.end());
  const auto r = test::fd::check_gradient(f, v, test::to_double(d.dy), g);
  EXPECT_TRUE(r.ok()) << r.str();
}

TEST(GatedDeltaNetConvNorm, BitwiseIdenticalAcrossThreadCounts) {
  const CausalConvShape s{2, 300, 200, 4};
  const ConvData c = conv_data(s, 11);
  const int64_t T = 700, D = 64;
  const NormData d = norm_data(T, D, 12);
  test::for_each_isa([&](Isa) {
    std::vector<std::vector<float>> runs[2];
    for (int k = 0; k < 2; ++k) {
      test::ScopedThreads threads(k == 0 ? 1 : 3);
      std::vector<float> y(c.x.size()), dx(c.x.size()), dw = c.dw0;
      causal_conv1d_silu_forward(y.data(), c.x.data(), c.w.data(), s);
      causal_conv1d_silu_backward(dx.data(), dw.data(), c.dy.data(), c.x.data(), c.w.data(), s);
      std::vector<float> ny(d.x.size()), rstd(static_cast<size_t>(T)), ndx(d.x.size()), ndz(d.x.size()), ndw = d.dw0,
          ws(gated_rmsnorm_backward_workspace_floats(T, D));
      gated_rmsnorm_forward(ny.data(), rstd.data(), d.x.data(), d.z.data(), d.w.data(), T, D, 1e-6f);
      gated_rmsnorm_backward(ndx.data(), ndz.data(), ndw.data(), d.dy.data(), d.x.data(), d.z.data(),
                             d.w.data(), rstd.data(), T, D, ws.data());
      runs[k] = {y, dx, dw, ny, rstd, ndx, ndz, ndw};
    }
    for (size_t i = 0; i < runs[0].size(); ++i)
      EXPECT_EQ(0, std::memcmp(runs[0][i].data(), runs[1][i].data(), runs[0][i].size() * sizeof(float)))
          << "output " << i;
  });
}

TEST(GatedDeltaNetConvNorm, BadShapesAreErrors) {
  std::vector<float> buf(16, 0.0f);
  const std::string e1 = test::error_of(
      [&] { causal_conv1d_silu_forward(buf.data(), buf.data(), buf.data(), CausalConvShape{1, 4, 2, 0}); });
  EXPECT_NE(e1.find("kernel"), std::string::npos) << e1;
  const std::string e4 = test::error_of(
      [&] { causal_conv1d_silu_forward(buf.data(), buf.data(), buf.data(), CausalConvShape{1, 1, 1, 17}); });
  EXPECT_NE(e4.find("at most 16"), std::string::npos) << e4;
  const std::string e2 = test::error_of([&] { gated_rmsnorm_backward_workspace_floats(0, 4); });
  EXPECT_NE(e2.find("T=0"), std::string::npos) << e2;
  const std::string e3 = test::error_of(
      [&] { gated_rmsnorm_forward(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), 2, 2, 0.0f); });
  EXPECT_NE(e3.find("eps"), std::string::npos) << e3;
}

}  // namespace
}  // namespace lt
