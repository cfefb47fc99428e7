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
// Only non-ignored tokens enter the chunks (gathered when the mask makes gaps), so masked
// prompt tokens cost no flops.
// The softmax math is fp32 (logits are fp32 whatever the matmul precision); per-row
// losses are summed in double, in token order. Under BF16 the gradient is written as bf16
// into its own buffer (the backward matmuls' operand), not in place.
// Work memory: the logits chunk and under BF16 its bf16 gradient (together <=
// max_logit_bytes), five words per token of the chunk, the chunk's x rows (bf16, or fp32
// when gathered) and dx rows (when gathered), T positions, and a V*C bf16 copy of w when
// BF16 is asked for and w_bf16 is not given.
// The softmax loops are the ISA level's (cross_entropy_kernels.h, picked once per call).
#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <memory>
#include <string>

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "kernels/cpu/cross_entropy_kernels.h"

namespace lt {

namespace {

// The vocabulary is split only when a token chunk with all of it would hold fewer than
// this many tokens (or T, if smaller). Splitting costs a 4th matmul (+33% flops: the
// logits are recomputed for the gradient); small token chunks cost memory traffic instead,
// since each one re-reads w and reads and writes all of dw (~12 bytes per weight under
// BF16 against 6 n flops per weight for n tokens). At n = 128 that is ~64 flops per byte,
// still compute-bound here (~300 GFLOP/s against ~20 GB/s).
constexpr int64_t kMinTokenChunk = 128;

void check_targets(const int32_t* targets, int64_t T, int64_t V) {
  for (int64_t t = 0; t < T; ++t)
    if (targets[t] != kIgnoreIndex && (targets[t] < 0 || targets[t] >= V))
      throw Error("target " + std::to_string(targets[t]) + " at position " + std::to_string(t) +
                      " is outside the vocabulary [0, " + std::to_string(V) + ") and is not " +
                      std::to_string(kIgnoreIndex),
                  "head_cross_entropy",
                  "check that the data's labels match the model's vocab_size");
}

}  // namespace

CrossEntropyChunks cross_entropy_chunks(int64_t T, int64_t V, const CrossEntropyOptions& opt,
                                        Precision p) {
  // Per logit: its fp32 value, plus under BF16 its bf16 gradient (see logits_to_grad).
  const int64_t bytes_per_logit = p == Precision::BF16 ? 6 : 4;
  const int64_t floats = opt.max_logit_bytes / bytes_per_logit;
  if (floats < 1)
    throw Error("max_logit_bytes " + std::to_string(opt.max_logit_bytes) +
                    " cannot hold one logit",
                "CrossEntropyOptions", "give at least 6 bytes (the default is 32 MiB)");
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
  const CrossEntropyChunks ch = cross_entropy_chunks(T, V, opt, p);
  if (T == 0) return 0.0;
  const int64_t tc = ch.token_chunk, vc = ch.vocab_chunk;
  const bool one_vocab_chunk = vc == V;
  const CrossEntropyKernels& k = LT_ISA_PICK(kCrossEntropyKernels);

  // w's bf16 copy: given, or made once here (not per chunk: every token chunk reads all
  // of w, and rounding it each time would cost as much as the matmul).
  AlignedBuffer<bf16> w_round;
  if (p == Precision::BF16 && !w_bf16) {
    w_round.resize(size_t(V * C));
    convert_f32_to_bf16(w_round.data(), w, size_t(V * C));
    w_bf16 = w_round.data();
  }
  auto w_rows = [&](int64_t v0) {
    return MatmulOperand{w ? w + v0 * C : nullptr, w_bf16 ? w_bf16 + v0 * C : nullptr};
  };

  // Ignored positions (prompt tokens under SFT masking, padding) cost nothing: chunks are
  // made of the valid tokens only, gathered when they are not contiguous. Their dx rows
  // are zero. Chunk sizes still come from T, so work memory does not depend on the mask.
  std::vector<int64_t> valid;
  valid.reserve(size_t(T));
  for (int64_t t = 0; t < T; ++t) {
    if (targets[t] != kIgnoreIndex)
      valid.push_back(t);
    else if (dx)
      std::fill(dx + t * C, dx + (t + 1) * C, 0.0f);
  }
  const int64_t n_valid = int64_t(valid.size());

  // Not AlignedBuffer: its zero fill would be a wasted pass over max_logit_bytes.
  const bool bf = p == Precision::BF16;
  auto logits = std::make_unique_for_overwrite<float[]>(size_t(tc * vc));
  auto g16 = bf ? std::make_unique_for_overwrite<bf16[]>(size_t(tc * vc)) : nullptr;
  // The chunk's x rows (gathered, and under BF16 rounded once for all the matmuls that
  // read them) and its dx rows before they are scattered back.
  auto x16 = bf ? std::make_unique_for_overwrite<bf16[]>(size_t(tc * C)) : nullptr;
  std::unique_ptr<float[]> xg, dxg;
  if (n_valid < T) {
    if (!bf) xg = std::make_unique_for_overwrite<float[]>(size_t(tc * C));
    if (dx) dxg = std::make_unique_for_overwrite<float[]>(size_t(tc * C));
  }
  const size_t rows = static_cast<size_t>(tc);
  std::vector<float> m(rows), s(rows), tlogit(rows), lse(rows);
  std::vector<int32_t> tg(rows);
  double loss = 0;

  for (int64_t c0 = 0; c0 < n_valid; c0 += tc) {
    const int64_t n = std::min(tc, n_valid - c0);
    const int64_t* idx = valid.data() + c0;
    const bool contiguous = idx[n - 1] - idx[0] == n - 1;  // no ignored token inside
    for (int64_t i = 0; i < n; ++i) tg[size_t(i)] = targets[idx[i]];
    const float* xc32 = x + idx[0] * C;
    if (bf) {
      k.gather_rows_bf16(x16.get(), x, idx, n, C);
    } else if (!contiguous) {
#pragma omp parallel for schedule(static) if (n * C >= (1 << 15))
      for (int64_t i = 0; i < n; ++i)
        std::copy(x + idx[i] * C, x + (idx[i] + 1) * C, xg.get() + i * C);
      xc32 = xg.get();
    }
    const MatmulOperand xc{xc32, bf ? x16.get() : nullptr};
    // Pass 1: logsumexp (and, with one vocabulary chunk, keep the logits for pass 2).
    for (int64_t v0 = 0; v0 < V; v0 += vc) {
      const int64_t nv = std::min(vc, V - v0);
      matmul_ex(logits.get(), xc, false, w_rows(v0), true, n, nv, C, false, p);
      k.fold_chunk_stats(m.data(), s.data(), tlogit.data(), logits.get(), tg.data(), n, v0, nv,
                         v0 == 0);
    }
    for (size_t i = 0; i < size_t(n); ++i) {
      lse[i] = m[i] + std::log(s[i]);
      loss += double(lse[i] - tlogit[i]);
    }
    if (!dx) continue;
    // Pass 2: gradients, a vocabulary chunk at a time.
    float* dxc = contiguous ? dx + idx[0] * C : dxg.get();
    for (int64_t v0 = 0; v0 < V; v0 += vc) {
      const int64_t nv = std::min(vc, V - v0);
      if (!one_vocab_chunk)
        matmul_ex(logits.get(), xc, false, w_rows(v0), true, n, nv, C, false, p);
      k.logits_to_grad(logits.get(), g16.get(), lse.data(), tg.data(), n, v0, nv, grad_scale);
      const MatmulOperand g = bf ? MatmulOperand{nullptr, g16.get()}
                                 : MatmulOperand{logits.get(), nullptr};
      matmul_ex(dxc, g, false, w_rows(v0), false, n, C, nv, v0 > 0, p);
      if (dw) matmul_ex(dw + v0 * C, g, true, xc, false, nv, C, n, true, p);
    }
    if (!contiguous) {
#pragma omp parallel for schedule(static) if (n * C >= (1 << 15))
      for (int64_t i = 0; i < n; ++i)
        std::copy(dxg.get() + i * C, dxg.get() + (i + 1) * C, dx + idx[i] * C);
    }
  }
  return loss;
}

}  // namespace lt
