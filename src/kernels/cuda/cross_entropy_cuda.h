// The LM head fused with cross-entropy on the GPU, chunked over the vocabulary so that only
// one sub-chunk's logits exist at a time (the contract of kernels/cpu/cross_entropy.h):
//
//   x: [T, C] final hidden states; w: [V, C] head weight (HF lm_head layout), both bf16
//   (bits) or both fp32 (GemmInput); targets: [T], -100 = ignored position
//   *loss = sum over non-ignored t of (logsumexp_v logits[t,v] - logits[t, targets[t]])
//   dx [T, C] (overwritten) and dw [V, C] (accumulated, +=): the gradient of
//   grad_scale * loss, when given (dx and dw both, or neither).
//
// Two passes over the vocabulary in sub-chunks of vocab_chunk rows at 0, vc, 2vc, ...:
// the first folds each sub-chunk's row maxima and exponential sums into a running
// logsumexp per token (and picks up the target's logit); the second recomputes each
// sub-chunk's logits, turns them into the logits' gradient (softmax - one-hot, times
// grad_scale; rounded to bf16 under bf16 inputs, as the CPU's bf16 path rounds it), and
// adds its products into dx and dw. Every sum has a fixed order (blocks reduce by a fixed
// tree; dx sums the sub-chunks in ascending order; the loss adds tokens by a fixed tree in
// float64), so the bits repeat run to run.
// Target ids must lie in [0, V) or be -100: the caller checks them on the host, where they
// come from; another id counts as ignored here.
// Device pointers; stream is a cudaStream_t (null: the default stream).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/matmul_cuda.h"

namespace lt::cuda {

inline constexpr int32_t kIgnoreIndexCuda = -100;

struct HeadCrossEntropyArgs {
  const void* x = nullptr;
  const void* w = nullptr;
  const int32_t* targets = nullptr;
  int64_t T = 0, C = 0, V = 0;
  GemmInput input = GemmInput::BF16;
  float grad_scale = 1.0f;
  double* loss = nullptr;  // one device double, overwritten
  float* dx = nullptr;     // or null: the loss alone
  float* dw = nullptr;
  int64_t vocab_chunk = 16384;
};

size_t head_cross_entropy_workspace_bytes(int64_t T, int64_t V, int64_t vocab_chunk, GemmInput input);
void head_cross_entropy(Gemm& gemm, const HeadCrossEntropyArgs& args, void* workspace, void* stream = nullptr);

// head_cross_entropy's two passes a vocabulary sub-chunk at a time, for a head whose rows
// arrive in pieces (the kernel table's streamed head): fold() each sub-chunk in ascending
// order, finish(), then backward() each sub-chunk in ascending order. head_cross_entropy
// makes these calls over its whole w, so the same sub-chunks give the same bits. x,
// targets and the workspace (head_cross_entropy_workspace_bytes) are read until the last
// call; every call is queued on the stream.
class HeadCrossEntropyPasses {
 public:
  HeadCrossEntropyPasses(Gemm& gemm, const void* x, const int32_t* targets, int64_t T, int64_t C, int64_t V,
                         GemmInput input, float grad_scale, int64_t vocab_chunk, void* workspace, void* stream);
  // rows: w[v0 : v0 + n] ([n, C], the input's type), n <= vocab_chunk.
  void fold(const void* rows, int64_t v0, int64_t n);
  // The loss into one device double (overwritten), once every row is folded.
  void finish(double* loss);
  // dx [T, C]: overwritten at v0 == 0, += after; dw_rows = dw[v0 : v0 + n]: +=.
  void backward(const void* rows, int64_t v0, int64_t n, float* dx, float* dw_rows);

 private:
  void logits_of(const void* rows, int64_t n);
  Gemm& gemm_;
  const void* x_;
  const int32_t* targets_;
  int64_t T_, C_, V_;
  GemmInput input_;
  float grad_scale_;
  void* stream_;
  float* logits_;
  void* grad_;  // bf16 under bf16 inputs; fp32 inputs reuse the logits
  float *max_, *sum_, *target_logit_, *lse_;
};

}  // namespace lt::cuda
