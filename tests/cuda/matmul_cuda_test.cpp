// cuBLASLt products against float64 from the same (bf16- or fp32-valued) inputs, for each
// transposition and for accumulation onto C (beta 1), and run to run bit for bit.
// Bound: fp32 accumulation of K products is within gamma_K of sum_k |a b| (Higham 3.5);
// it is doubled because the tensor cores' internal accumulation order and rounding are
// not documented (a chopped, not rounded, fp32 sum is within 2 K u), plus the rounding of
// alpha * sum + beta * C into C.
#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"
#include "cuda_test_util.h"
#include "kernels/cuda/matmul_cuda.h"

namespace lt {
namespace {

using cuda::DeviceBuffer;
using cuda::to_device;
using cuda::to_host;

void check_gemm(cuda::Gemm& gemm, int64_t M, int64_t N, int64_t K, bool ta, bool tb, cuda::GemmInput input,
                float beta) {
  std::vector<float> a = test::normal_floats(M * K, 1.0f, 21 + M), b = test::normal_floats(K * N, 1.0f, 22 + N);
  std::vector<float> c0 = test::normal_floats(M * N, 1.0f, 23);
  const bool bf = input == cuda::GemmInput::BF16;
  std::vector<uint16_t> a16, b16;
  if (bf) a16 = test::round_to_bf16(a), b16 = test::round_to_bf16(b);  // the reference reads the GPU's values
  DeviceBuffer da = bf ? to_device(a16) : to_device(a), db = bf ? to_device(b16) : to_device(b);
  DeviceBuffer dc = to_device(c0), dc2 = to_device(c0);
  cuda::GemmArgs g;
  g.a = da.data();
  g.b = db.data();
  g.m = M, g.n = N, g.k = K, g.trans_a = ta, g.trans_b = tb, g.input = input, g.alpha = 1.0f, g.beta = beta;
  g.c = dc.as<float>();
  gemm.run(g);
  g.c = dc2.as<float>();
  gemm.run(g);
  const std::vector<float> c = to_host<float>(dc, M * N), c2 = to_host<float>(dc2, M * N);
  std::vector<double> want(M * N), bound(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0, sa = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double av = ta ? a[k * M + i] : a[i * K + k], bv = tb ? b[j * K + k] : b[k * N + j];
        s += av * bv;
        sa += std::fabs(av * bv);
      }
      const double v = s + beta * c0[i * N + j];
      want[i * N + j] = v;
      bound[i * N + j] = 2 * test::gamma(static_cast<double>(K)) * sa +
                         test::gamma(2) * (std::fabs(s) + std::fabs(beta * c0[i * N + j]));
    }
  const std::string what = std::string(bf ? "bf16" : "fp32") + " gemm " + std::to_string(M) + "x" +
                           std::to_string(N) + "x" + std::to_string(K) + (ta ? " A^T" : "") + (tb ? " B^T" : "") +
                           (beta != 0 ? " beta 1" : "");
  test::expect_within(c, want, bound, what.c_str());
  int64_t differ = 0;
  for (int64_t i = 0; i < M * N; ++i) differ += test::bits_of(c[i]) != test::bits_of(c2[i]);
  EXPECT_EQ(differ, 0) << what << ": two runs differ";
}

TEST(CudaKernels, GemmMatchesFloat64ForEveryTransposition) {
  LT_REQUIRE_CUDA_DEVICE();
  cuda::Gemm gemm;
  for (auto input : {cuda::GemmInput::BF16, cuda::GemmInput::F32})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) check_gemm(gemm, 96, 136, 200, ta, tb, input, 0.0f);
  // A linear layer's three products at an odd shape: y = x W^T, dx = dy W, dW += dy^T x.
  check_gemm(gemm, 257, 384, 1000, false, true, cuda::GemmInput::BF16, 0.0f);
  check_gemm(gemm, 257, 1000, 384, false, false, cuda::GemmInput::BF16, 0.0f);
  check_gemm(gemm, 384, 1000, 257, true, false, cuda::GemmInput::BF16, 1.0f);
}

}  // namespace
}  // namespace lt
