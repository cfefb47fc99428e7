// The Gated DeltaNet layer one token at a time, for generation: the recurrent form of
// layers/linear_attention_mixer.h's chunked forward (transformers'
// torch_recurrent_gated_delta_rule and causal_conv1d_update). Per layer it carries the
// convolution's last K-1 inputs and the recurrent state S [Hv, dk, dv]:
//   window = [the K-1 previous qkv rows ; qkv_t],  c = silu(sum_j w[:, j] window[j])
//   q = l2norm(c_q) / sqrt(dk), k = l2norm(c_k), v = c_v  (each value head reads key head h / (Hv/Hk))
//   S = exp(g) S;  S += k (beta (v - S^T k))^T;  o = S^T q
// then the gated norm and out_proj as in training. The chunked and the recurrent forms
// are the same math in a different summation order; the state update here runs in double.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/kernel_table.h"
#include "model/config.h"
#include "model/parameters.h"

namespace lt {

class LinearAttentionDecoder {
 public:
  explicit LinearAttentionDecoder(const ModelConfig& c);
  void reset();  // a new sequence: zero conv history and state

  // out [C] = the mixer's output for one token whose normed input is h [C]. wb: bf16
  // copies of the projection matrices (read under Precision::BF16).
  void step(float* out, const float* h, const BlockTensors& w, const BlockTensorsBf16& wb, Precision precision);

 private:
  // The host's kernels (the state and scratch are host memory); the recurrence itself is
  // this class's own loop in double.
  const KernelTable* kernels_ = &cpu_kernel_table();
  LinearAttentionShape s_;
  int64_t C_;
  float eps_;
  std::vector<float> history_;  // [K-1, conv_dim], oldest first
  // [Hv, dk, dv], in double: the recurrence sums over the whole sequence, and the decode's
  // logits should not drift from the chunked training forward's as the sequence grows.
  std::vector<double> state_;
  std::vector<float> qkv_, conv_, z_, b_, a_, o_, y_, rstd_;  // per-token scratch
};

}  // namespace lt
