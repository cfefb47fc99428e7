// Causal GQA attention: the public entry points pick the kernels of the ISA level in
// force (core/isa_dispatch.h); the kernels are in attention_{scalar,avx2,avx512}.cpp.
#include "kernels/cpu/attention.h"

namespace lt {

void attention_forward(float* o, float* lse, const float* q, const float* k, const float* v,
                       int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, float scale) {
  LT_ISA_PICK(kAttentionKernels).forward(o, lse, q, k, v, B, S, Hq, Hkv, D, scale);
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* o, const float* lse, int64_t B,
                        int64_t S, int64_t Hq, int64_t Hkv, int64_t D, float scale) {
  LT_ISA_PICK(kAttentionKernels)
      .backward(dq, dk, dv, dout, q, k, v, o, lse, B, S, Hq, Hkv, D, scale);
}

}  // namespace lt
