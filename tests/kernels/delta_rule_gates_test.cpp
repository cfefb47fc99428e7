// The Gated DeltaNet's gates through the CPU kernel table against float64
// (tests/kernels/delta_rule_gates_checks.h derives the bounds; glibc's expf and log1pf
// within 1 ulp), in place as the mixer runs them, and the same bits for any thread count.
#include <gtest/gtest.h>

#include <omp.h>

#include "kernels/delta_rule_gates_checks.h"
#include "kernels/kernel_table.h"

namespace lt {
namespace {

namespace dgc = test::delta_gates;

TEST(DeltaRuleGates, MatchFloat64) {
  const dgc::Inputs in = dgc::make_inputs(700, 6);
  dgc::expect_gates(dgc::run_on_host(cpu_kernel_table(), in), in, /*exp_ulps=*/1, /*log1p_ulps=*/1);
}

TEST(DeltaRuleGates, SameBitsForAnyThreadCount) {
  const dgc::Inputs in = dgc::make_inputs(301, 5);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const dgc::Outputs one = dgc::run_on_host(cpu_kernel_table(), in);
  omp_set_num_threads(std::max(threads, 3));
  const dgc::Outputs many = dgc::run_on_host(cpu_kernel_table(), in);
  omp_set_num_threads(threads);
  EXPECT_EQ(one.beta, many.beta);
  EXPECT_EQ(one.decay, many.decay);
  EXPECT_EQ(one.db, many.db);
  EXPECT_EQ(one.da, many.da);
  EXPECT_EQ(one.d_dt_bias, many.d_dt_bias);
  EXPECT_EQ(one.d_A_log, many.d_A_log);
}

}  // namespace
}  // namespace lt
