#include "layers/step_batch.h"

#include <string>

#include "core/error.h"
#include "kernels/cpu/cross_entropy.h"

namespace lt {

StepTargets step_targets(const int32_t* labels, int64_t batch, int64_t seq, int64_t vocab,
                         float grad_scale_override) {
  StepTargets t;
  t.targets.assign(static_cast<size_t>(batch * seq), kIgnoreIndex);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s + 1 < seq; ++s) {
      const int32_t y = labels[b * seq + s + 1];
      if (y == kIgnoreIndex) continue;
      if (y < 0 || y >= vocab)
        throw Error("label " + std::to_string(y) + " at position " + std::to_string(b * seq + s + 1) +
                        " is outside the vocabulary [0, " + std::to_string(vocab) + ")",
                    "training batch", "labels must be token ids or -100");
      t.targets[b * seq + s] = y;
      ++t.predicted;
    }
  t.grad_scale = grad_scale_override > 0 ? grad_scale_override
                 : t.predicted > 0       ? 1.0f / static_cast<float>(t.predicted)
                                         : 0.0f;
  return t;
}

void StepDocuments::bind(BlockContext& ctx, const int32_t* doc_start, int64_t batch, int64_t seq) {
  if (!doc_start) {
    ctx.doc_start = ctx.positions = nullptr;
    return;
  }
  doc_start_.assign(doc_start, doc_start + batch * seq);
  positions_.resize(static_cast<size_t>(batch * seq));
  document_positions(positions_.data(), doc_start_.data(), batch, seq);
  ctx.doc_start = doc_start_.data();
  ctx.positions = positions_.data();
}

}  // namespace lt
