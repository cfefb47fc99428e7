// RMSNorm, SwiGLU and RoPE on the GPU against float64 references computed from the same
// fp32 inputs. Each bound is the worst case of the kernel's own fp32 operations (gamma_n
// of the longest chain of roundings that feeds a value, times the magnitude it rounds),
// so a kernel that sums in another order or loses a term fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cuda_test_util.h"
#include "kernels/cuda/rmsnorm_cuda.h"
#include "kernels/cuda/rope_cuda.h"
#include "kernels/cuda/swiglu_cuda.h"

namespace lt {
namespace {

using cuda::DeviceBuffer;
using cuda::to_device;
using cuda::to_host;
using test::gamma;
using test::kF32Unit;

// A thread sums ceil(C / 256) terms in order, then 5 shuffle levels and 3 across the 8 warps.
double block_sum_chain(int64_t C) { return static_cast<double>((C + 255) / 256) + 8; }

void check_rmsnorm(int64_t T, int64_t C, float w_offset) {
  const float eps = 1e-6f;
  const std::vector<float> x = test::normal_floats(T * C, 1.5f, 1), w = test::normal_floats(C, 0.3f, 2, 1.0f),
                           dy = test::normal_floats(T * C, 1.0f, 3), dw0 = test::normal_floats(C, 0.1f, 4);
  DeviceBuffer dx_in = to_device(x), dw_in = to_device(w), ddy = to_device(dy), ddw = to_device(dw0);
  DeviceBuffer dyo(T * C * 4), drstd(T * 4), ddx(T * C * 4);
  DeviceBuffer ws(cuda::rmsnorm_backward_workspace_bytes(T, C));
  cuda::rmsnorm_forward(dyo.as<float>(), drstd.as<float>(), dx_in.as<float>(), dw_in.as<float>(), T, C, eps, w_offset);
  const std::vector<float> y = to_host<float>(dyo, T * C), rstd = to_host<float>(drstd, T);
  // Backward from the GPU's rstd, so that the reference sees the same fp32 inputs.
  cuda::rmsnorm_backward(ddx.as<float>(), ddw.as<float>(), ddy.as<float>(), dx_in.as<float>(), dw_in.as<float>(),
                         drstd.as<float>(), T, C, w_offset, ws.data());
  const std::vector<float> dx = to_host<float>(ddx, T * C), dw = to_host<float>(ddw, C);

  const double chain = block_sum_chain(C);
  std::vector<double> y_ref(T * C), y_bound(T * C), r_ref(T), r_bound(T), dx_ref(T * C), dx_bound(T * C);
  std::vector<double> dw_ref(dw0.begin(), dw0.end()), dw_abs(C, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += double(x[t * C + c]) * x[t * C + c];
    const double r = 1.0 / std::sqrt(ss / C + eps);
    r_ref[t] = r;
    // ss relatively within gamma(chain + 1) (the sum, then / C); sqrt halves it; the add
    // of eps, the sqrt and the division add three roundings.
    const double r_rel = gamma(chain + 1) / 2 + gamma(3);
    r_bound[t] = r_rel * r;
    const double rg = rstd[t];  // the backward's input
    double dot = 0, dot_abs = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double wc = double(w_offset) + w[c];
      const double yv = double(x[t * C + c]) * r * wc;
      y_ref[t * C + c] = yv;
      y_bound[t * C + c] = (r_rel + gamma(3)) * std::fabs(yv);  // w_offset + w, two products
      dot += double(dy[t * C + c]) * wc * x[t * C + c];
      dot_abs += std::fabs(double(dy[t * C + c]) * wc * x[t * C + c]);
    }
    for (int64_t c = 0; c < C; ++c) {
      const double wc = double(w_offset) + w[c];
      const double a = rg * dy[t * C + c] * wc, b = rg * rg * rg * x[t * C + c] * dot / C;
      dx_ref[t * C + c] = a - b;
      // a: three products and w_offset + w; b: the dot's chain (plus its two products per
      // term), r^3, / C and the product with x; then the difference.
      dx_bound[t * C + c] = gamma(5) * std::fabs(a) + gamma(chain + 2) * rg * rg * rg * std::fabs(x[t * C + c]) *
                                                            dot_abs / C +
                            gamma(5) * std::fabs(b) + kF32Unit * std::fabs(a - b);
      dw_ref[c] += double(dy[t * C + c]) * x[t * C + c] * rg;
      dw_abs[c] += std::fabs(double(dy[t * C + c]) * x[t * C + c] * rg);
    }
  }
  // dw: two products and a 64-long FMA chain per chunk, then the chunks in order onto dw.
  const double dw_chain = 64 + 2 + static_cast<double>((T + 63) / 64) + 1;
  std::vector<double> dw_bound(C);
  for (int64_t c = 0; c < C; ++c) dw_bound[c] = gamma(dw_chain) * (dw_abs[c] + std::fabs(dw0[c]));
  test::expect_within(rstd, r_ref, r_bound, "rstd");
  test::expect_within(y, y_ref, y_bound, "y");
  test::expect_within(dx, dx_ref, dx_bound, "dx");
  test::expect_within(dw, dw_ref, dw_bound, "dw (accumulated)");
}

TEST(CudaKernels, RmsnormMatchesFloat64) {
  LT_REQUIRE_CUDA_DEVICE();
  check_rmsnorm(300, 1000, 0.0f);  // C not a multiple of the block, T not of the dw chunk
  check_rmsnorm(64, 4096, 0.0f);
  check_rmsnorm(129, 256, 1.0f);  // Gemma's 1 + w
}

TEST(CudaKernels, SwigluMatchesFloat64) {
  LT_REQUIRE_CUDA_DEVICE();
  const int64_t n = 1 << 20;
  const std::vector<float> g = test::normal_floats(n, 4.0f, 5), u = test::normal_floats(n, 1.0f, 6),
                           dh = test::normal_floats(n, 1.0f, 7);
  const auto [h, dg, du] = test::run_gate(cuda::swiglu_forward, cuda::swiglu_backward, g, u, dh);
  std::vector<double> h_ref(n), h_b(n), dg_ref(n), dg_b(n), du_ref(n), du_b(n);
  // expf is within 2 ulp (CUDA's table of maximum ulp errors): sigmoid = 1 / (1 + e) then
  // carries 2 ulp of e (scaled by e / (1 + e) <= 1) plus the add and the division: 4 u.
  const double sig_rel = gamma(4);
  for (int64_t i = 0; i < n; ++i) {
    const double gi = g[i], s = 1.0 / (1.0 + std::exp(-gi)), d = dh[i];
    h_ref[i] = gi * s * u[i];
    h_b[i] = (sig_rel + gamma(2)) * std::fabs(h_ref[i]);
    du_ref[i] = d * gi * s;
    du_b[i] = (sig_rel + gamma(2)) * std::fabs(du_ref[i]);
    const double k = 1.0 + gi * (1.0 - s);
    dg_ref[i] = d * u[i] * s * k;
    // k cancels near g = -1.28: bound its error by the magnitudes it adds (1, |g| (1 - s),
    // and |g| times sigmoid's own error), not by |k|.
    const double k_err = gamma(3) * (1.0 + std::fabs(gi) * (1.0 - s)) + std::fabs(gi) * sig_rel * s;
    const double lead = std::fabs(d * u[i] * s);
    dg_b[i] = lead * ((sig_rel + gamma(3)) * std::fabs(k) + k_err) * (1 + gamma(4));
  }
  test::expect_within(h, h_ref, h_b, "h");
  test::expect_within(du, du_ref, du_b, "du");
  test::expect_within(dg, dg_ref, dg_b, "dg");
}

void check_rope(int64_t B, int64_t S, int64_t H, int64_t D, int64_t rotary, bool with_positions) {
  const int64_t half = (rotary > 0 ? rotary : D) / 2;
  std::vector<float> cs(S * half), sn(S * half);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t i = 0; i < half; ++i) {
      const double a = s * std::pow(10000.0, -2.0 * i / (2.0 * half));
      cs[s * half + i] = static_cast<float>(std::cos(a));
      sn[s * half + i] = static_cast<float>(std::sin(a));
    }
  std::vector<int32_t> pos;
  if (with_positions)  // two documents packed into each row
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) pos.push_back(static_cast<int32_t>(s < S / 3 ? s : s - S / 3));
  const std::vector<float> x = test::normal_floats(B * S * H * D, 1.0f, 8);
  DeviceBuffer dx = to_device(x), dgrad = to_device(x), dc = to_device(cs), ds = to_device(sn);
  DeviceBuffer dp = with_positions ? to_device(pos) : DeviceBuffer();
  const int32_t* p = with_positions ? dp.as<int32_t>() : nullptr;
  cuda::rope_forward(dx.as<float>(), dc.as<float>(), ds.as<float>(), B, S, H, D, p, rotary);
  cuda::rope_backward(dgrad.as<float>(), dc.as<float>(), ds.as<float>(), B, S, H, D, p, rotary);
  const std::vector<float> fwd = to_host<float>(dx, x.size()), bwd = to_host<float>(dgrad, x.size());
  for (double sign : {1.0, -1.0}) {
    std::vector<double> ref = test::widen(x), bound(x.size(), 0.0);
    for (int64_t row = 0; row < B * S * H; ++row) {
      const int64_t tok = row / H, at = with_positions ? pos[tok] : tok % S;
      for (int64_t i = 0; i < half; ++i) {
        const double c = cs[at * half + i], s = sign * sn[at * half + i];
        const double a = x[row * D + i], b = x[row * D + i + half];
        ref[row * D + i] = a * c - b * s;
        ref[row * D + i + half] = b * c + a * s;
        // Two products and their sum, whether or not the compiler fuses one into an FMA;
        // each output's own two products.
        bound[row * D + i] = gamma(2) * (std::fabs(a * c) + std::fabs(b * s));
        bound[row * D + i + half] = gamma(2) * (std::fabs(b * c) + std::fabs(a * s));
      }
    }
    test::expect_within(sign > 0 ? fwd : bwd, ref, bound, sign > 0 ? "rope forward" : "rope backward");
  }
}

TEST(CudaKernels, RopeMatchesFloat64) {
  LT_REQUIRE_CUDA_DEVICE();
  check_rope(2, 37, 3, 64, 0, false);
  check_rope(2, 40, 4, 128, 0, true);  // packed documents
  check_rope(1, 16, 2, 256, 64, false);  // partial rotary (Qwen3.5): channels past 64 pass through
}

}  // namespace
}  // namespace lt
