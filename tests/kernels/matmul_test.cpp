// The oneDNN matmul against the plain reference run in double.
//
// Tolerance: a length-K fp32 dot product of exact inputs is within
// gamma_{K} * sum_k |a_ik b_kj| of the exact value, gamma_K = K u / (1 - K u) ~ K u
// (Higham, Accuracy and Stability, 3.1); accumulating into C adds one more rounding of
// |c_old| + |dot|. So bound = (K + 2) u (sum |a||b| + |c_old|). Under BF16 the inputs are
// first rounded to bf16; the reference is given the same rounded inputs, so the bound
// stays an fp32-accumulation bound. It holds for both bf16 paths: oneDNN's native bf16
// GEMM and, below the avx512 level, the widened one (exact bf16 products in fp32, summed
// by the fp32 GEMM), so the bf16 tests run at every ISA level the machine has.
#include "kernels/cpu/matmul.h"

#include <cstdlib>
#include <string>

#include "core/cpu_features.h"
#include "core/error.h"
#include "isa_test_util.h"
#include "kernels/kernel_test_util.h"

namespace lt {
namespace {

using test::kU32;

struct Case {
  int64_t M, N, K;
  bool ta, tb, acc;
};

void check_case(const Case& cs, Precision p) {
  const auto [M, N, K, ta, tb, acc] = cs;
  auto a = test::random_floats(size_t(M * K), 1 + M);
  auto b = test::random_floats(size_t(K * N), 2 + N);
  auto c = test::random_floats(size_t(M * N), 3 + K);
  if (p == Precision::BF16) {
    a = test::round_bf16(a);
    b = test::round_bf16(b);
  }
  std::vector<double> want = test::to_double(c), absab(size_t(M * N));
  auto ad = test::to_double(a), bd = test::to_double(b);
  ref::matmul<double>(want.data(), ad.data(), ta, bd.data(), tb, M, N, K, acc);
  for (auto& v : ad) v = std::fabs(v);
  for (auto& v : bd) v = std::fabs(v);
  ref::matmul<double>(absab.data(), ad.data(), ta, bd.data(), tb, M, N, K, false);
  std::vector<double> bound(size_t(M * N));
  for (size_t i = 0; i < bound.size(); ++i)
    bound[i] = double(K + 2) * kU32 * (absab[i] + (acc ? std::fabs(c[i]) : 0.0)) + 1e-30;

  matmul(c.data(), a.data(), ta, b.data(), tb, M, N, K, acc, p);
  EXPECT_TRUE(test::within_bound(c, want, bound))
      << "M=" << M << " N=" << N << " K=" << K << " ta=" << ta << " tb=" << tb << " acc=" << acc
      << (p == Precision::BF16 ? " bf16" : " f32");
}

const Case kCases[] = {
    {17, 33, 29, false, false, false}, {17, 33, 29, true, false, false},
    {17, 33, 29, false, true, true},   {17, 33, 29, true, true, true},
    {1, 7, 130, false, true, false},   {64, 48, 16, true, false, true},
    {5, 1, 3, false, false, true},     {1, 9, 4, true, true, false},
    {3, 1, 6, true, true, true},
};

TEST(Matmul, F32MatchesReferenceAllTransposes) {
  for (const Case& cs : kCases) check_case(cs, Precision::F32);
}

TEST(Matmul, Bf16MatchesReferenceOnRoundedInputs) {
  test::for_each_isa([](Isa) {
    for (const Case& cs : kCases) check_case(cs, Precision::BF16);
  });
}

TEST(Matmul, Bf16IsWidenedToF32BelowAvx512) {
  test::for_each_isa([](Isa isa) {
    const std::string impl = matmul_impl_name(64, 64, 64, Precision::BF16);
    const bool widened = impl.find("widened") != std::string::npos;
    if (isa < Isa::Avx512) {
      EXPECT_TRUE(widened) << impl;
    }
    EXPECT_EQ(matmul_bf16_path().find("fp32 GEMM") != std::string::npos, widened) << matmul_bf16_path();
  });
}

// Puts the process's bf16 path back to its rule when a test ends.
struct Bf16PathOverride {
  explicit Bf16PathOverride(Bf16GemmPath p) { set_bf16_gemm_path(p); }
  ~Bf16PathOverride() { set_bf16_gemm_path(std::nullopt); }
};

TEST(Matmul, Bf16RunsNativeExactlyWhereTheCpuHasAmx) {
  test::for_each_isa([](Isa isa) {
    const Bf16GemmChoice c = bf16_gemm_choice();
    for (const char* env : {"LT_BF16_GEMM", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"})
      if (std::getenv(env)) GTEST_SKIP() << env << " is set: bf16 runs " << c.reason;
    const bool native = isa >= Isa::Avx512 && cpu_features().amx_bf16;
    EXPECT_EQ(c.path == Bf16GemmPath::Native, native) << c.reason;
    EXPECT_NE(matmul_bf16_path().find(c.reason), std::string::npos) << matmul_bf16_path();
  });
}

TEST(Matmul, WidenedBf16IsTheFp32GemmOfTheRoundedOperands) {
  // Set the path by hand, at every level: the widened path must be exactly the fp32
  // GEMM of the bf16 values (the same primitive configuration, so the same bits), and
  // the native one on an AMX CPU must not widen.
  test::for_each_isa([](Isa isa) {
    const int64_t M = 37, N = 64, K = 300;
    const auto a = test::round_bf16(test::random_floats(size_t(M * K), 31));
    const auto b = test::round_bf16(test::random_floats(size_t(N * K), 32));
    std::vector<float> wide(size_t(M * N)), f32(size_t(M * N));
    {
      const Bf16PathOverride widened(Bf16GemmPath::Widened);
      EXPECT_NE(matmul_impl_name(M, N, K, Precision::BF16).find("widened"), std::string::npos);
      matmul(wide.data(), a.data(), false, b.data(), true, M, N, K, false, Precision::BF16);
    }
    matmul(f32.data(), a.data(), false, b.data(), true, M, N, K, false, Precision::F32);
    EXPECT_EQ(wide, f32);
    if (isa >= Isa::Avx512 && cpu_features().amx_bf16) {
      const Bf16PathOverride native(Bf16GemmPath::Native);
      const std::string impl = matmul_impl_name(M, N, K, Precision::BF16);
      EXPECT_EQ(impl.find("widened"), std::string::npos) << impl;
    }
  });
}

TEST(Matmul, AnUnknownBf16PathIsNamed) {
  setenv("LT_BF16_GEMM", "fastest", 1);
  try {
    (void)bf16_gemm_choice();
    ADD_FAILURE() << "LT_BF16_GEMM=fastest was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("native or widened"), std::string::npos) << e.what();
  }
  unsetenv("LT_BF16_GEMM");
}

TEST(Matmul, Bf16InputsSkipConversion) {
  test::for_each_isa([](Isa) {
    const int64_t M = 9, N = 13, K = 21;
    auto a = test::round_bf16(test::random_floats(size_t(M * K), 7));
    auto b = test::round_bf16(test::random_floats(size_t(K * N), 8));
    std::vector<bf16> ab(a.size()), bb(b.size());
    for (size_t i = 0; i < a.size(); ++i) ab[i] = f32_to_bf16(a[i]);
    for (size_t i = 0; i < b.size(); ++i) bb[i] = f32_to_bf16(b[i]);
    std::vector<float> c1(size_t(M * N)), c2(size_t(M * N));
    matmul_bf16(c1.data(), ab.data(), false, bb.data(), true, M, N, K, false);
    matmul(c2.data(), a.data(), false, b.data(), true, M, N, K, false, Precision::BF16);
    EXPECT_EQ(c1, c2);  // the same primitive on the same bf16 bits
  });
}

TEST(Matmul, ZeroKIsAnEmptySum) {
  std::vector<float> c = {1, 2, 3, 4};
  matmul(c.data(), nullptr, false, nullptr, false, 2, 2, 0, true, Precision::F32);
  EXPECT_EQ(c, (std::vector<float>{1, 2, 3, 4}));
  matmul(c.data(), nullptr, false, nullptr, false, 2, 2, 0, false, Precision::F32);
  EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
}

TEST(Matmul, FusedBias) {
  const int64_t M = 6, N = 11, K = 5;
  auto a = test::random_floats(size_t(M * K), 11), b = test::random_floats(size_t(K * N), 12);
  auto bias = test::random_floats(size_t(N), 13);
  std::vector<float> c(size_t(M * N)), want(size_t(M * N));
  MatmulContext ctx;
  ctx.run(c.data(), {a.data(), nullptr}, false, {b.data(), nullptr}, false, M, N, K, false,
          Precision::F32, bias.data());
  ref::matmul<float>(want.data(), a.data(), false, b.data(), false, M, N, K, false);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      EXPECT_NEAR(c[size_t(i * N + j)], want[size_t(i * N + j)] + bias[size_t(j)],
                  (K + 3) * kU32 * 8);  // |a|,|b|,|bias| <= 1: sum|terms| <= K + 1
}

// Accumulating adds the finished product to C: bitwise the product computed into zeroed
// memory and then added, which is how a gradient summed in a slot reaches the host's
// (exec/gradient_sink.h) against one summed in place. Shapes: a weight gradient's
// (op(A) = dy^T, K = 512 tokens, where oneDNN blocks K), and rows of 2^21 floats, of which
// the product's scratch holds two: M = 5 runs in three blocks, the last one short (op(A)
// transposed: its blocks are columns of the stored A). fp32 and bf16.
TEST(Matmul, AccumulatingAddsTheFinishedProduct) {
  const Case cases[] = {{96, 64, 512, true, false, true}, {5, int64_t(1) << 21, 3, true, false, true},
                        {5, int64_t(1) << 21, 3, false, true, true}};
  for (const Case& cs : cases)
    for (Precision p : {Precision::F32, Precision::BF16}) {
      const auto [M, N, K, ta, tb, acc] = cs;
      const auto a = test::random_floats(size_t(M * K), 41), b = test::random_floats(size_t(K * N), 42);
      const auto c0 = test::random_floats(size_t(M * N), 43);
      std::vector<float> in_place = c0, product(size_t(M * N), 0.0f);
      matmul(in_place.data(), a.data(), ta, b.data(), tb, M, N, K, true, p);
      matmul(product.data(), a.data(), ta, b.data(), tb, M, N, K, true, p);
      std::vector<float> added = c0;
      for (size_t i = 0; i < added.size(); ++i) added[i] += product[i];
      EXPECT_TRUE(in_place == added) << "M=" << M << " N=" << N << " K=" << K
                                     << (p == Precision::BF16 ? " bf16" : " f32");
    }
  check_case({5, int64_t(1) << 21, 3, true, false, true}, Precision::F32);  // the blocks are the right rows
}

TEST(Matmul, ContextCachesPrimitivesByShape) {
  MatmulContext ctx;
  std::vector<float> a(64), b(64), c(64);
  for (int rep = 0; rep < 3; ++rep) {
    ctx.run(c.data(), {a.data(), nullptr}, false, {b.data(), nullptr}, false, 8, 8, 8, false,
            Precision::F32);
    ctx.run(c.data(), {a.data(), nullptr}, false, {b.data(), nullptr}, true, 8, 8, 8, true,
            Precision::F32);
  }
  EXPECT_EQ(ctx.cached_primitives(), 2u);
  // Above the one-thread size, a new thread count gets its own primitive (oneDNN fixes the
  // work split at creation); below it (8^3 above) every count shares the serial one.
  std::vector<float> big(128 * 128);
  auto run_big = [&] {
    ctx.run(big.data(), {big.data(), nullptr}, false, {big.data(), nullptr}, false, 128, 128,
            128, true, Precision::F32);
  };
  {
    test::ScopedThreads two(2);
    run_big();
    ctx.run(c.data(), {a.data(), nullptr}, false, {b.data(), nullptr}, false, 8, 8, 8, false,
            Precision::F32);
  }
  {
    test::ScopedThreads one(1);
    run_big();
    ctx.run(c.data(), {a.data(), nullptr}, false, {b.data(), nullptr}, false, 8, 8, 8, false,
            Precision::F32);
  }
  EXPECT_EQ(ctx.cached_primitives(), 4u);
}

TEST(Matmul, Bf16UsesAmxWhereAvailable) {
  const std::string f32 = matmul_impl_name(256, 256, 256, Precision::F32);
  const std::string bf = matmul_impl_name(256, 256, 256, Precision::BF16);
  RecordProperty("impl_f32", f32);
  RecordProperty("impl_bf16", bf);
  if (!cpu_features().amx_bf16)
    GTEST_SKIP() << "this CPU has no AMX-BF16 (bf16 runs " << bf << ", f32 runs " << f32 << ")";
  if (active_isa() < Isa::Avx512)
    GTEST_SKIP() << "LT_CPU caps the kernels (and oneDNN) below avx512 (bf16 runs " << bf << ")";
  EXPECT_NE(bf.find("amx"), std::string::npos) << bf;
  // The linear layer's shape (weights stored transposed) must pick it too.
  MatmulContext ctx;
  const std::string lin = ctx.impl_name(256, 512, 256, false, true, Precision::BF16);
  EXPECT_NE(lin.find("amx"), std::string::npos) << lin;
}

}  // namespace
}  // namespace lt
