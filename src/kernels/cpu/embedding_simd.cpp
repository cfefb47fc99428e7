// Embedding backward, compiled once per ISA level (core/isa_target.h): each thread owns the
// table rows whose id is its thread number modulo the thread count, scans all tokens in
// order and adds the gradient rows of its own ids (vectorized over C). Bitwise the same for
// any thread count (embedding.cpp).
#include "kernels/cpu/embedding.h"

#include <omp.h>

#include "core/isa_target.h"

namespace lt::LT_ISA_NS {

namespace {

void backward(float* dtable, const int32_t* tokens, const float* dout, int64_t T, int64_t C) {
#pragma omp parallel if (T * C >= (1 << 15))
  {
    const int nth = omp_get_num_threads(), tid = omp_get_thread_num();
    for (int64_t t = 0; t < T; ++t) {
      const int64_t v = tokens[t];
      if (v % nth != tid) continue;
      float* row = dtable + v * C;
      const float* g = dout + t * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) row[c] += g[c];
    }
  }
}

}  // namespace

extern const EmbeddingKernels kEmbeddingKernels{backward};

}  // namespace lt::LT_ISA_NS

#include "core/isa_target_end.h"
