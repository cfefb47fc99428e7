// The fused LM head + cross-entropy (contract in cross_entropy.h).
//
// Per token chunk of n tokens, with the vocabulary in sub-chunks of vc rows:
//   pass 1 runs an online logsumexp over the sub-chunks (running max m and sum s, rescaled
//     by exp(m_old - m_new) when the max grows) and picks the target's logit;
//   pass 2 turns each sub-chunk's logits into dlogits = grad_scale * (softmax - onehot)
//     (0 on ignored rows), then dx_c (= on the first sub-chunk, += after) and dw[sub] +=.
//   When a token chunk's logits for the whole vocabulary fit (keep_logits), pass 2 reuses
//   pass 1's, each sub-chunk in its own block: 3 matmuls; else it recomputes them: 4.
// The streamed form (StreamedHeadCrossEntropy) runs pass 1 over every token chunk for one
// chunk of weight rows, then the next chunk of rows; pass 2 likewise. Every per-row and
// per-element sum sees the same terms in the same order as in the fused form, so the bits
// agree: the fold per row goes through the sub-chunks in ascending order either way, dx
// of a token chunk accumulates the sub-chunks in ascending order (in a gathered copy of
// the rows when the chunk has gaps: gathered back from dx before each chunk of rows, an
// exact copy), dw of a sub-chunk accumulates the token chunks in ascending order, and the
// loss is summed over the tokens in order once pass 1 is done.
// Only non-ignored tokens enter the chunks (gathered when the mask makes gaps), so masked
// prompt tokens cost no flops.
// The softmax math is fp32 (logits are fp32 whatever the matmul precision); per-row
// losses are summed in double, in token order. Under BF16 the gradient is written as bf16
// into its own buffer (the backward matmuls' operand), not in place, unless those matmuls
// widen to fp32: then as bf16 values in place.
// Work memory, all in one workspace the caller may give (head_cross_entropy_workspace_bytes;
// else taken per call): the logits (one sub-chunk's, or a token chunk's whole vocabulary
// under keep_logits) and under BF16 the bf16 gradient of one sub-chunk (together <=
// max_logit_bytes), four words per token, the chunk's x rows (bf16, or fp32 when
// gathered) and dx rows (when gathered), T positions and targets. Outside it: a V*C bf16
// copy of w when BF16 is asked for and w_bf16 is not given (one chunk's rows for the
// streamed form), or, where the BF16 matmuls widen to fp32, an fp32 one of at most two
// sub-chunks of rows (Engine::rows).
// The softmax loops are the ISA level's (cross_entropy_kernels.h, picked once per call).
#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "kernels/cpu/cross_entropy_kernels.h"

namespace lt {

namespace {

// A token chunk keeps its logits for pass 2 only when, with the whole vocabulary, it still
// holds this many tokens (or T, if smaller); otherwise the logits are recomputed, in token
// chunks as long as one vocabulary sub-chunk's logits allow (at least this many: 16384
// rows make 512 fp32 tokens at the default 32 MiB; 128-token chunks of 2048-row
// sub-chunks made thousands of small oneDNN calls, twice as slow at V = 151936). Recomputing
// costs a 4th matmul (+33% flops); small token chunks cost memory traffic instead,
// since each one re-reads w and reads and writes all of dw (~12 bytes per weight under
// BF16 against 6 n flops per weight for n tokens). At n = 128 that is ~64 flops per byte,
// still compute-bound here (~300 GFLOP/s against ~20 GB/s).
constexpr int64_t kMinTokenChunk = 128;

// The head's rows widened to fp32 once per call (Engine::rows), outside the planned
// workspace like the matmuls' own widening scratch: per thread, read only within the call
// that fills it, grown and never shrunk (a fresh one per call would fault in its pages
// every step).
thread_local AlignedBuffer<float> t_w_wide;

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
  // Per token of a chunk: its fp32 logits (the whole vocabulary's when kept, else one
  // sub-chunk's), plus under BF16 the bf16 gradient of one sub-chunk (see logits_to_grad).
  const int64_t grad_bytes = p == Precision::BF16 ? 2 : 0;
  if (opt.max_logit_bytes < 4 + grad_bytes)
    throw Error("max_logit_bytes " + std::to_string(opt.max_logit_bytes) +
                    " cannot hold one logit",
                "CrossEntropyOptions", "give at least 6 bytes (the default is 32 MiB)");
  if (opt.vocab_chunk < 1)
    throw Error("vocab_chunk " + std::to_string(opt.vocab_chunk) + " is not positive", "CrossEntropyOptions",
                "give at least 1 (the default is " + std::to_string(kCrossEntropyVocabChunk) + ")");
  CrossEntropyChunks ch;
  const int64_t sub = std::max<int64_t>(1, std::min(V, opt.vocab_chunk));
  const int64_t want_tokens = std::max<int64_t>(1, std::min(T, kMinTokenChunk));
  const int64_t kept_bytes_per_token = 4 * std::max<int64_t>(V, 1) + grad_bytes * sub;
  if (opt.max_logit_bytes / want_tokens >= kept_bytes_per_token) {  // whole vocabulary rows fit: kept for pass 2
    ch.keep_logits = true;
    ch.vocab_chunk = sub;
    ch.token_chunk = std::max<int64_t>(1, std::min(T, opt.max_logit_bytes / kept_bytes_per_token));
  } else {  // recomputed: sub-chunks of at most sub rows, as many tokens as their logits allow
    const int64_t logits = opt.max_logit_bytes / (4 + grad_bytes);
    ch.vocab_chunk = std::max<int64_t>(1, std::min(sub, logits / want_tokens));
    ch.token_chunk = std::max<int64_t>(1, std::min(T, logits / ch.vocab_chunk));
  }
  return ch;
}

namespace {

// Where the engine's scratch lies in one workspace, each piece 64-byte aligned, sized for
// the worst case of its shape (every token valid or not: the gathers are counted too), so
// that the size a caller plans does not depend on the labels.
struct ScratchLayout {
  size_t logits = 0, g16 = 0, x16 = 0, xg = 0, dxg = 0, m = 0, s = 0, tlogit = 0, lse = 0, tg = 0, valid = 0;
  size_t bytes = 0;
};
ScratchLayout scratch_layout(int64_t T, int64_t C, int64_t V, Precision p, const CrossEntropyChunks& ch, bool keep) {
  const bool bf = p == Precision::BF16;
  const size_t tc = size_t(ch.token_chunk), vc = size_t(ch.vocab_chunk), n = size_t(T), c = size_t(C);
  ScratchLayout l;
  size_t at = 0;
  auto take = [&](size_t& field, size_t bytes) {
    field = at;
    at += (bytes + 63) / 64 * 64;
  };
  take(l.logits, tc * (keep ? size_t(V) : vc) * sizeof(float));
  take(l.g16, bf ? tc * vc * sizeof(bf16) : 0);
  take(l.x16, bf ? tc * c * sizeof(bf16) : 0);
  take(l.xg, bf ? 0 : tc * c * sizeof(float));
  take(l.dxg, tc * c * sizeof(float));
  for (size_t* f : {&l.m, &l.s, &l.tlogit, &l.lse}) take(*f, n * sizeof(float));
  take(l.tg, n * sizeof(int32_t));
  take(l.valid, n * sizeof(int64_t));
  l.bytes = at;
  return l;
}

}  // namespace

size_t head_cross_entropy_workspace_bytes(int64_t T, int64_t C, int64_t V, Precision p, bool streamed,
                                          const CrossEntropyOptions& opt) {
  const CrossEntropyChunks ch = cross_entropy_chunks(T, V, opt, p);
  return scratch_layout(T, C, V, p, ch, !streamed && ch.keep_logits).bytes;
}

// The state and the per-chunk steps both forms share (the fused loop below and
// StreamedHeadCrossEntropy), so that they run the same calls in the same order.
class StreamedHeadCrossEntropy::Engine {
 public:
  // workspace: head_cross_entropy_workspace_bytes for the form (fused: the whole call),
  // 64-byte aligned; null: the engine takes its own.
  Engine(const float* x, const int32_t* targets, int64_t T, int64_t C, int64_t V, float grad_scale, Precision p,
         const CrossEntropyOptions& opt, bool fused, void* workspace)
      : x_(x), targets_(targets), T_(T), C_(C), V_(V), grad_scale_(grad_scale), p_(p), bf_(p == Precision::BF16),
        grad_in_place_(bf_ && bf16_gemm_widens(MatmulLayout::InputGrad) && bf16_gemm_widens(MatmulLayout::WeightGrad)),
        w_widened_once_(bf_ && bf16_gemm_widens(MatmulLayout::Forward) && bf16_gemm_widens(MatmulLayout::InputGrad)),
        k_(LT_ISA_PICK(kCrossEntropyKernels)) {
    LT_ASSERT(T >= 0 && C > 0 && V > 0, "head_cross_entropy sizes");
    check_targets(targets, T, V);
    ch_ = cross_entropy_chunks(T, V, opt, p);
    keep_ = fused && ch_.keep_logits;
    const ScratchLayout l = scratch_layout(T, C, V, p, ch_, keep_);
    auto* base = static_cast<std::byte*>(workspace);
    if (!base) {
      // Not AlignedBuffer: its zero fill would be a wasted pass over max_logit_bytes.
      own_ = std::make_unique_for_overwrite<std::byte[]>(l.bytes + 64);
      base = own_.get() + (64 - reinterpret_cast<uintptr_t>(own_.get()) % 64) % 64;
    }
    LT_ASSERT(reinterpret_cast<uintptr_t>(base) % 64 == 0, "head_cross_entropy: workspace not 64-byte aligned");
    logits_ = reinterpret_cast<float*>(base + l.logits);
    // The bf16 pieces under BF16 only, the fp32 gather under F32 only: the kernels read a
    // null g16 as "the gradient stays fp32 in the logits".
    g16_ = bf_ ? reinterpret_cast<bf16*>(base + l.g16) : nullptr;
    x16_ = bf_ ? reinterpret_cast<bf16*>(base + l.x16) : nullptr;
    xg_ = bf_ ? nullptr : reinterpret_cast<float*>(base + l.xg);
    dxg_ = reinterpret_cast<float*>(base + l.dxg);
    m_ = reinterpret_cast<float*>(base + l.m);
    s_ = reinterpret_cast<float*>(base + l.s);
    tlogit_ = reinterpret_cast<float*>(base + l.tlogit);
    lse_ = reinterpret_cast<float*>(base + l.lse);
    tg_ = reinterpret_cast<int32_t*>(base + l.tg);
    valid_ = reinterpret_cast<int64_t*>(base + l.valid);
    // Ignored positions (prompt tokens under SFT masking, padding) cost nothing: chunks are
    // made of the valid tokens only, gathered when they are not contiguous. Chunk sizes
    // still come from T, so work memory does not depend on the mask.
    for (int64_t t = 0; t < T; ++t)
      if (targets[t] != kIgnoreIndex) {
        tg_[n_valid_] = targets[t];
        valid_[n_valid_++] = t;
      }
  }

  int64_t n_valid() const { return n_valid_; }
  int64_t token_chunk() const { return ch_.token_chunk; }
  int64_t vocab_chunk() const { return ch_.vocab_chunk; }
  int64_t V() const { return V_; }
  int64_t C() const { return C_; }
  bool keep() const { return keep_; }

  // Token chunk starting at valid token c0: its rows of x as the matmuls read them.
  struct Tokens {
    int64_t c0 = 0, n = 0;
    const int64_t* idx = nullptr;
    bool contiguous = true;  // no ignored token inside
    MatmulOperand x;
  };
  Tokens tokens(int64_t c0) {
    Tokens tk;
    tk.c0 = c0;
    tk.n = std::min(ch_.token_chunk, n_valid() - c0);
    tk.idx = valid_ + c0;
    tk.contiguous = tk.idx[tk.n - 1] - tk.idx[0] == tk.n - 1;
    const float* xc32 = x_ + tk.idx[0] * C_;
    if (bf_) {
      k_.gather_rows_bf16(x16_, x_, tk.idx, tk.n, C_);
    } else if (!tk.contiguous) {
      copy_rows(xg_, x_, tk.idx, tk.n, /*gather=*/true);
      xc32 = xg_;
    }
    tk.x = MatmulOperand{xc32, bf_ ? x16_ : nullptr};
    return tk;
  }

  // Where sub-chunk v0's logits of a token chunk live: their own block under keep_logits.
  float* logits_block(int64_t v0) const { return logits_ + (keep_ ? (v0 / ch_.vocab_chunk) * ch_.token_chunk * ch_.vocab_chunk : 0); }

  // Pass 1 for one sub-chunk [v0, v0 + nv) with its weight rows w.
  void fold(const Tokens& tk, MatmulOperand w, int64_t v0, int64_t nv) {
    float* l = logits_block(v0);
    matmul_ex(l, tk.x, false, w, true, tk.n, nv, C_, false, p_);
    const size_t c0 = size_t(tk.c0);
    k_.fold_chunk_stats(m_ + c0, s_ + c0, tlogit_ + c0, l, tg_ + c0, tk.n, v0, nv,
                        v0 == 0);
  }

  // After pass 1 of a token chunk: its rows' logsumexp and losses, added in token order.
  void finish(const Tokens& tk, double& loss) {
    for (int64_t i = tk.c0; i < tk.c0 + tk.n; ++i) {
      lse_[i] = m_[i] + std::log(s_[i]);
      loss += double(lse_[i] - tlogit_[i]);
    }
  }

  // Where a token chunk's dx rows are summed: dx itself, or the gathered copy (refilled
  // from dx when the sum already has terms, so that it continues exactly).
  float* dx_rows(const Tokens& tk, float* dx, bool continuing) {
    if (tk.contiguous) return dx + tk.idx[0] * C_;
    if (continuing) copy_rows(dxg_, dx, tk.idx, tk.n, /*gather=*/true);
    return dxg_;
  }
  void scatter_dx(const Tokens& tk, float* dx) {
    if (!tk.contiguous) copy_rows(dx, dxg_, tk.idx, tk.n, /*gather=*/false);
  }

  // Pass 2 for one sub-chunk: dxc (= at v0 == 0, += after) and dw_sub [nv, C] +=.
  void grad(const Tokens& tk, MatmulOperand w, int64_t v0, int64_t nv, float* dxc, float* dw_sub) {
    float* l = logits_block(v0);
    if (!keep_) matmul_ex(l, tk.x, false, w, true, tk.n, nv, C_, false, p_);
    k_.logits_to_grad(l, grad_in_place_ ? nullptr : g16_, lse_ + tk.c0, tg_ + tk.c0, tk.n, v0, nv, grad_scale_,
                      grad_in_place_);
    const MatmulOperand g = grad_in_place_ ? MatmulOperand{l, nullptr, true}
                            : bf_          ? MatmulOperand{nullptr, g16_}
                                           : MatmulOperand{l, nullptr};
    matmul_ex(dxc, g, false, w, false, tk.n, C_, nv, v0 > 0, p_);
    if (dw_sub) matmul_ex(dw_sub, g, true, tk.x, false, nv, C_, tk.n, true, p_);
  }

  // dx rows of ignored positions are zero.
  void zero_ignored(float* dx) const {
    for (int64_t t = 0; t < T_; ++t)
      if (targets_[t] == kIgnoreIndex) std::fill(dx + t * C_, dx + (t + 1) * C_, 0.0f);
  }

  // w's rows as the matmuls read them: given bf16 rows, or rounded here under BF16; where
  // the matmuls that read them widen to fp32 and there are at most two sub-chunks of rows,
  // widened here once (every token chunk reads every row twice, and the widened GEMM would
  // copy them each time into a sub-chunk's scratch: this is at most one more of those).
  MatmulOperand rows(const float* w, const bf16* w16, int64_t nv) {
    if (w_widened_once_ && nv <= 2 * ch_.vocab_chunk) {
      const size_t n = size_t(nv * C_);
      if (t_w_wide.size() < n) t_w_wide.resize(n);
      if (w16) convert_to_f32(t_w_wide.data(), w16, DType::BF16, n);
      else round_to_bf16_values(t_w_wide.data(), w, n);
      return MatmulOperand{t_w_wide.data(), nullptr, true};
    }
    if (bf_ && !w16) {
      if (w_round_.size() < size_t(nv * C_)) w_round_.resize(size_t(nv * C_));
      convert_f32_to_bf16(w_round_.data(), w, size_t(nv * C_));
      w16 = w_round_.data();
    }
    return MatmulOperand{w, w16};
  }
  MatmulOperand offset(MatmulOperand w, int64_t rows) const {
    return MatmulOperand{w.f32 ? w.f32 + rows * C_ : nullptr, w.b16 ? w.b16 + rows * C_ : nullptr, w.bf16_exact};
  }

 private:
  void copy_rows(float* dst, const float* src, const int64_t* idx, int64_t n, bool gather) const {
    const int64_t C = C_;
#pragma omp parallel for schedule(static) if (n * C >= (1 << 15))
    for (int64_t i = 0; i < n; ++i) {
      if (gather) std::copy(src + idx[i] * C, src + (idx[i] + 1) * C, dst + i * C);
      else std::copy(src + i * C, src + (i + 1) * C, dst + idx[i] * C);
    }
  }

  const float* x_;
  const int32_t* targets_;
  int64_t T_, C_, V_;
  float grad_scale_;
  Precision p_;
  bool bf_;
  // Under BF16 where both backward matmuls widen to fp32: the gradient is rounded to bf16
  // values in the logits themselves, which they read without a copy (the bf16 one would be
  // widened twice). g16's workspace stays counted, so that plans do not depend on the path.
  bool grad_in_place_;
  bool w_widened_once_;  // under BF16 where x.W^T and g.W both widen: see rows()
  const CrossEntropyKernels& k_;
  CrossEntropyChunks ch_;
  bool keep_ = false;
  // Views into the workspace (scratch_layout): the valid tokens' indices and targets, each
  // row's running max, sum, target logit and logsumexp, the logits and gathers.
  std::unique_ptr<std::byte[]> own_;  // the workspace when the caller gives none
  int64_t n_valid_ = 0;
  int64_t* valid_ = nullptr;
  int32_t* tg_ = nullptr;
  float *m_ = nullptr, *s_ = nullptr, *tlogit_ = nullptr, *lse_ = nullptr;
  float *logits_ = nullptr, *xg_ = nullptr, *dxg_ = nullptr;
  bf16 *g16_ = nullptr, *x16_ = nullptr;
  // Under BF16 without the weight's bf16 rows only: its rows rounded here, outside the
  // planned workspace (the executor always gives bf16 rows).
  AlignedBuffer<bf16> w_round_;
};

double head_cross_entropy(float* dx, float* dw, const float* x, const float* w,
                          const bf16* w_bf16, const int32_t* targets, int64_t T, int64_t C,
                          int64_t V, float grad_scale, Precision p,
                          const CrossEntropyOptions& opt, void* workspace) {
  StreamedHeadCrossEntropy::Engine e(x, targets, T, C, V, grad_scale, p, opt, /*fused=*/true, workspace);
  if (T == 0) return 0.0;
  // w's bf16 copy: given, or made once here (not per chunk: every token chunk reads all
  // of w, and rounding it each time would cost as much as the matmul).
  const MatmulOperand wv = e.rows(w, w_bf16, V);
  if (dx) e.zero_ignored(dx);
  const int64_t vc = e.vocab_chunk();
  double loss = 0;
  for (int64_t c0 = 0; c0 < e.n_valid(); c0 += e.token_chunk()) {
    const auto tk = e.tokens(c0);
    for (int64_t v0 = 0; v0 < V; v0 += vc) e.fold(tk, e.offset(wv, v0), v0, std::min(vc, V - v0));
    e.finish(tk, loss);
    if (!dx) continue;
    float* dxc = e.dx_rows(tk, dx, /*continuing=*/false);
    for (int64_t v0 = 0; v0 < V; v0 += vc)
      e.grad(tk, e.offset(wv, v0), v0, std::min(vc, V - v0), dxc, dw ? dw + v0 * C : nullptr);
    e.scatter_dx(tk, dx);
  }
  return loss;
}

StreamedHeadCrossEntropy::StreamedHeadCrossEntropy(const float* x, const int32_t* targets, int64_t T, int64_t C,
                                                   int64_t V, float grad_scale, Precision p,
                                                   const CrossEntropyOptions& opt, void* workspace)
    : e_(std::make_unique<Engine>(x, targets, T, C, V, grad_scale, p, opt, /*fused=*/false, workspace)) {}

StreamedHeadCrossEntropy::~StreamedHeadCrossEntropy() = default;

int64_t StreamedHeadCrossEntropy::vocab_chunk() const { return e_->vocab_chunk(); }

namespace {

void check_chunk(int64_t expected_v0, int64_t v0, int64_t nv, int64_t vc, int64_t V, const char* pass) {
  LT_ASSERT(v0 == expected_v0, std::string(pass) + ": rows from " + std::to_string(v0) + ", expected " +
                                   std::to_string(expected_v0) + " (chunks go in ascending order, once)");
  LT_ASSERT(nv >= 1 && v0 + nv <= V, std::string(pass) + ": rows out of the vocabulary");
  LT_ASSERT(v0 % vc == 0 && (nv % vc == 0 || v0 + nv == V),
            std::string(pass) + ": chunk [" + std::to_string(v0) + ", " + std::to_string(v0 + nv) +
                ") is not made of whole vocabulary sub-chunks of " + std::to_string(vc));
}

}  // namespace

void StreamedHeadCrossEntropy::forward(const float* w_rows, const bf16* w_rows_bf16, int64_t v0, int64_t nv) {
  Engine& e = *e_;
  check_chunk(folded_, v0, nv, e.vocab_chunk(), e.V(), "StreamedHeadCrossEntropy::forward");
  folded_ = v0 + nv;
  const MatmulOperand w = e.rows(w_rows, w_rows_bf16, nv);
  const int64_t vc = e.vocab_chunk();
  for (int64_t c0 = 0; c0 < e.n_valid(); c0 += e.token_chunk()) {
    const auto tk = e.tokens(c0);
    for (int64_t s = 0; s < nv; s += vc) e.fold(tk, e.offset(w, s), v0 + s, std::min(vc, nv - s));
  }
}

double StreamedHeadCrossEntropy::loss() {
  Engine& e = *e_;
  LT_ASSERT(folded_ == e.V(), "StreamedHeadCrossEntropy::loss before every row was folded");
  if (!loss_done_) {
    for (int64_t c0 = 0; c0 < e.n_valid(); c0 += e.token_chunk()) {
      Engine::Tokens tk;
      tk.c0 = c0;
      tk.n = std::min(e.token_chunk(), e.n_valid() - c0);
      e.finish(tk, loss_);
    }
    loss_done_ = true;
  }
  return loss_;
}

void StreamedHeadCrossEntropy::backward(float* dx, float* dw_rows, const float* w_rows, const bf16* w_rows_bf16,
                                        int64_t v0, int64_t nv) {
  Engine& e = *e_;
  loss();  // the rows' logsumexps
  check_chunk(next_back_, v0, nv, e.vocab_chunk(), e.V(), "StreamedHeadCrossEntropy::backward");
  next_back_ = v0 + nv;
  if (v0 == 0) e.zero_ignored(dx);
  const MatmulOperand w = e.rows(w_rows, w_rows_bf16, nv);
  const int64_t vc = e.vocab_chunk();
  for (int64_t c0 = 0; c0 < e.n_valid(); c0 += e.token_chunk()) {
    const auto tk = e.tokens(c0);
    float* dxc = e.dx_rows(tk, dx, /*continuing=*/v0 > 0);
    for (int64_t s = 0; s < nv; s += vc)
      e.grad(tk, e.offset(w, s), v0 + s, std::min(vc, nv - s), dxc, dw_rows ? dw_rows + s * e.C() : nullptr);
    e.scatter_dx(tk, dx);
  }
}

}  // namespace lt
