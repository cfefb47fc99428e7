// Causal GQA attention, forward and backward, at the training-step benchmark's shape
// (hidden 768: 12 query heads of D = 64, 4 KV heads, seq 512, batch 4), beside PyTorch's
// CPU flash attention (F.scaled_dot_product_attention, is_causal, enable_gqa) measured
// in the same run, interleaved round by round, same thread count.
//
// FLOPs count the causal half only, as flash-attention papers do: pairs = S(S+1)/2 per
// head; forward 2 products (QK^T, PV) = 4 D flops per pair; backward 5 products
// (QK^T, dO V^T, P^T dO, dS^T Q, dS K) = 10 D flops per pair. Recomputation beyond that
// (the split backward schedule) is not counted: it is our cost, not useful work.
//
// The kernels are those of the ISA level in force (core/cpu_features.h: the CPU's best,
// capped by LT_CPU=scalar|avx2|avx512), printed with the CPU at the top and as isa= on
// the last line:
//   RESULT attention fwd_ms=... bwd_ms=... fwd_gflops=... bwd_gflops=...
//          fwd_vs_pytorch=... bwd_vs_pytorch=... fwdbwd_vs_pytorch=... isa=...
// (the ratios are PyTorch's time over ours, so > 1 is faster; absent without the peer).
//
// usage: attention_bench [rounds=7] [B S Hq Hkv D]   (LT_THREADS or OMP_NUM_THREADS)
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/measure.h"
#include "core/threads.h"
#include "kernels/cpu/attention.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A persistent Python process: we write "fwd N" / "fwdbwd N", it answers with N times in
// seconds on one line. Keeping it alive lets the two sides alternate within seconds.
class TorchPeer {
 public:
  TorchPeer(int threads, long B, long S, long Hq, long Hkv, long D) {
    const char* py = std::getenv("LT_PYTHON");
    std::string python = py ? py : LT_SOURCE_DIR "/.venv/bin/python";
    if (access(python.c_str(), X_OK) != 0) return;
    char script[4096];
    // q, k, v made token-major [B, S, H, D] and viewed as [B, H, S, D], as a model's
    // projections produce them.
    std::snprintf(script, sizeof script,
                  "import sys, time, torch\n"
                  "import torch.nn.functional as F\n"
                  "torch.set_num_threads(%d)\n"
                  "B,S,Hq,Hkv,D=%ld,%ld,%ld,%ld,%ld\n"
                  "mk=lambda h: torch.randn(B,S,h,D).transpose(1,2).requires_grad_()\n"
                  "q,k,v=mk(Hq),mk(Hkv),mk(Hkv)\n"
                  "do=torch.randn(B,S,Hq,D).transpose(1,2)\n"
                  "sdpa=lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True,\n"
                  "                                            enable_gqa=True)\n"
                  "def fwd():\n"
                  "  with torch.no_grad(): sdpa()\n"
                  "def fwdbwd():\n"
                  "  q.grad=k.grad=v.grad=None\n"
                  "  sdpa().backward(do)\n"
                  "fwd(); fwdbwd()\n"
                  "print('ready', flush=True)\n"
                  "for line in sys.stdin:\n"
                  "  what, n = line.split(); f = fwd if what == 'fwd' else fwdbwd\n"
                  "  ts = []\n"
                  "  for _ in range(int(n)):\n"
                  "    t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)\n"
                  "  print(' '.join(map(str, ts)), flush=True)\n",
                  threads, B, S, Hq, Hkv, D);
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[1]);
      close(from_child[0]);
      execl(python.c_str(), python.c_str(), "-c", script, (char*)nullptr);
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    in_ = fdopen(to_child[1], "w");
    out_ = fdopen(from_child[0], "r");
    char line[64];
    ok_ = std::fgets(line, sizeof line, out_) && std::string(line).rfind("ready", 0) == 0;
  }
  ~TorchPeer() {
    if (in_) std::fclose(in_);
    if (out_) std::fclose(out_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  bool ok() const { return ok_; }
  std::vector<double> run(const char* what, int n) {
    std::vector<double> ts;
    if (!ok_) return ts;
    std::fprintf(in_, "%s %d\n", what, n);
    std::fflush(in_);
    std::string line;
    for (int c; (c = std::fgetc(out_)) != EOF && c != '\n';) line += char(c);
    std::istringstream in(line);
    for (double t; in >> t;) ts.push_back(t);
    return ts;
  }

 private:
  pid_t pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
  bool ok_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  long B = 4, S = 512, Hq = 12, Hkv = 4, D = 64;
  if (argc > 6)
    B = std::atol(argv[2]), S = std::atol(argv[3]), Hq = std::atol(argv[4]),
    Hkv = std::atol(argv[5]), D = std::atol(argv[6]);
  // LT_THREADS, else OMP_NUM_THREADS as the runtime read it, else all cores.
  const char* env = std::getenv("LT_THREADS");
  const int threads =
      env ? lt::set_num_threads(std::atoi(env))
          : (std::getenv("OMP_NUM_THREADS") ? lt::num_threads() : lt::set_num_threads(0));
  const float scale = 1.0f / std::sqrt(float(D));
  const size_t nq = size_t(B * S * Hq * D), nk = size_t(B * S * Hkv * D);
  lt::AlignedBuffer<float> q(nq), k(nk), v(nk), o(nq), lse(B * Hq * S), dout(nq), dq(nq), dk(nk),
      dv(nk);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (auto* buf : {&q, &dout})
    for (size_t i = 0; i < nq; ++i) (*buf)[i] = nd(rng);
  for (auto* buf : {&k, &v})
    for (size_t i = 0; i < nk; ++i) (*buf)[i] = nd(rng);

  const double pairs = double(S) * double(S + 1) / 2;
  const double fwd_flops = 4.0 * B * Hq * D * pairs, bwd_flops = 10.0 * B * Hq * D * pairs;
  const std::string isa(lt::isa_name(lt::active_isa()));
  std::printf("%s\n", lt::cpu_summary().c_str());
  std::printf("attention B=%ld S=%ld Hq=%ld Hkv=%ld D=%ld causal, %d threads, %s kernels\n", B, S,
              Hq, Hkv, D, threads, isa.c_str());
  std::printf("useful GFLOP: forward %.3f, backward %.3f\n", fwd_flops * 1e-9, bwd_flops * 1e-9);

  auto fwd = [&] {
    lt::attention_forward(o.data(), lse.data(), q.data(), k.data(), v.data(), B, S, Hq, Hkv, D,
                          scale);
  };
  auto bwd = [&] {
    lt::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                           v.data(), o.data(), lse.data(), B, S, Hq, Hkv, D, scale);
  };
  fwd();
  bwd();  // warm-up: page faults, thread pool

  TorchPeer peer(threads, B, S, Hq, Hkv, D);
  if (!peer.ok()) std::printf("(PyTorch peer unavailable: no .venv with torch)\n");
  const int reps = 5;
  std::vector<double> tf, tb, pf, pfb;
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < reps; ++i) {
      double t0 = now();
      fwd();
      double t1 = now();
      bwd();
      double t2 = now();
      tf.push_back(t1 - t0);
      tb.push_back(t2 - t1);
    }
    for (double t : peer.run("fwd", reps)) pf.push_back(t);
    for (double t : peer.run("fwdbwd", reps)) pfb.push_back(t);
  }
  const double f = lt::median(tf), b = lt::median(tb);
  std::string result = "RESULT attention";
  char field[128];
  std::snprintf(field, sizeof field, " fwd_ms=%.2f bwd_ms=%.2f fwd_gflops=%.1f bwd_gflops=%.1f",
                f * 1e3, b * 1e3, fwd_flops / f * 1e-9, bwd_flops / b * 1e-9);
  result += field;
  std::printf("%-10s %12s %12s %12s\n", "", "forward", "backward", "fwd+bwd");
  std::printf("%-10s %9.2f ms %9.2f ms %9.2f ms\n", "lazytrain", f * 1e3, b * 1e3, (f + b) * 1e3);
  std::printf("%-10s %9.1f GF/s %7.1f GF/s %7.1f GF/s\n", "", fwd_flops / f * 1e-9,
              bwd_flops / b * 1e-9, (fwd_flops + bwd_flops) / (f + b) * 1e-9);
  if (!pf.empty() && !pfb.empty()) {
    const double tpf = lt::median(pf), tpfb = lt::median(pfb), tpb = tpfb - tpf;
    std::printf("%-10s %9.2f ms %9.2f ms %9.2f ms   (backward = fwd+bwd - fwd)\n", "pytorch",
                tpf * 1e3, tpb * 1e3, tpfb * 1e3);
    std::printf("%-10s %9.1f GF/s %7.1f GF/s %7.1f GF/s\n", "", fwd_flops / tpf * 1e-9,
                bwd_flops / tpb * 1e-9, (fwd_flops + bwd_flops) / tpfb * 1e-9);
    std::printf(
        "speed-up vs pytorch: forward %.2fx, backward %.2fx, fwd+bwd %.2fx (medians of %zu)\n",
        tpf / f, tpb / b, tpfb / (f + b), tf.size());
    std::snprintf(field, sizeof field,
                  " fwd_vs_pytorch=%.2f bwd_vs_pytorch=%.2f fwdbwd_vs_pytorch=%.2f", tpf / f,
                  tpb / b, tpfb / (f + b));
    result += field;
  }
  std::printf("%s isa=%s\n", result.c_str(), isa.c_str());
  return 0;
}
