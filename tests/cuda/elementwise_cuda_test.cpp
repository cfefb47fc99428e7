// The decoder block's elementwise steps on the GPU against float64, by the checks and
// bounds the CPU kernels' test uses (tests/kernels/elementwise_checks.h), with CUDA's expf
// within 2 ulp.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/cuda/elementwise_cuda.h"
#include "kernels/elementwise_checks.h"

namespace lt {
namespace {

namespace ew = test::elementwise;
using cuda::DeviceBuffer;
using cuda::to_device;
using cuda::to_host;
using ew::uniform_floats;

TEST(CudaKernels, ElementwiseAddsAndScaleAreTheExactResultRounded) {
  LT_REQUIRE_CUDA_DEVICE();
  const size_t n = 1000003;
  const std::vector<float> a = uniform_floats(n, 1, -3, 3), b = uniform_floats(n, 2, -3, 3);
  const DeviceBuffer da = to_device(a), db = to_device(b);
  DeviceBuffer y = to_device(a), z(n * 4);
  cuda::add_inplace(y.as<float>(), db.as<float>(), n);
  cuda::add_into(z.as<float>(), da.as<float>(), db.as<float>(), n);
  ew::expect_rounded(to_host<float>(y, n), ew::exact_sum(a, b), "add_inplace");
  ew::expect_rounded(to_host<float>(z, n), ew::exact_sum(a, b), "add_into");
  const float s = 45.254833f;  // sqrt(2048) rounded, Gemma's scale at hidden 2048
  DeviceBuffer x = to_device(a);
  cuda::scale_inplace(x.as<float>(), s, n);
  ew::expect_rounded(to_host<float>(x, n), ew::exact_scaled(a, s), "scale_inplace");
}

TEST(CudaKernels, ElementwiseRowCopiesAndPaddingRows) {
  LT_REQUIRE_CUDA_DEVICE();
  const int64_t rows = 37, D = 24;
  const std::vector<float> qg = uniform_floats(rows * 2 * D, 3, -1, 1);
  const DeviceBuffer dqg = to_device(qg);
  DeviceBuffer gate = to_device(std::vector<float>(rows * D, -7.f));
  cuda::copy_rows(gate.as<float>(), D, dqg.as<float>() + D, 2 * D, rows, D);
  const std::vector<float> off(qg.begin() + D, qg.end());
  const std::vector<float> gate_want = ew::rows_copied(std::vector<float>(rows * D, -7.f), 0, D, off, 2 * D, rows, D);
  ew::expect_bits(to_host<float>(gate, rows * D), gate_want, "gate half");
  DeviceBuffer mid = to_device(std::vector<float>(rows * 2 * D, 5.f));
  cuda::copy_rows(mid.as<float>() + 3, 2 * D, gate.as<float>(), D, rows, 10);
  ew::expect_bits(to_host<float>(mid, rows * 2 * D),
                  ew::rows_copied(std::vector<float>(rows * 2 * D, 5.f), 3, 2 * D, gate_want, D, rows, 10),
                  "columns into the middle of wider rows");

  const int64_t T = 50, C = 16;
  std::vector<int32_t> ids(T);
  for (int64_t t = 0; t < T; ++t) ids[t] = static_cast<int32_t>((t * 7) % 5);
  const std::vector<float> x = uniform_floats(T * C, 4, -1, 1);
  DeviceBuffer dx = to_device(x);
  const DeviceBuffer dids = to_device(ids);
  cuda::zero_rows_with_id(dx.as<float>(), dids.as<int32_t>(), T, C, 3);
  ew::expect_bits(to_host<float>(dx, T * C), ew::rows_zeroed(x, ids, C, 3), "padding rows zeroed");
}

TEST(CudaKernels, ElementwiseSigmoidGateMatchesFloat64) {
  LT_REQUIRE_CUDA_DEVICE();
  const size_t n = 1 << 20;
  const std::vector<float> x = uniform_floats(n, 5, -2, 2), gate = uniform_floats(n, 6, -20, 20),
                           dy = uniform_floats(n, 7, -2, 2);
  const DeviceBuffer dx_in = to_device(x), dgate_in = to_device(gate);
  DeviceBuffer y(n * 4), d(to_device(dy)), dgate(n * 4);
  cuda::sigmoid_gate_forward(y.as<float>(), dx_in.as<float>(), dgate_in.as<float>(), n);
  // dx in place over dy, as the attention mixer's backward runs it.
  cuda::sigmoid_gate_backward(d.as<float>(), dgate.as<float>(), d.as<float>(), dx_in.as<float>(),
                              dgate_in.as<float>(), n);
  const ew::GateOutputs got{to_host<float>(y, n), to_host<float>(d, n), to_host<float>(dgate, n)};
  ew::expect_sigmoid_gate(got, x, gate, dy, /*exp_ulps=*/2);
}

}  // namespace
}  // namespace lt
