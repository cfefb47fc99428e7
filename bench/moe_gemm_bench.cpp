// What the MoE block's thread-count invariance costs (issue 28, item 2). layers/moe_mlp.cpp
// never hands oneDNN more than one thread (its GEMM split over threads changes the bits
// below AVX-512) and runs the experts' GEMMs side by side instead, one expert per thread.
// This measures that schedule against the unrestricted one, in the same run: the same
// GEMMs (per expert, over its routed rows: gate and up x.W^T, down, and backward's dx and
// dW of each, as moe_forward / moe_backward call them) one expert after another, each
// GEMM on all threads. Both run the same MatmulContext code; only the schedule differs.
//
//   moe_gemm_bench [threads] [reps]     threads default: all cores (or LT_THREADS)
//
// Routing: every token picks top_k distinct experts uniformly at random (a fixed seed), so
// the rows per expert vary as a balanced router's do. Shapes: the 102M qwen3_moe of
// bench/train_step_bench.py at its batch (few experts, many rows each), and one layer of
// the qwen3-30b-a3b preset at 512 tokens (many experts, few rows each). A mixtral-8x7b
// layer's weights and gradients alone take 11 GB, past what this bench should ask for. Prints medians,
// whether each schedule's bits equal its own 1-thread bits, and one RESULT line per case:
//   RESULT moe_gemm case=... precision=... threads=... ratio=<unrestricted / ours time>
// (ratio > 1: ours is faster).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/measure.h"
#include "core/threads.h"
#include "kernels/cpu/matmul.h"

using namespace lt;

namespace {

struct Case {
  const char* name;
  int64_t tokens, hidden, experts, top_k, intermediate;
};

double seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

uint32_t next(uint32_t& seed) { return seed = seed * 1664525u + 1013904223u; }

void fill(float* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = float(next(seed) >> 8) / float(1 << 24) - 0.5f;
}

// Rows per expert when each token picks top_k distinct experts uniformly.
std::vector<int64_t> route(const Case& c) {
  std::vector<int64_t> rows(size_t(c.experts), 0);
  uint32_t seed = 7;
  std::vector<int64_t> pick;
  for (int64_t t = 0; t < c.tokens; ++t) {
    pick.clear();
    while (int64_t(pick.size()) < c.top_k) {
      const int64_t e = int64_t(next(seed) >> 8) % c.experts;
      if (std::find(pick.begin(), pick.end(), e) == pick.end()) pick.push_back(e);
    }
    for (int64_t e : pick) ++rows[size_t(e)];
  }
  return rows;
}

// The block's buffers, grouped by expert as moe_mlp.cpp groups them.
struct Buffers {
  std::vector<int64_t> rows, offset;  // rows of expert e: [offset[e], offset[e] + rows[e])
  AlignedBuffer<float> x, gate_up, down, gate, up, act, y, dy, dact, dgate, dup, dx, g_gate_up, g_down;
  Buffers(const Case& c) : rows(route(c)), offset(rows.size() + 1, 0) {
    for (size_t e = 0; e < rows.size(); ++e) offset[e + 1] = offset[e] + rows[e];
    const size_t R = size_t(offset.back()), C = size_t(c.hidden), I = size_t(c.intermediate),
                 E = size_t(c.experts);
    for (auto* b : {&x, &y, &dy, &dx}) *b = AlignedBuffer<float>(R * C);
    for (auto* b : {&gate, &up, &act, &dact, &dgate, &dup}) *b = AlignedBuffer<float>(R * I);
    gate_up = AlignedBuffer<float>(E * 2 * I * C);
    g_gate_up = AlignedBuffer<float>(E * 2 * I * C);
    down = AlignedBuffer<float>(E * C * I);
    g_down = AlignedBuffer<float>(E * C * I);
    fill(x.data(), x.size(), 1);
    fill(dy.data(), dy.size(), 2);
    fill(gate_up.data(), gate_up.size(), 3);
    fill(down.data(), down.size(), 4);
    // act and the upstream gradients into gate and up stand for the SwiGLU between the
    // GEMMs (not a GEMM: identical in both schedules, so left out of the timing).
    fill(act.data(), act.size(), 5);
    fill(dgate.data(), dgate.size(), 6);
    fill(dup.data(), dup.size(), 7);
  }
};

// Expert e's nine GEMMs of one forward and backward, in moe_mlp.cpp's calls.
void expert_gemms(MatmulContext& ctx, Buffers& b, const Case& c, int64_t e, Precision p) {
  const int64_t m = b.rows[size_t(e)], r0 = b.offset[size_t(e)], C = c.hidden, I = c.intermediate;
  if (m == 0) return;
  const float* wg = b.gate_up.data() + e * 2 * I * C;
  const float* wu = wg + I * C;
  const float* wd = b.down.data() + e * C * I;
  float* gg = b.g_gate_up.data() + e * 2 * I * C;
  float* gu = gg + I * C;
  float* gd = b.g_down.data() + e * C * I;
  const float* x = b.x.data() + r0 * C;
  const float* dy = b.dy.data() + r0 * C;
  float* dx = b.dx.data() + r0 * C;
  auto op = [](const float* f) { return MatmulOperand{f, nullptr}; };
  ctx.run(b.gate.data() + r0 * I, op(x), false, op(wg), true, m, I, C, false, p);
  ctx.run(b.up.data() + r0 * I, op(x), false, op(wu), true, m, I, C, false, p);
  ctx.run(b.y.data() + r0 * C, op(b.act.data() + r0 * I), false, op(wd), true, m, C, I, false, p);
  ctx.run(b.dact.data() + r0 * I, op(dy), false, op(wd), false, m, I, C, false, p);
  ctx.run(gd, op(dy), true, op(b.act.data() + r0 * I), false, C, I, m, true, p);
  ctx.run(dx, op(b.dgate.data() + r0 * I), false, op(wg), false, m, C, I, false, p);
  ctx.run(gg, op(b.dgate.data() + r0 * I), true, op(x), false, I, C, m, true, p);
  ctx.run(dx, op(b.dup.data() + r0 * I), false, op(wu), false, m, C, I, true, p);
  ctx.run(gu, op(b.dup.data() + r0 * I), true, op(x), false, I, C, m, true, p);
}

// Ours: one expert per thread, each GEMM single-threaded on that thread's context.
void ours(std::vector<std::unique_ptr<MatmulContext>>& ctx, Buffers& b, const Case& c, Precision p) {
  const int threads = int(std::min<int64_t>(num_threads(), c.experts));
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t e = 0; e < c.experts; ++e) {
    const ScopedNumThreads one(1);
    expert_gemms(*ctx[size_t(omp_get_thread_num())], b, c, e, p);
  }
}

// Unrestricted: expert after expert, every GEMM on all threads.
void unrestricted(MatmulContext& ctx, Buffers& b, const Case& c, Precision p) {
  for (int64_t e = 0; e < c.experts; ++e) expert_gemms(ctx, b, c, e, p);
}

// The outputs one run writes (gradients zeroed first: backward accumulates into them).
std::vector<float> outputs(Buffers& b, const std::function<void()>& run) {
  std::memset(b.g_gate_up.data(), 0, b.g_gate_up.size() * sizeof(float));
  std::memset(b.g_down.data(), 0, b.g_down.size() * sizeof(float));
  run();
  std::vector<float> out;
  for (auto* t : {&b.y, &b.dx, &b.g_gate_up, &b.g_down}) out.insert(out.end(), t->data(), t->data() + t->size());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const char* env = std::getenv("LT_THREADS");
  const int threads = set_num_threads(argc > 1 ? std::atoi(argv[1]) : env ? std::atoi(env) : 0);
  const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string isa(isa_name(active_isa()));
  std::printf("moe_gemm_bench: %d threads, isa %s, median of %d reps, forward + backward expert GEMMs\n", threads,
              isa.c_str(), reps);
  const Case cases[] = {
      {"train_step_bench_qwen3_moe", 2048, 512, 8, 2, 640},  // 4 x 512 tokens
      {"qwen3-30b-a3b_layer", 512, 2048, 128, 8, 768},
  };
  std::vector<std::unique_ptr<MatmulContext>> per_thread;
  for (int i = 0; i < threads; ++i) per_thread.push_back(std::make_unique<MatmulContext>());
  MatmulContext shared;
  for (const Case& c : cases) {
    Buffers b(c);
    const auto [least, most] = std::minmax_element(b.rows.begin(), b.rows.end());
    const double gflop = 2.0 * 9 * double(b.offset.back()) * double(c.hidden) * double(c.intermediate) * 1e-9;
    std::printf("%s: %ld tokens, C=%ld I=%ld, %ld experts, top %ld: %ld..%ld rows per expert, %.1f GFLOP\n", c.name,
                long(c.tokens), long(c.hidden), long(c.intermediate), long(c.experts), long(c.top_k), long(*least),
                long(*most), gflop);
    for (Precision p : {Precision::F32, Precision::BF16}) {
      const char* pname = p == Precision::F32 ? "fp32" : "bf16";
      auto run_ours = [&] { ours(per_thread, b, c, p); };
      auto run_unrestricted = [&] { unrestricted(shared, b, c, p); };
      // Bits at 1 thread, then at all: warms up (primitives cached) and checks invariance.
      std::vector<float> ours1, unr1;
      {
        const ScopedNumThreads one(1);
        ours1 = outputs(b, run_ours);
        unr1 = outputs(b, run_unrestricted);
      }
      const bool ours_invariant = outputs(b, run_ours) == ours1;
      const bool unr_invariant = outputs(b, run_unrestricted) == unr1;
      std::vector<double> t_ours, t_unr;
      for (int r = 0; r < reps; ++r) {  // interleaved, so drift hits both alike
        t_ours.push_back(seconds(run_ours));
        t_unr.push_back(seconds(run_unrestricted));
      }
      const double mo = median(t_ours), mu = median(t_unr);
      std::printf("  %s: ours %.1f ms (%.1f GFLOP/s, bits as at 1 thread: %s), unrestricted %.1f ms (%.1f GFLOP/s, "
                  "bits as at 1 thread: %s)\n",
                  pname, mo * 1e3, gflop / mo, ours_invariant ? "yes" : "NO", mu * 1e3, gflop / mu,
                  unr_invariant ? "yes" : "no");
      std::printf("RESULT moe_gemm case=%s precision=%s threads=%d isa=%s ratio=%.3f ours_invariant=%s "
                  "unrestricted_invariant=%s\n",
                  c.name, pname, threads, isa.c_str(), mu / mo, ours_invariant ? "true" : "false",
                  unr_invariant ? "true" : "false");
    }
  }
  return 0;
}
