// Every backend's kernel table (exec/backend.h: Backend::kernels()) against the float64
// references of kernels/cpu/ (ref::<family><double>), as ggml's test-backend-ops checks
// each backend against the CPU: one case per op family, forward and backward. Bounds are
// those the kernel tests derive, from fp32's unit roundoff u and the magnitude of the
// terms (a reduction of n terms: (n + c) u times the sum of their absolute values).
//
// Today every backend here (cpu, emu) hands out the CPU table, so this checks that each
// entry reaches the kernel it names with the arguments in their places; a GPU backend's
// table runs the same cases. The table's other families (attention, the head's
// cross-entropy whole and streamed, gated RMSNorm, the causal conv1d, the gated delta rule
// and GeGLU) have their backend-ops cases in tests/exec/backend_ops_mixers_test.cpp.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "exec/backend.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/elementwise_checks.h"
#include "kernels/kernel_test_util.h"

namespace lt {
namespace {

using test::abs_of;
using test::kU32;

// The bound (n + c) u |terms| + a floor under underflow, element by element.
std::vector<double> scaled(std::vector<double> magnitude, double n_plus_c) {
  for (double& m : magnitude) m = n_plus_c * kU32 * m + 1e-30;
  return magnitude;
}

class BackendOps : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { backend_ = make_backend(GetParam()); }
  const KernelTable& k() const { return backend_->kernels(); }
  std::unique_ptr<Backend> backend_;
};

TEST_P(BackendOps, Embedding) {
  const int64_t T = 37, V = 11, C = 24;
  std::vector<int32_t> tok(T);
  for (int64_t t = 0; t < T; ++t) tok[static_cast<size_t>(t)] = int32_t((t * 7 + 3) % V);  // repeats: backward sums rows
  auto table = test::random_floats(static_cast<size_t>(V * C), 1), dout = test::random_floats(static_cast<size_t>(T * C), 2);
  auto dtable = test::random_floats(static_cast<size_t>(V * C), 3);
  std::vector<float> out(static_cast<size_t>(T * C));
  k().embedding_forward(out.data(), tok.data(), table.data(), T, V, C);
  std::vector<double> want(static_cast<size_t>(T * C)), td = test::to_double(table);
  ref::embedding_forward<double>(want.data(), tok.data(), td.data(), T, C);
  EXPECT_EQ(out, std::vector<float>(want.begin(), want.end()));  // a copy of rows: exact

  std::vector<double> dwant = test::to_double(dtable), dd = test::to_double(dout);
  std::vector<double> mag = abs_of(dtable), ad = abs_of(dout);
  ref::embedding_backward<double>(dwant.data(), tok.data(), dd.data(), T, C);
  ref::embedding_backward<double>(mag.data(), tok.data(), ad.data(), T, C);
  k().embedding_backward(dtable.data(), tok.data(), dout.data(), T, V, C);
  EXPECT_TRUE(test::within_bound(dtable, dwant, scaled(mag, T + 2)));
}

// Plain (w) and Gemma's (1 + w, the sum rounded to fp32 first): the reference runs on that
// fp32 scale.
TEST_P(BackendOps, RmsNormWithAndWithoutWeightOffset) {
  const int64_t T = 9, C = 96;
  const float eps = 1e-5f;
  for (float offset : {0.0f, 1.0f}) {
    SCOPED_TRACE("w_offset " + std::to_string(offset));
    auto x = test::random_floats(static_cast<size_t>(T * C), 4, -2, 2), w = test::random_floats(static_cast<size_t>(C), 5, 0.5f, 1.5f);
    auto dy = test::random_floats(static_cast<size_t>(T * C), 6), dw = test::random_floats(static_cast<size_t>(C), 7);
    std::vector<float> scale(w.size()), y(static_cast<size_t>(T * C)), rstd(static_cast<size_t>(T)), dx(static_cast<size_t>(T * C));
    for (size_t c = 0; c < w.size(); ++c) scale[c] = offset + w[c];
    k().rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), T, C, eps, offset);
    auto xd = test::to_double(x), wd = test::to_double(scale), dyd = test::to_double(dy);
    std::vector<double> yw(static_cast<size_t>(T * C)), rw(static_cast<size_t>(T));
    ref::rmsnorm_forward<double>(yw.data(), rw.data(), xd.data(), wd.data(), T, C, double(eps));
    EXPECT_TRUE(test::within_bound(y, yw, scaled(abs_of(std::vector<float>(yw.begin(), yw.end())), C / 2.0 + 6)));
    EXPECT_TRUE(test::within_bound(rstd, rw, scaled(rw, C / 2.0 + 4)));

    // Backward from the same rstd on both sides; dx overwrites, dw accumulates.
    auto rd = test::to_double(rstd), dww = test::to_double(dw);
    std::vector<double> dxw(static_cast<size_t>(T * C)), bdx(static_cast<size_t>(T * C)), bdw = abs_of(dw);
    ref::rmsnorm_backward<double>(dxw.data(), dww.data(), dyd.data(), xd.data(), wd.data(), rd.data(), T, C);
    for (int64_t t = 0; t < T; ++t) {
      const double r = rd[static_cast<size_t>(t)];
      double adot = 0;
      for (int64_t c = 0; c < C; ++c) adot += std::fabs(dyd[static_cast<size_t>(t * C + c)] * wd[static_cast<size_t>(c)] * xd[static_cast<size_t>(t * C + c)]);
      for (int64_t c = 0; c < C; ++c) {
        const size_t i = static_cast<size_t>(t * C + c);
        bdx[i] = (C + 8) * kU32 * (std::fabs(r * dyd[i] * wd[static_cast<size_t>(c)]) + r * r * r * std::fabs(xd[i]) * adot / C) +
                 1e-30;
        bdw[static_cast<size_t>(c)] += std::fabs(dyd[i] * xd[i] * r);
      }
    }
    k().rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), T, C, offset);
    EXPECT_TRUE(test::within_bound(dx, dxw, bdx));
    EXPECT_TRUE(test::within_bound(dw, dww, scaled(bdw, T + 4)));
  }
}

TEST_P(BackendOps, RopeWholeAndPartialAtPositions) {
  const int64_t B = 2, S = 5, H = 3, D = 8;
  const std::vector<int32_t> pos = {0, 1, 2, 0, 1, 4, 3, 2, 1, 0};  // [B*S]: documents' positions
  for (int64_t rotary : {int64_t{0}, int64_t{4}}) {
    const int64_t half = (rotary > 0 ? rotary : D) / 2;
    std::vector<float> cos(static_cast<size_t>(S * half)), sin(cos.size());  // [S, half]
    for (int64_t p = 0; p < S; ++p)
      for (int64_t i = 0; i < half; ++i) {
        const double angle = double(p) / std::pow(10000.0, double(i) / double(half));
        cos[static_cast<size_t>(p * half + i)] = float(std::cos(angle));
        sin[static_cast<size_t>(p * half + i)] = float(std::sin(angle));
      }
    const auto cd = test::to_double(cos), sd = test::to_double(sin);
    for (bool backward : {false, true}) {
      auto x = test::random_floats(static_cast<size_t>(B * S * H * D), uint64_t(8 + rotary + backward));
      std::vector<double> want = test::to_double(x), mag = abs_of(x);
      ref::rope_apply<double>(want.data(), cd.data(), sd.data(), B, S, H, D, backward ? -1.0 : 1.0, pos.data(),
                              rotary);
      // Each rotated channel is a two-term sum: |x_i cos| + |x_pair sin| (3 roundings).
      for (int64_t r = 0; r < B * S * H; ++r) {
        const int64_t p = pos[static_cast<size_t>(r / H)];
        for (int64_t i = 0; i < half; ++i) {
          const double a = std::fabs(double(x[static_cast<size_t>(r * D + i)])), bb = std::fabs(double(x[static_cast<size_t>(r * D + i + half)]));
          const double c = std::fabs(cd[static_cast<size_t>(p * half + i)]), sn = std::fabs(sd[static_cast<size_t>(p * half + i)]);
          mag[static_cast<size_t>(r * D + i)] = a * c + bb * sn;
          mag[static_cast<size_t>(r * D + i + half)] = bb * c + a * sn;
        }
      }
      if (backward)
        k().rope_backward(x.data(), cos.data(), sin.data(), B, S, H, D, pos.data(), rotary);
      else
        k().rope_forward(x.data(), cos.data(), sin.data(), B, S, H, D, pos.data(), rotary);
      EXPECT_TRUE(test::within_bound(x, want, scaled(mag, 3)))
          << "rotary " << rotary << (backward ? " backward" : " forward");
    }
  }
}

TEST_P(BackendOps, SwiGlu) {
  const int64_t n = 1000;
  auto g = test::random_floats(static_cast<size_t>(n), 9, -12, 12), u = test::random_floats(static_cast<size_t>(n), 10);
  auto dh = test::random_floats(static_cast<size_t>(n), 11);
  std::vector<float> h(static_cast<size_t>(n)), dg(static_cast<size_t>(n)), du(static_cast<size_t>(n));
  k().swiglu_forward(h.data(), g.data(), u.data(), n);
  k().swiglu_backward(dg.data(), du.data(), dh.data(), g.data(), u.data(), n);
  auto gd = test::to_double(g), ud = test::to_double(u), dhd = test::to_double(dh);
  std::vector<double> hw(static_cast<size_t>(n)), dgw(static_cast<size_t>(n)), duw(static_cast<size_t>(n)), bh(static_cast<size_t>(n)), bdg(static_cast<size_t>(n)), bdu(static_cast<size_t>(n));
  ref::swiglu_forward<double>(hw.data(), gd.data(), ud.data(), n);
  ref::swiglu_backward<double>(dgw.data(), duw.data(), dhd.data(), gd.data(), ud.data(), n);
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {  // tests/kernels/swiglu_test.cpp derives these
    const double s = 1 / (1 + std::exp(-gd[i]));
    bh[i] = 10 * kU32 * std::fabs(hw[i]) + 1e-30;
    bdu[i] = 10 * kU32 * std::fabs(duw[i]) + 1e-30;
    bdg[i] = 16 * kU32 * std::fabs(dhd[i] * ud[i] * s) * (1 + std::fabs(gd[i])) + 1e-30;
  }
  EXPECT_TRUE(test::within_bound(h, hw, bh));
  EXPECT_TRUE(test::within_bound(dg, dgw, bdg));
  EXPECT_TRUE(test::within_bound(du, duw, bdu));
}

TEST_P(BackendOps, LinearAndMatmul) {
  const int64_t M = 13, K = 40, N = 17;
  auto x = test::random_floats(static_cast<size_t>(M * K), 12), w = test::random_floats(static_cast<size_t>(N * K), 13);
  auto bias = test::random_floats(static_cast<size_t>(N), 14), dy = test::random_floats(static_cast<size_t>(M * N), 15);
  auto dx = test::random_floats(static_cast<size_t>(M * K), 16), dw = test::random_floats(static_cast<size_t>(N * K), 17);
  auto db = test::random_floats(static_cast<size_t>(N), 18);
  const auto xd = test::to_double(x), wd = test::to_double(w), bd = test::to_double(bias), dyd = test::to_double(dy);
  const auto ax = abs_of(x), aw = abs_of(w), ab = abs_of(bias), ady = abs_of(dy);

  std::vector<float> y(static_cast<size_t>(M * N));
  k().linear_forward(y.data(), x.data(), w.data(), nullptr, bias.data(), M, K, N, Precision::F32);
  std::vector<double> yw(y.size()), my(y.size());
  ref::linear_forward<double>(yw.data(), xd.data(), wd.data(), bd.data(), M, K, N);
  ref::linear_forward<double>(my.data(), ax.data(), aw.data(), ab.data(), M, K, N);
  EXPECT_TRUE(test::within_bound(y, yw, scaled(my, K + 2))) << "linear forward";

  // Backward: dx accumulating, dw and dbias accumulating.
  std::vector<double> dxw = test::to_double(dx), dww = test::to_double(dw), dbw = test::to_double(db);
  std::vector<double> mdx = abs_of(dx), mdw = abs_of(dw), mdb = abs_of(db);
  ref::linear_backward<double>(dxw.data(), dww.data(), dbw.data(), dyd.data(), xd.data(), wd.data(), M, K, N, true);
  ref::linear_backward<double>(mdx.data(), mdw.data(), mdb.data(), ady.data(), ax.data(), aw.data(), M, K, N, true);
  k().linear_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), nullptr, M, K, N, true,
                      Precision::F32);
  EXPECT_TRUE(test::within_bound(dx, dxw, scaled(mdx, N + 2))) << "linear backward dx";
  EXPECT_TRUE(test::within_bound(dw, dww, scaled(mdw, M + 2))) << "linear backward dw";
  EXPECT_TRUE(test::within_bound(db, dbw, scaled(mdb, M + 2))) << "linear backward dbias";

  // A plain GEMM with both operands transposed: c[M,N] = a^T b^T, a [K,M], b [N,K].
  auto a = test::random_floats(static_cast<size_t>(K * M), 19), b = test::random_floats(static_cast<size_t>(N * K), 20);
  std::vector<float> c(static_cast<size_t>(M * N));
  k().matmul(c.data(), a.data(), true, b.data(), true, M, N, K, false, Precision::F32);
  std::vector<double> cw(c.size()), mc(c.size());
  const auto ad = test::to_double(a), bdd = test::to_double(b), aa = abs_of(a), abb = abs_of(b);
  ref::matmul<double>(cw.data(), ad.data(), true, bdd.data(), true, M, N, K, false);
  ref::matmul<double>(mc.data(), aa.data(), true, abb.data(), true, M, N, K, false);
  EXPECT_TRUE(test::within_bound(c, cw, scaled(mc, K + 2))) << "matmul";
}

TEST_P(BackendOps, SumOfSquaresAndConvert) {
  const int64_t n = 5000;
  auto x = test::random_floats(static_cast<size_t>(n), 21, -3, 3);
  double want = 0;
  for (float v : x) want += double(v) * double(v);
  // Products of floats are exact in float64; the sum's n additions round at 2^-53 each.
  const double got = k().sum_of_squares(x.data(), n);
  EXPECT_LE(std::fabs(got - want), (n + 2) * 0x1p-53 * want);

  std::vector<bf16> y(static_cast<size_t>(n));
  k().convert_f32_to_bf16(y.data(), x.data(), static_cast<size_t>(n));
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {  // round to nearest: within half a bf16 ulp
    const double back = double(bf16_to_f32(y[i]));
    ASSERT_LE(std::fabs(back - double(x[i])), test::kUBf16 * std::fabs(double(x[i]))) << i;
  }
}

// The block's elementwise steps (tests/kernels/elementwise_checks.h: the adds and the
// scale exact, row moves bit for bit, the gate within its derived bound).
TEST_P(BackendOps, ElementwiseSteps) {
  namespace ew = test::elementwise;
  const int64_t rows = 300, D = 20, n = rows * 2 * D;
  const std::vector<float> a = test::random_floats(n, 31, -3, 3), b = test::random_floats(n, 32, -3, 3);
  std::vector<float> y = a, z(n);
  k().add_inplace(y.data(), b.data(), n);
  k().add_into(z.data(), a.data(), b.data(), n);
  ew::expect_rounded(y, ew::exact_sum(a, b), "add_inplace");
  ew::expect_rounded(z, ew::exact_sum(a, b), "add_into");
  y = a;
  k().scale_inplace(y.data(), 0.375f, n);
  ew::expect_rounded(y, ew::exact_scaled(a, 0.375f), "scale_inplace");

  std::vector<int32_t> ids(rows);
  for (int64_t t = 0; t < rows; ++t) ids[t] = static_cast<int32_t>(t % 4);
  y = a;
  k().zero_rows_with_id(y.data(), ids.data(), rows, 2 * D, 2);
  ew::expect_bits(y, ew::rows_zeroed(a, ids, 2 * D, 2), "padding rows");
  z = a;
  k().copy_rows(z.data() + D, 2 * D, b.data(), D, rows, D);
  ew::expect_bits(z, ew::rows_copied(a, D, 2 * D, b, D, rows, D), "row copies");

  const std::vector<float> gate = test::random_floats(n, 33, -20, 20);
  ew::GateOutputs got{std::vector<float>(n), b, std::vector<float>(n)};
  k().sigmoid_gate_forward(got.y.data(), a.data(), gate.data(), n);
  k().sigmoid_gate_backward(got.dx.data(), got.dgate.data(), got.dx.data(), a.data(), gate.data(), n);
  ew::expect_sigmoid_gate(got, a, gate, b, /*exp_ulps=*/1);
}

INSTANTIATE_TEST_SUITE_P(EveryBackend, BackendOps, ::testing::Values("cpu", "emu"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace lt
