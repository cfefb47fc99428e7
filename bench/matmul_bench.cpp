// Matmul throughput at transformer shapes: the oneDNN path in fp32 and bf16 (with the
// fp32->bf16 rounding of the inputs counted, and with inputs already bf16), in the three
// layouts a linear layer uses (forward x·W^T, backward dy·W, dy^T·x).
// Peer: the system BLAS's sgemm (whatever libblas.so.3 resolves to: netlib, OpenBLAS or
// BLIS, via dlopen so no build dependency), at the smaller shape, interleaved with ours.
//
//   matmul_bench [threads] [reps]     threads default: all cores (or LT_THREADS)
//
// Prints the median GFLOP/s over reps (this machine is shared and noisy: see
// shared/REFERENCE.md section 5), and the impl oneDNN chose.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "core/measure.h"
#include "core/aligned_buffer.h"
#include "core/threads.h"
#include "kernels/cpu/matmul.h"

using namespace lt;

namespace {

double seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void fill(float* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = float(seed >> 8) / float(1 << 24) - 0.5f;
  }
}

// Fortran sgemm_ from the system BLAS, column-major. Row-major C = A·B^T is computed as
// column-major C^T = B·A^T, i.e. sgemm("T", "N") with the operands swapped.
using SgemmFn = void (*)(const char*, const char*, const int*, const int*, const int*,
                         const float*, const float*, const int*, const float*, const int*,
                         const float*, float*, const int*);

struct Shape {
  const char* what;
  int64_t M, N, K;
  bool ta, tb;
};

}  // namespace

int main(int argc, char** argv) {
  const char* env = std::getenv("LT_THREADS");
  const int threads = set_num_threads(argc > 1 ? std::atoi(argv[1]) : env ? std::atoi(env) : 0);
  const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  std::printf("matmul_bench: %d threads, median of %d reps\n", threads, reps);

  const Shape shapes[] = {
      {"fwd x.W^T   ", 2048, 2048, 768, false, true},
      {"bwd dy.W    ", 2048, 768, 2048, false, false},
      {"bwd dy^T.x  ", 2048, 768, 2048, true, false},
      {"head x.W^T  ", 2048, 32000, 768, false, true},
  };
  MatmulContext ctx;
  for (const Shape& s : shapes) {
    const size_t na = size_t(s.M * s.K), nb = size_t(s.K * s.N), nc = size_t(s.M * s.N);
    AlignedBuffer<float> a(na), b(nb), c(nc);
    AlignedBuffer<bf16> ab(na), bb(nb);
    fill(a.data(), na, 1);
    fill(b.data(), nb, 2);
    convert_f32_to_bf16(ab.data(), a.data(), na);
    convert_f32_to_bf16(bb.data(), b.data(), nb);
    const double gflop = 2.0 * double(s.M) * double(s.N) * double(s.K) * 1e-9;
    struct Variant {
      const char* name;
      Precision p;
      MatmulOperand oa, ob;
    } variants[] = {
        {"f32             ", Precision::F32, {a.data(), nullptr}, {b.data(), nullptr}},
        {"bf16 (+rounding)", Precision::BF16, {a.data(), nullptr}, {b.data(), nullptr}},
        {"bf16 (bf16 in)  ", Precision::BF16, {nullptr, ab.data()}, {nullptr, bb.data()}},
    };
    for (const Variant& v : variants) {
      auto run = [&] { ctx.run(c.data(), v.oa, s.ta, v.ob, s.tb, s.M, s.N, s.K, false, v.p); };
      run();  // creates and caches the primitive
      std::vector<double> t;
      for (int r = 0; r < reps; ++r) t.push_back(seconds(run));
      std::printf("  %s M=%-5ld N=%-6ld K=%-5ld %s %7.1f GFLOP/s  (%s)\n", s.what, long(s.M),
                  long(s.N), long(s.K), v.name, gflop / median(t),
                  ctx.impl_name(s.M, s.N, s.K, s.ta, s.tb, v.p).c_str());
    }
  }

  // Peer, at the first shape, interleaved with our fp32 run.
  void* blas = dlopen("libblas.so.3", RTLD_NOW | RTLD_LOCAL);
  auto sgemm = blas ? reinterpret_cast<SgemmFn>(dlsym(blas, "sgemm_")) : nullptr;
  if (!sgemm) {
    std::printf("peer: no system BLAS sgemm_ (libblas.so.3) to compare with\n");
    return 0;
  }
  Dl_info info{};
  dladdr(reinterpret_cast<void*>(sgemm), &info);
  const Shape& s = shapes[0];
  AlignedBuffer<float> a(size_t(s.M * s.K)), b(size_t(s.N * s.K)), c(size_t(s.M * s.N));
  fill(a.data(), a.size(), 3);
  fill(b.data(), b.size(), 4);
  const double gflop = 2.0 * double(s.M) * double(s.N) * double(s.K) * 1e-9;
  const int M = int(s.M), N = int(s.N), K = int(s.K);
  const float one = 1, zero = 0;
  auto ours = [&] {
    ctx.run(c.data(), {a.data(), nullptr}, false, {b.data(), nullptr}, true, s.M, s.N, s.K,
            false, Precision::F32);
  };
  auto peer = [&] { sgemm("T", "N", &N, &M, &K, &one, b.data(), &K, a.data(), &K, &zero, c.data(), &N); };
  std::vector<double> to, tp;
  const int peer_reps = std::min(reps, 3);  // a reference BLAS can take seconds per call
  for (int r = 0; r < peer_reps; ++r) {
    to.push_back(seconds(ours));
    tp.push_back(seconds(peer));
  }
  std::printf("peer: system BLAS sgemm (%s), fwd x.W^T fp32: ours %.1f GFLOP/s, peer %.1f "
              "GFLOP/s, ratio %.2fx\n",
              info.dli_fname ? info.dli_fname : "libblas.so.3", gflop / median(to),
              gflop / median(tp), median(tp) / median(to));
  dlclose(blas);
  return 0;
}
