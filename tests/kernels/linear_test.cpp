// Linear: fast path (fp32 and bf16) against the double reference, at every ISA level
// this machine runs (test::for_each_isa: the dbias column sum is dispatched, and oneDNN
// gets the same cap); dbias bitwise identical for any thread count within a level; the
// reference's backward against finite differences.
//
// Tolerances, as in matmul_test.cpp: an fp32 sum of n products is within (n + 2) u times
// the sum of the absolute terms (+ |old| when accumulating):
//   y:     (K + 2) u (sum_k |x||w| + |b|)      dx: (N + 2) u (sum_n |dy||w| + |dx_old|)
//   dw:    (M + 2) u (sum_m |dy||x| + |dw_old|)  dbias: (M + 2) u (sum_m |dy| + |old|)
// Under BF16, x, w (and dy for the backward) are rounded to bf16 before the fp32 matmul;
// the reference gets the same rounded values, so the bounds are unchanged.
#include "kernels/cpu/linear.h"

#include <cstring>

#include "kernels/finite_difference.h"
#include "isa_test_util.h"
#include "kernels/kernel_test_util.h"

namespace lt {
namespace {

using test::abs_of;
using test::kU32;

void check(int64_t M, int64_t K, int64_t N, Precision p, bool with_bf16_copy) {
  const bool bf = p == Precision::BF16;
  auto x = test::random_floats(static_cast<size_t>(M * K), uint64_t(M), -2, 2);
  auto w = test::random_floats(static_cast<size_t>(N * K), uint64_t(N));
  auto b = test::random_floats(static_cast<size_t>(N), 3);
  auto dy = test::random_floats(static_cast<size_t>(M * N), 4);
  auto dx = test::random_floats(static_cast<size_t>(M * K), 5);
  auto dw = test::random_floats(static_cast<size_t>(N * K), 6);
  auto db = test::random_floats(static_cast<size_t>(N), 7);
  std::vector<bf16> wb;
  if (with_bf16_copy)
    for (float v : w) wb.push_back(f32_to_bf16(v));
  // The values the fast path multiplies (bias and dbias stay fp32).
  auto xr = bf ? test::round_bf16(x) : x, wr = bf ? test::round_bf16(w) : w;
  auto dyr = bf ? test::round_bf16(dy) : dy;
  const std::string where = "M=" + std::to_string(M) + " K=" + std::to_string(K) +
                            " N=" + std::to_string(N) + (bf ? " bf16" : " f32") +
                            (with_bf16_copy ? " w_bf16" : "");

  // Forward.
  std::vector<float> y(static_cast<size_t>(M * N));
  linear_forward(y.data(), x.data(), w.data(), wb.empty() ? nullptr : wb.data(), b.data(), M, K,
                 N, p);
  auto xd = test::to_double(xr), wd = test::to_double(wr), bd = test::to_double(b);
  std::vector<double> yw(y.size()), by(y.size());
  ref::linear_forward<double>(yw.data(), xd.data(), wd.data(), bd.data(), M, K, N);
  auto ax = abs_of(xr), aw = abs_of(wr), ab = abs_of(b);
  ref::linear_forward<double>(by.data(), ax.data(), aw.data(), ab.data(), M, K, N);
  for (auto& v : by) v = (K + 2) * kU32 * v + 1e-30;
  EXPECT_TRUE(test::within_bound(y, yw, by)) << "forward " << where;

  // Backward, dx accumulating.
  auto dyd = test::to_double(dyr), dxw = test::to_double(dx), dww = test::to_double(dw);
  auto dbw = test::to_double(db);
  // dbias sums the fp32 dy (not rounded): the reference gets the fp32 values for it.
  std::vector<double> dbw_src = test::to_double(dy), unused(static_cast<size_t>(N * K));
  ref::linear_backward<double>(dxw.data(), dww.data(), nullptr, dyd.data(), xd.data(), wd.data(),
                               M, K, N, true);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) dbw[size_t(j)] += dbw_src[size_t(i * N + j)];
  auto bdx = abs_of(dx), bdw = abs_of(dw), bdb = abs_of(db);
  auto ady = abs_of(dyr), ady32 = abs_of(dy);
  ref::linear_backward<double>(bdx.data(), bdw.data(), nullptr, ady.data(), ax.data(), aw.data(),
                               M, K, N, true);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) bdb[size_t(j)] += ady32[size_t(i * N + j)];
  for (auto& v : bdx) v = (N + 2) * kU32 * v + 1e-30;
  for (auto& v : bdw) v = (M + 2) * kU32 * v + 1e-30;
  for (auto& v : bdb) v = (M + 2) * kU32 * v + 1e-30;
  linear_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                  wb.empty() ? nullptr : wb.data(), M, K, N, true, p);
  EXPECT_TRUE(test::within_bound(dx, dxw, bdx)) << "dx " << where;
  EXPECT_TRUE(test::within_bound(dw, dww, bdw)) << "dw " << where;
  EXPECT_TRUE(test::within_bound(db, dbw, bdb)) << "dbias " << where;
}

TEST(Linear, F32MatchesReference) {
  test::for_each_isa([](Isa) {
    check(1, 1, 1, Precision::F32, false);
    check(1, 19, 7, Precision::F32, false);    // T = 1
    check(37, 33, 45, Precision::F32, false);  // odd sizes
    check(200, 96, 300, Precision::F32, false);
  });
}

TEST(Linear, Bf16MatchesReferenceOnRoundedValues) {
  check(1, 19, 7, Precision::BF16, false);
  check(37, 33, 45, Precision::BF16, false);
  check(37, 33, 45, Precision::BF16, true);
  check(200, 96, 300, Precision::BF16, true);
}

TEST(Linear, OverwritingDx) {
  const int64_t M = 4, K = 3, N = 5;
  auto x = test::random_floats(static_cast<size_t>(M * K), 1);
  auto w = test::random_floats(static_cast<size_t>(N * K), 2);
  auto dy = test::random_floats(static_cast<size_t>(M * N), 3);
  std::vector<float> dx(static_cast<size_t>(M * K), 1e6f), dw(static_cast<size_t>(N * K));
  std::vector<float> want(dx.size());
  linear_backward(dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), nullptr, M, K, N,
                  false, Precision::F32);
  ref::matmul<float>(want.data(), dy.data(), false, w.data(), false, M, K, N, false);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx[i], want[i], (N + 2) * kU32 * N) << i;
}

// Rounding a GEMM input once ahead (round_gemm_input, LinearInput::bf16_exact) and
// backward's single rounding of dy for both of its GEMMs are work saved, never a change:
// on both bf16 paths, the results are bitwise those of each GEMM rounding for itself (one
// GEMM per call), and the bias gradient still sums the unrounded dy.
TEST(Linear, RoundingOnceAheadChangesNoBit) {
  const int64_t M = 45, K = 70, N = 33;
  const auto x = test::random_floats(size_t(M * K), 11, -2, 2);
  const auto w = test::random_floats(size_t(N * K), 12);
  const auto dy = test::random_floats(size_t(M * N), 13);
  std::vector<bf16> wb;
  for (float v : w) wb.push_back(f32_to_bf16(v));
  const auto run = [&](bool ahead, std::vector<float> out[4]) {
    std::vector<float> xa = x;
    bool exact = false;
    if (ahead) {
      exact = round_gemm_input(xa.data(), M * K, Precision::BF16);
      EXPECT_EQ(exact, gemm_inputs_rounded(Precision::BF16));
      EXPECT_EQ(exact, bf16_gemm_widens(MatmulLayout::Forward) || bf16_gemm_widens(MatmulLayout::WeightGrad));
    }
    const LinearInput in{xa.data(), exact};
    out[0].assign(size_t(M * N), 0.f);
    out[1].assign(size_t(M * K), 0.5f);
    out[2].assign(size_t(N * K), 0.25f);
    out[3].assign(size_t(N), 0.125f);
    linear_forward(out[0].data(), in, w.data(), wb.data(), nullptr, M, K, N, Precision::BF16);
    if (ahead) {  // both GEMMs in one call: dy rounded once
      linear_backward(out[1].data(), out[2].data(), out[3].data(), dy.data(), in, w.data(), wb.data(), M, K, N,
                      true, Precision::BF16);
    } else {  // one GEMM per call: each rounds its own operands
      linear_backward(out[1].data(), nullptr, out[3].data(), dy.data(), in, w.data(), wb.data(), M, K, N, true,
                      Precision::BF16);
      linear_backward(nullptr, out[2].data(), nullptr, dy.data(), in, w.data(), wb.data(), M, K, N, true,
                      Precision::BF16);
    }
  };
  test::for_each_isa([&](Isa isa) {
    for (Bf16GemmPath path : {Bf16GemmPath::Widened, Bf16GemmPath::Native}) {
      if (path == Bf16GemmPath::Native && isa < Isa::Avx512) continue;  // always widened there
      set_bf16_gemm_path(path);
      std::vector<float> once[4], each[4];
      run(true, once);
      run(false, each);
      set_bf16_gemm_path(std::nullopt);
      const char* names[4] = {"y", "dx", "dw", "dbias"};
      for (int i = 0; i < 4; ++i)
        EXPECT_EQ(0, std::memcmp(once[i].data(), each[i].data(), once[i].size() * sizeof(float)))
            << names[i] << (path == Bf16GemmPath::Widened ? " widened" : " native");
    }
  });
}

TEST(Linear, DbiasIsBitwiseIdenticalForAnyThreadCount) {
  const int64_t M = 400, K = 8, N = 700;  // several column blocks, threaded
  auto x = test::random_floats(static_cast<size_t>(M * K), 1);
  auto w = test::random_floats(static_cast<size_t>(N * K), 2);
  auto dy = test::random_floats(static_cast<size_t>(M * N), 3);
  std::vector<float> dx(static_cast<size_t>(M * K)), dw(static_cast<size_t>(N * K));
  test::for_each_isa([&](Isa) {
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      test::ScopedThreads scope(threads);
      std::vector<float> db(static_cast<size_t>(N), 0.5f);
      linear_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), nullptr, M,
                      K, N, false, Precision::F32);
      if (first.empty())
        first = db;
      else
        EXPECT_EQ(0, std::memcmp(first.data(), db.data(), db.size() * sizeof(float)))
            << threads << " threads";
    }
  });
}

TEST(Linear, ReferenceBackwardMatchesFiniteDifferences) {
  const int64_t M = 3, K = 4, N = 5;
  // in = [x (M*K) | w (N*K) | b (N)]
  auto in = test::fd::random_vector(static_cast<size_t>(M * K + N * K + N), 11);
  auto dy = test::fd::random_vector(static_cast<size_t>(M * N), 12);
  std::vector<double> g(in.size(), 0.0);
  ref::linear_backward<double>(g.data(), g.data() + M * K, g.data() + M * K + N * K, dy.data(),
                               in.data(), in.data() + M * K, M, K, N, false);
  auto f = [&](const std::vector<double>& v, std::vector<double>& y) {
    ref::linear_forward<double>(y.data(), v.data(), v.data() + M * K, v.data() + M * K + N * K, M,
                                K, N);
  };
  auto r = test::fd::check_gradient(f, in, dy, g);
  EXPECT_TRUE(r.ok()) << r.str();
}

}  // namespace
}  // namespace lt
