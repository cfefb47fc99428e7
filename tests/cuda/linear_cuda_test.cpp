// The GPU's linear layer and matmul (kernels/cuda/linear_cuda.h) against float64 from the
// same values: under bf16 inputs the reference reads the operands rounded to bf16 (the
// rounding is the contract, nearest even, the CPU's), under fp32 the fp32 values.
// Bounds: a product of K terms accumulated in fp32 is within 2 gamma_K of sum |a b| (doubled
// as in matmul_cuda_test.cpp: the tensor cores' accumulation order and rounding are not
// documented), and each further rounding of the result (beta C added, the bias added) is
// within u of its magnitude, gamma_2 for both. dbias is M + 1 fp32 additions of fp32 values
// (in-order chunk sums, then the chunks onto dbias): gamma_{M+1} of sum |dy| + |dbias|.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cuda_test_util.h"
#include "kernels/cuda/cublaslt_api.cuh"
#include "kernels/cuda/linear_cuda.h"

namespace lt {
namespace {

using cuda::DeviceBuffer;
using cuda::GemmInput;
using cuda::to_device;
using cuda::to_host;

// The operand values the GPU multiplies: bf16-rounded copies under bf16 inputs.
std::vector<double> as_multiplied(std::vector<float> v, GemmInput input) {
  if (input == GemmInput::BF16) test::round_to_bf16(v);
  return test::widen(v);
}

// c[M,N] = op(a) op(b) + c0 in float64 with its bound: 2 gamma_K sum |a b| + gamma_2 (|s| + |c0|).
struct Product {
  std::vector<double> value, bound;
};
Product reference_product(const std::vector<double>& a, bool ta, const std::vector<double>& b, bool tb, int64_t M,
                          int64_t N, int64_t K, const std::vector<float>* c0) {
  Product p{std::vector<double>(M * N), std::vector<double>(M * N)};
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0, sa = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double v = (ta ? a[k * M + i] : a[i * K + k]) * (tb ? b[j * K + k] : b[k * N + j]);
        s += v;
        sa += std::fabs(v);
      }
      const double c = c0 ? (*c0)[i * N + j] : 0.0;
      p.value[i * N + j] = s + c;
      p.bound[i * N + j] = 2 * test::gamma(static_cast<double>(K)) * sa + test::gamma(2) * (std::fabs(s) + std::fabs(c));
    }
  return p;
}

struct LinearCase {
  int64_t M, K, N;
  GemmInput input;
  bool give_w_bf16, bias, accumulate_dx;
};

void check_linear(const LinearCase& c) {
  const int64_t M = c.M, K = c.K, N = c.N;
  const bool bf = c.input == GemmInput::BF16;
  const std::string what = std::string(bf ? "bf16" : "fp32") + " linear " + std::to_string(M) + "x" +
                           std::to_string(K) + "->" + std::to_string(N) + (c.give_w_bf16 ? " (bf16 copy)" : "") +
                           (c.bias ? " bias" : "") + (c.accumulate_dx ? " dx+=" : "");
  SCOPED_TRACE(what);
  const std::vector<float> x = test::normal_floats(M * K, 1.0f, 31 + M), w = test::normal_floats(N * K, 0.5f, 32 + N);
  const std::vector<float> bias = test::normal_floats(N, 1.0f, 33), dy = test::normal_floats(M * N, 1.0f, 34);
  const std::vector<float> dx0 = test::normal_floats(M * K, 1.0f, 35), dw0 = test::normal_floats(N * K, 1.0f, 36);
  const std::vector<float> dbias0 = test::normal_floats(N, 1.0f, 37);
  std::vector<float> w_rounded = w;
  const std::vector<uint16_t> w_bits = test::round_to_bf16(w_rounded);

  const DeviceBuffer dx_in = to_device(x), dw_in = to_device(w), dbias_in = to_device(bias), ddy = to_device(dy);
  const DeviceBuffer dw_bits = to_device(w_bits);
  // y starts as NaN: the forward must write every value (dx starts as dx0: overwritten unless dx+=).
  const DeviceBuffer y = to_device(std::vector<float>(M * N, NAN));
  const DeviceBuffer dx = to_device(dx0), dw = to_device(dw0), dbias = to_device(dbias0);
  const uint16_t* w16 = c.give_w_bf16 ? dw_bits.as<uint16_t>() : nullptr;
  cuda::Gemm gemm;
  {
    const DeviceBuffer ws(cuda::linear_forward_workspace_bytes(M, K, N, c.input, w16 != nullptr));
    cuda::linear_forward(gemm, y.as<float>(), dx_in.as<float>(), dw_in.as<float>(), w16,
                         c.bias ? dbias_in.as<float>() : nullptr, M, K, N, c.input, ws.data());
  }
  {
    const DeviceBuffer ws(cuda::linear_backward_workspace_bytes(M, K, N, c.input, w16 != nullptr, c.bias));
    cuda::linear_backward(gemm, dx.as<float>(), dw.as<float>(), c.bias ? dbias.as<float>() : nullptr,
                          ddy.as<float>(), dx_in.as<float>(), dw_in.as<float>(), w16, M, K, N, c.accumulate_dx,
                          c.input, ws.data());
  }
  cuda::device_synchronize();

  const std::vector<double> xr = as_multiplied(x, c.input), wr = as_multiplied(w, c.input);
  const std::vector<double> dyr = as_multiplied(dy, c.input);
  // y = x W^T (+ bias: one more rounding, within the gamma_2 term when counted in c0).
  const std::vector<float> bias_rows = [&] {
    std::vector<float> b(M * N, 0.0f);
    if (c.bias)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) b[i * N + j] = bias[j];
    return b;
  }();
  const Product want_y = reference_product(xr, false, wr, true, M, N, K, &bias_rows);
  test::expect_within(to_host<float>(y, M * N), want_y.value, want_y.bound, (what + " y").c_str());
  const Product want_dx = reference_product(dyr, false, wr, false, M, K, N, c.accumulate_dx ? &dx0 : nullptr);
  test::expect_within(to_host<float>(dx, M * K), want_dx.value, want_dx.bound, (what + " dx").c_str());
  const Product want_dw = reference_product(dyr, true, xr, false, N, K, M, &dw0);
  test::expect_within(to_host<float>(dw, N * K), want_dw.value, want_dw.bound, (what + " dw").c_str());
  if (c.bias) {
    std::vector<double> want(N), bound(N);
    for (int64_t j = 0; j < N; ++j) {
      double s = dbias0[j], sa = std::fabs(dbias0[j]);
      for (int64_t i = 0; i < M; ++i) s += dy[i * N + j], sa += std::fabs(dy[i * N + j]);
      want[j] = s;
      bound[j] = test::gamma(static_cast<double>(M + 1)) * sa;
    }
    test::expect_within(to_host<float>(dbias, N), want, bound, (what + " dbias").c_str());
  }
}

// cuBLASLt is opened at the first product, not linked (cublaslt_api.cuh); this needs the
// library, not a GPU, so it runs wherever the CUDA kernels were built.
TEST(CudaKernels, CublasLtLoadsAtFirstUse) {
  const cuda::CublasLtApi& api = cuda::cublaslt();
  EXPECT_EQ(api.get_version() / 10000, static_cast<size_t>(CUBLAS_VER_MAJOR));
  std::printf("  cuBLASLt %zu loaded\n", api.get_version());
}

TEST(CudaKernels, LinearMatchesFloat64) {
  LT_REQUIRE_CUDA_DEVICE();
  check_linear({300, 200, 136, GemmInput::BF16, true, true, false});
  check_linear({300, 200, 136, GemmInput::BF16, false, false, true});
  check_linear({67, 136, 300, GemmInput::F32, false, true, true});  // N > 256: dbias's second block column
}

TEST(CudaKernels, LinearBackwardSkipsWhatIsNotAsked) {
  LT_REQUIRE_CUDA_DEVICE();
  // dx alone, then dw alone: the other outputs are not touched (they may be null).
  const int64_t M = 40, K = 24, N = 16;
  const DeviceBuffer x = to_device(test::normal_floats(M * K, 1.0f, 1)), w = to_device(test::normal_floats(N * K, 1.0f, 2));
  const DeviceBuffer dy = to_device(test::normal_floats(M * N, 1.0f, 3));
  const std::vector<float> dw0 = test::normal_floats(N * K, 1.0f, 4);
  const DeviceBuffer dx(M * K * 4), dw = to_device(dw0);
  cuda::Gemm gemm;
  const DeviceBuffer ws(cuda::linear_backward_workspace_bytes(M, K, N, GemmInput::BF16, false, false));
  cuda::linear_backward(gemm, dx.as<float>(), nullptr, nullptr, dy.as<float>(), x.as<float>(), w.as<float>(), nullptr,
                        M, K, N, false, GemmInput::BF16, ws.data());
  cuda::device_synchronize();
  const std::vector<float> dw_after = to_host<float>(dw, N * K);
  for (int64_t i = 0; i < N * K; ++i) ASSERT_EQ(test::bits_of(dw_after[i]), test::bits_of(dw0[i])) << "dw[" << i << "]";
  cuda::linear_backward(gemm, nullptr, dw.as<float>(), nullptr, dy.as<float>(), x.as<float>(), w.as<float>(), nullptr,
                        M, K, N, false, GemmInput::BF16, ws.data());
  cuda::device_synchronize();
  size_t changed = 0;
  const std::vector<float> dw_now = to_host<float>(dw, N * K);
  for (int64_t i = 0; i < N * K; ++i) changed += test::bits_of(dw_now[i]) != test::bits_of(dw0[i]);
  EXPECT_GT(changed, static_cast<size_t>(N * K / 2)) << "dw was not accumulated into";
}

TEST(CudaKernels, MatmulMatchesFloat64) {
  LT_REQUIRE_CUDA_DEVICE();
  const int64_t M = 96, N = 72, K = 130;
  cuda::Gemm gemm;
  for (GemmInput input : {GemmInput::BF16, GemmInput::F32})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool accumulate : {false, true}) {
          const std::vector<float> a = test::normal_floats(M * K, 1.0f, 41), b = test::normal_floats(K * N, 1.0f, 42);
          const std::vector<float> c0 = test::normal_floats(M * N, 1.0f, 43);
          const DeviceBuffer da = to_device(a), db = to_device(b), dc = to_device(c0);
          const DeviceBuffer ws(cuda::matmul_workspace_bytes(M, N, K, input));
          cuda::matmul(gemm, dc.as<float>(), da.as<float>(), ta, db.as<float>(), tb, M, N, K, accumulate, input,
                       ws.data());
          cuda::device_synchronize();
          const Product want = reference_product(as_multiplied(a, input), ta, as_multiplied(b, input), tb, M, N, K,
                                                 accumulate ? &c0 : nullptr);
          const std::string what = std::string(input == GemmInput::BF16 ? "bf16" : "fp32") + " matmul" +
                                   (ta ? " A^T" : "") + (tb ? " B^T" : "") + (accumulate ? " +=" : "");
          test::expect_within(to_host<float>(dc, M * N), want.value, want.bound, what.c_str());
        }
}

// Activations packed back to back by element count are only 4-byte aligned; cuBLASLt must
// be told (Gemm::run), or its heuristic may pick an algorithm that needs 16 or 256 bytes.
TEST(CudaKernels, MatmulTakesOperandsFourBytesPastAnAlignment) {
  LT_REQUIRE_CUDA_DEVICE();
  const int64_t M = 33, N = 20, K = 37;
  cuda::Gemm gemm;
  for (GemmInput input : {GemmInput::BF16, GemmInput::F32})
    for (bool tb : {false, true}) {
      const std::vector<float> a = test::normal_floats(M * K, 1.0f, 44), b = test::normal_floats(K * N, 1.0f, 45);
      const std::vector<float> c0 = test::normal_floats(M * N, 1.0f, 46);
      // Each operand one float past the start of its allocation (cudaMalloc's is 256-byte aligned).
      DeviceBuffer da((M * K + 1) * 4), db((K * N + 1) * 4), dc((M * N + 1) * 4);
      da.upload(a.data(), a.size() * 4, 4);
      db.upload(b.data(), b.size() * 4, 4);
      dc.upload(c0.data(), c0.size() * 4, 4);
      const DeviceBuffer ws(cuda::matmul_workspace_bytes(M, N, K, input));
      cuda::matmul(gemm, dc.as<float>() + 1, da.as<float>() + 1, false, db.as<float>() + 1, tb, M, N, K, true, input,
                   ws.data());
      cuda::device_synchronize();
      std::vector<float> got(M * N);
      dc.download(got.data(), got.size() * 4, 4);
      const Product want =
          reference_product(as_multiplied(a, input), false, as_multiplied(b, input), tb, M, N, K, &c0);
      const std::string what = std::string(input == GemmInput::BF16 ? "bf16" : "fp32") +
                               " matmul, operands 4-byte aligned" + (tb ? " B^T" : "");
      test::expect_within(got, want.value, want.bound, what.c_str());
    }
}

// A layer's bf16 weight copy is read in place at an element offset (2-byte aligned at worst):
// cuBLASLt must be told, and must have an algorithm for it.
TEST(CudaKernels, LinearReadsABf16WeightTwoBytesPastAnAlignment) {
  LT_REQUIRE_CUDA_DEVICE();
  const int64_t M = 48, K = 40, N = 24;
  const std::vector<float> x = test::normal_floats(M * K, 1.0f, 48), w = test::normal_floats(N * K, 0.5f, 49);
  std::vector<float> w_rounded = w;
  const std::vector<uint16_t> w_bits = test::round_to_bf16(w_rounded);
  DeviceBuffer dw_bits((N * K + 1) * 2);  // the copy one element past the allocation's start
  dw_bits.upload(w_bits.data(), w_bits.size() * 2, 2);
  const DeviceBuffer dx = to_device(x), dw = to_device(w), y = to_device(std::vector<float>(M * N, NAN));
  const DeviceBuffer ws(cuda::linear_forward_workspace_bytes(M, K, N, GemmInput::BF16, true));
  cuda::Gemm gemm;
  cuda::linear_forward(gemm, y.as<float>(), dx.as<float>(), dw.as<float>(), dw_bits.as<uint16_t>() + 1, nullptr, M,
                       K, N, GemmInput::BF16, ws.data());
  cuda::device_synchronize();
  const Product want =
      reference_product(as_multiplied(x, GemmInput::BF16), false, test::widen(w_rounded), true, M, N, K, nullptr);
  test::expect_within(to_host<float>(y, M * N), want.value, want.bound, "bf16 linear, weight copy 2-byte aligned");
}

// K 0: the empty sum, as on the CPU (kernels/cpu/matmul.cpp): C = 0, or C unchanged when
// accumulating.
TEST(CudaKernels, MatmulOverAnEmptySumGivesZeroOrLeavesCAsItWas) {
  LT_REQUIRE_CUDA_DEVICE();
  const int64_t M = 5, N = 7;
  cuda::Gemm gemm;
  const std::vector<float> c0 = test::normal_floats(M * N, 1.0f, 47);
  for (GemmInput input : {GemmInput::BF16, GemmInput::F32})
    for (bool accumulate : {false, true}) {
      const DeviceBuffer dc = to_device(c0), ws(cuda::matmul_workspace_bytes(M, N, 0, input));
      const DeviceBuffer a(4), b(4);  // no values are read
      cuda::matmul(gemm, dc.as<float>(), a.as<float>(), false, b.as<float>(), false, M, N, 0, accumulate, input,
                   ws.data());
      cuda::device_synchronize();
      const std::vector<float> got = to_host<float>(dc, M * N);
      for (int64_t i = 0; i < M * N; ++i)
        EXPECT_EQ(test::bits_of(got[i]), test::bits_of(accumulate ? c0[i] : 0.0f)) << i << (accumulate ? " +=" : "");
    }
}

// What the heuristic is told: the largest power of two dividing the address, at most 256.
TEST(CudaKernels, GemmOperandAlignmentIsTheLargestPowerOfTwoDividingTheAddressUpTo256) {
  alignas(512) static unsigned char block[1024];
  EXPECT_EQ(cuda::gemm_operand_alignment(block), 256u);
  EXPECT_EQ(cuda::gemm_operand_alignment(block + 256), 256u);
  EXPECT_EQ(cuda::gemm_operand_alignment(block + 4), 4u);
  EXPECT_EQ(cuda::gemm_operand_alignment(block + 2), 2u);
  EXPECT_EQ(cuda::gemm_operand_alignment(block + 48), 16u);
  EXPECT_EQ(cuda::gemm_operand_alignment(block + 128), 128u);
  EXPECT_EQ(cuda::gemm_operand_alignment(block + 1), 1u);
}

}  // namespace
}  // namespace lt
