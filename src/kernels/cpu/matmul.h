// Dense matmul through oneDNN (fast path) and a plain loop (fp32 reference).
// Row-major throughout. Overwrites C unless `accumulate`, which adds the finished product
// to C (one rounding per element, as ref::matmul; the same bits as computing the product
// into zeroed memory and adding it).
//
//   C[M,N] (=|+=) op(A) · op(B)
//   op(A) = A [M,K], or with trans_a A is stored as [K,M]
//   op(B) = B [K,N], or with trans_b B is stored as [N,K]
//
// Precision::BF16 rounds A and B to bf16 (nearest even) and accumulates in fp32; on a
// CPU with AMX, oneDNN runs its avx512_core_amx_bf16 kernel. Elsewhere (no AMX, below
// AVX-512, or kernels capped below the avx512 level: Bf16GemmPath below), the bf16
// operands are widened to fp32 and the fp32 GEMM runs: the same exact products, another
// summation order. Precision::F32 is fp32 all the way. Primitives are created once per shape and
// cached (creation costs ~ms).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/dtype.h"

namespace lt {

enum class Precision { F32, BF16 };

void matmul(float* c, const float* a, bool trans_a, const float* b, bool trans_b, int64_t M,
            int64_t N, int64_t K, bool accumulate, Precision p);
// Inputs already in bf16 (a weight's bf16 compute copy, say): no conversion pass.
void matmul_bf16(float* c, const bf16* a, bool trans_a, const bf16* b, bool trans_b, int64_t M,
                 int64_t N, int64_t K, bool accumulate);

// The oneDNN implementation name chosen for a shape, e.g. "brg:avx512_core_amx_bf16",
// so tests and benchmarks can check which kernel runs.
std::string matmul_impl_name(int64_t M, int64_t N, int64_t K, Precision p);
// Which path Precision::BF16 matmuls take now and why, for startup lines:
// "native bf16 GEMM (impl; reason)" or "bf16 storage, fp32 GEMM (impl; reason)".
std::string matmul_bf16_path();

// How Precision::BF16 matmuls run at the avx512 level and above, where oneDNN has bf16
// kernels: Native, oneDNN's bf16 GEMM; Widened, the bf16 operands widened to fp32 and the
// fp32 GEMM (the same exact products, another summation order). Below avx512 it is always
// Widened. Native pays only with AMX: on an AVX-512 CPU without it (AVX512-BF16 or not),
// oneDNN's bf16 GEMM runs at about 2/3 of its own fp32 GEMM (issue 31's measurements), so
// a bf16 step there would be slower than an fp32 one.
enum class Bf16GemmPath { Native, Widened };
struct Bf16GemmChoice {
  Bf16GemmPath path;
  std::string reason;  // "LT_BF16_GEMM=widened", "no AMX-BF16 on this CPU", ...
};
// The process's choice, fixed per machine so that results are reproducible run to run
// (a choice timed at start-up could differ between a run and its resume): LT_BF16_GEMM
// (native, widened) when set, else Native exactly where the CPU has AMX-BF16.
// `lazytrain profile` measures both paths and says when they disagree with this.
Bf16GemmChoice bf16_gemm_choice();
// Overrides the choice for this process (tests, the profile's measurement); nullopt goes
// back to bf16_gemm_choice's rule. Cached primitives key on the path: a change takes
// effect at the next call.
void set_bf16_gemm_path(std::optional<Bf16GemmPath> path);

// One matmul operand: fp32 data and/or its bf16 copy. Under Precision::BF16 the bf16 copy
// is used when present, else the fp32 data is rounded into the context's scratch; under
// Precision::F32 only f32 is read (and must be present).
struct MatmulOperand {
  const float* f32 = nullptr;
  const bf16* b16 = nullptr;
};

// Owns what the oneDNN path needs: engine, stream, the primitives cached by (shape,
// transposes, precision, bias, A's leading dimension), and the bf16 and product scratch. One context must not be
// used by two threads at once. The free functions above share one process-wide
// context, whose mutex serializes callers (see matmul.cpp for why that one global exists).
class MatmulContext {
 public:
  MatmulContext();
  ~MatmulContext();
  MatmulContext(const MatmulContext&) = delete;
  MatmulContext& operator=(const MatmulContext&) = delete;

  // C[M,N] (=|+=) op(A) op(B) (+ bias[N] if bias, added once even when accumulating).
  void run(float* c, MatmulOperand a, bool trans_a, MatmulOperand b, bool trans_b, int64_t M,
           int64_t N, int64_t K, bool accumulate, Precision p, const float* bias = nullptr);
  std::string impl_name(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b,
                        Precision p);
  size_t cached_primitives() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Runs one matmul on the process-default context under its mutex (the form the free
// functions use), with mixed fp32/bf16 operands and an optional fused bias.
void matmul_ex(float* c, MatmulOperand a, bool trans_a, MatmulOperand b, bool trans_b, int64_t M,
               int64_t N, int64_t K, bool accumulate, Precision p, const float* bias = nullptr);

namespace ref {
template <typename T>
void matmul(T* c, const T* a, bool trans_a, const T* b, bool trans_b, int64_t M, int64_t N,
            int64_t K, bool accumulate) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      T acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += (trans_a ? a[k * M + i] : a[i * K + k]) * (trans_b ? b[j * K + k] : b[k * N + j]);
      c[i * N + j] = accumulate ? c[i * N + j] + acc : acc;
    }
}
}  // namespace ref

}  // namespace lt
