// The elementwise and row-reduction loops of the fused head + cross-entropy
// (cross_entropy.cpp), one table per ISA level, compiled from cross_entropy_simd.cpp and
// picked at run time (core/isa_dispatch.h). The matmuls around them are oneDNN's.
// Each loop is threaded over the chunk's rows and vectorized along them; every row is
// one thread's, so results do not depend on the thread count.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/isa_dispatch.h"

namespace lt {

struct CrossEntropyKernels {
  // Folds one logits chunk [n, nv] (vocabulary entries v0 .. v0+nv) into each row's
  // running online logsumexp: max m[i] and sum s[i] of exp(l - m), rescaled when the max
  // grows (first: the chunk starts the rows). tlogit[i] gets the target's logit when the
  // target is in this chunk. Rows with an ignored target are skipped.
  void (*fold_chunk_stats)(float* m, float* s, float* tlogit, const float* logits,
                           const int32_t* tgt, int64_t n, int64_t v0, int64_t nv, bool first);
  // logits chunk -> grad_scale * (softmax - onehot) with the rows' lse; ignored rows become
  // 0. In place (g16 == nullptr) or, for a BF16 matmul, written as bf16 into g16 [n, nv]:
  // the backward matmuls need bf16 operands, and rounding here once saves them two
  // conversion passes. In place with round_in_place: the same bf16 values, as fp32 (the
  // operand of BF16 matmuls that widen to fp32, read there without a copy).
  void (*logits_to_grad)(float* logits, bf16* g16, const float* lse, const int32_t* tgt,
                         int64_t n, int64_t v0, int64_t nv, float grad_scale, bool round_in_place);
  // dst row i [C] = bf16 of x row rows[i], for i < n (gathers and rounds the chunk's x).
  void (*gather_rows_bf16)(bf16* dst, const float* x, const int64_t* rows, int64_t n, int64_t C);
};
LT_ISA_TABLE(CrossEntropyKernels, kCrossEntropyKernels)

}  // namespace lt
