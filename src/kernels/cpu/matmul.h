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
// "native bf16 GEMM (impl; reason)" or "bf16 storage, fp32 GEMM (impl; reason)", or per
// layout where the layouts differ.
std::string matmul_bf16_path();

// How Precision::BF16 matmuls run at the avx512 level and above, where oneDNN has bf16
// kernels: Native, oneDNN's bf16 GEMM; Widened, the bf16 operands widened to fp32 and the
// fp32 GEMM (the same exact products, another summation order). Below avx512 it is always
// Widened. Which is faster depends on the CPU: on an Intel AVX-512 CPU without AMX,
// oneDNN's bf16 GEMM ran at about 2/3 of its own fp32 GEMM (issue 31's measurements); on
// an AMD EPYC with AVX512-BF16 (Zen 4) at twice it (2048^3: 424 against 205 GFLOP/s). Hence
// measured per machine and layout (Bf16GemmMeasured), with a rule where nothing was.
enum class Bf16GemmPath { Native, Widened };
struct Bf16GemmChoice {
  Bf16GemmPath path;
  std::string reason;  // "LT_BF16_GEMM=widened", "the rule, unmeasured: no AMX-BF16 on this CPU", ...
};
// The three layouts of a linear layer's matmuls, the step's shape classes (the head's
// products take the same three): forward x.W^T (trans_b), the input gradient dy.W, the
// weight gradient dy^T.x (trans_a). Both transposed counts as forward.
enum class MatmulLayout { Forward, InputGrad, WeightGrad };
constexpr int kMatmulLayouts = 3;
MatmulLayout matmul_layout(bool trans_a, bool trans_b);
const char* matmul_layout_name(MatmulLayout l);  // "x.W^T", "dy.W", "dy^T.x"

// Per layout, the faster path as `lazytrain profile` measured it on this CPU (the trainer
// applies a profile's measurement, or the one its checkpoint recorded, so that a run and
// its resume compute alike; a timing at start-up could differ between them).
struct Bf16GemmMeasured {
  Bf16GemmPath path[kMatmulLayouts];
  std::string source;  // for the startup line: "measured by lazytrain profile (profiles/local.json)"
};
// The process's choice for a layout, fixed per machine so that results are reproducible
// run to run: LT_BF16_GEMM (native, widened) when set, else the measured path when one is
// set (a profile's, or a bf16 run's at startup: train/bf16_gemm_paths.h), else Native
// exactly where the CPU has AMX-BF16 (the rule: without AMX an Intel Cooper Lake runs
// oneDNN's bf16 GEMM slower than its fp32 one, an AMD Zen 4 faster).
Bf16GemmChoice bf16_gemm_choice(MatmulLayout layout = MatmulLayout::Forward);
// Sets (nullopt: clears) the measured paths. Cached primitives key on the path.
void set_measured_bf16_gemm_paths(const std::optional<Bf16GemmMeasured>& measured);
// Overrides the choice for every layout in this process (tests, the profile's
// measurement); nullopt goes back to bf16_gemm_choice's order. A change takes effect at
// the next call.
void set_bf16_gemm_path(std::optional<Bf16GemmPath> path);
// Whether a Precision::BF16 matmul of this layout now widens its operands to fp32 (each
// fp32 operand is then rounded into a copy per call, unless it is bf16_exact).
bool bf16_gemm_widens(MatmulLayout layout);

// One matmul operand: fp32 data and/or its bf16 copy. Under Precision::BF16 the bf16 copy
// is used when present, else the fp32 data is rounded into the context's scratch; under
// Precision::F32 only f32 is read (and must be present). bf16_exact says that f32 holds
// bf16 values already (rounded once by the caller, for several GEMMs): the widened path
// then reads it in place instead of rounding a copy, and the native path's conversion is
// exact. Set it only where that is true: the widened path would compute on unrounded data.
struct MatmulOperand {
  const float* f32 = nullptr;
  const bf16* b16 = nullptr;
  bool bf16_exact = false;
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
