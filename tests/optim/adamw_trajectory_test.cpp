// Training trajectories of the hybrid 8-bit AdamW against fp32 AdamW from the same start:
// a quadratic and a tiny bigram language model, both with global-norm clipping through
// clip_decision() and gradients computed here.
//
// Loss-gap bounds. The 8-bit step uses the exact fresh fp32 m, v for the update it makes;
// quantization only perturbs the *stored* states, by at most half a code gap relative to
// the block absmax. Elements near their block's absmax (the ones that move most) sit in the
// top decade of the maps, where half a gap is <= 0.9/64/2 = 0.7% of absmax for m (signed)
// and 0.35% for v (unsigned). An update m/sqrt(v) then differs by about 0.7% + 0.35%/2 ~ 1%
// per step, and Adam's normalized steps do not amplify such relative errors (the update size
// is set by lr, not by the gradient scale). Small elements of a block see coarser relative
// error, but they contribute proportionally less to the loss. So the losses of the two runs
// should stay within a few percent of the loss *decrease* achieved; we allow 5% of the
// decrease (plus 1% of the final fp32 loss for the quadratic's noise floor around its
// optimum, where Adam's steps of size ~lr dominate the loss).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "adamw_test_util.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"

namespace lt {
namespace {

// f(p) = 1/2 sum a_i (p_i - t_i)^2 over n = 20000 elements (8-bit state, 79 blocks with a
// partial last one), curvatures a_i spanning 100x so the blocks mix fast and slow elements.
TEST(AdamWTrajectory, QuadraticTracksFp32) {
  const int64_t n = 20000;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> curv(0.05f, 5.f), target(-1.f, 1.f);
  std::vector<float> a(n), t(n);
  for (int64_t i = 0; i < n; ++i) a[i] = curv(rng), t[i] = target(rng);
  auto loss = [&](const std::vector<float>& p) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += 0.5 * a[i] * double(p[i] - t[i]) * (p[i] - t[i]);
    return s;
  };
  const LrSchedule lr{.peak = 2e-2, .min_ratio = 0.05, .warmup_steps = 20, .total_steps = 400};
  std::vector<double> losses[2];
  for (int eight = 0; eight < 2; ++eight) {
    AdamWConfig cfg;
    cfg.eight_bit = eight;
    cfg.hyper.weight_decay = 0.f;  // decay would move the optimum away from t
    AdamW opt(cfg);
    opt.add_tensor("p", n);
    ASSERT_EQ(opt.format(0), eight ? StateFormat::Q8 : StateFormat::F32);
    std::vector<float> p(n, 0.f), g(n);
    for (int64_t step = 1; step <= lr.total_steps; ++step) {
      double sum_sq = 0;
      for (int64_t i = 0; i < n; ++i) g[i] = a[i] * (p[i] - t[i]), sum_sq += double(g[i]) * g[i];
      const ClipDecision d = clip_decision(sum_sq, 50.0);  // clips the early steps
      ASSERT_TRUE(d.finite);
      ASSERT_TRUE(opt.step_tensor(0, p.data(), g.data(), nullptr, float(lr.at(step)), d.clip_factor, step).ok());
      losses[eight].push_back(loss(p));
    }
  }
  const double l0 = loss(std::vector<float>(n, 0.f)), l32 = losses[0].back(), l8 = losses[1].back();
  EXPECT_LT(l32, 0.01 * l0) << "fp32 AdamW did not converge: the comparison would be empty";
  for (size_t s = 49; s < losses[0].size(); s += 50)
    EXPECT_LE(std::fabs(losses[1][s] - losses[0][s]), 0.05 * (l0 - losses[0][s]) + 0.01 * l32 + 1e-3 * l0)
        << "step " << s + 1 << ": 8-bit " << losses[1][s] << " fp32 " << losses[0][s];
  EXPECT_LE(std::fabs(l8 - l32), 0.05 * (l0 - l32) + 0.01 * l32) << "8-bit " << l8 << " fp32 " << l32;
  std::printf("quadratic: initial %.4g, final fp32 %.6g, 8-bit %.6g\n", l0, l32, l8);
}

// A bigram language model: logits(x) = E[x] W, E: [V, D] embedding, W: [D, V] output, both
// 8-bit (V * D = 4608 >= 4096). Tokens follow a fixed random Markov chain in which every
// token has 4 likely successors, so the achievable loss (the chain's entropy rate) is far
// below log V. Cross-entropy gradients are computed in float64 and handed over as fp32.
TEST(AdamWTrajectory, BigramLanguageModelTracksFp32) {
  constexpr int V = 96, D = 48, kBatch = 128, kSteps = 300;
  std::mt19937 rng(7);
  // Transition table: 4 successors with weights 0.5, 0.25, 0.15, 0.1.
  std::vector<int> succ(V * 4);
  std::uniform_int_distribution<int> tok(0, V - 1);
  for (auto& s : succ) s = tok(rng);
  const float w[4] = {0.5f, 0.25f, 0.15f, 0.1f};
  auto next = [&](int x, float u) {
    float c = 0;
    for (int k = 0; k < 4; ++k)
      if (u < (c += w[k])) return succ[x * 4 + k];
    return succ[x * 4 + 3];
  };
  auto sample_batch = [&](std::mt19937& r, std::vector<int>& xs, std::vector<int>& ys) {
    std::uniform_real_distribution<float> unit(0.f, 1.f);
    for (int b = 0; b < kBatch; ++b) xs[b] = tok(r), ys[b] = next(xs[b], unit(r));
  };
  // Mean cross-entropy of a batch; with grads != null also its gradients.
  auto forward_backward = [&](const std::vector<float>& E, const std::vector<float>& W, const std::vector<int>& xs,
                              const std::vector<int>& ys, std::vector<float>* gE, std::vector<float>* gW) {
    std::vector<double> dE(V * D, 0.0), dW(D * V, 0.0), logits(V), prob(V);
    double total = 0;
    for (int b = 0; b < kBatch; ++b) {
      const float* h = &E[xs[b] * D];
      double mx = -1e300;
      for (int v = 0; v < V; ++v) {
        double z = 0;
        for (int d = 0; d < D; ++d) z += double(h[d]) * W[d * V + v];
        logits[v] = z;
        mx = std::max(mx, z);
      }
      double den = 0;
      for (int v = 0; v < V; ++v) den += prob[v] = std::exp(logits[v] - mx);
      for (int v = 0; v < V; ++v) prob[v] /= den;
      total -= std::log(prob[ys[b]]);
      if (!gE) continue;
      prob[ys[b]] -= 1.0;  // dloss/dlogits
      for (int d = 0; d < D; ++d) {
        double dh = 0;
        for (int v = 0; v < V; ++v) {
          dW[d * V + v] += h[d] * prob[v] / kBatch;
          dh += W[d * V + v] * prob[v];
        }
        dE[xs[b] * D + d] += dh / kBatch;
      }
    }
    if (gE) {
      for (int i = 0; i < V * D; ++i) (*gE)[i] = float(dE[i]), (*gW)[i] = float(dW[i]);
    }
    return total / kBatch;
  };

  std::vector<int> hx(kBatch), hy(kBatch);  // a held-out batch from another seed
  std::mt19937 held(99);
  sample_batch(held, hx, hy);
  const LrSchedule lr{.peak = 3e-2, .min_ratio = 0.1, .warmup_steps = 10, .total_steps = kSteps};
  double final_loss[2], start_loss = 0;
  for (int eight = 0; eight < 2; ++eight) {
    AdamWConfig cfg;
    cfg.eight_bit = eight;
    AdamW opt(cfg);
    opt.add_tensor("embed", V * D);
    opt.add_tensor("head", D * V);
    ASSERT_EQ(opt.format(0), eight ? StateFormat::Q8 : StateFormat::F32);
    std::vector<float> E = test::normal_vector(V * D, 0.1f, 1), W = test::normal_vector(D * V, 0.1f, 2);
    std::vector<float> gE(V * D), gW(D * V);
    std::vector<int> xs(kBatch), ys(kBatch);
    std::mt19937 data(5);  // the same token stream for both runs
    start_loss = forward_backward(E, W, hx, hy, nullptr, nullptr);
    for (int64_t step = 1; step <= kSteps; ++step) {
      sample_batch(data, xs, ys);
      forward_backward(E, W, xs, ys, &gE, &gW);
      double sum_sq = 0;
      for (float x : gE) sum_sq += double(x) * x;
      for (float x : gW) sum_sq += double(x) * x;
      const ClipDecision d = clip_decision(sum_sq, 1.0);
      ASSERT_TRUE(d.finite);
      opt.step_tensor(0, E.data(), gE.data(), nullptr, float(lr.at(step)), d.clip_factor, step);
      opt.step_tensor(1, W.data(), gW.data(), nullptr, float(lr.at(step)), d.clip_factor, step);
    }
    final_loss[eight] = forward_backward(E, W, hx, hy, nullptr, nullptr);
  }
  // Entropy rate of the chain: H(0.5, 0.25, 0.15, 0.1) nats (when successors are distinct).
  const double entropy = -(0.5 * std::log(0.5) + 0.25 * std::log(0.25) + 0.15 * std::log(0.15) + 0.1 * std::log(0.1));
  std::printf("bigram: start %.4f, fp32 %.4f, 8-bit %.4f, entropy rate ~%.4f, log V %.4f\n", start_loss,
              final_loss[0], final_loss[1], entropy, std::log(double(V)));
  EXPECT_LT(final_loss[0], start_loss - 0.5 * (start_loss - entropy)) << "fp32 AdamW did not learn the chain";
  EXPECT_LE(std::fabs(final_loss[1] - final_loss[0]), 0.05 * (start_loss - final_loss[0]));
}

}  // namespace
}  // namespace lt
