// The fused, chunked head + cross-entropy (forward and backward) at a GPT-2-like shape,
// beside its unfused peer: the same three matmuls on the whole batch's logits at once
// (T x V floats materialized; softmax not counted), which is what the chunking must not
// cost much more than. Also a small logits budget that forces vocabulary chunks (a 4th
// matmul: the logits are recomputed for the gradient), and a mostly-masked batch.
//
//   cross_entropy_bench [threads] [reps]
// The softmax loops run at the ISA level in force: LT_CPU=scalar|avx2|avx512 compares them
// (oneDNN gets the same cap, so the matmuls change too).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "core/measure.h"
#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/threads.h"
#include "kernels/cpu/cross_entropy.h"

using namespace lt;

namespace {
double seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

int main(int argc, char** argv) {
  const char* env = std::getenv("LT_THREADS");
  const int threads = set_num_threads(argc > 1 ? std::atoi(argv[1]) : env ? std::atoi(env) : 0);
  const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  const int64_t T = 2048, C = 768, V = 32000;
  std::printf("cross_entropy_bench: T=%ld C=%ld V=%ld, %d threads, median of %d reps\n",
              long(T), long(C), long(V), threads, reps);
  std::printf("  %s\n", cpu_summary().c_str());
  AlignedBuffer<float> x(size_t(T * C)), w(size_t(V * C)), dx(size_t(T * C)), dw(size_t(V * C));
  AlignedBuffer<float> logits(size_t(T * V));
  AlignedBuffer<bf16> wb(size_t(V * C));
  std::vector<int32_t> targets(static_cast<size_t>(T));
  uint32_t seed = 1;
  auto rnd = [&] {
    seed = seed * 1664525u + 1013904223u;
    return float(seed >> 8) / float(1 << 24) - 0.5f;
  };
  for (size_t i = 0; i < x.size(); ++i) x[i] = rnd();
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f * rnd();
  for (size_t t = 0; t < targets.size(); ++t) targets[t] = int32_t((t * 7919) % size_t(V));
  convert_f32_to_bf16(wb.data(), w.data(), w.size());
  const double gflop = 3 * 2.0 * double(T) * double(V) * double(C) * 1e-9;

  for (Precision p : {Precision::F32, Precision::BF16}) {
    const char* pn = p == Precision::BF16 ? "bf16" : "f32 ";
    const bf16* w16 = p == Precision::BF16 ? wb.data() : nullptr;
    auto peer = [&] {  // unfused: whole-batch logits, then the two gradient matmuls
      const MatmulOperand wo{w.data(), w16}, xo{x.data(), nullptr}, lo{logits.data(), nullptr};
      matmul_ex(logits.data(), xo, false, wo, true, T, V, C, false, p);
      matmul_ex(dx.data(), lo, false, wo, false, T, C, V, false, p);
      matmul_ex(dw.data(), lo, true, xo, false, V, C, T, true, p);
    };
    for (int64_t budget : {int64_t(32) << 20, int64_t(4) << 20}) {
      auto ours = [&] {
        head_cross_entropy(dx.data(), dw.data(), x.data(), w.data(), w16, targets.data(), T, C,
                           V, 1.0f / float(T), p, CrossEntropyOptions{budget});
      };
      ours();
      peer();
      std::vector<double> to, tp;
      for (int r = 0; r < reps; ++r) {
        to.push_back(seconds(ours));
        tp.push_back(seconds(peer));
      }
      const auto ch = cross_entropy_chunks(T, V, CrossEntropyOptions{budget}, p);
      std::printf("  %s budget %3ld MiB (chunks %ld tok x %ld vocab): fused %.3f s (%.0f GFLOP/s "
                  "of 3 matmuls), unfused matmuls %.3f s (%ld MiB logits): ratio %.2fx\n",
                  pn, long(budget >> 20), long(ch.token_chunk), long(ch.vocab_chunk), median(to),
                  gflop / median(to), median(tp), long(T * V * 4 >> 20), median(to) / median(tp));
    }
  }
  // SFT-style masking: the first 3/4 of each 512-token sample is prompt (ignored). The
  // masked tokens are skipped, so the time should drop to about a quarter.
  {
    std::vector<int32_t> masked = targets;
    for (size_t t = 0; t < masked.size(); ++t)
      if (t % 512 < 384) masked[t] = kIgnoreIndex;
    auto run = [&](const std::vector<int32_t>& tg) {
      head_cross_entropy(dx.data(), dw.data(), x.data(), w.data(), wb.data(), tg.data(), T, C, V,
                         1.0f / float(T), Precision::BF16, {});
    };
    run(masked);
    std::vector<double> tm, tf;
    for (int r = 0; r < reps; ++r) {
      tm.push_back(seconds([&] { run(masked); }));
      tf.push_back(seconds([&] { run(targets); }));
    }
    std::printf("  bf16 3/4 of targets ignored: %.3f s vs %.3f s unmasked (%.2fx)\n",
                median(tm), median(tf), median(tm) / median(tf));
  }
  return 0;
}
