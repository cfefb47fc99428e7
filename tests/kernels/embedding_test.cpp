// Embedding: forward is a copy (exact); backward adds each token's gradient row into its
// table row in token order, exactly as the reference does, so it must equal the fp32
// reference bitwise, for any thread count, at every ISA level this machine runs (an add
// rounds once, whatever the vector width; nothing can contract). Plus the double
// finite-difference check.
#include "kernels/cpu/embedding.h"

#include <cstring>

#include "core/error.h"
#include "kernels/finite_difference.h"
#include "isa_test_util.h"
#include "kernels/kernel_test_util.h"

namespace lt {
namespace {

std::vector<int32_t> random_tokens(int64_t T, int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(T));
  for (auto& e : t) e = int32_t(rng() % uint64_t(V));
  return t;
}

TEST(Embedding, ForwardCopiesRows) {
  for (auto [T, V, C] : {std::tuple<int64_t, int64_t, int64_t>{1, 3, 5}, {37, 11, 19},
                         {300, 50, 130}}) {
    auto tok = random_tokens(T, V, 1);
    auto table = test::random_floats(size_t(V * C), 2);
    std::vector<float> out(size_t(T * C)), want(size_t(T * C));
    embedding_forward(out.data(), tok.data(), table.data(), T, V, C);
    ref::embedding_forward<float>(want.data(), tok.data(), table.data(), T, C);
    EXPECT_EQ(out, want);
  }
}

TEST(Embedding, BackwardIsBitwiseReferenceForAnyThreadCount) {
  // Few distinct ids, many tokens: rows receive long sums, where order would show.
  const int64_t T = 700, V = 13, C = 67;
  auto tok = random_tokens(T, V, 3);
  auto dout = test::random_floats(size_t(T * C), 4);
  auto init = test::random_floats(size_t(V * C), 5);
  auto want = init;
  ref::embedding_backward<float>(want.data(), tok.data(), dout.data(), T, C);
  test::for_each_isa([&](Isa) {
    for (int threads : {1, 2, 3}) {
      test::ScopedThreads scope(threads);
      auto got = init;
      embedding_backward(got.data(), tok.data(), dout.data(), T, V, C);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
          << threads << " threads";
    }
  });
}

TEST(Embedding, OutOfRangeTokenThrows) {
  std::vector<float> table(12), out(8);
  const int32_t too_big[] = {0, 3};
  const int32_t negative[] = {-1, 1};
  EXPECT_THROW(embedding_forward(out.data(), too_big, table.data(), 2, 3, 4), Error);
  EXPECT_THROW(embedding_forward(out.data(), negative, table.data(), 2, 3, 4), Error);
  EXPECT_THROW(embedding_backward(table.data(), too_big, out.data(), 2, 3, 4), Error);
}

TEST(Embedding, ReferenceBackwardMatchesFiniteDifferences) {
  const int64_t T = 9, V = 5, C = 3;
  auto tok = random_tokens(T, V, 6);
  auto table = test::fd::random_vector(size_t(V * C), 7);
  auto dy = test::fd::random_vector(size_t(T * C), 8);
  std::vector<double> dtable(size_t(V * C));
  ref::embedding_backward<double>(dtable.data(), tok.data(), dy.data(), T, C);
  auto f = [&](const std::vector<double>& tb, std::vector<double>& y) {
    ref::embedding_forward<double>(y.data(), tok.data(), tb.data(), T, C);
  };
  auto r = test::fd::check_gradient(f, table, dy, dtable);
  EXPECT_TRUE(r.ok()) << r.str();
}

}  // namespace
}  // namespace lt
