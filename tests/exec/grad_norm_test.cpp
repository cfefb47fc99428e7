// The squared gradient norm both training paths clip by (ordered_grad_sq_sum, the
// executor's arrival order): the same bits for any thread count, and within float64
// rounding of an independent long-double sum.
#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "core/threads.h"
#include "exec/streaming_executor.h"
#include "streaming_test_util.h"

namespace lt {
namespace {

TEST(GradNorm, OrderedSumIsThreadCountInvariantAndAccurate) {
  ModelConfig c = test::streaming_tiny_config(3);
  c.hidden_size = 128;
  c.head_dim = 32;
  c.intermediate_size = 512;  // a layer of ~260k elements: several of the sum's chunks
  ModelParameters g(c);
  test::fill_uniform(g.data(), g.numel(), 1.0f, 11);
  double one = 0, two = 0;
  {
    ScopedNumThreads t(1);
    one = ordered_grad_sq_sum(g);
  }
  {
    ScopedNumThreads t(2);
    two = ordered_grad_sq_sum(g);
  }
  EXPECT_EQ(std::memcmp(&one, &two, sizeof(double)), 0) << one << " vs " << two;
  long double ref = 0;
  for (int64_t i = 0; i < g.numel(); ++i) ref += static_cast<long double>(g.data()[i]) * g.data()[i];
  // Every term is exact in float64 (a float squared); the sum of n positive terms carries a
  // relative error below n * 2^-53.
  const double bound = static_cast<double>(g.numel()) * std::ldexp(1.0, -53);
  EXPECT_NEAR(one / static_cast<double>(ref), 1.0, bound);
}

}  // namespace
}  // namespace lt
