// Embedding, fast path. Forward copies rows in parallel. Backward (embedding_simd.cpp, per
// ISA level) gives each table row to one thread (by id modulo the thread count); every
// thread scans all tokens in order and adds only its own rows. So each row's sum runs in
// token order whatever the thread count: bitwise deterministic, no atomics, no per-thread
// copies of the table.
#include "kernels/cpu/embedding.h"

#include <cstring>
#include <string>

#include "core/error.h"

namespace lt {

namespace {

void check_tokens(const int32_t* tokens, int64_t T, int64_t V, const char* where) {
  for (int64_t t = 0; t < T; ++t)
    if (tokens[t] < 0 || tokens[t] >= V)
      throw Error("token id " + std::to_string(tokens[t]) + " at position " + std::to_string(t) +
                      " is outside the vocabulary [0, " + std::to_string(V) + ")",
                  where, "check that the tokenizer and the data match the model's vocab_size");
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* table, int64_t T, int64_t V,
                       int64_t C) {
  check_tokens(tokens, T, V, "embedding_forward");
#pragma omp parallel for schedule(static) if (T * C >= (1 << 15))
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(out + t * C, table + int64_t(tokens[t]) * C, size_t(C) * sizeof(float));
}

void embedding_backward(float* dtable, const int32_t* tokens, const float* dout, int64_t T,
                        int64_t V, int64_t C) {
  check_tokens(tokens, T, V, "embedding_backward");
  LT_ISA_PICK(kEmbeddingKernels).backward(dtable, tokens, dout, T, C);
}

}  // namespace lt
