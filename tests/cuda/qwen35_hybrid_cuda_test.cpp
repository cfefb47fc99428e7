// The Qwen3.5 hybrid layers' small kernels on the GPU (the causal conv1d with SiLU, the
// gated RMSNorm) against float64 references computed from the same fp32 inputs. Each bound
// is the worst case of the kernel's own fp32 operations: gamma_n of the longest chain of
// roundings that feeds a value times the magnitude it rounds, plus an input's error times
// the largest slope it passes through (silu' <= 1.1, silu'' <= 0.5 in magnitude).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cuda_test_util.h"
#include "kernels/cuda/causal_conv1d_cuda.h"
#include "kernels/cuda/gated_rmsnorm_cuda.h"

namespace lt {
namespace {

using cuda::DeviceBuffer;
using cuda::to_device;
using cuda::to_host;
using test::gamma;
using test::kF32Unit;

// sigmoid = 1 / (1 + expf(-a)) with expf within 2 ulp (CUDA's table of maximum ulp
// errors), then the add and the division: 4 u relative.
const double kSigmoidRel = gamma(4);
constexpr double kSiluSlope = 1.1;         // max |silu'(a)| = 1.0998...
constexpr double kSiluCurvature = 0.5;     // max |silu''(a)| = 0.5 (at a = 0)

double sigmoid(double a) { return 1.0 / (1.0 + std::exp(-a)); }

// The error of silu'(a) = s (1 + a (1 - s)) evaluated in fp32 at an exact fp32 a: the
// factor k = 1 + a (1 - s) cancels near a = -2.4, so its error is bounded by the
// magnitudes it adds (1, |a| (1 - s), and |a| times sigmoid's own error), not by |k|.
double silu_grad_error(double a) {
  const double s = sigmoid(a), k = 1.0 + a * (1.0 - s);
  const double k_err = gamma(3) * (1.0 + std::fabs(a) * (1.0 - s)) + std::fabs(a) * kSigmoidRel * s;
  return s * ((kSigmoidRel + gamma(1)) * std::fabs(k) + k_err);
}

void check_conv(int64_t B, int64_t S, int64_t C, int64_t K) {
  const std::vector<float> x = test::normal_floats(B * S * C, 1.0f, 11), w = test::normal_floats(C * K, 0.5f, 12),
                           dy = test::normal_floats(B * S * C, 1.0f, 13), dw0 = test::normal_floats(C * K, 0.1f, 14);
  DeviceBuffer dxin = to_device(x), dwin = to_device(w), ddy = to_device(dy), ddw = to_device(dw0);
  DeviceBuffer dyo(B * S * C * 4), ddx(B * S * C * 4), ws(cuda::causal_conv1d_backward_workspace_bytes(B, S, C, K));
  cuda::causal_conv1d_silu_forward(dyo.as<float>(), dxin.as<float>(), dwin.as<float>(), B, S, C, K);
  cuda::causal_conv1d_silu_backward(ddx.as<float>(), ddw.as<float>(), ddy.as<float>(), dxin.as<float>(),
                                    dwin.as<float>(), B, S, C, K, ws.data());
  const std::vector<float> y = to_host<float>(dyo, B * S * C), dx = to_host<float>(ddx, B * S * C),
                           dw = to_host<float>(ddw, C * K);

  const int64_t n = B * S * C;
  // Per (b, t, c): a in float64, the bound of the GPU's a (a K-long FMA chain), and dL/da
  // with the bound of the GPU's.
  std::vector<double> a(n), a_err(n), da(n), da_err(n);
  auto at = [&](int64_t b, int64_t t, int64_t c) { return (b * S + t) * C + c; };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < S; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double s = 0, s_abs = 0;
        for (int64_t j = std::max<int64_t>(0, K - 1 - t); j < K; ++j) {
          const double term = double(w[c * K + j]) * x[at(b, t - (K - 1) + j, c)];
          s += term;
          s_abs += std::fabs(term);
        }
        const int64_t i = at(b, t, c);
        a[i] = s;
        a_err[i] = gamma(K) * s_abs;
        const double sg = sigmoid(s);
        da[i] = dy[i] * sg * (1.0 + s * (1.0 - sg));
        // silu' at the GPU's a (its own rounding, then the product with dy), and the move of
        // a itself through silu'' <= 0.5.
        da_err[i] = std::fabs(double(dy[i])) * (silu_grad_error(s) * (1 + gamma(2)) + gamma(2) * std::fabs(da[i] / dy[i]) +
                                               kSiluCurvature * a_err[i]);
      }
  std::vector<double> y_ref(n), y_b(n), dx_ref(n), dx_b(n), dw_ref(dw0.begin(), dw0.end()), dw_abs(C * K, 0.0),
      dw_in_err(C * K, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    y_ref[i] = a[i] * sigmoid(a[i]);
    y_b[i] = (kSigmoidRel + gamma(1)) * std::fabs(y_ref[i]) + kSiluSlope * a_err[i];
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t u = 0; u < S; ++u)
      for (int64_t c = 0; c < C; ++c) {
        double s = 0, s_abs = 0, in_err = 0;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t t = u + (K - 1) - j;
          if (t >= S) continue;
          s += double(w[c * K + j]) * da[at(b, t, c)];
          s_abs += std::fabs(double(w[c * K + j]) * da[at(b, t, c)]);
          in_err += std::fabs(double(w[c * K + j])) * da_err[at(b, t, c)];
        }
        dx_ref[at(b, u, c)] = s;
        dx_b[at(b, u, c)] = gamma(K) * s_abs + in_err * (1 + gamma(K));
      }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < S; ++t)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t j = std::max<int64_t>(0, K - 1 - t); j < K; ++j) {
          const double xv = x[at(b, t - (K - 1) + j, c)];
          dw_ref[c * K + j] += da[at(b, t, c)] * xv;
          dw_abs[c * K + j] += std::fabs(da[at(b, t, c)] * xv);
          dw_in_err[c * K + j] += da_err[at(b, t, c)] * std::fabs(xv);
        }
  // dw: a 64-long FMA chain per chunk, then the chunks in order onto dw.
  const double dw_chain = 64 + static_cast<double>((B * S + 63) / 64) + 1;
  std::vector<double> dw_b(C * K);
  for (int64_t i = 0; i < C * K; ++i)
    dw_b[i] = gamma(dw_chain) * (dw_abs[i] + std::fabs(dw0[i])) + dw_in_err[i] * (1 + gamma(dw_chain));
  test::expect_within(y, y_ref, y_b, "conv y");
  test::expect_within(dx, dx_ref, dx_b, "conv dx");
  test::expect_within(dw, dw_ref, dw_b, "conv dw (accumulated)");
}

TEST(CudaKernels, CausalConv1dSiluMatchesFloat64) {
  LT_REQUIRE_CUDA_DEVICE();
  check_conv(2, 100, 300, 4);  // C not a multiple of the block, B * S not of the dw chunk
  check_conv(1, 3, 64, 4);     // shorter than the kernel: the zero history
  check_conv(3, 70, 40, 1);
  check_conv(1, 130, 33, 7);
}

TEST(CudaKernels, CausalConv1dRejectsBadKernelSize) {
  LT_REQUIRE_CUDA_DEVICE();
  DeviceBuffer buf(64);
  EXPECT_THROW(cuda::causal_conv1d_silu_forward(buf.as<float>(), buf.as<float>(), buf.as<float>(), 1, 1, 1, 0),
               std::invalid_argument);
  EXPECT_THROW(cuda::causal_conv1d_silu_forward(buf.as<float>(), buf.as<float>(), buf.as<float>(), 1, 1, 1, 17),
               std::invalid_argument);
}

void check_gated_rmsnorm(int64_t T, int64_t D) {
  const float eps = 1e-6f;
  const std::vector<float> x = test::normal_floats(T * D, 1.5f, 21), z = test::normal_floats(T * D, 2.0f, 22),
                           w = test::normal_floats(D, 0.3f, 23, 1.0f), dy = test::normal_floats(T * D, 1.0f, 24),
                           dw0 = test::normal_floats(D, 0.1f, 25);
  DeviceBuffer dxin = to_device(x), dzin = to_device(z), dwin = to_device(w), ddy = to_device(dy), ddw = to_device(dw0);
  DeviceBuffer dyo(T * D * 4), drstd(T * 4), ddx(T * D * 4), ddz(T * D * 4);
  DeviceBuffer ws(cuda::gated_rmsnorm_backward_workspace_bytes(T, D));
  cuda::gated_rmsnorm_forward(dyo.as<float>(), drstd.as<float>(), dxin.as<float>(), dzin.as<float>(), dwin.as<float>(),
                              T, D, eps);
  // Backward from the GPU's rstd, so that the reference sees the same fp32 inputs.
  cuda::gated_rmsnorm_backward(ddx.as<float>(), ddz.as<float>(), ddw.as<float>(), ddy.as<float>(), dxin.as<float>(),
                               dzin.as<float>(), dwin.as<float>(), drstd.as<float>(), T, D, ws.data());
  const std::vector<float> y = to_host<float>(dyo, T * D), rstd = to_host<float>(drstd, T),
                           dx = to_host<float>(ddx, T * D), dz = to_host<float>(ddz, T * D),
                           dw = to_host<float>(ddw, D);

  // A lane sums ceil(D / 32) terms in order, then 5 shuffle levels.
  const double chain = static_cast<double>((D + 31) / 32) + 5;
  const double r_rel = gamma(chain + 1) / 2 + gamma(3);  // as RMSNorm: the sum and / D, halved by sqrt; + eps, sqrt, 1/
  std::vector<double> r_ref(T), r_b(T), y_ref(T * D), y_b(T * D), dx_ref(T * D), dx_b(T * D), dz_ref(T * D),
      dz_b(T * D), dw_ref(dw0.begin(), dw0.end()), dw_abs(D, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += double(x[t * D + d]) * x[t * D + d];
    const double r = 1.0 / std::sqrt(ss / D + eps), rg = rstd[t];
    r_ref[t] = r;
    r_b[t] = r_rel * r;
    double dot = 0, dot_abs = 0;
    for (int64_t d = 0; d < D; ++d) {
      const int64_t i = t * D + d;
      const double zd = z[i], s = sigmoid(zd), silu = zd * s;
      y_ref[i] = double(w[d]) * x[i] * r * silu;
      // x r, w times it, silu (sigmoid's 4 u and the product), the last product.
      y_b[i] = (r_rel + gamma(3) + kSigmoidRel + gamma(1)) * std::fabs(y_ref[i]);
      const double dn = double(dy[i]) * w[d] * silu;
      dot += dn * x[i];
      dot_abs += std::fabs(dn * x[i]);
      const double n = double(x[i]) * rg, k = 1.0 + zd * (1.0 - s);
      dz_ref[i] = double(dy[i]) * w[d] * n * s * k;
      // dy w, x r, then three products; silu'(z) = s k with its own error.
      dz_b[i] = std::fabs(double(dy[i]) * w[d] * n) * (gamma(5) * s * std::fabs(k) + silu_grad_error(zd)) *
                (1 + gamma(5));
      dw_ref[d] += double(dy[i]) * n * silu;
      dw_abs[d] += std::fabs(double(dy[i]) * n * silu);
    }
    for (int64_t d = 0; d < D; ++d) {
      const int64_t i = t * D + d;
      const double zd = z[i], silu = zd * sigmoid(zd);
      const double a = rg * dy[i] * w[d] * silu, b = rg * rg * rg * x[i] * dot / D;
      dx_ref[i] = a - b;
      // a: dn's three products and sigmoid's error, times r; b: the dot's chain (with dn's
      // own error in each term), r^3, / D and the product with x; then the difference.
      dx_b[i] = (gamma(5) + kSigmoidRel) * std::fabs(a) +
                (gamma(chain + 4) + kSigmoidRel) * rg * rg * rg * std::fabs(double(x[i])) * dot_abs / D +
                gamma(5) * std::fabs(b) + kF32Unit * std::fabs(a - b);
    }
  }
  // dw: per term x r, dy times it, silu (sigmoid's error and a product), the FMA; a 64-long
  // chain per chunk, then the chunks in order onto dw.
  const double dw_chain = 64 + static_cast<double>((T + 63) / 64) + 1;
  std::vector<double> dw_b(D);
  for (int64_t d = 0; d < D; ++d)
    dw_b[d] = (gamma(dw_chain + 3) + kSigmoidRel) * dw_abs[d] + gamma(dw_chain) * std::fabs(dw0[d]);
  test::expect_within(rstd, r_ref, r_b, "gated rmsnorm rstd");
  test::expect_within(y, y_ref, y_b, "gated rmsnorm y");
  test::expect_within(dx, dx_ref, dx_b, "gated rmsnorm dx");
  test::expect_within(dz, dz_ref, dz_b, "gated rmsnorm dz");
  test::expect_within(dw, dw_ref, dw_b, "gated rmsnorm dw (accumulated)");
}

TEST(CudaKernels, GatedRmsnormMatchesFloat64) {
  LT_REQUIRE_CUDA_DEVICE();
  check_gated_rmsnorm(300, 128);  // the released models' value head dim; T not a multiple of the chunk
  check_gated_rmsnorm(37, 100);   // D not a multiple of the warp
  check_gated_rmsnorm(9, 256);
}

}  // namespace
}  // namespace lt
