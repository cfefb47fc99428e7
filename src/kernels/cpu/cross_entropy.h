// The LM head fused with cross-entropy, chunked so that the logits of the whole batch
// never exist: tokens are taken a chunk at a time and the vocabulary a sub-chunk of at most
// opt.vocab_chunk rows at a time, at the fixed offsets 0, vc, 2vc, ... (an online
// logsumexp across the sub-chunks, then a second pass that turns each sub-chunk's logits
// into the gradient: kept from the first pass when a token chunk's logits for the whole
// vocabulary fit, else recomputed). At most opt.max_logit_bytes of logits are live at once.
//
//   x: [T, C] final hidden states; w: [V, C] head weight (HF lm_head layout)
//   targets: [T], -100 = ignored position
//   returns sum over non-ignored t of (logsumexp_v logits[t,v] - logits[t, targets[t]])
//   if dx != nullptr: the gradient of grad_scale * (that sum):
//     dx [T, C] overwrites; dw [V, C] accumulates (+=)
//   throws lt::Error for a target outside [0, V) other than -100.
// With Precision::BF16 and w_bf16 == nullptr, w is rounded once per call into a V*C bf16
// scratch; pass the weight's bf16 copy to avoid it (w may then be null: only w_bf16 is read).
//
// Summation order (fixed by T, V, the precision and the options, never by the caller's
// memory layout): the loss sums tokens in order in double; dx[t] sums the vocabulary
// sub-chunks in ascending order (each one oneDNN matmul over its rows); dw[v] sums the
// token chunks in ascending order; each row's logsumexp folds the sub-chunks in ascending
// order. StreamedHeadCrossEntropy below walks the same chunks in the same order, so a head
// streamed in row chunks that are multiples of the sub-chunk gives the same bits.
// Since the sub-chunk became at most 16384 rows (it was the whole vocabulary when 128
// tokens of logits for all of it fit in max_logit_bytes, else as many rows as fit for 128
// tokens), dx sums more, shorter pieces, the logsumexp rescales more often, and when the
// logits are recomputed the token chunks are longer (as many tokens as one sub-chunk's
// logits allow, not 128), so dw sums fewer pieces: the results move within the fp32
// bounds of tests/kernels/cross_entropy_test.cpp (derived there for any chunking).
// CrossEntropyOptions{.vocab_chunk = INT64_MAX} gives the old partition (exactly so at the
// default max_logit_bytes).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/head_cross_entropy_stream.h"

namespace lt {

constexpr int32_t kIgnoreIndex = -100;

// Most vocabulary rows per logits sub-chunk (the default of CrossEntropyOptions::vocab_chunk).
// A head streamed in row chunks (exec/streaming_executor.h) needs chunks that are
// multiples of it; plan/plan.h's kHeadChunkQuantum is one. Why this many: every sub-chunk
// is three or four oneDNN calls per token chunk, and on a shared 2-vCPU host each 2-thread
// call can stall; at T 2048, C 768, V 32000, bf16 and two threads under load, 2048-row
// sub-chunks took 2.3x the time of one whole-vocabulary chunk, 8192 rows 1.3x, 16384 rows
// 1.2x (f32: 1.6x, 1.1x, 1.0x; one thread, 2048 rows: within 3%).
constexpr int64_t kCrossEntropyVocabChunk = 16384;

struct CrossEntropyOptions {
  int64_t max_logit_bytes = 32ll << 20;
  int64_t vocab_chunk = kCrossEntropyVocabChunk;  // >= 1
};

// workspace: head_cross_entropy_workspace_bytes(T, C, V, p, false, opt) bytes, 64-byte
// aligned, for the logits, the gathers and the per-token state; null: taken here.
double head_cross_entropy(float* dx, float* dw, const float* x, const float* w,
                          const bf16* w_bf16, const int32_t* targets, int64_t T, int64_t C,
                          int64_t V, float grad_scale, Precision p,
                          const CrossEntropyOptions& opt = {}, void* workspace = nullptr);

// The scratch head_cross_entropy (streamed = false) or StreamedHeadCrossEntropy
// (streamed = true) works in, in bytes: the logits of one (token chunk, sub-chunk) pair,
// or under keep_logits a token chunk's logits for the whole vocabulary (the whole call
// only), their bf16 gradient and the chunk's bf16 x rows under BF16, the gathered x and dx
// rows, four floats, a target and an index per token. The worst case over the labels.
size_t head_cross_entropy_workspace_bytes(int64_t T, int64_t C, int64_t V, Precision p, bool streamed,
                                          const CrossEntropyOptions& opt = {});

// The chunk sizes head_cross_entropy uses: token_chunk * vocab_chunk logits, each 4 bytes
// (fp32) plus, under BF16, 2 bytes (its bf16 gradient), within max_logit_bytes;
// vocab_chunk = min(V, opt.vocab_chunk) unless max_logit_bytes holds fewer rows for
// min(T, 128) tokens. keep_logits: min(T, 128) tokens of fp32 logits for the whole
// vocabulary (and under BF16 one sub-chunk's bf16 gradient) fit, so the fused call keeps
// a token chunk's logits (token_chunk * V of them) for its second pass instead of
// recomputing them (3 matmuls, not 4), in as many tokens as fit; else token_chunk is as
// many tokens as one sub-chunk's logits allow.
// Throws lt::Error if max_logit_bytes cannot hold one logit or vocab_chunk < 1.
struct CrossEntropyChunks {
  int64_t token_chunk = 0, vocab_chunk = 0;
  bool keep_logits = false;
};
CrossEntropyChunks cross_entropy_chunks(int64_t T, int64_t V, const CrossEntropyOptions& opt,
                                        Precision p = Precision::F32);

// head_cross_entropy for a head weight whose rows arrive in chunks (the streaming
// executor's HEAD window, exec/streaming_executor.h): pass 1, forward(), folds each chunk
// of rows into every token's online logsumexp; once every row has been folded, loss()
// returns the sum head_cross_entropy returns; pass 2, backward(), takes the chunks again
// in ascending order and writes dx (overwritten by the chunk at v0 = 0, += after) and
// adds the chunk's weight gradient into dw_rows ([nv, C], +=). Chunks start at multiples
// of vocab_chunk() and, but for the last, are multiples of it in length; forward() sees
// the vocabulary in ascending order, once. The rows are fp32 (w_rows) and/or bf16
// (w_rows_bf16) as head_cross_entropy takes w; under BF16 without bf16 rows they are
// rounded per call. Same inputs and options: loss, dx and dw are bitwise
// head_cross_entropy's, whatever the chunk length (the same token chunks and vocabulary
// sub-chunks in the same order; pass 2 recomputes the logits with the same matmul call
// the first pass made). x and targets are read until the object is destroyed. Scratch: the
// logits of one (token chunk, sub-chunk) pair, four floats per token, and the gathers
// (head_cross_entropy_workspace_bytes, streamed).
class StreamedHeadCrossEntropy final : public HeadCrossEntropyStream {
 public:
  // workspace: head_cross_entropy_workspace_bytes(T, C, V, p, true, opt) bytes, 64-byte
  // aligned, read and written until the object is destroyed; null: taken here.
  StreamedHeadCrossEntropy(const float* x, const int32_t* targets, int64_t T, int64_t C, int64_t V,
                           float grad_scale, Precision p, const CrossEntropyOptions& opt = {},
                           void* workspace = nullptr);
  ~StreamedHeadCrossEntropy() override;
  StreamedHeadCrossEntropy(const StreamedHeadCrossEntropy&) = delete;
  StreamedHeadCrossEntropy& operator=(const StreamedHeadCrossEntropy&) = delete;

  int64_t vocab_chunk() const;
  void forward(const float* w_rows, const bf16* w_rows_bf16, int64_t v0, int64_t nv) override;
  double loss() override;
  void backward(float* dx, float* dw_rows, const float* w_rows, const bf16* w_rows_bf16, int64_t v0,
                int64_t nv) override;

  class Engine;  // the chunk steps, shared with head_cross_entropy (cross_entropy.cpp)

 private:
  std::unique_ptr<Engine> e_;
  int64_t folded_ = 0;   // rows forward() has seen
  int64_t next_back_ = 0;  // the row backward() expects next
  bool loss_done_ = false;
  double loss_ = 0;
};

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
