// Bitwise reproducibility: within every kernel variant any thread count gives the serial
// result, and every vector variant (AVX2, AVX-512 with and without VBMI + BF16) gives the
// scalar kernel's result, for 8-bit and fp32 state, fp32 and bf16 grads.
#include <gtest/gtest.h>

#include <cmath>

#include "adamw_kernel_variants.h"
#include "adamw_test_util.h"
#include "core/aligned_buffer.h"
#include "optim/adamw.h"

namespace lt {
namespace {

struct RunResult {
  std::vector<float> p;
  std::vector<bf16> out;
  test::StateSnapshot state;
};

// Three steps on one tensor of n elements (Q8 unless n < 4096), with the given settings.
RunResult run(int64_t n, int threads, AdamWKernel kernel, bool bf16_grad) {
  AdamWConfig cfg;
  cfg.num_threads = threads;
  cfg.kernel = kernel;
  AdamW opt(cfg);
  opt.add_tensor("w", n);
  RunResult r{test::normal_vector(n, 0.3f, 5), std::vector<bf16>(n), {}};
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> g = test::spread_gradient(n, 77 + step);
    if (bf16_grad)
      opt.step_tensor(0, r.p.data(), test::to_bf16(g).data(), r.out.data(), 1e-3f, 0.8f, step);
    else
      opt.step_tensor(0, r.p.data(), g.data(), r.out.data(), 1e-3f, 0.8f, step);
  }
  r.state = test::snapshot(opt, 0);
  return r;
}

void expect_same(const RunResult& a, const RunResult& b) {
  EXPECT_TRUE(test::same_bits(a.p, b.p));
  EXPECT_TRUE(std::equal(a.out.begin(), a.out.end(), b.out.begin(),
                         [](bf16 x, bf16 y) { return x.bits == y.bits; }));
  EXPECT_TRUE(test::same_bits(a.state.m_absmax, b.state.m_absmax));
  EXPECT_TRUE(test::same_bits(a.state.v_absmax, b.state.v_absmax));
  EXPECT_TRUE(test::same_bits(a.state.m, b.state.m));
  EXPECT_TRUE(test::same_bits(a.state.v, b.state.v));
  EXPECT_EQ(a.state.m_code, b.state.m_code);
  EXPECT_EQ(a.state.v_code, b.state.v_code);
}

TEST(AdamWDeterminism, ThreadCountDoesNotChangeBits) {
  test::for_each_kernel_variant([](AdamWKernel kernel) {
    for (int64_t n : {int64_t{1048577}, int64_t{300001}}) {
      const RunResult serial = run(n, 1, kernel, false);
      for (int threads : {2, 3, 8}) {
        SCOPED_TRACE("n=" + std::to_string(n) + " threads=" + std::to_string(threads));
        expect_same(serial, run(n, threads, kernel, false));
      }
    }
  });
}

TEST(AdamWDeterminism, VectorKernelsEqualScalarBitwise) {
  test::for_each_kernel_variant([](AdamWKernel kernel) {
    if (kernel == AdamWKernel::Scalar) return;
    // Sizes around the vector widths (8, 16), the 4-vector unroll (32, 64) and the block.
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{22}, int64_t{33}, int64_t{4095}, int64_t{4097},
                      int64_t{4096 + 255}, int64_t{100003}}) {
      for (bool bf16_grad : {false, true}) {
        SCOPED_TRACE("n=" + std::to_string(n) + (bf16_grad ? " bf16" : " fp32"));
        expect_same(run(n, 1, AdamWKernel::Scalar, bf16_grad), run(n, 2, kernel, bf16_grad));
      }
    }
  });
}

// The bf16 copy at awkward parameter values (denormals, which vcvtneps2bf16 would flush;
// NaN, infinities, values that round up to infinity, signed zeros), every kernel against
// the scalar one bit for bit. lr = 0 and no decay keep p as it is, so the copy sees exactly
// these values.
TEST(AdamWDeterminism, Bf16CopyOfAwkwardParamsEqualsScalar) {
  const int64_t n = 8192 + 37;
  std::vector<float> p0 = test::normal_vector(n, 0.3f, 9);
  const float specials[] = {1e-45f, -1e-45f, 1.1e-38f, -5.877e-39f, 1.1754942e-38f, 1.17549435e-38f, 0.f, -0.f,
                            INFINITY, -INFINITY, NAN, -NAN, 3.4028235e38f, -3.4028235e38f, 3.3961775e38f, 1.0039062f};
  for (int64_t i = 0; i < n; i += 7) p0[i] = specials[(i / 7) % 16];
  for (int64_t i = 3; i < n; i += 1001) p0[i] = 2e-39f;  // some vectors with one denormal
  AdamWHyper h;
  h.weight_decay = 0.f;
  auto run = [&](AdamWKernel kernel) {
    AdamWConfig cfg;
    cfg.kernel = kernel;
    cfg.hyper = h;
    cfg.num_threads = 2;
    AdamW opt(cfg);
    opt.add_tensor("w", n);
    std::vector<float> p = p0, g = test::spread_gradient(n, 5);
    std::vector<bf16> out(n);
    opt.step_tensor(0, p.data(), g.data(), out.data(), 0.f, 1.f, 1);
    std::vector<uint16_t> bits(n);
    for (int64_t i = 0; i < n; ++i) bits[i] = out[i].bits;
    return bits;
  };
  const std::vector<uint16_t> want = run(AdamWKernel::Scalar);
  EXPECT_EQ(want[7 * 8], 0x7f80);  // +inf stays +inf
  EXPECT_EQ(want[7 * 10] & 0x7fc0, 0x7fc0);  // NaN stays a quiet NaN
  test::for_each_kernel_variant([&](AdamWKernel kernel) { EXPECT_EQ(run(kernel), want); });
}

// A tensor larger than the caches (2M parameters, a partial last block), with NaN
// parameters scattered through it, its bf16 copy aligned or one element off alignment
// (a kernel may store an aligned copy differently): every variant gives the scalar
// kernel's bits.
TEST(AdamWDeterminism, LargeTensorCopyEqualsScalarAlignedOrNot) {
  const int64_t n = (int64_t{1} << 21) + 4096 + 200;  // a partial last block too
  std::vector<float> p0 = test::normal_vector(n, 0.3f, 21);
  for (int64_t i = 5; i < n; i += 100003) p0[i] = NAN;
  auto run = [&](AdamWKernel kernel, int64_t offset) {
    AdamWConfig cfg;
    cfg.kernel = kernel;
    cfg.num_threads = 2;
    AdamW opt(cfg);
    opt.add_tensor("w", n);
    std::vector<float> p = p0;
    AlignedBuffer<bf16> out(n + 1);
    for (int64_t step = 1; step <= 2; ++step)
      opt.step_tensor(0, p.data(), test::spread_gradient(n, 40 + step).data(), out.data() + offset, 1e-3f, 0.9f,
                      step);
    RunResult r{p, std::vector<bf16>(out.data() + offset, out.data() + offset + n), test::snapshot(opt, 0)};
    return r;
  };
  const RunResult want = run(AdamWKernel::Scalar, 0);
  EXPECT_TRUE(std::isnan(want.p[5]));
  test::for_each_kernel_variant([&](AdamWKernel kernel) {
    for (int64_t offset : {0, 1}) {
      SCOPED_TRACE("copy offset " + std::to_string(offset));
      expect_same(want, run(kernel, offset));
    }
  });
}

}  // namespace
}  // namespace lt
