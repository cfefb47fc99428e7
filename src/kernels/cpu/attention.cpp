// Causal GQA attention: the public entry points pick the kernels of the ISA level in
// force (core/isa_dispatch.h); the kernels are in attention_{scalar,avx2,avx512}.cpp.
#include "kernels/cpu/attention.h"

#include "core/error.h"

namespace lt {

bool valid_doc_starts(const int32_t* doc_start, int64_t B, int64_t S) {
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* ds = doc_start + b * S;
    if (S > 0 && ds[0] != 0) return false;
    for (int64_t i = 1; i < S; ++i)
      if (ds[i] != ds[i - 1] && ds[i] != i) return false;
  }
  return true;
}

void attention_forward(float* o, float* lse, const float* q, const float* k, const float* v,
                       int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                       const int32_t* doc_start, int64_t window) {
  LT_ASSERT(!doc_start || valid_doc_starts(doc_start, B, S), "attention: doc_start is not a run of documents");
  LT_ASSERT(window >= 0, "attention: negative window");
  LT_ISA_PICK(kAttentionKernels).forward(o, lse, q, k, v, B, S, Hq, Hkv, D, scale, doc_start, window);
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* o, const float* lse, int64_t B,
                        int64_t S, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                        const int32_t* doc_start, int64_t window) {
  LT_ASSERT(!doc_start || valid_doc_starts(doc_start, B, S), "attention: doc_start is not a run of documents");
  LT_ASSERT(window >= 0, "attention: negative window");
  LT_ISA_PICK(kAttentionKernels)
      .backward(dq, dk, dv, dout, q, k, v, o, lse, B, S, Hq, Hkv, D, scale, doc_start, window);
}

}  // namespace lt
