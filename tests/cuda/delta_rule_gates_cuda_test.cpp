// The Gated DeltaNet's gates on the GPU against float64, by the checks and bounds of the
// CPU kernel's test (tests/kernels/delta_rule_gates_checks.h), with CUDA's expf within
// 2 ulp and log1pf within 1; in place as the mixer runs them; the per-head sums the same
// bits on a second run.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/cuda/delta_rule_gates_cuda.h"
#include "kernels/delta_rule_gates_checks.h"

namespace lt {
namespace {

namespace dgc = test::delta_gates;
using cuda::DeviceBuffer;
using cuda::to_device;
using cuda::to_host;

dgc::Outputs run_on_device(const dgc::Inputs& in) {
  const int64_t n = in.T * in.H;
  DeviceBuffer beta = to_device(in.b), decay = to_device(in.a), db = to_device(in.dbeta), da = to_device(in.a);
  DeviceBuffer ddt = to_device(in.d_dt_bias0), dA = to_device(in.d_A_log0);
  const DeviceBuffer A_log = to_device(in.A_log), dt = to_device(in.dt_bias), dg = to_device(in.dg);
  cuda::delta_rule_gates_forward(beta.as<float>(), decay.as<float>(), beta.as<float>(), decay.as<float>(),
                                 A_log.as<float>(), dt.as<float>(), in.T, in.H);
  cuda::delta_rule_gates_backward(db.as<float>(), da.as<float>(), ddt.as<float>(), dA.as<float>(), db.as<float>(),
                                  dg.as<float>(), da.as<float>(), beta.as<float>(), decay.as<float>(),
                                  A_log.as<float>(), dt.as<float>(), in.T, in.H);
  return {to_host<float>(beta, n), to_host<float>(decay, n), to_host<float>(db, n),
          to_host<float>(da, n),   to_host<float>(ddt, in.H), to_host<float>(dA, in.H)};
}

TEST(CudaKernels, DeltaRuleGatesMatchFloat64) {
  LT_REQUIRE_CUDA_DEVICE();
  const dgc::Inputs in = dgc::make_inputs(5000, 32);
  const dgc::Outputs first = run_on_device(in);
  dgc::expect_gates(first, in, /*exp_ulps=*/2, /*log1p_ulps=*/1);
  const dgc::Outputs second = run_on_device(in);
  EXPECT_EQ(first.d_dt_bias, second.d_dt_bias);
  EXPECT_EQ(first.d_A_log, second.d_A_log);
}

}  // namespace
}  // namespace lt
