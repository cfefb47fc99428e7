// The GPU's head + cross-entropy against float64 from the same (bf16- or fp32-valued) x and
// w, in ragged vocabulary sub-chunks, with ignored positions. Bounds follow the error
// through the computation: each logit is a product within 2 gamma_C sum |x w| (as in
// matmul_cuda_test.cpp) plus its rounding; the logsumexp adds that and its own sums; a
// softmax value moves by at most its size times those two; the gradient adds its rounding
// (to bf16 under bf16 inputs, as the kernel stores it); dx and dw are products of the
// gradient with exact operands, within 2 gamma of the sum of their magnitudes.
#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"
#include "cuda_test_util.h"
#include "kernels/cuda/cross_entropy_cuda.h"

namespace lt {
namespace {

using cuda::DeviceBuffer;
using cuda::to_device;
using cuda::to_host;
using test::gamma;

void check_head(cuda::GemmInput input, int64_t T, int64_t C, int64_t V, int64_t vocab_chunk) {
  const bool bf = input == cuda::GemmInput::BF16;
  std::vector<float> x = test::normal_floats(T * C, 1.0f, 41), w = test::normal_floats(V * C, 0.2f, 42);
  std::vector<uint16_t> x16, w16;
  if (bf) x16 = test::round_to_bf16(x), w16 = test::round_to_bf16(w);
  std::vector<int32_t> targets(T);
  for (int64_t t = 0; t < T; ++t) targets[t] = t % 5 == 4 ? -100 : static_cast<int32_t>((t * 7919) % V);
  const std::vector<float> dw0 = test::normal_floats(V * C, 0.01f, 43);
  const float scale = 1.0f / static_cast<float>(T);

  DeviceBuffer dx_in = bf ? to_device(x16) : to_device(x), dw_in = bf ? to_device(w16) : to_device(w);
  // dx starts as NaN: the first sub-chunk's product must overwrite it, the later ones add.
  DeviceBuffer dtg = to_device(targets), ddw = to_device(dw0), ddx = to_device(std::vector<float>(T * C, NAN));
  DeviceBuffer dloss(8);
  DeviceBuffer ws(cuda::head_cross_entropy_workspace_bytes(T, V, vocab_chunk, input));
  cuda::Gemm gemm;
  cuda::HeadCrossEntropyArgs a;
  a.x = dx_in.data(), a.w = dw_in.data(), a.targets = dtg.as<int32_t>();
  a.T = T, a.C = C, a.V = V, a.input = input, a.grad_scale = scale;
  a.loss = dloss.as<double>(), a.dx = ddx.as<float>(), a.dw = ddw.as<float>(), a.vocab_chunk = vocab_chunk;
  cuda::head_cross_entropy(gemm, a, ws.data());
  const double loss = to_host<double>(dloss, 1)[0];
  const std::vector<float> dx = to_host<float>(ddx, T * C), dw = to_host<float>(ddw, V * C);

  const int64_t vc = std::min(V, vocab_chunk), chunks = (V + vc - 1) / vc;
  const double u = test::kF32Unit, u_grad = bf ? 0x1p-8 : u;
  double want_loss = 0, loss_bound = 0;
  std::vector<double> dx_ref(T * C, 0.0), dx_b(T * C, 0.0), dw_ref(dw0.begin(), dw0.end()), dw_b(V * C, 0.0);
  std::vector<double> l(V), lab(V);
  for (int64_t t = 0; t < T; ++t) {
    double m = -INFINITY, worst_logit = 0;
    for (int64_t v = 0; v < V; ++v) {
      double s = 0, sa = 0;
      for (int64_t c = 0; c < C; ++c) s += double(x[t * C + c]) * w[v * C + c], sa += std::fabs(double(x[t * C + c]) * w[v * C + c]);
      l[v] = s;
      lab[v] = 2 * gamma(double(C)) * sa + u * std::fabs(s);  // the product, then its rounding
      m = std::max(m, s);
      worst_logit = std::max(worst_logit, lab[v]);
    }
    double se = 0;
    for (int64_t v = 0; v < V; ++v) se += std::exp(l[v] - m);
    const double lse = m + std::log(se);
    // The sum of exponentials: a thread's chain, the block's 8 levels, the running merge
    // across sub-chunks (two exps and a product each), expf's 2 ulp; then logf and the add.
    const double lse_err = worst_logit + gamma(double((vc + 255) / 256 + 8 + 4 * chunks + 4)) + gamma(2) * std::fabs(lse);
    const int32_t y = targets[t];
    if (y < 0) continue;
    want_loss += lse - l[y];
    loss_bound += lse_err + lab[y] + 2 * u * std::fabs(lse - l[y]);
    const double p_rel = (lse_err + worst_logit + gamma(4)) * 1.01;  // exp(e) - 1 <= 1.01 e for e < 0.02
    for (int64_t v = 0; v < V; ++v) {
      const double p = std::exp(l[v] - lse), g = scale * (p - (v == y ? 1.0 : 0.0));
      const double g_err = scale * p * p_rel + u_grad * std::fabs(g) * 1.01;
      for (int64_t c = 0; c < C; ++c) {
        dx_ref[t * C + c] += g * w[v * C + c];
        dx_b[t * C + c] += g_err * std::fabs(w[v * C + c]) + 2 * gamma(double(V + chunks)) * std::fabs(g * w[v * C + c]);
        dw_ref[v * C + c] += g * x[t * C + c];
        dw_b[v * C + c] += g_err * std::fabs(x[t * C + c]) + 2 * gamma(double(T + 1)) * std::fabs(g * x[t * C + c]);
      }
    }
  }
  for (int64_t i = 0; i < V * C; ++i) dw_b[i] += 2 * u * std::fabs(dw0[i]);
  const std::string what = std::string(bf ? "bf16" : "fp32") + " head, vocab chunk " + std::to_string(vocab_chunk);
  EXPECT_LE(std::fabs(loss - want_loss), loss_bound) << what << ": loss " << loss << " vs " << want_loss;
  test::expect_within(dx, dx_ref, dx_b, (what + " dx").c_str());
  test::expect_within(dw, dw_ref, dw_b, (what + " dw").c_str());
}

TEST(CudaKernels, HeadCrossEntropyMatchesFloat64) {
  LT_REQUIRE_CUDA_DEVICE();
  for (auto input : {cuda::GemmInput::BF16, cuda::GemmInput::F32}) {
    check_head(input, 100, 64, 1000, 384);    // three sub-chunks, the last ragged
    check_head(input, 37, 96, 500, 16384);    // the whole vocabulary in one
  }
}

}  // namespace
}  // namespace lt
