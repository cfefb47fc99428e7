// Token embedding lookup. table is [V, C]; out is [T, C].
//   forward overwrites out; throws lt::Error if a token id is outside [0, V).
//   backward accumulates (+=) into dtable, deterministically (rows are owned by
//   threads by token id, not scattered with atomics).
#pragma once

#include <cstdint>

#include "core/isa_dispatch.h"

namespace lt {

void embedding_forward(float* out, const int32_t* tokens, const float* table, int64_t T, int64_t V,
                       int64_t C);
void embedding_backward(float* dtable, const int32_t* tokens, const float* dout, int64_t T,
                        int64_t V, int64_t C);

// One table per ISA level, compiled from embedding_simd.cpp (the row adds of backward; the
// forward is a row copy). Token ids are checked by the caller.
struct EmbeddingKernels {
  void (*backward)(float* dtable, const int32_t* tokens, const float* dout, int64_t T, int64_t C);
};
LT_ISA_TABLE(EmbeddingKernels, kEmbeddingKernels)

namespace ref {
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* table, int64_t n_tok, int64_t C) {
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t c = 0; c < C; ++c) out[t * C + c] = table[tokens[t] * C + c];
}
template <typename T>
void embedding_backward(T* dtable, const int32_t* tokens, const T* dout, int64_t n_tok, int64_t C) {
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t c = 0; c < C; ++c) dtable[tokens[t] * C + c] += dout[t * C + c];
}
}  // namespace ref

}  // namespace lt
