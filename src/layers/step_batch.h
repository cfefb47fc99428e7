// What a training step makes of its batch before any layer runs, one piece of code for
// the in-memory step (model_step.h) and the streaming executor, so that the two read a
// batch the same way bit for bit:
//  - targets: Hugging Face's shift, position s of a row predicts labels[s+1] of the same
//    row (-100: no loss; the last position of each row predicts nothing);
//  - the gradient scale: 1/predicted tokens, or the caller's (gradient accumulation);
//  - documents: a packed row's document starts and each token's position in its document
//    (layers/decoder_block.h document_positions), which the blocks' context points at.
#pragma once

#include <cstdint>
#include <vector>

#include "layers/decoder_block.h"

namespace lt {

struct StepTargets {
  std::vector<int32_t> targets;  // [batch*seq]
  int64_t predicted = 0;         // targets that are not -100
  float grad_scale = 0;          // the factor on each token's loss gradient
};

// labels: [batch*seq]. grad_scale_override > 0 replaces 1/predicted. Throws lt::Error for
// a label outside [0, vocab) other than -100, naming its position.
StepTargets step_targets(const int32_t* labels, int64_t batch, int64_t seq, int64_t vocab,
                         float grad_scale_override);

// A step's documents, kept for the step (the blocks' context points into them).
class StepDocuments {
 public:
  // doc_start: [batch*seq] or null (every row one sequence). Points ctx at the copies, or
  // at none; throws lt::Error for a malformed doc_start.
  void bind(BlockContext& ctx, const int32_t* doc_start, int64_t batch, int64_t seq);

 private:
  std::vector<int32_t> doc_start_, positions_;
};

}  // namespace lt
