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
#pragma once

#include <cstdint>

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

}  // namespace lt
