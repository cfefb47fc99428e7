// Optimizer step throughput: our fused 8-bit AdamW, our fp32 AdamW, and a STREAM-like triad
// on the same threads. Prints one line per measurement ("<name> <seconds> <params> <bytes>"),
// and "info cpu <summary>" / "info kernels <name> <variant>" saying which kernels ran (LT_CPU
// caps them); bench/optimizer_bench.py runs this beside the Python peers, interleaved, and
// reports.
//
//   optimizer_bench [--params N] [--tensors T] [--threads K] [--reps R] [--only NAME]
//                   [--kernel scalar|avx2|avx512|avx512-novbmi]
//
// Each step includes what clipping costs us: clip_decision() on the caller's summed squared
// norm (summed while gradients are produced, so no pass here) and the clip factor inside
// the fused update. Bytes per parameter count every stream read or written once.
#include <omp.h>
#include <xmmintrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/threads.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int64_t params = int64_t{1} << 25;
  int tensors = 8;
  int threads = 0;
  int reps = 5;
  std::string only;
  lt::AdamWKernel kernel = lt::AdamWKernel::Auto;  // --kernel: a variant forced (diagnosis)
};

struct Model {
  std::vector<lt::AlignedBuffer<float>> p, g;
  std::vector<lt::AlignedBuffer<lt::bf16>> g16, out;
};

Model make_model(const Options& o, bool bf16_grad) {
  Model m;
  const int64_t per = o.params / o.tensors;
  for (int t = 0; t < o.tensors; ++t) {
    m.p.emplace_back(per);
    m.out.emplace_back(per);
    if (bf16_grad) m.g16.emplace_back(per); else m.g.emplace_back(per);
    float* p = m.p.back().data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < per; ++i) {
      p[i] = 0.01f * float((i * 7919 + t) % 2001 - 1000) / 1000.f;
      const float gi = 1e-3f * float((i * 104729 + 3 * t) % 2001 - 1000) / 1000.f;
      if (bf16_grad) m.g16.back()[i] = lt::f32_to_bf16(gi); else m.g.back()[i] = gi;
    }
  }
  return m;
}

void bench_adamw(const Options& o, const char* name, bool eight_bit, bool bf16_grad, bool write_copy) {
  lt::AdamWConfig cfg;
  cfg.eight_bit = eight_bit;
  cfg.num_threads = o.threads;
  cfg.kernel = o.kernel;
  lt::AdamW opt(cfg);
  Model m = make_model(o, bf16_grad);
  const int64_t per = o.params / o.tensors;
  for (int t = 0; t < o.tensors; ++t) opt.add_tensor("w" + std::to_string(t), per);
  std::printf("info kernels %s %s\n", name, opt.kernel_name());
  const double gbytes = bf16_grad ? 2 : 4;
  const double state = eight_bit ? 4.0 + 16.0 / cfg.block_size : 16.0;  // read + write m, v
  const double bytes_per_param = 8 + gbytes + state + (write_copy ? 2 : 0);
  const double sum_sq = 1e-6 * double(o.params) / 3.0;  // what backward would have summed
  for (int r = -1; r < o.reps; ++r) {  // r = -1: warm-up (page faults, caches)
    const auto t0 = Clock::now();
    const lt::ClipDecision d = lt::clip_decision(sum_sq, 1.0);
    int64_t skipped = 0;
    for (int t = 0; t < o.tensors; ++t) {
      lt::bf16* out = write_copy ? m.out[t].data() : nullptr;
      skipped += (bf16_grad ? opt.step_tensor(t, m.p[t].data(), m.g16[t].data(), out, 1e-5f, d.clip_factor, r + 2)
                            : opt.step_tensor(t, m.p[t].data(), m.g[t].data(), out, 1e-5f, d.clip_factor, r + 2))
                     .skipped_blocks;
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (skipped) std::fprintf(stderr, "optimizer_bench: %lld blocks skipped as non-finite\n", (long long)skipped);
    if (r >= 0) std::printf("%s %.6f %lld %.0f\n", name, s, (long long)(per * o.tensors), bytes_per_param * per * o.tensors);
  }
  std::printf("state_bytes_per_param %s %.4f\n", name, double(opt.state_bytes()) / double(per * o.tensors));
  std::fflush(stdout);
}

// a[i] = b[i] + s * c[i] over three fp32 arrays of the optimizer's size, 12 bytes per
// element counted as STREAM counts them (reads + writes once). Two forms:
//  - "triad": the stores are non-temporal (as STREAM is built for its best figure), so the
//    counted bytes are the bytes that move and the figure is the attainable bandwidth, the
//    denominator of ours8_bw_frac. With ordinary stores each line of a is first read
//    (write-allocate), 16 bytes move per 12 counted, and the figure understates what the
//    memory delivers: measured on a 2-vCPU EPYC, ~24 GB/s counted on one thread while
//    ours32 (whose writes all go to lines it has read, so nothing moves uncounted) moved
//    ~44 GB/s.
//  - "triad_cached": the ordinary-store form, printed for comparison.
void bench_triad(const Options& o) {
  const int64_t n = o.params / 4 * 4;  // whole 4-float vectors (16-byte aligned buffers)
  lt::AlignedBuffer<float> a(n), b(n), c(n);
  float* pa = a.data();
  float* pb = b.data();
  float* pc = c.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) pb[i] = 1.f, pc[i] = 2.f, pa[i] = 0.f;
  for (bool streaming : {true, false}) {
    for (int r = -1; r < o.reps; ++r) {
      const auto t0 = Clock::now();
      if (streaming) {
#pragma omp parallel
        {
#pragma omp for schedule(static)
          for (int64_t i = 0; i < n; i += 4)
            _mm_stream_ps(pa + i, _mm_add_ps(_mm_load_ps(pb + i), _mm_mul_ps(_mm_set1_ps(0.5f), _mm_load_ps(pc + i))));
          _mm_sfence();  // this thread's streaming stores are done before the region ends
        }
      } else {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + 0.5f * pc[i];
      }
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (r >= 0) std::printf("%s %.6f %lld %.0f\n", streaming ? "triad" : "triad_cached", s, (long long)n, 12.0 * n);
    }
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--params") o.params = std::atoll(v);
    else if (k == "--tensors") o.tensors = std::atoi(v);
    else if (k == "--threads") o.threads = std::atoi(v);
    else if (k == "--reps") o.reps = std::atoi(v);
    else if (k == "--only") o.only = v;
    else if (k == "--kernel") {
      // The AdamW kernel variants by name, e.g. the AVX-512 table without VBMI and BF16
      // on a CPU that has them; a variant this CPU cannot run fails in AdamW's constructor.
      const std::string_view n = v;
      if (n == "scalar") o.kernel = lt::AdamWKernel::Scalar;
      else if (n == "avx2") o.kernel = lt::AdamWKernel::Avx2;
      else if (n == "avx512") o.kernel = lt::AdamWKernel::Avx512;
      else if (n == "avx512-novbmi") o.kernel = lt::AdamWKernel::Avx512NoVbmi;
      else {
        std::fprintf(stderr, "optimizer_bench: --kernel %s: use scalar, avx2, avx512 or avx512-novbmi\n", v);
        return 2;
      }
    } else {
      std::fprintf(stderr, "optimizer_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  o.threads = lt::set_num_threads(o.threads);
  std::printf("info %s\n", lt::cpu_summary().c_str());  // "cpu ... kernels ..."
  auto want = [&](const char* n) { return o.only.empty() || o.only == n; };
  if (want("ours8")) bench_adamw(o, "ours8", true, false, true);
  if (want("ours8_bf16g")) bench_adamw(o, "ours8_bf16g", true, true, true);
  if (want("ours32")) bench_adamw(o, "ours32", false, false, false);
  if (want("triad")) bench_triad(o);
  // Variants for diagnosis only (run with --only).
  if (o.only == "ours8_nocopy") bench_adamw(o, "ours8_nocopy", true, false, false);
  if (o.only == "ours32_copy") bench_adamw(o, "ours32_copy", false, false, true);
  return 0;
}
