// The GPU's embedding, conversions and sum of squares. The embedding's backward and the
// conversions promise the CPU's bits, so they are compared bit for bit with an fp32 loop
// in the CPU kernel's order (lt::ref::embedding_backward) and with core/dtype.h; the sum
// of squares against float64 with the bound of its order, and run to run bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "cuda_test_util.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cuda/convert_cuda.h"
#include "kernels/cuda/embedding_cuda.h"
#include "kernels/cuda/sum_of_squares_cuda.h"

namespace lt {
namespace {

using cuda::DeviceBuffer;
using cuda::to_device;
using cuda::to_host;

TEST(CudaKernels, EmbeddingMatchesTheCpuOrderBitwise) {
  LT_REQUIRE_CUDA_DEVICE();
  const int64_t T = 5000, V = 3000, C = 200;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(V) - 1);
  std::vector<int32_t> tokens(T);
  for (int64_t t = 0; t < T; ++t) tokens[t] = t % 7 == 0 ? 0 : id(rng);  // id 0 repeats hundreds of times
  tokens[T - 1] = static_cast<int32_t>(V - 1);
  const std::vector<float> table = test::normal_floats(V * C, 1.0f, 12), dout = test::normal_floats(T * C, 1.0f, 13),
                           dtable0 = test::normal_floats(V * C, 0.5f, 14);
  DeviceBuffer dtok = to_device(tokens), dtab = to_device(table), dd = to_device(dout), ddt = to_device(dtable0);
  DeviceBuffer dout_fwd(T * C * 4), ws(cuda::embedding_backward_workspace_bytes(T));
  cuda::embedding_forward(dout_fwd.as<float>(), dtok.as<int32_t>(), dtab.as<float>(), T, V, C);
  cuda::embedding_backward(ddt.as<float>(), dtok.as<int32_t>(), dd.as<float>(), T, V, C, ws.data());
  const std::vector<float> fwd = to_host<float>(dout_fwd, T * C), grad = to_host<float>(ddt, V * C);

  std::vector<float> fwd_ref(T * C), grad_ref = dtable0;
  ref::embedding_forward(fwd_ref.data(), tokens.data(), table.data(), T, C);
  ref::embedding_backward(grad_ref.data(), tokens.data(), dout.data(), T, C);
  int64_t differ = 0;
  for (int64_t i = 0; i < T * C; ++i) differ += test::bits_of(fwd[i]) != test::bits_of(fwd_ref[i]);
  EXPECT_EQ(differ, 0) << "forward rows differ from the table's";
  differ = 0;
  for (int64_t i = 0; i < V * C; ++i) differ += test::bits_of(grad[i]) != test::bits_of(grad_ref[i]);
  EXPECT_EQ(differ, 0) << "of " << V * C << " gradient values differ from the CPU order's bits";
}

TEST(CudaKernels, Bf16ConversionIsTheCpusBitForBit) {
  LT_REQUIRE_CUDA_DEVICE();
  std::vector<float> x = test::normal_floats(1 << 16, 3.0f, 15);
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::max(), 1.00390625f /* a tie: 1 + 2^-8 */,
                            1.01171875f /* a tie that rounds up */};
  std::copy(std::begin(specials), std::end(specials), x.begin());
  uint32_t signalling = 0x7f800001u;  // a signalling NaN must come out a quiet one
  std::memcpy(&x[9], &signalling, 4);
  DeviceBuffer dx = to_device(x), d16(x.size() * 2), dback(x.size() * 4), dfill(1000 * 4);
  cuda::convert_f32_to_bf16(d16.as<uint16_t>(), dx.as<float>(), static_cast<int64_t>(x.size()));
  cuda::convert_bf16_to_f32(dback.as<float>(), d16.as<uint16_t>(), static_cast<int64_t>(x.size()));
  cuda::fill(dfill.as<float>(), -2.5f, 1000);
  const std::vector<uint16_t> h16 = to_host<uint16_t>(d16, x.size());
  const std::vector<float> back = to_host<float>(dback, x.size()), filled = to_host<float>(dfill, 1000);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(h16[i], f32_to_bf16(x[i]).bits) << "value " << i << " (" << x[i] << ")";
    ASSERT_EQ(test::bits_of(back[i]), test::bits_of(bf16_to_f32(bf16{h16[i]}))) << i;
  }
  for (float f : filled) ASSERT_EQ(f, -2.5f);
}

// start + sum x^2: the squares are exact in long double (a float's square has 48
// significant bits), the sum compensated, so the result is the exact value to double's
// last bit or so.
double compensated_sum_of_squares(const std::vector<float>& x, double start) {
  long double sum = start, carry = 0;
  for (float f : x) {
    const long double term = static_cast<long double>(f) * f, t = sum + term;
    carry += std::fabs(sum) >= std::fabs(term) ? (sum - t) + term : (term - t) + sum;
    sum = t;
  }
  return static_cast<double>(sum + carry);
}

TEST(CudaKernels, SumOfSquaresMatchesFloat64AndRepeatsItsBits) {
  LT_REQUIRE_CUDA_DEVICE();
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{3} << 20, (int64_t{1} << 16) * 300 + 17}) {
    const std::vector<float> x = test::normal_floats(n, 2.0f, 16 + n);
    std::vector<uint16_t> x16(n);
    for (int64_t i = 0; i < n; ++i) x16[i] = f32_to_bf16(x[i]).bits;
    DeviceBuffer dx = to_device(x), dx16 = to_device(x16), ws(cuda::sum_of_squares_workspace_bytes(n));
    const std::vector<double> start = {0.25, 0.25, 0.0};
    DeviceBuffer out = to_device(start);
    cuda::sum_of_squares_f64(out.as<double>(), dx.as<float>(), n, ws.data());
    cuda::sum_of_squares_f64(out.as<double>() + 1, dx.as<float>(), n, ws.data());
    cuda::sum_of_squares_f64_bf16(out.as<double>() + 2, dx16.as<uint16_t>(), n, ws.data());
    const std::vector<double> got = to_host<double>(out, 3);
    // The references summed in long double with compensation (Neumaier): a plain double
    // sum of millions of terms is itself off by more than the kernel's bound.
    const double want = compensated_sum_of_squares(x, 0.25), abs = want;
    std::vector<float> v16(n);
    for (int64_t i = 0; i < n; ++i) v16[i] = bf16_to_f32(bf16{x16[i]});
    const double want16 = compensated_sum_of_squares(v16, 0.0);
    // A thread's 256-long chain, the block's 8 levels, the chunk sums' chain and 8 levels,
    // and the add onto *out; every term is >= 0, so the bound is that chain times the sum.
    const double chain = 256 + 8 + static_cast<double>((n / (int64_t{1} << 16) + 255) / 256) + 8 + 1;
    const double bound = test::gamma(chain, test::kF64Unit) * abs;
    EXPECT_LE(std::fabs(got[0] - want), bound) << "n " << n;
    EXPECT_EQ(got[0], got[1]) << "two runs on the same data differ, n " << n;
    EXPECT_LE(std::fabs(got[2] - want16), test::gamma(chain, test::kF64Unit) * want16) << "bf16, n " << n;
  }
}

}  // namespace
}  // namespace lt
