// The fused LM head + cross-entropy (contract in cross_entropy.h).
//
// Per token chunk of n tokens:
//   one vocabulary chunk (V fits): logits = x_c · w^T; per row max, sum of exps, lse,
//     loss; then in place dlogits = grad_scale * (softmax - onehot) (0 on ignored rows);
//     dx_c = dlogits · w; dw += dlogits^T · x_c.              3 matmuls
//   several vocabulary chunks: pass 1 runs an online logsumexp over the chunks (running
//     max m and sum s, rescaled by exp(m_old - m_new) when the max grows) and picks the
//     target's logit; pass 2 recomputes each chunk's logits, turns them into dlogits in
//     place, and does dx_c (= on the first chunk, += after) and dw[chunk] +=.  4 matmuls
// The softmax math is fp32 (logits are fp32 whatever the matmul precision); per-row
// losses are summed in double, in token order.
// Work memory: the logits chunk (<= max_logit_bytes), four floats per token of the chunk,
// and, under BF16, the matmul context's bf16 copies of its operands (<= half the logits
// chunk plus the x chunk) and a V*C bf16 copy of w when w_bf16 is not given.
#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <memory>
#include <string>

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "kernels/cpu/vec_math.h"

namespace lt {

namespace {

// Token chunks of at least this many rows (when T has them) before the vocabulary gets
// split: every token chunk re-reads all of w, so small token chunks make the head
// memory-bound; 256 rows also keep oneDNN's blocked kernels busy.
constexpr int64_t kMinTokenChunk = 256;

void check_targets(const int32_t* targets, int64_t T, int64_t V) {
  for (int64_t t = 0; t < T; ++t)
    if (targets[t] != kIgnoreIndex && (targets[t] < 0 || targets[t] >= V))
      throw Error("target " + std::to_string(targets[t]) + " at position " + std::to_string(t) +
                      " is outside the vocabulary [0, " + std::to_string(V) + ") and is not " +
                      std::to_string(kIgnoreIndex),
                  "head_cross_entropy",
                  "check that the data's labels match the model's vocab_size");
}

// Row statistics of one logits chunk, folded into the running (m, s) of an online
// logsumexp. Rows of ignored tokens are skipped.
void fold_chunk_stats(float* m, float* s, float* tlogit, const float* logits, const int32_t* tgt,
                      int64_t n, int64_t v0, int64_t nv, bool first) {
#pragma omp parallel for schedule(static) if (n * nv >= (1 << 15))
  for (int64_t i = 0; i < n; ++i) {
    if (tgt[i] == kIgnoreIndex) continue;
    const float* l = logits + i * nv;
    float cm = -INFINITY;
#pragma omp simd reduction(max : cm)
    for (int64_t v = 0; v < nv; ++v) cm = std::max(cm, l[v]);
    const float mnew = first ? cm : std::max(m[i], cm);
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < nv; ++v) sum += vec::exp_approx(l[v] - mnew);
    s[i] = first ? sum : s[i] * vec::exp_approx(m[i] - mnew) + sum;
    m[i] = mnew;
    if (tgt[i] >= v0 && tgt[i] < v0 + nv) tlogit[i] = l[tgt[i] - v0];
  }
}

// logits chunk -> grad_scale * (softmax - onehot), in place; ignored rows become 0.
void logits_to_grad(float* logits, const float* lse, const int32_t* tgt, int64_t n, int64_t v0,
                    int64_t nv, float grad_scale) {
#pragma omp parallel for schedule(static) if (n * nv >= (1 << 15))
  for (int64_t i = 0; i < n; ++i) {
    float* l = logits + i * nv;
    if (tgt[i] == kIgnoreIndex) {
      std::fill(l, l + nv, 0.0f);
      continue;
    }
    const float li = lse[i];
#pragma omp simd
    for (int64_t v = 0; v < nv; ++v) l[v] = grad_scale * vec::exp_approx(l[v] - li);
    if (tgt[i] >= v0 && tgt[i] < v0 + nv) l[tgt[i] - v0] -= grad_scale;
  }
}

}  // namespace

CrossEntropyChunks cross_entropy_chunks(int64_t T, int64_t V, const CrossEntropyOptions& opt) {
  const int64_t floats = opt.max_logit_bytes / int64_t(sizeof(float));
  if (floats < 1)
    throw Error("max_logit_bytes " + std::to_string(opt.max_logit_bytes) +
                    " cannot hold one logit",
                "CrossEntropyOptions", "give at least 4 bytes (the default is 32 MiB)");
  CrossEntropyChunks ch;
  const int64_t want_tokens = std::max<int64_t>(1, std::min(T, kMinTokenChunk));
  if (floats / want_tokens >= V) {  // whole vocabulary rows fit
    ch.vocab_chunk = V;
    ch.token_chunk = std::max<int64_t>(1, std::min(T, floats / std::max<int64_t>(V, 1)));
  } else {
    ch.token_chunk = std::min(want_tokens, floats);
    ch.vocab_chunk = std::max<int64_t>(1, std::min(V, floats / ch.token_chunk));
  }
  return ch;
}

double head_cross_entropy(float* dx, float* dw, const float* x, const float* w,
                          const bf16* w_bf16, const int32_t* targets, int64_t T, int64_t C,
                          int64_t V, float grad_scale, Precision p,
                          const CrossEntropyOptions& opt) {
  LT_ASSERT(T >= 0 && C > 0 && V > 0, "head_cross_entropy sizes");
  check_targets(targets, T, V);
  const CrossEntropyChunks ch = cross_entropy_chunks(T, V, opt);
  if (T == 0) return 0.0;
  const int64_t tc = ch.token_chunk, vc = ch.vocab_chunk;
  const bool one_vocab_chunk = vc == V;

  // w's bf16 copy: given, or made once here (not per chunk: every token chunk reads all
  // of w, and rounding it each time would cost as much as the matmul).
  AlignedBuffer<bf16> w_round;
  if (p == Precision::BF16 && !w_bf16) {
    w_round.resize(size_t(V * C));
    convert_f32_to_bf16(w_round.data(), w, size_t(V * C));
    w_bf16 = w_round.data();
  }
  auto w_rows = [&](int64_t v0) {
    return MatmulOperand{w + v0 * C, w_bf16 ? w_bf16 + v0 * C : nullptr};
  };

  // Not AlignedBuffer: its zero fill would be a wasted pass over max_logit_bytes.
  auto logits = std::make_unique_for_overwrite<float[]>(size_t(tc * vc));
  const size_t rows = static_cast<size_t>(tc);
  std::vector<float> m(rows), s(rows), tlogit(rows), lse(rows);
  double loss = 0;

  for (int64_t t0 = 0; t0 < T; t0 += tc) {
    const int64_t n = std::min(tc, T - t0);
    const int32_t* tgt = targets + t0;
    const MatmulOperand xc{x + t0 * C, nullptr};
    if (std::all_of(tgt, tgt + n, [](int32_t t) { return t == kIgnoreIndex; })) {
      if (dx) std::fill(dx + t0 * C, dx + (t0 + n) * C, 0.0f);
      continue;
    }
    // Pass 1: logsumexp (and, with one vocabulary chunk, keep the logits for pass 2).
    for (int64_t v0 = 0; v0 < V; v0 += vc) {
      const int64_t nv = std::min(vc, V - v0);
      matmul_ex(logits.get(), xc, false, w_rows(v0), true, n, nv, C, false, p);
      fold_chunk_stats(m.data(), s.data(), tlogit.data(), logits.get(), tgt, n, v0, nv, v0 == 0);
    }
    for (int64_t i = 0; i < n; ++i) {
      if (tgt[i] == kIgnoreIndex) continue;
      lse[size_t(i)] = m[size_t(i)] + std::log(s[size_t(i)]);
      loss += double(lse[size_t(i)] - tlogit[size_t(i)]);
    }
    if (!dx) continue;
    // Pass 2: gradients, a vocabulary chunk at a time.
    for (int64_t v0 = 0; v0 < V; v0 += vc) {
      const int64_t nv = std::min(vc, V - v0);
      if (!one_vocab_chunk)
        matmul_ex(logits.get(), xc, false, w_rows(v0), true, n, nv, C, false, p);
      logits_to_grad(logits.get(), lse.data(), tgt, n, v0, nv, grad_scale);
      const MatmulOperand g{logits.get(), nullptr};
      matmul_ex(dx + t0 * C, g, false, w_rows(v0), false, n, C, nv, v0 > 0, p);
      if (dw) matmul_ex(dw + v0 * C, g, true, xc, false, nv, C, n, true, p);
    }
  }
  return loss;
}

}  // namespace lt
