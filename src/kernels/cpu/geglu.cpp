#include "kernels/cpu/geglu.h"

namespace lt {

void geglu_forward(float* h, const float* g, const float* u, int64_t n) {
  LT_ISA_PICK(kGegluKernels).forward(h, g, u, n);
}

void geglu_backward(float* dg, float* du, const float* dh, const float* g, const float* u,
                    int64_t n) {
  LT_ISA_PICK(kGegluKernels).backward(dg, du, dh, g, u, n);
}

}  // namespace lt
