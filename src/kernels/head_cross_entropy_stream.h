// The head's cross-entropy over an lm_head whose rows arrive in chunks, as every backend
// runs it (the kernel table's head_cross_entropy_stream makes one; the CPU's is
// kernels/cpu/cross_entropy.h's StreamedHeadCrossEntropy, which states the contract and
// the summation order in full). Pass 1: forward() folds each chunk of rows, in ascending
// order, into every token's online logsumexp; loss() once every row is folded. Pass 2:
// backward() takes the chunks again in ascending order, writes dx (overwritten by the
// chunk at v0 = 0, += after) and adds the chunk's weight gradient into dw_rows ([nv, C]).
// The rows are fp32 (w_rows) and/or bf16 (w_rows_bf16), all pointers in the backend's
// compute memory.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace lt {

class HeadCrossEntropyStream {
 public:
  virtual ~HeadCrossEntropyStream() = default;
  virtual void forward(const float* w_rows, const bf16* w_rows_bf16, int64_t v0, int64_t nv) = 0;
  virtual double loss() = 0;
  virtual void backward(float* dx, float* dw_rows, const float* w_rows, const bf16* w_rows_bf16, int64_t v0,
                        int64_t nv) = 0;
};

}  // namespace lt
