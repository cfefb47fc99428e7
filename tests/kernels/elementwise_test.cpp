// The decoder block's elementwise steps through the CPU kernel table, against float64
// (tests/kernels/elementwise_checks.h derives the bounds; the adds, the scale and the row
// moves must be exact).
#include <gtest/gtest.h>

#include "kernels/cpu/elementwise.h"
#include "kernels/elementwise_checks.h"
#include "kernels/kernel_table.h"
#include "kernels/kernel_test_util.h"

namespace lt {
namespace {

namespace ew = test::elementwise;

const KernelTable& k() { return cpu_kernel_table(); }

TEST(Elementwise, AddsAndScaleAreTheExactResultRounded) {
  const size_t n = 100003;  // not a multiple of any vector width
  const std::vector<float> a = test::random_floats(n, 1, -3, 3), b = test::random_floats(n, 2, -3, 3);
  std::vector<float> y = a;
  k().add_inplace(y.data(), b.data(), n);
  ew::expect_rounded(y, ew::exact_sum(a, b), "add_inplace");
  std::vector<float> z(n);
  k().add_into(z.data(), a.data(), b.data(), n);
  ew::expect_rounded(z, ew::exact_sum(a, b), "add_into");
  z = a;  // in place: y = a + b with y = a
  k().add_into(z.data(), z.data(), b.data(), n);
  ew::expect_rounded(z, ew::exact_sum(a, b), "add_into in place");
  const float s = 45.254833f;  // sqrt(2048) rounded, Gemma's scale at hidden 2048
  z = a;
  k().scale_inplace(z.data(), s, n);
  ew::expect_rounded(z, ew::exact_scaled(a, s), "scale_inplace");
}

TEST(Elementwise, RowCopiesAndPaddingRows) {
  // The query | gate halves of [T, H, 2D] and back, and a row's middle columns.
  const int64_t rows = 37, D = 24;
  const std::vector<float> qg = test::random_floats(rows * 2 * D, 3);
  std::vector<float> query(rows * D, -7.f), gate(rows * D, -7.f);
  k().copy_rows(query.data(), D, qg.data(), 2 * D, rows, D);
  k().copy_rows(gate.data(), D, qg.data() + D, 2 * D, rows, D);
  const std::vector<float> off(qg.begin() + D, qg.end());
  const std::vector<float> blank(rows * D, -7.f);
  ew::expect_bits(query, ew::rows_copied(blank, 0, D, qg, 2 * D, rows, D), "query half");
  ew::expect_bits(gate, ew::rows_copied(blank, 0, D, off, 2 * D, rows, D), "gate half");
  std::vector<float> back(rows * 2 * D, 0.f);
  k().copy_rows(back.data(), 2 * D, query.data(), D, rows, D);
  k().copy_rows(back.data() + D, 2 * D, gate.data(), D, rows, D);
  ew::expect_bits(back, qg, "halves put back");
  std::vector<float> mid(rows * 2 * D, 5.f);
  k().copy_rows(mid.data() + 3, 2 * D, qg.data(), 2 * D, rows, 10);
  ew::expect_bits(mid, ew::rows_copied(std::vector<float>(rows * 2 * D, 5.f), 3, 2 * D, qg, 2 * D, rows, 10),
                  "columns into the middle of rows");

  const int64_t T = 50, C = 16;
  std::vector<int32_t> ids(T);
  for (int64_t t = 0; t < T; ++t) ids[t] = static_cast<int32_t>((t * 7) % 5);  // id 3 on every fifth row
  const std::vector<float> x = test::random_floats(T * C, 4);
  std::vector<float> zeroed = x;
  k().zero_rows_with_id(zeroed.data(), ids.data(), T, C, 3);
  ew::expect_bits(zeroed, ew::rows_zeroed(x, ids, C, 3), "padding rows zeroed");
  EXPECT_NE(zeroed, x) << "no row had the id: the check would have had no teeth";
}

TEST(Elementwise, SigmoidGateMatchesFloat64) {
  const size_t n = 200001;
  const std::vector<float> x = test::random_floats(n, 5, -2, 2), gate = test::random_floats(n, 6, -20, 20),
                           dy = test::random_floats(n, 7, -2, 2);
  ew::GateOutputs got{std::vector<float>(n), dy, std::vector<float>(n)};
  k().sigmoid_gate_forward(got.y.data(), x.data(), gate.data(), n);
  // dx in place over dy, as the attention mixer's backward runs it.
  k().sigmoid_gate_backward(got.dx.data(), got.dgate.data(), got.dx.data(), x.data(), gate.data(), n);
  ew::expect_sigmoid_gate(got, x, gate, dy, /*exp_ulps=*/1);
}

}  // namespace
}  // namespace lt
