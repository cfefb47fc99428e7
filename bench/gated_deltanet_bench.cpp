// The Qwen3.5 Gated DeltaNet kernels (gated delta rule, causal conv1d + SiLU, gated
// RMSNorm), forward and backward, at the layer shape of the Qwen3_5TextConfig defaults
// (linear_num_key_heads 16, linear_num_value_heads 32, linear_key_head_dim 128,
// linear_value_head_dim 128, linear_conv_kernel_dim 4), batch 1, seq 2048, beside
// transformers' torch path (bench/gated_deltanet_bench.py, fp32, autograd) run after ours
// in the same process tree with the same thread count. Medians over the rounds.
//   RESULT gated_deltanet gdr_fwd_ms=... gdr_bwd_ms=... conv_fwd_ms=... conv_bwd_ms=...
//          norm_fwd_ms=... norm_bwd_ms=... [peer figures and ratios peer/ours] isa=...
//
// usage: gated_deltanet_bench [rounds=3] [B S Hk Hv dk dv K]   (LT_THREADS or OMP_NUM_THREADS)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/threads.h"
#include "kernels/cpu/causal_conv1d.h"
#include "kernels/cpu/gated_delta_rule.h"
#include "kernels/cpu/gated_rmsnorm.h"

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <class F>
double median_ms(int rounds, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < rounds; ++r) {
    const double t0 = now_ms();
    f();
    t.push_back(now_ms() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void fill(lt::AlignedBuffer<float>& b, size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (size_t i = 0; i < n; ++i) b[i] = d(rng);
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  long B = 1, S = 2048, Hk = 16, Hv = 32, dk = 128, dv = 128, K = 4;
  if (argc > 8)
    B = std::atol(argv[2]), S = std::atol(argv[3]), Hk = std::atol(argv[4]), Hv = std::atol(argv[5]),
    dk = std::atol(argv[6]), dv = std::atol(argv[7]), K = std::atol(argv[8]);
  const char* env = std::getenv("LT_THREADS");
  const int threads = env ? lt::set_num_threads(std::atoi(env))
                          : (std::getenv("OMP_NUM_THREADS") ? lt::num_threads() : lt::set_num_threads(0));
  const lt::GatedDeltaShape s{B, S, Hk, Hv, dk, dv, 64};
  const lt::CausalConvShape cs{B, S, 2 * Hk * dk + Hv * dv, K};
  const long T = B * S * Hv;
  std::printf("%s\n", lt::cpu_summary().c_str());
  std::printf("gated deltanet B=%ld S=%ld Hk=%ld Hv=%ld dk=%ld dv=%ld K=%ld chunk 64, %d threads, %s kernels\n", B,
              S, Hk, Hv, dk, dv, K, threads, std::string(lt::isa_name(lt::active_isa())).c_str());

  const size_t nqk = size_t(B * S * Hk * dk), nv = size_t(B * S * Hv * dv), ng = size_t(B * S * Hv);
  lt::AlignedBuffer<float> q(nqk), k(nqk), v(nv), g(ng), beta(ng), o(nv), dout(nv), dq(nqk), dk_(nqk), dv_(nv),
      dg(ng), db(ng), cst(size_t(s.chunk_state_floats())),
      ws(std::max(lt::gated_delta_rule_forward_workspace_floats(s), lt::gated_delta_rule_backward_workspace_floats(s)));
  fill(q, nqk, -1, 1, 1), fill(k, nqk, -1, 1, 2), fill(v, nv, -1, 1, 3), fill(g, ng, -1, 0, 4);
  fill(beta, ng, 0, 1, 5), fill(dout, nv, -1, 1, 6);
  auto gdr_fwd = [&] {
    lt::gated_delta_rule_forward(o.data(), nullptr, cst.data(), q.data(), k.data(), v.data(), g.data(), beta.data(),
                                 nullptr, s, ws.data());
  };
  auto gdr_bwd = [&] {
    lt::gated_delta_rule_backward(dq.data(), dk_.data(), dv_.data(), dg.data(), db.data(), nullptr, dout.data(),
                                  nullptr, q.data(), k.data(), v.data(), g.data(), beta.data(), cst.data(), s,
                                  ws.data());
  };
  const size_t nc = size_t(B * S * cs.channels), nw = size_t(cs.channels * K);
  lt::AlignedBuffer<float> cx(nc), cw(nw), cy(nc), cdy(nc), cdx(nc), cdw(nw);
  fill(cx, nc, -1, 1, 7), fill(cw, nw, -1, 1, 8), fill(cdy, nc, -1, 1, 9);
  auto conv_fwd = [&] { lt::causal_conv1d_silu_forward(cy.data(), cx.data(), cw.data(), cs); };
  auto conv_bwd = [&] { lt::causal_conv1d_silu_backward(cdx.data(), cdw.data(), cdy.data(), cx.data(), cw.data(), cs); };
  const size_t nn = size_t(T * dv);
  lt::AlignedBuffer<float> nx(nn), nz(nn), nwt(static_cast<size_t>(dv)), ny(nn), rstd(static_cast<size_t>(T)), ndy(nn), ndx(nn), ndz(nn),
      ndw(static_cast<size_t>(dv)), nws(lt::gated_rmsnorm_backward_workspace_floats(T, dv));
  fill(nx, nn, -1, 1, 10), fill(nz, nn, -1, 1, 11), fill(nwt, size_t(dv), 0.5f, 1.5f, 12), fill(ndy, nn, -1, 1, 13);
  auto norm_fwd = [&] { lt::gated_rmsnorm_forward(ny.data(), rstd.data(), nx.data(), nz.data(), nwt.data(), T, dv, 1e-6f); };
  auto norm_bwd = [&] {
    lt::gated_rmsnorm_backward(ndx.data(), ndz.data(), ndw.data(), ndy.data(), nx.data(), nz.data(), nwt.data(),
                               rstd.data(), T, dv, nws.data());
  };
  gdr_fwd(), gdr_bwd(), conv_fwd(), conv_bwd(), norm_fwd(), norm_bwd();  // warm-up
  const double ours[6] = {median_ms(rounds, gdr_fwd),  median_ms(rounds, gdr_bwd),  median_ms(rounds, conv_fwd),
                          median_ms(rounds, conv_bwd), median_ms(rounds, norm_fwd), median_ms(rounds, norm_bwd)};
  const char* names[6] = {"gdr_fwd", "gdr_bwd", "conv_fwd", "conv_bwd", "norm_fwd", "norm_bwd"};

  const char* py = std::getenv("LT_PYTHON");
  const std::string python = py ? py : LT_SOURCE_DIR "/.venv/bin/python";
  char cmd[1024];
  std::snprintf(cmd, sizeof cmd, "'%s' '%s/bench/gated_deltanet_bench.py' %d %d %ld %ld %ld %ld %ld %ld %ld 2>/dev/null",
                python.c_str(), LT_SOURCE_DIR, threads, rounds, B, S, Hk, Hv, dk, dv, K);
  double peer[6] = {0, 0, 0, 0, 0, 0};
  bool have_peer = false;
  if (FILE* p = popen(cmd, "r")) {
    char line[1024];
    while (std::fgets(line, sizeof line, p))
      if (std::sscanf(line, "PEER gdr_fwd_ms=%lf gdr_bwd_ms=%lf conv_fwd_ms=%lf conv_bwd_ms=%lf norm_fwd_ms=%lf norm_bwd_ms=%lf",
                      &peer[0], &peer[1], &peer[2], &peer[3], &peer[4], &peer[5]) == 6)
        have_peer = true;
    pclose(p);
  }
  if (!have_peer) std::printf("(transformers peer unavailable: no .venv with torch and transformers)\n");
  std::printf("RESULT gated_deltanet");
  for (int i = 0; i < 6; ++i) std::printf(" %s_ms=%.2f", names[i], ours[i]);
  if (have_peer)
    for (int i = 0; i < 6; ++i) std::printf(" peer_%s_ms=%.2f vs_peer_%s=%.2f", names[i], peer[i], names[i], peer[i] / ours[i]);
  std::printf(" isa=%s\n", std::string(lt::isa_name(lt::active_isa())).c_str());
  return 0;
}
