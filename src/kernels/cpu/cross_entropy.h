// The LM head fused with cross-entropy, chunked so that the logits of the whole batch
// never exist: tokens are taken a chunk at a time and, when the vocabulary is large, the
// vocabulary too (an online logsumexp across vocabulary chunks, then a second pass that
// recomputes each logits chunk for the gradient). At most opt.max_logit_bytes of logits
// are live at once.
//
//   x: [T, C] final hidden states; w: [V, C] head weight (HF lm_head layout)
//   targets: [T], -100 = ignored position
//   returns sum over non-ignored t of (logsumexp_v logits[t,v] - logits[t, targets[t]])
//   if dx != nullptr: the gradient of grad_scale * (that sum):
//     dx [T, C] overwrites; dw [V, C] accumulates (+=)
//   throws lt::Error for a target outside [0, V) other than -100.
// With Precision::BF16 and w_bf16 == nullptr, w is rounded once per call into a V*C bf16
// scratch; pass the weight's bf16 copy to avoid it (w may then be null: only w_bf16 is read).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/matmul.h"

namespace lt {

constexpr int32_t kIgnoreIndex = -100;

struct CrossEntropyOptions {
  int64_t max_logit_bytes = 32ll << 20;
};

double head_cross_entropy(float* dx, float* dw, const float* x, const float* w,
                          const bf16* w_bf16, const int32_t* targets, int64_t T, int64_t C,
                          int64_t V, float grad_scale, Precision p,
                          const CrossEntropyOptions& opt = {});

// The chunk sizes head_cross_entropy uses: token_chunk * vocab_chunk logits, each 4 bytes
// (fp32) plus, under BF16, 2 bytes (its bf16 gradient), within max_logit_bytes;
// vocab_chunk == V when the whole vocabulary of a token chunk fits. Throws lt::Error if
// max_logit_bytes cannot hold one logit.
struct CrossEntropyChunks {
  int64_t token_chunk = 0, vocab_chunk = 0;
};
CrossEntropyChunks cross_entropy_chunks(int64_t T, int64_t V, const CrossEntropyOptions& opt,
                                        Precision p = Precision::F32);

namespace ref {
// Plain reference: one row of logits at a time, no chunking. Same contract as above
// (dx overwrites, dw accumulates, both skipped when dx is null); T is the scalar type.
template <typename T>
double head_cross_entropy(T* dx, T* dw, const T* x, const T* w, const int32_t* targets,
                          int64_t n_tok, int64_t C, int64_t V, T grad_scale) {
  std::vector<T> logits(size_t(V > 0 ? V : 0));
  double loss = 0;
  if (dx)
    for (int64_t i = 0; i < n_tok * C; ++i) dx[i] = 0;
  for (int64_t t = 0; t < n_tok; ++t) {
    const int32_t tgt = targets[t];
    if (tgt == kIgnoreIndex) continue;
    const T* xt = x + t * C;
    T mx = -INFINITY;
    for (int64_t v = 0; v < V; ++v) {
      T s = 0;
      for (int64_t c = 0; c < C; ++c) s += xt[c] * w[v * C + c];
      logits[size_t(v)] = s;
      mx = std::max(mx, s);
    }
    T sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(logits[size_t(v)] - mx);
    const T lse = mx + std::log(sum);
    loss += double(lse - logits[size_t(tgt)]);
    if (!dx) continue;
    for (int64_t v = 0; v < V; ++v) {
      const T g = grad_scale * (std::exp(logits[size_t(v)] - lse) - (v == tgt ? T(1) : T(0)));
      for (int64_t c = 0; c < C; ++c) {
        dx[t * C + c] += g * w[v * C + c];
        if (dw) dw[v * C + c] += g * xt[c];
      }
    }
  }
  return loss;
}
}  // namespace ref

}  // namespace lt
