// The fused head's softmax loops (contracts in cross_entropy_kernels.h), compiled once per
// ISA level (core/isa_target.h). exp is vec::exp_approx, branch-free plain code, so each
// loop vectorizes to the level's width without libm calls; the per-row log of the
// logsumexp is one std::log per token (cross_entropy.cpp) and needs no vector form.
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/cross_entropy_kernels.h"
#include "kernels/cpu/vec_math.h"

#include "core/isa_target.h"

namespace lt::LT_ISA_NS {

namespace {

constexpr int64_t kParallelMin = 1 << 15;  // elements; below this one thread is faster

void fold_chunk_stats(float* m, float* s, float* tlogit, const float* logits, const int32_t* tgt,
                      int64_t n, int64_t v0, int64_t nv, bool first) {
#pragma omp parallel for schedule(static) if (n * nv >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    if (tgt[i] == kIgnoreIndex) continue;
    const float* l = logits + i * nv;
    float cm = -INFINITY;
#pragma omp simd reduction(max : cm)
    for (int64_t v = 0; v < nv; ++v) cm = cm < l[v] ? l[v] : cm;  // std::max
    const float mnew = first || cm > m[i] ? cm : m[i];
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < nv; ++v) sum += vec::exp_approx(l[v] - mnew);
    s[i] = first ? sum : s[i] * vec::exp_approx(m[i] - mnew) + sum;
    m[i] = mnew;
    if (tgt[i] >= v0 && tgt[i] < v0 + nv) tlogit[i] = l[tgt[i] - v0];
  }
}

// grad_scale * (softmax - onehot), the target's column (at most one per row and chunk)
// found by comparing each lane's column with it, inside the vector loop.
void logits_to_grad(float* logits, bf16* g16, const float* lse, const int32_t* tgt, int64_t n,
                    int64_t v0, int64_t nv, float grad_scale, bool round_in_place) {
#pragma omp parallel for schedule(static) if (n * nv >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    float* l = logits + i * nv;
    const bool ignored = tgt[i] == kIgnoreIndex;
    const float li = lse[i];
    const int64_t hit = ignored ? -1 : tgt[i] - v0;  // the target's column, if in this chunk
    if (g16) {
      bf16* o = g16 + i * nv;
      if (ignored) {
#pragma omp simd
        for (int64_t v = 0; v < nv; ++v) o[v].bits = 0;
        continue;
      }
#pragma omp simd
      for (int64_t v = 0; v < nv; ++v)
        o[v].bits = vec::to_bf16_bits(grad_scale * vec::exp_approx(l[v] - li) - (v == hit ? grad_scale : 0.0f));
      continue;
    }
    if (ignored) {
#pragma omp simd
      for (int64_t v = 0; v < nv; ++v) l[v] = 0.0f;
      continue;
    }
    if (round_in_place) {
#pragma omp simd
      for (int64_t v = 0; v < nv; ++v)
        l[v] = lt::bf16_to_f32(bf16{vec::to_bf16_bits(grad_scale * vec::exp_approx(l[v] - li) -
                                                  (v == hit ? grad_scale : 0.0f))});
      continue;
    }
#pragma omp simd
    for (int64_t v = 0; v < nv; ++v)
      l[v] = grad_scale * vec::exp_approx(l[v] - li) - (v == hit ? grad_scale : 0.0f);
  }
}

void gather_rows_bf16(bf16* dst, const float* x, const int64_t* rows, int64_t n, int64_t C) {
#pragma omp parallel for schedule(static) if (n * C >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float* src = x + rows[i] * C;
    bf16* d = dst + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) d[c].bits = vec::to_bf16_bits(src[c]);
  }
}

}  // namespace

extern const CrossEntropyKernels kCrossEntropyKernels{fold_chunk_stats, logits_to_grad,
                                                      gather_rows_bf16};

}  // namespace lt::LT_ISA_NS

#include "core/isa_target_end.h"
